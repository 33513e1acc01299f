"""Gang scheduling against real API servers with the PodGroup CRDs of Volcano (v1.15.1) and
scheduler-plugins (v0.34.7), pinned in tests/data, and the real scheduler-plugins scheduler.

Each case runs its own operator (in this process, as the restricted user bound to the
operator's ClusterRole), on control planes of this module only: the session's operator, which
runs without gang scheduling, must not reconcile these jobs. Volcano's scheduler cannot be
built here (tests/data/volcano/README.md says why), so its one status write the operator waits
for, the group's phase leaving Pending, is made by the test.
"""

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client, config

from autoscaler.api import coordinates as c
from autoscaler.clients.jobs import managed_job
from autoscaler.clients.kube import Kube, api_client
from autoscaler.controller.builders import UPSTREAM_DEFAULTS, PodSettings
from autoscaler.controller.runner import Operator, OperatorConfig
from autoscaler.engine.settle import running_count
from tests.integration.test_operator import (
    Cluster,
    elastic_job,
    names,
    object_counters,
    resync_writes_nothing,
)
from tests.support.controlplane import RESTRICTED_USER, ControlPlane, binaries_dir
from tests.support.crd import CRD_FILE, RBAC_FILE, established
from tests.support.gang_scheduler import PROFILE, SchedulerPlugins, scheduler_plugins_binary
from tests.support.polling import wait_for

JSON = dict[str, Any]
DATA = Path(__file__).resolve().parents[1] / "data"
VOLCANO_CRD = DATA / "volcano" / "scheduling.volcano.sh_podgroups.yaml"
PLUGINS_CRD = DATA / "scheduler-plugins" / "scheduling.x-k8s.io_podgroups.yaml"
VOLCANO = ("scheduling.volcano.sh", "v1beta1", "podgroups")
PLUGINS = ("scheduling.x-k8s.io", "v1alpha1", "podgroups")


# -- environment -------------------------------------------------------------------------------


def install_crd(api: client.ApiClient, path: Path) -> None:
    manifest = yaml.safe_load(path.read_text())
    ext = client.ApiextensionsV1Api(api)
    ext.create_custom_resource_definition(manifest)
    name = manifest["metadata"]["name"]

    def ready() -> bool:
        crd = ext.read_custom_resource_definition(name)
        return any(
            cond.type == "Established" and cond.status == "True"
            for cond in crd.status.conditions or []
        )

    wait_for(ready, what=f"{name} to be Established")


def bind_operator_role(api: client.ApiClient) -> None:
    """The operator's ClusterRole from deploy/operator, bound to the restricted test user."""
    role = next(d for d in yaml.safe_load_all(RBAC_FILE.read_text()) if d["kind"] == "ClusterRole")
    rbac = client.RbacAuthorizationV1Api(api)
    rbac.create_cluster_role(role)
    subject = {"kind": "User", "name": RESTRICTED_USER, "apiGroup": "rbac.authorization.k8s.io"}
    rbac.create_cluster_role_binding(
        {
            "metadata": {"name": role["metadata"]["name"]},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": role["metadata"]["name"],
            },
            "subjects": [subject],
        }
    )


@contextmanager
def control_plane(workdir: Path, *crds: Path) -> Iterator[tuple[ControlPlane, client.ApiClient]]:
    plane = ControlPlane(bin_dir=binaries_dir())
    plane.start(workdir)
    try:
        api = config.new_client_from_config(config_file=str(plane.kubeconfig_path))  # type: ignore[no-untyped-call]
        with api:
            install_crd(api, CRD_FILE)
            assert established(client.ApiextensionsV1Api(api))
            for crd in crds:
                install_crd(api, crd)
            bind_operator_role(api)
            yield plane, api
    finally:
        plane.stop()


@pytest.fixture(scope="module")
def bare(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[ControlPlane, client.ApiClient]]:
    """A control plane without any PodGroup CRD."""
    with control_plane(tmp_path_factory.mktemp("bare-plane")) as found:
        yield found


@pytest.fixture(scope="module")
def gang(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[ControlPlane, client.ApiClient]]:
    """A control plane with both PodGroup CRDs and the scheduler-plugins scheduler."""
    binary = scheduler_plugins_binary()
    with control_plane(tmp_path_factory.mktemp("gang-plane"), VOLCANO_CRD, PLUGINS_CRD) as found:
        scheduler = SchedulerPlugins(found[0], binary).start(found[1])
        try:
            yield found
        finally:
            scheduler.stop()


