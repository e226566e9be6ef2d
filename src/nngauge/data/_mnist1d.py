"""MNIST-1D (Greydanus & Kobak, "Scaling Down Deep Learning with MNIST-1D", ICML 2024, PMLR
235, arXiv:2011.14439; first version Greydanus, "Scaling down deep learning", 2020): 10
classes of length-40 signals, generated here by the published procedure, nothing downloaded.

Each class has one hand-drawn 12-point template (figure 1 of the paper), standardized, shifted
to start and end at 0, divided by 6. A sample of class c is that template with five random
transformations, drawn in this order from numpy's legacy ``RandomState(seed)`` (the reference
implementation ``mnist1d.data.make_dataset``, whose defaults are the constants below):

1. pad: p = 36 + floor(25 u1) zeros appended (u ~ U(0, 1)), then linear interpolation of the
   12 + p points onto 72 = 12 + 60 points (both on [0, 1]);
2. scale by 1 + 0.4 (u2 - 0.5);
3. translate: a circular shift by k, uniform in {0, ..., 47};
4. correlated noise: where the signal is exactly 0 (the padding), the value is replaced by
   g * (0.25 z), z ~ N(0, I_72) and g a Gaussian filter of standard deviation 2 samples (scipy's
   ``gaussian_filter``: radius 8, reflected edges); then i.i.d. noise 0.02 z' everywhere;
5. shear: minus a ramp a * linspace(-1/2, 1/2, 72), a = 0.75 (u3 - 0.5); then linear
   interpolation onto 40 points.

The samples are made class by class (class c has n // 10 samples, one more when c < n mod 10;
the reference makes 10 (n // 10), the same for n a multiple of 10), shuffled by one
permutation, standardized with the mean and standard deviation of all n x 40 values, and cut
into the first ``n_train`` (training) and the rest (test). With n = 5,000 and seed 42 this is
the published data set (``mnist1d_data.pkl``: 4,000 training, 1,000 test samples): the package
``mnist1d`` 0.0.2.post1 and this module give the same float64 values to the last bit (numpy 2.4,
scipy 1.17), and both differ from the 2020 pickle by at most 9e-16 (library rounding).
"""

from __future__ import annotations

from typing import Optional, Union

import numpy as np
import torch

from nngauge._constraints import SEED_OR_GENERATOR, Choice, Integer, constrained
from nngauge._random import seed_of
from nngauge.data._splits import LabelledData, TrainTest

N_CLASSES = 10
LENGTH = 40
"""Points per signal (the package's ``final_seq_length``)."""
PUBLISHED_SEED = 42
"""The reference implementation's seed: ``mnist1d(generator=42)`` is the published data set."""

# The reference implementation's defaults (mnist1d.data.get_dataset_args)
TEMPLATE_LENGTH = 12
PADDING = (36, 60)
SCALE_COEFF = 0.4
MAX_TRANSLATION = 48
CORR_NOISE_SCALE = 0.25
CORR_NOISE_SIGMA = 2.0
IID_NOISE_SCALE = 0.02
SHEAR_SCALE = 0.75
EPS = 1e-8
"""Added to the template before padding, so that only the padding counts as "exactly 0"."""
DILATED = TEMPLATE_LENGTH + PADDING[1]
"""Points of a signal between the padding and the final interpolation (72)."""

# The ten digit templates of the paper's figure 1, before standardization
_DIGITS = np.array([
    [5, 6, 6.5, 6.75, 7, 7, 7, 7, 6.75, 6.5, 6, 5],
    [5, 3, 3, 3.4, 3.8, 4.2, 4.6, 5, 5.4, 5.8, 5, 5],
    [5, 6, 6.5, 6.5, 6, 5.25, 4.75, 4, 3.5, 3.5, 4, 5],
    [5, 6, 6.5, 6.5, 6, 5, 5, 6, 6.5, 6.5, 6, 5],
    [5, 4.4, 3.8, 3.2, 2.6, 2.6, 5, 5, 5, 5, 5, 5],
    [5, 3, 3, 3, 3, 5, 6, 6.5, 6.5, 6, 4.5, 5],
    [5, 4, 3.5, 3.25, 3, 3, 3, 3, 3.25, 3.5, 4, 5],
    [5, 7, 7, 6.6, 6.2, 5.8, 5.4, 5, 4.6, 4.2, 5, 5],
    [5, 4, 3.5, 3.5, 4, 5, 5, 4, 3.5, 3.5, 4, 5],
    [5, 4, 3.5, 3.5, 4, 5, 5, 5, 5, 4.7, 4.3, 5],
])


