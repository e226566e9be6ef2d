"""The fully-connected networks of the NLC paper (appendix C), as ``nngauge.nn.mlp``.

A network of ``depth`` weight layers (depth 2 has one activation). Layer l = 1..depth is

    linear_l -> [norm_l] -> activation -> [dropout]     (the last layer is linear only)

with normalization none / batch / layer (no trainable affine parameters) and dropout of
probability ``dropout`` (Srivastava et al. 2014; none at 0, the default: the module is then
absent, and in eval mode dropout is the identity).

Skip connections (NLC appendix C, after He et al. 2016) bypass two layers: skip k starts after
the linear (or the normalization) of layer 2k - 1 and is added, times ``skip`` (its strength),
right after the linear operation of layer 2k + 1. ``depth`` must then be odd, so that the last
skip ends after the last linear operation; that last skip maps width -> d_out through a fixed
(untrained) d_out x width submatrix of a random orthogonal matrix times max(1, sqrt(d_out / width)).

Initialization (appendix C): ``init="orthogonal"``: W is a d_out x d_in submatrix of a uniformly
random orthogonal matrix times max(1, sqrt(d_out / d_in)); ``init="gaussian"``: W_ij ~
N(0, 1 / d_in). Both are then multiplied by ``sigma_w``, whose default sqrt(1 - bias_std^2)
is the paper's sqrt(0.95) correction for biases of variance 0.05 (and 1 for zero biases).
Biases are N(0, bias_std^2). ``scale`` multiplies weights and biases jointly (the paper's 0.9
and 1.1 factors).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Literal, Optional

import torch
from torch import nn

from nngauge._constraints import Check, Choice, Instance, Integer, Maybe, Real, constrained
from nngauge.activations import Activation
from nngauge.activations._spec import from_spec
from nngauge.errors import invalid

NormKind = Literal["batch", "layer"]
Norm = Optional[NormKind]
SkipStart = Literal["linear", "norm"]
Init = Literal["orthogonal", "gaussian"]


@dataclass(frozen=True)
class MLPConfig:
    """Everything that defines an :func:`mlp` (the theory engine reads it)."""

    d_in: int
    width: int
    depth: int
    d_out: int
    activation: str
    norm: Norm
    skip: Optional[float]
    skip_start: SkipStart
    init: Init
    sigma_w: float
    bias_std: float
    scale: float
    dropout: float = 0.0

    def to_dict(self) -> dict:
        return asdict(self)


class MLP(nn.Module):
    """A fully-connected network built by :func:`mlp`; ``config`` says how.

    Submodules are named ``layers.<i>.linear``, ``layers.<i>.norm``, ``layers.<i>.act`` and
    ``layers.<i>.drop`` (i = 0..depth-1; norm, act and drop where present); the fixed last-skip
    projection is the buffer ``skip_projection``.

    Shapes: input (batch, d_in) -> output (batch, d_out).
    """

    def __init__(self, config: MLPConfig, activation: Activation) -> None:
        super().__init__()
        self.config = config
        widths = [config.d_in] + [config.width] * (config.depth - 1) + [config.d_out]
        self.layers = nn.ModuleList()
        for i in range(config.depth):
            block = nn.Module()
            block.linear = nn.Linear(widths[i], widths[i + 1])
            last = i == config.depth - 1
            if config.norm is not None and not last:
                block.norm = (nn.BatchNorm1d(widths[i + 1], affine=False)
                              if config.norm == "batch"
                              else nn.LayerNorm(widths[i + 1], elementwise_affine=False))
            if not last:
                block.act = activation.module()
                if config.dropout > 0:
                    block.drop = nn.Dropout(config.dropout)
            self.layers.append(block)
        if config.skip is not None:
            self.register_buffer("skip_projection", torch.empty(config.d_out, config.width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        cfg = self.config
        skip = None
        for i, block in enumerate(self.layers):
            x = block.linear(x)
            ends_skip = cfg.skip is not None and i >= 2 and i % 2 == 0
            if ends_skip:
                carried = skip @ self.skip_projection.T if i == cfg.depth - 1 else skip
                x = x + cfg.skip * carried
            starts_skip = cfg.skip is not None and i % 2 == 0 and i < cfg.depth - 1
            if starts_skip and cfg.skip_start == "linear":
                skip = x
            if hasattr(block, "norm"):
                x = block.norm(x)
            if starts_skip and cfg.skip_start == "norm":
                skip = x
            if hasattr(block, "act"):
                x = block.act(x)
            if hasattr(block, "drop"):
                x = block.drop(x)
        return x

    def to_sequential(self) -> nn.Sequential:
        """The same function as an ``nn.Sequential`` of the same (shared) modules, in order
        ``linear, norm, act, drop`` per layer: what :func:`nngauge.skim` and other tools that
        work on a chain of children need. Only for networks without skip connections.

        Example:
            >>> import torch
            >>> net = mlp(4, 8, 3, 2, activation="tanh")
            >>> x = torch.randn(5, 4)
            >>> torch.equal(net.to_sequential()(x), net(x))
            True
        """
        if self.config.skip is not None:
            raise invalid("MLP.to_sequential()", "an MLP without skip connections",
                          f"skip={self.config.skip}",
                          "skip connections do not form a chain; build the MLP with skip=None")
        return nn.Sequential(*[module for block in self.layers for module in block.children()])


ACTIVATION = Instance((str, Activation), "an activation name or spec (str) or an "
                      "nngauge Activation", (3, None, ("relu",)))
"""What :func:`nngauge.activations.from_spec` accepts (the spec itself is parsed there)."""
DROPOUT = Real(0, 1, high_open=True)
"""A dropout probability: in [0, 1)."""
FLOAT_DTYPE = Check(lambda v: isinstance(v, torch.dtype) and v.is_floating_point,
                    "a floating-point torch.dtype, e.g. torch.float64",
                    ("float64", torch.int64, None))


@constrained(d_in=Integer(1), width=Integer(1), depth=Integer(1), d_out=Integer(1),
             activation=ACTIVATION, norm=Maybe(Choice.literal(NormKind)),
             skip=Maybe(Real()), skip_start=Choice.literal(SkipStart), init=Choice.literal(Init),
             sigma_w=Maybe(Real(0, low_open=True)), bias_std=Real(0),
             scale=Real(0, low_open=True), dropout=DROPOUT, dtype=FLOAT_DTYPE)
def mlp(
    d_in: int,
    width: int,
    depth: int,
    d_out: int,
    *,
    activation: str | Activation = "relu",
    norm: Norm = None,
    skip: Optional[float] = None,
    skip_start: SkipStart = "linear",
    init: Init = "orthogonal",
    sigma_w: Optional[float] = None,
    bias_std: float = 0.0,
    scale: float = 1.0,
    dropout: float = 0.0,
    generator: Optional[torch.Generator | int] = None,
    dtype: torch.dtype = torch.float32,
) -> MLP:
    """A fully-connected network as in the NLC paper, appendix C (see the module docstring).

    Args:
        d_in, width, depth, d_out: input width, hidden width, number of weight layers (>= 1),
            output width.
        activation: a registry name, a spec (``"normalize(modify(tanh, dilation=1.2))"``) or
            an :class:`~nngauge.activations.Activation`.
        norm: None, ``"batch"`` or ``"layer"`` (no trainable affine parameters).
        skip: None (no skip connections) or the skip strength, a finite number (1 is the usual
            residual net).
        skip_start: skips start after the ``"linear"`` operation or after the ``"norm"``.
        init: ``"orthogonal"`` (default, as the paper always did) or ``"gaussian"``.
        sigma_w: weight multiplier (> 0); default sqrt(1 - bias_std^2) (the paper's correction).
        bias_std: standard deviation of the initial biases, >= 0 (paper: 0 or sqrt(0.05)).
        scale: joint multiplier of weights and biases, > 0 (paper: 0.9, 1 or 1.1).
        dropout: probability in [0, 1) of zeroing each hidden unit after its activation, in
            training mode (default 0: no dropout module).
        generator: torch generator for a reproducible initialization.
        dtype: parameter dtype (floating point).

    Example:
        >>> import torch
        >>> from nngauge.nn import mlp
        >>> net = mlp(10, 32, 5, 3, activation="tanh", norm="batch", skip=1.0,
        ...           generator=torch.Generator().manual_seed(0))
        >>> net(torch.randn(4, 10)).shape
        torch.Size([4, 3])
    """
    where = "mlp()"
    d_in, width, depth, d_out = int(d_in), int(width), int(depth), int(d_out)
    if skip is not None and (depth < 3 or depth % 2 == 0):
        raise invalid(where, "an odd depth >= 3 with skip connections (each bypasses two "
                      "layers and the last ends at the output)", f"depth={depth}",
                      f"use depth={max(3, depth + 1 - depth % 2)} or skip=None")
    if sigma_w is None:
        if bias_std >= 1:
            raise invalid(where, "bias_std < 1 when sigma_w is left to its default "
                          "sqrt(1 - bias_std^2)", f"bias_std={bias_std}", "pass sigma_w explicitly")
        sigma_w = math.sqrt(1.0 - bias_std**2)
    act = from_spec(activation)
    config = MLPConfig(d_in, width, depth, d_out, act.label, norm,
                       None if skip is None else float(skip), skip_start, init,
                       float(sigma_w), float(bias_std), float(scale), float(dropout))
    model = MLP(config, act).to(dtype)
    _initialize(model, generator)
    return model


def orthogonal_submatrix(rows: int, cols: int, generator: Optional[torch.Generator],
                         dtype: torch.dtype) -> torch.Tensor:
    """A rows x cols submatrix of a uniformly random orthogonal matrix (Haar, by QR of a
    Gaussian matrix with the sign correction), times max(1, sqrt(rows / cols))."""
    n = max(rows, cols)
    gaussian = torch.randn(n, n, generator=generator, dtype=torch.float64)
    q, r = torch.linalg.qr(gaussian)
    q = q * torch.sign(torch.diagonal(r))
    return (q[:rows, :cols] * max(1.0, math.sqrt(rows / cols))).to(dtype)


@torch.no_grad()
def _initialize(model: MLP, generator: Optional[torch.Generator]) -> None:
    cfg = model.config
    for block in model.layers:
        weight, bias = block.linear.weight, block.linear.bias
        d_out, d_in = weight.shape
        if cfg.init == "orthogonal":
            weight.copy_(orthogonal_submatrix(d_out, d_in, generator, weight.dtype))
        else:
            weight.copy_(torch.randn(d_out, d_in, generator=generator, dtype=torch.float64)
                         / math.sqrt(d_in))
        weight.mul_(cfg.sigma_w * cfg.scale)
        bias.copy_(torch.randn(d_out, generator=generator, dtype=torch.float64)
                   * cfg.bias_std * cfg.scale)
    if cfg.skip is not None:
        model.skip_projection.copy_(orthogonal_submatrix(cfg.d_out, cfg.width, generator,
                                                         model.skip_projection.dtype))
