"""Every settle step alone, as tables, with time injected."""

from datetime import timedelta

import pytest

from autoscaler.api.ownership import Owner
from autoscaler.engine.config import SettleConfig
from autoscaler.engine.pipeline import settle_job
from autoscaler.engine.ports import ManagedJob
from autoscaler.engine.settle import (
    Settled,
    fit_capacity,
    hold,
    limit_rescales,
    observe,
    remember,
    rescaled,
    usable_reading,
)
from autoscaler.engine.state import JobState, Point, Step
from tests.support.clock import NOW

CONFIG = SettleConfig(
    settle_seconds=60,
    stale_after_seconds=300,
    cooldown_seconds=120,
    scale_down_stabilization_seconds=100,
    scale_up_max_pods=2,
    scale_up_max_percent=50,
    scale_down_max_percent=50,
)


def job(**changes: object) -> ManagedJob:
    fields: dict[str, object] = {
        "namespace": "ns",
        "name": "j",
        "min_replicas": 1,
        "max_replicas": 16,
        "replicas": 4,
        "active": 4,
        "owner": Owner.ENGINE,
        "created": NOW - timedelta(hours=1),
        "resources_per_replica": {"nvidia.com/gpu": 1.0},
    }
    return ManagedJob(**{**fields, **changes})  # type: ignore[arg-type]


def fresh_state(**changes: object) -> JobState:
    point = Point(samples_per_second=100.0, observed_at=NOW - timedelta(seconds=30))
    return JobState(replicas=4, throughput={4: point}).model_copy(update=changes)


def proposal(replicas: int) -> Step:
    return Step(name="policy", replicas=replicas, reason="OptimalAllocation", message="m")


@pytest.mark.parametrize(
    ("value", "usable"),
    [
        (None, None),
        (float("nan"), None),
        (float("inf"), None),
        (-1.0, None),
        (0.0, None),
        (5.0, 5.0),
    ],
)
def test_only_finite_positive_throughput_is_a_reading(
    value: float | None, usable: float | None
) -> None:
    assert usable_reading(value) == usable


SIZED_BEFORE = JobState(replicas=4)  # a state an engine stored on the job


@pytest.mark.parametrize(
    ("the_job", "state", "recorded"),
    [
        (job(state=SIZED_BEFORE.to_json()), SIZED_BEFORE, True),
        (job(), SIZED_BEFORE, False),  # no engine saw it before: a window after it is first seen
        (job(active=3), JobState(replicas=4), False),  # measured at the 3 that run, not at 4
        (job(created=NOW - timedelta(seconds=30)), JobState(), False),  # too young
        (job(), JobState(replicas=4, last_rescale=NOW - timedelta(seconds=30)), False),
        (job(replicas=6, active=6), JobState(replicas=4), False),  # someone else rescaled it
    ],
)
def test_a_reading_is_attributed_to_the_count_only_once_steady(
    the_job: ManagedJob, state: JobState, recorded: bool
) -> None:
    after = observe(the_job, state, reading=50.0, now=NOW, config=CONFIG, window_seconds=WINDOW)
    assert (the_job.replicas in after.throughput) is recorded
    assert after.replicas == the_job.replicas


WINDOW = 20.0


@pytest.mark.parametrize(
    ("world", "seen_ago", "recorded"),
    [
        (4, 30, True),  # the window lies after the world formed
        (4, 20, True),
        (4, 10, False),  # the window reaches back before it: its counters may have stood still
        (None, 3600, False),  # no world until now
        (3, 3600, False),  # another world until now
    ],
)
def test_a_reading_counts_once_its_window_lies_after_the_world_formed(
    world: int | None, seen_ago: int, recorded: bool
) -> None:
    long_ago = NOW - timedelta(hours=1)
    state = JobState(
        replicas=4,
        world=world,
        world_since=NOW - timedelta(seconds=seen_ago),
        reading_since=long_ago,
    )
    after = observe(job(), state, reading=50.0, now=NOW, config=CONFIG, window_seconds=WINDOW)
    assert (4 in after.throughput) is recorded


def test_pods_slow_to_start_are_read_a_window_after_they_run_not_after_the_job_was_made() -> None:
    """A job's pods may start long after it was made: its counters stand still meanwhile, and a
    window reaching back before its first step reads a fraction of the rate."""
    made = NOW - timedelta(seconds=100)
    starting, running = job(created=made, active=0), job(created=made)
    state = observe(
        starting, JobState(), reading=None, now=NOW, config=CONFIG, window_seconds=WINDOW
    )
    assert (state.world, state.world_since) == (None, NOW)  # no engine saw it before: from now
    later = NOW + timedelta(seconds=10)
    state = observe(running, state, reading=20.0, now=later, config=CONFIG, window_seconds=WINDOW)
    assert (state.world, state.world_since, state.throughput) == (4, later, {})
    after_window = later + timedelta(seconds=WINDOW)
    state = observe(
        running, state, reading=50.0, now=after_window, config=CONFIG, window_seconds=WINDOW
    )
    assert state.throughput[4].samples_per_second == 50.0
    assert state.world_since == later


