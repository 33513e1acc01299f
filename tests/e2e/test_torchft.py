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
from collections.abc import Sequence

import pytest

from autoscaler import fault_tolerance as ft
from tests.e2e import ft_measure as m
from tests.e2e.report import TARGET_FT_NODE_LOST
from tests.e2e.training import (
    FaultTolerantJob,
    PodsSeen,
    Scenario,
    finish,
    kept_since,
    pods_seen,
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
# What a survivor may pause at most: a silent peer's (its collective timeout plus a re-form); a
# kill or a leave costs the lighthouse's heartbeat timeout at most.
MAX_PAUSE = TARGET_FT_NODE_LOST
LIGHTHOUSE_BOUND = 60.0  # a new lighthouse, every worker restarted, healed from the checkpoint


def record(
    scenario: Scenario,
    job: FaultTolerantJob,
    *,
    cause: str,
    at: float,
    survivors: set[str],
    world: int,
    newcomers: set[str] | None = None,
    target: float | None = None,
) -> m.Resize:
    """Measure one resize or fault of `job` caused at `at` until it was over (`world` groups
    committing, `newcomers` in), or until now; keep it, hold it to the target."""
    measured = m.measure(
        job.events(),
        job=job.name,
        cause=cause,
        after=at,
        survivors=survivors,
        world=world,
        end=time.time(),
        newcomers=newcomers,
        target_seconds=target,
    )
    scenario.ft_resizes.append(measured)
    assert measured.survivor_restarts == 0, measured
    assert measured.pause_seconds <= MAX_PAUSE, measured
    return measured


def record_causes(
    scenario: Scenario, job: FaultTolerantJob, *, kills: Sequence[tuple[float, str]] = ()
) -> list[m.Resize]:
    """Every change of the job's count after its first and every kill (time, pod), each from
    its cause until it was over (a change overtaken before it was over joins the next); keep
    them, hold them to the targets."""
    history, pods = (
        job.replica_history,
        lambda n, k: frozenset(pod_name(job, i) for i in range(n, k)),
    )
    causes = [
        m.Cause(
            at=at,
            label=f"{'scale-up' if after > before else 'scale-down'} {before}->{after} by the engine",
            world=after,
            before=pods(0, before),
            removed=pods(after, before),
            added=pods(before, after),
        )
        for (_, before), (at, after) in itertools.pairwise(history)
    ]
    for at, victim in kills:
        count = [n for t, n in history if t <= at][-1]
        label = f"kill {victim.removeprefix(f'{job.name}-')}"
        causes.append(
            m.Cause(at, label, count, pods(0, count), frozenset({victim}), frozenset({victim}))
        )
    measured = m.measure_causes(job.events(), job=job.name, causes=causes, end=time.time())
    scenario.ft_resizes.extend(measured)
    for resize in measured:
        assert resize.survivor_restarts == 0, resize
        assert resize.pause_seconds <= MAX_PAUSE, resize
    return measured


def assert_no_survivor_restarted(job: FaultTolerantJob, seen: PodsSeen) -> None:
    """Every pod there at `seen` and still now kept its containers and training processes."""
    kept = kept_since(job, seen)
    assert not any(kept.values()), f"containers restarted since {seen.at}: {kept}"
    workers = set(kept) - {ft.lighthouse_name(job.name)}
    again = m.restarted(job.events(), survivors=workers, after=seen.at, until=time.time())
    assert again == set(), f"training processes started again: {again}"


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


def wait_done(job: FaultTolerantJob, *, timeout: float, cut: bool = True) -> None:
    """Cuts the job's work short (`cut`), then until it succeeded and its lighthouse is gone."""
    if cut:
        finish(job, timeout=timeout)
    else:
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
    """Two nodes of 2 GPUs and the engine with its e2e settings (faster than the shipped
    defaults, each named by the report). It grows `ft-first`
    (1..4) as it learns its curve, by several pods in one write once it may; two workers'
    containers are killed (worker-0 first: no worker is special), and each restarts and heals
    in from a peer while the others train on; then `ft-second` (2..4) arrives and the engine
    shrinks `ft-first` to fit it. Both finish their work (`ft-first`'s cut short once checked); no
    surviving process ever restarted, no step was lost or applied twice, every group ends with
    the same parameters."""
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
        kills = []
        for victim in (pod_name(first, 0), pod_name(first, 2)):
            kills.append((kill(scenario, agent, victim), victim))
            wait_groups(first, 4, after=kills[-1][0] + 1.0)
        assert restart_counts(first) == {
            **{pod_name(first, i): int(i in (0, 2)) for i in range(4)},
            ft.lighthouse_name(first.name): 0,
        }
        first_seen = pods_seen(first)
        second.create(second.manifest(replicas=2, low=2, high=4, total_samples=SECOND_SAMPLES))
        wait_for(
            lambda: second.training_with(2) and first.replicas() <= 2,
            timeout=240,
            interval=1,
            what="`ft-second` to train at its minimum beside a smaller `ft-first`",
        )
        second_seen = pods_seen(second)
        # `ft-first` is cut now, so `ft-second` soon trains alone (the engine may grow it into the
        # freed slots) and finishes its small declared work.
        first.cut_work()
        wait_done(second, timeout=300, cut=False)
        wait_done(first, timeout=300, cut=False)
    assert_no_survivor_restarted(first, first_seen)
    assert_no_survivor_restarted(second, second_seen)
    for job in (first, second):
        job.stop_watching()
    assert len(first.replica_history) >= 4, first.replica_history
    record_causes(scenario, first, kills=kills)
    record_causes(scenario, second)
    for job in (first, second):
        assert_trained_exactly_once(scenario, job)
    assert (first.conditions().get("Failed"), second.conditions().get("Failed")) == (None, None)


# Sized from runs: two cores commit 1,200-2,500 samples/s in all. `ft-first` outlives its
# growth, two kills and `ft-second`'s arrival; `ft-second` only has to train beside it and finish.
FIRST_SAMPLES = 300_000
SECOND_SAMPLES = 30_000


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
        seen = pods_seen(job)
        wait_for(
            lambda: sized(scenario, job.name),
            timeout=120,
            interval=1,
            what="the engine to size `ft-faults` on a reading at its count",
        )
        survivor, victim = lose_a_workers_node(scenario, agent, job)
        assert restart_counts(job)[survivor] == 0
        assert_no_survivor_restarted(
            job, seen
        )  # the survivor and the lighthouse, until it is killed
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
) -> tuple[str, str]:
    """The node of a worker not beside the lighthouse goes silent; the survivor trains on alone,
    the engine holds the job (`Recovering`), and the released pod heals in on the spare node.
    Returns the survivor and the victim."""
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
    record(
        scenario,
        job,
        cause=m.NODE_LOST,
        at=lost,
        survivors={survivor},
        world=1,
        target=TARGET_FT_NODE_LOST,
    )
    # The survivors pause for less than the engine's `stall_seconds`, so it sees the recovery by
    # the lost node's pod, not ready until it is replaced (replaced at once, it was missed).
    wait_for(
        lambda: "Recovering" in reasons(scenario, job.name, after=lost),
        timeout=60,
        interval=1,
        what=f"the engine to hold `{job.name}` as recovering (its lost node's pod not ready)",
    )
    replaced = job.replace_pod_of_lost_node(victim, node)
    wait_groups(job, 2, after=replaced, timeout=120)
    record(
        scenario,
        job,
        cause="lost node's pod replaced",
        at=replaced,
        survivors={survivor},
        world=2,
        newcomers={victim},
    )
    return survivor, victim


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
            survivor_restarts=len(
                m.restarted(events, survivors=workers, after=killed, until=again)
            ),
            steps_redone=m.redone(events, after=killed),
        )
    )
    return killed


# The engine's first reading, the silent timeout, the release, the rejoin and a lighthouse restart.
FAULT_SAMPLES = 250_000
