"""Real elastic training, end to end: torchrun pods scheduled by kube-scheduler, run by the node
agent, sized by the engine through the operator, and measured from the training's own events.

Every rescale a scenario causes is measured from its cause (the `/scale` write seen by the test,
or the kill) to the first step at the new world size on every rank, with the steps trained before
it that the resumed checkpoint did not hold; the session prints them and their summary.
"""

from __future__ import annotations

import itertools
import math
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime

import pytest
from kubernetes import client

from autoscaler.api import coordinates as c
from autoscaler.controller import rendezvous
from autoscaler.controller.placement import HOSTNAME
from autoscaler.metrics_contract import DEFAULT_QUERY_TEMPLATE
from autoscaler.observability.decision_log import read_decision_log
from tests.e2e.measure import (
    NODE_LOST,
    Rescale,
    first_full_step,
    redone_after,
    resumed_from_latest_checkpoint,
    stall,
    worlds_between,
)
from tests.e2e.report import TARGET_NODE_LOST
from tests.e2e.training import (
    CHECKPOINT_EVERY,
    COLLECTIVE_TIMEOUT,
    JSON,
    RDZV_CONF,
    Scenario,
    TrainingJob,
    finish,
    kept_since,
    pods_seen,
    reasons,
    restart_counts,
    sized,
    wait_stepping,
    wait_succeeded,
)
from tests.support.external_metrics import ExternalMetricsServer
from tests.support.polling import wait_for
from tests.support.processes import process_gone

REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"

pytestmark = pytest.mark.timeout(900)
# The target every rescale must meet with the operator's rendezvous settings; runs measuring
# other settings record their stalls without judging them.
MAX_STALL = math.inf if RDZV_CONF else 30.0
# A node gone silent: its peers' collective times out (the example's timeout), then their
# agents re-form without it (its keep-alive expired long before): the timeout plus a rescale.
NODE_LOST_BOUND = math.inf if RDZV_CONF else COLLECTIVE_TIMEOUT + MAX_STALL


def record(
    job: TrainingJob,
    rescales: list[Rescale],
    *,
    cause: str,
    at: float,
    world: int,
    limit: float = MAX_STALL,
    pods_added: int = 0,
    target: float | None = None,
) -> Rescale:
    """Measure one change of `job`'s world (caused at `at`, to `world` ranks; until now if it
    never formed), keep it, and hold it to the targets: a stall within `limit`, at most one
    checkpoint interval of steps redone."""
    events = job.events()
    took = stall(events, world=world, after=at, end=time.time())
    measured = Rescale(
        job=job.name,
        cause=cause,
        stall_seconds=round(took, 1),
        steps_redone=redone_after(events, after=at),
        pods_added=pods_added,
        world=world,
        target_seconds=target,
    )
    rescales.append(measured)
    assert measured.stall_seconds <= limit, measured
    assert measured.steps_redone <= CHECKPOINT_EVERY, measured
    return measured


def record_replica_changes(job: TrainingJob, rescales: list[Rescale]) -> list[Rescale]:
    """Each change of the job's count after its first, from its write to its world. A change
    overtaken by the next write before its world formed (an HPA stepping 1 -> 2 -> 3 within
    seconds) joins it: one rescale from the first write to the last count's world."""
    history, events = job.replica_history, job.events()
    measured, burst = [], 1  # burst: the first write of the change being measured
    for i in range(1, len(history)):
        at, count = history[i]
        if i + 1 < len(history):
            formed = first_full_step(events, world=count, after=at)
            if formed is None or formed > history[i + 1][0]:
                continue
        before = history[burst - 1][1]
        cause = f"{'scale-up' if count > before else 'scale-down'} {before}->{count}"
        added = max(0, count - before) if burst == i else 0  # a burst is no single write
        measured.append(
            record(job, rescales, cause=cause, at=history[burst][0], world=count, pods_added=added)
        )
        burst = i + 1
    return measured


def assert_trained_consistently(job: TrainingJob) -> None:
    """Every incarnation resumed from the newest checkpoint; checkpoints only moved forward."""
    assert resumed_from_latest_checkpoint(job.events()) == []


def no_failures(job: TrainingJob) -> None:
    conditions = job.conditions()
    assert conditions.get("Failed") != "True", job.job()["status"]
    workers = (job.job().get("status") or {}).get("replicaStatuses", {}).get(c.WORKER, {})
    assert not workers.get("failed"), workers


