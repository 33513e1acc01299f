"""torchft mode end to end: each worker pod a torchft replica group, run by the operator (with the
job's lighthouse), sized by the engine, killed and lost by the node agent, measured from the
training's own step log. The point of the mode: no resize or fault restarts a surviving worker,
except the loss of the lighthouse, which restarts them all from the checkpoint.

Every resize or fault is measured from its cause (the `/scale` write the test saw, the kill) as
the survivors' longest gap between committed steps; the session prints them and the summary.
"""

from __future__ import annotations

import itertools
import time

import pytest

from autoscaler import fault_tolerance as ft
from tests.e2e import ft_measure as m
from tests.e2e.training import (
    FaultTolerantJob,
    Scenario,
    reasons,
    restart_counts,
    sized,
    wait_groups,
    wait_succeeded,
)
from tests.support.node_agent import NodeAgent
from tests.support.polling import wait_for
from tests.support.processes import process_gone

pytestmark = pytest.mark.timeout(900)
# What a survivor may pause at most: a silent peer's collective timeout plus a quorum; a kill or a
# leave costs the lighthouse's heartbeat timeout at most.
MAX_PAUSE = ft.DEFAULT_TIMEOUT_SECONDS + 2.0
LIGHTHOUSE_BOUND = 60.0  # a new lighthouse, every worker restarted, healed from the checkpoint


def record(
    scenario: Scenario,
    job: FaultTolerantJob,
    *,
    cause: str,
    at: float,
    survivors: set[str],
    newcomers: set[str] | None = None,
    window: float = m.WINDOW_SECONDS,
) -> m.Resize:
    """Measure one resize or fault of `job` caused at `at` (its effects over within `window`),
    keep it, hold it to the target."""
    events = job.events()
    measured = m.Resize(
        job=job.name,
        cause=cause,
        pause_seconds=m.pause(events, survivors=survivors, after=at, window=window),
        survivor_restarts=len(m.restarted(events, survivors=survivors, after=at, window=window)),
        newcomer_seconds=m.newcomers_first_commit(events, newcomers=newcomers, after=at)
        if newcomers
        else None,
    )
    scenario.ft_resizes.append(measured)
    assert measured.survivor_restarts == 0, measured
    assert measured.pause_seconds <= MAX_PAUSE, measured
    return measured


def record_engine_resizes(
    scenario: Scenario, job: FaultTolerantJob, *, faults: list[float]
) -> list[m.Resize]:
    """Each change of the job's count after its first, from its write, until the next change
    or fault: the survivors are the pods below both counts, the newcomers those it added."""
    measured = []
    history = job.replica_history
    causes = sorted([*faults, *(at for at, _ in history)])
    for (_, before), (at, after) in itertools.pairwise(history):
        later = [t for t in causes if t > at]
        window = min(m.WINDOW_SECONDS, later[0] - at) if later else m.WINDOW_SECONDS
        survivors = {pod_name(job, i) for i in range(min(before, after))}
        newcomers = {pod_name(job, i) for i in range(before, after)}
        kind = "scale-up" if after > before else "scale-down"
        measured.append(
            record(
                scenario,
                job,
                cause=f"{kind} {before}->{after} by the engine",
                at=at,
                survivors=survivors & m.hosts_committing(job.events(), before=at),
                newcomers=newcomers,
                window=window,
            )
        )
    return measured


def pod_name(job: FaultTolerantJob, index: int) -> str:
    return f"{job.name}-worker-{index}"


def assert_trained_exactly_once(
    scenario: Scenario, job: FaultTolerantJob, *, restarted_at: float | None = None
) -> None:
    """No step lost, none applied twice by a process, every group's parameters the same. A
    restart of every worker (`restarted_at`) redoes the steps after the checkpoint: the
    processes before and after it are checked apart."""
    events = job.events()
    lost = m.lost_steps(events)
    scenario.ft_lost_steps.append(len(lost))
    assert lost == []
    for generation in m.generations(events, restarted_at=restarted_at):
        assert m.applied_twice(generation) == []
        assert m.diverged(generation) == []
    finals = {e["hash"] for e in events if e["event"] == "done"}
    assert len(finals) == 1, finals


