"""Every judge of Raghu et al.'s reproductions ("On the Expressive Power of Deep Neural
Networks", ICML 2017) can fail (issue 36): each is fed planted records that bear its claim out
(the passing status) and records violating each part of its claim (the failing status). No
reproduction runs: the records are built by hand, so these tests are cheap.
"""

from __future__ import annotations

import math

import numpy as np

from nngauge.reproduce import Comparison, Computed


def planted_rows(columns, records) -> tuple:
    """Rows in ``columns`` order from dicts (absent columns None)."""
    return tuple(tuple(r.get(c) for c in columns) for r in records)


# --- raghu-dichotomies ------------------------------------------------------------------------

def _dichotomies(fig14=None, fig15_total_only=False, fig16_ratio=0.95, fig16_flips=None,
                 widths=(16, 64)):
    from nngauge.reproduce._raghu_dichotomies import COLUMNS

    fig14 = fig14 or (lambda width, depth: 10.0 * 1.8 ** depth * (1.3 if width > 16 else 1.0))
    records = [dict(panel="fig14", width=w, depth=d, n_dichotomies=fig14(w, d))
               for w in widths for d in (1, 3, 5, 7)]
    for depth in (2, 4, 6):
        for layer in range(depth):
            exponent = depth if fig15_total_only else depth - layer
            records.append(dict(panel="fig15", width=32, depth=depth, swept_layer=layer,
                                remaining_depth=depth - layer, n_dichotomies=5.0 * 1.5 ** exponent))
    flips = fig16_flips or (10, 30, 60, 120, 240)
    for depth, f in zip(range(1, 6), flips):
        walk = float(f + 1)
        records.append(dict(panel="fig16", width=32, depth=depth, label_flips=f,
                            n_dichotomies=fig16_ratio * walk * (1 + depth / 100),
                            random_walk_dichotomies=walk))
    return Computed(COLUMNS, planted_rows(COLUMNS, records))


def test_raghu_dichotomies_judge_fails_each_planted_violation():
    """Figures 14-16 borne out: reproduced. Dichotomies flat in depth, widening beating
    deepening, a count following the total rather than the remaining depth, or no 4x wider
    network to compare: differs. The random walk not followed (far below it, or not rising with
    the flips): qualitatively; close to it but 30% short: qualitatively ('fall short')."""
    from nngauge.reproduce._raghu_dichotomies import judge

    assert judge(_dichotomies()).status == "reproduced"
    assert judge(_dichotomies(fig14=lambda w, d: 100.0)).status == "differs"
    assert judge(_dichotomies(fig14=lambda w, d: 10.0 * 1.3 ** d * (100.0 if w > 16 else 1.0))
                 ).status == "differs"
    assert judge(_dichotomies(fig15_total_only=True)).status == "differs"
    assert judge(_dichotomies(widths=(16, 32))).status == "differs"
    assert judge(_dichotomies(fig16_ratio=0.3)).status == "qualitatively"
    falling = judge(_dichotomies(fig16_flips=(240, 120, 60, 30, 10)))
    assert falling.status == "qualitatively" and "do not follow" in falling.reason
    short = judge(_dichotomies(fig16_ratio=0.7))
    assert short.status == "qualitatively" and "fall short" in short.reason


# --- raghu-figure1 ----------------------------------------------------------------------------

def _figure1(regions=(8, 16, 24), arrangement=8, bent=(0, 2, 1), odd=None):
    """Four 2-4-4-4 networks; ``odd`` = (network, column, value) changes one network's pane."""
    from nngauge.reproduce._raghu_figure1 import COLUMNS

    records = []
    for seed in range(4):
        for pane, (count, units) in enumerate(zip(regions, bent), start=1):
            record = dict(width=4, hidden_layers=3, seed=seed, pane=pane, regions=count,
                          arrangement_regions=arrangement if pane == 1 else None,
                          bent_units=units)
            if odd is not None and odd[0] == seed and odd[1] == pane:
                record[odd[2]] = odd[3]
            records.append(record)
    return Computed(COLUMNS, planted_rows(COLUMNS, records))


