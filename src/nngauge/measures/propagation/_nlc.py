"""The nonlinearity coefficient (NLC) of any network and of its sub-networks, and output bias.

Definition 1 of the NLC paper (Philipp & Carbonell, section 3):

    NLC(f, D) = Q_x ||J(x)||_F * Q_i(S_x x(i)) / (sqrt(d_out) * Q_j(S_x f(x, j)))

with Q the quadratic mean, S_x the standard deviation over the data and J(x) = df/dx. Section G
computes Q_x ||J(x)||_F stochastically: for a unit Gaussian u, Q_u ||u J||_2 = ||J||_F, so
back-propagating Gaussian probes from the output and taking the quadratic mean of the input
gradients estimates it. For batchnorm networks (a sample's output depends on its batch) the
paper replaces Q_x ||J(x)||_F by Q_X ||J(X)||_F / sqrt(b), J(X) the (b d_out) x (b d_in)
Jacobian of the whole batch output with respect to the whole batch input, and S_x f by the
standard deviation of all outputs observed over the batches; both reduce to the definition
without batchnorm. That single estimator is used here for every network.

Output bias (section B.2): Q_{j,x} f(x, j) / Q_j(S_x f(x, j)); the paper flags as high bias
the architectures where it exceeds 1000.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal, Optional, Sequence

import torch
from torch import nn

from nngauge._constraints import Choice, Integer, constrained
from nngauge._internal.adapter import MeasurementMode, ModelAdapter
from nngauge._internal.jacobian import (
    exact_squared_columns,
    forward_tangents,
    probe_squared_columns,
)
from nngauge._internal.options import ModelOptions, model_options
from nngauge._internal.probing import (
    OUTPUT,
    Moments,
    UnitStats,
    check_min_samples,
    gaussian_like,
)
from nngauge._results import Result
from nngauge.errors import invalid

Method = Literal["probe", "forward", "exact"]
HIGH_BIAS_THRESHOLD = 1000.0
"""NLC paper section 4 / B.2: 1000 Q_j(S_x f(x, j)) < Q_{j,x} f(x, j) marks high output bias."""
PROFILE_KINDS = ("linear", "conv", "norm", "activation")
ISOTROPY_SAMPLES = 1024
"""Samples (the first ones seen) whose covariance gives ``input_isotropy``."""


@dataclass(frozen=True)
class NLCLayer(Result):
    """The NLC of the sub-network from the input to one layer's output."""

    name: str
    nlc: float
    stderr: float
    jacobian_rms: float
    output_std: float
    output_bias: float
    high_bias: bool
    d_out: int


@dataclass(frozen=True)
class NLCResult(Result):
    """The NLC of a network on data (NLC paper Definition 1, estimator of section G).

    Attributes:
        nlc: the nonlinearity coefficient.
        stderr: its standard error from the spread of the probe (or exact) values over
            independent units: samples, or batches for batch-coupled networks (delta method).
        jacobian_rms: Q_x ||J(x)||_F (Q_X ||J(X)||_F / sqrt(b) for batch-coupled networks).
        input_std: Q_i(S_x x(i)) = sqrt(Tr(C_x) / d_in).
        output_std: Q_j(S_x f(x, j)) = sqrt(Tr(C_f) / d_out).
        output_bias: Q_{j,x} f(x, j) / Q_j(S_x f(x, j)) (section B.2).
        high_bias: output_bias > 1000, the paper's flag.
        d_in, d_out: input and output dimensions (numel per sample).
        n_samples: samples seen.
        batch_size: samples per batch.
        method: "probe" (Gaussian probes, section G) or "exact" (full Jacobians).
        batch_coupled: whether the network couples the samples of a batch (batchnorm in
            train mode); then Jacobians are of the whole batch.
        n_probes: Gaussian probes per batch (probe method).
        input_isotropy: tr(C_x)^2 / (d_in tr(C_x^2)) of the measured inputs' covariance C_x,
            in (0, 1]: 1 for isotropic inputs, about k / d_in when the variance lies in k of
            the d_in directions. Definition 1 gives 1 for a linear network only near 1 (see
            :func:`nlc`).
        mode: how the model was run (:class:`~nngauge.MeasurementMode`): output, input
            module, batchnorm and dropout modes, precision, fallbacks.
    """

    _summary = ("nlc", "output_bias")

    nlc: float
    stderr: float
    jacobian_rms: float
    input_std: float
    output_std: float
    output_bias: float
    high_bias: bool
    d_in: int
    d_out: int
    n_samples: int
    batch_size: int
    method: str
    batch_coupled: bool
    n_probes: int
    input_isotropy: float
    mode: MeasurementMode


