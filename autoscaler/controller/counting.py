"""Counting the operator's work into its metrics: upstream's job and object counters, the API
requests made, and each pass's outcome and time."""

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from autoscaler.controller.gang import PODGROUP_KIND
from autoscaler.controller.reconcile_pass import Plan
from autoscaler.observability.metrics import OperatorMetrics

JSON = dict[str, Any]
FRAMEWORK = "pytorch"  # the `framework` label of upstream's job counters
# Upstream's object counters, by the kind written: where upstream counts them (a service whose
# create failed counts too; a create that found the object already there counts neither way).
CREATED_COUNTERS = {
    "Pod": "created_pods",
    "Service": "succeeded_service_creation",
    PODGROUP_KIND: "created_pod_groups",
}
FAILED_CREATE_COUNTERS = {"Service": "failed_service_creation"}
DELETED_COUNTERS = {PODGROUP_KIND: "deleted_pod_groups"}


def count_job(metrics: OperatorMetrics, job: JSON, what: str) -> None:
    namespace = job["metadata"]["namespace"]
    metrics.jobs[what].labels(job_namespace=namespace, framework=FRAMEWORK).inc()


def count_object(metrics: OperatorMetrics, counters: dict[str, str], kind: str) -> None:
    if kind in counters:
        metrics.objects[counters[kind]].inc()


@contextmanager
def measured_pass(metrics: OperatorMetrics) -> Iterator[None]:
    """Times one pass and counts it among the active workers, however it ends."""
    runtime = metrics.runtime
    runtime.active_workers.inc()
    started = time.perf_counter()
    try:
        yield
    finally:
        elapsed = time.perf_counter() - started
        metrics.reconcile_seconds.observe(elapsed)
        runtime.time.observe(elapsed)
        runtime.active_workers.dec()


def count_pass(metrics: OperatorMetrics, result: Plan | None) -> None:
    """A pass that returned without an error."""
    metrics.reconciles.labels(result="ok").inc()
    metrics.runtime.reconciles[outcome(result)].inc()


def count_failed_pass(metrics: OperatorMetrics) -> None:
    metrics.reconciles.labels(result="error").inc()
    metrics.reconcile_errors.inc()
    metrics.runtime.reconciles["error"].inc()
    metrics.runtime.errors.inc()


def outcome(result: Plan | None) -> str:
    """controller-runtime's `result` label of a pass that returned without an error."""
    if result is None or result.requeue_after is None:
        return "success"
    return "requeue_after" if result.requeue_after > 0 else "requeue"


class RequestCounter:
    """Brings the request counters up to the client's totals (workers share the client)."""

    def __init__(self, metrics: OperatorMetrics, totals: Callable[[], tuple[int, int]]) -> None:
        """`totals`: the client's (requests, writes) so far, read under the lock so that two
        workers never count the same requests twice or backwards."""
        self.metrics, self.totals = metrics, totals
        self._counted, self._lock = (0, 0), threading.Lock()

    def catch_up(self) -> None:
        with self._lock:
            requests, writes = self.totals()
            self.metrics.api_requests.inc(requests - self._counted[0])
            self.metrics.api_writes.inc(writes - self._counted[1])
            self._counted = (requests, writes)
