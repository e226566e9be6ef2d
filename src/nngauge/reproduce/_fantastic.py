"""``fantastic``: Jiang et al.'s generalization-measure benchmark at CPU scale, on MNIST-1D.

Jiang, Neyshabur, Mobahi, Krishnan and Bengio ("Fantastic Generalization Measures and Where
to Find Them", ICLR 2020) trained a grid of networks over seven hyperparameters, each to the
same training cross-entropy, and scored every measure by how it ranks the networks'
generalization gaps: Kendall's tau, the granulated Kendall coefficient Psi per hyperparameter
and their conditional mutual information (sections 5-6). This reproduction trains a model
zoo of the same design (:mod:`nngauge.studies`: a ``[grid]`` of fully-connected, 1-D
convolutional and residual networks on MNIST-1D, Greydanus and Kobak, ICML 2024), measures
every network at initialization and after training with nngauge's measures (Jiang et al.'s
norms, distance from initialization and sigma-search flatness; Neyshabur et al.'s
capacities; the layer spectra of Martin and Mahoney; the NLC; the zero-cost proxies), scores
them with :func:`nngauge.studies.score_measures` per seed, and judges the claims of
:mod:`nngauge.reproduce._fantastic_claims` at each of three seeds.

Files: ``fantastic.csv`` (a row per seed and measure: the scores and their intervals),
``fantastic.png`` (seed 0's ranking), ``fantastic.html`` (the ranking with intervals, a
scatter of every measure against the gap, Psi per hyperparameter) and ``README.md``.
"""

from __future__ import annotations

import html
import math
import tempfile
from pathlib import Path

import torch

from nngauge._citations import cite
from nngauge._random import seed_of
from nngauge.report._figures import png_data_uri
from nngauge.reproduce._base import (
    Comparison,
    Computed,
    Reproduction,
    Verdict,
    run_reproduction_study,
)
from nngauge.reproduce._fantastic_claims import judge_claims

N_SEEDS = 3
"""Replicates of the whole zoo; each claim is judged at each and counted."""
TARGET = "gap"
"""The generalization gap: training accuracy - test accuracy (Jiang et al., PGDL)."""
AT_INIT = ("nlc", "n_params", "synflow", "naswot", "jacob_cov", "grad_norm", "zico",
           "zen_score", "layer_spectra")
"""The measures taken at initialization (the NLC paper's and the zero-cost proxies' setting)."""
AFTER_TRAINING = ("norm_measures", "distance_from_init", "flatness", "gradient_noise",
                  "layer_spectra", "nlc")
"""The measures taken after training (Jiang et al.'s setting; columns ``<name>_after``)."""
MEASURE_OPTIONS = {"flatness": {"n_iter": 8}}
"""The sigma search's halvings: 8 narrow the bracket [s, 2 s] to 2**-8 = 0.4% of sigma
(0.8% of the flatness 1/sigma^2), where the flatness of the zoo's networks spans four orders
of magnitude (23 to 3e5 on seed 0's) and its Monte Carlo estimate moves by more than that
0.8% between probe draws; the default 20 cost 2.4 times the evaluations (flatness was 68% of
the CPU time of a network with every measure)."""
SCALES = {"small": ("default", 2), "paper": ("paper", 0)}
"""Reproduction scale -> (:func:`nngauge.studies.zoo_spec` scale, worker processes; 0: every
CPU, or ``--ray ADDRESS`` for a cluster)."""

NETWORKS_CSV = "fantastic_networks.csv"
"""The zoo, one row a network and seed (:func:`nngauge.studies.network_table`), written beside
the page."""
COLUMNS = ("seed", "measure", "n", "tau", "tau_low", "tau_high", "psi", "psi_low",
           "psi_high", "cmi", "cmi_low", "cmi_high", "cmi_condition", "sign_error",
           "sign_error_p90", "sign_error_mean")


OPTIMIZATION = ("steps_to_0_1", "steps_0_1_to_0_01")
"""The record's columns scored as measures: Jiang et al.'s optimization-based measures
(section 5, "step.to.0.1" and "step.0.1.to.0.01"), scored over the networks that reached the
loss (the count is each row's n)."""


def measure_columns(table) -> list[str]:
    """The table's measure columns: every numeric column after the record, and the record's
    :data:`OPTIMIZATION` columns, with at least two distinct finite values (a constant column
    ranks nothing)."""
    from nngauge.studies._grid import HYPERPARAMETERS
    from nngauge.studies._zoo import RECORD

    skip = {"key", "network", "seed", "seconds", *HYPERPARAMETERS,
            *(set(RECORD) - set(OPTIMIZATION))}
    out = []
    for column in table.columns:
        if column in skip or table[column].dtype.kind not in "fiu":
            continue
        values = table[column].astype(float)
        if values[values.map(math.isfinite)].nunique() >= 2:
            out.append(column)
    return out


