"""Dichotomies: the labellings of fixed inputs met while one layer's weights sweep a great circle.

Expressive-power paper (Raghu et al. 2017), appendix B.3 and figures 14-16: instead of moving
the input along a trajectory x(t), move the weights W of one layer along

    W(t) = cos(t) W0 + sin(t) W1,    t = 2 pi j / resolution,  j = 0, ..., resolution - 1,

with W0 the layer's weights and W1 an independent draw of the same scale, and count the
distinct labellings (dichotomies) of fixed inputs x_1..x_s. Here W1 is a Gaussian matrix
made orthogonal to W0 (Frobenius inner product) and scaled to ||W1||_F = ||W0||_F, so W(t) is
exactly a great circle of the sphere of radius ||W0||_F through W0 (a closed loop: t and
t + 2 pi coincide). The paper finds the count grows exponentially with the *remaining depth*
above the swept layer (figure 15) and in proportion to transitions (figure 16).

All weight settings run batched: ``torch.func.functional_call`` under ``torch.func.vmap``
over chunks of settings; the user's model is never modified.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Optional

import torch
from torch import nn
from torch.func import functional_call

from nngauge._constraints import NAME, Integer, constrained
from nngauge._internal.adapter import MeasurementMode, ModelAdapter
from nngauge._internal.batching import Vectorizer
from nngauge._internal.options import ModelOptions, model_options
from nngauge._results import Result
from nngauge._vocabulary import deprecated_attribute, renamed
from nngauge.errors import invalid

MAX_BATCHED_ELEMENTS = 2**24
"""Default chunking: at most this many weight elements (all settings of a chunk together)."""


@dataclass(frozen=True)
class DichotomiesResult(Result):
    """Distinct labellings of the inputs along a great-circle sweep of one layer's weights.

    Attributes:
        n_dichotomies: number of distinct labellings (rows of ``labellings``) met.
        layer: the swept layer's module name.
        n_samples: s, the number of inputs labelled.
        resolution: weight settings on the circle (``n_steps``: its deprecated name).
        labelling: "sign" (one output: label = [f(x) > 0]) or "argmax" (several outputs).
        n_classes: 2 for "sign", the output width for "argmax".
        max_dichotomies: min(resolution, n_classes ** s), the most the sweep could find.
        label_flips: label changes between consecutive settings, summed over the inputs and
            around the closed circle.
        weight_norm: ||W0||_F, the radius of the circle.
        settings: options used.
        mode: how the model was run (:class:`~nngauge.MeasurementMode`).
        labellings: (n_steps, s) int64 labels per setting (left out of ``to_dict``).
        direction: W1, same shape as the weight (left out of ``to_dict``).
    """

    n_dichotomies: int
    layer: str
    n_samples: int
    resolution: int
    labelling: str
    n_classes: int
    max_dichotomies: int
    label_flips: int
    weight_norm: float
    settings: dict
    mode: MeasurementMode
    labellings: torch.Tensor = field(repr=False, compare=False)
    direction: torch.Tensor = field(repr=False, compare=False)

    def plot(self, ax=None):
        """The labels of every input (rows) at every setting of the weights (columns);
        returns the Axes. Needs matplotlib."""
        from nngauge._plots import new_axes

        ax = new_axes(ax)
        ax.imshow(self.labellings.T.numpy(), aspect="auto", interpolation="nearest",
                  extent=(0.0, 2 * math.pi, self.n_samples - 0.5, -0.5))
        ax.set_xlabel(f"t (weights of {self.layer} on the great circle)")
        ax.set_ylabel("input")
        ax.set_title(f"{self.n_dichotomies} dichotomies")
        return ax

    n_steps = deprecated_attribute("resolution")


@renamed(inputs="data", n_steps="resolution")
@constrained(layer=NAME, resolution=Integer(1))
@model_options("output", "norm_mode")
def dichotomies(
    model: nn.Module,
    data: Any,
    *,
    layer: str,
    resolution: int = 1000,
    chunk_size: Optional[int] = None,
    options: ModelOptions,
    generator: Optional[torch.Generator | int] = None,
) -> DichotomiesResult:
    """Count the dichotomies of ``data`` as ``layer``'s weights sweep a great circle.

    W(t) = cos(t) W0 + sin(t) W1 for t = 2 pi j / resolution (Raghu et al. 2017, appendix
    B.3, figures 14-16); W1 is Gaussian, orthogonal to W0 and of the same Frobenius norm. A
    labelling is sign(f(x)) for a single output and argmax_j f(x, j) otherwise; the result
    counts the distinct labellings of the s inputs over all settings.

    Every setting is evaluated by ``torch.func.functional_call`` under ``vmap`` (a loop for
    modules vmap cannot batch, noted in ``mode``); buffers such as batchnorm running
    statistics are copied per setting, so nothing of the model changes.

    Args:
        model: a module mapping (s, ...) inputs to (s, d_out) outputs.
        data: the s inputs x_1..x_s (tensor, numpy array, (inputs, labels), Dataset or
            DataLoader); all of them are used, in order.
        layer: module name (``model.named_modules()``) of a layer with a ``weight`` parameter.
        resolution: weight settings on the circle (>= 1); the paper's plots use fine sweeps.
        chunk_size: settings per vmapped call; None: as many as keep the chunk's weights under
            :data:`MAX_BATCHED_ELEMENTS` elements.
        output: which output to label for dict / tuple / ModelOutput outputs.
        norm_mode: batchnorm's statistics ("train", "eval", "frozen" on ``data``, None: as
            found); dropout is off.
        generator: for W1 (deterministic): a torch.Generator or an int seed.

    Returns:
        :class:`DichotomiesResult` (its ``n_steps`` is ``resolution``); ``labellings`` has
        shape (resolution, s).

    Raises:
        InvalidInputError: unknown layer, a layer without a weight parameter or with zero
            weights, resolution or chunk_size not a positive integer, bad inputs.

    Example:
        >>> import torch
        >>> from torch import nn
        >>> from nngauge.measures.expressivity._dichotomies import dichotomies
        >>> g = torch.Generator().manual_seed(0)
        >>> net = nn.Sequential(nn.Linear(5, 16), nn.Hardtanh(), nn.Linear(16, 1))
        >>> x = torch.randn(15, 5, generator=g)
        >>> r = dichotomies(net, x, layer="0", resolution=200, generator=g)
        >>> 1 <= r.n_dichotomies <= r.max_dichotomies, tuple(r.labellings.shape)
        (True, (200, 15))
    """
    where = "dichotomies()"
    adapter = ModelAdapter(model, options, where=where)
    name, weight = layer_weight(adapter.model, layer, where)
    w0 = weight.detach().to(torch.float64)
    radius = float(w0.norm())
    if radius == 0.0:
        raise invalid(where, f"a layer {layer!r} with nonzero weights (the circle's radius)",
                      "all-zero weights", "initialize the layer before sweeping it")
    direction = _orthogonal_direction(w0, generator)
    t = torch.arange(resolution, dtype=torch.float64) * (2 * math.pi / resolution)
    chunk = chunk_size or max(1, min(resolution, MAX_BATCHED_ELEMENTS // w0.numel()))
    labels, width = [], 1
    with adapter.active(data=data):
        x = adapter.prepare_raw(adapter.collect(data).inputs)
        with torch.no_grad():
            adapter(x)  # inputs the model cannot take fail here, with the shapes said
        vectorize = Vectorizer(adapter.note)
        for start in range(0, resolution, chunk):
            tc = t[start:start + chunk].reshape(-1, *([1] * w0.dim()))
            weights = (torch.cos(tc) * w0 + torch.sin(tc) * direction).to(weight)
            y = forward_with_weights(adapter, vectorize, name, weights, x)
            width = y[0].reshape(len(x), -1).shape[-1]
            labels.append(labels_of(y, where))
    labellings = torch.cat(labels).cpu()
    n_classes = 2 if width == 1 else width
    flips = int((labellings != labellings.roll(1, dims=0)).sum())
    return DichotomiesResult(
        n_dichotomies=int(torch.unique(labellings, dim=0).shape[0]), layer=layer,
        n_samples=len(x), resolution=resolution, labelling="sign" if width == 1 else "argmax",
        n_classes=n_classes, max_dichotomies=min(resolution, n_classes ** len(x)),
        label_flips=flips, weight_norm=radius,
        settings={"resolution": resolution, "chunk_size": chunk,
                  "trajectory": "great circle W(t) = cos(t) W0 + sin(t) W1, t in [0, 2 pi)"},
        mode=adapter.mode, labellings=labellings, direction=direction.to(weight.dtype).cpu())


def _orthogonal_direction(w0: torch.Tensor, generator: Optional[torch.Generator]) -> torch.Tensor:
    """A Gaussian matrix made Frobenius-orthogonal to w0 and scaled to ||w0||_F (float64)."""
    g = torch.randn(w0.shape, generator=generator, dtype=torch.float64).to(w0.device)
    g = g - (g * w0).sum() / (w0 * w0).sum() * w0
    return g * (w0.norm() / g.norm())


def layer_weight(model: nn.Module, layer: Any, where: str) -> tuple[str, nn.Parameter]:
    """``(parameter name, parameter)`` of the ``weight`` of module ``layer`` of ``model``."""
    if not isinstance(layer, str):
        raise invalid(where, "layer as a module name string", f"{type(layer).__name__}",
                      "pass a name from model.named_modules(), e.g. '0' or 'layers.0.linear'")
    modules = dict(model.named_modules())
    if layer not in modules or not layer:
        raise invalid(where, "a layer name from model.named_modules()", repr(layer),
                      f"use names such as {[n for n in modules if n][:20]}")
    module = modules[layer]
    weight = module._parameters.get("weight")
    if weight is None or not torch.is_floating_point(weight):
        with_weights = [n for n, m in model.named_modules()
                        if isinstance(m._parameters.get("weight"), torch.Tensor)][:20]
        raise invalid(where, "a layer with a floating 'weight' parameter",
                      f"{layer!r} ({type(module).__name__}) without one",
                      f"sweep a layer such as {with_weights}")
    return f"{layer}.weight", weight


def forward_with_weights(adapter: ModelAdapter, vectorize: Vectorizer, name: str,
                         weights: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """The adapter's model at raw inputs ``x`` with parameter ``name`` replaced by each of
    ``weights`` (k, *shape): (k, *output.shape), batched by ``vectorize`` over
    ``functional_call``, without gradients. Run inside ``adapter.active()``.

    Buffers are copied once per setting, so train-mode batchnorm updates those copies (never
    the model's own running statistics).
    """
    model = adapter.model
    params = {n: p.detach() for n, p in model.named_parameters()}
    k = weights.shape[0]
    buffers = {n: b.detach().unsqueeze(0).expand(k, *b.shape).clone()
               for n, b in model.named_buffers()}

    def run(w, bufs):
        return adapter.select(functional_call(model, ({**params, name: w}, bufs), (x,)))

    with torch.no_grad():
        try:
            return vectorize(run)(weights, buffers)
        except (RuntimeError, ValueError, TypeError, IndexError) as exc:
            if type(exc).__module__.startswith("nngauge"):
                raise
            raise invalid(adapter.where, "a model whose forward() runs with replaced "
                          f"parameters on inputs of shape {tuple(x.shape)}",
                          f"{type(exc).__name__}: {exc}",
                          "pass inputs shaped as the model expects and avoid in-place changes "
                          "of parameters in forward()") from exc


def labels_of(y: torch.Tensor, where: str) -> torch.Tensor:
    """(k, s) class labels of outputs (k, s, out): [f > 0] for one output, else the argmax."""
    if y.dim() > 3:
        raise invalid(where, "one output vector per sample (s, n_outputs)",
                      f"outputs of shape {tuple(y.shape[1:])} (a sequence or map per sample)",
                      "select a per-sample classifier output with output=")
    flat = y.reshape(y.shape[0], y.shape[1], -1)
    if flat.shape[-1] == 1:
        return (flat[..., 0] > 0).long()
    return flat.argmax(dim=-1)
