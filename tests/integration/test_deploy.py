"""deploy/ as a cluster would take it: every object of the kustomization accepted by the real
API server (server-side dry-run, strict field validation, Pod Security "restricted"), the two
ServiceAccounts holding exactly the permissions their components use (their own tokens, asked
with SelfSubjectAccessReviews), and the real operator running with the operator's token and the
Deployment's own arguments."""

import argparse
import json
import os
import re
import shlex
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from autoscaler.api import coordinates as c
from autoscaler.cli import operator_view, parser
from autoscaler.cli.engine_command import policy_from
from autoscaler.clients.kube import Kube, api_client
from autoscaler.controller.builders import desired_objects
from autoscaler.engine.config import load_config
from tests.integration.test_operator import Cluster, elastic_job, names
from tests.support import apply as kubectl
from tests.support.controlplane import REPO_ROOT
from tests.support.kustomize import CLUSTER_SCOPED, Build, Resource, build, unreferenced
from tests.support.polling import wait_for
from tests.support.processes import free_port, http_get, log_tail, start_process, stop_process
from tests.support.prometheus import PrometheusServer
from tests.support.serviceaccounts import Access, allowed, who_am_i
from tests.support.training import Kubelet, Trainer, gpu_node, remove_jobs_and_pods

JSON = dict[str, Any]
DEPLOY = REPO_ROOT / "deploy"
# The dashboards as JSON for Grafana's "Import dashboard"; grafana/dashboards.yaml embeds them.
NOT_IN_THE_BASE = ("grafana/scaling-decisions.json", "grafana/operator-health.json")
MONITORING_CRDS = REPO_ROOT / "tests" / "data" / "prometheus-operator"
BUILD = build(DEPLOY)
NS = BUILD.namespace or ""
OPERATOR, ENGINE = "pytorchjob-operator", "autoscaler-engine"
RBAC_KINDS = ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")
USER_NS = "team-a"  # any namespace jobs run in (reviews need no existing namespace)

