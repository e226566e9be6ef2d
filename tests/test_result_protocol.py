"""One result protocol (issue 32): every result class of nngauge.measures and nngauge.theory,
found by walking the two packages, derives from nngauge._results.Result and answers
``to_dict`` (plain Python), ``to_frame`` (one row per layer or point), ``plot`` (an Axes with
something drawn, on real results of the conformance zoo and of small theory calls) and lookup by
layer name; ``PACBayesResult.layers`` is a deprecated name of ``points``."""

import dataclasses
import functools
import importlib
import inspect
import json
import pkgutil
import typing
import warnings

import numpy as np
import pytest
import torch
from torch import nn

import nngauge.measures
import nngauge.theory
from nngauge import hessian
from nngauge._results import REPORTED, Result, plain
from nngauge._vocabulary import DEPRECATED_ATTRIBUTES, AttributeRename, deprecation_message
from nngauge.conformance import MEASURES, run_cell
from nngauge.errors import UnknownNameError
from nngauge.measures import PACBayesResult
from nngauge.training._flatten import columns

matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg")
pytest.importorskip("pandas")
import matplotlib.pyplot as plt  # noqa: E402

PACKAGES = (nngauge.measures, nngauge.theory)
ZOO_MODELS = ("dropout_mlp", "resnet_small")
"""An MLP and a ResNet of the conformance zoo: every measure of the matrix runs on both."""
DRAWN_PER_CLASS = 2
"""Instances of each class the tests read and draw (the first found: for a measure's result,
one per zoo model)."""


def _walk_result_classes() -> list[type]:
    """The public dataclasses defined in the modules of nngauge.measures and nngauge.theory:
    the results and the rows of their breakdowns."""
    exported = {id(getattr(p, name)) for p in PACKAGES for name in p.__all__}
    found = {}
    for package in PACKAGES:
        for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            module = importlib.import_module(info.name)
            for obj in vars(module).values():
                if (inspect.isclass(obj) and obj.__module__ == module.__name__
                        and dataclasses.is_dataclass(obj) and id(obj) in exported):
                    found[obj.__qualname__] = obj
    return [found[name] for name in sorted(found)]


RESULT_CLASSES = _walk_result_classes()


def _returned_classes() -> list[type]:
    """The dataclasses the public functions of nngauge.measures and nngauge.theory return."""
    out = set()
    for package in PACKAGES:
        for name in package.__all__:
            function = inspect.unwrap(getattr(package, name))
            if inspect.isclass(function) or not callable(function):
                continue
            annotation = inspect.signature(function).return_annotation
            if isinstance(annotation, str):
                annotation = function.__globals__.get(annotation)
            if inspect.isclass(annotation) and dataclasses.is_dataclass(annotation):
                out.add(annotation)
    return sorted(out, key=lambda cls: cls.__qualname__)


def _theory_results() -> list[Result]:
    """One small call of every theory function that returns a result."""
    t = nngauge.theory
    x = np.random.default_rng(0).normal(size=(4, 3))
    return [
        t.profile("erf", 2.0, 0.0, arch="mlp"),
        t.correlation_map("erf", 1.5, 0.1, arch="mlp"),
        t.ntk(x, "relu", 2, with_nngp=True),
        t.shrinkage_bound("erf", depth=3, rho_max=0.3),
        t.excess_convexity_bound(t.correlation_map("erf"), 3),
        t.sharpness_bound(sigma=[0.1, 0.1], weight_norms=[1.0, 2.0], widths=(3, 4, 2), mu=0.5,
                          c2=1.0, c3=1.0, output_norm=1.0, failure_probs=[0.01, 0.01]),
        t.max_regions_lower_bound(3, [4, 4]),
        t.max_regions_upper_bound(40, [2000] * 8),  # an exact 10^672: beyond float64
        t.gaussian_region_constants(3, sigma_b=1.0),
        t.expected_regions_per_length([4, 4], c_grad=1.4, c_bias=0.4, length=2.0),
        t.expected_regions_per_volume(2, [4, 4], c_grad=1.4, c_bias=0.4, volume=1.0),
        t.max_activation_patterns(4, 2, 2),
        t.trajectory_growth_bound(8, 3),
    ]


def _hessian_with_density_and_layers() -> Result:
    """The conformance cell computes neither the density nor the per-layer rows."""
    model = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2))
    x, y = torch.randn(16, 3), torch.randint(0, 2, (16,))
    return hessian(model, (x, y), top_k=1, n_iter=4, density=True, density_probes=2,
                   per_layer=True, trace=False, generator=torch.Generator().manual_seed(0))


