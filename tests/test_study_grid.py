"""Model zoos ([grid] studies): the grid and its designs, the spec's refusals, the training
sets (subset, label noise), shared initializations, the stored record and weights, the table the
scoring functions take, and a small zoo end to end on both executors."""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import pytest
import torch

from nngauge.data import LabelledData
from nngauge.errors import InvalidInputError, NNGaugeError, UnknownNameError
from nngauge.studies import (
    HYPERPARAMETERS,
    load_network,
    load_spec,
    network_table,
    parse_spec,
    plan_units,
    run_study,
    summarize,
    zoo_spec,
)
from nngauge.studies._grid import expand_grid, parse_grid, training_set
from nngauge.studies._units import UnitTask, build_model, resolve_architectures, study_data

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
DATA = {"source": "digits", "n": 300, "split": [0.7, 0.3]}
TINY = {"data": DATA,
        "grid": {"family": ["mlp", "cnn", "resnet"], "depth": [1, 2], "width": 8,
                 "label_noise": [0.0, 0.5], "batch_size": 32, "lr": 0.05},
        "measures": {"names": ["n_params"]},
        "training": {"max_steps": 40, "measure_after": ["nlc"]}}
"""12 networks a seed: three families, two depths, two label-noise levels."""


def _groups(points: list[dict], name: str) -> dict[tuple, set]:
    """Networks that agree on every hyperparameter but ``name`` -> the values of ``name``."""
    groups: dict[tuple, set] = {}
    for p in points:
        groups.setdefault(tuple(v for k, v in p.items() if k != name), set()).add(p[name])
    return groups


# ------------------------------------------------------------------------------ the grid


def test_the_full_product_in_grid_order_with_fixed_values_stored():
    """3 x 2 x 2 values give 12 networks, the first hyperparameter varying slowest; fixed
    values (one value, or left out: the defaults) are in every network; only the listed ones
    vary; every network has, for every varied hyperparameter, the complete group of networks
    differing from it in that hyperparameter alone."""
    grid = parse_grid({"family": ["mlp", "cnn", "resnet"], "depth": [2, 4],
                       "lr": [0.01, 0.1], "dropout": 0.25})
    points = expand_grid(grid, 0)
    assert len(points) == grid.product_size == 12
    assert [(p["family"], p["depth"], p["lr"]) for p in points] == list(
        itertools.product(["mlp", "cnn", "resnet"], [2, 4], [0.01, 0.1]))
    assert all(p["dropout"] == 0.25 and p["width"] == 32 and p["optimizer"] == "momentum"
               and p["train_size"] is None for p in points)
    assert list(points[0]) == list(HYPERPARAMETERS) and grid.varied == ("family", "depth", "lr")
    for name, values in (("family", 3), ("depth", 2), ("lr", 2)):
        groups = _groups(points, name)
        assert len(groups) == 12 // values and all(len(g) == values for g in groups.values())


def test_a_sampled_grid_is_made_of_whole_stars():
    """sample = N takes at least N networks (at most one star more) of the product, the same
    for the same seed and others for another; every anchor brings all its one-hyperparameter
    neighbours, so every varied hyperparameter has complete groups (all its values, the others
    equal) among the sample, which a random subset of that size would usually lack."""
    raw = {"family": ["mlp", "cnn", "resnet"], "depth": [2, 3, 4], "width": [8, 16],
           "lr": [0.01, 0.05, 0.1], "batch_size": [32, 64]}
    full = expand_grid(parse_grid(raw), 0)
    star = 1 + 2 + 2 + 1 + 2 + 1  # the anchor and its neighbours along each hyperparameter
    sample = expand_grid(parse_grid({**raw, "sample": 20}), 0)
    assert 20 <= len(sample) < 20 + star and len(full) == 108
    assert all(p in full for p in sample)
    assert sample == expand_grid(parse_grid({**raw, "sample": 20}), 0)
    assert sample != expand_grid(parse_grid({**raw, "sample": 20}), 1)
    for name in raw:
        complete = [g for g in _groups(sample, name).values() if len(g) == len(raw[name])]
        assert len(complete) >= 2  # one per anchor: at least two anchors for 20 networks
    assert expand_grid(parse_grid({**raw, "sample": 500}), 0) == full


