"""The Grafana dashboards in deploy/grafana against the real thing: `autoscaler engine` and
`autoscaler operator` as processes, scraped by the real Prometheus, sizing GPU jobs whose
training stand-ins report throughput. Once the engine has written /scale, every panel's query,
every annotation and every variable of both dashboards must return data over the test's time
range (Grafana's variables replaced by the test's values, as Grafana would).

The engine runs a policy that fails every few rounds, ends its worker process now and then, and
holds back the preemptible job every few rounds (tests/support/flaky_policy.py), so the
fallback, worker and queueing panels and annotations have something to show too.
"""

import json
import math
import re
import time
import urllib.parse
from collections.abc import Callable
from contextlib import ExitStack, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from autoscaler.api import coordinates as c
from autoscaler.observability.dashboards.generated import DASHBOARDS
from autoscaler.training import GoodputReport
from tests.integration.test_engine import CURVES, GPU, gpu_job
from tests.integration.test_operator import Cluster
from tests.support import flaky_policy
from tests.support.controlplane import REPO_ROOT, ControlPlane
from tests.support.engine_process import engine_config, engine_process, operator_process
from tests.support.polling import wait_for
from tests.support.processes import http_get, log_tail
from tests.support.prometheus import PrometheusServer
from tests.support.training import (
    Kubelet,
    Trainer,
    remove_jobs_and_pods,
)

GRAFANA = REPO_ROOT / "deploy" / "grafana"
JOBS = ("linear", "sublinear")
PREEMPTIBLE = "sublinear"  # the policy holds it back now and then
GOODPUT = "linear"  # reports gradient statistics: the engine sizes it by goodput
# A goodput job's report as the training helper exports it: one step time at a single rank.
GRADIENT_REPORT = GoodputReport(
    noise_scale=400.0,
    base_batch=32,
    local_batch=32,
    accum_steps=0,
    replicas=1,
    max_local_batch=128,
    max_global_batch=2048,
    step_seconds={(1, 32, 0): 0.2},
)
GPUS = 6
STEP = 1  # s, the query_range resolution
# Grafana's own variables for a 1 s scrape interval and a 1 s step.
GRAFANA_VARIABLES = {"__interval": "2s", "__rate_interval": "4s"}
DEADLINE = 45.0  # s for every query to return data once the engine has written
WRITTEN = re.compile(r'^autoscaler_scale_writes_total\{result="written"\} [1-9]', re.M)


@dataclass(frozen=True)
class Query:
    dashboard: str
    where: str  # the panel, annotation or variable
    expr: str

    def __str__(self) -> str:
        return f"{self.dashboard} / {self.where}: {self.expr}"


def queries(name: str, board: dict[str, Any]) -> tuple[list[Query], list[Query]]:
    """The dashboard's (panel and annotation queries, variable queries)."""
    found = [
        Query(name, f"panel {panel['title']!r} {target['refId']}", target["expr"])
        for panel in board["panels"]
        for target in panel["targets"]
    ]
    found += [
        Query(name, f"annotation {a['name']!r}", a["expr"])
        for a in board["annotations"]["list"]
        if "expr" in a
    ]
    variables = [
        Query(name, f"variable {v['name']!r}", v["query"])
        for v in board["templating"]["list"]
        if v["type"] == "query"
    ]
    return found, variables


