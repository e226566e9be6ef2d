"""nngauge's own predictors in the zero-cost proxies' form: one number per network at
initialization, ``proxy(model, data, labels=None, *, ..., generator=None) -> float``, so that
they can be ranked beside :mod:`nngauge.proxies`' saliency, activation and TE-NAS proxies.

Each function is a thin wrapper over the nngauge measure named in its docstring (the measure
does the work, runs the model through the same adapter and restores its state); the wrapper
chooses the layer(s) a per-layer measure is read at, and reduces the result to one number.
Options are the measure's, with its defaults, except where a docstring says otherwise
(``n_batches=1``: one batch, as the other proxies read).

:data:`DIRECTIONS` says, for these and for the zero-cost proxies, whether a higher value
predicts a higher (+1) or a lower (-1) accuracy after training.
"""

from __future__ import annotations

import math
from typing import Any, Optional, Sequence

import torch
from torch import nn

from nngauge._constraints import Check, Integer, Maybe, Real, constrained, declared
from nngauge._internal.adapter import ModelAdapter
from nngauge._internal.data import as_batches
from nngauge._internal.options import ModelOptions, model_options
from nngauge._vocabulary import renamed
from nngauge.errors import invalid
from nngauge.measures.expressivity._density import Method as DensityMethod
from nngauge.measures.expressivity._density import region_density as _region_density
from nngauge.measures.expressivity._trajectory import trajectory_length
from nngauge.measures.propagation._correlations import correlations
from nngauge.measures.propagation._jacobian import FroMethod, Ord, jacobian_norm
from nngauge.measures.propagation._kernels import Kind, kernel_conditioning
from nngauge.measures.propagation._nlc import HIGH_BIAS_THRESHOLD, Method, nlc
from nngauge.proxies._common import per_point
from nngauge.trajectories import through

NLC_IDEAL = (1.0, 3.0)
"""NLC paper section 4, figure 2: optimal test error needs an initial NLC of about 1 to 3."""
LINEAR_KINDS = ("linear", "conv")
"""The layers whose outputs (pre-activations) the Jacobian and kernel predictors read."""
KERNEL_SAMPLES = 200
"""kernel_conditioning's default sample count, kernel_condition's cap."""

DIRECTIONS: dict[str, int] = {
    # nngauge's predictors
    "nlc_score": -1, "output_bias": -1, "nlc_rule": -1, "jacobian_growth": -1,
    "rho_max": -1, "kernel_condition": -1, "trajectory_growth": +1, "region_density": +1,
    # zero-cost proxies (Abdelfattah et al., ICLR 2021; TE-NAS, ICLR 2021)
    "synflow": +1, "snip": +1, "grasp": +1, "grad_norm": +1, "fisher": +1, "jacob_cov": +1,
    "naswot": +1, "te_nas": -1, "te_nas_regions": +1, "n_params": +1, "flops": +1,
    # the newer zero-cost proxies (ZiCo, ICLR 2023; MeCo, NeurIPS 2023; Zen-NAS, ICCV 2021)
    "zico": +1, "meco": +1, "meco_opt": +1, "zen_score": +1,
    "swap": +1,
}
"""Proxy name -> +1 when higher values predict higher accuracy after training, -1 when lower
values do (grasp with Abdelfattah et al.'s sign; te_nas: a condition number, lower is better;
swap: more distinct sample-wise patterns, Peng et al., ICLR 2024).
To rank architectures best first, sort by ``-DIRECTIONS[name] * value``."""


def _like(measure, *names: str) -> dict:
    """The constraints ``measure`` declares on ``names``, for a wrapper exposing those options
    (its errors then name the wrapper)."""
    own = declared(measure)
    return {name: own[name] for name in names if name in own}


IDEAL = Check(lambda v: isinstance(v, (tuple, list)) and len(v) == 2
              and all(isinstance(b, (int, float)) and not isinstance(b, bool) for b in v)
              and 0 < v[0] <= v[1] < math.inf,
              "a pair (low, high) with 0 < low <= high < inf", ((3.0, 1.0), (0.0, 3.0), 2.0,
                                                              (1.0, math.inf)))


