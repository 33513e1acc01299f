"""The admission benchmark's targets: the waiting-jobs run against the present rule's, by ratio."""

import pytest

from autoscaler.sim.results import JobResult, RunResult
from benchmarks.bench_admission import checks


def finished(*jcts: float) -> RunResult:
    jobs = tuple(
        JobResult(f"j{i}", "p", "finished", 0.0, 0.0, jct, 0, 0.0, 0.0, None)
        for i, jct in enumerate(jcts)
    )
    return RunResult(jobs=jobs, gpus=4, first_submit=0.0, end=max(jcts), scale_writes=0)


@pytest.mark.parametrize(
    ("waiting", "mean_ratio", "p95_ratio", "met"),
    [
        (finished(90.0, 190.0), 0.933, 0.95, (True, True)),  # 140 / 150, 190 / 200
        (finished(100.0, 200.0), 1.0, 1.0, (False, True)),
        (finished(10.0, 230.0), 0.8, 1.15, (True, False)),  # a short job first, the long one late
    ],
)
def test_ratios_against_the_present_rule(
    waiting: RunResult, mean_ratio: float, p95_ratio: float, met: tuple[bool, bool]
) -> None:
    mean, p95 = checks("workload-5", "work declared", finished(100.0, 200.0), waiting)
    assert (round(mean.ratio, 3), round(p95.ratio, 3)) == (mean_ratio, p95_ratio)
    assert (mean.met, p95.met) == met
    assert mean.detail == "workload-5, work declared"
