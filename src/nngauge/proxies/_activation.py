"""Proxies of how differently a network at initialization treats the samples of a batch:
NASWOT's Hamming kernel of the codes of the units' linear pieces (:func:`piece_codes`, which
SWAP's sample-wise patterns read too), and jacob_cov, the spectrum of the correlation of input
Jacobians (Mellor, Turner, Storkey & Crowley, "Neural Architecture Search without
Training": ICML 2021 for NASWOT, its first version arXiv:2006.04647v1 for jacob_cov).
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np
import torch
from torch import nn

from nngauge._constraints import Integer, Real, constrained
from nngauge._internal.options import ModelOptions, model_options
from nngauge._internal.patterns import activation_sites, site_codes
from nngauge.errors import invalid
from nngauge.proxies._common import finite, proxy_batch

JACOB_COV_K = 1e-5
"""The regularizer k of jacob_cov's score (arXiv:2006.04647v1, section 3)."""


def piece_codes(adapter, inputs: torch.Tensor, where: str, fix: str
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """The linear piece every piecewise-linear unit is on, for each sample of ``inputs``: a
    (b, units) int8 matrix of r_u(x) = #{j : h_u(x) > c_j}, h_u the unit's pre-activation and
    c_1 < ... < c_k its activation's kinks, over every unit of every call of every
    piecewise-linear activation module with at least one kink (:mod:`nngauge._internal.patterns`
    knows their kinks: ReLU, leaky ReLU, PReLU, ReLU6, hardtanh, hardsigmoid and nngauge's
    piecewise-linear activations, modified ones included), in one forward pass; and the
    (units,) number of kinks k_u of each unit. A network without such a unit is refused,
    ``fix`` saying what to use instead."""
    sites, layers = activation_sites(adapter, inputs[:2], None)
    chosen = [(s, layer) for s, layer in zip(sites, layers)
              if layer.piecewise_linear and layer.breakpoints]
    if not chosen:
        found = sorted({s.type_name for s in sites})
        raise invalid(where, "a network with piecewise-linear activation modules (ReLU, leaky "
                      "ReLU, hardtanh, shifted or dilated ReLU, abs, ...) whose linear pieces "
                      "it reads; smooth activations (tanh, sigmoid, SELU, GELU, ...) have none",
                      f"activation modules {found}" if found else "no activation module "
                      "(the gates inside recurrent cells are not read)", fix)
    with torch.no_grad():
        codes = site_codes(adapter, [s for s, _ in chosen], [layer for _, layer in chosen],
                           adapter.measured(inputs), inputs)
    kinks = torch.cat([torch.full((code.shape[1],), len(layer.breakpoints), dtype=torch.int64)
                       for code, (_, layer) in zip(codes, chosen)])
    return torch.cat(codes, dim=1), kinks


@constrained()
@model_options("output", "input_module", "norm_mode", "dropout")
def naswot(model: nn.Module, data: Any, labels: Any = None, *, batch_size: int = 128,
           options: ModelOptions,
           generator: Optional[torch.Generator | int] = None) -> float:
    """Log-determinant of the Hamming kernel of the units' linear pieces (Mellor, Turner,
    Storkey & Crowley, "Neural Architecture Search without Training", ICML 2021, section 3,
    eq. 2).

    The paper codes each sample x_i of a batch by which rectified units are on: c_i in
    {0, 1}^{N_A}, and scores the network by the Hamming kernel of the codes. Here the code is
    read from every unit of every call of every piecewise-linear activation module (ReLU,
    leaky ReLU, PReLU, ReLU6, hardtanh, abs, nngauge's shifted or dilated ReLU of the NLC
    paper's sampler, ...): a unit u whose activation has kinks c_1 < ... < c_k contributes
    one bit per kink, b_uj(x) = [h_u(x) > c_j] for its pre-activation h_u(x) (ReLU: the
    paper's on/off bit; a shifted ReLU max(0, d s + t): the bit [s > -t / d]; hardtanh: two
    bits, 00 / 10 / 11 for the pieces -1 / linear / +1). The bits say which linear piece the
    unit is on; two pieces k - l apart differ in |k - l| bits. With N_A the number of bits and
    r_u(x) = sum_j b_uj(x) the index of the unit's piece,

        K_H[i, j] = N_A - d_H(c_i, c_j) = N_A - sum_u |r_u(x_i) - r_u(x_j)|,
        naswot = log |det K_H|      (slogdet, in float64),

    -inf when two samples share a code (K_H singular), as the authors' code gives. Units of
    smooth activations (tanh, sigmoid, SELU, GELU, ...: no linear pieces, no code) are not
    read; a network with none of piecewise-linear ones is refused (an InvalidInputError: a
    study records NaN). The batch runs as one forward pass (batchnorm as found: in train mode
    a code depends on the batch, as in the paper's setting). ``labels`` is accepted for a
    uniform signature and not read.

    Args:
        model: any module with piecewise-linear activation modules.
        data: inputs (b, ...), (inputs, labels), a Dataset or a DataLoader.
        labels: not read.
        batch_size: samples in the kernel (the paper's N = 128).
        output, input_module, norm_mode, dropout: how the model runs, as in
            :func:`nngauge.nlc`.
        generator: draws the batch (and dropout) when given; default the first samples.

    Returns:
        log |det K_H| (float; -inf when K_H is singular).

    Example:
        >>> import torch
        >>> from torch import nn
        >>> _ = torch.manual_seed(0)
        >>> net = nn.Sequential(nn.Linear(4, 64), nn.Hardtanh(), nn.Linear(64, 2))
        >>> naswot(net, 10 * torch.randn(8, 4)) > 0  # 8 distinct codes of 128 bits
        True
    """
    where = "naswot()"
    with proxy_batch(model, data, None, options, where=where, batch_size=batch_size,
                     generator=generator) as (adapter, batch, _):
        pieces, kinks = piece_codes(adapter, batch.inputs, where, "use jacob_cov or te_nas, "
                                    "which read any network")
    r = pieces.to(torch.float64).cpu()
    kernel = float(kinks.sum()) - torch.cdist(r, r, p=1)
    return float(torch.linalg.slogdet(kernel)[1])


@constrained(batch_size=Integer(2), k=Real(0, low_open=True))
@model_options("output", "input_module", "norm_mode", "dropout")
def jacob_cov(model: nn.Module, data: Any, labels: Any = None, *, batch_size: int = 128,
              k: float = JACOB_COV_K, options: ModelOptions,
              generator: Optional[torch.Generator | int] = None) -> float:
    """Score of the correlation of input Jacobians (Mellor, Turner, Storkey & Crowley, "Neural
    Architecture Search without Training", arXiv:2006.04647v1, 2020, section 3; as a NAS
    proxy: Abdelfattah et al., ICLR 2021, section 3).

    J (b x D) holds, for each sample x_i of a batch, the gradient of the summed outputs
    sum_c f_c(x_i) with respect to x_i (D the input's entries; one backward pass of the
    batch's summed outputs, as the authors' code does). With Sigma the correlation matrix of
    J's rows (``numpy.corrcoef``) and v its eigenvalues,

        jacob_cov = - sum_i [ log(v_i + k) + 1 / (v_i + k) ],   k = 1e-5,

    in float64; higher is better (less correlated Jacobians). For token models the input is
    the output of ``input_module`` (the embedding). ``labels`` is accepted for a uniform
    signature and not read.

    Args:
        model: any module whose output depends on its input.
        data: inputs (b, ...), (inputs, labels), a Dataset or a DataLoader.
        labels: not read.
        batch_size: samples (at least 2; the paper uses 128).
        k: the regularizer of the score.
        output, input_module, norm_mode, dropout: how the model runs, as in
            :func:`nngauge.nlc`.
        generator: draws the batch (and dropout) when given; default the first samples.

    Returns:
        The jacob_cov score (float).

    Example:
        >>> import torch
        >>> from torch import nn
        >>> net = nn.Sequential(nn.Linear(4, 64), nn.ReLU(), nn.Linear(64, 2))
        >>> isinstance(jacob_cov(net, torch.randn(8, 4)), float)
        True
    """
    where = "jacob_cov()"
    with proxy_batch(model, data, None, options, where=where, batch_size=batch_size,
                     generator=generator, min_samples=2) as (adapter, batch, _):
        x = adapter.measured(batch.inputs, requires_grad=True)
        out = adapter(x, batch.inputs)
        (jac,) = torch.autograd.grad(out.sum(), x, allow_unused=True)
        if jac is None:
            raise invalid(where, "a model whose output depends on its input",
                          "an output that does not", "measure a network that reads its input")
    rows = jac.detach().reshape(len(jac), -1).to(torch.float64).cpu().numpy()
    constant = np.ptp(rows, axis=1) == 0
    if constant.any():
        raise invalid(where, "input Jacobians that vary over the input's entries (their "
                      "correlation is undefined otherwise)",
                      f"{int(constant.sum())} constant Jacobian rows of {len(rows)}",
                      "check that the model reads every input, or use naswot / te_nas")
    v = np.linalg.eigvalsh(np.corrcoef(rows))
    return finite(float(-np.sum(np.log(v + k) + 1.0 / (v + k))), where, "jacob_cov score")
