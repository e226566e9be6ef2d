"""``neyshabur-capacities``: the norm-based capacities of section 2.2 and the PAC-Bayes bounds
of equations 5-6 (Neyshabur, Bhojanapalli, McAllester & Srebro, "Exploring Generalization in
Deep Learning", NIPS 2017, sections 2.2 and 2.4).

Section 2.2 bounds the capacity of a d-layer ReLU network (W_i of shape h_i x h_{i-1}, h_0 the
input size) by a norm over the squared margin gamma, the epsilon-margin of eq. 2 (the lowest
gamma such that ceil(eps m) training points have a margin f(x)[y] - max_{y' != y} f(x)[y']
below it):

    l2:       prod_i 4 ||W_i||_F^2 / gamma^2
    l1-path:  (sum_paths |prod_i 2 W_i[j_i, j_{i-1}]|)^2 / gamma^2
    l2-path:  sum_paths prod_i 4 h_i W_i[j_i, j_{i-1}]^2 / gamma^2
    spectral: prod_i h_i ||W_i||_2^2 / gamma^2

and states: the l_p path norm "is the minimum over all node-wise rescalings of
prod_i ||W_i||_{p,inf} and is equal to the l_p norm of [the vector of] products of weights
along [the] paths"; the l2-path and spectral bounds "can be derived directly" from the l1-path
and l2 ones (footnote 2); dividing the weights scales the output but not the 0/1 loss, so norms
are compared over the margin; "a stricter stopping criteria ... would yield higher norm"
under cross-entropy; and results are "almost unaffected by reasonable choices of epsilon (e.g.
between 0.001 and 0.1)". Section 2.4: eq. 5, E[L(w + nu)] <= L(w) + expected sharpness +
sqrt((KL + ln(2m / delta)) / m), and eq. 6, its instance for "P a zero mean, unit variance
Gaussian" and nu ~ N(0, sigma^2), with KL = ||w||^2 / (2 sigma^2) and ln(1 / delta).

What we compute, in three parts:

- software checks (only a bug in nngauge can fail them): on tiny bias-free networks,
  :func:`nngauge.capacity` and :func:`nngauge.margin` against the printed formulas by explicit
  enumeration of every path; the capacities' invariance to scaling all weights (the 0/1 loss
  unchanged) and the path capacities' invariance to node rescaling; :func:`nngauge.path_norm`
  against the balancing rescaling (every hidden unit's incoming l_p norm 1), which attains the
  minimum of prod_i ||W_i||_{p,inf} over node rescalings, and against random rescalings (never
  below); footnote 2's inequalities (l1-path capacity <= h_0 x l2-path capacity by
  Cauchy-Schwarz over the h_0 prod_i h_i paths; l2 capacity <= 4^d x spectral capacity as
  ||W||_F^2 <= h_i ||W||_2^2); :func:`nngauge.pac_bayes`'s KL, sum_i w_i^2 / (2 sigma_i^2),
  against the exact Gaussian KL to a prior of the same variances, and its eq. 5 / eq. 6 bounds
  against the formulas;
- the paper's exact statements that exact values contradict ("paper error"): for a network with
  more than one output, the minimum over node rescalings of prod_i ||W_i||_{p,inf} is the
  largest path norm of one output, below the l_p norm over all paths (equal for one output);
  the KL of eq. 6 is that to a prior N(0, sigma^2 I), not to the unit-variance prior the text
  names (KL(N(w, sigma^2 I) || N(0, I)) = ||w||^2 / 2 + n (sigma^2 - 1 - ln sigma^2) / 2);
  eq. 6's ln(1 / delta) is not eq. 5's ln(2m / delta);
- evidence, on ReLU MLPs trained on digits (:func:`fit_mlp`, appendix A's SGD): (a) stricter
  stopping: each of ``n_networks`` networks is trained until its training cross-entropy is
  below each of ``loss_targets`` in turn; the raw norms (prod ||W_i||_F^2, the squared path
  norms, prod ||W_i||_2^2) must grow from the loosest to the strictest target in every network
  (a sign test over networks at :data:`SIGNIFICANCE`), while the capacities over the margin
  move by less than :data:`DRIFT_SHARE` of the raw norm's change (log10) for every network and
  measure; (b) epsilon: for ``n_pairs`` pairs of networks fitted to true and to random labels,
  the sign of each capacity's gap (random minus true) at every eps in :data:`PERCENTILES` is
  the sign at the paper's 5%.

Verdict: a failed software check is "differs" (a software check: a bug in nngauge); else a
failed evidence claim is "differs"; else a contradicted exact statement is "paper error"; else
"reproduced".

The CSV has one row per check: ``claim`` (a key of :data:`CLAIMS`, or a record the plot reads:
``stopping_fit``, ``stopping_norms``, ``random_fit``), ``subject`` (a tiny network's widths, or
a trained network), ``measure``, ``setting`` (what varies: a loss target, eps in percent, a
sigma, or a description), ``ours``, ``reference`` and ``relation`` (how ``ours`` must stand to
``reference``: :func:`holds`). ``stopping_norms`` rows hold the log10 raw norm (ours) and the
log10 capacity over the margin (reference) of a network at a loss target (setting).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np
import torch

from nngauge._citations import cite
from nngauge.reproduce._base import SIGNIFICANCE, Comparison, Computed, Reproduction, Verdict
from nngauge.reproduce._neyshabur_random_labels import (
    digit_pool,
    first_digits,
    fit_mlp,
    train_to_fit,
)

MEASURES = ("l2", "l1_path", "l2_path", "spectral")
COLUMNS = ("claim", "subject", "measure", "setting", "ours", "reference", "relation")
RELATIONS = ("equal", "at_most", "at_least", "above", "below", "same_sign", "record")
"""How a row's ``ours`` must stand to its ``reference`` (:func:`holds`); "record" rows are data
for the plot, never judged."""
REL_TOL = 1e-9
"""Relative tolerance of the float64 software checks (equalities and inequalities)."""
DRIFT_SHARE = 0.5
"""Stricter stopping leaves a capacity over the margin "stable" when its log10 change is below
this share of the log10 change of the raw norm (fixed before the runs it judges)."""
PERCENTILES = (0.1, 1.0, 5.0, 10.0)
"""eps in percent: the paper's range 0.001-0.1 and its 5% (appendix A)."""
PAPER_PERCENTILE = 5.0
CLAIMS = {  # key: (part, what is checked)
    "margin": ("software", "margins (eq. 2) and epsilon-margins by their definitions"),
    "formula": ("software", "the four capacities by path enumeration"),
    "scale_invariance": ("software", "capacities unchanged when all weights are scaled (raw "
                         "norms scale by c^(2d), the 0/1 loss not at all)"),
    "rescaling_invariance": ("software", "path capacities unchanged by node rescaling"),
    "path_norm_min": ("software", "the balancing rescaling attains the minimum over node "
                      "rescalings of prod ||W_i||_{p,inf}: the path norm for one output, the "
                      "largest one-output path norm for several; random rescalings never lower"),
    "footnote2": ("software", "footnote 2: l1-path <= h_0 l2-path, l2 <= 4^d spectral, "
                  "l2-path (plain) <= l2 (plain)"),
    "pac_bayes": ("software", "pac_bayes's KL (the exact Gaussian KL to a prior of the same "
                  "variances) and its eq. 5 / eq. 6 bounds"),
    "path_norm_is_min": ("paper", "section 2.2: the l_p path norm equals the minimum over node "
                         "rescalings of prod_i ||W_i||_{p,inf}"),
    "eq6_kl_unit_prior": ("paper", "eq. 6: KL = ||w||^2 / (2 sigma^2) for the prior 'zero mean, "
                          "unit variance Gaussian'"),
    "eq6_log_term": ("paper", "eq. 6 instantiates eq. 5: its ln(1 / delta) is eq. 5's "
                     "ln(2m / delta)"),
    "stopping_norm_grows": ("evidence", "stricter stopping yields higher raw norms"),
    "stopping_capacity_stable": ("evidence", "capacities over the margin change by less than "
                                 f"{DRIFT_SHARE} of the raw norms' change"),
    "epsilon_ordering": ("evidence", "the random-vs-true ordering is the same at every eps in "
                         "0.1%-10% as at 5%"),
}