def test_a_job_grows_shrinks_for_a_second_job_and_both_complete(scenario: Scenario) -> None:
    """Two nodes of 2 GPUs, the engine with its e2e settings (faster than the shipped defaults,
    each named by the report). It grows `first`
    (1..4 workers) as it learns its curve, by several pods in one write once it may; then
    `second` (2..4) arrives and cannot fit: the engine shrinks `first` so the minimum of `second`
    is scheduled. Worker-0 of `first` is never replaced; nothing counts as a failure. `first` has
    `maxRestarts: 3`, which its three rescales may spend (one each at most, the engine's count):
    when `second` is done the engine leaves `first` where it is rather than risk a rescale with no
    restart left. The engine sizes both by the work they declared, its remaining samples those
    the training counts; both finish their work and their pods are handled per cleanPodPolicy
    (All: deleted; Running: the Succeeded stay)."""
    scenario.nodes(2)
    first, second = scenario.job("first"), scenario.job("second")
    with scenario.engine() as engine:
        first.create(
            first.manifest(
                replicas=1,
                low=1,
                high=4,
                max_restarts=3,
                clean_pod_policy="All",
                total_samples=FIRST_SAMPLES,
            )
        )
        wait_for(
            lambda: grown_by_one_write(first) and first.stepping_at(first.replicas()),
            timeout=300,
            interval=1,
            what=f"the engine to grow `first` by several pods at once ({first.replica_history})",
        )
        assert_remaining_samples_match(scenario, first, total=FIRST_SAMPLES)
        assert_one_world_per_write(first)
        worker_0 = first.pods()["first-worker-0"]["metadata"]["uid"]
        second.create(
            second.manifest(
                replicas=2, low=2, high=4, clean_pod_policy="Running", total_samples=SECOND_SAMPLES
            )
        )
        wait_for(
            lambda: second.stepping_at(2) and first.stepping_at(first.replicas()),
            timeout=240,
            interval=1,
            what="`second` to train at its minimum beside a smaller `first`",
        )
        assert first.replicas() <= 2
        assert first.pods()["first-worker-0"]["metadata"]["uid"] == worker_0
        for job in (first, second):
            no_failures(job)
            assert not any(restart_counts(job).values()), "a rescale restarted a container"
        finish(second, timeout=300)
        wait_for(
            lambda: held_for_budget(scenario, "first"),
            timeout=60,
            what="the engine to keep `first` for its spent restart budget",
        )
        assert first.conditions().get("Succeeded") != "True", "`first` finished too soon"
        assert first.replicas() == 2
        assert engine.proc.poll() is None
        for job in (first, second):  # at the end as at the start (created): none restarted
            assert not any(restart_counts(job).values()), "a rescale restarted a container"
        assert first.pods()["first-worker-0"]["metadata"]["uid"] == worker_0
    for job in (first, second):
        job.stop_watching()
    measured = record_replica_changes(first, scenario.rescales)
    assert [m.cause.split()[0] for m in measured][-1] == "scale-down"
    record_replica_changes(second, scenario.rescales)
    finish(first, timeout=300)  # `second` finished in the engine's block


# Sized from runs (two cores train 1,000-3,000 samples/s): `first` must outlive its growth,
# `second`'s whole run and the budget hold after it (240,000 once ended with `second`).
FIRST_SAMPLES = 320_000
SECOND_SAMPLES = 50_000


def grown_by_one_write(job: TrainingJob) -> bool:
    """Whether one change of the job's count added several workers."""
    counts = [count for _, count in job.replica_history]
    return any(after - before > 1 for before, after in itertools.pairwise(counts))


def assert_one_world_per_write(job: TrainingJob) -> None:
    """Every write that added several workers formed one world: no step ran at a size between."""
    assert worlds_between(job.replica_history, job.events()) == {}


def assert_remaining_samples_match(scenario: Scenario, job: TrainingJob, *, total: int) -> None:
    """The engine's newest remaining samples for `job` (from the progress the job reports) are
    what the training itself had left when the engine read them, within 5 %."""
    records = [
        r
        for r in read_decision_log(scenario.workdir / "decisions.jsonl")
        if r["name"] == job.name and r["remaining_samples"] is not None
    ]
    assert records, "the engine never knew the job's remaining samples"
    newest = records[-1]
    at = datetime.fromisoformat(newest["time"]).timestamp()
    left = total - job.samples(at=at)
    assert abs(newest["remaining_samples"] - left) <= 0.05 * left, (newest, left)


