"""A reproduction at several seeds: each seed's verdict, the majority and the spread.

A statistical reproduction (its verdict rests on random draws: sampled architectures, trained
networks, random directions) runs at ``Reproduction.n_seeds`` consecutive seeds by default (3;
``nngauge reproduce --seeds N`` or ``run(n_seeds=N)`` for another count). Each seed is computed
and judged on its own; the reproduction's verdict is the majority status with the count that
agrees and every seed's status in its reason, and each printed value is shown with its spread
(smallest and largest over the seeds). A tie (e.g. three seeds, three statuses) takes the
weakest of the tied statuses (:data:`WEAKEST_FIRST`): a claim reproduced at one seed and
failed at another is not called reproduced.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional, Sequence

if TYPE_CHECKING:  # the records are defined in _base, which imports this module
    from nngauge.reproduce._base import Computed, Verdict

WEAKEST_FIRST: tuple[str, ...] = ("differs", "paper error", "qualitatively", "reproduced")
"""The statuses from weakest to strongest claim: a tied majority takes the weakest."""


@dataclass(frozen=True)
class SeedOutcome:
    """One seed's run of a reproduction.

    Attributes:
        seed: the int seed (None: the caller's torch.Generator).
        computed: its numbers.
        verdict: its judge's verdict (None: the reproduction has no judge).
    """

    seed: Optional[int]
    computed: "Computed"
    verdict: Optional["Verdict"]

    @property
    def status(self) -> str:
        """The verdict's status ("unjudged" without a judge)."""
        return "unjudged" if self.verdict is None else self.verdict.status


def seed_list(seed: int, count: int) -> tuple[int, ...]:
    """The seeds of a run at ``count`` seeds from ``seed``: ``seed, seed + 1, ...``."""
    return tuple(range(seed, seed + count))


def majority_verdict(outcomes: Sequence[SeedOutcome]) -> Optional["Verdict"]:
    """The verdict of several seeds: the most frequent status (ties: the weakest), its reason
    the agreement (``"2 of 3 seeds agree: seed 0 reproduced, seed 1 reproduced, seed 2
    differs"``) then the reason of the first seed with that status; a software check when every
    seed's verdict is one. One seed: its own verdict unchanged. None without verdicts."""
    from nngauge.reproduce._base import Verdict

    verdicts = [outcome.verdict for outcome in outcomes]
    if not verdicts or any(verdict is None for verdict in verdicts):
        return None
    if len(outcomes) == 1:
        return verdicts[0]
    counts = Counter(verdict.status for verdict in verdicts)
    most = max(counts.values())
    status = next(s for s in WEAKEST_FIRST if counts.get(s) == most)
    first = next(outcome for outcome in outcomes if outcome.status == status)
    return Verdict(status, f"{agreement_text(outcomes, status)}. Seed {first.seed}: "
                   f"{first.verdict.reason}",
                   software_check=all(verdict.software_check for verdict in verdicts))


def agreement_text(outcomes: Sequence[SeedOutcome], status: str) -> str:
    """``"2 of 3 seeds agree on differs: seed 0 reproduced, seed 1 differs, seed 2 differs"``."""
    agree = sum(outcome.status == status for outcome in outcomes)
    each = ", ".join(f"seed {outcome.seed} {outcome.status}" for outcome in outcomes)
    return f"{agree} of {len(outcomes)} seeds agree on {status}: {each}"


def spread(outcomes: Sequence[SeedOutcome], key: str) -> Optional[tuple[float, float]]:
    """The smallest and largest finite value of the comparison ``key`` over the seeds (None
    with one seed, or when fewer than two seeds give a finite number for it)."""
    values = []
    for outcome in outcomes:
        for comparison in outcome.computed.comparison:
            if comparison.key == key and isinstance(comparison.ours, (int, float)) \
                    and math.isfinite(comparison.ours):
                values.append(float(comparison.ours))
    return (min(values), max(values)) if len(values) >= 2 else None


def seed_rows(outcomes: Sequence[SeedOutcome]) -> tuple[tuple[str, ...], list[tuple]]:
    """The per-seed table written to ``NAME_seeds.csv``, one row per seed and comparison (long
    format: no comparison key can collide with a column): the seed, its verdict's status, the
    comparison's key and our value."""
    rows = [(outcome.seed, outcome.status, comparison.key, comparison.ours)
            for outcome in outcomes for comparison in outcome.computed.comparison]
    return ("seed", "verdict", "key", "ours"), rows
