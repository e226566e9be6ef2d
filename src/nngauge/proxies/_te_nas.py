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

from dataclasses import replace
from typing import Any, Optional, Sequence

import numpy as np
import torch
from scipy.stats import rankdata
from torch import nn

from nngauge._constraints import Check, Integer, Numbers, constrained
from nngauge._internal.ntk import empirical_ntk, plan_ntk
from nngauge._internal.options import ModelOptions, model_options
from nngauge._internal.patterns import activation_sites
from nngauge.errors import invalid
from nngauge.measures.expressivity._regions import regions
from nngauge.proxies._common import finite, per_point, proxy_batch, trainable
from nngauge.theory import condition_number
from nngauge.trajectories import make_plane


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
        plan = plan_ntk(len(x), 1, sum(p.numel() for _, p in params), n_probes=1,
                        per_sample=not adapter.coupled)

        def summed(xs: torch.Tensor, raw: torch.Tensor) -> torch.Tensor:
            return adapter(xs, raw).reshape(len(xs), -1).sum(1, keepdim=True)

        theta = empirical_ntk(summed, adapter.model, x, batch.inputs, plan,
                              per_sample=not adapter.coupled, generator=generator,
                              note=adapter.note)
    return finite(condition_number(theta), where, "NTK condition number (a zero kernel)")


TE_NAS_RESOLUTION = 55
"""Grid points per side of :func:`te_nas_regions`' plane: 55 x 55 = 3,025, about the 3,000
inputs (3 batches of 1,000) over which the authors' code counts."""
TE_NAS_BOX = (0.0, 1.0, 0.0, 1.0)
"""The part of the plane :func:`te_nas_regions` counts over, in plane coordinates: the
parallelogram x0 + u (x1 - x0) + v (x2 - x0), 0 <= u, v <= 1, spanned by three samples."""


@constrained(resolution=Integer(2))
@model_options("output", "input_module", "norm_mode")
def te_nas_regions(model: nn.Module, data: Any, labels: Any = None, *,
                   resolution: int = TE_NAS_RESOLUTION, options: ModelOptions,
                   generator: Optional[torch.Generator | int] = None) -> float:
    """Number of linear regions met by about 3,000 points of a low-dimensional part of input
    space (Chen, Gong & Wang, ICLR 2021, section 3.1.2): TE-NAS's expressivity indicator R_N,
    higher is better.

    R_N = #{distinct activation patterns among the points}, a pattern being the region of
    every unit of every activation call (ReLU: off / on; the linear piece of any
    piecewise-linear activation; the sign of the pre-activation for activations that are not
    piecewise linear), read by nngauge's activation-pattern machinery. The authors count over
    3,000 inputs of reduced dimension: random 1 x 3 x 3 crops of training images through a
    one-channel copy of the candidate (their code's ``Linear_Region_Collector(input_size=(1000,
    1, 3, 3), sample_batch=3)``), because at full input size every sample falls in a region of
    its own and R_N equals the number of samples for every network (the first author's answer
    to issue 10 of the authors' repository, VITA-Group/TENAS). A given network's input size
    cannot be reduced; the same reduction here is a plane of input space: the points are the
    ``resolution`` x ``resolution`` grid (cell centres) of the parallelogram x0 + u (x1 - x0)
    + v (x2 - x0), 0 <= u, v <= 1, spanned by three samples x0, x1, x2 of ``data`` (the first
    three, or three drawn by ``generator``), counted as :func:`nngauge.regions` counts with
    ``method="grid"`` (which this calls): 55 x 55 = 3,025 points by default, about the
    authors' 3,000. For the count over given points (e.g. the data's samples) use
    :func:`nngauge.activation_patterns`; for the exact number of regions of the plane,
    :func:`nngauge.regions`.

    A point's pattern must not depend on the other points: batchnorm using batch statistics
    is frozen on ``data`` (``norm_mode="frozen"``) unless ``norm_mode`` says otherwise. For
    token models the plane lies in the output of ``input_module`` (the embedding), through the
    three samples' embeddings. ``labels`` is accepted for a uniform signature and not read.

    Args:
        model: any module with activation modules.
        data: inputs (b >= 3, ...), (inputs, labels), a Dataset or a DataLoader.
        labels: not read.
        resolution: grid points per side of the parallelogram (R_N is at most resolution^2).
        output, input_module: as in :func:`nngauge.nlc`.
        norm_mode: "eval" or "frozen"; None: as found, frozen where that is batch statistics.
        generator: draws the three samples when given; default the first three.

    Returns:
        R_N (a whole number, as a float).

    Example:
        >>> import torch
        >>> from torch import nn
        >>> net = nn.Sequential(nn.Linear(2, 2), nn.ReLU())  # kinks at x1 = 0.5, x2 = 0.5
        >>> with torch.no_grad():
        ...     _ = net[0].weight.copy_(torch.eye(2)); _ = net[0].bias.fill_(-0.5)
        >>> te_nas_regions(net, torch.tensor([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0]]))
        4.0
    """
    where = "te_nas_regions()"
    options = per_point(model, options)
    with proxy_batch(model, data, None, options, where=where, batch_size=3,
                     generator=generator, min_samples=3) as (adapter, batch, _):
        sites, _ = activation_sites(adapter, batch.inputs[:2], None)
        if not sites:
            raise invalid(where, "a network with activation modules (their patterns "
                          "delimit the linear regions)", "none (the gates inside recurrent cells "
                          "are not read)", "use te_nas, jacob_cov or snip")
        anchors = adapter.measured(batch.inputs[:3]).detach()
        embedded = replace(options, input_module=adapter.input_module)
    plane = make_plane(*anchors, None, where)
    return float(regions(model, plane, bounds=TE_NAS_BOX, method="grid", resolution=resolution,
                         options=embedded, norm_data=data,
                         template=batch.inputs[0] if embedded.input_module else None).n_regions)


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