def templates() -> np.ndarray:
    """The ten digit templates, shape (10, 12): each standardized, shifted to start (and end)
    at 0, divided by 6.

    Example:
        >>> from nngauge.data._mnist1d import templates
        >>> t = templates()
        >>> t.shape, bool(abs(t[:, 0]).max() == 0), bool(abs(t[:, -1]).max() < 1e-12)
        ((10, 12), True, True)
    """
    x = _DIGITS - _DIGITS.mean(axis=1, keepdims=True)
    x /= x.std(axis=1, keepdims=True)
    return (x - x[:, :1]) / 6.0


def _interpolate(grids: list[np.ndarray], which: np.ndarray, values: np.ndarray,
                 points: np.ndarray) -> np.ndarray:
    """Row i: ``np.interp(points, grid, values[i, :len(grid)])`` with ``grid = grids[which[i]]``,
    batched, in numpy's arithmetic: the knot j with grid[j] <= x < grid[j + 1], the value itself
    at a knot, else slope * (x - grid[j]) + value[j], slope = (value[j + 1] - value[j]) /
    (grid[j + 1] - grid[j]). The reference's ``interp1d(kind="linear")`` calls np.interp, so
    the results agree to the last bit.

    grids: a few increasing grids on [0, 1] (>= 2 points each, at most values.shape[1]);
    which: (n,) indices into grids; values: (n, m); points: (k,) in [0, 1]. Returns (n, k)."""
    width = values.shape[1]
    knot = np.stack([np.searchsorted(g, points, side="right") - 1 for g in grids])[which]
    last = np.array([len(g) - 2 for g in grids])[which][:, None]
    grid = np.stack([np.pad(g, (0, width - len(g)), constant_values=np.inf)
                     for g in grids])[which]
    lo = np.minimum(knot, last)
    x_lo, x_hi = np.take_along_axis(grid, lo, 1), np.take_along_axis(grid, lo + 1, 1)
    y_lo, y_hi = np.take_along_axis(values, lo, 1), np.take_along_axis(values, lo + 1, 1)
    inner = (y_hi - y_lo) / (x_hi - x_lo) * (points - x_lo) + y_lo
    at_knot = np.take_along_axis(grid, knot, 1) == points
    return np.where(at_knot, np.take_along_axis(values, knot, 1), inner)


def _draws(rng: np.random.RandomState, n: int):
    """The random numbers of the n samples, in the reference's order per sample (pad, scale,
    shift, correlated noise, i.i.d. noise, shear): one loop over samples, because the published
    data set depends on that order of one stream; every transformation is then batched."""
    u = np.empty((n, 3))
    shift = np.empty(n, dtype=np.int64)
    z = np.empty((n, 2, DILATED))
    for i in range(n):
        u[i, 0], u[i, 1] = rng.rand(), rng.rand()
        shift[i] = rng.choice(MAX_TRANSLATION)
        z[i] = rng.randn(2, DILATED)
        u[i, 2] = rng.rand()
    return u, shift, z


