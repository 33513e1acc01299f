"""Pricing a goodput job (pure tables): report -> fitted step-time model -> each count's best
batch -> the snapshot a policy sees."""

import dataclasses
import math

import pytest

from autoscaler import metrics_contract as c
from autoscaler.api.ownership import Owner
from autoscaler.clients.prometheus import reports_by_job
from autoscaler.engine.goodput import (
    efficiency_at,
    observations,
    price,
    price_job,
    priced_at,
    priced_snapshot,
)
from autoscaler.engine.ports import GradientReport, ManagedJob, StepTime
from autoscaler.engine.snapshot import snapshot
from autoscaler.engine.state import JobState
from autoscaler.goodput.batch import BatchLimits, best_batch
from autoscaler.goodput.efficiency import GradientNoise, efficiency
from autoscaler.goodput.step_time import PRIOR, StepObservation, fit, step_seconds
from autoscaler.policies.contract import JobSnapshot
from autoscaler.policies.speedup import job_curve, remaining_seconds
from autoscaler.policies.throughput_model import ThroughputModel
from tests.support.clock import NOW

STEPS = (
    StepTime(replicas=1, local_batch=32, accum_steps=0, seconds=0.20),
    StepTime(replicas=2, local_batch=32, accum_steps=0, seconds=0.24),
    StepTime(replicas=4, local_batch=64, accum_steps=0, seconds=0.45),
)


def report(phi: float = 500.0, steps: tuple[StepTime, ...] = STEPS) -> GradientReport:
    return GradientReport(
        noise_scale=phi, base_batch=32, max_local_batch=128, max_global_batch=2048, steps=steps
    )


def job(gpus: float = 1.0, low: int = 1, high: int = 8, **extra: object) -> ManagedJob:
    fields: dict[str, object] = dict(
        namespace="ns",
        name="bert",
        min_replicas=low,
        max_replicas=high,
        replicas=2,
        active=2,
        owner=Owner.ENGINE,
        created=NOW,
        resources_per_replica={"nvidia.com/gpu": gpus},
        total_samples=1e6,
    )
    return ManagedJob(**(fields | extra))  # type: ignore[arg-type]


def test_efficiency_is_that_of_the_batch_priced_at_the_count() -> None:
    goodput = price(report(), counts=[1, 2, 4])
    assert efficiency_at(goodput, 2) == goodput.batches[2].efficiency < 1
    assert efficiency_at(goodput, 3) == 1.0  # not priced there
    assert efficiency_at(None, 2) == 1.0  # a job sized by its throughput


def test_each_worker_counts_as_a_node() -> None:
    found = observations(report())
    assert [o.nodes for o in found] == [1, 2, 4]
    assert [(o.replicas, o.local_batch, o.step_seconds) for o in found] == [
        (s.replicas, s.local_batch, s.seconds) for s in STEPS
    ]


def test_unusable_step_times_are_left_out() -> None:
    bad = (StepTime(2, 32, 0, float("nan")), StepTime(2, 32, 0, 0.0), StepTime(0, 32, 0, 1.0))
    assert observations(report(steps=STEPS[:1] + bad)) == observations(report(steps=STEPS[:1]))


def test_each_count_is_priced_at_the_cores_best_batch() -> None:
    """The engine's price is exactly what the job's own choice computes from the same inputs."""
    priced = price(report(), counts=range(1, 9))
    model = fit(observations(report()))
    noise = GradientNoise(phi=500.0, base_batch=32)
    limits = BatchLimits(base_batch=32, max_local_batch=128, max_global_batch=2048)
    for count, batch in priced.batches.items():
        own = best_batch(model, noise, limits, replicas=count, nodes=count)
        assert (batch.local_batch, batch.accum_steps, batch.global_batch) == (
            own.local_batch,
            own.accum_steps,
            own.global_batch,
        )
        assert batch.samples_per_second * batch.efficiency == pytest.approx(own.goodput)
    assert sorted(priced.batches) == list(range(1, 9))


def test_without_observations_the_prior_prices() -> None:
    priced = price(report(steps=()), counts=[1, 2])
    noise = GradientNoise(phi=500.0, base_batch=32)
    limits = BatchLimits(base_batch=32, max_local_batch=128, max_global_batch=2048)
    own = best_batch(PRIOR, noise, limits, replicas=2, nodes=2)
    assert priced.batches[2].global_batch == own.global_batch