def test_the_default_and_paper_zoos_and_their_example_specs():
    """zoo_spec("default") has 192 networks a seed (3 families x 2^6) and equals
    examples/zoo.toml; "paper" has 2,304 (every hyperparameter varied) and equals
    examples/zoo_paper.toml; both train to 0.01 with a step cap and keep the weights."""
    default, paper = zoo_spec("default", seeds=[0]), zoo_spec("paper", seeds=[0])
    assert len(plan_units(default)) == 192 and len(plan_units(paper)) == 2304
    assert set(paper.grid.varied) == set(HYPERPARAMETERS) - {"optimizer"}
    for spec, name in ((default, "zoo.toml"), (paper, "zoo_paper.toml")):
        example = load_spec(EXAMPLES / name)
        assert example.grid == spec.grid and example.data == spec.data
        assert example.training.target_loss == spec.training.target_loss == 0.01
        assert example.training.max_steps == spec.training.max_steps
        assert example.training.keep_weights and example.seeds == (0, 1, 2)
    with pytest.raises(UnknownNameError, match="scale"):
        zoo_spec("huge")


def test_a_json_spec_is_the_same_spec(tmp_path):
    """The same tables as a JSON object in a .json file parse to the same spec (and id); a
    JSON syntax error is one line with the fix."""
    import json

    path = tmp_path / "zoo.json"
    path.write_text(json.dumps(TINY))
    spec = load_spec(path)
    assert spec == parse_spec(TINY, default_name="zoo") and spec.study_id == parse_spec(
        TINY).study_id
    path.write_text("{")
    with pytest.raises(InvalidInputError, match="valid JSON.*Fix"):
        load_spec(path)


@pytest.mark.parametrize("raw, error, field, fix", [
    ({"grid": {"colour": ["red"]}}, UnknownNameError, "grid.colour", "remove or rename"),
    ({"grid": {"depth": []}}, InvalidInputError, "grid.depth", "at least one value"),
    ({"grid": {"depth": [2, 2.5]}}, InvalidInputError, "grid.depth", "depth = [2, 4]"),
    ({"grid": {"batch_norm": ["yes"]}}, InvalidInputError, "grid.batch_norm", "false, true"),
    ({"grid": {"family": ["vgg"]}}, InvalidInputError, "grid.family", "mlp"),
    ({"grid": {"lr": [0.1, -1.0]}}, InvalidInputError, "grid.lr", "lr ="),
    ({"grid": {"dropout": [1.0]}}, InvalidInputError, "grid.dropout", "dropout ="),
    ({"grid": {"width": [8, 8]}}, InvalidInputError, "grid.width", "each value once"),
    ({"grid": {"sample": -1}}, InvalidInputError, "grid.sample", "sample = 150"),
    ({"grid": [1, 2]}, InvalidInputError, "grid", "grid"),
    ({"grid": {}, "architectures": {"sample": 2}}, InvalidInputError, "architectures",
     "keep [grid]"),
    ({"grid": {}, "training": {"lrs": [0.1]}}, InvalidInputError, "training.lrs", "grid.lr"),
    ({"grid": {}, "training": {"target_loss": 0}}, InvalidInputError, "training.target_loss",
     "0.01"),
    ({"grid": {}, "training": {"max_steps": 0}}, InvalidInputError, "training.max_steps",
     "max_steps"),
    ({"grid": {}, "training": {"momentum": 1.5}}, InvalidInputError, "training.momentum",
     "0.9"),
    ({"grid": {}, "data": {"split": [0.5, 0.3, 0.1, 0.1]}}, InvalidInputError, "data.split",
     "[0.8, 0.2]"),
])
def test_bad_grid_specs_say_what_was_expected_got_and_the_fix(raw, error, field, fix):
    with pytest.raises(error) as info:
        parse_spec(raw)
    message = str(info.value)
    assert field in message and "Fix:" in message and fix in message
    assert "expected" in message and "got" in message
    assert message.count("\n") == 0


