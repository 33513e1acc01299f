"""`autoscaler operator`: run the operator against a cluster until SIGTERM."""

import argparse
import logging
import signal
import threading
from typing import Any

from autoscaler.cli.common import add_service_arguments, metrics_address
from autoscaler.cli.common import elector as leader_elector
from autoscaler.clients.kube import Kube, api_client
from autoscaler.controller.runner import Operator, OperatorConfig
from autoscaler.observability.metrics import operator_metrics
from autoscaler.observability.server import serve

log = logging.getLogger("autoscaler.operator")
LEASE_LOST = 1


def add_operator_command(commands: Any) -> None:
    sub = commands.add_parser("operator", help="run the operator (kubeconfig or in-cluster)")
    sub.add_argument("--workers", type=int, default=4, help="jobs reconciled in parallel")
    sub.add_argument(
        "--resync-seconds", type=float, default=300.0, help="period of the full resync"
    )
    add_service_arguments(sub, lease_name="pytorchjob-operator")
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
    elector = leader_elector(args, kube)
    stop, lost = threading.Event(), threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())

    def healthy() -> bool:  # a standby is healthy; a leader once its caches are synced
        standby = elector is not None and not elector.is_leader.is_set()
        return standby or operator.healthy()

    host, port = metrics_address(args)
    server = serve(host=host, port=port, registry=metrics.registry, healthy=healthy)
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
