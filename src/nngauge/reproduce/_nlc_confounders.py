"""``nlc-confounders``: the confounders of section 6 of the NLC paper, with trained networks.

Philipp & Carbonell, "The Nonlinearity Coefficient - Predicting Generalization in Deep Neural
Networks" (arXiv:1806.00179), section 6 ("On the robustness of the NLC vs other metrics"): the
gradient vector component size GVCS = Q_{i,x} dl/dx(i) (and the gradient vector length
Q_x ||dl/dx||_2, the Lipschitz constant) can be moved at will by changes that leave the test
error after training unchanged, the NLC cannot; correlation information is moved the same way
by an additive input bias; and the GVCS stays put where the NLC and the test error move.

What we compute, on waveform-noise (appendix D), for base networks that begin with a linear
operation followed by batch normalization (:func:`nngauge.nn.mlp`), each measured at
initialization (:func:`nngauge.nlc`, :func:`nngauge.gradient_metrics`,
:func:`nngauge.correlations`) and trained with E.2's protocol (:func:`nngauge.training.fit`,
the run of lowest validation error over a few starting rates), beside a transformed twin:

- input scale: the data times c (section 6: "preserve ... the entire trajectory of the
  parameter during training and therefore the final test error", GVCS / c);
- output scale: the network's output times a fixed c (appendix C's loss scaling divides it out
  again in training; section 6: GVCS grows by c);
- input width: every input dimension duplicated c times, the first weight matrix replaced by c
  blocks whose entries are 1 / sqrt(c) the size of the original's and whose sum is the
  original matrix, and that matrix trained at rate / c (section 6: "approximately maintain the
  learning dynamics ... leaves the NLC unchanged but reduces GVCS by sqrt(c)"; gradient length
  and Lipschitz constant "not susceptible to a change in input width"). Blocks summing to the
  original make the dynamics exactly the original's, a special case of the paper's rescaled
  initialization;
- input bias: a constant added to every input feature (correlation information: the mean
  pairwise cosine of the inputs rises towards 1, that of the outputs and the test error stay);
- activation 1 + sin(k s) / k in a plain network (no normalization), k growing: "the NLC
  converges to infinity ... Yet, GVCS is stable"; we also train these networks: at the
  largest k they should beat chance less often than at the smallest (the lost structure the
  NLC reflects, "eliminates all meaningful structure");
- He-initialized plain ReLU networks of growing depth ("the same effect"): NLC grows, GVCS
  stable (at initialization only, as the paper says).

The claims are judged part by part (:func:`nngauge.reproduce._nlc_study.panel_verdict`,
strict: one failing part gives "differs"). At initialization the input scale, output scale and
input bias twins obey identities (a software check of nngauge's measures, labelled so in the
reason); their test errors after training, the input-width twin's ratios and the sine and ReLU
trends are evidence, decided by the tolerances below and by rank correlations and Fisher tests
with p-values against :data:`SIGNIFICANCE`. The input bias twin trains exactly as its base but
is evaluated through batch normalization's running averages, which section 6 leaves out
(:data:`BATCH_NORM_AVERAGE`).
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np
import torch
from torch import nn

from nngauge._citations import cite
from nngauge._internal.threads import one_thread
from nngauge._random import seed_of
from nngauge.reproduce._base import SIGNIFICANCE, Comparison, Computed, Reproduction, Verdict
from nngauge.reproduce._nlc_study import panel_verdict

COLUMNS = ("part", "network", "factor", "nlc", "gvcs", "gradient_length", "lipschitz",
           "input_correlation", "output_correlation", "test_error")

SETTINGS = {
    "small": {"n": 500, "width": 32, "depth": 4,
              "bases": ("relu", "tanh", "selu", "sigmoid", "gaussian"),
              "lr_start": 0.03, "lr_factor": 10.0, "n_lrs": 2, "epochs": 20, "batch_size": 50,
              "input_scales": (10.0, 100.0), "output_scale": 10.0, "duplicate": 4,
              "bias": 10.0, "ks": (1.0, 4.0, 16.0, 64.0), "sine_seeds": 4,
              "relu_depths": (2, 4, 8, 16, 32), "relu_seeds": 3},
    "paper": {"n": 5000, "width": 100, "depth": 8,
              "bases": ("relu", "tanh", "selu", "sigmoid", "gaussian", "even_tanh", "square"),
              "lr_start": 0.01, "lr_factor": 3.0, "n_lrs": 5, "epochs": None,
              "batch_size": 250,
              "input_scales": (10.0, 100.0, 1000.0), "output_scale": 10.0, "duplicate": 4,
              "bias": 10.0, "ks": (1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0), "sine_seeds": 5,
              "relu_depths": (2, 4, 8, 16, 32, 64), "relu_seeds": 5},
}
"""Per scale: data size, base width and depth, the base networks' activations, the starting
rates (a geometric grid: first, factor, count) and epoch cap of training, the confounders'
factors, and the sine / ReLU series."""

IDENTITY = 1e-3
"""An identity holds when the ratio it predicts is met within this relative error (batch
normalization's epsilon, 1e-5 of the variance, keeps input scaling from being exact to the
last digit)."""
SAME_ERROR = 0.02
"""Test errors after training count as unchanged when they move by at most this on average
over the twins (2 points in 100; see :data:`BATCH_NORM_AVERAGE` for rounding in chaotic
training)."""
CORRELATED = 0.9
"""An input bias "increases correlation between inputs" when their mean pairwise cosine
exceeds this."""
APPROXIMATE = 0.15
"""The input-width twin's ratios (a random initialization of the duplicated block) meet
section 6's values within this relative error."""
STABLE = 2.0
"""GVCS counts as stable when its median per setting stays within this factor over the series
(while the NLC must grow significantly)."""
BATCH_NORM_AVERAGE = (
    "evaluation (validation error for E.2's schedule, test error) normalizes with batch "
    "normalization's running averages (torch's default), as trained networks are used. In "
    "training the input-bias twin follows its base exactly, but the running mean averages "
    "c W_1 1 over steps in which W_1 moves, so c times that drift stays in the evaluated "
    "network: section 6 speaks of batch statistics only. Float rounding (x c is not exactly "
    "scaled) grows in chaotic training: twins that are identical in exact arithmetic can end a "
    "few test points apart, hence a mean over the twins")
