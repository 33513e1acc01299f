"""`autoscaler operator` takes every flag of upstream's manager with its name and default: the
flags as upstream's own binary lists them (`training-operator -help` of
kubeflow/training-operator v1.9.4, in tests/fixtures/upstream)."""

import argparse
import logging
import re
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from autoscaler.cli import parser
from autoscaler.cli.common import bind_address, elector, go_bool, serve_endpoints
from autoscaler.cli.operator_command import LEADER_ELECTION_ID, operator_config, operator_kube
from autoscaler.cli.pod_settings import UPSTREAM_TEMPLATE_FILE, pod_settings
from autoscaler.cli.upstream_flags import NOT_HONOURED, warn_not_honoured
from autoscaler.clients.kube import Kube, api_client
from autoscaler.controller.builders import InitContainers
from autoscaler.observability.metrics import operator_metrics
from tests.support.jobs import UPSTREAM

HELP = UPSTREAM / "training-operator-v1.9.4" / "help.txt"
FLAG = re.compile(r"^  -(?P<name>[\w-]+)(?: (?P<type>\w+))?$")
DEFAULT = re.compile(r'\(default "?(?P<value>.*?)"?\)$')


@dataclass(frozen=True)
class UpstreamFlag:
    name: str
    type: str  # Go's: "string", "int", "bool" (no type word), "value" (a flag.Var)
    default: str | None  # None: Go's zero value, which `-help` does not print

    def __str__(self) -> str:
        return f"--{self.name}"


def upstream_flags() -> list[UpstreamFlag]:
    lines, flags = HELP.read_text().splitlines()[1:], []
    for i, line in enumerate(lines):
        if match := FLAG.match(line):
            usage = DEFAULT.search(lines[i + 1])
            default = usage["value"] if usage else None
            flags.append(UpstreamFlag(match["name"], match["type"] or "bool", default))
    return flags


FLAGS = upstream_flags()


def operator_args(*argv: str) -> argparse.Namespace:
    args = parser().parse_args(["operator", *argv])
    del args.not_honoured  # which flags were given: differs by design
    del args.identity  # random for each parser (not upstream's flag)
    return args


def test_the_fixture_lists_upstreams_flags() -> None:
    assert len(FLAGS) == 23
    assert {"metrics-bind-address", "health-probe-bind-address", "enable-scheme"} <= {
        f.name for f in FLAGS
    }


@pytest.mark.parametrize("flag", FLAGS, ids=str)
def test_every_flag_is_taken_with_upstreams_default(
    flag: UpstreamFlag, monkeypatch: pytest.MonkeyPatch
) -> None:
    for variable in ("KUBECONFIG", "KUBEFLOW_NAMESPACE", "POD_NAMESPACE"):
        monkeypatch.delenv(variable, raising=False)
    defaults = operator_args()
    if flag.default is not None:  # giving upstream's default changes nothing
        assert operator_args(f"{flag}={flag.default}") == defaults
    elif flag.type == "bool":  # Go's zero value: false
        assert operator_args(f"{flag}=false") == defaults
        assert vars(operator_args(str(flag))) != vars(defaults)
    elif flag.type == "string":  # "": unset, as upstream's
        given = vars(operator_args(f"{flag}="))
        assert {k: v or None for k, v in given.items()} == {
            k: v or None for k, v in vars(defaults).items()
        }
    else:  # a flag.Var without a default: taken as given
        value, taken = {"enable-scheme": ("pytorchjob", ["PyTorchJob"])}.get(
            flag.name, ("info", "info")
        )
        given = operator_args(f"{flag}={value}")
        assert getattr(given, flag.name.replace("-", "_")) == taken
        assert vars(given) != vars(defaults)


KUBECONFIG = """apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:16443", insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
"""


@pytest.fixture
def kubeconfig(tmp_path: Path) -> Path:
    path = tmp_path / "kubeconfig"
    path.write_text(KUBECONFIG)
    return path


@pytest.fixture
def base(tmp_path: Path) -> list[str]:
    """The flags every run of the table gets: a kubeconfig of another server."""
    path = tmp_path / "other-kubeconfig"
    path.write_text(KUBECONFIG.replace("127.0.0.1:16443", "127.0.0.2:16444"))
    return [f"--kubeconfig={path}"]


def _kube(args: argparse.Namespace) -> Kube:
    kube = operator_kube(args)
    kube.api.close()  # no connection was opened: only the settings are read
    return kube


