"""One rule for a loss callable, in every measure taking ``loss`` (docs/api.md, "What a loss
callable receives"): ``loss(outputs, labels)`` receives the tensor ``output=`` selects, the
``"logits"`` entry of a dict or ModelOutput by default, never the model's whole output.

Parametrized from the catalogue (every function with a ``loss`` parameter), over a
ModelOutput-like model (a dataclass over an OrderedDict, as Hugging Face's), a dict model and
a tuple model, each wrapping the same classifier: the callable must receive exactly the
classifier's logits (checked by value on its first, untransformed call, and by shape on every
call), and each headline number must equal the one computed on the bare classifier with the
library's own cross-entropy, itself checked by hand for the loss landscape's centre."""

from __future__ import annotations

import dataclasses
import inspect
import math
from collections import OrderedDict

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from nngauge import catalogue
from nngauge._internal.losses import CALLABLE_RECEIVES
from nngauge.errors import InvalidInputError

LOSS_MEASURES = sorted(e.name for e in catalogue()
                       if "loss" in inspect.signature(e.function).parameters)
N, D_IN, N_CLASSES, HIDDEN = 12, 4, 3, 5


@dataclasses.dataclass
class FakeModelOutput(OrderedDict):
    """Hugging Face's ModelOutput in miniature: a dataclass whose set fields are also the
    dict's entries, indexable by key or by position among the set fields."""

    loss: torch.Tensor | None = None
    logits: torch.Tensor | None = None
    hidden_states: torch.Tensor | None = None

    def __post_init__(self):
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if value is not None:
                self[f.name] = value

    def __getitem__(self, key):
        if isinstance(key, str):
            return dict(self.items())[key]
        return tuple(self.values())[key]


class Classifier(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(D_IN, 8), nn.Tanh())
        self.head = nn.Linear(8, N_CLASSES)
        self.side = nn.Linear(8, HIDDEN)  # another entry of the output, of another width

    def forward(self, x):
        h = self.body(x)
        return self.head(h), self.side(h)


class Wrapped(nn.Module):
    """The classifier returning a ModelOutput, a dict or a tuple (hidden first: the logits are
    not the first entry)."""

    def __init__(self, kind: str) -> None:
        super().__init__()
        self.kind = kind
        self.net = Classifier()

    def forward(self, x):
        logits, hidden = self.net(x)
        if self.kind == "model_output":
            return FakeModelOutput(logits=logits, hidden_states=hidden)
        if self.kind == "dict":
            return {"hidden": hidden, "logits": logits}
        return (hidden, logits)


class Bare(nn.Module):
    """The same classifier returning its logits tensor."""

    def __init__(self, wrapped: Wrapped) -> None:
        super().__init__()
        self.net = wrapped.net

    def forward(self, x):
        return self.net(x)[0]


SELECTOR = {"model_output": None, "dict": None, "tuple": 1}


def data():
    gen = torch.Generator().manual_seed(0)
    return torch.randn(N, D_IN, generator=gen), torch.randint(0, N_CLASSES, (N,), generator=gen)


def run(name: str, model: nn.Module, x, y, **kwargs):
    entry = catalogue()[name]
    return entry.function(model, x, y, **{**entry.options(), **kwargs}, generator=0)


def headline(name: str, result) -> dict:
    return {f: getattr(result, f) for f in catalogue()[name].headline}


def same(a: dict, b: dict) -> None:
    for key, value in a.items():
        if value is None or b[key] is None:
            assert value is b[key] is None, key
            continue
        va = torch.as_tensor(value, dtype=torch.float64)
        vb = torch.as_tensor(b[key], dtype=torch.float64)
        torch.testing.assert_close(va, vb, rtol=1e-9, atol=1e-12, equal_nan=True, msg=key)


def test_every_loss_measure_is_covered_and_says_the_rule():
    assert {"sharpness", "expected_sharpness", "pac_bayes", "hessian", "loss_landscape",
            "flatness", "gradient_noise", "gradient_metrics"} <= set(LOSS_MEASURES)
    for name in LOSS_MEASURES:
        doc = " ".join(inspect.getdoc(catalogue()[name].function).split())
        assert CALLABLE_RECEIVES in doc, name


@pytest.mark.parametrize("kind", sorted(SELECTOR))
@pytest.mark.parametrize("name", LOSS_MEASURES)
def test_a_callable_loss_receives_the_selected_tensor(name, kind):
    torch.manual_seed(0)
    model = Wrapped(kind).double()
    x, y = data()
    x = x.double()
    with torch.no_grad():
        logits = Bare(model)(x)
    received = []

    def loss(outputs, labels):
        assert isinstance(outputs, torch.Tensor), type(outputs)
        received.append(tuple(outputs.shape[-1:]))
        if not received[1:]:  # the first call, outside any transform: rows of the logits
            distance = torch.cdist(outputs.detach(), logits).min(1).values
            assert float(distance.max()) < 1e-12
        return F.cross_entropy(outputs, labels)

    selector = SELECTOR[kind]
    got = run(name, model, x, y, loss=loss,
              **({} if selector is None else {"output": selector}))
    assert received and set(received) == {(N_CLASSES,)}
    expected = run(name, Bare(model), x, y, loss="cross_entropy")
    same(headline(name, got), headline(name, expected))


def test_the_reference_is_checked_by_hand():
    """loss_landscape's centre is the mean cross-entropy of the logits: by hand."""
    torch.manual_seed(0)
    model = Wrapped("dict").double()
    x, y = data()
    x = x.double()
    result = run("loss_landscape", model, x, y, loss=lambda out, lab: F.cross_entropy(out, lab))
    with torch.no_grad():
        logits = Bare(model)(x)
    by_hand = -torch.log_softmax(logits, 1)[torch.arange(N), y].mean()
    assert math.isclose(result.center_loss, float(by_hand), rel_tol=1e-10)


@pytest.mark.parametrize("name", LOSS_MEASURES)
def test_output_selects_what_the_callable_receives(name):
    """output="hidden" hands the callable the other entry (width 5): the rule follows
    output=, and the numbers change with it (the check can fail)."""
    torch.manual_seed(0)
    model = Wrapped("dict").double()
    x, y = data()
    x = x.double()
    widths = set()

    def loss(outputs, labels):
        widths.add(outputs.shape[-1])
        return F.cross_entropy(outputs, labels)

    run(name, model, x, y, loss=loss, output="hidden")
    assert widths == {HIDDEN}


@pytest.mark.parametrize("name", LOSS_MEASURES)
def test_a_loss_written_for_the_whole_output_is_refused_with_the_rule(name):
    model = Wrapped("model_output").double()
    x, y = data()
    with pytest.raises(InvalidInputError, match="output= selects .*'logits'.*never receives"):
        run(name, model, x.double(), y,
            loss=lambda out, labels: F.cross_entropy(out.logits, labels))
