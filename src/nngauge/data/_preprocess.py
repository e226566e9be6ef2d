"""The NLC paper's input preprocessing (appendix D.2), fitted on training data.

For MNIST and CIFAR10 the paper

1. normalizes the mean and variance of each data point,
2. centers each feature,
3. finds by PCA the number k of dimensions holding 99% of the variance,
4. maps each point to k dimensions by a d x k submatrix of a d x d random orthogonal matrix,
5. multiplies the data set by one constant so that Q_{x,i} x(i) = 1.

For waveform-noise it only standardizes the features (:func:`standardize`). Every statistic is
fitted on the training inputs and the same map is applied to validation and test inputs.

Step 4 is ambiguous: the literal reading is a uniformly random d x k orthonormal frame
(``projection="haar"``), which keeps on average only k/d of the variance whatever the PCA said.
The default ``projection="pca"`` maps onto the k leading principal directions followed by a
uniformly random k x k rotation, V_k R: also a d x k submatrix of a d x d orthogonal matrix, it
keeps the 99% of variance that step 3 measured and preserves distances within that subspace.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, NamedTuple, Optional, Union

import torch

from nngauge._constraints import Choice, Real, constrained
from nngauge._vocabulary import renamed
from nngauge.data._splits import LabelledData
from nngauge.errors import invalid

Projection = Literal["pca", "haar"]


@dataclass(frozen=True)
class Preprocessing:
    """A fitted input map x -> scale * (normalize(x) - mean) @ matrix.

    Attributes:
        point_normalize: whether each point is first set to zero mean and unit variance over
            its features (D.2 step 1).
        mean: feature means of the (normalized) training inputs, shape (d,).
        matrix: the linear map, shape (d, k).
        scale: the global constant making Q_{x,i} x(i) = 1 on the training inputs.
        n_components: k; explained_variance: fraction of the training variance in the
            principal subspace of dimension k (1.0 for :func:`standardize`).
    """

    point_normalize: bool
    mean: torch.Tensor
    matrix: torch.Tensor
    scale: float
    n_components: int
    explained_variance: float

    def __call__(self, inputs: Any) -> torch.Tensor:
        """Apply the map to inputs of shape (n, d); returns float32 (n, k)."""
        x = _as_matrix(inputs, self.mean.shape[0], "Preprocessing()")
        if self.point_normalize:
            x = _normalize_points(x, "Preprocessing()")
        return ((x - self.mean) @ self.matrix * self.scale).to(torch.float32)


class Preprocessed(NamedTuple):
    """The transformed data sets (in the order given) and the fitted :class:`Preprocessing`."""

    data: tuple
    transform: Preprocessing


@renamed(seed="generator")
@constrained(variance=Real(0, 1, low_open=True), projection=Choice.literal(Projection))
def preprocess(train: Any, *others: Any, variance: float = 0.99, projection: Projection = "pca",
               generator: Optional[Union[torch.Generator, int]] = 0) -> Preprocessed:
    """Fit the NLC paper's D.2 preprocessing on ``train`` and apply it to all data given.

    Args:
        train: training inputs (n, d), or an ``(inputs, labels)`` pair (labels kept).
        *others: validation / test data in the same forms; transformed with the train fit.
        variance: fraction of variance the PCA dimension k must hold, in (0, 1]; default 0.99.
        projection: "pca" (default: leading principal directions, randomly rotated) or "haar"
            (a uniformly random d x k orthonormal frame, the literal reading); see module doc.
        generator: draws the random orthogonal matrix: an int seed (default 0: the same
            matrix on every call) or a torch.Generator.

    Returns:
        :class:`Preprocessed` ``(data, transform)``: ``data`` holds float32 (n, k) inputs, or
        :class:`LabelledData` for pairs, in the order given.

    Example:
        >>> from nngauge.data import digits, preprocess, split
        >>> train, test = split(digits(), (0.8, 0.2))
        >>> (train, test), t = preprocess(train, test)
        >>> t.n_components < 64, round(float(train.inputs.pow(2).mean()), 6)
        (True, 1.0)
    """
    where = "preprocess()"
    x = _normalize_points(_as_matrix(_inputs(train), None, where), where)
    mean = x.mean(0)
    _, s, vh = torch.linalg.svd(x - mean, full_matrices=False)
    share = (s ** 2).cumsum(0) / (s ** 2).sum()
    k = int((share < variance - 1e-12).sum()) + 1
    if projection == "pca":
        matrix = vh[:k].T @ _haar(k, generator)
    else:
        matrix = _haar(x.shape[1], generator)[:, :k]
    projected = (x - mean) @ matrix
    scale = float(projected.pow(2).mean().rsqrt())
    transform = Preprocessing(True, mean, matrix, scale, k, float(share[k - 1]))
    return Preprocessed(tuple(_apply(transform, d) for d in (train, *others)), transform)


def standardize(train: Any, *others: Any) -> Preprocessed:
    """Standardize each feature to the training mean 0 and variance 1 (D.2, waveform-noise).

    Constant features are centered and left unscaled.

    Example:
        >>> from nngauge.data import standardize, waveform_noise
        >>> (train,), t = standardize(waveform_noise(100))
        >>> abs(float(train.inputs.mean(0).abs().max())) < 1e-5
        True
    """
    x = _as_matrix(_inputs(train), None, "standardize()")
    std = x.std(0, unbiased=False)
    std = torch.where(std > 0, std, torch.ones_like(std))
    transform = Preprocessing(False, x.mean(0), torch.diag(1 / std), 1.0, x.shape[1], 1.0)
    return Preprocessed(tuple(_apply(transform, d) for d in (train, *others)), transform)


def _inputs(data: Any) -> Any:
    return data[0] if isinstance(data, (tuple, list)) else data


def _apply(transform: Preprocessing, data: Any):
    if isinstance(data, (tuple, list)):
        return LabelledData(transform(data[0]), torch.as_tensor(data[1]))
    return transform(data)


def _as_matrix(inputs: Any, d: Optional[int], where: str) -> torch.Tensor:
    x = torch.as_tensor(inputs)
    if x.ndim != 2 or len(x) < 1 or not torch.is_floating_point(x) or \
            (d is not None and x.shape[1] != d) or not torch.isfinite(x).all():
        want = f"(n, {d})" if d is not None else "(n, d)"
        raise invalid(where, f"finite floating-point inputs of shape {want}",
                      f"shape {tuple(x.shape)}, dtype {x.dtype}",
                      "flatten images to vectors, convert with .float(), drop non-finite rows")
    return x.to(torch.float64)


def _normalize_points(x: torch.Tensor, where: str) -> torch.Tensor:
    std = x.std(1, unbiased=False, keepdim=True)
    if (std == 0).any():
        raise invalid(where, "data points that are not constant across their features",
                      f"{int((std == 0).sum())} constant point(s)",
                      "drop constant points (their per-point variance is 0)")
    return (x - x.mean(1, keepdim=True)) / std


def _haar(d: int, generator: torch.Generator) -> torch.Tensor:
    """A uniformly random (Haar) d x d orthogonal matrix: QR of a Gaussian, signs fixed."""
    q, r = torch.linalg.qr(torch.randn(d, d, generator=generator, dtype=torch.float64))
    return q * torch.sign(torch.diagonal(r))
