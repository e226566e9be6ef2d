"""``conditioning-figures3-5``: NormReLU against batch norm, layer norm and Fixup (figures 3-5).

Agarwal, Awasthi & Kale, "A Deep Conditioning Treatment of Neural Networks" (ALT 2021),
section 7 and appendix I.3, on CIFAR-10:

- figure 3: deep fully connected networks with batch normalization, layer normalization or
  NormReLU (no normalization), each at its cross-validated rate: "using NormReLU results in
  significantly faster optimization", "the model trained via NormReLU also generalizes
  significantly better than using either batch or layer normalization", and NormReLU needed
  small learning rates to stabilize training where batch or layer normalization "are less
  sensitive and can be applied in conjunction with large learning rates";
- figure 4: ResNets with batch normalization and skips against ResNets with NormReLU instead of
  batch normalization: "competitive ..., achieving similar test accuracies and slightly
  outperforming batch normalization at depth 110";
- figure 5: the 110-layer Fixup ResNet (ReLU, Fixup initialization) against the same network
  with NormReLU and a standard Gaussian initialization: "a similar accuracy".

Here a digits proxy (:mod:`nngauge.reproduce._conditioning_training`): fully connected MLPs of
two depths for figure 3, residual MLPs (skips around pairs of layers) of two depths for figures
4 and 5 (the figure-5 NormReLU network is figure 4's deeper one), each trained at the three
rates of the grid and kept at the one of lowest validation error. Claims, one comparison each:

- ``faster`` (fig. 3): at every depth NormReLU's mean training error over the epochs is below
  batch and layer normalization's by more than :data:`FASTER_MARGIN`;
- ``generalizes`` (fig. 3): at every depth NormReLU's test error is below both by more than
  two standard errors of the difference (binomial, on the test digits);
- ``small rates`` (fig. 3): at the grid's largest rate NormReLU fails (training error at the
  end at least :data:`FAILED`) at some depth where batch and layer normalization both train
  (below :data:`TRAINED`);
- ``competitive`` (fig. 4): at every depth the test errors of NormReLU and batch-normalized
  ResNets differ by at most two standard errors; ``outperforms`` (fig. 4): at the deeper depth
  NormReLU's test error is the lower;
- ``fixup`` (fig. 5): NormReLU's and Fixup's test errors differ by at most two standard errors.

The verdict: "reproduced" when every claim holds, else "differs" naming the failing ones. Each
network is one run (one draw of initialization and minibatch order): run several seeds.
"""

from __future__ import annotations


import torch

from nngauge._citations import cite
from nngauge.reproduce._base import Comparison, Computed, Reproduction, Verdict, digit_splits
from nngauge.reproduce._conditioning_training import (
    RUN_COLUMNS,
    SMALL,
    TrainSettings,
    claim_comparisons,
    claim_verdict,
    epochs_of,
    plot_curves,
    runs,
    selected,
    similar_margin,
    train_grid,
)

SETTINGS = {
    "small": SMALL,
    "paper": TrainSettings(width=512, epochs=40, plain_depths=(10, 20, 40),
                           residual_depths=(21, 41)),
}
FASTER_MARGIN = 0.02
"""Figure 3's "significantly faster": NormReLU's mean training error over the epochs below the
others' by more than this (about the binomial standard error of one epoch's training error on
the 1,078 training digits at 5% error, 0.007, tripled)."""
FAILED = 0.5
"""A run at the largest rate "fails" when its training error in the last epoch is at least
this (or it diverged)."""
TRAINED = 0.2
"""... and "trains" when it is below this."""


def compute(scale: str, generator: torch.Generator) -> Computed:
    settings = SETTINGS[scale]
    splits = digit_splits(generator)
    rows = []
    for depth in settings.plain_depths:
        for name in ("batchnorm", "layernorm", "normrelu"):
            rows += train_grid("3", name, depth, False, settings, splits, generator)
    for depth in settings.residual_depths:
        for name in ("batchnorm", "normrelu"):
            rows += train_grid("4", name, depth, True, settings, splits, generator)
    rows += train_grid("5", "fixup", max(settings.residual_depths), True, settings, splits,
                       generator)
    computed = Computed(columns=RUN_COLUMNS, rows=tuple(rows),
                        extra={"n_test": len(splits[2].labels)})
    return Computed(columns=RUN_COLUMNS, rows=tuple(rows), comparison=_comparisons(computed),
                    extra={"n_test": len(splits[2].labels)})


