"""Importers: public traces as workloads (`WorkloadJob`s).

- Pollux (`petuum/adaptdl` osdi21-artifact, `simulator/workloads*/workload-N.csv`):
  `name,time,application,num_replicas,batch_size`, on the profiles `autoscaler.sim.pollux` derives.
- ITP (`microsoft/elasticflow-traces`, `elasticflow-traces.tar.gz`): `job_id,submission_time,
  num_iteration,model_name,deadline,batch_size,num_gpu,duration`, on ElasticFlow's A100 profiles.

Neither trace has elastic bounds, so both get the same rule: min_replicas = 1, max_replicas = the
largest measured GPU count at which the job's profile runs its batch, at most a cap; the count the
user asked for is the initial spec, clamped into those bounds.
"""

import csv
import io
import random
import tarfile
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

from autoscaler.sim.errors import SimInputError
from autoscaler.sim.pollux import pollux_iterations
from autoscaler.sim.profiles import Profile, csv_records, parse_float, parse_positive_int
from autoscaler.sim.workload import WorkloadJob, check_job, job_profile, read_text


def largest_fitting(profile: Profile, batch_size: int) -> int:
    """The largest measured GPU count at which the profile runs this batch (0 if none)."""
    return max((gpus for gpus, rate in profile.points(batch_size) if rate > 0), default=0)


def _elastic_bounds(
    profile: Profile, *, batch_size: int, asked: int, cap: int, source: str, line: int
) -> tuple[int, int, int]:
    """(min, max, replicas): 1, the largest fitting count within `cap`, `asked` clamped in."""
    largest = min(cap, largest_fitting(profile, batch_size))
    if largest < 1:
        reason = f"profile {profile.name!r} fits batch {batch_size} on no GPU count"
        raise SimInputError(source, line, reason)
    return 1, largest, max(1, min(asked, largest))


def import_pollux_workload(
    path: Path, *, traces: Path, profiles: Mapping[str, Profile], max_replicas: int = 64
) -> tuple[WorkloadJob, ...]:
    """Pollux's `name,time,application,num_replicas,batch_size` as a workload.

    profile = application (see `autoscaler.sim.pollux.load_pollux_profiles`); iterations = the
    iterations Pollux's validation trace needs at the job's batch (`pollux_iterations`);
    replicas = num_replicas; min_replicas = 1; max_replicas = the largest GPU count at which the
    profile fits the batch, at most `max_replicas` (replicas is clamped into the bounds).
    """
    source = str(path)
    records = list(csv_records(read_text(path)))
    header = ["name", "time", "application", "num_replicas", "batch_size"]
    if not records or records[0][1] != header:
        raise SimInputError(source, 1, f"header must be {','.join(header)!r}")
    jobs = []
    for line, fields in records[1:]:
        if len(fields) != len(header):
            raise SimInputError(source, line, f"expected {len(header)} fields, got {len(fields)}")
        job = _pollux_job(
            fields, traces=traces, profiles=profiles, cap=max_replicas, source=source, line=line
        )
        jobs.append(job)
    return tuple(sorted(jobs, key=lambda job: job.submit_time))


ITP_COLUMNS = ("job_id", "submission_time", "num_iteration", "model_name", "batch_size", "num_gpu")


def _pollux_job(
    fields: list[str],
    *,
    traces: Path,
    profiles: Mapping[str, Profile],
    cap: int,
    source: str,
    line: int,
) -> WorkloadJob:
    name, time, application, asked, batch = fields
    batch_size = parse_positive_int(batch, what="batch_size", source=source, line=line)
    profile = job_profile(profiles, application, batch_size=batch_size, source=source, line=line)
    replicas = parse_positive_int(asked, what="num_replicas", source=source, line=line)
    low, high, start = _elastic_bounds(
        profile, batch_size=batch_size, asked=replicas, cap=cap, source=source, line=line
    )
    iterations = pollux_iterations(traces / application, batch_size=batch_size)
    submit = parse_float(time, what="time", source=source, line=line)
    job = WorkloadJob(name, submit, application, batch_size, iterations, low, high, start)
    check_job(job, profiles=profiles, source=source, line=line)
    return job


