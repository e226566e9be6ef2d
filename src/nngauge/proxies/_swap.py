"""SWAP: the number of distinct sample-wise activation patterns (Peng, Song, Fayek, Ciesielski
& Chang, "SWAP-NAS: Sample-Wise Activation Patterns for Ultra-fast NAS", ICLR 2024, section 3),
read from the same linear pieces as NASWOT (:func:`nngauge.proxies._activation.piece_codes`).
"""

from __future__ import annotations

import math
from typing import Any, Optional

import torch
from torch import nn

from nngauge._constraints import Check, Integer, Maybe, constrained
from nngauge._internal.options import ModelOptions, model_options
from nngauge.proxies._activation import piece_codes
from nngauge.proxies._common import proxy_batch
from nngauge.proxies._cost import n_params

SWAP_SAMPLES = 16
"""Samples of the batch whose patterns SWAP reads: the authors' released code's default."""

REGULARIZATION = Check(lambda v: isinstance(v, (tuple, list)) and len(v) == 2
                       and all(isinstance(b, (int, float)) and not isinstance(b, bool)
                               and math.isfinite(b) for b in v) and v[1] > 0,
                       "a pair (mu, sigma) of finite numbers with sigma > 0",
                       ((1.0, 0.0), (1.0,), 3.0, (1.0, math.inf)))


@constrained(batch_size=Integer(1), regularization=Maybe(REGULARIZATION))
@model_options("output", "input_module", "norm_mode", "dropout")
def swap(model: nn.Module, data: Any, labels: Any = None, *, batch_size: int = SWAP_SAMPLES,
         regularization: Optional[tuple[float, float]] = None, options: ModelOptions,
         generator: Optional[torch.Generator | int] = None) -> float:
    """SWAP-Score: the number of distinct sample-wise activation patterns over a batch (Peng,
    Song, Fayek, Ciesielski & Chang, "SWAP-NAS: Sample-Wise Activation Patterns for
    Ultra-fast NAS", ICLR 2024, section 3), and its regularised form.

    NASWOT codes each sample by its units; SWAP transposes the code: a unit's sample-wise
    pattern is the vector of the linear pieces it is on for the S samples x_1..x_S of the
    batch, p_u = (r_u(x_1), ..., r_u(x_S)), with r_u(x) = #{j : h_u(x) > c_j} the piece of
    its pre-activation h_u among its activation's kinks c_1 < ... < c_k (ReLU: the paper's
    0/1, off/on; the same reading of every unit of every piecewise-linear activation call
    as :func:`naswot`: leaky ReLU, hardtanh, shifted or dilated ReLU, abs, ...). The score
    is the number of distinct patterns over the units,

        swap = #{p_u : u a unit}        (at most the number of units),

    and, with ``regularization=(mu, sigma)``, the regularised SWAP-Score that steers a search
    towards a model size (the paper's regularisation function of the parameter count Theta,
    here :func:`nngauge.proxies.n_params` in thousands, as the authors' code counts it):

        swap = #{p_u} * exp(-(Theta - mu)^2 / sigma).

    Units of smooth activations (tanh, sigmoid, SELU, GELU, ...: no linear pieces) are not
    read; a network with none of piecewise-linear ones is refused (an InvalidInputError: a
    study records NaN). The authors' code reads the ReLUs of convolutional feature maps
    (every channel and position a unit); here every piecewise-linear unit, of convolutions
    and linear layers alike. The batch runs as one forward pass (batchnorm as found).
    Direction: higher predicts higher accuracy. ``labels`` is not read.

    Args:
        model: any module with piecewise-linear activation modules.
        data: inputs (b, ...), (inputs, labels), a Dataset or a DataLoader.
        labels: not read.
        batch_size: S, the samples whose patterns are read (the authors' code: 16).
        regularization: (mu, sigma) of the regularised score, Theta and mu in thousands of
            parameters, sigma > 0 in their square; None (default): the plain count.
        output, input_module, norm_mode, dropout: how the model runs, as in
            :func:`nngauge.nlc`.
        generator: draws the batch (and dropout) when given; default the first samples.

    Returns:
        The number of distinct patterns (a whole number, as a float), times the
        regularisation factor when one is given.

    Example:
        >>> import torch
        >>> from torch import nn
        >>> net = nn.Sequential(nn.Linear(1, 3), nn.ReLU())
        >>> with torch.no_grad():  # units x, x - 1, x - 2: off/on patterns over x = 0.5, 1.5
        ...     _ = net[0].weight.fill_(1.0); _ = net[0].bias.copy_(torch.tensor([0., -1, -2]))
        >>> swap(net, torch.tensor([[0.5], [1.5]]))  # (1, 1), (0, 1), (0, 0): three
        3.0
    """
    where = "swap()"
    with proxy_batch(model, data, None, options, where=where, batch_size=batch_size,
                     generator=generator) as (adapter, batch, _):
        pieces, _ = piece_codes(adapter, batch.inputs, where, "use jacob_cov or te_nas, which "
                                "read any network")
    score = float(torch.unique(pieces.T, dim=0).shape[0])
    if regularization is None:
        return score
    mu, sigma = regularization
    theta = n_params(model) / 1e3
    return score * math.exp(-((theta - mu) ** 2) / sigma)


__all__ = ["swap"]
