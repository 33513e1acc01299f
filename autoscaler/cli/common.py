"""Options the long-running commands share: cluster access, metrics address, leader election."""

import argparse
import logging
import os
import signal
import socket
import threading
import uuid
from collections.abc import Callable
from typing import Any, Protocol

from prometheus_client import CollectorRegistry, Gauge

from autoscaler.clients.kube import Kube
from autoscaler.clients.leader import LeaderElector, LeaseTimings
from autoscaler.observability.server import serve

LEASE_LOST = 1
log = logging.getLogger(__name__)


def add_service_arguments(sub: Any, *, lease_name: str) -> None:
    sub.add_argument(
        "--kubeconfig",
        default=os.environ.get("KUBECONFIG"),
        help="default: $KUBECONFIG, else in-cluster",
    )
    sub.add_argument(
        "--metrics-address", default="0.0.0.0:8080", help="HOST:PORT of /metrics and /healthz"
    )
    sub.add_argument("--leader-elect", action=argparse.BooleanOptionalAction, default=True)
    sub.add_argument("--lease-namespace", default=os.environ.get("POD_NAMESPACE", "default"))
    sub.add_argument("--lease-name", default=lease_name)
    sub.add_argument("--identity", default=f"{socket.gethostname()}-{uuid.uuid4().hex[:8]}")
    sub.add_argument("--lease-duration", type=float, default=15.0)
    sub.add_argument("--renew-deadline", type=float, default=10.0)
    sub.add_argument("--retry-period", type=float, default=2.0)


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


def metrics_address(args: argparse.Namespace) -> tuple[str, int]:
    host, port = args.metrics_address.rsplit(":", 1)
    return host, int(port)


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
    """Serve /metrics and /healthz, wait for the Lease, `work` until SIGTERM, hand the Lease on.

    Exit status 0 after SIGTERM, LEASE_LOST at once when the Lease was lost.
    """
    elector_ = elector(args, kube)
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())

    def healthy() -> bool:  # a standby is healthy; a leader once it is ready
        return (elector_ is not None and not elector_.is_leader.is_set()) or ready()

    def on_lost() -> None:
        # Exit at once, as client-go's controllers do. Stopping the work gracefully waits for
        # what its threads are doing: with a leader cut off silently, its shutdown took 30 s
        # and it sent a write 27 s after the new leader's first (the fault matrix measured it).
        log.error("exiting: the lease was lost")
        os._exit(LEASE_LOST)

    host, port = metrics_address(args)
    server = serve(host=host, port=port, registry=metrics.registry, healthy=healthy)
    log.info("serving /metrics and /healthz on %s:%d", host, server.server_port)
    try:
        if elector_ is not None:
            elector_.run(stop, on_lost=on_lost)
            metrics.leader.set(1 if elector_.is_leader.is_set() else 0)
        if not stop.is_set():
            work(stop)
    finally:
        if elector_ is not None:
            elector_.release()
        server.shutdown()
    log.info("stopped")
    return 0
