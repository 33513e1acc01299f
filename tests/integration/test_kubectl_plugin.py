"""`kubectl autoscaler` run by the real kubectl (built from the pinned Kubernetes release) against
the real kube-apiserver: kubectl finds the plugin on PATH and the plugin reads the kubeconfig.
"""

import json
import subprocess
import sysconfig
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from autoscaler.api import coordinates as c
from tests.support.controlplane import ControlPlane, binaries_dir
from tests.support.jobs import INVALID, UPSTREAM, upstream_job

SCRIPTS = Path(sysconfig.get_paths()["scripts"])
PLUGIN = SCRIPTS / "kubectl-autoscaler"
JOB = "elastic-example-echo"
ECHO = str(UPSTREAM / "echo.yaml")
Kubectl = Callable[..., subprocess.CompletedProcess[str]]


def write_kubeconfig(path: Path, plane: ControlPlane, *, team_namespace: str) -> Path:
    """Two contexts for the admin's static token: the current one, "elsewhere", in "default";
    "team" in the test's namespace, where the job is."""
    admin = yaml.safe_load(plane.kubeconfig_path.read_text())
    contexts = {"elsewhere": "default", "team": team_namespace}
    config = {
        **admin,
        "contexts": [
            {"name": name, "context": {"cluster": "testenv", "user": "admin", "namespace": ns}}
            for name, ns in contexts.items()
        ],
        "current-context": "elsewhere",
    }
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)
    return path


@pytest.fixture
def team(namespace: str, kube_api: client.ApiClient, crd: dict[str, Any]) -> str:
    """The test's namespace, holding the upstream echo job."""
    client.CustomObjectsApi(kube_api).create_namespaced_custom_object(
        c.GROUP, c.VERSION, namespace, c.PLURAL, upstream_job("echo.yaml")
    )
    return namespace


@pytest.fixture
def kubectl(control_plane: ControlPlane, team: str, tmp_path: Path) -> Kubectl:
    """`kubectl(*args)`: the real kubectl with only this venv's scripts on PATH, a HOME of its
    own and KUBECONFIG pointing at the two-context kubeconfig."""
    assert PLUGIN.is_file(), f"{PLUGIN} missing: reinstall the package (make .venv/.installed)"
    binary = binaries_dir() / "kubectl"
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", control_plane, team_namespace=team)
    home = tmp_path / "home"
    home.mkdir()
    env = {"PATH": str(SCRIPTS), "HOME": str(home), "KUBECONFIG": str(kubeconfig)}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(binary), *args], capture_output=True, text=True, env=env, timeout=60, check=False
        )

    return run


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert (result.returncode, result.stderr) == (0, ""), result
    return result.stdout


def test_kubectl_lists_the_plugin_found_on_path(kubectl: Kubectl) -> None:
    listed = kubectl("plugin", "list")
    assert listed.returncode == 0, listed.stderr
    assert str(PLUGIN) in listed.stdout.splitlines()


def test_kubectl_is_the_release_the_api_server_is(kubectl: Kubectl) -> None:
    versions = json.loads(ok(kubectl("version", "-o", "json")))
    client_version = versions["clientVersion"]["gitVersion"]
    assert client_version == versions["serverVersion"]["gitVersion"]
    assert client_version.startswith("v1.")


def test_kubectl_itself_reaches_the_cluster_with_the_kubeconfig(
    kubectl: Kubectl, team: str
) -> None:
    got = ok(kubectl("get", "pytorchjobs", "--context", "team", "-o", "name"))
    assert got == f"pytorchjob.kubeflow.org/{JOB}\n"


def test_explain_names_the_job_either_way(kubectl: Kubectl, team: str) -> None:
    by_path = ok(kubectl("autoscaler", "explain", f"{team}/{JOB}"))
    by_flag = ok(kubectl("autoscaler", "explain", JOB, "-n", team))
    assert by_path == by_flag
    assert by_path.startswith(f"Job:       {team}/{JOB}\nOwner:     ")
    assert "Workers:   2 wanted, 0 active, bounds [1, 2]\nPlacement: " in by_path


def test_explain_takes_the_namespace_of_the_chosen_context(kubectl: Kubectl, team: str) -> None:
    missing = kubectl("autoscaler", "explain", JOB)  # current context: "elsewhere", in default
    assert (missing.returncode, missing.stdout) == (2, "")
    assert missing.stderr == f"error: pytorchjob default/{JOB} not found\n"
    report = json.loads(
        ok(kubectl("autoscaler", "explain", JOB, "--context", "team", "-o", "json"))
    )
    assert (report["job"], report["bounds"]) == (f"{team}/{JOB}", {"min": 1, "max": 2})
    as_yaml = yaml.safe_load(
        ok(kubectl("autoscaler", "--context", "team", "explain", JOB, "-o", "yaml"))
    )
    assert as_yaml["job"] == report["job"]
    assert as_yaml["replicas"] == report["replicas"] == {"spec": 2, "active": 0}


def test_explain_refuses_an_unknown_context_and_two_namespaces(kubectl: Kubectl, team: str) -> None:
    unknown = kubectl("autoscaler", "explain", JOB, "--context", "nope")
    assert (unknown.returncode, unknown.stderr) == (2, 'error: context "nope" does not exist\n')
    twice = kubectl("autoscaler", "explain", f"{team}/{JOB}", "-n", "other")
    assert twice.returncode == 2
    assert (
        twice.stderr
        == f"error: '{team}/{JOB}' names namespace '{team}' but --namespace is 'other'\n"
    )


def test_validate_accepts_a_valid_manifest_and_rejects_an_invalid_one(
    kubectl: Kubectl, tmp_path: Path
) -> None:
    assert ok(kubectl("autoscaler", "validate", "-f", ECHO)) == f"pytorchjob/{JOB} is valid\n"
    case = INVALID[0]
    invalid = tmp_path / "invalid.yaml"
    invalid.write_text(yaml.safe_dump(case.job))
    rejected = kubectl("autoscaler", "validate", "-f", str(invalid))
    assert (rejected.returncode, rejected.stdout) == (2, "")
    name = case.job["metadata"]["name"]
    assert rejected.stderr.startswith(f"error: PyTorchJob '{name}' is invalid: {case.field}")
    assert case.message in rejected.stderr


def test_render_puts_a_job_without_namespace_in_the_contexts_one(
    kubectl: Kubectl, team: str
) -> None:
    objects = list(yaml.safe_load_all(ok(kubectl("autoscaler", "render", "-f", ECHO))))
    assert {obj["metadata"]["namespace"] for obj in objects} == {"default"}
    listing = json.loads(
        ok(kubectl("autoscaler", "render", "-f", ECHO, "--context", "team", "-o", "json"))
    )
    assert listing["kind"] == "List"
    assert {item["metadata"]["namespace"] for item in listing["items"]} == {team}
    assert [item["kind"] for item in listing["items"]].count("Pod") == 2
    explicit = yaml.safe_load_all(ok(kubectl("autoscaler", "render", "-f", ECHO, "-n", "ns9")))
    assert {obj["metadata"]["namespace"] for obj in explicit} == {"ns9"}
