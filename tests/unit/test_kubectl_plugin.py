"""`kubectl autoscaler`: how kubectl's command line maps onto the `autoscaler` one.

The kubeconfigs are real files read by the `kubernetes` package; no server is contacted.
"""

from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from autoscaler.cli.kubectl_plugin import PluginUsageError, autoscaler_argv, main
from autoscaler.clients.kubeconfig import KubeconfigError, kubeconfig_paths
from tests.support.jobs import UPSTREAM

ECHO = str(UPSTREAM / "echo.yaml")
IMAGENET = str(UPSTREAM / "imagenet.yaml")


def kubeconfig(current: str, contexts: dict[str, str | None]) -> dict[str, object]:
    """A kubeconfig whose contexts (name -> namespace) all use one cluster and user."""
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [
            {
                "name": name,
                "context": {"cluster": "c", "user": "u", **({"namespace": ns} if ns else {})},
            }
            for name, ns in contexts.items()
        ],
        "current-context": current,
    }


@pytest.fixture
def files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """{home}: ~/.kube/config (current context "team" in team-ns, "bare" without namespace);
    {extra}: another file (current context "ops" in ops-ns); {missing}: no file at all."""
    home = tmp_path / "home"
    (home / ".kube").mkdir(parents=True)
    (home / ".kube" / "config").write_text(
        yaml.safe_dump(kubeconfig("team", {"team": "team-ns", "bare": None}))
    )
    extra = tmp_path / "extra.kubeconfig"
    extra.write_text(yaml.safe_dump(kubeconfig("ops", {"ops": "ops-ns"})))
    monkeypatch.setenv("HOME", str(home))
    return {
        "home": str(home / ".kube" / "config"),
        "extra": str(extra),
        "missing": str(tmp_path / "nowhere"),
    }


@dataclass(frozen=True)
class Case:
    id: str
    argv: list[str]
    expected: list[str]
    kubeconfig_env: str | None = None  # $KUBECONFIG, with {home}/{extra}/{missing} filled in
    env: dict[str, str] = field(default_factory=dict)


