"""The `autoscaler` command: good input renders, bad input exits 2 with one line, no traceback."""

import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
import yaml

from tests.support.jobs import UPSTREAM

ROOT = Path(__file__).resolve().parents[2]


def run(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "autoscaler", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        check=False,
    )


def test_render_prints_every_object_the_operator_creates() -> None:
    result = run("render", "-f", str(UPSTREAM / "imagenet.yaml"))
    assert result.returncode == 0, result.stderr
    objects = list(yaml.safe_load_all(result.stdout))
    assert [(obj["kind"], obj["metadata"]["name"]) for obj in objects] == [
        ("HorizontalPodAutoscaler", "elastic-example-imagenet"),
        ("Pod", "elastic-example-imagenet-worker-0"),
        ("Service", "elastic-example-imagenet-worker-0"),
        ("Pod", "elastic-example-imagenet-worker-1"),
        ("Service", "elastic-example-imagenet-worker-1"),
    ]
    assert all(obj["metadata"]["ownerReferences"][0]["uid"] == "" for obj in objects)
    assert "&id" not in result.stdout  # plain YAML, no anchors


def test_render_json_of_several_files_is_a_list() -> None:
    result = run(
        "render",
        "-o",
        "json",
        "-f",
        str(UPSTREAM / "echo.yaml"),
        "-f",
        str(UPSTREAM / "imagenet.yaml"),
    )
    assert result.returncode == 0, result.stderr
    listing = json.loads(result.stdout)
    assert (listing["apiVersion"], listing["kind"]) == ("v1", "List")
    assert [item["kind"] for item in listing["items"]].count("Pod") == 4


def test_render_example_renders_the_bundled_job() -> None:
    result = run("render-example")
    assert result.returncode == 0, result.stderr
    names = [obj["metadata"]["name"] for obj in yaml.safe_load_all(result.stdout)]
    assert names[:2] == ["resnet50-elastic-worker-0", "resnet50-elastic-worker-0"]


def test_demo_is_not_a_subcommand_make_demo_is_the_simulator() -> None:
    result = run("demo")
    assert result.returncode == 2
    assert "invalid choice: 'demo'" in result.stderr
    assert "render-example" in result.stderr
    assert "simulate" in result.stderr


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (
            (UPSTREAM / "echo.yaml").read_text().replace("maxReplicas: 2", "maxReplicas: 0"),
            "spec.elasticPolicy.maxReplicas: Invalid value: 0: spec.elasticPolicy.maxReplicas in body should be greater than or equal to 1",
        ),
        (
            (UPSTREAM / "echo.yaml").read_text().replace("minReplicas: 1", "minReplicas: 3"),
            "spec.elasticPolicy.minReplicas: Invalid value: elasticPolicy.minReplicas (3) must not exceed elasticPolicy.maxReplicas (2)",
        ),
        ("spec: [unclosed", "not valid YAML at line 1"),
        ("apiVersion: v1\nkind: Pod\n", "no kubeflow.org/v1 PyTorchJob in the file"),
    ],
    ids=["schema", "cel", "yaml", "kind"],
)
def test_bad_file_exits_2_with_one_line_naming_the_field(
    tmp_path: Path, content: str, expected: str
) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(content)
    for command in ("validate", "render"):
        result = run(command, "-f", str(path))
        assert result.returncode == 2
        assert result.stdout == ""
        assert len(result.stderr.splitlines()) == 1, result.stderr
        assert expected in result.stderr
        assert "Traceback" not in result.stderr


def test_missing_file_exits_2(tmp_path: Path) -> None:
    result = run("validate", "-f", str(tmp_path / "absent.yaml"))
    assert (result.returncode, result.stderr.strip()) == (
        2,
        f"error: {tmp_path / 'absent.yaml'}: cannot read: No such file or directory",
    )


def test_standard_library_operator_is_not_shadowed_from_the_repo_root() -> None:
    code = "import json, operator; print(operator.__file__)"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=env, check=True
    )
    assert Path(result.stdout.strip()).parent == Path(sysconfig.get_paths()["stdlib"])


def master_worker_file(tmp_path: Path) -> Path:
    job = yaml.safe_load((UPSTREAM / "echo.yaml").read_text())
    worker = job["spec"]["pytorchReplicaSpecs"]["Worker"]
    job["spec"]["pytorchReplicaSpecs"]["Master"] = {**worker, "replicas": 1}
    job["spec"].pop("elasticPolicy", None)
    path = tmp_path / "master-worker.yaml"
    path.write_text(yaml.safe_dump(job))
    return path


