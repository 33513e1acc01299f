"""A job whose world is re-forming or stalled (pure): its readings are no curve point and no
reason to resize it.

A lost node, a crashed container or a re-forming world shows in what the engine observes before
the throughput reading says anything clear: worker pods placed on nodes but not Ready, container
restarts, progress that stops advancing. While any shows, and for `settle_seconds` after (the
rate window still holds the stall), the job is held at its count (`Recovering`) and its readings
are not recorded. Unready pods or stalled progress within `settle_seconds` of the job's start or
last rescale are that rescale's own re-forming, whose readings the settle window ignores already;
a container restart there is a fault (a rescale restarts none), and its hold outlasts the window.
"""

from datetime import datetime, timedelta

from autoscaler.engine.config import SettleConfig
from autoscaler.engine.ports import ManagedJob
from autoscaler.engine.state import JobState, Step, StepName

RECOVERING = "Recovering"


def running_count(job: ManagedJob) -> int | None:
    """The count the job trains at: its spec, or fewer while some of its pods cannot be placed
    (torchrun's world is the workers that run); None while it is not at either (starting,
    below its minimum, workers still leaving, or its gang waiting to be placed: then what
    runs is not a stable world, e.g. a Master without the rest of its gang)."""
    if job.gang_waiting:
        return None
    if job.active == job.replicas:
        return job.replicas
    return job.active if job.min_replicas <= job.active < job.replicas else None


def formed(job: ManagedJob, state: JobState, *, now: datetime) -> tuple[int | None, datetime]:
    """The world the job runs now (its running count) and since when: now when the count
    changed; when this engine first sees it, see `first_seen`."""
    running = running_count(job)
    if state.world_since is None:
        return running, first_seen(job, now=now)
    if running != state.world:
        return running, now
    return running, state.world_since


def first_seen(job: ManagedJob, *, now: datetime) -> datetime:
    """Since when a job this engine sees for the first time has run as it runs now: its
    creation when an engine has sized it before (its state is stored on it), so that a new leader
    does not wait out a window for worlds long formed; else now, since a new job's pods may have
    started well after its creation (a slow first round, pods slow to start)."""
    return job.created if job.state else now


def rescaling(job: ManagedJob, state: JobState, *, now: datetime, config: SettleConfig) -> bool:
    """Whether the job is within `settle_seconds` of its start or its last rescale."""
    since = max(job.created, state.last_rescale or job.created)
    return now - since < timedelta(seconds=config.settle_seconds)


def recover(
    job: ManagedJob,
    state: JobState,
    *,
    samples_done: float | None,
    now: datetime,
    config: SettleConfig,
) -> JobState:
    """The state with this round's health: the restarts and progress seen, and the disturbance
    (dated now), if there is one."""
    cause = disturbance(job, state, samples_done=samples_done, now=now, config=config)
    update: dict[str, object] = {"restarts_seen": job.restarts, "disturbance": cause}
    if samples_done is not None and samples_done != state.progress_samples:
        update |= {"progress_samples": samples_done, "progressed_at": now}
    if cause:
        update["disturbed_at"] = now
    return state.model_copy(update=update)


def disturbance(
    job: ManagedJob,
    state: JobState,
    *,
    samples_done: float | None,
    now: datetime,
    config: SettleConfig,
) -> str:
    """Why the job's world is not whole this round, "" when it is, is held back, or is still
    re-forming after its start or last rescale with no container restarted."""
    if job.held_back:
        return ""
    more = job.restarts - state.restarts_seen if state.restarts_seen is not None else 0
    restarted = f"its workers' containers restarted ({more} more)" if more > 0 else ""
    if rescaling(job, state, now=now, config=config):
        return restarted  # a rescale restarts no container: a fault, seen past the settle window
    if job.unready:
        placed = (
            "worker pod placed on a node is"
            if job.unready == 1
            else "worker pods placed on nodes are"
        )
        return f"{job.unready} {placed} not ready"
    if restarted:
        return restarted
    if stalled(job, state, samples_done=samples_done, now=now, config=config):
        return f"its reported progress has not advanced for {config.stall_seconds:g} s"
    return ""


def stalled(
    job: ManagedJob,
    state: JobState,
    *,
    samples_done: float | None,
    now: datetime,
    config: SettleConfig,
) -> bool:
    """Whether the job runs a world but its reported progress stayed where it was for
    `stall_seconds` or longer."""
    if samples_done is None or state.progressed_at is None or running_count(job) is None:
        return False
    still = samples_done == state.progress_samples
    return still and now - state.progressed_at >= timedelta(seconds=config.stall_seconds)


def recovering(
    job: ManagedJob, state: JobState, *, now: datetime, config: SettleConfig
) -> Step | None:
    """The hold of a job that is recovering, or whose readings still hold its recovery."""
    if state.disturbance:
        message = f"{state.disturbance}: no reading counts and no count changes until it is whole"
    elif state.disturbed_at is not None and now - state.disturbed_at < timedelta(
        seconds=config.settle_seconds
    ):
        message = (
            f"its world is whole again: readings count {config.settle_seconds:g} s after it was"
            " last seen recovering"
        )
    else:
        return None
    return Step(name=StepName.HOLD, replicas=job.replicas, reason=RECOVERING, message=message)
