"""Published elastic schedulers for mean JCT: `afs-l`, `afs-p` (AFS) and `hesrpt` (heSRPT).

- AFS (Hwang et al., "Elastic Resource Sharing for Distributed Deep Learning", NSDI'21): workers
  are handed out one at a time. For each worker, a candidate is carried through the jobs: of the
  candidate and the next job, `a` has the shorter remaining time at its present count and `b` the
  longer; `b` takes the worker iff `(T_b(n_b+1) - T_b(n_b)) / T_b(n_b+1) > (T_a(n_a+1) - T_a(n_a))
  / T_a(n_a)`, the exchange argument for two jobs. AFS-L knows each job's remaining work; AFS-P
  does not and estimates it from the service the job attained.
- heSRPT (Berg, Vesilo, Harchol-Balter, "heSRPT: Optimal Parallel Scheduling of Jobs With Known
  Sizes"): with speedup `k^p` and `m` jobs
  of known sizes, the i-th largest job gets the share `(i/m)^c - ((i-1)/m)^c` of the cluster,
  `c = 1/(1-p)`: every job is served, the smallest most. Here each job's `p` is fitted from its
  curve and its share computed with its own exponent, re-solved each round.
"""

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

import numpy as np
from pydantic import Field

from autoscaler.policies.baselines import larger, nearest_allowed
from autoscaler.policies.contract import (
    Decision,
    JobSnapshot,
    PolicyConfig,
    PolicyPlugin,
    Reporting,
    Snapshot,
)
from autoscaler.policies.global_optimizer import GPU
from autoscaler.policies.rounding import floor_count
from autoscaler.policies.speedup import (
    JobCurve,
    current_count,
    estimated_samples,
    job_curve,
    remaining_samples,
    smallest,
)
from autoscaler.policies.throughput_model import EXPLORING, ThroughputModel

# heSRPT's exponent is kept inside (0, 1): at 1 the share formula degenerates to SRPT's all-or-none.
EXPONENT_RANGE = (0.01, 0.99)


class ElasticJctConfig(PolicyConfig):
    resource: str = Field(default=GPU, description="the capacity the jobs share")
    model: ThroughputModel = EXPLORING


@dataclass
class _Job:
    """A job being sized: its snapshot, curve, samples left, resource per worker and count."""

    snapshot: JobSnapshot
    curve: JobCurve
    samples: float
    size: float
    count: int

    def rate(self, count: int | None = None) -> float:
        value = self.curve.at(self.count if count is None else count)
        return value if math.isfinite(value) else 0.0

    @property
    def remaining_seconds(self) -> float:
        rate = self.rate()
        return self.samples / rate if rate > 0 else math.inf

    def rates(self) -> tuple[float, float]:
        """Throughput at the present count and at the next step (the same when there is none)."""
        step = self.step
        return self.rate(), self.rate(step) if step is not None else self.rate()

    @property
    def step(self) -> int | None:
        """The next allowed count, if its throughput is known and higher."""
        nxt = larger(self.snapshot, self.count)
        return nxt if nxt is not None and self.rate(nxt) > self.rate() else None


def _sized(
    snapshot: Snapshot, *, config: ElasticJctConfig, declared: bool
) -> tuple[list[_Job], list[JobSnapshot], float]:
    """The jobs with a curve, at their smallest count; the jobs kept (no curve); what is free."""
    known, kept = [], []
    for job in snapshot.jobs:
        curve = job_curve(job, model=config.model)
        if not curve.known:
            kept.append(job)
            continue
        samples = remaining_samples(job, curve) if declared else estimated_samples(job, curve)
        size = job.resources_per_replica.get(config.resource, 0.0)
        known.append(_Job(job, curve, samples, size, smallest(job)))
    capacity = snapshot.capacity.get(config.resource, math.inf)
    used = sum(j.count * j.size for j in known) + sum(
        current_count(job) * job.resources_per_replica.get(config.resource, 0.0) for job in kept
    )
    return known, kept, capacity - used


def _keep(job: JobSnapshot) -> Decision:
    message = "no throughput observed yet: keeping the count"
    return Decision(job.namespace, job.name, current_count(job), "NoThroughputData", message)


def longer_takes_it(shorter: _Job, longer: _Job) -> bool:
    """AFS' pairwise rule: the worker goes to the longer job iff its gain relative to its new
    throughput beats the shorter job's gain relative to its present throughput."""
    short_now, short_next = shorter.rates()
    long_now, long_next = longer.rates()
    short_gain = (short_next - short_now) / short_now
    long_gain = (long_next - long_now) / long_next
    return long_gain > short_gain


def afs_pick(candidates: Sequence[_Job]) -> _Job:
    """The job that gets the next worker: the candidate carried pairwise through the jobs."""
    ordered = sorted(candidates, key=lambda j: j.remaining_seconds)
    chosen = ordered[0]
    for job in ordered[1:]:
        shorter, longer = sorted((chosen, job), key=lambda j: j.remaining_seconds)
        chosen = longer if longer_takes_it(shorter, longer) else shorter
    return chosen


