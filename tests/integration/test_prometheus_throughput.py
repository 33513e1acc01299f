"""`PrometheusThroughput` against the real Prometheus scraping real `ThroughputReporter`s."""

from __future__ import annotations

import dataclasses
import json
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from autoscaler.api.ownership import Owner
from autoscaler.clients.prometheus import PrometheusThroughput
from autoscaler.engine.config import EngineConfig, PrometheusSource
from autoscaler.engine.engine import Engine
from autoscaler.engine.ports import JobKey, ManagedJob, Progress
from autoscaler.metrics_contract import DEFAULT_QUERY_TEMPLATE
from autoscaler.policies.global_optimizer import GlobalOptimizer, GlobalOptimizerConfig
from autoscaler.training import ThroughputReporter
from tests.support.clock import NOW  # not sent: Prometheus evaluates at its own clock
from tests.support.memory_cluster import MemoryCluster, make_job
from tests.support.polling import wait_for
from tests.support.processes import free_port
from tests.support.prometheus import PrometheusServer

WINDOW = "2s"  # two 1 s scrapes: exact for the steady counters below
# Unescaped, this closes the selector and the call and returns 1 for any job.
INJECTION = 'x"}[1m])) or vector(1) #'
# A single read with WINDOW misses a job when one scrape comes late on a loaded host.
ONE_READ_WINDOW = "10s"


def managed(namespace: str, name: str) -> ManagedJob:
    return ManagedJob(
        namespace=namespace,
        name=name,
        min_replicas=1,
        max_replicas=4,
        replicas=1,
        active=1,
        owner=Owner.ENGINE,
        created=NOW,
    )


@dataclass(frozen=True)
class FakeJob:
    job: ManagedJob
    rate: float  # samples/s of the whole job
    reporters: tuple[ThroughputReporter, ...]  # one per pod, each stepping rate/len


def step_steadily(jobs: list[FakeJob], stop: threading.Event) -> None:
    """Keep every counter at exactly rate * elapsed, so Prometheus' rate() is the job's rate."""
    start = time.monotonic()
    done = {id(r): 0.0 for fake in jobs for r in fake.reporters}
    while not stop.wait(0.01):
        elapsed = time.monotonic() - start
        for fake in jobs:
            for reporter in fake.reporters:
                target = fake.rate / len(fake.reporters) * elapsed
                reporter.step(samples=target - done[id(reporter)])
                done[id(reporter)] = target


@pytest.fixture(scope="module")
def fake_jobs(prometheus: PrometheusServer) -> Iterator[list[FakeJob]]:
    """Three jobs (two share a name across namespaces, one has two pods), scraped every second."""
    ns_a, ns_b = f"a-{uuid.uuid4().hex[:8]}", f"b-{uuid.uuid4().hex[:8]}"
    specs = [(ns_a, "train", 50.0, 1), (ns_b, "train", 20.0, 1), (ns_a, "sharded", 30.0, 2)]
    jobs = [
        FakeJob(managed(ns, name), rate, tuple(_reporter(ns, name) for _ in range(pods)))
        for ns, name, rate, pods in specs
    ]
    targets = [f"127.0.0.1:{r.port}" for fake in jobs for r in fake.reporters]
    stop = threading.Event()
    stepper = threading.Thread(target=step_steadily, args=(jobs, stop), daemon=True)
    stepper.start()
    for target in targets:
        prometheus.add_target(target, job="throughput")
    try:
        yield jobs
    finally:
        for target in targets:
            prometheus.remove_target(target, job="throughput")
        stop.set()
        stepper.join(timeout=5)
        reporters = [reporter for fake in jobs for reporter in fake.reporters]
        with ThreadPoolExecutor() as pool:  # each stop waits up to the server's 0.5 s poll
            list(pool.map(ThroughputReporter.stop, reporters))


def _reporter(namespace: str, name: str) -> ThroughputReporter:
    return ThroughputReporter.start(port=0, addr="127.0.0.1", namespace=namespace, job_name=name)


def near(values: dict[JobKey, float | None], expected: dict[JobKey, float]) -> bool:
    return all(
        (value := values[key]) is not None and value == pytest.approx(rate, rel=0.1)
        for key, rate in expected.items()
    )