def test_after_a_round_without_a_reading_readings_count_once_a_window_has_passed() -> None:
    """A series that began (or resumed, after an outage) inside a rate window is divided by the
    whole window: the first readings after a gap are too low."""
    state = JobState(replicas=4, reading_since=NOW - timedelta(hours=1))
    gap = observe(job(), state, reading=None, now=NOW, config=CONFIG, window_seconds=WINDOW)
    assert gap.reading_since is None
    rounds = [NOW + timedelta(seconds=seconds) for seconds in (10, 20, 30)]
    seen = [gap]
    for at, value in zip(rounds, (30.0, 45.0, 50.0), strict=True):
        seen.append(
            observe(job(), seen[-1], reading=value, now=at, config=CONFIG, window_seconds=WINDOW)
        )
    assert [after.reading_since for after in seen[1:]] == [rounds[0]] * 3
    assert [4 in after.throughput for after in seen[1:]] == [False, False, True]
    assert seen[-1].throughput[4].samples_per_second == 50.0


def test_a_new_engine_counts_readings_of_a_world_formed_before_it_at_once() -> None:
    """A new leader first seeing a running job an engine sized before (its state stored on it)
    dates its world to the job's creation: it does not wait out a settle window for every job
    of the cluster."""
    stored = JobState(replicas=4)
    sized_before = job(state=stored.to_json())
    after = observe(
        sized_before, stored, reading=50.0, now=NOW, config=CONFIG, window_seconds=WINDOW
    )
    assert after.world_since == NOW - timedelta(hours=1)
    assert after.throughput[4].samples_per_second == 50.0
    assert "world" not in after.to_json()  # this engine's own mark, like the recovery marks


def test_a_job_no_engine_saw_is_read_a_window_after_it_is_first_seen() -> None:
    """A job made a while ago whose workers already run when the engine first sees it (a slow
    first round): the window of its first reading may reach back before its series began, so it
    counts only once a window has passed since."""
    made = NOW - timedelta(seconds=CONFIG.settle_seconds + 1)
    new_job = job(created=made)
    first = observe(
        new_job, JobState(), reading=17.0, now=NOW, config=CONFIG, window_seconds=WINDOW
    )
    assert (first.world_since, first.reading_since, first.throughput) == (NOW, NOW, {})
    later = NOW + timedelta(seconds=WINDOW)
    after = observe(new_job, first, reading=100.0, now=later, config=CONFIG, window_seconds=WINDOW)
    assert after.throughput[4].samples_per_second == 100.0


def test_a_count_changed_by_someone_else_counts_as_a_rescale() -> None:
    after = observe(
        job(replicas=6, active=6), JobState(replicas=4), reading=1.0, now=NOW, config=CONFIG
    )
    assert (after.last_rescale, after.rescales, after.restarts_spent) == (NOW, 1, 1)
    shrunk = observe(
        job(replicas=2, active=2), JobState(replicas=4), reading=1.0, now=NOW, config=CONFIG
    )
    assert (shrunk.rescales, shrunk.restarts_spent) == (1, 1)


@pytest.mark.parametrize(
    ("before", "to", "spent"),
    [(4, 6, 1), (4, 2, 1), (4, 4, 0), (None, 3, 0)],
)
def test_every_resize_counts_as_a_torchrun_restart(before: int | None, to: int, spent: int) -> None:
    """Measured on real torchrun: a scale-down fails every surviving worker once; a scale-up
    re-forms the world through the rendezvous, which torchrun counts when an agent sees a
    worker's crash before the newcomer. The engine counts the most either can spend."""
    state = rescaled(JobState(replicas=before, restarts_spent=1), to=to, now=NOW)
    assert (state.restarts_spent, state.replicas, state.last_rescale) == (1 + spent, to, NOW)


