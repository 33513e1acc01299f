"""Report training throughput from a training script, for the autoscaler to read from Prometheus.

    from autoscaler.training import ThroughputReporter

    reporter = ThroughputReporter.start(port=9400)  # serves /metrics; identity from the pod
    for batch in loader:
        train_step(batch)
        reporter.step(samples=len(batch))

`step` adds to the counter `autoscaler_training_samples_total{namespace, job_name}`; the engine
sums its rate over the job's pods. A job that knows its total work says so
(`start(..., total_samples=N)` or `set_total`) and reports how far the whole job is
(`set_progress(samples)`: every worker's samples, every incarnation's, e.g. the global step times
the global batch, also right after resuming from a checkpoint); policies that finish jobs sooner
use the remaining work. Both are gauges, so a restarted worker reports them afresh.

Run one reporter per pod (it owns the port): with several processes per pod, start it on
LOCAL_RANK 0 and pass that rank's batch times LOCAL_WORLD_SIZE.
The namespace and job name come from `AUTOSCALER_NAMESPACE`/`AUTOSCALER_JOB_NAME`, else from the
pod: the service-account namespace file and the hostname without its `-worker-N`/`-master-N`.
This module needs only prometheus-client (no Kubernetes client).
"""

from __future__ import annotations

import os
import re
import socket
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server

from autoscaler import metrics_contract as mc
from autoscaler.metrics_contract import (
    DEFAULT_PORT,
    ENV_JOB_NAME,
    ENV_NAMESPACE,
    LABEL_JOB_NAME,
    LABEL_NAMESPACE,
    PROGRESS,
    SAMPLES,
    TOTAL,
)

NAMESPACE_FILE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
_REPLICA_SUFFIX = re.compile(r"-(?:worker|master)-\d+$")


def default_namespace(
    *, env: Mapping[str, str] = os.environ, namespace_file: Path = NAMESPACE_FILE
) -> str:
    """`AUTOSCALER_NAMESPACE`, else the pod's service-account namespace."""
    if env.get(ENV_NAMESPACE):
        return env[ENV_NAMESPACE]
    try:
        return namespace_file.read_text().strip()
    except OSError as exc:
        raise ValueError(f"no namespace: pass namespace= or set {ENV_NAMESPACE}") from exc


def default_job_name(*, env: Mapping[str, str] = os.environ, hostname: str | None = None) -> str:
    """`AUTOSCALER_JOB_NAME`, else the pod name (`<job>-worker-<i>`) without its replica suffix."""
    if env.get(ENV_JOB_NAME):
        return env[ENV_JOB_NAME]
    host = hostname if hostname is not None else socket.gethostname()
    name, found = _REPLICA_SUFFIX.subn("", host)
    if not found or not name:
        raise ValueError(
            f"hostname {host!r} is not a job's pod (<job>-worker-N): "
            f"pass job_name= or set {ENV_JOB_NAME}"
        )
    return name


_BATCH_GAUGES = {
    mc.GRADIENT_NOISE_SCALE: "Gradient noise scale at the base batch (smoothed)",
    mc.BASE_BATCH: "The job's base global batch",
    mc.LOCAL_BATCH: "Samples per replica per micro-step in use",
    mc.ACCUM_STEPS: "Gradient accumulation steps in use",
    mc.REPLICAS: "Replicas in the step in use",
    mc.MAX_LOCAL_BATCH: "Largest local batch the job declares",
    mc.MAX_GLOBAL_BATCH: "Largest global batch the job declares",
}


@dataclass(frozen=True)
class GoodputReport:
    """What a goodput job reports each step (None: not known yet)."""

    noise_scale: float | None
    base_batch: int
    local_batch: int
    accum_steps: int
    replicas: int
    max_local_batch: int
    max_global_batch: int
    step_seconds: Mapping[tuple[int, int, int], float]  # (replicas, local, accum) -> seconds


