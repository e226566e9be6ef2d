"""docs/architecture.md's worked example ("How to add a measure") runs as written: its module
code defines a measure that follows the library's contract, its catalogue entry is true to the
function and the result class, and the values are right (brute force by forward hooks, and a
network whose activations are known)."""

from __future__ import annotations

import dataclasses
import inspect
import re
import sys
import types
from pathlib import Path

import pytest
import torch
from torch import nn

from nngauge import _catalogue
from nngauge._citations import PAPERS
from nngauge.conformance import model_state, same_state
from nngauge.errors import InvalidInputError

PAGE = Path(__file__).resolve().parents[1] / "docs" / "architecture.md"


def _example_blocks() -> list[str]:
    """The Python blocks of the section "How to add a measure", in order."""
    text = PAGE.read_text(encoding="utf-8")
    section = text.split("## How to add a measure", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", section, flags=re.DOTALL)


@pytest.fixture(scope="module")
def example():
    """(the module's namespace, the catalogue entry) as the page writes them."""
    module_code, entry_code = _example_blocks()
    module = types.ModuleType("activation_rms_example")  # dataclasses look their module up
    sys.modules[module.__name__] = module
    try:
        exec(compile(module_code, str(PAGE), "exec"), vars(module))  # noqa: S102 (our docs)
        entry = eval(entry_code, vars(_catalogue))  # noqa: S307
        yield vars(module), entry
    finally:
        del sys.modules[module.__name__]


def test_the_page_has_the_module_and_the_entry():
    assert len(_example_blocks()) == 2


def test_the_entry_is_true_to_the_function_and_the_result(example):
    namespace, entry = example
    function, result = namespace[entry.name], namespace[entry.result]
    parameters = inspect.signature(function).parameters
    assert set(entry.cheap) <= set(parameters)
    assert "options" not in parameters and {"output", "input_module", "norm_mode",
                                             "dropout"} <= set(parameters)
    assert set(entry.headline) <= {f.name for f in dataclasses.fields(
        namespace["RMSLayer"])} | {f.name for f in dataclasses.fields(result)}
    assert entry.family in _catalogue.FAMILIES and entry.reads in _catalogue.READS
    assert entry.paper[0] in PAPERS


def _relu_net(seed: int) -> nn.Sequential:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(5, 16), nn.ReLU(), nn.Linear(16, 16), nn.ReLU(),
                         nn.Linear(16, 3))


def test_values_equal_the_activations_recorded_by_hooks(example):
    namespace, entry = example
    net, x = _relu_net(0), torch.randn(40, 5, generator=torch.Generator().manual_seed(1))
    recorded = {}
    handles = [m.register_forward_hook(lambda mod, i, out, n=name: recorded.__setitem__(n, out))
               for name, m in net.named_modules() if isinstance(m, nn.ReLU)]
    with torch.no_grad():
        net(x)
    for handle in handles:
        handle.remove()
    before = model_state(net)
    result = namespace[entry.name](net, x, **entry.cheap)
    assert same_state(before, model_state(net))
    assert [row.name for row in result.layers] == ["1", "3"]
    for row in result.layers:
        brute = recorded[row.name][:entry.cheap["max_samples"]].double().pow(2).mean().sqrt()
        assert row.rms == pytest.approx(float(brute), rel=1e-12)
    assert result["3"] is result.layers[1] and result.n_samples == 8


def test_a_network_of_known_activations(example):
    """relu(x) of standard Gaussian inputs has mean square 1/2: RMS -> sqrt(1/2)."""
    namespace, entry = example
    net = nn.Sequential(nn.ReLU())
    x = torch.randn(20000, 50, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    result = namespace[entry.name](net, x, max_samples=20000)
    assert result.layers[0].rms == pytest.approx(0.5 ** 0.5, rel=5e-3)


def test_the_protocol_and_the_contract_come_with_the_decorators(example):
    namespace, entry = example
    function = namespace[entry.name]
    net, x = _relu_net(3), torch.randn(16, 5)
    result = function(net, x, layers=["3"], generator=0)
    assert [row.name for row in result.layers] == ["3"]
    assert set(result.to_dict()) == {"layers", "n_samples", "mode"}
    assert len(result.to_frame()) == 1
    assert result.plot().figure is not None
    with pytest.raises(InvalidInputError, match="max_samples an integer >= 1"):
        function(net, x, max_samples=0)
    with pytest.raises(InvalidInputError, match="norm_mode"):
        function(net, x, norm_mode="sometimes")