def test_killed_workers_are_replaced_and_training_resumes_from_the_checkpoint(
    scenario: Scenario,
) -> None:
    """A worker's container killed (a crash, an OOM kill): every process of it ends, torchrun's
    workers included; the kubelet restarts it and it rejoins; the survivors re-form meanwhile.
    Worker-0's killed: it hosted the rendezvous, so every other agent exits too and every
    container restarts (OnFailure), then one world forms again. Both resume from the newest
    checkpoint; the job never fails and finishes its work. Its nodes have 4 GPUs each: the
    planned placement puts its 3 workers on one, where kube-scheduler would spread them."""
    agent = scenario.nodes(2, gpus=4)
    job = scenario.job("crash")
    with scenario.engine():
        job.create(job.manifest(replicas=3, low=1, high=3, total_samples=KILL_SAMPLES))
        wait_stepping(job, 3, timeout=180)
        for victim, cause in (
            ("crash-worker-2", "kill worker-2"),
            ("crash-worker-0", "kill worker-0"),
        ):
            before = restart_counts(job)
            processes = agent.container_pids(scenario.namespace, victim, "pytorch")
            assert len(processes) >= 2, "torchrun and its worker"
            killed = time.time()
            agent.kill_container(scenario.namespace, victim, "pytorch")
            wait_for(
                lambda p=processes: all(process_gone(pid) for pid in p),  # type: ignore[misc]
                timeout=10,
                interval=0.1,
                what=f"every process of {victim}'s container to end",
            )
            wait_stepping(job, 3, after=killed)
            record(job, scenario.rescales, cause=cause, at=killed, world=3)
            assert restart_counts(job)[victim] == before[victim] + 1
            no_failures(job)
        counts = restart_counts(job)
        assert sum(counts.values()) >= 4  # worker-0 took every agent with it
        assert all(counts[f"crash-worker-{i}"] >= 1 for i in range(3)), counts
    finish(job, timeout=300)
    assert_trained_consistently(job)


KILL_SAMPLES = 90_000  # two kills and their recoveries at three workers, with a margin


def test_a_node_gone_silent_is_recovered_from(scenario: Scenario) -> None:
    """The node running worker-1 goes silent (its links down, then every process killed, no
    more heartbeats): no reset reaches worker-0, whose collective blocks until the example's
    collective timeout; its agent then re-forms the world without the lost node and trains on
    alone. The node lifecycle controller marks the node NotReady; the out-of-service taint
    (what an operator or a node-remediation controller applies to a node known to be down) lets
    the taint-eviction and pod garbage collector controllers release its pod; the operator
    re-creates it, the scheduler places it on the spare node, and the world grows back. The
    engine sizes the job throughout: it sees the job recovering (its progress stalled, a pod
    not ready), records none of those readings and keeps its count (`Recovering`)."""
    agent = scenario.nodes(3, gpus=1)
    job = scenario.job("lost")
    with scenario.engine():
        job.create(job.manifest(replicas=2, low=1, high=2, total_samples=LOST_SAMPLES))
        wait_stepping(job, 2, timeout=180)
        seen = pods_seen(job)
        wait_for(
            lambda: sized(scenario, "lost"),
            timeout=120,
            interval=1,
            what="the engine to size `lost` on a reading at its count",
        )
        node = job.pods()["lost-worker-1"]["spec"]["nodeName"]
        lost = time.time()
        agent.lose_node(node)
        wait_stepping(job, 1, after=lost, timeout=180)
        alone = record(
            job,
            scenario.rescales,
            cause=NODE_LOST,
            at=lost,
            world=1,
            limit=NODE_LOST_BOUND,
            target=TARGET_NODE_LOST,
        )
        assert alone.stall_seconds >= COLLECTIVE_TIMEOUT, "a reset reached the survivor"
        replaced = job.replace_pod_of_lost_node("lost-worker-1", node)
        wait_stepping(job, 2, after=replaced, timeout=180)
        record(job, scenario.rescales, cause="lost node's pod replaced", at=replaced, world=2)
        wait_for(
            lambda: sized(scenario, "lost"),
            timeout=120,
            interval=1,
            what="the engine to size `lost` on whole readings again",
        )
        assert [count for _, count in job.replica_history] == [2], job.replica_history
        assert "Recovering" in reasons(scenario, "lost", after=lost)
    assert all(pod["spec"]["nodeName"] != node for pod in job.pods().values())
    no_failures(job)
    # Before the success: the operator removes a finished job's pods (cleanPodPolicy).
    assert kept_since(job, seen) == {"lost-worker-0": 0}, "the survivor's container restarted"
    finish(job, timeout=300)
    assert_trained_consistently(job)


