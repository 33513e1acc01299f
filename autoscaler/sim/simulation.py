"""The discrete-event loop: virtual time jumps from event to event, never reads a wall clock.

Events are arrivals, finishes, restart ends and decision rounds. Between two events every rate is
constant, so progress is integrated exactly (rate x time). Decision rounds happen at multiples of
`interval_seconds` from the start while any job is queued or running (an idle cluster skips
rounds). At one instant the order is: finishes, arrivals, binding, then the round (the engine
observes, decides and writes through the `SimCluster`), then binding again.

Typical use (the engine does not know it is simulated):

    sim = Simulation(workload=jobs, profiles=profiles, config=SimConfig())
    engine = Engine(cluster=sim.cluster, throughput=sim.throughput, ...)
    result = sim.run(decide_round=lambda now: engine.run_once(now=now))
"""

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime

from autoscaler.engine.config import WaitingPrior
from autoscaler.fault_tolerance import RESIZE_PAUSE_SECONDS
from autoscaler.sim.bounds import tightest
from autoscaler.sim.cluster import SimCluster, SimThroughput
from autoscaler.sim.errors import SimInputError
from autoscaler.sim.goodput import GoodputJob
from autoscaler.sim.gradients import SimGradients
from autoscaler.sim.profiles import Profile
from autoscaler.sim.results import JobResult, RunResult, Sample, lower_bound
from autoscaler.sim.state import EPSILON, Phase, SimJob, SimState, is_spread, rate_table
from autoscaler.sim.workload import WorkloadJob, check_job
from autoscaler.torchrun import RESCALE_STALL_SECONDS

DecideRound = Callable[[datetime], object]


@dataclass(frozen=True)
class SimConfig:
    gpus: int = 64
    gpus_per_node: int = 8  # a last node holds the remainder when gpus is not a multiple
    restart_seconds: float = RESCALE_STALL_SECONDS  # stall of every rescale (measured)
    interval_seconds: float = 60.0  # between decision rounds (Pollux's scheduling interval)
    horizon_seconds: float = 30 * 86400.0  # stop here even if jobs are left (they are reported)
    namespace: str = "sim"
    origin: datetime = datetime(2025, 1, 1, tzinfo=UTC)  # virtual time 0
    noise: float = 0.0  # relative std-dev of reported throughput
    declared_work: bool = True  # every job declares its total samples (else none does)
    torchft: bool = False  # every job in torchft mode (else those the workload marks)
    torchft_pause_seconds: float = RESIZE_PAUSE_SECONDS  # a torchft job's stall per resize
    preemptible: bool = False  # every job lets the engine hold it back (queueing on)
    waiting_prior: WaitingPrior = "none"  # the engine's curve of a waiting job it never observed
    declared_profiles: bool = False  # every job declares its samples/s by count (as profiled)
    oracle: bool = False  # every job declares its true samples/s and the engine trusts them
    # A Pollux workload progresses by statistical efficiency (`autoscaler.sim.goodput`).
    goodput: bool = False
    # With goodput, a job that fits one node but runs on several trains at the fitted model's
    # rate across nodes (else every placement is charged as packed).
    placement_rates: bool = False
    # A job's workers placed as one unit, packed (`autoscaler.api.packing`), as the operator's
    # default `--planned-placement`; else as kube-scheduler places each pod (`none`).
    planned_placement: bool = True
    seed: int = 0

    def __post_init__(self) -> None:
        if self.gpus < 1 or self.gpus_per_node < 1:
            raise ValueError("gpus and gpus_per_node must be positive")
        if self.interval_seconds <= 0 or self.restart_seconds < 0 or self.horizon_seconds <= 0:
            raise ValueError("interval and horizon must be positive, restart_seconds >= 0")

    def node_sizes(self) -> list[int]:
        full, rest = divmod(self.gpus, self.gpus_per_node)
        return [self.gpus_per_node] * full + ([rest] if rest else [])


