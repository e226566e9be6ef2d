"""MeCo and MeCo_opt: the smallest eigenvalue of the Pearson correlation between a layer's
channels over one sample's feature map, summed over layers (Jiang, Wang & Bie, "MeCo:
Zero-Shot NAS with One Data and Single Forward Pass via Minimum Eigenvalue of Correlation",
NeurIPS 2023).

The paper relates the smallest eigenvalue of the feature maps' correlation to the convergence
rate and generalization of training; it needs one sample and one forward pass, no labels and
no gradient.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

import torch
from torch import nn

from nngauge._constraints import Integer, constrained
from nngauge._internal.options import ModelOptions, model_options
from nngauge._internal.sites import Site
from nngauge.errors import InvalidInputError, invalid
from nngauge.proxies._common import finite, proxy_batch

MECO_OPT_CHANNELS = 8
"""Channels MeCo_opt samples per layer (the authors' 8)."""
CONSTANT = 1e-9
"""A channel whose centred values have a norm below this fraction of its values' norm is
constant (its correlations are undefined: see :func:`meco`)."""


@constrained()
@model_options("output", "input_module", "norm_mode", "dropout")
def meco(model: nn.Module, data: Any, labels: Any = None, *, batch_size: int = 1,
         layers: Optional[str | Sequence[str]] = None, options: ModelOptions,
         generator: Optional[torch.Generator | int] = None) -> float:
    """MeCo: the smallest eigenvalue of the correlation matrix of each layer's channels over
    one sample's feature map, summed over the layers (Jiang, Wang & Bie, "MeCo: Zero-Shot NAS
    with One Data and Single Forward Pass via Minimum Eigenvalue of Correlation", NeurIPS
    2023, section 4): higher predicts higher accuracy.

    For a sample x and a layer l whose output is a feature map f_l(x) of C_l channels over
    P_l positions (a convolution's output (C, H, W); a linear layer applied per position of
    a sequence, (T, C)), P(f_l(x)) is the C_l x C_l Pearson correlation matrix of the channels
    (each channel a vector of P_l values), and

        MeCo(x) = sum over layers l of lambda_min(P(f_l(x))),

    averaged over the ``batch_size`` samples read (the paper's one sample by default). A
    correlation matrix is positive semi-definite with unit diagonal, so every term lies in
    [0, 1]: 0 when the channels are linearly dependent, always when C_l > P_l - 1 (the matrix
    then has rank at most P_l - 1: wide layers over few positions, such as a transformer of
    width 32 over 16 tokens, add 0); 1 when they are uncorrelated. A channel constant over the
    positions has no correlation: its row and column are 0, as in the authors' code (which
    replaces the NaN entries by 0), and the layer's term is 0. Eigenvalues in float64
    (``torch.linalg.eigvalsh``), rounding below 0 read as 0.

    The layers are the convolutional and linear layers (the weight layers' outputs; batchnorm
    rescales each channel and leaves the correlation unchanged), or those named in
    ``layers`` (channels on dimension 1 of a site's output, except a linear layer's, on the
    last). Layers giving one value per channel (an MLP's layers, a classifier head, a 1 x 1
    map) have no correlation over positions and are left out; a network with none left, such
    as an MLP or an LSTM classifier, is refused: MeCo is not defined for it. The samples run
    as one forward pass (batchnorm as found: in train mode, with the statistics of the
    ``batch_size`` samples). ``labels`` is accepted for a uniform signature and not read.

    Args:
        model: any module with convolutional (or per-position linear) layers.
        data: inputs (b, ...), (inputs, labels), a Dataset or a DataLoader.
        labels: not read.
        batch_size: samples whose MeCo is averaged (the paper: one).
        layers: the layers read (module or site names); default the convolutional and
            linear layers.
        output, input_module, norm_mode, dropout: how the model runs, as in
            :func:`nngauge.nlc`.
        generator: draws the samples (and dropout) when given; default the first samples.

    Returns:
        MeCo (float, between 0 and the number of layers read).

    Example:
        >>> import torch
        >>> from torch import nn
        >>> net = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.Conv2d(8, 8, 3))
        >>> 0 < meco(net, torch.randn(4, 3, 12, 12)) <= 2
        True
    """
    return _meco("meco()", model, data, options, batch_size, layers, None, generator)


@constrained(n_channels=Integer(2))
@model_options("output", "input_module", "norm_mode", "dropout")
def meco_opt(model: nn.Module, data: Any, labels: Any = None, *, batch_size: int = 1,
             n_channels: int = MECO_OPT_CHANNELS,
             layers: Optional[str | Sequence[str]] = None, options: ModelOptions,
             generator: Optional[torch.Generator | int] = None) -> float:
    """MeCo_opt: :func:`meco` on a random subset of each layer's channels, rescaled (Jiang,
    Wang & Bie, NeurIPS 2023, section 4, the paper's cheaper variant): higher predicts higher
    accuracy.

    For each layer l with C_l > n channels, n = ``n_channels`` channels S_l are drawn without
    replacement (the first n of ``torch.randperm(C_l, generator=generator)``, layer after
    layer in the order of the forward pass, the same channels for every sample), and

        MeCo_opt(x) = sum over layers l of (C_l / n) lambda_min(P(f_l(x)[S_l])),

    a layer with at most n channels reading all of them (factor 1); averaged over the
    ``batch_size`` samples read. The eigenvalue of an n x n correlation is only 0 when the n
    sampled channels are dependent (P_l <= n), where MeCo's is 0 whenever C_l > P_l - 1, and
    its cost does not grow with the width. Layers, samples, constant channels, refusals: as in
    :func:`meco`.

    Args:
        model, data, labels, batch_size, layers, output, input_module, norm_mode, dropout:
            as in :func:`meco`.
        n_channels: channels sampled per layer n (the authors' 8).
        generator: draws the channels, the samples (and dropout); None: torch's global
            generator draws the channels, and the samples are the first ones.

    Returns:
        MeCo_opt (float >= 0).

    Example:
        >>> import torch
        >>> from torch import nn
        >>> net = nn.Sequential(nn.Conv2d(3, 16, 3), nn.ReLU(), nn.Conv2d(16, 16, 3))
        >>> meco_opt(net, torch.randn(4, 3, 12, 12), generator=0) > 0
        True
    """
    return _meco("meco_opt()", model, data, options, batch_size, layers, n_channels, generator)


def _meco(where: str, model: nn.Module, data: Any, options: ModelOptions, batch_size: int,
          layers: Optional[str | Sequence[str]], n_channels: Optional[int],
          generator: Optional[torch.Generator]) -> float:
    """MeCo (``n_channels`` None) or MeCo_opt, averaged over the samples read."""
    with proxy_batch(model, data, None, options, where=where, batch_size=batch_size,
                     generator=generator) as (adapter, batch, _):
        try:
            sites = adapter.sites(batch.inputs, layers, default_kinds=("conv", "linear"))
            with torch.no_grad():
                _, values = adapter.run(adapter.measured(batch.inputs), sites, raw=batch.inputs)
        except InvalidInputError as exc:
            if len(batch) > 1 or not adapter.coupled:
                raise
            raise invalid(where, "a model that runs on one sample", "batchnorm normalizing "
                          "with batch statistics, undefined over one sample where a channel "
                          f"holds one value (torch: {exc.__cause__ or exc})",
                          "pass batch_size=2 or more (MeCo is averaged over the samples), or "
                          "norm_mode='eval' (running statistics) or 'frozen'") from exc
    maps = [m for m in (_channel_maps(s, values.get(s.name)) for s in sites) if m is not None]
    if not maps:
        raise invalid(where, "layers whose outputs are feature maps of 2 or more channels over "
                      "2 or more positions (convolutions; linear layers applied per position "
                      "of a sequence), whose channels MeCo correlates",
                      f"{len(sites)} layers read, none with such a map (one value per channel "
                      "and sample: an MLP's layers, a classifier head)" if sites else
                      "no convolutional or linear layer", "MeCo is not defined for this "
                      "network: use zico or zen_score, or name layers= whose outputs are "
                      "feature maps")
    total = torch.zeros((), dtype=torch.float64)
    for m in maps:
        channels, scale = m.shape[1], 1.0
        if n_channels is not None and channels > n_channels:
            m = m[:, torch.randperm(channels, generator=generator)[:n_channels]]
            scale = channels / n_channels
        total = total + scale * _min_correlation_eigenvalue(m)
    return finite(float(total.mean()), where, "MeCo")


def _channel_maps(site: Site, value: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
    """A site's output as (b, C, P) float64 maps of its channels over its positions (channels
    on dimension 1, a linear layer's on the last), or None without 2 channels and 2 positions
    (or without a floating output)."""
    if value is None or not value.is_floating_point() or value.dim() < 3:
        return None
    if site.kind == "linear":
        value = value.movedim(-1, 1)
    maps = value.detach().to(torch.float64).reshape(value.shape[0], value.shape[1], -1)
    return maps if maps.shape[1] >= 2 and maps.shape[2] >= 2 else None


def _min_correlation_eigenvalue(maps: torch.Tensor) -> torch.Tensor:
    """lambda_min of the Pearson correlation of the rows of each (C, P) matrix of ``maps``
    (b, C, P), shape (b,), in [0, 1]; a constant row (see :data:`CONSTANT`) correlates with
    nothing and has a zero row and column, which makes the smallest eigenvalue 0."""
    centred = maps - maps.mean(-1, keepdim=True)
    norms = centred.norm(dim=-1, keepdim=True)
    constant = norms <= CONSTANT * maps.norm(dim=-1, keepdim=True)
    unit = torch.where(constant, 0.0, centred / torch.where(constant, 1.0, norms))
    correlation = unit @ unit.transpose(-1, -2)
    return torch.linalg.eigvalsh(correlation)[..., 0].clamp(0.0, 1.0)
