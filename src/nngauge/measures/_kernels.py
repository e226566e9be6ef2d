"""Empirical kernel conditioning per layer (deep-conditioning section 3, figure 1).

For inputs x_1..x_n and a layer with outputs h(x) in R^{n_l}:

- the conjugate kernel (the "top-layer" kernel when the layer is the last hidden one)
  K_ij = h(x_i) . h(x_j) / n_l, the empirical NNGP;
- the empirical neural tangent kernel Theta_ij = (1 / n_l) sum_c <d h_c(x_i) / d theta,
  d h_c(x_j) / d theta> over every parameter theta the layer depends on (the standard
  parameterization: the gradients an optimizer sees).

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

from nngauge._internal.data import collect
from nngauge._internal.layers import (
    capture_outputs,
    preserved_state,
    resolve_layers,
    select_output,
)
from nngauge._internal.probing import OUTPUT, prepare_inputs, run_model
from nngauge.errors import invalid
from nngauge.measures._result import MeasureResult
from nngauge.theory import condition_number, mean_normalized_dot_product

Kind = Literal["conjugate", "ntk"]
NTK_CHUNK_ELEMENTS = 2 ** 24
"""Gradient rows x parameters held at once while accumulating the empirical NTK."""


@dataclass(frozen=True)
class KernelLayer:
    """One layer's empirical Gram matrix, its conditioning and, when available, theory's.

    Attributes:
        name: the layer (``"output"`` for the network output).
        condition_number: lambda_max / lambda_min (inf when numerically singular).
        mean_normalized_dot_product: mean over i != j of K_ij / sqrt(K_ii K_jj).
        theory_condition_number, theory_mean_normalized_dot_product: the infinite-width
            prediction (None when the model is not a plain nngauge MLP).
        kernel: the (n, n) Gram matrix (numpy float64); theory_kernel likewise or None.
    """

    name: str
    condition_number: float
    mean_normalized_dot_product: float
    theory_condition_number: Optional[float] = None
    theory_mean_normalized_dot_product: Optional[float] = None
    kernel: np.ndarray = field(default=None, repr=False, compare=False)
    theory_kernel: Optional[np.ndarray] = field(default=None, repr=False, compare=False)


@dataclass(frozen=True)
class KernelConditioning(MeasureResult):
    """Empirical kernel conditioning per layer (deep-conditioning section 3, figure 1).

    Attributes:
        kind: "conjugate" or "ntk".
        layers: one :class:`KernelLayer` per measured layer, the output last.
        skipped: ``{layer: reason}`` for layers that could not be measured.
        n_samples: the Gram matrices are n_samples x n_samples.
    """

    kind: str
    layers: tuple[KernelLayer, ...]
    skipped: dict
    n_samples: int

    def plot(self, ax=None):
        """Condition number per layer (log scale), with theory's when available."""
        from nngauge.measures._plots import bar_per_layer

        theory = [row.theory_condition_number for row in self.layers]
        return bar_per_layer([row.name for row in self.layers],
                             [row.condition_number for row in self.layers],
                             ylabel=f"condition number ({self.kind})", log=True, ax=ax,
                             reference=theory if None not in theory else None)


