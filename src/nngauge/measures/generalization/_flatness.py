"""Sigma-search flatness and the PAC-Bayes bounds built on it (Jiang, Neyshabur, Mobahi,
Krishnan and Bengio, "Fantastic Generalization Measures and Where to Find Them", ICLR 2020,
appendix C.3 and its Algorithms 1-2).

A flatness measure is the largest perturbation scale sigma whose effect on the training set
stays under a threshold: the deviation

    D(sigma) = | E_u[c(w + u)] - c(w) |        ("pacbayes": u Gaussian, Monte Carlo)
    D(sigma) = | c(w + u*(sigma)) - c(w) |     ("sharpness": u* maximizing the loss in a box)

of the training criterion c (Jiang et al.: the training error, a deviation of 0.1 in
accuracy), with every parameter perturbed by u_i ~ N(0, s_i^2) or boxed |u_i| <= s_i, and

    s_i = sigma                                  (pacbayes.*, sharpness.*)
    s_i = sqrt(sigma^2 w_i^2 + epsilon^2)        (pacbayes.mag.*, sharpness.mag.*: their
                                                  magnitude-aware N(0, sigma'^2 |w_i|^2 + eps^2))

The scale is found by bisection: from sigma = 1, doubled while D stays under the threshold or
halved while it is above, to a bracket [s, 2 s], then halved ``n_iter`` times, keeping
D(lower) <= threshold < D(upper) (relative precision 2**-n_iter). The probes are drawn once
(the same standard Gaussians, or the same ascent mini-batches, at every sigma: common random
numbers), so D is one deterministic function of sigma and the bracket holds a crossing of it.
Jiang et al. draw new ones at every step and stop at |D - threshold| < 0.01.

With omega parameters, m training points, x = w - w_0 ("init") or w ("orig"), the bounds
(natural logs) are

    pacbayes.init / .orig:        ||x||^2 / (4 sigma^2) + log(m / sigma) + 10      (eq. 48-49)
    pacbayes.mag.init / .orig:    1/4 sum_i log((eps^2 + (sigma^2 + 1) ||x||^2 / omega)
                                                / (eps^2 + sigma^2 x_i^2)) + log(m / sigma) + 10
                                                                                (eq. 56-57)
    flatness:                     1 / sigma^2                     (pacbayes.flatness, eq. 53;
                                  pacbayes.mag.flatness, eq. 61; sharpness.flatness, eq. 54;
                                  sharpness.mag.flatness, eq. 62)

and the sharpness bounds (eq. 50-51, 58-59) are the same with the Gaussian scale that stays in
the box of half-width alpha: sigma = alpha / sqrt(log(2 omega)) (and epsilon scaled alike),
which gives their ||x||^2 log(2 omega) / (4 alpha^2). "orig" is "init" with w_0 = 0 (a prior
centred at the origin); a published transcription of eq. 57 keeps w_i - w_i^0 in its
denominator.
"""

from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable, Literal, Optional

import torch
from torch import nn

from nngauge._constraints import MODEL, Choice, Flag, Integer, Maybe, Real, constrained
from nngauge._internal.adapter import MeasurementMode, ModelAdapter
from nngauge._internal.losses import LOSS, Loss, check_class_labels, labelled_tensors, with_labels
from nngauge._internal.options import ModelOptions, model_options
from nngauge._results import Result
from nngauge.measures.generalization._distance import matched_parameters
from nngauge.measures.generalization._sharpness import (
    PERTURBED,
    _full_loss,
    _perturbed_losses,
    ascend,
    perturbation_seeds,
)

Kind = Literal["pacbayes", "sharpness"]
Criterion = Literal["error", "loss"]
START = 1.0
"""The first sigma tried; doubled or halved from there to a bracket [s, 2 s]."""
MAX_DOUBLINGS = 40
"""Doublings (or halvings) of sigma before the search gives up: the deviation never exceeds
the threshold (``upper`` is then inf), or exceeds it at every scale down to 2**-40 (``lower``
is then 0 and the flatness inf)."""


@dataclass(frozen=True)
class FlatnessPoint(Result):
    """One evaluation of the search: the scale and its deviation D(sigma)."""

    sigma: float
    deviation: float


