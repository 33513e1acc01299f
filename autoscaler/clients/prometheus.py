"""Training throughput from Prometheus: one instant query per job, never raising, never hanging.

`PrometheusThroughput` is the real `ThroughputSource`. Each job's query is a PromQL template (see
`autoscaler.metrics_contract`) with the job's namespace and name escaped as string-literal
contents, so a name can never change the query's shape. A job whose query fails, or whose
result is empty, NaN, infinite or negative, reads as None; failures are kept in `last_errors`.
A transport failure (Prometheus down, a timeout) ends the round: the remaining jobs get the same
error at once instead of each waiting for its own timeout.
"""

import logging
import math
import re
from collections.abc import Collection, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from prometheus_api_client import PrometheusConnect
from prometheus_api_client.exceptions import PrometheusApiClientException
from urllib3.util.retry import Retry

from autoscaler import metrics_contract as contract
from autoscaler.engine.ports import GradientReport, JobKey, ManagedJob, Progress, StepTime
from autoscaler.engine.throughput_query import check_template, render_query
from autoscaler.metrics_contract import (
    DEFAULT_QUERY_TEMPLATE,
    DEFAULT_WINDOW,
    LABEL_JOB_NAME,
    LABEL_NAMESPACE,
    PROGRESS,
    PROGRESS_QUERY,
    TOTAL,
)

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT = 5.0
MAX_ERROR_CHARS = 500
_DURATION = re.compile(r"(?:\d+(?:y|w|d|h|ms|m|s))+")
_UNIT_SECONDS = {
    "y": 31_536_000,
    "w": 604_800,
    "d": 86_400,
    "h": 3_600,
    "m": 60,
    "s": 1,
    "ms": 0.001,
}


class TransportError(Exception):
    """Prometheus could not be reached or did not answer in time."""


def check_window(window: str) -> None:
    """Raise ValueError unless `window` is a PromQL duration such as `2m` or `1m30s`."""
    if not _DURATION.fullmatch(window):
        raise ValueError(f"window {window!r} is not a PromQL duration such as '2m'")


def duration_seconds(duration: str) -> float:
    """A PromQL duration (`1m30s`, `500ms`) in seconds."""
    check_window(duration)
    parts = re.findall(r"(\d+)(ms|y|w|d|h|m|s)", duration)
    return sum(int(number) * _UNIT_SECONDS[unit] for number, unit in parts)


def parse_result(result: Any) -> float | None:
    """The one sample of an instant query's `data.result`, None when absent or not a rate.

    Accepts a vector (a list of `{"metric", "value"}`) or a scalar (`[time, "value"]`); raises
    ValueError for several series (the template must aggregate them) or a malformed answer.
    """
    if not isinstance(result, list):
        raise ValueError(f"unexpected query result {result!r:.200}")
    if not result:
        return None
    if len(result) == 2 and not isinstance(result[0], dict):
        return _rate(result[1])
    if len(result) > 1:
        raise ValueError(f"query returned {len(result)} series, expected one (aggregate them)")
    return _rate(result[0]["value"][1])


def _rate(raw: Any) -> float | None:
    value = float(raw)
    return value if math.isfinite(value) and value >= 0 else None


def progress_by_job(result: Any, *, keys: Collection[JobKey]) -> dict[JobKey, Progress]:
    """`PROGRESS_QUERY`'s vector as each listed job's progress (absent gauges stay None)."""
    found: dict[JobKey, dict[str, float | None]] = {}
    for series in result:
        labels = series["metric"]
        key = (labels.get(LABEL_NAMESPACE, ""), labels.get(LABEL_JOB_NAME, ""))
        field = {PROGRESS: "samples_done", TOTAL: "total_samples"}.get(labels.get("__name__", ""))
        if key in keys and field is not None:
            found.setdefault(key, {})[field] = _rate(series["value"][1])
    return {key: Progress(**fields) for key, fields in found.items()}


