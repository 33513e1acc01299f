"""The simulated cluster's state at one instant of virtual time, and the rules that change it.

Rules (documented once, here):
- Capacity is `nodes x gpus_per_node` GPUs. A worker pod needs `gpus_per_replica` GPUs on one
  node. Without the planned placement (the operator's `--planned-placement none`) it goes where
  kube-scheduler's default profile would put it with the operator's packing affinity
  (`autoscaler.sim.placement`): among the nodes with room, towards the job's own workers, else
  the emptiest. With 1-GPU pods whether a pod binds depends on the total only. Throughput
  assumes packed workers, and the run's spread share says how often they were not; a job given
  `split_rates` runs at those while its workers are on more than one node.
- With the planned placement (`autoscaler.api.packing`, the operator's default; `planned`)
  no pod is placed one by one: at each instant torchrun jobs whose workers restart now,
  or that can grow, are re-placed as units (the most GPUs first), each with the most of its spec
  that packs (a growing one keeps its place when no growth packs), then queued jobs start in
  arrival order with the most of their spec that packs, at least their minimum. Pods that do not
  pack wait. torchft jobs grow as the scheduler places them.
- A job's pods are bound as a gang for its minimum: an arrived job waits in a FIFO queue until
  `min_replicas` pods fit at once; the queue is scanned in arrival order and a later job whose
  minimum fits starts even if an earlier one still waits (Kubernetes binds any pod that fits).
- Then every running job's pending pods (spec above bound) bind, in arrival order, as far as
  GPUs allow. So starting a job takes precedence over growing one.
- A running job trains with its bound pods (`active`). Every change of `active` after the start
  restarts all workers: no progress for `restart_seconds` (a change during a restart starts the
  stall again; several changes at one instant count as one rescale). The start itself is free.
  A torchft job pauses `torchft_seconds` instead (its survivors never restart; a newcomer's own
  start-up, a few seconds in which it does not train yet, is not modelled).
- Lowering the spec removes pods at once, as the operator chooses them
  (`autoscaler.api.worker_indices`): pending ones first, then those on the job's least-filled
  nodes, worker-0 last; a torchft job's highest indices first. New pods take the lowest free
  indices.
- A job finishes when its iterations are done and releases its GPUs at that instant.
- A suspended job (held back by the engine) releases every pod at once and makes no progress.
  Resumed, it waits in the queue again like an arrived job, and its start is a restart: it stalls
  `restart_seconds` (its checkpoint reloaded), exactly as a rescale does. A suspension counts as
  a rescale. A job held back while queued before it ever started only leaves the queue: no
  rescale, and once resumed its start is as free as any first start (no checkpoint to reload).
- A job that can never run is rejected at arrival (reported, never silently dropped): its
  minimum needs more GPUs than the cluster has, a pod is larger than a node, or its profile runs
  its batch at zero iterations/s on `min_replicas` workers.
"""

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from autoscaler.api.packing import fewest_nodes, home, kept, nodes_needed, packed
from autoscaler.api.worker_indices import leaving, lowest_free
from autoscaler.sim.placement import pick_node
from autoscaler.sim.profiles import Profile
from autoscaler.sim.workload import WorkloadJob

EPSILON = 1e-9


class Phase(StrEnum):
    WAITING = "waiting"  # not yet submitted
    QUEUED = "queued"  # submitted, minimum not yet bound
    RUNNING = "running"
    SUSPENDED = "suspended"  # held back by the engine: no pods, no progress
    FINISHED = "finished"
    REJECTED = "rejected"


