"""``max_seconds`` for work done in order (the pieces of a path, the layers of a kernel), by
estimate: the time so far over the share of the work done."""

from __future__ import annotations

import time
from typing import Callable, Optional

from nngauge.errors import BudgetExceededError, invalid

DEFAULT_MAX_SECONDS = 60.0
"""Default ``max_seconds`` of the measures that estimate their time as they go."""
TIMED_SECONDS = 1.0
"""Seconds of work timed before the estimate of the whole is trusted."""


class TimeBudget:
    """Once :data:`TIMED_SECONDS` have passed, the time so far over the share of the work done
    estimates the whole, and an estimate over ``max_seconds`` is refused at once (with it), so
    that work far too big is refused in about a second instead of run.

    Args:
        where: the measure, for the message.
        max_seconds: the budget (None: no limit).
        what: what the budget bounds, e.g. "an exact count" (the message expects it "within
            max_seconds=...").
        whole: the whole work, e.g. "the path".
        fix: how to shorten it; the message adds that ``max_seconds=None`` runs it anyway.
    """

    def __init__(self, where: str, max_seconds: Optional[float], *, what: str, whole: str,
                 fix: str) -> None:
        self.where, self.max_seconds = where, max_seconds
        self.what, self.whole, self.fix = what, whole, fix
        self.start = time.perf_counter()

    def check(self, done: float, progress: Callable[[float], str]) -> None:
        """Refuse if the work up to the share ``done`` in (0, 1] took long enough to trust and
        predicts more than ``max_seconds`` for the whole; ``progress(spent)`` says, for the
        message, what was done in the ``spent`` seconds."""
        spent = time.perf_counter() - self.start
        if self.max_seconds is None or spent <= TIMED_SECONDS or spent / done <= self.max_seconds:
            return
        raise invalid(self.where, f"{self.what} within max_seconds={self.max_seconds:g}",
                      f"an estimated {spent / done:,.0f} s for {self.whole} ({progress(spent)})",
                      f"{self.fix}, or pass max_seconds=None (or a larger budget) to run it "
                      "anyway", error=BudgetExceededError)


__all__ = ["DEFAULT_MAX_SECONDS", "TIMED_SECONDS", "TimeBudget"]