def test_a_train_size_beyond_the_training_split_is_refused_before_anything_runs(tmp_path):
    spec = parse_spec({"data": DATA, "grid": {"train_size": [100, 500]}})
    with pytest.raises(InvalidInputError, match=r"grid.train_size.*at most 210.*got 500.*Fix"):
        run_study(spec, f"sqlite:///{tmp_path / 'z.db'}")
    assert not (tmp_path / "z.db").exists()


# --------------------------------------------------------------------- what a network gets


def test_label_noise_redraws_a_seeded_fraction_over_all_classes():
    """label_noise p redraws round(p n) labels uniformly over the k classes: about p (k-1) / k
    end up changed (reported exactly), the inputs are untouched, the same seed and replicate
    give the same labels, another replicate others; the subsets of one replicate are nested
    (the first train_size of one permutation)."""
    g = torch.Generator().manual_seed(0)
    train = LabelledData(torch.randn(2000, 3, generator=g), torch.randint(10, (2000,), generator=g))
    noisy, changed = training_set(train, 2000, 0.5, 10, seed=0, replicate=0)
    subset, _ = training_set(train, 2000, 0.0, 10, seed=0, replicate=0)
    assert torch.equal(noisy.inputs, subset.inputs)
    differ = float((noisy.labels != subset.labels).double().mean())
    assert differ == changed == pytest.approx(0.5 * 0.9, abs=0.03)
    assert int(noisy.labels.max()) <= 9
    again, _ = training_set(train, 2000, 0.5, 10, seed=0, replicate=0)
    other, _ = training_set(train, 2000, 0.5, 10, seed=0, replicate=1)
    assert torch.equal(again.labels, noisy.labels)
    assert not torch.equal(other.inputs, noisy.inputs)
    small, none = training_set(train, 300, 0.0, 10, seed=0, replicate=0)
    assert none == 0.0 and torch.equal(small.inputs, subset.inputs[:300])
    assert torch.equal(small.labels, subset.labels[:300])


def test_networks_differing_only_in_training_start_from_the_same_weights():
    """The initial weights depend on (family, depth, width) and the seed only: networks that
    differ in learning rate, batch norm (no affine parameters) or dropout start alike; another
    width or seed starts elsewhere."""
    spec = parse_spec({"data": DATA, "grid": {"width": [8, 16], "lr": [0.01, 0.1],
                                              "batch_norm": [False, True], "dropout": [0, 0.5]},
                       "seeds": [0, 1]})
    archs = resolve_architectures(spec)
    units = plan_units(spec)

    def weights(unit):
        return list(build_model(UnitTask(spec, archs[unit.arch_index], unit)).parameters())

    by_point = {(archs[u.arch_index].description["width"], u.arch_index, u.seed): u
                for u in units}
    narrow = [u for (w, _, s), u in by_point.items() if w == 8 and s == 0]
    assert len(narrow) == 8
    first = weights(narrow[0])
    assert all(all(torch.equal(a, b) for a, b in zip(first, weights(u))) for u in narrow[1:])
    wide = next(u for (w, _, s), u in by_point.items() if w == 16 and s == 0)
    reseeded = next(u for (w, i, s), u in by_point.items()
                    if w == 8 and s == 1 and i == narrow[0].arch_index)
    assert first[0].shape != weights(wide)[0].shape
    assert not torch.equal(first[0], weights(reseeded)[0])