class ThroughputReporter:
    """A samples counter (and optional progress gauges) for one job on a registry of its own,
    served over HTTP."""

    def __init__(self, *, namespace: str, job_name: str) -> None:
        self.registry = CollectorRegistry()
        labels = [LABEL_NAMESPACE, LABEL_JOB_NAME]
        self._samples = Counter(
            SAMPLES, "Training samples processed by this pod", labels, registry=self.registry
        ).labels(namespace, job_name)
        # Labelled on first use: a job that never declares them exports neither gauge.
        self._labels = (namespace, job_name)
        self._progress = Gauge(
            PROGRESS, "Samples the whole job has trained so far", labels, registry=self.registry
        )
        self._total = Gauge(
            TOTAL, "Samples the whole job trains in all", labels, registry=self.registry
        )
        self._batch_gauges = {
            name: Gauge(name, help_text, labels, registry=self.registry)
            for name, help_text in _BATCH_GAUGES.items()
        }
        self._step_seconds = Gauge(
            mc.STEP_SECONDS,
            "Mean step seconds at a configuration the job has run",
            [*labels, mc.LABEL_REPLICAS, mc.LABEL_LOCAL_BATCH, mc.LABEL_ACCUM_STEPS],
            registry=self.registry,
        )
        self._server: WSGIServer | None = None
        self._thread: threading.Thread | None = None

    @classmethod
    def start(
        cls,
        *,
        port: int = DEFAULT_PORT,
        addr: str = "0.0.0.0",  # all interfaces: Prometheus scrapes the pod IP
        namespace: str | None = None,
        job_name: str | None = None,
        total_samples: float | None = None,
    ) -> ThroughputReporter:
        """A reporter serving `/metrics` on `addr:port` (port 0 picks a free one, see `port`)."""
        reporter = cls(
            namespace=namespace if namespace is not None else default_namespace(),
            job_name=job_name if job_name is not None else default_job_name(),
        )
        if total_samples is not None:
            reporter.set_total(total_samples)
        reporter._server, reporter._thread = start_http_server(
            port, addr=addr, registry=reporter.registry
        )
        return reporter

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("the reporter is not serving")
        return self._server.server_port

    def step(self, *, samples: float) -> None:
        """Count `samples` more samples trained (call once per optimizer step)."""
        self._samples.inc(samples)

    def set_total(self, samples: float) -> None:
        """Declare the samples the whole job trains in all (a positive number)."""
        if not samples > 0:
            raise ValueError(f"total samples must be positive, got {samples!r}")
        self._total.labels(*self._labels).set(samples)

    def set_progress(self, samples: float) -> None:
        """How many samples the whole job has trained so far (all workers, all incarnations)."""
        if not samples >= 0:
            raise ValueError(f"progress must be a number of samples >= 0, got {samples!r}")
        self._progress.labels(*self._labels).set(samples)

    def set_goodput(self, report: GoodputReport) -> None:
        """A goodput job's gradient statistics, batch in use and bounds, and its mean step time
        at each configuration it has run (progress and total then count samples at B0)."""
        values = {
            mc.GRADIENT_NOISE_SCALE: report.noise_scale,
            mc.BASE_BATCH: report.base_batch,
            mc.LOCAL_BATCH: report.local_batch,
            mc.ACCUM_STEPS: report.accum_steps,
            mc.REPLICAS: report.replicas,
            mc.MAX_LOCAL_BATCH: report.max_local_batch,
            mc.MAX_GLOBAL_BATCH: report.max_global_batch,
        }
        for name, value in values.items():
            if value is not None:
                self._batch_gauges[name].labels(*self._labels).set(value)
        for (replicas, local_batch, accum_steps), seconds in report.step_seconds.items():
            labels = (*self._labels, str(replicas), str(local_batch), str(accum_steps))
            self._step_seconds.labels(*labels).set(seconds)

    def stop(self) -> None:
        """Stop serving (the counter keeps its value)."""
        if self._server is not None and self._thread is not None:
            self._server.shutdown()
            self._server.server_close()
            self._thread.join(timeout=5)
        self._server = self._thread = None

    def __enter__(self) -> ThroughputReporter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
