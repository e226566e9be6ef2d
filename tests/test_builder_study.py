"""Studies over a user's builder (nngauge.studies._builder): a family nngauge does not ship
(tests/user_family.py: a small transformer classifier), its data and its training loop."""

import math
from pathlib import Path

import pandas as pd
import pytest
import torch

from nngauge.data._sources import load_data
from nngauge.errors import InvalidInputError, NNGaugeError
from nngauge.studies import granulated_kendall, load_table, parse_spec, run_study, summarize

FAMILY = Path(__file__).with_name("user_family.py")


def spec_of(grid=None, *, train="train", measures=("n_params", "nlc"), **extra):
    architectures = {"builder": f"{FAMILY}:build"}
    architectures.update({"grid": grid} if grid is not None else extra.pop("architectures"))
    training = {"train": f"{FAMILY}:{train}", "config": {"epochs": 1}} if train else \
        extra.pop("training", {"max_steps": 5})
    return parse_spec({"name": "family", "data": {"source": f"{FAMILY}:data",
                                                  "preprocess": "none", "split": [0.75, 0.25]},
                       "architectures": architectures, "measures": {"names": list(measures)},
                       "training": training, **extra})


@pytest.fixture(scope="module")
def grid_study(tmp_path_factory):
    url = "sqlite:///" + str(tmp_path_factory.mktemp("builder") / "study.db")
    spec = spec_of({"depth": [1, 2], "heads": [1, 2]})
    first = run_study(spec, url, workers=2)
    again = run_study(spec, url, workers=1)
    return spec, url, first, again, load_table(url)


def test_every_grid_point_is_one_row_with_its_arguments_as_columns(grid_study):
    spec, url, first, _, table = grid_study
    assert first.ran == 4 and not first.failed
    assert len(table) == 4
    assert sorted(zip(table.depth, table.heads)) == [(1, 1), (1, 2), (2, 1), (2, 2)]
    assert table.attrs["hyperparameters"] == ["depth", "heads"]
    assert table.attrs["kind"] == "builder" and table.attrs["name"] == "family"
    assert table.error.isna().all() and table.stage.isna().all()
    for row in table.itertuples():  # the measures are of the networks the builder builds
        from tests.user_family import build

        model = build(row.depth, row.heads)
        assert row.n_params == sum(p.numel() for p in model.parameters())
        assert math.isfinite(row.nlc) and row.nlc > 0
        assert 0 <= row.test_accuracy <= 1
        assert row.test_error == pytest.approx(1 - row.test_accuracy)
        assert row.epochs == 1


def test_a_rerun_resumes(grid_study):
    _, _, _, again, table = grid_study
    assert (again.ran, again.skipped, again.total) == (0, 4, 4)
    assert len(table) == 4


def test_the_table_feeds_the_scoring_and_the_summary(grid_study):
    _, url, _, _, table = grid_study
    scored = granulated_kendall(table, "n_params", "test_error", ["depth", "heads"],
                                n_resamples=20)
    assert set(scored.per_hyperparameter) == {"depth", "heads"}
    summary = summarize(url)
    assert len(summary.points) == 4
    assert {c.measure for c in summary.correlations} >= {"n_params", "nlc"}
    assert all(c.n == 4 for c in summary.correlations)


def test_a_failing_builder_call_is_that_rows_error(tmp_path):
    url = f"sqlite:///{tmp_path / 'study.db'}"
    spec = spec_of({"depth": [0, 1], "heads": [1]}, measures=("n_params",))
    summary = run_study(spec, url, workers=1)
    assert summary.ran == 2 and not summary.failed  # recorded, not a failed unit
    table = load_table(url).set_index("depth")
    assert table.loc[0, "stage"] == "build"
    assert table.loc[0, "error"] == "ValueError: depth must be >= 1"
    assert math.isnan(table.loc[0, "n_params"]) and math.isnan(table.loc[0, "test_accuracy"])
    assert pd.isna(table.loc[1, "error"]) and table.loc[1, "n_params"] > 0
    assert run_study(spec, url, workers=1).skipped == 2


def test_a_failing_train_function_keeps_the_measures(tmp_path):
    url = f"sqlite:///{tmp_path / 'study.db'}"
    run_study(spec_of({"depth": [1], "heads": [1]}, train="train_fails",
                      measures=("n_params",)), url, workers=1)
    row = load_table(url).iloc[0]
    assert row.stage == "train" and row.error == "RuntimeError: out of memory (planted)"
    assert row.n_params > 0


