"""scikit-learn's bundled 8x8 handwritten digits (UCI optdigits test set), no download."""

from __future__ import annotations

import torch

from nngauge.data._splits import LabelledData


def digits() -> LabelledData:
    """The 1,797 8x8 digit images bundled with scikit-learn, flattened to 64 features.

    Pixel values are the raw counts 0..16 (use :func:`nngauge.data.preprocess` for the NLC
    paper's D.2 processing). Read from scikit-learn's package data, never downloaded.

    Returns:
        :class:`LabelledData` with inputs (1797, 64) float32 and labels (1797,) int64 in 0..9.

    Example:
        >>> from nngauge.data import digits
        >>> data = digits()
        >>> tuple(data.inputs.shape), int(data.labels.max()) + 1
        ((1797, 64), 10)
    """
    from sklearn.datasets import load_digits

    bunch = load_digits()
    return LabelledData(torch.as_tensor(bunch.data, dtype=torch.float32),
                        torch.as_tensor(bunch.target, dtype=torch.int64))
