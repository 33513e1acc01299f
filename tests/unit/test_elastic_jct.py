"""AFS-L, AFS-P and heSRPT: each rule's decisions on small instances computed by hand."""

from typing import Any

import numpy as np
import pytest

from autoscaler.policies import elastic_jct
from autoscaler.policies.contract import Snapshot
from autoscaler.policies.elastic_jct import fitted_exponent, hesrpt_shares
from autoscaler.policies.speedup import JobCurve
from tests.unit.test_policies import GPU, decide, job

LINEAR = {1: 10.0, 2: 20.0, 3: 30.0}
SATURATING = {1: 10.0, 2: 12.0, 3: 13.0}
SUBLINEAR = {1: 10.0, 2: 11.0, 3: 11.5}
SQRT = {n: 10.0 * n**0.5 for n in range(1, 9)}


def jobs_of(*specs: tuple[str, dict[int, float], float], high: int = 3, **extra: Any) -> list:
    return [
        job(name, replicas=1, high=high, throughput=curve, remaining_samples=samples, **extra)
        for name, curve, samples in specs
    ]


@pytest.mark.parametrize(
    ("specs", "gpus", "expected", "why"),
    [
        # a: 10 s left, gain 10/10 = 1 > b's 2/12; then a 5 s left, gain 10/20 = 0.5 > 2/12.
        ([("a", LINEAR, 100.0), ("b", SATURATING, 1000.0)], 4, {"a": 3, "b": 1},
         "the shorter job gains more"),
        # a (shorter) gains 1/10 = 0.1; b gains 10/20 = 0.5, then 10/30 = 0.33: b takes both.
        ([("a", SUBLINEAR, 100.0), ("b", LINEAR, 1000.0)], 4, {"a": 1, "b": 3},
         "the longer job gains more relative to its new throughput"),
        # a gains 5/10 = 0.5, b 10/20 = 0.5: a tie stays with the shorter job.
        ([("a", {1: 10.0, 2: 15.0}, 100.0), ("b", {1: 10.0, 2: 20.0}, 1000.0)], 3,
         {"a": 2, "b": 1}, "a tie goes to the shorter job"),
    ],
)  # fmt: skip
def test_afs_l_hands_out_workers_by_the_pairwise_rule(
    specs: list[tuple[str, dict[int, float], float]], gpus: int, expected: dict[str, int], why: str
) -> None:
    high = max(max(curve) for _, curve, _ in specs)
    snapshot = Snapshot(capacity={GPU: gpus}, jobs=jobs_of(*specs, high=high))
    assert {name: count for name, (count, _) in decide("afs-l", snapshot).items()} == expected, why


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        ("afs-l", {"a": 1, "b": 2}),  # declared: b has 100 samples (10 s), a 1,000 (100 s)
        # estimated from attained service: a 600 worker-s x 10/s (600 s), b 6,000 s x 10/s
        ("afs-p", {"a": 2, "b": 1}),
    ],
)
def test_afs_p_ranks_by_attained_service_where_afs_l_reads_the_declared_work(
    policy: str, expected: dict[str, int]
) -> None:
    jobs = [
        job("a", replicas=1, high=3, throughput=LINEAR, remaining_samples=1000.0,
            attained_seconds=60.0),
        job("b", replicas=1, high=3, throughput=LINEAR, remaining_samples=100.0,
            attained_seconds=6000.0),
    ]  # fmt: skip
    decided = decide(policy, Snapshot(capacity={GPU: 3}, jobs=jobs))
    assert {name: count for name, (count, _) in decided.items()} == expected


@pytest.mark.parametrize(
    ("exponents", "shares"),
    [
        ([0.5, 0.5], [0.25, 0.75]),  # (1/2)^2, 1 - (1/2)^2
        ([0.5, 0.5, 0.5], [1 / 9, 3 / 9, 5 / 9]),
        ([0.01, 0.01], [0.5 ** (1 / 0.99), 1 - 0.5 ** (1 / 0.99)]),  # p -> 0: nearly equal
    ],
)
def test_hesrpt_shares_are_the_papers_closed_form(
    exponents: list[float], shares: list[float]
) -> None:
    assert hesrpt_shares(exponents) == pytest.approx(shares)


