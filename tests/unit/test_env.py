"""The torchrun environment, in upstream's order (v1.9 `envvar.go`), and the deliberate fixes.

Upstream v1.9 has no test file for `envvar.go`; its environment is checked by the env assertions
of `pytorchjob_controller_test.go`, ported in `tests/integration/test_operator.py`. Every case of
`pkg/controller.v1/pytorch/elastic_test.go` (`TestElasticGenerate`) is a test here, its
docstring naming it (`elastic_test.go: ...`).
"""

from typing import Any

import pytest

from autoscaler.api import PyTorchJob, default_job
from autoscaler.controller.env import elastic_env, torchrun_env, with_env
from autoscaler.torchrun import TUNED_RDZV_CONF

CONTAINER = {"name": "pytorch", "image": "img"}


def job(*, master: bool = False, workers: int = 2, **spec: Any) -> PyTorchJob:
    template = {"spec": {"containers": [dict(CONTAINER)]}}
    specs: dict[str, Any] = {"Worker": {"replicas": workers, "template": template}}
    if master:
        specs["Master"] = {"replicas": 1, "template": template}
    raw = {
        "metadata": {"name": "j", "namespace": "ns"},
        "spec": {"pytorchReplicaSpecs": specs, **spec},
    }
    return default_job(PyTorchJob.model_validate(raw))


def env_of(j: PyTorchJob, replica_type: str = "Worker", index: int = 0) -> list[tuple[str, str]]:
    return [
        (var["name"], var["value"])
        for var in torchrun_env(j, replica_type=replica_type, index=index)
    ]


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        (
            "non-elastic, Worker only",
            [("PYTHONUNBUFFERED", "1"), ("PET_NPROC_PER_NODE", "auto"), ("PET_NNODES", "2")],
        ),
        (
            "non-elastic, Master+Worker, worker 1",
            [
                ("PYTHONUNBUFFERED", "1"),
                ("MASTER_PORT", "23456"),
                ("PET_MASTER_PORT", "23456"),
                ("MASTER_ADDR", "j-master-0"),
                ("PET_MASTER_ADDR", "j-master-0"),
                ("WORLD_SIZE", "6"),
                ("RANK", "2"),
                ("PET_NODE_RANK", "2"),
                ("PET_NPROC_PER_NODE", "2"),
                ("PET_NNODES", "3"),
            ],
        ),
        (
            "elastic, Worker only, every field",
            [
                ("PYTHONUNBUFFERED", "1"),
                ("PET_NPROC_PER_NODE", "auto"),
                ("PET_RDZV_ENDPOINT", "etcd-client:2379"),
                ("PET_RDZV_BACKEND", "etcd"),
                ("PET_NNODES", "1:4"),
                ("PET_MAX_RESTARTS", "3"),
                ("PET_RDZV_ID", "run-1"),
                ("PET_RDZV_CONF", "last_call_timeout=5,keep_alive_interval=2"),
                ("PET_STANDALONE", "1"),
            ],
        ),
        (
            "elastic, defaults, deprecated nProcPerNode",
            [
                ("PYTHONUNBUFFERED", "1"),
                ("PET_RDZV_ENDPOINT", "j-worker-0:23456"),
                ("PET_RDZV_BACKEND", "c10d"),
                ("PET_NNODES", "2:2"),
                ("PET_NPROC_PER_NODE", "4"),
                ("PET_RDZV_CONF", TUNED_RDZV_CONF),
            ],
        ),
        (
            "elastic, Master+Worker, master",
            [
                ("PYTHONUNBUFFERED", "1"),
                ("MASTER_PORT", "23456"),
                ("PET_MASTER_PORT", "23456"),
                ("MASTER_ADDR", "j-master-0"),
                ("PET_MASTER_ADDR", "j-master-0"),
                ("WORLD_SIZE", "3"),
                ("RANK", "0"),
                ("PET_NODE_RANK", "0"),
                ("PET_NPROC_PER_NODE", "auto"),
                ("PET_RDZV_ENDPOINT", "j-worker-0:23456"),
                ("PET_RDZV_BACKEND", "c10d"),
                ("PET_NNODES", "1:3"),
                ("PET_RDZV_CONF", TUNED_RDZV_CONF),
            ],
        ),
    ],
)
def test_env_order_and_values(case: str, expected: list[tuple[str, str]]) -> None:
    jobs = {
        "non-elastic, Worker only": (job(), "Worker", 0),
        "non-elastic, Master+Worker, worker 1": (job(master=True, nprocPerNode="2"), "Worker", 1),
        "elastic, Worker only, every field": (
            job(
                elasticPolicy={
                    "minReplicas": 1,
                    "maxReplicas": 4,
                    "rdzvBackend": "etcd",
                    "rdzvHost": "etcd-client",
                    "rdzvPort": 2379,
                    "rdzvId": "run-1",
                    "rdzvConf": [
                        {"key": "last_call_timeout", "value": "5"},
                        {"key": "keep_alive_interval", "value": "2"},
                    ],
                    "standalone": True,
                    "maxRestarts": 3,
                }
            ),
            "Worker",
            0,
        ),
        "elastic, defaults, deprecated nProcPerNode": (
            job(elasticPolicy={"nProcPerNode": 4}),
            "Worker",
            0,
        ),
        "elastic, Master+Worker, master": (
            job(master=True, elasticPolicy={"minReplicas": 1, "maxReplicas": 3}),
            "Master",
            0,
        ),
    }
    j, replica_type, index = jobs[case]
    assert env_of(j, replica_type, index) == expected