@dataclass(frozen=True)
class Settings:
    tiny: tuple[tuple[int, ...], ...]
    single_output: tuple[tuple[int, ...], ...]
    m_tiny: int
    sigmas: tuple[float, ...]
    m: int
    width: int
    depth: int
    lr: float
    loss_targets: tuple[float, ...]
    max_epochs: int
    n_networks: int
    n_pairs: int


SETTINGS = {
    "small": Settings(tiny=((3, 4, 3, 2), (4, 5, 3), (2, 3, 4, 3, 3)),
                      single_output=((3, 4, 3, 1), (4, 6, 1), (2, 3, 3, 2, 1)), m_tiny=40,
                      sigmas=(0.01, 0.1), m=200, width=64, depth=2, lr=0.05,
                      loss_targets=(1e-2, 1e-3, 1e-4), max_epochs=5000, n_networks=5,
                      n_pairs=3),
    "paper": Settings(tiny=((3, 4, 3, 2), (4, 5, 3), (2, 3, 4, 3, 3)),
                      single_output=((3, 4, 3, 1), (4, 6, 1), (2, 3, 3, 2, 1)), m_tiny=40,
                      sigmas=(0.01, 0.1), m=1600, width=512, depth=3, lr=0.01,
                      loss_targets=(1e-2, 1e-3, 1e-4), max_epochs=20_000, n_networks=8,
                      n_pairs=5),
}


