"""The engine's per-job state as persisted on the job (its state annotation), so a new leader
resumes where the last one stopped: restored on a job's first round, stored ahead of a write that
changes its count, and saved after the round when it changed in substance or is due a refresh.

The saves go through the `Cluster` port on the round's writer threads; the round does not wait
for them (`StateStore.finish_saves`, at the start of the next one).
"""

import logging
from collections.abc import Mapping, Sequence
from concurrent.futures import Executor, Future
from dataclasses import dataclass
from datetime import datetime, timedelta

from autoscaler.engine.announcements import FOLLOWS_A_RESCALE, held_reason
from autoscaler.engine.ports import Cluster, JobKey, ManagedJob
from autoscaler.engine.state import JobState

log = logging.getLogger(__name__)

Essence = tuple[object, ...]  # what of a job's state must be saved at once (`essence`)


@dataclass(frozen=True)
class Saved:
    """A state as it was stored: its essence, when, and the count it holds."""

    essence: Essence
    time: datetime
    replicas: int | None


class StateStore:
    """What the engine knows of each job's stored state, and the writes that keep it current."""

    def __init__(
        self,
        cluster: Cluster,
        *,
        writers: Executor,
        refresh_after: timedelta,
        refreshes_per_round: int,
    ) -> None:
        """`writers`: the threads the saves run on; `refresh_after`: how old an unchanged
        state's save may grow before it is rewritten, at most `refreshes_per_round` a round."""
        self.cluster, self.writers = cluster, writers
        self.refresh_after, self.refreshes_per_round = refresh_after, refreshes_per_round
        self._saved: dict[JobKey, tuple[Essence, datetime]] = {}
        self._stored_replicas: dict[JobKey, int | None] = {}  # the count the stored state holds
        self._saving: dict[JobKey, Future[Saved | None]] = {}  # the last round's state saves

    def restore(self, job: ManagedJob) -> JobState:
        """The state stored on the job (empty if none or unreadable), for its first round here."""
        state = JobState.from_json(job.state)
        self._stored_replicas[job.key] = state.replicas
        return state

    def holds_count_of(self, job: ManagedJob) -> bool:
        """Whether the stored state holds the job's current count (nothing to store ahead)."""
        return self._stored_replicas.get(job.key) == job.replicas

    def store_ahead(self, job: ManagedJob, state: JobState) -> ManagedJob | None:
        """Before a write, the stored state must hold the count the write changes: then a
        leader killed between its write and its state save leaves a state whose count differs
        from the job's, which the next leader counts as a rescale (its cooldown starting then).
        Without it a job's first rescale was never stored, and the next leader rescaled the job
        again in its first round (the fault matrix's engine case measured it). On a writer
        thread: only this job's entry of `_stored_replicas` is touched meanwhile.

        Returns the job to write under: as the save left it, while that is still the job and
        count decided from (the save moved its version: under the informer's, every first
        rescale met a 409 and read /scale again, measured by bench-scale's first round); else
        `job`, whose write then reads and compares. None: nothing was stored."""
        try:
            saved = self.cluster.save_state(job, state=state.to_json())
        except Exception:  # no write whose rescale could go uncounted
            log.exception("storing the state of %s/%s before a write failed", *job.key)
            return None
        self._stored_replicas[job.key] = state.replicas
        return saved if saved is not None and decided_from(job, saved) else job

    def changed(self, key: JobKey, state: JobState) -> bool:
        """Whether the state changed in substance since it was saved (or was never saved)."""
        saved = self._saved.get(key)
        return saved is None or saved[0] != essence(state)

    def refreshes(
        self, unchanged: Sequence[tuple[ManagedJob, JobState]], *, now: datetime
    ) -> list[tuple[ManagedJob, JobState]]:
        """The unchanged states to rewrite this round (`due_refreshes`)."""
        saved_at = {job.key: self._saved[job.key][1] for job, _ in unchanged}
        return due_refreshes(
            unchanged,
            saved_at=saved_at,
            now=now,
            period=self.refresh_after,
            limit=self.refreshes_per_round,
        )

    def save_later(self, job: ManagedJob, state: JobState, *, now: datetime) -> None:
        """Persist the state on a writer thread; the next round's `finish_saves` waits for it."""
        self._saving[job.key] = self.writers.submit(self._save, job, state, now)

    def finish_saves(self) -> None:
        """Wait for the last round's state saves; remember those that were stored (a failed
        one was logged, and its state is saved again next round). A round waits for its counts
        only, not for its state saves, which would lengthen it (measured by `make bench-scale`)."""
        for key, saving in self._saving.items():
            saved = saving.result()
            if saved is not None:
                self._saved[key] = (saved.essence, saved.time)
                self._stored_replicas[key] = saved.replicas
        self._saving.clear()

    def forget(self, key: JobKey) -> None:
        """A job gone from the cluster: nothing of its stored state is kept."""
        self._saved.pop(key, None)
        self._stored_replicas.pop(key, None)

    def _save(self, job: ManagedJob, state: JobState, now: datetime) -> Saved | None:
        """On a writer thread: persist the state (a failure is logged; the next round retries)."""
        try:
            self.cluster.save_state(job, state=state.to_json())
        except Exception:  # the next round retries; the decision itself already happened
            log.exception("saving the state of %s/%s failed", job.namespace, job.name)
            return None
        return Saved(essence=essence(state), time=now, replicas=state.replicas)


def due_refreshes(
    unchanged: Sequence[tuple[ManagedJob, JobState]],
    *,
    saved_at: Mapping[JobKey, datetime],
    now: datetime,
    period: timedelta,
    limit: int,
) -> list[tuple[ManagedJob, JobState]]:
    """Of the unchanged states, those saved `period` ago or more, the longest ago first, at most
    `limit`. Without the cap every job saved in one round fell due in one round, rewriting
    thousands of annotations in a single round (bench-scale's soak)."""
    due = [(job, done) for job, done in unchanged if now - saved_at[job.key] >= period]
    due.sort(key=lambda entry: saved_at[entry[0].key])
    return due[:limit]


def decided_from(job: ManagedJob, saved: ManagedJob) -> bool:
    """Whether `saved` is still the job a decision about `job` was made for: the same object,
    owner and count (what a write after a 409 compares, too)."""
    return (saved.uid, saved.owner, saved.replicas) == (job.uid, job.owner, job.replicas)


def essence(state: JobState) -> Essence:
    """What of a job's state must reach its annotation at once: what a new engine (after a
    restart or a change of leader) could not rebuild in its first round. That is the cooldown
    and restart budget (`last_rescale`, `rescales`, `restarts_spent`), the count, which counts
    have throughput (the points at counts the job left are frozen since the rescale that left
    them, which saved them), and why the job is held, if it is (the Event already sent; not a
    cooldown, which follows from `last_rescale`). The point at the current count is left out: a
    new engine's first round observes it again (with no reading the job is held anyway). What
    moves every round (that point's time, `accounted_at`, the recommendations, the policy's
    reason and message) reaches the annotation with the next substantive change, or after
    `state_save_seconds`: a policy's reason changing (OptimalAllocation to ScaleDownStabilized)
    rewrote most annotations in a round that changed no count."""
    left = sorted(n for n in state.throughput if n != state.replicas)
    decision = state.last_decision
    held = held_reason(decision.steps) if decision is not None else ""
    return (
        state.replicas,
        state.requested,
        state.last_rescale,
        state.rescales,
        state.restarts_spent,
        state.forced_resume,
        left,
        "" if held in FOLLOWS_A_RESCALE else held,
    )