# A goodput job's gauges, each as GradientReport's field (the step times apart: one series per
# configuration it ran, labelled by it).
GRADIENT_FIELDS: Mapping[str, str] = {
    contract.GRADIENT_NOISE_SCALE: "noise_scale",
    contract.BASE_BATCH: "base_batch",
    contract.MAX_LOCAL_BATCH: "max_local_batch",
    contract.MAX_GLOBAL_BATCH: "max_global_batch",
    contract.LOCAL_BATCH: "local_batch",
    contract.ACCUM_STEPS: "accum_steps",
    contract.REPLICAS: "replicas",
}
STEP_LABELS = (contract.LABEL_REPLICAS, contract.LABEL_LOCAL_BATCH, contract.LABEL_ACCUM_STEPS)
REQUIRED = ("noise_scale", "base_batch", "max_local_batch", "max_global_batch")
_GRADIENT_NAMES = "|".join([*GRADIENT_FIELDS, contract.STEP_SECONDS])
# Every job's gauges in one query: the largest value its pods report of each (a step time's
# series kept apart by its configuration).
GOODPUT_QUERY = (
    f"max by ({LABEL_NAMESPACE}, {LABEL_JOB_NAME}, __name__, {', '.join(STEP_LABELS)}) "
    f'({{__name__=~"{_GRADIENT_NAMES}"}})'
)


def reports_by_job(result: Any, *, keys: Collection[JobKey]) -> dict[JobKey, GradientReport]:
    """`GOODPUT_QUERY`'s vector as each listed job's report: only the jobs that report their
    noise scale, base batch and bounds; an unusable value (NaN, negative, a malformed label)
    is left out."""
    fields: dict[JobKey, dict[str, float]] = {}
    steps: dict[JobKey, list[StepTime]] = {}
    for series in result:
        labels = series["metric"]
        key = (labels.get(LABEL_NAMESPACE, ""), labels.get(LABEL_JOB_NAME, ""))
        value = _rate(series["value"][1])
        if key not in keys or value is None:
            continue
        name = labels.get("__name__", "")
        if name == contract.STEP_SECONDS:
            step = _step(labels, value)
            if step is not None:
                steps.setdefault(key, []).append(step)
        elif name in GRADIENT_FIELDS:
            fields.setdefault(key, {})[GRADIENT_FIELDS[name]] = value
    return {
        key: _report(found, tuple(sorted(steps.get(key, []), key=_configuration)))
        for key, found in fields.items()
        if all(field in found for field in REQUIRED)
    }


def _step(labels: Mapping[str, str], seconds: float) -> StepTime | None:
    try:
        replicas, local, accum = (int(labels[label]) for label in STEP_LABELS)
    except (KeyError, ValueError):
        return None
    return StepTime(replicas=replicas, local_batch=local, accum_steps=accum, seconds=seconds)


def _configuration(step: StepTime) -> tuple[int, int, int]:
    return (step.replicas, step.local_batch, step.accum_steps)


def _report(found: Mapping[str, float], steps: tuple[StepTime, ...]) -> GradientReport:
    """The gauges as a report: batch sizes are whole numbers (a gauge carries a float)."""
    whole = {name: int(value) for name, value in found.items() if name != "noise_scale"}
    return GradientReport(noise_scale=found["noise_scale"], steps=steps, **whole)