# The engine's first reading, the silent timeout, the release, the rejoin and the engine's
# reading after it, with a margin.
LOST_SAMPLES = 300_000


def test_worker_0s_node_gone_silent_with_the_jobs_own_rendezvous_store(scenario: Scenario) -> None:
    """The job opts into a rendezvous store pod of its own, so no worker hosts the rendezvous.
    Worker-0's node goes silent: the survivor's collective times out, its agent (a client of the
    store, which runs on another node) re-forms the world without worker-0 and trains on, within
    the collective timeout plus one re-form plus 10 s. Worker-0's pod, released and re-created on
    the spare node, joins the store again and the world grows back. The workers require a node
    without the store (so kube-scheduler, not the planned placement, places them)."""
    agent = scenario.nodes(4, gpus=1)
    job = scenario.job("store")
    manifest = job.manifest(replicas=2, low=1, high=2, total_samples=STORE_SAMPLES)
    manifest["metadata"]["annotations"] = {rendezvous.ANNOTATION: rendezvous.STORE}
    worker = manifest["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    store = {c.LABEL_JOB_NAME: "store", c.LABEL_REPLICA_TYPE: rendezvous.STORE_TYPE}
    worker["affinity"] = {"podAntiAffinity": {REQUIRED: [{"labelSelector": {
        "matchLabels": store}, "topologyKey": HOSTNAME}]}}  # fmt: skip
    job.create(manifest)
    wait_stepping(job, 2, timeout=180)
    pods = job.pods()
    node = pods["store-worker-0"]["spec"]["nodeName"]
    assert pods[rendezvous.store_name("store")]["spec"]["nodeName"] != node, "store beside worker-0"
    lost = time.time()
    agent.lose_node(node)
    wait_stepping(job, 1, after=lost, timeout=180)
    # Reported with the other lost node (its own line in the summary), held to its own bound.
    alone = record(
        job,
        scenario.rescales,
        cause=NODE_LOST,
        at=lost,
        world=1,
        limit=WORKER_0_LOST_BOUND,
        target=TARGET_WORKER_0_LOST,
    )
    print(f"\nworker-0's node lost, own rendezvous store: trained again after {alone.stall_seconds} s"
          f" (bound {WORKER_0_LOST_BOUND:g} s)")  # fmt: skip
    assert alone.stall_seconds >= COLLECTIVE_TIMEOUT, "a reset reached the survivor"
    replaced = job.replace_pod_of_lost_node("store-worker-0", node)
    wait_stepping(job, 2, after=replaced, timeout=180)
    record(job, scenario.rescales, cause="worker-0's pod replaced", at=replaced, world=2)
    no_failures(job)
    finish(job, timeout=300)
    assert_trained_consistently(job)


# The survivor's collective timeout, one re-form, and 10 s for its agent to notice.
TARGET_WORKER_0_LOST = TARGET_NODE_LOST + 10.0
WORKER_0_LOST_BOUND = math.inf if RDZV_CONF else TARGET_WORKER_0_LOST
STORE_SAMPLES = 100_000  # the silent timeout, the release and the rejoin, with a margin


def left_to_the_scheduler(manifest: JSON) -> JSON:
    """`manifest` whose workers require a node with a hostname (any): a required affinity
    leaves their placement to kube-scheduler, not to the planned placement."""
    anywhere = {"matchExpressions": [{"key": HOSTNAME, "operator": "Exists"}]}
    worker = manifest["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    worker["affinity"] = {"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [anywhere]}}}
    return manifest


def restart_units(job: TrainingJob, *, after: float) -> int:
    """torchrun restarts worker-0's agent has spent, as its newest workers report."""
    starts = [
        e for e in job.events() if e["event"] == "start" and e["rank"] == 0 and e["time"] > after
    ]
    return starts[-1]["restart"] if starts else -1


