"""Pollux's traces (`petuum/adaptdl` @ osdi21-artifact, `simulator/traces/<model>/`) as `Profile`s.

Pollux measured, on nodes of 4 T4 GPUs, the time of one step (`step_time`, of which `sync_time` is
gradient synchronisation) per placement and per-GPU ("local") batch size: `placements.csv` for
placements of up to 4 nodes, `scalability.csv` for 6 to 16 nodes. A `Profile` is indexed by
*global* batch size and GPU count, in **iterations/s** of the global batch, so for a global batch
B on r GPUs we do what Pollux's simulator does for a job with a fixed batch size:

- the GPUs are packed 4 per node (r = 6 -> nodes of 4 and 2), the placement Pollux would use;
- local batch = ceil(B / r); when it exceeds the largest local batch measured for that placement
  (or the model's limit: yolov3 8, as in Pollux) gradients are accumulated over `a` extra
  micro-steps of atomic batch ceil(local / (a + 1)), and one iteration takes
  `step + a * (step - sync)` (step/sync interpolated linearly in the atomic batch size);
- an atomic batch below the smallest one measured cannot run: the cell is 0 (does not fit).

Columns are the GPU counts whose packed placement was measured exactly (1..16, 24, 32, 48, 64);
counts in between are interpolated by `Profile.throughput` like any other profile. We keep the
configured global batch (not Pollux's per-count best local batch) so that a job's iteration count
stays meaningful when its worker count changes. Pollux's single-GPU accumulation quirk
(`num_replicas == 1 and batch_size > init_batch_size`) is not reproduced.

`pollux_iterations` gives the iterations a job trains: the `iteration` of the last epoch in
`validation-<B>.csv` (Pollux's completion epoch without a target metric), linearly interpolated
between the two nearest validated batch sizes, rounded up.
"""

import itertools
import math
from collections.abc import Sequence
from pathlib import Path

from autoscaler.sim.errors import SimInputError
from autoscaler.sim.profiles import Profile, ProfileRow, csv_records

GPUS_PER_NODE = 4  # Pollux's testbed: 16 nodes x 4 T4
MAX_LOCAL_BATCH = {"yolov3": 8}  # Pollux's per-model limits (simulator/applications.py)
PACKED_COUNTS = (*range(1, 17), 24, 32, 48, 64)
Curve = tuple[tuple[float, float, float], ...]  # sorted (local batch, step time, sync time)


def read_table(path: Path, columns: Sequence[str]) -> list[tuple[int, tuple[float, ...]]]:
    """(line, values) of a numeric CSV whose header must be exactly `columns`."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise SimInputError(path, None, f"cannot read: {error}") from None
    records = list(csv_records(text))
    if not records or records[0][1] != list(columns):
        raise SimInputError(path, 1, f"header must be {','.join(columns)!r}")
    table = []
    for line, fields in records[1:]:
        if len(fields) != len(columns):
            raise SimInputError(path, line, f"expected {len(columns)} fields, got {len(fields)}")
        try:
            values = tuple(float(field) for field in fields)
        except ValueError:
            raise SimInputError(path, line, f"not a number in {','.join(fields)!r}") from None
        if not all(math.isfinite(value) and value >= 0 for value in values):
            raise SimInputError(path, line, "values must be finite and >= 0")
        table.append((line, values))
    if not table:
        raise SimInputError(path, None, "no data rows")
    return table


def _add(
    curves: dict[str, dict[float, tuple[float, float]]],
    key: str,
    *,
    values: Sequence[float],
    path: Path,
    line: int,
) -> None:
    local, step, sync = values
    if sync > step or step <= 0:
        raise SimInputError(path, line, f"need 0 <= sync_time <= step_time > 0, got {step}, {sync}")
    curve = curves.setdefault(key, {})
    if local in curve:
        raise SimInputError(path, line, f"placement {key} local batch {local:g} listed twice")
    curve[local] = (step, sync)


def read_curves(trace_dir: Path) -> dict[str, Curve]:
    """Step/sync time by local batch, keyed by placement id ('144') or 'nodes/replicas' ('6/24')."""
    curves: dict[str, dict[float, tuple[float, float]]] = {}
    placements = trace_dir / "placements.csv"
    for line, values in read_table(
        placements, ("placement", "local_bsz", "step_time", "sync_time")
    ):
        _add(curves, str(int(values[0])), values=values[1:], path=placements, line=line)
    scalability = trace_dir / "scalability.csv"
    columns = ("num_nodes", "num_replicas", "local_bsz", "step_time", "sync_time")
    for line, values in read_table(scalability, columns):
        key = f"{int(values[0])}/{int(values[1])}"
        _add(curves, key, values=values[2:], path=scalability, line=line)
    return {key: tuple((b, *curve[b]) for b in sorted(curve)) for key, curve in curves.items()}


def packed_key(gpus: int) -> str:
    """The curve key of `gpus` GPUs packed 4 per node, normalised as Pollux does (min rotation)."""
    placement = (GPUS_PER_NODE,) * (gpus // GPUS_PER_NODE) + (
        (gpus % GPUS_PER_NODE,) if gpus % GPUS_PER_NODE else ()
    )
    if len(placement) > 4:
        return f"{len(placement)}/{gpus}"
    rotation = min(placement[i:] + placement[:i] for i in range(len(placement)))
    return "".join(map(str, rotation))


def step_times(curve: Curve, local: float) -> tuple[float, float]:
    for (lo, lo_step, lo_sync), (hi, hi_step, hi_sync) in itertools.pairwise(curve):
        if lo <= local <= hi:
            share = (local - lo) / (hi - lo)
            return lo_step + (hi_step - lo_step) * share, lo_sync + (hi_sync - lo_sync) * share
    return curve[-1][1], curve[-1][2]  # a curve of one point, or local == its largest


def iterations_per_second(
    curve: Curve, *, batch_size: int, gpus: int, max_local: int | None
) -> float:
    """Pollux's rate for one global batch on `gpus` GPUs with this placement curve (0 = cannot)."""
    smallest, largest = curve[0][0], curve[-1][0]
    if max_local is not None:
        largest = min(largest, max_local)
    local = math.ceil(batch_size / gpus - 1e-8)
    extra = math.ceil(local / largest - 1e-8) - 1
    atomic = math.ceil(local / (extra + 1) - 1e-8)
    if atomic < smallest:
        return 0.0
    step, sync = step_times(curve, atomic)
    return 1.0 / (step + extra * (step - sync))


