"""The metrics shared by training scripts (`autoscaler.training`) and the engine's reader.

A training pod exports the counter `autoscaler_training_samples_total{namespace, job_name}`: samples
trained so far. The engine reads `DEFAULT_QUERY_TEMPLATE` rendered per job (samples/s over the
window, summed over the job's pods). The template is a `str.format` string: `{namespace}`,
`{name}` and `{window}` are placeholders, `{{`/`}}` are PromQL's literal braces. The reader fills
`{namespace}` and `{name}` with escaped string-literal contents, so they must sit inside double
quotes; `{window}` is a PromQL duration such as `2m`. The default renders to e.g.

    sum(rate(autoscaler_training_samples_total{namespace="team-a", job_name="bert"}[2m]))

A scrape config that attaches the pod's own `namespace` target label keeps the query working: the
exported label is then renamed `exported_namespace` and the target's label carries the same value.
"""

from typing import Final

SAMPLES: Final = "autoscaler_training_samples"  # the counter's base name (prometheus-client)
SAMPLES_TOTAL: Final = f"{SAMPLES}_total"  # the exposed and queried series name
LABEL_NAMESPACE: Final = "namespace"
LABEL_JOB_NAME: Final = "job_name"

DEFAULT_WINDOW: Final = "2m"
_SELECTOR: Final = f'{LABEL_NAMESPACE}="{{namespace}}", {LABEL_JOB_NAME}="{{name}}"'
DEFAULT_QUERY_TEMPLATE: Final = "sum(rate(" + SAMPLES_TOTAL + "{{" + _SELECTOR + "}}[{window}]))"

# Optional gauges of the job's progress, for the policies that use remaining work: samples the
# whole job has trained so far (every worker, every incarnation: set from the checkpoint, not
# reset by a restart) and samples it trains in all. The engine reads both for every job with one
# query, the largest value a job's pods report.
PROGRESS: Final = "autoscaler_training_progress_samples"
TOTAL: Final = "autoscaler_training_total_samples"
PROGRESS_QUERY: Final = (
    f'max by ({LABEL_NAMESPACE}, {LABEL_JOB_NAME}, __name__) ({{__name__=~"{PROGRESS}|{TOTAL}"}})'
)

# Gradient statistics of a goodput job (one that opts in to batch-size co-adaptation): the
# gradient noise scale at its base batch (smoothed), the base batch, the batch in use and its
# bounds. For such a job the progress and total gauges above count samples at the base batch.
GRADIENT_NOISE_SCALE: Final = "autoscaler_training_gradient_noise_scale"
BASE_BATCH: Final = "autoscaler_training_base_batch_size"
LOCAL_BATCH: Final = "autoscaler_training_local_batch_size"
ACCUM_STEPS: Final = "autoscaler_training_accumulation_steps"  # micro-steps past the 1st (0: none)
REPLICAS: Final = "autoscaler_training_replicas"
MAX_LOCAL_BATCH: Final = "autoscaler_training_max_local_batch_size"
MAX_GLOBAL_BATCH: Final = "autoscaler_training_max_global_batch_size"
# The job's mean step time at each configuration it has run (every incarnation: kept in its
# checkpoint), labelled by that configuration; the engine fits the step-time model over these,
# counting every replica as a node of its own (one worker per pod), as the job does.
STEP_SECONDS: Final = "autoscaler_training_step_seconds"
LABEL_REPLICAS: Final = "replicas"
LABEL_LOCAL_BATCH: Final = "local_batch"
LABEL_ACCUM_STEPS: Final = "accum_steps"

# Where the training helper finds its identity when not told (besides the pod's hostname).
ENV_NAMESPACE: Final = "AUTOSCALER_NAMESPACE"
ENV_JOB_NAME: Final = "AUTOSCALER_JOB_NAME"
DEFAULT_PORT: Final = 9400
