"""The types the bundled data sets return, and random train/validation/test splits.

NLC paper appendix D.2: waveform-noise's 5,000 points were split at random into 3,000 training,
1,000 validation and 1,000 test points, i.e. ``fractions=(0.6, 0.2, 0.2)``.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Optional, Sequence, Union

import torch

from nngauge._constraints import Check, Numbers, constrained
from nngauge._vocabulary import renamed
from nngauge.errors import invalid

_POSITIVE = Numbers(0, low_open=True)
FRACTIONS = Check(lambda v: _POSITIVE.accepts(v) and abs(sum(v) - 1.0) <= 1e-6,
                  "a non-empty sequence of positive fractions summing to 1",
                  ((), (0.5, 0.4), (1.2, -0.2), (0.5, float("nan")), (0.0, 1.0), "1", 1.0))


class LabelledData(NamedTuple):
    """Inputs of shape (n, d), float32, and integer labels of shape (n,), int64.

    A NamedTuple, so it is the ``(inputs, labels)`` pair every measure accepts.
    """

    inputs: torch.Tensor
    labels: torch.Tensor


class TrainTest(NamedTuple):
    """A data set's fixed training and test splits, each :class:`LabelledData`.

    A NamedTuple, so ``train, test = nngauge.data.mnist1d()`` unpacks it as a split's parts.
    """

    train: LabelledData
    test: LabelledData


def as_labelled(data: Any, where: str) -> LabelledData:
    """``data`` as :class:`LabelledData`: a pair ``(inputs, labels)`` of equal length."""
    if not isinstance(data, (tuple, list)) or len(data) != 2:
        raise invalid(where, "an (inputs, labels) pair such as nngauge.data.waveform_noise(n)",
                      type(data).__name__, "pass LabelledData or a tuple (inputs, labels)")
    inputs, labels = (torch.as_tensor(v) for v in data)
    if inputs.ndim < 1 or labels.shape[:1] != inputs.shape[:1]:
        raise invalid(where, "inputs and labels with the same number of samples",
                      f"shapes {tuple(inputs.shape)} and {tuple(labels.shape)}",
                      "pair each input with one label")
    return LabelledData(inputs, labels)


@renamed(seed="generator")
@constrained(fractions=FRACTIONS)
def split(data: Any, fractions: Sequence[float] = (0.6, 0.2, 0.2), *,
          generator: Optional[Union[torch.Generator, int]] = 0) -> tuple[LabelledData, ...]:
    """Split ``(inputs, labels)`` at random into parts of the given fractions.

    Part sizes are ``round(n * cumsum(fractions))`` differences, so they add up to n exactly.

    Args:
        data: an ``(inputs, labels)`` pair, e.g. :func:`nngauge.data.waveform_noise`'s result.
        fractions: positive fractions summing to 1; default (0.6, 0.2, 0.2), the NLC paper's
            waveform-noise split (D.2): train, validation, test.
        generator: draws the random permutation: an int seed (default 0: the same split on
            every call) or a torch.Generator.

    Returns:
        One :class:`LabelledData` per fraction, in order.

    Example:
        >>> from nngauge.data import split, waveform_noise
        >>> train, val, test = split(waveform_noise(5000), (0.6, 0.2, 0.2), generator=0)
        >>> len(train.labels), len(val.labels), len(test.labels)
        (3000, 1000, 1000)
    """
    where = "split()"
    data = as_labelled(data, where)
    fractions = tuple(float(f) for f in fractions)
    n = len(data.labels)
    bounds = [round(n * sum(fractions[:i])) for i in range(len(fractions) + 1)]
    if any(b1 <= b0 for b0, b1 in zip(bounds, bounds[1:])):
        raise invalid(where, "at least one sample in every part", f"n={n} and {fractions}",
                      "use more data or fewer, larger parts")
    order = torch.randperm(n, generator=generator)
    return tuple(LabelledData(data.inputs[order[b0:b1]], data.labels[order[b0:b1]])
                 for b0, b1 in zip(bounds, bounds[1:]))