"""Where trained twins can differ from their base networks although section 6's argument
holds."""
DIFFERENCES = {
    "small": (
        "section 6 states its confounders without an experiment: these twins are ours, built as "
        "the section describes, on waveform-noise (500 points, 300/100/100)",
        "5 base networks (depth 4, width 32, batch norm; ReLU, tanh, SELU, sigmoid, Gaussian) "
        "trained at 2 starting rates (0.03, 0.3) for at most 20 epochs in float64, instead of "
        "E.2's 40-rate search",
        "the sine series k = 1, 4, 16, 64 (4 networks each) and the ReLU series at depths 2 "
        "to 32 (3 each)",
        "the input-width twin's blocks sum to the original first weight matrix (a special case "
        "of the paper's 1/sqrt(c) initialization), so its training is exactly the original's",
        BATCH_NORM_AVERAGE,
    ),
    "paper": (
        "section 6 states its confounders without an experiment: these twins are ours, built as "
        "the section describes, on waveform-noise (5000 points, 3000/1000/1000)",
        "7 base networks (depth 8, width 100, batch norm; table 1's activations but odd "
        "square) trained at 5 starting rates with E.2's schedule until it ends, instead of a "
        "40-rate search",
        "the input-width twin's blocks sum to the original first weight matrix (a special case "
        "of the paper's 1/sqrt(c) initialization), so its training is exactly the original's",
        BATCH_NORM_AVERAGE,
    ),
}


