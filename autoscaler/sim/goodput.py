"""Goodput in the simulator: Pollux's jobs progress by statistical efficiency, not samples.

A Pollux application (a folder of `petuum/adaptdl` @ osdi21-artifact `simulator/traces/<model>/`)
gives, per validated global batch B, `validation-<B>.csv`: per epoch the progress reached at its
end (in iterations at the application's base batch B0, the smallest validated one) and the
gradient statistics grad_sqr and grad_var measured in that epoch. A goodput job then:

- has `epochs` of work (`EPOCHS`, the paper's targets), the progress at the end of its last epoch
  in the B0 trace; its work is declared and reported in samples at B0 (iterations at B0 x B0);
- at progress p is in the epoch whose end has not been reached; its gradient statistics at a batch
  B are those of that epoch, interpolated linearly between the two validated batches around B;
- one step at B makes gain(B) = (var + sqr) / (var / S + sqr) iterations of progress (S = B / B0)
  and takes the measured step time of its placement (`autoscaler.sim.pollux`: GPUs packed 4 per
  node, step and sync time interpolated in the local batch, accumulation as Pollux does);
- **adapting** (a policy that co-adapts the batch, as Pollux does): at each count it runs the batch
  `autoscaler.goodput.batch.best_batch` picks with the step-time model fitted
  (`goodput.step_time.fit`) to the application's measured step times, and the gradient noise of
  its current epoch at that batch; **fixed**: it keeps the workload's batch (Optimus, Tiresias).

Rates are in iterations at B0 per second, refreshed every round (the epoch moves on); with the
job's `batch_size` set to B0 every reading of the engine is in samples at B0. Pollux measured only
packed placements; with `SimConfig.placement_rates` a job whose workers fit one node but run on
several is charged the step time the fitted model gives across nodes (`split_rates`): in Pollux's
model the node count matters only between one node and several.
"""

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from autoscaler.goodput.batch import BatchChoice, BatchLimits, best_batch
from autoscaler.goodput.efficiency import GradientNoise, noise_scale
from autoscaler.goodput.step_time import StepObservation, StepTimeModel, fit
from autoscaler.goodput.step_time import step_seconds as model_step_seconds
from autoscaler.sim.errors import SimInputError
from autoscaler.sim.pollux import (
    GPUS_PER_NODE,
    MAX_LOCAL_BATCH,
    PACKED_COUNTS,
    Curve,
    packed_key,
    read_curves,
    read_table,
    step_times,
    validated_batch_sizes,
)
from autoscaler.sim.profiles import Profile, ProfileRow
from autoscaler.sim.workload import WorkloadJob

# The paper's completion epochs (no metric target) and largest global batches per application.
EPOCHS = {"bert": 2, "cifar10": 100, "ncf": 10, "imagenet": 90, "deepspeech2": 80, "yolov3": 50}
MAX_GLOBAL_BATCH = {
    "bert": 384, "cifar10": 4096, "deepspeech2": 640, "imagenet": 12800, "ncf": 32768,
    "yolov3": 512,
}  # fmt: skip
# ncf runs at its largest batch on one replica under Pollux (simulator/applications.py).
FIXED_BATCH = {"ncf": 32768}
COLUMNS = ("progress", "iteration", "metric", "grad_sqr", "grad_var")
EPS = 1e-8