def test_a_measure_that_reads_the_initial_model_gets_it(monkeypatch):
    """A study measure that reads the network at initialization (distance_from_init, its
    entry's ``initial``) gets the network as built at initialization and, after training, that
    same initial network, not the trained one; the unit records steps, stop reason and gap."""
    from nngauge.studies import _units

    seen = []

    def recorder(model, parts, batch_size, generator, *, initial=None):
        seen.append(([p.detach().clone() for p in model.parameters()],
                     [p.detach().clone() for p in initial.parameters()]))
        return {"distance_from_init": 0.0}

    monkeypatch.setitem(_units._MEASURE_RUNNERS, "distance_from_init", recorder)
    spec = parse_spec({"data": DATA, "grid": {"width": 8},
                       "measures": {"names": ["distance_from_init"]},
                       "training": {"max_steps": 20, "measure_after": ["distance_from_init"]}})
    unit = plan_units(spec)[0]
    task = UnitTask(spec, resolve_architectures(spec)[0], unit)
    result = _units.run_unit(task)
    built = list(build_model(task).parameters())
    (at_init, given_init), (trained, given_after) = seen
    assert all(torch.equal(a, b) for a, b in zip(at_init, built))
    assert all(torch.equal(a, b) for a, b in zip(given_init, built))
    assert all(torch.equal(a, b) for a, b in zip(given_after, built))
    assert not all(torch.equal(a, b) for a, b in zip(trained, built))
    record = result["network"]
    assert record["steps"] == 20 and record["stop_reason"] == "max_steps"
    assert record["gap"] == pytest.approx(record["train_accuracy"] - record["test_accuracy"])
    assert set(result["measures"]) == {"distance_from_init", "distance_from_init_after"}


# ---------------------------------------------------------------------------- end to end


@pytest.fixture(scope="module")
def tiny_zoo(tmp_path_factory):
    """TINY run once on the local pool (2 workers): (spec, database URL, summary)."""
    spec = parse_spec(TINY)
    url = f"sqlite:///{tmp_path_factory.mktemp('zoo') / 'zoo.db'}"
    return spec, url, run_study(spec, url, workers=2)


def test_a_tiny_zoo_runs_and_its_table_has_every_column(tiny_zoo):
    """12 networks: the table has one row each, with the hyperparameters, the record (gap =
    train - test accuracy, test error, steps within the cap, a stop reason), the measure at
    initialization and after training; attrs name the varied hyperparameters; a rerun runs
    nothing."""
    spec, url, summary = tiny_zoo
    assert summary.failed == {} and summary.ran == summary.total == 12
    table = network_table(url)
    assert len(table) == 12 and table.attrs["hyperparameters"] == ["family", "depth",
                                                                   "label_noise"]
    for column in (*HYPERPARAMETERS, "train_accuracy", "test_accuracy", "train_loss",
                   "test_loss", "gap", "loss_gap", "test_error", "steps", "stop_reason",
                   "steps_to_0_1", "steps_0_1_to_0_01", "labels_changed", "n_params",
                   "nlc_after", "output_bias_after"):
        assert column in table, column
    assert (table.gap - (table.train_accuracy - table.test_accuracy)).abs().max() < 1e-12
    assert (table.test_error - (1 - table.test_accuracy)).abs().max() < 1e-12
    assert (table.loss_gap - (table.test_loss - table.train_loss)).abs().max() < 1e-12
    assert table.steps.le(40).all() and set(table.stop_reason) <= {"target_loss", "max_steps"}
    assert (table.train_size == 210).all() and (table.labels_changed > 0).eq(
        table.label_noise > 0).all()
    assert table.n_params.gt(0).all() and table.nlc_after.notna().all()
    assert (table[table.family == "resnet"].n_params.values
            == table[table.family == "cnn"].n_params.values).all()
    rerun = run_study(spec, url, workers=1)
    assert (rerun.ran, rerun.skipped) == (0, 12)


