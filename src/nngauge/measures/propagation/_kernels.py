"""Empirical kernel conditioning per layer (Agarwal et al. 2021, section 3, figure 1).

For inputs x_1..x_n and a layer with outputs h(x) in R^{n_l}:

- the conjugate kernel (the "top-layer" kernel when the layer is the last hidden one)
  K_ij = h(x_i) . h(x_j) / n_l, the empirical NNGP;
- the empirical neural tangent kernel Theta_ij = (1 / n_l) sum_c <d h_c(x_i) / d theta,
  d h_c(x_j) / d theta> over every trainable parameter theta (the standard parameterization:
  the gradients an optimizer sees), from per-sample gradients; exact for layers of at most
  16 units, estimated without bias from Gaussian output probes for wider ones, on as many
  samples as the gradient budget allows (see :mod:`nngauge._internal.ntk`; ``method`` says
  which).

Deep-conditioning shows that with depth both Gram matrices degenerate towards a rank-one
matrix (all normalized dot products tend to the same value) unless the activation is
normalized, so their condition numbers lambda_max / lambda_min grow; the mean normalized dot
product mean_{i != j} K_ij / sqrt(K_ii K_jj) tracks the same collapse.

When the model is an :func:`nngauge.nn.mlp` without normalization or skips, the theory
engine's infinite-width kernels (:func:`nngauge.theory.nngp`, :func:`nngauge.theory.ntk` with
the standard parameterization) are computed beside the empirical ones, layer by layer.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Optional, Sequence

import numpy as np
import torch
from torch import nn

from nngauge._constraints import Choice, Integer, Maybe, Real, constrained
from nngauge._internal.adapter import MeasurementMode, ModelAdapter
from nngauge._internal.budget import DEFAULT_MAX_SECONDS, TimeBudget
from nngauge._internal.ntk import empirical_ntk, plan_ntk
from nngauge._internal.options import ModelOptions, model_options
from nngauge._internal.probing import OUTPUT
from nngauge._results import Result
from nngauge.errors import BudgetExceededError, invalid
from nngauge.theory import condition_number, mean_normalized_dot_product

Kind = Literal["conjugate", "ntk"]


@dataclass(frozen=True)
class KernelLayer(Result):
    """One layer's empirical Gram matrix, its conditioning and, when available, theory's.

    Attributes:
        name: the layer (``"output"`` for the network output).
        condition_number: lambda_max / lambda_min (inf when numerically singular).
        mean_normalized_dot_product: mean over i != j of K_ij / sqrt(K_ii K_jj).
        theory_condition_number, theory_mean_normalized_dot_product: the infinite-width
            prediction (None when the model is not a plain nngauge MLP).
        method: how the kernel was computed (for the NTK: exact over units, or probes).
        kernel: the (n, n) Gram matrix (numpy float64); theory_kernel likewise or None.
    """

    name: str
    condition_number: float
    mean_normalized_dot_product: float
    method: str = "conjugate kernel H H^T / n_l"
    theory_condition_number: Optional[float] = None
    theory_mean_normalized_dot_product: Optional[float] = None
    kernel: np.ndarray = field(default=None, repr=False, compare=False)
    theory_kernel: Optional[np.ndarray] = field(default=None, repr=False, compare=False)


@dataclass(frozen=True)
class KernelConditioning(Result):
    """Empirical kernel conditioning per layer (Agarwal et al. 2021, section 3, figure 1).

    Attributes:
        kind: "conjugate" or "ntk".
        layers: one :class:`KernelLayer` per measured layer, the output last.
        skipped: ``{layer: reason}`` for layers that could not be measured.
        n_samples: the Gram matrices are n_samples x n_samples.
        mode: how the model was run (:class:`~nngauge.MeasurementMode`).
        theory_skipped: why an nngauge MLP's rows have no infinite-width prediction (the
            kernels would run past :func:`nngauge.theory.nngp`'s time budget); None otherwise.
    """

    _rows = "layers"
    _headline = "condition_number"

    kind: str
    layers: tuple[KernelLayer, ...]
    skipped: dict
    n_samples: int
    mode: MeasurementMode
    theory_skipped: Optional[str] = None

    def plot(self, ax=None):
        """Condition number per layer (log scale), with theory's when available. Returns the
        Axes."""
        from nngauge._plots import line_per_layer

        theory = [row.theory_condition_number for row in self.layers]
        return line_per_layer([row.name for row in self.layers],
                             [row.condition_number for row in self.layers],
                             ylabel=f"condition number ({self.kind})", log=True, ax=ax,
                             reference=theory if None not in theory else None)


@constrained(kind=Choice.literal(Kind), max_samples=Integer(2), n_probes=Integer(1),
             max_seconds=Maybe(Real(0, low_open=True)))
@model_options("output", "input_module", "norm_mode", "dropout")
def kernel_conditioning(
    model: nn.Module,
    data: Any,
    *,
    kind: Kind = "conjugate",
    layers: Optional[Sequence[str]] = None,
    max_samples: int = 200,
    n_probes: int = 8,
    max_seconds: Optional[float] = DEFAULT_MAX_SECONDS,
    options: ModelOptions,
    generator: Optional[torch.Generator | int] = None,
) -> KernelConditioning:
    """Per-layer empirical conjugate kernel or NTK, their condition numbers and mean
    normalized dot products, with infinite-width theory beside them for nngauge MLPs.

    Args:
        model: any module; all samples are propagated as one batch.
        data: any supported data form; the first ``max_samples`` samples are used.
        kind: "conjugate" (default: K = H H^T / n_l, cheap) or "ntk" (per-sample parameter
            gradients: exact over a layer's units up to 16 units, Gaussian output probes
            beyond; fewer samples when n x parameters exceeds 2**27 gradient entries; each
            row's ``method`` says what was done).
        layers: module or site names; default: the linear and conv layers (the
            pre-activations the papers' kernels describe), then the output.
        max_samples: n, the size of the Gram matrices.
        max_seconds: the NTK's time budget: once its layers have run for a second, the time
            so far per layer times the layers estimates the whole (an underestimate: later
            layers have more parameters before them); past the budget it refuses with the
            estimate. Default 60 s; None: no limit. The conjugate kernel is one forward pass.
        n_probes: Gaussian output probes for the NTK of layers wider than 16 units.
        output, input_module, norm_mode, dropout, generator: how the model runs, as in
            :func:`nngauge.nlc` (``generator`` also draws the NTK's probes).

    Returns:
        :class:`KernelConditioning`.

    Example:
        >>> import torch
        >>> from nngauge import kernel_conditioning
        >>> from nngauge.nn import mlp
        >>> net = mlp(5, 256, 4, 1, activation="relu", init="gaussian")
        >>> result = kernel_conditioning(net, torch.randn(20, 5))
        >>> [row.name for row in result.layers][-1]
        'output'
    """
    where = "kernel_conditioning()"
    adapter = ModelAdapter(model, options, where=where)
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    rows, skipped = [], {}
    with adapter.active(generator=generator, data=data):
        batch = adapter.collect(data, max_samples)
        if len(batch) < 2:
            raise invalid(where, "at least 2 samples (a Gram matrix of pairs)", f"{len(batch)}",
                          "pass 2 or more samples")
        try:
            theory, theory_skipped = _theory_kernels(model, batch.inputs, kind), None
        except BudgetExceededError as exc:
            theory, theory_skipped = {}, str(exc)
        chosen = adapter.sites(batch.inputs, layers, default_kinds=("linear", "conv"))
        x = adapter.measured(batch.inputs)
        with torch.no_grad():
            y, captured = adapter.run(x, chosen, raw=batch.inputs)
        outputs = {**{s.name: captured.get(s.name) for s in chosen}, OUTPUT: y}
        for name, p in adapter.model.named_parameters():
            p.requires_grad_(name in trainable)
        n_params = sum(p.numel() for p in adapter.model.parameters() if p.requires_grad)
        total = sum(h is not None for h in outputs.values())
        budget = TimeBudget(where, max_seconds, what="an NTK per layer",
                            whole=f"{total} layers",
                            fix=f"measure fewer samples (max_samples < {len(x)}) or layers "
                            f"(layers=[...]), fewer probes (n_probes < {n_probes}), use "
                            "kind='conjugate'")
        for name, h in outputs.items():
            if h is None:
                skipped[name] = "not called by the forward pass"
                continue
            if kind == "conjugate":
                rows.append(_row(name, _conjugate(h), theory.get(name)))
                continue
            if n_params == 0:
                skipped[name] = "the model has no trainable parameter"
                continue
            plan = plan_ntk(len(x), h[0].numel(), n_params, n_probes=n_probes,
                            per_sample=not adapter.coupled)
            gram = empirical_ntk(_layer_value(adapter, chosen, name), adapter.model, x,
                                 batch.inputs, plan, per_sample=not adapter.coupled,
                                 generator=generator, note=adapter.note)
            rows.append(_row(name, gram, theory.get(name), plan.description))
            budget.check(len(rows) / total, lambda spent: f"{len(rows)} took {spent:.1f} s, "
                         f"{len(x)} samples")
    n = rows[0].kernel.shape[0] if rows else len(x)
    return KernelConditioning(kind=kind, layers=tuple(rows), skipped=skipped, n_samples=n,
                              mode=adapter.mode, theory_skipped=theory_skipped)


def _layer_value(adapter: ModelAdapter, sites, name: str):
    """(x, raw) -> the output of site ``name`` (or of the model)."""
    if name == OUTPUT:
        return lambda x, raw: adapter(x, raw)
    site = next(s for s in sites if s.name == name)
    return lambda x, raw: adapter.run(x, [site], raw=raw, stop_after=name)[1][name]


def _conjugate(h: torch.Tensor) -> np.ndarray:
    flat = h.detach().reshape(len(h), -1).to(torch.float64)
    return (flat @ flat.T / flat.shape[1]).cpu().numpy()


def _row(name: str, gram: np.ndarray, theory: Optional[np.ndarray],
         method: str = KernelLayer.method) -> KernelLayer:
    return KernelLayer(
        name=name, condition_number=condition_number(gram),
        mean_normalized_dot_product=mean_normalized_dot_product(gram), method=method,
        theory_condition_number=None if theory is None else condition_number(theory),
        theory_mean_normalized_dot_product=(None if theory is None
                                            else mean_normalized_dot_product(theory)),
        kernel=gram, theory_kernel=theory)


def _theory_kernels(model: nn.Module, inputs: torch.Tensor, kind: str) -> dict[str, np.ndarray]:
    """Infinite-width kernels by layer name for a plain nngauge MLP (no norm, no skip, flat
    inputs); an empty dict otherwise. Raises BudgetExceededError when they would run past the
    theory's default time budget (quadrature activations on many samples)."""
    from nngauge.nn import MLP
    from nngauge.theory import nngp, ntk

    config = getattr(model, "config", None)
    if not isinstance(model, MLP) or config.norm is not None or config.skip is not None:
        return {}
    if inputs.dim() != 2:
        return {}
    sigma_w, sigma_b = config.sigma_w * config.scale, config.bias_std * config.scale
    X = inputs.detach().to(torch.float64).cpu().numpy()
    depth = config.depth - 1
    if kind == "conjugate":
        trace = nngp(X, config.activation, depth, sigma_w=sigma_w, sigma_b=sigma_b)
    else:
        trace = ntk(X, config.activation, depth, sigma_w=sigma_w, sigma_b=sigma_b,
                    parameterization="standard", width=config.width)
    names = {f"layers.{i}.linear": trace.kernels[i] for i in range(config.depth)}
    names[OUTPUT] = trace.kernels[depth]
    return names
