"""Verdicts: each measured number against the papers' statements, with what to change.

Every verdict carries its status (``ok`` / ``warn`` / ``bad``, or ``n/a`` when the measure it
needs failed or does not apply), the number, the threshold used, the paper and section behind
it, and a concrete fix. Where a paper gives a numeric boundary it is used as printed (NLC ideal
range 1-3, output bias 1000); where it states a direction only (shrinkage, Jacobian growth,
kernel degeneration) the cut-offs below are nngauge's and are labelled as heuristics.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from typing import Any, Optional

from nngauge._citations import cite

NLC_IDEAL = (1.0, 3.0)
"""NLC paper section 4 (figure 2) and section 7: optimal test error needs 1 <~ NLC <~ 3."""
NLC_BAD = 10.0
"""Beyond this the NLC paper's figure 2 shows near-random test error on all three data sets."""
ISOTROPY_WARN = 0.1
"""Heuristic: below this input isotropy tr(C)^2 / (d tr(C^2)) (the variance in fewer than a
tenth of the input directions: smooth images, embeddings) the NLC can read far from its value
on whitened inputs (the NLC paper's Definition 1 gives 1 for linear maps only on isotropic
inputs)."""
HIGH_BIAS = 1000.0
"""NLC paper section 4 / B.2: output bias above 1000 marks architectures with high test error."""
RHO_WARN, RHO_BAD = 0.9, 0.99
"""Heuristic: rho_max above these is representation shrinkage (shrinkage paper section 3:
"rho_max close to one"; no numeric cut-off is printed)."""
JACOBIAN_WARN, JACOBIAN_BAD = 10.0, 1000.0
"""Heuristic: growth (or decay) of the input -> layer Jacobian norm by more than these factors
across the hidden layers is explosion (vanishing)."""
KERNEL_WARN, KERNEL_BAD = 0.9, 0.99
"""Heuristic: mean normalized dot product of the last hidden layer's kernel above these means
the kernel is degenerating towards rank one (Agarwal, Awasthi & Kale, ALT 2021, section 3)."""

STATUSES = ("ok", "warn", "bad", "n/a")


def _banded(value: float, warn: float, bad: float) -> str:
    return "ok" if value <= warn else "warn" if value <= bad else "bad"


def _growth_size(growth: float) -> float:
    """How far a growth factor is from 1 either way (explosion or vanishing)."""
    return max(growth, 1.0 / growth) if growth > 0 else math.inf


STATUS_RULES = {
    "nlc": lambda v: _banded(v, NLC_IDEAL[1], NLC_BAD),
    "output_bias": lambda v: _banded(v, HIGH_BIAS, HIGH_BIAS),
    "shrinkage": lambda v: _banded(v, RHO_WARN, RHO_BAD),
    "jacobian": lambda v: _banded(_growth_size(v), JACOBIAN_WARN, JACOBIAN_BAD),
    "kernel": lambda v: _banded(v, KERNEL_WARN, KERNEL_BAD),
}
"""Verdict key -> the status of its judged value: the thresholds above, applied once for the
verdicts and for the evidence table that counts them (:mod:`nngauge.report._evidence`). A NaN
value falls through every comparison: "bad", as the verdicts have always judged it."""


def verdict_status(key: str, value: float) -> str:
    """The status verdict ``key`` gives ``value``, "n/a" for a missing or NaN value (what the
    evidence table counts: a network whose value is undefined has no status)."""
    if not isinstance(value, (int, float)) or math.isnan(value):
        return "n/a"
    return STATUS_RULES[key](value)

NLC_PAPER = cite("nlc")
SHRINK_PAPER = cite("shrinkage")
COND_PAPER = cite("conditioning")


@dataclass(frozen=True)
class Verdict:
    """One judged quantity.

    Attributes:
        key: stable identifier (``"nlc"``, ``"output_bias"``, ...).
        title: what is judged.
        status: ``"ok"``, ``"warn"``, ``"bad"`` or ``"n/a"``.
        value: the number judged (None for n/a).
        threshold: the rule used, in words.
        source: paper and section.
        message: what the number means here.
        fix: what to change (empty when ok).
        meaning: what ``value`` is, with its unit (shown under the headline number).
        stderr: the standard error of ``value`` from its estimator (None where it has none).
        close_call: empty, or why the status could go either way (the value lies within two
            standard errors, or without one within 5%, of a threshold).
        evidence: how benchmark networks of this status fared, from the committed evidence
            table (:func:`nngauge.report._evidence.evidence_for`: per covering group the
            networks in this status and in the others and how many were good, the table's
            provenance; or ``covered`` false and why); None where the table counts nothing
            for this verdict.
    """

    key: str
    title: str
    status: str
    value: Optional[float]
    threshold: str
    source: str
    message: str
    fix: str = ""
    meaning: str = ""
    stderr: Optional[float] = None
    close_call: str = ""
    evidence: Optional[dict] = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def evidence_text(self) -> str:
        """The evidence in words ("" without any)."""
        from nngauge.report._evidence import evidence_sentence

        return evidence_sentence(self.key, self.evidence)


