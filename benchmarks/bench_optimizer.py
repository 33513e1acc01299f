"""The allocation solver against scipy's MILP (HiGHS) on the same instances: `make bench-optimizer`.

    python -m benchmarks.bench_optimizer                 # the full run (a few minutes, MILP-bound)
    python -m benchmarks.bench_optimizer --quick         # smaller MILP time limit, fewer repeats

Instances:
- `a100`: measured A100 curves (ElasticFlow `throughputs_A100`, Apache-2.0; the
  copy and its licence are in `autoscaler/sim/data/`): iterations/s at 1, 2, 4, ..., 64 GPUs,
  linearly interpolated at the job's count x replica size; values are speedups over the job's
  minimum count.
- `node`: synthetic non-concave curves: a saturating speedup that drops at every 8-GPU node
  boundary, times a restart cost at every count but the job's current one (Pollux-style).
Replica sizes 1, 2, 4, 8 GPUs; ranges up to 64 counts. Objectives: `sum` = sum of speedups,
`p-1` = -sum 1/speedup (Pollux's p = -1).

Ratios are "ours / MILP" for positive objectives and "MILP / ours" for negative ones, so below 1
always means worse than the MILP. A MILP stopped by its time limit may be suboptimal (ratio > 1).
Always exits 0; a missed target prints MISSED.
"""

from __future__ import annotations

import argparse
import csv
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp
from scipy.sparse import csr_array

import autoscaler.sim
from autoscaler.policies.solver import Allocation, greedy_allocation, solve_allocation

# ElasticFlow's A100 profiles, as the package ships them for the simulator's bundled default.
DATA = Path(autoscaler.sim.__file__).parent / "data" / "profiles"
SIZES, SIZE_P = np.array([1, 2, 4, 8]), np.array([0.5, 0.25, 0.15, 0.1])
TARGET_SECONDS = {1_000: 0.2, 10_000: 2.0}  # by jobs; max_gap 0 resp. 1e-3


@dataclass(frozen=True)
class Instance:
    values: list[np.ndarray]
    lows: np.ndarray
    sizes: np.ndarray
    capacity: float


@dataclass(frozen=True)
class Case:
    name: str
    jobs: int
    capacity: int
    curves: str  # "a100" | "node"
    objective: str  # "sum" | "p-1"
    max_gap: float
    pow2: bool = False  # only power-of-two GPU totals allowed (-inf elsewhere)
    target: bool = True  # counted against the targets (else informational)


CASES = [
    Case("a100-sum-1k", 1_000, 4_096, "a100", "sum", 0.0),
    Case("a100-p-1-1k", 1_000, 4_096, "a100", "p-1", 0.0),
    Case("a100-pow2-sum-1k", 1_000, 4_096, "a100", "sum", 0.0, pow2=True),
    Case("node-sum-1k", 1_000, 4_096, "node", "sum", 0.0),
    Case("node-p-1-1k", 1_000, 4_096, "node", "p-1", 0.0),
    Case("node-pow2-p-1-1k", 1_000, 4_096, "node", "p-1", 0.0, pow2=True),
    Case("a100-sum-10k", 10_000, 65_536, "a100", "sum", 1e-3),
    Case("a100-p-1-10k", 10_000, 65_536, "a100", "p-1", 1e-3),
    Case("node-sum-10k", 10_000, 65_536, "node", "sum", 1e-3),
    Case("node-pow2-p-1-10k", 10_000, 65_536, "node", "p-1", 1e-3, pow2=True),
    Case("a100-sum-10k-exact", 10_000, 65_536, "a100", "sum", 0.0, target=False),
    Case("node-pow2-p-1-10k-exact", 10_000, 65_536, "node", "p-1", 0.0, pow2=True, target=False),
]


# -- instances ------------------------------------------------------------------------------------


def a100_curves() -> list[tuple[np.ndarray, np.ndarray]]:
    """(GPUs, iterations/s) of every (model, batch) row, measured points that fit only."""
    curves = []
    for path in sorted(DATA.glob("*.csv")):
        with path.open() as f:
            for row in csv.DictReader(f):
                gpus = np.array([int(k) for k in row if k != "global_batch_size"], dtype=float)
                its = np.array([float(row[str(int(g))] or "nan") for g in gpus])
                fits = np.isfinite(its) & (its > 0)
                curves.append((gpus[fits], its[fits]))
    return curves