@dataclass(frozen=True)
class NLCProfile(Result):
    """NLC of the sub-network from the input to each chosen layer (NLC paper section 5: the
    NLC compounds roughly exponentially with depth).

    Attributes:
        layers: one :class:`NLCLayer` per measured layer, in forward order, then the output.
        skipped: ``{layer name: reason}`` for layers that could not be measured (never run
            by the forward pass, or not differentiable with respect to the input).
        input_std, d_in, n_samples, batch_size, method, batch_coupled, n_probes,
            input_isotropy, mode: as in :class:`NLCResult`.
    """

    _rows = "layers"
    _headline = "nlc"

    layers: tuple[NLCLayer, ...]
    skipped: dict
    input_std: float
    d_in: int
    n_samples: int
    batch_size: int
    method: str
    batch_coupled: bool
    n_probes: int
    input_isotropy: float
    mode: MeasurementMode

    def plot(self, ax=None):
        """NLC (log scale) of each sub-network against its layer; returns the Axes. Needs
        matplotlib."""
        from nngauge._plots import line_per_layer

        return line_per_layer([l.name for l in self.layers], [l.nlc for l in self.layers],
                             ylabel="NLC of input -> layer", log=True, ax=ax)


@constrained(method=Choice.literal(Method), n_probes=Integer(1))
@model_options("output", "input_module", "norm_mode", "dropout")
def nlc(
    model: nn.Module,
    data: Any,
    *,
    batch_size: int = 250,
    n_batches: Optional[int] = None,
    method: Method = "probe",
    n_probes: int = 1,
    options: ModelOptions,
    generator: Optional[torch.Generator | int] = None,
) -> NLCResult:
    """The nonlinearity coefficient of ``model`` on ``data`` (NLC paper, Definition 1).

    NLC = Q_x ||J(x)||_F Q_i(S_x x(i)) / (sqrt(d_out) Q_j(S_x f(x, j))), estimated as in
    section G: Gaussian probes back-propagated through the whole batch output, divided by
    sqrt(b) (this equals the per-sample definition for networks without batchnorm). By
    default batchnorm runs as found (train mode: batch statistics, as at initialization in the
    paper) and dropout is off; the model's mode, parameters, requires_grad flags and buffers
    are restored afterwards.

    Definition 1 equals 1 for a linear network only when the input covariance is isotropic
    (all directions of equal variance): Q_x ||J||_F Q_i(S_x x(i)) / Q_j(S_x f(j)) compares
    the Jacobian's average gain with the gain on the data's directions. On strongly
    anisotropic data (smooth images, embeddings) a near-linear network can read well below 1;
    whiten the data first (:func:`nngauge.data.preprocess`, the paper's appendix D.2) to
    compare with the paper's numbers. The result's ``input_isotropy`` says how far from
    isotropic the measured inputs are.

    Args:
        model: any module mapping a batch (b, ...) to outputs (b, ...).
        data: inputs, (inputs, labels), a Dataset or a DataLoader; inputs of any shape. They
            are converted (copied) to the model's dtype and device.
        batch_size: batch size b (the paper uses 250).
        n_batches: number of batches; None is one pass over the data (the paper uses 100
            random batches of 250: pass ``n_batches=100, generator=...``).
        method: "probe" (default: one backward pass per probe, the paper's estimator) or
            "exact" (full Jacobian of every batch by batched backward passes: costs
            b * d_out backward passes per batch, for small models and checks).
        n_probes: Gaussian probes per batch, back-propagated together (probe method).
        output: which output to measure when the model returns a dict, tuple or ModelOutput
            (key, index or callable; default: the "logits" entry when there is one).
        input_module: measure from this submodule's output (e.g. the embedding of a token
            model: the NLC of embeddings -> output); integer inputs default to the first
            nn.Embedding.
        norm_mode: batchnorm's statistics: "train" (batch), "eval" (running), "frozen"
            (computed on the data, then fixed), None (as found).
        dropout: keep dropout on (drawn from ``generator``); default off.
        generator: torch.Generator for the probes, the batch order and dropout
            (deterministic).

    Returns:
        :class:`NLCResult`.

    Example:
        >>> import torch
        >>> from nngauge import nlc
        >>> from nngauge.nn import mlp
        >>> model = mlp(10, 64, 4, 3, activation="tanh", generator=torch.Generator().manual_seed(0))
        >>> x = torch.randn(500, 10, generator=torch.Generator().manual_seed(1))
        >>> round(nlc(model, x, generator=torch.Generator().manual_seed(2)).nlc, 1) > 0.5
        True
    """
    adapter = ModelAdapter(model, options, where="nlc()")
    profile = _nlc_pass(adapter, data, None, (), batch_size=batch_size, n_batches=n_batches,
                        method=method, n_probes=n_probes, generator=generator)
    out = profile.layers[-1]
    return NLCResult(
        nlc=out.nlc, stderr=out.stderr, jacobian_rms=out.jacobian_rms,
        input_std=profile.input_std, output_std=out.output_std, output_bias=out.output_bias,
        high_bias=out.high_bias, d_in=profile.d_in, d_out=out.d_out,
        n_samples=profile.n_samples, batch_size=batch_size, method=method,
        batch_coupled=profile.batch_coupled, n_probes=n_probes,
        input_isotropy=profile.input_isotropy, mode=profile.mode,
    )


