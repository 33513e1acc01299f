"""Throughput profiles: measured iterations/s of a model by global batch size and GPU count.

The CSV format is ElasticFlow's (`throughputs_A100/*.csv`): a header `global_batch_size,1,2,4,...`
(GPU counts, strictly increasing), then one row per global batch size with iterations/s per GPU
count. An empty cell or `nan` = not measured; `0` = does not fit (the model or the batch cannot
run on that many GPUs). Samples/s = iterations/s x global batch size (the batch stays fixed when
the GPU count changes: each GPU processes batch/GPUs samples per iteration).

Between two measured GPU counts the rate is interpolated linearly; see `interpolate` for the rules
at the edges and around counts that do not fit.
"""

import csv
import io
import itertools
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from autoscaler.sim.errors import SimInputError

HEADER_FIRST = "global_batch_size"


@dataclass(frozen=True)
class ProfileRow:
    batch_size: int  # global batch size (samples per iteration)
    rates: tuple[float | None, ...]  # iterations/s per `Profile.gpu_counts`; None = not measured


@dataclass(frozen=True)
class Profile:
    """One model's throughput table; `source` names where it came from (for error messages)."""

    name: str
    gpu_counts: tuple[int, ...]
    rows: tuple[ProfileRow, ...]
    source: str = ""

    @cached_property
    def _by_batch(self) -> dict[int, ProfileRow]:
        return {row.batch_size: row for row in self.rows}

    @property
    def batch_sizes(self) -> tuple[int, ...]:
        return tuple(row.batch_size for row in self.rows)

    def has_batch_size(self, batch_size: int) -> bool:
        return batch_size in self._by_batch

    def points(self, batch_size: int) -> tuple[tuple[int, float], ...]:
        """The measured (GPUs, iterations/s) pairs of one batch size."""
        row = self._by_batch.get(batch_size)
        if row is None:
            sizes = ", ".join(map(str, self.batch_sizes))
            reason = f"profile {self.name!r} has no global batch size {batch_size} (has {sizes})"
            raise SimInputError(self.source or self.name, None, reason)
        return tuple(
            (g, r) for g, r in zip(self.gpu_counts, row.rates, strict=True) if r is not None
        )

    def throughput(self, batch_size: int, replicas: int, gpus_per_replica: int = 1) -> float:
        """Iterations/s of `replicas` workers of `gpus_per_replica` GPUs each (0.0 = cannot run)."""
        return interpolate(self.points(batch_size), replicas * gpus_per_replica)

    def samples_per_second(
        self, batch_size: int, replicas: int, gpus_per_replica: int = 1
    ) -> float:
        return self.throughput(batch_size, replicas, gpus_per_replica) * batch_size


def interpolate(points: Sequence[tuple[int, float]], gpus: int) -> float:
    """The rate at `gpus` from measured (GPUs, rate) points sorted by GPUs.

    - a measured count: its value;
    - between two measured counts: linear; 0 if either does not fit (not known to fit);
    - above the largest measured count: held flat at that count's value (no extrapolated gain);
    - below the smallest measured count: proportional to GPUs from the origin;
    - zero GPUs: 0.
    """
    if gpus <= 0 or not points:
        return 0.0
    first_gpus, first_rate = points[0]
    if gpus <= first_gpus:
        return first_rate * gpus / first_gpus
    for (lo_gpus, lo_rate), (hi_gpus, hi_rate) in itertools.pairwise(points):
        if gpus == hi_gpus:
            return hi_rate
        if lo_gpus < gpus < hi_gpus:
            if lo_rate == 0.0 or hi_rate == 0.0:
                return 0.0
            return lo_rate + (hi_rate - lo_rate) * (gpus - lo_gpus) / (hi_gpus - lo_gpus)
    return points[-1][1]


def csv_records(text: str) -> Iterator[tuple[int, list[str]]]:
    """(line number, stripped fields) of every non-blank CSV line."""
    reader = csv.reader(io.StringIO(text))
    for fields in reader:
        if fields and any(field.strip() for field in fields):
            yield reader.line_num, [field.strip() for field in fields]