# ------------------------------------------------------------------------------ the NLC


@constrained(**_like(nlc, "method", "n_probes"))
@model_options("output", "input_module", "norm_mode", "dropout")
def nlc_score(model: nn.Module, data: Any, labels: Any = None, *, batch_size: int = 250,
              n_batches: Optional[int] = 1, method: Method = "probe", n_probes: int = 1,
              options: ModelOptions,
              generator: Optional[torch.Generator | int] = None) -> float:
    """The nonlinearity coefficient at initialization (Philipp & Carbonell, "The Nonlinearity
    Coefficient - Predicting Generalization in Deep Neural Networks", arXiv:1806.00179,
    Definition 1, section 3; estimator of section G): :func:`nngauge.nlc`'s ``.nlc``,

        NLC = Q_x ||J(x)||_F Q_i(S_x x(i)) / (sqrt(d_out) Q_j(S_x f(x, j))).

    Direction: lower predicts lower test error (section 4, figure 2: test error grows as the
    NLC rises above the ideal range 1-3; an NLC below 1 is rare at initialization, see
    :func:`nlc_rule` for the two-sided rule). ``labels`` is accepted for a uniform signature
    and not read.

    Args:
        model, data: as in :func:`nngauge.nlc`.
        labels: not read.
        batch_size: samples per batch (the paper's 250).
        n_batches: batches read; default 1 (one batch, as the other proxies read; the measure's
            own default, None, is one pass over the data).
        method, n_probes, output, input_module, norm_mode, dropout: as in :func:`nngauge.nlc`.
        generator: draws the batch and the probes (deterministic when given).

    Returns:
        The NLC (float > 0).

    Example:
        >>> import torch
        >>> from nngauge.nn import mlp
        >>> net = mlp(10, 64, 3, 2, activation="tanh", generator=torch.Generator().manual_seed(0))
        >>> nlc_score(net, torch.randn(100, 10), generator=torch.Generator().manual_seed(1)) > 0
        True
    """
    return nlc(model, data, batch_size=batch_size, n_batches=n_batches, method=method,
               n_probes=n_probes, options=options, generator=generator).nlc


@constrained(**_like(nlc, "method", "n_probes"))
@model_options("output", "input_module", "norm_mode", "dropout")
def output_bias(model: nn.Module, data: Any, labels: Any = None, *, batch_size: int = 250,
                n_batches: Optional[int] = 1, method: Method = "probe", n_probes: int = 1,
                options: ModelOptions,
                generator: Optional[torch.Generator | int] = None) -> float:
    """Output bias at initialization (Philipp & Carbonell, "The Nonlinearity Coefficient -
    Predicting Generalization in Deep Neural Networks", arXiv:1806.00179, section 4, figure 3A;
    section B.2): :func:`nngauge.nlc`'s ``.output_bias``,

        output_bias = Q_{j,x} f(x, j) / Q_j(S_x f(x, j)),

    the size of the outputs relative to their spread over the data. Direction: lower predicts
    lower test error ("to achieve an optimal test error, a low initial bias is required";
    above 1000 the paper's architectures all reach a high test error). ``labels`` is not read.

    Args:
        As :func:`nlc_score` (one :func:`nngauge.nlc` call).

    Returns:
        The output bias (float >= 1 for outputs with a mean; 1 for centred outputs).

    Example:
        >>> import torch
        >>> from nngauge.nn import mlp
        >>> net = mlp(10, 64, 3, 2, activation="tanh", generator=torch.Generator().manual_seed(0))
        >>> output_bias(net, torch.randn(100, 10), generator=torch.Generator().manual_seed(1)) >= 1
        True
    """
    return nlc(model, data, batch_size=batch_size, n_batches=n_batches, method=method,
               n_probes=n_probes, options=options, generator=generator).output_bias


@constrained(ideal=IDEAL, bias_threshold=Real(0, low_open=True),
             **_like(nlc, "method", "n_probes"))