def compute(scale: str, generator: torch.Generator) -> Computed:
    settings = SETTINGS[scale]
    rows = _software_and_paper_rows(settings, generator) + _evidence_rows(settings, generator)
    return Computed(columns=COLUMNS, rows=tuple(rows), comparison=_comparisons(rows),
                    extra={"settings": settings})


# ---------------------------------------------------------------- tiny networks, exact values


def chain(weights) -> torch.nn.Sequential:
    """The bias-free float64 ReLU network W_d relu(... relu(W_1 x)) of the matrices
    ``weights`` (numpy, W_i of shape h_i x h_{i-1})."""
    layers = []
    for i, w in enumerate(weights):
        linear = torch.nn.Linear(w.shape[1], w.shape[0], bias=False, dtype=torch.float64)
        with torch.no_grad():
            linear.weight.copy_(torch.as_tensor(w, dtype=torch.float64))
        layers += [linear] + ([torch.nn.ReLU()] if i < len(weights) - 1 else [])
    return torch.nn.Sequential(*layers).eval()


def tiny_network(widths, generator: torch.Generator) -> torch.nn.Sequential:
    """A bias-free float64 ReLU chain of Gaussian weights (variance 2 / fan-in)."""
    return chain([(torch.randn(b, a, generator=generator, dtype=torch.float64)
                   * math.sqrt(2.0 / a)).numpy() for a, b in zip(widths[:-1], widths[1:])])


def separated_inputs(net: torch.nn.Module, m: int, generator: torch.Generator) -> torch.Tensor:
    """``m`` standard Gaussian inputs whose highest score beats the next by more than 1e-6 (a
    bias-free ReLU network scores inputs that silence every unit 0 for every class: margin 0,
    over which no capacity is defined)."""
    d_in = next(mod for mod in net.modules() if isinstance(mod, torch.nn.Linear)).in_features
    x = torch.randn(20 * m, d_in, generator=generator, dtype=torch.float64)
    with torch.no_grad():
        top = net(x).topk(2, dim=1).values
    return x[top[:, 0] - top[:, 1] > 1e-6][:m]


def weights_of(net: torch.nn.Module) -> list[np.ndarray]:
    """The weight matrices W_1..W_d of a chain, as float64 numpy arrays."""
    return [m.weight.detach().double().numpy().copy() for m in net.modules()
            if isinstance(m, torch.nn.Linear)]


def path_products(weights) -> np.ndarray:
    """prod_i W_i[j_i, j_{i-1}] for every path j in prod_k [h_k], by explicit enumeration."""
    widths = [weights[0].shape[1]] + [w.shape[0] for w in weights]
    return np.array([math.prod(w[j[i + 1], j[i]] for i, w in enumerate(weights))
                     for j in itertools.product(*(range(h) for h in widths))])


def printed_capacities(weights, gamma: float) -> dict[tuple[str, str], float]:
    """Section 2.2's four capacities as printed ("with constants"), and as figure 1 plots them
    ("plain": without the constants and the width factors), paths enumerated one by one."""
    d, widths = len(weights), [w.shape[0] for w in weights]
    paths = path_products(weights)
    out = {}
    for kind, two, h in (("with constants", 2.0, widths), ("plain", 1.0, [1] * d)):
        out["l2", kind] = math.prod(two**2 * np.linalg.norm(w) ** 2 for w in weights)
        out["l1_path", kind] = float(np.sum(np.abs(two**d * paths))) ** 2
        out["l2_path", kind] = float(np.sum(math.prod(two**2 * k for k in h) * paths**2))
        out["spectral", kind] = math.prod(k * np.linalg.norm(w, 2) ** 2
                                          for k, w in zip(h, weights))
    return {key: value / gamma**2 for key, value in out.items()}


def epsilon_margin_by_definition(margins: np.ndarray, eps: float) -> float:
    """The lowest gamma such that ceil(eps m) points have a margin below it (section 2.2; the
    infimum is the smallest margin g with at least that many margins <= g; eps = 0: the hard
    margin)."""
    k = max(1, math.ceil(eps * len(margins) - 1e-9))
    return float(min(g for g in margins if np.sum(margins <= g) >= k))


