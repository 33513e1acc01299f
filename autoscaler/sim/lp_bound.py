"""A lower bound on mean JCT that counts the sharing: a time-indexed linear relaxation.

Time from the first arrival is cut into slots of `slot_seconds` up to a horizon, then one last
slot that never ends and holds any capacity. In each slot, each job that has arrived does a
fraction `x[j,t]` of its iterations and takes `G[j,t]` GPU-seconds; the slot's GPU-seconds are
the cluster's. What a job may do with GPU-seconds is its throughput curve's concave hull through
the origin (any count may be time-shared within a slot, GPUs are fractional, nodes are not
modelled, no rescale costs anything, every arrival is known in advance): `G >= h(rate) x
duration` with `h` the hull's inverse, a convex piecewise-linear function. A job's completion
is at least its mean busy time plus half its shortest run, and the mean busy time at least
`sum_t x[j,t] x start_t`; its JCT is also at least its time alone (`bounds.workload_bound`'s). The
LP (HiGHS through `scipy.optimize.linprog`) minimises the sum of these JCT bounds. Every
schedule the simulator can run is feasible in it, so its optimum never exceeds any policy's mean
JCT; a finer slot (halved) only raises it, since every fine solution is a coarse one no worse.
"""

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from scipy.optimize import linprog
from scipy.sparse import coo_matrix

from autoscaler.sim.bounds import tightest
from autoscaler.sim.profiles import Profile
from autoscaler.sim.results import lower_bound
from autoscaler.sim.workload import WorkloadJob

Floats = npt.NDArray[np.float64]
# Slots up to this multiple of the work bound on the makespan; later work is in the open last slot.
HORIZON_FACTOR = 2.0
DEFAULT_SLOTS = 120  # slots before the open one: the slot length is the horizon over this


@dataclass(frozen=True)
class LpBound:
    mean_jct: float | None
    slot_seconds: float
    slots: int


@dataclass(frozen=True)
class _Job:
    arrival: float
    iterations: float
    alone: float  # its JCT alone at its best count
    vertices: tuple[tuple[float, float], ...]  # hull (GPUs, iterations/s) from the origin


def hull(points: Sequence[tuple[float, float]]) -> tuple[tuple[float, float], ...]:
    """The upper concave hull through (0, 0) of (GPUs, rate) points, up to the highest rate."""
    peak = max(points, key=lambda p: (p[1], -p[0]))
    chain: list[tuple[float, float]] = [(0.0, 0.0)]
    for point in sorted(p for p in points if p[0] <= peak[0]):
        while len(chain) >= 2 and _turns_up(chain[-2], chain[-1], point):
            chain.pop()
        if point[1] > chain[-1][1]:
            chain.append(point)
    return tuple(chain)


def _turns_up(a: tuple[float, float], b: tuple[float, float], c: tuple[float, float]) -> bool:
    """Whether b lies on or below the segment from a to c (so it is not a hull vertex)."""
    return (b[0] - a[0]) * (c[1] - a[1]) - (b[1] - a[1]) * (c[0] - a[0]) >= 0


def _job(
    job: WorkloadJob, profile: Profile, *, total_gpus: int, alone: Mapping[str, float] | None
) -> _Job | None:
    points = []
    for count in range(job.min_replicas, job.max_replicas + 1):
        gpus = count * job.gpus_per_replica
        rate = profile.throughput(job.batch_size, count, job.gpus_per_replica)
        if gpus <= total_gpus and rate > 0:
            points.append((float(gpus), rate))
    given = (alone or {}).get(job.name)
    floor = tightest(lower_bound(job, profile, total_gpus=total_gpus), given)
    if not points or floor is None:
        return None
    return _Job(job.submit_time, float(job.iterations), floor, hull(points))


def slot_starts(*, first: float, horizon: float, slot_seconds: float) -> Floats:
    """Every slot's start; the last slot starts at the horizon and never ends."""
    count = max(1, math.ceil((horizon - first) / slot_seconds - 1e-9))
    return first + slot_seconds * np.arange(count + 1, dtype=np.float64)


def default_slot_seconds(
    workload: Sequence[WorkloadJob],
    profiles: Mapping[str, Profile],
    *,
    total_gpus: int,
    alone: Mapping[str, float] | None = None,
) -> float:
    """The horizon (HORIZON_FACTOR x the work bound on the makespan) over DEFAULT_SLOTS."""
    return _slot_seconds(_jobs(workload, profiles, total_gpus=total_gpus, alone=alone), total_gpus)


def _slot_seconds(jobs: Sequence[_Job], total_gpus: int) -> float:
    return _horizon(jobs, total_gpus=total_gpus) / DEFAULT_SLOTS if jobs else 1.0


def _jobs(
    workload: Sequence[WorkloadJob],
    profiles: Mapping[str, Profile],
    *,
    total_gpus: int,
    alone: Mapping[str, float] | None,
) -> list[_Job]:
    found = (
        _job(job, profiles[job.profile], total_gpus=total_gpus, alone=alone) for job in workload
    )
    return [job for job in found if job is not None]


