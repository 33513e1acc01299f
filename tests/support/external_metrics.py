"""A fake `external.metrics.k8s.io/v1beta1` server, registered with the real kube-apiserver.

How the aggregator reaches it without a cluster network: stdlib HTTPS on 127.0.0.1 with a
self-signed certificate, reached by the aggregator through an APIService whose Service is
`type: ExternalName`, `externalName: localhost` (with `insecureSkipTLSVerify`). It answers the
group-version discovery document and `namespaces/{ns}/{metric}` reads with the value the test set;
everything else (`/apis`, `/openapi/v2`, `/openapi/v3`, unknown metrics) is a 404.
"""

from __future__ import annotations

import contextlib
import json
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections import Counter
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from kubernetes import client
from kubernetes.client.exceptions import ApiException

GROUP = "external.metrics.k8s.io"
VERSION = "v1beta1"
APISERVICE = f"{VERSION}.{GROUP}"
SERVICE_NAMESPACE = "default"
SERVICE_NAME = "fake-external-metrics"
_PREFIX = f"/apis/{GROUP}/{VERSION}"


def quantity(value: float | str) -> str:
    """A Kubernetes quantity string: integers as is, other numbers in milli-units."""
    if isinstance(value, str):
        return value
    if float(value).is_integer():
        return str(int(value))
    return f"{round(value * 1000)}m"


class ExternalMetricsServer:
    """HTTPS on 127.0.0.1:<ephemeral port>, serving metric values set by the test."""

    def __init__(self, workdir: Path) -> None:
        self._workdir = workdir
        self._values: dict[str, str] = {}
        self._lock = threading.Lock()
        self._server: _TLSServer | None = None
        self._thread: threading.Thread | None = None
        self.reads: Counter[str] = Counter()  # metric name -> reads that returned a value
        self.requests: Counter[str] = Counter()  # "<status> <path>" -> count, for debugging
        self.namespaces: set[str] = set()  # namespaces the metrics were read in
        self.errors: list[str] = []  # TLS/handler errors, kept rather than printed

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("external metrics server not started")
        port: int = self._server.server_address[1]
        return port

    def set(self, metric: str, value: float | str) -> None:
        with self._lock:
            self._values[metric] = quantity(value)

    def clear(self, metric: str) -> None:
        with self._lock:
            self._values.pop(metric, None)

    def value(self, metric: str) -> str | None:
        with self._lock:
            return self._values.get(metric)

    def metrics(self) -> list[str]:
        with self._lock:
            return sorted(self._values)

    def start(self) -> None:
        self._workdir.mkdir(parents=True, exist_ok=True)
        cert, key = self._workdir / "tls.crt", self._workdir / "tls.key"
        _self_signed(cert, key)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        # Port 0: the kernel picks a free port at bind time, so there is no race to lose.
        self._server = _TLSServer(("127.0.0.1", 0), _Handler, context=context, owner=self)
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.1},
            name="external-metrics",
            daemon=True,
        )
        self._thread.start()

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.close_connections()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None

    # -- served documents ---------------------------------------------------------------------

    def _discovery(self) -> dict[str, Any]:
        return {
            "kind": "APIResourceList",
            "apiVersion": "v1",
            "groupVersion": f"{GROUP}/{VERSION}",
            "resources": [
                {
                    "name": name,
                    "singularName": "",
                    "namespaced": True,
                    "kind": "ExternalMetricValueList",
                    "verbs": ["get"],
                }
                for name in self.metrics()
            ],
        }

    def _metric(self, namespace: str, name: str) -> dict[str, Any] | None:
        value = self.value(name)
        if value is None:
            return None
        with self._lock:
            self.reads[name] += 1
            self.namespaces.add(namespace)
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        return {
            "kind": "ExternalMetricValueList",
            "apiVersion": f"{GROUP}/{VERSION}",
            "metadata": {},
            "items": [{"metricName": name, "metricLabels": {}, "timestamp": now, "value": value}],
        }

    def respond(self, path: str) -> tuple[int, dict[str, Any]]:
        status, body = self._respond(path)
        with self._lock:
            self.requests[f"{status} {path}"] += 1
        return status, body

    def _respond(self, path: str) -> tuple[int, dict[str, Any]]:
        if path == _PREFIX:
            return 200, self._discovery()
        parts = path.removeprefix(_PREFIX + "/").split("/") if path.startswith(_PREFIX) else []
        if len(parts) == 3 and parts[0] == "namespaces":
            found = self._metric(parts[1], parts[2])
            if found is not None:
                return 200, found
        return 404, {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": f"{path} not found",
            "reason": "NotFound",
            "code": 404,
        }


