"""Upstream's own Deployment and RBAC (kubeflow/training-operator v1.9.4, `manifests/base/`,
vendored in tests/fixtures/upstream) with only the image swapped for the project's: the real API
server takes the RBAC, the container runs as the kubelet would start it (the image's `/manager`
with the Deployment's arguments and environment, the ServiceAccount's token, its probes polled on
their ports, SIGTERM within its grace period), and a job runs to completion.

The process binds upstream's default ports, :8080 and :8081, as the container would: the test
fails, naming the port, if something else on the machine holds them."""

import copy
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from autoscaler.clients.kube import Kube
from autoscaler.observability.metrics import CONTROLLER
from tests.integration.test_operator import Cluster, elastic_job, names
from tests.support import apply as kubectl
from tests.support.image import IMAGE, script_command
from tests.support.jobs import UPSTREAM
from tests.support.polling import wait_for
from tests.support.processes import http_get, log_tail, start_process, stop_process
from tests.support.training import Kubelet

JSON = dict[str, Any]
MANIFESTS = UPSTREAM / "training-operator-v1.9.4"
NS = "kubeflow"  # where upstream's standalone overlay (`namespace: kubeflow`) puts them
UPSTREAM_IMAGE = "ghcr.io/kubeflow/training-v1/training-operator"
POD = "training-operator-5d8f7c9b6-x2x7q"  # a name as the ReplicaSet would give it


def load(name: str) -> JSON:
    obj: JSON = yaml.safe_load((MANIFESTS / name).read_text())
    return obj


def in_namespace(obj: JSON) -> JSON:
    """What kustomize's `namespace:` does to these objects: the namespaced ones and subjects."""
    obj = copy.deepcopy(obj)
    if obj["kind"] in ("ServiceAccount", "Deployment"):
        obj["metadata"]["namespace"] = NS
    for subject in obj.get("subjects", []):
        subject["namespace"] = NS
    return obj


def swapped(deployment: JSON) -> JSON:
    """The Deployment with its one container's image replaced, and nothing else."""
    changed = copy.deepcopy(deployment)
    [container] = changed["spec"]["template"]["spec"]["containers"]
    assert container["image"] == UPSTREAM_IMAGE
    container["image"] = IMAGE
    return changed


@pytest.fixture(scope="module")
def upstream_rbac(kube_api: client.ApiClient) -> Iterator[list[JSON]]:
    """Upstream's ServiceAccount, ClusterRole and ClusterRoleBinding, created for real; at the
    end, whatever did not exist before is deleted again (the namespace stays)."""
    mapper = kubectl.RestMapper(Kube(kube_api))
    kubectl.apply(mapper, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    objects = [
        in_namespace(load(f"rbac/{name}.yaml"))
        for name in ("service-account", "role", "cluster-role-binding")
    ]
    created = [obj for obj in objects if not kubectl.exists(mapper, obj)]
    for obj in objects:
        kubectl.apply(mapper, obj)
    yield objects
    for obj in reversed(created):
        kubectl.delete(mapper, obj)


def container_argv(container: JSON) -> list[str]:
    """The container's command and arguments as the image resolves them, as local paths."""
    assert container["image"] == IMAGE
    command, *rest = container["command"]
    program, *arguments = script_command(command)  # what the image has at that path
    return [
        str(Path(sys.executable).parent / program),
        *arguments,
        *rest,
        *container.get("args", []),
    ]


def container_env(container: JSON, *, kubeconfig: Path) -> dict[str, str]:
    """Its environment with the Downward API filled in, and the ServiceAccount's token (the
    kubelet mounts it; here a kubeconfig carries it)."""
    pod_fields = {"metadata.namespace": NS, "metadata.name": POD}
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("KUBECONFIG", "KUBEFLOW_NAMESPACE", "POD_NAMESPACE")
    }
    for var in container.get("env", []):
        source = var.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath")
        env[var["name"]] = pod_fields[source] if source else var["value"]
    env["KUBECONFIG"] = str(kubeconfig)
    return env