# What each component calls (derived from the code; see the comments in */rbac.yaml), as
# {(apiGroup, resource): verbs}. The ClusterRoles must be exactly this: no more, no less.
OPERATOR_RULES = {
    ("kubeflow.org", "pytorchjobs"): {"get", "list", "watch", "delete", "update"},
    ("kubeflow.org", "pytorchjobs/status"): {"update"},
    ("", "pods"): {"list", "watch", "create", "delete", "patch"},
    ("", "services"): {"list", "watch", "create", "delete", "patch"},
    ("autoscaling", "horizontalpodautoscalers"): {"list", "watch", "create", "update", "delete"},
    ("", "events"): {"create"},
    ("", "nodes"): {"list", "watch"},  # --planned-placement
    ("scheduling.volcano.sh", "podgroups"): {"list", "watch", "create", "update", "delete"},
    ("scheduling.x-k8s.io", "podgroups"): {"list", "watch", "create", "update", "delete"},
    ("scheduling.k8s.io", "priorityclasses"): {"list", "watch"},
    ("kueue.x-k8s.io", "workloads"): {"list", "watch", "create", "update", "delete", "patch"},
    ("kueue.x-k8s.io", "workloads/status"): {"update"},
    ("kueue.x-k8s.io", "resourceflavors"): {"list", "watch"},
    ("kueue.x-k8s.io", "workloadpriorityclasses"): {"list", "watch"},
}
ENGINE_RULES = {
    ("kubeflow.org", "pytorchjobs"): {"list", "watch", "patch"},
    ("kubeflow.org", "pytorchjobs/scale"): {"get", "update"},
    ("", "events"): {"create"},
    ("", "nodes"): {"list", "watch"},
    ("", "pods"): {"list", "watch"},
    ("kueue.x-k8s.io", "localqueues"): {"get"},
    ("kueue.x-k8s.io", "clusterqueues"): {"get"},
}
LEASE_RULES = {("coordination.k8s.io", "leases"): {"get", "create", "update"}}
JOBS = "pytorchjobs.kubeflow.org"
GPU = "nvidia.com/gpu"
LEASES = "leases.coordination.k8s.io"
HPAS = "horizontalpodautoscalers.autoscaling"
# Steps beyond what each component does, which its token must not be able to take.
DENIED_TO_BOTH = [
    Access("delete", "nodes"),
    Access("get", "secrets", USER_NS),
    Access("list", "secrets"),
    Access("get", "secrets", NS),
    Access("create", JOBS, USER_NS),
    Access("create", "pods/exec", USER_NS),
    Access("create", "serviceaccounts/token", NS),
    Access("create", "clusterrolebindings.rbac.authorization.k8s.io"),
    Access("escalate", "clusterroles.rbac.authorization.k8s.io"),
    Access("get", LEASES, "kube-system"),  # leases only in its own namespace
    Access("update", LEASES, "default"),
    Access("delete", LEASES, NS),
    Access("list", "configmaps", NS),
]
OPERATOR_DENIED = [
    *DENIED_TO_BOTH,
    Access("patch", JOBS, USER_NS),
    Access("update", f"{JOBS}/scale", USER_NS),  # the HPA controller or the engine scales
    Access("patch", f"{JOBS}/status", USER_NS),
    Access("update", "pods", USER_NS),
    Access("patch", "nodes"),
]
ENGINE_DENIED = [
    *DENIED_TO_BOTH,
    Access("update", JOBS, USER_NS),  # a job's spec is its owner's (the operator's: --kueue)
    Access("delete", JOBS, USER_NS),
    Access("update", f"{JOBS}/status", USER_NS),
    Access("patch", f"{JOBS}/status", USER_NS),
    Access("create", "pods", USER_NS),
    Access("delete", "pods", USER_NS),
    Access("patch", "pods", USER_NS),
    Access("patch", "services", USER_NS),
    Access("create", "services", USER_NS),
    Access("create", HPAS, USER_NS),
    Access("update", HPAS, USER_NS),
    Access("patch", "nodes"),
    Access("get", "secrets", USER_NS),  # watching pods gives no way into what they mount
    Access("patch", f"{JOBS}/scale", USER_NS),
]


# -- the kustomization as files -----------------------------------------------------------------


def test_every_file_under_deploy_is_in_the_kustomization() -> None:
    assert unreferenced(BUILD, ignore=NOT_IN_THE_BASE) == []
    assert NS == "elastic-autoscaler"
    assert [ns["metadata"]["name"] for ns in BUILD.of_kind("Namespace")] == [NS]


def test_rbac_subjects_are_the_service_accounts_of_the_namespace() -> None:
    accounts = {r.name for r in BUILD.resources if r.kind == "ServiceAccount"}
    assert accounts == {OPERATOR, ENGINE}
    for kind in ("ClusterRoleBinding", "RoleBinding"):
        for binding in BUILD.of_kind(kind):
            for subject in binding["subjects"]:
                # kustomize rewrites only some subjects' namespaces: the files say it outright.
                assert subject == {
                    "kind": "ServiceAccount",
                    "name": subject["name"],
                    "namespace": NS,
                }
                assert subject["name"] in accounts
            role = binding["roleRef"]
            assert BUILD.one(role["kind"], role["name"])


def rules_of(kind: str, name: str) -> dict[tuple[str, str], set[str]]:
    rules: dict[tuple[str, str], set[str]] = {}
    for rule in BUILD.one(kind, name)["rules"]:
        assert set(rule) == {"apiGroups", "resources", "verbs"}, rule  # no resourceNames etc.
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                rules.setdefault((group, resource), set()).update(rule["verbs"])
    return rules


def test_roles_grant_exactly_the_calls_the_components_make() -> None:
    assert rules_of("ClusterRole", OPERATOR) == OPERATOR_RULES
    assert rules_of("ClusterRole", ENGINE) == ENGINE_RULES
    assert rules_of("Role", f"{OPERATOR}-leader-election") == LEASE_RULES
    assert rules_of("Role", f"{ENGINE}-leader-election") == LEASE_RULES
    assert all("*" not in verbs for verbs in [*OPERATOR_RULES.values(), *ENGINE_RULES.values()])


