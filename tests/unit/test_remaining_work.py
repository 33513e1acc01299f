"""Remaining work and allowed counts: from the annotations and gauges to every policy's counts."""

import itertools
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from prometheus_client import generate_latest

from autoscaler.clients.jobs import managed_job
from autoscaler.clients.prometheus import progress_by_job
from autoscaler.engine.config import SettleConfig
from autoscaler.engine.engine import Engine
from autoscaler.engine.pipeline import settle_job
from autoscaler.engine.ports import ManagedJob, Progress
from autoscaler.engine.settle import accounted
from autoscaler.engine.snapshot import job_snapshot
from autoscaler.engine.state import JobState, Step
from autoscaler.policies.contract import JobSnapshot, Snapshot
from autoscaler.policies.global_optimizer import GlobalOptimizer, GlobalOptimizerConfig
from autoscaler.policies.speedup import MIN_ESTIMATED_WORKER_SECONDS, job_curve, remaining_samples
from autoscaler.policies.throughput_model import ThroughputModel, curve
from autoscaler.training import ThroughputReporter
from tests.support.memory_cluster import CurveThroughput, MemoryCluster
from tests.unit.test_engine import CONFIG
from tests.unit.test_policies import GPU, decide, job, table

NOW = datetime(2026, 11, 30, tzinfo=UTC)
TOTAL = "elastic-autoscaler.io/total-samples"
ALLOWED = "elastic-autoscaler.io/allowed-replicas"


def pytorchjob(annotations: dict[str, str], *, low: int = 1, high: int = 8) -> ManagedJob:
    found = managed_job(
        {
            "metadata": {
                "name": "j",
                "namespace": "n",
                "creationTimestamp": "2026-11-30T00:00:00Z",
                "annotations": annotations,
            },
            "spec": {
                "elasticPolicy": {"minReplicas": low, "maxReplicas": high, "maxRestarts": 3},
                "pytorchReplicaSpecs": {"Worker": {"replicas": 2}},
            },
        }
    )
    assert found is not None
    return found


@pytest.mark.parametrize(
    ("annotations", "total", "allowed", "problem"),
    [
        ({}, None, None, ""),
        ({TOTAL: "1.5e6"}, 1.5e6, None, ""),
        ({TOTAL: "-3"}, None, None, "'-3' is not a positive number"),
        ({TOTAL: "0"}, None, None, "'0' is not a positive number"),
        ({TOTAL: "nan"}, None, None, "'nan' is not a positive number"),
        ({TOTAL: "lots"}, None, None, "'lots' is not a positive number"),
        ({ALLOWED: "8, 2,4,2"}, None, (2, 4, 8), ""),
        ({ALLOWED: "powers-of-two"}, None, (1, 2, 4, 8), ""),
        ({ALLOWED: "1,x"}, None, None, "'1,x' is neither a comma-separated list"),
        ({ALLOWED: "-1,2"}, None, None, "'-1,2' is neither a comma-separated list"),
        ({ALLOWED: "2,16"}, None, None, "'2,16': [16] outside the job's [1, 8]"),
        ({ALLOWED: ""}, None, None, "'' is neither a comma-separated list"),
    ],
)
def test_annotations_are_read_or_ignored_with_the_reason(
    annotations: dict[str, str], total: float | None, allowed: Any, problem: str
) -> None:
    found = pytorchjob(annotations)
    assert (found.total_samples, found.allowed_replicas) == (total, allowed)
    assert (problem in found.problems[0]) if problem else found.problems == ()


QUERY = "elastic-autoscaler.io/throughput-query"
OWN = 'sum(rate(my_images_total{{kubernetes_namespace="{namespace}", job="{name}"}}[{window}]))'


@pytest.mark.parametrize("text", [OWN, "vector(1e9)", "   "])
def test_a_job_may_declare_its_own_throughput_query(text: str) -> None:
    """Read as written: the engine judges it (tests/unit/test_throughput_query.py)."""
    found = pytorchjob({QUERY: text})
    assert (found.throughput_query, found.problems) == (text, ())


def test_no_power_of_two_within_the_bounds_is_a_problem() -> None:
    found = pytorchjob({ALLOWED: "powers-of-two"}, low=5, high=7)
    assert found.allowed_replicas is None
    assert "no power of two lies in [5, 7]" in found.problems[0]


