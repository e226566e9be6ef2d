"""The bad-input suite, generated from the declarations (the conformance habit): every public
function declares the range of each option (``nngauge._constraints``), and this suite
feeds each declared constraint every one of its violations, on an otherwise valid call. Each
call must end in an InvalidInputError that names what was expected, what was got and the fix,
before any work: no raw exception, no silent value.

Coverage is checked too: every public function declares its options, apart from the listed
arguments that carry data (validated by the data layer, with its own tests) or structured
options validated in the function (with their own tests)."""

from __future__ import annotations

import importlib
import inspect
import math
import re

import numpy as np
import pytest
import torch
from torch import nn

from nngauge._constraints import declared
from nngauge.errors import InvalidInputError
from nngauge.trajectories import line, plane

MODULES = ("nngauge", "nngauge.theory", "nngauge.training", "nngauge.nn", "nngauge.data",
           "nngauge.trajectories", "nngauge.activations", "nngauge.zoo", "nngauge.proxies")

DATA_ARGUMENTS = {"data", "labels", "inputs", "x0", "x1", "trajectory", "template", "norm_data",
                  "train", "val", "test", "direction", "plane", "X", "K", "points", "value",
                  "x2"}
"""Arguments holding data: tensors, datasets, loaders, trajectories (checked by the data layer
and the adapter: tests/test_input_contract.py and each measure's tests)."""

STRUCTURED = {
    "loss_landscape": {"directions", "resolution", "span"},
    "plane": {"directions"},
    "weight_transitions": {"span"},
    "regions": {"bounds"},
    "fit": {"tracker"},
    "build_report": {"sections", "progress"},
}
"""Options whose shape depends on other arguments, validated in the function (its tests)."""


def _net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(5, 8), nn.ReLU(), nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 3))


def _xy():
    gen = torch.Generator().manual_seed(1)
    return torch.randn(20, 5, generator=gen), torch.randint(0, 3, (20,), generator=gen)


def _valid_arguments(name: str) -> tuple:
    """Positional arguments of a valid call of the public function ``name``."""
    net, (x, y) = _net(), _xy()
    pair = (x, y)
    table = {
        "capacity": (net, pair), "margin": (net, pair), "gradient_metrics": (net, pair),
        "error_preserving_perturbation": (net, pair), "hessian": (net, pair),
        "loss_landscape": (net, pair),
        "expected_sharpness": (net, pair, None, 0.01),
        "pac_bayes": (net, pair, None, [0.01]),
        "sharpness": (net, pair),
        "fold_batchnorm": (net,), "path_norm": (net,), "layer_spectra": (net,),
        "skim": (net, x, ("0", "1")),
        "dichotomies": (net, x[:3], "0"),
        "trajectory_length": (net, line(x[0], x[1], 9)),
        "transitions": (net, x[0], x[1]),
        "weight_noise_robustness": (net, x, y),
        "region_density": (net, x, 0.1),
        "regions": (net, plane(x[0], x[1], x[2])),
        "weight_transitions": (net, x, "0", {"weight": torch.ones(8, 5)}),
        "fit": (net, pair, pair, 0.1),
        "lr_search": (net, pair, pair),
        "distance_from_init": (net, _net()),
        "norm_measures": (net, pair), "flatness": (net, pair), "gradient_noise": (net, pair),
    }
    return table.get(name, (net, x))


def _history():
    from nngauge.training import EpochRecord

    return [EpochRecord(0, 0.1, math.nan, math.nan, 0.5, "improved"),
            EpochRecord(1, 0.1, 0.05, 0.0, 0.2, "improved", 4)]


