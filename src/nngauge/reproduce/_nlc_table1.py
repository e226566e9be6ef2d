"""``nlc-table1``: the NLC paper's Table 1, activation functions and their nonlinearity.

Rows (NLC paper, section 5 and appendix E.4), for the 8 activations of the study:

- A: NLC_tau(1), the NLC of the activation under unit Gaussian input (closed form / quadrature,
  :func:`nngauge.theory.nlc_activation`);
- B: the NLC of a 2-layer batchnorm network (one activation), median over initializations;
- C: NLC_tau(1)^48, what 48 activations compound to if each contributes NLC_tau(1);
- D: the NLC of a 49-layer batchnorm network (48 activations), median over initializations;
- E: the linear approximation error (:func:`nngauge.theory.linear_approximation_error`).

Also printed: section 5's claim that E is "around NLC_tau(1) - 1" for relu, selu, tanh,
sigmoid and gaussian, as the ratio E / (A - 1); the paper's own Table 1 contradicts it for
sigmoid and gaussian.

A, C and E are exact and equal the paper's printed values. B and D are measured with
:func:`nngauge.nlc` on :func:`nngauge.nn.mlp` networks (orthogonal init, batchnorm without
affine parameters, the network in train mode as at initialization in the paper).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

import torch

from nngauge._citations import cite
from nngauge._random import seed_of
from nngauge.reproduce._base import Comparison, Computed, Reproduction, Verdict

ACTIVATIONS = ("relu", "selu", "tanh", "sigmoid", "even_tanh", "gaussian", "square", "odd_square")
PAPER = {  # NLC paper, Table 1, rows A-E, in the order of ACTIVATIONS
    "A": (1.211, 1.035, 1.085, 1.017, 2.335, 1.577, 1.414, 1.155),
    "B": (1.22, 1.05, 1.09, 1.03, 2.34, 1.61, 1.48, 1.20),
    "C": (9793, 5.21, 50.19, 2.25, 4.76e17, 3.13e9, 1.67e7, 1009),
    "D": (7376, 7.06, 59.9, 3.06, 4.90e17, 3.74e9, 4.28e12, 1.38e11),
    "E": (0.222, 0.030, 0.075, 0.0024, 0.276, 0.155, 2.000, 0.178),
}
ROW_LABELS = {"A": "NLC_tau(1)", "B": "NLC depth 2", "C": "NLC_tau(1)^48",
              "D": "NLC depth 49", "E": "lin. app. err."}
CLAIM_ACTIVATIONS = ("relu", "selu", "tanh", "sigmoid", "gaussian")
"""Section 5: "for ReLU, SELU, tanh, sigmoid and Gaussian [...] this linear approximation error
is around NLC_tau(1) - 1"."""
CLAIM_FACTOR = 1.2
"""Section 5's "E around A - 1" holds where E / (A - 1) is within this factor of 1."""
SHALLOW, DEEP = 2, 49
D_OUT = 10  # CIFAR10's classes


@dataclass(frozen=True)
class Settings:
    d_in: int
    n_samples: int
    widths: dict  # depth -> width
    inits: dict  # depth -> number of random initializations (the median is reported)
    n_batches: int | None  # NLC Jacobian batches of 250 (None: one pass)


SETTINGS = {
    "small": Settings(d_in=100, n_samples=500, widths={SHALLOW: 100, DEEP: 100},
                      inits={SHALLOW: 5, DEEP: 3}, n_batches=None),
    # width from the paper's rule "about 1 million trainable parameters" at d_in = 3072
    "paper": Settings(d_in=3072, n_samples=10_000, widths={SHALLOW: 324, DEEP: 118},
                      inits={SHALLOW: 10, DEEP: 10}, n_batches=100),
}


def compute(scale: str, generator: torch.Generator) -> Computed:
    from nngauge.data import gaussian
    from nngauge.theory import linear_approximation_error, nlc_activation

    settings = SETTINGS[scale]
    data = gaussian(settings.n_samples, settings.d_in, generator=seed_of(generator)).inputs
    rows, comparison = [], []
    for i, act in enumerate(ACTIVATIONS):
        measured = {depth: median_nlc(act, depth, settings.widths[depth], data,
                                      inits=settings.inits[depth],
                                      n_batches=settings.n_batches, generator=generator)
                    for depth in (SHALLOW, DEEP)}
        nlc_1 = float(nlc_activation(act))
        ours = {"A": nlc_1, "B": measured[SHALLOW], "C": nlc_1 ** (DEEP - 1),
                "D": measured[DEEP], "E": float(linear_approximation_error(act))}
        for row, value in ours.items():
            paper = float(PAPER[row][i])
            rows.append((act, row, ROW_LABELS[row], value, paper))
            note = _note(row, settings)
            comparison.append(Comparison(f"{row} {ROW_LABELS[row]}: {act}", value, paper, note,
                                         key=f"{row.lower()}_{act}"))
    comparison.extend(linear_error_claim({(r[0], r[1]): r[3] for r in rows}))
    return Computed(columns=("activation", "row", "quantity", "ours", "paper"),
                    rows=tuple(rows), comparison=tuple(comparison))