def test_the_engine_never_spends_the_torchrun_restart_budget(scenario: Scenario) -> None:
    """What a rescale costs in torchrun restarts (`--max-restarts`, per agent, never refilled),
    measured by hand-written /scale on a job the engine leaves alone: at most one per rescale
    (scale-downs spent one in some runs and none in others, and so, more rarely, did scale-ups:
    the engine counts one for every rescale). The writes include a scale-up by two pods and
    one-pod scale-ups to the same size, to compare their stalls. Workers 1 and 2 are placed off
    worker-0's node (cordoned for that write) and worker-3 beside it, so the scale-down to 2
    removes the middle indices, and training goes on with workers 0 and 3 (both jobs are left to
    kube-scheduler, steered by the cordon, not to the planned placement). Beside it, a job with
    no `maxRestarts` has torchrun's default, 0: the engine never rescales it. (A job whose
    rescales spent its budget: the first test.)"""
    scenario.nodes(3)  # `costs` at up to 4 workers and `unset` at 1
    costs, unset = scenario.job("costs"), scenario.job("unset")
    manifest = costs.manifest(replicas=1, low=1, high=4, max_restarts=10, total_samples=160_000)
    manifest["metadata"]["annotations"] = {c.ANNOTATION_OPT_OUT: "true"}
    costs.create(left_to_the_scheduler(manifest))
    with scenario.engine():
        unset.create(
            # Enough work to outlast the engine's first readings: 40,000 once ended before them.
            left_to_the_scheduler(
                unset.manifest(replicas=1, low=1, high=4, max_restarts=None, total_samples=120_000)
            )
        )
        wait_stepping(costs, 1, timeout=180)
        home = costs.pods()["costs-worker-0"]["spec"]["nodeName"]
        with cordoned(scenario, home) as reopen:  # reopened once workers 1 and 2 are bound
            spent = rescale_by_hand(scenario, costs, counts=(3,), once_bound=reopen)
        for counts in ((4, 2), (3, 4)):
            for cause, units in rescale_by_hand(scenario, costs, counts=counts).items():
                spent.setdefault(cause, []).extend(units)
            if counts == (4, 2):  # workers 1 and 2 shared a node, worker-3 sat beside worker-0
                assert set(live_pods(costs)) == {"costs-worker-0", "costs-worker-3"}
        wait_for(
            lambda: held_for_budget(scenario, "unset"),
            timeout=180,
            interval=1,
            what="the engine to hold `unset` for its restart budget",
        )
        assert unset.replicas() == 1
        no_failures(unset)
    assert_one_world_per_write(costs)
    print(f"\ntorchrun restarts spent by worker-0 per rescale: {spent}")
    # At most one each: a scale-down fails the survivors' workers once (torchrun counts it,
    # unless the agent saw the membership change first); a scale-up re-forms the world through
    # the rendezvous (counted only if a worker's crash is seen before the newcomer).
    assert all(count in (0, 1) for counts in spent.values() for count in counts), spent
    assert all(count == 0 for count in restart_counts(costs).values()), "a pod restarted"
    costs.cut_work()
    finish(unset, timeout=300)
    wait_succeeded(costs, timeout=300)


def rescale_by_hand(
    scenario: Scenario,
    job: TrainingJob,
    *,
    counts: tuple[int, ...],
    once_bound: Callable[[], None] | None = None,
) -> dict[str, list[int]]:
    """Writes each count in turn through /scale once the last one's world trains, measures each
    rescale, and returns the torchrun restarts worker-0 spent on each, by direction.
    `once_bound` is called as soon as every pod of the first write is on a node."""
    spent: dict[str, list[int]] = {}
    current = job.replicas()
    for replicas in counts:
        before = restart_units(job, after=0)
        written = job.scale(replicas)
        if once_bound is not None:
            wait_bound(job, replicas)
            once_bound()
            once_bound = None
        wait_stepping(job, replicas, after=written)
        cause = "scale-up" if replicas > current else "scale-down"
        record(
            job,
            scenario.rescales,
            cause=f"{cause} {current}->{replicas} by hand",
            at=written,
            world=replicas,
            pods_added=max(0, replicas - current),
        )
        spent.setdefault(cause, []).append(restart_units(job, after=written) - before)
        current = replicas
    return spent


