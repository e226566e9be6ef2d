"""Study specs: the example parses, every bad field is one clear NNGaugeError naming it, the
plan and keys are deterministic, architectures rebuild to the same network."""

import importlib.util
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from nngauge.errors import InvalidInputError, NNGaugeError, UnknownNameError
from nngauge.studies._spec import MEASURES, load_spec, parse_spec
from nngauge.studies._units import (_MEASURE_RUNNERS, DERIVED, UnitTask, build_model,
                                    derive_seed, plan_units, resolve_architectures)

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "study_small.toml"
ONE_ARCH = {"architectures": {"explicit": [{"width": 8, "depth": 3, "activation": "tanh"}]},
            "data": {"source": "gaussian:d=5", "n": 40}}


def test_example_spec_parses():
    spec = load_spec(EXAMPLE)
    assert spec.name == "small"
    assert spec.data.source == "waveform" and spec.data.n == 300
    assert spec.architectures.count == 6
    assert spec.measures.names == ("nlc", "jacobian_norm", "correlations")
    assert spec.training.lrs == (0.03, 0.3) and spec.training.max_epochs == 5


def test_geometric_grid_is_start_times_factor_powers():
    spec = parse_spec({**ONE_ARCH, "training": {"lr_start": 1e-3, "lr_factor": 3, "n_lrs": 4}})
    assert spec.training.lrs == pytest.approx([1e-3, 3e-3, 9e-3, 27e-3], rel=1e-12)


def test_study_id_depends_on_content_not_name():
    a = parse_spec({**ONE_ARCH, "name": "a"})
    assert parse_spec({**ONE_ARCH, "name": "b"}).study_id == a.study_id
    assert parse_spec({**ONE_ARCH, "seed": 1}).study_id != a.study_id
    assert parse_spec({**ONE_ARCH, "training": {"lrs": [0.2]}}).study_id != a.study_id


@pytest.mark.parametrize("raw, field", [
    ({"bogus": 1}, "bogus"),
    ({"data": {"sorce": "waveform"}}, "data.sorce"),
    ({"measures": {"names": ["nlc", "rho"]}}, "measures.names"),
    ({"data": {"split": [0.5, 0.5]}}, "data.split"),
    ({"data": {"preprocess": "whiten"}}, "data.preprocess"),
    ({"training": {"lrs": [0.1, -1.0]}}, "training.lrs"),
    ({"training": {"lrs": [0.1], "lr_start": 0.1}}, "training.lrs"),
    ({"training": {"max_epochs": 0}}, "training.max_epochs"),
    ({"training": {"optimizer": "lbfgs"}}, "training.optimizer"),
    ({"seeds": []}, "seeds"),
    ({"architectures": {"explicit": [{"depth": 3}]}}, "architectures.explicit[0].width"),
    ({"architectures": {"explicit": [{"width": 4, "depth": 3, "colour": 1}]}},
     "architectures.explicit[0].colour"),
])
def test_bad_fields_raise_one_line_naming_the_field(raw, field):
    merged = {**ONE_ARCH, **raw}
    if "architectures" in raw:
        merged["architectures"] = raw["architectures"]
    with pytest.raises(NNGaugeError) as info:
        parse_spec(merged)
    message = str(info.value)
    assert f"field {field}" in message and "\n" not in message and "Fix:" in message


def test_unknown_field_lists_the_valid_ones():
    with pytest.raises(UnknownNameError, match="valid fields of training: enabled, lrs"):
        parse_spec({**ONE_ARCH, "training": {"epochs": 3}})


def test_no_architectures_and_bad_toml(tmp_path):
    with pytest.raises(InvalidInputError, match="architectures"):
        parse_spec({})
    bad = tmp_path / "bad.toml"
    bad.write_text("name = \n")
    with pytest.raises(InvalidInputError, match="valid TOML"):
        load_spec(bad)


def test_invalid_explicit_architecture_names_the_entry():
    spec = parse_spec({**ONE_ARCH, "architectures": {"explicit": [
        {"width": 8, "depth": 3}, {"width": 8, "depth": 3, "activation": "nope"}]}})
    with pytest.raises(InvalidInputError, match=r"architectures.explicit\[1\]"):
        resolve_architectures(spec)


