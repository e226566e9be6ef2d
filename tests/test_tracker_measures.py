"""Every named measure through the Tracker: the functional call's values as flat columns, fixed
probes, weight snapshots, and clear errors where a measure yields nothing."""

import math

import pytest
import torch
from torch import nn

import nngauge
from nngauge.data import waveform_noise
from nngauge.errors import MissingDependencyError, NNGaugeError
from nngauge.nn import mlp
from nngauge import catalogue
from nngauge.errors import InvalidInputError
from nngauge.trajectories import arc, line, plane
from nngauge.training import REGISTRY, Tracker
from nngauge.training._flatten import columns
from nngauge.training._registry import TrackedMeasure

SEED = 5


def _net():
    return mlp(40, 16, 3, 3, generator=torch.Generator().manual_seed(0))


def _gen():
    return torch.Generator().manual_seed(SEED)


DIRECTION = torch.randn(16, 16, generator=torch.Generator().manual_seed(7))


# name -> (options given to the Tracker, the functional call with the same seed / options);
# data D = (x, y), probe points P = x (the first 256 inputs of data=)
FUNCTIONAL = {
    "trajectory_length": ({}, lambda m, x, y: nngauge.trajectory_length(
        m, line(x[0], x[1], 65), norm_mode="eval")),
    "transitions": ({}, lambda m, x, y: nngauge.transitions(m, x[0], x[1], norm_mode="eval")),
    "region_density": ({}, lambda m, x, y: nngauge.region_density(
        m, x[:8], norm_mode="eval", generator=_gen())),  # the measure's default radius
    "activation_patterns": ({}, lambda m, x, y: nngauge.activation_patterns(
        m, x, norm_mode="eval")),
    "kernel_conditioning": ({}, lambda m, x, y: nngauge.kernel_conditioning(
        m, x, generator=_gen())),
    "correlations": ({}, lambda m, x, y: nngauge.correlations(m, x, generator=_gen())),
    "capacity": ({}, lambda m, x, y: nngauge.capacity(m, (x, y))),
    "margin": ({}, lambda m, x, y: nngauge.margin(m, (x, y))),
    "path_norm": ({"p": 1}, lambda m, x, y: nngauge.path_norm(m, 1)),
    "sharpness": ({"n_iter": 20}, lambda m, x, y: nngauge.sharpness(
        m, (x, y), n_iter=20, generator=_gen())),
    "expected_sharpness": ({}, lambda m, x, y: nngauge.expected_sharpness(
        m, (x, y), alpha=1e-3, n_probes=100, generator=_gen())),
    "pac_bayes": ({"n_probes": 10}, lambda m, x, y: nngauge.pac_bayes(
        m, (x, y), alphas=(1e-3, 3e-3, 1e-2), n_probes=10, generator=_gen())),
    "sharpness_conditions": ({"max_samples": 16}, lambda m, x, y: nngauge.sharpness_conditions(
        m, (x, y), max_samples=16, generator=_gen())),
    "nlc_profile": ({}, lambda m, x, y: nngauge.nlc_profile(
        m, (x, y), batch_size=len(x), generator=_gen())),
    "jacobian_norm": ({"n_iter": 10}, lambda m, x, y: nngauge.jacobian_norm(
        m, (x, y), batch_size=len(x), n_iter=10, generator=_gen())),
    "hessian": ({}, lambda m, x, y: nngauge.hessian(m, (x, y), generator=_gen())),
    "loss_landscape": ({}, lambda m, x, y: nngauge.loss_landscape(
        m, (x, y), dims=1, resolution=21, generator=_gen())),
    "weight_transitions": ({"layer": "layers.1.linear", "direction": {"weight": DIRECTION}},
                           lambda m, x, y: nngauge.weight_transitions(
                               m, x, layer="layers.1.linear", direction={"weight": DIRECTION},
                               norm_mode="eval")),
    # measures the catalogue made trackable (reads: plane, points, batch)
    "regions": ({}, lambda m, x, y: nngauge.regions(m, plane(x[0], x[1], x[2]),
                                                    norm_mode="eval")),
    "dichotomies": ({"layer": "layers.1.linear", "resolution": 64},
                    lambda m, x, y: nngauge.dichotomies(m, x, layer="layers.1.linear",
                                                        resolution=64, generator=_gen())),
    "weight_noise_robustness": ({"n_repeats": 2}, lambda m, x, y:
                                nngauge.weight_noise_robustness(m, (x, y), n_repeats=2,
                                                                generator=_gen())),
    "linear_region_diameter": ({}, lambda m, x, y: nngauge.linear_region_diameter(
        m, (x, y), batch_size=len(x), n_batches=1, generator=_gen())),
    "error_preserving_perturbation": ({}, lambda m, x, y: nngauge.error_preserving_perturbation(
        m, (x, y), batch_size=len(x), n_batches=1, generator=_gen())),
    # Jiang et al.'s measures: the network at initialization is the Tracker's copy of the
    # model at its first step (here the model itself)
    "distance_from_init": ({}, lambda m, x, y: nngauge.distance_from_init(m, m)),
    "norm_measures": ({}, lambda m, x, y: nngauge.norm_measures(m, (x, y), initial_model=m)),
    "flatness": ({}, lambda m, x, y: nngauge.flatness(m, (x, y), initial_model=m, n_iter=10,
                                                      generator=_gen())),
    "gradient_noise": ({}, lambda m, x, y: nngauge.gradient_noise(m, (x, y), batch_size=8,
                                                                  generator=_gen())),
    "layer_spectra": ({}, lambda m, x, y: nngauge.layer_spectra(m)),
}