def balanced_product(weights, p: float) -> float:
    """prod_i ||W_i||_{p,inf} after the node rescaling that makes every hidden unit's incoming
    l_p norm 1 (its scale pushed into the next layer): the minimum over node rescalings."""
    ws = [w.copy() for w in weights]
    for i in range(len(ws) - 1):
        norms = np.linalg.norm(ws[i], ord=p, axis=1)
        ws[i] = ws[i] / norms[:, None]
        ws[i + 1] = ws[i + 1] * norms[None, :]
    return math.prod(float(np.linalg.norm(w, ord=p, axis=1).max()) for w in ws)


def rescaled(weights, rng: np.random.Generator) -> list[np.ndarray]:
    """The same function under a random node rescaling: each hidden unit's incoming weights
    times c > 0, its outgoing ones over c (log c standard normal)."""
    ws = [w.copy() for w in weights]
    for i in range(len(ws) - 1):
        c = np.exp(rng.standard_normal(ws[i].shape[0]))
        ws[i] = ws[i] * c[:, None]
        ws[i + 1] = ws[i + 1] / c[None, :]
    return ws


def _name(widths) -> str:
    return "-".join(str(h) for h in widths)


def _software_and_paper_rows(settings: Settings, generator: torch.Generator) -> list[tuple]:
    from nngauge import capacity, margin, path_norm

    rng = np.random.default_rng(int(torch.randint(0, 2**31 - 1, (1,), generator=generator)))
    rows = []
    for widths in settings.tiny:
        net, name, d = tiny_network(widths, generator), _name(widths), len(widths) - 1
        weights = weights_of(net)
        x = separated_inputs(net, settings.m_tiny, generator)
        with torch.no_grad():
            scores = net(x)
        fitted = scores.argmax(1)
        # margins: a quarter of the labels moved, so that some margins are negative
        noisy = fitted.clone()
        noisy[::4] = (noisy[::4] + 1) % widths[-1]
        s = scores.numpy()
        other = np.where(np.eye(widths[-1])[noisy.numpy()] > 0, -np.inf, s).max(1)
        margins = s[np.arange(len(s)), noisy.numpy()] - other
        result = margin(net, x, noisy, percentile=5)
        rows.append(("margin", name, "", "largest relative error of eq. 2's margins",
                     float(np.abs(result.margins - margins).max() / np.abs(margins).max()),
                     REL_TOL, "at_most"))
        for percentile in (0.0, *PERCENTILES, 50.0):
            rows.append(("margin", name, "", f"eps-margin at {percentile}%",
                         margin(net, x, noisy, percentile=percentile).margin,
                         epsilon_margin_by_definition(margins, percentile / 100), "equal"))
        # the capacities against the printed formulas (labels the network fits)
        ours = capacity(net, x, fitted, percentile=5, bias=False)
        printed = printed_capacities(weights, ours.margin)
        for measure in MEASURES:
            rows.append(("formula", name, measure, "with constants", ours[measure].capacity,
                         printed[measure, "with constants"], "equal"))
            rows.append(("formula", name, measure, "plain", ours[measure].plain,
                         printed[measure, "plain"], "equal"))
        # scaling every weight by c: raw norms by c^(2d), capacities and 0/1 loss unchanged
        for c in (0.1, 10.0):
            scaled = chain([c * w for w in weights])
            other_result = capacity(scaled, x, fitted, percentile=5, bias=False)
            with torch.no_grad():
                same = bool((scaled(x).argmax(1) == fitted).all())
            rows.append(("scale_invariance", name, "", f"0/1 loss unchanged, c={c:g}",
                         float(same), 1.0, "equal"))
            for measure in MEASURES:
                raw = (other_result[measure].plain * other_result.margin**2
                       / (ours[measure].plain * ours.margin**2))
                rows.append(("scale_invariance", name, measure, f"raw norm ratio, c={c:g}",
                             raw, c ** (2 * d), "equal"))
                rows.append(("scale_invariance", name, measure, f"capacity, c={c:g}",
                             other_result[measure].capacity, ours[measure].capacity, "equal"))
        moved = capacity(chain(rescaled(weights, rng)), x, fitted, percentile=5,
                         bias=False)
        for measure in ("l1_path", "l2_path"):
            rows.append(("rescaling_invariance", name, measure, "random node rescaling",
                         moved[measure].capacity, ours[measure].capacity, "equal"))
        # footnote 2: the derived bounds are looser
        rows += [("footnote2", name, "l1_path", "<= h_0 x l2-path capacity", ours.l1_path,
                  widths[0] * ours.l2_path, "at_most"),
                 ("footnote2", name, "l2", "<= 4^d x spectral capacity", ours.l2,
                  4**d * ours.spectral, "at_most"),
                 ("footnote2", name, "l2_path", "plain <= l2 plain", ours["l2_path"].plain,
                  ours["l2"].plain, "at_most")]
        # the minimum over rescalings: the largest one-output path norm; the paper: the path norm
        for p in (1, 2):
            outputs = max(path_norm(chain(weights[:-1] + [weights[-1][[o]]]), p, bias=False)
                          for o in range(widths[-1]))
            rows.append(("path_norm_min", name, f"l{p}_path", "balancing rescaling = largest "
                         "one-output path norm", balanced_product(weights, p), outputs, "equal"))
            rows.append(("path_norm_is_min", name, f"l{p}_path", "path norm = min over node "
                         "rescalings", path_norm(net, p, bias=False),
                         balanced_product(weights, p), "equal"))
    for widths in settings.single_output:
        net, name = tiny_network(widths, generator), _name(widths)
        weights = weights_of(net)
        for p in (1, 2):
            norm = path_norm(net, p, bias=False)
            rows.append(("path_norm_min", name, f"l{p}_path", "one output: balancing "
                         "rescaling = path norm", balanced_product(weights, p), norm, "equal"))
            lowest = min(math.prod(float(np.linalg.norm(w, ord=p, axis=1).max())
                                   for w in rescaled(weights, rng)) for _ in range(200))
            rows.append(("path_norm_min", name, f"l{p}_path", "200 random rescalings: "
                         "smallest prod ||W_i||_{p,inf} >= path norm", lowest, norm,
                         "at_least"))
    rows += _pac_bayes_rows(settings, generator)
    return rows


