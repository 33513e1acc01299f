"""Queueing in the default policy (hand-computed tables), in the simulator (a suspension's cost,
exactly), in the annotation's reading and the write that suspends or resumes a job."""

from datetime import UTC, datetime
from typing import Any

import pytest

from autoscaler.api import coordinates as c
from autoscaler.clients.engine_cluster import KubeCluster, queueing_patch
from autoscaler.clients.jobs import managed_job
from autoscaler.clients.kube import ConflictError
from autoscaler.engine.config import SettleConfig
from autoscaler.engine.snapshot import engine_bounds
from autoscaler.policies.contract import EngineBounds, JobSnapshot, Snapshot
from autoscaler.policies.global_optimizer import GlobalOptimizer, GlobalOptimizerConfig
from autoscaler.policies.objective import Objective
from autoscaler.sim.profiles import Profile, ProfileRow
from autoscaler.sim.results import RunResult
from autoscaler.sim.simulation import SimConfig, Simulation
from autoscaler.sim.workload import WorkloadJob, format_workload, parse_workload
from tests.support.clock import NOW

GPU = c.GPU_RESOURCE
# p = -0.25, restart 15 s, hold 3600 s; unranked, so that each table below sums plain terms.
POLICY = GlobalOptimizer(GlobalOptimizerConfig(objective=Objective(rank_exponent=0)))


def snap(name: str, remaining: float, replicas: int = 2, **fields: Any) -> JobSnapshot:
    """2 to 4 workers of 1 GPU, 1 sample/s per worker, `remaining` samples left."""
    return JobSnapshot(
        namespace="ns",
        name=name,
        min_replicas=2,
        max_replicas=4,
        replicas=replicas,
        resources_per_replica={GPU: 1.0},
        throughput={2: 2.0, 3: 3.0, 4: 4.0},
        remaining_samples=remaining,
        **fields,
    )


def decide(*jobs: JobSnapshot, gpus: float = 4.0) -> dict[str, int]:
    view = Snapshot(capacity={GPU: gpus}, jobs=list(jobs))
    return {d.name: d.replicas for d in POLICY.decide(view, now=NOW)}


# Utility w * E^-0.25 (maximised), E the remaining seconds; a count other than the current one
# adds the 15 s stall (these jobs end within the 600 s horizon, or the stall is scaled by E/585).
# Held back, E = 3,600 (hold_seconds) + 15 (its resume) + E at its minimum.
#
# long: 40,000 samples: E(2) = 20,000 s; held back, 23,615 s.
# short: 400 samples: E(2) = 200 s, E(4) = 100 + 15 = 115 s.
#   both at 2:              20,000^-.25 + 200^-.25 = 0.08409 + 0.26591 = 0.35000
#   long held, short at 4:  23,615^-.25 + 115^-.25 = 0.08067 + 0.30537 = 0.38604
# Holding long would score higher, but both minimums fit, so nobody is made to wait.
@pytest.mark.parametrize("preemptible", [False, True])
def test_while_every_minimum_fits_no_job_is_held_back(preemptible: bool) -> None:
    long = snap("long", 40_000, preemptible=preemptible)
    assert decide(long, snap("short", 400)) == {"long": 2, "short": 2}


def bounds(max_held_seconds: float) -> EngineBounds:
    """The engine's bounds with its defaults but the starvation bound."""
    settle = SettleConfig(max_held_seconds=max_held_seconds)
    return engine_bounds(settle, interval_seconds=30.0)


