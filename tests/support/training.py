"""Stand-ins for the kubelet and for training processes, driven by the real API server.

`Kubelet` marks every new pod of a namespace Running. `Trainer` serves one job's training
throughput with the real training-side reporter: samples/s follow the job's curve at the
worker count the API server reports (`status.replicaStatuses.Worker.active`), so Prometheus
sees what a real job would after each rescale.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from autoscaler.api import coordinates as c
from autoscaler.training import ThroughputReporter

GPU = "nvidia.com/gpu"


class Kubelet:
    def __init__(self, api: client.ApiClient, namespace: str) -> None:
        self.core, self.namespace = client.CoreV1Api(api), namespace
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Kubelet:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stop.wait(0.1):
            try:
                self._start_pending()
            except Exception:  # the API server restarting (fault tests): try again next tick
                continue

    def _start_pending(self) -> None:
        for pod in self.core.list_namespaced_pod(self.namespace).items:
            if pod.status.phase in (None, "Pending") and pod.metadata.deletion_timestamp is None:
                body = {"status": {"phase": "Running"}}
                self.core.patch_namespaced_pod_status(pod.metadata.name, self.namespace, body)


class Trainer:
    """One job's throughput, `curve(active workers)` samples/s, on a real /metrics endpoint."""

    def __init__(
        self, api: client.ApiClient, *, namespace: str, name: str, curve: Callable[[int], float]
    ) -> None:
        self.jobs = client.CustomObjectsApi(api)
        self.namespace, self.name, self.curve = namespace, name, curve
        self.reporter = ThroughputReporter.start(
            port=0, addr="127.0.0.1", namespace=namespace, job_name=name
        )
        self.workers = 0
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=f, daemon=True) for f in (self._watch, self._train)
        ]

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.reporter.port}"

    def __enter__(self) -> Trainer:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=5)
        self.reporter.stop()

    def _watch(self) -> None:
        while not self._stop.wait(0.2):
            try:
                job: dict[str, Any] = self.jobs.get_namespaced_custom_object(
                    c.GROUP, c.VERSION, self.namespace, c.PLURAL, self.name
                )
            except ApiException as error:
                if error.status == 404:  # not created yet, or deleted: nobody trains
                    self.workers = 0
                continue
            except Exception:  # the API server restarting (fault tests): try again next tick
                continue
            statuses = (job.get("status") or {}).get("replicaStatuses") or {}
            self.workers = int((statuses.get(c.WORKER) or {}).get("active") or 0)

    def _train(self) -> None:
        last = time.monotonic()
        while not self._stop.wait(0.02):
            now = time.monotonic()
            if self.workers:
                self.reporter.step(samples=self.curve(self.workers) * (now - last))
            last = now


def remove_jobs_and_pods(api: client.ApiClient, namespace: str) -> None:
    """Jobs first (else the operator recreates their pods), then their pods: with no garbage
    collector running, GPU pods left behind would shrink the capacity later tests measure."""
    client.CustomObjectsApi(api).delete_collection_namespaced_custom_object(
        c.GROUP, c.VERSION, namespace, c.PLURAL
    )
    client.CoreV1Api(api).delete_collection_namespaced_pod(namespace, grace_period_seconds=0)


@contextmanager
def gpu_node(api: client.ApiClient, *, gpus: int, resource: str = GPU) -> Iterator[str]:
    """A Ready Node with GPUs, as `resource` (only its API object: nothing schedules or runs
    here)."""
    core, name = client.CoreV1Api(api), f"gpu-node-{uuid.uuid4().hex[:6]}"
    core.create_node({"metadata": {"name": name}})
    ready = {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "test"}
    resources = {resource: str(gpus), "cpu": "8", "memory": "32Gi", "pods": "110"}
    status = {"capacity": resources, "allocatable": resources, "conditions": [ready]}
    core.patch_node_status(name, {"status": status})
    try:
        yield name
    finally:
        core.delete_node(name)