def test_invalid_annotations_warn_once_and_the_job_is_still_sized() -> None:
    bad = replace(pytorchjob({TOTAL: "-3", ALLOWED: "1,x"}), active=2)
    cluster = MemoryCluster({bad.key: bad})
    engine = Engine(
        cluster=cluster,
        throughput=CurveThroughput(cluster, {"j": lambda n: 100.0 * n}),
        policy=GlobalOptimizer(GlobalOptimizerConfig(restart_seconds=0)),
        policy_name="p",
        config=CONFIG,
    )
    for second in (0, 30, 60):
        engine.run_once(now=NOW + timedelta(seconds=second))
    warnings = [reason for _, reason, warning in cluster.events if warning]
    assert warnings.count("InvalidAnnotation") == 1
    message = next(m for name, m in cluster.messages if "total-samples" in m)
    assert "'-3' is not a positive number" in message
    assert "'1,x'" in message
    assert cluster.jobs()[0].replicas == 8  # sized as if the annotations were absent


def account(job: ManagedJob, state: JobState, reading: float | None, **when: Any) -> JobState:
    return state.model_copy(update=accounted(job, state, reading, **when))


def test_samples_and_worker_seconds_accumulate_between_rounds() -> None:
    running = replace(pytorchjob({}), active=2)
    first = account(running, JobState(), 100.0, samples_done=None, now=NOW)
    assert (first.samples_done, first.attained_seconds) == (0.0, 0.0)  # nothing before the first
    later = NOW + timedelta(seconds=30)
    second = account(running, first, 100.0, samples_done=None, now=later)
    assert (second.samples_done, second.attained_seconds) == (3000.0, 60.0)
    silent = account(running, second, None, samples_done=None, now=later + timedelta(seconds=30))
    assert (silent.samples_done, silent.attained_seconds) == (3000.0, 120.0)
    reported = account(running, silent, 100.0, samples_done=1234.0, now=later)
    assert reported.samples_done == 1234.0  # what the job reports wins over the estimate


@pytest.mark.parametrize(
    ("efficiency", "reported", "done"),
    [
        (1.0, None, 3000.0),  # a job sized by throughput: samples are samples
        (0.25, None, 750.0),  # a goodput job without progress gauges: samples at its base batch
        (0.25, 1234.0, 1234.0),  # what the job reports wins, already in its unit
    ],
)
def test_unreported_progress_of_a_goodput_job_counts_at_its_efficiency(
    efficiency: float, reported: float | None, done: float
) -> None:
    running = replace(pytorchjob({}), active=2)
    first = account(running, JobState(), 100.0, samples_done=None, now=NOW)
    later = NOW + timedelta(seconds=30)
    second = account(running, first, 100.0, samples_done=reported, efficiency=efficiency, now=later)
    assert second.samples_done == done


def test_the_snapshot_carries_remaining_work_and_attained_service() -> None:
    declared = replace(pytorchjob({TOTAL: "5000"}), active=2)
    state = JobState(samples_done=3000.0, attained_seconds=60.0)
    seen = job_snapshot(declared, state, now=NOW)
    assert (seen.remaining_samples, seen.attained_seconds) == (2000.0, 60.0)
    overdone = job_snapshot(declared, state.model_copy(update={"samples_done": 9e9}), now=NOW)
    assert overdone.remaining_samples == 0.0
    assert job_snapshot(pytorchjob({}), state, now=NOW).remaining_samples is None


def test_unknown_work_is_estimated_from_the_service_attained() -> None:
    linear = table("linear")
    young = job("a", replicas=4, throughput=linear)
    old = job("a", replicas=4, throughput=linear, attained_seconds=10_000.0)
    per_worker = 100.0
    model = ThroughputModel()
    assert remaining_samples(young, job_curve(young, model=model)) == pytest.approx(
        MIN_ESTIMATED_WORKER_SECONDS * per_worker
    )
    assert remaining_samples(old, job_curve(old, model=model)) == pytest.approx(10_000 * 100.0)
    declared = job("a", throughput=linear, remaining_samples=42.0)
    assert remaining_samples(declared, job_curve(declared, model=model)) == 42.0