def _nested(result: Result):
    """``result`` and every result it holds: in fields (rows, nested results) and in cached
    properties (a RegionsResult's regions and edges)."""
    yield result
    values = [getattr(result, f.name) for f in dataclasses.fields(result)]
    values += [getattr(result, name) for name, member in vars(type(result)).items()
               if isinstance(member, functools.cached_property)]
    for value in values:
        items = value if isinstance(value, (tuple, list)) else [value]
        for item in items:
            if isinstance(item, Result):
                yield from _nested(item)


@pytest.fixture(scope="module")
def instances() -> dict[type, list[Result]]:
    """Real results by class: every measure of the conformance matrix on the zoo models, the
    theory's small calls, and the rows and results they hold."""
    results = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # untrained networks' margins, etc.
        for model in ZOO_MODELS:
            for measure in MEASURES:
                cell, result = run_cell(measure, model)
                assert cell.status != "crash", cell.summary
                if isinstance(result, Result):
                    results.append(result)
        results.append(_hessian_with_density_and_layers())
    results += _theory_results()
    found: dict[type, list[Result]] = {}
    for result in results:
        for item in _nested(result):
            found.setdefault(type(item), []).append(item)
    return found


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def _ids(classes):
    return [cls.__name__ for cls in classes]


def test_the_walk_finds_the_results_and_their_rows():
    names = {cls.__name__ for cls in RESULT_CLASSES}
    assert {"NLCResult", "NLCLayer", "PACBayesResult", "PACBayesPoint", "RegionsResult",
            "KernelTrace", "ActivationProfile", "TrajectoryGrowthBound"} <= names
    assert "MeasurementMode" not in names  # settings, defined in nngauge._internal


def test_every_returned_dataclass_is_a_walked_result_class():
    returned = _returned_classes()
    assert {"NLCResult", "KernelTrace", "RegionCountBound"} <= {c.__name__ for c in returned}
    assert set(returned) <= set(RESULT_CLASSES)


@pytest.mark.parametrize("cls", RESULT_CLASSES, ids=_ids(RESULT_CLASSES))
def test_every_result_class_is_a_result_with_the_protocol(cls):
    assert issubclass(cls, Result)
    assert "to_dict" not in vars(cls), "a dataclass result needs no hand-written to_dict"
    for method in ("to_dict", "to_frame", "plot", "__getitem__"):
        assert callable(getattr(cls, method))
    first = list(inspect.signature(cls.plot).parameters.values())[1]
    assert first.name == "ax" and first.default is None
    fields = {f.name: f for f in dataclasses.fields(cls)}
    if cls._distribution is not None:
        assert cls._distribution in fields
    if cls._rows is not None:
        assert cls._rows in fields
        hints = typing.get_type_hints(cls)
        (row_class, *_) = typing.get_args(hints[cls._rows])
        assert cls._headline in {f.name for f in dataclasses.fields(row_class)}


@pytest.mark.parametrize("cls", RESULT_CLASSES, ids=_ids(RESULT_CLASSES))
def test_real_results_of_every_class_are_drawn(cls, instances):
    """The plot test: each class's real results draw an Axes whose figure has drawn artists
    (a RegionsResult draws one Axes per pane)."""
    assert cls in instances, f"no {cls.__name__} among the conformance and theory results"
    for result in instances[cls][:DRAWN_PER_CLASS]:
        drawn = result.plot()
        ax = np.atleast_1d(np.asarray(drawn, dtype=object))[0]
        assert isinstance(ax, matplotlib.axes.Axes)
        assert any(axes.has_data() for axes in ax.figure.axes)
        ax.figure.canvas.draw()
        plt.close(ax.figure)
    _, given = plt.subplots()
    drawn = instances[cls][0].plot(ax=given)  # on an Axes of the caller's
    assert given in np.atleast_1d(np.asarray(drawn, dtype=object)) and given.has_data()


def _is_plain(value) -> bool:
    if isinstance(value, dict):
        return all(isinstance(k, str) and _is_plain(v) for k, v in value.items())
    if isinstance(value, list):
        return all(_is_plain(v) for v in value)
    return value is None or type(value) in (bool, int, float, str)