def probe(proc: subprocess.Popen[bytes], log: Path, probe: JSON) -> Callable[[], bool]:
    url = f"http://127.0.0.1:{probe['httpGet']['port']}{probe['httpGet']['path']}"

    def ok() -> bool:
        assert proc.poll() is None, log_tail(log)
        try:
            return http_get(url)[0] == 200
        except OSError:
            return False

    return ok


def metric(port: int, name: str, labels: dict[str, str]) -> float:
    """One series' value from /metrics (0 when it has no sample yet)."""
    body = http_get(f"http://127.0.0.1:{port}/metrics")[1]
    wanted = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for line in body.splitlines():
        series, _, value = line.rpartition(" ")
        if series.startswith(name + "{") and _sorted_labels(series) == wanted:
            return float(value)
    return 0.0


def _sorted_labels(series: str) -> str:
    inside = series[series.index("{") + 1 : -1]
    return ",".join(sorted(inside.split(",")))


@pytest.mark.usefixtures("crd", "upstream_rbac")
def test_upstreams_deployment_runs_a_job_with_only_the_image_swapped(
    kube_api: client.ApiClient,
    namespace: str,
    service_account_kubeconfig: Callable[[str, str], Path],
    tmp_path: Path,
) -> None:
    deployment = swapped(in_namespace(load("deployment.yaml")))
    pod = deployment["spec"]["template"]["spec"]
    [container] = pod["containers"]
    kubeconfig = service_account_kubeconfig(NS, pod["serviceAccountName"])
    log = tmp_path / "manager.log"
    proc = start_process(
        container_argv(container), log_path=log, env=container_env(container, kubeconfig=kubeconfig)
    )
    try:
        for kind in ("readinessProbe", "livenessProbe"):
            wait_for(probe(proc, log, container[kind]), what=f"the {kind} to pass")
        cluster = Cluster(kube_api, namespace)
        with Kubelet(kube_api, namespace):
            cluster.create(elastic_job("swapped", replicas=2))
            cluster.wait_pods("swapped", names("swapped", "worker", 2))
            cluster.wait_condition("swapped", ("Running", "True"))
            cluster.set_phase("swapped-worker-0", "Succeeded")
            cluster.wait_condition("swapped", ("Succeeded", "True"))
        [metrics_port] = [p["containerPort"] for p in container["ports"] if "name" not in p]
        mine = {"controller": CONTROLLER}
        queue = {**mine, "name": CONTROLLER}
        reconciled = metric(
            metrics_port, "controller_runtime_reconcile_total", {**mine, "result": "success"}
        )
        assert reconciled > 0
        assert metric(metrics_port, "workqueue_adds_total", queue) > 0
        assert metric(metrics_port, "workqueue_work_duration_seconds_count", queue) > 0
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=pod["terminationGracePeriodSeconds"]) == 0, log_tail(log)
    finally:
        stop_process(proc)
    text = log.read_text()
    # Never denied by upstream's ClusterRole; no flag to warn about (the Deployment passes none).
    assert f"system:serviceaccount:{NS}:training-operator" not in text, log_tail(log, lines=80)
    assert "not honoured" not in text
    # Upstream's ClusterRole grants no Nodes: the default planned placement is off, and says so.
    off = "the planned placement is off, kube-scheduler places every pod: the operator may not "
    assert off + "list nodes, watch nodes (" in text, log_tail(log)


@pytest.mark.usefixtures("crd", "upstream_rbac")
def test_the_planned_placement_asked_for_without_its_rbac_is_refused_at_start(
    service_account_kubeconfig: Callable[[str, str], Path],
) -> None:
    deployment = swapped(in_namespace(load("deployment.yaml")))
    pod = deployment["spec"]["template"]["spec"]
    [container] = pod["containers"]
    kubeconfig = service_account_kubeconfig(NS, pod["serviceAccountName"])
    argv = [*container_argv(container), "--planned-placement", "nvidia.com/gpu"]
    env = container_env(container, kubeconfig=kubeconfig)
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2, done.stderr
    refused = "error: --planned-placement nvidia.com/gpu: the operator may not list nodes, watch "
    assert refused + "nodes (deploy/operator/rbac.yaml grants them)" in done.stderr, done.stderr
