"""Upstream's operator flags that shape the pods: shared by `operator` and `render`, so a user sees
what their settings produce before the operator runs with them."""

import argparse
from pathlib import Path
from typing import Any

from autoscaler.api.coordinates import GPU_RESOURCE
from autoscaler.controller.builders import UPSTREAM_DEFAULTS, InitContainers, PodSettings

# Upstream's default (pkg/config): read if a ConfigMap is mounted there, else its built-in one.
UPSTREAM_TEMPLATE_FILE = Path("/etc/config/initContainer.yaml")


class SettingsError(Exception):
    """A flag's value the operator cannot build pods with (exit 2, before any pod is built)."""


def add_pod_arguments(sub: Any) -> None:
    init = UPSTREAM_DEFAULTS.init
    sub.add_argument(
        "--pytorch-init-container-image",
        default=init.image,
        help=f"image of the init container of Master+Worker jobs' workers (default {init.image})",
    )
    sub.add_argument(
        "--pytorch-init-container-max-tries",
        type=int,
        default=init.max_tries,
        help=f"how often it looks the master up, 2 s apart (default {init.max_tries})",
    )
    sub.add_argument(
        "--pytorch-init-container-template-file",
        type=Path,
        default=UPSTREAM_TEMPLATE_FILE,
        help="a YAML list of init containers using {{.MasterAddr}}, {{.InitContainerImage}} "
        "and {{.MaxTries}} (upstream's format); without the default file, upstream's container",
    )
    sub.add_argument(
        "--planned-placement",
        metavar="RESOURCE",
        help="place each elastic torchrun job's workers that request RESOURCE as one unit on "
        "as few nodes as they fill: held by a scheduling gate until they pack, then pinned to "
        "their nodes; a growth may move workers (the whole job when worker-0's node cannot "
        f"stay). Default {GPU_RESOURCE} where the operator may watch Nodes and every pod (else "
        "off, with a warning); `none`: kube-scheduler places every pod, drawn to the job's own "
        "workers",
    )


def pod_settings(args: argparse.Namespace) -> PodSettings:
    """The settings of the flags; an unreadable or invalid template file is an error (upstream
    falls back to its default container silently, which hides a typo in a mounted path), but
    for upstream's default path, which nothing needs to mount."""
    template = InitContainers.template
    path: Path = args.pytorch_init_container_template_file
    if path != UPSTREAM_TEMPLATE_FILE or path.exists():
        try:
            template = path.read_text()
        except OSError as error:
            raise SettingsError(f"--pytorch-init-container-template-file: {error}") from None
    try:
        init = InitContainers(
            image=args.pytorch_init_container_image,
            max_tries=args.pytorch_init_container_max_tries,
            template=template,
        )
    except ValueError as error:
        raise SettingsError(str(error)) from None
    return PodSettings(init=init, placement_resource=placed_resource(args.planned_placement))


def placed_resource(flag: str | None) -> str | None:
    """`--planned-placement`'s resource (unset: GPUs); None (kube-scheduler places every pod)
    for `none`."""
    if flag is None:
        return GPU_RESOURCE
    return None if flag in ("", NO_PLANNED_PLACEMENT) else flag


NO_PLANNED_PLACEMENT = "none"
