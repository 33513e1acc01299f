"""`autoscaler operator` as real processes: leader election on a Lease, /metrics, /healthz,
and graceful shutdown on SIGTERM handing the lease to the standby at once."""

import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from kubernetes import client

from tests.integration.test_operator import Cluster, elastic_job, names
from tests.support.controlplane import ControlPlane
from tests.support.polling import wait_for
from tests.support.processes import free_port, http_get, log_tail, start_process, stop_process
from tests.support.prometheus import PrometheusServer

LEASE = "operator-test-lease"


@dataclass
class OperatorProcess:
    identity: str
    proc: subprocess.Popen[bytes]
    port: int
    log: Path

    def get(self, path: str) -> tuple[int, str]:
        return http_get(f"http://127.0.0.1:{self.port}{path}")

    def metric(self, name: str) -> float | None:
        """The sum of a metric's samples over its labels; None when it has none."""
        status, body = self.get("/metrics")
        assert status == 200
        values = [
            float(line.rsplit(" ", 1)[1])
            for line in body.splitlines()
            if line.startswith((name + " ", name + "{"))
        ]
        return sum(values) if values else None


@pytest.fixture
def start_operator(control_plane: ControlPlane, crd: object, tmp_path: Path) -> Iterator[object]:
    started: list[OperatorProcess] = []

    def start(identity: str) -> OperatorProcess:
        port = free_port()
        argv = [
            sys.executable, "-m", "autoscaler", "operator", "--leader-elect",
            "--kubeconfig", str(control_plane.kubeconfig_path),
            "--metrics-address", f"127.0.0.1:{port}", "--health-probe-bind-address", "0",
            "--identity", identity, "--lease-name", LEASE, "--lease-namespace", "default",
            "--lease-duration", "3", "--renew-deadline", "2", "--retry-period", "0.2",
            "--resync-seconds", "2",
        ]  # fmt: skip
        log = tmp_path / f"{identity}.log"
        process = OperatorProcess(identity, start_process(argv, log_path=log), port, log)
        started.append(process)
        wait_for(lambda: _answers(process), what=f"{identity} to serve /healthz")
        return process

    yield start
    for process in started:
        stop_process(process.proc, timeout=10)


def _answers(process: OperatorProcess) -> bool:
    try:
        return process.get("/healthz")[0] == 200
    except OSError:
        assert process.proc.poll() is None, log_tail(process.log)
        return False


def holder(kube_api: client.ApiClient) -> str:
    try:
        lease = client.CoordinationV1Api(kube_api).read_namespaced_lease(LEASE, "default")
    except client.ApiException:
        return ""
    return lease.spec.holder_identity or ""


def test_one_leader_acts_and_hands_over_on_sigterm(
    start_operator: object, kube_api: client.ApiClient, namespace: str, prometheus: PrometheusServer
) -> None:
    start = start_operator
    first = start("first")  # type: ignore[operator]
    wait_for(lambda: holder(kube_api) == "first", what="first to hold the lease")
    second = start("second")  # type: ignore[operator]
    assert second.metric("autoscaler_operator_leader") == 0.0
    cluster = Cluster(kube_api, namespace)
    cluster.create(elastic_job("led", replicas=2))
    cluster.wait_pods("led", names("led", "worker", 2))
    wait_for(
        lambda: (first.metric("autoscaler_operator_reconciles_total") or 0) > 0,
        what="first to reconcile",
    )
    assert second.metric("autoscaler_operator_reconciles_total") is None  # the standby never acts
    assert first.metric("autoscaler_operator_leader") == 1.0
    # The real Prometheus scrapes the operator's /metrics as it would in a cluster.
    prometheus.add_target(f"127.0.0.1:{first.port}", job="pytorchjob-operator")
    query = 'sum(autoscaler_operator_reconciles_total{job="pytorchjob-operator",result="ok"})'
    assert float(prometheus.wait_for_series(query)[0]["value"][1]) > 0  # type: ignore[index]
    prometheus.remove_target(f"127.0.0.1:{first.port}", job="pytorchjob-operator")

    first.proc.send_signal(signal.SIGTERM)
    assert first.proc.wait(timeout=15) == 0, log_tail(first.log)
    # The lease was released, not left to expire: the standby takes over within a few retries.
    wait_for(lambda: holder(kube_api) == "second", timeout=5, what="second to take the lease")
    cluster.scale("led", 3)
    cluster.wait_pods("led", names("led", "worker", 3))
    assert second.metric("autoscaler_operator_leader") == 1.0