def container(deployment: str) -> JSON:
    containers: list[JSON] = BUILD.one("Deployment", deployment)["spec"]["template"]["spec"][
        "containers"
    ]
    assert len(containers) == 1
    return containers[0]


def cli_args(deployment: str) -> argparse.Namespace:
    """The Deployment's arguments as `autoscaler` parses them (a bad flag fails here)."""
    main = container(deployment)
    assert main["command"] == ["autoscaler"]
    try:
        return parser().parse_args(main["args"])
    except SystemExit as error:  # argparse's way of rejecting arguments
        raise AssertionError(f"autoscaler rejects {shlex.join(main['args'])}") from error


def test_operator_deployment_runs_the_operator_with_real_flags() -> None:
    args = cli_args(OPERATOR)
    assert args.command.__name__ == "run_operator"
    assert args.kubeconfig is None  # in-cluster
    assert args.leader_elect
    assert args.lease_name == OPERATOR
    port = int(args.metrics_address.rsplit(":", 1)[1])
    assert {"name": "metrics", "containerPort": port, "protocol": "TCP"} in container(OPERATOR)[
        "ports"
    ]
    assert {e["name"] for e in container(OPERATOR)["env"]} == {"POD_NAMESPACE"}
    assert BUILD.one("Deployment", OPERATOR)["spec"]["replicas"] == 2  # one leader, one standby


def test_engine_deployment_runs_the_engine_with_real_flags_and_its_config(
    tmp_path: Path,
) -> None:
    args = cli_args(ENGINE)
    assert args.command.__name__ == "run_engine"
    assert args.kubeconfig is None  # in-cluster
    assert args.leader_elect
    assert args.lease_name == "elastic-autoscaler-engine"
    port = int(args.metrics_address.rsplit(":", 1)[1])
    main = container(ENGINE)
    assert {"name": "metrics", "containerPort": port, "protocol": "TCP"} in main["ports"]
    assert {e["name"] for e in main["env"]} == {"POD_NAMESPACE"}
    # --config is the ConfigMap's key, mounted read-only at its directory.
    mount = next(v for v in main["volumeMounts"] if v["mountPath"] == str(args.config.parent))
    assert mount["readOnly"]
    pod = BUILD.one("Deployment", ENGINE)["spec"]["template"]["spec"]
    source = next(v for v in pod["volumes"] if v["name"] == mount["name"])["configMap"]["name"]
    assert source == "engine-config"
    copy = tmp_path / args.config.name
    copy.write_text(BUILD.one("ConfigMap", source)["data"][args.config.name])
    # What `autoscaler engine` does with it before touching the cluster.
    config = load_config(copy)
    name, _ = policy_from(config)
    assert name == "global-optimizer"
    assert config.interval_seconds == 30
    assert config.prometheus.url == "http://prometheus-operated.monitoring.svc:9090"


