"""Upstream's operator itself (kubeflow/training-operator v1.9.4, built by `make testenv`) and
this one on one control plane, each watching a namespace of its own (upstream's with only the
PyTorchJob scheme enabled), and differential conformance of the two:

- objects: each manifest is applied under upstream's operator, the same stored job is built by
  this operator's builders and created as a server-side dry run (so both go through the same API
  server's defaulting), and the pods, services and HPAs of each side (upstream's listed by owner,
  so an object only one side made is a difference) are compared field by field;
- lifecycles: the same job is created in both namespaces and driven through the same steps (pod
  phases set through the API, as the kubelet would; suspend, `/scale`), and after each step the
  job's status (timestamps dropped), its pods and services are compared, and at the end the
  kinds of Events each operator recorded on the job with their distinct messages.

Every difference must be one a rule of tests/support/documented.py explains (its place and both
values); a deliberately broken plan must show as undocumented."""

import json
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from autoscaler.api import coordinates as c
from autoscaler.cli import operator_view
from autoscaler.clients.kube import BY_KIND, Kube, api_client
from autoscaler.controller.builders import PodSettings, desired_objects
from tests.integration.test_gang import control_plane, operator
from tests.integration.test_operator import (
    Cluster,
    elastic_job,
    envtest_elastic_job,
    envtest_job,
    failed_with,
)
from tests.support import apply as kubectl
from tests.support.broken_plans import BREAKAGES
from tests.support.conformance import (
    Difference,
    event_kinds,
    normalised_status,
    objects_key,
    observed_differences,
)
from tests.support.documented import undocumented
from tests.support.fixtures import summary_line
from tests.support.jobs import upstream_job
from tests.support.polling import wait_for
from tests.support.upstream_operator import UpstreamOperator, training_operator_binary

JSON = dict[str, Any]
OURS, THEIRS = "ours", "theirs"  # the namespace each operator watches
QUIET = 1.5  # s two differing readings must stay unchanged before they count as settled


def named(job: JSON, name: str) -> JSON:
    job["metadata"] = {"name": name}
    return job


def gpu_workers(job: JSON) -> JSON:
    """`job` with 2 workers, each asking one GPU."""
    worker = job["spec"]["pytorchReplicaSpecs"]["Worker"]
    worker["replicas"] = 2
    for container in worker["template"]["spec"]["containers"]:
        container["resources"] = {"limits": {c.GPU_RESOURCE: "1"}}
    return job


CASES: dict[str, Callable[[], JSON]] = {
    "upstream echo (Worker-only elastic, c10d)": lambda: named(upstream_job("echo.yaml"), "echo"),
    "upstream imagenet (elastic, c10d)": lambda: named(upstream_job("imagenet.yaml"), "imagenet"),
    "upstream etcd backend": lambda: named(upstream_job("etcd-job.yaml"), "etcd"),
    "Master+Worker": lambda: envtest_job("mw", workers=2),
    "elastic with an HPA metric": lambda: envtest_elastic_job("hpa"),
    "elastic, a GPU per worker": lambda: gpu_workers(envtest_elastic_job("gpu")),
}
# The pods as the operator builds them with its default flags (the planned placement's gate).
SHIPPED = PodSettings(placement_resource=c.GPU_RESOURCE)
RESULTS: dict[str, str] = {}  # case -> identical, documented or undocumented
OBSERVED: dict[str, JSON] = {}  # case -> both operators' observations, as recorded
RECORD = "AUTOSCALER_CONFORMANCE_RECORD"  # a file to write OBSERVED to, for the fast tests


@dataclass(frozen=True)
class Both:
    """The control plane's client and one Cluster per operator's namespace."""

    api: client.ApiClient
    kube: Kube
    ours: Cluster
    theirs: Cluster


