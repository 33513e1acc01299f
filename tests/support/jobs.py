"""Job manifests for tests: the upstream examples and tables of valid and invalid jobs.

Each invalid case names the field and the message the API server reports; the same tables run
against the real kube-apiserver and against the offline validator, so the two cannot drift.

A case ported from the Kubeflow training operator v1.9's webhook test
(`pkg/webhooks/pytorch/pytorchjob_webhook_test.go`) names it in `upstream`; every case of that
file is here. Upstream's webhook reports some errors with another reason or at another path than
the CRD can: a case says how when it differs. Upstream's admission warning for the deprecated
`elasticPolicy.nProcPerNode` cannot come from a CRD; the operator sends it as a Warning Event
instead (`tests/unit/test_reconcile.py`).
"""

import copy
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

JSON = dict[str, Any]
UPSTREAM = Path(__file__).resolve().parents[1] / "fixtures" / "upstream"
UPSTREAM_JOBS = ("echo.yaml", "imagenet.yaml", "etcd-job.yaml")


def upstream_job(name: str) -> JSON:
    job: JSON = yaml.safe_load((UPSTREAM / name).read_text())
    return job


def echo_with(edit: Callable[[JSON], object]) -> JSON:
    """The upstream echo job (elastic 1..2, Worker replicas 2) changed by `edit`."""
    job = upstream_job("echo.yaml")
    edit(job)
    return job


def spec(job: JSON) -> JSON:
    result: JSON = job["spec"]
    return result


def worker(job: JSON) -> JSON:
    result: JSON = job["spec"]["pytorchReplicaSpecs"]["Worker"]
    return result


def container(job: JSON) -> JSON:
    result: JSON = worker(job)["template"]["spec"]["containers"][0]
    return result


def elastic(job: JSON) -> JSON:
    result: JSON = job["spec"]["elasticPolicy"]
    return result


def with_master(job: JSON, *, replicas: int) -> None:
    job["spec"]["pytorchReplicaSpecs"]["Master"] = {
        **copy.deepcopy(worker(job)),
        "replicas": replicas,
    }


WEBHOOK_TEST = "pytorchjob_webhook_test.go"


def webhook_case(name: str) -> str:
    """How a case names the upstream webhook test case it ports."""
    return f"{WEBHOOK_TEST}: {name}"


WEBHOOK_IMAGE = "gcr.io/kubeflow-ci/pytorch-dist-mnist_test:1.0"


def webhook_job(replica_specs: JSON, **spec: Any) -> JSON:
    """A job as upstream's webhook test writes it: named `test`, only the given fields set."""
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "test"},
        "spec": {"pytorchReplicaSpecs": replica_specs, **spec},
    }


def webhook_replica(*, container: JSON | None = None, **fields: Any) -> JSON:
    """A replica spec of upstream's webhook test: one `pytorch` container with an image."""
    main = container if container is not None else {"name": "pytorch", "image": WEBHOOK_IMAGE}
    return {**fields, "template": {"spec": {"containers": [main]}}}


def webhook_master_worker(**spec: Any) -> JSON:
    """Master 1 + Worker 1, the replica specs most of upstream's webhook cases use."""
    specs = {kind: webhook_replica(replicas=1) for kind in ("Master", "Worker")}
    return webhook_job(specs, **spec)


@dataclass(frozen=True)
class Valid:
    id: str
    job: JSON
    upstream: str = ""


# Accepted at apply (and by the offline validator): upstream's valid webhook cases.
VALID = [
    Valid(
        "webhook-valid-job",
        webhook_job(
            {
                kind: {
                    "replicas": 1,
                    "restartPolicy": "OnFailure",
                    "template": {
                        "spec": {
                            "containers": [
                                {
                                    "name": "pytorch",
                                    "image": "docker.io/kubeflowkatib/pytorch-mnist:v1beta1-45c5727",
                                    "imagePullPolicy": "Always",
                                    "command": [
                                        "python3",
                                        "/opt/pytorch-mnist/mnist.py",
                                        "--epochs=1",
                                    ],
                                }
                            ]
                        }
                    },
                }
                for kind in ("Master", "Worker")
            },
            runPolicy={"managedBy": "kubeflow.org/training-operator"},
            elasticPolicy={"rdzvBackend": "c10d"},
        ),
        upstream=webhook_case("valid PyTorchJob"),
    ),
    Valid(
        # Upstream accepts it with an admission warning; here the warning is an Event.
        "deprecated-nproc-per-node-alone",
        webhook_master_worker(elasticPolicy={"nProcPerNode": 1}),
        upstream=webhook_case("Spec.ElasticPolicy.NProcPerNode are set"),
    ),
]


@dataclass(frozen=True)
class Invalid:
    id: str
    job: JSON
    field: str
    message: str
    upstream: str = ""


