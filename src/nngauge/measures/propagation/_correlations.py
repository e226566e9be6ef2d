"""Per-layer correlations of input pairs and the shrinkage paper's rho_max.

The correlation of two inputs at a layer is the (uncentered) cosine similarity of the layer's
outputs, shrinkage paper eq. 2.2: rho_l(x_a, x_b) = y_l(x_a) . y_l(x_b) / (|y_l(x_a)| |y_l(x_b)|),
outputs flattened per sample. Theorem 1 of that paper bounds the Jacobian norm from below
through rho_max = max_l min_{a, b} rho_l(x_a, x_b): the largest, over layers, of the smallest
pairwise correlation. The minimum over the data set can be pushed further by gradient descent
on a pair of inputs with the network fixed (the paper's figure 2, green): ``n_iter``.

The theorem is about a stack of affine maps, activations and layer normalizations. A
convolutional network or a transformer ends differently: a global pooling averages the
positions (an image's pixels, a sequence's tokens) and a read-out reads the average. Averaging
the positions of non-negative features (post-ReLU) leaves every input's pooled vector close to
the mean one, so the layers after pooling read an uncentered cosine near 1 whatever the depth
(timm's ResNet-50 at its default initialization: 0.87 at every block, 0.996 at its read-out).
``rho_max_before_pooling`` is rho_max over the layers up to the last one whose per-sample
output keeps positions (more than one dimension of size > 1: (C, H, W) with H W > 1, (T, D)
with T > 1): the part of the network the theorem speaks of. On a network without positions (an
MLP) it is rho_max.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Sequence

import torch
from torch import nn

from nngauge._constraints import Integer, Real, constrained
from nngauge._internal.adapter import MeasurementMode, ModelAdapter
from nngauge._internal.options import ModelOptions, model_options
from nngauge._internal.probing import OUTPUT
from nngauge._results import Result
from nngauge._vocabulary import renamed
from nngauge.errors import invalid

DEFAULT_KINDS = ("linear", "conv", "norm", "activation")


@dataclass(frozen=True)
class CorrelationLayer(Result):
    """Pairwise correlations at one layer.

    Attributes:
        name: the layer (``"input"`` for the data, ``"output"`` for the network output).
        mean, min, max: over all pairs a < b of the samples.
        min_pair: the indices (a, b) of the least-correlated pair in the data.
        searched_min: the smallest correlation found by gradient descent on a pair of inputs
            (None when no search was asked for).
        shape: the layer's per-sample output shape ((C, H, W) for a convolution's, (T, D)
            for a sequence's, (D,) for a vector's).
    """

    name: str
    mean: float
    min: float
    max: float
    min_pair: tuple[int, int]
    searched_min: Optional[float] = None
    shape: tuple[int, ...] = ()


@dataclass(frozen=True)
class CorrelationResult(Result):
    """Correlations per layer and rho_max (shrinkage paper Theorem 1).

    Attributes:
        layers: the input row, one row per measured layer, and the output row.
        rho_max: max over the measured layers (input excluded) of the smallest pairwise
            correlation in the data.
        rho_max_searched: the same with the searched minima (None without a search).
        rho_max_before_pooling: rho_max over the measured layers up to the last one whose
            per-sample output keeps positions (:func:`has_positions`; before global pooling
            and the read-out: the module docstring); rho_max when no layer has positions.
        skipped: ``{layer: reason}`` for layers that were not called.
        n_samples: samples used (pairs: n (n - 1) / 2).
        mode: how the model was run (:class:`~nngauge.MeasurementMode`).
    """

    _rows = "layers"
    _headline = "mean"

    layers: tuple[CorrelationLayer, ...]
    rho_max: float
    rho_max_searched: Optional[float]
    skipped: dict
    n_samples: int
    mode: MeasurementMode
    rho_max_before_pooling: float = float("nan")

    @property
    def after_pooling(self) -> tuple[str, ...]:
        """The measured layers ``rho_max_before_pooling`` leaves out: those after the last
        one with positions (empty when no layer has positions, or the last has)."""
        rows = self.layers[1:]
        last = max((i for i, row in enumerate(rows) if has_positions(row.shape)), default=None)
        return () if last is None else tuple(row.name for row in rows[last + 1:])

    def plot(self, ax=None, *, reference: Optional[Sequence[float]] = None):
        """Mean correlation per layer; ``reference``: a theory curve of rho, one value per
        layer. Returns the Axes."""
        from nngauge._plots import line_per_layer

        return line_per_layer([row.name for row in self.layers], [row.mean for row in self.layers],
                             ylabel="mean correlation", ax=ax, reference=reference)


@renamed(search_steps="n_iter", search_lr="lr")
@constrained(max_samples=Integer(2), n_iter=Integer(0), lr=Real(0, low_open=True))
@model_options("output", "input_module", "norm_mode", "dropout")
def correlations(
    model: nn.Module,
    data: Any,
    *,
    layers: Optional[Sequence[str]] = None,
    max_samples: int = 500,
    n_iter: int = 0,
    lr: float = 0.01,
    options: ModelOptions,
    generator: Optional[torch.Generator | int] = None,
) -> CorrelationResult:
    """Cosine similarities of all input pairs at every layer, and rho_max.

    Args:
        model: any module; all samples are propagated as one batch (state restored
            afterwards).
        data: any supported data form; the first ``max_samples`` samples are used.
        layers: module or site names; default: every linear, conv, normalization and
            activation leaf, in forward order.
        max_samples: cap on the samples (the pairs grow quadratically).
        n_iter: the search's iterations: when > 0, for each layer run this many Adam steps on
            the least-correlated data pair to lower its correlation at that layer (inputs kept
            at their norms).
        lr: Adam learning rate for the search, relative to the input norm.
        output, input_module, norm_mode, dropout, generator: how the model runs, as in
            :func:`nngauge.nlc` (correlations of measured inputs, e.g. embeddings).

    Returns:
        :class:`CorrelationResult`.

    Example:
        >>> import torch
        >>> from nngauge import correlations
        >>> from nngauge.nn import mlp
        >>> net = mlp(8, 64, 4, 8, activation="relu", norm="layer")
        >>> result = correlations(net, torch.randn(20, 8))
        >>> result.layers[0].name, -1 <= result.rho_max <= 1
        ('input', True)
    """
    where = "correlations()"
    adapter = ModelAdapter(model, options, where=where)
    with adapter.active(generator=generator, data=data):
        batch = adapter.collect(data, max_samples)
        if len(batch) < 2:
            raise invalid(where, "at least 2 samples (correlations are of pairs)",
                          f"{len(batch)} sample", "pass 2 or more samples")
        chosen = adapter.sites(batch.inputs, layers, default_kinds=DEFAULT_KINDS)
        x = adapter.measured(batch.inputs)
        with torch.no_grad():
            y, captured = adapter.run(x, chosen, raw=batch.inputs)
        outputs = {"input": x, **{s.name: captured.get(s.name) for s in chosen}, OUTPUT: y}
        rows, skipped = [], {}
        for name, value in outputs.items():
            if value is None:
                skipped[name] = "not called by the forward pass"
                continue
            row = _row(name, value)
            if n_iter > 0 and name != "input":
                row = _search(adapter, chosen, name, x, batch.inputs, row, n_iter, lr)
            rows.append(row)
    layer_rows = rows[1:]
    searched = [r.searched_min for r in layer_rows if r.searched_min is not None]
    last = max((i for i, r in enumerate(layer_rows) if has_positions(r.shape)),
               default=len(layer_rows) - 1)
    return CorrelationResult(
        layers=tuple(rows), rho_max=max(r.min for r in layer_rows),
        rho_max_searched=max(searched) if searched else None, skipped=skipped,
        n_samples=len(x), mode=adapter.mode,
        rho_max_before_pooling=max(r.min for r in layer_rows[:last + 1]))


def has_positions(shape: tuple[int, ...]) -> bool:
    """Whether a per-sample output shape keeps positions: more than one dimension of size
    > 1 (an image's pixels beside its channels, a sequence's tokens beside its features)."""
    return sum(size > 1 for size in shape) > 1


def cosine_matrix(outputs: torch.Tensor) -> torch.Tensor:
    """(n, n) cosine similarities of the flattened rows of ``outputs`` (float64)."""
    flat = outputs.detach().reshape(len(outputs), -1).to(torch.float64)
    unit = flat / flat.norm(dim=1, keepdim=True).clamp_min(1e-300)
    return unit @ unit.T


def _row(name: str, outputs: torch.Tensor) -> CorrelationLayer:
    cos = cosine_matrix(outputs)
    a, b = torch.triu_indices(len(cos), len(cos), offset=1)
    pairs = cos[a, b]
    k = int(pairs.argmin())
    return CorrelationLayer(name=name, mean=float(pairs.mean()), min=float(pairs[k]),
                            max=float(pairs.max()), min_pair=(int(a[k]), int(b[k])),
                            shape=tuple(outputs.shape[1:]))


def _search(adapter, sites, name, x, raw, row, steps, lr) -> CorrelationLayer:
    """Lower the correlation of a pair at layer ``name`` by Adam on the two inputs, each
    projected back to its original norm after every step (the network is fixed)."""
    index = list(row.min_pair)
    pair = x[index].detach().clone().requires_grad_(True)
    norms = pair.detach().reshape(2, -1).norm(dim=1)
    shape = (2,) + (1,) * (x.dim() - 1)
    optimizer = torch.optim.Adam([pair], lr=lr * float(norms.mean()) / pair[0].numel() ** 0.5)
    target = [s for s in sites if s.name == name]
    best = row.min
    for _ in range(steps):
        y, captured = adapter.run(pair, target, raw=raw[index])
        value = (y if name == OUTPUT else captured[name]).reshape(2, -1)
        cos = torch.nn.functional.cosine_similarity(value[0], value[1], dim=0)
        best = min(best, float(cos.detach()))
        optimizer.zero_grad()
        cos.backward()
        optimizer.step()
        with torch.no_grad():
            pair.mul_((norms / pair.reshape(2, -1).norm(dim=1)).reshape(shape))
    return CorrelationLayer(**{**row.__dict__, "searched_min": best})