@model_options("output", "input_module", "norm_mode", "dropout")
def nlc_rule(model: nn.Module, data: Any, labels: Any = None, *,
             ideal: tuple[float, float] = NLC_IDEAL,
             bias_threshold: float = HIGH_BIAS_THRESHOLD, batch_size: int = 250,
             n_batches: Optional[int] = 1, method: Method = "probe", n_probes: int = 1,
             options: ModelOptions,
             generator: Optional[torch.Generator | int] = None) -> float:
    """The NLC paper's rule as one number: how far the initial NLC lies from the ideal range,
    in decades, and infinity for high output bias (Philipp & Carbonell, "The Nonlinearity
    Coefficient - Predicting Generalization in Deep Neural Networks", arXiv:1806.00179,
    section 4, figure 2: optimal test error needs 1 <~ NLC <~ 3; the architectures whose
    output bias exceeds 1000, red in figure 2, all reach a high test error).

    With (low, high) = ``ideal`` and NLC, bias from one :func:`nngauge.nlc` call,

        nlc_rule = inf                                               if bias > bias_threshold,
                 = max(0, log10(low / NLC), log10(NLC / high))       otherwise

    (inf also for NLC = 0): 0 inside the range, log10(10 / 3) for NLC = 10, log10(1 / 0.5) for
    NLC = 0.5. Direction: lower predicts lower test error (the paper: "the further one deviates
    from that range, the worse the achievable test error becomes"). ``labels`` is not read.

    Args:
        ideal: the range (low, high) of ideal NLC values (the paper's observed (1, 3)).
        bias_threshold: output bias above which the network is flagged (the paper's 1000).
        Others: as :func:`nlc_score`.

    Returns:
        The distance in decades (float >= 0, or inf).

    Example:
        >>> import torch
        >>> from nngauge.nn import mlp
        >>> net = mlp(10, 64, 3, 2, activation="tanh", generator=torch.Generator().manual_seed(0))
        >>> nlc_rule(net, torch.randn(100, 10), generator=torch.Generator().manual_seed(1)) >= 0
        True
    """
    result = nlc(model, data, batch_size=batch_size, n_batches=n_batches, method=method,
                 n_probes=n_probes, options=options, generator=generator)
    return nlc_rule_of(result.nlc, result.output_bias, ideal=ideal,
                       bias_threshold=bias_threshold)


def nlc_rule_of(nlc: float, output_bias: float, *, ideal: tuple[float, float] = NLC_IDEAL,
                bias_threshold: float = HIGH_BIAS_THRESHOLD) -> float:
    """:func:`nlc_rule` of an NLC and output bias already measured (a study computes its
    nlc_rule column from its nlc and output_bias columns with it): inf when ``output_bias >
    bias_threshold`` or ``nlc <= 0``, else max(0, log10(low / nlc), log10(nlc / high)); NaN
    when either is NaN (a measure undefined on the network)."""
    if math.isnan(nlc) or math.isnan(output_bias):
        return math.nan
    if output_bias > bias_threshold or nlc <= 0:
        return math.inf
    low, high = ideal
    return max(0.0, math.log10(low / nlc), math.log10(nlc / high))


# ------------------------------------------------------------------ shrinkage and kernels


def hidden_layers(model: nn.Module, data: Any, where: str, layers: Optional[Sequence[str]],
                  options: ModelOptions) -> list[tuple[str, int]]:
    """(site name, units per sample) of the sites named in ``layers``, or by default of every
    linear and convolutional site but the last (the read-out): the hidden layers'
    pre-activations, in forward order (after ``input_module``); one forward pass of 2 samples."""
    adapter = ModelAdapter(model, options, where=where)
    with adapter.active(data=data), torch.no_grad():
        raw = adapter.collect(data, 2).inputs
        sites = adapter.sites(raw, layers, default_kinds=LINEAR_KINDS)
        _, captured = adapter.run(adapter.measured(raw), sites, raw=raw)
    found = [(site.name, captured[site.name][0].numel()) for site in sites
             if site.name in captured]
    return found if layers is not None else found[:-1]


