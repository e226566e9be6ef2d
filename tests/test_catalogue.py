"""The measure catalogue (issue 32): every public measure and proxy has one entry, every entry
is true to its function, and everything that lists measures (the top-level exports, the
Tracker, the study spec, the conformance matrix, the report's measure sections) knows exactly
the catalogue's names."""

from __future__ import annotations

import dataclasses
import inspect
import typing

import pytest

import nngauge
from nngauge import catalogue, measures, proxies
from nngauge._catalogue import FAMILIES, READS, Catalogue, Entry
from nngauge._citations import PAPERS
from nngauge.errors import UnknownNameError

ENTRIES = list(catalogue())
IDS = [f"{e.kind}:{e.name}" for e in ENTRIES]

NOT_MEASURES = {
    # callables of nngauge.measures.__all__ whose first parameter is not a model: helpers,
    # not measures of a network
    "pac_bayes_bound": "the bound of eq. 5/6 from numbers already measured (train loss, "
                       "expected sharpness, KL): nngauge.pac_bayes is the measure",
}
NOT_PROXIES = {
    "te_nas_rank": "combines te_nas and te_nas_regions over many architectures (ranks): not "
                   "one number per network",
}
NOT_MEASURE_SECTIONS = {
    "theory": "the infinite-width calculators of nngauge.theory on the MLP's setting: no "
              "measure of the network",
}


def _public_functions(module) -> dict[str, typing.Callable]:
    return {name: getattr(module, name) for name in module.__all__
            if inspect.isfunction(getattr(module, name))}


def _takes_a_model(function) -> bool:
    return next(iter(inspect.signature(function).parameters)) == "model"


# ------------------------------------------------------------------- completeness


def test_every_public_measure_has_an_entry():
    functions = _public_functions(measures)
    public = {name for name, f in functions.items() if _takes_a_model(f)}
    assert public == {e.name for e in catalogue().measures()}
    assert set(functions) - public == set(NOT_MEASURES)


def test_every_proxy_has_an_entry():
    functions = _public_functions(proxies)
    assert set(functions) - set(NOT_PROXIES) == {e.name for e in catalogue().proxies()}
    assert all(_takes_a_model(functions[e.name]) for e in catalogue().proxies())
    assert set(NOT_PROXIES) <= set(functions)


@pytest.mark.parametrize("entry", ENTRIES, ids=IDS)
def test_every_entry_names_its_function(entry):
    function = entry.function
    assert callable(function) and function.__name__ == entry.name
    assert function is getattr(measures if entry.kind == "measure" else proxies, entry.name)
    assert entry.qualified_name in (f"nngauge.{entry.name}", f"nngauge.proxies.{entry.name}")


def test_names_are_unique_within_a_kind():
    for kind in (catalogue().measures(), catalogue().proxies()):
        names = [e.name for e in kind]
        assert len(names) == len(set(names))


# ------------------------------------------------------------------ true to the code


def _parameters(entry: Entry) -> dict[str, inspect.Parameter]:
    return dict(inspect.signature(entry.function).parameters)


@pytest.mark.parametrize("entry", ENTRIES, ids=IDS)
def test_options_are_parameters_of_the_function(entry):
    parameters = _parameters(entry)
    given = {"cheap": set(entry.cheap), "track": set(entry.track or ())}
    given.update({f"variants[{name}]": set(options) for name, options in entry.variants.items()})
    for where, keys in given.items():
        assert keys <= set(parameters), (where, sorted(keys - set(parameters)))


@pytest.mark.parametrize("entry", ENTRIES, ids=IDS)
def test_requires_are_the_keyword_options_without_default(entry):
    parameters = _parameters(entry).values()
    required = {p.name for p in parameters if p.kind is p.KEYWORD_ONLY and p.default is p.empty}
    assert set(entry.requires) == required
    assert len(entry.requires) == len(set(entry.requires))


def _result_class(entry: Entry) -> type:
    return getattr(nngauge, entry.result)


def _fields(cls: type) -> set[str]:
    """The dataclass fields of a result class and of its per-layer rows."""
    names = {f.name for f in dataclasses.fields(cls)}
    if cls._rows is not None:
        (row,) = typing.get_args(typing.get_type_hints(cls)[cls._rows])[:1]
        names |= {f.name for f in dataclasses.fields(row)}
    return names


@pytest.mark.parametrize("entry", [e for e in ENTRIES if e.result is not None],
                         ids=[i for e, i in zip(ENTRIES, IDS) if e.result is not None])
def test_headline_and_columns_are_fields_of_the_result(entry):
    cls = _result_class(entry)
    assert dataclasses.is_dataclass(cls)
    returned = inspect.signature(inspect.unwrap(entry.function)).return_annotation
    assert returned in (cls, entry.result)
    assert entry.headline and set(entry.headline) <= _fields(cls)
    sources = entry.column_sources()
    assert {f for columns in sources.values() for f in columns.values()} <= _fields(cls)
    assert set(sources) - {None} <= set(entry.variants)  # "variant:field" names a variant


@pytest.mark.parametrize("entry", [e for e in ENTRIES if e.result is None],
                         ids=[i for e, i in zip(ENTRIES, IDS) if e.result is None])