# 4 GPUs, three jobs of minimum 2, so one must wait. mid: 4,000 samples, E(2) = 2,000 s.
# Held back 3,600 s (the config's, or the engine's bound):
#   long held, mid and short at 2:  23,615^-.25 + 2,000^-.25 + 200^-.25
#                                   = 0.08067 + 0.14953 + 0.26591 = 0.49612
#   both held, short at 4:          23,615^-.25 + 5,615^-.25 + 115^-.25
#                                   = 0.08067 + 0.11552 + 0.30537 = 0.50156  <- best
# Held back 300,000 s, a hold costs more, so only the one that must wait does:
#   long held, mid and short at 2:  320,015^-.25 + 0.14953 + 0.26591 = 0.04204 + 0.41544 = 0.45749
#   both held, short at 4:          320,015^-.25 + 302,015^-.25 + 0.30537 = 0.39007
@pytest.mark.parametrize(
    ("bound", "expected"),
    [
        (None, {"long": 0, "mid": 0, "short": 4}),
        (3600.0, {"long": 0, "mid": 0, "short": 4}),
        (300_000.0, {"long": 0, "mid": 2, "short": 2}),
    ],
)
def test_a_hold_is_valued_at_the_engines_starvation_bound(
    bound: float | None, expected: dict[str, int]
) -> None:
    jobs = [
        snap("long", 40_000, preemptible=True),
        snap("mid", 4_000, preemptible=True),
        snap("short", 400),
    ]
    view = Snapshot(capacity={GPU: 4.0}, jobs=jobs, bounds=None if bound is None else bounds(bound))
    assert {d.name: d.replicas for d in POLICY.decide(view, now=NOW)} == expected


# 4 GPUs, three jobs of minimum 2: one must wait. Held back, a 400-sample job loses
# 200^-.25 - 3,815^-.25 = 0.13867; the 4,000-sample one (E(2) = 2,000 s, held 5,615 s)
# 2,000^-.25 - 5,615^-.25 = 0.03401: the longest waits.
def test_when_the_minimums_do_not_fit_the_longest_preemptible_job_waits() -> None:
    jobs = [
        snap("s1", 400, preemptible=True),
        snap("s2", 400, preemptible=True),
        snap("l", 4_000, preemptible=True),
    ]
    assert decide(*jobs) == {"s1": 2, "s2": 2, "l": 0}
    # Without the annotation nothing may wait: every job at its smallest count (overloaded).
    plain = [job.model_copy(update={"preemptible": False}) for job in jobs]
    assert decide(*plain) == {"s1": 2, "s2": 2, "l": 2}


# A held-back job pays its resume's 15 s once at every count. With a third job of minimum 2 on the
# 4 GPUs, 'long' waits; alone it resumes at its best count, 4 (10,015^-.25 = 0.09996, held:
# 23,615^-.25 = 0.08067).
def test_a_held_back_job_resumes_when_the_room_comes_at_its_best_count() -> None:
    long = snap("long", 40_000, preemptible=True, suspended=True, held_seconds=300.0)
    assert decide(long, snap("s1", 400), snap("s2", 400)) == {"long": 0, "s1": 2, "s2": 2}
    assert decide(long) == {"long": 4}


def test_a_held_back_job_that_may_not_wait_is_resumed_at_least_at_its_minimum() -> None:
    long = snap("long", 40_000, suspended=True, held_seconds=3600.0)  # preemptible=False: due
    assert decide(long, snap("short", 400)) == {"long": 2, "short": 2}


def test_a_speedup_objective_never_holds_a_job_back() -> None:
    """Even when the minimums do not fit: every job at its smallest count, overloaded."""
    config = GlobalOptimizerConfig.model_validate({"objective": {"kind": "proportional"}})
    view = Snapshot(
        capacity={GPU: 3.0},
        jobs=[snap("long", 40_000, preemptible=True), snap("short", 400, preemptible=True)],
    )
    counts = {d.name: d.replicas for d in GlobalOptimizer(config).decide(view, now=NOW)}
    assert counts == {"long": 2, "short": 2}


LINEAR = {
    "linear": Profile(
        name="linear", gpu_counts=(1, 2, 4, 8), rows=(ProfileRow(10, (1.0, 2.0, 4.0, 8.0)),)
    )
}


def simulate(plan: dict[float, list[tuple[str, int]]]) -> RunResult:
    """One 4-worker job of 1,000 iterations (4 it/s), 30 s restarts; `plan`: per round, each
    write (0 suspends the job, a count resumes it)."""
    jobs = [WorkloadJob("a", 0.0, "linear", 10, 1000, 1, 4, 4, preemptible=True)]
    config = SimConfig(gpus=8, interval_seconds=60.0, restart_seconds=30.0)
    sim = Simulation(workload=jobs, profiles=LINEAR, config=config)

    def decide(now: datetime) -> None:
        seconds = (now - config.origin).total_seconds()
        for name, replicas in plan.get(seconds, []):
            (job,) = [j for j in sim.cluster.jobs() if j.name == name]
            assert job.preemptible
            written = (
                sim.cluster.suspend(job, since=now)
                if replicas == 0
                else sim.cluster.resume(job, replicas=replicas)
            )
            assert written.written, written.error

    return sim.run(decide_round=decide)


