"""ZiCo, the inverse coefficient of variation of the loss gradients over mini-batches (Li,
Yang, Bhardwaj & Marculescu, "ZiCo: Zero-shot NAS via Inverse Coefficient of Variation on
Gradients", ICLR 2023, section 3.3).

The paper's analysis ties a high mean gradient magnitude across batches to fast convergence and
a low gradient variance to good generalization; ZiCo rewards both, layer by layer, with a
logarithm that keeps one wide layer from dominating the sum.
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any, Optional

import torch
from torch import nn

from nngauge._constraints import Integer, constrained
from nngauge._internal.data import Batch
from nngauge._internal.options import ModelOptions, model_options
from nngauge.errors import invalid
from nngauge.proxies._common import batch_loss, finite, gradients, proxy_batch, trainable

ZICO_BATCHES = 2
"""Mini-batches whose gradients ZiCo compares by default: two, the fewest with a deviation."""


@constrained(n_batches=Integer(2))
@model_options("output", "input_module", "norm_mode", "dropout")
def zico(model: nn.Module, data: Any, labels: Any = None, *, batch_size: int = 64,
         n_batches: int = ZICO_BATCHES, options: ModelOptions,
         generator: Optional[torch.Generator | int] = None) -> float:
    """ZiCo: the inverse coefficient of variation of the loss gradients across mini-batches,
    summed per layer under a logarithm (Li, Yang, Bhardwaj & Marculescu, "ZiCo: Zero-shot NAS
    via Inverse Coefficient of Variation on Gradients", ICLR 2023, section 3.3): higher
    predicts higher accuracy.

    With g_w(b) = dL_b / dw the gradient of mini-batch b's mean loss L_b (b = 1..N) for each
    weight entry w, mean and standard deviation over the N mini-batches,

        ZiCo = sum over layers l of log( sum over w in theta_l with std_b g_w > 0 of
                                         mean_b |g_w(b)| / std_b g_w(b) ),

    std the population standard deviation (numpy's default, ddof = 0). As the authors' code
    computes it: the mean is of the gradients' magnitudes and the deviation of the signed
    gradients, entries whose gradient does not vary over the batches (std 0) are left out, and
    a layer with none left contributes nothing. Each mini-batch's gradient is its own (the
    authors' loop reads ``.grad`` after each ``backward()`` without zeroing it, so their later
    batches carry the sum of the earlier ones; here they do not).

    A layer theta_l is a module's weights: its trainable parameters of two or more dimensions
    (the authors read the weights of ``nn.Conv2d`` and ``nn.Linear``; here also GPT-2's
    ``Conv1D``, ``nn.LSTM``'s ``weight_ih`` / ``weight_hh``, attention in-projections,
    embeddings, and parameters a model holds itself such as a ViT's position embedding, each
    grouped under the module that owns it). Biases and normalization scales (one dimension)
    are not read, as in the authors' code.

    The batch of ``n_batches x batch_size`` samples (the first ones, or drawn with
    ``generator``; a DataLoader's first batch) is split into ``n_batches`` mini-batches, and
    each mini-batch's gradient comes from its own backward pass: one pass per mini-batch,
    two by default (with batchnorm in train mode each mini-batch is normalized by its own
    statistics, as in the authors' code). The loss is the mean cross-entropy for integer
    labels (per position for sequence outputs), squared error for floating targets.
    Statistics in float64.

    Args:
        model: any module with trainable weights.
        data: inputs with ``labels``, or (inputs, labels), a Dataset or DataLoader of pairs.
        labels: integer class labels (b,) (per position for sequence outputs) or floating
            regression targets, when ``data`` holds inputs only.
        batch_size: samples per mini-batch (fewer when the data holds fewer than
            ``n_batches x batch_size``).
        n_batches: mini-batches N (at least 2: one has no deviation).
        output, input_module, norm_mode, dropout: how the model runs, as in
            :func:`nngauge.nlc`.
        generator: draws the samples (and dropout) when given; default the first samples.

    Returns:
        ZiCo (float; for N = 2 every entry's ratio (|g_1| + |g_2|) / |g_1 - g_2| is at least 1,
        so every layer adds at least log of its varying entries' count).

    Example:
        >>> import torch
        >>> from torch import nn
        >>> net = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 3))
        >>> x, y = torch.randn(32, 4), torch.randint(0, 3, (32,))
        >>> zico(net, x, y, batch_size=16) > 0
        True
    """
    where = "zico()"
    with proxy_batch(model, data, labels, options, where=where,
                     batch_size=n_batches * batch_size, generator=generator, need_labels=True,
                     min_samples=n_batches) as (adapter, batch, names):
        params = [(n, p) for n, p in trainable(adapter, names, "zico differentiates the loss "
                                               "by the weights") if p.dim() >= 2]
        if not params:
            raise invalid(where, "a model with trainable weights of two or more dimensions "
                          "(ZiCo reads weight matrices and kernels)",
                          f"only one-dimensional trainable parameters ({len(names)})",
                          "unfreeze the weights with p.requires_grad_(True)")
        stats = _Moments(params)
        for inputs, targets in zip(batch.inputs.tensor_split(n_batches),
                                   batch.labels.tensor_split(n_batches)):
            stats.add(gradients(batch_loss(adapter, Batch(inputs, targets)), params))
    terms = stats.layer_terms()
    if not terms:
        raise invalid(where, "loss gradients that differ between the mini-batches (ZiCo "
                      "divides by their deviation)", f"identical gradients over {n_batches} "
                      "mini-batches for every weight", "pass mini-batches of different samples "
                      "(data with repeated samples, or a network whose loss does not depend on "
                      "the weights, gives none)")
    return finite(float(sum(terms.values())), where, "ZiCo")


class _Moments:
    """Running mean of |g| and Welford's mean and sum of squared deviations of g, per weight
    entry, in float64; the layer terms log(sum mean|g| / std g) from them."""

    def __init__(self, params: list[tuple[str, torch.Tensor]]) -> None:
        self.names = [n for n, _ in params]
        self.count = 0
        self.abs_mean = [torch.zeros_like(p, dtype=torch.float64) for _, p in params]
        self.mean = [torch.zeros_like(p, dtype=torch.float64) for _, p in params]
        self.squares = [torch.zeros_like(p, dtype=torch.float64) for _, p in params]

    def add(self, grads: list[torch.Tensor]) -> None:
        self.count += 1
        for i, g in enumerate(grads):
            g = g.detach().to(torch.float64)
            self.abs_mean[i] += (g.abs() - self.abs_mean[i]) / self.count
            delta = g - self.mean[i]
            self.mean[i] += delta / self.count
            self.squares[i] += delta * (g - self.mean[i])

    def layer_terms(self) -> dict[str, float]:
        """Owning module -> log(sum over its varying entries of mean|g| / std g)."""
        sums: dict[str, float] = defaultdict(float)
        for name, abs_mean, squares in zip(self.names, self.abs_mean, self.squares):
            std = (squares / self.count).sqrt()
            varying = std > 0
            sums[name.rpartition(".")[0]] += float((abs_mean[varying] / std[varying]).sum())
        return {layer: math.log(s) for layer, s in sums.items() if s > 0}