def validated_batch_sizes(trace_dir: Path) -> dict[int, Path]:
    found: dict[int, Path] = {}
    for path in trace_dir.glob("validation-*.csv"):
        suffix = path.stem.removeprefix("validation-")
        if suffix.isdigit():
            found[int(suffix)] = path
    return dict(sorted(found.items()))


def load_pollux_profile(
    trace_dir: Path, *, batch_sizes: Sequence[int] | None = None, max_local: int | None = None
) -> Profile:
    """A profile named after the folder; rows = `batch_sizes` (default: the validated ones)."""
    if not trace_dir.is_dir():
        raise SimInputError(trace_dir, None, "not a Pollux trace folder")
    curves = read_curves(trace_dir)
    limit = max_local if max_local is not None else MAX_LOCAL_BATCH.get(trace_dir.name)
    sizes = list(batch_sizes) if batch_sizes is not None else list(validated_batch_sizes(trace_dir))
    if not sizes:
        raise SimInputError(trace_dir, None, "no validation-<batch>.csv and no batch sizes given")
    counts = tuple(g for g in PACKED_COUNTS if packed_key(g) in curves)
    rows = tuple(
        ProfileRow(
            batch_size=size,
            rates=tuple(
                iterations_per_second(
                    curves[packed_key(g)], batch_size=size, gpus=g, max_local=limit
                )
                for g in counts
            ),
        )
        for size in sorted(set(sizes))
    )
    return Profile(name=trace_dir.name, gpu_counts=counts, rows=rows, source=str(trace_dir))


def _last_iteration(path: Path) -> float:
    columns = ("progress", "iteration", "metric", "grad_sqr", "grad_var")
    return read_table(path, columns)[-1][1][1]


def pollux_iterations(trace_dir: Path, *, batch_size: int) -> int:
    """Iterations to train one job to its last epoch at this global batch (see the module doc)."""
    sizes = validated_batch_sizes(trace_dir)
    if batch_size in sizes:
        return math.ceil(_last_iteration(sizes[batch_size]))
    lower = max((b for b in sizes if b < batch_size), default=None)
    upper = min((b for b in sizes if b > batch_size), default=None)
    if lower is None or upper is None:
        validated = ", ".join(map(str, sizes)) or "none"
        reason = f"batch size {batch_size} is outside the validated ones ({validated})"
        raise SimInputError(trace_dir, None, reason)
    low, high = _last_iteration(sizes[lower]), _last_iteration(sizes[upper])
    return math.ceil(low + (high - low) * (batch_size - lower) / (upper - lower))


def load_pollux_profiles(traces: Path) -> dict[str, Profile]:
    """A profile for every model folder (one holding `placements.csv`) under `traces`."""
    if not traces.is_dir():
        raise SimInputError(traces, None, "not a folder of Pollux traces")
    folders = sorted(p.parent for p in traces.glob("*/placements.csv"))
    if not folders:
        raise SimInputError(traces, None, "no <model>/placements.csv under this folder")
    return {folder.name: load_pollux_profile(folder) for folder in folders}