def test_a_suspended_job_makes_no_progress_and_its_resume_stalls_like_a_rescale() -> None:
    # 4 it/s to 60 s (240 done); held back to 180 s; resumed at 2 workers: stalls to 210 s,
    # then 760 iterations at 2 it/s: done at 590 s. GPUs: 4 x 60, then 2 from 180 s.
    result = simulate({60.0: [("a", 0)], 180.0: [("a", 2)]})
    (a,) = result.jobs
    assert a.finish == pytest.approx(210.0 + 760 / 2)
    assert (a.rescales, a.suspensions, a.start) == (1, 1, 0.0)
    assert a.gpu_seconds == pytest.approx(4 * 60 + 2 * 410)
    assert a.busy_gpu_seconds == pytest.approx(4 * 60 + 2 * 380)
    assert [e.reason for e in result.events if e.source == "simulator"][-1] == "Finished"


def test_a_suspended_job_is_shown_held_back_since_its_suspension() -> None:
    jobs = [WorkloadJob("a", 0.0, "linear", 10, 1000, 1, 4, 4)]
    config = SimConfig(gpus=8, preemptible=True)
    sim = Simulation(workload=jobs, profiles=LINEAR, config=config)
    seen = []

    def decide(now: datetime) -> None:
        (job,) = sim.cluster.jobs()
        seen.append((job.preemptible, job.held_back, job.held_since, job.active))
        if not job.held_back and len(seen) == 1:
            assert sim.cluster.suspend(job, since=now).written
        elif job.held_back:
            assert sim.cluster.resume(job, replicas=3).written

    sim.run(decide_round=decide)
    origin = config.origin
    assert seen[:2] == [(True, False, None, 4), (True, True, origin, 0)]


def test_the_workload_column_reads_and_writes_preemptible() -> None:
    text = (
        "name,submit_time,profile,batch_size,iterations,min_replicas,max_replicas,replicas,"
        "preemptible\na,0,linear,10,100,1,4,2,true\nb,1,linear,10,100,1,4,2,false\n"
    )
    jobs = parse_workload(text, source="w", profiles=LINEAR)
    assert [j.preemptible for j in jobs] == [True, False]
    assert parse_workload(format_workload(jobs), source="again", profiles=LINEAR) == jobs
    with pytest.raises(ValueError, match="neither true nor false"):
        parse_workload(text.replace("true", "yes"), source="w", profiles=LINEAR)


def manifest(annotations: dict[str, str], *, suspend: bool | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "elasticPolicy": {"minReplicas": 1, "maxReplicas": 4},
        "pytorchReplicaSpecs": {"Worker": {"replicas": 2}},
    }
    if suspend is not None:
        spec["runPolicy"] = {"suspend": suspend}
    metadata = {
        "name": "j",
        "namespace": "n",
        "creationTimestamp": "2026-11-30T00:00:00Z",
        "annotations": annotations,
        "resourceVersion": "7",
    }
    return {"metadata": metadata, "spec": spec}


@pytest.mark.parametrize(
    ("value", "preemptible", "problem"),
    [(None, False, False), ("true", True, False), ("false", False, False),
     ("True", False, True), ("yes", False, True), ("", False, True)],
)  # fmt: skip
def test_only_true_makes_a_job_preemptible_any_other_value_is_an_invalid_annotation(
    value: str | None, preemptible: bool, problem: bool
) -> None:
    annotations = {} if value is None else {c.ANNOTATION_PREEMPTIBLE: value}
    job = managed_job(manifest(annotations))
    assert job is not None
    assert job.preemptible is preemptible
    assert any(c.ANNOTATION_PREEMPTIBLE in p for p in job.problems) is problem


