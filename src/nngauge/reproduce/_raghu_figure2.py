"""``raghu-figure2``: neuron transitions vs depth, width and sigma_w^2 along a circle between two
data points (Raghu et al., "On the Expressive Power of Deep Neural Networks", ICML 2017,
section 2.1.1 and figure 2), and a numerical check of Theorem 4's rate.

Random hard-tanh networks: input 64 (a digit), n hidden layers of width k, weights
N(0, sigma_w^2 / fan_in), no biases, float64. The trajectory is the circular arc
x(t) = cos(pi t / 2) x0 + sin(pi t / 2) x1 between two digits of different classes (centred on
the data set's mean image and scaled to norm sqrt(64), i.e. unit variance per pixel). Along it
the transitions of every hidden layer are counted exactly by :func:`nngauge.transitions`
(hard tanh is piecewise linear: every crossing of +-1 solved in closed form, on the arc's
polygon). A network with d hidden layers is the first d layers of the deepest one, so
``transitions`` of depth d is the sum of the first d layers' counts (all neurons of a depth-d
network), averaged over ``nets`` random networks.

Figure 2's claims: the count grows exponentially with depth (left pane), far more slowly with
width (right pane), and depends on sigma_w^2 (section 2.2: trajectory length). Here:
``depth_growth`` is the per-layer factor exp(slope of log transitions vs depth); width is
compared with depth at an equal number of hidden neurons (deep-narrow vs shallow-wide).

Theorem 4 (``part = "theorem4"``): in the saturated limit (large sigma_w) each flip of a neuron
in layer d flips a neuron of layer d + 1 with probability P(|X| > |R|), X ~ N(0, sigma^2 / k)
one weight and R ~ N(0, (k - 1) sigma^2 / k) the rest of the sum, i.e. (2 / pi)
arctan(1 / sqrt(k - 1)); with k children per flip, E[T^(d+1)] / E[T^(d)] = k (2 / pi)
arctan(1 / sqrt(k - 1)) ~ (2 / pi) sqrt(k). The appendix's proof computes the same
probability, 1 - (2 / pi) arctan(sqrt(k)) ~ (2 / pi) / sqrt(k), but concludes
E[T^(d+1)] >= sqrt(k) E[T^(d)], dropping the factor 2 / pi. The measured ratio at
sigma_w^2 = 10^4 is printed beside both.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
import torch

from nngauge._citations import cite
from nngauge._random import seed_of
from nngauge.reproduce._base import Comparison, Computed, Reproduction, Verdict

COLUMNS = ("part", "width", "sigma_w2", "depth", "transitions", "layer_transitions", "nets")
D_IN = 64
SATURATED_SIGMA_W2 = 1.0e4


@dataclass(frozen=True)
class Settings:
    widths: tuple[int, ...]
    sigma_w2: tuple[float, ...]
    hidden: int  # deepest network; shallower ones are its first layers
    nets: int  # random networks averaged per setting
    n_points: int  # points of the arc's polygon (transitions exact on it)
    theorem4_widths: tuple[int, ...]
    theorem4_hidden: int
    theorem4_nets: int


SETTINGS = {
    "small": Settings(widths=(8, 16, 32), sigma_w2=(1.0, 4.0, 16.0), hidden=6, nets=2,
                      n_points=129, theorem4_widths=(8, 16, 32), theorem4_hidden=4,
                      theorem4_nets=2),
    "paper": Settings(widths=(8, 16, 32, 64), sigma_w2=(1.0, 2.0, 4.0, 8.0, 16.0), hidden=8,
                      nets=10, n_points=1025, theorem4_widths=(8, 16, 32, 64),
                      theorem4_hidden=5, theorem4_nets=10),
}


def digit_endpoints(generator: torch.Generator, shape: tuple[int, ...] = (D_IN,)
                    ) -> tuple[torch.Tensor, torch.Tensor, tuple[int, int]]:
    """Two digits of different classes drawn with ``generator`` (float64, reshaped to
    ``shape``), each centred on the data set's mean image and scaled to norm sqrt(64) (unit
    variance per pixel), and their (labels)."""
    from nngauge.data import digits

    data = digits()
    x = data.inputs.to(torch.float64)
    x = x - x.mean(0)
    rng = np.random.default_rng(seed_of(generator))
    first = int(rng.integers(len(x)))
    others = np.flatnonzero(data.labels.numpy() != int(data.labels[first]))
    second = int(others[rng.integers(len(others))])
    ends = [x[i] * (math.sqrt(D_IN) / float(x[i].norm())) for i in (first, second)]
    return (ends[0].reshape(shape), ends[1].reshape(shape),
            (int(data.labels[first]), int(data.labels[second])))


def layer_counts(width: int, sigma_w2: float, hidden: int, nets: int, traj,
                 generator: torch.Generator) -> np.ndarray:
    """(nets, hidden) exact transitions of every hidden layer of ``nets`` random hard-tanh
    networks along ``traj``."""
    from nngauge.measures.expressivity._transitions import transitions
    from nngauge.nn import mlp

    layers = [f"layers.{i}.act" for i in range(hidden)]
    counts = []
    for _ in range(nets):  # one engine run per network (networks are not batched)
        net = mlp(D_IN, width, hidden + 1, 1, activation="hard_tanh", init="gaussian",
                  sigma_w=math.sqrt(sigma_w2), bias_std=0.0, dtype=torch.float64,
                  generator=generator)
        counts.append(transitions(net, traj, layers=layers).per_layer)
    return np.asarray(counts, dtype=np.float64)


def theorem4_rate(width: int) -> float:
    """k (2 / pi) arctan(1 / sqrt(k - 1)): the expected neurons of the next layer that one flip
    flips in the saturated limit (the probability of Theorem 4's proof with the k - 1 other
    weights, times the k children)."""
    return width * (2.0 / math.pi) * math.atan(1.0 / math.sqrt(width - 1))


def compute(scale: str, generator: torch.Generator) -> Computed:
    from nngauge.trajectories import arc

    settings = SETTINGS[scale]
    x0, x1, labels = digit_endpoints(generator)
    traj = arc(x0, x1, settings.n_points)
    rows, mean_total = [], {}
    for width in settings.widths:
        for sigma_w2 in settings.sigma_w2:
            counts = layer_counts(width, sigma_w2, settings.hidden, settings.nets, traj,
                                  generator)
            per_layer = counts.mean(0)
            totals = np.cumsum(counts, axis=1).mean(0)
            for d in range(settings.hidden):
                mean_total[width, sigma_w2, d + 1] = float(totals[d])
                rows.append(("grid", width, sigma_w2, d + 1, float(totals[d]),
                             float(per_layer[d]), settings.nets))
    ratios = {}
    for width in settings.theorem4_widths:
        counts = layer_counts(width, SATURATED_SIGMA_W2, settings.theorem4_hidden,
                              settings.theorem4_nets, traj, generator)
        per_layer = counts.mean(0)
        for d in range(settings.theorem4_hidden):
            rows.append(("theorem4", width, SATURATED_SIGMA_W2, d + 1,
                         float(counts[:, :d + 1].sum(1).mean()), float(per_layer[d]),
                         settings.theorem4_nets))
        ratios[width] = float(np.exp(np.mean(np.log(per_layer[1:] / per_layer[:-1]))))
    comparison = _comparison(settings, mean_total, ratios, labels)
    return Computed(columns=COLUMNS, rows=tuple(rows), comparison=tuple(comparison),
                    extra={"hidden": settings.hidden, "labels": labels})


def depth_growth(mean_total: dict, width: int, sigma_w2: float, hidden: int) -> float:
    """exp of the least-squares slope of log(mean transitions) against depth 1..hidden."""
    y = np.log([max(mean_total[width, sigma_w2, d], 0.5) for d in range(1, hidden + 1)])
    return float(np.exp(np.polyfit(np.arange(1, hidden + 1), y, 1)[0]))


def equal_neuron_pairs(widths, hidden: int) -> list[tuple[tuple[int, int], tuple[int, int]]]:
    """((k_narrow, n_deep), (k_wide, n_shallow)) with k n equal, k_narrow < k_wide, both
    depths <= hidden."""
    pairs = []
    for narrow in widths:
        for wide in widths:
            if wide <= narrow or wide % narrow:
                continue
            factor = wide // narrow
            for shallow in range(1, hidden // factor + 1):
                pairs.append(((narrow, shallow * factor), (wide, shallow)))
    return pairs


def _comparison(settings: Settings, mean_total, ratios, labels) -> list[Comparison]:
    out = []
    hidden = settings.hidden
    for width in settings.widths:
        for sigma_w2 in settings.sigma_w2:
            out.append(Comparison(
                f"k={width}, sigma_w^2={sigma_w2:g}: transitions per added layer (factor)",
                depth_growth(mean_total, width, sigma_w2, hidden), None,
                f"figure 2 left: exponential in depth; depth {hidden}: "
                f"{mean_total[width, sigma_w2, hidden]:.4g} transitions",
                key=f"growth_k{width}_sigma_w2_{sigma_w2:g}"))
    top = max(settings.sigma_w2)
    for deep_net, shallow_net in equal_neuron_pairs(settings.widths, hidden):
        (narrow, deep), (wide, shallow) = deep_net, shallow_net
        out.append(Comparison(
            f"sigma_w^2={top:g}, {narrow * deep} neurons: transitions deep {deep}x{narrow} / "
            f"shallow {shallow}x{wide}",
            mean_total[narrow, top, deep] / max(mean_total[wide, top, shallow], 0.5), None,
            "figure 2 right: width grows the count far more slowly than depth (> 1)",
            key=pair_key(deep_net, shallow_net)))
    for width, ratio in ratios.items():
        out.append(Comparison(
            f"Theorem 4, k={width}, sigma_w^2=1e4: transitions ratio layer d+1 / d", ratio,
            math.sqrt(width),
            f"paper's proof: >= sqrt(k) = {math.sqrt(width):.3g}; its own probability gives "
            f"k (2/pi) arctan(1/sqrt(k-1)) = {theorem4_rate(width):.3g} ~ (2/pi) sqrt(k) = "
            f"{2 / math.pi * math.sqrt(width):.3g}", key=f"theorem4_ratio_k{width}"))
    out[0] = replace(out[0], note=f"{out[0].note}; the circle joins a digit {labels[0]} to a "
                     f"digit {labels[1]}")
    return out


def pair_key(deep_net: tuple[int, int], shallow_net: tuple[int, int]) -> str:
    """The comparison key of a deep-narrow / shallow-wide pair, each net as (width, depth)."""
    (narrow, deep), (wide, shallow) = deep_net, shallow_net
    return f"deep_{deep}x{narrow}_over_shallow_{shallow}x{wide}"


def plot(computed: Computed, figure) -> None:
    rows = [dict(zip(computed.columns, row)) for row in computed.rows]
    grid = [r for r in rows if r["part"] == "grid"]
    widths = sorted({r["width"] for r in grid})
    scales = sorted({r["sigma_w2"] for r in grid})
    hidden = computed.extra["hidden"]
    left, middle, right = figure.subplots(1, 3)
    for i, width in enumerate(widths):
        for j, sigma_w2 in enumerate(scales):
            points = [r for r in grid if (r["width"], r["sigma_w2"]) == (width, sigma_w2)]
            left.plot([r["depth"] for r in points], [max(r["transitions"], 0.5) for r in points],
                      ("o-", "s--", "^:")[i % 3], color=f"C{j}", markersize=3,
                      label=f"k={width}, sigma_w^2={sigma_w2:g}")
    left.set_yscale("log")
    left.set_xlabel("depth (hidden layers)")
    left.set_ylabel("transitions (all neurons)")
    left.set_title("fig. 2 left: vs depth", fontsize=8)
    left.legend(fontsize=5, ncol=2)
    top = max(scales)
    for depth in sorted({1, max(1, hidden // 2), hidden}):
        points = [r for r in grid if r["sigma_w2"] == top and r["depth"] == depth]
        middle.plot([r["width"] for r in points], [max(r["transitions"], 0.5) for r in points],
                    "o-", markersize=3, label=f"depth {depth}")
    middle.set_xscale("log", base=2)
    middle.set_yscale("log")
    middle.set_xlabel(f"width k (sigma_w^2={top:g})")
    middle.set_title("fig. 2 right: vs width", fontsize=8)
    middle.legend(fontsize=6)
    saturated = [r for r in rows if r["part"] == "theorem4"]
    for i, width in enumerate(sorted({r["width"] for r in saturated})):
        points = [r for r in saturated if r["width"] == width]
        right.plot([r["depth"] for r in points], [r["layer_transitions"] for r in points], "o-",
                   color=f"C{i}", markersize=3, label=f"k={width}")
        base = points[0]["layer_transitions"]
        depth = np.array([r["depth"] for r in points])
        right.plot(depth, base * theorem4_rate(width) ** (depth - 1), "--", color=f"C{i}",
                   linewidth=0.8)
        right.plot(depth, base * math.sqrt(width) ** (depth - 1), ":", color=f"C{i}",
                   linewidth=0.8)
    right.set_yscale("log")
    right.set_xlabel("hidden layer d (sigma_w^2 = 1e4)")
    right.set_ylabel("transitions in layer d")
    right.set_title("Theorem 4: dashed k(2/pi)atan(1/sqrt(k-1)), dotted sqrt(k)", fontsize=7)
    right.legend(fontsize=6)


def judge(computed: Computed) -> Verdict:
    """Figure 2 and Theorem 4, with the criteria of the tests: at sigma_w^2 >= 4 the transitions
    are log-linear in depth (r^2 > 0.9, factor > 1.3 per layer), the factor rises with
    sigma_w^2 (16 > 4 > 1) and depth 6 at 16 has over 5x the count at 1; at sigma_w^2 = 16 every
    deep-narrow network beats the shallow-wide one of as many neurons, more so deeper, and
    deepening 4x beats widening 4x. Any failing: differs. Then Theorem 4's saturated per-layer
    ratio: at least 0.8 sqrt(k) at every width: reproduced; under 0.8 sqrt(k) and within 25% of
    k (2/pi) arctan(1/sqrt(k-1)) at every width: paper error (the proof's own exact probability
    gives that rate, not its conclusion sqrt(k)); otherwise differs."""
    series = {}
    for r in computed.records():
        if r["part"] == "grid":
            series.setdefault((r["width"], r["sigma_w2"]), []).append((r["depth"],
                                                                      r["transitions"]))
    totals = {key: np.array([t for _, t in sorted(points)]) for key, points in series.items()}
    depth_ok, factors = True, {}
    for (width, sigma_w2), values in totals.items():
        depth, logs = np.arange(1, len(values) + 1), np.log(np.maximum(values, 0.5))
        factors[width, sigma_w2] = math.exp(np.polyfit(depth, logs, 1)[0])
        if sigma_w2 >= 4:
            r = np.corrcoef(depth, logs)[0, 1]
            depth_ok &= bool(r ** 2 > 0.9 and factors[width, sigma_w2] > 1.3)
    widths = sorted({w for w, _ in totals})
    scale_ok = all(factors[w, 16.0] > factors[w, 4.0] > factors[w, 1.0]
                   and totals[w, 16.0][-1] > 5 * totals[w, 1.0][-1] for w in widths)
    pairs = {pair_key(*pair): computed.compared(pair_key(*pair)).ours
             for pair in equal_neuron_pairs(widths, computed.extra["hidden"])}
    deepen = totals[8, 16.0][3] / totals[8, 16.0][0]
    widen = totals[32, 16.0][0] / totals[8, 16.0][0]
    width_ok = (bool(pairs) and all(v > 1.0 for v in pairs.values())
                and pairs[pair_key((8, 6), (16, 3))] > pairs[pair_key((8, 2), (16, 1))]
                and pairs[pair_key((16, 6), (32, 3))] > pairs[pair_key((16, 2), (32, 1))]
                and deepen > widen)
    theorem_widths = dict.fromkeys(r["width"] for r in computed.records()
                                   if r["part"] == "theorem4")
    theorem = [(k, computed.compared(f"theorem4_ratio_k{k}").ours) for k in theorem_widths]
    arctan_ok = all(abs(ours / theorem4_rate(k) - 1) <= 0.25 for k, ours in theorem)
    below_sqrt = all(ours < 0.8 * math.sqrt(k) for k, ours in theorem)  # the tests' bound
    def span(values):
        return f"{min(values):.2f}-{max(values):.2f}"

    figure = (f"transitions per added layer x{span([factors[w, 16.0] for w in widths])} at "
              f"sigma_w^2 = 16, x{span([factors[w, 4.0] for w in widths])} at 4, "
              f"x{span([factors[w, 1.0] for w in widths])} at 1; deep-narrow / shallow-wide at "
              f"equal neurons {span(pairs.values())}")
    rates = (f"measured {', '.join(f'{ours:.2f}' for _, ours in theorem)} at k = "
             f"{', '.join(str(k) for k, _ in theorem)} against sqrt(k) = "
             f"{', '.join(f'{math.sqrt(k):.2f}' for k, _ in theorem)} and k (2/pi) "
             f"arctan(1/sqrt(k-1)) = {', '.join(f'{theorem4_rate(k):.2f}' for k, _ in theorem)}")
    if not (depth_ok and scale_ok and width_ok):
        return Verdict("differs", "Figure 2's growth with depth, width or sigma_w^2 does not hold "
                       f"here: {figure}.")
    if theorem and all(ours >= 0.8 * math.sqrt(k) for k, ours in theorem):
        return Verdict("reproduced", f"Figure 2's claims hold ({figure}) and Theorem 4's "
                       f"per-layer ratio reaches 0.8 sqrt(k) ({rates}).")
    if theorem and below_sqrt and arctan_ok:
        return Verdict("paper error", "Figure 2's depth, width and sigma_w^2 claims are "
                       f"reproduced ({figure}), but Theorem 4's printed rate sqrt(k) is not: its "
                       "proof's own exact probability of a flip, 1 - (2/pi) arctan(sqrt(k)), "
                       "gives k (2/pi) arctan(1/sqrt(k-1)) ~ (2/pi) sqrt(k) flips per flip, below "
                       "the sqrt(k) it concludes (the factor 2/pi is dropped; the statement's "
                       "O(sqrt(k))^n stands), and the saturated per-layer ratio is about (2/pi) "
                       f"sqrt(k) ({rates}).")
    return Verdict("differs", "Figure 2's depth, width and sigma_w^2 claims are reproduced "
                   f"({figure}), but Theorem 4's per-layer ratio matches neither sqrt(k) nor k "
                   f"(2/pi) arctan(1/sqrt(k-1)) within 25% at every width ({rates}).")


REPRODUCTION = Reproduction(
    name="raghu-figure2",
    paper=cite("expressivity"),
    target="Figure 2 (and Theorem 4)",
    description="exact transitions of random hard-tanh MLPs along a circle between two "
                "digits vs depth, width and sigma_w^2; Theorem 4's rate at large sigma_w",
    differences={
        "small": (
            "scikit-learn's 8x8 digits (64 inputs, centred, each endpoint scaled to norm 8) "
            "instead of MNIST: nothing is downloaded",
            "hard tanh with exact transitions (on the arc's 128-segment polygon); widths 8, "
            "16, 32; sigma_w^2 1, 4, 16; depths 1-6 as prefixes of one 6-layer network; 2 "
            "networks averaged: the paper states none of its sizes",
            "width vs depth compared at equal numbers of hidden neurons; the paper prints no "
            "numbers",
            "Theorem 4 checked at sigma_w^2 = 1e4 (saturated units, the theorem's assumption), "
            "widths 8-32, 4 layers, 2 networks: the measured per-layer ratio is about "
            "(2/pi) sqrt(k), not the sqrt(k) the proof concludes (it drops the 2/pi of its own "
            "Cauchy probability)",
        ),
        "paper": (
            "digits instead of MNIST; widths 8-64, sigma_w^2 1-16, depths 1-8, 10 networks "
            "each; exact transitions on a 1024-segment polygon; deeper or wider hard-tanh "
            "networks at sigma_w^2 = 16 have too many pieces for the exact count on a CPU",
            "Theorem 4 at sigma_w^2 = 1e4, widths 8-64, 5 layers, 10 networks",
        ),
    },
    small_runtime="~6 s",
    compute=compute,
    plot=plot,
    claim=("The number of transitions along a trajectory grows exponentially with depth, far more "
           "slowly with width, and rises with the initialization scale sigma_w^2 (section 2.1.1, "
           "figure 2); Theorem 4's proof: in a saturated hard-tanh network each added layer "
           "multiplies the transitions by at least sqrt(k)."),
    judge=judge,
    n_seeds=3,
)
