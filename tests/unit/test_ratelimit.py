"""The client-side throttle: client-go's token bucket, with a clock the test moves."""

import pytest

from autoscaler.clients.ratelimit import TokenBucket


class Clock:
    """Time that passes only when something sleeps."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_a_burst_goes_at_once_then_requests_come_at_qps() -> None:
    clock = Clock()
    bucket = TokenBucket(20, 30, clock=clock, sleep=clock.sleep)  # upstream's defaults
    assert [bucket.wait() for _ in range(30)] == [0.0] * 30
    assert bucket.wait() == pytest.approx(0.05)
    assert bucket.wait() == pytest.approx(0.05)
    assert clock.now == pytest.approx(0.1)


def test_idle_time_refills_up_to_the_burst() -> None:
    clock = Clock()
    bucket = TokenBucket(10, 2, clock=clock, sleep=clock.sleep)
    bucket.wait(), bucket.wait()
    clock.now += 60.0  # a minute idle refills two tokens, not six hundred
    assert [bucket.wait() for _ in range(3)] == [0.0, 0.0, pytest.approx(0.1)]


@pytest.mark.parametrize(("qps", "burst"), [(0, 30), (-1, 30), (20, 0)])
def test_a_limit_that_would_block_forever_is_refused(qps: float, burst: int) -> None:
    with pytest.raises(ValueError, match="needs qps > 0 and burst >= 1"):
        TokenBucket(qps, burst)