def test_reads_each_jobs_rate(prometheus: PrometheusServer, fake_jobs: list[FakeJob]) -> None:
    ns_a = fake_jobs[0].job.namespace
    extra = [managed(ns_a, INJECTION), managed(ns_a, "absent")]
    jobs = [fake.job for fake in fake_jobs] + extra
    expected = {fake.job.key: fake.rate for fake in fake_jobs}
    source = PrometheusThroughput(url=prometheus.url, window=WINDOW)

    def settled() -> dict[JobKey, float | None] | None:
        values = source.read(jobs, now=NOW)
        return values if near(values, expected) else None

    try:
        values = wait_for(settled, timeout=30, interval=0.25, what=f"rates near {expected}")
        assert source.last_errors == {}
    finally:
        source.close()
    assert values[extra[0].key] is None  # the injection stayed a (non-matching) literal
    assert values[extra[1].key] is None
    assert source.queries >= len(jobs)
    assert source.errors == 0


def test_reads_every_jobs_progress_gauges_with_one_query(
    prometheus: PrometheusServer, fake_jobs: list[FakeJob]
) -> None:
    """The largest value a job's pods report; a job without the gauges reads as absent."""
    train_a, train_b, sharded = fake_jobs
    train_a.reporters[0].set_total(1000.0)
    train_a.reporters[0].set_progress(250.0)
    sharded.reporters[0].set_progress(40.0)  # one pod behind the other, and no total declared
    sharded.reporters[1].set_progress(60.0)
    expected = {
        train_a.job.key: Progress(samples_done=250.0, total_samples=1000.0),
        sharded.job.key: Progress(samples_done=60.0, total_samples=None),
    }
    jobs = [fake.job for fake in fake_jobs]
    source = PrometheusThroughput(url=prometheus.url, window=WINDOW)
    try:
        found = wait_for(
            lambda: (values := source.progress(jobs, now=NOW)) == expected and values,
            timeout=30,
            interval=0.25,
            what=f"progress {expected}",
        )
    finally:
        source.close()
    assert train_b.job.key not in found
    assert source.errors == 0


def test_injection_would_have_worked_unescaped(
    prometheus: PrometheusServer, fake_jobs: list[FakeJob]
) -> None:
    """The escaping test above is meaningful: the raw name really does inject `vector(1)`."""
    ns_a = fake_jobs[0].job.namespace
    raw = DEFAULT_QUERY_TEMPLATE.format(namespace=ns_a, name=INJECTION, window=WINDOW)
    [sample] = prometheus.query(raw)
    assert sample["value"][1] == "1"  # type: ignore[index]


def test_bad_query_fails_each_job(prometheus: PrometheusServer) -> None:
    """Prometheus answers 400: every job reads None with the error, and each job is still asked."""
    jobs = [managed("ns", "one"), managed("ns", "two")]
    source = PrometheusThroughput(url=prometheus.url, template='sum(rate(x{{job_name="{name}"}}')
    try:
        assert source.read(jobs, now=NOW) == {job.key: None for job in jobs}
    finally:
        source.close()
    assert set(source.last_errors) == {job.key for job in jobs}
    assert all("400" in error for error in source.last_errors.values())
    assert (source.queries, source.errors) == (2, 2)


def test_prometheus_down_reads_none_at_once() -> None:
    jobs = [managed("ns", f"job-{i}") for i in range(3)]
    source = PrometheusThroughput(url=f"http://127.0.0.1:{free_port()}")  # nothing listens
    start = time.monotonic()
    try:
        assert source.read(jobs, now=NOW) == {job.key: None for job in jobs}
    finally:
        source.close()
    assert time.monotonic() - start < 1.0
    assert set(source.last_errors) == {job.key for job in jobs}
    assert all("ConnectionError" in error for error in source.last_errors.values())
    assert (source.queries, source.errors) == (1, 3)  # the first failure ends the round


def test_prometheus_silent_times_out() -> None:
    """A server that accepts connections but never answers costs one timeout per round."""
    jobs = [managed("ns", f"job-{i}") for i in range(3)]
    with socket.create_server(("127.0.0.1", 0)) as silent:  # the backlog accepts, nobody reads
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        source = PrometheusThroughput(url=url, timeout=0.5)
        start = time.monotonic()
        try:
            values = source.read(jobs, now=NOW)
        finally:
            source.close()
        elapsed = time.monotonic() - start
    assert values == {job.key: None for job in jobs}
    assert 0.4 < elapsed < 2.0
    assert all("Timeout" in error for error in source.last_errors.values())
    assert source.queries == 1