@pytest.mark.parametrize(
    ("the_job", "state", "reading", "reason"),
    [
        (job(), fresh_state(), 100.0, None),
        (job(), fresh_state(), None, "MetricsUnavailable"),
        (job(), JobState(replicas=4), 100.0, "MetricsUnavailable"),
        (
            job(),
            fresh_state(
                throughput={4: Point(samples_per_second=1, observed_at=NOW - timedelta(hours=1))}
            ),
            100.0,
            "MetricsUnavailable",
        ),
        (job(), fresh_state(last_rescale=NOW - timedelta(seconds=60)), 100.0, "RescaleCooldown"),
        (job(max_restarts=3), fresh_state(restarts_spent=3), 100.0, "RestartBudgetExhausted"),
        (job(max_restarts=3), fresh_state(restarts_spent=2, rescales=9), 100.0, None),
        (job(max_restarts=0), fresh_state(), 100.0, "RestartBudgetExhausted"),
        (job(max_restarts=None), fresh_state(restarts_spent=100), 100.0, None),
    ],
)
def test_holds(
    the_job: ManagedJob, state: JobState, reading: float | None, reason: str | None
) -> None:
    held = hold(the_job, state, reading=reading, now=NOW, config=CONFIG)
    assert (held and held.reason) == reason
    if held:
        assert held.replicas == the_job.replicas


def run(the_job: ManagedJob, wish: int, state: JobState | None = None) -> Settled:
    return settle_job(
        the_job, state or fresh_state(), proposal=proposal(wish), held=None, now=NOW, config=CONFIG
    )


@pytest.mark.parametrize(
    ("the_job", "wish", "replicas", "reason"),
    [
        (job(), 4, 4, "OptimalAllocation"),
        (job(), 6, 6, "OptimalAllocation"),
        (job(max_replicas=5), 6, 5, "TooManyReplicas"),
        (job(min_replicas=3), 2, 3, "TooFewReplicas"),
        (job(), 16, 6, "ScaleUpLimited"),  # +max(2 pods, 50 % of 4)
        (job(replicas=10, active=10), 2, 5, "ScaleDownLimited"),  # at most half
        (job(active=3), 6, 4, "PodsPending"),
        (job(gang_waiting=True), 6, 4, "GangPending"),  # its PodGroup is not placed yet
        (job(gang_waiting=True), 3, 3, "OptimalAllocation"),  # shrinking it is not held
        (job(quota_waiting=True, active=3), 6, 4, "QuotaPending"),  # Kueue has not admitted 4
        (job(quota_waiting=True, active=3), 3, 3, "OptimalAllocation"),  # back within quota
        (job(active=3), 2, 2, "OptimalAllocation"),  # scaling down is fine with pods pending
    ],
)
def test_settle_steps(the_job: ManagedJob, wish: int, replicas: int, reason: str) -> None:
    settled = run(the_job, wish)
    assert (settled.replicas, settled.reason) == (replicas, reason)
    assert settled.steps[0] == proposal(wish)


@pytest.mark.parametrize(
    ("the_job", "wish", "replicas", "reason"),
    [
        # Preemptible, never ran, nothing placed: it waits for the policy, which starts it at
        # any size (past the rate limit and its own pods, which wait for that start).
        (job(preemptible=True, replicas=1, active=0), 8, 8, "OptimalAllocation"),
        (job(preemptible=True, replicas=1, active=0, max_replicas=6), 8, 6, "TooManyReplicas"),
        # Not preemptible: today's admission, at its count once its pods run.
        (job(replicas=1, active=0), 8, 1, "PodsPending"),
        # A worker placed, starting: the job has started, and the limits apply.
        (job(preemptible=True, replicas=1, active=0, unready=1), 8, 1, "PodsPending"),
        (job(preemptible=True, replicas=1, active=1), 8, 3, "ScaleUpLimited"),
    ],
)
def test_a_waiting_job_starts_at_the_size_the_policy_chose(
    the_job: ManagedJob, wish: int, replicas: int, reason: str
) -> None:
    settled = run(the_job, wish, JobState(replicas=1))
    assert (settled.replicas, settled.reason) == (replicas, reason)


@pytest.mark.parametrize("slack", [1 - 1e-12, 1.0, 1 + 1e-12])
def test_rate_limits_at_an_exact_share_do_not_hang_on_the_last_bits(slack: float) -> None:
    """75 % of 4 workers is exactly 3 up, 25 % of 8 exactly 2 down, either side of it."""
    config = CONFIG.model_copy(
        update={"scale_up_max_percent": 75 * slack, "scale_down_max_percent": 25 * slack}
    )
    for the_job, wish, replicas in ((job(), 16, 7), (job(replicas=8, active=8), 1, 6)):
        settled = settle_job(
            the_job, fresh_state(), proposal=proposal(wish), held=None, now=NOW, config=config
        )
        assert settled.replicas == replicas


def test_a_held_job_keeps_its_count_whatever_the_policy_wished() -> None:
    held = Step(name="hold", replicas=4, reason="RescaleCooldown", message="m")
    settled = settle_job(
        job(), fresh_state(), proposal=proposal(9), held=held, now=NOW, config=CONFIG
    )
    assert (settled.replicas, settled.reason) == (4, "RescaleCooldown")


