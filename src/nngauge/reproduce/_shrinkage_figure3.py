"""``shrinkage-figure3``: critical vs chaotic erf networks (shrinkage paper, figure 3).

Deep LayerNorm MLPs with erf (eq. 2.1; the first layer is the linear "embedding", phi_1 =
identity), Gaussian weights sigma_w = 1, at two initializations:

- ``critical``: sigma_b from :func:`nngauge.theory.critical_init` (P'(1) = 1);
- ``chaotic``: sigma_b = 0 (P'(1) = ||erf'||^2 / ||erf||^2 = 1.23 > 1, fixed point rho_fp = 0).

Per layer l = 1..L (the representation z^(l), after the l-th LayerNorm), the CSV has, for each
``quantity``:

- ``1 - rho_max`` (figures 3a, 3b): measured, rho_max = max_{k <= l} min over the sample's
  pairs of the cosine similarity at layer k (the paper's definition, over a data sample);
  theory: the same from the infinite-width maps (:func:`nngauge.theory.correlation_map`) at
  the sample's least correlated input pair; bound: eq. 4.2, Theorem 1 at ||J||_op^2 = 1
  (:func:`nngauge.theory.shrinkage_bound`; the critical network only);
- ``jacobian_op`` (figures 3c, 3d): the RMS operator norm ||d z^(l) / d z^(0)||_op
  (||J||_2 sqrt(d_in / N), the paper's section 2.1 convention), from the full Jacobians of
  ``n_jacobian`` inputs (forward mode, :func:`torch.func.jacfwd`), quadratic mean over them;
  theory: the infinite-width RMS gain sqrt(prod_k P_k'(1)); bound: eq. 4.3, Theorem 1 at
  rho_max = rho_fp (the chaotic network only); ``jacobian_op power iteration``: the top
  layer's by :func:`nngauge.jacobian_norm`, a cross-check;
- ``singular_value`` (figures 3c, 3d, spectra): the RMS-normalized singular values of the
  input-output Jacobian at the last layer of one input; ``index`` numbers them, largest first;
- ``gradient_norm`` (figures 3e, 3f): the backpropagated gradient ||dl_i / dz_i^(l)|| of a
  squared loss (random targets, 10 outputs after a last linear layer), quadratic mean over
  the samples; theory: the mean-field growth from the top, ||grad_L|| sqrt(P'(1))^(L - l).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from nngauge._citations import cite
from nngauge._random import seed_of
from nngauge.reproduce._base import Comparison, Computed, Reproduction, Verdict

COLUMNS = ("init", "quantity", "layer", "index", "measured", "theory", "bound")
INITS = ("critical", "chaotic")


@dataclass(frozen=True)
class Settings:
    d_in: int
    width: int
    depth: int
    n_samples: int
    n_jacobian: int  # inputs whose full Jacobians are computed


SETTINGS = {
    "small": Settings(d_in=32, width=256, depth=32, n_samples=24, n_jacobian=8),
    "paper": Settings(d_in=128, width=1024, depth=100, n_samples=100, n_jacobian=32),
}


def sigmas(init: str) -> tuple[float, float]:
    """(sigma_w, sigma_b) of the critical or chaotic erf network."""
    from nngauge.theory import critical_init

    return critical_init("erf") if init == "critical" else (1.0, 0.0)


def compute(scale: str, generator: torch.Generator) -> Computed:
    from nngauge.data import gaussian

    settings = SETTINGS[scale]
    x = gaussian(settings.n_samples, settings.d_in, generator=seed_of(generator)).inputs
    x = (x / x.norm(dim=1, keepdim=True) * math.sqrt(settings.d_in)).to(torch.float32)
    targets = torch.randn(settings.n_samples, 10, generator=generator)
    rows, comparison = [], []
    for init in INITS:
        new_rows = _network_rows(init, x, targets, settings, generator)
        rows += new_rows
        comparison += _summary(init, new_rows, settings)
    return Computed(columns=COLUMNS, rows=tuple(rows), comparison=tuple(comparison),
                    extra={"depth": settings.depth})


def _network_rows(init, x, targets, settings, generator) -> list[tuple]:
    from nngauge import jacobian_norm
    from nngauge.measures.propagation._correlations import cosine_matrix
    from nngauge.nn import mlp
    from nngauge.theory import correlation_map, shrinkage_bound

    sigma_w, sigma_b = sigmas(init)
    depth = settings.depth
    net = mlp(settings.d_in, settings.width, depth + 1, 10, activation="erf", norm="layer",
              init="gaussian", sigma_w=sigma_w, bias_std=sigma_b, generator=generator)
    chain = net.to_sequential()  # linear, norm, act per layer; z^(l) is child 3l - 2
    first = correlation_map("identity", sigma_w, sigma_b)
    erf = correlation_map("erf", sigma_w, sigma_b)
    rho_fp = erf.fixed_point()
    pairs = torch.triu_indices(len(x), len(x), offset=1)
    rho_theory = float(first(cosine_matrix(x)[pairs[0], pairs[1]].min()))
    rows = []

    # 1 - rho_max per layer (3a, 3b)
    with torch.no_grad():
        z, rho_max, rho_max_theory = x, -1.0, -1.0
        for layer in range(1, depth + 1):
            for module in chain[3 * layer - 3: 3 * layer - 1]:  # linear, norm
                z = module(z)
            rho_min = float(cosine_matrix(z)[pairs[0], pairs[1]].min())
            rho_max = max(rho_max, rho_min)
            rho_max_theory = max(rho_max_theory, rho_theory)
            bound = (shrinkage_bound("erf", layer - 1, jacobian_norm_sq=1.0).one_minus_rho_max
                     if init == "critical" and layer > 1 else None)
            rows.append((init, "1 - rho_max", layer, None, 1.0 - rho_max,
                         1.0 - rho_max_theory, bound))
            z = chain[3 * layer - 1](z)  # the activation feeding the next layer
            rho_theory = float(erf(rho_theory))

    # Jacobians of z^(1..L) with respect to the input, by forward mode (3c, 3d)
    def representations(v):
        h, out = v.unsqueeze(0), []
        for layer in range(1, depth + 1):
            h = chain[3 * layer - 2](chain[3 * layer - 3](h))
            out.append(h[0])
            h = chain[3 * layer - 1](h)
        return torch.stack(out)

    probe = x[:settings.n_jacobian]
    jac = torch.func.vmap(torch.func.jacfwd(representations))(probe).detach()
    singular = torch.linalg.svdvals(jac.to(torch.float64)) * math.sqrt(settings.d_in
                                                                      / settings.width)
    op = singular[..., 0].pow(2).mean(0).sqrt()  # quadratic mean over samples, per layer
    slope = erf.slope_at_one
    for layer in range(1, depth + 1):
        bound = (math.sqrt(shrinkage_bound("erf", layer - 1, rho_max=rho_fp).jacobian_norm_sq)
                 if init == "chaotic" and layer > 1 else None)
        rows.append((init, "jacobian_op", layer, None, float(op[layer - 1]),
                     math.sqrt(slope ** (layer - 1) * first.slope_at_one), bound))
    rows += [(init, "singular_value", depth, i, float(v), None, None)
             for i, v in enumerate(singular[0, -1])]
    top = torch.nn.Sequential(*chain[:3 * depth - 1])
    check = jacobian_norm(top, probe[:2], ord="op", rms=True, n_iter=30, generator=generator)
    same = float(singular[:2, -1, 0].pow(2).mean().sqrt())  # the SVD's, on the same inputs
    rows.append((init, "jacobian_op power iteration", depth, None, check.norm, same, None))

    # backpropagated gradients dl_i / dz_i^(l), per sample (3e, 3f)
    zs, h = [], x
    for layer in range(1, depth + 1):
        h = chain[3 * layer - 2](chain[3 * layer - 3](h))
        h.retain_grad()
        zs.append(h)
        h = chain[3 * layer - 1](h)
    loss = ((chain[-1](h) - targets) ** 2).sum() / 2  # a sum: each z_i gets its own gradient
    loss.backward()
    grads = [float(z.grad.norm(dim=1).pow(2).mean().sqrt()) for z in zs]
    net.zero_grad()
    for layer, g in enumerate(grads, start=1):
        rows.append((init, "gradient_norm", layer, None, g,
                     grads[-1] * math.sqrt(slope) ** (depth - layer), None))
    return rows


def _summary(init, rows, settings) -> list[Comparison]:
    def pick(quantity):
        return [r for r in rows if r[1] == quantity]

    shrink, jac, grad, sv = (pick(q) for q in ("1 - rho_max", "jacobian_op", "gradient_norm",
                                               "singular_value"))
    last = shrink[-1]
    out = [
        Comparison(f"{init}: 1 - rho_max at L={last[2]}", last[4], None,
                   f"infinite width {last[5]:.3g}"
                   + (f"; eq. 4.2 bound {last[6]:.3g}" if last[6] is not None else ""),
                   key=f"{init}_shrinkage"),
        Comparison(f"{init}: ||J||_op at L={jac[-1][2]} / at layer 1", jac[-1][4] / jac[0][4],
                   None, f"infinite-width RMS gain {jac[-1][5]:.3g}"
                   + (f"; eq. 4.3 bound {jac[-1][6]:.3g}" if jac[-1][6] is not None else ""),
                   key=f"{init}_jacobian_growth"),
        Comparison(f"{init}: largest / median singular value of J at L={settings.depth}",
                   sv[0][4] / float(np.median([r[4] for r in sv])), None,
                   f"largest {sv[0][4]:.3g} (RMS-normalized)", key=f"{init}_singular_value_spread"),
        Comparison(f"{init}: ||J||_op at L={settings.depth}, 2 inputs, power iteration",
                   pick("jacobian_op power iteration")[0][4], None,
                   "nngauge.jacobian_norm; by SVD of the full Jacobians "
                   f"{pick('jacobian_op power iteration')[0][5]:.4g}",
                   key=f"{init}_jacobian_power_iteration"),
        Comparison(f"{init}: gradient norm layer 1 / layer {settings.depth}",
                   grad[0][4] / grad[-1][4], None,
                   f"mean-field prediction {grad[0][5] / grad[-1][5]:.3g}",
                   key=f"{init}_gradient_ratio"),
    ]
    return out


def plot(computed: Computed, figure) -> None:
    axes = figure.subplots(2, 4)
    rows = computed.rows
    for r, init in enumerate(INITS):
        for c, quantity in enumerate(("1 - rho_max", "jacobian_op", "singular_value",
                                      "gradient_norm")):
            ax = axes[r, c]
            sel = [row for row in rows if row[0] == init and row[1] == quantity]
            x = [row[3] if quantity == "singular_value" else row[2] for row in sel]
            ax.plot(x, [row[4] for row in sel], "o", ms=3, color="red", label="measured")
            theory = [(xi, row[5]) for xi, row in zip(x, sel) if row[5] is not None]
            if theory:
                ax.plot(*zip(*theory), "-", color="black", label="infinite width")
            bound = [(xi, row[6]) for xi, row in zip(x, sel) if row[6] is not None]
            if bound:
                ax.plot(*zip(*bound), "-", color="blue", label="eq. 4.2" if c == 0 else "eq. 4.3")
            ax.set_yscale("log")
            ax.set_xlabel("index" if quantity == "singular_value" else "layer l")
            ax.set_title(f"{init}: {quantity}", fontsize=8)
            ax.legend(fontsize=6)


SHRINK_FACTOR = 0.5  # critical: 1 - rho_max at the top below this fraction of layer 1's
GROWTH = 5.0  # Jacobian norm from layer 1 to the top: critical below, chaotic above (and 5x)
GRADIENT_FLAT = 3.0  # critical: gradient norms of layer 1 and the top within this factor
GRADIENT_EXPLODES = 10.0  # chaotic: layer 1's gradient norm over this times the top's
NEAR_FIXED_POINT = 0.2
"""Chaotic: rho_max stays within this above the infinite-width fixed point rho_fp."""


def judge(computed: Computed) -> Verdict:
    """Figure 3, as the tests assert: critical, 1 - rho_max falls below SHRINK_FACTOR of its
    first-layer value and stays under eq. 4.2, the Jacobian norm grows less than GROWTH-fold
    and the gradients stay within GRADIENT_FLAT across layers; chaotic, rho_max stays below
    rho_fp + NEAR_FIXED_POINT, the Jacobian norm grows more than GROWTH-fold (and GROWTH times
    faster than the critical one's), above eq. 4.3, with a top singular value GROWTH times the
    critical one's, and the first layer's gradient is over GRADIENT_EXPLODES times the last's.
    Every part compares a finite network with a bound or with the other network: evidence.
    A quantity without rows: differs."""
    from nngauge.theory import correlation_map

    def series(init, quantity, name="measured"):
        return np.array([r[name] for r in computed.records()
                         if r["init"] == init and r["quantity"] == quantity], dtype=float)

    needed = [(init, q) for init in INITS
              for q in ("1 - rho_max", "jacobian_op", "singular_value", "gradient_norm")]
    missing = [f"{init} {q}" for init, q in needed if not len(series(init, q))]
    if missing:
        return Verdict("differs", f"No rows for {', '.join(missing)}: figure 3 is not rebuilt.")
    rho_fp = correlation_map("erf", *sigmas("chaotic")).fixed_point()
    shrink = series("critical", "1 - rho_max")
    shrink_bound = series("critical", "1 - rho_max", "bound")
    chaotic_shrink = series("chaotic", "1 - rho_max")
    jac = {init: series(init, "jacobian_op") for init in INITS}
    jac_bound = series("chaotic", "jacobian_op", "bound")
    top = {init: series(init, "singular_value")[0] for init in INITS}
    grad = {init: series(init, "gradient_norm") for init in INITS}
    growth = {init: jac[init][-1] / jac[init][0] for init in INITS}
    fall = {init: grad[init][0] / grad[init][-1] for init in INITS}
    critical_ok = (shrink[-1] < SHRINK_FACTOR * shrink[0]
                   and bool(np.all(shrink[1:] <= shrink_bound[1:]))
                   and growth["critical"] < GROWTH
                   and 1 / GRADIENT_FLAT < fall["critical"] < GRADIENT_FLAT)
    chaotic_ok = (bool(np.all(chaotic_shrink > 1 - rho_fp - NEAR_FIXED_POINT))
                  and growth["chaotic"] > GROWTH
                  and bool(np.all(jac["chaotic"][1:] >= jac_bound[1:]))
                  and growth["chaotic"] > GROWTH * growth["critical"]
                  and top["chaotic"] > GROWTH * top["critical"]
                  and fall["chaotic"] > GRADIENT_EXPLODES)
    layers = len(shrink)
    text = (f"over {layers} layers, critical: 1 - rho_max {shrink[0]:.3g} -> {shrink[-1]:.3g} "
            f"(eq. 4.2: {shrink_bound[-1]:.3g}), Jacobian norm x{growth['critical']:.3g}, "
            f"gradient layer 1 / layer {layers} {fall['critical']:.2g}; chaotic: 1 - rho_max "
            f"{chaotic_shrink.min():.3g} at least (1 - rho_fp = {1 - rho_fp:.3g}), Jacobian "
            f"norm x{growth['chaotic']:.3g} (eq. 4.3: "
            f"{jac_bound[-1]:.3g} at the top, measured {jac['chaotic'][-1]:.3g}), gradient ratio "
            f"{fall['chaotic']:.3g}, top singular value {top['chaotic']:.3g} vs "
            f"{top['critical']:.3g}")
    if critical_ok and chaotic_ok:
        return Verdict("reproduced", "Critical networks shrink representations without "
                       "exploding gradients, chaotic ones explode without shrinking, as figure "
                       "3: " + text + ".")
    return Verdict("differs", f"Not as figure 3 (critical as claimed: {critical_ok}; chaotic "
                   f"as claimed: {chaotic_ok}): " + text + ".")


REPRODUCTION = Reproduction(
    name="shrinkage-figure3",
    paper=cite("shrinkage"),
    target="Figure 3",
    description="critical vs chaotic erf LayerNorm MLPs: 1 - rho_max, Jacobian norms and "
                "spectra, weight-gradient norms per layer, with eqs. 4.2 and 4.3",
    differences={
        "small": (
            "the paper prints no numbers for figure 3 and does not state its sizes: width 256, "
            "32 layers, 24 Gaussian inputs (d = 32) normalized to ||x||^2 = d",
            "chaotic initialization: sigma_w = 1, sigma_b = 0 (the paper does not give its "
            "sigmas); critical: sigma_b^2 = 0.1049 (appendix B)",
            "rho_max over the 24-sample data set (not over all inputs); Jacobians of 8 inputs; "
            "gradients of a squared loss to random targets (10 outputs): the paper does not "
            "state its loss",
            "torch's LayerNorm centers the pre-activations, the paper's does not (footnote 3)",
        ),
        "paper": (
            "the paper prints no numbers for figure 3 and does not state its sizes: width "
            "1024, 100 layers, 100 Gaussian inputs (d = 128) normalized to ||x||^2 = d",
            "chaotic initialization: sigma_w = 1, sigma_b = 0 (the paper does not give its "
            "sigmas); critical: sigma_b^2 = 0.1049 (appendix B)",
            "rho_max over the data set (not over all inputs); gradients of a squared loss to "
            "random targets (10 outputs): the paper does not state its loss",
            "torch's LayerNorm centers the pre-activations, the paper's does not (footnote 3)",
        ),
    },
    small_runtime="~7 s",
    compute=compute,
    plot=plot,
    claim=("At critical initialization a deep erf network's Jacobian norm and gradients do not "
           "grow exponentially with depth, but its representations shrink (1 - rho_max falls, "
           "under eq. 4.2); "
           "at chaotic initialization correlations stay near rho_fp < 1 while the Jacobian norm "
           "grows (above eq. 4.3) and gradients explode towards the input (section 4.1, "
           "figure 3)."),
    judge=judge,
    n_seeds=3,
)