def test_sampled_architectures_need_the_sampler_or_resolve_deterministically():
    spec = parse_spec({**ONE_ARCH, "architectures": {"sample": 2}})
    if importlib.util.find_spec("nngauge.nn._sampler") is None:
        with pytest.raises(InvalidInputError, match="architectures.sample"):
            resolve_architectures(spec)
    else:
        first, second = resolve_architectures(spec), resolve_architectures(spec)
        assert [a.config for a in first] == [a.config for a in second]
        assert all(a.description is not None for a in first)


def test_every_measure_has_a_runner_giving_its_columns():
    assert set(_MEASURE_RUNNERS) | set(DERIVED) == set(MEASURES)
    spec = parse_spec({**ONE_ARCH, "measures": {"names": sorted(MEASURES)}})
    arch = resolve_architectures(spec)[0]
    task = UnitTask(spec, arch, plan_units(spec)[0])
    from nngauge.studies._units import run_unit, study_data

    result = run_unit(task)
    assert set(result["measures"]) == {c for cols in MEASURES.values() for c in cols}
    assert result["train"] is None
    # the kernel of the top hidden layer (width 8, 8 samples) is full rank: finite
    assert result["measures"]["kernel_condition_number"] < float("inf")
    # in-process rerun: identical numbers (results depend only on the unit; NaN where a
    # measure of a trained network is undefined at initialization, e.g. over a margin <= 0)
    np.testing.assert_equal(run_unit(task)["measures"], result["measures"])
    assert len(study_data(spec.data, spec.seed)) == 3


def test_plan_keys_are_distinct_and_stable():
    spec = parse_spec({**ONE_ARCH, "seeds": [0, 1], "training": {"lrs": [0.1, 0.3, 0.9]}})
    plan = plan_units(spec)
    assert len(plan) == 1 * 2 * (1 + 3)
    assert len({u.key for u in plan}) == len(plan)
    assert [u.key for u in plan_units(parse_spec({**ONE_ARCH, "seeds": [0, 1], "training": {
        "lrs": [0.1, 0.3, 0.9]}}))] == [u.key for u in plan]
    init_only = parse_spec({**ONE_ARCH, "training": {"enabled": False}})
    assert [u.kind for u in plan_units(init_only)] == ["init"]


def test_units_of_one_architecture_and_seed_share_the_initialization():
    spec = parse_spec({**ONE_ARCH, "seeds": [0, 1], "training": {"lrs": [0.1, 0.3]}})
    arch = resolve_architectures(spec)[0]
    plan = plan_units(spec)
    weights = [build_model(UnitTask(spec, arch, u)).layers[0].linear.weight for u in plan]
    seed0 = [w for w, u in zip(weights, plan) if u.seed == 0]
    seed1 = [w for w, u in zip(weights, plan) if u.seed == 1]
    assert all(torch.equal(w, seed0[0]) for w in seed0)
    assert all(torch.equal(w, seed1[0]) for w in seed1)
    assert not torch.equal(seed0[0], seed1[0])


def test_derived_seeds_are_stable_63_bit():
    assert derive_seed(0, "init", 1) == derive_seed(0, "init", 1)
    assert len({derive_seed(0, "init", i) for i in range(100)}) == 100
    assert all(0 <= derive_seed(s) < 2**63 for s in range(20))


def test_dtype_builds_float64_networks_and_the_training_unit_runs():
    from nngauge.studies._units import run_unit

    spec = parse_spec({**ONE_ARCH, "dtype": "float64",
                       "training": {"lrs": [0.1], "max_epochs": 1, "batch_size": 8}})
    arch = resolve_architectures(spec)[0]
    init, train = plan_units(spec)
    assert build_model(UnitTask(spec, arch, init)).layers[0].linear.weight.dtype == torch.float64
    result = run_unit(UnitTask(spec, arch, train))
    assert result["measures"] == {} and result["train"]["epochs"] == 1
    assert 0 <= result["train"]["test_error"] <= 1
    with pytest.raises(UnknownNameError, match="field dtype"):
        parse_spec({**ONE_ARCH, "dtype": "float16"})


