"""From a policy's wish to the count written: pure steps, each with a CamelCase reason.

observe: record the round's throughput reading (`observe`), decide whether the job is held
(`hold`: recovering, no data, cooling down, restart budget spent). The steps a proposal then
goes through: `clamp`, `stabilise`, `rate_limit`, `allowed_count` and `pending` for one job,
`limit_rescales` and `fit_capacity` across jobs; their order is `pipeline.settle_round`'s alone.
"""

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from autoscaler.engine.config import SettleConfig
from autoscaler.engine.ports import JobKey, ManagedJob
from autoscaler.engine.recovery import first_seen, formed, recover, recovering, running_count
from autoscaler.engine.state import JobState, Point, Step, StepName
from autoscaler.engine.waiting import waiting
from autoscaler.policies.rounding import ceil_count, floor_count

# Hold reasons other modules tell apart.
METRICS_UNAVAILABLE = "MetricsUnavailable"  # no reading, or none recent at the job's count
RESCALE_COOLDOWN = "RescaleCooldown"  # rescaled (or held back) less than the cooldown ago


def observe(
    job: ManagedJob,
    state: JobState,
    *,
    reading: float | None,
    now: datetime,
    config: SettleConfig,
    samples_done: float | None = None,
    efficiency: float = 1.0,
    window_seconds: float = 0.0,
) -> JobState:
    """The state with this round's reading, attributed to the count only once the job is steady:
    `settle_seconds` after its start, its last rescale and its last recovery (see `recover`), and
    `window_seconds` (how far back a reading reaches) after its world formed at the count it runs
    (see `formed`) and after its readings resumed from a round without one: a window reaching
    back before either holds counters that stood still or a series that began inside it;
    `samples_done`: the progress the job reported, if it did; `efficiency`: the statistical
    efficiency of the batch it ran at since the last round (1 unless it is sized by goodput)."""
    if state.replicas is not None and state.replicas != job.replicas:  # someone else rescaled it
        state = rescaled(state, to=job.replicas, now=now)
    state = recover(job, state, samples_done=samples_done, now=now, config=config)
    requested = state.requested if state.requested is not None else job.replicas
    update: dict[str, object] = {"replicas": job.replicas, "requested": requested}
    update |= accounted(
        job, state, reading, samples_done=samples_done, efficiency=efficiency, now=now
    )
    update["world"], update["world_since"] = running, world_since = formed(job, state, now=now)
    update["reading_since"] = reading_since = readings_since(job, state, reading, now=now)
    settled_since = max(
        job.created, state.last_rescale or job.created, state.disturbed_at or job.created
    )
    window = timedelta(seconds=window_seconds)
    steady = (
        reading_since is not None
        and now - settled_since >= timedelta(seconds=config.settle_seconds)
        and now - max(world_since, reading_since) >= window
    )
    if reading is not None and running is not None and steady:
        point = Point(samples_per_second=reading, observed_at=now)
        update["throughput"] = {**state.throughput, running: point}
    return state.model_copy(update=update)  # one copy: 5,000 jobs are observed every round


def readings_since(
    job: ManagedJob, state: JobState, reading: float | None, *, now: datetime
) -> datetime | None:
    """Since when every round had a reading (None: this one has none); when this engine first
    sees the job, as its world (see `first_seen`)."""
    if reading is None:
        return None
    if state.world_since is None:
        return first_seen(job, now=now)
    return state.reading_since or now


def accounted(
    job: ManagedJob,
    state: JobState,
    reading: float | None,
    *,
    samples_done: float | None,
    now: datetime,
    efficiency: float = 1.0,
) -> dict[str, float | datetime]:
    """The accounting fields after the time since the last round: worker-seconds at today's
    count, and samples: the progress the job reported, else this round's throughput (a window
    average, so a restart's stall is in it; no reading adds nothing) times the time, in the unit
    its work is counted in (samples at its base batch for a goodput job: times `efficiency`)."""
    seconds = 0.0 if state.accounted_at is None else (now - state.accounted_at).total_seconds()
    seconds = max(0.0, seconds)
    done = state.samples_done + (reading or 0.0) * efficiency * seconds
    return {
        "samples_done": samples_done if samples_done is not None else done,
        "attained_seconds": state.attained_seconds + job.active * seconds,
        "accounted_at": now,
    }