class _TLSServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(
        self,
        address: tuple[str, int],
        handler: type[BaseHTTPRequestHandler],
        *,
        context: ssl.SSLContext,
        owner: ExternalMetricsServer,
    ) -> None:
        super().__init__(address, handler)
        self.context, self.owner = context, owner
        self._open: set[socket.socket] = set()
        self._open_lock = threading.Lock()

    def finish_request(self, request: Any, client_address: Any) -> None:
        # The TLS handshake happens here, in the connection's own thread, never in accept().
        tls = self.context.wrap_socket(request, server_side=True)
        with self._open_lock:
            self._open.add(tls)
        try:
            self.RequestHandlerClass(tls, client_address, self)
        finally:
            with self._open_lock:
                self._open.discard(tls)
            tls.close()

    def close_connections(self) -> None:
        """End kept-alive connections (the aggregator reuses them) so their threads finish."""
        with self._open_lock:
            for sock in self._open:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

    def handle_error(self, request: Any, client_address: Any) -> None:
        error = sys.exc_info()[1]
        self.owner.errors.append(f"{client_address}: {error!r}")


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as the aggregator's proxy expects
    timeout = 60
    server: _TLSServer

    def do_GET(self) -> None:
        status, body = self.server.owner.respond(urlsplit(self.path).path)
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass  # the apiserver polls discovery every few seconds; keep pytest output clean


def _self_signed(cert: Path, key: Path) -> None:
    result = subprocess.run(
        [
            *("openssl", "req", "-x509", "-newkey", "ec"),
            *("-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2"),
            *("-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"),
            *("-keyout", str(key), "-out", str(cert)),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise RuntimeError(f"openssl failed: {result.stderr.strip()}")


# -- registration with kube-apiserver ---------------------------------------------------------


def _available(registration: client.ApiregistrationV1Api) -> tuple[bool, str]:
    status = registration.read_api_service(APISERVICE).status
    for cond in (status.conditions if status else None) or []:
        if cond.type == "Available":
            return cond.status == "True", f"{cond.reason}: {cond.message}"
    return False, "no Available condition yet"


def register(
    api: client.ApiClient, server: ExternalMetricsServer, *, timeout: float = 60.0
) -> float:
    """Create the ExternalName Service and the APIService; wait for Available=True.

    Returns the seconds the aggregator took to report the APIService available.
    """
    start = time.monotonic()
    core = client.CoreV1Api(api)
    core.create_namespaced_service(
        SERVICE_NAMESPACE,
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": SERVICE_NAME},
            "spec": {
                "type": "ExternalName",
                "externalName": "localhost",
                "ports": [{"name": "https", "port": server.port, "protocol": "TCP"}],
            },
        },
    )
    registration = client.ApiregistrationV1Api(api)
    registration.create_api_service(
        {
            "apiVersion": "apiregistration.k8s.io/v1",
            "kind": "APIService",
            "metadata": {"name": APISERVICE},
            "spec": {
                "group": GROUP,
                "version": VERSION,
                "service": {
                    "namespace": SERVICE_NAMESPACE,
                    "name": SERVICE_NAME,
                    "port": server.port,
                },
                "insecureSkipTLSVerify": True,
                "groupPriorityMinimum": 100,
                "versionPriority": 100,
            },
        }
    )
    deadline = start + timeout
    last = ""
    while time.monotonic() < deadline:
        ready, last = _available(registration)
        if ready:
            return time.monotonic() - start
        time.sleep(0.1)
    raise RuntimeError(f"APIService {APISERVICE} not Available after {timeout}s ({last})")


def unregister(api: client.ApiClient) -> None:
    """Delete the APIService and its Service; absent ones are fine."""
    for delete in (
        lambda: client.ApiregistrationV1Api(api).delete_api_service(APISERVICE),
        lambda: client.CoreV1Api(api).delete_namespaced_service(SERVICE_NAME, SERVICE_NAMESPACE),
    ):
        try:
            delete()
        except ApiException as error:
            if error.status != 404:
                raise