@pytest.mark.parametrize(
    ("throughput", "exponent"),
    [
        (SQRT, 0.5),
        ({n: 10.0 for n in range(1, 5)}, 0.01),  # no speedup: the range's floor
        ({n: 10.0 * n for n in range(1, 5)}, 0.99),  # linear: the range's ceiling
    ],
)
def test_the_exponent_is_fitted_from_the_curve(
    throughput: dict[int, float], exponent: float
) -> None:
    curve = JobCurve(low=1, throughput=np.array(list(throughput.values())))
    assert fitted_exponent(curve) == pytest.approx(exponent)


@pytest.mark.parametrize(
    ("specs", "gpus", "high", "expected"),
    [
        # p = 0.5: the large job 1/4 of 8 GPUs, the small one 3/4.
        ([("small", SQRT, 100.0), ("large", SQRT, 1000.0)], 8, 8, {"small": 6, "large": 2}),
        # three jobs of 9 GPUs: 1/9, 3/9, 5/9.
        ([("s", SQRT, 10.0), ("m", SQRT, 100.0), ("l", SQRT, 1000.0)], 9, 8,
         {"s": 5, "m": 3, "l": 1}),
        # the small job capped at 4: the GPUs left go to the large one.
        ([("small", SQRT, 100.0), ("large", SQRT, 1000.0)], 8, 4, {"small": 4, "large": 4}),
        # linear speedup: SRPT, the large job kept at its minimum.
        ([("small", {n: 10.0 * n for n in range(1, 9)}, 100.0),
          ("large", {n: 10.0 * n for n in range(1, 9)}, 1000.0)], 8, 8,
         {"small": 7, "large": 1}),
    ],
)  # fmt: skip
def test_hesrpt_splits_the_cluster_by_size_rank(
    specs: list[tuple[str, dict[int, float], float]], gpus: int, high: int,
    expected: dict[str, int],
) -> None:  # fmt: skip
    snapshot = Snapshot(capacity={GPU: gpus}, jobs=jobs_of(*specs, high=high))
    assert {name: count for name, (count, _) in decide("hesrpt", snapshot).items()} == expected


@pytest.mark.parametrize("delta", [-1e-12, 1e-12])
@pytest.mark.parametrize(
    ("specs", "gpus", "expected"),
    [
        # 1/4 of 8 GPUs: exactly 2
        ([("small", SQRT, 100.0), ("large", SQRT, 1000.0)], 8, {"small": 6, "large": 2}),
        # 1/9, 3/9, 5/9 of 9 GPUs: exactly 1, 3 and 5
        ([("s", SQRT, 10.0), ("m", SQRT, 100.0), ("l", SQRT, 1000.0)], 9, {"s": 5, "m": 3, "l": 1}),
    ],
)
def test_hesrpt_counts_do_not_hang_on_the_exponents_last_bits(
    specs: list[tuple[str, dict[int, float], float]], gpus: int, expected: dict[str, int],
    delta: float, monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    """The exponent's last bits depend on the BLAS kernel the processor selects: a share that
    is a whole number of GPUs must give the same counts either side of it."""
    snapshot = Snapshot(capacity={GPU: gpus}, jobs=jobs_of(*specs, high=8))
    fitted = elastic_jct.fitted_exponent
    monkeypatch.setattr(elastic_jct, "fitted_exponent", lambda curve: fitted(curve) + delta)
    assert {name: count for name, (count, _) in decide("hesrpt", snapshot).items()} == expected


def test_a_job_without_throughput_keeps_its_count_and_its_gpus() -> None:
    jobs = [job("new", replicas=3), *jobs_of(("a", LINEAR, 100.0))]
    for policy in ("afs-l", "afs-p", "hesrpt"):
        decided = decide(policy, Snapshot(capacity={GPU: 5}, jobs=jobs))
        assert decided["new"] == (3, "NoThroughputData")
        assert decided["a"][0] == 2, policy