def rescaled(state: JobState, *, to: int, now: datetime) -> JobState:
    """The state after the job's count changed to `to` (by the engine or anyone else). Each
    rescale of a running job counts as one torchrun restart, the most it can spend: a scale-down
    fails the survivors' workers, and a scale-up does when an agent sees a worker crash on the
    re-forming world before the newcomer (the e2e restart-budget scenario measures both)."""
    resized = state.replicas is not None and to != state.replicas
    return state.model_copy(
        update={
            "last_rescale": now,
            "rescales": state.rescales + 1,
            "restarts_spent": state.restarts_spent + resized,
            "replicas": to,
        }
    )


def current(job: ManagedJob) -> int:
    """The workers the job has now: none while the engine holds it back (its spec keeps the
    count it ran at), else its spec."""
    return 0 if job.held_back else job.replicas


def restarts_left(job: ManagedJob, state: JobState) -> int | None:
    """torchrun restarts left to each worker (None: unlimited), by what rescales have spent."""
    return None if job.max_restarts is None else job.max_restarts - state.restarts_spent


def usable_reading(value: float | None) -> float | None:
    """NaN, infinite, zero or negative throughput is no reading at all."""
    if value is None or not math.isfinite(value) or value <= 0:
        return None
    return value


def hold(
    job: ManagedJob,
    state: JobState,
    *,
    reading: float | None,
    now: datetime,
    config: SettleConfig,
    failure: str = "",
) -> Step | None:
    """Why the job must keep its count this round, if it must; `failure`: why its throughput
    query failed, when it did."""
    recovery = recovering(job, state, now=now, config=config)
    if recovery is not None:
        return recovery
    running = running_count(job) or job.replicas
    point = state.throughput.get(running)
    if reading is None:
        why = f"the throughput query failed ({failure})" if failure else "no throughput reading"
        return _held(job, METRICS_UNAVAILABLE, f"{why} this round: never scale on no data")
    if point is None or now - point.observed_at > timedelta(seconds=config.stale_after_seconds):
        return _held(job, METRICS_UNAVAILABLE, f"no recent throughput at {running} workers yet")
    if state.last_rescale is not None and now - state.last_rescale < timedelta(
        seconds=config.cooldown_seconds
    ):
        return _held(job, RESCALE_COOLDOWN, f"rescaled less than {config.cooldown_seconds:g} s ago")
    left = restarts_left(job, state)
    if left is not None and left < 1:
        return _held(job, "RestartBudgetExhausted", _budget_spent(job.max_restarts or 0))
    return None


def _budget_spent(max_restarts: int) -> str:
    """Why no rescale is safe: with no torchrun restart left, a scale-down fails every worker,
    and so may a scale-up (when a worker's crash on the re-forming world is seen first)."""
    if max_restarts == 0:
        spent = "no torchrun restarts to spend (maxRestarts unset or 0)"
    else:
        spent = f"all {max_restarts} torchrun restarts spent on rescales (one each at most)"
    return f"{spent}: a rescale could fail every worker"


def _held(job: ManagedJob, reason: str, message: str) -> Step:
    return Step(name=StepName.HOLD, replicas=job.replicas, reason=reason, message=message)


@dataclass(frozen=True)
class Settled:
    replicas: int
    steps: tuple[Step, ...]

    @property
    def reason(self) -> str:
        return self.steps[-1].reason


def clamp(
    job: ManagedJob, _: JobState, replicas: int, *, now: datetime, config: SettleConfig
) -> Step | None:
    """Within the job's minimum and maximum."""
    if replicas > job.max_replicas:
        return Step(
            name=StepName.CLAMP,
            replicas=job.max_replicas,
            reason="TooManyReplicas",
            message=f"the job's maximum is {job.max_replicas}",
        )
    if replicas < job.min_replicas:
        return Step(
            name=StepName.CLAMP,
            replicas=job.min_replicas,
            reason="TooFewReplicas",
            message=f"the job's minimum is {job.min_replicas}",
        )
    return None


