"""`autoscaler operator`: run the operator against a cluster until SIGTERM."""

import argparse
import logging
import os
import signal
import socket
import threading
import uuid
from typing import Any

from autoscaler.clients.kube import Kube, api_client
from autoscaler.controller.leader import LeaderElector, LeaseTimings
from autoscaler.controller.runner import Operator, OperatorConfig
from autoscaler.observability.metrics import operator_metrics
from autoscaler.observability.server import serve

log = logging.getLogger("autoscaler.operator")
LEASE_LOST = 1


def add_operator_command(commands: Any) -> None:
    sub = commands.add_parser("operator", help="run the operator (kubeconfig or in-cluster)")
    sub.add_argument(
        "--kubeconfig",
        default=os.environ.get("KUBECONFIG"),
        help="default: $KUBECONFIG, else in-cluster",
    )
    sub.add_argument("--workers", type=int, default=4, help="jobs reconciled in parallel")
    sub.add_argument(
        "--resync-seconds", type=float, default=300.0, help="period of the full resync"
    )
    sub.add_argument(
        "--metrics-address", default="0.0.0.0:8080", help="HOST:PORT of /metrics and /healthz"
    )
    sub.add_argument("--leader-elect", action=argparse.BooleanOptionalAction, default=True)
    sub.add_argument("--lease-namespace", default=os.environ.get("POD_NAMESPACE", "default"))
    sub.add_argument("--lease-name", default="pytorchjob-operator")
    sub.add_argument("--identity", default=f"{socket.gethostname()}-{uuid.uuid4().hex[:8]}")
    sub.add_argument("--lease-duration", type=float, default=15.0)
    sub.add_argument("--renew-deadline", type=float, default=10.0)
    sub.add_argument("--retry-period", type=float, default=2.0)
    sub.set_defaults(command=run_operator)


def run_operator(args: argparse.Namespace) -> int:
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    kube = Kube(api_client(kubeconfig=args.kubeconfig))
    metrics = operator_metrics()
    operator = Operator(
        kube,
        config=OperatorConfig(workers=args.workers, resync_seconds=args.resync_seconds),
        metrics=metrics,
    )
    elector = _elector(args, kube) if args.leader_elect else None
    stop, lost = threading.Event(), threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())

    def healthy() -> bool:  # a standby is healthy; a leader once its caches are synced
        standby = elector is not None and not elector.is_leader.is_set()
        return standby or operator.healthy()

    host, port = args.metrics_address.rsplit(":", 1)
    server = serve(host=host, port=int(port), registry=metrics.registry, healthy=healthy)
    log.info("serving /metrics and /healthz on %s:%d", host, server.server_port)

    def on_lost() -> None:
        lost.set()
        stop.set()

    try:
        if elector is not None:
            elector.run(stop, on_lost=on_lost)
            metrics.leader.set(1 if elector.is_leader.is_set() else 0)
        if not stop.is_set():
            log.info("reconciling PyTorchJobs as %s", args.identity)
            operator.run(stop)
    finally:
        if elector is not None and not lost.is_set():
            elector.release()
        server.shutdown()
        kube.close()
    log.info("stopped")
    return LEASE_LOST if lost.is_set() else 0


def _elector(args: argparse.Namespace, kube: Kube) -> LeaderElector:
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