def test_automatic_grid_starts_at_each_networks_smallest_rate():
    from nngauge.studies._units import derive_seed, run_unit, study_data
    from nngauge.training import smallest_lr

    spec = parse_spec({**ONE_ARCH, "training": {"lr_start": "auto", "lr_factor": 3, "n_lrs": 2,
                                                "lr_scale": 1e-3, "max_epochs": 1,
                                                "batch_size": 8}})
    assert spec.training.lrs == () and spec.training.auto_lr == (3.0, 2, 1e-3)
    arch = resolve_architectures(spec)[0]
    plan = plan_units(spec)
    assert [(u.kind, u.lr, u.lr_index) for u in plan] == [
        ("init", None, None), ("train", None, 0), ("train", None, 1)]
    rates = [run_unit(UnitTask(spec, arch, u))["train"]["lr"] for u in plan[1:]]
    train = study_data(spec.data, spec.seed)[0]
    start = smallest_lr(build_model(UnitTask(spec, arch, plan[1])), train, batch_size=8,
                        scale=1e-3, generator=torch.Generator().manual_seed(
                            derive_seed(spec.seed, "smallest_lr", 0, 0)))
    assert rates == pytest.approx([start, 3 * start], rel=1e-12)
    with pytest.raises(InvalidInputError, match="training.lr_scale"):
        parse_spec({**ONE_ARCH, "training": {"lrs": [0.1], "lr_scale": 1e-8}})
    with pytest.raises(InvalidInputError, match="training.lrs"):
        parse_spec({**ONE_ARCH, "training": {"lrs": [0.1], "lr_start": "auto"}})


def test_sampled_path_with_a_stand_in_sampler(monkeypatch):
    """The sampler's contract (generator, d_in, d_out, **overrides) -> (MLP, description),
    exercised with a stand-in: one generator per index, overrides passed on, the description
    kept, and every unit rebuilds the sampled architecture."""
    import sys
    import types
    from dataclasses import asdict, dataclass

    from nngauge.nn import mlp

    @dataclass(frozen=True)
    class Description:
        depth: int

        def to_dict(self):
            return asdict(self)

    calls = []

    def sample_architecture(generator, d_in, d_out, *, width=8):
        depth = int(torch.randint(2, 6, (1,), generator=generator))
        calls.append((d_in, d_out, width))
        return mlp(d_in, width, depth, d_out, generator=generator), Description(depth)

    fake = types.ModuleType("nngauge.nn._sampler")
    fake.sample_architecture = sample_architecture
    monkeypatch.setitem(sys.modules, "nngauge.nn._sampler", fake)
    spec = parse_spec({**ONE_ARCH, "architectures": {"sample": 5, "overrides": {"width": 6},
                                                     "explicit": [{"width": 4, "depth": 2}]}})
    archs = resolve_architectures(spec)
    assert [a.index for a in archs] == list(range(6))
    assert calls[0] == (5, 2, 6) and all(a.config["width"] == 6 for a in archs[:5])
    assert [a.description["depth"] for a in archs[:5]] == [a.config["depth"] for a in archs[:5]]
    assert archs[5].description is None and archs[5].config["width"] == 4
    assert [a.config for a in resolve_architectures(spec)] == [a.config for a in archs]
    for unit in plan_units(spec):
        model = build_model(UnitTask(spec, archs[unit.arch_index], unit))
        assert model.config.to_dict() == archs[unit.arch_index].config
    bad = parse_spec({**ONE_ARCH, "architectures": {"sample": 1, "overrides": {"widht": 6}}})
    with pytest.raises(InvalidInputError, match="architectures.overrides"):
        resolve_architectures(bad)


def test_measure_after_measures_the_trained_network_and_keeps_a_dead_ones_errors(monkeypatch):
    """``training.measure_after``: a training unit measures its trained network (the best
    weights fit leaves) into ``<column>_after`` columns; a measure undefined on it because
    training made its output constant records NaN and keeps the run's errors, while any other
    failure still fails the unit. Unknown names are refused like ``measures.names``."""
    from nngauge.studies import _units
    from nngauge.studies._units import run_unit

    spec = parse_spec({**ONE_ARCH, "training": {"lrs": [0.1], "max_epochs": 1,
                                                "measure_after": ["nlc"]}})
    arch = resolve_architectures(spec)[0]
    init, train = plan_units(spec)
    result = run_unit(UnitTask(spec, arch, train))
    assert set(result["measures"]) == {"nlc_after", "output_bias_after"}
    assert all(math.isfinite(v) for v in result["measures"].values())
    before = run_unit(UnitTask(spec, arch, init))["measures"]["nlc"]
    assert result["measures"]["nlc_after"] != before  # the trained network, not the initial

    def dead(*args):
        raise InvalidInputError("nlc() expected outputs that vary; got a constant output.")

    monkeypatch.setitem(_units._MEASURE_RUNNERS, "nlc", dead)
    kept = run_unit(UnitTask(spec, arch, train))
    assert all(math.isnan(v) for v in kept["measures"].values())
    assert kept["train"]["test_error"] == result["train"]["test_error"]
    with pytest.raises(InvalidInputError, match="constant output"):
        run_unit(UnitTask(spec, arch, init))  # at initialization it is the unit's failure

    def broken(*args):
        raise InvalidInputError("nlc() expected something else.")

    monkeypatch.setitem(_units._MEASURE_RUNNERS, "nlc", broken)
    with pytest.raises(InvalidInputError, match="something else"):
        run_unit(UnitTask(spec, arch, train))
    with pytest.raises(NNGaugeError, match="training.measure_after"):
        parse_spec({**ONE_ARCH, "training": {"measure_after": ["nlc", "rho"]}})