def _pac_bayes_rows(settings: Settings, generator: torch.Generator) -> list[tuple]:
    """pac_bayes on the first tiny network: its KL against the exact Gaussian KL (prior of the
    same variances: isotropic sigma, and section 2.4's sigma_i = alpha (10 |w_i| + 1)), its
    eq. 5 and eq. 6 bounds against the formulas; eq. 6's KL against the exact KL to the unit
    prior the text names, and its log term against eq. 5's."""
    from torch.distributions import Normal, kl_divergence

    from nngauge import pac_bayes

    widths = settings.tiny[0]
    net, name = tiny_network(widths, generator), _name(widths)
    w = torch.cat([torch.as_tensor(v).flatten() for v in weights_of(net)])
    x = separated_inputs(net, settings.m_tiny, generator)
    with torch.no_grad():
        y = net(x).argmax(1)
    m, delta, rows = len(y), 0.05, []
    for noise, std in (("isotropic", torch.ones_like(w)), ("relative", 10 * w.abs() + 1)):
        for form, log_term in (("eq5", math.log(2 * m / delta)), ("eq6", math.log(1 / delta))):
            curve = pac_bayes(net, (x, y), alphas=settings.sigmas, n_probes=4, noise=noise,
                              form=form, delta=delta, generator=generator)
            for point in curve.points:
                sigma = point.alpha * std
                exact = float(kl_divergence(Normal(w, sigma), Normal(0.0, sigma)).sum())
                rows.append(("pac_bayes", name, noise, f"KL at {point.alpha:g}", point.kl,
                             exact, "equal"))
                rows.append(("pac_bayes", name, noise, f"{form} bound at {point.alpha:g}",
                             point.bound, curve.train_loss + point.expected_sharpness
                             + math.sqrt((point.kl + log_term) / m), "equal"))
    for sigma in settings.sigmas:
        unit_prior = float(kl_divergence(Normal(w, sigma), Normal(0.0, 1.0)).sum())
        rows.append(("eq6_kl_unit_prior", name, "", f"sigma={sigma:g}",
                     float(w.square().sum()) / (2 * sigma**2), unit_prior, "equal"))
    rows.append(("eq6_log_term", name, "", f"m={m}, delta={delta:g}", math.log(1 / delta),
                 math.log(2 * m / delta), "equal"))
    return rows


# ---------------------------------------------------------------- trained networks, evidence