@pytest.fixture(scope="module")
def both(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[Both]:
    workdir = tmp_path_factory.mktemp("upstream-operator")
    with control_plane(workdir / "plane") as (plane, api):
        kube = Kube(api_client(kubeconfig=str(plane.kubeconfig_path)))
        manager = UpstreamOperator(
            binary=training_operator_binary(),
            kube=kube,
            kubeconfig=plane.kubeconfig_path,
            workdir=workdir,
            namespace="kubeflow",
            flags=(f"--namespace={THEIRS}",),
        )
        try:
            mapper = kubectl.RestMapper(kube)
            for ns in (OURS, THEIRS):
                kubectl.apply(mapper, _namespace(ns))
            manager.start()
            with operator(plane, namespace=OURS):
                yield Both(api, kube, Cluster(api, OURS), Cluster(api, THEIRS))
        finally:
            manager.stop()
            kube.close()
    summary_line(request.config, summary())
    if os.environ.get(RECORD):
        Path(os.environ[RECORD]).write_text(json.dumps(OBSERVED, indent=1, sort_keys=True) + "\n")


def _namespace(name: str) -> JSON:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}


def summary() -> str:
    counts = {kind: list(RESULTS.values()).count(kind) for kind in ("identical", "documented")}
    undocumented = len(RESULTS) - sum(counts.values())
    return (
        f"conformance: cases {len(RESULTS)}, identical {counts['identical']}, "
        f"documented {counts['documented']}, undocumented {undocumented}"
    )


def theirs(api: client.ApiClient, ns: str, kind: str, name: str) -> JSON | None:
    resource = BY_KIND[kind]
    try:
        found: JSON = Kube(api).get(resource, ns, name)
    except Exception:  # not there (yet)
        return None
    return found


def record(case: str, found: list[Difference]) -> list[Difference]:
    """Files the case's verdict for the summary line; returns the undocumented differences."""
    left = undocumented(found)
    RESULTS[case] = "undocumented" if left else "documented" if found else "identical"
    return left


@pytest.mark.parametrize("case", CASES)
def test_upstream_and_this_operator_create_the_same_objects(case: str, both: Both) -> None:
    api, mapper, cluster = both.api, kubectl.RestMapper(both.kube), both.theirs
    created = cluster.create(CASES[case]())  # through upstream's webhook
    name = created["metadata"]["name"]
    try:
        stored = cluster.job(name)
        ours = dry_run_plan(mapper, stored)
        wait_for(
            lambda: all(theirs(api, THEIRS, o["kind"], o["metadata"]["name"]) for o in ours),
            what=f"upstream to create {[o['metadata']['name'] for o in ours]}",
            timeout=30,
        )
        other = settled_objects(both.kube, name)
    finally:
        cluster.jobs.delete_namespaced_custom_object(c.GROUP, c.VERSION, THEIRS, c.PLURAL, name)
    label = f"objects {case}"
    OBSERVED[label] = {"job": stored, "ours": ours, "theirs": other}
    undocumented = record(label, observed_differences(label, OBSERVED[label]))
    assert undocumented == [], "\n".join(map(str, undocumented))


def dry_run_plan(
    mapper: kubectl.RestMapper, stored: JSON, broken: Callable[[list[JSON]], list[JSON]] = list
) -> list[JSON]:
    """This operator's objects for upstream's stored job (`broken` alters the plan first), each
    created as a server-side dry run in this operator's namespace."""
    plan = broken(desired_objects(operator_view(stored, namespace=THEIRS), settings=SHIPPED))
    return [
        kubectl.dry_run_create(mapper, {**obj, "metadata": {**obj["metadata"], "namespace": OURS}})
        for obj in plan
    ]


def upstream_objects(kube: Kube, name: str) -> list[JSON]:
    """Every pod, service and HPA upstream's operator made for job `name`, as the API server
    stores them (its owner reference names the job)."""
    return [
        {**item, "kind": kind}
        for kind in ("Pod", "Service", "HorizontalPodAutoscaler")
        for item in kube.list(BY_KIND[kind], namespace=THEIRS)["items"]
        if any(r.get("name") == name for r in item["metadata"].get("ownerReferences", []))
    ]


def settled_objects(kube: Kube, name: str) -> list[JSON]:
    """Upstream's objects of the job once the listing holds still for QUIET s."""
    last = (upstream_objects(kube, name), time.monotonic())
    while time.monotonic() - last[1] < QUIET:
        time.sleep(0.1)
        now = upstream_objects(kube, name)
        if [objects_key(o) for o in now] != [objects_key(o) for o in last[0]]:
            last = (now, time.monotonic())
    return last[0]