@dataclass(frozen=True)
class FlatnessResult(Result):
    """The largest perturbation scale under a deviation threshold, and its bounds.

    Attributes:
        sigma: the largest scale evaluated whose deviation stays under the threshold (the
            bracket's lower end): Jiang et al.'s sigma (pacbayes) or alpha' (sharpness).
        lower, upper: the bracket, D(lower) <= threshold < D(upper) (upper inf when no
            scale up to 2^40 exceeds the threshold).
        deviation_lower, deviation_upper: D at the two ends.
        flatness: 1 / sigma^2 (Jiang et al.'s *.flatness).
        bound_init, bound_orig: the PAC-Bayes bounds with x = w - w_0 (NaN without
            ``initial_model``) and x = w (see :func:`flatness`).
        kind, magnitude, criterion, threshold, epsilon: the search's settings (epsilon None
            without ``magnitude``).
        base: c(w), the unperturbed training error (or loss).
        m, n_parameters: training points read, and omega, the parameters perturbed.
        n_probes: Gaussian draws per scale ("pacbayes"); ascent_iter: ascent steps per scale
            ("sharpness"); n_iter: bisection steps.
        points: every evaluation (sigma, D(sigma)) in the order made.
        undefined: the fields that are NaN, each with why.
        mode: how the model was run.
    """

    _rows = "points"
    _headline = "deviation"

    sigma: float
    lower: float
    upper: float
    deviation_lower: float
    deviation_upper: float
    flatness: float
    bound_init: float
    bound_orig: float
    kind: str
    magnitude: bool
    criterion: str
    threshold: float
    epsilon: Optional[float]
    base: float
    m: int
    n_parameters: int
    n_probes: int
    ascent_iter: int
    n_iter: int
    points: tuple[FlatnessPoint, ...]
    undefined: dict[str, str]
    mode: MeasurementMode


@constrained(loss=LOSS, kind=Choice.literal(Kind), magnitude=Flag(),
             threshold=Real(0, low_open=True), criterion=Choice.literal(Criterion),
             initial_model=Maybe(MODEL), epsilon=Real(0, low_open=True), n_probes=Integer(1),
             n_iter=Integer(1), ascent_iter=Integer(1), lr=Real(0, low_open=True),
             max_samples=Maybe(Integer(1)), eval_batch_size=Integer(1))
