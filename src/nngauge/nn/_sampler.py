"""The NLC paper's random architecture sampler (Philipp & Carbonell, arXiv:1806.00179, appendix C).

Each architecture is drawn independently:

- depth: uniform over the odd numbers 3, 5, ..., 49 (24 values);
- width: the same for every hidden layer, chosen so that the network has about 1 million
  trainable parameters (weights and biases of the linear layers; normalization has no
  trainable parameters and the last skip projection is fixed);
- linear operation: orthogonal initialization (always, in the paper); biases zero (50%) or
  N(0, 0.05) (50%), then the weights carry the sqrt(0.95) correction; finally all weights
  and biases are multiplied jointly by 0.9 (25%), 1 (50%) or 1.1 (25%);
- normalization: none (50%), batch (25%), layer (25%), without trainable parameters;
- activation tau: ReLU, SELU, Gaussian with probability 2/11 each; tanh, even tanh, sigmoid,
  square, odd square with 1/11 each; replaced by c tau(d s + t) + b with dilation d = 1 (50%),
  1.2 (25%), 0.8 (25%), shift t = 0 (50%), 0.2 (25%), -0.2 (25%), b debiasing it under a
  unit Gaussian (50%), and c always giving quadratic mean 1 under a unit Gaussian;
- skip connections: none (50%), strength 1 (25%), one strength uniform in (0, 1) (25%); they
  start after the linear operation (50%) or after the normalization (50%);
- post-processing: a network with a square or odd-square activation, or with skip
  connections, and without normalization gets batch or layer normalization (50% each).
  Aggregate frequencies after it: no normalization 9/44 = 20.45%, batch and layer 35/88 =
  39.77% each (the paper prints 20.4%, 39.8%, 39.8%).

Randomness comes from one ``torch.Generator``: :func:`sample_description` draws 12 uniforms
(always all of them, in a fixed order, so that overriding one choice leaves the others as
they were), and :func:`sample_architecture` then draws the weights from the same generator.
A torch generator (not numpy's) because the weights of :func:`nngauge.nn.mlp` come from one:
a single object then reproduces both the choices and the initialization; an int is taken as
the seed of a fresh ``torch.Generator``.
The paper's loss scaling (dividing the logits by their scale at initialization) belongs to
the training protocol, not to the architecture, and is not part of the sampler.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from typing import Optional, Union

import torch

from nngauge._constraints import Either, Instance, Integer, constrained
from nngauge._numbers import is_finite
from nngauge.activations import Activation, modify, unit_scale
from nngauge.activations import debias as _debias
from nngauge.errors import UnknownNameError, invalid
from nngauge.nn._mlp import MLP, mlp

TARGET_PARAMETERS = 1_000_000
"""Trainable parameters the width is chosen for (NLC paper, appendix C)."""
DEPTHS = tuple(range(3, 50, 2))
"""The odd depths 3..49, drawn uniformly."""
ACTIVATIONS = {"relu": 2 / 11, "selu": 2 / 11, "gaussian": 2 / 11, "tanh": 1 / 11,
               "even_tanh": 1 / 11, "sigmoid": 1 / 11, "square": 1 / 11, "odd_square": 1 / 11}
"""Base activations and their probabilities."""
DILATIONS = {1.0: 0.5, 1.2: 0.25, 0.8: 0.25}
SHIFTS = {0.0: 0.5, 0.2: 0.25, -0.2: 0.25}
SCALES = {1.0: 0.5, 0.9: 0.25, 1.1: 0.25}
NORMS = {None: 0.5, "batch": 0.25, "layer": 0.25}
SKIPS = {"none": 0.5, "unit": 0.25, "uniform": 0.25}
"""Skip kinds: no skips, strength 1, or one strength drawn uniformly from (0, 1)."""
BIAS_VARIANCE = 0.05
"""Variance of nonzero initial biases (from Schoenholz et al. 2017)."""
UNSTABLE_ACTIVATIONS = ("square", "odd_square")
"""Activations whose networks get a normalization in post-processing when they have none."""

Generator = Union[torch.Generator, int]
GENERATOR_OR_SEED = Either((Instance((torch.Generator,), "a torch.Generator", (None, "0")),
                            Integer(0, 2**64 - 1)))
"""A torch.Generator, or an int seed of a fresh one (what ``Generator.manual_seed`` takes)."""


@dataclass(frozen=True)
class ArchitectureDescription:
    """Every choice the sampler made for one architecture (NLC paper, appendix C).

    Attributes:
        d_in, d_out: input and output widths (given by the data).
        depth: number of linear layers (odd, 3..49).
        width: hidden width, for about 1M trainable parameters.
        activation: base activation name (one of :data:`ACTIVATIONS`).
        dilation, shift: d and t of c tau(d s + t) + b.
        debias: whether b makes the activation unbiased under a unit Gaussian.
        init: weight initialization ("orthogonal" in the paper; "gaussian" by override).
        bias_std: 0 or sqrt(0.05); nonzero biases bring the sqrt(0.95) weight correction.
        scale: joint multiplier of weights and biases (0.9, 1 or 1.1).
        norm_sampled: the normalization drawn before post-processing.
        norm: the normalization used (after post-processing).
        skip: None (no skips) or the strength of every skip connection.
        skip_start: skips start after the "linear" operation or after the "norm".
        n_parameters: trainable parameters of the resulting network.
    """

    d_in: int
    d_out: int
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
    skip_start: str
    n_parameters: int

    @property
    def post_processed(self) -> bool:
        """Whether post-processing added a normalization."""
        return self.norm != self.norm_sampled

    def activation_function(self) -> Activation:
        """c tau(d s + t) + b: modified, optionally debiased, then scaled to quadratic mean 1."""
        return modified_activation(self.activation, self.dilation, self.shift, self.debias)

    def to_dict(self) -> dict:
        """Every choice as plain Python, plus the activation spec and ``post_processed``."""
        return {**asdict(self), "activation_spec": self.activation_function().label,
                "post_processed": self.post_processed}


OVERRIDABLE = tuple(f.name for f in fields(ArchitectureDescription)
                    if f.name not in ("d_in", "d_out", "n_parameters", "norm_sampled"))
"""Choices that ``**overrides`` may fix."""


@constrained(generator=GENERATOR_OR_SEED, d_in=Integer(1), d_out=Integer(1))
def sample_description(generator: Generator, d_in: int, d_out: int,
                       **overrides) -> ArchitectureDescription:
    """Draw the choices of one architecture (NLC paper, appendix C) without building it.

    Args:
        generator: a ``torch.Generator`` (advanced by 12 uniform draws) or an int seed.
        d_in, d_out: input and output widths.
        **overrides: fix choices by name (see :data:`OVERRIDABLE`); a fixed choice is used as
            given: an overridden ``norm`` is not changed by post-processing, an overridden
            ``depth`` still gets the width for 1M parameters unless ``width`` is fixed too.

    Returns:
        :class:`ArchitectureDescription`.

    Raises:
        UnknownNameError: an override name that is not a choice (the message lists them).
        InvalidInputError: d_in or d_out not a positive integer, or an override of the
            wrong type.

    Example:
        >>> import torch
        >>> from nngauge.nn._sampler import sample_description
        >>> d = sample_description(torch.Generator().manual_seed(0), 784, 10, depth=5)
        >>> d.depth, d.depth in range(3, 50, 2), abs(d.n_parameters - 1_000_000) < 10_000
        (5, True, True)
    """
    where = "sample_description()"
    d_in, d_out = int(d_in), int(d_out)
    unknown = sorted(set(overrides) - set(OVERRIDABLE))
    if unknown:
        raise UnknownNameError(
            f"{where} expected override names among {list(OVERRIDABLE)}; got {unknown}. "
            "Fix: use one of those names.")
    _check_overrides(overrides, where)
    u = torch.rand(12, generator=_as_generator(generator), dtype=torch.float64).tolist()
    depth = overrides.get("depth", DEPTHS[min(int(u[0] * len(DEPTHS)), len(DEPTHS) - 1)])
    choices = draw_activation(u[1:5], overrides)
    activation = choices["activation"]
    skip_kind = _pick(SKIPS, u[8])
    skip = overrides.get("skip", {"none": None, "unit": 1.0, "uniform": u[9]}[skip_kind])
    norm_sampled = _pick(NORMS, u[7])
    norm = norm_sampled
    needs_norm = activation in UNSTABLE_ACTIVATIONS or skip is not None
    if needs_norm and norm is None:
        norm = "batch" if u[11] < 0.5 else "layer"
    norm = overrides.get("norm", norm)
    width = overrides.get("width", width_for_parameters(depth, d_in, d_out))
    return ArchitectureDescription(
        d_in=d_in, d_out=d_out, depth=depth, width=width, **choices,
        init=overrides.get("init", "orthogonal"),
        bias_std=float(overrides.get("bias_std", 0.0 if u[5] < 0.5 else math.sqrt(BIAS_VARIANCE))),
        scale=float(overrides.get("scale", _pick(SCALES, u[6]))),
        norm_sampled=norm_sampled if "norm" not in overrides else norm,
        norm=norm,
        skip=None if skip is None else float(skip),
        skip_start=overrides.get("skip_start", "linear" if u[10] < 0.5 else "norm"),
        n_parameters=count_parameters(depth, width, d_in, d_out),
    )


@constrained(generator=GENERATOR_OR_SEED, d_in=Integer(1), d_out=Integer(1))
def sample_architecture(generator: Generator, d_in: int, d_out: int,
                        **overrides) -> tuple[MLP, ArchitectureDescription]:
    """Sample an architecture as in the NLC paper (appendix C) and build it, initialized.

    The description is drawn by :func:`sample_description`; the weights are then drawn from
    the same generator by :func:`nngauge.nn.mlp` (orthogonal submatrices times
    max(1, sqrt(d_out / d_in)), the sqrt(0.95) correction with nonzero biases, the joint
    0.9 / 1.1 scaling, the fixed orthogonal last-skip projection).

    Args:
        generator: a ``torch.Generator`` or an int seed; the same generator state gives the
            same description and the same weights.
        d_in, d_out: input and output widths.
        **overrides: fix any choice by name, see :func:`sample_description`.

    Returns:
        ``(model, description)``: an :class:`~nngauge.nn.MLP` mapping (batch, d_in) to
        (batch, d_out), and its :class:`ArchitectureDescription`.

    Example:
        >>> import torch
        >>> from nngauge.nn._sampler import sample_architecture
        >>> model, d = sample_architecture(torch.Generator().manual_seed(0), 20, 3,
        ...                                depth=3, width=16)
        >>> model(torch.randn(4, 20)).shape, d.depth, d.width
        (torch.Size([4, 3]), 3, 16)
    """
    gen = _as_generator(generator)
    description = sample_description(gen, d_in, d_out, **overrides)
    model = mlp(d_in, description.width, description.depth, d_out,
                activation=description.activation_function(), norm=description.norm,
                skip=description.skip, skip_start=description.skip_start,
                init=description.init, bias_std=description.bias_std,
                scale=description.scale, generator=gen)
    return model, description


def count_parameters(depth: int, width: int, d_in: int, d_out: int) -> int:
    """Trainable parameters (weights and biases) of an MLP with ``depth`` linear layers."""
    if depth == 1:
        return d_in * d_out + d_out
    return ((d_in + 1) * width + (depth - 2) * (width + 1) * width + (width + 1) * d_out)


def width_for_parameters(depth: int, d_in: int, d_out: int,
                         target: int = TARGET_PARAMETERS) -> int:
    """The hidden width whose network has the parameter count closest to ``target``.

    Solves (depth - 2) w^2 + (d_in + d_out + depth - 1) w + d_out = target for w and takes
    the better of the two neighbouring integers (at least 1).
    """
    a, b, c = depth - 2, d_in + d_out + depth - 1, d_out - target
    root = -c / b if a == 0 else (-b + math.sqrt(b * b - 4 * a * c)) / (2 * a)
    candidates = {max(1, math.floor(root)), max(1, math.ceil(root))}
    return min(candidates, key=lambda w: (abs(count_parameters(depth, w, d_in, d_out) - target), w))


def draw_activation(u, overrides: dict) -> dict:
    """The activation choices of appendix C from four uniforms ``u`` (base activation,
    dilation, shift, debias), each unless fixed in ``overrides``: the keywords ``activation``,
    ``dilation``, ``shift`` and ``debias`` of :func:`modified_activation`."""
    return {"activation": overrides.get("activation", _pick(ACTIVATIONS, u[0])),
            "dilation": float(overrides.get("dilation", _pick(DILATIONS, u[1]))),
            "shift": float(overrides.get("shift", _pick(SHIFTS, u[2]))),
            "debias": overrides.get("debias", u[3] < 0.5)}


def modified_activation(activation: str, dilation: float, shift: float,
                        debias: bool) -> Activation:
    """c tau(d s + t) + b (appendix C): ``activation`` tau modified by dilation d and shift t,
    debiased under a unit Gaussian when ``debias``, then scaled to quadratic mean 1."""
    act = modify(activation, dilation=dilation, shift=shift)
    return unit_scale(_debias(act) if debias else act)


def _pick(probabilities: dict, u: float):
    """The category whose cumulative-probability interval contains the uniform ``u``."""
    total = 0.0
    for value, p in probabilities.items():
        total += p
        if u < total:
            return value
    return value  # u within rounding of 1


def _as_generator(generator: Generator) -> torch.Generator:
    if isinstance(generator, torch.Generator):
        return generator
    return torch.Generator().manual_seed(int(generator))


OVERRIDE_CHECKS = {
    "depth": (lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 2,
              "an integer >= 2 (odd with skip connections)"),
    "width": (lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 1,
              "an integer >= 1"),
    "activation": (lambda v: v in ACTIVATIONS, f"one of {list(ACTIVATIONS)}"),
    "debias": (lambda v: isinstance(v, bool), "True or False"),
    "init": (lambda v: v in ("orthogonal", "gaussian"), "'orthogonal' or 'gaussian'"),
    "norm": (lambda v: v in (None, "batch", "layer"), "None, 'batch' or 'layer'"),
    "skip": (lambda v: v is None or is_finite(v), "None or a finite strength"),
    "skip_start": (lambda v: v in ("linear", "norm"), "'linear' or 'norm'"),
    "bias_std": (lambda v: is_finite(v) and 0 <= v < 1, "a number in [0, 1)"),
    "dilation": (lambda v: is_finite(v) and v != 0, "a finite nonzero number"),
    "shift": (lambda v: is_finite(v), "a finite number"),
    "scale": (lambda v: is_finite(v) and v > 0, "a positive number"),
}
"""Override name -> (test, what it expects) of :func:`sample_description`."""


def _check_overrides(overrides: dict, where: str, checks: dict = OVERRIDE_CHECKS) -> None:
    for name, value in overrides.items():
        ok, expected = checks[name]
        if not ok(value):
            raise invalid(where, f"override {name} {expected}", f"{name}={value!r}",
                          f"pass {name} as {expected}, or leave it to the sampler")


__all__ = ["ArchitectureDescription", "OVERRIDABLE", "count_parameters", "sample_architecture",
           "sample_description", "width_for_parameters"]