class _Times(nn.Module):
    """A network's output times a fixed constant (section 6's output rescaling)."""

    def __init__(self, model: nn.Module, factor: float) -> None:
        super().__init__()
        self.model, self.factor = model, factor

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(x) * self.factor


def sine_activation(k: float):
    """tau(s) = 1 + sin(k s) / k (section 6): tau'(s) = cos(k s) stays of size 1 while tau's
    variation shrinks as 1 / k."""
    from nngauge.activations import Activation

    return Activation(name="one_plus_sine", value=lambda s: 1 + np.sin(k * s) / k,
                      derivative_fn=lambda s: np.cos(k * s),
                      torch_fn=lambda s: 1 + torch.sin(k * s) / k, params={"k": k},
                      description="1 + sin(k s) / k (NLC paper, section 6)")


def widened(model: nn.Module, copies: int, generator: torch.Generator) -> nn.Module:
    """``model`` (an :class:`~nngauge.nn.MLP`) on inputs whose every dimension is repeated
    ``copies`` times (``x.repeat(1, copies)``): the first weight matrix W becomes c blocks
    W / c + N_b, the N_b Gaussian with sum 0 and entries sqrt(c) times smaller than W's
    quadratic mean, so that each block is 1 / sqrt(c) the size of W and the blocks sum to W
    (the function is unchanged)."""
    from nngauge.nn import mlp

    cfg = model.config
    wide = mlp(cfg.d_in * copies, cfg.width, cfg.depth, cfg.d_out, activation=cfg.activation,
               norm=cfg.norm, dtype=next(model.parameters()).dtype)
    state = dict(model.state_dict())
    weight = state["layers.0.linear.weight"]
    rms = weight.pow(2).mean().sqrt()
    noise = torch.randn((copies, *weight.shape), generator=generator,
                        dtype=torch.float64).to(weight.dtype) * rms / math.sqrt(copies)
    noise = noise - noise.mean(0, keepdim=True)
    state["layers.0.linear.weight"] = torch.cat(list(weight / copies + noise), dim=1)
    wide.load_state_dict(state)
    return wide


def first_layer_slower(divisor: float) -> Callable:
    """An optimizer factory for :func:`nngauge.training.fit`: SGD with the first parameter (an
    MLP's first weight matrix, registered first) at rate / ``divisor``."""
    def make(params, lr):
        first, *rest = list(params)
        return torch.optim.SGD([{"params": [first], "lr": lr / divisor}, {"params": rest}],
                               lr=lr)
    return make


def _measures(model: nn.Module, data, seed: int) -> dict:
    """NLC, GVCS, gradient length, Lipschitz estimate and the mean input / output correlation
    of ``model`` at initialization on the training set (batch statistics)."""
    from nngauge import correlations, gradient_metrics, nlc

    inputs, labels = data
    found = nlc(model, inputs, batch_size=len(inputs), norm_mode="train", generator=seed)
    grads = gradient_metrics(model, (inputs, labels), batch_size=len(inputs), n_iter=30,
                             norm_mode="train", generator=seed)
    corr = correlations(model, inputs, layers=[], max_samples=len(inputs), norm_mode="train")
    return {"nlc": found.nlc, "gvcs": grads.gvcs, "gradient_length": grads.gradient_length,
            "lipschitz": grads.lipschitz, "input_correlation": corr.layers[0].mean,
            "output_correlation": corr.layers[-1].mean}


def _test_error(model: nn.Module, parts, settings: dict, seed: int, optimizer="sgd") -> float:
    """E.2's protocol at each starting rate of the settings' grid from the same
    initialization and shuffling: the test error of the run of lowest validation error."""
    from nngauge.training import lr_search

    train, val, test = parts
    result = lr_search(model, train, val, test=test, start=settings["lr_start"],
                       factor=settings["lr_factor"], n_rates=settings["n_lrs"], edge=0,
                       optimizer=optimizer, batch_size=settings["batch_size"],
                       max_epochs=settings["epochs"],
                       dtype=torch.float64, generator=seed)
    return float(result.best.test_error)