@contextmanager
def operator(
    plane: ControlPlane,
    gang_scheduler_name: str = "",
    *,
    pods: PodSettings = UPSTREAM_DEFAULTS,
    namespace: str | None = None,
    kueue: bool = False,
) -> Iterator[Operator]:
    """An operator of its own (its metrics too), as the restricted user; `pods`: the settings
    its pod flags make; `namespace`: the only one it watches (all if None); `kueue`: its own
    Kueue integration on."""
    kube = Kube(api_client(kubeconfig=str(plane.kubeconfig_for(RESTRICTED_USER))))
    settings = OperatorConfig(
        workers=2,
        resync_seconds=1.0,
        watch_timeout=30,
        namespace=namespace,
        gang_scheduler_name=gang_scheduler_name,
        pods=pods,
        kueue=kueue,
    )
    running = Operator(kube, config=settings)
    stop = threading.Event()
    thread = threading.Thread(target=running.run, args=(stop,), name="gang-operator", daemon=True)
    thread.start()
    try:
        wait_for(running.healthy, what="the operator's caches to sync")
        yield running
    finally:
        stop.set()
        thread.join(timeout=60)
        kube.close()


@contextmanager
def namespace(api: client.ApiClient, name: str) -> Iterator[Cluster]:
    """A namespace for one case; its jobs are deleted at the end, so no later operator of this
    module finds them (there is no garbage collector or namespace controller here)."""
    core = client.CoreV1Api(api)
    core.create_namespace({"metadata": {"name": name}})
    cluster = Cluster(api, name)
    try:
        yield cluster
    finally:
        for job in cluster.jobs.list_namespaced_custom_object(c.GROUP, c.VERSION, name, c.PLURAL)[
            "items"
        ]:
            cluster.jobs.delete_namespaced_custom_object(
                c.GROUP, c.VERSION, name, c.PLURAL, job["metadata"]["name"]
            )


# -- helpers -----------------------------------------------------------------------------------


def podgroup(api: client.ApiClient, ns: str, name: str, where: tuple[str, str, str]) -> JSON | None:
    objects = client.CustomObjectsApi(api)
    try:
        found: JSON = objects.get_namespaced_custom_object(*where[:2], ns, where[2], name)
    except client.ApiException as error:
        if error.status == 404:
            return None
        raise
    return found


def set_volcano_phase(api: client.ApiClient, ns: str, name: str, phase: str) -> None:
    """What Volcano's scheduler writes when its enqueue action admits the group (its CRD has
    no status subresource: the status is written with the object)."""
    client.CustomObjectsApi(api).patch_namespaced_custom_object(
        *VOLCANO[:2], ns, VOLCANO[2], name, {"status": {"phase": phase}}
    )


def gang_condition(cluster: Cluster, job: str) -> tuple[str, str]:
    for cond in (cluster.job(job).get("status") or {}).get("conditions") or []:
        if cond["type"] == c.CONDITION_GANG_SCHEDULED:
            return cond["status"], cond["reason"]
    return "", ""


def bound(cluster: Cluster, job: str) -> set[str]:
    return {name for name, pod in cluster.pods(job).items() if pod["spec"].get("nodeName")}


def cpu_job(name: str, *, replicas: int, low: int, high: int, cpu: str = "1") -> JSON:
    job = elastic_job(name, replicas=replicas, low=low, high=high)
    container = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    container["resources"] = {"requests": {"cpu": cpu, "memory": "64Mi"}}
    return job


@contextmanager
def node(api: client.ApiClient, *, cpu: str) -> Iterator[str]:
    """A Ready Node object (nothing runs pods: the test marks bound pods Running)."""
    core, name = client.CoreV1Api(api), "gang-node"
    core.create_node({"metadata": {"name": name}})
    ready = {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "test"}
    resources = {"cpu": cpu, "memory": "16Gi", "pods": "110"}
    core.patch_node_status(
        name, {"status": {"capacity": resources, "allocatable": resources, "conditions": [ready]}}
    )
    # Admission (TaintNodesByCondition) taints a new Node not-ready; the node lifecycle
    # controller, not running here, lifts it once the Node is Ready.
    core.patch_node(name, {"spec": {"taints": None}})
    try:
        yield name
    finally:
        core.delete_node(name)


