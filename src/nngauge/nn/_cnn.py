"""Small convolutional classifiers, as ``nngauge.nn.cnn``, and their random sampler.

The second architecture family of nngauge's predictor benchmark (issue 21: predict test error
before training, nngauge's predictors against zero-cost proxies): small CNNs on the 8 x 8
digits images; with a two-entry ``image_shape`` (C, L), the same blocks in one dimension: the
1-D CNNs and residual 1-D CNNs of the model zoo (:mod:`nngauge.studies`, ``[grid]``) on
signals such as MNIST-1D's length-40 sequences (Greydanus, "Scaling down Deep Learning",
arXiv:2011.14439, 2020). The first family is the fully-connected networks of the NLC paper's sampler
(Philipp & Carbonell, "The Nonlinearity Coefficient - Predicting Generalization in Deep Neural
Networks", arXiv:1806.00179, 2018, appendix C; :func:`nngauge.nn.sample_architecture`);
:func:`sample_cnn` draws this family with the same activations, initialization scales and
normalization rule.

A network takes FLAT inputs (batch, C*H*W) (or already shaped (batch, C, H, W)), reshapes them
to ``image_shape`` and applies ``depth`` blocks, block i = 0..depth-1 being

    h -> drop(act(norm(conv_i(h)))) [+ skip * h when i >= 1] [-> max pool when i in pool_after]

(conv: kernel 3, padding 1, ``width`` output channels; norm: none or batch normalization
without trainable affine parameters; drop: dropout of probability ``dropout``, absent at 0;
the residual skip of strength ``skip`` is the identity, so ``skip=1`` makes a residual network
in the sense of He et al. 2016 with one convolution per block; max pool: 2x2, or 2 in one
dimension), then global average pooling over the remaining positions and a linear read-out to
d_out. Signals (``image_shape`` = (C, L), inputs (batch, C*L) or (batch, C, L)) take the same
blocks with one-dimensional convolutions (kernel 3), batch normalization and pooling.

Initialization as :func:`nngauge.nn.mlp` (NLC appendix C), a convolution's weight read as the
out x (in * 3 * 3) matrix of its fan-in (out x (in * 3) in one dimension):
``init="orthogonal"``: a submatrix of a uniformly random orthogonal matrix times
max(1, sqrt(rows / cols)); ``init="gaussian"``: entries N(0, 1 / fan_in). Weights are
multiplied by ``sigma_w`` (default sqrt(1 - bias_std^2)), biases are N(0, bias_std^2), and
``scale`` multiplies both.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from typing import Optional, Sequence

import torch
from torch import nn

from nngauge._constraints import Check, Choice, Integer, Maybe, Real, constrained
from nngauge.activations import Activation
from nngauge.activations._spec import from_spec
from nngauge.errors import UnknownNameError, invalid
from nngauge.nn._mlp import ACTIVATION, DROPOUT, FLOAT_DTYPE, Init, orthogonal_submatrix
from nngauge.nn._sampler import (
    BIAS_VARIANCE,
    GENERATOR_OR_SEED,
    OVERRIDE_CHECKS,
    SCALES,
    SKIPS,
    UNSTABLE_ACTIVATIONS,
    Generator,
    _as_generator,
    _check_overrides,
    _pick,
    draw_activation,
    modified_activation,
)

KERNEL = 3
"""Convolution kernel size (padding 1 keeps H x W)."""


def _positive_ints(value, length: Optional[int] = None) -> bool:
    return (isinstance(value, (tuple, list)) and (length is None or len(value) == length)
            and all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in value))


IMAGE_SHAPE = Check(lambda v: _positive_ints(v) and len(v) in (2, 3),
                    "two or three positive integers: (channels, length) of signals or "
                    "(channels, height, width) of images", ((8,), (1, 0, 8), "1x8x8"))
POOL_AFTER = Check(lambda v: isinstance(v, (tuple, list)) and all(
    isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in v) and len(set(v)) == len(v),
    "a sequence of distinct block indices >= 0", ((-1,), (1, 1), 2))


_LAYERS = {1: (nn.Conv1d, nn.BatchNorm1d, nn.MaxPool1d),
           2: (nn.Conv2d, nn.BatchNorm2d, nn.MaxPool2d)}
"""Spatial dimensions -> (convolution, batch normalization, max pooling)."""


@dataclass(frozen=True)
class CNNConfig:
    """Everything that defines a :func:`cnn`."""

    d_in: int
    width: int
    depth: int
    d_out: int
    image_shape: tuple[int, ...]
    activation: str
    norm: Optional[str]
    skip: Optional[float]
    pool_after: tuple[int, ...]
    init: Init
    sigma_w: float
    bias_std: float
    scale: float
    dropout: float = 0.0

    def to_dict(self) -> dict:
        """Plain JSON-ready content plus ``"family": "cnn"``: ``cnn(**d)`` without the family
        rebuilds the network."""
        return {"family": "cnn", **asdict(self), "image_shape": list(self.image_shape),
                "pool_after": list(self.pool_after)}


class CNN(nn.Module):
    """A convolutional network built by :func:`cnn`; ``config`` says how.

    Submodules: ``blocks.<i>.conv``, ``blocks.<i>.norm``, ``blocks.<i>.act``, ``blocks.<i>.drop``,
    ``blocks.<i>.pool`` (i = 0..depth-1; norm, drop and pool where present) and ``readout``.

    Shapes: input (batch, C*H*W) or (batch, C, H, W) -> output (batch, d_out); for signals,
    (batch, C*L) or (batch, C, L).
    """

    def __init__(self, config: CNNConfig, activation: Activation) -> None:
        super().__init__()
        self.config = config
        channels = config.image_shape[0]
        conv, norm, pool = _LAYERS[len(config.image_shape) - 1]
        self.blocks = nn.ModuleList()
        for i in range(config.depth):
            block = nn.Module()
            block.conv = conv(channels if i == 0 else config.width, config.width, KERNEL,
                              padding=KERNEL // 2)
            if config.norm == "batch":
                block.norm = norm(config.width, affine=False)
            block.act = activation.module()
            if config.dropout > 0:
                block.drop = nn.Dropout(config.dropout)
            if i in config.pool_after:
                block.pool = pool(2)
            self.blocks.append(block)
        self.readout = nn.Linear(config.width, config.d_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        cfg = self.config
        shape = tuple(cfg.image_shape)
        if not isinstance(x, torch.fx.Proxy):  # concrete shapes: checked (torch.fx traces on)
            if tuple(x.shape[1:]) not in (shape, (cfg.d_in,)):
                raise invalid("CNN.forward()", f"inputs (batch, {cfg.d_in}) or (batch, "
                              f"{', '.join(map(str, shape))})", f"shape {tuple(x.shape)}",
                              "pass the flattened images or build cnn() with their image_shape")
        x = x.reshape(x.shape[0], *shape)
        for i, block in enumerate(self.blocks):
            h = block.conv(x)
            if hasattr(block, "norm"):
                h = block.norm(h)
            h = block.act(h)
            if hasattr(block, "drop"):
                h = block.drop(h)
            x = h + cfg.skip * x if cfg.skip is not None and i >= 1 else h
            if hasattr(block, "pool"):
                x = block.pool(x)
        return self.readout(x.mean(dim=tuple(range(1 - len(shape), 0))))



@constrained(d_in=Integer(1), width=Integer(1), depth=Integer(1), d_out=Integer(1),
             image_shape=IMAGE_SHAPE, activation=ACTIVATION, norm=Maybe(Choice("batch")),
             skip=Maybe(Real()), pool_after=POOL_AFTER, init=Choice("orthogonal", "gaussian"),
             sigma_w=Maybe(Real(0, low_open=True)), bias_std=Real(0),
             scale=Real(0, low_open=True), dropout=DROPOUT, dtype=FLOAT_DTYPE)
def cnn(
    d_in: int,
    width: int,
    depth: int,
    d_out: int,
    *,
    image_shape: Sequence[int] = (1, 8, 8),
    activation: str | Activation = "relu",
    norm: Optional[str] = None,
    skip: Optional[float] = None,
    pool_after: Sequence[int] = (),
    init: Init = "orthogonal",
    sigma_w: Optional[float] = None,
    bias_std: float = 0.0,
    scale: float = 1.0,
    dropout: float = 0.0,
    generator: Optional[torch.Generator | int] = None,
    dtype: torch.dtype = torch.float32,
) -> CNN:
    """A small convolutional classifier on flat image or signal inputs (see the module
    docstring): the "small CNNs on digits images" family of the predictor benchmark,
    counterpart of the NLC paper's MLPs (Philipp & Carbonell, arXiv:1806.00179, appendix C),
    and with ``image_shape=(C, L)`` the 1-D CNN (``skip=1.0``: residual 1-D CNN) of the model
    zoo.

    Args:
        d_in: input features C*H*W or C*L (must equal the product of ``image_shape``).
        width: channels of every block. depth: number of conv blocks (>= 1). d_out: outputs.
        image_shape: (C, H, W) of images or (C, L) of signals the flat inputs are reshaped to
            (default digits' (1, 8, 8)); two entries make every layer one-dimensional.
        activation: a registry name, a spec or an :class:`~nngauge.activations.Activation`.
        norm: None or ``"batch"`` (BatchNorm2d without trainable affine parameters).
        skip: None, or the strength of the identity skip around each block after the first.
        pool_after: blocks followed by max pooling (each pooling halves H and W, or L,
            rounding down; no more poolings than keep them >= 1).
        init: ``"orthogonal"`` (default) or ``"gaussian"``, as :func:`nngauge.nn.mlp`.
        sigma_w: weight multiplier (> 0); default sqrt(1 - bias_std^2).
        bias_std: standard deviation of the initial biases, >= 0.
        scale: joint multiplier of weights and biases, > 0.
        dropout: probability in [0, 1) of zeroing each unit of a block after its activation,
            in training mode (default 0: no dropout module).
        generator: torch generator for a reproducible initialization.
        dtype: parameter dtype (floating point).

    Example:
        >>> import torch
        >>> from nngauge.nn import cnn
        >>> net = cnn(64, 8, 3, 10, activation="tanh", norm="batch", skip=1.0, pool_after=(0,),
        ...           generator=torch.Generator().manual_seed(0))
        >>> net(torch.randn(4, 64)).shape, net(torch.randn(4, 1, 8, 8)).shape
        (torch.Size([4, 10]), torch.Size([4, 10]))
        >>> resnet1d = cnn(40, 16, 4, 10, image_shape=(1, 40), skip=1.0, pool_after=(0, 1),
        ...                dropout=0.25, generator=0)  # a residual 1-D CNN on (n, 40) signals
        >>> resnet1d(torch.randn(4, 40)).shape, type(resnet1d.blocks[0].conv).__name__
        (torch.Size([4, 10]), 'Conv1d')
    """
    where = "cnn()"
    d_in, width, depth, d_out = int(d_in), int(width), int(depth), int(d_out)
    image_shape, pool_after = tuple(image_shape), tuple(sorted(pool_after))
    if math.prod(image_shape) != d_in:
        raise invalid(where, "image_shape whose product C*H*W is d_in",
                      f"image_shape={image_shape} for d_in={d_in}",
                      "pass the (C, H, W) of the flattened inputs")
    if pool_after and pool_after[-1] >= depth:
        raise invalid(where, f"pool_after indices of blocks 0..{depth - 1}",
                      f"pool_after={pool_after}", "drop the indices past the last block")
    if len(pool_after) > max_poolings(image_shape):
        size = "x".join(map(str, image_shape[1:]))
        raise invalid(where, f"at most {max_poolings(image_shape)} poolings, keeping the "
                      f"{size} {'image' if len(image_shape) == 3 else 'signal'} at least "
                      f"{'1x1' if len(image_shape) == 3 else '1'}",
                      f"pool_after={pool_after}", "pool after fewer blocks")
    if sigma_w is None:
        if bias_std >= 1:
            raise invalid(where, "bias_std < 1 when sigma_w is left to its default "
                          "sqrt(1 - bias_std^2)", f"bias_std={bias_std}", "pass sigma_w explicitly")
        sigma_w = math.sqrt(1.0 - bias_std**2)
    act = from_spec(activation)
    config = CNNConfig(d_in, width, depth, d_out, image_shape, act.label, norm,
                       None if skip is None else float(skip), pool_after, init,
                       float(sigma_w), float(bias_std), float(scale), float(dropout))
    model = CNN(config, act).to(dtype)
    _initialize(model, generator)
    return model


def max_poolings(image_shape: Sequence[int]) -> int:
    """How many poolings by 2 keep an (C, H, W) image at least 1x1, or a (C, L) signal at
    least 1 long: floor(log2(min(H, W))), floor(log2(L))."""
    return int(math.log2(min(image_shape[1:])))


@torch.no_grad()
def _initialize(model: CNN, generator: Optional[torch.Generator]) -> None:
    cfg = model.config
    layers = [block.conv for block in model.blocks] + [model.readout]
    for layer in layers:
        weight, bias = layer.weight, layer.bias
        rows, fan_in = weight.shape[0], weight[0].numel()
        if cfg.init == "orthogonal":
            matrix = orthogonal_submatrix(rows, fan_in, generator, weight.dtype)
        else:
            matrix = (torch.randn(rows, fan_in, generator=generator, dtype=torch.float64)
                      / math.sqrt(fan_in))
        weight.copy_(matrix.reshape(weight.shape))
        weight.mul_(cfg.sigma_w * cfg.scale)
        bias.copy_(torch.randn(rows, generator=generator, dtype=torch.float64)
                   * cfg.bias_std * cfg.scale)


def describe_cnn(config: dict) -> str:
    """A short name of a :class:`CNNConfig` dict.

    Example:
        >>> describe_cnn({"depth": 4, "width": 16, "activation": "relu", "norm": "batch",
        ...               "skip": 1.0, "pool_after": [0, 2], "bias_std": 0.0, "scale": 1.0})
        'cnn depth 4, width 16, relu, batch norm, skip 1, pool after 0, 2'
    """
    parts = [f"cnn depth {config['depth']}", f"width {config['width']}", config["activation"]]
    if config.get("norm"):
        parts.append(f"{config['norm']} norm")
    if config.get("skip") is not None:
        parts.append(f"skip {config['skip']:.3g}")
    if config.get("pool_after"):
        parts.append("pool after " + ", ".join(map(str, config["pool_after"])))
    if config.get("dropout"):
        parts.append(f"dropout {config['dropout']:g}")
    if config.get("bias_std"):
        parts.append(f"bias std {config['bias_std']:.3g}")
    if config.get("scale", 1.0) != 1.0:
        parts.append(f"scale {config['scale']:g}")
    return ", ".join(parts)


# ------------------------------------------------------------------------------------ sampler

DEPTHS = tuple(range(2, 9))
"""Depths 2..8, drawn uniformly."""
WIDTHS = (8, 16, 32)
"""Channels, drawn uniformly."""
NORMS = {None: 0.5, "batch": 0.5}
MAX_SAMPLED_POOLINGS = 2
"""Poolings drawn uniformly from 0..2 (fewer when the depth or the image allows fewer)."""
N_UNIFORMS = 12 + max(DEPTHS)
"""Uniforms every draw takes, whatever the choices (12 choices + one key per possible block)."""


@dataclass(frozen=True)
class CNNDescription:
    """Every choice :func:`sample_cnn` made for one CNN.

    Attributes:
        d_in, d_out, image_shape: given by the data.
        depth, width: blocks (2..8) and channels (8, 16 or 32).
        activation, dilation, shift, debias: c tau(d s + t) + b as in the MLP sampler.
        init, bias_std, scale: initialization, as in the MLP sampler.
        norm_sampled, norm: the normalization drawn, and the one used (after post-processing).
        skip: None or the strength of every residual skip.
        pool_after: blocks followed by 2x2 max pooling.
        n_parameters: trainable parameters of the resulting network.
    """

    d_in: int
    d_out: int
    image_shape: tuple[int, int, int]
    depth: int
    width: int
    activation: str
    dilation: float
    shift: float
    debias: bool
    init: str
    bias_std: float
    scale: float
    norm_sampled: Optional[str]
    norm: Optional[str]
    skip: Optional[float]
    pool_after: tuple[int, ...]
    n_parameters: int

    @property
    def post_processed(self) -> bool:
        """Whether post-processing added a normalization."""
        return self.norm != self.norm_sampled

    def activation_function(self) -> Activation:
        """c tau(d s + t) + b: modified, optionally debiased, then scaled to quadratic mean 1."""
        return modified_activation(self.activation, self.dilation, self.shift, self.debias)

    def to_dict(self) -> dict:
        """Every choice as plain Python, plus the family, the activation spec and
        ``post_processed``."""
        return {"family": "cnn", **asdict(self), "image_shape": list(self.image_shape),
                "pool_after": list(self.pool_after),
                "activation_spec": self.activation_function().label,
                "post_processed": self.post_processed}


CNN_OVERRIDES = ("depth", "width", "activation", "dilation", "shift", "debias", "init",
                 "bias_std", "scale", "norm", "skip", "pool_after")
"""Choices that ``**overrides`` of :func:`sample_cnn` may fix."""
_CNN_CHECKS = {
    **{name: OVERRIDE_CHECKS[name] for name in CNN_OVERRIDES if name in OVERRIDE_CHECKS},
    "depth": (lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 1,
              "an integer >= 1"),
    "norm": (lambda v: v in NORMS, "None or 'batch'"),
    "pool_after": (POOL_AFTER.test, POOL_AFTER.what),
}


@constrained(generator=GENERATOR_OR_SEED, d_in=Integer(1), d_out=Integer(1),
             image_shape=IMAGE_SHAPE)
def sample_cnn(generator: Generator, d_in: int, d_out: int, *,
               image_shape: Sequence[int] = (1, 8, 8), **overrides) -> tuple[CNN, CNNDescription]:
    """Sample a small CNN (see the module docstring) and build it, initialized.

    Each choice is independent (the MLP sampler's, NLC paper appendix C, where one applies):

    - depth: uniform over 2..8 (1/7 each); width: 8, 16, 32 (1/3 each);
    - activation tau: ReLU, SELU, Gaussian 2/11 each; tanh, even tanh, sigmoid, square, odd
      square 1/11 each; as c tau(d s + t) + b with d = 1 (50%), 1.2 (25%), 0.8 (25%), t = 0
      (50%), 0.2 (25%), -0.2 (25%), debiased (50%), c giving quadratic mean 1;
    - initialization: orthogonal; biases 0 (50%) or N(0, 0.05) (50%, weights then times
      sqrt(0.95)); weights and biases jointly times 0.9 (25%), 1 (50%), 1.1 (25%);
    - normalization: none (50%), batch (50%);
    - skips: none (50%), strength 1 (25%), one strength uniform in (0, 1) (25%);
    - pooling: after k blocks, k uniform over 0, 1, 2 (1/3 each; k capped at the depth and at
      the poolings the image allows), the k blocks uniform among all subsets of that size;
    - post-processing: a square or odd-square activation, or skips, without normalization get
      batch normalization (the MLP sampler draws batch or layer; a CNN has only batch).

    The choices take 20 uniforms of the generator (always all of them, in a fixed order, so
    that an override leaves the other choices as they were); the weights are then drawn from
    the same generator by :func:`cnn`. An int is the seed of a fresh ``torch.Generator``.

    Args:
        generator: a ``torch.Generator`` or an int seed.
        d_in, d_out: input features (the product of ``image_shape``) and outputs.
        image_shape: (C, H, W) of the flat inputs.
        **overrides: fix choices by name (:data:`CNN_OVERRIDES`), used as given (an overridden
            ``norm`` is not post-processed).

    Returns:
        ``(model, description)``: a :class:`CNN` and its :class:`CNNDescription`.

    Raises:
        UnknownNameError: an override name that is not a choice (the message lists them).
        InvalidInputError: an override of the wrong type, or an image_shape whose product is
            not d_in.

    Example:
        >>> import torch
        >>> from nngauge.nn import sample_cnn
        >>> model, d = sample_cnn(torch.Generator().manual_seed(0), 64, 10, depth=3)
        >>> model(torch.randn(4, 64)).shape, d.depth, d.width in (8, 16, 32)
        (torch.Size([4, 10]), 3, True)
    """
    where = "sample_cnn()"
    unknown = sorted(set(overrides) - set(CNN_OVERRIDES))
    if unknown:
        raise UnknownNameError(f"{where} expected override names among {list(CNN_OVERRIDES)}; "
                               f"got {unknown}. Fix: use one of those names.")
    _check_overrides(overrides, where, _CNN_CHECKS)
    image_shape = tuple(image_shape)
    gen = _as_generator(generator)
    u = torch.rand(N_UNIFORMS, generator=gen, dtype=torch.float64).tolist()
    depth = overrides.get("depth", DEPTHS[min(int(u[0] * len(DEPTHS)), len(DEPTHS) - 1)])
    choices = draw_activation(u[2:6], overrides)
    skip_kind = _pick(SKIPS, u[9])
    skip = overrides.get("skip", {"none": None, "unit": 1.0, "uniform": u[10]}[skip_kind])
    norm_sampled = _pick(NORMS, u[8])
    needs_norm = choices["activation"] in UNSTABLE_ACTIVATIONS or skip is not None
    norm = overrides.get("norm", "batch" if needs_norm else norm_sampled)
    n_pools = min(int(u[11] * (MAX_SAMPLED_POOLINGS + 1)), depth, max_poolings(image_shape))
    keys = u[12:12 + depth]
    pool_after = tuple(sorted(overrides.get(
        "pool_after", sorted(range(depth), key=keys.__getitem__)[:n_pools])))
    settings = dict(
        depth=depth, width=overrides.get("width", WIDTHS[min(int(u[1] * 3), 2)]),
        init=overrides.get("init", "orthogonal"),
        bias_std=float(overrides.get("bias_std", 0.0 if u[6] < 0.5 else math.sqrt(BIAS_VARIANCE))),
        scale=float(overrides.get("scale", _pick(SCALES, u[7]))), norm=norm,
        skip=None if skip is None else float(skip), pool_after=pool_after)
    description = CNNDescription(d_in=int(d_in), d_out=int(d_out), image_shape=image_shape,
                                 **choices, norm_sampled=norm_sampled if "norm" not in overrides
                                 else norm, n_parameters=0, **settings)
    model = cnn(d_in, d_out=d_out, image_shape=image_shape,
                activation=description.activation_function(), generator=gen, **settings)
    n_parameters = sum(p.numel() for p in model.parameters() if p.requires_grad)
    return model, replace(description, n_parameters=n_parameters)


__all__ = ["CNN", "CNNConfig", "CNNDescription", "CNN_OVERRIDES", "cnn", "describe_cnn",
           "max_poolings", "sample_cnn"]