def live_pods(job: TrainingJob) -> list[str]:
    """The job's pods not being deleted."""
    return [n for n, pod in job.pods().items() if not pod["metadata"].get("deletionTimestamp")]


def wait_bound(job: TrainingJob, count: int) -> None:
    """Until `count` of the job's pods, none being deleted, are on nodes."""

    def bound() -> bool:
        pods = [p for p in job.pods().values() if not p["metadata"].get("deletionTimestamp")]
        return sum(bool(p["spec"].get("nodeName")) for p in pods) == count

    wait_for(bound, what=f"{job.name}'s {count} pods on nodes")


@contextmanager
def cordoned(scenario: Scenario, node: str) -> Iterator[Callable[[], None]]:
    """`node` takes no new pod (`kubectl cordon`) until the block ends or it calls the
    function it is given."""
    core = client.CoreV1Api(scenario.api)
    core.patch_node(node, {"spec": {"unschedulable": True}})

    def reopen() -> None:
        core.patch_node(node, {"spec": {"unschedulable": False}})

    try:
        yield reopen
    finally:
        reopen()


def held_for_budget(scenario: Scenario, name: str) -> bool:
    log = scenario.workdir / "decisions.jsonl"
    records = [r for r in read_decision_log(log) if r["name"] == name] if log.exists() else []
    return bool(records) and records[-1]["reason"] == "RestartBudgetExhausted"


@pytest.fixture
def adapter(
    scenario: Scenario, e2e_external_metrics: ExternalMetricsServer
) -> Iterator[Callable[[str, str], str]]:
    """A prometheus-adapter stand-in: serves a job's samples/s from Prometheus as an External
    metric, refreshed every second. `adapter(job, metric) -> metric`."""
    stop, threads = threading.Event(), []

    def serve(job: str, metric: str) -> str:
        query = DEFAULT_QUERY_TEMPLATE.format(namespace=scenario.namespace, name=job, window="10s")

        def refresh() -> None:
            while not stop.wait(1.0):
                result = scenario.prometheus.query(query)
                if result:
                    e2e_external_metrics.set(metric, round(float(result[0]["value"][1]), 3))  # type: ignore[index]

        threads.append(threading.Thread(target=refresh, daemon=True))
        threads[-1].start()
        return metric

    yield serve
    stop.set()
    for thread in threads:
        thread.join(timeout=5)


def test_the_hpa_scales_a_job_on_its_training_throughput(
    scenario: Scenario, adapter: Callable[[str, str], str]
) -> None:
    """A job with `elasticPolicy.metrics` belongs to the HPA the operator generates: the real HPA
    controller reads the job's throughput (reporter -> Prometheus -> external metrics API),
    writes /scale, and training follows to the new world size. The engine leaves it alone. Its
    nodes have 4 GPUs each: kube-scheduler places the workers, drawn to the job's own by the
    preferred pod affinity the operator adds."""
    scenario.nodes(2, gpus=4)
    job = scenario.job("hpa")
    metric = adapter("hpa", f"samples_per_second_{scenario.namespace.replace('-', '_')}")
    # Hundreds of samples/s per worker against a target of 100 per worker: the HPA wants more
    # workers than the job's maximum of 3.
    target = {"type": "AverageValue", "averageValue": "100"}
    metrics = [{"type": "External", "external": {"metric": {"name": metric}, "target": target}}]
    with scenario.engine():
        job.create(job.manifest(replicas=1, low=1, high=3, metrics=metrics, total_samples=50_000))
        wait_stepping(job, 1, timeout=180)
        wait_for(
            lambda: job.replicas() == 3, timeout=120, interval=0.5, what="the HPA to scale to 3"
        )
        wait_stepping(job, 3, timeout=120)
        no_failures(job)
        assert not any(restart_counts(job).values()), "a scale-up restarted a container"
    job.stop_watching()
    measured = record_replica_changes(job, scenario.rescales)
    assert [m.cause for m in measured][-1].endswith("->3")
    hpa = client.AutoscalingV2Api(scenario.api).read_namespaced_horizontal_pod_autoscaler(
        "hpa", scenario.namespace
    )
    assert hpa.status.current_replicas == 3
    finish(job, timeout=300)
    assert_trained_consistently(job)
