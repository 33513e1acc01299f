"""What the operator's flags and a job's template put into the pods it builds.

Ported from the Kubeflow training operator v1.9, each case naming its source in its id
(`<file>: <case>`): every case of `pkg/controller.v1/pytorch/initcontainer_test.go`
(`TestInitContainer`, whose cases are unnamed: numbered here in upstream's order), and of
`pkg/controller.v1/common/pod_test.go` `TestSetRestartPolicy` and `util_test.go`
`TestGenGeneralName`. Not ported from those files: `util_test.go` `TestMaxInt` (a Go helper,
Python's `max`).
"""

from typing import Any

import pytest

from autoscaler.api import PyTorchJob, default_job
from autoscaler.controller.builders import (
    UPSTREAM_DEFAULTS,
    InitContainers,
    PodSettings,
    desired_pod,
)
from autoscaler.controller.naming import replica_name

JSON = dict[str, Any]


def master_worker_job(
    template_metadata: JSON | None = None, *, kinds: tuple[str, ...] = ("Master", "Worker")
) -> PyTorchJob:
    template: JSON = {"spec": {"containers": [{"name": "pytorch", "image": "img"}]}}
    if template_metadata:
        template["metadata"] = template_metadata
    specs = {kind: {"replicas": 1, "template": template} for kind in kinds}
    raw = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "j", "namespace": "ns", "uid": "u"},
        "spec": {"pytorchReplicaSpecs": specs},
    }
    return default_job(PyTorchJob.model_validate(raw))


def worker_init(settings: PodSettings = UPSTREAM_DEFAULTS) -> list[JSON]:
    pod = desired_pod(master_worker_job(), replica_type="Worker", index=0, settings=settings)
    return list(pod["spec"]["initContainers"])


def test_the_default_init_container_is_upstreams() -> None:
    """Upstream v1.9's `initContainerTemplate` with alpine:3.10 and 100 tries, byte for byte."""
    (init,) = worker_init()
    assert init["name"] == "init-pytorch"
    assert init["image"] == "alpine:3.10"
    assert init["imagePullPolicy"] == "IfNotPresent"
    assert init["resources"] == {
        "limits": {"cpu": "100m", "memory": "20Mi"},
        "requests": {"cpu": "50m", "memory": "10Mi"},
    }
    assert init["command"] == [
        "sh",
        "-c",
        "err=1;for i in $(seq 100); do if nslookup j-master-0; then err=0 && break; fi;"
        "echo waiting for master; sleep 2; done; exit $err",
    ]


def test_the_image_and_tries_flags() -> None:
    settings = PodSettings(init=InitContainers(image="mirror.local/busybox:1.36", max_tries=7))
    (init,) = worker_init(settings)
    assert init["image"] == "mirror.local/busybox:1.36"
    assert "$(seq 7)" in init["command"][2]


def test_a_template_file_replaces_the_containers() -> None:
    template = """
- name: wait-for-master
  image: {{.InitContainerImage}}
  command: ["/wait", "--host={{ .MasterAddr }}", "--tries={{.MaxTries}}"]
- name: second
  image: tools
"""
    settings = PodSettings(init=InitContainers(image="w:1", max_tries=3, template=template))
    assert worker_init(settings) == [
        {
            "name": "wait-for-master",
            "image": "w:1",
            "command": ["/wait", "--host=j-master-0", "--tries=3"],
        },
        {"name": "second", "image": "tools"},
    ]


INIT_TEST = "initcontainer_test.go: TestInitContainer"


@pytest.mark.parametrize(
    ("kinds", "replica_type", "expected"),
    [
        pytest.param(("Worker",), "Worker", [], id=f"{INIT_TEST} case 1 (Worker only, worker 0)"),
        pytest.param(
            ("Worker", "Master"),
            "Worker",
            ["init-pytorch"],
            id=f"{INIT_TEST} case 2 (Master+Worker, worker 0)",
        ),
        pytest.param(
            ("Worker", "Master"), "Master", [], id=f"{INIT_TEST} case 3 (Master+Worker, master 0)"
        ),
    ],
)
def test_only_workers_of_a_job_with_a_master_wait_for_it(
    kinds: tuple[str, ...], replica_type: str, expected: list[str]
) -> None:
    job = master_worker_job(kinds=kinds)
    pod = desired_pod(job, replica_type=replica_type, index=0)
    assert [init["name"] for init in pod["spec"].get("initContainers", [])] == expected


RESTART_TEST = "pod_test.go: TestSetRestartPolicy"


@pytest.mark.parametrize(
    ("replica_policy", "pod_policy"),
    [
        pytest.param("ExitCode", "Never", id=f"{RESTART_TEST}: restartPolicy is ExitCode"),
        pytest.param("Never", "Never", id=f"{RESTART_TEST}: restartPolicy is Never"),
        pytest.param("Always", "Always", id=f"{RESTART_TEST}: restartPolicy is Always"),
        pytest.param("OnFailure", "OnFailure", id=f"{RESTART_TEST}: restartPolicy is OnFailure"),
    ],
)
def test_pod_restart_policy_follows_the_replica_spec(replica_policy: str, pod_policy: str) -> None:
    """ExitCode is the operator's to judge, so its pods are never restarted by the kubelet."""
    raw = master_worker_job().to_json()
    raw["spec"]["pytorchReplicaSpecs"]["Worker"]["restartPolicy"] = replica_policy
    job = default_job(PyTorchJob.model_validate(raw))
    pod = desired_pod(job, replica_type="Worker", index=0)
    assert pod["spec"]["restartPolicy"] == pod_policy


NAME_TEST = "util_test.go: TestGenGeneralName"


@pytest.mark.parametrize(
    "replica_type",
    [
        pytest.param("worker", id=f"{NAME_TEST} case 1 (worker)"),
        pytest.param("WORKER", id=f"{NAME_TEST} case 2 (WORKER)"),
    ],
)
def test_replica_names_are_lowercase_with_slashes_replaced(replica_type: str) -> None:
    name = replica_name(job_name="1/2/3/4/5", replica_type=replica_type, index=1)
    assert name == "1-2-3-4-5-worker-1"


@pytest.mark.parametrize(
    ("settings", "error"),
    [
        ({"template": "- name: x\n  image: {{.Image}}"}, "unknown field {{.Image}}"),
        (
            {"template": "{{if .MasterAddr}}- name: x{{end}}"},
            "unsupported action {{if .MasterAddr}}",
        ),
        ({"template": "name: x"}, "a YAML list of named containers"),
        ({"template": "- image: x"}, "a YAML list of named containers"),
        ({"template": "- name: [x"}, "is not YAML"),
        ({"max_tries": 0}, "at least 1"),
    ],
)
def test_settings_the_operator_cannot_build_with_fail_at_once(settings: JSON, error: str) -> None:
    with pytest.raises(ValueError, match=error.replace("{", r"\{").replace("[", r"\[")):
        InitContainers(**settings)


def test_template_metadata_reaches_the_pod_finalizers_included() -> None:
    """Upstream's pod control copies labels, annotations and finalizers of the template."""
    meta = {"labels": {"team": "a"}, "annotations": {"a": "b"}, "finalizers": ["example.com/keep"]}
    pod = desired_pod(master_worker_job(meta), replica_type="Worker", index=0)
    assert pod["metadata"]["finalizers"] == ["example.com/keep"]
    assert pod["metadata"]["annotations"] == {"a": "b"}
    assert pod["metadata"]["labels"]["team"] == "a"
