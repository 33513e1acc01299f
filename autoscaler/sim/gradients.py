"""The gradient statistics a simulated goodput job reports, as the training helper's gauges would
(implements the engine's `GoodputSource`), so the engine prices it as it prices a real one.

A job that co-adapts its batch reports, while it trains: its noise scale at its base batch,
measured at the batch it runs (its epoch's gradient statistics there), its batch bounds, the batch
in use, and the mean step time of every configuration it has trained at so far. A job that keeps
its batch (the paper's baselines, ncf) reports nothing and is sized by its throughput.
"""

from collections.abc import Mapping, Sequence
from datetime import datetime

from autoscaler.engine.ports import GradientReport, JobKey, ManagedJob, StepTime
from autoscaler.sim.goodput import GoodputJob
from autoscaler.sim.state import Phase, SimJob, SimState

Configuration = tuple[int, int, int]  # (replicas, local batch, accumulation steps)


class SimGradients:
    """`models`: how each goodput job progresses, by job name."""

    def __init__(self, state: SimState, models: Mapping[str, GoodputJob], *, namespace: str):
        self._state = state
        self._models = models
        self.namespace = namespace
        self._seen: dict[str, dict[Configuration, float]] = {}  # step seconds, by job name

    def goodput(
        self, jobs: Sequence[ManagedJob], *, now: datetime
    ) -> Mapping[JobKey, GradientReport]:
        """Each listed job that co-adapts its batch and trains now (`now` is the simulation's)."""
        reports = {}
        for job in jobs:
            found = self._state.by_name.get(job.name) if job.namespace == self.namespace else None
            report = None if found is None else self._report(found)
            if report is not None:
                reports[job.key] = report
        return reports

    def _report(self, job: SimJob) -> GradientReport | None:
        model = self._models.get(job.spec.name)
        training = job.phase is Phase.RUNNING and job.active and job.stall_until <= self._state.now
        if model is None or model.batch is not None or not model.application.adapts:
            return None
        if not training:
            return None
        application = model.application
        epoch = application.epoch(job.done)
        choice = application.adaptive_choice(job.gpus, epoch)
        if choice is None:
            return None
        seconds = application.step_seconds(job.gpus, choice.local_batch, choice.accum_steps)
        seen = self._seen.setdefault(job.spec.name, {})
        if seconds > 0:
            seen[(job.active, choice.local_batch, choice.accum_steps)] = seconds
        limits = application.limits
        return GradientReport(
            noise_scale=application.noise(choice.global_batch, epoch).phi,
            base_batch=limits.base_batch,
            max_local_batch=limits.max_local_batch,
            max_global_batch=limits.max_global_batch,
            local_batch=choice.local_batch,
            accum_steps=choice.accum_steps,
            replicas=job.active,
            steps=tuple(StepTime(*configuration, s) for configuration, s in sorted(seen.items())),
        )