@pytest.mark.parametrize("cls", RESULT_CLASSES, ids=_ids(RESULT_CLASSES))
def test_to_dict_is_plain_and_reports_the_shown_fields(cls, instances):
    for result in instances[cls][:DRAWN_PER_CLASS]:
        out = result.to_dict()
        assert _is_plain(out), out
        json.dumps(out)
        hidden = {f.name for f in dataclasses.fields(cls) if not f.repr}
        assert not hidden & set(out)
        shown = [f.name for f in dataclasses.fields(cls) if f.repr and
                 f.metadata.get(REPORTED, True)]
        assert list(out)[:len(shown)] == shown


@pytest.mark.parametrize("cls", RESULT_CLASSES, ids=_ids(RESULT_CLASSES))
def test_to_frame_has_one_row_per_layer_or_point(cls, instances):
    for result in instances[cls][:DRAWN_PER_CLASS]:
        frame = result.to_frame()
        rows = result._breakdown()
        curve = result._curve_columns()
        if rows:
            assert len(frame) == len(rows)
            assert frame.iloc[0].to_dict().keys() == plain(rows[0]).keys()
        elif curve:
            assert list(frame.columns) == list(curve) and len(frame) == len(next(iter(
                curve.values())))
        elif cls is not nngauge.measures.LossLandscapeResult:  # one row per grid point
            assert len(frame) == 1


@pytest.mark.parametrize("cls", RESULT_CLASSES, ids=_ids(RESULT_CLASSES))
def test_lookup_by_layer_name(cls, instances):
    """``result[name]`` is the row of that layer; a wrong name, or a result without layers,
    raises a KeyError saying which names there are or that there are none."""
    for result in instances[cls][:DRAWN_PER_CLASS]:
        rows = result._breakdown()
        if rows and all(isinstance(getattr(row, "name", None), str) for row in rows):
            assert result[rows[0].name] is rows[0]
            assert result[rows[-1].name].name == rows[-1].name
            with pytest.raises(KeyError, match="known") as info:
                result["no such layer"]
            assert repr(rows[0].name) in str(info.value)
            assert isinstance(info.value, UnknownNameError)
        elif cls is not nngauge.measures.CapacityResult:  # looks up measures too
            with pytest.raises(UnknownNameError, match="no layers"):
                result["any"]


def test_capacity_looks_up_its_measures_and_its_layers(instances):
    result = instances[nngauge.measures.CapacityResult][0]
    assert result["l2"] is result.measures[0]
    assert result[result.layers[0].name] is result.layers[0]


@pytest.mark.parametrize("rename", DEPRECATED_ATTRIBUTES, ids=lambda r: f"{r.owner}.{r.old}")
def test_a_renamed_field_keeps_its_old_name_for_one_release(rename, instances):
    """Every deprecated result attribute (the registry, not a list here): reading it warns
    once, naming the new field, and gives the new field's value; to_dict shows the new name
    only."""
    by_name = {f"{cls.__module__}.{cls.__qualname__}": cls for cls in instances}
    assert rename.owner in by_name, f"no {rename.owner} among the computed results"
    result = instances[by_name[rename.owner]][0]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        old = getattr(result, rename.old)
    assert len(caught) == 1 and caught[0].category is DeprecationWarning
    owner = rename.owner.rpartition(".")[2]
    assert str(caught[0].message) == deprecation_message(owner, rename.old, rename.new,
                                                         kind="attribute")
    assert old is getattr(result, rename.new)
    assert rename.old not in result.to_dict() and rename.new in result.to_dict()


def test_the_renamed_result_fields_are_registered():
    """The fields renamed to the vocabulary's names (docs/api.md) are in the registry."""
    renamed = {(r.owner.rpartition(".")[2], r.old, r.new) for r in DEPRECATED_ATTRIBUTES}
    assert {("PACBayesResult", "layers", "points"), ("SharpnessResult", "steps", "n_iter"),
            ("ExpectedSharpnessResult", "n_samples", "n_probes"),
            ("HessianResult", "lanczos_steps", "n_iter"),
            ("DichotomiesResult", "n_steps", "resolution"),
            ("WeightTransitionsResult", "module", "layer"),
            ("CapacityResult", "margin_percentile", "percentile"),
            ("RegionDensityResult", "n_points", "n_samples")} <= renamed
    assert AttributeRename(f"{PACBayesResult.__module__}.PACBayesResult", "layers",
                           "points") in DEPRECATED_ATTRIBUTES


def test_the_library_reads_pac_bayes_without_the_old_name(instances):
    result = instances[PACBayesResult][0]
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        flat = columns("pac_bayes", result)
        result.to_frame()
        result.plot()
        with pytest.raises(UnknownNameError, match="points of a curve"):
            result["any"]
    assert flat["pac_bayes/points/0/bound"] == result.points[0].bound
