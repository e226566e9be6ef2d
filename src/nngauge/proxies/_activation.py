"""Proxies of how differently a network at initialization treats the samples of a batch:
NASWOT's Hamming kernel of ReLU on/off codes, and jacob_cov, the spectrum of the correlation
of input Jacobians (Mellor, Turner, Storkey & Crowley, "Neural Architecture Search without
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


@constrained()
@model_options("output", "input_module", "norm_mode", "dropout")
def naswot(model: nn.Module, data: Any, labels: Any = None, *, batch_size: int = 128,
           options: ModelOptions,
           generator: Optional[torch.Generator | int] = None) -> float:
    """Log-determinant of the Hamming kernel of ReLU codes (Mellor, Turner, Storkey & Crowley,
    "Neural Architecture Search without Training", ICML 2021, section 3, eq. 2).

    For each sample x_i of a batch, c_i in {0, 1}^{N_A} is the on/off code of every
    rectified unit (1 when its pre-activation is > 0), over every call of every ReLU-type
    activation module (``nn.ReLU``, ``nn.LeakyReLU``, ``nn.PReLU``: two linear pieces meeting
    at 0). With d_H the Hamming distance,

        K_H[i, j] = N_A - d_H(c_i, c_j) = c_i . c_j + (1 - c_i) . (1 - c_j),
        naswot = log |det K_H|      (slogdet, in float64),

    -inf when two samples share a code (K_H singular), as the authors' code gives. Other
    activations (GELU, tanh, ...) have no on/off code and are not read; a network without
    any ReLU-type module is refused. The batch runs as one forward pass (batchnorm as found:
    in train mode a code depends on the batch, as in the paper's setting). ``labels`` is
    accepted for a uniform signature and not read.

    Args:
        model: any module with ReLU-type activation modules.
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
        >>> net = nn.Sequential(nn.Linear(4, 64), nn.ReLU(), nn.Linear(64, 2))
        >>> naswot(net, torch.randn(8, 4)) > 0
        True
    """
    where = "naswot()"
    with proxy_batch(model, data, None, options, where=where, batch_size=batch_size,
                     generator=generator) as (adapter, batch, _):
        sites, layers = activation_sites(adapter, batch.inputs[:2], None)
        chosen = [(s, layer) for s, layer in zip(sites, layers)
                  if layer.piecewise_linear and layer.breakpoints == (0.0,)]
        if not chosen:
            found = sorted({type(s.module).__name__ for s in sites})
            raise invalid(where, "a network with ReLU-type activation modules (nn.ReLU, "
                          "nn.LeakyReLU, nn.PReLU) whose on/off codes NASWOT reads",
                          f"activation modules {found}" if found else "no activation module "
                          "(recurrent cells and functional calls are not read)",
                          "use jacob_cov or te_nas, which need no ReLU")
        with torch.no_grad():
            x = adapter.measured(batch.inputs)
            codes = site_codes(adapter, [s for s, _ in chosen], [layer for _, layer in chosen],
                               x, batch.inputs)
        c = torch.cat(codes, dim=1).to(torch.float64)
        kernel = c @ c.T + (1 - c) @ (1 - c).T
        return float(torch.linalg.slogdet(kernel.cpu())[1])


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