def wait_done(job: FaultTolerantJob, *, timeout: float) -> None:
    """Until the job succeeded and its lighthouse is gone with it."""
    wait_succeeded(job, timeout=timeout)
    wait_for(
        lambda: ft.lighthouse_name(job.name) not in job.pods(),
        timeout=60,
        what=f"{job.name}'s lighthouse removed with the job finished",
    )


def kill(scenario: Scenario, agent: NodeAgent, pod: str) -> float:
    """SIGKILL a pod's container and wait until every process of it has ended."""
    processes = agent.container_pids(scenario.namespace, pod, "pytorch")
    assert processes, f"{pod} runs no process"
    killed = time.time()
    agent.kill_container(scenario.namespace, pod, "pytorch")
    wait_for(
        lambda: all(process_gone(pid) for pid in processes),
        timeout=10,
        interval=0.1,
        what=f"every process of {pod}'s container to end",
    )
    return killed


def test_the_engine_resizes_a_torchft_job_and_no_survivor_ever_restarts(
    scenario: Scenario,
) -> None:
    """Two nodes of 2 GPUs and the engine with its production rate limits. It grows `ft-first`
    (1..4) as it learns its curve, by several pods in one write once it may; two workers'
    containers are killed (worker-0 first: no worker is special), and each restarts and heals
    in from a peer while the others train on; then `ft-second` (2..4) arrives and the engine
    shrinks `ft-first` to fit it. Both finish their declared work; no surviving process ever
    restarted, no step was lost or applied twice, every group ends with the same parameters."""
    agent = scenario.nodes(2)
    first, second = scenario.torchft_job("ft-first"), scenario.torchft_job("ft-second")
    with scenario.engine():
        first.create(first.manifest(replicas=1, low=1, high=4, total_samples=FIRST_SAMPLES))
        wait_for(
            lambda: first.replicas() == 4 and first.training_with(4),
            timeout=300,
            interval=1,
            what=f"the engine to grow `ft-first` to 4 ({first.replica_history})",
        )
        counts = [count for _, count in first.replica_history]
        assert max(b - a for a, b in itertools.pairwise(counts)) > 1, counts
        faults = []
        for victim in (pod_name(first, 0), pod_name(first, 2)):
            killed = kill(scenario, agent, victim)
            faults.append(killed)
            wait_groups(first, 4, after=killed + 1.0)
            others = {pod_name(first, i) for i in range(4)} - {victim}
            record(
                scenario,
                first,
                cause=f"kill {victim.removeprefix('ft-first-')}",
                at=killed,
                survivors=others,
                newcomers={victim},
            )
        assert restart_counts(first) == {
            **{pod_name(first, i): int(i in (0, 2)) for i in range(4)},
            ft.lighthouse_name(first.name): 0,
        }
        second.create(second.manifest(replicas=2, low=2, high=4, total_samples=SECOND_SAMPLES))
        wait_for(
            lambda: second.training_with(2) and first.replicas() <= 2,
            timeout=240,
            interval=1,
            what="`ft-second` to train at its minimum beside a smaller `ft-first`",
        )
        wait_done(second, timeout=300)
        wait_done(first, timeout=400)
    first.stop_watching()
    resizes = record_engine_resizes(scenario, first, faults=faults)
    assert len(resizes) >= 3, first.replica_history
    for job in (first, second):
        assert_trained_exactly_once(scenario, job)
    assert (first.conditions().get("Failed"), second.conditions().get("Failed")) == (None, None)


# Sized from runs: two cores commit 1,200-2,500 samples/s in all. `ft-first` outlives its
# growth, two kills and `ft-second`'s whole run (about 180 s from its start).
FIRST_SAMPLES = 300_000
SECOND_SAMPLES = 60_000