def afs_counts(jobs: Sequence[_Job], *, free: float) -> None:
    """Workers one at a time by AFS' rule, while one fits and raises some job's throughput."""
    while True:
        fitting = [j for j in jobs if j.step is not None and (j.step - j.count) * j.size <= free]
        if not fitting:
            return
        chosen = afs_pick(fitting)
        step = chosen.step
        assert step is not None
        free -= (step - chosen.count) * chosen.size
        chosen.count = step


class Afs:
    def __init__(self, config: ElasticJctConfig, *, declared: bool) -> None:
        self.config = config
        self.declared = declared
        self.reporting = Reporting(model=config.model)

    def decide(self, snapshot: Snapshot, *, now: datetime) -> Sequence[Decision]:
        known, kept, free = _sized(snapshot, config=self.config, declared=self.declared)
        afs_counts(known, free=free)
        reason = "AfsL" if self.declared else "AfsP"
        decisions = {
            j.snapshot.key: Decision(
                j.snapshot.namespace, j.snapshot.name, j.count, reason,
                f"{j.remaining_seconds:.0f} s left at {j.count} workers",
            )
            for j in known
        }  # fmt: skip
        decisions |= {job.key: _keep(job) for job in kept}
        return [decisions[job.key] for job in snapshot.jobs]


def afs_l(config: ElasticJctConfig) -> Afs:
    return Afs(config, declared=True)


def afs_p(config: ElasticJctConfig) -> Afs:
    return Afs(config, declared=False)


def fitted_exponent(curve: JobCurve) -> float:
    """p of `T(n) = T(low) · (n/low)^p`, least squares in log-log over the curve's known counts."""
    counts = np.arange(curve.low, curve.low + len(curve.throughput), dtype=np.float64)
    known = np.isfinite(curve.throughput) & (curve.throughput > 0)
    x = np.log(counts[known] / curve.low)
    y = np.log(curve.throughput[known] / curve.throughput[0])
    denominator = float(x @ x)
    p = float(x @ y) / denominator if denominator > 0 else EXPONENT_RANGE[1]
    return min(max(p, EXPONENT_RANGE[0]), EXPONENT_RANGE[1])


def hesrpt_shares(exponents: Sequence[float]) -> list[float]:
    """heSRPT's share of each job, the jobs given largest first, each with its own exponent,
    normalised to sum to 1 (with one exponent they already do)."""
    m = len(exponents)
    raw = [
        (i / m) ** (1 / (1 - p)) - ((i - 1) / m) ** (1 / (1 - p))
        for i, p in enumerate(exponents, start=1)
    ]
    total = sum(raw)
    return [share / total for share in raw]


def hesrpt_counts(jobs: Sequence[_Job], *, free: float) -> None:
    """Each job's count nearest below its share, then what is left smallest job first."""
    ordered = sorted(jobs, key=lambda j: -j.samples / j.rate())  # largest first
    shares = hesrpt_shares([fitted_exponent(j.curve) for j in ordered])
    total = free + sum(j.count * j.size for j in ordered)
    for job, share in zip(ordered, shares, strict=True):
        wanted = share * total / job.size if job.size > 0 else job.snapshot.max_replicas
        room = job.count + free / job.size if job.size > 0 else math.inf
        count = floor_count(min(wanted, room, job.snapshot.max_replicas))
        target = nearest_allowed(job.snapshot, count)
        if target > job.count:
            free -= (target - job.count) * job.size
            job.count = target
    for job in reversed(ordered):
        while job.step is not None and (job.step - job.count) * job.size <= free:
            free -= (job.step - job.count) * job.size
            job.count = job.step


class HeSrpt:
    def __init__(self, config: ElasticJctConfig) -> None:
        self.config = config
        self.reporting = Reporting(model=config.model)

    def decide(self, snapshot: Snapshot, *, now: datetime) -> Sequence[Decision]:
        known, kept, free = _sized(snapshot, config=self.config, declared=True)
        hesrpt_counts(known, free=free)
        decisions: Mapping[tuple[str, str], Decision] = {
            j.snapshot.key: Decision(
                j.snapshot.namespace, j.snapshot.name, j.count, "HeSrpt",
                f"speedup exponent {fitted_exponent(j.curve):.2f},"
                f" {j.remaining_seconds:.0f} s left at {j.count} workers",
            )
            for j in known
        } | {job.key: _keep(job) for job in kept}  # fmt: skip
        return [decisions[job.key] for job in snapshot.jobs]


AFS_L = PolicyPlugin(
    name="afs-l",
    summary="AFS-L: workers one at a time by AFS' pairwise rule, the remaining work known",
    config_model=ElasticJctConfig,
    build=afs_l,
)
AFS_P = PolicyPlugin(
    name="afs-p",
    summary="AFS-P: AFS' pairwise rule on remaining work estimated from attained service",
    config_model=ElasticJctConfig,
    build=afs_p,
)
HESRPT = PolicyPlugin(
    name="hesrpt",
    summary="heSRPT: the rank-based optimal split for speedup k^p, each job's p from its curve",
    config_model=ElasticJctConfig,
    build=HeSrpt,
)
