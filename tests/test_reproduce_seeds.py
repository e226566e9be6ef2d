"""Reproductions at several seeds (issue 36): each seed computed and judged, the majority's
verdict with how many seeds agree, each printed value's spread, ``NAME_seeds.csv``, the index's
per-seed column and ``nngauge reproduce --seeds``. A planted reproduction whose claim fails at
one seed of three stands for the real ones (each real command's own tests run it)."""

import csv
from dataclasses import replace

import pytest
import torch

from nngauge.errors import InvalidInputError
from nngauge.reproduce import REPRODUCTIONS
from nngauge.reproduce._base import Comparison, Computed, Reproduction, Verdict
from nngauge.reproduce._index import write_index
from nngauge.reproduce._seeds import SeedOutcome, majority_verdict, spread

FAILING_SEED = 1


def _compute(scale, generator):
    """One draw from the seeded generator; the claim "the value is positive" fails at
    FAILING_SEED (its value is negated there)."""
    seed = generator.initial_seed()
    draw = float(torch.rand((), generator=generator)) + 0.1
    ours = -draw if seed == FAILING_SEED else draw
    return Computed(columns=("seed", "value"), rows=((seed, ours),),
                    comparison=(Comparison("the value", ours, key="value"),
                                Comparison("the seed", float(seed), key="seed")))


def _judge(computed):
    ours = computed.compared("value").ours
    return Verdict("reproduced" if ours > 0 else "differs", f"the value is {ours:.3g}")


def _plot(computed, figure):
    figure.subplots().plot(computed.column("value"))


PLANTED = Reproduction(
    name="planted-seeds", paper="nobody", target="Figure 0", description="a planted draw",
    differences={"small": ("planted",), "paper": ("planted",)}, small_runtime="~1 s",
    compute=_compute, plot=_plot, claim="The value is positive at every seed.", judge=_judge,
    n_seeds=3)


def _outcome(seed, status, software=False, ours=1.0):
    computed = Computed(columns=(), rows=(), comparison=(Comparison("v", ours, key="v"),))
    return SeedOutcome(seed, computed, Verdict(status, f"seed {seed}", software_check=software))


def test_majority_counts_agreement_and_takes_the_weakest_status_on_a_tie():
    two = majority_verdict([_outcome(0, "reproduced"), _outcome(1, "differs"),
                            _outcome(2, "reproduced")])
    assert two.status == "reproduced"
    assert two.reason.startswith("2 of 3 seeds agree on reproduced: seed 0 reproduced, "
                                 "seed 1 differs, seed 2 reproduced. Seed 0: ")
    tied = majority_verdict([_outcome(0, "reproduced"), _outcome(1, "qualitatively"),
                             _outcome(2, "differs")])
    assert tied.status == "differs" and tied.reason.startswith("1 of 3 seeds agree")
    assert majority_verdict([_outcome(0, "reproduced"), _outcome(1, "qualitatively")]
                            ).status == "qualitatively"
    one = _outcome(4, "differs")
    assert majority_verdict([one]) is one.verdict
    assert majority_verdict([_outcome(0, "reproduced", True), _outcome(1, "reproduced", True)]
                            ).software_check
    assert not majority_verdict([_outcome(0, "reproduced", True),
                                 _outcome(1, "reproduced")]).software_check
    assert majority_verdict([replace(one, verdict=None)]) is None


def test_spread_is_the_range_of_the_finite_values():
    outcomes = [_outcome(0, "reproduced", ours=0.2), _outcome(1, "reproduced", ours=-0.5),
                _outcome(2, "reproduced", ours=float("nan"))]
    assert spread(outcomes, "v") == (-0.5, 0.2)
    assert spread(outcomes[:1], "v") is None
    assert spread(outcomes, "absent") is None


@pytest.fixture(scope="module")
def three_seeds(tmp_path_factory):
    return PLANTED.run(tmp_path_factory.mktemp("seeds"), generator=0)