def test_raghu_figure1_judge_fails_each_planted_violation():
    """Subdividing panes, pane 1 its arrangement of straight lines, deeper boundaries bent:
    reproduced; a layer adding no region, pane 1 off its arrangement in one network, a bent
    first-layer line, or deeper boundaries straight in most networks: differs."""
    from nngauge.reproduce._raghu_figure1 import judge

    assert judge(_figure1()).status == "reproduced"
    assert judge(_figure1(regions=(8, 16, 16))).status == "differs"
    assert judge(_figure1(odd=(0, 1, "regions", 7))).status == "differs"
    assert judge(_figure1(bent=(1, 2, 1))).status == "differs"
    assert judge(_figure1(bent=(0, 2, 0))).status == "differs"


# --- raghu-figure2 ----------------------------------------------------------------------------

def _figure2(factor=None, theorem=None, wide_bonus=1.0):
    """Transitions base(k) factor(sigma)^depth at widths 8, 16, 32 (``wide_bonus`` multiplies
    the widest), Theorem 4's per-layer ratio ``theorem(k)``."""
    from nngauge.reproduce._raghu_figure2 import COLUMNS, SETTINGS, _comparison, theorem4_rate

    settings = SETTINGS["small"]
    factor = factor or {1.0: 1.05, 4.0: 1.5, 16.0: 2.2}
    theorem = theorem or theorem4_rate
    total = {(k, s, d): k * (wide_bonus if k == 32 else 1.0) * factor[s] ** d
             for k in settings.widths for s in settings.sigma_w2
             for d in range(1, settings.hidden + 1)}
    rows = [("grid", k, s, d, t, t, 2) for (k, s, d), t in total.items()]
    rows += [("theorem4", k, 1e4, d, 1.0, 1.0, 2) for k in settings.theorem4_widths
             for d in range(1, settings.theorem4_hidden + 1)]
    ratios = {k: theorem(k) for k in settings.theorem4_widths}
    return Computed(COLUMNS, tuple(rows), tuple(_comparison(settings, total, ratios, (0, 1))),
                    extra={"hidden": settings.hidden, "labels": (0, 1)})


def test_raghu_figure2_judge_fails_each_planted_violation():
    """Figure 2 borne out and Theorem 4's ratio at sqrt(k): reproduced; at the proof's own exact
    rate k (2/pi) arctan(1/sqrt(k-1)) ~ (2/pi) sqrt(k): paper error (its conclusion sqrt(k)
    drops the 2/pi); at neither: differs. No growth with depth at the large scale, no rise with
    sigma_w^2, or widening beating deepening at equal neurons: differs."""
    from nngauge.reproduce._raghu_figure2 import judge

    assert judge(_figure2(theorem=math.sqrt)).status == "reproduced"
    error = judge(_figure2())
    assert error.status == "paper error" and "1 - (2/pi) arctan(sqrt(k))" in error.reason
    assert judge(_figure2(theorem=lambda k: 0.3 * math.sqrt(k))).status == "differs"
    assert judge(_figure2(factor={1.0: 1.05, 4.0: 1.5, 16.0: 1.02})).status == "differs"
    assert judge(_figure2(factor={1.0: 2.2, 4.0: 1.5, 16.0: 2.2})).status == "differs"
    assert judge(_figure2(wide_bonus=100.0)).status == "differs"


# --- raghu-figure3 ----------------------------------------------------------------------------

def _figure3(lengths=None, kept=None, turns=None):
    from nngauge.reproduce._raghu_figure3 import COLUMNS

    lengths = lengths or [10 * 1.5 ** d for d in range(7)]
    kept = kept or [1.0 - 0.08 * d for d in range(7)]
    turns = turns or [1.0 + 1.2 * d for d in range(7)]
    records = [dict(layer=d, point=i, t=i / 4, pc1=0.0, pc2=0.0, length=lengths[d],
                    pc_variance=kept[d], turning=turns[d]) for d in range(7) for i in range(4)]
    return Computed(COLUMNS, planted_rows(COLUMNS, records))