@constrained(method=Choice.literal(Method), n_probes=Integer(1))
@model_options("output", "input_module", "norm_mode", "dropout")
def nlc_profile(
    model: nn.Module,
    data: Any,
    *,
    layers: Optional[Sequence[str]] = None,
    batch_size: int = 250,
    n_batches: Optional[int] = None,
    method: Method = "probe",
    n_probes: int = 1,
    options: ModelOptions,
    generator: Optional[torch.Generator | int] = None,
) -> NLCProfile:
    """NLC of the sub-network from the input to each layer, and of the whole network.

    Every layer's output is treated as the output f of Definition 1 (its Jacobian with
    respect to the input, its standard deviation over the data). One forward pass per batch
    serves every layer; one backward pass per layer and probe.

    Args:
        layers: module names (``model.named_modules()``; a module called k times per forward
            pass has the sites "name#1".."name#k") or site names; default: every linear,
            conv, normalization and activation leaf, in the order the forward pass reaches
            them.
        Others: as :func:`nlc`.

    Returns:
        :class:`NLCProfile` whose last row, ``"output"``, is the whole network.
    """
    adapter = ModelAdapter(model, options, where="nlc_profile()")
    return _nlc_pass(adapter, data, layers, PROFILE_KINDS, batch_size=batch_size,
                     n_batches=n_batches, method=method, n_probes=n_probes, generator=generator)


@dataclass
class _Target:
    """Running statistics of one measured output (a layer or the network output)."""

    name: str
    moments: Moments
    jacobian: UnitStats
    skipped: Optional[str] = None


def _nlc_pass(adapter: ModelAdapter, data, layers: Optional[Sequence[str]], kinds, *,
              batch_size, n_batches, method, n_probes, generator) -> NLCProfile:
    where = adapter.where
    inputs = Moments()
    seen: list[torch.Tensor] = []
    with adapter.active(generator=generator, data=data):
        coupled = adapter.coupled
        sites = adapter.sites(adapter.collect(data, 2).inputs, layers, default_kinds=kinds)
        targets = {s.name: _Target(s.name, Moments(), UnitStats()) for s in sites}
        targets[OUTPUT] = _Target(OUTPUT, Moments(), UnitStats())
        for batch in adapter.batches(data, batch_size=batch_size, n_batches=n_batches,
                                     generator=generator):
            check_min_samples(len(batch), 2 if coupled else 1, where, "batch statistics")
            if method == "forward":
                try:
                    x, measured = _forward_squares(adapter, batch.inputs, sites, n_probes,
                                                   generator)
                except NotImplementedError as exc:
                    adapter.note(f"forward-mode derivatives are missing for an operation of "
                                 f"this model ({str(exc).splitlines()[0]}); the NLC used "
                                 "back-propagated probes (method 'probe')")
                    method = "probe"
            if method != "forward":
                x, measured = _reverse_squares(adapter, batch.inputs, sites, method, n_probes,
                                               generator)
            inputs.update(x)
            if sum(len(v) for v in seen) < ISOTROPY_SAMPLES:
                seen.append(x.detach().reshape(len(x), -1).to(torch.float64).cpu())
            for name, (y, squared) in measured.items():
                _accumulate(targets[name], y, squared, coupled, where)
    check_min_samples(inputs.count, 2, where, "input and output standard deviations")
    input_std = inputs.std_quadratic_mean()
    rows, skipped = [], {}
    for target in targets.values():
        if (target.skipped is None and target.name != OUTPUT
                and target.moments.std_quadratic_mean() == 0.0):
            target.skipped = "constant over the data (standard deviation 0)"
        if target.skipped is not None:
            skipped[target.name] = target.skipped
        else:
            rows.append(_row(target, input_std, where))
    return NLCProfile(layers=tuple(rows), skipped=skipped, input_std=input_std, d_in=inputs.dim,
                      n_samples=inputs.count, batch_size=batch_size, method=method,
                      batch_coupled=coupled, n_probes=n_probes,
                      input_isotropy=input_isotropy(torch.cat(seen)[:ISOTROPY_SAMPLES]),
                      mode=adapter.mode)


