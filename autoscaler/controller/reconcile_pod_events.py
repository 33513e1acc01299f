"""The Events the plan sends about the job's pods: upstream's abnormal-pod Warnings (v1.9
`RecordAbnormalPods`, `pkg/core/job.go`) and its `ExitedWithCode` for a finished container.

Upstream sends them on every pass and lets its event recorder fold the repeats; here each is
sent once per occurrence (the Event's `once` key).
"""

from autoscaler.api import coordinates as c
from autoscaler.api.models import JSON
from autoscaler.controller.pods import container_statuses, is_terminating, latest_condition, phase
from autoscaler.controller.reconcile_pass import PlanningPass


def abnormal_pod_warnings(p: PlanningPass) -> None:
    """A Warning for a container waiting with a message (an image it cannot pull, a crash
    loop, a missing Secret key), for one terminated with a non-zero code (its reason, e.g.
    `OOMKilled`), and for a pod without container statuses whose latest condition is not
    True (e.g. `Unschedulable`), with upstream's reasons and wording.

    Upstream looks at active pods only; a Failed pod's terminated containers are reported here
    too, so a worker killed for memory says so.
    """
    for pod in p.observed.pods:
        if is_terminating(pod) or phase(pod) == "Succeeded":
            continue
        statuses = container_statuses(pod)
        for container in statuses:
            _terminated_warning(p, pod, container)
            _waiting_warning(p, pod, container)
        if not statuses and phase(pod) != "Failed":
            _condition_warning(p, pod)


def container_events(p: PlanningPass, pod: JSON) -> None:
    """Upstream's `ExitedWithCode` for a terminated `pytorch` container, once per run."""
    meta = pod["metadata"]
    where = f"{meta.get('namespace')}.{meta['name']}"
    for container in container_statuses(pod):
        done = (container.get("state") or {}).get("terminated")
        name = container.get("name")
        if done and name == c.DEFAULT_CONTAINER_NAME:
            run = done.get("containerID") or done.get("finishedAt")
            message = f"Pod: {where} exited with code {done.get('exitCode')}"
            p.event("Normal", "ExitedWithCode", message, f"{meta.get('uid')}/{name}/{run}")


def _terminated_warning(p: PlanningPass, pod: JSON, container: JSON) -> None:
    done = (container.get("state") or {}).get("terminated") or {}
    if not done.get("exitCode"):
        return
    name, meta = container.get("name"), pod["metadata"]
    message = (
        f"Error pod {meta['name']} container {name} exitCode: {done['exitCode']} "
        f"terminated message: {done.get('message') or ''}"
    )
    run = done.get("containerID") or done.get("finishedAt")
    p.event("Warning", done.get("reason") or "", message, f"{meta.get('uid')}/{name}/{run}/exit")


def _waiting_warning(p: PlanningPass, pod: JSON, container: JSON) -> None:
    waiting = (container.get("state") or {}).get("waiting") or {}
    if not waiting.get("message"):  # e.g. ContainerCreating: on its way, nothing to report
        return
    name, meta, reason = container.get("name"), pod["metadata"], waiting.get("reason") or ""
    message = f"Error pod {meta['name']} container {name} waiting message: {waiting['message']}"
    # A crash loop comes back after every restart: one Warning per restart, not per pass.
    once = f"{meta.get('uid')}/{name}/{reason}/{container.get('restartCount', 0)}"
    p.event("Warning", reason, message, once)


def _condition_warning(p: PlanningPass, pod: JSON) -> None:
    latest = latest_condition(pod)
    if latest is None or latest.get("status") == "True":
        return
    meta, reason = pod["metadata"], latest.get("reason") or ""
    message = f"Error pod {meta['name']} condition message: {latest.get('message') or ''}"
    since = latest.get("lastTransitionTime")
    once = f"{meta.get('uid')}/{latest.get('type')}/{latest.get('status')}/{reason}/{since}"
    p.event("Warning", reason, message, once)