def parse_positive_int(text: str, *, what: str, source: str, line: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise SimInputError(source, line, f"{what} {text!r} is not an integer") from None
    if value <= 0:
        raise SimInputError(source, line, f"{what} {value} is not positive")
    return value


def parse_float(text: str, *, what: str, source: str, line: int) -> float:
    try:
        value = float(text)
    except ValueError:
        raise SimInputError(source, line, f"{what} {text!r} is not a number") from None
    if not math.isfinite(value) or value < 0:
        raise SimInputError(source, line, f"{what} {text!r} is not a finite number >= 0")
    return value


def _parse_rate(text: str, *, source: str, line: int) -> float | None:
    if text == "" or text.lower() == "nan":  # a count that was not measured
        return None
    return parse_float(text, what="throughput", source=source, line=line)


def _parse_header(fields: list[str], *, source: str) -> tuple[int, ...]:
    if fields[0] != HEADER_FIRST or len(fields) < 2:
        reason = f"header must be '{HEADER_FIRST},<GPU count>,...', got {','.join(fields)!r}"
        raise SimInputError(source, 1, reason)
    counts = tuple(
        parse_positive_int(f, what="GPU count", source=source, line=1) for f in fields[1:]
    )
    if any(a >= b for a, b in itertools.pairwise(counts)):
        raise SimInputError(source, 1, f"GPU counts must increase strictly, got {counts}")
    return counts


def _parse_row(fields: list[str], *, width: int, source: str, line: int) -> ProfileRow:
    if len(fields) != width + 1:
        reason = f"expected {width + 1} fields (batch size + {width} GPU counts), got {len(fields)}"
        raise SimInputError(source, line, reason)
    batch = parse_positive_int(fields[0], what="global batch size", source=source, line=line)
    rates = tuple(_parse_rate(f, source=source, line=line) for f in fields[1:])
    if all(rate is None for rate in rates):
        raise SimInputError(source, line, f"batch size {batch} has no measured GPU count")
    return ProfileRow(batch_size=batch, rates=rates)


def parse_profile(text: str, *, name: str, source: str) -> Profile:
    """A profile from CSV text; `source` is what errors name as the file."""
    records = list(csv_records(text))
    if not records or records[0][0] != 1:
        raise SimInputError(source, 1, f"the first line must be the header '{HEADER_FIRST},...'")
    counts = _parse_header(records[0][1], source=source)
    rows: list[ProfileRow] = []
    for line, fields in records[1:]:
        row = _parse_row(fields, width=len(counts), source=source, line=line)
        if any(seen.batch_size == row.batch_size for seen in rows):
            raise SimInputError(source, line, f"global batch size {row.batch_size} listed twice")
        rows.append(row)
    if not rows:
        raise SimInputError(source, None, "no batch size rows")
    return Profile(name=name, gpu_counts=counts, rows=tuple(rows), source=source)


def load_profile(path: Path) -> Profile:
    """One CSV file; the profile's name is the file's stem."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise SimInputError(path, None, f"cannot read: {error}") from None
    return parse_profile(text, name=path.stem, source=str(path))


def load_profiles(folder: Path) -> dict[str, Profile]:
    """Every `*.csv` of a folder, by file stem."""
    if not folder.is_dir():
        raise SimInputError(folder, None, "not a folder of profile CSVs")
    profiles = {path.stem: load_profile(path) for path in sorted(folder.glob("*.csv"))}
    if not profiles:
        raise SimInputError(folder, None, "no *.csv profile in this folder")
    return profiles


def require_profile(
    profiles: Mapping[str, Profile], name: str, *, source: str, line: int | None
) -> Profile:
    profile = profiles.get(name)
    if profile is None:
        known = ", ".join(sorted(profiles)) or "none"
        raise SimInputError(source, line, f"unknown profile {name!r} (known: {known})")
    return profile