NEAR = 0.05
"""Without a standard error, a value within this relative distance of a threshold is called
a close call (its estimator's spread is unknown)."""


def close_call(value: Optional[float], stderr: Optional[float],
               thresholds: tuple[float, ...]) -> str:
    """Why a status could go either way: ``value`` within 2 ``stderr`` of a threshold (or,
    without a standard error, within :data:`NEAR` of it, relatively); empty otherwise."""
    if value is None or not math.isfinite(value):
        return ""
    for t in thresholds:
        if stderr is not None and math.isfinite(stderr) and stderr > 0:
            if abs(value - t) <= 2 * stderr:
                return (f"{value:.3g} +- {stderr:.2g} (standard error) is within two standard "
                        f"errors of the threshold {t:g}: the verdict could go either way; "
                        "measure more samples (without --quick, or a larger --n-batches / "
                        "--samples) to settle it.")
        elif abs(value - t) <= NEAR * abs(t):
            return (f"{value:.3g} is within {NEAR:.0%} of the threshold {t:g} and this "
                    "estimator gives no standard error: the verdict could go either way.")
    return ""


def judged(verdict: Verdict, meaning: str, stderr: Optional[float] = None,
           thresholds: tuple[float, ...] = ()) -> Verdict:
    """``verdict`` with what its value means, its standard error and its close call."""
    if stderr is not None and not math.isfinite(stderr):
        stderr = None
    return replace(verdict, meaning=meaning, stderr=stderr,
                   close_call=close_call(verdict.value, stderr, thresholds))


def not_available(key: str, title: str, source: str, reason: str) -> Verdict:
    """The verdict when its measure failed or does not apply."""
    return Verdict(key, title, "n/a", None, "-", source, reason)


def nlc_verdict(profile, within: Optional[int] = None) -> Verdict:
    """The output NLC against the ideal range 1-3 (NLC paper section 4 and section 7).

    ``within``: how many activation layers the input -> layer NLC profile stays in the ideal
    range for (section 5: the NLC compounds with depth), used to suggest a depth.
    """
    out = profile.layers[-1]
    return judged(_nlc_verdict(profile, out, within),
                  "NLC of the whole network (a ratio, no unit: 1 = linear; the paper's ideal "
                  "range 1-3)", out.stderr, (NLC_IDEAL[1], NLC_BAD))


def _nlc_verdict(profile, out, within: Optional[int]) -> Verdict:
    value = out.nlc
    source = f"{NLC_PAPER}, section 4 (figure 2), section 5 (compounding with depth), section 7"
    threshold = f"ideal {NLC_IDEAL[0]:g} <= NLC <= {NLC_IDEAL[1]:g}; bad above {NLC_BAD:g}"
    isotropy = getattr(profile, "input_isotropy", math.nan)
    caveat = "" if not isotropy < ISOTROPY_WARN else (
        f" The inputs are far from isotropic (isotropy {isotropy:.2g}): Definition 1 gives 1 "
        "for a linear network only on isotropic inputs, so this NLC reads lower than the "
        "paper's ranges assume; whiten the data (nngauge.data.preprocess, appendix D.2) to "
        "compare.")
    status = STATUS_RULES["nlc"](value)
    if status == "ok":
        note = " (below 1: close to linear)" if value < NLC_IDEAL[0] else ""
        return Verdict("nlc", "Nonlinearity coefficient", "ok", value, threshold, source,
                       f"NLC = {value:.3g} +- {out.stderr:.2g} is in the range the paper found "
                       f"optimal{note}." + caveat)
    fix = ("Lower the NLC: use fewer layers, a more linear activation (lower NLC_tau(1), e.g. "
           "tanh or SELU instead of ReLU under batchnorm), or add skip connections "
           "(NLC paper B.3).")
    if within is not None:
        fix += (f" The NLC profile stays within {NLC_IDEAL[1]:g} up to activation layer "
                f"{within}: about {within + 1} layers would keep the network in range.")
    return Verdict("nlc", "Nonlinearity coefficient", status, value, threshold, source,
                   f"NLC = {value:.3g}: above the ideal range, the network is too nonlinear "
                   "for good generalization at this initialization." + caveat, fix)


