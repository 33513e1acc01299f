"""The operator's Prometheus metrics, on a registry of its own (tests get a fresh one)."""

from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


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
    )