def test_nngauge_fit_trains_when_there_is_no_train_function(tmp_path):
    url = f"sqlite:///{tmp_path / 'study.db'}"
    run_study(spec_of({"depth": [1], "heads": [1]}, train=None, measures=("n_params",),
                      training={"max_steps": 3, "lr": 0.01, "optimizer": "adam"}), url,
              workers=1)
    row = load_table(url).iloc[0]
    assert row.steps == 3 and 0 <= row.test_accuracy <= 1
    assert row.gap == pytest.approx(row.test_error - row.train_error)


def test_the_sampler_draws_distinct_seeded_points():
    space = {"depth": {"low": 1, "high": 4}, "heads": [1, 2],
             "width": {"low": 8, "high": 64, "log": True}}
    spec = spec_of(architectures={"sample": 6, "space": space})
    points = spec.builder.points(spec.seed)
    assert len(points) == 6 and len({repr(p) for p in points}) == 6
    assert all(1 <= p["depth"] <= 4 and isinstance(p["depth"], int) for p in points)
    assert all(8 <= p["width"] <= 64 and p["heads"] in (1, 2) for p in points)
    assert spec_of(architectures={"sample": 6, "space": space}).builder.points(0) == points
    assert spec_of(architectures={"sample": 6, "space": space}, seed=1).builder.points(1) \
        != points
    small = spec_of(architectures={"sample": 5, "space": {"heads": [1, 2]}})
    assert len(small.builder.points(0)) == 2  # the space holds two


def test_the_study_id_follows_the_builders_file(tmp_path):
    copy = tmp_path / "family.py"
    copy.write_text(FAMILY.read_text())
    first = parse_spec({"architectures": {"builder": f"{copy}:build",
                                          "grid": {"depth": [1], "heads": [1]}}})
    copy.write_text(FAMILY.read_text() + "\n# edited\n")
    second = parse_spec({"architectures": {"builder": f"{copy}:build",
                                           "grid": {"depth": [1], "heads": [1]}}})
    assert first.study_id != second.study_id


@pytest.mark.parametrize("architectures, message", [
    ({"builder": "missing.py:build", "grid": {"depth": [1]}}, "not found"),
    ({"builder": f"{FAMILY}", "grid": {"depth": [1]}}, "after a colon"),
    ({"builder": f"{FAMILY}:nothing", "grid": {"depth": [1]}}, "a function 'nothing'"),
    ({"builder": f"{FAMILY}:build", "grid": {"layers": [1]}}, "builder's keyword arguments"),
    ({"builder": f"{FAMILY}:build", "grid": {"depth": []}}, "non-empty list"),
    ({"builder": f"{FAMILY}:build", "grid": {"depth": [1, 1]}}, "distinct values"),
    ({"builder": f"{FAMILY}:build"}, "neither"),
    ({"builder": f"{FAMILY}:build", "grid": {"depth": [1]}, "sample": 2,
      "space": {"heads": [1]}}, "both"),
    ({"builder": f"{FAMILY}:build", "sample": 2, "space": {"depth": {"low": 4, "high": 2}}},
     "low < high"),
    ({"builder": f"{FAMILY}:build", "sample": 2, "space": {"depth": {"low": 1}}},
     "a range {low, high"),
    ({"builder": f"{FAMILY}:build", "sample": 2, "space": {"size": [1]}},
     "builder's keyword arguments"),
    ({"builder": f"{FAMILY}:build", "family": "mlp", "grid": {"depth": [1]}}, "not known"),
])
def test_bad_builder_specs_are_refused_in_one_line(architectures, message):
    with pytest.raises(NNGaugeError) as caught:
        parse_spec({"architectures": architectures})
    assert message in str(caught.value) and "\n" not in str(caught.value)
    assert "Fix:" in str(caught.value)


