"""``nlc-definition1``: the NLC's definition checked where its value is known (Philipp &
Carbonell, "The Nonlinearity Coefficient - Predicting Generalization in Deep Neural Networks",
arXiv:1806.00179; Definition 1 in section 3, section 5 and appendix G).

Definition 1: NLC(f, D) = Q_x ||J(x)||_F Q_i(S_x x(i)) / (sqrt(d_out) Q_j(S_x f(x, j))),
equivalently sqrt(Tr(E_x J J^T) Tr(C_x) / (d_in Tr(C_f))). Three of the paper's statements fix
its value, and :func:`nngauge.nlc` (the estimator of section G) is held to each:

- Definition 1's sanity check (section 3): for an affine map f(x) = A x + b the NLC is
  sqrt(Tr(A A^T) Tr(C_x) / (d_in Tr(A C_x A^T))), which "equals 1, for example, if C_x is a
  multiple of the identity or A is orthogonal". Measured (``method="exact"``) on a deep linear
  network with biases (an affine map whose A is read off the network's outputs on the standard
  basis, no autograd) on anisotropic Gaussian data (covariance spectrum 1 / i, rotated), against
  the closed form; on the same network with data whose sample covariance is exactly a multiple
  of the identity (whitened), against 1; on an orthogonal linear network (square, orthogonal
  weights) on the anisotropic data, against 1.
- Section 5: if x ~ N(0, sigma^2 I) and f applies tau to each component, NLC(f, D) =
  NLC_tau(sigma) (:func:`nngauge.theory.nlc_activation`). Measured on one elementwise layer of
  each of Table 1's eight activations at sigma = 1 and of tanh at sigma = 0.5 and 2 (which also
  checks the reading of sigma as a standard deviation), on a Gaussian sample with section G's
  Gaussian probes: a Monte Carlo estimate of the closed form, held to
  :data:`SAMPLING_TOLERANCE`.
- Appendix G's batchnorm-aware estimator: for a network with batchnorm, Q_x ||J(x)||_F is
  replaced by Q_X ||J(X)||_F / sqrt(b), J(X) the (b d_out) x (b d_in) Jacobian of a jointly
  propagated batch, and Q_j(S_x f(x, j)) by the standard deviation of every output observed in
  one pass over the batches; without batchnorm J(X) is block diagonal and the value equals
  Q_x ||J(x)||_F. Brute force here: full Jacobians of every batch by ``torch.func.jacrev`` (the
  batchnorm layers made stateless by ``torch.func.replace_all_batch_norm_modules_`` on a copy)
  and the statistics computed directly. Checked: nngauge's exact method against it (a
  batchnorm-ReLU MLP in train mode); the paper's Gaussian-probe estimate (G: Q_u ||u A||_2 =
  ||A||_F) against it as a z-score, E_u ||u J||^2 = ||J||_F^2 with the probe's exact variance
  2 ||J J^T||_F^2 from the brute-force Jacobians; without batchnorm, J(X)'s off-diagonal
  blocks are exactly 0 and the batch value equals the per-sample Q_x ||J(x)||_F (per-sample
  Jacobians by ``torch.func.vmap``); with batchnorm the off-diagonal blocks carry a positive
  share of ||J(X)||_F^2 (why section G needs J(X)).

Every part is a software check: each compares nngauge with a closed form or a brute-force
value of the same definition, and only a bug could fail it (the Monte Carlo rows to a statistical
tolerance of about five standard deviations, the probe row to four). The verdict says so.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from nngauge._citations import cite
from nngauge.reproduce._base import Comparison, Computed, Reproduction, Verdict
from nngauge.reproduce._nlc_table1 import ACTIVATIONS

COLUMNS = ("part", "key", "case", "ours", "expected", "criterion", "tolerance")
"""One row per check: nngauge's value (``ours``), the closed form or brute-force value, and how
they must agree: ``relative`` |ours - expected| <= tolerance |expected|, ``absolute``
|ours - expected| <= tolerance, ``above`` ours > expected."""
EXACT_TOLERANCE = 1e-9
"""Relative agreement of float64 computations of the same quantity (closed form, brute force)."""
SAMPLING_TOLERANCE = 0.025
"""Relative agreement of the NLC of an activation layer on a Gaussian sample with NLC_tau(sigma):
at the small scale's 200,000 scalars the worst of Table 1's activations (square: the variance
of s^2 is estimated from E s^4, whose estimate has variance E s^8 - (E s^4)^2) has a sampling
standard deviation near 0.5%, the probes add under 0.2%; 2.5% is about five."""
Z_LIMIT = 4.0
"""|z| of the probe estimate of Q_X ||J(X)||_F^2 against its brute-force value and exact probe
variance: beyond 4 standard deviations (a chance of about 6e-5) only a bug explains it."""
ACTIVATION_PROBES = 8
"""Gaussian probes per batch of 250 for the activation layers (section G's estimator; the
exact method would back-propagate n d_out rows)."""
SIGMAS = {"tanh": (0.5, 2.0)}
"""Input standard deviations other than 1 at which an activation layer is checked."""


@dataclass(frozen=True)
class Settings:
    d_in: int  # linear networks and the batchnorm network
    width: int
    depth: int
    d_out: int
    n_linear: int  # samples for the linear checks
    activation_d: int  # width of the activation layer
    activation_n: int  # samples for it
    n_batches: int  # batches of the batchnorm check
    batch_size: int
    n_probes: int  # Gaussian probes per batch


SETTINGS = {
    "small": Settings(d_in=16, width=32, depth=4, d_out=4, n_linear=300, activation_d=50,
                      activation_n=4000, n_batches=4, batch_size=50, n_probes=8),
    "paper": Settings(d_in=32, width=100, depth=10, d_out=10, n_linear=2000, activation_d=100,
                      activation_n=20_000, n_batches=10, batch_size=250, n_probes=8),
}


def anisotropic(n: int, d: int, generator: torch.Generator) -> torch.Tensor:
    """n Gaussian samples in R^d, covariance Q diag(1, 1/2, ..., 1/d) Q^T (Q a random rotation)
    and mean 0.5: far from isotropic (Definition 1's NLC of a linear map is then not 1)."""
    q, _ = torch.linalg.qr(torch.randn(d, d, generator=generator, dtype=torch.float64))
    scales = torch.arange(1, d + 1, dtype=torch.float64).rsqrt()
    return torch.randn(n, d, generator=generator, dtype=torch.float64) * scales @ q.T + 0.5


def whitened(x: torch.Tensor, std: float = 2.0) -> torch.Tensor:
    """x affinely transformed so that its sample covariance is exactly std^2 I (to rounding)."""
    centred = x - x.mean(0)
    cov = centred.T @ centred / len(x)
    values, vectors = torch.linalg.eigh(cov)
    return centred @ (vectors * values.rsqrt()) @ vectors.T * std + x.mean(0)


def affine_closed_form(net: nn.Module, x: torch.Tensor) -> float:
    """Definition 1 for an affine map: sqrt(Tr(A A^T) Tr(C_x) / (d_in Tr(A C_x A^T))), A read
    off the outputs on the standard basis (f(e_i) - f(0)), C_x the sample covariance of x."""
    d = x.shape[1]
    with torch.no_grad():
        a = (net(torch.eye(d, dtype=x.dtype)) - net(torch.zeros(1, d, dtype=x.dtype))).T
    cov = torch.cov(x.T, correction=0)
    return math.sqrt(float(torch.trace(a @ a.T) * torch.trace(cov)
                           / (d * torch.trace(a @ cov @ a.T))))


def _linear_rows(settings: Settings, generator: torch.Generator) -> list[tuple]:
    from nngauge import nlc
    from nngauge.nn import mlp

    s = settings
    x = anisotropic(s.n_linear, s.d_in, generator)
    affine = mlp(s.d_in, s.width, s.depth, s.d_out, activation="identity", init="gaussian",
                 bias_std=0.5, generator=generator, dtype=torch.float64)
    orthogonal = mlp(s.d_in, s.d_in, s.depth, s.d_in, activation="identity",
                     init="orthogonal", generator=generator, dtype=torch.float64)

    def measured(net, data):
        return nlc(net, data, batch_size=len(data), method="exact").nlc

    part = "definition 1"
    return [
        (part, "affine_anisotropic", f"affine map ({s.depth} linear layers with biases), "
         "anisotropic data: the closed form", measured(affine, x),
         affine_closed_form(affine, x), "relative", EXACT_TOLERANCE),
        (part, "affine_isotropic", "the same map, data of covariance 4 I: 1",
         measured(affine, whitened(x)), 1.0, "relative", EXACT_TOLERANCE),
        (part, "orthogonal_anisotropic", f"orthogonal linear network ({s.depth} square "
         "layers), anisotropic data: 1", measured(orthogonal, x), 1.0, "relative",
         EXACT_TOLERANCE),
    ]


def _activation_rows(settings: Settings, generator: torch.Generator) -> list[tuple]:
    from nngauge import nlc
    from nngauge.activations import get
    from nngauge.theory import nlc_activation

    s = settings
    z = torch.randn(s.activation_n, s.activation_d, generator=generator, dtype=torch.float64)
    rows = []
    for act in ACTIVATIONS:
        for sigma in (1.0, *SIGMAS.get(act, ())):
            layer = get(act).module()
            ours = nlc(layer, sigma * z, n_probes=ACTIVATION_PROBES, generator=generator).nlc
            rows.append(("section 5", f"activation_{act}_{sigma:g}",
                         f"one {act} layer on N(0, {sigma:g}^2 I): NLC_tau({sigma:g})", ours,
                         float(nlc_activation(act, sigma)), "relative", SAMPLING_TOLERANCE))
    return rows


@dataclass(frozen=True)
class BruteForce:
    """Section G's quantities from full batch Jacobians J(X) (b d_out x b d_in per batch)."""

    nlc: float
    jacobian_sq: float  # Q_X ||J(X)||_F^2 / b: the mean over batches of ||J(X)||_F^2 / b
    probe_variance: float  # of one probe's ||u J(X)||^2 / b, averaged over the batches
    off_diagonal_share: float  # of ||J(X)||_F^2 in the blocks coupling two samples
    per_sample_jacobian_sq: float  # Q_x ||J(x)||_F^2 from per-sample Jacobians (nan: coupled)


def brute_force(net: nn.Module, batches: list[torch.Tensor], *, per_sample: bool) -> BruteForce:
    """Section G by brute force on fixed batches: J(X) by ``torch.func.jacrev`` on a stateless
    copy (batchnorm uses the batch statistics and keeps no running ones), Q_i S_x x(i) and
    Q_j S f(X, j, beta) from every input and output of the pass (population variances).
    ``per_sample``: also Q_x ||J(x)||_F^2 from ``vmap`` of per-sample Jacobians (only for a
    network that does not couple a batch)."""
    from torch.func import jacrev, replace_all_batch_norm_modules_, vmap

    model = copy.deepcopy(net)
    replace_all_batch_norm_modules_(model)
    squares, variances, off, outputs, singles = [], [], 0.0, [], []
    for x in batches:
        b = len(x)
        jac = jacrev(model, chunk_size=256)(x).detach()  # (b, d_out, b, d_in)
        matrix = jac.reshape(b * jac.shape[1], -1)
        squares.append(float(matrix.pow(2).sum()) / b)
        gram = matrix @ matrix.T
        variances.append(2.0 * float(gram.pow(2).sum()) / b ** 2)
        coupling = 1.0 - torch.eye(b, dtype=jac.dtype)[:, None, :, None]  # blocks i != j
        off += float((jac.pow(2) * coupling).sum())
        with torch.no_grad():
            outputs.append(model(x))
        if per_sample:
            single = vmap(jacrev(lambda v: model(v[None])[0]))(x).detach()
            singles.append(float(single.pow(2).sum()) / b)
    x_all, f_all = torch.cat(batches), torch.cat(outputs)
    input_std = math.sqrt(float(x_all.var(0, unbiased=False).mean()))
    output_std = math.sqrt(float(f_all.var(0, unbiased=False).mean()))
    jacobian_sq = float(np.mean(squares))
    return BruteForce(
        nlc=math.sqrt(jacobian_sq) * input_std / (math.sqrt(f_all.shape[1]) * output_std),
        jacobian_sq=jacobian_sq, probe_variance=float(np.mean(variances)),
        off_diagonal_share=off / (jacobian_sq * len(batches) * len(batches[0])),
        per_sample_jacobian_sq=float(np.mean(singles)) if per_sample else math.nan)


def _batchnorm_rows(settings: Settings, generator: torch.Generator) -> tuple[list, dict]:
    from torch.utils.data import DataLoader, TensorDataset

    from nngauge import nlc
    from nngauge.nn import mlp

    s = settings
    x = anisotropic(s.n_batches * s.batch_size, s.d_in, generator)
    batches = list(x.split(s.batch_size))
    fixed = DataLoader(TensorDataset(x), batch_size=s.batch_size, shuffle=False)  # in order
    nets = {norm: mlp(s.d_in, s.width, s.depth, s.d_out, activation="relu", norm=norm,
                      init="gaussian", sigma_w=math.sqrt(2.0), generator=generator,
                      dtype=torch.float64) for norm in ("batch", None)}
    coupled = brute_force(nets["batch"], batches, per_sample=False)
    plain = brute_force(nets[None], batches, per_sample=True)
    exact = nlc(nets["batch"], fixed, method="exact")
    probe = nlc(nets["batch"], fixed, n_probes=s.n_probes, generator=generator)
    # the estimate is the mean over batches of the k probes' mean ||u J(X)||^2 / b:
    # variance (mean over batches of 2 ||J J^T||_F^2 / b^2) / (k n_batches)
    z = (probe.jacobian_rms ** 2 - coupled.jacobian_sq) / math.sqrt(
        coupled.probe_variance / (s.n_probes * s.n_batches))
    plain_exact = nlc(nets[None], fixed, method="exact").nlc
    part = "section G"
    rows = [
        (part, "batchnorm_exact", "batchnorm-ReLU MLP, nngauge's exact method: the brute-force "
         "section-G NLC", exact.nlc, coupled.nlc, "relative", EXACT_TOLERANCE),
        (part, "batchnorm_probe_z", f"the same, Gaussian probes ({s.n_probes} per batch): z of "
         "Q_X ||J(X)||^2 / b against brute force", z, 0.0, "absolute", Z_LIMIT),
        (part, "batchnorm_off_diagonal", "the same: share of ||J(X)||_F^2 coupling two "
         "samples", coupled.off_diagonal_share, 0.0, "above", 0.0),
        (part, "plain_exact", "the MLP without batchnorm, exact method: brute force",
         plain_exact, plain.nlc, "relative", EXACT_TOLERANCE),
        (part, "plain_off_diagonal", "the MLP without batchnorm: share of ||J(X)||_F^2 "
         "coupling two samples (block diagonal)", plain.off_diagonal_share, 0.0, "absolute",
         0.0),
        (part, "plain_per_sample", "the MLP without batchnorm: Q_X ||J(X)||^2 / b against the "
         "per-sample Q_x ||J(x)||^2", plain.jacobian_sq, plain.per_sample_jacobian_sq,
         "relative", EXACT_TOLERANCE),
    ]
    return rows, {"probe_nlc": probe.nlc, "probe_stderr": probe.stderr,
                  "brute_force_nlc": coupled.nlc}


def compute(scale: str, generator: torch.Generator) -> Computed:
    settings = SETTINGS[scale]
    rows = _linear_rows(settings, generator) + _activation_rows(settings, generator)
    bn_rows, extra = _batchnorm_rows(settings, generator)
    rows = tuple(rows + bn_rows)
    comparison = tuple(Comparison(case, ours, None, _note(part, expected, criterion, tolerance),
                                  key=key)
                       for part, key, case, ours, expected, criterion, tolerance in rows)
    return Computed(columns=COLUMNS, rows=rows, comparison=comparison, extra=extra)


SOURCES = {"definition 1": "closed form", "section 5": "NLC_tau(sigma)",
           "section G": "brute force"}
"""What a part's expected values are (the paper states formulas, not numbers)."""


def _note(part: str, expected: float, criterion: str, tolerance: float) -> str:
    if criterion == "relative":
        return f"{SOURCES[part]} {expected:.10g}; must agree to a relative {tolerance:g}"
    if criterion == "absolute":
        return f"must be within {tolerance:g} of {expected:g}"
    return f"must exceed {expected:g}"


def holds(row: dict) -> bool:
    """Whether a row's value meets its criterion (NaN never does)."""
    ours, expected, tolerance = row["ours"], row["expected"], row["tolerance"]
    if row["criterion"] == "relative":
        return abs(ours - expected) <= tolerance * abs(expected)
    if row["criterion"] == "absolute":
        return abs(ours - expected) <= tolerance
    return ours > expected


def judge(computed: Computed) -> Verdict:
    """Every row meets its criterion: reproduced, else differs; a software check either way
    (closed forms and brute force of the same definition)."""
    rows = computed.records()
    failed = [r for r in rows if not holds(r)]
    worst = {part: max((abs(r["ours"] / r["expected"] - 1) for r in rows
                        if r["part"] == part and r["criterion"] == "relative"), default=math.nan)
             for part in dict.fromkeys(r["part"] for r in rows)}
    z = [r["ours"] for r in rows if r["key"] == "batchnorm_probe_z"]
    summary = ("Largest relative difference: " + ", ".join(
        f"{part} {value:.2g}" for part, value in worst.items())
        + ("" if not z else f"; probe z = {z[0]:.2f}") + f"; {len(rows) - len(failed)} of "
        f"{len(rows)} checks hold. Software checks, all of them: Definition 1's affine closed "
        "form and section 5's NLC_tau(sigma) are exact values (the activation rows are Monte "
        f"Carlo estimates held to {SAMPLING_TOLERANCE:.1%}), section G's estimator is compared "
        "with brute-force Jacobians of its own definition (the probe row as a z-score)")
    if not failed:
        return Verdict("reproduced", summary + ".", software_check=True)
    return Verdict("differs", summary + "; failing: " + ", ".join(
        f"{r['key']} ({r['ours']:.6g} against {r['expected']:.6g})" for r in failed)
        + " (a closed form or a brute-force value: a bug in nngauge).", software_check=True)


def plot(computed: Computed, figure) -> None:
    rows = computed.records()
    ax = figure.subplots()
    values, colours = [], []
    for r in rows:
        if r["criterion"] == "relative":
            values.append(abs(r["ours"] / r["expected"] - 1) / r["tolerance"])
        elif r["criterion"] == "absolute":
            values.append(abs(r["ours"] - r["expected"]) / r["tolerance"]
                          if r["tolerance"] > 0 else float(r["ours"] != r["expected"]))
        else:
            values.append(0.0 if r["ours"] > r["expected"] else 2.0)
        colours.append("tab:green" if holds(r) else "tab:red")
    floor = 1e-6
    ax.barh(range(len(rows)), [max(v, floor) for v in values], color=colours)
    ax.axvline(1.0, color="black", lw=0.8, ls=":")
    ax.set_xscale("log")
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([r["key"] for r in rows], fontsize=6)
    ax.invert_yaxis()
    ax.set_xlabel("difference / tolerance (dotted: the tolerance; bars at 1e-6: at most that)",
                  fontsize=8)


REPRODUCTION = Reproduction(
    name="nlc-definition1",
    paper=cite("nlc"),
    target="Definition 1, section 5, appendix G",
    description="the NLC where its value is known: affine and orthogonal linear networks "
                "(Definition 1's closed form and 1), single activation layers (NLC_tau(sigma)), "
                "and section G's batchnorm estimator against brute-force batch Jacobians",
    differences={
        "small": (
            "not a table of the paper: the values its text states, checked on nngauge's "
            "estimator (Definition 1's sanity check, section 5's 'easy to check' identity, "
            "appendix G's batchnorm generalization)",
            "linear networks of width 32, 4 layers, on 300 anisotropic Gaussian samples in "
            "R^16; activation layers of width 50 on 4000 samples; the batchnorm check on 4 "
            "batches of 50 (the paper's batches: 250) with 8 probes per batch",
        ),
        "paper": (
            "not a table of the paper (as above); width 100, 10 layers, 2000 samples; "
            "activation layers on 20,000 samples of width 100; the batchnorm check on 10 "
            "batches of 250, the paper's batch size",
        ),
    },
    small_runtime="~30 s",
    compute=compute,
    plot=plot,
    claim=("An affine map's NLC is sqrt(Tr(A A^T) Tr(C_x) / (d_in Tr(A C_x A^T))), 1 when C_x "
           "is a multiple of the identity or A is orthogonal (Definition 1); one activation "
           "layer on N(0, sigma^2 I) has NLC_tau(sigma) (section 5); with batchnorm the NLC is "
           "defined by the batch Jacobian J(X) and the outputs of a pass, which reduces to "
           "Definition 1 without batchnorm (J(X) block diagonal) and which Gaussian probes "
           "estimate without bias (appendix G)."),
    judge=judge,
    n_seeds=3,
)
