"""What the operator's flags and a job's template put into the pods it builds."""

from typing import Any

import pytest

from autoscaler.api import PyTorchJob, default_job
from autoscaler.controller.builders import (
    UPSTREAM_DEFAULTS,
    InitContainers,
    PodSettings,
    desired_pod,
)

JSON = dict[str, Any]


def master_worker_job(template_metadata: JSON | None = None) -> PyTorchJob:
    template: JSON = {"spec": {"containers": [{"name": "pytorch", "image": "img"}]}}
    if template_metadata:
        template["metadata"] = template_metadata
    specs = {kind: {"replicas": 1, "template": template} for kind in ("Master", "Worker")}
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


def test_the_master_gets_no_init_container() -> None:
    pod = desired_pod(master_worker_job(), replica_type="Master", index=0)
    assert "initContainers" not in pod["spec"]


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