CASES = [
    Case(
        "explain-namespace-slash-name",
        ["explain", "ns1/job"],
        ["explain", "ns1/job", "--kubeconfig", "~/.kube/config", "-o", "text"],
    ),
    Case(
        "explain-name-with-namespace-flag",
        ["explain", "job", "-n", "ns2"],
        ["explain", "ns2/job", "--kubeconfig", "~/.kube/config", "-o", "text"],
    ),
    Case(
        "explain-name-takes-the-current-contexts-namespace",
        ["explain", "job"],
        ["explain", "team-ns/job", "--kubeconfig", "~/.kube/config", "-o", "text"],
    ),
    Case(
        "explain-context-without-namespace-means-default",
        ["explain", "job", "--context", "bare"],
        [
            "explain",
            "default/job",
            "--kubeconfig",
            "~/.kube/config",
            "-o",
            "text",
            "--context",
            "bare",
        ],
    ),
    Case(
        "explain-context-from-the-second-file-of-KUBECONFIG",
        ["explain", "job", "--context", "ops", "-o", "json"],
        [
            "explain",
            "ops-ns/job",
            "--kubeconfig",
            "{home}:{extra}",
            "-o",
            "json",
            "--context",
            "ops",
        ],
        kubeconfig_env="{home}:{extra}",
    ),
    Case(
        "kubeconfig-flag-wins-over-KUBECONFIG",
        ["explain", "job", "--kubeconfig", "{extra}"],
        ["explain", "ops-ns/job", "--kubeconfig", "{extra}", "-o", "text"],
        kubeconfig_env="{home}",
    ),
    Case(
        "global-flags-before-the-command",
        ["--context", "bare", "-n", "x", "explain", "job", "-o", "yaml", "--config", "e.yaml"],
        [
            "explain",
            "x/job",
            "--kubeconfig",
            "~/.kube/config",
            "-o",
            "yaml",
            "--context",
            "bare",
            "--config",
            "e.yaml",
        ],
    ),
    Case(
        "namespace-flag-equal-to-the-one-in-the-name",
        ["explain", "ns1/job", "--namespace", "ns1"],
        ["explain", "ns1/job", "--kubeconfig", "~/.kube/config", "-o", "text"],
    ),
    Case(
        "render-several-files-as-json-in-a-namespace",
        ["render", "-f", ECHO, "--filename", IMAGENET, "-o", "json", "-n", "team"],
        ["render", "-f", ECHO, "-f", IMAGENET, "-o", "json", "--namespace", "team"],
    ),
    Case(
        "render-takes-the-current-contexts-namespace",
        ["render", "-f", ECHO],
        ["render", "-f", ECHO, "-o", "yaml", "--namespace", "team-ns"],
    ),
    Case(
        "render-without-any-kubeconfig-uses-default",
        ["render", "-f", ECHO],
        ["render", "-f", ECHO, "-o", "yaml", "--namespace", "default"],
        kubeconfig_env="{missing}",
    ),
    Case(
        "validate-takes-the-namespace-ignores-the-other-cluster-flags",
        ["validate", "-f", ECHO, "-n", "x", "--context", "nope"],
        ["validate", "-f", ECHO, "--namespace", "x"],
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_kubectl_command_line_maps_onto_autoscaler(case: Case, files: dict[str, str]) -> None:
    environ = {} if case.kubeconfig_env is None else {"KUBECONFIG": case.kubeconfig_env}
    filled = {name: value.format(**files) for name, value in environ.items()}
    argv = [arg.format(**files) for arg in case.argv]
    assert autoscaler_argv(argv, filled) == [arg.format(**files) for arg in case.expected]


@dataclass(frozen=True)
class Refused:
    id: str
    argv: list[str]
    error: type[Exception]
    message: str


REFUSED = [
    Refused(
        "namespace-twice",
        ["explain", "ns1/job", "-n", "ns2"],
        PluginUsageError,
        "'ns1/job' names namespace 'ns1' but --namespace is 'ns2'",
    ),
    Refused(
        "two-slashes", ["explain", "a/b/c"], PluginUsageError, "expected NAME or NAMESPACE/NAME"
    ),
    Refused("empty-name", ["explain", "ns/"], PluginUsageError, "expected NAME or NAMESPACE/NAME"),
    Refused(
        "unknown-context",
        ["explain", "job", "--context", "missing"],
        KubeconfigError,
        'context "missing" does not exist',
    ),
    Refused(
        "unknown-context-for-render",
        ["render", "-f", ECHO, "--context", "missing"],
        KubeconfigError,
        'context "missing" does not exist',
    ),
]


@pytest.mark.parametrize("case", REFUSED, ids=[case.id for case in REFUSED])
def test_contradictions_are_refused(case: Refused, files: dict[str, str]) -> None:
    with pytest.raises(case.error) as raised:
        autoscaler_argv(case.argv, {})
    assert case.message in str(raised.value)


@pytest.mark.parametrize(
    ("argv", "usage"),
    [
        ([], "the following arguments are required: COMMAND"),
        (["explain", "job", "-o", "wide"], "invalid choice: 'wide'"),
        (["render"], "the following arguments are required: -f/--filename"),
    ],
)
def test_usage_errors_exit_2_with_kubectl_autoscaler_in_the_usage(
    argv: list[str], usage: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        autoscaler_argv(argv, {})
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: kubectl autoscaler")
    assert usage in err


@pytest.mark.parametrize(
    ("flag", "environ", "expected"),
    [
        ("a.kubeconfig", {"KUBECONFIG": "b:c"}, "a.kubeconfig"),
        (None, {"KUBECONFIG": "b:c"}, "b:c"),
        (None, {"KUBECONFIG": ""}, "~/.kube/config"),
        (None, {}, "~/.kube/config"),
    ],
)
def test_kubeconfig_lookup_is_kubectls(
    flag: str | None, environ: dict[str, str], expected: str
) -> None:
    assert kubeconfig_paths(flag, environ) == expected


def test_main_runs_the_autoscaler_command(
    files: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["validate", "-f", ECHO]) == 0
    assert capsys.readouterr().out == "pytorchjob/elastic-example-echo is valid\n"


def test_main_prints_a_kubeconfig_error_as_one_line(
    files: dict[str, str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KUBECONFIG", raising=False)
    assert main(["explain", "job", "--context", "missing"]) == 2
    assert capsys.readouterr().err == 'error: context "missing" does not exist\n'
