"""``raghu-dichotomies``: dichotomies of 15 random inputs while one layer's weights sweep a great
circle (Raghu et al., "On the Expressive Power of Deep Neural Networks", ICML 2017, appendix
B.3, figures 14, 15 and 16).

Random hard-tanh networks (input and hidden width k, one output labelling sign(f(x)), weights
N(0, sigma_w^2 / fan_in), no biases) and s = 15 inputs x_i ~ N(0, I_k). The weights W of one
layer move along the great circle W(t) = cos(t) W0 + sin(t) W1, t in [0, 2 pi)
(``n_steps`` settings), and :func:`nngauge.dichotomies` counts the distinct labellings of the
15 inputs met (at most 2^15 = 32768, and at most ``n_steps``) and the label flips between
consecutive settings.

- ``fig14``: the first layer swept, dichotomies vs depth for several widths (sigma_w^2 = 8):
  exponential in depth, much slower in width (``fig14_nets`` networks per point: the
  geometric mean of their counts, the mean of their flips).
- ``fig15``: layer l of a network of n hidden layers swept (width ``fig15_width``,
  sigma_w^2 = 8): the count depends on the remaining depth r = n - l (the hidden layers whose
  input moves, the swept one's included), not on n.
- ``fig16``: first layer swept at sigma_w^2 = 16, networks of several depths: dichotomies vs
  the label flips the network made, beside the random walk the paper compares with (each flip
  flips one of the 15 labels uniformly at random; ``random_walk_dichotomies`` is its mean
  number of distinct labellings after the same number of flips).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from nngauge._citations import cite
from nngauge._random import seed_of
from nngauge.reproduce._base import Comparison, Computed, Reproduction, Verdict

COLUMNS = ("panel", "width", "depth", "swept_layer", "remaining_depth", "sigma_w2",
           "n_dichotomies", "label_flips", "random_walk_dichotomies", "max_dichotomies")
SAMPLES = 15


@dataclass(frozen=True)
class Settings:
    fig14_widths: tuple[int, ...]
    fig14_depths: tuple[int, ...]
    fig15_width: int
    fig15_depths: tuple[int, ...]
    fig16_width: int
    fig16_depths: tuple[int, ...]
    fig14_nets: int  # networks per point of figure 14 (geometric mean of their counts)
    n_steps: int
    walks: int  # random walks averaged


SETTINGS = {
    "small": Settings(fig14_widths=(16, 64), fig14_depths=(1, 3, 5, 7), fig15_width=32,
                      fig15_depths=(2, 4, 6), fig16_width=32, fig16_depths=(1, 2, 3, 4, 5),
                      fig14_nets=2, n_steps=2048, walks=200),
    "paper": Settings(fig14_widths=(16, 32, 64, 128, 256), fig14_depths=tuple(range(1, 11)),
                      fig15_width=128, fig15_depths=(2, 4, 6, 8, 10), fig16_width=128,
                      fig16_depths=tuple(range(1, 11)), fig14_nets=3, n_steps=2**16,
                      walks=200),
}


def random_walk_dichotomies(s: int, steps: int, walks: int, seed: int) -> np.ndarray:
    """Mean number of distinct labellings of s labels visited after 0..steps flips of a
    random walk that flips one label chosen uniformly at random per step (figure 16's
    simulation), from a uniformly random start; shape (steps + 1,).

    Example:
        >>> curve = random_walk_dichotomies(15, 3, 50, 0)
        >>> float(curve[0]), float(curve[1]), bool(curve[3] <= 4)
        (1.0, 2.0, True)
    """
    rng = np.random.default_rng(seed)
    start = rng.integers(0, 2**s, size=walks, dtype=np.int64)
    flips = np.left_shift(np.int64(1), rng.integers(0, s, size=(walks, steps), dtype=np.int64))
    states = np.concatenate([start[:, None], start[:, None]
                             ^ np.bitwise_xor.accumulate(flips, axis=1)], axis=1)
    keys = (np.arange(walks, dtype=np.int64)[:, None] << s) + states
    _, first = np.unique(keys.reshape(-1), return_index=True)
    new = np.zeros(keys.size, dtype=np.int64)
    new[first] = 1
    return np.cumsum(new.reshape(walks, -1), axis=1).mean(0)


def _sweep(width: int, depth: int, layer: int, sigma_w2: float, inputs: torch.Tensor,
           n_steps: int, generator: torch.Generator):
    from nngauge.measures.expressivity._dichotomies import dichotomies
    from nngauge.nn import mlp

    net = mlp(width, width, depth + 1, 1, activation="hard_tanh", init="gaussian",
              sigma_w=math.sqrt(sigma_w2), bias_std=0.0, generator=generator)
    return dichotomies(net, inputs, layer=f"layers.{layer}.linear", resolution=n_steps,
                       generator=generator)


def compute(scale: str, generator: torch.Generator) -> Computed:
    settings = SETTINGS[scale]
    rows = []

    def inputs(width):
        return torch.randn(SAMPLES, width, generator=generator)

    for width in settings.fig14_widths:
        x = inputs(width)
        for depth in settings.fig14_depths:
            found = [_sweep(width, depth, 0, 8.0, x, settings.n_steps, generator)
                     for _ in range(settings.fig14_nets)]
            rows.append(("fig14", width, depth, 0, depth, 8.0,
                         float(np.exp(np.mean(np.log([r.n_dichotomies for r in found])))),
                         float(np.mean([r.label_flips for r in found])), None,
                         found[0].max_dichotomies))
    width = settings.fig15_width
    x = inputs(width)
    for depth in settings.fig15_depths:
        for layer in range(depth):
            r = _sweep(width, depth, layer, 8.0, x, settings.n_steps, generator)
            rows.append(("fig15", width, depth, layer, depth - layer, 8.0, r.n_dichotomies,
                         r.label_flips, None, r.max_dichotomies))
    width = settings.fig16_width
    x = inputs(width)
    found = [(depth, _sweep(width, depth, 0, 16.0, x, settings.n_steps, generator))
             for depth in settings.fig16_depths]
    longest = max(r.label_flips for _, r in found)
    walk = random_walk_dichotomies(SAMPLES, longest, settings.walks, seed_of(generator))
    for depth, r in found:
        rows.append(("fig16", width, depth, 0, depth, 16.0, r.n_dichotomies, r.label_flips,
                     float(walk[r.label_flips]), r.max_dichotomies))
    return Computed(columns=COLUMNS, rows=tuple(rows), comparison=tuple(_comparison(rows)),
                    extra={"walk": walk})


def _comparison(rows) -> list[Comparison]:
    out = []
    fig14 = [r for r in rows if r[0] == "fig14"]
    for width in sorted({r[1] for r in fig14}):
        counts = [(r[2], r[6]) for r in fig14 if r[1] == width]
        slope = np.polyfit([d for d, _ in counts], np.log([c for _, c in counts]), 1)[0]
        out.append(Comparison(f"fig. 14, k={width}: dichotomies per added layer (factor)",
                              float(np.exp(slope)), None,
                              f"depths {counts[0][0]}-{counts[-1][0]}: {counts[0][1]:.4g} -> "
                              f"{counts[-1][1]:.4g} of 2^15 = 32768",
                              key=f"fig14_k{width}_growth"))
    fig15 = [r for r in rows if r[0] == "fig15"]
    for remaining in sorted({r[4] for r in fig15}):
        counts = [r[6] for r in fig15 if r[4] == remaining]
        out.append(Comparison(
            f"fig. 15, remaining depth {remaining}: dichotomies (mean over total depths)",
            float(np.mean(counts)), None,
            f"{len(counts)} total depths, range {min(counts)}-{max(counts)}: figure 15, the "
            "count depends only on the remaining depth", key=f"fig15_remaining{remaining}"))
    for r in (r for r in rows if r[0] == "fig16"):
        out.append(Comparison(
            f"fig. 16, depth {r[2]}: dichotomies / random walk's at {r[7]} flips",
            r[6] / r[8], None, f"{r[6]} vs {r[8]:.1f}: figure 16, the network follows the "
            "random walk", key=f"fig16_depth{r[2]}"))
    return out


def plot(computed: Computed, figure) -> None:
    rows = [dict(zip(computed.columns, row)) for row in computed.rows]
    a, b, c = figure.subplots(1, 3)
    fig14 = [r for r in rows if r["panel"] == "fig14"]
    for i, width in enumerate(sorted({r["width"] for r in fig14})):
        points = [r for r in fig14 if r["width"] == width]
        a.plot([r["depth"] for r in points], [r["n_dichotomies"] for r in points], "o-",
               color=f"C{i}", markersize=3, label=f"k={width}")
    a.set_xlabel("depth (first layer swept)")
    a.set_ylabel("dichotomies of 15 inputs")
    a.set_title("fig. 14a: sigma_w^2 = 8", fontsize=8)
    fig15 = [r for r in rows if r["panel"] == "fig15"]
    for i, depth in enumerate(sorted({r["depth"] for r in fig15})):
        points = sorted((r for r in fig15 if r["depth"] == depth),
                        key=lambda r: r["remaining_depth"])
        b.plot([r["remaining_depth"] for r in points], [r["n_dichotomies"] for r in points],
               "o-", color=f"C{i}", markersize=3, label=f"{depth} hidden layers")
    b.set_xlabel("remaining depth (layers from the swept one up)")
    b.set_title(f"fig. 15: k = {fig15[0]['width']}, sigma_w^2 = 8", fontsize=8)
    fig16 = [r for r in rows if r["panel"] == "fig16"]
    walk = computed.extra["walk"]
    c.plot(np.arange(len(walk)), walk, color="grey", label="random walk")
    c.plot([r["label_flips"] for r in fig16], [r["n_dichotomies"] for r in fig16], "o",
           color="C3", markersize=4, label="networks (depths)")
    c.set_xscale("log")
    c.set_yscale("log")
    c.set_xlabel("label flips along the sweep")
    c.set_title(f"fig. 16: k = {fig16[0]['width']}, sigma_w^2 = 16", fontsize=8)
    for ax in (a, b, c):
        ax.axhline(2**15, color="C0", linestyle="--", linewidth=0.8)
        ax.legend(fontsize=6)
    a.set_yscale("log")
    b.set_yscale("log")


def judge(computed: Computed) -> Verdict:
    """Figures 14-16, with the criteria of the tests: fig. 14's dichotomies are log-linear in
    depth (r^2 > 0.85, a factor > 1.2 per layer, over 4x from the shallowest to the deepest) at
    every width, and widening 4x (the narrowest width k -> 4k) gives fewer than four added
    layers from every depth where both are computed (at least one: untested fails); fig. 15's
    log-count rises with the remaining depth (coefficient > log 1.15) and hardly with the total
    depth (under half of it); fig. 16's count rises with the label flips (Spearman >= 0.9, the
    deepest flipping over 3x the shallowest) and stays within 0.6-1.15 of the random walk's.
    The random walk is matched only where every fig. 16 ratio is at least 0.85."""
    from scipy import stats

    rows = computed.records()
    counts: dict = {}
    for r in rows:
        if r["panel"] == "fig14":
            counts.setdefault(r["width"], {})[r["depth"]] = r["n_dichotomies"]
    factors, fig14_ok = {}, True
    for width, by_depth in counts.items():
        depth = np.array(sorted(by_depth))
        values = np.log([by_depth[d] for d in depth])
        factors[width] = math.exp(np.polyfit(depth, values, 1)[0])
        fig14_ok &= bool(factors[width] > 1.2 and np.corrcoef(depth, values)[0, 1] ** 2 > 0.85
                         and by_depth[depth[-1]] > 4 * by_depth[depth[0]])
    narrow = min(counts)
    wide = counts.get(4 * narrow, {})
    shallow = [d for d in counts[narrow] if d + 4 in counts[narrow] and d in wide]
    for d in shallow:  # widening 4x against four more layers, from the same depth
        fig14_ok &= wide[d] / counts[narrow][d] < counts[narrow][d + 4] / counts[narrow][d]
    fig14_ok &= bool(shallow)  # the width claim must be tested
    fig15 = [r for r in rows if r["panel"] == "fig15"]
    design = np.array([[1.0, r["remaining_depth"], r["depth"]] for r in fig15])
    _, remaining, total = np.linalg.lstsq(design, np.log([r["n_dichotomies"] for r in fig15]),
                                          rcond=None)[0]
    fig15_ok = remaining > math.log(1.15) and abs(total) < 0.5 * remaining
    fig16 = [r for r in rows if r["panel"] == "fig16"]
    flips = [r["label_flips"] for r in fig16]
    ratios = [r["n_dichotomies"] / r["random_walk_dichotomies"] for r in fig16]
    rank = stats.spearmanr(flips, [r["n_dichotomies"] for r in fig16])[0]
    fig16_ok = rank >= 0.9 and flips[-1] > 3 * flips[0] and all(0.6 < q < 1.15 for q in ratios)
    many = [(q, f) for q, f in zip(ratios, flips) if f >= max(flips) / 2]  # the most flips
    text = ("fig. 14: x" + ", x".join(f"{factors[w]:.2f}" for w in sorted(factors))
            + f" per added layer at k = {', '.join(str(w) for w in sorted(factors))}; fig. 15: "
            f"log-count coefficient {remaining:.2f} per remaining layer, {total:.2f} per total "
            f"layer; fig. 16: Spearman {rank:.2f} with the flips, dichotomies / random walk's "
            + ", ".join(f"{q:.2f}" for q in ratios) + f" at {', '.join(str(f) for f in flips)} "
            "flips")
    if not (fig14_ok and fig15_ok):
        return Verdict("differs", "The dichotomies do not grow with (remaining) depth as "
                       f"figures 14-15: {text}.")
    if not fig16_ok:
        return Verdict("qualitatively", "Figures 14-15 are reproduced but the networks do not "
                       f"follow figure 16's random walk: {text}.")
    if min(ratios) >= 0.85:
        return Verdict("reproduced", f"Figures 14-16 are reproduced: {text}.")
    return Verdict("qualitatively", "Figures 14-15 are reproduced and the dichotomies rise with "
                   "the flips as figure 16's random walk, but fall short of it at many flips "
                   f"({min(many)[0]:.2f}-{max(many)[0]:.2f} of the walk's at "
                   f"{min(f for _, f in many)}-{max(f for _, f in many)} flips): {text}.")


REPRODUCTION = Reproduction(
    name="raghu-dichotomies",
    paper=cite("expressivity"),
    target="Figures 14, 15 and 16",
    description="dichotomies of 15 random inputs as one layer's weights sweep a great circle "
                "in random hard-tanh MLPs: vs depth and width, vs remaining depth, vs flips",
    differences={
        "small": (
            "s = 15 Gaussian inputs and sigma_w^2 = 8 (figs. 14-15), 16 (fig. 16) as the "
            "paper; 2048 settings on the circle (a count can not exceed it); one network "
            "per point (fig. 14: the geometric mean of 2)",
            "fig. 14: widths 16, 64 and depths 1, 3, 5, 7; fig. 15: width 32 (the paper: 128), "
            "total depths 2, 4, 6; fig. 16: width 32 (not stated), depths 1-5",
            "fig. 16's 'transitions' read as label flips between consecutive settings (the "
            "random walk flips one label per transition); 200 random walks; the paper prints "
            "no numbers; at hundreds of flips our networks meet 10-25% fewer labellings than "
            "the random walk (the swept circle is closed and revisits labellings)",
            "Theorem 4's transition rate is checked in raghu-figure2: about (2/pi) sqrt(k), "
            "not the sqrt(k) of the paper's proof",
        ),
        "paper": (
            "2^16 settings per circle; fig. 14: widths 16-256, depths 1-10, 3 networks per "
            "point; fig. 15: width 128, total depths 2-10; fig. 16: width 128, depths 1-10; "
            "one network per point, 200 random walks",
            "Theorem 4's transition rate (appendix B.3's proportionality of dichotomies to "
            "transitions rests on it) is checked in raghu-figure2: about (2/pi) sqrt(k), not "
            "sqrt(k)",
        ),
    },
    small_runtime="~6 s",
    compute=compute,
    plot=plot,
    claim=("Sweeping a layer's weights along a great circle, the dichotomies of 15 random inputs "
           "grow exponentially with depth and much more slowly with width (figure 14), depend "
           "only on the remaining depth above the swept layer (figure 15), and follow a random "
           "walk that flips one label per transition (figure 16; appendix B.3)."),
    judge=judge,
    n_seeds=3,
)
