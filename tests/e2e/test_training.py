"""Real elastic training, end to end: torchrun pods scheduled by kube-scheduler, run by the node
agent, sized by the engine through the operator, and measured from the training's own events.

Every rescale a scenario causes is measured from its cause (the `/scale` write seen by the test,
or the kill) to the first step at the new world size on every rank, with the steps trained before
it that the resumed checkpoint did not hold; the session prints them and their summary.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterator

import pytest
from kubernetes import client

from autoscaler.api import coordinates as c
from autoscaler.metrics_contract import DEFAULT_QUERY_TEMPLATE
from autoscaler.observability.decision_log import read_decision_log
from tests.e2e.measure import (
    NODE_LOST,
    Rescale,
    first_full_step,
    redone_after,
    resumed_from_latest_checkpoint,
    stall,
)
from tests.e2e.training import (
    CHECKPOINT_EVERY,
    RDZV_CONF,
    Scenario,
    TrainingJob,
    wait_stepping,
)
from tests.support.external_metrics import ExternalMetricsServer
from tests.support.polling import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.e2e, pytest.mark.timeout(900)]
# The target every rescale must meet with the operator's rendezvous settings; runs measuring
# other settings record their stalls without judging them.
MAX_STALL = math.inf if RDZV_CONF else 30.0
# A lost node that ran worker-0: NotReady after the grace period (5 s here), its pods released
# by the out-of-service taint and the pod garbage collector (which runs every 20 s), re-created,
# scheduled elsewhere and re-formed.
NODE_LOST_BOUND = math.inf if RDZV_CONF else 60.0


def record(
    job: TrainingJob,
    rescales: list[Rescale],
    *,
    cause: str,
    at: float,
    world: int,
    limit: float = MAX_STALL,
) -> Rescale:
    """Measure one change of `job`'s world (caused at `at`, to `world` ranks), keep it, and hold
    it to the targets: a stall within `limit`, at most one checkpoint interval of steps redone."""
    events = job.events()
    took = stall(events, world=world, after=at)
    assert took is not None, f"{job.name} never stepped at world {world} after {cause}"
    measured = Rescale(
        job=job.name,
        cause=cause,
        stall_seconds=round(took, 1),
        steps_redone=redone_after(events, after=at),
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
        measured.append(record(job, rescales, cause=cause, at=history[burst][0], world=count))
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
    """Two nodes of 2 GPUs. The engine grows `first` (1..4 workers) as it learns its curve; then
    `second` (2..4) arrives and cannot fit: the engine shrinks `first` so the minimum of `second`
    is scheduled. Worker-0 of `first` is never replaced; nothing counts as a failure. `first` has
    `maxRestarts: 1`, which the scale-down spends: when `second` is done the engine leaves
    `first` where it is rather than risk a rescale with no restart left. Both finish and their
    pods are handled per cleanPodPolicy (All: deleted; Running: the Succeeded stay)."""
    scenario.nodes(2)
    first, second = scenario.job("first"), scenario.job("second")
    with scenario.engine() as engine:
        first.create(
            first.manifest(replicas=1, low=1, high=4, max_restarts=1, clean_pod_policy="All")
        )
        wait_for(
            lambda: first.stepping_at(4) and first.replicas() == 4,
            timeout=300,
            interval=1,
            what=f"the engine to grow `first` to 4 workers (history {first.replica_history})",
        )
        worker_0 = first.pods()["first-worker-0"]["metadata"]["uid"]
        second.create(second.manifest(replicas=2, low=2, high=4, clean_pod_policy="Running"))
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
        second.finish()
        wait_succeeded(second)
        wait_for(
            lambda: held_for_budget(scenario, "first"),
            timeout=60,
            what="the engine to keep `first` for its spent restart budget",
        )
        assert first.replicas() == 2
        assert engine.proc.poll() is None
    first.stop_watching()
    measured = record_replica_changes(first, scenario.rescales)
    assert [m.cause.split()[0] for m in measured][-1] == "scale-down"
    first.finish()
    for job in (first, second):
        wait_succeeded(job)
        assert_trained_consistently(job)
    wait_for(lambda: not first.pods(), timeout=60, what="cleanPodPolicy All to delete the pods")
    # Running: the first worker to succeed marks an elastic job Succeeded (as upstream); pods
    # still running at that moment are deleted, the Succeeded ones stay.
    phases = {pod["status"]["phase"] for pod in second.pods().values()}
    assert phases == {"Succeeded"}


def wait_succeeded(job: TrainingJob) -> None:
    wait_for(
        lambda: job.conditions().get("Succeeded") == "True",
        timeout=120,
        what=f"{job.name} to succeed",
    )


def restart_counts(job: TrainingJob) -> dict[str, int]:
    return {
        name: sum(s.get("restartCount", 0) for s in pod["status"].get("containerStatuses", []))
        for name, pod in job.pods().items()
    }


def test_killed_workers_are_replaced_and_training_resumes_from_the_checkpoint(
    scenario: Scenario,
) -> None:
    """A worker's torchrun killed (a crash, an OOM kill): the kubelet restarts its container and
    it rejoins; the survivors re-form meanwhile. Worker-0's killed: it hosted the rendezvous, so
    every other agent exits too and every container restarts (OnFailure), then one world forms
    again. Both resume from the newest checkpoint; the job never fails."""
    agent = scenario.nodes(2)
    job = scenario.job("crash")
    with scenario.engine():
        job.create(job.manifest(replicas=3, low=1, high=3))
        wait_stepping(job, 3, timeout=180)
        for victim, cause in (
            ("crash-worker-2", "kill worker-2"),
            ("crash-worker-0", "kill worker-0"),
        ):
            before = restart_counts(job)
            killed = time.time()
            agent.kill_container(scenario.namespace, victim, "pytorch")
            wait_stepping(job, 3, after=killed)
            record(job, scenario.rescales, cause=cause, at=killed, world=3)
            assert restart_counts(job)[victim] == before[victim] + 1
            no_failures(job)
        assert sum(restart_counts(job).values()) >= 4  # worker-0 took every agent with it
    job.finish()
    wait_succeeded(job)
    assert_trained_consistently(job)


def test_a_lost_node_is_recovered_from(scenario: Scenario) -> None:
    """The node running worker-0 dies (every process at once, no more heartbeats). The node
    lifecycle controller marks it NotReady; the out-of-service taint (what an operator or a
    node-remediation controller applies to a node known to be down) lets the taint-eviction and
    pod garbage collector controllers release its pods; the operator re-creates them, the
    scheduler places them on the other nodes, and training resumes from the checkpoint."""
    agent = scenario.nodes(3)
    job = scenario.job("lost")
    core = client.CoreV1Api(scenario.api)
    with scenario.engine():
        job.create(job.manifest(replicas=2, low=1, high=2))
        wait_stepping(job, 2, timeout=180)
        node = job.pods()["lost-worker-0"]["spec"]["nodeName"]
        lost = time.time()
        agent.lose_node(node)
        wait_for(lambda: not _ready(core, node), timeout=60, what=f"{node} NotReady")
        not_ready = time.time() - lost
        taint = {
            "key": "node.kubernetes.io/out-of-service",
            "value": "nodeshutdown",
            "effect": "NoExecute",
        }
        taints = core.read_node(node).spec.taints or []
        core.patch_node(node, {"spec": {"taints": [*(t.to_dict() for t in taints), taint]}})
        wait_stepping(job, 2, after=lost, timeout=180)
        measured = record(
            job, scenario.rescales, cause=NODE_LOST, at=lost, world=2, limit=NODE_LOST_BOUND
        )
        assert all(pod["spec"]["nodeName"] != node for pod in job.pods().values())
        no_failures(job)
    print(
        f"\nnode lost: NotReady after {not_ready:.1f} s, training again after {measured.stall_seconds:.1f} s"
    )
    job.finish()
    wait_succeeded(job)
    assert_trained_consistently(job)


def _ready(core: client.CoreV1Api, node: str) -> bool:
    conditions = core.read_node(node).status.conditions or []
    return any(c.type == "Ready" and c.status == "True" for c in conditions)


def restart_units(job: TrainingJob, *, after: float) -> int:
    """torchrun restarts worker-0's agent has spent, as its newest workers report."""
    starts = [
        e for e in job.events() if e["event"] == "start" and e["rank"] == 0 and e["time"] > after
    ]
    return starts[-1]["restart"] if starts else -1


