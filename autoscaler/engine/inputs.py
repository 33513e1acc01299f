"""What a round reads through its ports besides the jobs: throughput, why queries failed,
progress and gradient statistics. A source that fails is an outage the round survives (it holds
or prices as last round), never a crash; which jobs a round sizes is decided here too.
"""

import dataclasses
import logging
from collections.abc import Mapping, Sequence
from datetime import datetime

from autoscaler.api.ownership import Owner
from autoscaler.engine.goodput import price_job
from autoscaler.engine.ports import (
    GoodputSource,
    GradientReport,
    JobKey,
    ManagedJob,
    Progress,
    ThroughputSource,
)
from autoscaler.engine.settle import usable_reading
from autoscaler.policies.contract import Goodput

log = logging.getLogger(__name__)


def sized(job: ManagedJob) -> bool:
    """The engine sizes its own unfinished jobs, but never one its user suspended."""
    return job.owner is Owner.ENGINE and not job.finished and (job.held_back or not job.suspended)


def with_declared_total(job: ManagedJob, progress: Progress | None) -> ManagedJob:
    """The job's total work: its annotation, else what its training helper reports."""
    reported = progress.total_samples if progress is not None else None
    if job.total_samples is not None or reported is None or not reported > 0:
        return job
    return dataclasses.replace(job, total_samples=reported)


def read_throughput(
    source: ThroughputSource,
    jobs: Sequence[ManagedJob],
    *,
    now: datetime,
    refused: Mapping[JobKey, str],
) -> dict[JobKey, float | None]:
    """Each job's usable samples/s; None where there is none (every job's, in an outage)."""
    try:  # a refused query is never sent
        run = [job for job in jobs if job.key not in refused]
        raw: Mapping[JobKey, float | None] = source.read(run, now=now)
    except Exception:  # a broken source is an outage: hold everything, never crash
        log.exception("reading throughput failed; holding every job")
        raw = {}
    return {job.key: usable_reading(raw.get(job.key)) for job in jobs}


def query_failures(
    source: ThroughputSource, jobs: Sequence[ManagedJob], *, previous: Mapping[JobKey, str]
) -> dict[JobKey, str]:
    """Why each job's throughput query failed this round; a cause other than `previous` round's
    is logged (once, not every round)."""
    try:
        failures = dict(source.last_errors)
    except Exception:  # the source's own bookkeeping failed: report no causes
        log.exception("reading the throughput source's errors failed")
        failures = {}
    for job in jobs:
        failure = failures.get(job.key, "")
        if failure and failure != previous.get(job.key, ""):
            log.warning("throughput of %s/%s unknown: %s", job.namespace, job.name, failure)
    return failures


def read_progress(
    source: ThroughputSource, jobs: Sequence[ManagedJob], *, now: datetime
) -> Mapping[JobKey, Progress]:
    """What the jobs report of their progress; nothing when it cannot be read."""
    try:
        return source.progress(jobs, now=now)
    except Exception:  # progress only sharpens estimates: without it the engine integrates
        log.exception("reading progress failed; estimating it from throughput")
        return {}


def read_goodput(
    source: GoodputSource | None,
    jobs: Sequence[ManagedJob],
    *,
    now: datetime,
    last: Mapping[JobKey, Goodput],
) -> dict[JobKey, Goodput]:
    """Each goodput job's pricing this round. When the statistics cannot be read at all, the
    `last` round's pricing stands (a job must not switch to a curve in another unit than its
    remaining work for an outage); a job that does not report them is not priced."""
    if source is None:
        return {}
    try:
        reports: Mapping[JobKey, GradientReport] = source.goodput(jobs, now=now)
    except Exception as failure:  # an outage: price as last round
        log.warning("reading gradient statistics failed; pricing as last round: %s", failure)
        return {job.key: last[job.key] for job in jobs if job.key in last}
    priced = {}
    for job in jobs:
        report = reports.get(job.key)
        if report is None:
            continue
        goodput = _priced(job, report, last=last.get(job.key))
        if goodput is not None:
            priced[job.key] = goodput
    return priced


def _priced(job: ManagedJob, report: GradientReport, *, last: Goodput | None) -> Goodput | None:
    """The job priced by its report; its `last` pricing if pricing it fails."""
    try:
        return price_job(job, report)
    except Exception:  # one job's statistics must not fail the round
        log.exception("pricing %s/%s by goodput failed", job.namespace, job.name)
        return last
