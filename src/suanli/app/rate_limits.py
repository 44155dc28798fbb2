"""Rate limits per caller for requests that cost the server more than a read (a dry run takes the scheduler's
lock), in the `limits` library's notation ("5/second;60/minute"): every window must have room, else
`RateLimited` with the seconds until the fullest one has. Counted in this process's memory: with several
workers, each counts its own."""

from __future__ import annotations

import math
import time
from threading import Lock

from limits import RateLimitItem, parse_many
from limits.storage import MemoryStorage
from limits.strategies import MovingWindowRateLimiter

from suanli.app.errors import RateLimited


class RateLimit:
    def __init__(self, spec: str, what: str) -> None:
        """`spec`: e.g. "5/second;60/minute" (empty: no limit); `what`: what is limited, for the message."""
        self.items: list[RateLimitItem] = parse_many(spec) if spec.strip() else []
        self.what, self.spec = what, spec
        self.limiter = MovingWindowRateLimiter(MemoryStorage())
        self._lock = Lock()  # test-then-hit of every window, as one step

    def hit(self, key: str) -> None:
        """Count one request of `key`, or raise `RateLimited` (counting nothing) when a window is full."""
        with self._lock:
            full = [item for item in self.items if not self.limiter.test(item, key)]
            if not full:
                for item in self.items:
                    self.limiter.hit(item, key)
                return
        reset_s = max(self.limiter.get_window_stats(item, key).reset_time for item in full)
        wait_s = max(1, math.ceil(reset_s - time.time()))
        raise RateLimited(f"too many {self.what} (at most {self.spec}); try again in {wait_s} s", wait_s)