def test_raghu_figure3_judge_fails_each_planted_violation():
    """Longer and more convoluted after every layer: reproduced; a layer that shortens the
    image, or an image that grows longer without folding into more dimensions: differs."""
    from nngauge.reproduce._raghu_figure3 import judge

    assert judge(_figure3()).status == "reproduced"
    assert judge(_figure3(lengths=[10, 15, 20, 18, 25, 30, 40])).status == "differs"
    flat = judge(_figure3(kept=[1.0] * 7, turns=[1.0] * 7))
    assert flat.status == "differs" and "not more convoluted" in flat.reason


# --- raghu-figure6 ----------------------------------------------------------------------------

def _figure6(drop=None, clean=None):
    """Drops a * 0.6 / d (falling with the layer d) unless ``drop[architecture](a, d)``."""
    from nngauge.reproduce._raghu_figure6 import COLUMNS

    drop, clean = drop or {}, clean or {}
    records = []
    for architecture, layers in (("conv", 5), ("mlp", 6)):
        rule = drop.get(architecture, lambda a, d: min(0.85, a * 0.6 / d))
        accuracy = clean.get(architecture, 0.96)
        for network in range(2):
            for d in range(1, layers + 1):
                for a in (0.0, 0.05, 0.1, 0.25, 0.5, 1.0):
                    records.append(dict(architecture=architecture, network=network, layer=d,
                                        noise=a, accuracy_drop=rule(a, d),
                                        clean_accuracy=accuracy))
    return Computed(COLUMNS, planted_rows(COLUMNS, records))


def test_raghu_figure6_judge_fails_each_planted_violation():
    """The drop falling with the layer in both networks at every level where noise hurts:
    qualitatively (the paper's noise scale is undefined: never reproduced). The conv net's drop
    rising with the layer, the MLP's readout the least robust, a network not trained to high
    accuracy, or noise that never hurts: differs, naming the network."""
    from nngauge.reproduce._raghu_figure6 import judge

    assert judge(_figure6()).status == "qualitatively"
    rising = judge(_figure6(drop={"conv": lambda a, d: min(0.85, a * 0.1 * d)}))
    assert rising.status == "differs" and "fails in the conv network" in rising.reason
    readout = judge(_figure6(drop={"mlp": lambda a, d: a * (0.9 if d == 6 else 0.6 / d)}))
    assert readout.status == "differs" and "mlp network" in readout.reason
    assert judge(_figure6(clean={"mlp": 0.5})).status == "differs"
    assert judge(_figure6(drop={"conv": lambda a, d: 0.01 * a / d})).status == "differs"


# --- raghu-figure10 ---------------------------------------------------------------------------

def _figure10(ratio):
    """Six networks; the batch norm variant's layer j shortens the arc by ``ratio(network, j)``
    after training (about 1 at step 0), the unnormalized one keeps it."""
    from nngauge.reproduce._raghu_figure10 import COLUMNS, _comparison

    kinds = ("input", "conv", "batchnorm", "relu", "linear", "batchnorm", "relu", "output")
    rows = []
    for network in range(6):
        for variant in ("batchnorm", "none"):
            for step in (0, 220):
                length, previous, bn = 10.0, None, 0
                for position, kind in enumerate(kinds):
                    if kind == "batchnorm" and variant == "batchnorm":
                        bn += 1
                        length *= ratio(network, bn) if step else 1.0 + 0.01 * (network - 2.5)
                    elif kind in ("conv", "linear"):
                        length *= 1.5
                    rows.append((network, variant, step, position, str(position), kind, length,
                                 math.nan if previous is None else length / previous, 0.95,
                                 True))
                    previous = length
    return Computed(COLUMNS, tuple(rows), tuple(_comparison(rows)))