class _Recorder(BaseHTTPRequestHandler):
    """Answers every query with `vector(3)` and remembers the Authorization header."""

    seen: list[str | None]

    def do_GET(self) -> None:
        self.seen.append(self.headers.get("Authorization"))
        body = json.dumps(
            {"status": "success", "data": {"resultType": "vector", "result": _three()}}
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - stdlib signature
        pass


def _three() -> list[dict[str, object]]:
    return [{"metric": {}, "value": [time.time(), "3"]}]


@pytest.fixture
def recorder() -> Iterator[tuple[str, list[str | None]]]:
    seen: list[str | None] = []
    handler = type("Handler", (_Recorder,), {"seen": seen})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}", seen
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def test_bearer_token_file_is_reread(
    recorder: tuple[str, list[str | None]], tmp_path: Path
) -> None:
    url, seen = recorder
    token = tmp_path / "token"
    token.write_text("first\n")
    job = managed("ns", "job")
    source = PrometheusThroughput(url=url, bearer_token_file=token, headers={"X-Scope": "a"})
    try:
        assert source.read([job], now=NOW) == {job.key: 3.0}
        token.write_text("rotated")
        assert source.read([job], now=NOW) == {job.key: 3.0}
        token.unlink()
        assert source.read([job], now=NOW) == {job.key: None}
    finally:
        source.close()
    assert seen == ["Bearer first", "Bearer rotated"]
    assert "FileNotFoundError" in source.last_errors[job.key]


def test_job_queries_reaching_beyond_their_namespace_are_refused_and_the_jobs_held(
    prometheus: PrometheusServer, fake_jobs: list[FakeJob]
) -> None:
    """Against the real Prometheus: each refused template would have read something there (the
    other namespace's rate, a constant), yet the engine never sends it, warns, and holds the
    job at its count; a template confined to the job's namespace is read as usual."""
    train_a, train_b, _ = fake_jobs
    ns_a, ns_b = train_a.job.namespace, train_b.job.namespace
    series = "autoscaler_training_samples_total"
    other = f'sum(rate({series}{{{{namespace="{ns_b}", job_name="train"}}}}[{{window}}]))'
    refused = {
        "reads-other": other,
        "constant": "vector(1e9)",
        "regex": f'sum(rate({series}{{{{namespace=~".+", job_name="train"}}}}[{{window}}]))',
        "subquery": (
            f'max_over_time(sum(rate({series}{{{{namespace="{{namespace}}", job_name="train"}}}}'
            "[{window}]))[1m:1s])"
        ),
    }
    own = f'sum(rate({series}{{{{namespace="{{namespace}}", job_name="train"}}}}[{{window}}]))'
    for template in (other, "vector(1e9)"):  # what each would have read
        rendered = template.format(namespace=ns_a, name="x", window=ONE_READ_WINDOW)
        wait_for(lambda q=rendered: prometheus.query(q), timeout=30, interval=0.25, what=rendered)
    own_now = own.format(namespace=ns_a, window=ONE_READ_WINDOW)

    def own_filled_window() -> bool:  # the counter's samples span the whole window
        found = prometheus.query(own_now)
        value = float(found[0]["value"][1]) if found else None  # type: ignore[index]
        return value == pytest.approx(train_a.rate, rel=0.1)

    wait_for(own_filled_window, timeout=30, interval=0.25, what=f"{own_now} near {train_a.rate}")
    jobs = {
        name: dataclasses.replace(
            make_job(name, replicas=2), namespace=ns_a, throughput_query=template
        )
        for name, template in {**refused, "own": own}.items()
    }
    cluster = MemoryCluster(jobs_={job.key: job for job in jobs.values()}, gpus=64.0)
    source = PrometheusThroughput(url=prometheus.url, window=ONE_READ_WINDOW)
    config = EngineConfig(prometheus=PrometheusSource(url=prometheus.url, window=ONE_READ_WINDOW))
    engine = Engine(
        cluster=cluster,
        throughput=source,
        policy=GlobalOptimizer(GlobalOptimizerConfig(restart_seconds=0)),
        policy_name="p",
        config=config,
    )
    try:
        report = engine.run_once(now=NOW)
    finally:
        engine.close()
        source.close()
    assert source.queries == 2  # "own"'s query and the one progress query of all jobs
    outcomes = {o.job.name: o for o in report.outcomes}
    for name in refused:
        assert outcomes[name].settled.reason == "ThroughputQueryRefused", name
        assert cluster.jobs_[jobs[name].key].replicas == 2
    # read, not refused (one round: test_reads_each_jobs_rate checks precision)
    assert outcomes["own"].observed == pytest.approx(train_a.rate, rel=0.5)
    assert outcomes["own"].settled.reason != "ThroughputQueryRefused"
    warned = {name for name, reason, warning in cluster.events if reason == "InvalidAnnotation"}
    assert warned == set(refused)
    assert all(warning for _, reason, warning in cluster.events if reason == "InvalidAnnotation")
