"""``conditioning-depth``: kernel condition numbers vs depth (Agarwal et al. 2021, section 3).

For n inputs on the sphere of radius sqrt(d) (so that the first pre-activations have unit
variance), the condition number lambda_max / lambda_min of the NNGP (top-layer) kernel and of
the NTK after l hidden layers, for ReLU (He scale, not normalized) and for normalized
activations (zero mean, unit second moment under N(0, 1)): normalize(relu) and NormReLU_b
(the paper's b, section 7). Corollaries 3.3 and 3.5: with a normalized nonlinear activation
both condition numbers tend to 1 exponentially fast in depth; ReLU's NNGP kernel instead
degenerates (every normalized dot product tends to 1) and its condition number grows.

``theory``: the infinite-width kernels (:func:`nngauge.theory.nngp`, :func:`nngauge.theory.ntk`
with the standard parameterization at the network's width); ``empirical``: Gram matrices of
random Gaussian-initialized :func:`nngauge.nn.mlp` networks
(:func:`nngauge.kernel_conditioning`: conjugate kernel of each layer's pre-activations, and
the parameter-gradient NTK of a scalar-output network per depth).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from nngauge._citations import cite
from nngauge.reproduce._base import Comparison, Computed, Reproduction, seed_from

ACTIVATIONS = {"relu": math.sqrt(2.0), "normalize(relu)": 1.0, "norm_relu": 1.0}
"""Activation -> sigma_w: He scale for ReLU, 1 for normalized activations (unit variance)."""


@dataclass(frozen=True)
class Settings:
    n_samples: int
    d_in: int
    width: int
    nngp_depth: int  # conjugate kernels after 0..nngp_depth hidden layers (one network)
    ntk_depths: tuple[int, ...]  # one scalar-output network per depth
    ntk_width: int


SETTINGS = {
    "small": Settings(n_samples=16, d_in=32, width=512, nngp_depth=20, ntk_depths=(1, 2, 4, 8),
                      ntk_width=128),
    "paper": Settings(n_samples=64, d_in=128, width=2048, nngp_depth=50,
                      ntk_depths=(1, 2, 4, 8, 16), ntk_width=256),
}
COLUMNS = ("activation", "kernel", "depth", "theory", "empirical", "theory_mean_dot",
           "empirical_mean_dot")


def compute(scale: str, generator: torch.Generator) -> Computed:
    settings = SETTINGS[scale]
    rng = np.random.default_rng(seed_from(generator))
    x = rng.standard_normal((settings.n_samples, settings.d_in))
    x *= math.sqrt(settings.d_in) / np.linalg.norm(x, axis=1, keepdims=True)
    inputs = torch.as_tensor(x, dtype=torch.float32)
    rows = []
    for act, sigma_w in ACTIVATIONS.items():
        rows += _nngp_rows(act, sigma_w, inputs, settings, generator)
        rows += [_ntk_row(act, sigma_w, inputs, depth, settings, generator)
                 for depth in settings.ntk_depths]
    comparison = tuple(
        Comparison(f"{kernel} cond, {act}, depth {depth}", empirical, None,
                   f"infinite width {theory:.4g}")
        for act, kernel, depth, theory, empirical, *_ in rows
        if kernel == "ntk" or depth in (0, 1, 2, settings.nngp_depth // 2, settings.nngp_depth))
    return Computed(columns=COLUMNS, rows=tuple(rows), comparison=comparison)


def _nngp_rows(act, sigma_w, inputs, settings, generator) -> list[tuple]:
    from nngauge import kernel_conditioning
    from nngauge.nn import mlp

    depth = settings.nngp_depth
    net = mlp(settings.d_in, settings.width, depth + 1, settings.width, activation=act,
              init="gaussian", sigma_w=sigma_w, generator=generator)
    result = kernel_conditioning(net, inputs, kind="conjugate",
                                 layers=[f"layers.{i}.linear" for i in range(depth)],
                                 max_samples=settings.n_samples)
    return [(act, "nngp", l, row.theory_condition_number, row.condition_number,
             row.theory_mean_normalized_dot_product, row.mean_normalized_dot_product)
            for l, row in enumerate(result.layers)]


def _ntk_row(act, sigma_w, inputs, depth, settings, generator) -> tuple:
    from nngauge import kernel_conditioning
    from nngauge.nn import mlp

    net = mlp(settings.d_in, settings.ntk_width, depth + 1, 1, activation=act,
              init="gaussian", sigma_w=sigma_w, generator=generator)
    row = kernel_conditioning(net, inputs, kind="ntk", layers=[],
                              max_samples=settings.n_samples).layers[-1]
    return (act, "ntk", depth, row.theory_condition_number, row.condition_number,
            row.theory_mean_normalized_dot_product, row.mean_normalized_dot_product)


def plot(computed: Computed, figure) -> None:
    axes = figure.subplots(1, 2)
    acts, kinds = computed.column("activation"), computed.column("kernel")
    for ax, kind in zip(axes, ("nngp", "ntk")):
        for color, act in zip(("C0", "C1", "C2"), ACTIVATIONS):
            keep = [i for i, (a, k) in enumerate(zip(acts, kinds)) if a == act and k == kind]
            depth = [computed.column("depth")[i] for i in keep]
            ax.plot(depth, [computed.column("theory")[i] for i in keep], "-", color=color,
                    label=f"{act} (infinite width)")
            ax.plot(depth, [computed.column("empirical")[i] for i in keep], "o", color=color,
                    label=f"{act} (empirical)")
        ax.set_yscale("log")
        ax.set_xlabel("hidden layers")
        ax.set_ylabel("condition number")
        ax.set_title(f"{kind.upper()} kernel", fontsize=9)
    axes[0].legend(fontsize=7)


REPRODUCTION = Reproduction(
    name="conditioning-depth",
    paper=cite("conditioning"),
    target="Section 3 (Corollaries 3.3, 3.5)",
    description="NNGP and NTK condition numbers vs depth, infinite-width theory and random "
                "MLPs: ReLU vs normalized activations (normalize(relu), NormReLU)",
    differences={
        "small": (
            "the paper states rates, not numbers (its figure 1 tracks trained CIFAR-10 "
            "networks, not rebuilt): compared with infinite-width theory",
            "16 Gaussian inputs on the sphere of radius sqrt(32) instead of CIFAR-10 images",
            "width 512 for the NNGP (depths 0-20), 128 for the NTK (depths 1-8)",
            "the paper's corollaries concern normalized activations; ReLU's NTK condition "
            "number is shown too, and at these depths it does not grow (its NNGP's does)",
        ),
        "paper": (
            "the paper states rates, not numbers: compared with infinite-width theory",
            "64 Gaussian inputs on the sphere of radius sqrt(128) instead of CIFAR-10 images",
            "width 2048 for the NNGP (depths 0-50), 256 for the NTK (depths 1-16: the empirical "
            "NTK holds samples x parameters gradients)",
        ),
    },
    small_runtime="~7 s",
    compute=compute,
    plot=plot,
)
