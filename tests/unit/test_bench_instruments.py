"""The benchmarks' request tallies: a difference of two snapshots is what happened between them."""

from collections import Counter

from benchmarks.instruments import KubeStats, diff

GET, POST = ("GET", "pods"), ("POST", "pods")


def test_a_diff_counts_only_what_happened_between_the_snapshots() -> None:
    before = KubeStats(
        requests=3, writes=1, calls=Counter({GET: 2, POST: 1}), failed=Counter(),
        total_s={GET: 0.2, POST: 0.1}, send_s={GET: 0.1, POST: 0.05},
    )  # fmt: skip
    after = KubeStats(
        requests=5, writes=3, calls=Counter({GET: 2, POST: 3}), failed=Counter({POST: 1}),
        total_s={GET: 0.2, POST: 0.4}, send_s={GET: 0.1, POST: 0.25},
    )  # fmt: skip
    between = diff(after, before)
    assert (between.requests, between.writes) == (2, 2)
    assert between.calls == Counter({POST: 2})  # a kind not called since is left out
    assert between.failed == Counter({POST: 1})
    assert between.total_s[GET] == 0.0
    assert abs(between.total_s[POST] - 0.3) < 1e-9
    assert abs(between.send_s[POST] - 0.2) < 1e-9
