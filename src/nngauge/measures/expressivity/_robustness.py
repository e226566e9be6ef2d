"""Accuracy under Gaussian noise added to the weights of one layer at a time.

Expressive-power paper (Raghu et al. 2017), section 3.1 and figure 6: "a perturbation at a
layer grows exponentially in the *remaining depth* after that layer", so a trained network is
least robust to noise in its first layers (figure 6: noise of magnitude 0.25 on the first
layer of a CIFAR-10 conv net costs 0.7 accuracy, on the fifth layer 0.02).

The paper does not define the noise magnitude further; here it is relative to the layer's
weight norm: for noise level a the weights W become

    W + a ||W||_F G / ||G||_F,    G with i.i.d. standard Gaussian entries,

so ||noise||_F = a ||W||_F exactly and only the direction is random. Each repeat draws one
direction G per layer and uses it for every level (common random numbers: a repeat's accuracy
is a curve along one fixed random direction). Only the ``weight`` is perturbed, not the bias.
All levels and repeats of a layer run batched with ``torch.func.functional_call`` under
``vmap``; the user's model is never modified.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Sequence

import torch
from torch import nn

from nngauge._constraints import Integer, Numbers, constrained
from nngauge._internal.adapter import MeasurementMode, ModelAdapter
from nngauge._internal.batching import Vectorizer
from nngauge._internal.layers import layer_kind
from nngauge._internal.losses import labelled_batches
from nngauge._internal.options import ModelOptions, model_options
from nngauge._results import Result
from nngauge.errors import InvalidInputError, invalid
from nngauge.measures.expressivity._dichotomies import (
    MAX_BATCHED_ELEMENTS,
    forward_with_weights,
    labels_of,
    layer_weight,
)

DEFAULT_NOISE_LEVELS = (0.0, 0.05, 0.1, 0.25, 0.5, 1.0)
"""Relative noise magnitudes; figure 6 of the paper sweeps magnitudes around 0.25."""


@dataclass(frozen=True)
class WeightNoiseLayer(Result):
    """Accuracy when noise is added to one layer's weights.

    Attributes:
        name: module name of the layer.
        weight_norm: ||W||_F.
        accuracy: mean accuracy over the repeats, one per noise level.
        accuracy_std: standard deviation over the repeats (0 with a single repeat).
        accuracy_drop: clean accuracy minus ``accuracy``, one per noise level.
    """

    name: str
    weight_norm: float
    accuracy: tuple[float, ...]
    accuracy_std: tuple[float, ...]
    accuracy_drop: tuple[float, ...]


@dataclass(frozen=True)
class WeightNoiseResult(Result):
    """Per-layer accuracy under relative Gaussian weight noise (Raghu et al. 2017, fig. 6).

    Attributes:
        layers: one :class:`WeightNoiseLayer` per perturbed layer, in forward order.
        clean_accuracy: accuracy of the unperturbed model.
        noise_levels: the relative noise magnitudes a (||noise||_F = a ||W||_F).
        n_repeats: random noise directions per layer.
        n_samples: labelled samples evaluated.
        labelling: "sign" (one output, labels 0/1: predicted [f(x) > 0]) or "argmax".
        skipped: ``{layer name: reason}`` for discovered layers that could not be perturbed.
        settings: options used.
        mode: how the model was run (:class:`~nngauge.MeasurementMode`).
    """

    _rows = "layers"
    _headline = "accuracy"

    layers: tuple[WeightNoiseLayer, ...]
    clean_accuracy: float
    noise_levels: tuple[float, ...]
    n_repeats: int
    n_samples: int
    labelling: str
    skipped: dict
    settings: dict
    mode: MeasurementMode

    def plot(self, ax=None):
        """Accuracy against noise level, one line per layer; returns the Axes. Needs
        matplotlib."""
        from nngauge._plots import new_axes

        ax = new_axes(ax)
        for layer in self.layers:
            ax.plot(self.noise_levels, layer.accuracy, marker="o", label=layer.name)
        ax.set_xlabel("relative weight noise ||E||_F / ||W||_F")
        ax.set_ylabel("accuracy")
        ax.legend(fontsize=7)
        ax.figure.tight_layout()
        return ax


@constrained(noise_levels=Numbers(0), n_repeats=Integer(1))
@model_options("output", "norm_mode")
def weight_noise_robustness(
    model: nn.Module,
    data: Any,
    labels: Any = None,
    *,
    noise_levels: Sequence[float] = DEFAULT_NOISE_LEVELS,
    layers: Optional[Sequence[str]] = None,
    n_repeats: int = 5,
    batch_size: int = 1000,
    chunk_size: Optional[int] = None,
    options: ModelOptions,
    generator: Optional[torch.Generator | int] = None,
) -> WeightNoiseResult:
    """Accuracy of ``model`` when relative Gaussian noise is added to one layer at a time.

    For each layer and level a, accuracy of the model with W replaced by
    W + a ||W||_F G / ||G||_F (G standard Gaussian, one direction per repeat shared by the
    levels), averaged over ``n_repeats`` directions (Raghu et al. 2017, section 3.1 and
    figure 6). A prediction is argmax_j f(x, j), or [f(x) > 0] for a single output. Dropout
    is off; batchnorm as ``norm_mode`` says (pass "eval" for a trained batchnorm network).
    The model's parameters, buffers and mode are left as they were.

    Args:
        model: a classifier mapping (b, ...) inputs to (b, n_classes) or (b, 1) outputs.
        data: inputs (with ``labels``), or ``(inputs, labels)``, a Dataset or a DataLoader
            yielding labelled batches; held in memory, every layer re-uses them.
        labels: (n,) integer class labels when ``data`` holds only inputs.
        noise_levels: relative magnitudes a >= 0 (0 gives the clean accuracy exactly).
        layers: module names of layers with a ``weight`` parameter; default: every linear
            and conv layer.
        n_repeats: random noise directions per layer.
        batch_size: samples per forward pass.
        chunk_size: weight settings per vmapped call; None: as many as keep the chunk's
            weights under ``MAX_BATCHED_ELEMENTS`` elements.
        output: which output to classify for dict / tuple / ModelOutput outputs.
        norm_mode: batchnorm's statistics ("train", "eval", "frozen" on the data, None: as
            found).
        generator: torch.Generator for the noise directions (deterministic).

    Returns:
        :class:`WeightNoiseResult`.

    Raises:
        InvalidInputError: bad noise levels, n_repeats, layer names, missing or malformed
            labels.

    Example:
        >>> import torch
        >>> from torch import nn
        >>> from nngauge.measures.expressivity._robustness import weight_noise_robustness
        >>> g = torch.Generator().manual_seed(0)
        >>> x = torch.randn(200, 2, generator=g)
        >>> net = nn.Sequential(nn.Linear(2, 2))
        >>> y = net(x).argmax(1)
        >>> r = weight_noise_robustness(net, x, y, noise_levels=[0.0, 0.5], generator=g)
        >>> r.clean_accuracy, r.layers[0].accuracy[0]
        (1.0, 1.0)
    """
    where = "weight_noise_robustness()"
    levels = tuple(float(a) for a in noise_levels)
    adapter = ModelAdapter(model, options, where=where)
    chosen, skipped = _layers(adapter.model, layers, where)
    source = data if labels is None else (data, labels)
    clean_correct, predictions_width = 0, None
    rows = []
    with adapter.active(data=source), torch.no_grad():
        batches = labelled_batches(adapter, source, batch_size, None,
                                   "pass weight_noise_robustness(model, x, y)")
        for x, y in batches:
            out = adapter(x)
            predictions_width = _check_labels(out, y, where)
            clean_correct += int((labels_of(out.unsqueeze(0), where)[0] == y).sum())
        n = sum(len(y) for _, y in batches)
        vectorize = Vectorizer(adapter.note)
        with adapter.perturbed():
            noisy = {name: _noisy_correct(adapter, vectorize, name, weight, batches, levels,
                                          n_repeats, chunk_size, generator)
                     for name, weight in chosen}
    for name, weight in chosen:
        correct = noisy[name]
        accuracy = correct.to(torch.float64) / n  # (levels, repeats)
        mean = accuracy.mean(dim=1)
        std = accuracy.std(dim=1) if n_repeats > 1 else torch.zeros_like(mean)
        clean = clean_correct / n
        rows.append(WeightNoiseLayer(
            name=name.rsplit(".", 1)[0], weight_norm=float(weight.detach().norm()),
            accuracy=tuple(mean.tolist()), accuracy_std=tuple(std.tolist()),
            accuracy_drop=tuple((clean - mean).tolist())))
    return WeightNoiseResult(
        layers=tuple(rows), clean_accuracy=clean_correct / n, noise_levels=levels,
        n_repeats=n_repeats, n_samples=n,
        labelling="sign" if predictions_width == 1 else "argmax", skipped=skipped,
        settings={"batch_size": batch_size, "chunk_size": chunk_size,
                  "noise": "W + a ||W||_F G / ||G||_F, G ~ N(0, I), weights only"},
        mode=adapter.mode)


def _noisy_correct(adapter, vectorize, name, weight, batches, levels, n_repeats, chunk_size,
                   generator) -> torch.Tensor:
    """(levels, repeats) counts of correct predictions with noisy weights of one layer."""
    w = weight.detach().to(torch.float64)
    g = torch.randn((n_repeats, *w.shape), generator=generator, dtype=torch.float64)
    g = g.to(w.device)
    norms = g.reshape(n_repeats, -1).norm(dim=1).reshape(n_repeats, *([1] * w.dim()))
    unit = g / norms  # one unit direction per repeat
    scales = torch.tensor(levels, dtype=torch.float64, device=w.device) * w.norm()
    settings = (w + scales.reshape(-1, 1, *([1] * w.dim())) * unit).reshape(-1, *w.shape)
    chunk = chunk_size or max(1, min(len(settings), MAX_BATCHED_ELEMENTS // w.numel()))
    correct = torch.zeros(len(settings), dtype=torch.int64)
    for start in range(0, len(settings), chunk):
        weights = settings[start:start + chunk].to(weight)
        for x, y in batches:
            out = forward_with_weights(adapter, vectorize, name, weights, x)
            correct[start:start + chunk] += (labels_of(out, adapter.where) == y).sum(1).cpu()
    return correct.reshape(len(levels), n_repeats)


def _layers(model, layers, where) -> tuple[list, dict]:
    if layers is not None:
        names = [layers] if isinstance(layers, str) else list(layers)
        if not names:
            raise invalid(where, "at least one layer name", "an empty list",
                          "pass layer names or layers=None for every linear/conv layer")
        return [layer_weight(model, name, where) for name in names], {}
    chosen, skipped = [], {}
    for layer_name, module in model.named_modules():
        if not layer_name or layer_kind(module) not in ("linear", "conv"):
            continue
        try:
            chosen.append(layer_weight(model, layer_name, where))
        except InvalidInputError:
            skipped[layer_name] = "no floating 'weight' parameter to perturb (parametrized?)"
    if not chosen:
        raise invalid(where, "a model with linear or conv layers", "none with a weight",
                      "pass layers=[...] naming modules that have a 'weight' parameter")
    return chosen, skipped


def _check_labels(out: torch.Tensor, y: torch.Tensor, where: str) -> int:
    """The output width per sample, after checking the labels fit it."""
    labels_of(out.unsqueeze(0), where)  # one output vector per sample
    width = out.reshape(len(out), -1).shape[-1]
    n_classes = 2 if width == 1 else width
    if y.dtype.is_floating_point or y.dtype == torch.bool or y.dim() != 1:
        raise invalid(where, "labels as a 1-d integer tensor of class indices",
                      f"dtype {y.dtype} and shape {tuple(y.shape)}",
                      "pass labels.long() (one class index per sample)")
    if len(y) and (int(y.min()) < 0 or int(y.max()) >= n_classes):
        raise invalid(where, f"labels in [0, {n_classes}) for outputs of width {width}",
                      f"labels in [{int(y.min())}, {int(y.max())}]",
                      "use 0/1 labels for a single output, class indices otherwise")
    return width


