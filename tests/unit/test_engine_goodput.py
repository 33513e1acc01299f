"""The engine with a goodput source (in-memory cluster): a job that reports gradient statistics
is given to the policy with its goodput curve, and the decision log, the metrics and `explain`
show its noise scale, the batch priced at its count and that batch's efficiency."""

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from autoscaler.cli.explain_command import render
from autoscaler.engine.engine import Engine
from autoscaler.engine.explain import explain
from autoscaler.engine.ports import GradientReport, JobKey, ManagedJob, StepTime
from autoscaler.engine.state import JobState
from autoscaler.observability.decision_log import DecisionLog, read_decision_log
from autoscaler.observability.engine_metrics import engine_metrics
from autoscaler.policies.contract import Decision, Snapshot
from autoscaler.policies.throughput_model import ThroughputModel
from tests.support.memory_cluster import START, CurveThroughput, MemoryCluster, make_job
from tests.unit.test_engine import CONFIG

REPORT = GradientReport(
    noise_scale=800.0,
    base_batch=32,
    max_local_batch=128,
    max_global_batch=4096,
    steps=(StepTime(2, 32, 0, 0.25), StepTime(4, 32, 0, 0.3)),
    local_batch=32,  # the batch it runs: 2 workers x 32
    accum_steps=0,
    replicas=2,
)


@dataclass
class Reports:
    """Gradient statistics by job name; `broken` raises as an unreachable Prometheus would."""

    reports: dict[str, GradientReport]
    broken: bool = False

    def goodput(
        self, jobs: Sequence[ManagedJob], *, now: datetime
    ) -> Mapping[JobKey, GradientReport]:
        if self.broken:
            raise ConnectionError("prometheus is down")
        return {job.key: self.reports[job.name] for job in jobs if job.name in self.reports}


@dataclass
class Recording:
    """Keeps every snapshot it is given; keeps every count."""

    seen: list[Snapshot] = field(default_factory=list)

    def decide(self, snapshot: Snapshot, *, now: datetime) -> list[Decision]:
        self.seen.append(snapshot)
        return [Decision(j.namespace, j.name, j.replicas, "Kept", "kept") for j in snapshot.jobs]


def setup(tmp_path: Path, reports: Reports) -> tuple[Engine, MemoryCluster, Recording]:
    jobs = [make_job("bert", total_samples=1e6), make_job("plain")]
    cluster = MemoryCluster({job.key: job for job in jobs})
    policy = Recording()
    engine = Engine(
        cluster=cluster,
        throughput=CurveThroughput(cluster, {"bert": lambda n: 90.0 * n, "plain": lambda n: 10.0}),
        policy=policy,
        policy_name="recording",
        config=CONFIG,
        metrics=engine_metrics(),
        decision_log=DecisionLog(tmp_path / "decisions.jsonl"),
        goodput=reports,
    )
    return engine, cluster, policy


def test_a_goodput_job_is_priced_and_shown(tmp_path: Path) -> None:
    engine, cluster, policy = setup(tmp_path, Reports({"bert": REPORT}))
    engine.run_once(now=START)
    jobs = {job.name: job for job in policy.seen[-1].jobs}
    bert, plain = jobs["bert"], jobs["plain"]
    assert plain.goodput is None
    assert bert.goodput is not None
    assert bert.goodput.noise_scale == 800.0
    assert bert.curve is not None
    assert sorted(bert.curve.values) == list(range(1, 9))  # every count, priced
    chosen = bert.goodput.batches[2]
    assert bert.curve.values[2] == pytest.approx(chosen.samples_per_second * chosen.efficiency)
    assert bert.throughput == {2: 90.0 * 2}  # what was read, in samples/s, beside the model
    (record,) = [r for r in read_decision_log(tmp_path / "decisions.jsonl") if r["name"] == "bert"]
    assert record["goodput"]["noise_scale"] == 800.0
    assert record["goodput"]["global_batch"] == chosen.global_batch
    assert record["goodput"]["efficiency"] == chosen.efficiency
    assert record["predicted_samples_per_second"] == chosen.samples_per_second  # not goodput
    running = record["goodput"]["running"]
    assert running["global_batch"] == 64
    share = running["samples_per_second"] * running["efficiency"] / record["goodput"]["goodput"]
    assert running["share_of_goodput"] == pytest.approx(share)
    assert 0 < share < 1  # 64 is not the best batch at 2 workers
    plain_record = [r for r in read_decision_log(tmp_path / "decisions.jsonl")
                    if r["name"] == "plain"]  # fmt: skip
    assert plain_record[0]["goodput"] is None
    assert engine.metrics is not None
    efficiency = engine.metrics.efficiency.labels("ns", "bert")._value.get()
    assert efficiency == chosen.efficiency
    engine.finish_saves()
    saved = cluster.jobs_[bert.key]
    shown = explain(
        dataclasses.replace(saved, state=cluster.states[bert.key]),
        name="ns/bert",
        hpa=None,
        now=START,
        model=ThroughputModel(),
    )
    assert shown["goodput"]["noise_scale"] == 800.0
    assert shown["goodput"]["global_batch"] == chosen.global_batch
    assert shown["goodput"]["efficiency"] == chosen.efficiency
    text = render(shown)
    assert "Goodput:   noise scale 800 at base batch 32; at 2 workers batch" in text
    assert f"efficiency {chosen.efficiency:.3f}" in text
    assert f"the job runs batch 64 (32 per rank x 1 micro-steps): {share:.1%} of that" in text
    engine.close()


def test_an_outage_keeps_the_last_pricing_and_a_silent_job_gets_its_throughput(
    tmp_path: Path,
) -> None:
    reports = Reports({"bert": REPORT})
    engine, _, policy = setup(tmp_path, reports)
    engine.run_once(now=START)
    priced = {j.name: j.goodput for j in policy.seen[-1].jobs}["bert"]
    reports.broken = True
    engine.run_once(now=START + timedelta(seconds=30))
    assert {j.name: j.goodput for j in policy.seen[-1].jobs}["bert"] == priced
    reports.broken, reports.reports = False, {}
    engine.run_once(now=START + timedelta(seconds=60))
    assert {j.name: j.goodput for j in policy.seen[-1].jobs}["bert"] is None
    assert engine.metrics is not None
    exported = {s.labels.get("pytorchjob") for m in engine.metrics.efficiency.collect()
                for s in m.samples}  # fmt: skip
    assert "bert" not in exported  # no stale price once it is not priced
    engine.close()


def test_a_job_without_statistics_explains_none() -> None:
    job = make_job("plain", state=JobState().to_json())
    shown = explain(job, name="ns/plain", hpa=None, now=START, model=ThroughputModel())
    assert shown["goodput"] is None
    assert "Goodput:" not in render(shown)


def test_without_progress_gauges_a_goodput_job_is_accounted_at_its_priced_efficiency(
    tmp_path: Path,
) -> None:
    engine, _, policy = setup(tmp_path, Reports({"bert": REPORT}))
    engine.run_once(now=START)
    priced = {j.name: j for j in policy.seen[-1].jobs}["bert"]
    assert priced.goodput is not None
    efficiency = priced.goodput.batches[priced.replicas].efficiency
    assert efficiency < 1
    engine.run_once(now=START + timedelta(seconds=30))
    states = {name: state for (_, name), state in engine.states.items()}
    reading = 90.0 * priced.replicas  # the job's samples/s at its count
    assert states["bert"].samples_done == pytest.approx(reading * efficiency * 30)
    assert states["plain"].samples_done == pytest.approx(10.0 * 30)  # not priced: samples
    engine.close()