@constrained(**_like(jacobian_norm, "ord", "rms", "method", "n_probes", "n_iter", "tol"))
@model_options("output", "input_module", "norm_mode", "dropout")
def jacobian_growth(model: nn.Module, data: Any, labels: Any = None, *,
                    layers: Optional[Sequence[str]] = None, ord: Ord = "op", rms: bool = True,
                    method: FroMethod = "probe", n_probes: int = 4, n_iter: int = 100,
                    tol: float = 1e-6, batch_size: int = 250, n_batches: Optional[int] = 1,
                    options: ModelOptions,
                    generator: Optional[torch.Generator | int] = None) -> float:
    """Growth of the input -> layer Jacobian norm from the first to the last hidden layer (after
    the gradient-explosion side of Theorem 1 of "Gradient Explosion and Representation
    Shrinkage in Infinite Networks", anonymous, under review at ICLR, section 3, consequence 1;
    vanishing: Remark 1): with N_l = Q_x ||d z^(l)(x) / dx||_op, the RMS-normalized operator
    norm of the Jacobian of layer l's output (section 2.1), from :func:`nngauge.jacobian_norm`,

        jacobian_growth = N_last / N_first,

    first = the first linear or convolutional layer, last = the last one before the read-out
    (the network's last linear or convolutional layer), as nngauge's report measures "Jacobian
    growth across layers" on networks of up to 12 such layers (deeper ones it reads per
    block). For a ResNet the last hidden conv may be a shortcut's 1x1 convolution: pass
    ``layers`` to choose. The factor over the whole depth, not per layer.

    Direction: lower predicts lower test error (a large growth is gradient explosion and an
    overly sensitive function, consequence 1). Growth far below 1 (vanishing, Remark 1) is
    also bad, so the direction holds for growth >= 1. ``labels`` is not read.

    Args:
        layers: the layers (module or site names) to compare: the growth is from the first
            measured of them to the last; default as above (the network needs at least two
            linear or convolutional layers before its read-out).
        ord, method, n_probes, n_iter, tol: as in :func:`nngauge.jacobian_norm`.
        rms: RMS-normalized norms (the shrinkage paper's convention, the report's); default
            True, where the measure's default is False.
        batch_size: samples per batch; n_batches: default 1 (one batch; the measure's default,
            None, is one pass).
        output, input_module, norm_mode, dropout, generator: as in :func:`nngauge.nlc`.

    Returns:
        N_last / N_first (float >= 0).

    Example:
        >>> import torch
        >>> from nngauge.nn import mlp
        >>> net = mlp(10, 64, 4, 2, activation="relu", generator=torch.Generator().manual_seed(0))
        >>> x, g = torch.randn(50, 10), torch.Generator().manual_seed(1)
        >>> jacobian_growth(net, x, generator=g) > 0
        True
    """
    where = "jacobian_growth()"
    if layers is None:
        hidden = [name for name, _ in hidden_layers(model, data, where, None, options)]
        if len(hidden) < 2:
            raise invalid(where, "at least two linear or convolutional layers before the "
                          "read-out (the growth is from the first to the last)",
                          f"{len(hidden)} ({hidden})", "pass layers=[first, last] naming the "
                          "layers to compare, or measure a deeper network")
        layers = [hidden[0], hidden[-1]]
    result = jacobian_norm(model, data, ord=ord, rms=rms, layers=layers, method=method,
                           n_probes=n_probes, n_iter=n_iter, tol=tol, batch_size=batch_size,
                           n_batches=n_batches, options=options, generator=generator)
    rows = [row for row in result.layers if row.name != "output"]
    if len(rows) < 2:
        raise invalid(where, "two measured layers whose Jacobian norms to compare",
                      f"{[row.name for row in rows]} measured, skipped: {result.skipped}",
                      "pass layers=[first, last] naming layers with a differentiable path "
                      "from the input")
    if rows[0].norm == 0:
        raise invalid(where, f"a non-zero Jacobian at the first layer {rows[0].name!r}",
                      "0", "check for dead or constant units at the first layer")
    return rows[-1].norm / rows[0].norm