def _transformed(parts, change) -> tuple:
    from nngauge.data import LabelledData

    return tuple(LabelledData(change(p.inputs), p.labels) for p in parts)


def compute(scale: str, generator: torch.Generator) -> Computed:
    from nngauge.data import split, standardize, waveform_noise

    settings = SETTINGS[scale]
    seed = seed_of(generator)
    parts = standardize(*split(waveform_noise(settings["n"], generator=seed), (0.6, 0.2, 0.2),
                               generator=seed)).data
    parts = _transformed(parts, lambda x: x.to(torch.float64))
    with one_thread():
        rows = _twins(settings, parts, seed)
    return Computed(columns=COLUMNS, rows=rows, comparison=_comparisons(rows),
                    extra={"settings": settings})


def _twins(settings: dict, parts, seed: int) -> tuple[tuple, ...]:
    """The rows: each base network and its twins, then the sine and ReLU series."""
    from nngauge.nn import mlp

    width, depth = settings["width"], settings["depth"]
    d_in, d_out = parts[0].inputs.shape[1], int(parts[0].labels.max()) + 1
    rows = []

    def record(part: str, network: str, factor: float, model: nn.Module, data, *,
               train: bool = True, optimizer="sgd") -> None:
        found = _measures(model, data[0], seed)
        error = _test_error(model, data, settings, seed, optimizer) if train else math.nan
        rows.append((part, network, factor, *(found[c] for c in COLUMNS[3:9]), error))

    for i, activation in enumerate(settings["bases"]):
        def base() -> nn.Module:
            return mlp(d_in, width, depth, d_out, activation=activation, norm="batch",
                       generator=seed + i, dtype=torch.float64)
        name = f"{activation}, depth {depth}, batch norm"
        record("base", name, 1.0, base(), parts)
        for c in settings["input_scales"]:
            record("input scale", name, c, base(), _transformed(parts, lambda x, c=c: x * c))
        c = settings["output_scale"]
        record("output scale", name, c, _Times(base(), c), parts)
        c = settings["duplicate"]
        record("input width", name, c,
               widened(base(), c, torch.Generator().manual_seed(seed + i)),
               _transformed(parts, lambda x, c=c: x.repeat(1, c)),
               optimizer=first_layer_slower(c))
        c = settings["bias"]
        record("input bias", name, c, base(), _transformed(parts, lambda x, c=c: x + c))
    for k in settings["ks"]:
        for s in range(settings["sine_seeds"]):
            record("sine", f"1 + sin({k:g} s) / {k:g}, depth {depth}, seed {s}", k,
                   mlp(d_in, width, depth, d_out, activation=sine_activation(k),
                       generator=seed + 100 + s, dtype=torch.float64), parts)
    for d in settings["relu_depths"]:
        for s in range(settings["relu_seeds"]):
            record("relu depth", f"He ReLU, depth {d}, seed {s}", float(d),
                   mlp(d_in, width, d, d_out, activation="relu", init="gaussian",
                       sigma_w=math.sqrt(2.0), generator=seed + 200 + s, dtype=torch.float64),
                   parts, train=False)
    return tuple(rows)


def _ratios(rows, part: str, column: str) -> list[tuple[float, float]]:
    """(factor, value of the twin / value of its base network) for every twin of ``part``."""
    records = [dict(zip(COLUMNS, r)) for r in rows]
    bases = {r["network"]: r for r in records if r["part"] == "base"}
    return [(r["factor"], r[column] / bases[r["network"]][column]) for r in records
            if r["part"] == part]