@pytest.mark.parametrize("broken", BREAKAGES, ids=lambda b: b.__name__)
def test_a_broken_plan_is_an_undocumented_difference(
    broken: Callable[[list[JSON]], list[JSON]], both: Both
) -> None:
    """The suite can fail: this operator's plan for a recorded upstream job, deliberately broken,
    differs from upstream's objects in a way no documented difference explains."""
    label = f"objects {next(iter(CASES))}"
    if label not in OBSERVED:
        pytest.fail(f"{label!r} did not run first")
    ours = dry_run_plan(kubectl.RestMapper(both.kube), OBSERVED[label]["job"], broken)
    found = observed_differences(label, {"ours": ours, "theirs": OBSERVED[label]["theirs"]})
    assert undocumented(found) != []


# -- lifecycles: status, pods, services and Events after each step --------------------------------


@dataclass(frozen=True)
class Step:
    """What the test does to one namespace's job (the user's or the kubelet's part), and when that
    namespace's operator has answered it."""

    name: str
    act: Callable[[Cluster, str], None]
    ready: Callable[[Cluster, str], bool]


def nothing(cluster: Cluster, name: str) -> None:
    """The job's creation is the step."""


def last_condition(*expected: str) -> Callable[[Cluster, str], bool]:
    """Ready once the job's last condition is (type, status)."""
    return lambda cluster, name: (cluster.conditions(name) or [()])[-1] == expected


def has_pods(count: int) -> Callable[[Cluster, str], bool]:
    return lambda cluster, name: len(cluster.pods(name)) == count


def run_all(cluster: Cluster, name: str) -> None:
    cluster.run_all(name)


def pod_phase(pod: str, phase: str, **status: Any) -> Callable[[Cluster, str], None]:
    return lambda cluster, name: cluster.set_phase(f"{name}-{pod}", phase, **status)


def failed(code: int) -> JSON:
    """The pod status of a container that exited with `code`, with the kubelet's reason."""
    status = failed_with(code)
    status["containerStatuses"][0]["state"]["terminated"]["reason"] = "Error"
    return status


def ours_failed(cluster: Cluster, name: str) -> bool:
    """Ready once this operator failed the job; upstream's side is read as it stands."""
    return cluster.ns == THEIRS or last_condition("Failed", "True")(cluster, name)


def touch(cluster: Cluster, name: str) -> None:
    """A change of the job's metadata only: an event that makes an operator look at it again."""
    cluster.patch(name, {"metadata": {"annotations": {"conformance/touched": "1"}}})


def recreated(pod: str) -> Callable[[Cluster, str], bool]:
    """Ready once the pod is there again, not Failed (its operator deleted and re-created it)."""

    def ready(cluster: Cluster, name: str) -> bool:
        found = cluster.pods(name).get(f"{name}-{pod}")
        return found is not None and found["status"].get("phase") != "Failed"

    return ready


def suspend(value: bool) -> Callable[[Cluster, str], None]:
    return lambda cluster, name: cluster.patch(name, {"spec": {"runPolicy": {"suspend": value}}})


def scale(replicas: int) -> Callable[[Cluster, str], None]:
    return lambda cluster, name: cluster.scale(name, replicas)


def deleted(cluster: Cluster, name: str) -> bool:
    try:
        cluster.job(name)
    except client.ApiException as error:
        return error.status == 404
    return False


def with_policy(job: JSON, **run_policy: Any) -> JSON:
    job["spec"]["runPolicy"] = run_policy
    return job


def restart_policy(job: JSON, policy: str) -> JSON:
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["restartPolicy"] = policy
    return job


def bound_on(**nodes: str) -> Callable[[Cluster, str], None]:
    """Bind each named pod to its node and mark it Running: the scheduler's and kubelet's part."""

    def act(cluster: Cluster, name: str) -> None:
        for pod, node in nodes.items():
            body = {"metadata": {"name": f"{name}-{pod}"}, "target": {"kind": "Node", "name": node}}
            # the client cannot read the binding's reply back (its `target` is absent there)
            cluster.core.create_namespaced_pod_binding(
                f"{name}-{pod}", cluster.ns, body, _preload_content=False
            )
        cluster.run_all(name)

    return act