@pytest.mark.parametrize(("phi", "grows"), [(50.0, False), (5000.0, True)])
def test_a_noisier_gradient_takes_a_larger_batch_at_more_workers(phi: float, grows: bool) -> None:
    batches = price(report(phi=phi), counts=[1, 8]).batches
    assert batches[8].global_batch >= batches[1].global_batch
    assert (batches[8].global_batch > 4 * batches[1].global_batch) is grows


def test_the_snapshot_carries_the_goodput_curve_and_unit() -> None:
    managed = job()
    goodput = price_job(managed, report())
    assert goodput is not None
    states = {managed.key: JobState(samples_done=4e5)}
    view = snapshot([managed], states, capacity={}, now=NOW, restart_seconds=30.0,
                    goodput={managed.key: goodput})  # fmt: skip
    seen = view.jobs[0]
    assert seen.goodput == goodput
    assert seen.remaining_samples == 6e5  # the progress gauge's unit: samples at B0
    assert seen.curve is not None
    assert seen.curve.source == "goodput"
    modelled = seen.curve.values
    for count, batch in goodput.batches.items():
        assert modelled[count] == pytest.approx(batch.samples_per_second * batch.efficiency)
    # A policy's curve is that goodput as it is, and its time to finish is in the same unit.
    curve = job_curve(seen, model=ThroughputModel())
    assert curve.at(4) == modelled[4]
    assert remaining_seconds(seen, curve)[3] == pytest.approx(6e5 / modelled[4])


def test_the_model_curve_stands_beside_the_observations_which_it_overrides() -> None:
    """Observed samples/s stay what was read; a stale observation cannot pull the model down, and
    the exploration bound (twice the largest observed count) applies to observations only."""
    base = JobSnapshot(
        namespace="ns", name="bert", min_replicas=1, max_replicas=8, replicas=2,
        throughput={1: 100.0, 2: 20.0}, throughput_age_seconds={2: 1800.0},
    )  # fmt: skip
    exploring = ThroughputModel(exploration_factor=2.0)
    assert math.isnan(job_curve(base, model=exploring).at(8))  # observations: not past 4 yet
    seen = priced_snapshot(base, price(report(), counts=range(1, 9)))
    assert seen.throughput == {1: 100.0, 2: 20.0}
    assert seen.curve is not None
    curve = job_curve(seen, model=exploring)
    assert [curve.at(n) for n in range(1, 9)] == [seen.curve.values[n] for n in range(1, 9)]


def test_a_job_without_statistics_keeps_its_throughput_curve() -> None:
    managed = job(name="plain")
    states = {managed.key: JobState()}
    view = snapshot([managed], states, capacity={}, now=NOW, restart_seconds=30.0, goodput={})
    assert view.jobs[0].goodput is None


def test_a_job_sized_by_goodput_keeps_its_goodput_curve_when_profiles_are_trusted() -> None:
    managed = job(throughput_profile={2: 200.0, 4: 400.0})
    goodput = price_job(managed, report())
    assert goodput is not None
    states = {managed.key: JobState()}
    view = snapshot(
        [managed], states, capacity={}, now=NOW, restart_seconds=30.0,
        goodput={managed.key: goodput}, trust_declared=True,
    )  # fmt: skip
    assert view.jobs[0].curve is not None
    assert view.jobs[0].curve.source == "goodput"
    alone = snapshot(
        [managed], states, capacity={}, now=NOW, restart_seconds=30.0, trust_declared=True
    )
    assert alone.jobs[0].curve is not None
    assert alone.jobs[0].curve.source == "declared"


def test_counts_where_no_batch_fits_are_not_allowed() -> None:
    """20 workers need a global batch of at least 20 x 1 > 16: no batch fits there."""
    small = GradientReport(noise_scale=100.0, base_batch=4, max_local_batch=8,
                           max_global_batch=16, steps=STEPS[:1])  # fmt: skip
    managed = job(low=1, high=20)
    goodput = price_job(managed, small)
    assert goodput is not None
    assert max(goodput.batches) == 16
    base = JobSnapshot(namespace="ns", name="bert", min_replicas=1, max_replicas=20, replicas=2)
    seen = priced_snapshot(base, goodput)
    assert seen.allowed_replicas == tuple(range(1, 17))


