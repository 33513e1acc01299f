"""client-go's client-side throttle (`flowcontrol.NewTokenBucketRateLimiter`): `burst` requests
at once, then `qps` a second; a request waits for its token."""

import threading
import time
from collections.abc import Callable


class TokenBucket:
    def __init__(
        self,
        qps: float,
        burst: int,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if qps <= 0 or burst < 1:
            raise ValueError(f"a rate limit needs qps > 0 and burst >= 1, not {qps} and {burst}")
        self.qps, self.burst = qps, burst
        self._clock, self._sleep = clock, sleep
        self._tokens, self._at = float(burst), clock()  # starts full, as client-go's
        self._lock = threading.Lock()

    def wait(self) -> float:
        """Take a token, sleeping until there is one; returns the time slept."""
        with self._lock:  # reserve the token now, so waiters are served in order
            now = self._clock()
            self._tokens = min(self.burst, self._tokens + (now - self._at) * self.qps) - 1
            self._at = now
            delay = max(0.0, -self._tokens / self.qps)
        if delay:
            self._sleep(delay)
        return delay