def test_measure_options_are_validated_sorted_and_part_of_the_study_id():
    """``[measures.options.<name>]``: keyword options of the measure's function; a study
    without them keeps the id it had before options existed (no ``options`` in its content)."""
    plain = parse_spec({**ONE_ARCH, "measures": {"names": ["jacobian_norm", "nlc"]}})
    assert "options" not in plain.to_dict()["measures"] and plain.measures.options == ()
    spec = parse_spec({**ONE_ARCH, "measures": {
        "names": ["jacobian_norm", "nlc"],
        "options": {"nlc": {"n_probes": 3}, "jacobian_norm": {"rms": True, "ord": "fro"}}}})
    assert spec.measures.options_of() == {"jacobian_norm": {"ord": "fro", "rms": True},
                                          "nlc": {"n_probes": 3}}
    assert [name for name, _ in spec.measures.options] == ["jacobian_norm", "nlc"]
    assert spec.study_id != plain.study_id
    assert spec.to_dict()["measures"]["options"] == spec.measures.options_of()


@pytest.mark.parametrize("options, field, says", [
    ({"correlations": {"n_iter": 3}}, "measures.options.correlations",
     "a measure the study takes"),
    ({"flatness": {"kind": "sharpness"}}, "measures.options.flatness.kind",
     "the study sets it"),
    ({"flatness": {"generator": 3}}, "measures.options.flatness.generator",
     "the study sets it"),
    ({"flatness": {"n_iters": 3}}, "measures.options.flatness.n_iters", "valid: "),
    ({"flatness": {"n_iter": 0}}, "measures.options.flatness.n_iter", "expected"),
    ({"flatness": {"threshold": "high"}}, "measures.options.flatness.threshold", "expected"),
    ({"flatness": {}}, "measures.options.flatness", "a table of keyword arguments"),
    ({"kernel_conditioning": {"n_iter": 3}}, "measures.options.kernel_conditioning",
     "its own way"),
])
def test_bad_measure_options_name_the_field_and_what_it_takes(options, field, says):
    raw = {**ONE_ARCH, "measures": {"names": ["nlc", "kernel_conditioning"],
                                    "options": options},
           "training": {"measure_after": ["flatness"]}}
    with pytest.raises(NNGaugeError) as info:
        parse_spec(raw)
    message = str(info.value)
    assert f"field {field}" in message and says in message and "Fix:" in message
    assert "\n" not in message


def test_measure_options_reach_the_function_at_initialization():
    """The recorded column is the function's value with the spec's options on top of the
    study's own (its batch size and generator): the Frobenius RMS Jacobian norm here, which
    differs from the default operator norm."""
    from nngauge import jacobian_norm
    from nngauge.studies._units import _generator, run_unit, study_data

    raw = {**ONE_ARCH, "training": {"enabled": False}}
    plain = parse_spec({**raw, "measures": {"names": ["jacobian_norm"]}})
    spec = parse_spec({**raw, "measures": {"names": ["jacobian_norm"], "options": {
        "jacobian_norm": {"ord": "fro", "rms": True, "method": "exact"}}}})
    arch = resolve_architectures(spec)[0]
    unit = plan_units(spec)[0]
    recorded = run_unit(UnitTask(spec, arch, unit))["measures"]["jacobian_norm"]
    default = run_unit(UnitTask(plain, arch, plan_units(plain)[0]))["measures"]["jacobian_norm"]
    train = study_data(spec.data, spec.seed)[0]
    expected = jacobian_norm(
        build_model(UnitTask(spec, arch, unit)), train, ord="fro", rms=True, method="exact",
        batch_size=spec.measures.batch_size,
        generator=_generator(derive_seed(spec.seed, "measure", unit.arch_index, unit.seed))).norm
    assert recorded == pytest.approx(expected, rel=1e-6)
    assert abs(recorded - default) > 1e-3 * abs(default)
