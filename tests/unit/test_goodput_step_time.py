"""Pollux's step-time model and its fit, on hand-computed values."""

import math
from dataclasses import replace

import pytest

from autoscaler.goodput.step_time import (
    FLOOR,
    PRIOR,
    StepObservation,
    StepTimeModel,
    fit,
    network_seconds,
    step_seconds,
    throughput,
)

MODEL = StepTimeModel(
    alpha_c=0.1, beta_c=0.01, alpha_n=0.5, beta_n=0.1, alpha_r=0.2, beta_r=0.05, gamma=1.0
)


@pytest.mark.parametrize(
    ("config", "seconds", "samples_per_second"),
    [
        ((1, 1, 10, 0), 0.2, 50.0),  # compute only
        ((1, 4, 10, 0), 0.5, 80.0),  # 0.2 + (0.2 + 0.05 * 2)
        ((2, 8, 10, 1), 1.5, 8 * 10 * 2 / 1.5),  # 0.2 + (0.2 + 0.5 + 0.1 * 6)
        ((1, 1, 10, 2), 0.6, 50.0),  # three micro-steps, no network
    ],
)
def test_step_time(
    config: tuple[int, int, int, int], seconds: float, samples_per_second: float
) -> None:
    nodes, replicas, local, accum = config
    kwargs = {"nodes": nodes, "replicas": replicas, "local_batch": local, "accum_steps": accum}
    assert step_seconds(MODEL, **kwargs) == pytest.approx(seconds)
    assert throughput(MODEL, **kwargs) == pytest.approx(samples_per_second)


@pytest.mark.parametrize(
    ("nodes", "replicas", "network"),
    [
        (1, 1, 0.0),  # one replica: no network, whatever the widest
        (1, 2, 0.2),
        (1, 4, 0.3),  # 0.2 + 0.05 * 2, at the widest
        (1, 8, 0.3),  # past it: as at the widest
        (2, 8, 0.7),  # 0.5 + 0.1 * 2: across nodes, as at 4 replicas
    ],
)
def test_the_network_past_the_widest_count_is_as_at_it(
    nodes: int, replicas: int, network: float
) -> None:
    model = replace(MODEL, widest=4)
    assert network_seconds(model, nodes=nodes, replicas=replicas) == pytest.approx(network)


def test_gamma_overlaps_compute_and_network() -> None:
    model = StepTimeModel(0.1, 0.01, 0.5, 0.1, 0.2, 0.05, gamma=2.0)
    # T_acc 0.4, T_net 0.2: sqrt(0.16 + 0.04)
    assert step_seconds(model, nodes=1, replicas=2, local_batch=30, accum_steps=0) == (
        pytest.approx(math.sqrt(0.2))
    )


def test_bad_parameters_are_errors() -> None:
    with pytest.raises(ValueError, match="gamma"):
        StepTimeModel(0.1, 0.01, 0.5, 0.1, 0.2, 0.05, gamma=11.0)
    with pytest.raises(ValueError, match="alpha_c"):
        StepTimeModel(0.0, 0.01, 0.5, 0.1, 0.2, 0.05, gamma=1.0)
    with pytest.raises(ValueError, match="widest"):
        StepTimeModel(0.1, 0.01, 0.5, 0.1, 0.2, 0.05, gamma=1.0, widest=0)


def _observed(
    model: StepTimeModel, configs: list[tuple[int, int, int, int]]
) -> list[StepObservation]:
    return [
        StepObservation(n, r, m, s, step_seconds(model, nodes=n, replicas=r, local_batch=m,
                                                 accum_steps=s))
        for n, r, m, s in configs
    ]  # fmt: skip


def test_fit_reproduces_the_observed_step_times() -> None:
    true = StepTimeModel(0.05, 0.004, 0.3, 0.02, 0.08, 0.01, gamma=1.5)
    configs = [(1, 1, 16, 0), (1, 1, 64, 0), (1, 2, 32, 0), (1, 4, 32, 0), (1, 4, 64, 1),
               (2, 8, 32, 0), (4, 16, 16, 0), (2, 6, 64, 0)]  # fmt: skip
    fitted = fit(_observed(true, configs))
    for observation in _observed(true, configs):
        predicted = step_seconds(
            fitted, nodes=observation.nodes, replicas=observation.replicas,
            local_batch=observation.local_batch, accum_steps=observation.accum_steps,
        )  # fmt: skip
        assert predicted == pytest.approx(observation.step_seconds, rel=0.05)


def test_no_observation_keeps_the_prior() -> None:
    assert fit([]) == PRIOR


def test_single_replica_data_leaves_the_network_at_the_prior() -> None:
    true = StepTimeModel(0.05, 0.004, 0.3, 0.02, 0.08, 0.01, gamma=1.5)
    fitted = fit(_observed(true, [(1, 1, 16, 0), (1, 1, 64, 0)]))
    assert (fitted.alpha_r, fitted.beta_r) == (FLOOR, FLOOR)
    assert fitted.alpha_n == pytest.approx(1.1 * FLOOR)  # at least 1.1x within one node
    assert fitted.alpha_c == pytest.approx(0.05, rel=0.05)
    assert fitted.beta_c == pytest.approx(0.004, rel=0.05)


def test_one_local_batch_splits_compute_evenly() -> None:
    observations = [StepObservation(1, 1, 32, 0, 0.4), StepObservation(1, 1, 32, 1, 0.8)]
    fitted = fit(observations)
    assert fitted.alpha_c == pytest.approx(0.2)  # half of the 0.4 s per micro-step
    assert fitted.beta_c == pytest.approx(0.2 / 32, rel=0.01)


def test_no_multi_node_data_prices_crossing_nodes_above_one_node() -> None:
    true = StepTimeModel(0.05, 0.004, 0.3, 0.02, 0.08, 0.01, gamma=1.0)
    fitted = fit(_observed(true, [(1, 1, 16, 0), (1, 1, 64, 0), (1, 2, 32, 0), (1, 4, 32, 0)]))
    assert fitted.alpha_n >= 1.1 * fitted.alpha_r
    assert fitted.beta_n >= 1.1 * fitted.beta_r


def test_a_fit_prices_counts_past_the_widest_observed_at_its_network_time() -> None:
    """Observed up to 6 replicas, the fit does not extrapolate the network's growth: 16 replicas
    are priced at the network time of 6 until the job has run there."""
    true = StepTimeModel(0.05, 0.004, 0.3, 0.02, 0.08, 0.01, gamma=1.0)
    fitted = fit(_observed(true, [(1, 1, 32, 0), (2, 2, 32, 0), (4, 4, 32, 0), (6, 6, 32, 0)]))
    assert fitted.widest == 6
    widest = network_seconds(fitted, nodes=6, replicas=6)
    assert widest > network_seconds(fitted, nodes=4, replicas=4)  # it grows within the range
    assert network_seconds(fitted, nodes=16, replicas=16) == widest
    assert network_seconds(true, nodes=16, replicas=16) > 1.5 * widest  # the truth grows on