def scale_bound(replicas: int) -> Callable[[Cluster, str], None]:
    """`/scale` down a job whose pods are bound, then the kubelet's part: each pod its operator
    deletes ends at once."""

    def act(cluster: Cluster, name: str) -> None:
        cluster.scale(name, replicas)
        deleting = wait_for(
            lambda: [
                pod
                for pod, found in cluster.pods(name).items()
                if found["metadata"].get("deletionTimestamp")
            ],
            what=f"{cluster.ns}'s operator to delete a pod of {name}",
        )
        for pod in deleting:
            cluster.core.delete_namespaced_pod(pod, cluster.ns, grace_period_seconds=0)

    return act


CREATED = Step("created", nothing, has_pods(2))
RUNNING = Step("running", run_all, last_condition("Running", "True"))


def worker_failure(
    name: str, policy: str, *, code: int, then: Callable[[Cluster, str], bool]
) -> tuple[Callable[[], JSON], tuple[Step, ...]]:
    """A 2-worker elastic job under `policy` whose worker-1 fails with `code`, then `then`."""
    failing = Step(
        f"worker-1 failed ({code})", pod_phase("worker-1", "Failed", **failed(code)), then
    )

    def job() -> JSON:
        return restart_policy(elastic_job(name, replicas=2), policy)

    return job, (CREATED, RUNNING, failing)


LIFECYCLES: dict[str, tuple[Callable[[], JSON], tuple[Step, ...]]] = {
    "Worker-only elastic": (
        lambda: elastic_job("l-elastic", replicas=2),
        (
            CREATED,
            RUNNING,
            Step(
                "worker-1 succeeded",
                pod_phase("worker-1", "Succeeded"),
                last_condition("Succeeded", "True"),
            ),
        ),
    ),
    "Master+Worker": (
        lambda: envtest_job("l-mw", workers=1),
        (
            CREATED,
            RUNNING,
            Step(
                "master succeeded",
                pod_phase("master-0", "Succeeded"),
                last_condition("Succeeded", "True"),
            ),
        ),
    ),
    "suspend then resume": (
        lambda: elastic_job("l-suspend", replicas=2),
        (
            CREATED,
            RUNNING,
            Step(
                "suspended",
                suspend(True),
                lambda cl, n: last_condition("Suspended", "True")(cl, n) and has_pods(0)(cl, n),
            ),
            Step(
                "resumed",
                suspend(False),
                lambda cl, n: has_pods(2)(cl, n) and ("Suspended", "False") in cl.conditions(n),
            ),
            Step("running again", run_all, last_condition("Running", "True")),
        ),
    ),
    "worker failed, OnFailure": worker_failure(
        "l-onfailure", "OnFailure", code=1, then=recreated("worker-1")
    ),
    "worker failed, Never": worker_failure(
        "l-never", "Never", code=1, then=last_condition("Failed", "True")
    ),
    "worker failed, ExitCode retryable": worker_failure(
        "l-exit137", "ExitCode", code=137, then=recreated("worker-1")
    ),
    "worker failed, ExitCode permanent": worker_failure(
        "l-exit1", "ExitCode", code=1, then=last_condition("Failed", "True")
    ),
    "cleanPodPolicy Running": (
        lambda: with_policy(elastic_job("l-clean", replicas=2), cleanPodPolicy="Running"),
        (
            CREATED,
            RUNNING,
            Step(
                "worker-1 succeeded",
                pod_phase("worker-1", "Succeeded"),
                lambda cl, n: last_condition("Succeeded", "True")(cl, n) and has_pods(1)(cl, n),
            ),
        ),
    ),
    "ttlSecondsAfterFinished": (
        lambda: with_policy(elastic_job("l-ttl", replicas=2), ttlSecondsAfterFinished=1),
        (
            CREATED,
            RUNNING,
            Step("worker-1 succeeded, TTL passed", pod_phase("worker-1", "Succeeded"), deleted),
        ),
    ),
    "activeDeadlineSeconds": (
        lambda: with_policy(elastic_job("l-deadline", replicas=2), activeDeadlineSeconds=5),
        (
            CREATED,
            RUNNING,
            Step("deadline passed, nothing else happened", nothing, ours_failed),
            Step("job touched", touch, last_condition("Failed", "True")),
        ),
    ),
    "scale-down across nodes": (
        lambda: elastic_job("l-spread", replicas=3),
        (
            Step("created", nothing, has_pods(3)),
            Step(
                "worker-1 alone on its node",
                bound_on(**{"worker-0": "node-a", "worker-1": "node-b", "worker-2": "node-a"}),
                last_condition("Running", "True"),
            ),
            Step("scaled to 2", scale_bound(2), has_pods(2)),
        ),
    ),
    "scale up and down through /scale": (
        lambda: elastic_job("l-scale", replicas=2),
        (
            CREATED,
            RUNNING,
            Step("scaled to 3", scale(3), has_pods(3)),
            Step(
                "new worker running",
                pod_phase("worker-2", "Running"),
                lambda cl, n: (
                    (cl.job(n).get("status") or {})
                    .get("replicaStatuses", {})
                    .get("Worker", {})
                    .get("active")
                    == 3
                ),
            ),
            Step("scaled to 1", scale(1), has_pods(1)),
        ),
    ),
}


