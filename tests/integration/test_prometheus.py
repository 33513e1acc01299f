"""The real Prometheus scrapes a loopback /metrics endpoint registered at runtime."""

from __future__ import annotations

import random
import threading
import uuid
from collections.abc import Iterator
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import pytest
import requests
from prometheus_api_client import PrometheusConnect
from prometheus_client import CollectorRegistry, Gauge, make_wsgi_app

from tests.support.processes import wait_until
from tests.support.prometheus import PrometheusServer


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - stdlib signature
        pass


@pytest.fixture
def metrics_endpoint() -> Iterator[tuple[str, CollectorRegistry]]:
    """A stoppable loopback /metrics server with its own registry."""
    registry = CollectorRegistry()
    server: WSGIServer = make_server(
        "127.0.0.1", 0, make_wsgi_app(registry), handler_class=_QuietHandler
    )
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True
    )
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_port}", registry
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def test_scrapes_registered_target(
    prometheus: PrometheusServer, metrics_endpoint: tuple[str, CollectorRegistry]
) -> None:
    host_port, registry = metrics_endpoint
    job = f"probe-{uuid.uuid4().hex[:8]}"
    value = float(random.randint(1_000, 1_000_000))
    Gauge("testenv_probe_value", "A value only this test knows", registry=registry).set(value)
    prometheus.add_target(host_port, job=job, labels={"purpose": "testenv"})
    query = f'testenv_probe_value{{job="{job}",purpose="testenv"}}'
    with requests.Session() as session:
        prom = PrometheusConnect(url=prometheus.url, disable_ssl=True, session=session)
        seen: list[float] = []

        def scraped() -> bool:
            seen[:] = [float(r["value"][1]) for r in prom.custom_query(query)]
            return bool(seen)

        try:
            wait_until(scraped, timeout=30, interval=0.25, what=query, log_path=prometheus.log_path)
        finally:
            prometheus.remove_target(host_port, job=job)
    assert seen == [value]