@renamed(search_steps="n_iter", search_lr="lr")
@constrained(**_like(correlations, "max_samples", "n_iter", "lr"))
@model_options("output", "input_module", "norm_mode", "dropout")
def rho_max(model: nn.Module, data: Any, labels: Any = None, *,
            layers: Optional[Sequence[str]] = None, max_samples: int = 500,
            n_iter: int = 0, lr: float = 0.01, options: ModelOptions,
            generator: Optional[torch.Generator | int] = None) -> float:
    """Representation shrinkage: the maximal correlation rho_max ("Gradient Explosion and
    Representation Shrinkage in Infinite Networks", anonymous, under review at ICLR, Theorem 1,
    section 3), :func:`nngauge.correlations`' ``.rho_max``,

        rho_max = max_l min_{a, b} rho_l(x_a, x_b),

    rho_l the cosine similarity of two samples' outputs at layer l (every linear, conv,
    normalization and activation layer by default, and the output), over the pairs of the
    first ``max_samples`` samples. Direction: lower predicts lower test error (rho_max near 1
    is representation shrinkage: every input aligned at some layer, consequence 2).
    ``labels`` is not read.

    Args:
        layers, max_samples, n_iter, lr, output, input_module, norm_mode, dropout,
            generator: as in :func:`nngauge.correlations` (``n_iter`` and ``lr``: the search
            for a less correlated pair, off by default).

    Returns:
        rho_max (float in [-1, 1]).

    Example:
        >>> import torch
        >>> from nngauge.nn import mlp
        >>> net = mlp(8, 64, 4, 8, activation="relu", norm="layer")
        >>> -1 <= rho_max(net, torch.randn(20, 8)) <= 1
        True
    """
    return correlations(model, data, layers=layers, max_samples=max_samples, n_iter=n_iter,
                        lr=lr, options=options, generator=generator).rho_max


@constrained(layer=Maybe(Check(lambda v: isinstance(v, str), "a module or site name",
                               (3, ["fc"]))), max_samples=Maybe(Integer(2)),
             **_like(kernel_conditioning, "kind", "n_probes"))