def test_empty_rdzv_conf_is_treated_as_absent() -> None:
    """Upstream panics on `rdzvConf: []`; here it is absent: c10d gets the tuned settings."""
    assert dict(env_of(job(elasticPolicy={"rdzvConf": []})))["PET_RDZV_CONF"] == TUNED_RDZV_CONF


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        ({}, TUNED_RDZV_CONF),
        ({"rdzvBackend": "c10d"}, TUNED_RDZV_CONF),
        ({"rdzvConf": [{"key": "last_call_timeout", "value": "30"}]}, "last_call_timeout=30"),
        ({"rdzvBackend": "etcd"}, None),
        ({"rdzvBackend": "etcd-v2"}, None),
    ],
)
def test_c10d_jobs_without_rdzv_conf_get_the_tuned_settings(
    policy: dict[str, object], expected: str | None
) -> None:
    """A job's own rdzvConf always wins; other backends keep torch's defaults."""
    assert dict(env_of(job(elasticPolicy=policy))).get("PET_RDZV_CONF") == expected


@pytest.mark.parametrize(
    ("own_env", "elastic", "expected_tail"),
    [
        ([], True, [("X", "1"), ("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "1")]),
        ([{"name": "TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "value": "0"}], True, [("X", "1")]),
        ([], False, [("X", "1")]),
    ],
)
def test_shared_store_fix_is_appended_to_elastic_containers_only(
    own_env: list[dict[str, str]], elastic: bool, expected_tail: list[tuple[str, str]]
) -> None:
    container = with_env(
        {"name": "c", "env": own_env}, env=[{"name": "X", "value": "1"}], elastic=elastic
    )
    pairs = [(var["name"], var["value"]) for var in container["env"]]
    assert pairs == [(var["name"], var["value"]) for var in own_env] + expected_tail


def test_without_elastic_policy_no_elastic_variables() -> None:
    """elastic_test.go: Without ElasticPolicy. Upstream's elastic generator adds nothing, so
    the environment is the non-elastic one alone (one Worker replica, as upstream's job)."""
    assert env_of(job(workers=1)) == [
        ("PYTHONUNBUFFERED", "1"),
        ("PET_NPROC_PER_NODE", "auto"),
        ("PET_NNODES", "1"),
    ]


def test_with_elastic_policy_exactly_upstreams_variables() -> None:
    """elastic_test.go: With ElasticPolicy. Exactly these, in any order (upstream's
    `ConsistOf`); a job's own rdzvConf is passed as written."""
    policy = {
        "minReplicas": 1,
        "maxReplicas": 3,
        "rdzvBackend": "c10d",
        "rdzvPort": 1234,
        "rdzvHost": "localhost",
        "rdzvId": "rdzv-id",
        "rdzvConf": [
            {"key": "rdzv-conf-name", "value": "rdzv-conf-value"},
            {"key": "rdzv-conf-name-1", "value": "rdzv-conf-value-1"},
        ],
        "maxRestarts": 3,
    }
    pairs = [
        (var["name"], var["value"]) for var in elastic_env(job(workers=1, elasticPolicy=policy))
    ]
    assert sorted(pairs) == sorted(
        [
            ("PET_MAX_RESTARTS", "3"),
            ("PET_RDZV_BACKEND", "c10d"),
            ("PET_RDZV_ENDPOINT", "localhost:1234"),
            ("PET_RDZV_ID", "rdzv-id"),
            ("PET_RDZV_CONF", "rdzv-conf-name=rdzv-conf-value,rdzv-conf-name-1=rdzv-conf-value-1"),
            ("PET_NNODES", "1:3"),
        ]
    )


@pytest.mark.parametrize(
    ("nproc", "world_size"),
    [
        ("2", "6"),
        ("04", "12"),
        ("+4", "12"),
        (" 4\n", "12"),  # torchrun reads every form int() reads (upstream's Go Atoi gives 1 here)
        ("1_0", "30"),
        ("auto", "3"),  # a name counts as 1 process per node, as upstream
        ("npu", "3"),
    ],
)
def test_world_size_reads_nproc_per_node_as_torchrun_does(nproc: str, world_size: str) -> None:
    env = dict(env_of(job(master=True, nprocPerNode=nproc), "Worker", 1))
    assert (env["WORLD_SIZE"], env["PET_NPROC_PER_NODE"]) == (world_size, nproc)