WORKER_BOUNDS = "[elasticPolicy.minReplicas, elasticPolicy.maxReplicas]"
INVALID = [
    Invalid(
        "name-not-dns-1035",
        echo_with(lambda j: j["metadata"].update(name="9lives")),
        "metadata.name",
        'Invalid value: metadata.name "9lives" must be a DNS-1035 label: at most 63 lowercase '
        "letters, digits or '-', starting with a letter and ending with a letter or digit",
        upstream=webhook_case("pytorchJob name does not meet DNS1035"),
    ),
    Invalid(
        "min-exceeds-max",
        echo_with(lambda j: elastic(j).update(minReplicas=3, maxReplicas=2)),
        "spec.elasticPolicy.minReplicas",
        "Invalid value: elasticPolicy.minReplicas (3) must not exceed elasticPolicy.maxReplicas (2)",
    ),
    Invalid(
        "min-zero",
        echo_with(lambda j: elastic(j).update(minReplicas=0)),
        "spec.elasticPolicy.minReplicas",
        "Invalid value: 0: spec.elasticPolicy.minReplicas in body should be greater than or equal to 1",
    ),
    Invalid(
        "max-zero",
        echo_with(lambda j: elastic(j).update(maxReplicas=0)),
        "spec.elasticPolicy.maxReplicas",
        "Invalid value: 0: spec.elasticPolicy.maxReplicas in body should be greater than or equal to 1",
    ),
    Invalid(
        "min-not-integer",
        echo_with(lambda j: elastic(j).update(minReplicas="two")),
        "spec.elasticPolicy.minReplicas",
        'Invalid value: "string": spec.elasticPolicy.minReplicas in body must be of type integer: "string"',
    ),
    Invalid(
        "rdzv-backend-unknown",
        echo_with(lambda j: elastic(j).update(rdzvBackend="zookeeper")),
        "spec.elasticPolicy.rdzvBackend",
        'Unsupported value: "zookeeper": supported values: "c10d", "etcd", "etcd-v2"',
    ),
    Invalid(
        "rdzv-port-too-high",
        echo_with(lambda j: elastic(j).update(rdzvPort=70000)),
        "spec.elasticPolicy.rdzvPort",
        "Invalid value: 70000: spec.elasticPolicy.rdzvPort in body should be less than or equal to 65535",
    ),
    Invalid(
        "worker-above-max",
        echo_with(lambda j: worker(j).update(replicas=5)),
        "spec.pytorchReplicaSpecs[Worker].replicas",
        f"Invalid value: pytorchReplicaSpecs.Worker.replicas (5) must be within {WORKER_BOUNDS} = [1, 2]",
    ),
    Invalid(
        "worker-below-only-min",
        echo_with(lambda j: (elastic(j).pop("maxReplicas"), elastic(j).update(minReplicas=3))),
        "spec.pytorchReplicaSpecs[Worker].replicas",
        f"Invalid value: pytorchReplicaSpecs.Worker.replicas (2) must be within {WORKER_BOUNDS} = [3, 3]",
    ),
    Invalid(
        "worker-replicas-zero",
        echo_with(lambda j: worker(j).update(replicas=0)),
        "spec.pytorchReplicaSpecs.Worker.replicas",
        "Invalid value: 0: spec.pytorchReplicaSpecs.Worker.replicas in body should be greater than or equal to 1",
        # Upstream reports Forbidden; here the schema's minimum judges it (Invalid), so a write
        # through /scale is judged the same way.
        upstream=webhook_case("attempt to configure worker with 0 replicas"),
    ),
    Invalid(
        "elastic-without-worker",
        echo_with(
            lambda j: spec(j).update(pytorchReplicaSpecs={"Master": {**worker(j), "replicas": 1}})
        ),
        "spec.pytorchReplicaSpecs",
        "Required value: pytorchReplicaSpecs.Worker must be configured if elastic policy is used",
        # Upstream reports it at `pytorchReplicaSpecs[Worker]`; the CRD's rule reports it at the
        # map that lacks the key.
        upstream=webhook_case("attempt to configure elasticPolicy when no worker is configured"),
    ),
    Invalid(
        "master-replicas-two",
        echo_with(lambda j: with_master(j, replicas=2)),
        "spec.pytorchReplicaSpecs[Master].replicas",
        "Invalid value: pytorchReplicaSpecs.Master.replicas must be 1, got 2",
        # Upstream (Master only) reports Forbidden; here Invalid: the value is what is wrong.
        upstream=webhook_case("the number of replicas in masterReplica is other than 1"),
    ),
    Invalid(
        "replica-type-unknown",
        echo_with(lambda j: spec(j)["pytorchReplicaSpecs"].update(Chief=copy.deepcopy(worker(j)))),
        "spec.pytorchReplicaSpecs",
        'Invalid value: replica types must be exactly "Master" or "Worker" (case-sensitive)',
    ),
    Invalid(
        "replica-type-lowercase",
        echo_with(
            lambda j: spec(j).update(pytorchReplicaSpecs={"worker": worker(j)}, elasticPolicy=None)
        ),
        "spec.pytorchReplicaSpecs",
        'Invalid value: replica types must be exactly "Master" or "Worker" (case-sensitive)',
    ),
    Invalid(
        "no-replica-specs",
        echo_with(lambda j: (spec(j).pop("elasticPolicy"), spec(j).update(pytorchReplicaSpecs={}))),
        "spec.pytorchReplicaSpecs",
        "Invalid value: 0: spec.pytorchReplicaSpecs in body should have at least 1 properties",
    ),
    Invalid(
        "no-containers",
        echo_with(lambda j: worker(j)["template"]["spec"].update(containers=[])),
        "spec.pytorchReplicaSpecs[Worker].template",
        "Required value: template.spec.containers must not be empty",
        # Upstream reports it at `...template.spec.containers`; the CRD's rule reports it at the
        # template, its message naming the field.
        upstream=webhook_case("no containers"),
    ),
    Invalid(
        "no-template",
        echo_with(lambda j: worker(j).pop("template")),
        "spec.pytorchReplicaSpecs[Worker].template",
        "Required value: template.spec.containers must not be empty",
    ),
    Invalid(
        "container-without-image",
        echo_with(lambda j: container(j).pop("image")),
        "spec.pytorchReplicaSpecs[Worker].template",
        'Required value: container "pytorch" must have an image',
    ),
    Invalid(
        "image-empty",
        webhook_job({"Worker": webhook_replica(container={"name": "pytorch", "image": ""})}),
        "spec.pytorchReplicaSpecs[Worker].template",
        'Required value: container "pytorch" must have an image',
        # Upstream reports it at `...containers[0].image`; the CRD's rule reports it at the
        # template, its message naming the container.
        upstream=webhook_case("image is empty"),
    ),
    Invalid(
        "no-pytorch-container",
        echo_with(lambda j: container(j).update(name="trainer")),
        "spec.pytorchReplicaSpecs[Worker].template",
        'Required value: template.spec.containers must include a container named "pytorch"',
        # Upstream's container is named ""; any name but `pytorch` breaks the same rule.
        upstream=webhook_case("pytorchJob default container name doesn't present"),
    ),
    Invalid(
        "template-wrong-type",
        echo_with(lambda j: container(j).update(command="python echo.py")),
        "spec.pytorchReplicaSpecs.Worker.template.spec.containers[0].command",
        'Invalid value: "string": spec.pytorchReplicaSpecs.Worker.template.spec.containers[0].command '
        'in body must be of type array: "string"',
    ),
    Invalid(
        "both-nproc-fields",
        echo_with(lambda j: (spec(j).update(nprocPerNode="2"), elastic(j).update(nProcPerNode=2))),
        "spec.elasticPolicy.nProcPerNode",
        "Forbidden: elasticPolicy.nProcPerNode is deprecated and must not be set together with "
        "nprocPerNode: use only nprocPerNode",
        upstream=webhook_case("Spec.NprocPerNode and Spec.ElasticPolicy.NProcPerNode are set"),
    ),
    Invalid(
        "nproc-per-node-garbage",
        echo_with(lambda j: spec(j).update(nprocPerNode="4 gpus")),
        "spec.nprocPerNode",
        'Invalid value: nprocPerNode "4 gpus" is not a form torchrun accepts: a positive integer, '
        "auto, cpu, gpu, xpu or an accelerator backend name",
    ),
    Invalid(
        "nproc-per-node-zero",
        echo_with(lambda j: spec(j).update(nprocPerNode="0")),
        "spec.nprocPerNode",
        'Invalid value: nprocPerNode "0" is not a form torchrun accepts: a positive integer, '
        "auto, cpu, gpu, xpu or an accelerator backend name",
    ),
    Invalid(
        "rdzv-conf-empty-key",
        echo_with(lambda j: elastic(j).update(rdzvConf=[{"key": "", "value": "3"}])),
        "spec.elasticPolicy.rdzvConf",
        "Invalid value: every rdzvConf entry needs a non-empty key and value: torchrun reads them "
        "as key=value pairs",
    ),
    Invalid(
        "rdzv-conf-no-value",
        echo_with(lambda j: elastic(j).update(rdzvConf=[{"key": "timeout"}])),
        "spec.elasticPolicy.rdzvConf",
        "Invalid value: every rdzvConf entry needs a non-empty key and value: torchrun reads them "
        "as key=value pairs",
    ),
    Invalid(
        "clean-pod-policy-unknown",
        echo_with(lambda j: spec(j).update(runPolicy={"cleanPodPolicy": "Some"})),
        "spec.runPolicy.cleanPodPolicy",
        'Unsupported value: "Some": supported values: "None", "Running", "All"',
    ),
    Invalid(
        "restart-policy-unknown",
        echo_with(lambda j: worker(j).update(restartPolicy="Sometimes")),
        "spec.pytorchReplicaSpecs.Worker.restartPolicy",
        'Unsupported value: "Sometimes": supported values: "Always", "OnFailure", "Never", "ExitCode"',
    ),
    Invalid(
        "managed-by-unknown",
        echo_with(lambda j: spec(j).update(runPolicy={"managedBy": "example.com/mine"})),
        "spec.runPolicy.managedBy",
        'Unsupported value: "example.com/mine": supported values: "kubeflow.org/training-operator", '
        '"kueue.x-k8s.io/multikueue"',
        upstream=webhook_case("attempt to set unsupported managedBy controller name gets rejected"),
    ),
    Invalid(
        # The operator never sees an empty managedBy (upstream's controller treats it as
        # another controller's): the enum rejects it at admission.
        "managed-by-empty",
        echo_with(lambda j: spec(j).update(runPolicy={"managedBy": ""})),
        "spec.runPolicy.managedBy",
        'Unsupported value: "": supported values: "kubeflow.org/training-operator", '
        '"kueue.x-k8s.io/multikueue"',
    ),
    Invalid(
        "backoff-limit-negative",
        echo_with(lambda j: spec(j).update(runPolicy={"backoffLimit": -1})),
        "spec.runPolicy.backoffLimit",
        "Invalid value: -1: spec.runPolicy.backoffLimit in body should be greater than or equal to 0",
    ),
    Invalid(
        "metrics-empty",
        echo_with(lambda j: elastic(j).update(metrics=[])),
        "spec.elasticPolicy.metrics",
        "Invalid value: 0: spec.elasticPolicy.metrics in body should have at least 1 items",
    ),
    Invalid(
        "metric-without-type",
        echo_with(
            lambda j: elastic(j).update(
                metrics=[{"resource": {"name": "cpu", "target": {"type": "Utilization"}}}]
            )
        ),
        "spec.elasticPolicy.metrics[0].type",
        "Required value",
    ),
]