def test_a_lost_node_and_a_lost_lighthouse(scenario: Scenario) -> None:
    """Three nodes of 1 GPU, a job of 2 workers the engine sizes. A worker's node goes
    silent: the survivor's collective fails after torchft's timeout, the lighthouse drops the
    lost group after its heartbeat timeout, and the survivor trains on alone without
    restarting; the released pod is re-created on the spare node and heals in. Then the
    lighthouse is killed: torchft cannot move groups to a new one, so the operator replaces it
    and restarts every worker, which resume from the job's checkpoint (reported apart). The
    engine sees both recoveries (a pod not ready, restarted containers) and keeps the count
    (`Recovering`). The job finishes its work; nothing was lost or applied twice."""
    agent = scenario.nodes(3, gpus=1)
    job = scenario.torchft_job("ft-faults")
    with scenario.engine():
        job.create(job.manifest(replicas=2, low=1, high=2, total_samples=FAULT_SAMPLES))
        wait_groups(job, 2, timeout=180)
        wait_for(
            lambda: sized(scenario, job.name),
            timeout=120,
            interval=1,
            what="the engine to size `ft-faults` on a reading at its count",
        )
        lost, survivor, victim = lose_a_workers_node(scenario, agent, job)
        assert "Recovering" in reasons(scenario, job.name, after=lost)
        assert restart_counts(job)[survivor] == 0
        killed = lose_the_lighthouse(scenario, agent, job, workers={survivor, victim})
        wait_for(
            lambda: "Recovering" in reasons(scenario, job.name, after=killed),
            timeout=30,
            interval=1,
            what="the engine to see `ft-faults`' workers restarted",
        )
        assert [count for _, count in job.replica_history] == [2], job.replica_history
    wait_done(job, timeout=300)
    assert_trained_exactly_once(scenario, job, restarted_at=killed)


def lose_a_workers_node(
    scenario: Scenario, agent: NodeAgent, job: FaultTolerantJob
) -> tuple[float, str, str]:
    """The node of a worker not beside the lighthouse goes silent; the survivor trains on alone
    and the released pod heals in on the spare node. Returns when it was lost, the survivor and
    the victim."""
    pods = job.pods()
    beacon = pods[ft.lighthouse_name(job.name)]["spec"]["nodeName"]
    victim = next(
        pod_name(job, i) for i in (1, 0) if pods[pod_name(job, i)]["spec"]["nodeName"] != beacon
    )
    survivor = ({pod_name(job, 0), pod_name(job, 1)} - {victim}).pop()
    node = pods[victim]["spec"]["nodeName"]
    lost = time.time()
    agent.lose_node(node)
    wait_groups(job, 1, after=lost, timeout=60)
    record(scenario, job, cause="node lost", at=lost, survivors={survivor})
    replaced = job.replace_pod_of_lost_node(victim, node)
    wait_groups(job, 2, after=replaced, timeout=120)
    record(
        scenario,
        job,
        cause="lost node's pod replaced",
        at=replaced,
        survivors={survivor},
        newcomers={victim},
    )
    return lost, survivor, victim


def lose_the_lighthouse(
    scenario: Scenario, agent: NodeAgent, job: FaultTolerantJob, *, workers: set[str]
) -> float:
    """The lighthouse killed: every worker restarts on its replacement, from the checkpoint.
    Returns when it was killed."""
    wait_for(job.checkpoint_path.exists, timeout=120, what="a checkpoint of `ft-faults`")
    killed = time.time()
    agent.kill_container(scenario.namespace, ft.lighthouse_name(job.name), "lighthouse")
    wait_for(
        lambda: job.training_with(2, after=killed, restarted=True),
        timeout=LIGHTHOUSE_BOUND,
        interval=0.5,
        what="every worker restarted on a new lighthouse and training again",
    )
    events = job.events()
    restarted = {e["process"] for e in events if e["event"] == "start" and e["time"] > killed}
    again = min(e["time"] for e in m.committed(events) if e["process"] in restarted)
    scenario.ft_resizes.append(
        m.Resize(
            job=job.name,
            cause=m.LIGHTHOUSE_LOST,
            pause_seconds=round(again - killed, 2),
            survivor_restarts=len(m.restarted(events, survivors=workers, after=killed)),
            steps_redone=m.redone(events, after=killed),
        )
    )
    return killed


# The engine's first reading, the silent timeout, the release, the rejoin and a lighthouse restart.
FAULT_SAMPLES = 250_000