def _same(a, b):
    return a == b or (math.isnan(a) and math.isnan(b))


def _assert_same_row(row, expected):
    assert set(row) == set(expected)
    assert all(_same(row[k], expected[k]) for k in expected), \
        {k: (row[k], expected[k]) for k in expected if not _same(row[k], expected[k])}


def test_every_registered_measure_has_a_functional_check():
    assert set(REGISTRY) == set(FUNCTIONAL) | {"nlc", "gradient_metrics", "weight_norm",
                                               "grad_norm",  # those: test_tracker.py
                                               "skim"}  # below: an nn.Sequential's block


def test_skim_tracks_a_block_of_a_sequential_network():
    net = nn.Sequential(nn.Linear(40, 16), nn.ReLU(), nn.Linear(16, 16), nn.ReLU(),
                        nn.Linear(16, 3))
    x, y = waveform_noise(24, generator=1)
    row = Tracker([("skim", {"layers": ("1", "3")})], data=(x, y)).step(net, step=2)
    assert row.pop("step") == 2
    _assert_same_row(row, columns("skim", nngauge.skim(net, (x, y), layers=("1", "3"),
                                                       norm_mode="eval")))


REQUIRING = [entry.name for entry in catalogue().measures()
             if entry.track is not None and set(entry.requires) - set(entry.tracker_options)]


def test_the_measures_that_need_options_are_those_of_the_catalogue():
    assert set(REQUIRING) == {"skim", "dichotomies", "weight_transitions"}


@pytest.mark.parametrize("name", REQUIRING)
def test_a_tracker_without_a_required_option_is_refused_naming_it(name):
    required = catalogue()[name].requires
    with pytest.raises(InvalidInputError, match=r"expected the option\(s\) " + ", ".join(
            f"{option}=" for option in required) + ".*Fix: pass them"):
        Tracker([name])


@pytest.mark.parametrize("name", sorted(FUNCTIONAL))
def test_tracked_values_equal_the_functional_call(name):
    options, functional = FUNCTIONAL[name]
    net = _net()
    x, y = waveform_noise(24, generator=1)
    row = Tracker([(name, options)], data=(x, y), generator=SEED).step(net, step=3)
    expected = functional(net, x, y)
    assert row.pop("step") == 3
    _assert_same_row(row, columns(name, expected))