def kernel_conditioning(
    model: nn.Module,
    data: Any,
    *,
    kind: Kind = "conjugate",
    layers: Optional[Sequence[str]] = None,
    max_samples: int = 200,
    output: Any = None,
) -> KernelConditioning:
    """Per-layer empirical conjugate kernel or NTK, their condition numbers and mean
    normalized dot products, with infinite-width theory beside them for nngauge MLPs.

    Args:
        model: any module; all samples are propagated as one batch.
        data: any supported data form; the first ``max_samples`` samples are used.
        kind: "conjugate" (default: K = H H^T / n_l, cheap) or "ntk" (parameter gradients:
            one batched backward pass per output unit and sample chunk).
        layers: module names; default: the linear and conv layers (the pre-activations the
            papers' kernels describe), then the output.
        max_samples: n, the size of the Gram matrices.
        output: selector for models returning tuples or dicts.

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
    if kind not in ("conjugate", "ntk"):
        raise invalid(where, "kind 'conjugate' or 'ntk'", repr(kind), "use one of them")
    chosen = resolve_layers(model, layers, default_kinds=("linear", "conv"), where=where)
    batch = collect(data, where=where, max_samples=max_samples)
    if len(batch) < 2:
        raise invalid(where, "at least 2 samples (a Gram matrix of pairs)", f"{len(batch)}",
                      "pass 2 or more samples")
    theory = _theory_kernels(model, batch.inputs, kind)
    rows, skipped = [], {}
    with preserved_state(model):
        x = prepare_inputs(batch.inputs, model, requires_grad=False)
        with torch.set_grad_enabled(kind == "ntk"), capture_outputs(chosen) as captured:
            y = select_output(run_model(model, x, where), output, where=where)
        outputs = {**{layer.name: captured.get(layer.name) for layer in chosen}, OUTPUT: y}
        params = [p for p in model.parameters() if p.requires_grad]
        for name, h in outputs.items():
            if h is None:
                skipped[name] = "not called by the forward pass"
                continue
            if kind == "ntk" and not h.requires_grad:
                skipped[name] = "depends on no trainable parameter"
                continue
            gram = _conjugate(h) if kind == "conjugate" else _ntk(h, params)
            rows.append(_row(name, gram, theory.get(name)))
    return KernelConditioning(kind=kind, layers=tuple(rows), skipped=skipped, n_samples=len(x))


def _conjugate(h: torch.Tensor) -> np.ndarray:
    flat = h.detach().reshape(len(h), -1).to(torch.float64)
    return (flat @ flat.T / flat.shape[1]).cpu().numpy()


def _ntk(h: torch.Tensor, params: Sequence[torch.Tensor]) -> np.ndarray:
    """Theta = (1 / n_l) sum_c J_c J_c^T, J_c (n x P) the parameter Jacobian of unit c, by
    batched backward passes: row (c, i) of the batch back-propagates the basis vector of unit
    c at sample i; units go in chunks of at most NTK_CHUNK_ELEMENTS gradient entries."""
    n, units = len(h), h[0].numel()
    flat_h = h.reshape(n, units)
    n_params = sum(p.numel() for p in params)
    per_chunk = max(1, NTK_CHUNK_ELEMENTS // (n * max(n_params, n * units)))
    samples = torch.arange(n, device=h.device)
    theta = torch.zeros(n, n, dtype=torch.float64, device=h.device)
    for start in range(0, units, per_chunk):
        cols = torch.arange(start, min(start + per_chunk, units), device=h.device)
        m = len(cols)
        basis = torch.zeros(m, n, n, units, dtype=h.dtype, device=h.device)
        basis[torch.arange(m, device=h.device)[:, None], samples, samples, cols[:, None]] = 1.0
        grads = torch.autograd.grad(flat_h, params, grad_outputs=basis.reshape(m * n, n, units),
                                    retain_graph=True, is_grads_batched=True, allow_unused=True)
        jac = torch.cat([g.reshape(m, n, -1) for g in grads if g is not None], dim=2)
        jac = jac.to(torch.float64)
        theta += torch.einsum("cip,cjp->ij", jac, jac)
    return (theta / units).cpu().numpy()


def _row(name: str, gram: np.ndarray, theory: Optional[np.ndarray]) -> KernelLayer:
    return KernelLayer(
        name=name, condition_number=condition_number(gram),
        mean_normalized_dot_product=mean_normalized_dot_product(gram),
        theory_condition_number=None if theory is None else condition_number(theory),
        theory_mean_normalized_dot_product=(None if theory is None
                                            else mean_normalized_dot_product(theory)),
        kernel=gram, theory_kernel=theory)


def _theory_kernels(model: nn.Module, inputs: torch.Tensor, kind: str) -> dict[str, np.ndarray]:
    """Infinite-width kernels by layer name for a plain nngauge MLP (no norm, no skip, flat
    inputs); an empty dict otherwise."""
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