def _error_shifts(rows, part: str) -> list[float]:
    """|test error of a twin - that of its base network| for every twin of ``part``."""
    records = [dict(zip(COLUMNS, r)) for r in rows]
    bases = {r["network"]: r for r in records if r["part"] == "base"}
    return [abs(r["test_error"] - bases[r["network"]]["test_error"]) for r in records
            if r["part"] == part]


def _error_change(rows, part: str, quantity: str, key: str, note: str) -> Comparison:
    """The mean |test error change| of the twins of ``part`` (n: the twins; the largest in
    the note)."""
    shifts = _error_shifts(rows, part)
    return Comparison(quantity, float(np.mean(shifts)) if shifts else math.nan, None,
                      f"largest {max(shifts, default=math.nan):.3g}; {note}", key=key,
                      n=len(shifts))


def _largest_miss(pairs, expected: Callable[[float], float]) -> float:
    """The largest relative miss |ratio / expected(factor) - 1|."""
    return max((abs(ratio / expected(c) - 1) for c, ratio in pairs), default=math.nan)


def _series(rows, part: str, column: str) -> tuple[float, float, int]:
    """Spearman rho of a series' factor (k or depth) against ``column``, its p-value, n."""
    from scipy import stats

    pairs = [(r[2], r[COLUMNS.index(column)]) for r in rows if r[0] == part
             and math.isfinite(r[COLUMNS.index(column)])]
    if len(pairs) < 3:
        return math.nan, math.nan, len(pairs)
    rho, p = stats.spearmanr(*zip(*pairs))
    return float(rho), float(p), len(pairs)


def _spread(rows, part: str, column: str) -> float:
    """The largest over the smallest per-factor median of ``column`` in a series."""
    values: dict[float, list[float]] = {}
    for r in rows:
        if r[0] == part:
            values.setdefault(r[2], []).append(r[COLUMNS.index(column)])
    medians = [float(np.median(v)) for v in values.values()]
    return max(medians) / min(medians) if medians and min(medians) > 0 else math.nan


def _lost_structure(rows) -> Comparison:
    """The sine networks of the largest k beating chance (test error below
    :data:`~nngauge.reproduce._nlc_figure3.BETTER_THAN_CHANCE`), with a one-sided Fisher exact
    test of fewer of them doing so than of the networks of the smallest k."""
    from scipy import stats

    from nngauge.reproduce._nlc_figure3 import BETTER_THAN_CHANCE

    series = [r for r in rows if r[0] == "sine" and math.isfinite(r[-1])]
    if not series:
        return Comparison("sine: fraction beating chance at the largest k", math.nan, None,
                          "no sine network trained", key="sine_error", statistic="fisher",
                          p_value=math.nan, n=0)
    ks = [r[2] for r in series]
    beats = {k: [r[-1] < BETTER_THAN_CHANCE for r in series if r[2] == k]
             for k in (min(ks), max(ks))}
    small, large = beats[min(ks)], beats[max(ks)]
    table = [[sum(large), len(large) - sum(large)], [sum(small), len(small) - sum(small)]]
    p = stats.fisher_exact(table, alternative="less").pvalue if min(ks) < max(ks) else math.nan
    return Comparison(f"sine: fraction beating chance at k = {max(ks):g}",
                      sum(large) / len(large), None,
                      f"{sum(small)} of {len(small)} at k = {min(ks):g}; one-sided Fisher test "
                      "of fewer; section 6: the structure is lost (what the NLC reflects)",
                      key="sine_error", statistic="fisher", p_value=float(p), n=len(large))