def test_tracking_every_measure_leaves_the_training_state_alone():
    # mlp(40, 16, 2, 3, norm="batch") as an nn.Sequential, whose blocks skim can linearize
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(40, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 3))
    x, y = waveform_noise(32)
    nn.functional.cross_entropy(net(x), y).backward()
    state = {k: v.clone() for k, v in net.state_dict().items()}
    grads = [p.grad.clone() for p in net.parameters()]
    light = {"sharpness": {"n_iter": 3}, "expected_sharpness": {"n_probes": 4},
             "pac_bayes": {"n_probes": 4}, "jacobian_norm": {"n_iter": 3},
             "weight_transitions": {"layer": "0", "direction": {"weight": torch.randn(16, 40)}},
             "skim": {"layers": ("0", "2")}, "dichotomies": {"layer": "3", "resolution": 32},
             "weight_noise_robustness": {"n_repeats": 1}}
    names = list(REGISTRY)
    row = Tracker(names, options=light).step(net, (x, y))
    assert {n for n in names if n in row or any(c.startswith(n + "/") for c in row)} == \
        set(names)
    assert net.training
    assert all(torch.equal(v, state[k]) for k, v in net.state_dict().items())
    assert all(torch.equal(p.grad, g) for p, g in zip(net.parameters(), grads))


def test_structured_results_become_per_layer_summary_and_indexed_columns():
    net = _net()
    x, y = waveform_noise(24, generator=1)
    row = Tracker(["trajectory_length", "transitions", "capacity", "pac_bayes", "margin"],
                  data=(x, y), options={"pac_bayes": {"n_probes": 4}}).step(net)
    trajectory = nngauge.trajectory_length(net, line(x[0], x[1], 65), norm_mode="eval")
    assert [layer.name for layer in trajectory.layers] == ["input", "layers.0.act",
                                                           "layers.1.act", "output"]
    for i, layer in enumerate(trajectory.layers):
        assert row[f"trajectory_length/{layer.name}/length"] == layer.length
        assert row[f"trajectory_length/lengths/{i}"] == trajectory.lengths[i]
    assert row["trajectory_length/n_points"] == trajectory.n_points
    assert not any("settings" in c or "mode" in c or "converged" in c for c in row)
    segment = nngauge.transitions(net, x[0], x[1], norm_mode="eval")
    assert row["transitions/n_patterns"] == segment.n_patterns
    assert row["transitions/layers.1.act/transitions"] == segment.layers[1].transitions
    assert row["transitions/per_layer/1"] == segment.per_layer[1]
    cap = nngauge.capacity(net, (x, y))
    assert _same(row["capacity/measures/l2_path/log10_capacity"], cap.measures[2].log10_capacity)
    assert row["capacity/l2_path_norm"] == cap.l2_path_norm
    assert row["capacity/layers.0.linear/spectral"] == cap.layers[0].spectral
    assert {"pac_bayes/points/0/bound", "pac_bayes/points/2/kl", "pac_bayes/best_bound"} <= \
        set(row)
    assert row["margin"] == nngauge.margin(net, (x, y)).margin  # the field named as the measure


def test_options_give_fixed_inputs_and_replace_defaults():
    net = _net()
    x, y = waveform_noise(24, generator=1)
    a, b = x[5], x[9]
    tracker = Tracker({"arc": ("trajectory_length", {"trajectory": arc(a, b, 33)}),
                       "sampled": ("transitions", {"x0": a, "x1": b, "method": "sampled"}),
                       "density": ("region_density", {"radius": 0.3, "n_directions": 2})},
                      data=(x, y), generator=SEED)
    row = tracker.step(net)

    def of(name):
        return {k: v for k, v in row.items() if k == name or k.startswith(name + "/")}

    _assert_same_row(of("arc"), columns(
        "arc", nngauge.trajectory_length(net, arc(a, b, 33), norm_mode="eval")))
    _assert_same_row(of("sampled"), columns(
        "sampled", nngauge.transitions(net, a, b, method="sampled", norm_mode="eval")))
    _assert_same_row(of("density"), columns(  # region_density's field density: column density
        "density", nngauge.region_density(net, x[:8], radius=0.3, n_directions=2,
                                          norm_mode="eval", generator=_gen())))


def test_region_density_reads_all_the_points_it_is_given():
    """The Tracker feeds region_density the first 8 probe points; points given as data= are
    all read (the reproduction regions-and-loss tracks 16 and 128)."""
    net = _net()
    x = waveform_noise(24, generator=3).inputs
    row = Tracker([("region_density", {"data": x[:16], "radius": 0.3})],
                  generator=SEED).step(net)
    _assert_same_row(row, {"step": 0, **columns("region_density", nngauge.region_density(
        net, x[:16], radius=0.3, norm_mode="eval", generator=_gen()))})


