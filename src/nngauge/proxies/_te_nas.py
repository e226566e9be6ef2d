"""TE-NAS's two indicators (Chen, Gong & Wang, "Neural Architecture Search on ImageNet in Four
GPU Hours: A Theoretically Inspired Perspective", ICLR 2021): trainability as the condition
number of the empirical NTK (section 3.1.1) and expressivity as the number of linear regions
(section 3.1.2), combined by the sum of their rankings over the candidate architectures
(section 3.3).

Each proxy of :mod:`nngauge.proxies` returns one number, so the two indicators are two
functions, :func:`te_nas` (the condition number) and :func:`te_nas_regions`, and
:func:`te_nas_rank` combines them over a set of architectures as the paper does.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

import numpy as np
import torch
from scipy.stats import rankdata
from torch import nn

from nngauge._constraints import Check, Numbers, constrained
from nngauge._internal.ntk import empirical_ntk, plan_ntk
from nngauge._internal.options import ModelOptions, model_options
from nngauge._internal.patterns import activation_sites, site_codes
from nngauge.errors import invalid
from nngauge.proxies._common import finite, proxy_batch, trainable
from nngauge.theory import condition_number


@constrained()
@model_options("output", "input_module", "norm_mode", "dropout")
def te_nas(model: nn.Module, data: Any, labels: Any = None, *, batch_size: int = 64,
           options: ModelOptions,
           generator: Optional[torch.Generator | int] = None) -> float:
    """Condition number of the empirical NTK on a batch (Chen, Gong & Wang, "Neural
    Architecture Search on ImageNet in Four GPU Hours: A Theoretically Inspired Perspective",
    ICLR 2021, section 3.1.1): TE-NAS's trainability indicator kappa_N, lower is better.

    With g_i = d (sum_c f_c(x_i)) / dtheta the gradient of sample i's summed outputs over the
    trainable parameters whose name contains "weight" (biases excluded, as in the authors'
    code), Theta = G G^T (b x b) and

        te_nas = kappa_N = lambda_max(Theta) / lambda_min(Theta)

    (float64 eigenvalues; ``inf`` when Theta is numerically singular, see
    :func:`nngauge.theory.condition_number`). Per-sample gradients come from the shared NTK
    engine (``vmap``; with batchnorm using batch statistics, backward passes through the
    whole batch, as the authors' code does in train mode). When b x parameters exceeds the
    engine's gradient budget, fewer samples are used. The paper's second indicator is
    :func:`te_nas_regions`; :func:`te_nas_rank` combines the two. ``labels`` is accepted for a
    uniform signature and not read.

    Args:
        model: any module with trainable weights.
        data: inputs (b, ...), (inputs, labels), a Dataset or a DataLoader.
        labels: not read.
        batch_size: samples b (the kernel is b x b).
        output, input_module, norm_mode, dropout: how the model runs, as in
            :func:`nngauge.nlc`.
        generator: draws the batch (and dropout) when given; default the first samples.

    Returns:
        kappa_N (float >= 1, or inf).

    Example:
        >>> import torch
        >>> from torch import nn
        >>> net = nn.Sequential(nn.Linear(4, 64), nn.ReLU(), nn.Linear(64, 2))
        >>> te_nas(net, torch.randn(8, 4)) >= 1
        True
    """
    where = "te_nas()"
    with proxy_batch(model, data, None, options, where=where, batch_size=batch_size,
                     generator=generator) as (adapter, batch, names):
        params = trainable(adapter, names, "te_nas differentiates the outputs by the weights",
                           weights_only=True)
        x = adapter.measured(batch.inputs)
        plan = plan_ntk(len(x), 1, sum(p.numel() for _, p in params), n_probes=1)

        def summed(xs: torch.Tensor, raw: torch.Tensor) -> torch.Tensor:
            return adapter(xs, raw).reshape(len(xs), -1).sum(1, keepdim=True)

        theta = empirical_ntk(summed, adapter.model, x, batch.inputs, plan,
                              per_sample=not adapter.coupled, generator=generator,
                              note=adapter.note)
    return finite(condition_number(theta), where, "NTK condition number (a zero kernel)")


@constrained()
@model_options("output", "input_module", "norm_mode", "dropout")
def te_nas_regions(model: nn.Module, data: Any, labels: Any = None, *, batch_size: int = 1000,
                   options: ModelOptions,
                   generator: Optional[torch.Generator | int] = None) -> float:
    """Number of linear regions met by the samples of a batch (Chen, Gong & Wang, ICLR 2021,
    section 3.1.2): TE-NAS's expressivity indicator R_N, higher is better.

    R_N = #{distinct activation patterns among the b samples}, a pattern being the region of
    every unit of every activation call (ReLU: off / on; the sign of the pre-activation for
    activations that are not piecewise linear), read by nngauge's activation-pattern machinery
    (:func:`nngauge.activation_patterns`) in one forward pass of the batch. The authors count
    over 1000 Gaussian points (hence the default batch size); here the points are the data's
    samples. ``labels`` is accepted for a uniform signature and not read.

    Args:
        model: any module with activation modules.
        data: inputs (b, ...), (inputs, labels), a Dataset or a DataLoader.
        labels: not read.
        batch_size: samples b (the count is at most b).
        output, input_module, norm_mode, dropout: how the model runs, as in
            :func:`nngauge.nlc`.
        generator: draws the batch (and dropout) when given; default the first samples.

    Returns:
        R_N (a whole number, as a float).

    Example:
        >>> import torch
        >>> from torch import nn
        >>> net = nn.Sequential(nn.Linear(1, 2), nn.ReLU())
        >>> with torch.no_grad():
        ...     _ = net[0].weight.fill_(1.0); _ = net[0].bias.copy_(torch.tensor([0.0, -1.0]))
        >>> te_nas_regions(net, torch.tensor([[-1.0], [0.5], [0.7], [2.0]]))
        3.0
    """
    with proxy_batch(model, data, None, options, where="te_nas_regions()", batch_size=batch_size,
                     generator=generator) as (adapter, batch, _):
        sites, layers = activation_sites(adapter, batch.inputs[:2], None)
        if not sites:
            raise invalid(adapter.where, "a network with activation modules (their patterns "
                          "delimit the linear regions)", "none (recurrent cells and functional "
                          "calls are not read)", "use te_nas, jacob_cov or snip")
        with torch.no_grad():
            codes = site_codes(adapter, sites, layers, adapter.measured(batch.inputs),
                               batch.inputs)
    return float(torch.unique(torch.cat(codes, dim=1), dim=0).shape[0])


KAPPAS = Check(lambda v: not isinstance(v, (str, bytes))
               and np.asarray(v, dtype=np.float64).size > 0
               and bool(np.all(np.asarray(v, dtype=np.float64) >= 1)),
               "a non-empty sequence of condition numbers >= 1 (inf allowed)",
               ((), ("a",), (float("nan"),), (0.5,)))


@constrained(condition_numbers=KAPPAS, region_counts=Numbers(0))
def te_nas_rank(condition_numbers: Sequence[float], region_counts: Sequence[float]
                ) -> np.ndarray:
    """TE-NAS's combined ranking of candidate architectures (Chen, Gong & Wang, ICLR 2021,
    section 3.3): the sum of an architecture's rank by kappa_N (1 = smallest condition
    number) and its rank by R_N (1 = most regions); the lowest sum is the best candidate.
    Ties share their average rank.

    Args:
        condition_numbers: :func:`te_nas` of each architecture (inf allowed).
        region_counts: :func:`te_nas_regions` of the same architectures, in the same order.

    Returns:
        Rank sums, shape (n_architectures,).

    Example:
        >>> te_nas_rank([10.0, 100.0, 50.0], [40, 90, 60]).tolist()
        [4.0, 4.0, 4.0]
    """
    kappa = np.asarray(condition_numbers, dtype=np.float64)
    regions = np.asarray(region_counts, dtype=np.float64)
    if kappa.shape != regions.shape:
        raise invalid("te_nas_rank()", "one condition number and one region count per "
                      "architecture", f"{kappa.size} condition numbers and {regions.size} "
                      "region counts", "pass the two indicators of the same architectures")
    return rankdata(kappa) + rankdata(-regions)