@dataclass
class SimJob:
    """One simulated job and its mutable state (internal to the simulator)."""

    spec: WorkloadJob
    rates: tuple[float, ...]  # iterations/s by active worker count, index 0..max_replicas
    # ... while its workers are on more than one node (None: as `rates`, placement is free).
    split_rates: tuple[float, ...] | None = None
    phase: Phase = Phase.WAITING
    replicas: int = 0  # the spec's worker count (what /scale reports)
    pods: dict[int, int] = field(default_factory=dict)  # node index of every bound pod, by index
    done: float = 0.0  # iterations completed
    stall_until: float = 0.0  # no progress before this time (restart in progress)
    start: float | None = None
    finish: float | None = None
    last_rescale: float | None = None
    rescales: int = 0
    gpu_seconds: float = 0.0  # GPUs allocated x time
    busy_gpu_seconds: float = 0.0  # ... while training (not restarting)
    suspensions: int = 0
    suspended_at: float | None = None  # when the engine held it back (while suspended)
    resuming: bool = False  # queued again after a suspension: its next start is a restart
    annotation: str = ""  # the engine's persisted state
    reason: str = ""  # why it was rejected

    @property
    def active(self) -> int:
        return len(self.pods)

    @property
    def gpus(self) -> int:
        return self.active * self.spec.gpus_per_replica

    def rate(self) -> float:
        """Iterations/s right now, ignoring a restart in progress."""
        if self.phase is not Phase.RUNNING:
            return 0.0
        if self.split_rates is not None and len(set(self.pods.values())) > 1:  # only when charged
            return self.split_rates[self.active]
        return self.rates[self.active]

    def remaining(self) -> float:
        return max(0.0, self.spec.iterations - self.done)


def is_spread(pods: Collection[int], *, gpus_per_replica: int, gpus_per_node: int) -> bool:
    """Pods (their node indices) on more nodes than their GPUs fill: the rates assume fewest."""
    needed = nodes_needed(len(pods), size=gpus_per_replica, per_node=gpus_per_node)
    return len(set(pods)) > needed


def rate_table(job: WorkloadJob, profile: Profile) -> tuple[float, ...]:
    return tuple(
        profile.throughput(job.batch_size, count, job.gpus_per_replica)
        for count in range(job.max_replicas + 1)
    )