def layers_within(values: list[float], limit: float = NLC_IDEAL[1]) -> Optional[int]:
    """How many leading values stay <= limit (None when all do)."""
    for count, value in enumerate(values):
        if not value <= limit:
            return count
    return None


def bias_verdict(profile) -> Verdict:
    """Output bias Q_{j,x} f / Q_j S_x f against the paper's high-bias flag 1000 (B.2)."""
    return judged(_bias_verdict(profile),
                  "output bias: RMS size of the output over its spread across the data (a "
                  "ratio, no unit; 1 = no common offset)", None, (HIGH_BIAS,))


def _bias_verdict(profile) -> Verdict:
    value = profile.layers[-1].output_bias
    source = f"{NLC_PAPER}, section 4 (figure 2, 3A) and B.2"
    threshold = f"bad above {HIGH_BIAS:g} (the paper's high-bias flag)"
    if STATUS_RULES["output_bias"](value) == "ok":
        return Verdict("output_bias", "Output bias", "ok", value, threshold, source,
                       f"Output bias {value:.3g}: the output varies over the data much more "
                       "than the high-bias architectures.")
    return Verdict("output_bias", "Output bias", "bad", value, threshold, source,
                   f"Output bias {value:.3g} > {HIGH_BIAS:g}: the output is nearly the same "
                   "vector for every input; all such architectures in the paper had high test "
                   "error, whatever their NLC.",
                   "Remove or shrink the biases (bias_std), use a centered activation "
                   "(nngauge.activations.debias), add normalization, or use fewer layers.")


def shrinkage_verdict(corr, bound: Optional[Any], measured_sq: Optional[float],
                      norm: Optional[str] = None) -> Verdict:
    """rho_max (shrinkage paper Theorem 1) and, where it applies, the theorem's bound; a
    measured ||J||_op^2 below the printed bound is called out with the likely reasons.
    ``norm``: the nngauge MLP's normalization (None: none, or not an nngauge MLP)."""
    return judged(_shrinkage_verdict(corr, bound, measured_sq, norm),
                  "rho_max: the largest, over layers, of the smallest cosine similarity between "
                  "two inputs' representations (no unit; 1 = every pair aligned)", None,
                  (RHO_WARN, RHO_BAD))


def bound_violation(bound_sq: float, measured_sq: float, norm: Optional[str]) -> str:
    """Why a measured ||J||_op^2 can sit below Theorem 1's lower bound."""
    reasons = ["the theorem is about infinitely wide networks, this one has finite width",
               "the operator norm is a power-iteration estimate on a few samples (it can "
               "only under-estimate the largest singular value) and rho_max is the minimum "
               "over the sampled pairs only"]
    if norm != "layer":
        reasons.append("the theorem assumes LayerNorm before every activation, this network "
                       + ("uses batchnorm (batch statistics couple the inputs)"
                          if norm == "batch" else "has none"))
    return (f" The measured value {measured_sq:.3g} is below the bound {bound_sq:.3g}, which "
            "the theorem does not allow; likely reasons: " + "; ".join(reasons) + ".")


def _shrinkage_verdict(corr, bound, measured_sq, norm) -> Verdict:
    value, pooled = judged_rho_max(corr)
    source = f"{SHRINK_PAPER}, Theorem 1, section 3 (consequences 1-4), Theorem 2"
    threshold = f"heuristic: warn above {RHO_WARN:g}, bad above {RHO_BAD:g}"
    extra = ""
    if pooled:
        extra = (f" rho_max is taken before global pooling: the layers after it "
                 f"({', '.join(corr.after_pooling)}) read position-averaged features, whose "
                 "uncentered cosine is near 1 whatever the depth (with them rho_max = "
                 f"{corr.rho_max:.4g}); Theorem 1 speaks of stacks of affine maps, activations "
                 "and normalizations.")
    if bound is not None:
        extra += (f" Theorem 1 at this rho_max and depth: ||J||_op^2 >= "
                  f"{bound.jacobian_norm_sq:.3g}")
        extra += (f" (measured {measured_sq:.3g})." if measured_sq is not None else ".")
        if measured_sq is not None and measured_sq < bound.jacobian_norm_sq:
            extra += bound_violation(bound.jacobian_norm_sq, measured_sq, norm)
    status = STATUS_RULES["shrinkage"](value)
    if status == "ok":
        return Verdict("shrinkage", "Representation shrinkage (rho_max)", "ok", value, threshold,
                       source, f"rho_max = {value:.3g}: representations stay spread out."
                       + extra)
    return Verdict("shrinkage", "Representation shrinkage (rho_max)", status, value, threshold,
                   source, f"rho_max = {value:.3g}: at some layer every pair of inputs is "
                   "almost aligned (representation shrinkage: later layers do little "
                   "processing, gradients vanish)." + extra,
                   "Move towards critical initialization (see the theory verdict), add "
                   "normalization or skip connections (Theorem 2: small residual branches "
                   "escape the trade-off), or use fewer layers.")


