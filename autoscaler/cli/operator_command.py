"""`autoscaler operator`: run the operator against a cluster until SIGTERM."""

import argparse
import logging
import os
import threading
from typing import Any

from autoscaler.cli.common import add_service_arguments, configure_logging, run_service
from autoscaler.cli.pod_settings import add_pod_arguments, pod_settings
from autoscaler.clients.kube import Kube, api_client
from autoscaler.controller.runner import Operator, OperatorConfig
from autoscaler.observability.metrics import operator_metrics

log = logging.getLogger("autoscaler.operator")


def add_operator_command(commands: Any) -> None:
    sub = commands.add_parser("operator", help="run the operator (kubeconfig or in-cluster)")
    sub.add_argument("--workers", type=int, default=4, help="jobs reconciled in parallel")
    sub.add_argument(
        "--resync-seconds", type=float, default=300.0, help="period of the full resync"
    )
    sub.add_argument(
        "--watch-timeout-seconds",
        type=int,
        default=60,
        help="how long each watch request lasts before it is made again from the last version",
    )
    sub.add_argument(
        "--namespace",
        default=os.environ.get("KUBEFLOW_NAMESPACE") or None,
        help="only this namespace's jobs (default: $KUBEFLOW_NAMESPACE, else every namespace)",
    )
    add_pod_arguments(sub)
    add_gang_scheduler_argument(sub)
    add_service_arguments(sub, lease_name="pytorchjob-operator")
    sub.set_defaults(command=run_operator)


def add_gang_scheduler_argument(sub: argparse.ArgumentParser) -> None:
    """Upstream's flag (kubeflow/training-operator v1.9), with its meaning."""
    sub.add_argument(
        "--gang-scheduler-name",
        default="",
        metavar="volcano|scheduler-plugins",
        help="gang-schedule each job with a PodGroup: 'volcano', or the name of a "
        "scheduler-plugins scheduler profile (any other name means scheduler-plugins, as "
        "upstream); unset: no gang scheduling",
    )


def run_operator(args: argparse.Namespace) -> int:
    configure_logging()
    config = OperatorConfig(
        workers=args.workers,
        resync_seconds=args.resync_seconds,
        watch_timeout=args.watch_timeout_seconds,
        namespace=args.namespace,
        pods=pod_settings(args),  # a bad template stops here, before any pod is built
        gang_scheduler_name=args.gang_scheduler_name,
    )
    kube = Kube(api_client(kubeconfig=args.kubeconfig))
    metrics = operator_metrics()
    operator = Operator(kube, config=config, metrics=metrics)

    def work(stop: threading.Event) -> None:
        log.info("reconciling PyTorchJobs as %s", args.identity)
        operator.run(stop)

    try:
        # Ready once its caches are synced.
        return run_service(args, kube=kube, metrics=metrics, work=work, ready=operator.healthy)
    finally:
        kube.close()