def _comparisons(rows) -> tuple[Comparison, ...]:
    def miss(part, column, expected, quantity, key, note=""):
        return Comparison(quantity, _largest_miss(_ratios(rows, part, column), expected), None,
                          note, key=key)

    def trend(part, column, quantity, key, note):
        rho, p, n = _series(rows, part, column)
        return Comparison(quantity, rho, None, note, key=key, statistic="spearman",
                          p_value=p, n=n)

    same = lambda c: 1.0  # noqa: E731
    return (
        miss("input scale", "nlc", same, "input x c: largest |NLC ratio - 1|", "scale_nlc",
             "section 6: the NLC is unchanged"),
        miss("input scale", "gvcs", lambda c: 1 / c, "input x c: largest |GVCS ratio x c - 1|",
             "scale_gvcs", "section 6: GVCS shrinks by c"),
        miss("input scale", "lipschitz", lambda c: 1 / c,
             "input x c: largest |Lipschitz ratio x c - 1|", "scale_lipschitz",
             "section 6: gradient length and Lipschitz constant too"),
        _error_change(rows, "input scale", "input x c: mean |test error change|",
                      "scale_error", "section 6: the whole training trajectory is preserved"),
        miss("output scale", "nlc", same, "output x c: largest |NLC ratio - 1|", "output_nlc"),
        Comparison("output x c: smallest GVCS ratio / c",
                   min((r / c for c, r in _ratios(rows, "output scale", "gvcs")),
                       default=math.nan), None,
                   "section 6: GVCS grows by c (for outputs the softmax does not saturate)",
                   key="output_gvcs"),
        miss("output scale", "lipschitz", lambda c: c,
             "output x c: largest |Lipschitz ratio / c - 1|", "output_lipschitz"),
        _error_change(rows, "output scale", "output x c: mean |test error change|",
                      "output_error", "appendix C's loss scaling divides c out"),
        miss("input width", "nlc", same, "input width x c: largest |NLC ratio - 1|",
             "width_nlc", "section 6: the NLC is unchanged"),
        miss("input width", "gvcs", lambda c: 1 / math.sqrt(c),
             "input width x c: largest |GVCS ratio x sqrt(c) - 1|", "width_gvcs",
             "section 6: GVCS shrinks by sqrt(c)"),
        miss("input width", "gradient_length", same,
             "input width x c: largest |gradient length ratio - 1|", "width_length",
             "section 6: gradient length not susceptible to width"),
        miss("input width", "lipschitz", same,
             "input width x c: largest |Lipschitz ratio - 1|", "width_lipschitz",
             "section 6: Lipschitz constant not susceptible to width"),
        _error_change(rows, "input width", "input width x c: mean |test error change|",
                      "width_error", "first weight matrix trained at rate / c"),
        Comparison("input + c: smallest input correlation",
                   min((r[7] for r in rows if r[0] == "input bias"), default=math.nan), None,
                   "mean pairwise cosine of the inputs; base data: "
                   f"{np.mean([r[7] for r in rows if r[0] == 'base']):.3f}",
                   key="bias_input_correlation"),
        miss("input bias", "output_correlation", same,
             "input + c: largest |output correlation ratio - 1|", "bias_output_correlation",
             "section 6: the outputs' correlation is unchanged"),
        miss("input bias", "nlc", same, "input + c: largest |NLC ratio - 1|", "bias_nlc"),
        _error_change(rows, "input bias", "input + c: mean |test error change|", "bias_error",
                      "section 6: batch norm removes the bias"),
        trend("sine", "nlc", "sine: Spearman rho(k, NLC)", "sine_nlc",
              "section 6: the NLC converges to infinity as k grows"),
        Comparison("sine: GVCS spread over k (largest / smallest median)",
                   _spread(rows, "sine", "gvcs"), None,
                   f"section 6: stable; NLC spread {_spread(rows, 'sine', 'nlc'):.3g}",
                   key="sine_gvcs_spread"),
        _lost_structure(rows),
        trend("relu depth", "nlc", "He ReLU: Spearman rho(depth, NLC)", "relu_nlc",
              "section 6: the same effect as depth grows"),
        Comparison("He ReLU: GVCS spread over depth (largest / smallest median)",
                   _spread(rows, "relu depth", "gvcs"), None,
                   f"stable; NLC spread {_spread(rows, 'relu depth', 'nlc'):.3g}",
                   key="relu_gvcs_spread"),
    )


