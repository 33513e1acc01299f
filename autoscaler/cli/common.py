"""Options the long-running commands share: cluster access, metrics address, leader election."""

import argparse
import logging
import os
import signal
import socket
import threading
import uuid
from collections.abc import Callable
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any, Protocol

from prometheus_client import CollectorRegistry, Gauge

from autoscaler.clients.kube import Kube
from autoscaler.clients.leader import LeaderElector, LeaseTimings
from autoscaler.observability.server import serve

LEASE_LOST = 1
log = logging.getLogger(__name__)


IN_CLUSTER_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
DISABLED = "0"  # a bind address that serves nothing (controller-runtime's convention)


def add_service_arguments(
    sub: Any, *, lease_name: str, leader_elect: bool = True, upstream: bool = False
) -> None:
    """The shared flags; `upstream` adds the names and probe server of upstream's manager
    (kubeflow/training-operator v1.9, on controller-runtime) to the operator's."""
    sub.add_argument(
        "--kubeconfig",
        default=os.environ.get("KUBECONFIG"),
        help="default: $KUBECONFIG, else in-cluster",
    )
    sub.add_argument(
        "--metrics-address",
        *(["--metrics-bind-address"] if upstream else []),
        dest="metrics_address",
        type=bind_address_flag,
        default=":8080",
        metavar="[HOST]:PORT",
        help="where /metrics, /healthz and /readyz are served ('0': nowhere)",
    )
    if upstream:
        sub.add_argument(
            "--health-probe-bind-address",
            type=bind_address_flag,
            default=":8081",
            metavar="[HOST]:PORT",
            help="where /healthz (alive) and /readyz (caches synced) are served ('0': nowhere)",
        )
    sub.add_argument(
        "--leader-elect",
        nargs="?",
        const=True,
        default=leader_elect,
        type=go_bool,
        metavar="BOOL",
        help=f"act only while holding the Lease (default {str(leader_elect).lower()})",
    )
    sub.add_argument("--no-leader-elect", dest="leader_elect", action="store_false")
    sub.add_argument("--lease-namespace", default=lease_namespace())
    sub.add_argument(
        "--lease-name", *(["--leader-election-id"] if upstream else []), default=lease_name
    )
    sub.add_argument("--identity", default=f"{socket.gethostname()}-{uuid.uuid4().hex[:8]}")
    sub.add_argument("--lease-duration", type=float, default=15.0)
    sub.add_argument("--renew-deadline", type=float, default=10.0)
    sub.add_argument("--retry-period", type=float, default=2.0)


def lease_namespace() -> str:
    """$POD_NAMESPACE, else the service account's namespace (as controller-runtime reads it)."""
    if namespace := os.environ.get("POD_NAMESPACE"):
        return namespace
    try:
        return IN_CLUSTER_NAMESPACE.read_text().strip() or "default"
    except OSError:
        return "default"


def go_bool(text: str) -> bool:
    """A bool flag's value as Go's `strconv.ParseBool` reads it (`--leader-elect=false`)."""
    if text in ("1", "t", "T", "true", "TRUE", "True"):
        return True
    if text in ("0", "f", "F", "false", "FALSE", "False"):
        return False
    raise argparse.ArgumentTypeError(f"not a bool: {text!r} (true or false)")


def bind_address(text: str) -> tuple[str, int] | None:
    """`[HOST]:PORT` as (host, port), an empty host meaning every interface; None for '0'."""
    if text == DISABLED:
        return None
    host, colon, port = text.rpartition(":")
    if not colon or not port.isdigit() or int(port) > 65535:
        raise ValueError(f"not a [HOST]:PORT address: {text!r}")
    return host.strip("[]"), int(port)


def bind_address_flag(text: str) -> str:
    try:
        bind_address(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    return text


def elector(args: argparse.Namespace, kube: Kube) -> LeaderElector | None:
    if not args.leader_elect:
        return None
    timings = LeaseTimings(
        lease_seconds=args.lease_duration,
        renew_deadline=args.renew_deadline,
        retry_period=args.retry_period,
    )
    return LeaderElector(
        kube,
        namespace=args.lease_namespace,
        name=args.lease_name,
        identity=args.identity,
        timings=timings,
    )


def configure_logging() -> None:
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )


class ServiceMetrics(Protocol):
    """What every service's metrics have: the registry /metrics serves, the leader gauge."""

    @property
    def registry(self) -> CollectorRegistry: ...

    @property
    def leader(self) -> Gauge: ...


def run_service(
    args: argparse.Namespace,
    *,
    kube: Kube,
    metrics: ServiceMetrics,
    work: Callable[[threading.Event], None],
    ready: Callable[[], bool] = lambda: True,
) -> int:
    """Serve /metrics and the checks, wait for the Lease, `work` until SIGTERM, hand the Lease on.

    Exit status 0 after SIGTERM, LEASE_LOST at once when the Lease was lost.
    """
    # The Lease's own client, unthrottled (controller-runtime gives leader election a client of
    # its own): renewals queued behind a busy operator's throttled requests lost the lease.
    elector_ = elector(args, Kube(kube.api))
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())

    def healthy() -> bool:  # a standby is healthy; a leader once it is ready
        return (elector_ is not None and not elector_.is_leader.is_set()) or ready()

    def on_lost() -> None:
        # Exit at once, as client-go's controllers do: a graceful stop waits for its threads, and
        # a silently cut-off leader then writes after the new one (measured by `make faults`).
        log.error("exiting: the lease was lost")
        os._exit(LEASE_LOST)

    servers = serve_endpoints(args, metrics=metrics, healthy=healthy)
    try:
        if elector_ is not None:
            elector_.run(stop, on_lost=on_lost)
            metrics.leader.set(1 if elector_.is_leader.is_set() else 0)
        if not stop.is_set():
            work(stop)
    finally:
        if elector_ is not None:
            elector_.release()
        for server in servers:
            server.shutdown()
    log.info("stopped")
    return 0


def serve_endpoints(
    args: argparse.Namespace, *, metrics: ServiceMetrics, healthy: Callable[[], bool]
) -> list[ThreadingHTTPServer]:
    """/metrics with /healthz and /readyz; and controller-runtime's probe server, where /healthz
    answers while the process runs (its `healthz.Ping`) and /readyz as the other."""
    wanted = [
        (args.metrics_address, metrics.registry, {"/healthz": healthy, "/readyz": healthy}),
        (
            getattr(args, "health_probe_bind_address", DISABLED),
            None,
            {"/healthz": lambda: True, "/readyz": healthy},
        ),
    ]
    servers = []
    for address, registry, checks in wanted:
        if (where := bind_address(address)) is None:
            continue
        server = serve(host=where[0], port=where[1], registry=registry, checks=checks)
        paths = ["/metrics"] * (registry is not None) + sorted(checks)
        log.info("serving %s on %s:%d", " ".join(paths), *server.server_address[:2])
        servers.append(server)
    return servers
