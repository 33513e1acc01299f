"""The pure helpers of `make bench-scale`: percentiles, RSS growth, the summary line, the
throughput stand-in and the per-round request accounting."""

import itertools

import pytest

from autoscaler.api.ownership import Owner
from autoscaler.engine.ports import ManagedJob
from benchmarks.bench_scale import (
    FixedCurves,
    Round,
    concave_throughput,
    cpu_summary,
    percentile,
    rss_growth_percent,
    soak_window,
    summary_line,
)
from benchmarks.instruments import process_cpu
from tests.support.clock import NOW


def test_percentile_is_nearest_rank() -> None:
    values = [float(v) for v in range(100, 0, -1)]  # unsorted on purpose
    assert percentile(values, 50) == 50.0
    assert percentile(values, 99) == 99.0
    assert percentile(values, 100) == 100.0
    assert percentile([7.0, 1.0, 3.0], 99) == 7.0  # few rounds: p99 is the slowest
    assert percentile([4.0], 50) == 4.0


def test_percentile_of_nothing_is_an_error() -> None:
    with pytest.raises(ValueError, match="no values"):
        percentile([], 50)


def test_rss_growth_compares_last_window_with_first_after_warm_up() -> None:
    warm_up = [(float(t), 500.0) for t in range(0, 60)]  # start-up peak: ignored
    first = [(float(t), 100.0) for t in range(60, 120)]
    middle = [(float(t), 105.0) for t in range(120, 540)]
    last = [(float(t), 110.0) for t in range(540, 601)]
    growth = rss_growth_percent(warm_up + first + middle + last, window=60.0)
    assert growth == pytest.approx(10.0)


def test_rss_growth_uses_medians() -> None:
    samples = [(float(t), 100.0) for t in range(0, 41)]
    samples[15] = (15.0, 1000.0)  # one outlier in the first window
    samples[38] = (38.0, 1.0)  # and one in the last
    assert rss_growth_percent(samples, window=10.0) == 0.0


def test_rss_growth_of_a_shrinking_process_is_negative() -> None:
    samples = [(float(t), 200.0 if t < 20 else 150.0) for t in range(0, 41)]
    assert rss_growth_percent(samples, window=10.0) == pytest.approx(-25.0)


def test_rss_growth_needs_room_for_warm_up_and_two_windows() -> None:
    with pytest.raises(ValueError, match="too short"):
        rss_growth_percent([(float(t), 100.0) for t in range(0, 100)], window=60.0)


def test_soak_window_is_a_minute_or_a_quarter_of_a_short_soak() -> None:
    assert soak_window(600.0) == 60.0
    assert soak_window(60.0) == 15.0


def test_summary_line_format() -> None:
    line = summary_line(jobs=5000, p50_ms=812.4, p99_ms=1934.6, requests=12.25, rss=-0.04)
    assert line == (
        "scale: jobs 5000, round p50 812 ms, p99 1935 ms, requests/round 12.2, rss growth -0.0 %"
    )


def test_throughput_curve_rises_ever_more_slowly() -> None:
    values = [concave_throughput(n) for n in range(1, 5)]
    gains = [b - a for a, b in itertools.pairwise(values)]
    assert values[0] == 100.0
    assert all(gain > 0 for gain in gains)
    assert gains == sorted(gains, reverse=True)


def _job(active: int) -> ManagedJob:
    return ManagedJob(
        namespace="ns",
        name=f"j{active}",
        min_replicas=1,
        max_replicas=4,
        replicas=2,
        active=active,
        owner=Owner.ENGINE,
        created=NOW,
    )


def test_fixed_curves_read_the_running_workers() -> None:
    source = FixedCurves()
    readings = source.read([_job(0), _job(2)], now=NOW)
    assert readings == {("ns", "j0"): None, ("ns", "j2"): concave_throughput(2)}
    assert source.progress([_job(2)], now=NOW) == {}
    assert source.last_errors == {}


def test_round_excess_counts_a_scale_get_as_part_of_its_write() -> None:
    # 4 rescales, one of whose PUTs met a 409: 5 PUTs, a GET, 4 states, 4 Events; one re-watch
    round_ = Round(
        seconds=1.0, with_saves=1.2, requests=15, writes=13, scale_gets=1, informer=1, rescaled=4
    )
    assert round_.excess == 1


def test_round_cpu_is_the_median_and_range_per_process_and_a_gone_process_is_skipped() -> None:
    def round_(**cpu: float) -> Round:
        return Round(
            seconds=1, with_saves=1, requests=0, writes=0, scale_gets=0, informer=0, rescaled=0,
            cpu=cpu,
        )  # fmt: skip

    rounds = [round_(engine=1.0, etcd=0.2), round_(engine=3.0), round_(engine=2.0, etcd=0.4)]
    assert cpu_summary(rounds) == "engine 2.00 s (1.00-3.00), etcd 0.30 s (0.20-0.40)"
    gone = 2**22 + 1  # above the kernel's largest process id: never a live process
    assert set(process_cpu({"self": "self", "gone": gone})) == {"self"}