def test_bad_training_sections_are_refused():
    with pytest.raises(InvalidInputError, match="either train"):
        parse_spec({"architectures": {"builder": f"{FAMILY}:build", "grid": {"depth": [1]}},
                    "training": {"train": f"{FAMILY}:train", "lr": 0.1}})
    with pytest.raises(InvalidInputError, match="config is that function's"):
        parse_spec({"architectures": {"builder": f"{FAMILY}:build", "grid": {"depth": [1]}},
                    "training": {"config": {"epochs": 2}}})
    with pytest.raises(InvalidInputError, match="training.lr"):
        parse_spec({"architectures": {"builder": f"{FAMILY}:build", "grid": {"depth": [1]}},
                    "training": {"lr": -1}})


def test_data_functions_may_return_tensors_a_dataset_or_a_loader(tmp_path):
    pair = load_data(f"{FAMILY}:data")
    dataset = load_data(f"{FAMILY}:dataset")
    loader_file = tmp_path / "loader.py"
    loader_file.write_text(
        "import torch\nimport importlib.util\n"
        f"spec = importlib.util.spec_from_file_location('fam', {str(FAMILY)!r})\n"
        "fam = importlib.util.module_from_spec(spec); spec.loader.exec_module(fam)\n"
        "def loader():\n"
        "    return torch.utils.data.DataLoader(fam.dataset(), batch_size=64)\n"
        "def broken():\n    raise OSError('no such folder')\n"
        "def nothing():\n    return 3\n")
    loaded = load_data(f"{loader_file}:loader")
    for other in (dataset, loaded):
        assert torch.equal(other.inputs, pair.inputs) and torch.equal(other.labels, pair.labels)
    assert pair.inputs.shape == (400, 64)
    with pytest.raises(InvalidInputError, match="it raised OSError: no such folder"):
        load_data(f"{loader_file}:broken")
    with pytest.raises(InvalidInputError, match="returned int"):
        load_data(f"{loader_file}:nothing")