def substitute(expr: str, values: dict[str, str]) -> str:
    """`$name` and `${name}` replaced; a variable the test does not know fails the test."""

    def one(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        assert name in values, f"unknown variable ${name} in {expr}"
        return values[name]

    return re.sub(r"\$\{(\w+)\}|\$(\w+)", one, expr)


class Prometheus:
    """Range queries over [start, now], as a dashboard's panels make them."""

    def __init__(self, server: PrometheusServer, start: float) -> None:
        self.url, self.start = server.url, start

    def _data(self, path: str, **params: str) -> Any:
        status, body = http_get(f"{self.url}{path}?{urllib.parse.urlencode(params)}")
        assert status == 200, f"{params} -> HTTP {status}: {body[:300]}"
        return json.loads(body)["data"]

    def has_data(self, query: Query, values: dict[str, str]) -> bool:
        """Whether a panel's or annotation's query has a number over the range."""
        end = time.time()
        values = {**values, "__range": f"{math.ceil(end - self.start)}s"}
        result = self._data(
            "/api/v1/query_range",
            query=substitute(query.expr, values),
            start=f"{self.start:.3f}",
            end=f"{end:.3f}",
            step=str(STEP),
        )["result"]
        return any(math.isfinite(float(v)) for series in result for _, v in series["values"])

    def has_values(self, query: Query, values: dict[str, str]) -> bool:
        """Whether a variable's `label_values(selector, label)` finds values over the range."""
        match = re.fullmatch(r"label_values\((.+), (\w+)\)", query.expr)
        assert match, f"not a label_values query: {query}"
        selector, label = substitute(match.group(1), values), match.group(2)
        series = self._data(
            "/api/v1/series",
            **{"match[]": selector},
            start=f"{self.start:.3f}",
            end=f"{time.time():.3f}",
        )
        return any(label in labels for labels in series)


@pytest.mark.usefixtures("crd")  # the operator's
def test_every_dashboard_query_returns_data(
    control_plane: ControlPlane,
    kube_api: client.ApiClient,
    prometheus: PrometheusServer,
    namespace: str,
    tmp_path: Path,
) -> None:
    boards = {name: json.loads((GRAFANA / f"{name}.json").read_text()) for name in DASHBOARDS}
    started = time.monotonic()
    source = Prometheus(prometheus, start=time.time())
    with ExitStack() as stack:
        operator = stack.enter_context(
            operator_process(
                kubeconfig=control_plane.kubeconfig_path,
                lease_namespace=namespace,
                workdir=tmp_path,
                identity="dashboards-operator",
            )
        )
        stack.enter_context(Kubelet(kube_api, namespace))
        stack.callback(remove_jobs_and_pods, kube_api, namespace)
        cluster = Cluster(kube_api, namespace)
        for name in JOBS:
            job = gpu_job(name)
            if name == PREEMPTIBLE:
                job["metadata"]["annotations"][c.ANNOTATION_PREEMPTIBLE] = "true"
            cluster.create(job)
            trainer = stack.enter_context(
                Trainer(kube_api, namespace=namespace, name=name, curve=CURVES[name])
            )
            if name == GOODPUT:
                trainer.reporter.set_goodput(GRADIENT_REPORT)
            prometheus.add_target(trainer.target, job="training")
            stack.callback(prometheus.remove_target, trainer.target, job="training")
        config = engine_config(
            namespace=namespace,
            prometheus_url=prometheus.url,
            capacity={GPU: GPUS},
            policy=flaky_policy.__file__,
        )
        engine = stack.enter_context(
            engine_process(
                config,
                kubeconfig=control_plane.kubeconfig_path,
                lease_namespace=namespace,
                workdir=tmp_path,
            )
        )
        for process, job in ((engine, "autoscaler-engine"), (operator, "pytorchjob-operator")):
            prometheus.add_target(process.target, job=job)
            stack.callback(prometheus.remove_target, process.target, job=job)
        try:
            wait_for(
                lambda: WRITTEN.search(engine.get("/metrics")[1]),
                timeout=40,
                interval=0.5,
                what="the engine's first /scale write",
            )
        except AssertionError as error:
            raise AssertionError(f"{error}\n{log_tail(engine.log)}") from None
        written = time.monotonic() - started
        values = {
            "scaling-decisions": {
                **GRAFANA_VARIABLES,
                "namespace": namespace,
                "job": "|".join(JOBS),  # Grafana's multi-value regex
                "instance": engine.target,
            },
            "operator-health": {**GRAFANA_VARIABLES, "instance": operator.target},
        }
        listed = {name: queries(name, board) for name, board in boards.items()}
        checks: list[tuple[Query, Callable[[Query, dict[str, str]], bool]]] = [
            *((q, source.has_data) for found, _ in listed.values() for q in found),
            *((q, source.has_values) for _, variables in listed.values() for q in variables),
        ]
        empty = list(checks)  # the queries that have not returned data yet

        def all_have_data() -> bool:
            empty[:] = [(q, check) for q, check in empty if not check(q, values[q.dashboard])]
            return not empty

        with suppress(AssertionError):  # a timeout: the message below names the queries
            wait_for(all_have_data, timeout=DEADLINE, interval=1.0, what="every query's data")
        missing = "\n".join(f"  {q}" for q, _ in empty)
        assert not empty, (
            f"{len(empty)} of {len(checks)} dashboard queries returned no data within "
            f"{DEADLINE:g} s of the engine's first write:\n{missing}"
        )
    total = time.monotonic() - started
    lines = [f"\nfirst /scale write after {written:.1f} s, every query's data after {total:.1f} s"]
    for name, (found, variables) in listed.items():
        panels = len(boards[name]["panels"])
        annotations = sum("annotation" in q.where for q in found)
        lines.append(
            f"{name}: {panels} panels, {len(found) - annotations} panel queries, "
            f"{annotations} annotations, {len(variables)} variables: all returned data"
        )
    print("\n".join(lines))