@model_options("output", "input_module", "norm_mode", "dropout")
def kernel_condition(model: nn.Module, data: Any, labels: Any = None, *,
                     layer: Optional[str] = None, kind: Kind = "conjugate",
                     max_samples: Optional[int] = None, n_probes: int = 8,
                     options: ModelOptions, generator: Optional[torch.Generator | int] = None
                     ) -> float:
    """Condition number of the kernel at the last hidden layer (Agarwal, Awasthi & Kale, "A
    Deep Conditioning Treatment of Neural Networks", ALT 2021, section 3, figure 1), from
    :func:`nngauge.kernel_conditioning`:

        kernel_condition = lambda_max(K) / lambda_min(K),  K_ij = h(x_i) . h(x_j) / n_l,

    h the output of the last linear or convolutional layer before the read-out (the last
    hidden layer's pre-activation, as nngauge's studies read it for an MLP; for a ResNet this
    may be a shortcut's 1x1 convolution: pass ``layer`` to choose), over the first
    ``max_samples`` samples (by default half as many as the layer has units, at most 200:
    with n samples and n_l units K has rank at most n_l, and for n near n_l its smallest
    eigenvalue sits at the random-matrix edge near 0, (1 - sqrt(n / n_l))^2 for i.i.d.
    features, whatever the depth); ``kind="ntk"`` reads the empirical NTK of that layer
    instead.
    Direction: lower predicts lower test error (with depth the kernel degenerates towards rank
    one and its condition number grows, section 3; gradient descent's iterations grow with it,
    section 4, Theorems 4.1-4.2: a statement on training speed, not on test error).
    ``labels`` is not read.

    Args:
        layer: the layer (module or site name) whose kernel is read; default as above (the
            network needs a linear or convolutional layer before its read-out).
        max_samples: n, the kernel's size; None: min(200, half the layer's units per sample).
        kind, n_probes, output, input_module, norm_mode, dropout, generator: as in
            :func:`nngauge.kernel_conditioning`.

    Returns:
        The condition number (float >= 1, or inf).

    Example:
        >>> import torch
        >>> from nngauge.nn import mlp
        >>> net = mlp(5, 256, 4, 1, activation="relu", init="gaussian")
        >>> kernel_condition(net, torch.randn(20, 5)) >= 1
        True
    """
    where = "kernel_condition()"
    found = hidden_layers(model, data, where, None if layer is None else [layer], options)
    if not found:
        raise invalid(where, "a linear or convolutional layer before the read-out (the last "
                      "hidden layer's kernel is read)" if layer is None else
                      f"layer {layer!r} called by the forward pass", "none",
                      "pass layer=<module name> naming a layer the forward pass calls")
    layer, units = found[-1]
    if max_samples is None:
        max_samples = max(2, min(KERNEL_SAMPLES, units // 2))
    result = kernel_conditioning(model, data, kind=kind, layers=[layer],
                                 max_samples=max_samples, n_probes=n_probes, options=options,
                                 generator=generator)
    return next(row for row in result.layers if row.name == layer).condition_number


# ----------------------------------------------------------------------- expressivity


@renamed(n_anchors="max_samples", n="resolution")
@constrained(max_samples=Integer(2), resolution=Integer(2),
             **_like(trajectory_length, "tol", "max_points"))
@model_options("output", "norm_mode", "dropout")
def trajectory_growth(model: nn.Module, data: Any, labels: Any = None, *, max_samples: int = 8,
                      resolution: int = 1000, layers: Optional[Sequence[str]] = None,
                      tol: float = 1e-3,
                      max_points: int = 2**14 + 1, options: ModelOptions,
                      generator: Optional[torch.Generator | int] = None) -> float:
    """Geometric-mean growth of trajectory length per layer (Raghu, Poole, Kleinberg, Ganguli &
    Sohl-Dickstein, "On the Expressive Power of Deep Neural Networks", ICML 2017, section 2.2,
    Theorem 3, figure 13c-d: the ratio of a trajectory's length at layer d + 1 to its length at
    layer d), from :func:`nngauge.trajectory_length` on the piecewise-linear path through
    ``max_samples`` data points (:func:`nngauge.trajectories.through`, ``resolution``
    initial points, refined to ``tol``). With l_0 the input path's length and l_1..l_K its
    images' lengths at the K measured layers (every activation and pooling layer by default;
    the output row is left out),

        trajectory_growth = (prod_d l_d / l_{d-1})^(1/K) = (l_K / l_0)^(1/K).

    Direction: higher predicts higher accuracy (the expressivity hypothesis that TE-NAS's
    region count also rests on; Raghu et al. tie the growth to expressive power, section 3,
    not to test error, and a very large growth is also a chaotic, unstable network).
    Batchnorm using batch statistics is frozen on ``data`` (``norm_mode="frozen"``: a point's
    image must not depend on its batch) unless ``norm_mode`` says otherwise. Real-valued
    inputs only. ``labels`` is not read.

    Args:
        max_samples: data points the path goes through (the first ones, or drawn by
            ``generator``).
        resolution: initial points of the path (:func:`nngauge.trajectories.through`).
        layers, tol, max_points, output, dropout: as in :func:`nngauge.trajectory_length`.
        norm_mode: batchnorm's statistics ("eval" or "frozen"; None: as found, frozen where
            that is batch statistics).
        generator: draws the anchor points when given; default the first samples.

    Returns:
        The per-layer growth factor (float >= 0).

    Example:
        >>> import torch
        >>> from nngauge.nn import mlp
        >>> net = mlp(4, 32, 3, 2, activation="relu", generator=torch.Generator().manual_seed(0))
        >>> trajectory_growth(net, torch.randn(8, 4), resolution=65) > 0
        True
    """
    where = "trajectory_growth()"
    anchors = next(iter(as_batches(data, batch_size=max_samples, n_batches=1,
                                   generator=generator, where=where))).inputs[:max_samples]
    if len(anchors) < 2:
        raise invalid(where, "at least 2 data points for the path to go through",
                      f"{len(anchors)}", "pass more samples")
    result = trajectory_length(model, through(anchors, resolution), layers=layers, tol=tol,
                               max_points=max_points, options=per_point(model, options),
                               norm_data=data)
    depth = len(result.lengths) - 2
    if depth < 1:
        raise invalid(where, "a network with activation or pooling layers (the lengths are "
                      "read there)", "none", "pass layers=[...] naming the layers to read")
    if result.lengths[0] == 0:
        raise invalid(where, "distinct data points (a path of positive length)",
                      "a path of length 0", "pass distinct samples")
    return (result.lengths[-2] / result.lengths[0]) ** (1.0 / depth)


@renamed(n_points="max_samples")
@constrained(radius=Maybe(Real(0, low_open=True)), max_samples=Integer(1),
             **_like(_region_density, "n_directions", "method"))
@model_options("output", "norm_mode")
def region_density(model: nn.Module, data: Any, labels: Any = None, *,
                   radius: Optional[float] = None, max_samples: int = 8, n_directions: int = 8,
                   method: DensityMethod = "exact", options: ModelOptions,
                   generator: Optional[torch.Generator | int] = None) -> float:
    """Linear regions per unit length near the data (Hanin & Rolnick, "Complexity of Linear
    Regions in Deep Networks", ICML 2019; after Raghu et al., ICML 2017, section 2.1), the
    headline ``density`` of :func:`nngauge.region_density`: for each of the first
    ``max_samples`` samples x_i and ``n_directions`` random unit directions u_ij (from
    ``generator``), R_ij the number of linear regions on the segment
    [x_i - r u_ij, x_i + r u_ij],

        region_density = mean_i (1 / D) sum_j R_ij / (2 r).

    The radius r is the measure's default: 0.05 times the RMS distance between two of the
    points (a fixed fraction of the data's spread; pass ``radius`` to fix it in input
    units, e.g. to compare networks on data of different scales). The measure's local
    complexity is not returned (read it from :func:`nngauge.region_density`).

    Direction: higher predicts higher accuracy (the expressivity hypothesis behind TE-NAS's
    region count; a finer partition near the data, not a proven predictor of test error).
    Batchnorm using batch statistics is frozen on ``data`` unless ``norm_mode`` says
    otherwise. ``labels`` is not read.

    Args:
        radius: r in input units; None: as above (:func:`nngauge.region_density`'s default).
        max_samples: the first samples measured (at least 2 for the default radius).
        n_directions, method, output: as in :func:`nngauge.region_density` (``"exact"`` needs a
            piecewise-linear network; ``"sampled"`` runs on any).
        norm_mode: "eval" or "frozen"; None: as found, frozen where that is batch statistics.
        generator: draws the directions.

    Returns:
        Regions per unit length (float > 0).

    Example:
        >>> import torch
        >>> from nngauge.nn import mlp
        >>> net = mlp(4, 16, 2, 2, activation="relu", generator=torch.Generator().manual_seed(0))
        >>> region_density(net, torch.randn(8, 4), generator=torch.Generator().manual_seed(1)) > 0
        True
    """
    # local complexity (not returned) on one random direction per point: 2 vertices each;
    # the directions of the density are drawn before the frames, so the density is unchanged
    return _region_density(model, data, radius=radius, n_directions=n_directions,
                           method=method, max_samples=max_samples, neighbourhood_dims=1,
                           options=per_point(model, options), norm_data=data,
                           generator=generator).density


__all__ = ["DIRECTIONS", "jacobian_growth", "kernel_condition", "nlc_rule", "nlc_score",
           "output_bias", "region_density", "rho_max", "trajectory_growth"]