def test_the_job_with_less_work_left_gets_more_workers() -> None:
    jobs = [
        job("short", throughput=table("sqrt"), remaining_samples=1e6),
        job("long", throughput=table("sqrt"), remaining_samples=1e8),
    ]
    decided = decide("global-optimizer", Snapshot(capacity={GPU: 8}, jobs=jobs))
    assert decided["short"][0] > decided["long"][0] >= 1
    # size-blind (p = 0 and unranked: proportional fairness on speedups) splits them evenly
    blind = {"kind": "completion-time", "exponent": 0, "rank_exponent": 0}
    even = decide("global-optimizer", Snapshot(capacity={GPU: 8}, jobs=jobs), objective=blind)
    assert even["short"][0] == even["long"][0] == 4


@pytest.mark.parametrize(
    ("remaining", "replicas"),
    [
        (1e3, 2),  # 10 s left at 2 workers: a 30 s restart never pays for itself
        (1e6, 8),  # hours left: the restart is a small share of the time saved
    ],
)
def test_a_rescale_is_priced_in_time(remaining: float, replicas: int) -> None:
    jobs = [job("a", replicas=2, throughput=table("linear"), remaining_samples=remaining)]
    decided = decide("global-optimizer", Snapshot(capacity={GPU: 8}, jobs=jobs))
    assert decided["a"][0] == replicas


def test_optimus_shortens_the_longest_remaining_time_first() -> None:
    jobs = [
        job("short", replicas=1, throughput=table("sqrt"), remaining_samples=1e4),
        job("long", replicas=1, throughput=table("sqrt"), remaining_samples=1e6),
    ]
    decided = decide("optimus", Snapshot(capacity={GPU: 8}, jobs=jobs))
    assert decided["long"] == (7, "RemainingTimeGain")
    assert decided["short"][0] == 1


def test_least_attained_service_serves_the_least_attained_service_first_at_requested_sizes() -> (
    None
):
    jobs = [
        job("new", replicas=1, requested_replicas=6, attained_seconds=0.0),
        job("old", replicas=6, requested_replicas=6, attained_seconds=5000.0),
        job("older", replicas=4, attained_seconds=9000.0),  # not known: its count stands in
    ]
    decided = decide("least-attained-service", Snapshot(capacity={GPU: 11}, jobs=jobs))
    assert decided == {
        "new": (6, "LeastAttainedService"),
        "old": (1, "MoreAttainedService"),  # 5 more do not fit in the 3 left
        "older": (4, "LeastAttainedService"),  # 3 more do
    }


POWERS = (1, 2, 4, 8)


@pytest.mark.parametrize(
    ("policy", "config"),
    [
        ("global-optimizer", {}),
        ("speedup-optimizer", {"restart_seconds": 0}),
        ("optimus", {}),
        ("speedup-greedy", {}),
        ("equal-share", {}),
        ("least-attained-service", {}),
        ("static", {}),
        ("hpa-like", {}),
        ("afs-l", {}),
        ("afs-p", {}),
        ("hesrpt", {}),
    ],
)
def test_every_policy_keeps_to_the_allowed_counts(policy: str, config: dict[str, Any]) -> None:
    jobs = [
        job("a", replicas=3, throughput=table("linear"), allowed_replicas=POWERS,
            remaining_samples=1e6),
        job("b", replicas=2, throughput=table("sqrt"), allowed_replicas=(2, 6),
            remaining_samples=1e6),
    ]  # fmt: skip
    decided = decide(policy, Snapshot(capacity={GPU: 11}, jobs=jobs), **config)
    assert decided["a"][0] in POWERS
    assert decided["b"][0] in (2, 6)
    assert decided["a"][0] + decided["b"][0] <= 11 or policy in ("static", "hpa-like")


def test_the_optimizer_stays_exact_with_allowed_counts() -> None:
    """Four jobs, every combination of allowed counts checked by brute force."""
    curves = [table("linear"), table("sqrt"), table("cliff"), table("flat")]
    allowed = [POWERS, (1, 3, 5, 7), (2, 4, 6, 8), POWERS]
    jobs = [
        job(f"j{i}", replicas=allowed[i][0], throughput=curves[i], allowed_replicas=allowed[i],
            remaining_samples=1e5 * (i + 1))
        for i in range(4)
    ]  # fmt: skip
    optimizer = GlobalOptimizer(GlobalOptimizerConfig(restart_seconds=0))
    snapshot = Snapshot(capacity={GPU: 14}, jobs=jobs)
    chosen = {d.name: d.replicas for d in optimizer.decide(snapshot, now=NOW)}
    rows = optimizer._all_values(jobs, [job_curve(j, model=optimizer.config.model) for j in jobs])
    best = max(
        (combo for combo in itertools.product(*allowed) if sum(combo) <= 14),
        key=lambda combo: sum(rows[i][n - 1] for i, n in enumerate(combo)),
    )
    assert tuple(chosen[f"j{i}"] for i in range(4)) == best