def _valid_elsewhere(qualified: str) -> tuple:
    """Leading arguments of a valid call of a public function outside the measures and the
    theory (the data, building blocks, training helpers, zoo); () for functions without
    required arguments."""
    from nngauge.activations import get

    x, y = _xy()
    relu = get("relu")
    table = {
        "nngauge.training.fit": (_net(), (x, y), (x, y), 0.1),
        "nngauge.training.lr_search": (_net(), (x, y), (x, y)),
        "nngauge.training.smallest_lr": (_net(), (x, y)),
        "nngauge.training.classification_error": (_net(), (x, y)),
        "nngauge.training.output_scale": (_net(), x),
        "nngauge.training.log_steps": (2, 100),
        "nngauge.training.steps_to_loss": (_history(), 0.1),
        "nngauge.nn.mlp": (5, 8, 2, 3),
        "nngauge.nn.sample_architecture": (torch.Generator().manual_seed(0), 5, 3),
        "nngauge.nn.sample_description": (torch.Generator().manual_seed(0), 5, 3),
        "nngauge.nn.cnn": (64, 8, 2, 3),
        "nngauge.nn.sample_cnn": (torch.Generator().manual_seed(0), 64, 3),
        "nngauge.nn.trajectory_penalty": (_net(),),
        "nngauge.data.confusion_set": (x, y, 10, 5),
        "nngauge.data.gaussian": (20, 5),
        "nngauge.data.preprocess": (x,),
        "nngauge.data.random_labels": (y,),
        "nngauge.data.split": ((x, y),),
        "nngauge.trajectories.arc": (x[0], x[1]),
        "nngauge.trajectories.line": (x[0], x[1]),
        "nngauge.trajectories.through": (x[:3],),
        "nngauge.trajectories.as_trajectory": (line(x[0], x[1], 5),),
        "nngauge.activations.cross_expectation": (relu, relu, 0.5),
        "nngauge.activations.debias": (relu,),
        "nngauge.activations.expectation": (relu,),
        "nngauge.activations.from_spec": ("relu",),
        "nngauge.activations.get": ("relu",),
        "nngauge.activations.hermite_coefficients": (relu, 3),
        "nngauge.activations.modify": (relu,),
        "nngauge.activations.norm_relu_constants": (0.5,),
        "nngauge.activations.normalize": (relu,),
        "nngauge.activations.register": ("nngauge_test_unit",),
        "nngauge.activations.unit_scale": (relu,),
        "nngauge.zoo.sample_inputs": ("resnet_small", 2),
        "nngauge.zoo.sample_labels": ("resnet_small", 2),
    }
    if qualified == "nngauge.proxies.te_nas_rank":
        return ([10.0, 20.0], [3.0, 4.0])
    if qualified.startswith("nngauge.proxies."):  # the loss proxies read labels
        return (_net(), (x, y))
    if qualified == "nngauge.activations.standard_normal_rule":
        from nngauge.activations import Quadrature

        return ((0.0,), Quadrature())
    return table.get(qualified, ())


def _valid_theory(qualified: str) -> tuple:
    """Leading arguments (required keyword-only ones included, in signature order) of a valid
    call of each public function of :mod:`nngauge.theory`."""
    from nngauge.theory import correlation_map

    eye = np.eye(2)
    table = {
        "coefficient_of_nonaffinity": ("relu",),
        "coefficient_of_nonlinearity": ("relu",),
        "condition_number": (eye,),
        "correlation_map": ("relu",),
        "critical_init": ("erf",),
        "expected_regions_per_length": ([3, 3], 1.0, 1.0),
        "expected_regions_per_volume": (2, [3, 3], 1.0, 1.0),
        "gaussian_region_constants": (3, math.sqrt(2.0), 1.0),
        "gaussian_covariance": ("relu", 0.5),
        "gaussian_mean": ("relu",),
        "hermite_coefficients": ("relu", 3),
        "hyperplane_regions": (3, 2),
        "length_fixed_point": ("relu", 1.0, 1.0),
        "excess_convexity": (lambda t: t ** 2,),
        "excess_convexity_bound": (correlation_map("erf", 1.0, 0.3), 4),
        "linear_approximation_error": ("relu",),
        "linearization_error": ("relu",),
        "max_activation_patterns": (4, 2, 2),
        "max_regions_lower_bound": (2, [4, 4]),
        "max_regions_upper_bound": (2, [4, 4]),
        "mean_normalized_dot_product": (eye,),
        "nlc_activation": ("relu",),
        "nngp": (eye, "relu", 1),
        "ntk": (eye, "relu", 1),
        "profile": ("relu",),
        "sharpness_bound": (0.01, [1.0, 1.0], [3, 4, 2], 1.0, 1.0, 1.0),
        "shrinkage_bound": ("erf", 3, 0.5),
        "trajectory_growth_bound": (8, 3),
    }
    return table[qualified.removeprefix("nngauge.theory.")]


def _public_functions():
    seen = set()
    for module_name in MODULES:
        module = importlib.import_module(module_name)
        for name in module.__all__:
            obj = getattr(module, name)
            if callable(obj) and not inspect.isclass(obj) and id(obj) not in seen:
                seen.add(id(obj))
                yield f"{module_name}.{name}", obj


PUBLIC = dict(_public_functions())
MEASURES = {k: f for k, f in PUBLIC.items() if k.count(".") == 1 and k.startswith("nngauge.")}


