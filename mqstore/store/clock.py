"""Time as the store sees it. The core never calls time.time() directly."""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    def now_ms(self) -> int:
        """Wall-clock milliseconds since the epoch (store timestamps)."""
        ...

    def monotonic(self) -> float:
        """Seconds on a clock that never goes back (timeouts, intervals)."""
        ...


class SystemClock:
    """The real clock."""

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def monotonic(self) -> float:
        return time.monotonic()


__all__ = ["Clock", "SystemClock"]