def test_the_engine_never_spends_the_torchrun_restart_budget(scenario: Scenario) -> None:
    """What a rescale costs in torchrun restarts (`--max-restarts`, per agent, never refilled),
    measured by hand-written /scale on a job the engine leaves alone: at most one per rescale
    (scale-downs spent one in some runs and none in others; scale-ups none). A job with no `maxRestarts` has torchrun's default,
    0: the engine never rescales it. (A job whose scale-downs spent its budget: the first test.)"""
    scenario.nodes(2)
    costs = scenario.job("costs")
    manifest = costs.manifest(replicas=2, low=1, high=3, max_restarts=10)
    manifest["metadata"]["annotations"] = {c.ANNOTATION_OPT_OUT: "true"}
    costs.create(manifest)
    wait_stepping(costs, 2, timeout=180)
    spent = {}
    for replicas in (3, 2, 3, 2):
        before = restart_units(costs, after=0)
        written = costs.scale(replicas)
        wait_stepping(costs, replicas, after=written)
        cause = "scale-up" if replicas == 3 else "scale-down"
        record(costs, scenario.rescales, cause=f"{cause} by hand", at=written, world=replicas)
        spent.setdefault(cause, []).append(restart_units(costs, after=written) - before)
    print(f"\ntorchrun restarts spent by worker-0 per rescale: {spent}")
    # At most one each: a scale-down fails the survivors' workers once (torchrun counts it,
    # unless the agent saw the membership change first); a scale-up re-forms the world through
    # the rendezvous (counted only if a worker's crash is seen before the newcomer).
    assert all(count in (0, 1) for counts in spent.values() for count in counts), spent
    assert all(count == 0 for count in restart_counts(costs).values()), "a pod restarted"
    costs.finish()
    wait_succeeded(costs)

    unset = scenario.job("unset")
    with scenario.engine():
        unset.create(unset.manifest(replicas=1, low=1, high=4, max_restarts=None))
        wait_for(
            lambda: held_for_budget(scenario, "unset"),
            timeout=180,
            interval=1,
            what="the engine to hold `unset` for its restart budget",
        )
        assert unset.replicas() == 1
        no_failures(unset)
    unset.finish()
    wait_succeeded(unset)


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
    writes /scale, and training follows to the new world size. The engine leaves it alone."""
    scenario.nodes(2)
    job = scenario.job("hpa")
    metric = adapter("hpa", f"samples_per_second_{scenario.namespace.replace('-', '_')}")
    # ~290 samples/s per worker against a target of 100 per worker: the HPA wants 3 per worker.
    target = {"type": "AverageValue", "averageValue": "100"}
    metrics = [{"type": "External", "external": {"metric": {"name": metric}, "target": target}}]
    with scenario.engine():
        job.create(job.manifest(replicas=1, low=1, high=3, metrics=metrics))
        wait_stepping(job, 1, timeout=180)
        wait_for(
            lambda: job.replicas() == 3, timeout=120, interval=0.5, what="the HPA to scale to 3"
        )
        wait_stepping(job, 3, timeout=120)
        no_failures(job)
    job.stop_watching()
    measured = record_replica_changes(job, scenario.rescales)
    assert [m.cause for m in measured][-1].endswith("->3")
    hpa = client.AutoscalingV2Api(scenario.api).read_namespaced_horizontal_pod_autoscaler(
        "hpa", scenario.namespace
    )
    assert hpa.status.current_replicas == 3
    job.finish()
    wait_succeeded(job)
    assert_trained_consistently(job)