def _options(function) -> list[inspect.Parameter]:
    """The parameters a declaration must cover: all but data, structured options, *args and
    **kwargs."""
    skip = DATA_ARGUMENTS | STRUCTURED.get(function.__name__, set())
    return [p for p in inspect.signature(function).parameters.values()
            if p.name not in skip and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]


@pytest.mark.parametrize("qualified", sorted(PUBLIC))
def test_every_public_function_declares_its_options(qualified):
    function = PUBLIC[qualified]
    missing = [p.name for p in _options(function) if p.name not in declared(function)]
    assert not missing, f"{qualified} declares no constraint for {missing}"


@pytest.mark.parametrize("qualified", sorted(PUBLIC))
def test_defaults_satisfy_their_own_declarations(qualified):
    function = PUBLIC[qualified]
    for p in inspect.signature(function).parameters.values():
        constraint = declared(function).get(p.name)
        if constraint is not None and p.default is not p.empty:
            assert constraint.accepts(p.default), (qualified, p.name, p.default)


def _valid(qualified: str) -> tuple:
    if qualified in MEASURES:
        return _valid_arguments(PUBLIC[qualified].__name__)
    if qualified.startswith("nngauge.theory."):
        return _valid_theory(qualified)
    return _valid_elsewhere(qualified)


CHECKED = dict(PUBLIC)
"""The functions whose violations this suite feeds: every public function."""


@pytest.mark.parametrize("qualified", sorted(k for k in PUBLIC if k.startswith("nngauge.theory.")))
def test_the_theory_table_has_a_valid_call_of_each_function(qualified):
    """Every theory function has its valid call (so its violations are fed to a call that
    binds), and the call runs."""
    _call(PUBLIC[qualified], _valid_theory(qualified))


def _cases():
    for qualified, function in sorted(CHECKED.items()):
        for name, constraint in declared(function).items():
            for bad in constraint.violations():
                yield pytest.param(qualified, name, bad,
                                   id=f"{qualified[8:]}-{name}-{_stable_repr(bad)}"[:90])


def _stable_repr(value) -> str:
    """repr without memory addresses, so test ids are the same in every process."""
    return re.sub(r" at 0x[0-9a-f]+", "", repr(value))


@pytest.mark.parametrize("qualified, name, bad", list(_cases()))
def test_each_violation_is_refused_with_expected_got_and_fix(qualified, name, bad):
    function = CHECKED[qualified]
    constraint = declared(function)[name]
    assert not constraint.accepts(bad)
    with pytest.raises(InvalidInputError) as info:
        _call(function, _valid(qualified), **{name: bad})
    message = str(info.value)
    assert f"expected {name} " in message and "; got " in message and "Fix:" in message


def _call(function, values: tuple, **changed):
    """``function`` called with ``values`` for its leading parameters (by position, or by
    keyword for keyword-only ones), then ``changed`` replacing or adding arguments."""
    args, kwargs = [], {}
    for p, value in zip(inspect.signature(function).parameters.values(), values):
        value = changed.pop(p.name, value)
        if p.kind is p.KEYWORD_ONLY:
            kwargs[p.name] = value
        else:
            args.append(value)
    return function(*args, **kwargs, **changed)


@pytest.mark.parametrize("value", [math.nan, -1])
def test_a_violation_is_refused_before_any_work(value, monkeypatch):
    """The check runs before the body: a model whose forward() counts calls is never run."""
    import nngauge

    calls = []
    net = _net()
    net.register_forward_hook(lambda *a: calls.append(1))
    with pytest.raises(InvalidInputError, match="tol"):
        nngauge.jacobian_norm(net, _xy()[0], tol=value)
    assert calls == []


def _census_cases():
    from bad_input_census import calls

    for cell, case in calls():
        yield pytest.param(cell, case, id=f"{cell}-{case}")


@pytest.mark.parametrize("cell, case", list(_census_cases()))
def test_each_bad_model_and_data_is_refused_with_expected_got_and_fix(cell, case):
    """Every measure and proxy of the catalogue (a new entry is covered) on a model returning
    a scalar, None or integers, a meta-device model, 0-d data and data of magnitude 1e30, and
    the trajectory helpers' bad inputs (tests/bad_input_census.py): the clear error, or for
    huge data a finite value; never another exception, never a value the input makes
    meaningless, never NaN."""
    from bad_input_census import outcome

    status, what = outcome(cell, case)
    assert status in ("clear", "ok"), what
