"""Every API coordinate of the project, defined once: group, version, kind, names, labels."""

from typing import Final

GROUP: Final = "kubeflow.org"
VERSION: Final = "v1"
API_VERSION: Final = f"{GROUP}/{VERSION}"
KIND: Final = "PyTorchJob"
LIST_KIND: Final = "PyTorchJobList"
PLURAL: Final = "pytorchjobs"
SINGULAR: Final = "pytorchjob"
CRD_NAME: Final = f"{PLURAL}.{GROUP}"

# Replica types, as the keys of spec.pytorchReplicaSpecs.
MASTER: Final = "Master"
WORKER: Final = "Worker"
REPLICA_TYPES: Final = (MASTER, WORKER)

# Scale subresource paths (upstream v1.6+, kubeflow/training-operator#1724).
SCALE_SPEC_REPLICAS_PATH: Final = f".spec.pytorchReplicaSpecs.{WORKER}.replicas"
SCALE_STATUS_REPLICAS_PATH: Final = f".status.replicaStatuses.{WORKER}.active"
SCALE_LABEL_SELECTOR_PATH: Final = f".status.replicaStatuses.{WORKER}.selector"

# Labels the operator puts on pods and services (upstream names, for compatibility).
LABEL_PREFIX: Final = "training.kubeflow.org"
LABEL_OPERATOR_NAME: Final = f"{LABEL_PREFIX}/operator-name"
LABEL_JOB_NAME: Final = f"{LABEL_PREFIX}/job-name"
LABEL_REPLICA_TYPE: Final = f"{LABEL_PREFIX}/replica-type"
LABEL_REPLICA_INDEX: Final = f"{LABEL_PREFIX}/replica-index"
LABEL_JOB_ROLE: Final = f"{LABEL_PREFIX}/job-role"
OPERATOR_NAME: Final = "pytorchjob-controller"

# The runPolicy.managedBy value of jobs this operator reconciles (unset means the same).
MANAGED_BY_TRAINING_OPERATOR: Final = "kubeflow.org/training-operator"

# The operator's job condition under gang scheduling: False while the job's PodGroup is not
# placed (or cannot be), so the engine counts the job as waiting.
CONDITION_GANG_SCHEDULED: Final = "GangScheduled"
# The operator's job condition under its Kueue integration: False while a scale-up waits for
# Kueue to admit its Workload slice (the job runs at the admitted count meanwhile).
CONDITION_QUOTA_ADMITTED: Final = "QuotaAdmitted"

# Container and port defaults (upstream pytorch_types.go).
DEFAULT_CONTAINER_NAME: Final = "pytorch"
DEFAULT_PORT_NAME: Final = "pytorchjob-port"
DEFAULT_PORT: Final = 23456
DEFAULT_RESTART_POLICY: Final = "OnFailure"
DEFAULT_CLEAN_POD_POLICY: Final = "None"
DEFAULT_NPROC_PER_NODE: Final = "auto"
DEFAULT_RDZV_BACKEND: Final = "c10d"

# Annotations the policy engine reads and writes on a job; how each is read, its default and its
# meaning are declared in autoscaler.api.annotations (and generated into docs/annotations.md).
ENGINE_PREFIX: Final = "elastic-autoscaler.io"
ANNOTATION_OPT_OUT: Final = f"{ENGINE_PREFIX}/opt-out"  # "true": the engine never writes the job
ANNOTATION_WEIGHT: Final = f"{ENGINE_PREFIX}/weight"  # the job's weight in the objective
# The samples the job trains in all (a positive number): its remaining work is this total minus
# what it has trained so far.
ANNOTATION_TOTAL_SAMPLES: Final = f"{ENGINE_PREFIX}/total-samples"
# The only worker counts the job may run at: "1,2,4,8" or "powers-of-two".
ANNOTATION_ALLOWED_REPLICAS: Final = f"{ENGINE_PREFIX}/allowed-replicas"
# The job's samples/s at some worker counts, measured beforehand: "1:120,2:230,4:430". A policy
# sizes the job by it while it waits (not started yet, or held back).
ANNOTATION_THROUGHPUT_PROFILE: Final = f"{ENGINE_PREFIX}/throughput-profile"
# The job's own samples/s as a PromQL template over metrics it already exports, for a script
# without the training helper: `{namespace}`, `{name}` and `{window}` are filled in (escaped);
# confined to the job's namespace (autoscaler.engine.throughput_query).
ANNOTATION_THROUGHPUT_QUERY: Final = f"{ENGINE_PREFIX}/throughput-query"
ANNOTATION_STATE: Final = f"{ENGINE_PREFIX}/state"  # the engine's memory of the job (JSON)
# "true": the engine may hold the job back (suspend it, 0 workers) while others run; "false" or
# unset: never. Any other value is ignored (an InvalidAnnotation Warning).
ANNOTATION_PREEMPTIBLE: Final = f"{ENGINE_PREFIX}/preemptible"
# Set by the engine, in the same write that suspends the job, to the time it held it back: what
# tells its suspension from a user's (which the engine never resumes). Removed when it resumes it.
ANNOTATION_HELD_SINCE: Final = f"{ENGINE_PREFIX}/held-since"
ENGINE_NAME: Final = "elastic-autoscaler-engine"

# Annotations the operator reads on a job; each is declared in autoscaler.api.operator_annotations
# (torchft mode's keys are autoscaler.fault_tolerance's, which training images share).
# "store": the job's torchrun rendezvous lives in a store Pod beside it, not in worker-0.
ANNOTATION_RENDEZVOUS: Final = f"{ENGINE_PREFIX}/rendezvous"
RENDEZVOUS_STORE: Final = "store"  # the one supported value

# The label that hands a job to a Kueue LocalQueue (Kueue's `constants.QueueLabel`). Kueue admits
# the job at the size its spec has then and requeues it after any resize, so it owns the count.
LABEL_KUEUE_QUEUE_NAME: Final = "kueue.x-k8s.io/queue-name"
# Kueue's opt-in to workload slices (`constants.ElasticJobAnnotation`): with the operator's own
# Kueue integration, a queued elastic job so annotated is resized through Kueue, not requeued.
ANNOTATION_KUEUE_ELASTIC: Final = "kueue.x-k8s.io/elastic-job"

# The extended resource of NVIDIA GPUs: what the engine's jobs share by default.
GPU_RESOURCE: Final = "nvidia.com/gpu"