def test_raghu_figure10_judge_fails_each_planted_violation():
    """Every batch norm layer shortening the arc in every network after training: reproduced;
    shortening overall but one layer lengthening on average: qualitatively; lengthening, or
    shortening in only half the networks: differs."""
    from nngauge.reproduce._raghu_figure10 import judge

    assert judge(_figure10(lambda n, j: 0.8 - 0.01 * n)).status == "reproduced"
    assert judge(_figure10(lambda n, j: 0.4 if j == 1 else 1.2)).status == "qualitatively"
    assert judge(_figure10(lambda n, j: 1.1 + 0.01 * n)).status == "differs"
    assert judge(_figure10(lambda n, j: 0.8 if n % 2 else 1.25)).status == "differs"


# --- raghu-figure11 ---------------------------------------------------------------------------

def _figure11(none, batchnorm, trajectory):
    from nngauge.reproduce._raghu_figure11 import COLUMNS

    final = {"none": none, "batchnorm": batchnorm, "trajectory": trajectory}
    records = [dict(network=n, variant=v, epoch=e, step=22 * e, test_accuracy=final[v] if e
                    else 0.1) for n in range(2) for v in final for e in (0, 10)]
    return Computed(COLUMNS, planted_rows(COLUMNS, records))


def test_raghu_figure11_judge_fails_each_planted_violation():
    """Trajectory regularization level with batchnorm and both over 3 points above no
    normalization: reproduced; trajectory regularization well below batchnorm, or both only a
    point above none: differs."""
    from nngauge.reproduce._raghu_figure11 import judge

    assert judge(_figure11(0.90, 0.95, 0.95)).status == "reproduced"
    assert judge(_figure11(0.90, 0.96, 0.91)).status == "differs"
    not_better = judge(_figure11(0.95, 0.96, 0.96))
    assert not_better.status == "differs" and "neither is considerably better" in \
        not_better.reason


# --- raghu-theorem1 ---------------------------------------------------------------------------

def _theorem1(**change):
    """A passing record of every part; ``change`` = {part: {column: value}} alters that part's
    first row, ``drop`` = a part left out."""
    from nngauge.reproduce._raghu_theorem1 import COLUMNS

    drop = change.pop("drop", None)
    records = {
        "random": [dict(part="random", regions=5, patterns=5, patterns_at_points=5, bound=7),
                   dict(part="random", regions=7, patterns=7, patterns_at_points=7, expected=7,
                        bound=7)],
        "construction": [dict(part="construction", regions=9, patterns=9, patterns_at_points=9,
                              expected=9, bound=16)],
        "segment": [dict(part="segment", regions=6, patterns=6, patterns_at_points=6)],
        "circle": [dict(part="circle", regions=6, patterns=5)],
        "chain": [dict(part="chain", input_dim=1, depth=n, bound=b)
                  for n, b in ((1, 25), (2, 169), (3, 729))],
    }
    for part, columns in change.items():
        records[part][0].update(columns)
    chosen = [r for part, rows in records.items() if part != drop for r in rows]
    return Computed(COLUMNS, planted_rows(COLUMNS, chosen))


def test_raghu_theorem1_judge_fails_each_planted_violation():
    """Every proven statement holding: reproduced, a software check. A count above the bound,
    two counts of the patterns that disagree, a one-layer count off its arrangement, a pattern
    met twice on a segment, a closed circle without a repeated pattern, a chain that falls, or
    a part without rows: differs, still a software check (a bug, not evidence)."""
    from nngauge.reproduce._raghu_theorem1 import judge

    ok = judge(_theorem1())
    assert ok.status == "reproduced" and ok.software_check
    for violation in ({"random": {"regions": 8, "patterns": 8, "patterns_at_points": 8}},
                      {"random": {"patterns_at_points": 4}},
                      {"construction": {"expected": 8}},
                      {"segment": {"patterns": 5}},
                      {"circle": {"patterns": 6}},
                      {"chain": {"bound": 1000}},
                      {"drop": "circle"}):
        verdict = judge(_theorem1(**violation))
        assert verdict.status == "differs" and verdict.software_check, violation
        assert "has a bug" in verdict.reason