def managed(replicas: int, allowed: tuple[int, ...]) -> ManagedJob:
    base = pytorchjob({}, high=16)
    return replace(base, replicas=replicas, active=replicas, allowed_replicas=allowed)


@pytest.mark.parametrize(
    ("replicas", "wish", "settled", "reason"),
    [
        (4, 8, 8, "OptimalAllocation"),
        (4, 7, 4, "NotAllowedCount"),  # nothing allowed in 5..7: stay
        (2, 7, 4, "NotAllowedCount"),  # the allowed count nearest the wish, on the way
        (2, 16, 4, "NotAllowedCount"),  # rate-limited to 6 (2 + 4), then 4
        (8, 1, 4, "ScaleDownLimited"),  # rate-limited to 4 (half), which is allowed
        (8, 5, 8, "NotAllowedCount"),  # nothing allowed in 5..7 either
        (3, 3, 3, "OptimalAllocation"),  # a count set by someone else is not moved for itself
    ],
)
def test_settle_keeps_to_the_allowed_counts_and_the_rate_limits(
    replicas: int, wish: int, settled: int, reason: str
) -> None:
    proposal = Step(name="policy", replicas=wish, reason="OptimalAllocation", message="")
    config = SettleConfig(scale_down_stabilization_seconds=0)
    result = settle_job(
        managed(replicas, (1, 2, 4, 8, 16)),
        JobState(),
        proposal=proposal,
        held=None,
        now=NOW,
        config=config,
    )
    assert (result.replicas, result.reason) == (settled, reason)


def test_a_snapshot_rejects_allowed_counts_outside_the_bounds() -> None:
    with pytest.raises(ValueError, match="allowed_replicas"):
        JobSnapshot(namespace="n", name="j", min_replicas=2, max_replicas=4, replicas=2,
                    allowed_replicas=(1, 2))  # fmt: skip


def test_optimistic_extrapolation_carries_the_last_slope_on() -> None:
    points = {1: 100.0, 2: 180.0, 4: 300.0}  # the fit bends down past 4
    model = ThroughputModel(exploration_factor=2.0, extrapolation="optimistic")
    values = curve(points=points, ages={}, low=1, high=10, model=model)
    assert list(values[4:8]) == pytest.approx([360.0, 420.0, 480.0, 540.0])  # + 60 per worker
    assert all(values[8:] != values[8:])  # NaN past twice the largest observed count
    fitted = curve(points=points, ages={}, low=1, high=10, model=ThroughputModel())
    assert fitted[4] < 360.0
    assert all(fitted[5:] != fitted[5:])


def test_progress_gauges_are_read_per_job() -> None:
    result = [
        {"metric": {"__name__": "autoscaler_training_progress_samples", "namespace": "n",
                    "job_name": "a"}, "value": [0, "250"]},
        {"metric": {"__name__": "autoscaler_training_total_samples", "namespace": "n",
                    "job_name": "a"}, "value": [0, "1000"]},
        {"metric": {"__name__": "autoscaler_training_progress_samples", "namespace": "n",
                    "job_name": "other"}, "value": [0, "5"]},
    ]  # fmt: skip
    assert progress_by_job(result, keys={("n", "a")}) == {
        ("n", "a"): Progress(samples_done=250.0, total_samples=1000.0)
    }


def test_the_helper_exports_progress_only_once_told() -> None:
    reporter = ThroughputReporter(namespace="n", job_name="j")
    assert b"progress_samples{" not in generate_latest(reporter.registry)
    reporter.set_total(1e6)
    reporter.set_progress(2.5e5)
    text = generate_latest(reporter.registry).decode()
    assert 'autoscaler_training_total_samples{job_name="j",namespace="n"} 1e+06' in text
    assert 'autoscaler_training_progress_samples{job_name="j",namespace="n"} 250000.0' in text
    with pytest.raises(ValueError, match="positive"):
        reporter.set_total(-3)
    with pytest.raises(ValueError, match=">= 0"):
        reporter.set_progress(float("nan"))