def queued_echo() -> JSON:
    """The echo job in a scheduling queue: the stored object the update cases start from."""
    return echo_with(lambda j: spec(j).update(runPolicy={"schedulingPolicy": {"queue": "q1"}}))


@dataclass(frozen=True)
class InvalidUpdate:
    """A change of `queued_echo()` the API server refuses, with the field and message."""

    id: str
    edit: Callable[[JSON], object]
    field: str
    message: str
    upstream: str = ""


INVALID_UPDATES = [
    InvalidUpdate(
        "managed-by-changed",
        lambda j: spec(j).update(runPolicy={"managedBy": "kueue.x-k8s.io/multikueue"}),
        "spec.runPolicy.managedBy",
        "Invalid value: runPolicy.managedBy is immutable",
        upstream=webhook_case("attempt to update the managedBy field gets rejected"),
    ),
    InvalidUpdate(
        "queue-changed",
        lambda j: spec(j)["runPolicy"]["schedulingPolicy"].update(queue="other"),
        "spec.runPolicy.schedulingPolicy.queue",
        'Invalid value: "other": spec.runPolicy.schedulingPolicy.queue is immutable',
        upstream="pytorchjob_controller_test.go: Shouldn't be updated resources if "
        "spec.runPolicy.schedulingPolicy.queue is changed after the job is created",
    ),
]


# Forms torchrun's `--nproc-per-node` accepts (torch 2.15 `determine_local_world_size`): accepted
# at apply as upstream accepts them; `npu` stands for any registered accelerator backend name,
# and the counts are spelled as Python's int() reads them.
TORCHRUN_NPROC_FORMS = (
    "auto",
    "cpu",
    "gpu",
    "xpu",
    "npu",
    "8",
    "04",
    "+4",
    " 4",
    "\t8\n",
    "1_0",
    "0_1",
)
# Near misses, each rejected: no positive count by int(), or (the last two) a count int() reads
# only in non-ASCII digits or spaces, which the CRD leaves out on purpose.
NOT_TORCHRUN_NPROC_FORMS = (
    "0",
    "00",
    "+0",
    "-4",
    "+-4",
    "_4",
    "4_",
    "1__0",
    "4 gpus",
    "Auto",
    "\u0664",  # ARABIC-INDIC DIGIT FOUR
    "\u00a04",  # a no-break space before the 4
)


def echo_with_nproc(value: str) -> JSON:
    return echo_with(lambda j: spec(j).update(nprocPerNode=value))
