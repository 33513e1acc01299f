"""Writing a job's settled count through the `Cluster` port: its state stored ahead when the
write changes the count the stored state holds, then the one write (a suspension, a resume, or
/scale). A failed write is that job's, reported in its `Written`, never the round's.
"""

import logging
from datetime import datetime

from autoscaler.engine.conclusion import Decided, Written
from autoscaler.engine.config import SettleConfig
from autoscaler.engine.persistence import StateStore
from autoscaler.engine.ports import Cluster, ManagedJob, ScaleResult
from autoscaler.engine.settle import remember
from autoscaler.observability.engine_metrics import EngineMetrics

log = logging.getLogger(__name__)


class CountWriter:
    """Writes settled counts, one job per call (the engine calls it on its writer threads)."""

    def __init__(
        self,
        cluster: Cluster,
        *,
        store: StateStore,
        config: SettleConfig,
        metrics: EngineMetrics | None = None,
    ) -> None:
        self.cluster, self.store, self.config, self.metrics = cluster, store, config, metrics

    def write(self, decided: Decided, *, now: datetime) -> Written:
        """The job's settled count written, under the job its state was stored ahead with."""
        job = decided.job
        ahead = self._stored_ahead(decided, now=now)
        if ahead is None:
            return Written(error="the state could not be stored before the write")
        try:
            result = self._write(ahead, replicas=decided.settled.replicas, now=now)
            written = Written(written=result.written, error=result.error)
        except Exception as failure:  # one job's broken write must not fail the round
            log.exception("writing the count of %s/%s failed", job.namespace, job.name)
            written = Written(error=str(failure) or type(failure).__name__)
        self._count(written)
        return written

    def _stored_ahead(self, decided: Decided, *, now: datetime) -> ManagedJob | None:
        """The job to write under, once the stored state holds the count the write changes
        (`StateStore.store_ahead`); None when it could not be stored."""
        job = decided.job
        # A suspension changes no count (its marker dates it): nothing to store ahead of it.
        if decided.settled.replicas == 0 or self.store.holds_count_of(job):
            return job
        state = remember(
            decided.state,
            recommendation=decided.proposal.replicas,
            now=now,
            config=self.config,
        )
        return self.store.store_ahead(job, state)

    def _write(self, job: ManagedJob, *, replicas: int, now: datetime) -> ScaleResult:
        """The one write of the job's count: a suspension, a resume, or /scale."""
        if replicas == 0:
            return self.cluster.suspend(job, since=now)
        if job.held_back:
            return self.cluster.resume(job, replicas=replicas)
        return self.cluster.scale(job, replicas=replicas)

    def _count(self, written: Written) -> None:
        if self.metrics:
            result = "written" if written.written else "error" if written.error else "unchanged"
            self.metrics.writes.labels(result).inc()
