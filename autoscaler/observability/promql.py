"""PromQL for the dashboards, spelled from the metric objects: series names (a counter's
`_total`, a histogram's `_bucket`), label names checked against each metric's own, and
selections filtered by the dashboards' variables (`$namespace`, `$job`, `$instance`)."""

from typing import Final

from prometheus_client.metrics import MetricWrapperBase

from autoscaler.observability.engine_metrics import JOB_LABELS

INSTANCE: Final = "instance"  # Prometheus' target label: one engine or operator replica
QUANTILES: Final = (0.5, 0.9, 0.99)

LABEL_NAMESPACE, LABEL_JOB = JOB_LABELS  # the engine's per-job labels


def described(metric: MetricWrapperBase) -> tuple[str, str]:
    (description,) = metric.describe()
    return description.name, description.type


def series(metric: MetricWrapperBase) -> str:
    """The series a query selects: a gauge's name, a counter's `_total`."""
    name, kind = described(metric)
    if kind == "counter":
        return f"{name}_total"
    if kind == "gauge":
        return name
    raise ValueError(f"{name} is a {kind}: select its buckets with `buckets`")


def buckets(metric: MetricWrapperBase) -> str:
    name, kind = described(metric)
    if kind != "histogram":
        raise ValueError(f"{name} is a {kind}, not a histogram")
    return f"{name}_bucket"


def label(metric: MetricWrapperBase, name: str) -> str:
    """`name`, once checked to be one of the metric's labels."""
    names: tuple[str, ...] = metric._labelnames
    if name not in names:
        raise ValueError(f"{described(metric)[0]} has no label {name!r} (only {names})")
    return name


def select(name: str, *matchers: str) -> str:
    return f"{name}{{{', '.join(matchers)}}}" if matchers else name


def matches(labelname: str, variable: str) -> str:
    """A matcher on a multi-select variable: Grafana joins several values into a regex."""
    return f'{labelname}=~"${variable}"'


ON_INSTANCE: Final = matches(INSTANCE, "instance")


def job_series(metric: MetricWrapperBase) -> str:
    """A per-job engine series, filtered by the dashboard's namespace, job and instance."""
    return select(
        series(metric),
        matches(label(metric, LABEL_NAMESPACE), "namespace"),
        matches(label(metric, LABEL_JOB), "job"),
        ON_INSTANCE,
    )


def rate(selected: str, window: str = "$__rate_interval") -> str:
    return f"rate({selected}[{window}])"


def quantiles(metric: MetricWrapperBase, *matchers: str) -> list[tuple[str, str]]:
    """(expression, legend) of each of QUANTILES of a histogram over all its series."""
    buckets_rate = rate(select(buckets(metric), *matchers))
    return [
        (f"histogram_quantile({q:g}, sum by (le) ({buckets_rate}))", f"p{round(q * 100)}")
        for q in QUANTILES
    ]