def judge(computed: Computed) -> Verdict:
    """Each confounder of section 6 as separate parts (strict: any failing part gives
    "differs"): at initialization, the identities of the input scale, output scale and input
    bias twins (ratios met within :data:`IDENTITY`: a software check of nngauge; the output
    twin's GVCS grown by more than c / 2; the inputs' correlation above :data:`CORRELATED`);
    trained, the twins' test errors within :data:`SAME_ERROR` of their base networks' on
    average (evidence: batch normalization's running averages are not part of section 6's
    argument); the input-width twin (ratios within :data:`APPROXIMATE`, test error as the
    others); the sine and ReLU series (NLC rising with k or depth, Spearman
    p < :data:`SIGNIFICANCE`; GVCS within a factor :data:`STABLE`; for the sine series the
    networks of the largest k beating chance less often than those of the smallest, one-sided
    Fisher p < :data:`SIGNIFICANCE`). A series of fewer than 3 finite points, or a sine series
    of one k, is not tested."""
    def ours(key: str) -> float:
        return computed.compared(key).ours

    def within(key: str, tolerance: float) -> bool:
        return ours(key) <= tolerance  # NaN: False

    def rising(key: str):
        found = computed.compared(key)
        if found.n is None or found.n < 3 or math.isnan(found.ours):
            return None, f"{found.quantity}: fewer than 3 points"
        return (found.ours > 0 and found.significant(SIGNIFICANCE),
                f"{found.quantity} {found.ours:.2f} ({found.printed_statistics})")

    def lost():
        found = computed.compared("sine_error")
        if math.isnan(found.p_value):
            return None, "the structure lost: no networks of two k to compare"
        return (found.significant(SIGNIFICANCE),
                f"{found.ours:.0%} beat chance at the largest k, fewer than at the smallest "
                f"({found.printed_statistics})")

    def both(first, second):
        if first[0] is None or second[0] is None:
            return None, f"{first[1]}; {second[1]}"
        return first[0] and second[0], f"{first[1]}; {second[1]}"

    exact = "identities, a software check: "

    def moved(key: str) -> tuple:
        return within(key, SAME_ERROR), (f"test error moved {ours(key):.3g} on average over "
                                         f"{computed.compared(key).n} twins (at most "
                                         f"{SAME_ERROR:g})")

    checks = {
        "input scale (initialization)": (
            within("scale_nlc", IDENTITY) and within("scale_gvcs", IDENTITY)
            and within("scale_lipschitz", IDENTITY),
            f"{exact}NLC ratio off 1 by {ours('scale_nlc'):.2g}, GVCS x c off 1 by "
            f"{ours('scale_gvcs'):.2g}, Lipschitz x c by {ours('scale_lipschitz'):.2g}"),
        "input scale (trained)": moved("scale_error"),
        "output scale (initialization)": (
            within("output_nlc", IDENTITY) and ours("output_gvcs") > 1 / 2
            and within("output_lipschitz", IDENTITY),
            f"{exact}NLC ratio off 1 by {ours('output_nlc'):.2g}, Lipschitz / c off 1 by "
            f"{ours('output_lipschitz'):.2g}; GVCS grew by at least {ours('output_gvcs'):.3g} "
            "c (more than c / 2 required)"),
        "output scale (trained)": moved("output_error"),
        "input width": (
            within("width_nlc", APPROXIMATE) and within("width_gvcs", APPROXIMATE)
            and within("width_length", APPROXIMATE) and within("width_lipschitz", APPROXIMATE)
            and within("width_error", SAME_ERROR),
            f"NLC ratio off 1 by {ours('width_nlc'):.2g}, GVCS x sqrt(c) off 1 by "
            f"{ours('width_gvcs'):.2g}, gradient length by {ours('width_length'):.2g}, "
            f"Lipschitz by {ours('width_lipschitz'):.2g} (at most {APPROXIMATE:g}); "
            f"{moved('width_error')[1]}"),
        "input bias (initialization)": (
            ours("bias_input_correlation") > CORRELATED
            and within("bias_output_correlation", IDENTITY) and within("bias_nlc", IDENTITY),
            f"input correlation rose to {ours('bias_input_correlation'):.3f} (above "
            f"{CORRELATED:g} required); {exact}output correlation ratio off 1 by "
            f"{ours('bias_output_correlation'):.2g}, NLC by {ours('bias_nlc'):.2g}"),
        "input bias (trained)": moved("bias_error"),
        "sine": _stable_while(both(rising("sine_nlc"), lost()), ours("sine_gvcs_spread")),
        "He ReLU depth": _stable_while(rising("relu_nlc"), ours("relu_gvcs_spread")),
    }
    return panel_verdict(checks, strict=True)