def test_the_study_report_renders_in_headless_chromium_with_its_figures(grid_study, tmp_path):
    """`nngauge study report DB --out study.html`: every section, one scatter per measure
    and the granulated chart, loaded offline by Chromium without a console error."""
    import re
    import subprocess
    import sys

    from tests.browser_checks import console_errors, run_chromium

    _, url, _, _, table = grid_study
    page = tmp_path / "study.html"
    done = subprocess.run([sys.executable, "-m", "nngauge", "study", "report", url, "--out",
                           str(page), "--n-resamples", "20"], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    text = page.read_text(encoding="utf-8")
    for section in ("Predictors", "Measures against the target", "Granulated view",
                    "Best and worst by test_error", "Failures"):
        assert f"<h2>{section}</h2>" in text
    assert not re.search(r"(src|href)=\"https?://", text)
    result = run_chromium(page, "--dump-dom")
    assert result.returncode == 0, result.stderr
    assert console_errors(result.stderr) == []
    images = re.findall(r'<img alt="([^"]+)" src="data:image/png;base64,', result.stdout)
    assert sorted(images) == ["granulated Kendall per hyperparameter",
                              "n_params against test_error", "nlc against test_error",
                              "output_bias against test_error"]
    assert result.stdout.count("<tr><td>nlc</td><td>4</td>") == 1  # the predictor row


def test_the_study_page_scores_what_the_scoring_functions_compute(grid_study):
    """The page's tau for a measure is kendall_tau's on the same rows."""
    from nngauge.report._study_page import study_page
    from nngauge.studies import kendall_tau

    _, _, _, _, table = grid_study
    page = study_page(table, measures=["n_params"], n_resamples=20)
    tau = kendall_tau(table, "n_params", "test_error", n_resamples=20)
    assert f"<td>{tau.tau:+.3f} [{tau.low:+.2f}, {tau.high:+.2f}]</td>" in page
    with pytest.raises(InvalidInputError, match="target a column"):
        study_page(table, target="accuracy")
    with pytest.raises(InvalidInputError, match="measure columns"):
        study_page(table, measures=["sharpness"])


def test_the_predictor_table_orders_by_psi_in_each_measures_known_direction():
    """A measure falling with the error whose known direction says "larger is better" ranks
    first; the same numbers under a measure whose direction says "larger is worse" rank below
    an uninformative one; a measure of no known direction comes after those of known ones."""
    import numpy as np

    from nngauge.report._study_page import expected_sign, predictor_order
    from nngauge.studies import score_measures

    rng = np.random.default_rng(0)
    a, b = np.meshgrid(np.arange(4), np.arange(4))
    error = (a + b).ravel() / 6 + 0.01 * rng.standard_normal(16)
    table = pd.DataFrame({"a": a.ravel(), "b": b.ravel(), "test_error": error,
                          "n_params": -error, "te_nas": -error,
                          "flops": rng.standard_normal(16), "custom": error})
    scores = score_measures(table, ["te_nas", "flops", "custom", "n_params"], "test_error",
                            ["a", "b"], n_resamples=20)
    assert expected_sign("n_params") == -1 and expected_sign("te_nas") == 1
    assert expected_sign("n_params_after") == -1 and expected_sign("custom") is None
    assert [row.name for row in predictor_order(scores)] == ["n_params", "flops", "te_nas",
                                                             "custom"]


def test_the_example_spec_plans_eight_candidates_of_two_seeds(monkeypatch):
    """examples/study_builder.toml (the README's command) parses from the repository root and
    plans its grid's 2 x 2 x 2 candidates at 2 seeds; its train function returns metrics."""
    from nngauge.studies import load_spec, plan_units

    root = Path(__file__).resolve().parents[1]
    monkeypatch.chdir(root)
    spec = load_spec(root / "examples" / "study_builder.toml")
    assert spec.builder.keys == ("depth", "width", "skip")
    assert len(plan_units(spec)) == 16


@pytest.mark.slow
def test_the_ray_executor_stores_the_same_candidates(grid_study, tmp_path, local_ray):
    """`--executor ray`: the same rows in the same database layout as the process pool's
    (the user's builder, data and train functions load in Ray's workers)."""
    spec, local_url, _, _, local = grid_study
    ray_url = f"sqlite:///{tmp_path / 'ray.db'}"
    summary = run_study(spec, ray_url, executor="ray")
    assert summary.failed == {} and summary.ran == 4
    remote = load_table(ray_url)
    columns = [c for c in local.columns if c != "seconds"]
    pd.testing.assert_frame_equal(local[columns], remote[columns])


def test_the_study_report_of_an_architectures_study_scores_kendalls_tau(tmp_path):
    """A study of listed architectures (no grid): one row per architecture and seed, its best
    run's test error; the predictor table holds Kendall's tau alone and says why."""
    from nngauge.report._study_page import study_page, study_table

    url = f"sqlite:///{tmp_path / 'study.db'}"
    run_study(parse_spec({"data": {"source": "digits", "n": 240},
                          "architectures": {"explicit": [{"width": w, "depth": d}
                                                         for w, d in ((8, 2), (16, 3), (32, 2))]},
                          "measures": {"names": ["n_params"]},
                          "training": {"lrs": [0.1], "max_epochs": 1}}), url, workers=1)
    table = study_table(url)
    assert len(table) == 3 and table.attrs["kind"] == "architectures"
    page = study_page(table, n_resamples=20)
    assert "no granulated coefficient" in page and "<td>n_params</td><td>3</td>" in page
    assert "No varied hyperparameter to condition on" in page


def test_the_units_warnings_are_counted_once_per_kind(tmp_path):
    """Warnings raised in the workers come back with each unit and are stated once per kind
    (texts equal but for their numbers), with the units that raised them, by the study run
    and by a reproduction's README (issue: 58 copies of one warning before a table)."""
    from nngauge.reproduce import get
    from nngauge.reproduce._base import _WORKER_WARNINGS, run_reproduction_study
    from nngauge.studies import warning_lines

    url = f"sqlite:///{tmp_path / 'study.db'}"
    spec = spec_of({"depth": [1, 2], "heads": [1]}, train="train_warns",
                   measures=("n_params",))
    collected: dict = {}
    token = _WORKER_WARNINGS.set(collected)
    try:
        summary = run_reproduction_study(spec, url, workers=2)
    finally:
        _WORKER_WARNINGS.reset(token)
    assert sum(summary.warnings.values()) == 2 and collected == summary.warnings
    assert all(text.startswith("UserWarning: lengths did not converge after ")
               for text in summary.warnings)
    [line] = warning_lines(summary.warnings)
    assert line.startswith("2 units: UserWarning: lengths did not converge after ")
    reproduction = get("nlc-table2")
    computed = reproduction.compute("small", torch.Generator().manual_seed(0))
    page = reproduction.readme(computed, "small", 0, 1.0, warnings=[line])
    assert page.count("lengths did not converge") == 1
    assert "**Warnings from the study's workers**" in page