def test_allowed_counts_are_the_only_ones_priced() -> None:
    managed = job(allowed_replicas=(2, 4, 8))
    goodput = price_job(managed, report())
    assert goodput is not None
    assert sorted(goodput.batches) == [2, 4, 8]


@pytest.mark.parametrize(
    "bad",
    [
        GradientReport(float("nan"), 32, 128, 2048),
        GradientReport(-1.0, 32, 128, 2048),
        GradientReport(10.0, 0, 128, 2048),
        GradientReport(10.0, 4096, 128, 2048),
        GradientReport(10.0, 32, 0, 2048),
    ],
)
def test_a_malformed_report_is_not_priced(bad: GradientReport) -> None:
    assert price_job(job(), bad) is None


def test_observations_match_what_fit_is_given() -> None:
    """Sanity of the table above: the fit over them is not the prior."""
    fitted = fit(observations(report()))
    assert fitted != PRIOR
    assert isinstance(observations(report())[0], StepObservation)


def series(name: str, value: str, **labels: str) -> dict[str, object]:
    return {"metric": {"__name__": name, "namespace": "ns", "job_name": "bert", **labels},
            "value": [0, value]}  # fmt: skip


def test_the_readers_vector_becomes_reports() -> None:
    """Only jobs with noise scale, base batch and bounds; unusable values and labels left out."""
    step = {"replicas": "2", "local_batch": "32", "accum_steps": "0"}
    result = [
        series(c.GRADIENT_NOISE_SCALE, "250.5"),
        series(c.BASE_BATCH, "32"),
        series(c.MAX_LOCAL_BATCH, "128"),
        series(c.MAX_GLOBAL_BATCH, "2048"),
        series(c.LOCAL_BATCH, "NaN"),
        series(c.STEP_SECONDS, "0.3", **step),
        series(c.STEP_SECONDS, "0.2", replicas="1", local_batch="x", accum_steps="0"),
        series(c.STEP_SECONDS, "-1", **step | {"replicas": "4"}),
        {
            "metric": {"__name__": c.GRADIENT_NOISE_SCALE, "namespace": "ns", "job_name": "half"},
            "value": [0, "3"],
        },
    ]
    keys = {("ns", "bert"), ("ns", "half")}
    assert reports_by_job(result, keys=keys) == {
        ("ns", "bert"): GradientReport(250.5, 32, 128, 2048, steps=(StepTime(2, 32, 0, 0.3),))
    }
    assert reports_by_job(result, keys={("ns", "other")}) == {}


def running(replicas: int, local: int, accum: int = 0, phi: float = 500.0) -> GradientReport:
    return dataclasses.replace(report(phi), replicas=replicas, local_batch=local, accum_steps=accum)


def test_the_batch_the_job_runs_is_priced_by_the_same_model_and_noise() -> None:
    goodput = price(running(2, 32), counts=[1, 2, 4])
    assert goodput.running is not None
    model = fit(observations(report()))
    rate = 2 * 32 / step_seconds(model, nodes=2, replicas=2, local_batch=32, accum_steps=0)
    noise = GradientNoise(500.0, 32)
    assert goodput.running.samples_per_second == pytest.approx(rate)
    assert goodput.running.efficiency == pytest.approx(efficiency(noise, 64))
    priced = priced_at(goodput, 2)
    assert priced is not None
    assert priced.running is not None
    best = goodput.batches[2]
    share = rate * efficiency(noise, 64) / (best.samples_per_second * best.efficiency)
    assert priced.running_share == pytest.approx(share)
    assert share < 1  # the best batch at 2 workers is not the job's 64


def test_a_job_running_the_priced_batch_has_all_of_its_goodput() -> None:
    best = price(report(), counts=[2]).batches[2]
    priced = priced_at(price(running(2, best.local_batch, best.accum_steps), counts=[2]), 2)
    assert priced is not None
    assert priced.running_share == pytest.approx(1.0)


@pytest.mark.parametrize(
    ("reported", "count"),
    [
        (report(), 2),  # no batch reported
        (running(4, 64), 2),  # running at another count than the one priced
        (running(1, 16), 1),  # below its base batch
    ],
)
def test_no_running_batch_is_priced_at_a_count_the_job_does_not_run_at_it(
    reported: GradientReport, count: int
) -> None:
    priced = priced_at(price(reported, counts=[1, 2, 4]), count)
    assert priced is not None
    assert priced.running is None
    assert priced.running_share is None
