"""The model options travel as one object (issue 32): ``ModelOptions`` and the
``model_options`` decorator (``nngauge._internal.options``).

The public signatures are unchanged (a snapshot taken before the change); ``options=`` gives
the values of the keywords it stands for; a call giving both is refused; ``ModelOptions``
checks what it can without the model, with the messages the adapter gave."""

from __future__ import annotations

import inspect
import json
import pydoc
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

import nngauge
from nngauge import proxies
from nngauge._constraints import declared
from nngauge._internal.adapter import ModelAdapter
from nngauge._internal.options import KEYWORDS, ModelOptions, model_options
from nngauge.errors import InvalidInputError
from nngauge.nn import mlp
from nngauge.trajectories import line

sys.path.insert(0, str(Path(__file__).parent))
from write_public_signatures import SNAPSHOT, public_functions, signatures  # noqa: E402


# ------------------------------------------------------------------------------ signatures


def test_public_signatures_are_those_of_the_snapshot():
    """Every public measure and proxy (and build_report, fit) has the signature recorded in
    tests/data/public_signatures.json, written before the model options became one object.
    A deliberate change of a public signature means rewriting the snapshot
    (``python tests/write_public_signatures.py``) in the same change, and saying so."""
    recorded = json.loads(SNAPSHOT.read_text())
    current = signatures()
    assert sorted(current) == sorted(recorded), "functions added or removed: rewrite the snapshot"
    changed = {name: (recorded[name], current[name]) for name in recorded
               if current[name] != recorded[name]}
    assert not changed, changed


@pytest.mark.parametrize("qualified", sorted(dict(public_functions())))
def test_no_public_signature_shows_the_options_object(qualified):
    function = dict(public_functions())[qualified]
    parameters = inspect.signature(function).parameters
    assert "options" not in parameters
    for name in set(KEYWORDS) & set(parameters):
        assert parameters[name].kind is inspect.Parameter.KEYWORD_ONLY, (qualified, name)


def test_help_and_the_constraints_see_the_public_signature():
    text = pydoc.render_doc(nngauge.margin, renderer=pydoc.plaintext)
    heading = next(line for line in text.splitlines() if line.startswith("margin("))
    assert heading.endswith("*, percentile: 'float' = 5, output: 'Any' = None, batch_size: "
                            "'int' = 1024, norm_mode: 'Optional[NormMode]' = 'eval') -> "
                            "'MarginResult'")
    assert {"output", "norm_mode"} <= set(declared(nngauge.margin))
    assert {"output", "input_module", "norm_mode", "dropout"} <= set(declared(proxies.snip))


# ------------------------------------------------------------------ the object and the keywords


def _net(norm=None) -> nn.Module:
    return mlp(6, 16, 2, 3, activation="tanh", norm=norm,
               generator=torch.Generator().manual_seed(0))


def _xy():
    g = torch.Generator().manual_seed(1)
    return torch.randn(40, 6, generator=g), torch.randint(0, 3, (40,), generator=g)


class _Dict(nn.Module):
    """A model returning a dict, so that ``output=`` selects."""

    def __init__(self):
        super().__init__()
        self.net = _net()

    def forward(self, x):
        y = self.net(x)
        return {"scores": y, "other": -y}


def _keyword_and_object_calls():
    x, y = _xy()
    bn, plain, selected = _net("batch"), _net(), _Dict()
    return {
        "nlc": (lambda **o: nngauge.nlc(bn, x, generator=0, **o).nlc,
                {"norm_mode": "eval"}),
        "jacobian_norm": (lambda **o: nngauge.jacobian_norm(bn, x, generator=0, n_iter=5,
                                                            **o).norm,
                          {"norm_mode": "frozen"}),
        "margin": (lambda **o: nngauge.margin(selected, x, y, **o).margin,
                   {"output": "other", "norm_mode": None}),
        "trajectory_length": (lambda **o: nngauge.trajectory_length(
            bn, line(x[0], x[1], 9), norm_data=x, **o).lengths,
                              {"norm_mode": "frozen"}),
        "correlations": (lambda **o: nngauge.correlations(plain, x, generator=0,
                                                          **o).rho_max,
                         {"output": None, "norm_mode": "train"}),
        "snip": (lambda **o: proxies.snip(bn, x, y, generator=0, **o),
                 {"norm_mode": "eval", "dropout": False}),
        "synflow": (lambda **o: proxies.synflow(selected, x, **o), {"output": "scores"}),
        "flops": (lambda **o: proxies.flops(bn, x, **o), {"norm_mode": "frozen"}),
        "nlc_score": (lambda **o: proxies.nlc_score(bn, x, generator=0, **o),
                      {"norm_mode": "eval"}),
        "trajectory_growth": (lambda **o: proxies.trajectory_growth(bn, x, resolution=9, **o),
                              {"norm_mode": "eval"}),
    }


@pytest.mark.parametrize("name", sorted(_keyword_and_object_calls()))
def test_the_options_object_gives_the_values_of_the_keywords(name):
    call, keywords = _keyword_and_object_calls()[name]
    assert call(options=ModelOptions(**keywords)) == call(**keywords)