def input_isotropy(x: torch.Tensor) -> float:
    """tr(C)^2 / (d tr(C^2)) for the covariance C of the rows of x (n, d): 1 for isotropic
    data, about k / d when the variance spans k directions.

    With S the sample covariance (denominator n - 1), tr(S^2) overestimates tr(C^2) by about
    tr(C)^2 / n (a sample of n points spans at most n directions, so n < d isotropic points
    would look anisotropic); the unbiased estimate under normality,
    (n - 1)^2 / ((n - 2)(n + 1)) (tr(S^2) - tr(S)^2 / (n - 1)), is used instead (Bai and
    Saranadasa, 1996), through the n x n Gram matrix (tr S = tr G, tr S^2 = ||G||_F^2,
    G = X_c X_c^T / (n - 1)). Clipped to [0, 1]; nan for constant data or n < 3."""
    n, d = x.shape
    if n < 3:
        return math.nan
    centred = x - x.mean(0)
    gram = centred @ centred.T / (n - 1)
    trace, square = float(torch.trace(gram)), float((gram * gram).sum())
    estimate = (n - 1) ** 2 / ((n - 2) * (n + 1)) * (square - trace ** 2 / (n - 1))
    if trace <= 0:
        return math.nan
    return min(1.0, trace ** 2 / (d * estimate)) if estimate > 0 else 1.0


def _reverse_squares(adapter, raw, sites, method, n_probes, generator):
    """x, and per output (site or model): its value and the per-sample squared norms of
    u J (Gaussian probes u back-propagated, section G) or of J's columns (exact)."""
    x = adapter.measured(raw, requires_grad=True)
    y, captured = adapter.run(x, sites, raw=raw)
    outputs = {**{s.name: captured.get(s.name) for s in sites}, OUTPUT: y}
    measured = {}
    for name, value in outputs.items():
        if value is None or not value.requires_grad:
            measured[name] = (value, None)
            continue
        measured[name] = (value, exact_squared_columns(x, value) if method == "exact"
                          else probe_squared_columns(x, value, n_probes, generator))
    return x.detach(), measured


def _forward_squares(adapter, raw, sites, n_probes, generator):
    """x, and per output: its value and the per-sample squared norms ||J v||^2 averaged over
    ``n_probes`` Gaussian input directions v (E_v ||J v||^2 = ||J||_F^2), every output from
    the same forward-mode pass."""
    x = adapter.measured(raw)

    def run(xd):
        y, captured = adapter.run(xd, sites, raw=raw)
        return {**{s.name: captured.get(s.name) for s in sites}, OUTPUT: y}

    totals: dict = {}
    values: dict = {}
    for _ in range(n_probes):
        v = gaussian_like(x, generator)
        for name, (value, tangent) in forward_tangents(run, x, v).items():
            values[name] = value
            if tangent is None or name in totals and totals[name] is None:
                totals[name] = None
                continue
            square = tangent.reshape(len(x), -1).pow(2).sum(1).to(torch.float64).cpu()
            totals[name] = totals.get(name, 0) + square / n_probes
    outputs = {s.name: None for s in sites}
    outputs.update({name: (values[name], totals[name]) for name in values})
    return x, {name: (value if isinstance(value, tuple) else (None, None))
               for name, value in outputs.items()}


def _accumulate(target: _Target, y, squared, coupled, where) -> None:
    if target.skipped is not None:
        return
    if y is None:
        target.skipped = "not called by the forward pass"
        return
    if squared is None:
        if target.name == OUTPUT:
            raise invalid(where, "a model output that depends differentiably on its input",
                          "an output with no gradient path to the input",
                          "check for detach(), no_grad() or integer casts in forward()")
        target.skipped = "no differentiable path from the input"
        return
    target.moments.update(y)
    # squared[i]: ||u J||^2 (or ||J v||^2) restricted to sample i, or the squared Frobenius
    # norm of J(X)'s input columns of sample i (exact); sums to ||.||^2 of the batch.
    target.jacobian.extend(squared.sum().reshape(1) / len(squared) if coupled else squared)


def _row(target: _Target, input_std: float, where: str) -> NLCLayer:
    moments = target.moments
    output_std = moments.std_quadratic_mean()
    jac_sq = target.jacobian.mean()
    jacobian_rms = math.sqrt(jac_sq)
    if output_std == 0.0:
        raise invalid(where, f"outputs of {target.name!r} that vary over the data",
                      "a constant output (standard deviation 0)",
                      "pass more diverse inputs, or check the model is not saturated/dead")
    value = jacobian_rms * input_std / (math.sqrt(moments.dim) * output_std)
    stderr = value * target.jacobian.stderr() / (2.0 * jac_sq) if jac_sq > 0 else math.nan
    bias = moments.quadratic_mean() / output_std
    return NLCLayer(name=target.name, nlc=value, stderr=stderr, jacobian_rms=jacobian_rms,
                    output_std=output_std, output_bias=bias,
                    high_bias=bias > HIGH_BIAS_THRESHOLD, d_out=moments.dim)