def _horizon(jobs: Sequence[_Job], *, total_gpus: int) -> float:
    """HORIZON_FACTOR x (the last arrival's time alone, or all work at the best rate per GPU)."""
    first = min(job.arrival for job in jobs)
    alone = max(job.arrival + job.alone for job in jobs) - first
    work = sum(job.iterations / max(r / g for g, r in job.vertices[1:]) for job in jobs)
    return HORIZON_FACTOR * max(alone, work / total_gpus)


def lp_bound(
    workload: Sequence[WorkloadJob],
    profiles: Mapping[str, Profile],
    *,
    total_gpus: int,
    slot_seconds: float | None = None,
    rejected: frozenset[str] = frozenset(),
    alone: Mapping[str, float] | None = None,
) -> LpBound:
    """The LP's mean JCT bound over the runnable jobs (those not in `rejected`); `alone`: a
    tighter JCT floor of some jobs than their profile gives (`bounds.workload_bound`'s)."""
    runnable = [job for job in workload if job.name not in rejected]
    jobs = _jobs(runnable, profiles, total_gpus=total_gpus, alone=alone)
    slot = slot_seconds or _slot_seconds(jobs, total_gpus)
    if not jobs:
        return LpBound(None, slot, 0)
    first = min(job.arrival for job in jobs)
    starts = slot_starts(first=first, horizon=first + _horizon(jobs, total_gpus=total_gpus),
                         slot_seconds=slot)  # fmt: skip
    total = _solve(jobs, starts=starts, slot=slot, gpus=float(total_gpus))
    return LpBound(total / len(jobs), slot, len(starts))


class _Rows:
    """A sparse constraint matrix built row by row: `sum coef x var <= bound`."""

    def __init__(self) -> None:
        self.rows: list[int] = []
        self.cols: list[int] = []
        self.values: list[float] = []
        self.bounds: list[float] = []

    def add(self, terms: Sequence[tuple[int, float]], bound: float) -> None:
        row = len(self.bounds)
        for col, value in terms:
            self.rows.append(row)
            self.cols.append(col)
            self.values.append(value)
        self.bounds.append(bound)

    def matrix(self, width: int) -> coo_matrix:
        return coo_matrix((self.values, (self.rows, self.cols)), shape=(len(self.bounds), width))


def _solve(jobs: Sequence[_Job], *, starts: Floats, slot: float, gpus: float) -> float:
    """The LP's optimum: the sum of the jobs' JCT bounds."""
    variables = 0
    cost: list[float] = []
    below, equal = _Rows(), _Rows()
    capacity: list[list[int]] = [[] for _ in starts]  # G variables of each bounded slot
    floors: list[tuple[float, float | None]] = []  # per variable: JCT at least alone, else >= 0
    for job in jobs:
        z = variables
        cost.append(1.0)
        floors.append((job.alone, None))
        variables += 1
        busy: list[tuple[int, float]] = []
        shares: list[tuple[int, float]] = []
        for t, start in enumerate(starts):
            open_ended = t == len(starts) - 1
            end = math.inf if open_ended else start + slot
            if end <= job.arrival:
                continue
            x, g = variables, variables + 1
            cost.extend([0.0, 0.0])
            floors.extend([(0.0, None), (0.0, None)])
            variables += 2
            begin = max(start, job.arrival)
            busy.append((x, begin))
            shares.append((x, 1.0))
            if open_ended:
                continue
            capacity[t].append(g)
            _hull_rows(below, job, x=x, g=g, duration=end - begin)
        shortest = job.iterations / job.vertices[-1][1]
        # z >= sum_t x_t * start_t + shortest / 2 - arrival (z >= its time alone: its floor)
        below.add([*((x, begin) for x, begin in busy), (z, -1.0)],
                  job.arrival - shortest / 2)  # fmt: skip
        equal.add(shares, 1.0)
    for slot_gs in capacity[:-1]:
        if slot_gs:
            below.add([(g, 1.0) for g in slot_gs], gpus * slot)
    result = linprog(
        np.array(cost),
        A_ub=below.matrix(variables).tocsr(),
        b_ub=np.array(below.bounds),
        A_eq=equal.matrix(variables).tocsr(),
        b_eq=np.array(equal.bounds),
        bounds=floors,
        method="highs",
    )
    if result.status != 0:
        raise RuntimeError(f"the LP bound could not be solved: {result.message}")
    return float(result.fun)


def _hull_rows(rows: _Rows, job: _Job, *, x: int, g: int, duration: float) -> None:
    """G >= each hull segment's line at the slot's work, and the work within the top rate."""
    work = job.iterations
    for (g0, r0), (g1, r1) in zip(job.vertices, job.vertices[1:], strict=False):
        per_rate = (g1 - g0) / (r1 - r0)  # GPUs per iteration/s along the segment
        # G >= g0 * duration + per_rate * (x * work - r0 * duration)
        rows.add([(x, per_rate * work), (g, -1.0)], per_rate * r0 * duration - g0 * duration)
    rows.add([(x, work)], job.vertices[-1][1] * duration)
