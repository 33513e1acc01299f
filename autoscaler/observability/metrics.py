"""The operator's Prometheus metrics, on a registry of its own (tests get a fresh one)."""

from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, ProcessCollector

CONTROLLER = "pytorchjob-controller"  # upstream's controller (and work queue) name
# controller-runtime's `pkg/internal/controller/metrics`: its reconcile-time buckets.
RECONCILE_BUCKETS = (
    *(0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8),
    *(0.9, 1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5, 6, 7, 8, 9, 10, 15, 20, 25),
    *(30, 40, 50, 60),
)
# controller-runtime's `pkg/metrics/workqueue.go`: prometheus.ExponentialBuckets(10e-9, 10, 12).
QUEUE_BUCKETS = tuple(10e-9 * 10**i for i in range(12))


@dataclass(frozen=True)
class WorkQueueMetrics:
    """One queue's series of client-go's work-queue metrics (labels `name` and `controller`)."""

    depth: Gauge
    adds: Counter
    queue_duration: Histogram
    work_duration: Histogram
    unfinished_work: Gauge
    longest_running: Gauge
    retries: Counter


@dataclass(frozen=True)
class ControllerRuntimeMetrics:
    """One controller's series of controller-runtime's reconcile metrics, and its queue's."""

    reconciles: dict[str, Counter]  # by result: success, error, requeue, requeue_after
    errors: Counter
    terminal_errors: Counter
    panics: Counter
    time: Histogram
    max_concurrent: Gauge
    active_workers: Gauge
    queue: WorkQueueMetrics


def controller_runtime_metrics(
    registry: CollectorRegistry, controller: str = CONTROLLER
) -> ControllerRuntimeMetrics:
    mine, queue_labels = ["controller"], ["name", "controller"]
    queue = (controller, controller)  # controller-runtime names the queue after its controller
    reconciles = Counter(
        "controller_runtime_reconcile_total",
        "Total number of reconciliations per controller",
        ["controller", "result"],
        registry=registry,
    )
    return ControllerRuntimeMetrics(
        reconciles={
            result: reconciles.labels(controller, result)
            for result in ("success", "error", "requeue", "requeue_after")
        },
        errors=Counter(
            "controller_runtime_reconcile_errors",
            "Total number of reconciliation errors per controller",
            mine,
            registry=registry,
        ).labels(controller),
        terminal_errors=Counter(
            "controller_runtime_terminal_reconcile_errors",
            "Total number of terminal reconciliation errors per controller",
            mine,
            registry=registry,
        ).labels(controller),
        panics=Counter(
            "controller_runtime_reconcile_panics",
            "Total number of reconciliation panics per controller",
            mine,
            registry=registry,
        ).labels(controller),
        time=Histogram(
            "controller_runtime_reconcile_time_seconds",
            "Length of time per reconciliation per controller",
            mine,
            buckets=RECONCILE_BUCKETS,
            registry=registry,
        ).labels(controller),
        max_concurrent=Gauge(
            "controller_runtime_max_concurrent_reconciles",
            "Maximum number of concurrent reconciles per controller",
            mine,
            registry=registry,
        ).labels(controller),
        active_workers=Gauge(
            "controller_runtime_active_workers",
            "Number of currently used workers per controller",
            mine,
            registry=registry,
        ).labels(controller),
        queue=WorkQueueMetrics(
            depth=Gauge(
                "workqueue_depth", "Current depth of workqueue", queue_labels, registry=registry
            ).labels(*queue),
            adds=Counter(
                "workqueue_adds",
                "Total number of adds handled by workqueue",
                queue_labels,
                registry=registry,
            ).labels(*queue),
            queue_duration=Histogram(
                "workqueue_queue_duration_seconds",
                "How long in seconds an item stays in workqueue before being requested",
                queue_labels,
                buckets=QUEUE_BUCKETS,
                registry=registry,
            ).labels(*queue),
            work_duration=Histogram(
                "workqueue_work_duration_seconds",
                "How long in seconds processing an item from workqueue takes.",
                queue_labels,
                buckets=QUEUE_BUCKETS,
                registry=registry,
            ).labels(*queue),
            unfinished_work=Gauge(
                "workqueue_unfinished_work_seconds",
                "How many seconds of work has been done that is in progress and hasn't been "
                "observed by work_duration. Large values indicate stuck threads. One can deduce "
                "the number of stuck threads by observing the rate at which this increases.",
                queue_labels,
                registry=registry,
            ).labels(*queue),
            longest_running=Gauge(
                "workqueue_longest_running_processor_seconds",
                "How many seconds has the longest running processor for workqueue been running.",
                queue_labels,
                registry=registry,
            ).labels(*queue),
            retries=Counter(
                "workqueue_retries",
                "Total number of retries handled by workqueue",
                queue_labels,
                registry=registry,
            ).labels(*queue),
        ),
    )