@pytest.mark.parametrize("deployment", [OPERATOR, ENGINE])
def test_deployments_are_locked_down(deployment: str) -> None:
    pod = BUILD.one("Deployment", deployment)["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == deployment
    assert pod["securityContext"] == {
        "runAsNonRoot": True,
        "runAsUser": 65532,  # the Dockerfile's user
        "runAsGroup": 65532,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    main = container(deployment)
    assert main["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
        "capabilities": {"drop": ["ALL"]},
    }
    assert {"name": "tmp", "mountPath": "/tmp"} in main["volumeMounts"]
    assert set(main["resources"]) == {"requests", "limits"}
    assert main["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert main["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    assert "USER 65532:65532" in (REPO_ROOT / "Dockerfile").read_text().splitlines()


def labels_match(selector: JSON, labels: dict[str, str]) -> bool:
    expressions = selector.get("matchExpressions") or []
    assert all(e["operator"] == "Exists" for e in expressions)
    return (selector.get("matchLabels") or {}).items() <= labels.items() and all(
        e["key"] in labels for e in expressions
    )


@pytest.mark.parametrize("component", [OPERATOR, ENGINE])
def test_metrics_reach_the_service_monitors(component: str) -> None:
    pod = BUILD.one("Deployment", component)["spec"]["template"]
    service = BUILD.one("Service", f"{component}-metrics")
    assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    [port] = service["spec"]["ports"]
    assert port["targetPort"] in {p["name"] for p in container(component)["ports"]}
    monitor = BUILD.one("ServiceMonitor", component)
    assert "namespaceSelector" not in monitor["spec"]  # its own namespace, wherever that is
    assert labels_match(monitor["spec"]["selector"], service["metadata"]["labels"])
    assert [e["port"] for e in monitor["spec"]["endpoints"]] == [port["name"]]
    monitored = [
        m
        for m in BUILD.of_kind("ServiceMonitor")
        if labels_match(m["spec"]["selector"], service["metadata"]["labels"])
    ]
    assert monitored == [monitor]  # scraped once


def meta_label(label: str) -> str:
    """Prometheus' name of a pod label in Kubernetes service discovery."""
    return "__meta_kubernetes_pod_label_" + re.sub(r"[^a-zA-Z0-9_]", "_", label)


def test_pod_monitor_selects_the_operators_training_pods_and_labels_their_job() -> None:
    monitor = BUILD.one("PodMonitor", "pytorchjob-training")["spec"]
    assert monitor["namespaceSelector"] == {"any": True}
    job = elastic_job("resnet", replicas=2)
    job["metadata"]["namespace"] = USER_NS
    pods = [o for o in desired_objects(operator_view(job)) if o["kind"] == "Pod"]
    assert len(pods) == 2
    assert all(labels_match(monitor["selector"], pod["metadata"]["labels"]) for pod in pods)
    [endpoint] = monitor["podMetricsEndpoints"]
    relabel = {
        tuple(r["sourceLabels"]): r["targetLabel"]
        for r in endpoint["relabelings"]
        if r.get("action", "replace") == "replace"
    }
    assert relabel[(meta_label(c.LABEL_JOB_NAME),)] == "job_name"
    assert relabel[("__meta_kubernetes_namespace",)] == "namespace"
    assert endpoint["port"] == "metrics"


# -- the kustomization against the API server ---------------------------------------------------


@pytest.fixture(scope="module")
def mapper(kube_api: client.ApiClient) -> kubectl.RestMapper:
    return kubectl.RestMapper(Kube(kube_api))


@pytest.fixture(scope="module")
def monitoring_crds(kube_api: client.ApiClient, mapper: kubectl.RestMapper) -> list[str]:
    """prometheus-operator's PodMonitor and ServiceMonitor CRDs (vendored), Established."""
    ext = client.ApiextensionsV1Api(kube_api)
    names_ = []
    for path in sorted(MONITORING_CRDS.glob("*.yaml")):
        crd = yaml.safe_load(path.read_text())
        if not kubectl.exists(mapper, crd):
            ext.create_custom_resource_definition(crd)
        names_.append(crd["metadata"]["name"])
    for name in names_:
        wait_for(lambda name=name: _established(ext, name), what=f"{name} to be Established")
    return names_


def _established(ext: client.ApiextensionsV1Api, name: str) -> bool:
    conditions = ext.read_custom_resource_definition(name).status.conditions or []
    return any(cond.type == "Established" and cond.status == "True" for cond in conditions)


@pytest.fixture(scope="module")
def deploy_namespace(mapper: kubectl.RestMapper) -> str:
    """The kustomization's Namespace, created for real (and left: later tests may use it)."""
    kubectl.apply(mapper, BUILD.one("Namespace", NS))
    return NS


def test_namespaced_objects_are_in_the_namespace_and_no_others(
    mapper: kubectl.RestMapper, monitoring_crds: list[str]
) -> None:
    for resource in BUILD.resources:
        namespaced = mapper.namespaced(resource.obj)
        assert (resource.kind not in CLUSTER_SCOPED) == namespaced, resource
        assert resource.namespace == (NS if namespaced else None), resource


@pytest.mark.parametrize("resource", BUILD.resources, ids=str)
def test_server_side_dry_run_create_accepts(
    resource: Resource,
    mapper: kubectl.RestMapper,
    monitoring_crds: list[str],
    deploy_namespace: str,
) -> None:
    stored = kubectl.dry_run_create(mapper, resource.obj)
    assert stored["kind"] == resource.kind
    assert stored["metadata"]["name"] == resource.name
    assert stored["metadata"].get("namespace") == resource.namespace


@pytest.mark.parametrize("deployment", [OPERATOR, ENGINE])
def test_pods_pass_the_restricted_pod_security_standard(
    deployment: str, mapper: kubectl.RestMapper, deploy_namespace: str
) -> None:
    """The namespace enforces "restricted": a pod of the template is admitted (dry run)."""
    labels = BUILD.one("Namespace", NS)["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "restricted"
    template = BUILD.one("Deployment", deployment)["spec"]["template"]
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {**template["metadata"], "name": f"{deployment}-probe", "namespace": NS},
        "spec": template["spec"],
    }
    kubectl.dry_run_create(mapper, pod)
    insecure = {**pod, "spec": {**pod["spec"], "securityContext": {}}}
    insecure["spec"]["containers"] = [{**container(deployment), "securityContext": {}}]
    with pytest.raises(client.ApiException) as denied:
        kubectl.dry_run_create(mapper, insecure)
    assert denied.value.status == 403
    assert 'violates PodSecurity "restricted' in json.loads(denied.value.body)["message"]


# -- the ServiceAccounts, with their own tokens -------------------------------------------------


@pytest.fixture(scope="module")
def installed_rbac(mapper: kubectl.RestMapper, deploy_namespace: str) -> Iterator[list[JSON]]:
    """The kustomization's ServiceAccounts, roles and bindings, created for real; at the end,
    whatever did not exist before is deleted again (the ServiceAccounts' namespace stays)."""
    objects = [r.obj for r in BUILD.resources if r.kind in RBAC_KINDS]
    created = [obj for obj in objects if not kubectl.exists(mapper, obj)]
    for obj in objects:
        kubectl.apply(mapper, obj)
    yield objects
    for obj in reversed(created):
        kubectl.delete(mapper, obj)


@pytest.fixture(scope="module")
def account_kubeconfig(
    installed_rbac: list[JSON], service_account_kubeconfig: Callable[[str, str], Path]
) -> Callable[[str], Path]:
    """A kubeconfig with a fresh token of one of the kustomization's ServiceAccounts."""
    return lambda name: service_account_kubeconfig(NS, name)


@pytest.fixture(scope="module")
def as_account(account_kubeconfig: Callable[[str], Path]) -> Iterator[Callable[[str], Kube]]:
    clients: dict[str, Kube] = {}

    def kube(name: str) -> Kube:
        if name not in clients:
            clients[name] = Kube(api_client(kubeconfig=str(account_kubeconfig(name))))
        return clients[name]

    yield kube
    for each in clients.values():
        each.close()


def granted(rules: dict[tuple[str, str], set[str]], namespace: str = "") -> list[Access]:
    """One review per verb of `rules`, e.g. ("kubeflow.org", "pytorchjobs/scale") -> patch."""
    accesses = []
    for (group, resource), verbs in sorted(rules.items()):
        plural, _, sub = resource.partition("/")
        name = f"{plural}.{group}" if group else plural
        name += f"/{sub}" if sub else ""
        accesses += [Access(verb, name, namespace) for verb in sorted(verbs)]
    return accesses


@pytest.mark.parametrize(
    ("account", "rules", "denied"),
    [(OPERATOR, OPERATOR_RULES, OPERATOR_DENIED), (ENGINE, ENGINE_RULES, ENGINE_DENIED)],
    ids=[OPERATOR, ENGINE],
)
def test_service_account_may_do_what_it_needs_and_nothing_beyond(
    account: str,
    rules: dict[tuple[str, str], set[str]],
    denied: list[Access],
    as_account: Callable[[str], Kube],
) -> None:
    kube = as_account(account)
    assert who_am_i(kube) == f"system:serviceaccount:{NS}:{account}"
    # ClusterRole rules hold in every namespace at once; the Lease only in the account's own.
    needed = [*granted(rules), *granted(LEASE_RULES, NS)]
    assert [str(a) for a in needed if not allowed(kube, a)] == []
    assert [str(a) for a in denied if allowed(kube, a)] == []


def test_operator_runs_with_its_service_account_and_the_deployments_arguments(
    crd: JSON,
    kube_api: client.ApiClient,
    namespace: str,
    account_kubeconfig: Callable[[str], Path],
    tmp_path: Path,
) -> None:
    """`autoscaler operator` as the Deployment starts it (its command, arguments and
    POD_NAMESPACE), with the operator's token: it takes the Lease in its namespace, creates an
    elastic job's pods and Events, and is never denied anything."""
    main = container(OPERATOR)
    executable = Path(sys.executable).parent / main["command"][0]
    port, identity = free_port(), "deploy-test"
    kubeconfig = account_kubeconfig(OPERATOR)
    argv = [str(executable), *main["args"]]
    argv += ["--kubeconfig", str(kubeconfig), "--metrics-address", f"127.0.0.1:{port}"]
    argv += ["--identity", identity]  # later flags win: only these differ from the Deployment
    env = {**os.environ, "POD_NAMESPACE": NS}
    env.pop("KUBECONFIG", None)
    log = tmp_path / "operator.log"
    proc = start_process(argv, log_path=log, env=env)
    try:
        _run_a_job(proc, log=log, port=port, identity=identity, api=kube_api, namespace=namespace)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=15) == 0, log_tail(log)
    finally:
        stop_process(proc)
    # Never denied: RBAC's refusals name the account ("User \"system:serviceaccount:...\"
    # cannot watch ..."). Jobs other tests left in terminating namespaces are refused for that.
    assert f"system:serviceaccount:{NS}:{OPERATOR}" not in log.read_text(), log_tail(log, lines=80)
    # The Lease was handed back at shutdown.
    assert _holder(kube_api) == ""


@pytest.mark.usefixtures("operator")
def test_engine_runs_with_its_service_account_and_the_deployments_arguments(
    kube_api: client.ApiClient,
    namespace: str,
    prometheus: PrometheusServer,
    account_kubeconfig: Callable[[str], Path],
    tmp_path: Path,
) -> None:
    """`autoscaler engine` as the Deployment starts it, with the engine's token and the
    ConfigMap's configuration (Prometheus and intervals pointed at the test's): it measures the
    capacity from a Node, reads throughput, writes /scale, annotates and records Events, and is
    never denied anything."""
    main = container(ENGINE)
    config = yaml.safe_load(BUILD.one("ConfigMap", "engine-config")["data"]["engine.yaml"])
    config |= {
        "interval_seconds": 1,
        "namespaces": [namespace],
        "prometheus": {**config["prometheus"], "url": prometheus.url, "window": "2s"},
        "settle": {"settle_seconds": 4, "cooldown_seconds": 4},
    }
    path = tmp_path / "engine.yaml"
    path.write_text(yaml.safe_dump(config))
    port = free_port()
    argv = [str(Path(sys.executable).parent / main["command"][0]), *main["args"]]
    argv += ["--config", str(path), "--kubeconfig", str(account_kubeconfig(ENGINE))]
    argv += ["--metrics-address", f"127.0.0.1:{port}", "--identity", "engine-deploy-test"]
    env = {**os.environ, "POD_NAMESPACE": NS}
    env.pop("KUBECONFIG", None)
    log = tmp_path / "engine.log"
    cluster = Cluster(kube_api, namespace)
    with ExitStack() as stack:
        stack.enter_context(gpu_node(kube_api, gpus=4))
        stack.enter_context(Kubelet(kube_api, namespace))
        job = elastic_job("by-engine-sa", replicas=1, low=1, high=3, maxRestarts=10)
        worker = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
        worker["containers"][0]["resources"] = {"limits": {GPU: "1"}}
        cluster.create(job)
        stack.callback(remove_jobs_and_pods, kube_api, namespace)
        trainer = stack.enter_context(
            Trainer(kube_api, namespace=namespace, name="by-engine-sa", curve=lambda n: 100.0 * n)
        )
        prometheus.add_target(trainer.target, job="training")
        stack.callback(prometheus.remove_target, trainer.target, job="training")
        proc = start_process(argv, log_path=log, env=env)
        stack.callback(stop_process, proc)
        wait_for(
            lambda: "Rescaled" in cluster.events("by-engine-sa"),
            timeout=60,
            what="the engine to rescale the job",
        )
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=15) == 0, log_tail(log)
        scaled = cluster.job("by-engine-sa")
        assert scaled["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] > 1
        assert c.ANNOTATION_STATE in scaled["metadata"]["annotations"]
    assert f"system:serviceaccount:{NS}:{ENGINE}" not in log.read_text(), log_tail(log, lines=80)


def _run_a_job(
    proc: subprocess.Popen[bytes],
    *,
    log: Path,
    port: int,
    identity: str,
    api: client.ApiClient,
    namespace: str,
) -> None:
    def get(path: str) -> tuple[int, str]:
        try:
            return http_get(f"http://127.0.0.1:{port}{path}")
        except OSError:
            assert proc.poll() is None, log_tail(log)
            return 0, ""

    wait_for(lambda: get("/healthz")[0] == 200, what="the operator to serve /healthz")
    wait_for(lambda: _holder(api) == identity, what=f"the Lease in {NS} to be held")
    cluster = Cluster(api, namespace)
    cluster.create(elastic_job("by-sa", replicas=2))
    cluster.wait_pods("by-sa", names("by-sa", "worker", 2))
    wait_for(
        lambda: "SuccessfulCreatePod" in cluster.events("by-sa"),
        what="the operator's Events",
    )
    reconciled = r'^autoscaler_operator_reconciles_total\{result="ok"\} [1-9]'
    wait_for(
        lambda: re.search(reconciled, get("/metrics")[1], re.M),
        what="the operator process to count its reconciles",  # not another operator's
    )
    assert re.search(r"^autoscaler_operator_leader 1\.0$", get("/metrics")[1], re.M)


def _holder(kube_api: client.ApiClient) -> str:
    try:
        lease = client.CoordinationV1Api(kube_api).read_namespaced_lease(OPERATOR, NS)
    except client.ApiException:
        return ""
    return lease.spec.holder_identity or ""


def test_build_reads_only_what_it_is_told(tmp_path: Path) -> None:
    """The reader refuses what it does not understand instead of ignoring it."""
    (tmp_path / "kustomization.yaml").write_text("resources: [a.yaml]\nimages: []\n")
    with pytest.raises(Exception, match="images"):
        build(tmp_path)
    (tmp_path / "kustomization.yaml").write_text("namespace: x\nresources: [a.yaml, sub]\n")
    (tmp_path / "a.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---\n"
        "apiVersion: v1\nkind: Namespace\nmetadata: {name: x}\n"
    )
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "kustomization.yaml").write_text("resources: [b.yaml]\n")
    (tmp_path / "sub" / "b.yaml").write_text("apiVersion: v1\nkind: Secret\nmetadata: {name: b}\n")
    (tmp_path / "stray.yaml").write_text("{}\n")
    built: Build = build(tmp_path)
    assert [str(r) for r in built.resources] == [
        "ConfigMap x/a (a.yaml)",
        "Namespace x (a.yaml)",
        "Secret x/b (sub/b.yaml)",
    ]
    assert unreferenced(built) == ["stray.yaml"]
    assert unreferenced(built, ignore=("stray.yaml",)) == []