def test_an_object_keeps_its_values_where_the_function_default_differs():
    """``options=`` is complete: margin's norm_mode default "eval" does not override the
    object's None (the caller says what it wants)."""
    x, y = _xy()
    net = _net("batch")
    kept = nngauge.margin(net, x, y, options=ModelOptions(norm_mode=None))
    assert kept.mode.norm_mode == nngauge.margin(net, x, y, norm_mode=None).mode.norm_mode
    assert nngauge.margin(net, x, y).mode.norm_mode == "eval"


def test_an_int_generator_is_normalized_with_the_object_too():
    x, _ = _xy()
    net = _net()
    via_object = nngauge.nlc(net, x, generator=3, options=ModelOptions()).nlc
    assert via_object == nngauge.nlc(net, x, generator=torch.Generator().manual_seed(3)).nlc


def test_other_arguments_are_still_checked_with_the_object():
    x, _ = _xy()
    with pytest.raises(InvalidInputError, match="n_probes"):
        nngauge.nlc(_net(), x, n_probes=0, options=ModelOptions())


# ---------------------------------------------------------------------------------- refusals


def test_the_object_and_a_keyword_together_are_refused():
    x, y = _xy()
    with pytest.raises(InvalidInputError, match=r"nlc\(\) expected the model options either "
                       r"as keywords or as one options= object; got options= and norm_mode="):
        nngauge.nlc(_net(), x, options=ModelOptions(), norm_mode="eval")
    with pytest.raises(InvalidInputError, match="got options= and output="):
        proxies.snip(_net(), x, y, options=ModelOptions(), output=0)


def test_an_object_setting_an_option_the_function_does_not_offer_is_refused():
    x, y = _xy()
    with pytest.raises(InvalidInputError, match=r"margin\(\) expected options= setting only "
                       r"the model options margin\(\) offers \(output, norm_mode\); got "
                       r"dropout=True"):
        nngauge.margin(_net(), x, y, options=ModelOptions(dropout=True))


def test_options_that_are_not_a_model_options_are_refused():
    x, _ = _xy()
    with pytest.raises(InvalidInputError, match="options= a ModelOptions"):
        nngauge.nlc(_net(), x, options={"norm_mode": "eval"})


# -------------------------------------------------------------------------------- validation

MESSAGES = {
    "output": ("output", (1, 2), "f() expected output= None, a key (str), an index (int) or a "
               "callable; got tuple. Fix: pass e.g. output='logits' or output=0."),
    "norm_mode": ("norm_mode", "batch", "f() expected norm_mode in ('train', 'eval', 'frozen') "
                  "or None; got norm_mode='batch'. Fix: use 'train' (batch statistics), 'eval' "
                  "(running statistics) or 'frozen' (statistics of the data, then fixed)."),
    "dropout": ("dropout", 1, "f() expected dropout True or False; got dropout=1. Fix: pass "
                "dropout=False (default) or True."),
}
"""The adapter's messages before the options became one object, word for word."""


@pytest.mark.parametrize("name", sorted(MESSAGES))
def test_model_options_keep_the_adapters_messages(name):
    field, bad, message = MESSAGES[name]
    options = ModelOptions(**{field: bad})
    with pytest.raises(InvalidInputError) as checked:
        options.check("f()")
    assert str(checked.value) == message
    with pytest.raises(InvalidInputError) as adapted:
        ModelAdapter(_net(), options, where="f()")
    assert str(adapted.value) == message


def test_a_bad_object_passed_on_is_refused_naming_the_function():
    x, _ = _xy()
    with pytest.raises(InvalidInputError) as info:
        nngauge.nlc(_net(), x, options=ModelOptions(norm_mode="batch"))
    assert str(info.value) == MESSAGES["norm_mode"][2].replace("f()", "nlc()")


def test_the_adapter_checks_the_input_module_against_the_model():
    with pytest.raises(InvalidInputError, match="input_module naming a submodule"):
        ModelAdapter(_net(), ModelOptions(input_module="nowhere"), where="f()")


def test_a_precision_is_a_floating_dtype_and_a_finer_one_upcasts():
    with pytest.raises(InvalidInputError, match="precision a floating torch.dtype"):
        ModelOptions(precision=torch.int64).check("f()")
    adapter = ModelAdapter(_net().to(torch.float16), ModelOptions(precision=torch.float64))
    assert next(adapter.model.parameters()).dtype == torch.float64
    assert adapter.mode.precision == "float64 (upcast copy of a float16 model)"


# -------------------------------------------------------------------------------- decorator


def test_the_decorator_places_the_keywords_and_refuses_misuse():
    @model_options("output", norm_mode="eval", after={"norm_mode": "batch_size"})
    def measure(model, *, percentile=5, options: ModelOptions, batch_size=8):
        return options

    assert str(inspect.signature(measure)) == (
        "(model, *, percentile=5, output: 'Any' = None, batch_size=8, "
        "norm_mode: 'Optional[NormMode]' = 'eval')")
    assert measure(None) == ModelOptions(norm_mode="eval")
    assert measure(None, output="y", norm_mode=None) == ModelOptions(output="y")
    with pytest.raises(TypeError, match="offer each of"):
        model_options("precision")
    with pytest.raises(TypeError, match="offer each of"):
        model_options("output", after={"dropout": "batch_size"})
    with pytest.raises(TypeError, match="keyword-only parameter 'options'"):
        model_options("output")(lambda model: model)
    with pytest.raises(TypeError, match="declares \\['output'\\] itself"):
        model_options("output")(lambda model, *, output=None, options: model)