# --- raghu-trajectory -------------------------------------------------------------------------

GROWTH = {("hard_tanh", 32, 1.0): 0.9, ("hard_tanh", 32, 4.0): 1.2,
          ("hard_tanh", 32, 16.0): 1.6, ("hard_tanh", 32, 64.0): 2.0,
          ("hard_tanh", 8, 16.0): 1.4, ("hard_tanh", 64, 16.0): 1.7,
          ("relu", 32, 1.0): 0.7, ("relu", 32, 2.0): 1.0, ("relu", 32, 4.0): 1.4}


def _trajectory(stated=1.2, change=None, below_lower=False):
    """Lengths 10 g^d (``GROWTH``, updated by ``change``), the bounds at g / 2 and 2 g per
    layer, the theorem's stated rate at ``stated`` g."""
    from nngauge.reproduce._raghu_trajectory import COLUMNS

    growth = {**GROWTH, **(change or {})}
    records = []
    for (activation, width, sigma_w2), g in growth.items():
        for d in range(7):
            records.append(dict(activation=activation, width=width, sigma_w2=sigma_w2,
                                layer=d, length=10 * g ** d,
                                lower_bound=10 * (g / 2) ** d * (100.0 if below_lower and d == 6
                                                                  else 1.0),
                                upper_bound=10 * (2 * g) ** d, asymptotic=10 * (stated * g) ** d))
    return Computed(COLUMNS, planted_rows(COLUMNS, records))


def test_raghu_trajectory_judge_fails_each_planted_violation():
    """Within Theorem 3's bounds, exponential at the large scales, rising with sigma_w and the
    width: reproduced, or qualitatively when the growth falls below the rate the theorem states.
    A length below the lower bound, no exponential growth at a large scale, or growth not rising
    with the width: differs."""
    from nngauge.reproduce._raghu_trajectory import judge

    assert judge(_trajectory(stated=0.8)).status == "reproduced"
    below = judge(_trajectory())
    assert below.status == "qualitatively"
    assert "below the rate the theorem states in 9 of 9 settings" in below.reason
    assert judge(_trajectory(below_lower=True)).status == "differs"
    assert judge(_trajectory(change={("hard_tanh", 32, 64.0): 1.0})).status == "differs"
    assert judge(_trajectory(change={("hard_tanh", 64, 16.0): 1.5})).status == "differs"


# --- raghu-transitions ------------------------------------------------------------------------

def _transitions(slope=1.0, falling=False):
    from nngauge.reproduce._raghu_transitions import COLUMNS

    records = []
    for width in (16, 32):
        for sigma_w2 in (4.0, 16.0):
            for layer in range(1, 6):
                length = width * 1.5 ** layer
                count = 2 * length * (0.5 ** layer if falling and width == 32 else 1.0)
                records.append(dict(width=width, sigma_w2=sigma_w2, layer=layer,
                                    length_in=length, transitions=count))
    return Computed(COLUMNS, planted_rows(COLUMNS, records),
                    (Comparison("slope", slope, key="slope", statistic="slope"),))


def test_raghu_transitions_judge_fails_each_planted_violation():
    """Slope 1 and transitions rising with length in every setting: reproduced; a slope of 2,
    or transitions falling with length in some settings: differs."""
    from nngauge.reproduce._raghu_transitions import judge

    ok = judge(_transitions())
    assert ok.status == "reproduced" and "log-log slope" in ok.reason
    assert judge(_transitions(slope=2.0)).status == "differs"
    assert judge(_transitions(falling=True)).status == "differs"
    assert np.isfinite(_transitions().compared("slope").ours)