def test_a_statistical_reproduction_runs_its_default_seeds_and_states_the_majority(
        three_seeds):
    result = three_seeds
    assert [o.seed for o in result.per_seed] == [0, 1, 2]
    assert [o.status for o in result.per_seed] == ["reproduced", "differs", "reproduced"]
    assert result.verdict.status == "reproduced"
    assert "2 of 3 seeds agree" in result.verdict.reason
    assert result.computed is result.per_seed[0].computed  # files and values: the first seed
    values = [o.computed.compared("value").ours for o in result.per_seed]
    assert result.spread("value") == (min(values), max(values))
    with open(result.seeds_csv_path, newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    assert [(int(r["seed"]), r["verdict"], r["key"]) for r in rows] == [
        (0, "reproduced", "value"), (0, "reproduced", "seed"), (1, "differs", "value"),
        (1, "differs", "seed"), (2, "reproduced", "value"), (2, "reproduced", "seed")]
    assert [float(r["ours"]) for r in rows if r["key"] == "value"] == values
    readme = result.readme_path.read_text(encoding="utf-8")
    assert "--seed 0 --seeds 3" in readme and "| quantity | ours | over seeds |" in readme
    assert "2 of 3 seeds agree on reproduced" in readme
    assert result.to_dict()["per_seed"][1]["verdict"]["status"] == "differs"


def test_one_seed_and_a_callers_generator_run_once(tmp_path):
    once = PLANTED.run(tmp_path / "one", generator=1, n_seeds=1)
    assert once.verdict.status == "differs" and once.seeds_csv_path is None
    assert "over seeds" not in once.readme_path.read_text(encoding="utf-8")
    seeded = PLANTED.run(tmp_path / "gen", generator=torch.Generator().manual_seed(0))
    assert [o.seed for o in seeded.per_seed] == [None]


@pytest.mark.parametrize("bad", [0, -1, 1.5, True])
def test_a_bad_seed_count_is_refused(tmp_path, bad):
    with pytest.raises(InvalidInputError, match="seeds"):
        PLANTED.run(tmp_path, n_seeds=bad)


def test_several_seeds_need_an_int_seed(tmp_path):
    with pytest.raises(InvalidInputError, match="torch.Generator"):
        PLANTED.run(tmp_path, generator=torch.Generator().manual_seed(0), n_seeds=3)


def test_the_index_lists_each_seeds_verdict(three_seeds, tmp_path, monkeypatch):
    monkeypatch.setitem(REPRODUCTIONS, PLANTED.name, PLANTED)
    page = write_index([three_seeds], three_seeds.csv_path.parent).read_text(encoding="utf-8")
    assert "<th>per seed</th>" in page
    assert "0 reproduced, 1 differs, 2 reproduced" in page
    assert "<th>over seeds</th>" in page and "planted-seeds_seeds.csv" in page
    with open(three_seeds.csv_path.parent / "verdicts.csv", newline="", encoding="utf-8") as f:
        (row,) = list(csv.DictReader(f))
    assert (row["name"], row["verdict"], row["per_seed"], row["agree"], row["seeds"]) == (
        "planted-seeds", "reproduced", "0 reproduced; 1 differs; 2 reproduced", "2", "3")
    assert row["command"] == "nngauge reproduce planted-seeds --scale small --seed 0 --seeds 3"


def test_the_cli_takes_seeds_and_prints_the_spread(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from nngauge.cli import app

    monkeypatch.setitem(REPRODUCTIONS, PLANTED.name, PLANTED)
    done = CliRunner().invoke(app, ["reproduce", PLANTED.name, "--seeds", "2", "--out",
                                    str(tmp_path)], env={"COLUMNS": "200"})
    assert done.exit_code == 0, done.output
    assert "spread over 2 seeds" in done.output and "over seeds" in done.output
    assert "1 of 2 seeds agree on differs" in done.output
    assert (tmp_path / "planted-seeds_seeds.csv").exists()
    refused = CliRunner().invoke(app, ["reproduce", PLANTED.name, "--seeds", "0"])
    assert refused.exit_code == 2


STATISTICAL_EXCEPTIONS = {
    "shrinkage-critical": "closed forms against quadrature: draws nothing at random",
    "conditioning-mu-table": "closed forms against quadrature: draws nothing at random",
    "fantastic": "judges each claim at three seeds inside its own run (55 min a seed)",
}


def test_every_reproduction_that_draws_at_random_runs_three_seeds_by_default():
    """Three seeds by default for every statistical reproduction; the exceptions are named
    with their reason, and section 4's and the NLC figures' commands are among the three-seed
    ones (issue 36's acceptance)."""
    for name, record in REPRODUCTIONS.items():
        assert record.n_seeds == (1 if name in STATISTICAL_EXCEPTIONS else 3), name
    for name in ("nlc-figure2", "nlc-figure3", "nlc-figure9", "nlc-figure10", "predictors"):
        assert REPRODUCTIONS[name].n_seeds == 3


TINY_STUDY = ({
    "data": {"source": "waveform", "n": 200, "split": [0.6, 0.2, 0.2]},
    "architectures": {"sample": 10, "overrides": {"width": 8}},
    "measures": {"names": ["nlc"], "batch_size": 50},
    "training": {"lrs": [0.1], "batch_size": 30, "max_epochs": 1,
                 "measure_after": ["nlc", "error_preserving_perturbation"]},
}, 2)


@pytest.mark.slow
def test_the_nlc_figures_agree_over_three_seeds_of_one_study_each(tmp_path, monkeypatch):
    """nlc-figure2, 3, 9 and 10 at their default three seeds on a tiny study (10 sampled
    architectures, one epoch): each figure judged at seeds 0, 1 and 2, the verdict the
    majority's with how many agree, and each seed's study run once for the four figures."""
    from nngauge.reproduce import _nlc_study

    calls = []
    real = _nlc_study.study_points
    monkeypatch.setitem(_nlc_study.SETTINGS, "small", TINY_STUDY)
    monkeypatch.setattr(_nlc_study, "study_points",
                        lambda *args: calls.append(args[-1]) or real(*args))
    _nlc_study.run.cache_clear()
    try:
        for name in ("nlc-figure2", "nlc-figure3", "nlc-figure9", "nlc-figure10"):
            result = REPRODUCTIONS[name].run(tmp_path / name, generator=0)
            statuses = [o.status for o in result.per_seed]
            assert [o.seed for o in result.per_seed] == [0, 1, 2], name
            agree = statuses.count(result.verdict.status)
            assert agree == max(map(statuses.count, statuses)), name
            assert result.verdict.reason.startswith(
                f"{agree} of 3 seeds agree on {result.verdict.status}: seed 0 {statuses[0]}, "
                f"seed 1 {statuses[1]}, seed 2 {statuses[2]}"), name
            assert "--seeds 3" in result.readme_path.read_text(encoding="utf-8")
            assert result.seeds_csv_path.exists()
    finally:
        _nlc_study.run.cache_clear()
    assert len(calls) == len(set(calls)) == 3  # one study per seed, shared by the figures