def _evidence_rows(settings: Settings, generator: torch.Generator) -> list[tuple]:
    from nngauge import capacity
    from nngauge.data import random_labels

    pool, test = digit_pool(generator)
    train, _ = first_digits(pool, test, settings.m)
    x, y = train.inputs, train.labels
    rows, by_percentile = [], {}
    targets = settings.loss_targets
    for n in range(settings.n_networks):
        subject = f"true labels #{n}"
        values = {}
        for t, target in enumerate(targets):
            if t == 0:
                net, fitted = fit_mlp(x, y, width=settings.width, depth=settings.depth,
                                      lr=settings.lr, loss_target=target,
                                      max_epochs=settings.max_epochs, generator=generator)
            else:
                fitted = train_to_fit(net, x, y, lr=settings.lr, loss_target=target,
                                      max_epochs=settings.max_epochs, generator=generator)
            result = capacity(net, x, y, percentile=PAPER_PERCENTILE)
            rows.append(("stopping_fit", subject, "training loss, error", target,
                         fitted.loss, fitted.train_error, "record"))
            for measure in MEASURES:
                plain = result[measure].log10_plain
                values[target, measure] = (plain + 2 * math.log10(result.margin), plain)
                rows.append(("stopping_norms", subject, measure, target,
                             values[target, measure][0], plain, "record"))
            if t == 0 and n < settings.n_pairs:
                by_percentile[n, "true"] = {p: capacity(net, x, y, percentile=p)
                                           for p in PERCENTILES}
        for measure in MEASURES:
            (raw0, cap0), (raw1, cap1) = values[targets[0], measure], values[targets[-1], measure]
            rows.append(("stopping_norm_grows", subject, measure,
                         f"log10 raw norm change, loss {targets[0]:g} -> {targets[-1]:g}",
                         raw1 - raw0, 0.0, "above"))
            rows.append(("stopping_capacity_stable", subject, measure,
                         f"|log10 capacity change| vs {DRIFT_SHARE} x raw change",
                         abs(cap1 - cap0), DRIFT_SHARE * (raw1 - raw0), "below"))
    for n in range(settings.n_pairs):
        labels = random_labels(y, 1.0, n_classes=10, generator=generator)
        net, fitted = fit_mlp(x, labels, width=settings.width, depth=settings.depth,
                              lr=settings.lr, loss_target=targets[0],
                              max_epochs=settings.max_epochs, generator=generator)
        rows.append(("random_fit", f"random labels #{n}", "training loss, error", targets[0],
                     fitted.loss, fitted.train_error, "record"))
        by_percentile[n, "random"] = {p: capacity(net, x, labels, percentile=p)
                                     for p in PERCENTILES}
        for measure in MEASURES:
            gap = {p: by_percentile[n, "random"][p][measure].log10_plain
                   - by_percentile[n, "true"][p][measure].log10_plain for p in PERCENTILES}
            for p in PERCENTILES:
                rows.append(("epsilon_ordering", f"pair #{n}", measure, p,
                             gap[p], gap[PAPER_PERCENTILE],
                             "record" if p == PAPER_PERCENTILE else "same_sign"))
    return rows


# ---------------------------------------------------------------- judging


def holds(row: dict) -> bool:
    """Whether ``ours`` stands to ``reference`` as the row's relation says (NaN: never)."""
    ours, ref, relation = row["ours"], row["reference"], row["relation"]
    slack = REL_TOL * max(abs(ours), abs(ref), 1e-300)
    if relation == "equal":
        return abs(ours - ref) <= slack
    if relation == "at_most":
        return ours <= ref + slack
    if relation == "at_least":
        return ours >= ref - slack
    if relation == "above":
        return ours > ref
    if relation == "below":
        return ours < ref
    if relation == "same_sign":
        return ours * ref > 0
    raise ValueError(f"holds() expected a judged relation in {RELATIONS[:-1]}; got {relation!r}")


def sign_test(computed: Computed) -> tuple[int, int, float]:
    """Networks whose every raw norm grows under stricter stopping, the networks, and the
    one-sided sign-test p-value P(at least that many | each grows with probability 1/2)."""
    from scipy import stats

    rows = [r for r in computed.records() if r["claim"] == "stopping_norm_grows"]
    networks = sorted({r["subject"] for r in rows})
    grows = sum(all(holds(r) for r in rows if r["subject"] == s) for s in networks)
    n = len(networks)
    p = float(stats.binomtest(grows, n, 0.5, alternative="greater").pvalue) if n else math.nan
    return grows, n, p