def never(predicate: Callable[[], bool], *, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert not predicate(), what
        time.sleep(0.2)


# -- without gang scheduling, and without the CRDs -------------------------------------------


def test_without_the_flag_a_cluster_without_podgroup_crds_runs_jobs_as_before(
    bare: tuple[ControlPlane, client.ApiClient],
) -> None:
    plane, api = bare
    with operator(plane), namespace(api, "no-gang") as cluster:
        cluster.create(elastic_job("plain", replicas=2))
        pods = cluster.wait_pods("plain", names("plain", "worker", 2))
        schedulers = {pod["spec"].get("schedulerName") for pod in pods.values()}
        assert schedulers == {"default-scheduler"}  # the API server's default: nothing set
        assert gang_condition(cluster, "plain") == ("", "")


def test_the_flag_without_the_crd_is_a_condition_and_a_warning_then_recovers(
    bare: tuple[ControlPlane, client.ApiClient],
) -> None:
    plane, api = bare
    with operator(plane, "volcano") as running, namespace(api, "no-crd") as cluster:
        cluster.create(elastic_job("stuck", replicas=2))
        wait_for(
            lambda: gang_condition(cluster, "stuck") == ("False", "PodGroupCRDMissing"),
            what="the missing CRD reported on the job",
        )
        wait_for(lambda: "PodGroupCRDMissing" in cluster.events("stuck"), what="a Warning event")
        assert running.healthy()  # no crash, no restart
        assert cluster.pods("stuck") == {}
        install_crd(api, VOLCANO_CRD)  # picked up at the next resync, without a restart
        wait_for(
            lambda: podgroup(api, cluster.ns, "stuck", VOLCANO) is not None,
            timeout=60,
            what="the PodGroup once the CRD is installed",
        )
        wait_for(
            lambda: gang_condition(cluster, "stuck") == ("False", "PodGroupPending"),
            what="the job waiting for Volcano",
        )


# -- Volcano (its scheduler's status write emulated) -----------------------------------------


def test_volcano_podgroup_gates_pod_creation_follows_the_minimum_and_goes_with_the_job(
    gang: tuple[ControlPlane, client.ApiClient],
) -> None:
    plane, api = gang
    with operator(plane, "volcano") as running, namespace(api, "volcano") as cluster:
        job = cpu_job("vc", replicas=3, low=2, high=4)
        job["spec"]["runPolicy"] = {
            "schedulingPolicy": {"queue": "research", "priorityClass": "high"}
        }
        created = cluster.create(job)
        group = wait_for(lambda: podgroup(api, cluster.ns, "vc", VOLCANO), what="the PodGroup")
        assert group["spec"] == {
            "minMember": 2,
            "queue": "research",
            "priorityClassName": "high",
            "minResources": {"cpu": "2", "memory": "128Mi"},
        }
        (owner,) = group["metadata"]["ownerReferences"]
        assert (owner["kind"], owner["uid"], owner["controller"]) == (
            c.KIND,
            created["metadata"]["uid"],
            True,
        )
        never(lambda: bool(cluster.pods("vc")), seconds=3, what="no pod before Volcano admits")
        assert gang_condition(cluster, "vc") == ("False", "PodGroupPending")
        waiting = managed_job(cluster.job("vc"))
        assert waiting is not None
        assert waiting.gang_waiting
        assert running_count(waiting) is None

        set_volcano_phase(api, cluster.ns, "vc", "Inqueue")
        pods = cluster.wait_pods("vc", names("vc", "worker", 3))
        for pod in pods.values():
            assert pod["spec"]["schedulerName"] == "volcano"
            annotations = pod["metadata"]["annotations"]
            assert annotations["scheduling.k8s.io/group-name"] == "vc"
            assert annotations["volcano.sh/task-spec"] == "worker"

        cluster.patch("vc", {"spec": {"elasticPolicy": {"minReplicas": 3}}})
        wait_for(
            lambda: (podgroup(api, cluster.ns, "vc", VOLCANO) or {})["spec"]["minMember"] == 3,
            what="minMember to follow the minimum",
        )
        assert podgroup(api, cluster.ns, "vc", VOLCANO)["spec"]["queue"] == "research"  # type: ignore[index]

        cluster.set_phase("vc-worker-0", "Succeeded")  # elastic: one worker done ends the job
        cluster.wait_condition("vc", ("Succeeded", "True"))
        wait_for(
            lambda: podgroup(api, cluster.ns, "vc", VOLCANO) is None,
            what="the PodGroup deleted with the finished job",
        )
        # Events are sent off the reconcile path, so this one may reach the server after the delete.
        wait_for(lambda: "JobTerminated" in cluster.events("vc"), what="the JobTerminated Event")
        # upstream's counters of what the operator wrote (its own, no other operator's)
        assert object_counters(running) == {
            "created_pods": 3,
            "deleted_pods": 0,  # cleanPodPolicy None: the finished job's pods stay
            "failed_pods": 0,
            "succeeded_service_creation": 3,
            "failed_service_creation": 0,
            "created_pod_groups": 1,
            "deleted_pod_groups": 1,
        }


# -- scheduler-plugins with its real scheduler -----------------------------------------------


def test_scheduler_plugins_starts_the_minimum_all_or_nothing_and_never_blocks_a_scale_up(
    gang: tuple[ControlPlane, client.ApiClient],
) -> None:
    plane, api = gang
    core = client.CoreV1Api(api)
    with (
        operator(plane, PROFILE) as running,
        namespace(api, "coscheduling") as cluster,
        node(api, cpu="4"),
    ):
        blocker = {
            "metadata": {"name": "blocker"},
            "spec": {
                "nodeName": "gang-node",  # placed, as if it ran there: 3 of the 4 CPUs taken
                "containers": [
                    {"name": "c", "image": "none", "resources": {"requests": {"cpu": "3"}}}
                ],
            },
        }
        core.create_namespaced_pod(cluster.ns, blocker)

        cluster.create(cpu_job("sp", replicas=2, low=2, high=3))
        pods = cluster.wait_pods("sp", names("sp", "worker", 2))
        for pod in pods.values():
            assert pod["spec"]["schedulerName"] == PROFILE
            assert pod["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"] == "sp"
        group = podgroup(api, cluster.ns, "sp", PLUGINS)
        assert group is not None
        assert group["spec"] == {"minMember": 2, "minResources": {"cpu": "2", "memory": "128Mi"}}
        # One worker would fit on the free CPU, but the gang of two does not: none is placed.
        never(lambda: bool(bound(cluster, "sp")), seconds=8, what="no worker placed alone")
        assert gang_condition(cluster, "sp") == ("False", "GangPending")
        waiting = managed_job(cluster.job("sp"))
        assert waiting is not None
        assert waiting.gang_waiting

        core.delete_namespaced_pod("blocker", cluster.ns, grace_period_seconds=0)
        # Coscheduling retries a gang its PreFilter turned away on a new pod or a PodGroup
        # change (its EventsToRegister), else at the scheduler's 5-minute flush of unschedulable
        # pods: another tenant's pod arriving, as on any busy cluster, is the new pod.
        core.create_namespaced_pod(
            cluster.ns,
            {
                "metadata": {"name": "another-tenant"},
                "spec": {"schedulerName": PROFILE, "containers": [{"name": "c", "image": "none"}]},
            },
        )
        wait_for(
            lambda: bound(cluster, "sp") == names("sp", "worker", 2),
            timeout=90,
            what="the whole gang placed once capacity frees",
        )
        cluster.run_all("sp")
        cluster.wait_condition("sp", ("Running", "True"))
        wait_for(
            lambda: gang_condition(cluster, "sp") == ("True", "GangScheduled"),
            what="the gang reported placed",
        )
        # A placed gang is steady: its PodGroup and the job's status are not rewritten on resync.
        wait_for(
            lambda: resync_writes_nothing(running),
            timeout=60,
            what="resyncs of the gang-scheduled job without a write",
        )

        def engine_view() -> tuple[bool, int | None]:
            placed = managed_job(cluster.job("sp"))
            assert placed is not None
            return placed.gang_waiting, running_count(placed)

        wait_for(lambda: engine_view() == (False, 2), what="the engine to see it run at 2")

        cluster.scale("sp", 3)  # beyond the gang: placed on its own, not held for a gang of 3
        wait_for(
            lambda: bound(cluster, "sp") == names("sp", "worker", 3),
            timeout=60,
            what="the scale-up's worker placed",
        )
        assert podgroup(api, cluster.ns, "sp", PLUGINS)["spec"]["minMember"] == 2  # type: ignore[index]

        cluster.set_phase("sp-worker-0", "Succeeded")
        cluster.wait_condition("sp", ("Succeeded", "True"))
        wait_for(
            lambda: podgroup(api, cluster.ns, "sp", PLUGINS) is None,
            what="the PodGroup deleted with the finished job",
        )
