"""``raghu-theorem1``: the bound on the number of activation patterns (Theorem 1), its chain of
inequalities, and unique patterns along a line (Corollary 1), against exact counts (Raghu et
al., "On the Expressive Power of Deep Neural Networks", ICML 2017, section 2.1 and appendix A).

Theorem 1 ("(Tight) Upper Bound for Number of Activation Patterns"): a fully connected network
with n hidden layers of width k on inputs in R^m has at most O(k^{mn}) activation patterns with
ReLU and O((2k)^{mn}) with hard tanh, for every choice of weights. Its proof (appendix A)
gives the explicit bound prod_l r(c k, m), r(k, m) = sum_{i <= m} C(k, i) the most regions of
k hyperplanes in R^m (Theorem 5), c = 1 hyperplane per ReLU and 2 per hard tanh
(:func:`nngauge.theory.max_activation_patterns`). "This upper bound is asymptotically tight,
matched by the construction given in (Montufar et al., 2014)". From it the paper derives the
chain U(1, N, m) < U(2, N/2, m) < ... < U(n, k, m) at N = n k neurons (for n, k > e). Corollary
1: along an affine trajectory x(t) = x_0 + t (x_1 - x_0) every interval between neuron
transitions has its own activation pattern (a pattern's region is convex, Theorem 2, so a line
never re-enters it).

Computed, all exactly (exact counts, exact integers):

- ``random``: random ReLU and hard-tanh MLPs (weights N(0, 2 / fan_in), biases N(0, 1),
  float64) on R^1 and R^2: their regions, counted by :func:`nngauge.transitions` on a segment
  (m = 1) and by :func:`nngauge.regions` on a square (m = 2) large enough to hold every crossing
  of the first layer's hyperplanes (up to a half side of 1000; a lower bound on the count in
  R^m); the distinct patterns
  the counter reports; :func:`nngauge.activation_patterns` at one interior point of every region
  (an independent count); Theorem 1's bound. A one-layer network's count must equal that of its
  arrangement of hyperplanes (1 + lines + their crossings in the plane; r(k, m) for ReLU, so the
  bound is attained at depth 1; a hard-tanh unit's two hyperplanes are parallel, so r(2k, 2) - k
  there);
- ``construction``: a ReLU network whose every layer of k units folds [0, 1] onto itself k times
  (:func:`sawtooth_network`, the one-dimensional case of Montufar et al.'s construction): k^n
  pieces on [0, 1] against Theorem 1's (k + 1)^n, the bound's exponent attained;
- ``segment`` and ``circle`` (Corollary 1): random networks on R^8 along random segments (each
  piece its own pattern: patterns = pieces, and the same count at the pieces' midpoints) and
  along closed circles (a closed path returns to its first region: fewer patterns than pieces);
- ``chain``: U(n', N / n', m) = Theorem 1's bound for n' hidden layers of N / n' units, over
  the divisors n' of N with N / n' >= 3 (the chain's k > e).

Every part is proven (a bound, a construction, a convexity argument): only a counting or
arithmetic bug could fail them, so the verdict is a software check (``software_check=True``),
not evidence about the paper. None of Theorem 1's or Corollary 1's claims can be failed by
measured data: they bound all weights; how far random networks are from the bound (far, at
depth 2 and more) is printed beside, not judged.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from nngauge._citations import cite
from nngauge.reproduce._base import Comparison, Computed, Reproduction, Verdict

COLUMNS = ("part", "activation", "input_dim", "width", "depth", "network", "regions",
           "patterns", "patterns_at_points", "expected", "bound", "asymptotic")
"""One row per counted network (``part`` "random", "construction", "segment", "circle") or
per architecture of the chain (``part`` "chain"): ``regions`` the regions (m = 2) or pieces (a
segment or path) of constant activation pattern; ``patterns`` the distinct patterns the counter
reports; ``patterns_at_points`` :func:`nngauge.activation_patterns` at one interior point per
region or piece (None for circles); ``expected`` the exact count where theory gives one
(depth 1: the arrangement's; construction: k^n); ``bound`` Theorem 1's bound; ``asymptotic``
its O-form (c k)^{mn} without the constant."""
PARTS = ("random", "construction", "segment", "circle", "chain")
ACTIVATIONS = ("relu", "hard_tanh")
SIGMA_W2 = 2.0
BIAS_STD = 1.0
MIN_HALF_SIDE = 20.0
MAX_HALF_SIDE = 1000.0
"""The counting box's half side: twice the farthest crossing of the first layer's hyperplanes,
at least 20 (inputs are N(0, 1)-scale) and at most 1000 (nearly parallel hyperplanes can meet
arbitrarily far; a one-layer count is then compared with the arrangement inside the box)."""
PATH_DIM = 8
"""Input dimension of Corollary 1's networks."""
DEPTH1_NOTE = {("relu", 1): "; one ReLU layer attains it (k lines in general position)",
               ("hard_tanh", 1): "; one hard-tanh layer cannot: a unit's two lines are "
                                 "parallel, r(2k, 2) - k regions"}
CHAIN_MIN_WIDTH = 3
"""The chain is claimed for n, k > e: widths of at least 3."""


@dataclass(frozen=True)
class Settings:
    input_dims: tuple[int, ...]
    widths: tuple[int, ...]
    depths: tuple[int, ...]
    nets: int  # random networks per (activation, m, k, n)
    path_width: int
    path_depth: int
    paths: int  # segments (and circles) per activation
    construction_widths: tuple[int, ...]
    construction_depths: tuple[int, ...]
    chain_neurons: int


SETTINGS = {
    "small": Settings(input_dims=(1, 2), widths=(2, 3, 4, 6), depths=(1, 2, 3), nets=2,
                      path_width=8, path_depth=3, paths=4, construction_widths=(2, 3, 4),
                      construction_depths=(1, 2, 3, 4), chain_neurons=24),
    "paper": Settings(input_dims=(1, 2), widths=(2, 3, 4, 6, 8), depths=(1, 2, 3, 4), nets=5,
                      path_width=16, path_depth=4, paths=20, construction_widths=(2, 3, 4, 5),
                      construction_depths=(1, 2, 3, 4, 5), chain_neurons=48),
}


def hyperplanes(linear: nn.Linear, activation: str) -> tuple[np.ndarray, np.ndarray]:
    """(normals, offsets) of the first layer's hyperplanes w . x + b = 0 (ReLU) or
    w . x + b = +-1 (hard tanh: two per unit, parallel)."""
    weight, bias = linear.weight.detach().numpy(), linear.bias.detach().numpy()
    if activation == "relu":
        return weight, bias
    return np.concatenate([weight, weight]), np.concatenate([bias - 1.0, bias + 1.0])


def crossing_extent(weight: np.ndarray, bias: np.ndarray) -> float:
    """The largest coordinate (in absolute value) of the points where m hyperplanes of
    R^m meet (m = 1: the points themselves; parallel ones never meet)."""
    from nngauge.reproduce._raghu_figure1 import parallel

    m = weight.shape[1]
    extent = 0.0
    for rows in itertools.combinations(range(len(weight)), m):
        rows = list(rows)
        if not parallel(weight[rows]):
            extent = max(extent, float(np.abs(np.linalg.solve(weight[rows], -bias[rows])).max()))
    return extent


def arrangement_count(weight: np.ndarray, bias: np.ndarray, half_side: float) -> int:
    """Regions the hyperplanes cut the box [-h, h]^m into (m = 1 or 2; general position)."""
    from nngauge.reproduce._raghu_figure1 import arrangement_regions

    if weight.shape[1] == 1:
        return 1 + int(np.sum(np.abs(bias / weight[:, 0]) < half_side))
    return arrangement_regions(weight, bias, half_side)


def _random_row(activation: str, m: int, width: int, depth: int, network: int,
                generator: torch.Generator) -> tuple:
    from nngauge.measures.expressivity._patterns import activation_patterns
    from nngauge.measures.expressivity._regions import regions
    from nngauge.measures.expressivity._transitions import transitions
    from nngauge.nn import mlp
    from nngauge.reproduce._raghu_figure1 import unit_square_plane
    from nngauge.theory import max_activation_patterns

    net = mlp(m, width, depth + 1, 1, activation=activation, init="gaussian",
              sigma_w=math.sqrt(SIGMA_W2), bias_std=BIAS_STD, dtype=torch.float64,
              generator=generator)
    hidden = [f"layers.{i}.act" for i in range(depth)]
    weight, bias = hyperplanes(net.layers[0].linear, activation)
    half = min(MAX_HALF_SIDE, max(MIN_HALF_SIDE, 2.0 * crossing_extent(weight, bias)))
    if m == 1:
        result = transitions(net, torch.tensor([-half], dtype=torch.float64),
                             torch.tensor([half], dtype=torch.float64), layers=hidden)
        count, patterns = result.n_pieces, result.n_patterns
        points = torch.as_tensor(-half + 2 * half * result.pieces.mean(1))[:, None]
    else:
        result = regions(net, unit_square_plane(), bounds=(-half, half, -half, half),
                         layers=hidden)
        count, patterns = result.n_regions, len(np.unique(result.patterns, axis=0))
        points = torch.as_tensor(np.stack([poly.mean(0) for poly in np.split(
            result.vertices[result.corners], result.offsets[1:-1])]))
    at_points = activation_patterns(net, points, layers=hidden).n_patterns
    expected = arrangement_count(weight, bias, half) if depth == 1 else None
    bound = max_activation_patterns(width, depth, m, act=activation)
    return ("random", activation, m, width, depth, network, count, patterns, at_points,
            expected, bound.bound, bound.asymptotic)


def sawtooth_network(width: int, depth: int) -> nn.Sequential:
    """A ReLU network on R^1 whose every hidden layer of k = ``width`` units folds [0, 1] onto
    itself k times (Montufar et al.'s construction in one dimension), float64.

    A layer's units are relu(k y + 1) and relu(k y - j), j = 1..k-1, of its input y in [0, 1];
    g(y) = h_0 - 1 - 2 h_1 + 2 h_2 - ... rises and falls k times between 0 and 1 (a unit's
    kink at y = j / k), and the next layer reads k g + (its offsets), the read-out g itself.
    The first unit's kink, y = -1 / k, lies outside [0, 1], so n layers make exactly k^n
    linear pieces on [0, 1].

    Example:
        >>> net = sawtooth_network(3, 1)
        >>> [round(float(net(torch.tensor([[x]], dtype=torch.float64))), 6)
        ...  for x in (0.0, 1 / 6, 1 / 3, 1 / 2, 2 / 3, 1.0)]
        [0.0, 0.5, 1.0, 0.5, 0.0, 1.0]
    """
    k = width
    fold = torch.tensor([1.0] + [2.0 * (-1) ** j for j in range(1, k)], dtype=torch.float64)
    offsets = torch.tensor([1.0] + [-float(j) for j in range(1, k)], dtype=torch.float64)
    modules: list[nn.Module] = []
    for layer in range(depth):
        linear = nn.Linear(1 if layer == 0 else k, k, dtype=torch.float64)
        with torch.no_grad():
            if layer == 0:
                linear.weight.fill_(float(k))
                linear.bias.copy_(offsets)
            else:  # k (fold . h - 1) + offsets
                linear.weight.copy_(float(k) * fold.expand(k, k))
                linear.bias.copy_(offsets - k)
        modules += [linear, nn.ReLU()]
    readout = nn.Linear(k, 1, dtype=torch.float64)
    with torch.no_grad():
        readout.weight.copy_(fold[None])
        readout.bias.fill_(-1.0)
    return nn.Sequential(*modules, readout)


def _construction_row(width: int, depth: int) -> tuple:
    from nngauge.measures.expressivity._patterns import activation_patterns
    from nngauge.measures.expressivity._transitions import transitions
    from nngauge.theory import max_activation_patterns

    net = sawtooth_network(width, depth)
    hidden = [str(2 * i + 1) for i in range(depth)]
    result = transitions(net, torch.zeros(1, dtype=torch.float64),
                         torch.ones(1, dtype=torch.float64), layers=hidden)
    points = torch.as_tensor(result.pieces.mean(1))[:, None]
    bound = max_activation_patterns(width, depth, 1)
    return ("construction", "relu", 1, width, depth, 0, result.n_pieces, result.n_patterns,
            activation_patterns(net, points, layers=hidden).n_patterns, width ** depth,
            bound.bound, bound.asymptotic)


def _path_rows(activation: str, settings: Settings, network: int,
               generator: torch.Generator) -> list[tuple]:
    """Corollary 1 on one random network on R^8: a random segment (patterns = pieces) and the
    closed circle through its ends' directions (the first piece's pattern met again)."""
    from nngauge.measures.expressivity._patterns import activation_patterns
    from nngauge.measures.expressivity._transitions import transitions
    from nngauge.nn import mlp
    from nngauge.trajectories import as_trajectory

    net = mlp(PATH_DIM, settings.path_width, settings.path_depth + 1, 1, activation=activation,
              init="gaussian", sigma_w=math.sqrt(SIGMA_W2), bias_std=BIAS_STD,
              dtype=torch.float64, generator=generator)
    hidden = [f"layers.{i}.act" for i in range(settings.path_depth)]
    x0, x1 = 2.0 * torch.randn(2, PATH_DIM, generator=generator, dtype=torch.float64)
    segment = transitions(net, x0, x1, layers=hidden)
    t = torch.as_tensor(segment.pieces.mean(1))[:, None]
    at_points = activation_patterns(net, x0 + t * (x1 - x0), layers=hidden).n_patterns
    angle = torch.arange(257, dtype=torch.float64)[:, None] * (2 * math.pi / 256)
    circle = transitions(net, as_trajectory(torch.cos(angle) * x0 + torch.sin(angle) * x1),
                         layers=hidden)
    key = (activation, PATH_DIM, settings.path_width, settings.path_depth, network)
    return [("segment", *key, segment.n_pieces, segment.n_patterns, at_points, None, None,
             None),
            ("circle", *key, circle.n_pieces, circle.n_patterns, None, None, None, None)]


def _chain_rows(m: int, neurons: int) -> list[tuple]:
    from nngauge.theory import max_activation_patterns

    rows = []
    for depth in range(1, neurons + 1):
        width = neurons // depth
        if neurons % depth or width < CHAIN_MIN_WIDTH:
            continue
        bound = max_activation_patterns(width, depth, m)
        rows.append(("chain", "relu", m, width, depth, None, None, None, None, None,
                     bound.bound, bound.asymptotic))
    return rows


def compute(scale: str, generator: torch.Generator) -> Computed:
    settings = SETTINGS[scale]
    rows = []
    for activation in ACTIVATIONS:
        for m in settings.input_dims:
            for width in settings.widths:
                for depth in settings.depths:
                    rows += [_random_row(activation, m, width, depth, i, generator)
                             for i in range(settings.nets)]
    rows += [_construction_row(k, n) for k in settings.construction_widths
             for n in settings.construction_depths]
    for activation in ACTIVATIONS:
        for i in range(settings.paths):
            rows += _path_rows(activation, settings, i, generator)
    for m in settings.input_dims:
        rows += _chain_rows(m, settings.chain_neurons)
    return Computed(columns=COLUMNS, rows=tuple(rows), comparison=tuple(_comparison(rows)))


def checks(rows) -> dict[str, tuple[int, int]]:
    """Each proven statement: (rows that satisfy it, rows it applies to)."""
    records = [dict(zip(COLUMNS, row)) for row in rows]

    def part(*names):
        return [r for r in records if r["part"] in names]

    counted = part("random", "construction")
    chains = {}
    for r in part("chain"):
        chains.setdefault(r["input_dim"], []).append((r["depth"], r["bound"]))
    rising = [all(b[1] > a[1] for a, b in zip(sorted(c), sorted(c)[1:])) for c in
              chains.values()]
    expected = [r for r in records if r["expected"] is not None]
    return {
        "below the bound": (sum(r["regions"] <= r["bound"] for r in counted), len(counted)),
        "one pattern per region": (sum(r["regions"] == r["patterns"] == r["patterns_at_points"]
                                       for r in counted), len(counted)),
        "exact counts": (sum(r["regions"] == r["expected"] for r in expected), len(expected)),
        "Corollary 1 on segments": (sum(r["regions"] == r["patterns"] == r["patterns_at_points"]
                                        for r in part("segment")), len(part("segment"))),
        "closed circles repeat a pattern": (sum(r["patterns"] < r["regions"]
                                                for r in part("circle")), len(part("circle"))),
        "the chain rises with depth": (sum(rising), len(rising)),
    }


def _comparison(rows) -> list[Comparison]:
    records = [dict(zip(COLUMNS, row)) for row in rows]
    out = [Comparison(f"proven: {name} (rows that satisfy it)", float(ok), None,
                      "n: the rows it applies to; only a counting bug could fail it",
                      key=check_key(name),
                      n=total)
           for name, (ok, total) in checks(rows).items()]
    counted = [r for r in records if r["part"] == "random"]
    out.append(Comparison("random networks: largest count / Theorem 1's bound",
                          max(r["regions"] / r["bound"] for r in counted), None,
                          "at most 1 for every weight setting", key="largest_fill"))
    for activation in ACTIVATIONS:
        for depth in sorted({r["depth"] for r in counted}):
            fills = [r["regions"] / r["bound"] for r in counted
                     if (r["activation"], r["depth"], r["input_dim"]) == (activation, depth, 2)]
            if fills:
                out.append(Comparison(
                    f"{activation}, m = 2, {depth} hidden layer(s): count / bound (mean)",
                    float(np.mean(fills)), None, "random networks; not judged: the theorem "
                    "bounds every weight setting" + DEPTH1_NOTE.get((activation, depth), ""),
                    key=f"fill_{activation}_m2_depth{depth}"))
    deepest = max((r for r in records if r["part"] == "construction"),
                  key=lambda r: (r["width"], r["depth"]))
    out.append(Comparison(
        f"construction, {deepest['depth']} layers of {deepest['width']}: pieces / bound",
        deepest["regions"] / deepest["bound"], None,
        f"{deepest['regions']} = {deepest['width']}^{deepest['depth']} of "
        f"({deepest['width']} + 1)^{deepest['depth']} = {deepest['bound']}: the bound's "
        "exponent mn is attained ('(Tight)', Montufar et al.'s construction)",
        key="construction_fill"))
    return out


def check_key(name: str) -> str:
    """The comparison key of a proven statement of :func:`checks`."""
    return "check_" + name.lower().replace(" ", "_")


def plot(computed: Computed, figure) -> None:
    records = computed.records()
    left, middle, right = figure.subplots(1, 3)
    for i, activation in enumerate(ACTIVATIONS):
        for m, marker in ((1, "o"), (2, "s")):
            chosen = [r for r in records if r["part"] == "random"
                      and (r["activation"], r["input_dim"]) == (activation, m)]
            left.scatter([r["bound"] for r in chosen], [r["regions"] for r in chosen], s=12,
                         marker=marker, color=f"C{i}", label=f"{activation}, m = {m}")
    built = [r for r in records if r["part"] == "construction"]
    left.scatter([r["bound"] for r in built], [r["regions"] for r in built], s=14, marker="^",
                 color="C2", label="construction (m = 1)")
    top = max(r["bound"] for r in records if r["part"] in ("random", "construction"))
    left.plot([1, top], [1, top], "k--", linewidth=0.8, label="count = bound")
    left.set_xscale("log")
    left.set_yscale("log")
    left.set_xlabel("Theorem 1's bound prod r(ck, m)")
    left.set_ylabel("exact count")
    left.set_title("Theorem 1: counts against the bound", fontsize=8)
    left.legend(fontsize=6)
    for i, part in enumerate(("segment", "circle")):
        chosen = [r for r in records if r["part"] == part]
        middle.scatter([r["regions"] for r in chosen],
                       [r["regions"] - r["patterns"] for r in chosen], s=14, color=f"C{i}",
                       label=f"{part}s")
    middle.set_xlabel("pieces of constant pattern")
    middle.set_ylabel("pieces - distinct patterns (patterns met again)")
    middle.set_title("Corollary 1: a line meets each pattern once", fontsize=8)
    middle.legend(fontsize=7)
    for m in sorted({r["input_dim"] for r in records if r["part"] == "chain"}):
        chosen = sorted((r for r in records if r["part"] == "chain" and r["input_dim"] == m),
                        key=lambda r: r["depth"])
        right.plot([r["depth"] for r in chosen], [math.log10(r["bound"]) for r in chosen],
                   "o-", markersize=3, label=f"m = {m}")
    right.set_xlabel("hidden layers n' (width N / n')")
    right.set_ylabel("log10 U(n', N / n', m)")
    right.set_title("the chain at a fixed number of neurons", fontsize=8)
    right.legend(fontsize=7)


def judge(computed: Computed) -> Verdict:
    """Theorem 1, its chain and Corollary 1, every statement proven, so a software check:
    every exact count at most the bound, one pattern per region (two independent counts),
    one-layer counts equal to their arrangements' and the construction's to k^n, patterns equal
    to pieces on segments and fewer on closed circles, the chain rising. All: reproduced;
    any failing: differs (a bug)."""
    results = checks(computed.rows)
    failed = [name for name, (ok, total) in results.items() if ok < total or total == 0]
    text = "; ".join(f"{name}: {ok} of {total}" for name, (ok, total) in results.items())
    if failed:
        return Verdict("differs", f"A proven statement fails here, so a counter or the bound "
                       f"has a bug ({', '.join(failed)}): {text}.", software_check=True)
    return Verdict("reproduced", "Every exact count lies within Theorem 1's bound (attained "
                   "by one ReLU layer, its exponent by the folding construction), Corollary 1 "
                   f"holds on every segment and the chain rises: {text}. Only a bug could fail "
                   "these; how far random networks are from the bound is printed, not judged.",
                   software_check=True)


REPRODUCTION = Reproduction(
    name="raghu-theorem1",
    paper=cite("expressivity"),
    target="Theorem 1 and Corollary 1",
    description="exact regions and activation patterns of small random ReLU / hard-tanh MLPs "
                "and of a folding construction against Theorem 1's bound; Corollary 1 on "
                "segments and circles; the bound's chain at equal neurons",
    differences={
        "small": (
            "random MLPs on R^1 and R^2 (widths 2-6, 1-3 hidden layers, 2 networks each, "
            "weights N(0, 2 / fan_in), biases N(0, 1)): regions counted exactly in a box "
            "holding every first-layer crossing (a lower bound on the count in R^m; "
            "regions in R^m itself are not enumerated); the paper counts none",
            "Theorem 1's O-forms read through its proof's explicit bound prod r(ck, m); "
            "'asymptotically tight' shown by a one-dimensional folding network (widths 2-4, "
            "1-4 layers: k^n pieces), not by Montufar et al.'s construction in R^m",
            "Corollary 1 on 4 random segments and 4 closed circles per activation (networks "
            "on R^8, 3 hidden layers of 8); the chain at N = 24 neurons",
            "a software check: every statement is proven; no measured number can fail the "
            "paper's claims",
        ),
        "paper": (
            "widths 2-8, 1-4 hidden layers, 5 networks each; the folding network at widths "
            "2-5, 1-5 layers; Corollary 1 on 20 segments and 20 circles per activation "
            "(networks on R^8, 4 hidden layers of 16); the chain at N = 48; a software check",
        ),
    },
    small_runtime="~8 s",
    compute=compute,
    plot=plot,
    claim=("A network with n hidden layers of width k on R^m has at most O(k^{mn}) (ReLU) or "
           "O((2k)^{mn}) (hard tanh) activation patterns for any weights, a bound asymptotically "
           "attained and larger for deeper networks at equal neurons; along a line every "
           "interval between transitions has its own pattern (Theorem 1, Corollary 1)."),
    judge=judge,
    n_seeds=3,
)