def claims(computed: Computed) -> dict[str, dict]:
    """Each claim: whether it holds, the value printed and the text, read from the rows."""
    records = computed.records()
    epochs = epochs_of(records)
    n_test = int(computed.compared("n_test").ours) if computed.comparison else \
        int(computed.extra["n_test"])
    fig3, fig4, fig5 = (selected(records, f, epochs) for f in ("3", "4", "5"))
    plain = sorted({d for _, d in fig3})
    residual = sorted({d for _, d in fig4})
    out = {}
    gaps = {d: min(fig3["batchnorm", d].mean_train_error, fig3["layernorm", d].mean_train_error)
            - fig3["normrelu", d].mean_train_error for d in plain}
    out["faster"] = dict(holds=all(g > FASTER_MARGIN for g in gaps.values()),
                         value=min(gaps.values()),
                         text="mean training error, min(BN, LN) - NormReLU: " + ", ".join(
                             f"{g:.3g} at depth {d}" for d, g in gaps.items()))
    margins = {}
    for d in plain:
        nr = fig3["normrelu", d].test_error
        margins[d] = min(fig3[o, d].test_error - nr - similar_margin(fig3[o, d].test_error, nr,
                                                                      n_test)
                         for o in ("batchnorm", "layernorm"))
    out["generalizes"] = dict(
        holds=all(m > 0 for m in margins.values()), value=min(margins.values()),
        text="test error " + "; ".join(
            f"depth {d}: NormReLU {fig3['normrelu', d].test_error:.3f}, BN "
            f"{fig3['batchnorm', d].test_error:.3f}, LN {fig3['layernorm', d].test_error:.3f}"
            for d in plain))
    every = runs(records, "3", epochs)
    top = max(lr for _, _, lr in every)
    last = {(n, d): every[n, d, top].train_curve[-1] for n in ("batchnorm", "layernorm",
                                                                "normrelu") for d in plain}
    small = [d for d in plain if last["normrelu", d] >= FAILED
             and last["batchnorm", d] < TRAINED and last["layernorm", d] < TRAINED]
    out["small rates"] = dict(
        holds=bool(small), value=float(len(small)),
        text=f"last-epoch training error at rate {top:g}: " + "; ".join(
            f"depth {d}: NormReLU {last['normrelu', d]:.2f}, BN {last['batchnorm', d]:.2f}, "
            f"LN {last['layernorm', d]:.2f}" for d in plain)
        + "; selected rates: " + ", ".join(f"{n} {fig3[n, d].lr:g}" for n, d in sorted(fig3)))
    apart = {}
    for d in residual:
        nr, bn = fig4["normrelu", d].test_error, fig4["batchnorm", d].test_error
        apart[d] = abs(nr - bn) - similar_margin(nr, bn, n_test)
    out["competitive"] = dict(
        holds=all(a <= 0 for a in apart.values()), value=max(apart.values()),
        text="ResNet test error " + "; ".join(
            f"depth {d}: NormReLU {fig4['normrelu', d].test_error:.3f}, BN "
            f"{fig4['batchnorm', d].test_error:.3f}" for d in residual))
    deep = max(residual)
    lead = fig4["batchnorm", deep].test_error - fig4["normrelu", deep].test_error
    out["outperforms"] = dict(holds=lead > 0, value=lead,
                              text=f"depth {deep}: BN - NormReLU test error {lead:.3g}")
    nr, fixup = fig4["normrelu", deep].test_error, fig5["fixup", deep].test_error
    out["fixup"] = dict(holds=abs(nr - fixup) <= similar_margin(nr, fixup, n_test),
                        value=fixup - nr,
                        text=f"depth {deep}: Fixup {fixup:.3f}, NormReLU {nr:.3f} "
                        f"(margin {similar_margin(nr, fixup, n_test):.3f})")
    return out


