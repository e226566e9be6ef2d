"""Sharpness, expected sharpness and PAC-Bayes bi-criteria curves (generalization paper, 2.4).

Keskar's sharpness (eq. 4), with L the empirical loss:

    zeta_alpha(w) = (max_{|nu_i| <= alpha (|w_i| + 1)} L(w + nu) - L(w)) / (1 + L(w)),

maximized by projected stochastic gradient ascent (appendix A: 2000 steps, mini-batches of 64,
step 0.01, momentum 0.9, alpha = 5e-4). Expected sharpness (eq. 5) is E_nu[L(w + nu)] - L(w)
for Gaussian nu; appendix A uses std sigma_i = alpha (10 |w_i| + 1), averaged over 1000
perturbations, each on a mini-batch of 64. With prior N(0, diag sigma^2) and posterior
N(w, diag sigma^2), KL = sum_i w_i^2 / (2 sigma_i^2) (eq. 6 and the sigma_i = alpha |w_i| + beta
remark; appendix A's printed expression is twice this). The PAC-Bayes bound of eq. 5 is

    E_nu[L_true(w + nu)] <= L(w) + expected sharpness + sqrt((KL + ln(2m / delta)) / m),

m the number of training points (eq. 6 has ln(1 / delta) instead). All parameters (weights and
biases) are perturbed; buffers (batchnorm statistics) are not. By default batchnorm uses its
running statistics and dropout is off (the trained network's function); the parameters are
never modified: perturbed parameters are passed with ``torch.func.functional_call`` and
perturbations are evaluated in chunks with ``torch.func.vmap`` (a loop for modules vmap cannot
batch) (``method="weights"``), or the same expectation is estimated by sampling the units'
Gaussians (``method="local"``, module ``_local_noise``). The default loss is the mean
cross-entropy (per position for sequence outputs) for integer labels, squared error for
floating targets (``loss="auto"``, as in every loss-based measure).
"""

from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Literal, Optional, Sequence

import numpy as np
import torch
from torch import nn
from torch.func import functional_call, vmap

from nngauge._constraints import Choice, Integer, Maybe, Numbers, Real, constrained
from nngauge._internal.adapter import MeasurementMode, ModelAdapter
from nngauge._internal.batching import Vectorizer
from nngauge._internal.losses import LOSS, Loss, labelled_tensors, scalar_loss, with_labels
from nngauge._internal.options import ModelOptions, model_options
from nngauge._results import Result
from nngauge._vocabulary import deprecated_attribute, legacy_layout, renamed
from nngauge.errors import invalid
from nngauge.measures.generalization._local_noise import LocalNoise

Noise = Literal["relative", "isotropic"]
PERTURBED = "sharpness perturbs the parameters"
"""Why the sharpness measures need parameters (said when a model has none)."""
Method = Literal["auto", "weights", "local"]
BoundForm = Literal["eq5", "eq6"]


@dataclass(frozen=True)
class SharpnessResult(Result):
    """Keskar's sharpness zeta_alpha (eq. 4).

    Attributes:
        sharpness: zeta_alpha = (max_loss - loss) / (1 + loss).
        difference: max_loss - loss (the right-hand approximation of eq. 4).
        loss: L(w) on the whole data.
        max_loss: L(w + nu*) on the whole data, nu* the perturbation found by ascent.
        alpha: the box size factor.
        max_box_ratio: max_i |nu*_i| / (alpha (|w_i| + 1)), <= 1 (the box is never left).
        n_iter, lr, momentum, batch_size: the ascent settings (``steps``: the deprecated
            name of ``n_iter``).
        n_samples: m, data points in L.
        mode: how the model was run (:class:`~nngauge.MeasurementMode`).
        perturbation: nu* by parameter name (not in to_dict).
    """

    _summary = ("sharpness", "loss", "max_loss")

    sharpness: float
    difference: float
    loss: float
    max_loss: float
    alpha: float
    max_box_ratio: float
    n_iter: int
    lr: float
    momentum: float
    batch_size: int
    n_samples: int
    mode: MeasurementMode
    perturbation: dict = field(repr=False)

    steps = deprecated_attribute("n_iter")