def _stable_while(trend: tuple, spread: float) -> tuple:
    """A series' part: its trends hold and the GVCS spread stays within :data:`STABLE`."""
    ok, why = trend
    stable = spread <= STABLE
    text = f"{why}; GVCS spread {spread:.3g} (stable: <= {STABLE:g})"
    return (None if ok is None else ok and stable), text


def plot(computed: Computed, figure) -> None:
    records = computed.records()
    axes = figure.subplots(1, 3)
    ax = axes[0]
    parts = ("input scale", "output scale", "input width", "input bias")
    for j, column in enumerate(("nlc", "gvcs", "lipschitz")):
        values = [[r for _, r in _ratios(computed.rows, part, column)] for part in parts]
        for i, ratios in enumerate(values):
            ax.scatter([i + 0.2 * (j - 1)] * len(ratios), ratios, s=14,
                       color=("tab:green", "tab:red", "tab:blue")[j],
                       label=column if i == 0 else None)
    ax.set_xticks(range(len(parts)), [p.replace(" ", "\n") for p in parts], fontsize=7)
    ax.set_yscale("log")
    ax.set_ylabel("twin / base network", fontsize=8)
    ax.legend(fontsize=6)
    for ax, part, label in ((axes[1], "sine", "k of 1 + sin(k s) / k"),
                            (axes[2], "relu depth", "depth (He ReLU)")):
        chosen = [r for r in records if r["part"] == part]
        for column, color in (("nlc", "tab:green"), ("gvcs", "tab:red")):
            ax.scatter([r["factor"] for r in chosen], [r[column] for r in chosen], s=14,
                       color=color, label=column)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel(label, fontsize=8)
        if part == "sine":
            twin = ax.twinx()
            twin.scatter([r["factor"] for r in chosen], [r["test_error"] for r in chosen],
                         s=10, marker="x", color="black", label="test error")
            twin.set_ylabel("test error", fontsize=8)
        ax.legend(fontsize=6)


REPRODUCTION = Reproduction(
    name="nlc-confounders",
    paper=cite("nlc"),
    target="Section 6",
    description="the confounders of section 6 as twins of trained networks on waveform-noise: "
                "input and output scale, input width, input bias (correlation information), "
                "the 1 + sin(ks)/k activation and He ReLU depth; NLC, GVCS, gradient length, "
                "Lipschitz constant and test error of each",
    differences=DIFFERENCES,
    small_runtime="~15 s",
    compute=compute,
    plot=plot,
    claim=("Scaling the input or the output, duplicating the input dimensions and adding a bias "
           "to the input move the gradient vector component size (and gradient length, "
           "Lipschitz constant, correlation information as stated) but neither the NLC nor the "
           "test error after training; for 1 + sin(ks)/k activations and deeper He-initialized "
           "ReLU networks the NLC grows while the GVCS stays stable (section 6)."),
    judge=judge,
    n_seeds=3,
)