def score_zoo(table, seed: int):
    """Each seed's ranking (:class:`~nngauge.studies.MeasureScores`, conditioned on the
    hyperparameters the grid varies) and its Kendall taus against the test error:
    ([scores], [{column: KendallTau}])."""
    from nngauge.studies import kendall_tau, score_measures

    varied = table.attrs["hyperparameters"]
    rankings, taus = [], []
    for replicate in sorted(table["seed"].unique()):
        part = table[table["seed"] == replicate].reset_index(drop=True)
        columns = measure_columns(part)
        rankings.append(score_measures(part, columns, TARGET, varied, generator=seed))
        taus.append({c: kendall_tau(part, c, "test_error", generator=seed) for c in columns})
    return rankings, taus


def compute(scale: str, generator: torch.Generator) -> Computed:
    """Train the zoo at :data:`N_SEEDS` seeds, measure, score and judge (module docstring)."""
    from nngauge.studies import network_table, zoo_spec

    zoo_scale, workers = SCALES[scale]
    seed = seed_of(generator)
    spec = zoo_spec(zoo_scale, seeds=range(N_SEEDS), measures=AT_INIT,
                    measure_after=AFTER_TRAINING, measure_options=MEASURE_OPTIONS,
                    name=f"fantastic-{scale}", seed=seed)
    with tempfile.TemporaryDirectory(prefix="fantastic-") as folder:
        url = f"sqlite:///{Path(folder) / 'zoo.db'}"
        failed = run_reproduction_study(spec, url, workers).failed
        table = network_table(url)
    return computed_from(table, seed, failed=len(failed))


def rescore(path, seed: int = 0) -> Computed:
    """The scores, claims and verdict inputs of a run's :data:`NETWORKS_CSV` (its zoo, one row
    a network and seed), computed again: e.g. after a change to the scoring."""
    import pandas as pd

    from nngauge.studies._grid import HYPERPARAMETERS

    table = pd.read_csv(path)
    table.attrs["hyperparameters"] = [h for h in HYPERPARAMETERS if table[h].nunique() > 1]
    return computed_from(table, seed)


def computed_from(table, seed: int, *, failed: int = 0) -> Computed:
    """The CSV rows, comparisons and claims of a trained zoo's table
    (:func:`nngauge.studies.network_table`)."""
    rankings, taus = score_zoo(table, seed)
    frames = [r.to_frame() for r in rankings]
    rows = tuple((replicate, *(row[c] for c in COLUMNS[1:]))
                 for replicate, frame in enumerate(frames)
                 for row in frame.to_dict("records"))
    verdicts = judge_claims(frames, taus)
    first = frames[0].iloc[0]
    comparison = (
        Comparison("networks per seed", float(len(table) / table["seed"].nunique()), None,
                   f"{failed} failed units; gap mean {table[TARGET].mean():.3f}",
                   key="networks"),
        Comparison(f"best measure by Psi (seed 0): {first['measure']}", float(first["psi"]),
                   None, f"tau {first['tau']:.3f}, CMI {first['cmi']:.3f}", key="best_psi",
                   statistic="kendall"),
        *(Comparison(v.claim, float(v.agree), None, f"{v.status}: seeds agreeing of "
                     f"{len(v.checks)}", key=f"claim_{i}")
          for i, v in enumerate(verdicts)),
    )
    return Computed(columns=COLUMNS, rows=rows, comparison=comparison,
                    extra={"table": table, "rankings": rankings, "claims": verdicts})


def judge(computed: Computed) -> Verdict:
    """Reproduced when every claim holds at a majority of seeds; qualitatively when most do;
    else differs. The reason states each claim's seeds and numbers."""
    verdicts = computed.extra["claims"]
    reproduced = sum(v.status == "reproduced" for v in verdicts)
    reason = " ".join(f"({i + 1}) {v.sentence()}." for i, v in enumerate(verdicts))
    if reproduced == len(verdicts):
        return Verdict("reproduced", reason)
    if reproduced > len(verdicts) / 2:
        return Verdict("qualitatively", f"{reproduced} of {len(verdicts)} claims reproduced. "
                       + reason)
    return Verdict("differs", f"{reproduced} of {len(verdicts)} claims reproduced. " + reason)


def plot(computed: Computed, figure) -> None:
    computed.extra["rankings"][0].plot(figure.subplots())


