"""bench-sim's spread target: every goodput run at most 10% of its job-rounds spread."""

from types import SimpleNamespace
from typing import Any

import pytest

import benchmarks.bench_sim as bench
from benchmarks.bench_sim import SPREAD_SHARE, spread_checks


def comparison(**shares: float | None) -> SimpleNamespace:
    runs = {name: SimpleNamespace(result=SimpleNamespace(spread_share=share))
            for name, share in shares.items()}  # fmt: skip
    return SimpleNamespace(runs=runs)


def test_each_policys_run_is_checked_against_the_spread_target() -> None:
    checks = spread_checks(comparison(optimus=0.02, tiresias=0.25, idle=None), "w-1 load 1.0")  # type: ignore[arg-type]
    assert [(c.detail, c.ratio, c.met) for c in checks] == [
        ("w-1 load 1.0, optimus", 0.02, True),
        ("w-1 load 1.0, tiresias", 0.25, False),
        ("w-1 load 1.0, idle", 0.0, True),  # no job ever ran: nothing spread
    ]
    assert {c.limit for c in checks} == {SPREAD_SHARE}
    assert checks[0].kind == "goodput: spread share <= 10%"


def test_the_planned_placement_switch_reaches_the_simulated_runs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen: list[Any] = []
    monkeypatch.setattr(bench, "compare", lambda **kwargs: seen.append(kwargs["config"]))
    bench.goodput_comparison("workload-5", "1.0", workers=1)
    bench.goodput_comparison("workload-5", "1.0", workers=1, planned=False)
    assert [config.planned_placement for config in seen] == [True, False]
