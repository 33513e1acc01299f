"""`autoscaler operator`: run the operator against a cluster until SIGTERM."""

import argparse
import logging
import os
import threading
from dataclasses import replace
from typing import Any

from autoscaler.cli.common import add_service_arguments, configure_logging, run_service
from autoscaler.cli.pod_settings import SettingsError, add_pod_arguments, pod_settings
from autoscaler.cli.upstream_flags import add_upstream_flags, warn_not_honoured
from autoscaler.clients.kube import Kube, api_client
from autoscaler.clients.ratelimit import TokenBucket
from autoscaler.controller.placement_runtime import PlacementRuntime
from autoscaler.controller.runner import Operator, OperatorConfig
from autoscaler.observability.metrics import operator_metrics

log = logging.getLogger("autoscaler.operator")
LEADER_ELECTION_ID = "1ca428e5.training-operator.kubeflow.org"  # upstream's Lease name


def add_operator_command(commands: Any) -> None:
    sub = commands.add_parser(
        "operator",
        help="run the operator (kubeconfig or in-cluster); takes the flags of upstream's manager",
    )
    sub.add_argument(
        "--controller-threads",
        "--workers",
        dest="workers",
        type=positive_int,
        default=1,
        help="jobs reconciled in parallel",
    )
    sub.add_argument(
        "--kube-api-qps", type=positive_int, default=20, help="requests a second to the API server"
    )
    sub.add_argument(
        "--kube-api-burst", type=positive_int, default=30, help="requests at once above the QPS"
    )
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
        default=os.environ.get("KUBEFLOW_NAMESPACE", ""),
        help="only this namespace's jobs (default: $KUBEFLOW_NAMESPACE, else every namespace)",
    )
    add_pod_arguments(sub)
    add_gang_scheduler_argument(sub)
    sub.add_argument(
        "--kueue",
        action="store_true",
        help="queue PyTorchJobs labelled kueue.x-k8s.io/queue-name through Kueue with the "
        "operator's own integration (Kueue lists PyTorchJob.v1.kubeflow.org in "
        "integrations.externalFrameworks, its built-in kubeflow.org/pytorchjob off)",
    )
    add_service_arguments(sub, lease_name=LEADER_ELECTION_ID, leader_elect=False, upstream=True)
    add_upstream_flags(sub)
    sub.set_defaults(command=run_operator)


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


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


def operator_config(args: argparse.Namespace) -> OperatorConfig:
    """What the reconcilers run with, from the flags (a bad template stops here)."""
    return OperatorConfig(
        workers=args.workers,
        resync_seconds=args.resync_seconds,
        watch_timeout=args.watch_timeout_seconds,
        namespace=args.namespace or None,
        pods=pod_settings(args),
        gang_scheduler_name=args.gang_scheduler_name,
        kueue=args.kueue,
    )


def operator_kube(args: argparse.Namespace) -> Kube:
    """The operator's client: the flags' kubeconfig, throttled at the flags' rate."""
    limiter = TokenBucket(args.kube_api_qps, args.kube_api_burst)
    return Kube(api_client(kubeconfig=args.kubeconfig), limiter=limiter)


def with_allowed_placement(config: OperatorConfig, kube: Kube, *, asked: bool) -> OperatorConfig:
    """`config`, its planned placement off when the operator may not watch Nodes and every pod
    (as with upstream's RBAC): a warning for the default, an error when `asked` by the flag."""
    resource = config.pods.placement_resource
    denied = PlacementRuntime.denied(kube) if resource else []
    if not denied:
        return config
    missing = f"the operator may not {', '.join(denied)} (deploy/operator/rbac.yaml grants them)"
    if asked:
        raise SettingsError(f"--planned-placement {resource}: {missing}")
    log.warning("the planned placement is off, kube-scheduler places every pod: %s", missing)
    return replace(config, pods=replace(config.pods, placement_resource=None))


def run_operator(args: argparse.Namespace) -> int:
    configure_logging()
    warn_not_honoured(args)
    kube = operator_kube(args)
    config = with_allowed_placement(
        operator_config(args),  # before any pod is built
        kube,
        asked=args.planned_placement is not None,
    )
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