def test_render_shows_what_the_init_container_flags_produce(tmp_path: Path) -> None:
    template = tmp_path / "init.yaml"
    template.write_text(
        "- name: wait\n  image: {{.InitContainerImage}}\n  args: ['{{.MasterAddr}}']\n"
    )
    result = run(
        "render",
        "-f",
        str(master_worker_file(tmp_path)),
        "--pytorch-init-container-image=mirror.local/busybox:1.36",
        "--pytorch-init-container-template-file",
        str(template),
    )
    assert result.returncode == 0, result.stderr
    workers = [
        obj
        for obj in yaml.safe_load_all(result.stdout)
        if obj["kind"] == "Pod" and "-worker-" in obj["metadata"]["name"]
    ]
    assert workers
    for pod in workers:
        assert pod["spec"]["initContainers"] == [
            {
                "name": "wait",
                "image": "mirror.local/busybox:1.36",
                "args": ["elastic-example-echo-master-0"],
            }
        ]


@pytest.mark.parametrize(
    ("flags", "error"),
    [
        (
            ["--pytorch-init-container-template-file", "missing.yaml"],
            "--pytorch-init-container-template-file: [Errno 2]",
        ),
        (
            ["--pytorch-init-container-max-tries", "0"],
            "init container max tries must be at least 1, not 0",
        ),
    ],
)
def test_settings_the_operator_cannot_use_exit_2(
    tmp_path: Path, flags: list[str], error: str
) -> None:
    result = run("render", "-f", str(master_worker_file(tmp_path)), *flags, cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.startswith(f"error: {error}"), result.stderr
    assert "Traceback" not in result.stderr


def annotated(tmp_path: Path, annotations: dict[str, str], name: str = "job.yaml") -> Path:
    job = yaml.safe_load((UPSTREAM / "echo.yaml").read_text())
    job["metadata"]["annotations"] = annotations
    path = tmp_path / name
    path.write_text(yaml.safe_dump(job))
    return path


QUERY = "elastic-autoscaler.io/throughput-query"
OWN_QUERY = 'sum(rate(x{{namespace="{namespace}", job_name="{name}"}}[{window}]))'


@pytest.mark.parametrize(
    ("annotations", "flags", "problems"),
    [
        ({QUERY: OWN_QUERY}, [], []),
        ({QUERY: OWN_QUERY}, ["-n", "team-a"], []),
        ({QUERY: "vector(1e9)"}, [], ["throughput-query: it reads no series"]),
        (
            {QUERY: 'sum(rate(x{{namespace="default"}}[1m]))'},
            ["-n", "team-a"],
            ['every selector must match namespace="team-a" exactly'],
        ),
        ({QUERY: 'rate(x{{namespace=~".+"}}[1m])'}, [], ["must match namespace="]),
        (
            {QUERY: 'max_over_time(rate(x{{namespace="{namespace}"}}[1m])[1h:1s])'},
            [],
            ["subqueries are refused"],
        ),
        ({QUERY: OWN_QUERY}, ["--engine-config", "{none}"], ["prometheus.job_query_namespaces"]),
        (
            {
                "elastic-autoscaler.io/total-samples": "-3",  # the engine's
                "elastic-autoscaler.io/fault-tolerance": "yes",  # the operator's
            },
            [],
            ['fault-tolerance must be "torchft"', "total-samples '-3' is not a positive number"],
        ),
        ({"elastic-autoscaler.io/rendezvous": "own"}, [], ['rendezvous must be "store"']),
    ],
)
def test_validate_reports_every_annotation_problem_and_exits_1(
    tmp_path: Path, annotations: dict[str, str], flags: list[str], problems: list[str]
) -> None:
    none = tmp_path / "engine.yaml"
    none.write_text("prometheus: {job_query_namespaces: []}\n")
    path = annotated(tmp_path, annotations)
    result = run("validate", "-f", str(path), *[f.format(none=none) for f in flags])
    assert result.returncode == (1 if problems else 0), result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == len(problems), result.stderr
    for line, problem in zip(lines, problems, strict=True):
        assert line.startswith("pytorchjob/elastic-example-echo: ")
        assert problem in line
    assert ("is valid" in result.stdout) is not problems
    assert "Traceback" not in result.stderr
