"""When a :class:`~nngauge.training.Tracker` measures: every N steps, log-spaced steps, given
steps, or at the end of every epoch.

Log-spaced steps follow how measures change during training: fast at first, then slowly, so
that studies of linear-region density over training (Humayun, Balestriero and Baraniuk, "Deep
Networks Always Grok and Here is Why", ICML 2024) measure at optimization steps spaced evenly
on a log axis.

Example:
    >>> log_steps(5, 40)
    [0, 1, 2, 3, 4, 6, 10, 16, 25, 40]
    >>> as_schedule(("log", 5))(6), as_schedule(("log", 5))(7)
    (True, False)
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass
from typing import Any, Callable, Literal

from nngauge._constraints import Integer, constrained
from nngauge.errors import invalid

Unit = Literal["step", "epoch"]
WHERE = "Tracker()"
FORMS = ('an integer N >= 1 (every N steps), ("log", points per decade), a list of step '
         'indices, or "epoch"')


@constrained(n_per_decade=Integer(1), stop=Integer(0))
def log_steps(n_per_decade: int, stop: int) -> list[int]:
    """Step 0 and the distinct round(10^(k / n_per_decade)) <= ``stop``, k = 0, 1, 2, ...

    Args:
        n_per_decade: points per factor of 10 (>= 1); e.g. 5 gives 1, 2, 3, 4, 6, 10, 16, ...
        stop: the last step considered (>= 0).

    Returns:
        The steps in increasing order.

    Example:
        >>> log_steps(4, 100)
        [0, 1, 2, 3, 6, 10, 18, 32, 56, 100]
    """
    return _log_steps(n_per_decade, stop)


def _log_steps(n_per_decade: int, stop: int) -> list[int]:
    """:func:`log_steps` without the checks (``as_schedule`` checks once, calls it each step)."""
    steps, k = [0], 0
    while (step := round(10 ** (k / n_per_decade))) <= stop:
        if step != steps[-1]:
            steps.append(step)
        k += 1
    return steps


@dataclass(frozen=True)
class Schedule:
    """A rule saying at which indices (steps, or epochs for ``unit="epoch"``) to measure.

    Attributes:
        unit: "step" (:meth:`Tracker.step` measures) or "epoch" (:meth:`Tracker.epoch_end`).
        text: the rule in words.
    """

    unit: Unit
    text: str
    fires: Callable[[int], bool]

    def __call__(self, index: int) -> bool:
        """Whether to measure at this step (or epoch) index."""
        return self.fires(index)

    def __repr__(self) -> str:
        return f"Schedule({self.text})"


def as_schedule(spec: Any) -> Schedule:
    """A :class:`Schedule` from any accepted form (see ``FORMS``)."""
    if isinstance(spec, Schedule):
        return spec
    if isinstance(spec, str) and spec == "epoch":
        return Schedule("epoch", "every epoch", lambda epoch: True)
    if isinstance(spec, int) and not isinstance(spec, bool):
        check_count(spec, "schedule", WHERE)
        return Schedule("step", "every step" if spec == 1 else f"every {spec} steps",
                        lambda step: step % spec == 0)
    if isinstance(spec, tuple) and len(spec) == 2 and spec[0] == "log":
        n = spec[1]
        check_count(n, "points per decade", WHERE)
        return Schedule("step", f"log-spaced, {n} per decade",
                        lambda step: step in _log_steps(n, step))
    if isinstance(spec, (list, tuple, range, set, frozenset)) and spec and all(
            isinstance(s, numbers.Integral) and not isinstance(s, bool) and s >= 0
            for s in spec):
        steps = frozenset(int(s) for s in spec)
        return Schedule("step", f"at steps {sorted(steps)}", steps.__contains__)
    raise invalid(WHERE, f"schedule {FORMS}", repr(spec),
                  'pass e.g. schedule=10, schedule=("log", 5), schedule=[0, 100, 1000] or '
                  'schedule="epoch"')


def check_count(value: Any, what: str, where: str) -> None:
    """Refuse anything but an integer >= 1."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise invalid(where, f"{what} an integer >= 1", repr(value),
                      f"pass a positive integer as {what}")
