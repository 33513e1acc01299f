"""The LP-slots benchmark: bench-sim's bound on a named workload, then at halved slots."""

import re

import pytest

from benchmarks.lp_slots import main


def test_the_bound_at_bench_sims_slots_then_halved(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--only", "default", "--halvings", "1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    found = [re.match(r"default: (\d+) slots of ([\d,]+) s: mean JCT bound ([\d,]+) s", line)
             for line in lines]  # fmt: skip
    assert all(found), lines
    slots, seconds, bounds = zip(
        *((int(m[1]), int(m[2].replace(",", "")), int(m[3].replace(",", ""))) for m in found if m),
        strict=True,
    )
    assert slots == (121, 241)  # 120 slots, then 240, before the open-ended last one
    assert seconds[1] == pytest.approx(seconds[0] / 2, abs=1)
    assert bounds[1] >= bounds[0]


def test_an_unknown_workload_is_refused_with_the_known_ones(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--only", "nowhere"])
    assert exit_.value.code == 2
    assert "known: pollux-1" in capsys.readouterr().err