def _comparisons(computed: Computed) -> tuple[Comparison, ...]:
    found = claims(computed)
    labels = {
        "faster": ("fig. 3: NormReLU optimizes faster than BN and LN",
                   f"> {FASTER_MARGIN:g} at every depth"),
        "generalizes": ("fig. 3: NormReLU's test error below BN's and LN's beyond 2 s.e.",
                        "> 0 at every depth (worst depth shown)"),
        "small rates": ("fig. 3: depths where NormReLU fails at the largest rate and BN, LN "
                        "train", ">= 1"),
        "competitive": ("fig. 4: |NormReLU - BN| ResNet test error minus 2 s.e.",
                        "<= 0 at every depth (worst shown)"),
        "outperforms": ("fig. 4: BN - NormReLU test error, deeper ResNet", "> 0"),
        "fixup": ("fig. 5: Fixup - NormReLU test error", "within 2 s.e."),
    }
    out = list(claim_comparisons(found, labels))
    out.append(Comparison("test digits", computed.extra["n_test"], None,
                          "the standard errors' count", key="n_test"))
    return tuple(out)


def plot(computed: Computed, figure) -> None:
    records = computed.records()
    plain = sorted({r["depth"] for r in records if r["figure"] == "3"})
    residual = sorted({r["depth"] for r in records if r["figure"] == "4"})
    panels = [("3", d, f"fig. 3: fully connected, {d} layers") for d in plain]
    panels += [("4", d, f"fig. 4: residual, {d} layers") for d in residual]
    panels += [("5", max(residual), "fig. 5: Fixup (vs fig. 4's NormReLU)")]
    plot_curves(computed, figure, panels)


def judge(computed: Computed) -> Verdict:
    """Figures 3-5 claim by claim (module docstring), as the tests assert: "reproduced" when
    every claim holds, else "differs" naming the ones that fail."""
    return claim_verdict(claims(computed), "3-5",
                         "Every claim of figures 3-5 holds on the digits proxy")


REPRODUCTION = Reproduction(
    name="conditioning-figures3-5",
    paper=cite("conditioning"),
    target="Figures 3, 4 and 5",
    description="NormReLU against batch and layer normalization (fully connected), batch "
                "normalization (residual) and Fixup, trained on digits at cross-validated rates",
    differences={
        "small": (
            "scikit-learn's digits (1,078 train / 360 validation / 359 test, standardized) "
            "instead of CIFAR-10; residual MLPs (skips around pairs of layers) instead of "
            "convolutional ResNets; no data augmentation (figure 5 had it)",
            "fully connected depths 10 and 20, residual depths 11 and 21 (the paper: ResNets "
            "of depth 56 and 110; its fully connected depths were lost from the text), width "
            "128, 8 epochs of SGD (momentum 0.9, batches of 64), the rate chosen from "
            "0.003 / 0.01 / 0.03 on validation digits (the paper: 300 epochs, rates by "
            "cross-validation, 5 runs each)",
            "Fixup on a residual MLP: each branch's last layer and the output layer start at "
            "zero, each branch's first layer is scaled by L^(-1/2); no scalar multipliers or "
            "biases",
            "one run per network: the verdict depends on the seed",
        ),
        "paper": (
            "digits and residual MLPs as at the small scale; fully connected depths 10-40, "
            "residual 21 and 41, width 512, 40 epochs",
        ),
    },
    small_runtime="~30 s",
    compute=compute,
    plot=plot,
    claim=("NormReLU trains deep fully connected networks significantly faster than batch or "
           "layer normalization and generalizes significantly better, though it needs small "
           "learning rates (figure 3); in ResNets it is competitive with batch normalization, "
           "slightly better at the larger depth (figure 4), and matches Fixup (figure 5)."),
    judge=judge,
    n_seeds=3,
)
