"""The flags of upstream's manager (kubeflow/training-operator v1.9.4,
`cmd/training-operator.v1/main.go`, with controller-runtime v0.24's zap flags) that change
nothing here: accepted under the same names and defaults, so that upstream's manifests start the
operator, and named in a warning at start. `--enable-scheme` is checked against what it runs."""

import argparse
import logging
from typing import Any

from autoscaler.cli.common import go_bool

log = logging.getLogger("autoscaler.operator")

# Upstream's `SupportedSchemeReconciler` (pkg/controller.v1/register_controller.go).
SCHEMES = ("TFJob", "PyTorchJob", "XGBoostJob", "MPIJob", "PaddleJob", "JAXJob")
RUNS = "PyTorchJob"
NO_WEBHOOK = "no admission webhook is served: the CRD's schema validates jobs"
NO_ZAP = "the operator logs through Python's logging, not zap"
# flag: (upstream's default, its type, why it changes nothing here)
NOT_HONOURED: dict[str, tuple[Any, Any, str]] = {
    "--mpi-kubectl-delivery-image": (
        "ghcr.io/kubeflow/training-v1/kubectl-delivery:latest",
        str,
        "MPIJobs are not run here",
    ),
    "--webhook-server-port": (9443, int, NO_WEBHOOK),
    "--webhook-service-name": ("training-operator", str, NO_WEBHOOK),
    "--webhook-secret-name": ("training-operator-webhook-cert", str, NO_WEBHOOK),
    "--zap-devel": (True, go_bool, NO_ZAP),
    "--zap-encoder": (None, str, NO_ZAP),
    "--zap-log-level": (None, str, NO_ZAP),
    "--zap-stacktrace-level": (None, str, NO_ZAP),
    "--zap-time-encoding": (None, str, NO_ZAP),
}


class _Given(argparse.Action):
    """Stores the value and remembers the flag was given (for the warning at start)."""

    def __call__(
        self, parser: Any, namespace: argparse.Namespace, values: Any, option: Any = None
    ) -> None:
        setattr(namespace, self.dest, values)
        namespace.not_honoured = [*namespace.not_honoured, option]


def add_upstream_flags(sub: argparse.ArgumentParser) -> None:
    sub.add_argument(
        "--enable-scheme",
        action="append",
        default=[],
        type=scheme,
        metavar="KIND",
        help=f"the kinds to run, case-insensitive: {RUNS} only (its default)",
    )
    for flag, (default, type_, why) in NOT_HONOURED.items():
        sub.add_argument(
            flag,
            action=_Given,
            default=default,
            type=type_,
            nargs="?" if type_ is go_bool else None,
            const=True if type_ is go_bool else None,
            help=f"accepted, not honoured: {why}",
        )
    sub.set_defaults(not_honoured=[])


def scheme(text: str) -> str:
    """A kind of `--enable-scheme`, as upstream spells it; refused unless it is run here."""
    kind = next((k for k in SCHEMES if k.lower() == text.lower()), None)
    if kind is None:
        raise argparse.ArgumentTypeError(f"scheme {text} is not supported yet")  # upstream's
    if kind != RUNS:
        raise argparse.ArgumentTypeError(
            f"{kind}: this operator runs {RUNS} only; keep upstream's operator for {kind} "
            f"(started with --enable-scheme for the kinds it keeps)"
        )
    return kind


def warn_not_honoured(args: argparse.Namespace) -> None:
    for flag in args.not_honoured:
        log.warning("%s is accepted but not honoured: %s", flag, NOT_HONOURED[flag][2])