def test_entries_without_a_result_class_return_a_float_or_a_module(entry):
    returned = inspect.signature(inspect.unwrap(entry.function)).return_annotation
    assert returned in ("float", float, "nn.Module")
    assert set(entry.columns.values()) <= {entry.name}
    if entry.kind == "proxy":
        assert entry.headline == (entry.name,) and entry.track is None


@pytest.mark.parametrize("entry", ENTRIES, ids=IDS)
def test_initial_names_the_entries_that_take_an_initial_model(entry):
    """``initial`` is true exactly for the functions that take ``initial_model``: the Tracker,
    the studies and the conformance matrix give them the network at initialization."""
    assert entry.initial == ("initial_model" in _parameters(entry))


@pytest.mark.parametrize("entry", ENTRIES, ids=IDS)
def test_family_reads_and_paper_are_known(entry):
    assert entry.family in FAMILIES and entry.reads in READS
    assert entry.paper[0] in PAPERS and entry.paper[1]
    assert entry.citation.startswith(PAPERS[entry.paper[0]][1])
    if entry.labels:
        assert entry.reads == "batch"


def test_entries_are_immutable():
    entry = catalogue()["nlc"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        entry.name = "other"
    with pytest.raises(TypeError):
        entry.cheap["batch_size"] = 1


def test_lookup_by_name_kind_and_family():
    assert catalogue()["region_density"].kind == "measure"  # a measure wins the shared name
    assert catalogue().proxy("region_density").kind == "proxy"
    assert {e.family for e in catalogue().family("expressivity")} == {"expressivity"}
    assert "nlc" in catalogue() and len(catalogue()) == len(ENTRIES)
    assert catalogue()["kernel_conditioning"].options("ntk")["kind"] == "ntk"
    for bad in (lambda: catalogue()["nlcc"], lambda: catalogue().measure("synflow"),
                lambda: catalogue().family("curvatures"),
                lambda: catalogue()["nlc"].options("none")):
        with pytest.raises(UnknownNameError, match="expected .*got .*Fix"):
            bad()
    assert isinstance(catalogue(), Catalogue)


# ------------------------------------------------- everything that lists measures


def test_top_level_exports_every_measure_and_result_class():
    exported = set(nngauge.__all__)
    for entry in catalogue().measures():
        assert entry.name in exported and getattr(nngauge, entry.name) is entry.function
        if entry.result is not None:
            assert entry.result in exported
            assert getattr(nngauge, entry.result) is getattr(measures, entry.result)
    assert "MeasurementMode" in exported


def test_the_tracker_knows_exactly_the_catalogues_tracked_measures():
    from nngauge.training import REGISTRY
    from nngauge.training._registry import OWN

    tracked = {e.name for e in catalogue().measures() if e.track is not None}
    assert set(REGISTRY) - set(OWN) == tracked
    assert set(OWN) == {"weight_norm", "grad_norm"}  # grad_norm: also a proxy's name
    assert not set(OWN) & {e.name for e in catalogue().measures()}
    assert {e.name for e in catalogue().measures() if e.track is None} == {"fold_batchnorm"}
    for name in tracked:
        entry = catalogue().measure(name)
        assert dict(REGISTRY[name].defaults) == entry.tracker_options
        assert REGISTRY[name].requires == entry.requires


def test_the_study_spec_knows_exactly_the_catalogues_study_names():
    from nngauge.studies._spec import ENTRIES as STUDY, MEASURES, PROXIES

    assert set(MEASURES) == {e.name for e in ENTRIES if e.columns}
    assert set(MEASURES) <= catalogue().names()
    for name, columns in MEASURES.items():
        entry = STUDY[name]
        assert entry in ENTRIES and tuple(entry.columns) == columns
    assert STUDY["region_density"].kind == "proxy"  # the proxy is the study's
    assert set(PROXIES) == {e.name for e in catalogue().proxies() if e.columns}
    columns = [c for cs in MEASURES.values() for c in cs]
    assert len(columns) == len(set(columns))  # one measure per column


def test_the_conformance_matrix_knows_exactly_the_catalogues_names():
    from nngauge.conformance import CELLS, MEASURES

    assert set(MEASURES) == set(CELLS)
    expected = {(e.name, e.kind, variant) for e in ENTRIES for variant in (None, *e.variants)}
    assert {(e.name, e.kind, variant) for e, variant in CELLS.values()} == expected
    assert {"kernel_conditioning[ntk]", "transitions[sampled]", "loss_landscape[regions]",
            "proxies.synflow", "proxies.region_density", "region_density"} <= set(CELLS)


def test_every_measure_section_of_the_report_names_an_entry_and_cites_its_paper():
    from nngauge.report import SECTION_BUILDERS

    for builder in SECTION_BUILDERS:
        if builder.key in NOT_MEASURE_SECTIONS:
            assert builder.measure is None
            continue
        assert builder.measure is not None, f"section {builder.key!r} names no entry"
        assert builder.source.startswith(catalogue()[builder.measure].citation), builder.key


def test_a_section_naming_an_unknown_entry_is_refused():
    from nngauge.report import SectionBuilder

    with pytest.raises(UnknownNameError, match="expected measure= a name of nngauge.catalogue"
                                               r"\(\); got 'nlcc'.*Fix"):
        SectionBuilder("x", "X", "", lambda ctx: None, "nlcc")
    with pytest.raises(UnknownNameError):
        SectionBuilder.of_measure("x", "X", "nlcc", lambda ctx: None)
