"""Workloads: which jobs arrive when, on which profile, with what bounds.

The CSV has a header naming (in any order) the columns `name,submit_time,profile,batch_size,
iterations,min_replicas,max_replicas,replicas` and optionally `gpus_per_replica` (default 1),
`weight` (default 1), `preemptible` (`true` or `false`, the default: whether the engine may hold
the job back, its `preemptible` annotation) and `fault_tolerance` (`torchft`: the job runs in
torchft mode, where a resize pauses it `fault_tolerance.RESIZE_PAUSE_SECONDS` instead of
restarting every worker; default empty). `submit_time` is in seconds from the start of the
simulation, `batch_size` is the global batch (a row of the profile), `iterations` the iterations
the job trains, `replicas` the worker count the user asked for (the job's initial spec).

`autoscaler.sim.importers` turns two public traces into this shape: Pollux's workloads and the
ITP traces ElasticFlow published.
"""

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from autoscaler.fault_tolerance import TORCHFT
from autoscaler.sim.errors import SimInputError
from autoscaler.sim.profiles import (
    Profile,
    csv_records,
    parse_float,
    parse_positive_int,
    require_profile,
)

REQUIRED = (
    "name",
    "submit_time",
    "profile",
    "batch_size",
    "iterations",
    "min_replicas",
    "max_replicas",
    "replicas",
)
OPTIONAL = ("gpus_per_replica", "weight", "preemptible", "fault_tolerance")
NAME = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")


@dataclass(frozen=True)
class WorkloadJob:
    name: str
    submit_time: float  # seconds from the simulation's start
    profile: str
    batch_size: int
    iterations: int
    min_replicas: int
    max_replicas: int
    replicas: int  # what the user asked for: the initial spec
    gpus_per_replica: int = 1
    weight: float = 1.0
    preemptible: bool = False  # the engine may hold it back (suspend it)
    torchft: bool = False  # torchft mode: a resize pauses it briefly and restarts no worker


def _columns(fields: list[str], *, source: str) -> dict[str, int]:
    unknown = [f for f in fields if f not in REQUIRED + OPTIONAL]
    missing = [c for c in REQUIRED if c not in fields]
    if unknown or missing or len(set(fields)) != len(fields):
        problems = [
            f"unknown {unknown}" if unknown else "",
            f"missing {missing}" if missing else "",
        ]
        detail = "; ".join(p for p in problems if p) or "a column is repeated"
        raise SimInputError(source, 1, f"bad header ({detail}); need {','.join(REQUIRED)}")
    return {column: index for index, column in enumerate(fields)}


def _job(row: Mapping[str, str], *, source: str, line: int) -> WorkloadJob:
    def count(column: str) -> int:
        return parse_positive_int(row[column], what=column, source=source, line=line)

    name = row["name"]
    if len(name) > 63 or not NAME.fullmatch(name):
        reason = f"name {name!r} is not a DNS-1123 label (lower-case alphanumerics and '-')"
        raise SimInputError(source, line, reason)
    weight = parse_float(row.get("weight") or "1", what="weight", source=source, line=line)
    if weight <= 0:
        raise SimInputError(source, line, f"weight {weight:g} is not positive")
    preemptible = (row.get("preemptible") or "false").strip()
    if preemptible not in ("true", "false"):
        raise SimInputError(source, line, f"preemptible {preemptible!r} is neither true nor false")
    mode = row.get("fault_tolerance") or ""
    if mode not in ("", TORCHFT):
        raise SimInputError(source, line, f'fault_tolerance {mode!r} is not "{TORCHFT}" or empty')
    return WorkloadJob(
        name=name,
        submit_time=parse_float(row["submit_time"], what="submit_time", source=source, line=line),
        profile=row["profile"],
        batch_size=count("batch_size"),
        iterations=count("iterations"),
        min_replicas=count("min_replicas"),
        max_replicas=count("max_replicas"),
        replicas=count("replicas"),
        gpus_per_replica=count("gpus_per_replica") if row.get("gpus_per_replica") else 1,
        weight=weight,
        preemptible=preemptible == "true",
        torchft=mode == TORCHFT,
    )


def check_job(
    job: WorkloadJob, *, profiles: Mapping[str, Profile] | None, source: str, line: int | None
) -> None:
    """Counts are positive, bounds ordered and (given profiles) the profile has the batch size."""
    counts = (job.batch_size, job.iterations, job.min_replicas, job.gpus_per_replica)
    if min(counts) < 1 or job.weight <= 0 or not job.submit_time >= 0:
        reason = "batch_size, iterations, min_replicas, gpus_per_replica, weight must be positive"
        raise SimInputError(source, line, f"{reason}, submit_time >= 0")
    if not job.min_replicas <= job.replicas <= job.max_replicas:
        bounds = f"{job.min_replicas} <= {job.replicas} <= {job.max_replicas}"
        reason = f"need min_replicas <= replicas <= max_replicas, got {bounds}"
        raise SimInputError(source, line, reason)
    if profiles is not None:
        job_profile(profiles, job.profile, batch_size=job.batch_size, source=source, line=line)


def job_profile(
    profiles: Mapping[str, Profile], name: str, *, batch_size: int, source: str, line: int | None
) -> Profile:
    """The named profile, which must have a row for `batch_size`."""
    profile = require_profile(profiles, name, source=source, line=line)
    if not profile.has_batch_size(batch_size):
        sizes = ", ".join(map(str, profile.batch_sizes))
        reason = (
            f"batch_size {batch_size}: profile {name!r} has no such global batch size ({sizes})"
        )
        raise SimInputError(source, line, reason)
    return profile


def parse_workload(
    text: str, *, source: str, profiles: Mapping[str, Profile] | None = None
) -> tuple[WorkloadJob, ...]:
    """Jobs from CSV text, sorted by submit time (ties keep file order)."""
    records = list(csv_records(text))
    if not records or records[0][0] != 1:
        raise SimInputError(source, 1, f"the first line must be the header {','.join(REQUIRED)}")
    columns = _columns(records[0][1], source=source)
    jobs: dict[str, WorkloadJob] = {}
    for line, fields in records[1:]:
        if len(fields) != len(columns):
            reason = f"expected {len(columns)} fields, got {len(fields)}"
            raise SimInputError(source, line, reason)
        job = _job({c: fields[i] for c, i in columns.items()}, source=source, line=line)
        check_job(job, profiles=profiles, source=source, line=line)
        if job.name in jobs:
            raise SimInputError(source, line, f"job name {job.name!r} listed twice")
        jobs[job.name] = job
    if not jobs:
        raise SimInputError(source, None, "no jobs")
    return tuple(sorted(jobs.values(), key=lambda job: job.submit_time))


def read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise SimInputError(path, None, f"cannot read: {error}") from None


def _number(value: float) -> str:
    return str(int(value)) if value.is_integer() else repr(value)


def format_workload(jobs: Iterable[WorkloadJob]) -> str:
    """CSV text `parse_workload` reads back (optional columns always written)."""
    lines = [",".join(REQUIRED + OPTIONAL)]
    for job in jobs:
        values: Sequence[object] = (
            job.name,
            _number(job.submit_time),
            job.profile,
            job.batch_size,
            job.iterations,
            job.min_replicas,
            job.max_replicas,
            job.replicas,
            job.gpus_per_replica,
            _number(job.weight),
            "true" if job.preemptible else "false",
            TORCHFT if job.torchft else "",
        )
        lines.append(",".join(map(str, values)))
    return "\n".join(lines) + "\n"
