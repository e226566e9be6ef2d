"""Gaussian inputs with labels from a random linear teacher."""

from __future__ import annotations

from typing import Optional, Union

import numpy as np
import torch

from nngauge._constraints import SEED_OR_GENERATOR, Integer, constrained
from nngauge._random import seed_of
from nngauge._vocabulary import renamed
from nngauge.data._splits import LabelledData


@renamed(seed="generator")
@constrained(n=Integer(1), d=Integer(1), generator=SEED_OR_GENERATOR, n_classes=Integer(2))
def gaussian(n: int, d: int, *, generator: Optional[Union[torch.Generator, int]] = 0,
             n_classes: int = 2) -> LabelledData:
    """``n`` samples x ~ N(0, I_d) labelled by a random linear teacher.

    label(x) = argmax_c (x^T W)_c with W (d, n_classes) i.i.d. N(0, 1), drawn from the same seed:
    a learnable task whose inputs are the isotropic Gaussian the theory papers assume.

    Args:
        n: samples (>= 1); d: input dimension (>= 1); n_classes: classes (>= 2).
        generator: an int seed of numpy's generator (default 0; the same seed gives the same
            inputs, teacher and labels), or a torch.Generator, from which one seed is drawn.

    Returns:
        :class:`LabelledData` with inputs (n, d) float32 and labels (n,) int64.

    Example:
        >>> from nngauge.data import gaussian
        >>> data = gaussian(100, 8, generator=0, n_classes=3)
        >>> tuple(data.inputs.shape), set(data.labels.tolist()) <= {0, 1, 2}
        ((100, 8), True)
    """
    rng = np.random.default_rng(seed_of(generator))
    inputs = rng.standard_normal((n, d))
    teacher = rng.standard_normal((d, n_classes))
    return LabelledData(torch.as_tensor(inputs, dtype=torch.float32),
                        torch.as_tensor((inputs @ teacher).argmax(axis=1), dtype=torch.int64))