def write_page(computed: Computed, folder: Path) -> Path:
    """``fantastic.html``: one self-contained page (figures inlined, no script): the verdict per
    claim, seed 0's ranking with intervals, Psi per hyperparameter, and a scatter of every
    measure against the gap."""
    table, rankings = computed.extra["table"], computed.extra["rankings"]
    frame = rankings[0].to_frame()
    part = table[table["seed"] == sorted(table["seed"].unique())[0]]
    varied = [c[4:-1] for c in frame.columns if c.startswith("psi[")]

    def number(value) -> str:
        return "-" if value is None or (isinstance(value, float) and not math.isfinite(value)) \
            else f"{value:.3f}"

    head = ("<tr><th>measure</th><th>tau [95%]</th><th>Psi [95%]</th>"
            + "".join(f"<th>Psi {html.escape(h)}</th>" for h in varied)
            + "<th>CMI [95%]</th><th>sign-error</th></tr>")
    body = "".join(
        f"<tr><td>{html.escape(r['measure'])}</td>"
        f"<td>{number(r['tau'])} [{number(r['tau_low'])}, {number(r['tau_high'])}]</td>"
        f"<td>{number(r['psi'])} [{number(r['psi_low'])}, {number(r['psi_high'])}]</td>"
        + "".join(f"<td>{number(r[f'psi[{h}]'])}</td>" for h in varied)
        + f"<td>{number(r['cmi'])} [{number(r['cmi_low'])}, {number(r['cmi_high'])}]</td>"
        f"<td>{number(r['sign_error'])}</td></tr>" for r in frame.to_dict("records"))
    claims = "".join(f"<li>{html.escape(v.sentence())}</li>" for v in computed.extra["claims"])

    def scatter(column):
        def draw(ax):
            ax.scatter(part[column], part[TARGET], s=6)
            ax.set_xlabel(column, fontsize=7)
            ax.set_ylabel("gap", fontsize=7)
            ax.tick_params(labelsize=6)
        return draw

    figures = "".join(f'<img alt="{html.escape(c)}" '
                      f'src="{png_data_uri(scatter(c), size=(3.2, 2.6))}">'
                      for c in frame["measure"])
    page = (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>fantastic</title>"
            "<style>body{font-family:system-ui,sans-serif;max-width:1200px;margin:2em auto}"
            "table{border-collapse:collapse;font-size:.85em}td,th{border:1px solid #ddd;"
            "padding:2px 6px}img{margin:2px}</style></head><body>"
            f"<h1>Generalization measures on a model zoo (MNIST-1D)</h1>"
            f"<p>{html.escape(cite('fantastic', 'sections 5-7'))}: scored at "
            f"{len(rankings)} seeds, {len(part)} networks each, target: the generalization "
            "gap (training accuracy - test accuracy).</p>"
            f"<h2>Claims</h2><ul>{claims}</ul>"
            f"<h2>Ranking (seed 0), by Psi</h2><table>{head}{body}</table>"
            f"<p>Every network, hyperparameters, record and measures: "
            f"<a href='{NETWORKS_CSV}'>{NETWORKS_CSV}</a> (rescored by "
            "<code>nngauge.reproduce._fantastic.rescore(path)</code>).</p>"
            f"<h2>Every measure against the gap (seed 0)</h2>{figures}</body></html>")
    path = folder / "fantastic.html"
    path.write_text(page, encoding="utf-8")
    table.to_csv(folder / NETWORKS_CSV, index=False)
    return path


REPRODUCTION = Reproduction(
    name="fantastic",
    paper=cite("fantastic"),
    target="sections 5-7 (the ranking of measures by Kendall's tau, Psi and CMI)",
    description="a model zoo (MLPs, 1-D CNNs and residual CNNs over a hyperparameter grid) "
                "trained on MNIST-1D to the same training cross-entropy; every nngauge "
                "measure at initialization and after training, scored against the "
                "generalization gap at three seeds",
    differences={
        "small": (
            "MNIST-1D (500 training samples) instead of CIFAR-10 / SVHN; nngauge.studies."
            "zoo_spec('default'): 3 families x 2 depths x 2 widths x batch norm x 2 weight "
            "decays x 2 rates x 2 batch sizes = 192 networks a seed instead of 2,187; training "
            "stops at cross-entropy 0.01 or 2,000 steps (the stop reason is recorded per "
            "network)",
            "the flatness' sigma search halves its bracket 8 times (relative precision 0.4%; "
            "Jiang et al. stop at a deviation within 0.01 of the target)",
        ),
        "paper": (
            "MNIST-1D instead of CIFAR-10 / SVHN; zoo_spec('paper'): 2,304 networks a seed, "
            "every hyperparameter varied: --ray ADDRESS",
            "the flatness' sigma search halves its bracket 8 times (relative precision 0.4%)",
        ),
    },
    small_runtime="~55 min",
    compute=compute,
    plot=plot,
    claim="Flatness and PAC-Bayes measures predict the generalization gap best; products of "
          "spectral norms and the parameter count do not (Jiang et al., sections 6-7); the "
          "NLC at initialization predicts the test error (Philipp and Carbonell, section 4); "
          "norm-based capacities over the margin grow with the gap (Neyshabur et al., "
          "section 2).",
    judge=judge,
    pages=write_page,
)
