"""One vocabulary (docs/api.md): every parameter name of the public measures, proxies, theory,
data and report is in the page's tables; no deprecated name is left in a signature; every
deprecated keyword and call layout (the registries of ``nngauge._vocabulary``) warns once,
naming the new spelling, and gives the values of the new spelling; both at once are refused;
an int generator is a generator seeded with it. The generated part of the page is what
``docs/write_api.py`` writes."""

from __future__ import annotations

import dataclasses
import importlib.util
import inspect
import math
import re
import tempfile
import warnings
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import nngauge
from nngauge import data as D
from nngauge import proxies, theory, zoo
from nngauge._constraints import GENERATOR
from nngauge._random import seed_of
from nngauge._vocabulary import LAYOUTS, RENAMES
from nngauge.errors import InvalidInputError
from nngauge.report import build_report
from nngauge.reproduce import REPRODUCTIONS, Computed, Reproduction

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "api.md"


def _load_writer():
    spec = importlib.util.spec_from_file_location("write_api", ROOT / "docs" / "write_api.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


WRITER = _load_writer()
WRITER.import_all()  # every decorated function registers its deprecated names on import


# ------------------------------------------------------------------------ what is walked


def _walked() -> dict[str, Callable]:
    """Every function of the catalogue (every public measure and proxy), the other public
    functions of nngauge.measures and nngauge.proxies (pac_bayes_bound, te_nas_rank), every
    theory and data function, the zoo's builders and samplers, build_report and
    Reproduction.run."""
    functions = {entry.qualified_name: entry.function for entry in nngauge.catalogue()}
    assert len(functions) == len(nngauge.catalogue())
    for module in (nngauge.measures, proxies, theory, D, zoo):
        for name in module.__all__:
            obj = getattr(module, name)
            if inspect.isfunction(obj) and obj not in functions.values():
                functions[f"{module.__name__}.{name}"] = obj
    functions["nngauge.report.build_report"] = build_report
    functions["nngauge.reproduce.Reproduction.run"] = REPRODUCTIONS["nlc-table1"].run  # bound
    return functions


WALKED = _walked()


def _vocabulary() -> set[str]:
    """The names in the first column of the page's tables (before the generated part)."""
    text = PAGE.read_text(encoding="utf-8").split("## Deprecated names")[0]
    names = set()
    for line in text.splitlines():
        if line.startswith("| `"):
            names.update(re.findall(r"`([A-Za-z_][A-Za-z0-9_]*)`", line.split(" | ")[0]))
    return names


def test_every_parameter_name_is_in_the_vocabulary():
    known = _vocabulary()
    outside = [f"{qualified}({name})" for qualified, function in sorted(WALKED.items())
               for name in inspect.signature(function).parameters if name not in known]
    assert not outside, f"parameters not in docs/api.md's tables: {outside}"


def test_every_name_of_the_vocabulary_is_taken_by_some_function():
    taken = {name for f in WALKED.values() for name in inspect.signature(f).parameters}
    assert not sorted(_vocabulary() - taken), "names in docs/api.md no function takes"


def _public(entry) -> str:
    return WRITER.public_name(entry.function)


@pytest.mark.parametrize("rename", RENAMES, ids=lambda r: f"{_public(r)}-{r.old}")
def test_no_deprecated_name_is_left_in_a_signature(rename):
    parameters = inspect.signature(WRITER.resolve(rename.function)).parameters
    assert rename.old not in parameters and rename.new in parameters, _public(rename)


def test_the_generated_section_is_what_the_script_writes():
    page = PAGE.read_text(encoding="utf-8")
    assert WRITER.render(page) == page, "docs/api.md is stale: run python docs/write_api.py"


# ---------------------------------------------------------------------------- small inputs


def _net(seed: int = 0, norm: bool = False) -> nn.Module:
    torch.manual_seed(seed)
    middle = [nn.BatchNorm1d(8)] if norm else []
    return nn.Sequential(nn.Linear(4, 8), *middle, nn.ReLU(), nn.Linear(8, 3)).double()


X = torch.randn(16, 4, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
Y = torch.randint(0, 3, (16,), generator=torch.Generator().manual_seed(2))
NET, BN_NET = _net(), _net(norm=True)
FITTED = NET(X).argmax(1).detach()  # labels NET fits: a positive margin


def _reproduction() -> Reproduction:
    def compute(scale, generator):
        return Computed(("u",), ((float(torch.rand((), generator=generator)),),))

    return Reproduction(name="toy", paper="nobody", target="table 0", description="a draw",
                        differences={"small": ("none",), "paper": ("none",)},
                        small_runtime="1 s", compute=compute,
                        plot=lambda computed, figure: figure.add_subplot().plot([0, 1]))


def _study():
    from nngauge.studies._summarize import StudySummary

    points = tuple({"test_error": e, "n_params": w}
                   for e, w in zip([0.4, 0.3, 0.35, 0.1, 0.2], [8, 16, 12, 64, 32]))
    return StudySummary("id", "toy", ("n_params",), points, (), None, 0.1)


def _readme_run(generator_or_seed: dict):
    result = _reproduction().run(tempfile.mkdtemp(prefix="nngauge-vocabulary-"),
                                 **generator_or_seed)
    return result.computed.rows, re.sub(r" in [0-9.]+ s", "", result.readme_path.read_text())


@dataclasses.dataclass(frozen=True)
class Case:
    """A call of one function with the old and the new spelling of one argument."""

    call: Callable[..., Any]
    old: dict
    new: dict


def _weights(model: nn.Module) -> dict:
    """A zoo network's parameters and buffers, for comparing two builds."""
    return {name: value.float() for name, value in model.state_dict().items()}


_ZOO_BUILDS: dict[str, Callable[..., nn.Module]] = {
    "bert": lambda **kw: zoo.bert(32, 8, dim=8, depth=1, heads=1, **kw),
    "gpt": lambda **kw: zoo.gpt(32, 8, dim=8, depth=1, heads=1, **kw),
    "gpt_small": zoo.gpt_small,
    "lstm_classifier": lambda **kw: zoo.lstm_classifier(4, 8, **kw),
    "resnet18": lambda **kw: zoo.resnet18(width=4, **kw),
    "resnet_small": zoo.resnet_small,
    "vit": lambda **kw: zoo.vit(8, 4, dim=8, depth=1, heads=1, **kw),
    "vit_small": zoo.vit_small,
    "groupnorm_cnn": zoo.groupnorm_cnn,
    "mobilenet_block_net": zoo.mobilenet_block_net,
    "convnext_block_net": zoo.convnext_block_net,
    "dropout_mlp": zoo.dropout_mlp,
    "elementwise_zoo_net": zoo.elementwise_zoo_net,
}
"""The zoo's builders (small sizes where the defaults are large), each with a seed case."""

SMALL = dict(batch_size=8, generator=0)
CASES: dict[tuple[str, str], Case] = {
    ("nngauge.activation_patterns", "inputs"): Case(
        lambda **kw: nngauge.activation_patterns(NET, **kw), {"inputs": X}, {"data": X}),
    ("nngauge.build_report", "seed"): Case(
        lambda **kw: build_report(NET, X, sections=(), quick=True, **kw).settings.seed,
        {"seed": 3}, {"generator": 3}),
    ("nngauge.capacity", "margin_percentile"): Case(
        lambda **kw: nngauge.capacity(NET, X, FITTED, **kw), {"margin_percentile": 10},
        {"percentile": 10}),
    ("nngauge.correlations", "search_steps"): Case(
        lambda **kw: nngauge.correlations(NET, X, max_samples=6, **kw), {"search_steps": 2},
        {"n_iter": 2}),
    ("nngauge.correlations", "search_lr"): Case(
        lambda **kw: nngauge.correlations(NET, X, max_samples=6, n_iter=2, **kw),
        {"search_lr": 0.05}, {"lr": 0.05}),
    ("nngauge.data.gaussian", "seed"): Case(
        lambda **kw: D.gaussian(12, 3, **kw), {"seed": 4}, {"generator": 4}),
    ("nngauge.data.preprocess", "seed"): Case(
        lambda **kw: D.preprocess(X, projection="haar", **kw).data, {"seed": 2},
        {"generator": 2}),
    ("nngauge.data.split", "seed"): Case(
        lambda **kw: D.split((X, Y), (0.5, 0.5), **kw), {"seed": 5}, {"generator": 5}),
    ("nngauge.data.waveform_noise", "seed"): Case(
        lambda **kw: D.waveform_noise(12, **kw), {"seed": 6}, {"generator": 6}),
    ("nngauge.dichotomies", "inputs"): Case(
        lambda **kw: nngauge.dichotomies(NET, layer="0", resolution=16, generator=0, **kw),
        {"inputs": X[:4]}, {"data": X[:4]}),
    ("nngauge.dichotomies", "n_steps"): Case(
        lambda **kw: nngauge.dichotomies(NET, X[:4], layer="0", generator=0, **kw),
        {"n_steps": 16}, {"resolution": 16}),
    ("nngauge.expected_sharpness", "loss_fn"): Case(
        lambda **kw: nngauge.expected_sharpness(NET, (X, Y), alpha=0.01, n_probes=4, **SMALL,
                                                **kw),
        {"loss_fn": None}, {"loss": "auto"}),
    ("nngauge.expected_sharpness", "n_samples"): Case(
        lambda **kw: nngauge.expected_sharpness(NET, (X, Y), alpha=0.01, **SMALL, **kw),
        {"n_samples": 4}, {"n_probes": 4}),
    ("nngauge.gradient_metrics", "loss_fn"): Case(
        lambda **kw: nngauge.gradient_metrics(NET, (X, Y), n_iter=5, **SMALL, **kw),
        {"loss_fn": lambda out, y: F.cross_entropy(out, y, reduction="none")},
        {"loss": lambda out, y: F.cross_entropy(out, y, reduction="none").mean()}),
    ("nngauge.hessian", "lanczos_steps"): Case(
        lambda **kw: nngauge.hessian(NET, (X, Y), trace=False, per_batch=False, **SMALL, **kw),
        {"lanczos_steps": 5}, {"n_iter": 5}),
    ("nngauge.loss_landscape", "steps"): Case(
        lambda **kw: nngauge.loss_landscape(NET, (X, Y), dims=1, generator=0, **kw),
        {"steps": 3}, {"resolution": 3}),
    ("nngauge.loss_landscape", "modules"): Case(
        lambda **kw: nngauge.loss_landscape(NET, (X, Y), dims=1, resolution=3, generator=0,
                                            **kw),
        {"modules": ["0"]}, {"layers": ["0"]}),
    ("nngauge.loss_landscape", "bn"): Case(
        lambda **kw: nngauge.loss_landscape(BN_NET, (X, Y), dims=1, resolution=3, generator=0,
                                            batch_size=8, **kw),
        {"bn": "recompute"}, {"norm_mode": "train"}),
    ("nngauge.pac_bayes", "loss_fn"): Case(
        lambda **kw: nngauge.pac_bayes(NET, (X, Y), alphas=[0.01], n_probes=4, **SMALL, **kw),
        {"loss_fn": F.cross_entropy}, {"loss": F.cross_entropy}),
    ("nngauge.pac_bayes", "n_samples"): Case(
        lambda **kw: nngauge.pac_bayes(NET, (X, Y), alphas=[0.01], **SMALL, **kw),
        {"n_samples": 4}, {"n_probes": 4}),
    ("nngauge.proxies.region_density", "n_points"): Case(
        lambda **kw: proxies.region_density(NET, X, n_directions=2, generator=0, **kw),
        {"n_points": 3}, {"max_samples": 3}),
    ("nngauge.proxies.rho_max", "search_steps"): Case(
        lambda **kw: proxies.rho_max(NET, X, max_samples=6, **kw), {"search_steps": 2},
        {"n_iter": 2}),
    ("nngauge.proxies.rho_max", "search_lr"): Case(
        lambda **kw: proxies.rho_max(NET, X, max_samples=6, n_iter=2, **kw),
        {"search_lr": 0.05}, {"lr": 0.05}),
    ("nngauge.proxies.trajectory_growth", "n"): Case(
        lambda **kw: proxies.trajectory_growth(NET, X, max_samples=3, max_points=65, **kw),
        {"n": 17}, {"resolution": 17}),
    ("nngauge.proxies.trajectory_growth", "n_anchors"): Case(
        lambda **kw: proxies.trajectory_growth(NET, X, resolution=17, max_points=65, **kw),
        {"n_anchors": 3}, {"max_samples": 3}),
    ("nngauge.region_density", "n_points"): Case(
        lambda **kw: nngauge.region_density(NET, X, radius=0.5, n_directions=2, generator=0,
                                            **kw),
        {"n_points": 3}, {"max_samples": 3}),
    ("nngauge.reproduce.Reproduction.run", "seed"): Case(
        lambda **kw: _readme_run(kw), {"seed": 7}, {"generator": 7}),
    ("nngauge.sharpness", "loss_fn"): Case(
        lambda **kw: nngauge.sharpness(NET, (X, Y), n_iter=3, **SMALL, **kw),
        {"loss_fn": None}, {"loss": "auto"}),
    ("nngauge.sharpness", "steps"): Case(
        lambda **kw: nngauge.sharpness(NET, (X, Y), **SMALL, **kw), {"steps": 3},
        {"n_iter": 3}),
    ("nngauge.studies.predictor_table", "seed"): Case(
        lambda **kw: nngauge.studies.predictor_table(_study(), n_resamples=19, **kw),
        {"seed": 3}, {"generator": 3}),
    ("nngauge.theory.max_activation_patterns", "activation"): Case(
        lambda **kw: theory.max_activation_patterns(4, 2, 2, **kw), {"activation": "hard_tanh"},
        {"act": "hard_tanh"}),
    ("nngauge.theory.shrinkage_bound", "activations"): Case(
        lambda **kw: theory.shrinkage_bound(depth=3, rho_max=0.5, **kw),
        {"activations": "erf"}, {"act": "erf"}),
    ("nngauge.theory.trajectory_growth_bound", "activation"): Case(
        lambda **kw: theory.trajectory_growth_bound(8, 3, **kw), {"activation": "relu"},
        {"act": "relu"}),
    ("nngauge.weight_transitions", "module"): Case(
        lambda **kw: nngauge.weight_transitions(NET, X[:4], direction={"bias": torch.ones(8)},
                                                **kw),
        {"module": "0"}, {"layer": "0"}),
    **{(f"nngauge.zoo.{name}", "seed"): Case(
        lambda build=build, **kw: _weights(build(**kw)), {"seed": 5}, {"generator": 5})
       for name, build in _ZOO_BUILDS.items()},
    ("nngauge.zoo._registry._in_dtype", "seed"): Case(  # the zoo's float64 and bfloat16 entries
        lambda **kw: _weights(zoo.ZOO["mlp_float64"].build(**kw)), {"seed": 5},
        {"generator": 5}),
    ("nngauge.zoo.sample_inputs", "seed"): Case(
        lambda **kw: zoo.sample_inputs("gpt_small", 4, **kw), {"seed": 5}, {"generator": 5}),
    ("nngauge.zoo.sample_labels", "seed"): Case(
        lambda **kw: zoo.sample_labels("gpt_small", 4, **kw), {"seed": 5}, {"generator": 5}),
}
"""One case per entry of RENAMES: (public function, old keyword) -> the call and both
spellings. A rename without a case fails the tests below."""


def _zoo_case(name: str) -> Case:
    """A zoo function's ``seed`` -> ``generator``: the same network (its state dict), or the
    same inputs and labels, from an int."""
    from nngauge import zoo
    from nngauge.zoo._registry import _in_dtype

    if name in ("sample_inputs", "sample_labels"):
        call = (lambda **kw: getattr(zoo, name)("resnet_small", 4, **kw))
    elif name == "_registry._in_dtype":
        call = (lambda **kw: _in_dtype(zoo.dropout_mlp, torch.float64, **kw).state_dict())
    else:
        call = (lambda **kw: getattr(zoo, name)(**kw).state_dict())
    return Case(call, {"seed": 3}, {"generator": 3})


CASES.update({(_public(r), r.old): _zoo_case(_public(r).removeprefix("nngauge.zoo."))
              for r in RENAMES if _public(r).startswith("nngauge.zoo.")})


def _conformance_inputs(**kw):
    from nngauge.conformance import prepare
    from nngauge.zoo import ZOO

    entry = ZOO["dropout_mlp"]
    d = prepare(entry, entry.build(), **kw)
    return d.x, d.y


def _run_all(**kw):
    """run_all on one (toy) reproduction: the rows it computed and the README it wrote."""
    from unittest import mock

    from nngauge.reproduce._index import run_all

    out = tempfile.mkdtemp(prefix="nngauge-vocabulary-")
    with mock.patch("nngauge.reproduce.get", return_value=_reproduction()):
        result, = run_all(out, names=["toy"], **kw)
    return result.computed.rows, re.sub(r" in [0-9.]+ s", "", result.readme_path.read_text())


CASES.update({
    ("nngauge.Tracker.__init__", "seed"): Case(
        lambda **kw: nngauge.Tracker(["nlc"], **kw).step(NET, X), {"seed": 3},
        {"generator": 3}),
    ("nngauge.conformance.prepare", "seed"): Case(_conformance_inputs, {"seed": 3},
                                                  {"generator": 3}),
    ("nngauge.conformance.run_cell", "seed"): Case(
        lambda **kw: nngauge.conformance.run_cell("nlc", "dropout_mlp", **kw)[0].summary,
        {"seed": 3}, {"generator": 3}),
    ("nngauge.reproduce._index.run_all", "seed"): Case(_run_all, {"seed": 3}, {"generator": 3}),
})

LAYOUT_CASES: dict[str, tuple[Callable[[], Any], Callable[[], Any]]] = {
    "nngauge.sharpness": (
        lambda: nngauge.sharpness(NET, F.cross_entropy, (X, Y), n_iter=3, **SMALL),
        lambda: nngauge.sharpness(NET, (X, Y), loss=F.cross_entropy, n_iter=3, **SMALL)),
    "nngauge.expected_sharpness": (
        lambda: nngauge.expected_sharpness(NET, None, (X, Y), alpha=0.01, n_probes=4, **SMALL),
        lambda: nngauge.expected_sharpness(NET, (X, Y), alpha=0.01, n_probes=4, **SMALL)),
    "nngauge.pac_bayes": (
        lambda: nngauge.pac_bayes(NET, F.cross_entropy, data=(X, Y), alphas=[0.01], n_probes=4,
                                  **SMALL),
        lambda: nngauge.pac_bayes(NET, (X, Y), alphas=[0.01], n_probes=4, **SMALL)),
    "nngauge.skim": (lambda: nngauge.skim(NET, "0", "1", X),
                     lambda: nngauge.skim(NET, X, layers=("0", "1"))),
}
"""One case per entry of LAYOUTS: public function -> (old call, new call)."""


def _plain(value: Any) -> Any:
    if hasattr(value, "to_dict"):
        return value.to_dict()
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().numpy()
    return value


def _same(a: Any, b: Any) -> bool:
    """Equal values: the same structure, equal numbers (NaN equal to NaN)."""
    a, b = _plain(a), _plain(b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return (isinstance(b, (list, tuple)) and len(a) == len(b)
                and all(_same(x, y) for x, y in zip(a, b)))
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        a, b = np.asarray(a), np.asarray(b)
        return a.shape == b.shape and bool(np.all((a == b) | (np.isnan(a) & np.isnan(b))
                                                  if a.dtype.kind == "f" else a == b))
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a):
        return math.isnan(b)
    return a == b


def _deprecations(call: Callable[[], Any]) -> tuple[Any, list[warnings.WarningMessage]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        value = call()
    return value, [w for w in caught if issubclass(w.category, DeprecationWarning)
                   and "removed in nngauge" in str(w.message)]


@pytest.mark.parametrize("rename", RENAMES, ids=lambda r: f"{_public(r)}-{r.old}")
def test_the_old_keyword_warns_once_naming_the_new_one_and_gives_the_same_values(rename):
    key = (_public(rename), rename.old)
    assert key in CASES, f"no test case for the deprecated {key}: add one to CASES"
    case = CASES[key]
    assert set(case.old) == {rename.old} and set(case.new) == {rename.new}
    old, caught = _deprecations(lambda: case.call(**case.old))
    assert len(caught) == 1, [str(w.message) for w in caught]
    assert repr(rename.new) in str(caught[0].message) and repr(rename.old) in str(
        caught[0].message)
    assert caught[0].filename == __file__  # attributed to the caller, not to nngauge
    new, none = _deprecations(lambda: case.call(**case.new))
    assert none == []
    assert _same(old, new), key


@pytest.mark.parametrize("layout", LAYOUTS, ids=lambda entry: _public(entry))
def test_the_old_layout_warns_once_naming_the_new_call_and_gives_the_same_values(layout):
    name = _public(layout)
    assert name in LAYOUT_CASES, f"no test case for the deprecated layout of {name}"
    old_call, new_call = LAYOUT_CASES[name]
    old, caught = _deprecations(old_call)
    assert len(caught) == 1 and layout.new in str(caught[0].message)
    assert caught[0].filename == __file__
    new, none = _deprecations(new_call)
    assert none == []
    assert _same(old, new), name


@pytest.mark.parametrize("rename", [r for r in RENAMES if r.merge is None],
                         ids=lambda r: f"{_public(r)}-{r.old}")
def test_both_spellings_at_once_are_refused(rename):
    case = CASES[_public(rename), rename.old]
    with pytest.raises(InvalidInputError, match=f"both '{rename.old}'"):
        case.call(**case.old, **case.new)


def test_both_layouts_at_once_are_refused():
    with pytest.raises(InvalidInputError, match="the loss once"):
        nngauge.sharpness(NET, F.cross_entropy, (X, Y), loss="auto")
    with pytest.raises(InvalidInputError, match="the block once"):
        nngauge.skim(NET, "0", "1", X, layers=("0", "1"))


def test_the_merged_renames_keep_what_both_spellings_meant():
    """bn="frozen" with a norm_mode keeps it; bn="recompute" with one is refused, as before;
    Reproduction.run's seed beside its generator is the seed the generator was made with."""
    call = CASES["nngauge.loss_landscape", "bn"].call
    with pytest.warns(DeprecationWarning, match="'norm_mode'"):
        kept = call(bn="frozen", norm_mode="frozen")
    assert _same(kept, call(norm_mode="frozen")) and kept.mode.norm_mode == "frozen"
    with pytest.raises(InvalidInputError, match="norm_mode"):
        call(bn="recompute", norm_mode="eval")
    with pytest.warns(DeprecationWarning, match="'generator'"):
        both = _readme_run({"seed": 7, "generator": torch.Generator().manual_seed(7)})
    assert _same(both, _readme_run({"generator": 7}))
    assert "--seed 7" in both[1]


def test_a_library_module_calling_an_old_name_fails_the_tests_a_user_only_gets_a_warning():
    """pyproject's error::DeprecationWarning:nngauge.* filter: the warning is attributed to
    the caller's module, so nngauge code using an old name is an error, a user's a warning."""
    namespace = {"__name__": "nngauge._library_caller"}
    exec(compile("from nngauge import capacity\n"
                 "def call(*args, **kwargs):\n    return capacity(*args, **kwargs)\n",
                 "<nngauge library code>", "exec"), namespace)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", category=DeprecationWarning, module="nngauge.*")
        with pytest.raises(DeprecationWarning, match="'percentile'"):
            namespace["call"](NET, X, FITTED, margin_percentile=5)
        with pytest.warns(DeprecationWarning, match="'percentile'"):
            nngauge.capacity(NET, X, FITTED, margin_percentile=5)


def test_a_tracker_option_under_its_old_name_warns_at_the_users_line_with_the_same_values():
    from nngauge.training import Tracker

    old, caught = _deprecations(lambda: Tracker([("sharpness", {"steps": 2})]))
    assert len(caught) == 1 and "'n_iter'" in str(caught[0].message)
    assert caught[0].filename == __file__
    new = Tracker([("sharpness", {"n_iter": 2})])
    assert _same(old.step(NET, (X, Y)), new.step(NET, (X, Y)))


# ----------------------------------------------------------------------- the generator rule


@pytest.mark.parametrize("call", [
    lambda g: nngauge.nlc(NET, X, batch_size=8, generator=g),
    lambda g: nngauge.loss_landscape(NET, (X, Y), dims=1, resolution=3, generator=g),
    lambda g: nngauge.region_density(NET, X[:3], radius=0.5, n_directions=2, generator=g),
    lambda g: proxies.synflow(NET, X, generator=g),
    lambda g: D.split((X, Y), (0.5, 0.5), generator=g),
], ids=["nlc", "loss_landscape", "region_density", "proxies.synflow", "data.split"])
def test_an_int_generator_is_a_generator_seeded_with_it(call):
    assert _same(call(11), call(torch.Generator().manual_seed(11)))
    assert _same(call(11), call(11))  # a fresh generator each call, also for defaults


def test_the_data_sets_read_an_int_as_their_numpy_seed_and_draw_one_from_a_generator():
    assert torch.equal(D.waveform_noise(12).inputs, D.waveform_noise(12, generator=0).inputs)
    drawn = D.gaussian(12, 3, generator=torch.Generator().manual_seed(1))
    seeded = D.gaussian(12, 3, generator=seed_of(torch.Generator().manual_seed(1)))
    assert _same(drawn, seeded)
    expected = np.random.default_rng(4).standard_normal((12, 3))
    assert np.allclose(D.gaussian(12, 3, generator=4).inputs.numpy(), expected)


def test_the_generator_constraint_accepts_a_seed_or_a_generator_and_reads_the_seed_once():
    gen = torch.Generator().manual_seed(3)
    assert all(GENERATOR.accepts(v) for v in (None, 0, 2**63, np.int64(5), gen))
    assert not any(GENERATOR.accepts(v) for v in GENERATOR.violations())
    assert GENERATOR.normalized(gen) is gen and GENERATOR.normalized(None) is None
    seeded = GENERATOR.normalized(3)
    assert isinstance(seeded, torch.Generator) and seeded.initial_seed() == 3
    with pytest.raises(InvalidInputError, match="generator None or a torch.Generator or an int"):
        nngauge.nlc(NET, X, generator=-1)