@dataclass(frozen=True, eq=False)  # hashed by identity: one per trace folder and process
class Application:
    name: str
    base_batch: int
    limits: BatchLimits
    epoch_ends: tuple[float, ...]  # progress (iterations at B0) at the end of each epoch
    stats: Mapping[int, tuple[tuple[float, float], ...]]  # batch -> (sqr, var) per epoch
    curves: Mapping[str, Curve]
    model: StepTimeModel  # fitted to the measured step times

    @property
    def work(self) -> float:
        """Iterations at B0 to reach the last epoch."""
        return self.epoch_ends[-1]

    def epoch(self, progress: float) -> int:
        """The epoch (0-based) a job is in at `progress`."""
        done = sum(end <= progress + EPS for end in self.epoch_ends)
        return min(done, len(self.epoch_ends) - 1)

    def gradient(self, batch: float, epoch: int) -> tuple[float, float]:
        """(grad_sqr, grad_var) at global batch `batch`, linear between validated batches."""
        sizes = sorted(self.stats)
        batch = min(max(batch, sizes[0]), sizes[-1])
        upper = next(size for size in sizes if size >= batch)
        lower = max((size for size in sizes if size <= batch), default=upper)
        low, high = self.stats[lower][epoch], self.stats[upper][epoch]
        share = 0.0 if upper == lower else (batch - lower) / (upper - lower)
        return tuple(a + (b - a) * share for a, b in zip(low, high, strict=True))  # type: ignore[return-value]

    def noise(self, batch: float, epoch: int) -> GradientNoise:
        sqr, var = self.gradient(batch, epoch)
        return GradientNoise(noise_scale(sqr, var, self.base_batch), self.base_batch)

    def gain(self, batch: float, epoch: int) -> float:
        """Iterations at B0 of progress one step at `batch` makes (Pollux's `gain`)."""
        sqr, var = self.gradient(batch, epoch)
        scale = batch / self.base_batch
        denominator = var / scale + sqr
        return (var + sqr) / denominator if denominator > 0 else 1.0

    def step_seconds(self, gpus: int, local_batch: int, accum_steps: int) -> float:
        """Measured time of one step of `gpus` packed GPUs (0 if its placement was not)."""
        curve = self.curves.get(packed_key(gpus))
        if curve is None or not curve[0][0] <= local_batch <= curve[-1][0] + EPS:
            return 0.0
        step, sync = step_times(curve, local_batch)
        return step + accum_steps * (step - sync)

    def fixed_rate(self, batch: int, gpus: int, epoch: int) -> float:
        """Iterations at B0 per second at the workload's batch on `gpus` (0 = does not fit)."""
        seconds = self.step_seconds(gpus, *self._fixed_shape(batch, gpus))
        return self.gain(batch, epoch) / seconds if seconds > 0 else 0.0

    def _fixed_shape(self, batch: int, gpus: int) -> tuple[int, int]:
        """(micro-batch, accumulation steps) of a global `batch` on `gpus`, as Pollux splits it."""
        local = math.ceil(batch / gpus - EPS)
        accum = max(math.ceil(local / self.limits.max_local_batch - EPS) - 1, 0)
        return math.ceil(local / (accum + 1) - EPS), accum

    @property
    def adapts(self) -> bool:
        """Whether its jobs co-adapt their batch (ncf keeps its largest batch, as under Pollux)."""
        return self.name not in FIXED_BATCH

    def adaptive_choice(self, gpus: int, epoch: int) -> BatchChoice | None:
        """The batch goodput picks on `gpus` in `epoch` (None: none fits)."""
        return _adaptive_choice(self, gpus, epoch)

    def split_slowdown(self, gpus: int, epoch: int, batch: int | None) -> float:
        """How much longer a step on `gpus` takes across nodes than within one, by the fitted model
        at the batch the job runs there (1 where that is multi-node anyway, or nothing fits)."""
        if gpus < 2 or gpus > GPUS_PER_NODE:
            return 1.0
        shape = self._shape(gpus, epoch, batch)
        if shape is None:
            return 1.0
        local, accum = shape
        one, several = (
            model_step_seconds(
                self.model, nodes=nodes, replicas=gpus, local_batch=local, accum_steps=accum
            )
            for nodes in (1, 2)
        )
        return several / one

    def _shape(self, gpus: int, epoch: int, batch: int | None) -> tuple[int, int] | None:
        """(local batch, accumulation steps) the job runs on `gpus`: at its fixed `batch` (or the
        application's), else the adaptive pick (None: none fits)."""
        fixed = batch if batch is not None else FIXED_BATCH.get(self.name)
        if fixed is not None:
            return self._fixed_shape(fixed, gpus)
        choice = self.adaptive_choice(gpus, epoch)
        return None if choice is None else (choice.local_batch, choice.accum_steps)

    def adaptive_rate(self, gpus: int, epoch: int) -> float:
        """Iterations at B0 per second at the batch goodput picks on `gpus` (0 = does not fit)."""
        if not self.adapts:
            return self.fixed_rate(FIXED_BATCH[self.name], gpus, epoch)
        choice = self.adaptive_choice(gpus, epoch)
        if choice is None:
            return 0.0
        seconds = self.step_seconds(gpus, choice.local_batch, choice.accum_steps)
        return self.gain(choice.global_batch, epoch) / seconds if seconds > 0 else 0.0