def linear_error_claim(value: dict) -> list[Comparison]:
    """Section 5's claim that row E is "around NLC_tau(1) - 1" for the five activations it
    names, as the ratio E / (A - 1) (1 where the claim holds), ours beside the claim's 1, the
    note giving the ratio of the paper's own printed rows. It holds for relu, selu and tanh
    (within 15%) and fails for sigmoid (0.0024 vs 0.017, 7x) and gaussian (0.155 vs 0.577,
    3.7x) in the paper's own table as in the exact values."""
    out = []
    for act in CLAIM_ACTIVATIONS:
        i = ACTIVATIONS.index(act)
        ours = value[act, "E"] / (value[act, "A"] - 1.0)
        printed = PAPER["E"][i] / (PAPER["A"][i] - 1.0)
        verdict = "holds" if claim_holds(printed) else "fails"
        out.append(Comparison(
            f"section 5 claim E ~ A - 1, ratio E / (A - 1): {act}", ours, 1.0,
            f"the paper's own rows: E = {PAPER['E'][i]:g}, A - 1 = {PAPER['A'][i] - 1:.3g} "
            f"(ratio {printed:.2f}): the claim {verdict}", key=f"claim_{act}"))
    return out


def claim_holds(ratio: float) -> bool:
    """Whether a ratio E / (A - 1) bears out section 5's "E around A - 1" (within
    :data:`CLAIM_FACTOR` of 1)."""
    return abs(math.log(ratio)) < math.log(CLAIM_FACTOR)


def median_nlc(act: str, depth: int, width: int, data: torch.Tensor, *, inits: int,
               n_batches: int | None, generator: torch.Generator, **mlp_options) -> float:
    """Median NLC over ``inits`` random batchnorm MLPs (d_out 10) on ``data``, batches of 250
    (the NLC paper's protocol, appendix E.4 / section G)."""
    from nngauge import nlc
    from nngauge.nn import mlp

    values = [nlc(mlp(data.shape[1], width, depth, D_OUT, activation=act, norm="batch",
                      generator=generator, **mlp_options),
                  data, batch_size=250, n_batches=n_batches, generator=generator).nlc
              for _ in range(inits)]
    return statistics.median(values)


def _note(row: str, settings: Settings) -> str:
    if row not in ("B", "D"):
        return "exact"
    depth = SHALLOW if row == "B" else DEEP
    inits = settings.inits[depth]
    return (f"Gaussian d={settings.d_in}, width {settings.widths[depth]}, "
            + ("1 init" if inits == 1 else f"median of {inits} inits"))


def plot(computed: Computed, figure) -> None:
    acts, rows = computed.column("activation"), computed.column("row")
    ours, paper = computed.column("ours"), computed.column("paper")
    value = {(a, r): (o, p) for a, r, o, p in zip(acts, rows, ours, paper)}
    x = range(len(ACTIVATIONS))
    left, right = figure.subplots(1, 2)
    for row, marker in (("A", "o"), ("B", "s"), ("E", "^")):
        left.plot(x, [value[a, row][0] for a in ACTIVATIONS], marker, label=f"{row} ours")
        left.plot(x, [value[a, row][1] for a in ACTIVATIONS], "k+", markersize=10)
    left.set_yscale("log")
    left.set_title("rows A, B, E (black +: paper)", fontsize=9)
    for row, marker in (("C", "o"), ("D", "s")):
        right.plot(x, [math.log10(value[a, row][0]) for a in ACTIVATIONS], marker,
                   label=f"{row} ours")
        right.plot(x, [math.log10(value[a, row][1]) for a in ACTIVATIONS], "k+", markersize=10)
    right.set_ylabel("log10")
    right.set_title("rows C, D at depth 49 (black +: paper)", fontsize=9)
    for ax in (left, right):
        ax.set_xticks(list(x), ACTIVATIONS, rotation=45, fontsize=8)
        ax.legend(fontsize=8)


