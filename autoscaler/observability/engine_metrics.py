"""The engine's Prometheus metrics (prefix `autoscaler_`, base units, `_total` counters)."""

from contextlib import suppress
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

JOB_LABELS = ("namespace", "pytorchjob")


@dataclass(frozen=True)
class EngineMetrics:
    registry: CollectorRegistry
    desired: Gauge
    current: Gauge
    minimum: Gauge
    maximum: Gauge
    observed: Gauge
    predicted: Gauge
    goodput: Gauge
    efficiency: Gauge
    global_batch: Gauge
    decisions: Counter
    writes: Counter
    rounds: Counter
    fallbacks: Counter
    worker_replacements: Counter
    metrics_unavailable: Counter
    queueing: Counter
    solve_seconds: Histogram
    objective: Gauge
    capacity: Gauge
    capacity_used: Gauge
    leader: Gauge
    # The jobs whose goodput series exist: only they have any to drop (5,000 jobs a round).
    priced: set[tuple[str, str]] = field(default_factory=set)

    def forget(self, *, namespace: str, name: str) -> None:
        """Drop a finished or deleted job's series."""
        for gauge in (
            self.desired,
            self.current,
            self.minimum,
            self.maximum,
            self.observed,
            self.predicted,
        ):
            with suppress(KeyError):
                gauge.remove(namespace, name)
        self.forget_goodput(namespace, name)

    def forget_goodput(self, namespace: str, name: str) -> None:
        """Drop a job's goodput series (it is no longer priced by goodput)."""
        if (namespace, name) not in self.priced:
            return
        self.priced.discard((namespace, name))
        for gauge in (self.goodput, self.efficiency, self.global_batch):
            with suppress(KeyError):
                gauge.remove(namespace, name)


def _job_gauge(name: str, text: str, registry: CollectorRegistry) -> Gauge:
    return Gauge(f"autoscaler_job_{name}", text, JOB_LABELS, registry=registry)


def engine_metrics() -> EngineMetrics:
    registry = CollectorRegistry()
    return EngineMetrics(
        registry=registry,
        desired=_job_gauge("desired_replicas", "Worker count the engine settled on", registry),
        current=_job_gauge("current_replicas", "Worker count in the job's spec", registry),
        minimum=_job_gauge("min_replicas", "elasticPolicy.minReplicas", registry),
        maximum=_job_gauge("max_replicas", "elasticPolicy.maxReplicas", registry),
        observed=_job_gauge(
            "observed_throughput_samples_per_second",
            "Training throughput read this round",
            registry,
        ),
        predicted=_job_gauge(
            "predicted_throughput_samples_per_second",
            "Throughput the model predicts at the desired count",
            registry,
        ),
        goodput=_job_gauge(
            "predicted_goodput",
            "Goodput (samples at the base batch per second) priced at the desired count, for a"
            " job sized by goodput",
            registry,
        ),
        efficiency=_job_gauge(
            "statistical_efficiency",
            "Statistical efficiency of the batch priced at the desired count (goodput jobs)",
            registry,
        ),
        global_batch=_job_gauge(
            "global_batch_size",
            "Global batch priced at the desired count (goodput jobs)",
            registry,
        ),
        decisions=Counter(
            "autoscaler_decisions", "Decisions by final reason", ["reason"], registry=registry
        ),
        writes=Counter(
            "autoscaler_scale_writes",
            "Writes through /scale by result",
            ["result"],
            registry=registry,
        ),
        rounds=Counter("autoscaler_rounds", "Decision rounds run", ["result"], registry=registry),
        fallbacks=Counter(
            "autoscaler_policy_fallbacks",
            "Rounds that kept every count because the policy failed",
            ["reason"],
            registry=registry,
        ),
        worker_replacements=Counter(
            "autoscaler_policy_worker_replacements",
            "Policy worker processes killed and replaced, by reason: PolicyTimeout (over its"
            " time budget), PolicyOutOfMemory (over its memory limit), PolicyFailed (died)",
            ["reason"],
            registry=registry,
        ),
        metrics_unavailable=Counter(
            "autoscaler_throughput_unavailable",
            "Job readings missing or invalid (held at their count), by cause: query_failed"
            " (Prometheus unreachable, an HTTP error, a result of several series or unparsable)"
            " or no_data (the query answered with nothing usable)",
            ["cause"],
            registry=registry,
        ),
        queueing=Counter(
            "autoscaler_queueing",
            "Preemptible jobs held back (action=suspended) and resumed (action=resumed), by the"
            " reason (the policy's, or HeldTooLong: the starvation bound)",
            ["action", "reason"],
            registry=registry,
        ),
        solve_seconds=Histogram(
            "autoscaler_policy_solve_seconds",
            "Time the policy took to decide",
            buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
            registry=registry,
        ),
        objective=Gauge(
            "autoscaler_objective_value", "Objective of the settled counts", registry=registry
        ),
        capacity=Gauge(
            "autoscaler_capacity_available",
            "Resources the engine may hand out",
            ["resource"],
            registry=registry,
        ),
        capacity_used=Gauge(
            "autoscaler_capacity_used",
            "Resources its jobs hold after the round",
            ["resource"],
            registry=registry,
        ),
        leader=Gauge(
            "autoscaler_engine_leader", "1 while this replica holds the lease", registry=registry
        ),
    )