# Asked every round for each running job by both its rates and its gradient report.
@functools.cache
def _adaptive_choice(application: Application, gpus: int, epoch: int) -> BatchChoice | None:
    """The job measures its noise at the batch it runs: pick with B0's, then with the pick's."""
    nodes = math.ceil(gpus / GPUS_PER_NODE)
    batch = float(application.base_batch)
    for _ in range(2):
        choice = best_batch(
            application.model,
            application.noise(batch, epoch),
            application.limits,
            replicas=gpus,
            nodes=nodes,
        )
        if not choice.fits:
            return None
        batch = choice.global_batch
    return choice


def _observations(curves: Mapping[str, Curve]) -> list[StepObservation]:
    """Every measured packed configuration as a step-time observation (no accumulation)."""
    found = []
    for gpus in PACKED_COUNTS:
        for local, step, _sync in curves.get(packed_key(gpus), ()):
            nodes = math.ceil(gpus / GPUS_PER_NODE)
            found.append(StepObservation(nodes, gpus, int(local), 0, step))
    return found


@functools.cache
def load_application(trace_dir: Path) -> Application:
    """The application of a Pollux trace folder (read once per process)."""
    name = trace_dir.name
    if name not in EPOCHS:
        raise SimInputError(trace_dir, None, f"no epoch target for {name!r} ({', '.join(EPOCHS)})")
    files = validated_batch_sizes(trace_dir)
    if not files:
        raise SimInputError(trace_dir, None, "no validation-<batch>.csv")
    stats = {}
    for size, path in files.items():
        rows = [values for _line, values in read_table(path, COLUMNS)]
        if len(rows) < EPOCHS[name]:
            raise SimInputError(path, None, f"{len(rows)} epochs, the target is {EPOCHS[name]}")
        stats[size] = tuple((row[3], row[4]) for row in rows[: EPOCHS[name]])
    base = min(files)
    ends = tuple(values[0] for _line, values in read_table(files[base], COLUMNS))[: EPOCHS[name]]
    curves = read_curves(trace_dir)
    smallest = min(curve[0][0] for curve in curves.values())
    largest = max(curve[-1][0] for curve in curves.values())
    limits = BatchLimits(
        base_batch=base,
        max_local_batch=int(min(largest, MAX_LOCAL_BATCH.get(name, largest))),
        max_global_batch=MAX_GLOBAL_BATCH.get(name, max(files)),
        min_local_batch=min(int(smallest), base),
    )
    return Application(name, base, limits, ends, stats, curves, fit(_observations(curves)))


@functools.cache
def rates(
    application: Application, epoch: int, max_replicas: int, batch: int | None
) -> tuple[float, ...]:
    """Iterations at B0 per second by GPU count 0..max_replicas in `epoch`: at the batch goodput
    picks (`batch` None) or at the fixed `batch`. Counts between two measured placements are
    interpolated linearly; past the largest measured one nothing runs."""
    measured = {0: 0.0}
    for count in (g for g in PACKED_COUNTS if packed_key(g) in application.curves):
        if batch is None:
            measured[count] = application.adaptive_rate(count, epoch)
        else:
            measured[count] = application.fixed_rate(batch, count, epoch)
    known = sorted(measured)
    table = []
    for count in range(max_replicas + 1):
        if count in measured or count > known[-1]:
            table.append(measured.get(count, 0.0))
            continue
        upper = next(k for k in known if k > count)
        lower = max(k for k in known if k < count)
        share = (count - lower) / (upper - lower)
        table.append(measured[lower] + (measured[upper] - measured[lower]) * share)
    return tuple(table)


@functools.cache
def split_rates(
    application: Application, epoch: int, max_replicas: int, batch: int | None
) -> tuple[float, ...]:
    """`rates` for workers spread over several nodes: a count that fits one node slowed by the
    fitted model's cost of crossing nodes; the others as packed (already across nodes)."""
    packed = rates(application, epoch, max_replicas, batch)
    return tuple(
        rate / application.split_slowdown(count, epoch, batch) for count, rate in enumerate(packed)
    )