def judged_rho_max(corr) -> tuple[float, bool]:
    """The rho_max the shrinkage verdict judges: before global pooling
    (:attr:`~nngauge.measures.CorrelationResult.rho_max_before_pooling`) where the network
    pools, else rho_max; and whether layers were left out."""
    before = getattr(corr, "rho_max_before_pooling", math.nan)
    pooled = bool(getattr(corr, "after_pooling", ())) and math.isfinite(before)
    return (before if pooled else corr.rho_max), pooled


def jacobian_verdict(jac, hidden: list[str]) -> Verdict:
    """Growth of the input -> layer Jacobian operator norm across the hidden layers."""
    source = f"{SHRINK_PAPER}, Theorem 1 consequence 1 (gradient explosion), Remark 1 (vanishing)"
    by_name = {row.name: row for row in jac.layers}
    rows = [by_name[name] for name in hidden if name in by_name]
    norms = [row.norm for row in rows]
    if len(norms) < 2 or norms[0] <= 0:
        return not_available("jacobian", "Jacobian growth across layers", source,
                             "fewer than two hidden layers were measured")
    growth = norms[-1] / norms[0] if norms[-1] > 0 else 0.0
    verdict = _jacobian_verdict(growth, len(norms) - 1, source)
    if getattr(jac, "batch_coupled", False):
        verdict = replace(verdict, message=verdict.message + (
            f" Measured on one batch of {jac.n_samples} samples whose batch statistics couple "
            "them (batchnorm in train mode): the value depends on the batch size and has no "
            "standard error; a quick report's smaller batch can move it across a threshold."))
    limits = (JACOBIAN_WARN, 1 / JACOBIAN_WARN, JACOBIAN_BAD, 1 / JACOBIAN_BAD)
    return judged(verdict, "factor by which the RMS-normalized ||J||_op grows from the first "
                  "to the last hidden layer (no unit; 1 = neither grows nor shrinks)",
                  ratio_stderr(rows[0].per_sample, rows[-1].per_sample), limits)


def ratio_stderr(first, last) -> Optional[float]:
    """Standard error of sqrt(mean(last^2) / mean(first^2)) over paired samples (the delta
    method); None with fewer than two samples each or unpaired samples."""
    import numpy as np

    a = np.asarray(first, dtype=np.float64) ** 2
    b = np.asarray(last, dtype=np.float64) ** 2
    if a.shape != b.shape or a.ndim != 1 or len(a) < 2 or a.mean() <= 0 or b.mean() <= 0:
        return None
    ratio = b.mean() / a.mean()
    se_ratio = float(np.std(b - ratio * a, ddof=1) / math.sqrt(len(a)) / a.mean())
    return se_ratio / (2 * math.sqrt(ratio))


def _jacobian_verdict(growth: float, steps: int, source: str) -> Verdict:
    threshold = (f"heuristic: warn beyond x{JACOBIAN_WARN:g} or /{JACOBIAN_WARN:g}, bad beyond "
                 f"x{JACOBIAN_BAD:g} or /{JACOBIAN_BAD:g} from the first to the last hidden layer")
    status = STATUS_RULES["jacobian"](growth)
    what = "explodes" if growth > 1 else "vanishes"
    message = (f"||J||_op grows by a factor {growth:.3g} over {steps} layers "
               f"({_per_layer(growth, steps)} per layer).")
    if status == "ok":
        return Verdict("jacobian", "Jacobian growth across layers", "ok", growth, threshold,
                       source, message)
    fix = ("Use fewer layers or skip connections; at critical initialization the Jacobian "
           "neither explodes nor vanishes (see the theory verdict).")
    if what == "explodes":
        fix += " Batchnorm-ReLU stacks explode by design: try layernorm or skip connections."
    return Verdict("jacobian", "Jacobian growth across layers", status, growth, threshold,
                   source, message + f" The input-output Jacobian {what} with depth.", fix)


def kernel_verdict(kernels, hidden: list[str]) -> Verdict:
    """Degeneration of the conjugate kernel with depth (Agarwal, Awasthi & Kale, ALT 2021,
    section 3)."""
    verdict = _kernel_verdict(kernels, hidden)
    rows = [row for row in kernels.layers if row.name in hidden]
    if not rows:
        return verdict
    return judged(verdict, "mean normalized dot product K_ij / sqrt(K_ii K_jj) over pairs "
                  "of inputs at the last hidden layer (a cosine, no unit; 1 = the kernel is "
                  "rank one)", pairs_stderr(rows[-1].kernel), (KERNEL_WARN, KERNEL_BAD))


