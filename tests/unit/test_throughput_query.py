"""A job's own throughput query: run only when it reads series of its own namespace alone."""

import dataclasses
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta

import pytest

from autoscaler.engine.config import PrometheusSource
from autoscaler.engine.engine import Engine
from autoscaler.engine.ports import JobKey, ManagedJob
from autoscaler.engine.throughput_query import refusal
from autoscaler.metrics_contract import DEFAULT_QUERY_TEMPLATE
from autoscaler.policies.global_optimizer import GlobalOptimizer, GlobalOptimizerConfig
from tests.support.memory_cluster import START, CurveThroughput, MemoryCluster, make_job
from tests.unit.test_engine import CONFIG

OWN = 'sum(rate(my_samples_total{{namespace="{namespace}", job_name="{name}"}}[{window}]))'


def refused(template: str, **settings: object) -> str | None:
    return refusal(template, namespace="team-a", name="bert", window="2m", **settings)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "template",
    [
        OWN,
        DEFAULT_QUERY_TEMPLATE,
        '{{__name__=~"my_.*", namespace="{namespace}"}}',  # any metric name, one namespace
        'sum(rate(a{{namespace="{namespace}"}}[1m])) / sum(b{{namespace="{namespace}"}} offset 1m)',
        'sum(rate(a{{namespace="{namespace}"}}[{window}])) or vector(0)',  # reads series too
        'rate(a{{namespace="{namespace}" or namespace="{namespace}", pod="p"}}[1m])',
    ],
)
def test_queries_confined_to_the_namespace_run(template: str) -> None:
    assert refused(template) is None


@pytest.mark.parametrize(
    ("template", "problem"),
    [
        ('sum(rate(x{{namespace="team-b"}}[1m]))', 'must match namespace="team-a" exactly'),
        ("sum(rate(x[1m]))", 'must match namespace="team-a" exactly'),  # every namespace
        ('sum(rate(x{{namespace=~"team-a|team-b"}}[1m]))', 'must match namespace="team-a"'),
        ('sum(rate(x{{namespace=~"team-a"}}[1m]))', 'must match namespace="team-a"'),  # regex
        ('x{{namespace="team-a", namespace!~"z.*"}}', "no other matcher on namespace"),
        (OWN + ' + sum(rate(x{{namespace="team-b"}}[1m]))', 'x{namespace="team-b"}'),
        ('x{{namespace="team-a" or namespace="team-b"}}', 'must match namespace="team-a"'),
        ("vector(1e9)", "it reads no series"),
        ("1e9", "it reads no series"),
        ("scalar(vector(3)) * 2", "it reads no series"),
        ('max_over_time(rate(x{{namespace="{namespace}"}}[1m])[1h:1s])', "subqueries are refused"),
        ("sum(rate(x{{namespace='{namespace}'}}[1m])", "not PromQL"),
        ("sum(rate(x{pod=~'{name}-.*'}[1m]))", "write PromQL's own braces as {{ and }}"),
        ('rate(x{{job="{job}"}}[1m])', "field {job} is not one of"),
        ("   ", "must be a PromQL expression of 1 to 4096 characters"),
        ("x" * 4097, "must be a PromQL expression of 1 to 4096 characters"),
    ],
)
def test_queries_that_reach_further_or_read_nothing_are_refused(
    template: str, problem: str
) -> None:
    why = refused(template)
    assert why is not None
    assert why.startswith("elastic-autoscaler.io/throughput-query")
    assert problem in why


@pytest.mark.parametrize(
    ("allowed", "runs"),
    [(None, True), (["team-a", "team-c"], True), (["team-c"], False), ([], False)],
)
def test_the_cluster_operator_chooses_the_namespaces_that_may_set_one(
    allowed: list[str] | None, runs: bool
) -> None:
    why = refused(OWN, allowed_namespaces=allowed)
    assert (why is None) is runs
    if not runs:
        assert why is not None
        assert "prometheus.job_query_namespaces" in why


class Recording(CurveThroughput):
    """The curves' readings, remembering which jobs' queries were sent."""

    sent: list[str]

    def read(self, jobs: Sequence[ManagedJob], *, now: datetime) -> Mapping[JobKey, float | None]:
        self.sent.extend(job.name for job in jobs)
        return super().read(jobs, now=now)


@pytest.mark.parametrize(
    ("query", "settings"),
    [
        ('sum(rate(x{{namespace="other"}}[1m]))', {}),
        ("vector(1e9)", {}),
        ('sum(rate(x{{namespace=~".+"}}[1m]))', {}),
        ('max_over_time(sum(rate(x{{namespace="{namespace}"}}[1m]))[1h:1s])', {}),
        (OWN, {"job_query_namespaces": []}),  # switched off by the cluster operator
    ],
)
def test_a_refused_query_is_never_sent_and_the_job_is_held_with_a_warning(
    query: str, settings: dict[str, object]
) -> None:
    own = dataclasses.replace(make_job("own", replicas=2), throughput_query=query)
    other = make_job("other", replicas=2)
    cluster = MemoryCluster(jobs_={j.key: j for j in (own, other)}, gpus=16.0)
    source = Recording(cluster=cluster, curves={n: (lambda k: 100.0 * k) for n in ("own", "other")})
    source.sent = []
    config = CONFIG.model_copy(update={"prometheus": PrometheusSource(**settings)})  # type: ignore[arg-type]
    engine = Engine(
        cluster=cluster,
        throughput=source,
        policy=GlobalOptimizer(GlobalOptimizerConfig(restart_seconds=0)),
        policy_name="p",
        config=config,
    )
    for second in (0, 30, 60, 90):
        report = engine.run_once(now=START + timedelta(seconds=second))
    assert "own" not in source.sent
    assert "other" in source.sent
    assert [(n, r) for n, r, warning in cluster.events if warning] == [("own", "InvalidAnnotation")]
    assert cluster.jobs_[own.key].replicas == 2  # held at its count
    assert cluster.jobs_[other.key].replicas > 2  # the other job is sized as usual
    (outcome,) = [o for o in report.outcomes if o.job.name == "own"]
    assert outcome.settled.reason == "ThroughputQueryRefused"
    message = next(m for name, m in cluster.messages if name == "own")
    assert "throughput-query" in message
