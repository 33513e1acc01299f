"""Upstream's operator itself (kubeflow/training-operator v1.9.3, built by `make testenv`) on a
control plane of its own with only the PyTorchJob scheme enabled, and differential conformance
of what the two operators create: each manifest is applied under upstream's operator, the same
stored job is built by this operator's builders and created as a server-side dry run (so both go
through the same API server's defaulting), and the pods, services and HPAs are compared field by
field. Every difference must be one the PyTorchJob reference documents."""

import re
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client

from autoscaler.cli import operator_view
from autoscaler.clients.kube import BY_KIND, Kube, api_client
from autoscaler.controller.builders import desired_objects
from tests.integration.test_gang import control_plane, namespace
from tests.integration.test_operator import Cluster, envtest_elastic_job, envtest_job
from tests.support import apply as kubectl
from tests.support.conformance import differences, normalised
from tests.support.controlplane import REPO_ROOT
from tests.support.fixtures import summary_line
from tests.support.jobs import upstream_job
from tests.support.polling import wait_for
from tests.support.upstream_operator import UpstreamOperator, training_operator_binary

pytestmark = pytest.mark.integration
JSON = dict[str, Any]
REFERENCE = REPO_ROOT / "docs" / "pytorchjob.md"
# A difference's path -> the words of the PyTorchJob reference's deliberate difference that
# explains it (checked to be there, so the list and the docs cannot drift).
DOCUMENTED = {
    r"\.env\[TORCH_DISABLE_SHARE_RDZV_TCP_STORE\]$": "get `TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1`",
    r"\.env\[PET_RDZV_CONF\]$": "`PET_RDZV_CONF=last_call_timeout=3,keep_alive_interval=2,",
}


def named(job: JSON, name: str) -> JSON:
    job["metadata"] = {"name": name}
    return job


CASES: dict[str, Callable[[], JSON]] = {
    "upstream echo (Worker-only elastic, c10d)": lambda: named(upstream_job("echo.yaml"), "echo"),
    "upstream imagenet (elastic, c10d)": lambda: named(upstream_job("imagenet.yaml"), "imagenet"),
    "upstream etcd backend": lambda: named(upstream_job("etcd-job.yaml"), "etcd"),
    "Master+Worker": lambda: envtest_job("mw", workers=2),
    "elastic with an HPA metric": lambda: envtest_elastic_job("hpa"),
}
RESULTS: dict[str, str] = {}  # case -> identical, documented or undocumented


@pytest.fixture(scope="module")
def upstream(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[tuple[UpstreamOperator, client.ApiClient]]:
    workdir = tmp_path_factory.mktemp("upstream-operator")
    with control_plane(workdir / "plane") as (plane, api):
        kube = Kube(api_client(kubeconfig=str(plane.kubeconfig_path)))
        manager = UpstreamOperator(
            binary=training_operator_binary(),
            kube=kube,
            kubeconfig=plane.kubeconfig_path,
            workdir=workdir,
            namespace="kubeflow",
        )
        try:
            manager.start()
            kubectl.apply(kubectl.RestMapper(kube), _namespace("ours"))
            yield manager, api
        finally:
            manager.stop()
            kube.close()
    summary_line(request.config, summary())


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


def documented(path: str) -> bool:
    return any(re.search(pattern, path) for pattern in DOCUMENTED)


def test_the_documented_differences_are_in_the_reference() -> None:
    text = " ".join(REFERENCE.read_text().split())
    assert [words for words in DOCUMENTED.values() if words not in text] == []


@pytest.mark.parametrize("case", CASES)
def test_upstream_and_this_operator_create_the_same_objects(
    case: str, upstream: tuple[UpstreamOperator, client.ApiClient]
) -> None:
    manager, api = upstream
    mapper = kubectl.RestMapper(manager.kube)
    ns = f"case-{list(CASES).index(case)}"
    with namespace(api, ns) as cluster:
        created = Cluster(api, ns).create(CASES[case]())  # through upstream's webhook
        name = created["metadata"]["name"]
        ours = [
            kubectl.dry_run_create(
                mapper, {**obj, "metadata": {**obj["metadata"], "namespace": "ours"}}
            )
            for obj in desired_objects(operator_view(cluster.job(name), namespace=ns))
        ]
        wait_for(
            lambda: all(theirs(api, ns, o["kind"], o["metadata"]["name"]) for o in ours),
            what=f"upstream to create {[o['metadata']['name'] for o in ours]}",
            timeout=30,
        )
        found = [
            (f"{o['kind']}/{o['metadata']['name']}{path}", mine, other)
            for o in ours
            for path, mine, other in differences(
                normalised(o), normalised(theirs(api, ns, o["kind"], o["metadata"]["name"]) or {})
            )
        ]
    undocumented = [d for d in found if not documented(d[0])]
    RESULTS[case] = "undocumented" if undocumented else "documented" if found else "identical"
    assert undocumented == [], "\n".join(map(str, undocumented))