def pairs_stderr(kernel) -> Optional[float]:
    """Standard error of the mean over pairs i != j of K_ij / sqrt(K_ii K_jj): the mean is a
    U-statistic of the samples, whose variance is about 4 Var(r_i) / n with r_i sample i's
    mean over its pairs (Hoeffding's decomposition)."""
    import numpy as np

    if kernel is None:
        return None
    k = np.asarray(kernel, dtype=np.float64)
    n = len(k)
    d = np.sqrt(np.clip(np.diag(k), 1e-300, None))
    if n < 3 or k.shape != (n, n):
        return None
    cos = k / d[:, None] / d[None, :]
    np.fill_diagonal(cos, 0.0)
    per_sample = cos.sum(1) / (n - 1)
    return float(2 * np.std(per_sample, ddof=1) / math.sqrt(n))


def _kernel_verdict(kernels, hidden: list[str]) -> Verdict:
    source = f"{COND_PAPER}, section 3 (Theorem 3.2, Corollary 3.3), C.3, Definition 3.1 (mu)"
    rows = [row for row in kernels.layers if row.name in hidden]
    if not rows:
        return not_available("kernel", "Kernel conditioning over depth", source,
                             "no hidden layer was measured")
    first, last = rows[0], rows[-1]
    value = last.mean_normalized_dot_product
    threshold = (f"heuristic: mean normalized dot product of the last hidden kernel: warn "
                 f"above {KERNEL_WARN:g}, bad above {KERNEL_BAD:g}")
    message = (f"Mean normalized dot product {first.mean_normalized_dot_product:.3g} -> "
               f"{value:.3g}; condition number {first.condition_number:.3g} -> "
               f"{last.condition_number:.3g} from {first.name} to {last.name}.")
    status = STATUS_RULES["kernel"](value)
    if status == "ok":
        return Verdict("kernel", "Kernel conditioning over depth", "ok", value, threshold, source,
                       message)
    return Verdict("kernel", "Kernel conditioning over depth", status, value, threshold, source,
                   message + " All inputs look alike to the deep layers: the kernel tends to "
                   "rank one and its condition number grows (slow, poorly conditioned training).",
                   "Use a normalized (centered, unit second moment) activation, e.g. NormReLU "
                   "(nngauge.nn.NormReLU) or nngauge.activations.normalize(...): with it the "
                   "condition number improves with depth (Corollary 3.3); or add normalization.")


def theory_verdict(info: dict) -> Verdict:
    """The phase of the correlation map of an nngauge MLP's activation and initialization."""
    return judged(_theory_verdict(info), "P'(1): slope of the infinite-width correlation map "
                  "at rho = 1 (no unit; 1 = critical, below 1 ordered, above 1 chaotic)")


def _theory_verdict(info: dict) -> Verdict:
    source = f"{SHRINK_PAPER}, section 2-3 (phases), appendix B (critical initialization)"
    title = "Theory phase (infinite width)"
    threshold = "ok when critical (P'(1) = 1) or depth <= the depth scale 1 / |ln P'(1)|"
    fix = info.get("fix", "")
    if info.get("error"):
        return Verdict("theory", title, "warn", None, threshold, source, info["error"], fix)
    chi, phase, depth = info["slope_at_one"], info["phase"], info["depth"]
    scale = math.inf if phase == "critical" or chi == 1 else 1.0 / abs(math.log(chi))
    message = (f"{info['activation']} at sigma_w = {info['sigma_w']:.4g}, sigma_b = "
               f"{info['sigma_b']:.4g} ({info['arch']} map): slope at one P'(1) = {chi:.4g}, "
               f"phase {phase}")
    if phase == "critical" or depth <= scale:
        return Verdict("theory", title, "ok", chi, threshold, source,
                       message + ("." if phase == "critical" else
                                  f"; depth {depth} is within the depth scale {scale:.3g}."))
    return Verdict("theory", title, "warn", chi, threshold, source,
                   message + f": depth {depth} exceeds the depth scale {scale:.3g} layers "
                   f"({'gradients explode' if phase == 'chaotic' else 'representations shrink'}).",
                   fix)


def _per_layer(growth: float, steps: int) -> str:
    if growth <= 0 or steps <= 0:
        return "n/a"
    return f"x{growth ** (1.0 / steps):.3g}"
