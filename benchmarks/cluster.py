"""Set-up and waiting helpers the control-plane benchmarks share (bench_operator, bench_scale).

A fresh real kube-apiserver + etcd comes from `tests/support/controlplane`; these helpers install
the PyTorchJob CRD into it, create namespaces, count objects without holding them, run work in a
few threads, and wait for an operator to settle. The operator helpers take the `Operator` itself,
so they run in its process: bench_operator's, or bench_scale's operator process.
"""

from __future__ import annotations

import argparse
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from autoscaler.api import coordinates as c
from autoscaler.clients.kube import JOBS, PODS, SERVICES, Kube, Resource
from autoscaler.controller.runner import Operator
from benchmarks.instruments import KubeStats, TimedKube
from tests.support.controlplane import ControlPlane
from tests.support.polling import wait_for

JSON = dict[str, Any]
REPO = Path(__file__).resolve().parents[1]
CRD_FILE = REPO / "deploy" / "crds" / "kubeflow.org_pytorchjobs.yaml"
ECHO_JOB = REPO / "tests" / "fixtures" / "upstream" / "echo.yaml"
CRDS = Resource("apiextensions.k8s.io", "v1", "customresourcedefinitions")
NAMESPACES = Resource("", "v1", "namespaces")
POLL = 0.05


def install_crd(kube: Kube) -> None:
    kube.request("POST", CRDS.path(), body=yaml.safe_load(CRD_FILE.read_text()))

    def established() -> bool:
        crd = kube.get(CRDS, "", c.CRD_NAME)
        return any(
            cond["type"] == "Established" and cond["status"] == "True"
            for cond in (crd.get("status") or {}).get("conditions") or []
        )

    wait_for(established, timeout=60, what="the PyTorchJob CRD to be Established")

    def served() -> bool:
        try:
            kube.list(JOBS, namespace="default")
            return True
        except Exception:
            return False

    wait_for(served, timeout=60, what="pytorchjobs to be served")


def create_namespace(kube: Kube, name: str) -> None:
    kube.request(
        "POST",
        NAMESPACES.path(),
        body={"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}},
    )


def job_manifest(name: str, namespace: str, workers: int) -> JSON:
    """upstream's elastic echo example (training-operator), `workers` workers, min 1."""
    job: JSON = yaml.safe_load(ECHO_JOB.read_text())
    job["metadata"] = {"name": name, "namespace": namespace}
    job["spec"]["elasticPolicy"].update(minReplicas=1, maxReplicas=max(workers, 1))
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = workers
    return job


def job_names(jobs: int) -> list[str]:
    return [f"bench-{i:05d}" for i in range(jobs)]


def count_listed(kube: Kube, resource: Resource, namespace: str, selector: str) -> int:
    """Objects matching `selector`, by a paginated LIST (counts only, never holds them all)."""
    total, token = 0, ""
    while True:
        query: list[tuple[str, Any]] = [("labelSelector", selector), ("limit", 500)]
        if token:
            query.append(("continue", token))
        page = kube.request("GET", resource.path(namespace), query=query)
        total += len(page.get("items") or [])
        token = (page.get("metadata") or {}).get("continue") or ""
        if not token:
            return total


def count_stored(kube: Kube, resource: Resource, namespace: str) -> int:
    """Every object of `resource` in `namespace`, as the API server counts them: a LIST of one
    item and its `remainingItemCount` (cheap enough to ask every poll of a wait)."""
    page = kube.request("GET", resource.path(namespace), query=[("limit", 1)])
    metadata = page.get("metadata") or {}
    remaining = metadata.get("remainingItemCount")
    if remaining is None and metadata.get("continue"):  # a server that does not count: page it
        return count_listed(kube, resource, namespace, "")
    return len(page.get("items") or []) + (remaining or 0)


def all_stored(kube: Kube, namespace: str, expected: int) -> bool:
    """Whether the API server stores `expected` pods and `expected` services in `namespace`:
    bench_operator's completion criterion, the same for either operator."""
    return (
        count_stored(kube, PODS, namespace) >= expected
        and count_stored(kube, SERVICES, namespace) >= expected
    )


def run_threads(threads: int, items: Iterable[Any], work: Callable[[Any], object]) -> None:
    with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="bench") as pool:
        for future in [pool.submit(work, item) for item in items]:
            future.result()


def server_pids(plane: ControlPlane) -> dict[str, int]:
    """The API server's and etcd's process ids (read-only: their CPU time for the reports)."""
    pids = {}
    for name, attr in (("apiserver", "_apiserver"), ("etcd", "_etcd")):
        proc = getattr(plane, attr, None)
        if proc is not None:
            pids[name] = proc.pid
    return pids


def reconciles(op: Operator) -> tuple[float, float]:
    counter = op.metrics.reconciles
    return counter.labels(result="ok")._value.get(), counter.labels(result="error")._value.get()


def wait_quiet(op: Operator, kube: Kube, *, quiet: float, timeout: float) -> float:
    """Wait until the queue is idle and no request was made for `quiet` s; returns the
    perf_counter time of the last change (the moment the operator actually settled)."""
    deadline = time.perf_counter() + timeout
    last_state: Any = None
    last_change = time.perf_counter()
    while time.perf_counter() < deadline:
        state = (kube.requests, reconciles(op), op.idle())
        now = time.perf_counter()
        if state != last_state:
            last_state, last_change = state, now
        elif state[2] and now - last_change >= quiet:
            return last_change
        time.sleep(POLL)
    raise TimeoutError(f"the operator did not settle within {timeout:.0f}s")


def start_operator(op: Operator) -> tuple[threading.Thread, threading.Event]:
    """Run `op` on its own thread until the returned event is set; waits for its caches."""
    stop = threading.Event()
    thread = threading.Thread(target=op.run, args=(stop,), name="operator", daemon=True)
    thread.start()
    wait_for(op.healthy, timeout=60, what="the operator's caches to sync")
    return thread, stop


@dataclass(frozen=True)
class NoopResync:
    """A resync of every job once everything settled: the operator client's tallies around it."""

    before: KubeStats  # as the resync started
    after: KubeStats  # `quiet` s after its passes
    seconds: float  # until one pass per job had run and the queue was idle
    passes: float  # reconcile passes it caused
    errors: float  # reconcile errors so far, the resync's and every earlier one


def noop_resync(
    op: Operator, op_kube: TimedKube, args: argparse.Namespace, *, jobs: int
) -> NoopResync:
    """`resync()` once everything settled: one pass per job, which should write nothing.
    `args.timeout` bounds the wait, `args.quiet` s after it catch what a pass scheduled."""
    ok0, err0 = reconciles(op)
    before = op_kube.snapshot()
    started = time.perf_counter()
    op.resync()
    wait_for(
        lambda: sum(reconciles(op)) >= ok0 + err0 + jobs and op.idle(),
        timeout=args.timeout,
        what="one pass per job after resync()",
    )
    seconds = time.perf_counter() - started
    time.sleep(args.quiet)  # anything a pass scheduled would show up here
    after = op_kube.snapshot()
    return NoopResync(
        before=before,
        after=after,
        seconds=seconds,
        passes=sum(reconciles(op)) - ok0 - err0,
        errors=reconciles(op)[1],
    )