def job_range(rng: np.random.Generator, size: int, max_gpus: float) -> np.ndarray:
    """Counts low..high: mostly from 1, at most 64 counts, at most max_gpus GPUs."""
    most = max(1, min(64, int(max_gpus // size)))
    low = 1 if rng.random() < 0.85 else int(rng.integers(2, 5))
    return np.arange(min(low, most), most + 1)


def a100_speedup(
    rng: np.random.Generator, curves: list[tuple[np.ndarray, np.ndarray]], size: int
) -> tuple[int, np.ndarray]:
    gpus, its = curves[rng.integers(len(curves))]
    counts = job_range(rng, size, gpus.max())
    throughput = np.interp(counts * size, gpus, its)
    return int(counts[0]), throughput / throughput[0]


def node_speedup(rng: np.random.Generator, size: int) -> tuple[int, np.ndarray]:
    counts = job_range(rng, size, 256)
    gpus = counts * size
    throughput = gpus / (1 + rng.uniform(0.01, 0.1) * (gpus - 1))
    throughput *= rng.uniform(0.7, 0.95) ** ((gpus - 1) // 8)  # slower across each node boundary
    restart = np.full(len(counts), rng.uniform(0.8, 0.97))
    restart[rng.integers(len(counts))] = 1.0  # the current count pays no restart
    throughput *= restart
    return int(counts[0]), throughput / throughput[0]


def make_instance(case: Case, seed: int) -> Instance:
    rng = np.random.default_rng(seed)
    curves = a100_curves()
    values, lows, sizes = [], [], []
    for _ in range(case.jobs):
        size = int(rng.choice(SIZES, p=SIZE_P))
        if case.curves == "a100":
            low, speedup = a100_speedup(rng, curves, size)
        else:
            low, speedup = node_speedup(rng, size)
        value = speedup if case.objective == "sum" else -1.0 / speedup
        if case.pow2:  # only the measured GPU totals (powers of two) are allowed
            gpus = (low + np.arange(len(value))) * size
            value = np.where(gpus & (gpus - 1) == 0, value, -np.inf)
        values.append(value)
        lows.append(low)
        sizes.append(size)
    return Instance(values, np.asarray(lows), np.asarray(sizes, dtype=float), float(case.capacity))


# -- measuring ------------------------------------------------------------------------------------


def quality(value: float, reference: float) -> float:
    """value / reference as a ratio that is below 1 when value is worse, for either sign."""
    if reference == 0:
        return 1.0 if value == 0 else float("nan")
    return value / reference if reference > 0 else reference / value


def timed(run: Callable[[], Allocation], reps: int) -> tuple[Allocation, list[float]]:
    seconds = []
    for _ in range(reps):
        started = time.perf_counter()
        result = run()
        seconds.append(time.perf_counter() - started)
    return result, seconds


@dataclass
class MilpResult:
    seconds: float
    value: float  # nan when it found no solution
    status: str
    gap: float


def solve_milp(inst: Instance, time_limit: float) -> MilpResult:
    """The binary MCKP: x[j, n] in {0, 1}, sum_n x[j, n] = 1, sum n * size * x <= C."""
    started = time.perf_counter()
    lengths = np.array([len(v) for v in inst.values])
    job = np.repeat(np.arange(len(inst.values)), lengths)
    profit = np.concatenate(inst.values)
    counts = np.repeat(inst.lows, lengths) + np.concatenate([np.arange(n) for n in lengths])
    allowed = np.isfinite(profit)
    job, profit, weight = job[allowed], profit[allowed], (counts * inst.sizes[job])[allowed]
    n = len(job)
    one_each = csr_array((np.ones(n), (job, np.arange(n))), shape=(len(inst.values), n))
    res = milp(
        -profit,
        constraints=[
            LinearConstraint(one_each, 1, 1),
            LinearConstraint(csr_array(weight[None, :]), -np.inf, inst.capacity),
        ],
        integrality=np.ones(n),
        bounds=Bounds(0, 1),
        options={"time_limit": time_limit, "mip_rel_gap": 1e-9},
    )
    value = -float(res.fun) if res.x is not None else float("nan")
    status = {0: "optimal", 1: "time limit"}.get(res.status, f"status {res.status}")
    if res.x is None:
        status += ", no solution"
    gap = float(getattr(res, "mip_gap", None) or 0.0)
    return MilpResult(time.perf_counter() - started, value, status, gap)


@dataclass
class Row:
    case: Case
    ours: Allocation
    seconds: list[float]
    greedy: Allocation
    greedy_seconds: list[float]
    milp: MilpResult
    notes: list[str] = field(default_factory=list)

    @property
    def median(self) -> float:
        return float(np.median(self.seconds))

    @property
    def p95(self) -> float:
        return float(np.percentile(self.seconds, 95))

    def met(self) -> bool:
        gap_ok = self.ours.exact if self.case.max_gap == 0 else self.ours.gap <= self.case.max_gap
        return gap_ok and self.median < TARGET_SECONDS[self.case.jobs]


def measure(
    case: Case, args: argparse.Namespace, milp_cache: dict[tuple[object, ...], MilpResult]
) -> Row:
    inst = make_instance(case, seed=args.seed)
    kwargs = {"values": inst.values, "lows": inst.lows, "sizes": inst.sizes}
    reps = args.reps if case.jobs <= 1_000 else max(3, args.reps // 2)
    ours, seconds = timed(
        lambda: solve_allocation(**kwargs, capacity=inst.capacity, max_gap=case.max_gap), reps
    )
    greedy, greedy_seconds = timed(
        lambda: greedy_allocation(**kwargs, capacity=inst.capacity), max(1, reps // 2)
    )
    key = (case.jobs, case.capacity, case.curves, case.objective, case.pow2)
    if key not in milp_cache:  # the -exact rows reuse their instance's MILP run
        limit = args.milp_time_limit if case.jobs <= 1_000 else args.milp_time_limit_10k
        milp_cache[key] = solve_milp(inst, limit)
    return Row(case, ours, seconds, greedy, greedy_seconds, milp_cache[key])


# -- report ---------------------------------------------------------------------------------------

HEADER = (
    "case",
    "jobs",
    "GPUs",
    "max_gap",
    "median ms",
    "p95 ms",
    "gap",
    "MILP s",
    "MILP status",
    "ours/MILP",
    "greedy ms",
    "greedy/ours",
    "target",
)


def cells(row: Row) -> tuple[str, ...]:
    c = row.case
    target = ("met" if row.met() else "MISSED") if c.target else "(info)"
    milp = row.milp
    status = milp.status
    if milp.status == "time limit":
        status += f" (gap {milp.gap:.1e})"
    return (
        c.name, f"{c.jobs}", f"{c.capacity}", f"{c.max_gap:g}",
        f"{1e3 * row.median:.1f}", f"{1e3 * row.p95:.1f}", f"{row.ours.gap:.1e}",
        f"{milp.seconds:.2f}", status, f"{quality(row.ours.value, milp.value):.9f}",
        f"{1e3 * float(np.median(row.greedy_seconds)):.1f}",
        f"{quality(row.greedy.value, row.ours.value):.6f}", target,
    )  # fmt: skip


def print_table(rows: list[Row]) -> None:
    table = [HEADER, *(cells(r) for r in rows)]
    widths = [max(len(r[i]) for r in table) for i in range(len(HEADER))]
    for i, r in enumerate(table):
        print("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip())
        if i == 0:
            print("-" * (sum(widths) + 2 * (len(widths) - 1)))


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--reps", type=int, default=11, help="timed solves per 1k-job case")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--milp-time-limit", type=float, default=60.0, help="1k-job cases, s")
    parser.add_argument("--milp-time-limit-10k", type=float, default=120.0, help="10k cases, s")
    parser.add_argument("--quick", action="store_true", help="5 reps, 20 s MILP limits")
    parser.add_argument("--only", default="", help="run the cases whose name contains this")
    args = parser.parse_args(argv)
    if args.quick:
        args.reps, args.milp_time_limit, args.milp_time_limit_10k = 5, 20.0, 20.0
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    rows, milp_cache = [], {}
    for case in (c for c in CASES if args.only in c.name):
        print(f"{case.name}: {case.jobs} jobs on {case.capacity} GPUs ...", flush=True)
        rows.append(measure(case, args, milp_cache))
    print()
    print_table(rows)
    print()
    print(
        "targets: 1k jobs / 4096 GPUs exact (max_gap 0) in < 200 ms median; "
        "10k jobs / 65536 GPUs in < 2 s median with gap <= 0.1 %"
    )
    missed = [r.case.name for r in rows if r.case.target and not r.met()]
    print(f"MISSED: {', '.join(missed)}" if missed else "All targets met.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