def alone_seconds(
    application: Application,
    job: WorkloadJob,
    *,
    batches: Sequence[int | None],
    total_gpus: int,
) -> float | None:
    """The job's JCT alone on the cluster from its arrival, never restarted, each epoch's work
    at the best rate of any count, any of `batches` (None: the batch goodput picks) and any
    epoch up to it: a run keeps the rate of the epoch its round began in, so a later epoch may
    be trained at an earlier one's. No run at those batches finishes it sooner; a profile of the
    best rate over all epochs prices the early, slower epochs too fast. None: it cannot run."""
    most = min(job.max_replicas, total_gpus // job.gpus_per_replica)
    if most < job.min_replicas:
        return None
    seconds, start, best = 0.0, 0.0, 0.0
    for epoch, end in enumerate(application.epoch_ends):
        for batch in batches:
            best = max(best, *rates(application, epoch, most, batch)[job.min_replicas :])
        if best <= 0:
            return None
        seconds += (end - start) / best
        start = end
    return seconds


@dataclass(frozen=True)
class GoodputJob:
    """How one simulated job progresses: its application and its batch (None = adapting)."""

    application: Application
    batch: int | None

    def rates(self, progress: float, max_replicas: int) -> tuple[float, ...]:
        return rates(self.application, self.application.epoch(progress), max_replicas, self.batch)

    def alone_seconds(self, job: WorkloadJob, *, total_gpus: int) -> float | None:
        """`alone_seconds` at the batch this job runs at."""
        return alone_seconds(self.application, job, batches=(self.batch,), total_gpus=total_gpus)

    def split_rates(self, progress: float, max_replicas: int) -> tuple[float, ...]:
        epoch = self.application.epoch(progress)
        return split_rates(self.application, epoch, max_replicas, self.batch)


@dataclass(frozen=True)
class GoodputWorkload:
    """A Pollux workload with goodput: work in iterations at B0 and, per application, a profile of
    the best rate over its epochs (so the LP bound's curves stay above every epoch's)."""

    jobs: tuple[WorkloadJob, ...]
    profiles: Mapping[str, Profile]
    applications: Mapping[str, Application]  # by job name
    batches: Mapping[str, int]  # the workload's batch, by job name

    def progress_models(self, *, adapting: bool) -> dict[str, GoodputJob]:
        return {
            name: GoodputJob(app, None if adapting else self.batches[name])
            for name, app in self.applications.items()
        }

    def alone_seconds(self, *, total_gpus: int) -> dict[str, float]:
        """Each job's `alone_seconds` adapting or at its workload's batch, whichever is faster in
        each epoch: a JCT no policy of the lineup beats (the jobs that cannot run left out)."""
        found = {
            job.name: alone_seconds(
                self.applications[job.name],
                job,
                batches=(None, self.batches[job.name]),
                total_gpus=total_gpus,
            )
            for job in self.jobs
        }
        return {name: seconds for name, seconds in found.items() if seconds is not None}


def _best_profile(application: Application, batches: Sequence[int]) -> Profile:
    counts = tuple(g for g in PACKED_COUNTS if packed_key(g) in application.curves)
    epochs = range(len(application.epoch_ends))
    best = tuple(
        max(
            max(
                application.adaptive_rate(g, e), *(application.fixed_rate(b, g, e) for b in batches)
            )
            for e in epochs
        )
        for g in counts
    )
    row = ProfileRow(batch_size=application.base_batch, rates=best)
    return Profile(name=application.name, gpu_counts=counts, rows=(row,), source="goodput")


def goodput_workload(
    jobs: Sequence[WorkloadJob], profiles: Mapping[str, Profile]
) -> GoodputWorkload:
    """Every job of a Pollux workload (profiles from `load_pollux_profiles`) with goodput."""
    applications: dict[str, Application] = {}
    for job in jobs:
        source = Path(profiles[job.profile].source)
        if not (source / "placements.csv").is_file():
            raise SimInputError(source, None, f"goodput needs Pollux traces for {job.profile!r}")
        applications[job.name] = load_application(source)
    by_profile: dict[str, set[int]] = {}
    for job in jobs:
        by_profile.setdefault(job.profile, set()).add(job.batch_size)
    apps = {app.name: app for app in applications.values()}
    best = {name: _best_profile(apps[name], sorted(b)) for name, b in by_profile.items()}
    converted = tuple(
        replace(job, batch_size=applications[job.name].base_batch,
                iterations=math.ceil(applications[job.name].work))
        for job in jobs
    )  # fmt: skip
    return GoodputWorkload(converted, best, applications, {j.name: j.batch_size for j in jobs})