def _comparisons(rows) -> tuple[Comparison, ...]:
    computed = Computed(COLUMNS, tuple(rows))
    grows, n, p = sign_test(computed)
    records = computed.records()
    out = [Comparison("networks whose raw norms all grow under stricter stopping", float(grows),
                      None, "section 2.2: 'a stricter stopping criteria ... would yield higher "
                      "norm'", key="stopping_grows", statistic="sign test", p_value=p, n=n)]
    raw = [r["ours"] for r in records if r["claim"] == "stopping_norm_grows"]
    moved = [_signed_change(records, r) for r in records
             if r["claim"] == "stopping_capacity_stable"]
    for key, label, values, note in (
            ("stopping_raw_change", "raw norm", raw, "section 2.2: > 0, the norm grows with "
             "the stopping criterion"),
            ("stopping_capacity_change", "capacity over margin^2", moved, "near 0 if the "
             "margin accounts for the norm's growth")):
        out.append(Comparison(f"log10 {label} change under stricter stopping, mean over "
                              "networks and measures",
                              float(np.mean(values)) if values else math.nan, None, note,
                              key=key, n=len(values)))
    for claim in ("stopping_capacity_stable", "epsilon_ordering"):
        judged = [r for r in records if r["claim"] == claim and r["relation"] != "record"]
        out.append(Comparison(f"{CLAIMS[claim][1]}: rows that hold", float(
            sum(holds(r) for r in judged)), None, "all n must hold", key=claim, n=len(judged)))
    for claim in ("path_norm_is_min", "eq6_kl_unit_prior"):
        judged = [r for r in records if r["claim"] == claim]
        worst = max((r["ours"] / r["reference"] for r in judged), key=lambda v: abs(
            math.log(v)) if v > 0 else math.inf, default=math.nan)
        out.append(Comparison(f"{CLAIMS[claim][1]}: ours / exact, farthest from 1", worst,
                              1.0, "exact values; the paper's statement needs 1",
                              key=f"{claim}_ratio"))
    return tuple(out)


def _signed_change(records, stable_row) -> float:
    """The signed log10 change of a capacity over the margin under stricter stopping, from the
    network's recorded norms (first and last loss target)."""
    kept = sorted((r for r in records if r["claim"] == "stopping_norms"
                   and r["subject"] == stable_row["subject"]
                   and r["measure"] == stable_row["measure"]), key=lambda r: -r["setting"])
    return kept[-1]["reference"] - kept[0]["reference"] if kept else math.nan


def judge(computed: Computed) -> Verdict:
    """Each claim of :data:`CLAIMS` from its rows: software checks (every row holds), the
    paper's exact statements (contradicted when a row fails), the evidence (stricter stopping:
    the sign test's p-value below :data:`SIGNIFICANCE` and every stability row; eps: every
    row). A claim without rows fails."""
    records = computed.records()
    failed = {}
    for claim, (part, _) in CLAIMS.items():
        judged = [r for r in records if r["claim"] == claim and r["relation"] != "record"]
        bad = [r for r in judged if not holds(r)]
        if claim == "stopping_norm_grows":
            grows, n, p = sign_test(computed)
            if not p < SIGNIFICANCE:
                failed[claim] = (f"{grows} of {n} networks grow in every raw norm, sign-test "
                                 f"p = {p:.3g} (needs < {SIGNIFICANCE})")
        elif not judged:
            failed[claim] = "no rows"
        elif bad:
            worst = bad[0]
            failed[claim] = (f"{len(bad)} of {len(judged)} rows fail, e.g. {worst['subject']} "
                             f"{worst['measure']} {worst['setting']}: {worst['ours']:.6g} vs "
                             f"{worst['reference']:.6g}")

    def line(part: str) -> str:
        return "; ".join(f"{CLAIMS[c][1]} {'fails: ' + failed[c] if c in failed else 'holds'}"
                         for c, (p, _) in CLAIMS.items() if p == part)

    software = [c for c in failed if CLAIMS[c][0] == "software"]
    evidence = [c for c in failed if CLAIMS[c][0] == "evidence"]
    paper = [c for c in failed if CLAIMS[c][0] == "paper"]
    text = (f"Evidence: {line('evidence')}. Exact statements of the paper: {line('paper')}. "
            f"Software checks: {line('software')}.")
    if software:
        return Verdict("differs", "A software check fails (a bug in nngauge, not evidence "
                       "about the paper). " + text, software_check=True)
    if evidence:
        return Verdict("differs", text)
    if paper:
        return Verdict("paper error", "The evidence bears section 2.2 out, but exact values "
                       "contradict statements of the paper. " + text)
    return Verdict("reproduced", text)


# ---------------------------------------------------------------- plot