def stabilise(
    job: ManagedJob, state: JobState, replicas: int, *, now: datetime, config: SettleConfig
) -> Step | None:
    """Scale down only as far as the highest recommendation of the window (the HPA's rule)."""
    if replicas >= job.replicas:
        return None
    window = timedelta(seconds=config.scale_down_stabilization_seconds)
    recent = [count for at, count in state.recommendations if now - at <= window]
    stable = min(job.replicas, max([replicas, *recent]))
    if stable == replicas:
        return None
    message = f"recommended {stable} within the last {config.scale_down_stabilization_seconds:g} s"
    return Step(
        name=StepName.STABILISE, replicas=stable, reason="ScaleDownStabilized", message=message
    )


def starting(job: ManagedJob, state: JobState) -> bool:
    """A waiting job none of whose workers runs: its start, at any size, stops nobody."""
    return waiting(job, state) and job.active == 0


def rate_limit(
    job: ManagedJob, state: JobState, replicas: int, *, now: datetime, config: SettleConfig
) -> Step | None:
    """At most so many workers more or fewer than now per decision (a waiting job starts at any
    size)."""
    current = job.replicas
    up = current + max(
        config.scale_up_max_pods, ceil_count(current * config.scale_up_max_percent / 100)
    )
    down = current - max(1, floor_count(current * config.scale_down_max_percent / 100))
    if replicas > up and not starting(job, state):
        return Step(
            name=StepName.RATE_LIMIT,
            replicas=up,
            reason="ScaleUpLimited",
            message=f"at most {up - current} more workers per decision",
        )
    if replicas < down:
        return Step(
            name=StepName.RATE_LIMIT,
            replicas=down,
            reason="ScaleDownLimited",
            message=f"at most {current - down} fewer workers per decision",
        )
    return None


def allowed_count(
    job: ManagedJob, _: JobState, replicas: int, *, now: datetime, config: SettleConfig
) -> Step | None:
    """An allowed count between the current one and the wish, nearest the wish (so a rate limit
    is never overstepped); the current count when there is none."""
    allowed = job.allowed_replicas
    if allowed is None or replicas in allowed or replicas == job.replicas:
        return None
    low, high = sorted((job.replicas, replicas))
    between = [count for count in allowed if low <= count <= high]
    count = (max if replicas > job.replicas else min)(between, default=job.replicas)
    message = f"the job runs only at {', '.join(map(str, allowed))} workers"
    return Step(name=StepName.ALLOWED, replicas=count, reason="NotAllowedCount", message=message)


def pending(
    job: ManagedJob, state: JobState, replicas: int, *, now: datetime, config: SettleConfig
) -> Step | None:
    """No scale-up while the job's pods, its gang or its quota wait (a waiting job's pods wait
    for its start: the policy may start it larger)."""
    if replicas > job.replicas and job.gang_waiting:
        message = "its gang (PodGroup) is not placed yet: no scale-up until it is"
        return Step(
            name=StepName.PENDING, replicas=job.replicas, reason="GangPending", message=message
        )
    if replicas > job.replicas and job.quota_waiting:
        message = "a scale-up waits for Kueue to admit its Workload slice: no further one till then"
        return Step(
            name=StepName.PENDING, replicas=job.replicas, reason="QuotaPending", message=message
        )
    if replicas > job.replicas and job.active < job.replicas and not starting(job, state):
        message = f"only {job.active} of {job.replicas} workers run: no scale-up until they do"
        return Step(
            name=StepName.PENDING, replicas=job.replicas, reason="PodsPending", message=message
        )
    return None


def recommendations(
    state: JobState, *, recommendation: int, now: datetime, config: SettleConfig
) -> list[tuple[datetime, int]]:
    """The recommendations the stabilisation window keeps, this round's last."""
    window = timedelta(seconds=config.scale_down_stabilization_seconds)
    recent = [(at, count) for at, count in state.recommendations if now - at <= window]
    return [*recent, (now, recommendation)]