def test_fixed_probes_give_identical_values_on_an_unchanged_model():
    net = _net()
    data = waveform_noise(60, generator=2)
    tracker = Tracker(["trajectory_length", "transitions", "region_density", "correlations",
                       "activation_patterns", "kernel_conditioning",
                       ("expected_sharpness", {"n_probes": 8})],
                      probe_data=data.inputs[:10], data=(data.inputs[40:], data.labels[40:]))
    first = tracker.step(net, (data.inputs[:20], data.labels[:20]))
    second = tracker.step(net, (data.inputs[20:40], data.labels[20:40]))  # another batch
    assert first.pop("step") == 0 and second.pop("step") == 1
    _assert_same_row(second, first)
    assert torch.equal(tracker.probes, data.inputs[:10])


def test_probes_default_to_a_copy_of_the_first_measured_batch():
    net = _net()
    x, y = waveform_noise(20, generator=3)
    batch = x.clone()
    tracker = Tracker(["transitions"])
    first = tracker.step(net, (batch, y))
    batch.mul_(2.0)  # a loop reusing its buffer must not move the probes
    second = tracker.step(net, (batch, y))
    assert torch.equal(tracker.probes, x)
    assert first["transitions/n_patterns"] == second["transitions/n_patterns"]


def test_weight_snapshots_are_detached_cpu_copies_at_kept_measurements():
    net = _net()
    tracker = Tracker(["weight_norm"], every=2, keep_weights=2)
    x = torch.randn(4, 40)
    for _ in range(9):  # measured at steps 0, 2, 4, 6, 8; kept at the 1st, 3rd and 5th
        tracker.step(net, x)
        with torch.no_grad():
            next(net.parameters()).add_(1.0)
    snapshots = tracker.weight_snapshots
    assert [step for step, _ in snapshots] == [0, 4, 8]
    names = [name for name, _ in net.named_parameters()]
    first = next(net.parameters()).detach()
    for k, (_, weights) in enumerate(snapshots):
        assert list(weights) == names
        assert all(w.device.type == "cpu" and not w.requires_grad for w in weights.values())
        # the model moved on after each snapshot (9 additions in all); the copies did not
        assert torch.allclose(weights[names[0]], first - (9 - 4 * k), atol=1e-5)
    assert Tracker(["weight_norm"]).weight_snapshots == []


@pytest.mark.parametrize("output", ["text", None, {}, {"a": "b", "c": None}, [True]])
def test_a_measure_that_yields_no_number_raises(output):
    tracker = Tracker({"empty": lambda model, data: output})
    with pytest.raises(NNGaugeError, match="'empty' expected .*number.*got .*Fix"):
        tracker.step(_net(), torch.randn(4, 40))


def test_a_name_whose_module_is_missing_says_so(monkeypatch):
    monkeypatch.setitem(REGISTRY, "hessian", TrackedMeasure("nngauge.measures.no_such_family"))
    with pytest.raises(MissingDependencyError, match="'hessian'.*no_such_family.*Fix"):
        Tracker(["hessian"])


def test_callables_get_the_seeded_generator_when_they_take_one():
    def noise(model, data, *, generator, scale=1.0):
        return {"draw": scale * float(torch.rand(1, generator=generator))}

    tracker = Tracker([(noise, {"scale": 2.0})], generator=11)
    rows = [tracker.step(_net(), torch.randn(2, 40)) for _ in range(2)]
    expected = 2.0 * float(torch.rand(1, generator=torch.Generator().manual_seed(11)))
    assert [r["noise/draw"] for r in rows] == [expected, expected]


@pytest.mark.parametrize("call", [
    lambda: Tracker([("nlc", {"bogus": 1})]),
    lambda: Tracker([("nlc", {"generator": torch.Generator()})]),
    lambda: Tracker(["nlc", "nlc"]),
    lambda: Tracker([("nlc",)]),
    lambda: Tracker(["transitions"], probe_data=torch.randn(1, 40)).step(_net()),
    lambda: Tracker(["region_density"], probe_data=torch.ones(3, 40)).step(_net()),
])
def test_bad_measure_specs_raise_with_expected_got_fix(call):
    with pytest.raises(NNGaugeError, match="expected .*got .*Fix"):
        call()
