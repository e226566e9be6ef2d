"""Breiman's waveform-noise data set (CART book, 1984; UCI "waveform+noise").

Three triangular base waves on i = 1..21 (Breiman et al., 1984, section 2.6.2):

    h1(i) = max(6 - |i - 7|, 0)     (peak at i = 7)
    h2(i) = h1(i - 8)               (peak at i = 15)
    h3(i) = h1(i - 4)               (peak at i = 11)

A point of class c mixes two of them with u ~ U(0, 1) and adds independent N(0, 1) noise:

    class 0 (Breiman's 1): x(i) = u h1(i) + (1 - u) h2(i) + e(i)
    class 1 (Breiman's 2): x(i) = u h1(i) + (1 - u) h3(i) + e(i)
    class 2 (Breiman's 3): x(i) = u h2(i) + (1 - u) h3(i) + e(i)

and 19 pure N(0, 1) noise features follow (i = 22..40): 40 features. Hastie et al. (ESL,
section 12.3.3) write the same distribution with the waves relabelled (their h1 peaks at 11,
h2 at 15, h3 at 7); since u and 1 - u have the same law the class-conditional distributions are
the same three pairs {7, 15}, {7, 11}, {11, 15}. The UCI generator draws each class with
probability 1/3; here the classes are balanced exactly (counts differ by at most one) and their
order is shuffled, so small splits keep the NLC paper's balance filter (appendix D.1).
"""

from __future__ import annotations

from typing import Optional, Union

import numpy as np
import torch

from nngauge._constraints import SEED_OR_GENERATOR, Integer, constrained
from nngauge._random import seed_of
from nngauge._vocabulary import renamed
from nngauge.data._splits import LabelledData

N_WAVE_FEATURES = 21
N_NOISE_FEATURES = 19
CLASS_WAVES = ((0, 1), (0, 2), (1, 2))  # (h_a, h_b) mixed as u h_a + (1 - u) h_b per class


def base_waves() -> np.ndarray:
    """The three base waves h1, h2, h3 on i = 1..21, shape (3, 21).

    Example:
        >>> from nngauge.data import base_waves
        >>> base_waves().argmax(axis=1) + 1  # the peaks, at i = 7, 15, 11
        array([ 7, 15, 11])
    """
    i = np.arange(1, N_WAVE_FEATURES + 1)

    def h1(j):
        return np.maximum(6 - np.abs(j - 7), 0).astype(np.float64)

    return np.stack([h1(i), h1(i - 8), h1(i - 4)])


@renamed(seed="generator")
@constrained(n=Integer(1), generator=SEED_OR_GENERATOR)
def waveform_noise(n: int = 5000, *, generator: Optional[Union[torch.Generator, int]] = 0
                   ) -> LabelledData:
    """Sample ``n`` points of Breiman's waveform-noise data set (40 features, 3 classes).

    x(i) = u h_a(i) + (1 - u) h_b(i) + e(i) for i <= 21 and x(i) = e(i) for 22 <= i <= 40, with
    u ~ U(0, 1), e(i) ~ N(0, 1) i.i.d. and (h_a, h_b) the class's pair of base waves (see the
    module docstring). Used in the NLC paper (appendix D: 5,000 points, 3,000/1,000/1,000
    split; its only preprocessing is feature standardization).

    Args:
        n: number of samples (>= 1).
        generator: an int seed of numpy's generator (default 0; the same seed gives the same
            data), or a torch.Generator, from which one seed is drawn.

    Returns:
        :class:`LabelledData` with inputs (n, 40) float32 and labels (n,) int64 in {0, 1, 2}.

    Example:
        >>> from nngauge.data import waveform_noise
        >>> data = waveform_noise(300, generator=0)
        >>> tuple(data.inputs.shape), data.labels.bincount().tolist()
        ((300, 40), [100, 100, 100])
    """
    rng = np.random.default_rng(seed_of(generator))
    labels = rng.permutation(np.arange(n) % len(CLASS_WAVES))
    waves = base_waves()
    pairs = np.asarray(CLASS_WAVES)[labels]
    u = rng.uniform(size=(n, 1))
    signal = u * waves[pairs[:, 0]] + (1 - u) * waves[pairs[:, 1]]
    noise = rng.standard_normal((n, N_WAVE_FEATURES + N_NOISE_FEATURES))
    inputs = np.concatenate([signal, np.zeros((n, N_NOISE_FEATURES))], axis=1) + noise
    return LabelledData(torch.as_tensor(inputs, dtype=torch.float32),
                        torch.as_tensor(labels, dtype=torch.int64))