class Simulation:
    """One run of one workload; build it, wire an engine to `cluster`/`throughput`, then `run`."""

    def __init__(
        self,
        *,
        workload: Sequence[WorkloadJob],
        profiles: Mapping[str, Profile],
        config: SimConfig | None = None,
        goodput: Mapping[str, GoodputJob] | None = None,
    ) -> None:
        """`goodput`: how each job of a goodput workload progresses, by job name."""
        self.config = config or SimConfig()
        self.goodput = dict(goodput or {})
        self.profiles = dict(profiles)
        jobs = []
        for given in sorted(workload, key=lambda job: job.submit_time):
            source = f"<workload job {given.name}>"
            check_job(given, profiles=self.profiles, source=source, line=None)
            job = replace(given, torchft=True) if self.config.torchft else given
            jobs.append(SimJob(spec=job, rates=rate_table(job, self.profiles[job.profile])))
        if len({job.spec.name for job in jobs}) != len(jobs):
            raise SimInputError("<workload>", None, "job names must be unique")
        self.state = SimState(
            jobs=jobs,
            nodes=self.config.node_sizes(),
            restart_seconds=self.config.restart_seconds,
            torchft_seconds=self.config.torchft_pause_seconds,
            planned=self.config.planned_placement,
        )
        self.cluster = SimCluster(
            self.state,
            namespace=self.config.namespace,
            origin=self.config.origin,
            declared_work=self.config.declared_work,
            preemptible=self.config.preemptible,
            declared_profiles=self.config.declared_profiles or self.config.oracle,
        )
        self.throughput = SimThroughput(
            self.state,
            namespace=self.config.namespace,
            noise=self.config.noise,
            seed=self.config.seed,
        )
        # What its goodput jobs report of their gradients (None: no goodput workload).
        self.gradients = (
            SimGradients(self.state, self.goodput, namespace=self.config.namespace)
            if self.goodput
            else None
        )
        self.rounds = 0
        self.job_rounds = 0  # a running job in a decision round, after its binding
        self.spread_rounds = 0  # ... on more nodes than its GPUs fill
        self._ran = False
        self._timeline: list[Sample] = []

    def run(self, *, decide_round: DecideRound) -> RunResult:
        """Simulate to the last finish (or the horizon), calling `decide_round(now)` each round."""
        if self._ran:
            raise RuntimeError("a Simulation runs once; build a new one")
        self._ran = True
        state, interval = self.state, self.config.interval_seconds
        next_round = 0
        while True:
            self._refresh()
            self._settle()
            live = bool(state.live())
            if live:
                next_round = max(next_round, math.ceil(state.now / interval - EPSILON))
                if abs(next_round * interval - state.now) <= EPSILON * max(1.0, state.now):
                    self._round(decide_round)
                    next_round += 1
            self._sample()
            upcoming = [self._next_arrival(), state.next_change()]
            upcoming.append(next_round * interval if live else None)
            times = [time for time in upcoming if time is not None]
            if not times:
                break
            if min(times) > self.config.horizon_seconds:
                state.advance(max(state.now, self.config.horizon_seconds))
                break
            state.advance(max(state.now, min(times)))
        return self._result()

    def _refresh(self) -> None:
        """A goodput job's rates follow its epoch (its gradient noise grows as it trains)."""
        for job in self.state.jobs:
            model = self.goodput.get(job.spec.name)
            if model is not None and job.phase is not Phase.FINISHED:
                job.rates = model.rates(job.done, job.spec.max_replicas)
                if self.config.placement_rates:
                    job.split_rates = model.split_rates(job.done, job.spec.max_replicas)

    def _round(self, decide_round: DecideRound) -> None:
        self.rounds += 1
        decide_round(self.cluster.at(self.state.now))
        self._started(self.state.schedule())
        self._count_spread()

    def _count_spread(self) -> None:
        """Count this round's running jobs, and those spread over more nodes than needed."""
        state = self.state
        for job in state.jobs:
            if job.phase is not Phase.RUNNING or not job.active:
                continue
            self.job_rounds += 1
            self.spread_rounds += is_spread(
                job.pods.values(), gpus_per_replica=job.spec.gpus_per_replica,
                gpus_per_node=state.gpus_per_node,
            )  # fmt: skip

    def _sample(self) -> None:
        """Add the cluster's allocation to the timeline when it differs from the last sample."""
        running = [job for job in self.state.jobs if job.phase is Phase.RUNNING and job.active]
        gpus = {job.spec.name: job.gpus for job in running}
        training = sum(job.gpus for job in running if job.stall_until <= self.state.now)
        last = self._timeline[-1] if self._timeline else None
        if last is not None and (last.gpus, last.training) == (gpus, training):
            return
        if last is not None and last.seconds == self.state.now:
            self._timeline.pop()
        self._timeline.append(Sample(self.state.now, gpus, training))

    def _next_arrival(self) -> float | None:
        waiting = (job.spec.submit_time for job in self.state.jobs if job.phase is Phase.WAITING)
        return min(waiting, default=None)

    def _settle(self) -> None:
        """Finishes, arrivals and binding at the current instant, each with an Event."""
        for job in self.state.finish_done():
            message = f"trained {job.spec.iterations} iterations, {job.rescales} rescales"
            self._note(job, "Finished", message)
        for job in self.state.arrive():
            if job.phase is Phase.REJECTED:
                self._note(job, "Rejected", f"can never run: {job.reason}", warning=True)
        self._started(self.state.schedule())
        for job in self.state.jobs:
            if job.phase is Phase.QUEUED and job.spec.submit_time >= self.state.now - EPSILON:
                needed = job.spec.min_replicas * job.spec.gpus_per_replica
                message = f"waiting in the queue: its minimum ({needed} GPUs) does not fit"
                self._note(job, "Queued", message)

    def _started(self, jobs: list[SimJob]) -> None:
        for job in jobs:
            self._note(job, "Started", f"started with {job.active} of {job.replicas} workers")

    def _note(self, job: SimJob, reason: str, message: str, *, warning: bool = False) -> None:
        self.cluster.record(
            job.spec.name, reason=reason, message=message, warning=warning, source="simulator"
        )

    def _result(self) -> RunResult:
        jobs = tuple(self._job_result(job) for job in self.state.jobs)
        submits = [job.spec.submit_time for job in self.state.jobs]
        return RunResult(
            jobs=jobs,
            gpus=self.state.total_gpus,
            first_submit=min(submits, default=0.0),
            end=self.state.now,
            scale_writes=self.cluster.writes,
            events=tuple(self.cluster.events),
            timeline=tuple(self._timeline),
            job_rounds=self.job_rounds,
            spread_rounds=self.spread_rounds,
        )

    def _job_result(self, job: SimJob) -> JobResult:
        spec = job.spec
        gpus, model = self.state.total_gpus, self.goodput.get(spec.name)
        given = None if model is None else model.alone_seconds(spec, total_gpus=gpus)
        bound = tightest(lower_bound(spec, self.profiles[spec.profile], total_gpus=gpus), given)
        return JobResult(
            name=spec.name,
            profile=spec.profile,
            status=str(job.phase),
            submit=spec.submit_time,
            start=job.start,
            finish=job.finish,
            rescales=job.rescales,
            suspensions=job.suspensions,
            gpu_seconds=job.gpu_seconds,
            busy_gpu_seconds=job.busy_gpu_seconds,
            lower_bound=bound if job.phase is not Phase.REJECTED else None,
            reason=job.reason,
        )
