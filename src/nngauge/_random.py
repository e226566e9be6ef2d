"""Randomness in one vocabulary: every public function takes ``generator``, which is a
``torch.Generator``, an int seed, or None (see ``docs/api.md``).

Two readings, one rule (the same generator state, or the same int, gives the same result):

- :func:`torch_generator` for code drawing from torch: a generator as given, an int seed as a
  fresh ``torch.Generator().manual_seed(seed)``, None as None (torch's global generator);
- :func:`seed_of` for code seeding something else (numpy, ``torch.manual_seed`` around a model
  build): an int as it is, a generator as one draw from it (which advances it).

torch is imported only when a function is called, so torch-free layers may import this module.

Example:
    >>> seed_of(7)
    7
    >>> import torch
    >>> seed_of(torch.Generator().manual_seed(0)) == seed_of(torch.Generator().manual_seed(0))
    True
"""

from __future__ import annotations

import numbers
from typing import Any, Optional

SEED_BOUND = 2**31 - 1
"""Seeds drawn from a generator lie in [0, SEED_BOUND): numpy's and torch's seeders take them."""


def _int_seed(generator: Any) -> Optional[int]:
    """``generator`` as a Python int when it is an integer (Python or numpy, not a bool: the
    constraints accept numpy integers as seeds), else None."""
    if isinstance(generator, numbers.Integral) and not isinstance(generator, bool):
        return int(generator)
    return None


def seed_of(generator: Any) -> int:
    """An int seed: ``generator`` itself when it is an int, else one draw in [0, 2^31 - 1)
    from the ``torch.Generator`` (the draw reproductions have always used to seed numpy)."""
    seed = _int_seed(generator)
    if seed is not None:
        return seed
    import torch

    return int(torch.randint(0, SEED_BOUND, (1,), generator=generator))


def torch_generator(generator: Any) -> Optional[Any]:
    """A ``torch.Generator`` to draw from: as given, a fresh one seeded with an int, or None
    (torch's global generator)."""
    seed = _int_seed(generator)
    if seed is not None:
        import torch

        return torch.Generator().manual_seed(seed)
    return generator


__all__ = ["SEED_BOUND", "seed_of", "torch_generator"]