@model_options("output", norm_mode="eval")
def flatness(
    model: nn.Module,
    data: Any,
    labels: Any = None,
    *,
    kind: Kind = "pacbayes",
    magnitude: bool = False,
    threshold: float = 0.1,
    criterion: Criterion = "error",
    initial_model: Optional[nn.Module] = None,
    epsilon: float = 1e-3,
    n_probes: int = 10,
    n_iter: int = 20,
    ascent_iter: int = 20,
    lr: float = 0.1,
    batch_size: int = 256,
    loss: Loss = "auto",
    max_samples: Optional[int] = None,
    chunk_size: Optional[int] = None,
    eval_batch_size: int = 1024,
    options: ModelOptions,
    generator: Optional[torch.Generator | int] = None,
) -> FlatnessResult:
    """Jiang et al.'s sigma-search flatness: the largest perturbation scale whose effect on the
    training criterion stays under a threshold, with the PAC-Bayes bounds built on it.

    Jiang, Neyshabur, Mobahi, Krishnan and Bengio, "Fantastic Generalization Measures and
    Where to Find Them", ICLR 2020, appendix C.3 (Algorithms 1 and 2):

    | Jiang et al. | eq. | call | field |
    | --- | --- | --- | --- |
    | pacbayes.init, pacbayes.orig | 48, 49 | ``kind="pacbayes"`` | bound_init, bound_orig |
    | sharpness.init, sharpness.orig | 50, 51 | ``kind="sharpness"`` | bound_init, bound_orig |
    | pacbayes.flatness | 53 | ``kind="pacbayes"`` | flatness |
    | sharpness.flatness | 54 | ``kind="sharpness"`` | flatness |
    | pacbayes.mag.init, pacbayes.mag.orig | 56, 57 | ``magnitude=True`` | bound_init, bound_orig |
    | sharpness.mag.init, sharpness.mag.orig | 58, 59 | ``kind="sharpness", magnitude=True`` | bound_init, bound_orig |
    | pacbayes.mag.flatness | 61 | ``magnitude=True`` | flatness |
    | sharpness.mag.flatness | 62 | ``kind="sharpness", magnitude=True`` | flatness |

    D(sigma) = |E_u[c(w + u)] - c(w)| with u_i ~ N(0, s_i^2) (``"pacbayes"``: ``n_probes``
    Gaussian perturbations of every parameter, each scored on all the points read, evaluated
    together by ``torch.func.vmap`` over ``functional_call``), or D(sigma) = |c(w + u*) - c(w)|
    with u* the projected gradient ascent of the loss in the box |u_i| <= s_i
    (``"sharpness"``: ``ascent_iter`` signed steps of ``lr`` times the box on mini-batches of
    ``batch_size``, the engine of :func:`nngauge.sharpness`). s_i = sigma, or with
    ``magnitude`` s_i = sqrt(sigma^2 w_i^2 + epsilon^2) (Jiang et al.'s magnitude-aware
    N(0, sigma'^2 |w_i|^2 + epsilon^2), epsilon = 1e-3). c is the training error (``criterion=
    "error"``, Jiang et al.'s deviation of the training accuracy) or the loss (``"loss"``).
    Bisection: sigma = 1, doubled while D(sigma) <= threshold or halved while above, to a
    bracket [s, 2 s], then ``n_iter`` halvings of the bracket [lower, upper], D(lower) <=
    threshold < D(upper); a NaN deviation counts as above.
    The same probes serve every sigma (the same Gaussians; the same ascent mini-batches), so
    that D is one function of sigma, and the bracket holds its crossing of the threshold.

    Bounds (m points, omega parameters, x = w - w_0 for ``bound_init``, x = w for
    ``bound_orig``, natural logs): ||x||^2 / (4 sigma^2) + log(m / sigma) + 10, and with
    ``magnitude`` 1/4 sum_i log((eps^2 + (sigma^2 + 1) ||x||^2 / omega) / (eps^2 + sigma^2
    x_i^2)) + log(m / sigma) + 10; for ``"sharpness"`` sigma (and epsilon) are the box scale
    over sqrt(log(2 omega)), the Gaussian that stays in the box (their ||x||^2 log(2 omega) /
    (4 alpha^2)). See the module docstring.

    Args:
        model: a trained network; never modified (perturbed parameters are passed with
            ``functional_call``).
        data, labels: the training data: ``(inputs, labels)``, inputs with ``labels=``, or a
            Dataset / DataLoader of pairs; ``criterion="error"`` needs integer labels.
        kind: "pacbayes" (expected deviation under Gaussian noise) or "sharpness" (worst
            case in a box).
        magnitude: the magnitude-aware scale s_i = sqrt(sigma^2 w_i^2 + epsilon^2).
        threshold: the largest deviation allowed (Jiang et al.: 0.1).
        criterion: "error" (the training error, Jiang et al.'s) or "loss" (``loss``).
        initial_model: the same architecture at initialization, for ``bound_init``.
        epsilon: the magnitude-aware floor (Jiang et al.: 1e-3).
        n_probes: Gaussian perturbations per scale ("pacbayes").
        n_iter: bisection steps after the bracket is found.
        ascent_iter, lr, batch_size: the ascent of "sharpness": steps, step as a fraction of
            the box, points per step.
        loss: what the ascent climbs (and ``criterion="loss"`` reads): "auto" (the mean
            cross-entropy for integer labels), "cross_entropy", "mse" or a callable, as
            :func:`nngauge.sharpness`'s (docs/api.md, "The loss").
            A callable receives the tensor ``output=`` selects (the ``"logits"`` entry of a dict or
            ModelOutput by default, never the whole output): docs/api.md, "What a loss callable
            receives".
        max_samples: the first this many points of ``data`` (None: all).
        chunk_size: Gaussian perturbations per vmapped pass (None: 10).
        eval_batch_size: points per forward pass when scoring all the points ("sharpness").
        output: which output the criterion reads for dict / tuple / ModelOutput outputs.
        norm_mode: batchnorm's statistics (default "eval": running); dropout is off.
        generator: draws the probes once: the Gaussians (``"pacbayes"``) or the ascent's
            mini-batches (``"sharpness"``).

    Returns:
        :class:`FlatnessResult`.

    Raises:
        InvalidInputError: no labels; ``criterion="error"`` with floating targets;
            ``initial_model`` with other parameters than ``model``.

    Example:
        >>> import torch
        >>> net = torch.nn.Linear(4, 3)
        >>> x = torch.randn(64, 4, generator=torch.Generator().manual_seed(0))
        >>> r = flatness(net, x, net(x).argmax(dim=1), generator=0)
        >>> r.deviation_lower <= 0.1 < r.deviation_upper and r.lower <= r.sigma < r.upper
        True
    """
    where = "flatness()"
    if initial_model is not None:
        pairs = matched_parameters(model, initial_model, where)
    data = with_labels(data, labels, where)
    adapter = ModelAdapter(model, options, where=where)
    with adapter.active(data=data):
        x, y, loss_fn, _ = labelled_tensors(adapter, data, loss)
        if max_samples is not None:
            x, y = x[:max_samples], y[:max_samples]
        if criterion == "error":
            with torch.no_grad():
                check_class_labels(adapter(x[:1]), y[:1], where)
        score = _error if criterion == "error" else loss_fn
        params = adapter.weights(PERTURBED)
        with torch.no_grad():
            base = _full_loss(adapter, score, params, x, y, eval_batch_size)
        deviation = (_gaussian_deviation(adapter, score, params, x, y, magnitude, epsilon,
                                         n_probes, chunk_size or 10, generator)
                     if kind == "pacbayes" else
                     _ascent_deviation(adapter, loss_fn, score, params, x, y, base, magnitude,
                                       epsilon, ascent_iter, lr, batch_size, eval_batch_size,
                                       generator))
        points, (lower, d_lower), (upper, d_upper) = _bisect(deviation, threshold, n_iter)
    flat = {n: w.to(torch.float64).flatten() for n, w in params.items()}
    w = torch.cat(list(flat.values()))
    omega, m = w.numel(), len(y)
    shrink = math.sqrt(math.log(2 * omega)) if kind == "sharpness" else 1.0
    scale, floor = lower / shrink, (epsilon / shrink if magnitude else None)
    undefined = {}
    if initial_model is None:
        bound_init = math.nan
        undefined["bound_init"] = "no initial_model: pass the network at initialization"
    else:
        w0 = torch.cat([pairs[n][1].to(torch.float64).flatten().cpu() for n in flat])
        bound_init = _bound(w.cpu() - w0, scale, floor, m)
    return FlatnessResult(
        sigma=lower, lower=lower, upper=upper, deviation_lower=d_lower,
        deviation_upper=d_upper, flatness=1 / lower ** 2 if lower > 0 else math.inf,
        bound_init=bound_init, bound_orig=_bound(w.cpu(), scale, floor, m), kind=kind,
        magnitude=magnitude, criterion=criterion, threshold=float(threshold),
        epsilon=float(epsilon) if magnitude else None, base=base, m=m, n_parameters=omega,
        n_probes=n_probes if kind == "pacbayes" else 0,
        ascent_iter=ascent_iter if kind == "sharpness" else 0, n_iter=n_iter,
        points=tuple(points), undefined=undefined, mode=adapter.mode)


