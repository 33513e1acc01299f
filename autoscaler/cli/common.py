"""Options the long-running commands share: cluster access, metrics address, leader election."""

import argparse
import os
import socket
import uuid
from typing import Any

from autoscaler.clients.kube import Kube
from autoscaler.clients.leader import LeaderElector, LeaseTimings


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