def _limits(args: argparse.Namespace) -> tuple[float, int]:
    limiter = _kube(args).limiter
    assert limiter is not None
    return limiter.qps, limiter.burst


def _elector(args: argparse.Namespace, kubeconfig: Path) -> tuple[bool, str]:
    elector_ = elector(args, Kube(api_client(kubeconfig=str(kubeconfig))))
    return (elector_ is not None, elector_.name if elector_ else "")


def _served(args: argparse.Namespace) -> list[tuple[str, list[str]]]:
    """The addresses served and what each answers (200s), on loopback."""
    metrics = operator_metrics()
    servers = serve_endpoints(args, metrics=metrics, healthy=lambda: True)
    try:
        found = []
        for server in servers:
            host, port = server.server_address[:2]
            paths = [
                path
                for path in ("/metrics", "/healthz", "/readyz")
                if _status(f"http://{host}:{port}{path}") == 200
            ]
            found.append((str(host), paths))
        return found
    finally:
        for server in servers:
            server.shutdown()
            server.server_close()


def _status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return int(response.status)
    except urllib.error.HTTPError as error:
        return error.code


# Each honoured upstream flag at a value other than its default, and what the operator then
# runs with: the reconcilers' config, the client, the Lease, the servers.
EFFECTS: dict[str, tuple[list[str], Callable[..., object], object]] = {
    "controller-threads": (["--controller-threads=4"], lambda a, k: operator_config(a).workers, 4),
    "namespace": (["--namespace=team-a"], lambda a, k: operator_config(a).namespace, "team-a"),
    "gang-scheduler-name": (
        ["--gang-scheduler-name=volcano"],
        lambda a, k: operator_config(a).gang_scheduler_name,
        "volcano",
    ),
    "pytorch-init-container-image": (
        ["--pytorch-init-container-image=mirror.local/busybox:1.36"],
        lambda a, k: operator_config(a).pods.init.image,
        "mirror.local/busybox:1.36",
    ),
    "pytorch-init-container-max-tries": (
        ["--pytorch-init-container-max-tries=7"],
        lambda a, k: operator_config(a).pods.init.max_tries,
        7,
    ),
    "kube-api-qps": (["--kube-api-qps=5"], lambda a, k: _limits(a)[0], 5),
    "kube-api-burst": (["--kube-api-burst=7"], lambda a, k: _limits(a)[1], 7),
    "kubeconfig": (
        ["--kubeconfig={kubeconfig}"],
        lambda a, k: _kube(a).api.configuration.host,
        "https://127.0.0.1:16443",
    ),
    "leader-elect": (["--leader-elect"], _elector, (True, LEADER_ELECTION_ID)),
    "leader-election-id": (
        ["--leader-elect", "--leader-election-id=mine"],
        _elector,
        (True, "mine"),
    ),
    "metrics-bind-address": (
        ["--metrics-bind-address=127.0.0.1:0", "--health-probe-bind-address=0"],
        lambda a, k: _served(a),
        [("127.0.0.1", ["/metrics", "/healthz", "/readyz"])],
    ),
    "health-probe-bind-address": (
        ["--metrics-bind-address=0", "--health-probe-bind-address=127.0.0.1:0"],
        lambda a, k: _served(a),
        [("127.0.0.1", ["/healthz", "/readyz"])],
    ),
}


@pytest.mark.parametrize("name", sorted(EFFECTS))
def test_every_honoured_flag_takes_effect(name: str, kubeconfig: Path, base: list[str]) -> None:
    flags, effect, expected = EFFECTS[name]
    argv = [flag.format(kubeconfig=kubeconfig) for flag in flags]
    run = parser().parse_args(["operator", *base, *argv])
    assert effect(run, kubeconfig) == expected
    if name not in ("metrics-bind-address", "health-probe-bind-address"):  # defaults bind ports
        assert effect(parser().parse_args(["operator", *base]), kubeconfig) != expected


def test_the_effect_table_covers_every_honoured_flag() -> None:
    honoured = {f.name for f in FLAGS} - {flag[2:] for flag in NOT_HONOURED} - {"enable-scheme"}
    # the template file's effect: test_upstreams_default_template_file_is_optional_...
    assert honoured - {"pytorch-init-container-template-file"} == set(EFFECTS)