def reading(cluster: Cluster, name: str) -> JSON:
    """What one operator made of its job at a step: status, pods (with their phases), services."""
    try:
        status: Any = normalised_status(cluster.job(name).get("status"), cluster.ns)
    except client.ApiException as error:
        if error.status != 404:
            raise
        status = "job deleted"
    pods = {n: (p.get("status") or {}).get("phase") for n, p in cluster.pods(name).items()}
    return {"status": status, "pods": pods, "services": sorted(cluster.services(name))}


def job_events(cluster: Cluster, name: str) -> JSON:
    listing = cluster.core.list_namespaced_event(
        cluster.ns, field_selector=f"involvedObject.name={name},involvedObject.kind={c.KIND}"
    )
    return event_kinds(
        ({"type": e.type, "reason": e.reason, "message": e.message} for e in listing.items),
        cluster.ns,
    )


def settled(both: Both, read: Callable[[Cluster], Any], *, early: bool = True) -> tuple[Any, Any]:
    """Both readings once they agree (`early`), or once neither has changed for QUIET s (30 s at
    most). Events trickle in after the step that caused them: read them with `early=False`."""
    last: tuple[Any, Any] | None = None
    since = time.monotonic()
    deadline = since + 30
    while True:
        now = (read(both.ours), read(both.theirs))
        if (early and now[0] == now[1]) or time.monotonic() > deadline:
            return now
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= QUIET:
            return now
        time.sleep(0.1)


@pytest.mark.parametrize("case", LIFECYCLES)
def test_upstream_and_this_operator_answer_each_step_alike(case: str, both: Both) -> None:
    manifest, steps = LIFECYCLES[case]
    name, label = manifest()["metadata"]["name"], f"lifecycle {case}"
    for cluster in (both.ours, both.theirs):
        cluster.create(manifest())
    readings: list[list[Any]] = []
    for step in steps:
        if step.act is not nothing:
            for cluster in (both.ours, both.theirs):
                step.act(cluster, name)
        try:
            wait_for(
                lambda s=step: s.ready(both.ours, name) and s.ready(both.theirs, name),
                what=f"{case}: both operators past {step.name!r}",
            )
        except AssertionError as error:  # say where each one stands
            raise AssertionError(
                f"{error}\nours: {reading(both.ours, name)}\ntheirs: {reading(both.theirs, name)}"
            ) from None
        readings.append([step.name, *settled(both, lambda cl: reading(cl, name))])
    events = settled(both, lambda cl: job_events(cl, name), early=False)
    OBSERVED[label] = {"steps": readings, "events": list(events)}
    undocumented = record(label, observed_differences(label, OBSERVED[label]))
    assert undocumented == [], "\n".join(map(str, undocumented))