@dataclass(frozen=True)
class ExpectedSharpnessResult(Result):
    """Expected sharpness E_nu[L(w + nu)] - L(w) and the matching KL term (eq. 5-6).

    Attributes:
        expected_sharpness: mean over perturbations of L_B(w + nu) - L_B(w), each on its own
            mini-batch B (the same batch for both terms).
        stderr: standard error of that mean over perturbations.
        expected_loss: mean of L_B(w + nu).
        loss: mean of L_B(w) over the same mini-batches.
        kl: sum_i w_i^2 / (2 sigma_i^2).
        alpha: the noise scale; noise: "relative" (sigma_i = alpha (10 |w_i| + 1)) or
            "isotropic" (sigma_i = sigma).
        sigma: the isotropic std (None for relative noise).
        n_probes, batch_size: perturbations and points per perturbation (``n_samples``: the
            deprecated name of ``n_probes``).
        n_parameters: number of perturbed parameters.
        method: the estimator used, "weights" or "local" (see :func:`expected_sharpness`).
        mode: how the model was run (:class:`~nngauge.MeasurementMode`).
        perturbed_losses: L_B(w + nu) per perturbation, shape (n_samples,) (not in to_dict);
            with method "local", the mini-batch mean of losses under noise drawn per point.
    """

    _distribution = "perturbed_losses"
    _summary = ("loss", "expected_loss")

    expected_sharpness: float
    stderr: float
    expected_loss: float
    loss: float
    kl: float
    alpha: float
    noise: str
    sigma: Optional[float]
    n_probes: int
    batch_size: int
    n_parameters: int
    method: str
    mode: MeasurementMode
    perturbed_losses: np.ndarray = field(repr=False)

    n_samples = deprecated_attribute("n_probes")


@dataclass(frozen=True)
class PACBayesPoint(Result):
    """One point of the bi-criteria curve (Figure 2 middle/right) and its bound.

    Attributes:
        alpha: the noise scale (the point's coordinate).
        kl, expected_sharpness, stderr, expected_loss: as in :class:`ExpectedSharpnessResult`.
        bound: the PAC-Bayes bound at this alpha (:func:`pac_bayes_bound`).
    """

    alpha: float
    kl: float
    expected_sharpness: float
    stderr: float
    expected_loss: float
    bound: float


@dataclass(frozen=True)
class PACBayesResult(Result):
    """KL against expected sharpness over alpha, and the PAC-Bayes bound at each alpha.

    Attributes:
        points: one :class:`PACBayesPoint` per alpha, in the order of the alphas
            (``to_frame()`` gives one row per point). Until nngauge 0.3 also readable as
            ``layers``, with a DeprecationWarning: they are points of a curve, not layers.
        train_loss: L(w) on all m points.
        best_bound, best_alpha: the smallest bound over the alphas and where.
        m, delta, form, noise: settings (form "eq5": ln(2m/delta); "eq6": ln(1/delta)).
        method: the expected-sharpness estimator used ("weights" or "local").
        mode: how the model was run (:class:`~nngauge.MeasurementMode`).
    """

    _rows = "points"
    _headline = "bound"

    points: tuple[PACBayesPoint, ...]
    train_loss: float
    best_bound: float
    best_alpha: float
    m: int
    delta: float
    form: str
    noise: str
    method: str
    mode: MeasurementMode

    layers = deprecated_attribute("points")

    def plot(self, ax=None):
        """KL (log scale) against expected sharpness, as Figure 2; returns the Axes. Needs
        matplotlib."""
        from nngauge._plots import new_axes

        ax = new_axes(ax)
        ax.plot([p.expected_sharpness for p in self.points], [p.kl for p in self.points], "o-")
        ax.set_xlabel("expected sharpness")
        ax.set_ylabel("KL")
        ax.set_yscale("log")
        return ax


def pac_bayes_bound(train_loss: float, expected_sharpness: float, kl: float, m: int,
                    delta: float = 0.05, *, form: BoundForm = "eq5") -> float:
    """L(w) + expected sharpness + sqrt((KL + ln(2m/delta)) / m) (eq. 5; eq. 6: ln(1/delta)).

    Example:
        >>> round(pac_bayes_bound(0.0, 0.1, 50.0, 1000, 0.05), 4)
        0.3462
    """
    log_term = math.log(2 * m / delta) if form == "eq5" else math.log(1 / delta)
    return train_loss + expected_sharpness + math.sqrt((kl + log_term) / m)