@dataclass(frozen=True)
class OperatorMetrics:
    registry: CollectorRegistry
    reconciles: Counter
    reconcile_errors: Counter
    reconcile_seconds: Histogram
    queue_depth: Gauge
    api_requests: Counter
    api_writes: Counter
    leader: Gauge
    # Upstream's job counters (training-operator v1.9 `pkg/common/metrics.go`), same names and
    # labels, so dashboards and alerts written for it keep working: created, deleted,
    # successful, failed, restarted.
    jobs: dict[str, Counter]
    # Upstream's unlabelled counters of the objects it writes (v1.9 `pkg/controller.v1/common`:
    # `pod.go`, `service.go`, `job_controller.go`), same names: created_pods_total and the rest.
    objects: dict[str, Counter]
    # controller-runtime's (v0.19, upstream's manager) reconcile and work-queue metrics, labelled
    # with the controller's name as upstream's PyTorchJob controller is.
    runtime: ControllerRuntimeMetrics
    # The planned placement (--planned-placement): workers pinned, moved, and waiting for room.
    placed_workers: Counter
    moved_workers: Counter
    waiting_workers: Gauge


UPSTREAM_JOB_COUNTERS = {
    "created": "Counts number of jobs created",
    "deleted": "Counts number of jobs deleted",
    "successful": "Counts number of jobs successful",
    "failed": "Counts number of jobs failed",
    "restarted": "Counts number of jobs restarted",
}

UPSTREAM_OBJECT_COUNTERS = {
    "created_pods": "The total number of created pods",
    "deleted_pods": "The total number of deleted pods",
    "failed_pods": "The total number of failed pods",
    "succeeded_service_creation": "The total number of succeeded service creation",
    "failed_service_creation": "The total number of failed service creation",
    "created_pod_groups": "The total number of created pod groups",
    "deleted_pod_groups": "The total number of deleted pod groups",
}


def operator_metrics() -> OperatorMetrics:
    registry = CollectorRegistry()
    ProcessCollector(registry=registry)  # process_* as controller-runtime's registry has them
    prefix = "autoscaler_operator"
    return OperatorMetrics(
        registry=registry,
        reconciles=Counter(
            f"{prefix}_reconciles", "Reconcile passes", ["result"], registry=registry
        ),
        reconcile_errors=Counter(
            f"{prefix}_reconcile_errors", "Reconcile passes that failed", registry=registry
        ),
        reconcile_seconds=Histogram(
            f"{prefix}_reconcile_duration_seconds",
            "Time of one reconcile pass, writes included",
            buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
            registry=registry,
        ),
        queue_depth=Gauge(
            f"{prefix}_workqueue_depth", "Jobs waiting to be reconciled", registry=registry
        ),
        api_requests=Counter(
            f"{prefix}_api_requests", "Requests sent to the API server", registry=registry
        ),
        api_writes=Counter(
            f"{prefix}_api_writes", "Writes sent to the API server", registry=registry
        ),
        leader=Gauge(
            f"{prefix}_leader", "1 while this replica holds the leader lease", registry=registry
        ),
        jobs={
            what: Counter(
                f"training_operator_jobs_{what}",
                help_text,
                ["job_namespace", "framework"],
                registry=registry,
            )
            for what, help_text in UPSTREAM_JOB_COUNTERS.items()
        },
        objects={
            name: Counter(name, help_text, registry=registry)
            for name, help_text in UPSTREAM_OBJECT_COUNTERS.items()
        },
        runtime=controller_runtime_metrics(registry),
        placed_workers=Counter(
            f"{prefix}_placed_workers",
            "Workers the planned placement pinned to a node",
            registry=registry,
        ),
        moved_workers=Counter(
            f"{prefix}_moved_workers",
            "Placed workers the planned placement deleted, their node having left the placement",
            registry=registry,
        ),
        waiting_workers=Gauge(
            f"{prefix}_waiting_workers",
            "Workers held by the planned placement's gate until they pack",
            registry=registry,
        ),
    )
