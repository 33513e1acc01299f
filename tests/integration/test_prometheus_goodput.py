"""`PrometheusThroughput.goodput` against the real Prometheus scraping a goodput job's gauges
(the names of `autoscaler.metrics_contract`, exported with prometheus-client as the training
helper exports them): every job's statistics with one query."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from prometheus_client import CollectorRegistry, Gauge, start_http_server

from autoscaler import metrics_contract as contract
from autoscaler.api.ownership import Owner
from autoscaler.clients.prometheus import PrometheusThroughput, TransportError
from autoscaler.engine.ports import GradientReport, ManagedJob, StepTime
from tests.support.clock import NOW
from tests.support.polling import wait_for
from tests.support.processes import free_port
from tests.support.prometheus import PrometheusServer

LABELS = (contract.LABEL_NAMESPACE, contract.LABEL_JOB_NAME)
STEP_LABELS = (
    *LABELS,
    contract.LABEL_REPLICAS,
    contract.LABEL_LOCAL_BATCH,
    contract.LABEL_ACCUM_STEPS,
)
GAUGES = {
    contract.GRADIENT_NOISE_SCALE: "noise_scale",
    contract.BASE_BATCH: "base_batch",
    contract.MAX_LOCAL_BATCH: "max_local_batch",
    contract.MAX_GLOBAL_BATCH: "max_global_batch",
    contract.LOCAL_BATCH: "local_batch",
    contract.ACCUM_STEPS: "accum_steps",
    contract.REPLICAS: "replicas",
}


@dataclass
class Pod:
    """One training pod's /metrics with the goodput gauges."""

    registry: CollectorRegistry
    gauges: dict[str, Gauge]
    steps: Gauge
    server: object
    port: int

    @classmethod
    def start(cls) -> Pod:
        registry = CollectorRegistry()
        gauges = {name: Gauge(name, name, LABELS, registry=registry) for name in GAUGES}
        steps = Gauge(contract.STEP_SECONDS, "step time", STEP_LABELS, registry=registry)
        server, _ = start_http_server(0, addr="127.0.0.1", registry=registry)
        return cls(registry, gauges, steps, server, server.server_port)

    def report(self, namespace: str, name: str, report: GradientReport) -> None:
        for metric, field in GAUGES.items():
            value = getattr(report, field)
            if value is not None:
                self.gauges[metric].labels(namespace, name).set(value)
        for step in report.steps:
            configuration = (str(step.replicas), str(step.local_batch), str(step.accum_steps))
            self.steps.labels(namespace, name, *configuration).set(step.seconds)

    def stop(self) -> None:
        self.server.shutdown()  # type: ignore[attr-defined]
        self.server.server_close()  # type: ignore[attr-defined]


def managed(namespace: str, name: str) -> ManagedJob:
    return ManagedJob(namespace=namespace, name=name, min_replicas=1, max_replicas=4,
                      replicas=2, active=2, owner=Owner.ENGINE, created=NOW)  # fmt: skip


BERT = GradientReport(
    noise_scale=812.5,
    base_batch=32,
    max_local_batch=64,
    max_global_batch=384,
    local_batch=48,
    accum_steps=1,
    replicas=4,
    steps=(StepTime(1, 32, 0, 0.21), StepTime(4, 48, 1, 0.6), StepTime(4, 64, 0, 0.5)),
)
CIFAR = GradientReport(noise_scale=90.0, base_batch=128, max_local_batch=1024,
                       max_global_batch=4096)  # fmt: skip


@pytest.fixture(scope="module")
def pods(prometheus: PrometheusServer) -> Iterator[tuple[str, list[Pod]]]:
    """Two pods of bert (the same gauges, as every rank exports them), one of cifar10 in another
    namespace (no step time yet), and a job that reports its throughput only."""
    namespace = f"g-{uuid.uuid4().hex[:8]}"
    started = [Pod.start() for _ in range(3)]
    started[0].report(namespace, "bert", BERT)
    started[1].report(namespace, "bert", BERT)
    started[2].report(f"{namespace}-b", "cifar10", CIFAR)
    targets = [f"127.0.0.1:{pod.port}" for pod in started]
    for target in targets:
        prometheus.add_target(target, job="goodput")
    try:
        yield namespace, started
    finally:
        for target in targets:
            prometheus.remove_target(target, job="goodput")
        for pod in started:
            pod.stop()


def test_reads_every_jobs_statistics_with_one_query(
    prometheus: PrometheusServer, pods: tuple[str, list[Pod]]
) -> None:
    namespace, _ = pods
    jobs = [managed(namespace, "bert"), managed(f"{namespace}-b", "cifar10"),
            managed(namespace, "plain")]  # fmt: skip
    expected = {jobs[0].key: BERT, jobs[1].key: CIFAR}
    source = PrometheusThroughput(url=prometheus.url)
    try:
        found = wait_for(
            lambda: (values := source.goodput(jobs, now=NOW)) == expected and values,
            timeout=30,
            interval=0.25,
            what=f"the gradient statistics {expected}",
        )
        before = source.queries
        source.goodput(jobs, now=NOW)
        assert source.queries == before + 1  # one query for every job
    finally:
        source.close()
    assert jobs[2].key not in found
    assert source.errors == 0


def test_a_job_outside_the_list_is_not_read(
    prometheus: PrometheusServer, pods: tuple[str, list[Pod]]
) -> None:
    namespace, _ = pods
    source = PrometheusThroughput(url=prometheus.url)
    try:
        prometheus.wait_for_series(f'{contract.GRADIENT_NOISE_SCALE}{{job_name="bert"}}')
        assert source.goodput([managed(namespace, "other")], now=NOW) == {}
    finally:
        source.close()


def test_prometheus_down_raises() -> None:
    source = PrometheusThroughput(url=f"http://127.0.0.1:{free_port()}")
    try:
        with pytest.raises(TransportError, match="ConnectionError"):
            source.goodput([managed("ns", "bert")], now=NOW)
    finally:
        source.close()
    assert source.errors == 1