def _itp_rows(archive: Path, *, cluster: str) -> tuple[str, list[tuple[int, dict[str, str]]]]:
    """(source name, (line, row) in file order) of one cluster's CSV inside the archive."""
    member = f"{cluster}.csv"
    source = f"{archive}[{member}]"
    try:
        with tarfile.open(archive, "r:*") as tar:
            names = sorted(n for n in tar.getnames() if n.endswith(".csv"))
            handle = tar.extractfile(member) if member in names else None
            if handle is None:
                known = ", ".join(n.removesuffix(".csv") for n in names)
                raise SimInputError(archive, None, f"no cluster {cluster!r} (has {known})")
            text = handle.read().decode("utf-8")
    except (OSError, tarfile.TarError, UnicodeDecodeError) as error:
        raise SimInputError(archive, None, f"cannot read: {error}") from None
    reader = csv.DictReader(io.StringIO(text))
    missing = [c for c in ITP_COLUMNS if c not in (reader.fieldnames or [])]
    if missing:
        raise SimInputError(source, 1, f"missing columns {missing}")
    return source, [(reader.line_num, row) for row in reader]


def _submitted(item: tuple[int, Mapping[str, str]], *, source: str) -> float:
    line, row = item
    return parse_float(row["submission_time"], what="submission_time", source=source, line=line)


def _itp_job(
    row: Mapping[str, str], *, profiles: Mapping[str, Profile], cap: int, source: str, line: int
) -> WorkloadJob:
    def count(column: str) -> int:
        return parse_positive_int(row[column], what=column, source=source, line=line)

    model = row["model_name"]
    batch_size = count("batch_size")
    profile = job_profile(profiles, model, batch_size=batch_size, source=source, line=line)
    low, high, start = _elastic_bounds(
        profile, batch_size=batch_size, asked=count("num_gpu"), cap=cap, source=source, line=line
    )
    submitted = row["submission_time"]
    job = WorkloadJob(
        name=f"{model.replace('_', '-')}-{row['job_id'][:8].lower()}",
        submit_time=parse_float(submitted, what="submission_time", source=source, line=line),
        profile=model,
        batch_size=batch_size,
        iterations=count("num_iteration"),
        min_replicas=low,
        max_replicas=high,
        replicas=start,
    )
    check_job(job, profiles=profiles, source=source, line=line)
    return job


def import_itp_workload(
    archive: Path,
    *,
    cluster: str,
    count: int,
    profiles: Mapping[str, Profile],
    seed: int = 0,
    start: int | None = None,
    max_replicas: int = 32,
) -> tuple[WorkloadJob, ...]:
    """`count` consecutive submissions of one ITP cluster (`cluster04`, ..., or `195job`).

    The jobs are ordered by submission time; the window starts at index `start`, or at an index
    drawn with `random.Random(seed)` when `start` is None. Submit times are shifted so the first
    job arrives at 0. name = `<model>-<first 8 characters of job_id>`; iterations = num_iteration;
    the user's count = num_gpu; bounds as in the module docstring.
    """
    source, rows = _itp_rows(archive, cluster=cluster)
    if not 1 <= count <= len(rows):
        raise SimInputError(source, None, f"count {count} is not in 1..{len(rows)}")
    ordered = sorted(rows, key=lambda item: _submitted(item, source=source))
    first = random.Random(seed).randrange(len(rows) - count + 1) if start is None else start
    if not 0 <= first <= len(rows) - count:
        raise SimInputError(source, None, f"start {first} is not in 0..{len(rows) - count}")
    window = [
        _itp_job(row, profiles=profiles, cap=max_replicas, source=source, line=line)
        for line, row in ordered[first : first + count]
    ]
    origin = window[0].submit_time
    jobs = [replace(job, submit_time=job.submit_time - origin) for job in window]
    names = [job.name for job in jobs]
    if len(set(names)) != len(names):
        raise SimInputError(source, None, "two sampled jobs share a name (job_id prefix)")
    return tuple(jobs)