class PrometheusThroughput:
    """`ThroughputSource` over a Prometheus HTTP API, with a count of queries and failures.

    `verify_tls=False` skips certificate checks; a private CA can be given through the
    `REQUESTS_CA_BUNDLE` environment variable. `bearer_token_file` is re-read every round, so a
    rotated service-account token keeps working.
    """

    def __init__(
        self,
        *,
        url: str,
        template: str = DEFAULT_QUERY_TEMPLATE,
        window: str = DEFAULT_WINDOW,
        timeout: float = DEFAULT_TIMEOUT,
        headers: Mapping[str, str] | None = None,
        bearer_token: str | None = None,
        bearer_token_file: Path | None = None,
        verify_tls: bool = True,
    ) -> None:
        check_template(template)
        check_window(window)
        if bearer_token is not None and bearer_token_file is not None:
            raise ValueError("give bearer_token or bearer_token_file, not both")
        self.template = template
        self.window = window
        self.timeout = timeout
        self._token_file = bearer_token_file
        # PrometheusConnect sends this very dict with every request; `_authorize` updates it.
        self._headers = dict(headers or {})
        if bearer_token is not None:
            self._headers["Authorization"] = f"Bearer {bearer_token}"
        self._prom = PrometheusConnect(
            url=url.rstrip("/"),
            headers=self._headers,
            disable_ssl=not verify_tls,
            retry=Retry(total=0),  # the engine asks again next round; retries would stall it
        )
        self.queries = 0
        self.errors = 0
        self._last_errors: dict[JobKey, str] = {}

    @property
    def last_errors(self) -> Mapping[JobKey, str]:
        """Why each job of the latest `read` had no value because its query failed."""
        return dict(self._last_errors)

    @property
    def window_seconds(self) -> float:
        """The template's rate window: how far back a reading reaches."""
        return duration_seconds(self.window)

    def read(self, jobs: Sequence[ManagedJob], *, now: datetime) -> dict[JobKey, float | None]:
        """Samples/s of each job, as Prometheus evaluates it now.

        `now` is not sent: the window ends at Prometheus' own clock, so clock skew between the
        engine and Prometheus cannot shift it (the simulated source is the one that needs `now`).
        """
        values: dict[JobKey, float | None] = {}
        self._last_errors = {}
        transport = self._authorize()
        for job in jobs:
            values[job.key] = None
            if transport is None:
                try:
                    values[job.key] = self._query(job)
                except TransportError as exc:
                    transport = str(exc)
                except (PrometheusApiClientException, ValueError, LookupError) as exc:
                    self._fail(job.key, f"{type(exc).__name__}: {exc}")
            if transport is not None:
                self._fail(job.key, transport)
        if transport is not None:
            log.warning("throughput of %d jobs unknown: %s", len(jobs), transport)
        return values

    def progress(self, jobs: Sequence[ManagedJob], *, now: datetime) -> dict[JobKey, Progress]:
        """The progress gauges of every job that exports them, with one query for all jobs.
        A failure is logged and reads as no progress (the engine then integrates throughput)."""
        if self._authorize() is not None:
            return {}
        self.queries += 1
        try:
            result = self._prom.custom_query(PROGRESS_QUERY, timeout=self.timeout)
            return progress_by_job(result, keys={job.key for job in jobs})
        except (OSError, PrometheusApiClientException, ValueError, LookupError, TypeError) as exc:
            self.errors += 1
            log.warning("job progress unknown: %s: %.200s", type(exc).__name__, exc)
            return {}

    def goodput(self, jobs: Sequence[ManagedJob], *, now: datetime) -> dict[JobKey, GradientReport]:
        """The gradient statistics of every job that exports them, with one query for all jobs.
        Raises when they cannot be read (the engine then prices as in its last round)."""
        failure = self._authorize()
        if failure is not None:
            raise TransportError(failure)
        self.queries += 1
        try:
            result = self._prom.custom_query(GOODPUT_QUERY, timeout=self.timeout)
            return reports_by_job(result, keys={job.key for job in jobs})
        except (OSError, PrometheusApiClientException, ValueError, LookupError, TypeError) as exc:
            self.errors += 1
            raise TransportError(f"{type(exc).__name__}: {exc}"[:MAX_ERROR_CHARS]) from exc

    def _query(self, job: ManagedJob) -> float | None:
        template = job.throughput_query or self.template
        query = render_query(template, namespace=job.namespace, name=job.name, window=self.window)
        self.queries += 1
        try:
            result = self._prom.custom_query(query, timeout=self.timeout)
        except OSError as exc:  # requests' exceptions are OSErrors: refused, reset, timed out
            raise TransportError(f"{type(exc).__name__}: {exc}") from exc
        return parse_result(result)

    def _authorize(self) -> str | None:
        """Load the token file into the headers; the error that fails the round, if any."""
        if self._token_file is None:
            return None
        try:
            token = self._token_file.read_text().strip()
        except OSError as exc:
            return f"bearer token: {type(exc).__name__}: {exc}"
        self._headers["Authorization"] = f"Bearer {token}"
        return None

    def _fail(self, key: JobKey, error: str) -> None:
        self.errors += 1
        self._last_errors[key] = error[:MAX_ERROR_CHARS]  # a proxy's error page can be long

    def close(self) -> None:
        self._prom.close()
