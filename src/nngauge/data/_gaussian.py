"""Gaussian inputs with labels from a random linear teacher."""

from __future__ import annotations

import numpy as np
import torch

from nngauge.data._splits import LabelledData
from nngauge.errors import invalid


def gaussian(n: int, d: int, *, seed: int = 0, n_classes: int = 2) -> LabelledData:
    """``n`` samples x ~ N(0, I_d) labelled by a random linear teacher.

    label(x) = argmax_c (x^T W)_c with W (d, n_classes) i.i.d. N(0, 1), drawn from the same seed:
    a learnable task whose inputs are the isotropic Gaussian the theory papers assume.

    Args:
        n: samples (>= 1); d: input dimension (>= 1); n_classes: classes (>= 2).
        seed: the same seed gives the same inputs, teacher and labels.

    Returns:
        :class:`LabelledData` with inputs (n, d) float32 and labels (n,) int64.

    Example:
        >>> from nngauge.data import gaussian
        >>> data = gaussian(100, 8, seed=0, n_classes=3)
        >>> tuple(data.inputs.shape), set(data.labels.tolist()) <= {0, 1, 2}
        ((100, 8), True)
    """
    where = "gaussian()"
    for name, value, least in (("n", n, 1), ("d", d, 1), ("n_classes", n_classes, 2)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < least:
            raise invalid(where, f"{name} an integer >= {least}", f"{name}={value!r}",
                          f"pass {name} >= {least}")
    rng = np.random.default_rng(seed)
    inputs = rng.standard_normal((n, d))
    teacher = rng.standard_normal((d, n_classes))
    return LabelledData(torch.as_tensor(inputs, dtype=torch.float32),
                        torch.as_tensor((inputs @ teacher).argmax(axis=1), dtype=torch.int64))