def _loss_first(args: tuple, kwargs: dict) -> bool:
    """The old layout ``f(model, loss_fn, data, ...)``: a second positional argument that is
    None or a callable (data never is)."""
    return len(args) >= 2 and (args[1] is None or callable(args[1]))


def _auto_if_none(loss_fn: Any) -> Any:
    """None (the default loss) becomes loss="auto"; a callable passes as it is."""
    return "auto" if loss_fn is None else loss_fn


def _old_layout(name: str):
    """The deprecated ``name(model, loss_fn, data, ...)`` layout of the sharpness family,
    rewritten as ``name(model, data, ..., loss=loss_fn or "auto")``."""

    def loss_as_keyword(args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        if "loss" in kwargs or "loss_fn" in kwargs:
            raise invalid(f"{name}()", "the loss once", "a loss as the second positional "
                          "argument and loss= (or loss_fn=)", f"call {name}(model, data, "
                          "loss=...)")
        return (args[0], *args[2:]), {**kwargs, "loss": _auto_if_none(args[1])}

    return legacy_layout(f"{name}(model, loss_fn, data, ...)",
                         f"{name}(model, data, labels=None, *, loss='auto', ...)",
                         matches=_loss_first, translate=loss_as_keyword)


@_old_layout("sharpness")
@renamed(loss_fn=("loss", _auto_if_none), steps="n_iter")
@constrained(loss=LOSS, alpha=Real(0, low_open=True), n_iter=Integer(1),
             lr=Real(0, low_open=True), momentum=Real(0, 1, high_open=True),
             eval_batch_size=Integer(1))
@model_options("output", norm_mode="eval")
def sharpness(
    model: nn.Module,
    data: Any,
    labels: Any = None,
    *,
    loss: Loss = "auto",
    alpha: float = 5e-4,
    n_iter: int = 2000,
    lr: float = 0.01,
    momentum: float = 0.9,
    batch_size: int = 64,
    eval_batch_size: int = 1024,
    options: ModelOptions,
    generator: Optional[torch.Generator | int] = None,
) -> SharpnessResult:
    """Keskar's sharpness zeta_alpha (eq. 4) by projected stochastic gradient ascent.

    Starting from nu = 0, ``n_iter`` SGD steps with momentum *ascend* the loss of w + nu on
    random mini-batches; after each step nu is projected (clipped) into the box
    |nu_i| <= alpha (|w_i| + 1). The final nu is scored on the whole data. Defaults are the
    paper's appendix A settings.

    Args:
        model: the trained network; never modified.
        data: ``(inputs, labels)`` (tensors/arrays), inputs with ``labels=``, or a Dataset /
            DataLoader of pairs.
        labels: the labels when ``data`` holds the inputs only.
        loss: "auto" (default: the mean cross-entropy for integer labels, per position for
            sequence outputs; for floating targets the squared error summed over each
            sample's entries and averaged over samples), "cross_entropy" (integer labels
            only), "mse" (the mean over every entry; integer labels one-hot), or a callable
            ``loss(outputs, labels)`` returning the batch's mean loss as one number (e.g.
            ``F.cross_entropy``), with ``outputs`` the measured output tensor (``output=``).
            The same rule in every measure: docs/api.md, "The loss".
            A callable receives the tensor ``output=`` selects (the ``"logits"`` entry of a dict or
            ModelOutput by default, never the whole output): docs/api.md, "What a loss callable
            receives".
        alpha: box size factor (paper: 5e-4).
        n_iter, lr, momentum, batch_size: the ascent's steps, step size, momentum and
            mini-batch (paper: 2000, 0.01, 0.9, 64).
        eval_batch_size: points per forward pass when scoring the whole data.
        output: which output the loss reads for dict / tuple / ModelOutput outputs.
        norm_mode: batchnorm's statistics (default "eval": running); dropout is off.
        generator: for the mini-batch draws (deterministic): a torch.Generator or an int seed.

    Returns:
        :class:`SharpnessResult` (its ``steps`` is ``n_iter``).

    Example:
        >>> import torch, torch.nn.functional as F
        >>> net = torch.nn.Linear(3, 2)
        >>> x, y = torch.randn(32, 3), torch.randint(0, 2, (32,))
        >>> r = sharpness(net, (x, y), loss=F.cross_entropy, n_iter=20)
        >>> r.max_loss >= r.loss and r.max_box_ratio <= 1.0
        True
    """
    where = "sharpness()"
    data = with_labels(data, labels, where)
    adapter = ModelAdapter(model, options, where=where)
    with adapter.active(data=data):
        x, y, loss_fn, _ = labelled_tensors(adapter, data, loss)
        params = adapter.weights(PERTURBED)
        box = {n: alpha * (w.abs() + 1) for n, w in params.items()}
        final = ascend(adapter, loss_fn, params, x, y, box, n_iter=n_iter, lr=lr,
                       momentum=momentum, batch_size=batch_size, generator=generator)
        m = len(y)
        with torch.no_grad():
            base = _full_loss(adapter, loss_fn, params, x, y, eval_batch_size)
            with adapter.perturbed():
                top = _full_loss(adapter, loss_fn, {n: params[n] + final[n] for n in params}, x,
                                 y, eval_batch_size)
    ratio = max(float((final[n].abs() / box[n]).max()) for n in final)
    return SharpnessResult(
        sharpness=(top - base) / (1 + base), difference=top - base, loss=base, max_loss=top,
        alpha=float(alpha), max_box_ratio=ratio, n_iter=n_iter, lr=float(lr),
        momentum=float(momentum), batch_size=batch_size, n_samples=m, mode=adapter.mode,
        perturbation=final)


@_old_layout("expected_sharpness")
@renamed(loss_fn=("loss", _auto_if_none), n_samples="n_probes")
@constrained(loss=LOSS, alpha=Real(0, low_open=True), n_probes=Integer(1),
             noise=Choice.literal(Noise), sigma=Maybe(Real(0, low_open=True)),
             method=Choice.literal(Method))
@model_options("output", norm_mode="eval")
def expected_sharpness(
    model: nn.Module,
    data: Any,
    labels: Any = None,
    *,
    alpha: float,
    loss: Loss = "auto",
    n_probes: int = 1000,
    batch_size: int = 64,
    noise: Noise = "relative",
    sigma: Optional[float] = None,
    method: Method = "auto",
    chunk_size: Optional[int] = None,
    options: ModelOptions,
    generator: Optional[torch.Generator | int] = None,
) -> ExpectedSharpnessResult:
    """Expected sharpness E_nu[L(w + nu)] - L(w) under Gaussian nu, and the KL term.

    ``noise="relative"`` (default, appendix A): sigma_i = alpha (10 |w_i| + 1).
    ``noise="isotropic"``: sigma_i = sigma (``sigma`` defaults to ``alpha``), as eq. 6.
    Each perturbation is scored on its own mini-batch of ``batch_size`` points drawn without
    replacement (all the data when ``batch_size`` >= m), against L(w) on the same batch.

    Two estimators of the same expectation:

    - ``method="weights"`` (the paper's): one nu per perturbation, drawn for every parameter;
      chunks of ``chunk_size`` perturbations are evaluated by ``vmap`` over
      ``functional_call``, their noise drawn in parallel on ``torch.get_num_threads()``
      threads. Draw order: perturbation k has its own ``torch.Generator`` seeded with
      ``perturbation_seeds(generator, n_probes)[k]``; from it, when batch_size < m,
      ``torch.randperm(m)[:batch_size]`` (its mini-batch), then for each parameter in
      ``named_parameters()`` order a standard normal tensor of the parameter's shape
      (``Tensor.normal_``; parameters on another device use a generator of that device with
      the same seed).
    - ``method="local"``: the local reparameterization (Kingma et al. 2015): each Linear/ConvNd
      output is drawn from its exact Gaussian given its input, independently per point, so
      the per-point output distribution is that of weight noise and the mini-batch mean has
      the same expectation, with lower variance, at a cost of one Gaussian per unit and point
      (module ``_local_noise``; same seeds and mini-batches, then the unit noise in layer call
      order). It applies when every parameter belongs to a Linear/Conv1d/2d/3d module run
      once per forward pass and examples do not interact (checked, structurally and
      numerically).
    - ``method="auto"`` (default): "local" when it applies, else "weights".

    Results do not depend on ``chunk_size`` or the thread count.

    Args:
        model: the trained network; never modified (hooks are added for the duration of a
            "local" evaluation and removed).
        data: ``(inputs, labels)``, inputs with ``labels=``, or a Dataset / DataLoader of
            pairs.
        labels: the labels when ``data`` holds the inputs only.
        alpha: noise scale (> 0).
        loss: "auto" (default: the mean cross-entropy for integer labels, per position for
            sequence outputs; for floating targets the squared error summed over each
            sample's entries and averaged over samples), "cross_entropy" (integer labels
            only), "mse" (the mean over every entry; integer labels one-hot), or a callable
            ``loss(outputs, labels)`` returning the batch's mean loss as one number, with
            ``outputs`` the measured output tensor (``output=``); it runs under
            ``torch.func.vmap`` (torch's functional losses do; no ``.item()``). The same rule
            in every measure: docs/api.md, "The loss".
            A callable receives the tensor ``output=`` selects (the ``"logits"`` entry of a dict or
            ModelOutput by default, never the whole output): docs/api.md, "What a loss callable
            receives".
        n_probes: number of weight perturbations, the estimator's random draws (paper: 1000).
        batch_size: points per perturbation (paper: 64).
        noise: "relative" or "isotropic".
        sigma: isotropic standard deviation (default ``alpha``).
        method: "auto", "weights" or "local".
        chunk_size: perturbations per evaluation (default: 100 for "weights", which holds
            chunk_size copies of the parameters; for "local", as many as keep the widest
            layer output of a chunk under 2**20 elements).
        output: which output the loss reads for dict / tuple / ModelOutput outputs.
        norm_mode: batchnorm's statistics (default "eval": running); dropout is off.
        generator: for the noise and the batches (deterministic): a torch.Generator or an
            int seed.

    Returns:
        :class:`ExpectedSharpnessResult` (its ``n_samples`` is ``n_probes``).

    Example:
        >>> import torch, torch.nn.functional as F
        >>> net = torch.nn.Linear(3, 2)
        >>> x, y = torch.randn(32, 3), torch.randint(0, 2, (32,))
        >>> r = expected_sharpness(net, (x, y), alpha=0.01, loss=F.cross_entropy, n_probes=50)
        >>> r.kl > 0 and r.n_parameters == 8 and r.method == "local"
        True
    """
    where = "expected_sharpness()"
    if sigma is not None and noise != "isotropic":
        raise invalid(where, "sigma only with noise='isotropic'", f"sigma={sigma!r}",
                      "pass noise='isotropic' or drop sigma")
    data = with_labels(data, labels, where)
    adapter = ModelAdapter(model, options, where=where)
    scale = alpha if noise == "relative" or sigma is None else sigma
    with adapter.active(data=data):
        x, y, loss_fn, _ = labelled_tensors(adapter, data, loss)
        params = adapter.weights(PERTURBED)
        unit = unit_std(params, noise)
        ((losses, base, used),) = _noisy_losses(
            adapter, loss_fn, x, y, params, unit, [scale], method=method,
            n_probes=n_probes, batch_size=batch_size, chunk_size=chunk_size,
            generator=generator)
    diff = losses - base
    stderr = float(diff.std(ddof=1) / math.sqrt(n_probes)) if n_probes > 1 else math.nan
    return ExpectedSharpnessResult(
        expected_sharpness=float(diff.mean()), stderr=stderr, expected_loss=float(losses.mean()),
        loss=float(base.mean()), kl=unit_kl(params, unit) / scale**2, alpha=float(alpha),
        noise=noise, sigma=float(scale) if noise == "isotropic" else None,
        n_probes=n_probes, batch_size=min(batch_size, len(y)),
        n_parameters=sum(w.numel() for w in params.values()), method=used, mode=adapter.mode,
        perturbed_losses=losses)


@_old_layout("pac_bayes")
@renamed(loss_fn=("loss", _auto_if_none), n_samples="n_probes")
@constrained(loss=LOSS, alphas=Numbers(0, low_open=True),
             delta=Real(0, 1, open=True), n_probes=Integer(1), noise=Choice.literal(Noise),
             form=Choice.literal(BoundForm), method=Choice.literal(Method),
             eval_batch_size=Integer(1))
@model_options("output", norm_mode="eval")
def pac_bayes(
    model: nn.Module,
    data: Any,
    labels: Any = None,
    *,
    alphas: Sequence[float],
    loss: Loss = "auto",
    delta: float = 0.05,
    n_probes: int = 1000,
    batch_size: int = 64,
    noise: Noise = "relative",
    form: BoundForm = "eq5",
    method: Method = "auto",
    chunk_size: Optional[int] = None,
    eval_batch_size: int = 1024,
    options: ModelOptions,
    generator: Optional[torch.Generator | int] = None,
) -> PACBayesResult:
    """The bi-criteria curve (KL vs expected sharpness over alpha, Figure 2) and the bound.

    For each alpha, the expected sharpness and KL of :func:`expected_sharpness` with that
    alpha (isotropic noise: sigma = alpha), the same draws as successive calls sharing
    ``generator``; the bound of eq. 5 (``form="eq5"``, default) or eq. 6 (``"eq6"``) is
    L(w) + expected sharpness + sqrt((KL + log term) / m), L(w) on all m points of ``data``.
    What does not depend on alpha is computed once: the model check, the KL up to its factor
    1 / alpha^2 and, with the local estimator, the unperturbed pass over all the points.

    Args:
        alphas: the noise scales (> 0), one curve point each.
        loss: "auto" (default), "cross_entropy", "mse" or a callable ``loss(outputs,
            labels)`` returning the batch's mean loss as one number, run under
            ``torch.func.vmap``: as :func:`expected_sharpness` (docs/api.md, "The loss").
            A callable receives the tensor ``output=`` selects (the ``"logits"`` entry of a dict or
            ModelOutput by default, never the whole output): docs/api.md, "What a loss callable
            receives".
        delta: confidence parameter in (0, 1).
        eval_batch_size: points per forward pass when computing L(w) on all the data.
        Others (data, labels, n_probes, batch_size, noise, method, chunk_size, output,
        norm_mode, generator): as :func:`expected_sharpness`.

    Returns:
        :class:`PACBayesResult`.

    Example:
        >>> import torch, torch.nn.functional as F
        >>> net = torch.nn.Linear(3, 2)
        >>> x, y = torch.randn(32, 3), torch.randint(0, 2, (32,))
        >>> r = pac_bayes(net, (x, y), alphas=[0.01, 0.1], loss=F.cross_entropy, n_probes=20)
        >>> r.points[0].kl > r.points[1].kl
        True
    """
    where = "pac_bayes()"
    alphas = [float(a) for a in alphas]
    data = with_labels(data, labels, where)
    adapter = ModelAdapter(model, options, where=where)
    with adapter.active(data=data):
        x, y, loss_fn, _ = labelled_tensors(adapter, data, loss)
        params = adapter.weights(PERTURBED)
        with torch.no_grad():
            train_loss = _full_loss(adapter, loss_fn, params, x, y, eval_batch_size)
        unit = unit_std(params, noise)
        curve = _noisy_losses(adapter, loss_fn, x, y, params, unit, alphas, method=method,
                              n_probes=n_probes, batch_size=batch_size,
                              chunk_size=chunk_size, generator=generator)
    m, kl = len(y), unit_kl(params, unit)
    points = []
    for alpha, (losses, base, used) in zip(alphas, curve):
        diff = losses - base
        sharp = float(diff.mean())
        stderr = float(diff.std(ddof=1) / math.sqrt(n_probes)) if n_probes > 1 else math.nan
        points.append(PACBayesPoint(
            alpha=alpha, kl=kl / alpha**2, expected_sharpness=sharp, stderr=stderr,
            expected_loss=float(losses.mean()),
            bound=pac_bayes_bound(train_loss, sharp, kl / alpha**2, m, delta, form=form)))
    best = min(points, key=lambda p: p.bound)
    return PACBayesResult(points=tuple(points), train_loss=train_loss, best_bound=best.bound,
                          best_alpha=best.alpha, m=m, delta=float(delta), form=form, noise=noise,
                          method=used, mode=adapter.mode)


def ascend(adapter: ModelAdapter, loss_fn, params: dict, x: torch.Tensor, y: torch.Tensor,
           box: dict, *, n_iter: int, lr: float, momentum: float = 0.0, batch_size: int,
           generator: Optional[torch.Generator], signed: bool = False) -> dict:
    """The perturbation nu (by parameter name) that projected stochastic gradient ascent
    finds for max L(w + nu) subject to |nu_i| <= box_i: from nu = 0, ``n_iter`` steps, each on
    ``batch_size`` points drawn with ``generator``, then nu clipped into the box.

    A step is SGD's with ``momentum`` and step size ``lr`` (Keskar's sharpness, eq. 4), or,
    with ``signed``, the steepest ascent step of the box's own (l_inf) geometry,
    nu_i += lr * box_i * sign(dL / dnu_i): a fraction ``lr`` of the box per step, whatever the
    gradient's scale (the search of :func:`nngauge.flatness`).
    """
    nu = {n: torch.zeros_like(w, requires_grad=True) for n, w in params.items()}
    optimizer = None if signed else torch.optim.SGD(list(nu.values()), lr=lr,
                                                    momentum=momentum, maximize=True)
    m = len(y)
    for _ in range(n_iter):
        idx = torch.randint(m, (min(batch_size, m),), generator=generator)
        shifted = {n: params[n] + nu[n] for n in params}
        with adapter.perturbed():
            value = _loss(adapter, loss_fn, shifted, x[idx], y[idx])
        if signed:
            grads = torch.autograd.grad(value, list(nu.values()))
            with torch.no_grad():
                for (n, v), g in zip(nu.items(), grads):
                    v.add_(lr * box[n] * g.sign())
        else:
            optimizer.zero_grad()
            value.backward()
            optimizer.step()
        with torch.no_grad():
            for n, v in nu.items():
                v.copy_(torch.maximum(torch.minimum(v, box[n]), -box[n]))
    return {n: v.detach().clone() for n, v in nu.items()}


def unit_std(params: dict, noise: Noise) -> dict:
    """Per-parameter perturbation std at scale 1: 10 |w| + 1 (relative) or 1 (isotropic).

    The std is alpha times this (relative noise), or sigma times it (isotropic).
    """
    if noise == "relative":
        return {n: 10 * w.abs() + 1 for n, w in params.items()}
    return {n: torch.ones_like(w) for n, w in params.items()}


def unit_kl(params: dict, unit: dict) -> float:
    """sum_i w_i^2 / (2 u_i^2), terms in the parameters' dtype summed in float64.

    KL(N(w, diag s^2) || N(0, diag s^2)) = sum_i w_i^2 / (2 s_i^2) (eq. 6) is this divided by
    scale^2 for the stds s = scale * u.
    """
    return float(sum((w / unit[n]).square().sum(dtype=torch.float64)
                     for n, w in params.items())) / 2


def perturbation_seeds(generator: Optional[torch.Generator], n: int) -> list[int]:
    """One seed per perturbation: k -> SeedSequence((base, k)), base one draw of ``generator``.

    ``base = int(torch.randint(2**63 - 1, (), generator=generator))`` (torch's default
    generator when None); seed k is ``numpy.random.SeedSequence((base, k))
    .generate_state(1, numpy.uint64)[0]``. Perturbation k depends on nothing else, so results
    do not depend on ``chunk_size`` or on the number of threads.
    """
    base = int(torch.randint(2**63 - 1, (), generator=generator))
    return [int(np.random.SeedSequence((base, k)).generate_state(1, np.uint64)[0])
            for k in range(n)]


def _noisy_losses(adapter: ModelAdapter, loss_fn, x, y, params, unit, scales, *, method,
                  n_probes, batch_size, chunk_size, generator) -> list:
    """(L_B(w + nu), L_B(w), method used) per noise scale, float64 arrays of n_probes each.

    The noise stds are scale * ``unit``; the scales draw their seeds from ``generator`` in
    order (one :func:`perturbation_seeds` each). With the local estimator, the data-only
    layers' means and unit stds are computed once for all the scales.
    """
    where = adapter.where
    local = LocalNoise(adapter.model, unit, adapter.select)
    blocker = None if method == "weights" else local.blocker(params, x)
    if method == "local" and blocker:
        raise invalid(where, "a model the local estimator applies to (parameters only in "
                      "Linear/ConvNd modules run once, independent examples)", blocker,
                      "use method='weights' (or 'auto')")
    local.reuse = len(scales) > 1
    m = len(y)
    size = min(batch_size, m)

    def minibatch(gen: torch.Generator) -> torch.Tensor:
        return torch.arange(m) if size == m else torch.randperm(m, generator=gen)[:size]

    curve = []
    with ThreadPoolExecutor(max(1, torch.get_num_threads())) as pool, adapter.perturbed():
        for scale in scales:
            seeds = perturbation_seeds(generator, n_probes)
            if method == "weights" or blocker:
                used = "weights"
                losses, base = _perturbed_losses(
                    adapter, loss_fn, params, {n: scale * u for n, u in unit.items()}, x, y,
                    seeds=seeds, minibatch=minibatch, size=size,
                    chunk_size=chunk_size or 100, pool=pool)
            else:
                used = "local"
                losses, base = local.perturbed_losses(
                    vmap(lambda out, labels: scalar_loss(loss_fn, out, labels, where)), x, y,
                    seeds=seeds, minibatch=minibatch, size=size,
                    chunk_size=chunk_size or local.chunk_for(size), pool=pool, scale=scale)
            curve.append((losses.double().cpu().numpy(), base.double().cpu().numpy(), used))
    return curve


def _perturbed_losses(adapter, loss_fn, params, stds, x, y, *, seeds, minibatch, size,
                      chunk_size, pool) -> tuple[torch.Tensor, torch.Tensor]:
    """L_B(w + nu) and L_B(w) per perturbation: vmap over functional_call (a loop where vmap
    cannot batch the model), chunk by chunk."""
    width = min(chunk_size, len(seeds))
    # theta = w + std * z, one buffer per parameter reused by every chunk
    theta = {n: torch.empty((width, *w.shape), dtype=w.dtype, device=w.device)
             for n, w in params.items()}
    full = size == len(y)  # every perturbation on all the data: x is not copied
    idx = torch.empty((width, size), dtype=torch.long)

    def draw(j: int, seed: int) -> None:
        """Perturbation j of the chunk: its mini-batch, then its noise, parameter by parameter."""
        cpu = torch.Generator().manual_seed(seed)
        if not full:
            idx[j] = minibatch(cpu)
        for n, w in params.items():
            gen = cpu if w.device.type == "cpu" else torch.Generator(w.device).manual_seed(seed)
            torch.addcmul(w, theta[n][j].normal_(generator=gen), stds[n], out=theta[n][j])

    def loss_at(theta, xb, yb):
        return _loss(adapter, loss_fn, theta, xb, yb)

    vectorize = Vectorizer(adapter.note)
    losses, bases = [], []
    with torch.no_grad():
        for start in range(0, len(seeds), chunk_size):
            c = min(chunk_size, len(seeds) - start)
            # torch draws Gaussians on one core; perturbations are independent streams
            list(pool.map(draw, range(c), seeds[start:start + c]))
            chunk = {n: t[:c] for n, t in theta.items()}
            if full:
                losses.append(vectorize(loss_at, in_dims=(0, None, None))(chunk, x, y))
                bases.append(loss_at(params, x, y).expand(c))
                continue
            rows = idx[:c].to(x.device)
            xb, yb = x[rows], y[rows]
            losses.append(vectorize(loss_at)(chunk, xb, yb))
            bases.append(vectorize(lambda a, b: loss_at(params, a, b))(xb, yb))
    return torch.cat(losses), torch.cat(bases)


def _loss(adapter: ModelAdapter, loss_fn, theta, x, y) -> torch.Tensor:
    out = adapter.select(functional_call(adapter.model, theta, (x,)))
    return scalar_loss(loss_fn, out, y, adapter.where)


def _full_loss(adapter: ModelAdapter, loss_fn, params, x, y, batch_size) -> float:
    total = 0.0
    for start in range(0, len(y), batch_size):
        xb, yb = x[start:start + batch_size], y[start:start + batch_size]
        total += float(_loss(adapter, loss_fn, params, xb, yb)) * len(yb)
    return total / len(y)