def test_scale_down_waits_for_the_highest_recommendation_of_the_window() -> None:
    state = fresh_state()
    for seconds_ago, wish in ((150, 8), (90, 4), (30, 3)):  # 150 s ago is outside the window
        state = remember(
            state, recommendation=wish, now=NOW - timedelta(seconds=seconds_ago), config=CONFIG
        )
    settled = run(job(), 2, state)
    assert (settled.replicas, settled.reason) == (4, "ScaleDownStabilized")
    later = NOW + timedelta(seconds=60)  # the 4 left the window, the 3 is still in it
    state = remember(state, recommendation=2, now=NOW, config=CONFIG)
    settled = settle_job(job(), state, proposal=proposal(2), held=None, now=later, config=CONFIG)
    assert (settled.replicas, settled.reason) == (3, "ScaleDownStabilized")


def test_remember_keeps_only_the_window() -> None:
    state = remember(JobState(), recommendation=5, now=NOW - timedelta(seconds=500), config=CONFIG)
    state = remember(state, recommendation=6, now=NOW, config=CONFIG)
    assert state.recommendations == [(NOW, 6)]


def test_capacity_guard_undoes_the_largest_scale_ups_first() -> None:
    jobs = [
        job(name="a", replicas=2, active=2),
        job(name="b", replicas=2, active=2),
        job(name="c", replicas=4, active=4),
    ]
    wished = {("ns", "a"): 3, ("ns", "b"): 6, ("ns", "c"): 4}  # c's scale-down was held: 13 > 10
    settled = {key: Settled(replicas=n, steps=(proposal(n),)) for key, n in wished.items()}
    result = fit_capacity(jobs, settled, capacity={"nvidia.com/gpu": 10.0})
    assert {key[1]: s.replicas for key, s in result.items()} == {"a": 3, "b": 2, "c": 4}
    assert result[("ns", "b")].reason == "InsufficientCapacity"


def test_capacity_guard_never_blocks_what_already_runs() -> None:
    jobs = [job(name="a", replicas=8, active=8)]
    settled = {("ns", "a"): Settled(replicas=8, steps=(proposal(8),))}
    assert fit_capacity(jobs, settled, capacity={"nvidia.com/gpu": 4.0}) == settled


@pytest.mark.parametrize(
    ("replicas", "active", "running"),
    [
        (4, 4, 4),
        (8, 3, 3),  # five pods cannot be placed: torchrun's world is the three that run
        (8, 0, None),  # not started
        (4, 6, None),  # workers still leaving after a scale-down
    ],
)
def test_a_job_with_pods_that_cannot_be_placed_is_measured_and_sized_at_what_runs(
    replicas: int, active: int, running: int | None
) -> None:
    """Held for want of a reading at a count it could never reach, a job that asked for more
    than fits kept its GPUs and blocked every waiting job (4x the mean JCT of a 60-job Pollux
    workload on 32 GPUs)."""
    pending = job(replicas=replicas, active=active)
    state = JobState(replicas=replicas)
    after = observe(pending, state, reading=50.0, now=NOW, config=CONFIG)
    assert list(after.throughput) == ([] if running is None else [running])
    held = hold(pending, after, reading=50.0, now=NOW, config=CONFIG)
    assert (held is None) is (running is not None)


def test_rescales_beyond_the_round_limit_wait_scale_downs_first_then_the_longest_waiting() -> None:
    jobs = [
        job(name="up-old", replicas=1, active=1, created=NOW - timedelta(hours=3)),
        job(name="up-new", replicas=1, active=1, created=NOW - timedelta(hours=1)),
        job(name="down", replicas=4, active=4, created=NOW - timedelta(minutes=1)),
        job(name="same", replicas=2, active=2),
    ]
    wished = {"up-old": 2, "up-new": 2, "down": 3, "same": 2}
    settled = {("ns", n): Settled(replicas=r, steps=(proposal(r),)) for n, r in wished.items()}
    states = {("ns", "up-new"): JobState(last_rescale=NOW - timedelta(hours=5))}
    result = limit_rescales(jobs, settled, states, limit=2)
    assert {key[1]: s.replicas for key, s in result.items()} == {
        "up-old": 1,  # up-new last rescaled 5 h ago; up-old started 3 h ago
        "up-new": 2,
        "down": 3,
        "same": 2,
    }
    assert result[("ns", "up-old")].reason == "RescalesLimited"
    assert result[("ns", "up-old")].steps[-1].message == (
        "3 jobs would rescale this round: at most 2 do"
    )


@pytest.mark.parametrize("limit", [None, 3, 10])
def test_rescales_within_the_round_limit_all_go(limit: int | None) -> None:
    jobs = [job(name=n, replicas=1, active=1) for n in "abc"]
    settled = {("ns", n): Settled(replicas=2, steps=(proposal(2),)) for n in "abc"}
    assert limit_rescales(jobs, settled, {}, limit=limit) == settled
