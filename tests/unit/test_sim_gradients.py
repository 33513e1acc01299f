"""What a simulated goodput job reports of its gradients (`autoscaler.sim.gradients`), on Pollux's
cifar10 traces as bundled with the benchmark: the engine prices it as it prices a real job."""

import dataclasses
import math
from pathlib import Path

from autoscaler.api.ownership import Owner
from autoscaler.engine.ports import ManagedJob
from autoscaler.sim.goodput import GoodputJob, load_application
from autoscaler.sim.gradients import SimGradients
from autoscaler.sim.state import Phase, SimJob, SimState
from autoscaler.sim.workload import WorkloadJob
from tests.support.clock import NOW

TRACES = Path(__file__).parents[2] / "benchmarks" / "data" / "pollux" / "traces"
CIFAR = load_application(TRACES / "cifar10")
NCF = load_application(TRACES / "ncf")


def running(name: str, *, pods: int, done: float = 0.0, stalled: bool = False) -> SimJob:
    spec = WorkloadJob(name, 0.0, "cifar10", 128, 1000, 1, 16, pods, gpus_per_replica=1)
    job = SimJob(spec=spec, rates=(0.0,) * 17, phase=Phase.RUNNING, replicas=pods, done=done)
    job.pods = dict.fromkeys(range(pods), 0)
    job.stall_until = 100.0 if stalled else 0.0
    return job


def managed(name: str) -> ManagedJob:
    return ManagedJob(
        namespace="sim", name=name, min_replicas=1, max_replicas=16, replicas=1, active=1,
        owner=Owner.ENGINE, created=NOW,
    )  # fmt: skip


def source(*jobs: SimJob, models: dict[str, GoodputJob]) -> SimGradients:
    state = SimState(jobs=list(jobs), nodes=[4, 4, 4, 4], restart_seconds=30.0)
    state.now = 50.0
    return SimGradients(state, models, namespace="sim")


def test_an_adapting_job_reports_its_noise_bounds_batch_and_step_times() -> None:
    job = running("a", pods=4, done=CIFAR.epoch_ends[9])  # in epoch 10
    gradients = source(job, models={"a": GoodputJob(CIFAR, None)})
    (report,) = gradients.goodput([managed("a")], now=NOW).values()
    choice = CIFAR.adaptive_choice(4, 10)
    assert choice is not None
    assert (report.local_batch, report.accum_steps, report.replicas) == (
        choice.local_batch, choice.accum_steps, 4
    )  # fmt: skip
    assert math.isclose(report.noise_scale, CIFAR.noise(choice.global_batch, 10).phi)
    assert (report.base_batch, report.max_local_batch, report.max_global_batch) == (
        CIFAR.limits.base_batch, CIFAR.limits.max_local_batch, CIFAR.limits.max_global_batch
    )  # fmt: skip
    (step,) = report.steps
    assert step.seconds == CIFAR.step_seconds(4, choice.local_batch, choice.accum_steps)
    job.pods = dict.fromkeys(
        range(8), 0
    )  # rescaled: the configuration it trained at before stays reported
    (later,) = gradients.goodput([managed("a")], now=NOW).values()
    assert sorted(s.replicas for s in later.steps) == [4, 8]


def test_jobs_that_keep_their_batch_or_do_not_train_report_nothing() -> None:
    jobs = [
        running("fixed", pods=2),  # the paper's baselines keep the workload's batch
        running("ncf", pods=1),  # ncf runs at its largest batch under Pollux
        running("stalled", pods=2, stalled=True),  # restarting: no step timed
        running("unknown", pods=2),  # not a goodput job
    ]
    models = {
        "fixed": GoodputJob(CIFAR, 2048),
        "ncf": GoodputJob(NCF, None),
        "stalled": GoodputJob(CIFAR, None),
    }
    gradients = source(*jobs, models=models)
    assert gradients.goodput([managed(job.spec.name) for job in jobs], now=NOW) == {}
    queued = running("queued", pods=0)
    queued.phase = Phase.QUEUED
    assert (
        source(queued, models={"queued": GoodputJob(CIFAR, None)}).goodput(
            [managed("queued")], now=NOW
        )
        == {}
    )


def test_a_job_of_another_namespace_is_not_the_simulated_one() -> None:
    gradients = source(running("a", pods=2), models={"a": GoodputJob(CIFAR, None)})
    elsewhere = dataclasses.replace(managed("a"), namespace="elsewhere")
    assert set(gradients.goodput([managed("a"), elsewhere], now=NOW)) == {("sim", "a")}