def test_leader_election_uses_upstreams_lease_name_and_is_off_by_default() -> None:
    args = operator_args()
    assert args.leader_elect is False
    assert args.lease_name == "1ca428e5.training-operator.kubeflow.org"
    assert operator_args("--leader-elect").leader_elect is True
    assert operator_args("--leader-election-id=mine").lease_name == "mine"
    assert (args.workers, args.kube_api_qps, args.kube_api_burst) == (1, 20, 30)
    assert (args.metrics_address, args.health_probe_bind_address) == (":8080", ":8081")


@pytest.mark.parametrize(
    ("text", "value"),
    [("1", True), ("t", True), ("TRUE", True), ("True", True), ("0", False), ("F", False)],
)
def test_bools_read_as_gos(text: str, value: bool) -> None:
    assert go_bool(text) is value


@pytest.mark.parametrize(
    ("text", "address"),
    [
        (":8080", ("", 8080)),
        ("127.0.0.1:0", ("127.0.0.1", 0)),
        ("[::1]:8081", ("::1", 8081)),
        ("0", None),  # controller-runtime's "serve nothing"
    ],
)
def test_bind_addresses(text: str, address: tuple[str, int] | None) -> None:
    assert bind_address(text) == address


def run_operator(*flags: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "autoscaler", "operator", *flags]
    return subprocess.run(argv, capture_output=True, text=True, check=False, timeout=60)


@pytest.mark.parametrize(
    ("flags", "error"),
    [
        (
            ["--enable-scheme=tfjob"],
            "argument --enable-scheme: TFJob: this operator runs PyTorchJob only; keep "
            "upstream's operator for TFJob",
        ),
        (["--enable-scheme", "mxjob"], "argument --enable-scheme: scheme mxjob is not supported"),
        (["--metrics-bind-address=8080"], "not a [HOST]:PORT address: '8080'"),
        (["--health-probe-bind-address=:http"], "not a [HOST]:PORT address: ':http'"),
        (["--leader-elect=yes"], "not a bool: 'yes'"),
        (["--controller-threads=0"], "must be at least 1, not 0"),
        (["--kube-api-qps=0"], "must be at least 1, not 0"),
    ],
)
def test_what_the_operator_cannot_run_with_is_refused_at_start(
    flags: list[str], error: str
) -> None:
    result = run_operator(*flags)
    assert result.returncode == 2
    assert error in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


def test_pytorchjob_is_the_scheme_in_any_case() -> None:
    args = operator_args("--enable-scheme=PyTorchJob", "--enable-scheme", "pytorchjob")
    assert args.enable_scheme == ["PyTorchJob", "PyTorchJob"]


def test_flags_that_change_nothing_are_named_in_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    args = parser().parse_args(
        ["operator", "--webhook-server-port=9443", "--zap-devel", "--zap-log-level", "debug"]
    )
    with caplog.at_level(logging.WARNING):
        warn_not_honoured(args)
    assert [r.getMessage().split(" ")[0] for r in caplog.records] == [
        "--webhook-server-port",
        "--zap-devel",
        "--zap-log-level",
    ]
    assert "is accepted but not honoured: no admission webhook" in caplog.records[0].getMessage()
    assert set(NOT_HONOURED) <= {f"--{f.name}" for f in FLAGS}  # upstream's names, no others


def test_no_warning_without_such_flags(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        warn_not_honoured(parser().parse_args(["operator"]))
    assert caplog.records == []


def test_upstreams_default_template_file_is_optional_and_any_other_is_not(
    tmp_path: Path,
) -> None:
    assert not UPSTREAM_TEMPLATE_FILE.exists()  # nothing mounted here, as in upstream's image
    assert pod_settings(operator_args()).init.template == InitContainers.template
    mine = tmp_path / "init.yaml"
    mine.write_text(InitContainers.template.replace("init-pytorch", "wait"))
    settings = pod_settings(operator_args(f"--pytorch-init-container-template-file={mine}"))
    assert "wait" in settings.init.template


@pytest.mark.parametrize(
    ("argv", "resource"),
    [
        ((), "nvidia.com/gpu"),  # the planned placement is on by default
        (("--planned-placement=amd.com/gpu",), "amd.com/gpu"),
        (("--planned-placement=none",), None),  # kube-scheduler places every pod
        (("--planned-placement=",), None),
    ],
)
def test_the_planned_placement_places_gpu_workers_unless_turned_off(
    argv: tuple[str, ...], resource: str | None
) -> None:
    assert pod_settings(operator_args(*argv)).placement_resource == resource