def _generate(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """n samples (n, 40) float64, standardized over all values, and their labels (n,), in the
    reference's order (class-major generation, then one shuffle)."""
    from scipy.ndimage import gaussian_filter1d

    rng = np.random.RandomState(seed)
    labels = np.sort(np.arange(n) % N_CLASSES)
    u, shift, z = _draws(rng, n)

    # 1. pad with p zeros, interpolate the 12 + p points onto DILATED points
    low, high = PADDING
    pads = low + (u[:, 0] * (high - low + 1)).astype(np.int64)
    padded = [np.linspace(0, 1, TEMPLATE_LENGTH + p) for p in range(low, high + 1)]
    signal = np.zeros((n, DILATED))
    signal[:, :TEMPLATE_LENGTH] = templates()[labels] + EPS
    dilated = np.linspace(0, 1, DILATED)
    x = _interpolate(padded, pads - low, signal, dilated)
    # 2. scale; 3. circular shift by k
    x = x * (1 + SCALE_COEFF * (u[:, 1:2] - 0.5))
    x = np.take_along_axis(x, (np.arange(DILATED) - shift[:, None]) % DILATED, 1)
    # 4. correlated noise in the padding, i.i.d. noise everywhere
    correlated = gaussian_filter1d(CORR_NOISE_SCALE * z[:, 0], CORR_NOISE_SIGMA, axis=1)
    x = np.where(x != 0, x, correlated) + IID_NOISE_SCALE * z[:, 1]
    # 5. shear, interpolate onto LENGTH points
    x = x - (SHEAR_SCALE * (u[:, 2:3] - 0.5)) * np.linspace(-0.5, 0.5, DILATED)
    x = _interpolate([dilated], np.zeros(n, dtype=np.int64), x, np.linspace(0, 1, LENGTH))

    order = rng.permutation(n)
    x, labels = x[order], labels[order]
    return (x - x.mean()) / x.std(), labels


@constrained(n_train=Integer(1), n_test=Integer(0), generator=SEED_OR_GENERATOR,
             dtype=Choice(torch.float32, torch.float64))
def mnist1d(n_train: int = 4000, n_test: int = 1000, *,
            generator: Optional[Union[torch.Generator, int]] = PUBLISHED_SEED,
            dtype: torch.dtype = torch.float32) -> TrainTest:
    """MNIST-1D's training and test splits: n_train + n_test signals of 40 points, 10 classes.

    Generated by the published procedure (the module docstring: templates, padding, scaling,
    translation, correlated and i.i.d. noise, shear, interpolation to 40 points; Greydanus &
    Kobak, "Scaling Down Deep Learning with MNIST-1D", ICML 2024, figure 1 and the reference
    implementation ``mnist1d.data.make_dataset``). The default, 4,000 + 1,000 samples with seed
    42, is the published data set, equal to the package's ``make_dataset()`` to the last bit
    (float64). Its published test accuracies (the paper's benchmark): logistic regression 32%,
    MLP 68%, CNN 94%.

    The n = n_train + n_test samples are made with class counts differing by at most one,
    shuffled, standardized together (mean 0, standard deviation 1 over all values), and split:
    the first n_train train, the rest test (so each split is balanced up to sampling).

    Args:
        n_train: training samples (>= 1).
        n_test: test samples (>= 0).
        generator: an int seed of numpy's legacy generator (default 42, the reference's: the
            published data set), or a torch.Generator, from which one seed is drawn.
        dtype: of the inputs: torch.float32 (default) or torch.float64 (the generator's values
            exactly).

    Returns:
        :class:`TrainTest` ``(train, test)``, each :class:`LabelledData` with inputs (n, 40)
        of ``dtype`` and labels (n,) int64 in 0..9.

    Example:
        >>> from nngauge.data import mnist1d
        >>> train, test = mnist1d(400, 100, generator=0)
        >>> tuple(train.inputs.shape), tuple(test.inputs.shape), int(train.labels.max()) + 1
        ((400, 40), (100, 40), 10)
    """
    x, labels = _generate(n_train + n_test, seed_of(generator))
    inputs = torch.as_tensor(x, dtype=dtype)
    labels = torch.as_tensor(labels, dtype=torch.int64)
    return TrainTest(LabelledData(inputs[:n_train], labels[:n_train]),
                     LabelledData(inputs[n_train:], labels[n_train:]))