class SimState:
    """All jobs and nodes, at virtual time `now` (seconds since the simulation's start)."""

    def __init__(
        self,
        *,
        jobs: list[SimJob],
        nodes: Sequence[int],
        restart_seconds: float,
        torchft_seconds: float = 0.0,
        planned: bool = False,
    ) -> None:
        self.jobs = jobs
        # The planned placement (`autoscaler.api.packing`) instead of the scheduler's.
        self.planned = planned
        self.capacity = tuple(nodes)  # GPUs per node
        self.free = list(nodes)  # free GPUs per node
        self.total_gpus = sum(nodes)
        self.gpus_per_node = max(nodes)
        self.restart_seconds = restart_seconds
        self.torchft_seconds = torchft_seconds  # the stall of a torchft job's resize
        self.now = 0.0
        self.by_name = {job.spec.name: job for job in jobs}

    def live(self) -> list[SimJob]:
        live = (Phase.QUEUED, Phase.RUNNING, Phase.SUSPENDED)
        return [job for job in self.jobs if job.phase in live]

    def advance(self, to: float) -> None:
        """Integrate every running job's progress and GPU time from `now` to `to` (rates fixed)."""
        span = to - self.now
        for job in self.jobs:
            if job.phase is not Phase.RUNNING:
                continue
            training = max(0.0, to - max(self.now, job.stall_until))
            job.done = min(float(job.spec.iterations), job.done + job.rate() * training)
            job.gpu_seconds += job.gpus * span
            job.busy_gpu_seconds += job.gpus * training
        self.now = to

    def next_change(self) -> float | None:
        """The earliest future restart end or finish of a running job."""
        times = []
        for job in self.jobs:
            if job.phase is not Phase.RUNNING:
                continue
            resume = max(self.now, job.stall_until)
            if job.stall_until > self.now:
                times.append(job.stall_until)
            if job.rate() > 0:
                times.append(resume + job.remaining() / job.rate())
        return min(times, default=None)

    def finish_done(self) -> list[SimJob]:
        finished = []
        for job in self.jobs:
            if job.phase is Phase.RUNNING and self._done(job):
                job.done = float(job.spec.iterations)
                self._release(job, keep=0)
                job.phase, job.finish = Phase.FINISHED, self.now
                finished.append(job)
        return finished

    def _done(self, job: SimJob) -> bool:
        """No iteration left, up to rounding (also: left so little that no time step remains)."""
        left = job.remaining()
        if left <= EPSILON * max(1.0, job.spec.iterations):
            return True
        training = job.stall_until <= self.now and job.rate() > 0
        return training and left / job.rate() <= EPSILON * max(1.0, self.now)

    def arrive(self) -> list[SimJob]:
        arrived = []
        for job in self.jobs:
            if job.phase is Phase.WAITING and job.spec.submit_time <= self.now + EPSILON:
                job.replicas = job.spec.replicas
                job.reason = self._never_runs(job)
                job.phase = Phase.REJECTED if job.reason else Phase.QUEUED
                arrived.append(job)
        return arrived

    def _never_runs(self, job: SimJob) -> str:
        spec = job.spec
        if spec.gpus_per_replica > self.gpus_per_node:
            return f"a worker needs {spec.gpus_per_replica} GPUs, a node has {self.gpus_per_node}"
        needed = spec.min_replicas * spec.gpus_per_replica
        if needed > self.total_gpus:
            return f"its minimum needs {needed} GPUs, the cluster has {self.total_gpus}"
        if job.rates[spec.min_replicas] <= 0:
            return (
                f"profile {spec.profile!r} cannot run batch {spec.batch_size} "
                f"on {spec.min_replicas} worker(s)"
            )
        return ""

    def set_replicas(self, job: SimJob, replicas: int) -> None:
        """A new spec; pods above it go at once (pending ones bind in `schedule`)."""
        job.replicas = replicas
        if job.phase is Phase.RUNNING and job.active > replicas:
            self._release(job, keep=replicas)
            self._restarted(job)

    def suspend(self, job: SimJob) -> None:
        """Hold a job back: every pod goes at once (a queued job simply stops waiting)."""
        self._release(job, keep=0)
        job.phase, job.suspended_at, job.resuming = Phase.SUSPENDED, self.now, False
        job.suspensions += 1
        if job.start is not None:  # a job that never ran has no world to restart
            self._restarted(job)

    def resume(self, job: SimJob, replicas: int) -> None:
        """Queue a held-back job again at `replicas`; a restart once its minimum fits."""
        job.replicas = replicas
        job.phase, job.suspended_at = Phase.QUEUED, None
        job.resuming = job.start is not None  # a first start reloads no checkpoint

    def schedule(self) -> list[SimJob]:
        """Bind what fits: queued minimums first (FIFO), then pending pods. Returns started jobs."""
        if self.planned:
            return self._schedule_planned()
        started = []
        for job in self.jobs:
            if job.phase is Phase.QUEUED and self._bind(job, job.spec.min_replicas, gang=True):
                self._started(job)
                started.append(job)
        for job in self.jobs:
            pending = job.replicas - job.active
            if job.phase is not Phase.RUNNING or pending <= 0:
                continue
            self._grow(job, pending)
        return started

    def _started(self, job: SimJob) -> None:
        job.phase = Phase.RUNNING
        job.start = self.now if job.start is None else job.start
        job.stall_until = self.now
        if job.resuming:  # a resume reloads its checkpoint: the stall of a restart
            job.resuming = False
            job.last_rescale = self.now  # counted at its suspension
            job.stall_until = self.now + self.restart_seconds

    def _grow(self, job: SimJob, pending: int) -> None:
        """Bind `pending` pods one by one as kube-scheduler would; growing restarts the job."""
        grew = self._bind(job, pending, gang=False)
        if grew and job.start != self.now:  # pods bound at the start are part of the start
            self._restarted(job)

    def _schedule_planned(self) -> list[SimJob]:
        """The planned placement: torchrun jobs that restart now, or can grow, re-placed as units
        (the most GPUs first), then queued jobs started packed (FIFO); torchft jobs grow as the
        scheduler places them (their workers never restart)."""
        running = [job for job in self.jobs if job.phase is Phase.RUNNING]
        restarting = [job for job in running if self.now in (job.last_rescale, job.start)]
        growing = [job for job in running if job.replicas > job.active and job not in restarting]
        units = [job for job in restarting + growing if not job.spec.torchft]
        for job in sorted(units, key=lambda job: -job.replicas * job.spec.gpus_per_replica):
            self._replace(job, grows=job in growing)
        started = []
        for job in self.jobs:
            if job.phase is Phase.QUEUED and self._place_packed(job, low=job.spec.min_replicas):
                self._started(job)
                started.append(job)
        for job in running:
            if job.spec.torchft and job.replicas > job.active:
                self._grow(job, job.replicas - job.active)
        return started

    def _replace(self, job: SimJob, *, grows: bool) -> None:
        """Re-place a running torchrun job packed: all of its spec that packs (a growing one:
        more than it runs, else it stays as it is)."""
        size = job.spec.gpus_per_replica
        if grows and max(self.free) < size:
            return
        before = dict(job.pods)
        self._release(job, keep=0)
        low = len(before) + 1 if grows else job.spec.min_replicas
        if self._place_packed(job, low=low, current=before):
            if grows:
                self._restarted(job)
        elif grows:  # no packed growth: it stays where it was
            job.pods = before
            for node in before.values():
                self.free[node] -= size
        else:  # not even its minimum packs: as few nodes as hold it
            target = fewest_nodes(self.free, count=job.replicas, size=size, prefer=home(before))
            self._move(job, current=before, target=target)

    def _place_packed(
        self, job: SimJob, *, low: int, current: Mapping[int, int] | None = None
    ) -> bool:
        """Place the most of `job`'s spec, at least `low` pods, packed; False if none."""
        target = packed(
            self.free, low=low, high=job.replicas, size=job.spec.gpus_per_replica,
            per_node=self.gpus_per_node, prefer=home(current or {}),
        )  # fmt: skip
        if target is None:
            return False
        self._move(job, current=current or {}, target=target)
        return True

    def _move(self, job: SimJob, *, current: Mapping[int, int], target: list[int]) -> None:
        """Bind `job` (no pod bound) on `target`, keeping the indices of `current` pods whose
        node stays in it."""
        stay, fill = kept(current, target)
        job.pods = {index: current[index] for index in stay}
        job.pods.update(zip(lowest_free(job.pods, count=len(fill)), fill, strict=True))
        for node in target:
            self.free[node] -= job.spec.gpus_per_replica

    def _bind(self, job: SimJob, count: int, *, gang: bool) -> bool:
        """Place up to `count` pods one by one as kube-scheduler would (all or none when `gang`);
        True if any was placed."""
        size = job.spec.gpus_per_replica
        free = list(self.free)
        own = [0] * len(free)  # the job's workers per node, those placed here included
        for bound in job.pods.values():
            own[bound] += 1
        placed: list[int] = []
        for _ in range(count):
            node = pick_node(free, self.capacity, own, size)
            if node is None:
                break
            free[node] -= size
            own[node] += 1
            placed.append(node)
        if not placed or (gang and len(placed) < count):
            return False
        self.free = free
        job.pods.update(zip(lowest_free(job.pods, count=len(placed)), placed, strict=True))
        return True

    def _release(self, job: SimJob, *, keep: int) -> None:
        if job.spec.torchft:  # replica groups numbered by index: the highest go
            gone = sorted(job.pods, reverse=True)[: max(len(job.pods) - keep, 0)]
        else:
            gone = leaving(job.pods, keep=keep)
        for index in gone:
            self.free[job.pods.pop(index)] += job.spec.gpus_per_replica

    def stall_seconds(self, job: SimJob) -> float:
        return self.torchft_seconds if job.spec.torchft else self.restart_seconds

    def _restarted(self, job: SimJob) -> None:
        if job.last_rescale != self.now:
            job.rescales += 1
        job.last_rescale = self.now
        job.stall_until = self.now + self.stall_seconds(job)