@pytest.mark.parametrize(
    ("annotations", "suspend", "held_back", "held_since"),
    [
        ({}, None, False, None),
        ({}, True, False, None),  # its user's suspension
        ({c.ANNOTATION_HELD_SINCE: "2026-12-01T10:00:00Z"}, True, True,
         datetime(2026, 12, 1, 10, tzinfo=UTC)),
        ({c.ANNOTATION_HELD_SINCE: "2026-12-01T10:00:00Z"}, False, False,
         datetime(2026, 12, 1, 10, tzinfo=UTC)),  # resumed by someone else
        ({c.ANNOTATION_HELD_SINCE: "soon"}, True, True, datetime(1970, 1, 1, tzinfo=UTC)),
    ],
)  # fmt: skip
def test_the_engines_marker_tells_its_suspension_from_a_users(
    annotations: dict[str, str],
    suspend: bool | None,
    held_back: bool,
    held_since: datetime | None,
) -> None:
    job = managed_job(manifest(annotations, suspend=suspend))
    assert job is not None
    assert (job.held_back, job.held_since) == (held_back, held_since)


def test_a_suspension_and_a_resume_are_one_patch_each_under_the_version_read() -> None:
    job = managed_job(manifest({}))
    assert job is not None
    marker = {c.ANNOTATION_HELD_SINCE: "2026-12-01T10:00:00Z"}
    assert queueing_patch(job, suspend=True, annotations=marker) == {
        "metadata": {"resourceVersion": "7", "annotations": marker},
        "spec": {"runPolicy": {"suspend": True}},
    }
    resume = queueing_patch(
        job, suspend=False, annotations={c.ANNOTATION_HELD_SINCE: None}, replicas=3
    )
    assert resume == {
        "metadata": {"resourceVersion": "7", "annotations": {c.ANNOTATION_HELD_SINCE: None}},
        "spec": {
            "runPolicy": {"suspend": False},
            "pytorchReplicaSpecs": {"Worker": {"replicas": 3}},
        },
    }


class PatchingKube:
    """Records each merge patch of a job; answers 409 while `conflict` is set."""

    def __init__(self) -> None:
        self.patches: list[dict[str, Any]] = []
        self.conflict = False

    def merge_patch(self, resource: object, namespace: str, name: str, patch: Any) -> Any:
        self.patches.append(patch)
        if self.conflict:
            raise ConflictError("409: the object has been modified")
        return manifest(patch["metadata"].get("annotations") or {})


class NoEvents:
    def record(self, event: object) -> None:
        raise AssertionError("no Event expected")

    def close(self) -> None:
        pass


def kube_cluster() -> tuple[KubeCluster, PatchingKube]:
    kube = PatchingKube()
    return KubeCluster(kube, recorder=NoEvents()), kube  # type: ignore[arg-type]


def test_a_suspension_under_a_stale_version_is_refused_and_not_retried() -> None:
    cluster, kube = kube_cluster()
    job = managed_job(manifest({}))
    assert job is not None
    kube.conflict = True
    result = cluster.suspend(job, since=NOW)
    assert (result.written, result.replicas) == (False, 2)
    assert "changed since it was read" in result.error
    assert len(kube.patches) == 1
    kube.conflict = False
    assert cluster.resume(job, replicas=3).written
    assert kube.patches[-1]["spec"]["pytorchReplicaSpecs"] == {"Worker": {"replicas": 3}}


def test_no_queueing_write_without_the_version_it_was_read_at() -> None:
    cluster, kube = kube_cluster()
    obj = manifest({})
    del obj["metadata"]["resourceVersion"]
    job = managed_job(obj)
    assert job is not None
    assert not cluster.suspend(job, since=NOW).written
    assert kube.patches == []


@pytest.mark.parametrize(
    ("suspend", "patched"), [(False, {c.ANNOTATION_HELD_SINCE: None}), (True, {})]
)
def test_the_marker_of_a_job_someone_else_resumed_goes_with_its_state_save(
    suspend: bool, patched: dict[str, None]
) -> None:
    cluster, kube = kube_cluster()
    job = managed_job(manifest({c.ANNOTATION_HELD_SINCE: "2026-12-01T10:00:00Z"}, suspend=suspend))
    assert job is not None
    cluster.save_state(job, state="{}")
    assert kube.patches == [{"metadata": {"annotations": {c.ANNOTATION_STATE: "{}", **patched}}}]