def _error(outputs: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """The batch's classification error (argmax of the last dimension), traceable by vmap."""
    return (outputs.argmax(-1) != labels).to(outputs.dtype).mean()


def scales(params: dict, sigma: float, magnitude: bool, epsilon: float) -> dict:
    """s_i per parameter: sigma, or sqrt(sigma^2 w_i^2 + epsilon^2) with ``magnitude``."""
    if magnitude:
        return {n: (sigma ** 2 * w.square() + epsilon ** 2).sqrt() for n, w in params.items()}
    return {n: torch.full_like(w, sigma) for n, w in params.items()}


def _gaussian_deviation(adapter, score, params, x, y, magnitude, epsilon, n_probes,
                        chunk_size, generator) -> Callable[[float], float]:
    """D(sigma) = |mean_k c(w + s(sigma) z_k) - c(w)|, z_k the same standard Gaussians at
    every sigma (one seed each, drawn once), every probe scored on all the points."""
    seeds = perturbation_seeds(generator, n_probes)
    m = len(y)

    def deviation(sigma: float) -> float:
        stds = scales(params, sigma, magnitude, epsilon)
        with ThreadPoolExecutor(max(1, torch.get_num_threads())) as pool, adapter.perturbed():
            values, base = _perturbed_losses(
                adapter, score, params, stds, x, y, seeds=seeds, minibatch=lambda g: None,
                size=m, chunk_size=chunk_size, pool=pool)
        return abs(float(values.double().mean() - base.double().mean()))

    return deviation


def _ascent_deviation(adapter, loss_fn, score, params, x, y, base, magnitude, epsilon,
                      ascent_iter, lr, batch_size, eval_batch_size,
                      generator) -> Callable[[float], float]:
    """D(alpha) = |c(w + u*) - c(w)|, u* the signed projected ascent of the loss in the box
    s(alpha), on the same mini-batches at every alpha (one seed, drawn once)."""
    seed = int(torch.randint(2**63 - 1, (), generator=generator))

    def deviation(alpha: float) -> float:
        box = scales(params, alpha, magnitude, epsilon)
        nu = ascend(adapter, loss_fn, params, x, y, box, n_iter=ascent_iter, lr=lr,
                    batch_size=batch_size, generator=torch.Generator().manual_seed(seed),
                    signed=True)
        with torch.no_grad(), adapter.perturbed():
            top = _full_loss(adapter, score, {n: params[n] + nu[n] for n in params}, x, y,
                             eval_batch_size)
        return abs(top - base)

    return deviation


def _bisect(deviation: Callable[[float], float], threshold: float, n_iter: int):
    """Every (sigma, D) evaluated, and the bracket's ends (sigma, D): D(lower) <= threshold <
    D(upper) (a NaN deviation counts as above).

    The bracket is found geometrically from :data:`START`: doubled while D stays at or under
    the threshold, halved while it is above, so that it is [s, 2 s] whatever the network's
    scale (an arithmetic search of [0, 1] would need log2(1 / s) extra halvings to leave 0
    and, short of them, report sigma = 0); ``n_iter`` halvings then narrow it to
    2**-n_iter of s."""
    points = []

    def evaluate(sigma: float) -> tuple[float, float]:
        value = deviation(sigma)
        points.append(FlatnessPoint(sigma, value))
        return sigma, value

    edge = evaluate(START)
    under = edge[1] <= threshold  # then double until above; else halve until under
    for _ in range(MAX_DOUBLINGS):
        step = evaluate(edge[0] * (2 if under else 0.5))
        if (step[1] <= threshold) != under:
            lower, upper = (edge, step) if under else (step, edge)
            break
        edge = step
    else:
        return (points, edge, (math.inf, math.nan)) if under else (points, (0.0, 0.0), edge)
    for _ in range(n_iter):
        middle = evaluate((lower[0] + upper[0]) / 2)
        if middle[1] <= threshold:
            lower = middle
        else:
            upper = middle
    return points, lower, upper


def _bound(x: torch.Tensor, sigma: float, epsilon: Optional[float], m: int) -> float:
    """||x||^2 / (4 sigma^2) + log(m / sigma) + 10, or with ``epsilon`` (magnitude-aware)
    1/4 sum_i log((eps^2 + (sigma^2 + 1) ||x||^2 / omega) / (eps^2 + sigma^2 x_i^2))
    + log(m / sigma) + 10 (Jiang et al., eq. 48-51, 56-59)."""
    if sigma <= 0:
        return math.inf
    rest = math.log(m / sigma) + 10
    squared = float(x.square().sum())
    if epsilon is None:
        return squared / (4 * sigma ** 2) + rest
    prior = epsilon ** 2 + (sigma ** 2 + 1) * squared / x.numel()
    return float(torch.log(prior / (epsilon ** 2 + sigma ** 2 * x.square())).sum()) / 4 + rest