def judge(computed: Computed) -> Verdict:
    """Rows A and E equal the printed table (they are properties of the activation), B ~ A,
    D ~ C for the 6 stable activations; section 5's "E ~ A - 1" judged on the paper's own
    rows A and E."""
    value = {(r["activation"], r["row"]): r for r in computed.records()}
    printed = all(abs(value[a, row]["ours"] - value[a, row]["paper"])
                  <= 0.011 * max(abs(value[a, row]["paper"]), 0.1)
                  for a in ACTIVATIONS for row in "AE")
    shallow = all(abs(value[a, "B"]["ours"] / value[a, "A"]["ours"] - 1) < 0.05
                  for a in ACTIVATIONS)
    stable = [a for a in ACTIVATIONS if a not in ("square", "odd_square")]
    compounds = all(0.5 < value[a, "D"]["ours"] / value[a, "C"]["ours"] < 2 for a in stable)
    fails = [a for a in CLAIM_ACTIVATIONS
             if not claim_holds(value[a, "E"]["paper"] / (value[a, "A"]["paper"] - 1.0))]
    summary = (f"rows A and E {'equal' if printed else 'differ from'} the printed table; the "
               f"2-layer NLC {'matches' if shallow else 'misses'} NLC_tau(1); the 49-layer NLC "
               f"{'follows' if compounds else 'does not follow'} A^48 for the 6 stable "
               "activations")
    if printed and shallow and compounds and fails:
        return Verdict("paper error", summary + "; but section 5's claim that E is about "
                       f"NLC_tau(1) - 1 fails for {' and '.join(fails)}, in the paper's own "
                       "table as in the exact values.")
    if printed and shallow and compounds:
        return Verdict("reproduced", summary + ".")
    return Verdict("qualitatively" if printed else "differs", summary + ".")


REPRODUCTION = Reproduction(
    name="nlc-table1",
    paper=cite("nlc"),
    target="Table 1",
    description="8 activations: NLC_tau(1) (A), NLC at depth 2 (B) and 49 (D) of batchnorm "
                "nets, NLC_tau(1)^48 (C), linear approximation error (E)",
    differences={
        "small": (
            "rows A, C, E are exact (closed form / quadrature): the paper's numbers (its row C "
            "raises the rounded row A to the 48th power, hence e.g. 9793 vs 9861 for relu), "
            "except row E of sigmoid: exactly 0.00235 (brute force agrees), printed 0.0024",
            "rows B, D: Gaussian inputs (d=100, 500 samples) instead of CIFAR10",
            "rows B, D: width 100 instead of ~1M parameters; median of 5 (depth 2) and 3 "
            "(depth 49) inits instead of 10",
            "rows B, D: the Jacobian term from one pass of 2 batches of 250, not 100 batches",
            "square and odd_square at depth 49 are unstable (paper section 5): row D varies "
            "by orders of magnitude between initializations",
            "the paper is wrong where section 5 says row E is around NLC_tau(1) - 1 for relu, "
            "selu, tanh, sigmoid and gaussian: it holds for the first three (E / (A - 1) = "
            "1.05, 0.86, 0.88) but fails for sigmoid (E 0.0024 vs A - 1 = 0.017, ratio 0.14) "
            "and gaussian (0.155 vs 0.577, ratio 0.27), in its own Table 1 as in the exact "
            "values (printed as the 'section 5 claim' rows)",
        ),
        "paper": (
            "rows A, C, E are exact (closed form / quadrature); sigmoid's row E is 0.00235, "
            "the paper prints 0.0024",
            "rows B, D: Gaussian inputs of CIFAR10's dimension (3072, 10000 samples) instead "
            "of CIFAR10 itself (not bundled)",
            "widths 324 (depth 2) and 118 (depth 49) from the paper's ~1M-parameter rule at "
            "d_in=3072; median of 10 inits; 100 batches of 250 as in section G",
            "the paper is wrong where section 5 says row E is around NLC_tau(1) - 1 for relu, "
            "selu, tanh, sigmoid and gaussian: it holds for the first three (E / (A - 1) = "
            "1.05, 0.86, 0.88) but fails for sigmoid (E 0.0024 vs A - 1 = 0.017, ratio 0.14) "
            "and gaussian (0.155 vs 0.577, ratio 0.27), in its own Table 1 as in the exact "
            "values (printed as the 'section 5 claim' rows)",
        ),
    },
    small_runtime="~7 s",
    compute=compute,
    plot=plot,
    claim=("NLC_tau(1) (row A) and the linear approximation error (row E) are properties of the "
           "activation; a 2-layer batchnorm network's NLC equals NLC_tau(1) and, for stable "
           "activations, the NLC compounds with depth as NLC_tau(1)^48 (Table 1, section 5); "
           "section 5 adds that E is about NLC_tau(1) - 1."),
    judge=judge,
    n_seeds=3,
)