def remember(
    state: JobState, *, recommendation: int, now: datetime, config: SettleConfig
) -> JobState:
    """Keep this round's recommendation for the stabilisation window."""
    kept = recommendations(state, recommendation=recommendation, now=now, config=config)
    return state.model_copy(update={"recommendations": kept})


def limit_rescales(
    jobs: Sequence[ManagedJob],
    settled: Mapping[JobKey, Settled],
    states: Mapping[JobKey, JobState],
    *,
    limit: int | None,
) -> dict[JobKey, Settled]:
    """At most `limit` rescales a round; the rest keep their counts until a later round.
    Scale-downs go first (they make the room other jobs wait for), then the jobs whose last
    rescale (or start) is oldest. A resume the starvation bound forces is never deferred: it
    takes its place first, and goes even past the limit. `settle_round` runs it before
    `fit_capacity`, so a scale-up that counted on a deferred scale-down is undone there.

    Why a limit: every rescale restarts a training world, and costs the round 3-4 requests; a
    round that rescales thousands of jobs at once writes for minutes, deciding nothing for any job
    meanwhile (`make bench-scale`), and a policy that flips every count would restart every job
    of the cluster at once. The default, 50 a round
    of 30 s, is about 6 writes a second, near client-go's default client rate (5 a second)."""
    changing = [job for job in jobs if settled[job.key].replicas != current(job)]
    if limit is None or len(changing) <= limit:
        return dict(settled)

    def turn(job: ManagedJob) -> tuple[bool, bool, datetime, JobKey]:
        last = states[job.key].last_rescale if job.key in states else None
        growing = settled[job.key].replicas > current(job)
        return not forced(settled[job.key]), growing, last or job.created, job.key

    message = f"{len(changing)} jobs would rescale this round: at most {limit} do"
    result = dict(settled)
    for job in sorted(changing, key=turn)[limit:]:
        if forced(settled[job.key]):
            continue  # more forced resumes than the limit: all of them go
        step = Step(
            name=StepName.LIMIT, replicas=current(job), reason="RescalesLimited", message=message
        )
        result[job.key] = Settled(replicas=current(job), steps=(*settled[job.key].steps, step))
    return result


def forced(settled: Settled) -> bool:
    """Whether the starvation bound forces this count (a resume no later step may undo)."""
    return settled.steps[-1].name == StepName.STARVATION


def fit_capacity(
    jobs: Sequence[ManagedJob],
    settled: Mapping[JobKey, Settled],
    *,
    capacity: Mapping[str, float],
) -> dict[JobKey, Settled]:
    """Undo scale-ups and resumes, largest first, while the result needs more than there is (or
    than now); a resume the starvation bound forces is never undone."""
    result = dict(settled)
    now = requested(jobs, {job.key: current(job) for job in jobs}, capacity=capacity)
    wanted = requested(jobs, {key: one.replicas for key, one in result.items()}, capacity=capacity)
    growing = sorted(
        (
            job
            for job in jobs
            if result[job.key].replicas > current(job) and not forced(result[job.key])
        ),
        key=lambda job: -_extra(job, result[job.key].replicas),
    )
    for job in growing:
        if all(wanted[r] <= limit + 1e-9 or wanted[r] <= now[r] for r, limit in capacity.items()):
            break
        for resource in capacity:
            size = job.resources_per_replica.get(resource, 0.0)
            wanted[resource] -= (result[job.key].replicas - current(job)) * size
        step = Step(
            name=StepName.CAPACITY,
            replicas=current(job),
            reason="InsufficientCapacity",
            message="the other jobs' counts leave no room to grow",
        )
        result[job.key] = Settled(replicas=current(job), steps=(*result[job.key].steps, step))
    return result


def _extra(job: ManagedJob, replicas: int) -> float:
    return sum(size * (replicas - current(job)) for size in job.resources_per_replica.values())


def requested(
    jobs: Sequence[ManagedJob], counts: Mapping[JobKey, int], *, capacity: Mapping[str, float]
) -> dict[str, float]:
    """What the jobs at these counts request, per resource of the capacity."""
    return {
        resource: sum(
            counts[job.key] * job.resources_per_replica.get(resource, 0.0) for job in jobs
        )
        for resource in capacity
    }