def test_stored_weights_reload_and_reproduce_the_stored_accuracy(tiny_zoo):
    """load_network rebuilds each network: the final weights give the stored test accuracy
    on the study's test split, the initial weights are the network as built at
    initialization; an unknown key or 'which' is refused with the fix."""
    spec, url, _ = tiny_zoo
    table = network_table(url)
    _, _, test = study_data(spec.data, spec.seed)
    for row in table.itertuples():
        net = load_network(url, row.key).eval()
        with torch.no_grad():
            accuracy = float((net(test.inputs).argmax(1) == test.labels).double().mean())
        assert accuracy == pytest.approx(row.test_accuracy, abs=1e-12)
    unit = next(u for u in plan_units(spec) if u.key == table.key[0])
    built = build_model(UnitTask(spec, resolve_architectures(spec)[unit.arch_index], unit))
    initial = load_network(url, table.key[0], which="initial")
    assert all(torch.equal(a, b) for a, b in zip(initial.state_dict().values(),
                                                 built.state_dict().values()))
    with pytest.raises(InvalidInputError, match="key of a network.*Fix"):
        load_network(url, "nope")
    with pytest.raises(InvalidInputError, match="which.*Fix"):
        load_network(url, table.key[0], which="best")


def test_summarize_and_the_cli_know_a_zoo(tiny_zoo, tmp_path):
    """summarize() gives one point per network with its test error and names the grid's
    varied hyperparameters; `study summarize --out` also writes networks.csv (the table);
    network_table refuses a study without a grid."""
    import pandas as pd
    from typer.testing import CliRunner

    from nngauge.cli._app import app

    _, url, _ = tiny_zoo
    result = summarize(url)
    assert len(result.points) == 12 and all(0 <= p["test_error"] <= 1 for p in result.points)
    assert result.hyperparameters == ("family", "depth", "label_noise")
    out = CliRunner().invoke(app, ["study", "summarize", "--db", url, "--out", str(tmp_path)])
    assert out.exit_code == 0, out.output
    written = pd.read_csv(tmp_path / "networks.csv")
    assert len(written) == 12 and "gap" in written and "family" in written
    plain = parse_spec({"data": {"source": "gaussian:d=3", "n": 20},
                        "architectures": {"explicit": [{"width": 4, "depth": 2}]},
                        "measures": {"names": ["n_params"]}, "training": {"enabled": False}})
    other = f"sqlite:///{tmp_path / 'plain.db'}"
    run_study(plain, other, workers=1)
    with pytest.raises(InvalidInputError, match=r"\[grid\].*Fix"):
        network_table(other)


def test_without_keep_weights_nothing_is_stored_and_loading_says_why(tmp_path):
    spec = parse_spec({**TINY, "grid": {"width": 8}, "measures": {"names": []},
                       "training": {"max_steps": 5, "keep_weights": False}})
    url = f"sqlite:///{tmp_path / 'z.db'}"
    run_study(spec, url, workers=1)
    with pytest.raises(NNGaugeError, match="keep_weights = false.*Fix"):
        load_network(url, network_table(url).key[0])


@pytest.mark.slow
def test_the_ray_executor_stores_the_same_zoo(tiny_zoo, tmp_path, local_ray):
    """The same zoo on a local Ray of 2 CPUs: the same networks rows and weights blobs as the
    process pool's (the units' results, weights included, travel back to the driver)."""
    from sqlalchemy import select

    from nngauge.studies._db import networks, open_db, weights

    spec, local_url, _ = tiny_zoo
    ray_url = f"sqlite:///{tmp_path / 'ray.db'}"
    summary = run_study(spec, ray_url, executor="ray")
    assert summary.failed == {} and summary.ran == 12

    def rows(url):
        engine = open_db(url, create=False)
        with engine.connect() as conn:
            found = ({r["key"]: dict(r) for r in conn.execute(select(networks)).mappings()},
                     {r.unit_key: (r.initial, r.final) for r in conn.execute(select(weights))})
        engine.dispose()
        return found

    assert rows(local_url) == rows(ray_url)
    assert math.isfinite(network_table(ray_url).gap.sum())
