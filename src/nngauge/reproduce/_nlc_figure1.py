"""``nlc-figure1``: the NLC against the relative diameter of the linearly approximable regions
(NLC paper, figure 1; appendix E.1), in the randomly initialized state, no training.

Architectures are drawn by the paper's sampler (:func:`nngauge.nn.sample_architecture`,
appendix C) for waveform-noise (40 inputs, 3 classes; standardized, appendix D.2) and run in
float64. For each one:

- ``nlc``: :func:`nngauge.nlc` on the data (batches of 250, section G), with its output bias;
- ``region_diameter``: :func:`nngauge.linear_region_diameter` (E.1): the largest k on the grid
  1e-9 * 10^(j/10) such that, walking k input-space diameters from a batch X along Gaussian
  directions U, the change predicted by the Jacobian stays within 1/2 and 2 times the actual
  change along Gaussian output directions V; the median over batches x U x V.

Section 3 derives the relative diameter as about 1 / NLC; the figure shows "a remarkably close
match". Printed: Spearman's rho between the two with its p-value (over every architecture,
ties at the grid's ends included), and, over the architectures with a diameter strictly inside
the grid, the log-log slope (-1 for diameter ~ 1 / NLC) and the median of
log10(NLC * diameter) (0 for diameter = 1 / NLC exactly).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
import torch

from nngauge._citations import cite
from nngauge._random import seed_of
from nngauge.reproduce._base import Comparison, Computed, Reproduction, Verdict
from nngauge.reproduce._nlc_study import describe

COLUMNS = ("arch_index", "architecture", "depth", "activation", "norm", "skip", "nlc",
           "output_bias", "region_diameter", "below_grid", "above_grid")
D_IN, D_OUT = 40, 3  # waveform-noise


@dataclass(frozen=True)
class Settings:
    n_architectures: int
    width: int | None  # None: the sampler's width for about 1M parameters
    n_samples: int
    n_batches: int
    n_input_directions: int
    n_output_directions: int
    k_max: float


SETTINGS = {
    "small": Settings(n_architectures=14, width=24, n_samples=500, n_batches=1,
                      n_input_directions=1, n_output_directions=10, k_max=1e2),
    "paper": Settings(n_architectures=250, width=64, n_samples=3000, n_batches=10,
                      n_input_directions=10, n_output_directions=10, k_max=1e3),
}


def waveform_train(n_samples: int, generator: torch.Generator):
    """Standardized waveform-noise (the paper's only preprocessing for it, appendix D.2)."""
    from nngauge.data import standardize, waveform_noise

    (data,), _ = standardize(waveform_noise(n_samples, generator=seed_of(generator)))
    return data


def sample(generator: torch.Generator, width: int | None):
    """One architecture of the paper's sampler for waveform-noise, in float64."""
    from nngauge.nn import sample_architecture

    overrides = {} if width is None else {"width": width}
    model, description = sample_architecture(generator, D_IN, D_OUT, **overrides)
    return model.to(torch.float64), description


def row_prefix(index: int, description) -> tuple:
    config = {"depth": description.depth, "width": description.width,
              "activation": description.activation_function().label, "norm": description.norm,
              "skip": description.skip, "skip_start": description.skip_start,
              "bias_std": description.bias_std, "scale": description.scale}
    return (index, describe(config), description.depth, description.activation,
            description.norm or "none", description.skip is not None)


def compute(scale: str, generator: torch.Generator) -> Computed:
    from nngauge import linear_region_diameter, nlc

    settings = SETTINGS[scale]
    data = waveform_train(settings.n_samples, generator)
    rows = []
    for index in range(settings.n_architectures):
        model, description = sample(generator, settings.width)
        measured = nlc(model, data, batch_size=250, generator=generator)
        region = linear_region_diameter(
            model, data, batch_size=250, n_batches=settings.n_batches,
            n_input_directions=settings.n_input_directions,
            n_output_directions=settings.n_output_directions, k_max=settings.k_max,
            generator=generator)
        rows.append(row_prefix(index, description)
                    + (measured.nlc, measured.output_bias, region.median, region.below_grid,
                       region.above_grid))
    computed = Computed(columns=COLUMNS, rows=tuple(rows), extra={"k_max": settings.k_max})
    return replace(computed, comparison=comparison(computed, settings))


def inside(computed: Computed, k_max: float) -> tuple[np.ndarray, np.ndarray]:
    """NLC and diameter of the architectures whose median diameter lies strictly inside the
    grid (0 < diameter < k_max): those a log-log fit can use."""
    nlcs = np.asarray(computed.column("nlc"), dtype=float)
    diameters = np.asarray(computed.column("region_diameter"), dtype=float)
    keep = (diameters > 0) & (diameters < k_max) & np.isfinite(nlcs) & (nlcs > 0)
    return nlcs[keep], diameters[keep]


def comparison(computed: Computed, settings: Settings) -> tuple[Comparison, ...]:
    from nngauge.reproduce._regions_and_loss import spearman

    rho, p = spearman(computed.column("nlc"), computed.column("region_diameter"))
    nlcs, diameters = inside(computed, settings.k_max)
    slope = (float(np.polyfit(np.log10(nlcs), np.log10(diameters), 1)[0])
             if len(nlcs) >= 3 and np.ptp(np.log10(nlcs)) > 0 else math.nan)
    offset = float(np.median(np.log10(nlcs * diameters))) if len(nlcs) else math.nan
    n = len(computed.rows)
    return (
        Comparison("Spearman rho(NLC, relative region diameter)", rho, key="rho",
                   statistic="spearman", p_value=p, n=n,
                   note="the figure shows an inverse relation (rho < 0)"),
        Comparison("log-log slope of diameter vs NLC", slope, -1.0,
                   f"{len(nlcs)} architectures inside the grid; paper: section 3's "
                   "diameter ~ 1 / NLC (slope -1)", key="slope", statistic="slope"),
        Comparison("median log10(NLC * diameter)", offset, 0.0,
                   "paper: diameter ~ 1 / NLC (0 for an exact match)", key="offset"),
        Comparison("architectures with a median diameter below the grid (< 1e-9)",
                   float(sum(d == 0 for d in computed.column("region_diameter"))), None,
                   "the paper leaves NLC > 1e9 off its figure for the same reason",
                   key="below_grid"),
    )


def plot(computed: Computed, figure) -> None:
    ax = figure.subplots()
    k_max = computed.extra["k_max"]
    nlcs = np.asarray(computed.column("nlc"), dtype=float)
    diameters = np.asarray(computed.column("region_diameter"), dtype=float)
    norms = computed.column("norm")
    for norm, color in (("none", "black"), ("batch", "tab:blue"), ("layer", "tab:orange")):
        chosen = [i for i, n in enumerate(norms) if n == norm and diameters[i] > 0]
        if chosen:
            ax.scatter(nlcs[chosen], diameters[chosen], s=18, color=color,
                       label=f"norm: {norm}")
    positive = nlcs[nlcs > 0]
    if len(positive):
        x = np.geomspace(min(positive.min(), 1.0), positive.max() * 1.5, 50)
        ax.plot(x, 1.0 / x, "k:", label="diameter = 1 / NLC (section 3)")
    ax.axhline(k_max, color="grey", lw=0.5)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("NLC at initialization")
    ax.set_ylabel("relative diameter of linearly approximable region")
    rho = computed.compared("rho")
    ax.set_title(f"waveform-noise, sampled architectures: Spearman {rho.ours:.2f} "
                 f"({rho.printed_statistics})", fontsize=9)
    ax.legend(fontsize=8)


def judge(computed: Computed) -> Verdict:
    """Figure 1: the region diameter falls as the NLC grows (Spearman < 0, significant), with a
    log-log slope near section 3's -1."""
    rho = computed.compared("rho")
    slope = computed.compared("slope").ours
    offset = computed.compared("offset").ours
    summary = (f"Spearman rho {rho.ours:.2f} (p = {rho.p_value:.2g}); log-log slope {slope:.2f} "
               f"(section 3: -1); median log10(NLC x diameter) {offset:.2f}")
    if (rho.ours < -0.5 and rho.significant() and -1.5 <= slope <= -0.5
            and abs(offset) <= 0.5):
        return Verdict("reproduced", summary + ".")
    if rho.ours < 0:
        return Verdict("qualitatively", summary + ".")
    return Verdict("differs", summary + ": no inverse relation.")


REPRODUCTION = Reproduction(
    name="nlc-figure1",
    paper=cite("nlc"),
    target="Figure 1",
    description="NLC vs the relative diameter of linearly approximable regions (E.1) of "
                "sampled architectures at initialization on waveform-noise",
    differences={
        "small": (
            "14 sampled architectures of width 24 (the sampler's width gives ~1M parameters) "
            "instead of 250 per data set; waveform-noise only (no MNIST / CIFAR10 panels)",
            "500 standardized waveform points; the region diameter is the median over 1 batch "
            "of 250 x 1 input direction x 10 output directions instead of 10 x 10 x 10, on "
            "the grid up to k = 100 instead of 1000 (no architecture reaches it)",
            "the paper prints no correlation or slope: the figure's inverse relation and "
            "section 3's diameter ~ 1 / NLC are what ours is set beside",
        ),
        "paper": (
            "250 architectures of width 64 instead of ~1M parameters (the region walk of a "
            "1M-parameter batchnorm net costs ~1 min per architecture on 2 cores); "
            "waveform-noise only; 3000 standardized points",
            "the paper prints no correlation or slope: the figure's inverse relation and "
            "section 3's diameter ~ 1 / NLC are what ours is set beside",
        ),
    },
    small_runtime="~8 s",
    compute=compute,
    plot=plot,
    claim=("The NLC measures the inverse size of the input regions where the network is "
           "approximately linear: the relative diameter of linearly approximable regions falls "
           "as the NLC grows, about as 1 / NLC (figure 1, section 3)."),
    judge=judge,
    n_seeds=3,
)