def plot(computed: Computed, figure) -> None:
    records = computed.records()
    left, middle, right = figure.subplots(1, 3)
    checks = [r for r in records if CLAIMS.get(r["claim"], ("",))[0] == "software"
              and r["relation"] == "equal"]
    errors = [abs(r["ours"] - r["reference"]) / max(abs(r["reference"]), 1e-300)
              for r in checks]
    left.hist(np.log10(np.maximum(errors, 1e-18)), bins=20, color="tab:gray")
    left.axvline(math.log10(REL_TOL), color="tab:red", lw=1)
    left.set_xlabel("log10 relative error (software checks)")
    left.set_ylabel("checks")
    left.set_title(f"{len(checks)} exact checks (red: tolerance)", fontsize=9)
    targets = computed.extra["settings"].loss_targets if "settings" in computed.extra else ()
    for i, measure in enumerate(MEASURES):
        kept = [r for r in records if r["claim"] == "stopping_norms"
                and r["measure"] == measure]
        for subject in sorted({r["subject"] for r in kept}):
            points = [r for r in kept if r["subject"] == subject]
            middle.plot([r["setting"] for r in points], [r["ours"] for r in points], "o-",
                        color=f"C{i}", lw=0.8, label=measure if subject.endswith("#0") else None)
            middle.plot([r["setting"] for r in points], [r["reference"] for r in points], "s--",
                        color=f"C{i}", lw=0.8)
    middle.set_xscale("log")
    if targets:
        middle.invert_xaxis()
    middle.set_xlabel("training cross-entropy reached (stricter: right)")
    middle.set_ylabel("log10 raw norm (solid), over margin^2 (dashed)")
    middle.legend(fontsize=7)
    for i, measure in enumerate(MEASURES):
        kept = [r for r in records if r["claim"] == "epsilon_ordering" and r["measure"] == measure]
        for subject in sorted({r["subject"] for r in kept}):
            points = [r for r in kept if r["subject"] == subject]
            right.plot([r["setting"] for r in points],
                       [r["ours"] for r in points], "o-", color=f"C{i}", lw=0.8,
                       label=measure if subject.endswith("#0") else None)
    right.axhline(0, color="gray", lw=0.5)
    right.set_xscale("log")
    right.set_xlabel("eps (%)")
    right.set_ylabel("log10 capacity, random minus true labels")
    right.legend(fontsize=7)


REPRODUCTION = Reproduction(
    name="neyshabur-capacities",
    paper=cite("generalization"),
    target="Section 2.2 and eqs. 5-6",
    description="the norm-based capacities over margin and the PAC-Bayes bounds checked "
                "against their printed formulas on tiny networks, the paper's exact statements "
                "about them, and two claims of section 2.2 on MLPs trained on digits (stricter "
                "stopping raises norms, not norms over margin; eps does not change the "
                "true-vs-random ordering)",
    differences={
        "small": (
            "section 2.2 prints no numbers: its formulas are checked on tiny bias-free "
            "networks (widths 3-4-3-2, 4-5-3, 2-3-4-3-3; one output: 3-4-3-1, 4-6-1, "
            "2-3-3-2-1) on 40 Gaussian inputs, in float64",
            "evidence on scikit-learn digits (200 training points) with ReLU MLPs (width 64, "
            "2 layers, biases) instead of CIFAR10 and VGG; the path norms count the bias "
            "paths (nngauge.capacity's default)",
            "stricter stopping: 5 networks trained (SGD, minibatch 64, momentum 0.9, learning "
            "rate 0.05 instead of 0.01) until the training cross-entropy is below 1e-2, then "
            "1e-3, then 1e-4 (the paper's criterion); the momentum restarts at each target",
            "eps: 3 pairs of networks fitted to true and to random labels (cross-entropy "
            "below 1e-2), capacities at eps = 0.1%, 1%, 5%, 10%",
        ),
        "paper": (
            "section 2.2 prints no numbers: its formulas are checked on the same tiny networks",
            "evidence on scikit-learn digits (1600 training points) with ReLU MLPs (width 512, "
            "3 layers) instead of CIFAR10 and VGG: 8 networks for stricter stopping (learning "
            "rate 0.01), 5 pairs for eps",
        ),
    },
    small_runtime="~20 s",
    compute=compute,
    plot=plot,
    claim=("Section 2.2's capacities over the margin are computed as printed; the l_p path norm "
           "equals the minimum over node rescalings of prod_i ||W_i||_{p,inf}; eq. 6 is eq. 5 "
           "for a unit-variance Gaussian prior; under cross-entropy a stricter stopping "
           "criterion yields higher norms, which the margin accounts for (judged: each "
           "capacity over the margin moves by less than half its norm's log10 change); and "
           "the comparison of true and random labels is unaffected by eps between 0.001 and "
           "0.1."),
    judge=judge,
    n_seeds=3,
)
