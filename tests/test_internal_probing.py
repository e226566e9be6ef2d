"""Probing machinery: data adapters, layer discovery, hooks that never leak, state restoration."""

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from nngauge._internal.data import as_batches, collect
from nngauge._internal.layers import (
    capture_outputs,
    discover_layers,
    preserved_state,
    resolve_layers,
    select_output,
)
from nngauge.activations import get
from nngauge.errors import InvalidInputError


def small_model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.ReLU(),
                         nn.Sequential(nn.Linear(8, 8), get("relu").module()),
                         nn.Linear(8, 3))


X = torch.randn(10, 4)
Y = torch.arange(10) % 3


@pytest.mark.parametrize("data", [X, X.numpy(), (X, Y), (X.numpy(), Y.numpy()),
                                  TensorDataset(X, Y), DataLoader(TensorDataset(X, Y), batch_size=4)])
def test_every_data_form_gives_the_same_samples(data):
    batch = collect(data)
    torch.testing.assert_close(batch.inputs, X)


def test_batches_and_generator_are_deterministic():
    first = [b.inputs for b in as_batches(X, batch_size=4, n_batches=5,
                                          generator=torch.Generator().manual_seed(1))]
    second = [b.inputs for b in as_batches(X, batch_size=4, n_batches=5,
                                           generator=torch.Generator().manual_seed(1))]
    assert len(first) == 5
    for a, b in zip(first, second):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize(
    "data,match",
    [
        (torch.empty(0, 4), "at least one sample"),
        (torch.tensor([[1.0, float("nan")]]), "finite inputs"),
        (torch.ones(3, 2, dtype=torch.int64), "floating-point inputs"),
        ((X, Y[:3]), "as many labels as inputs"),
        ("not data", "torch.Tensor or numpy array"),
        ({"x": X}, "torch.Tensor or numpy array"),
    ],
)
def test_bad_data_is_explained(data, match):
    with pytest.raises(InvalidInputError, match=match) as info:
        list(as_batches(data, where="nlc()"))
    assert str(info.value).startswith("nlc() expected") and "Fix:" in str(info.value)


def test_discovery_walks_nested_blocks():
    model = small_model()
    kinds = [layer.kind for layer in discover_layers(model)]
    assert kinds == ["linear", "norm", "activation", "linear", "activation", "linear"]
    names = [layer.name for layer in discover_layers(model, ["linear"])]
    assert names == ["0", "3.0", "4"]
    with pytest.raises(InvalidInputError, match="layer names"):
        resolve_layers(model, ["nope"], default_kinds=["linear"], where="correlations()")


def test_hooks_are_removed_also_when_the_model_raises():
    model = small_model()
    layers = discover_layers(model)
    with capture_outputs(layers) as outputs:
        model(X)
    assert set(outputs) == {layer.name for layer in layers}
    with pytest.raises(RuntimeError):
        with capture_outputs(layers):
            model(torch.randn(10, 5))  # wrong width: the model raises
    assert all(not m._forward_hooks for m in model.modules())


def test_state_is_restored_also_on_error():
    model = small_model().eval()
    model[0].weight.requires_grad_(False)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(ValueError):
        with preserved_state(model, parameters=True):
            model.train()
            model(X)  # moves batchnorm running statistics
            with torch.no_grad():
                model[4].weight.add_(1.0)
            for p in model.parameters():
                p.requires_grad_(True)
            raise ValueError("measure failed")
    assert not any(m.training for m in model.modules())
    assert model[0].weight.requires_grad is False
    for key, value in model.state_dict().items():
        torch.testing.assert_close(value, before[key])


def test_output_selection():
    out = (torch.ones(2), {"logits": torch.zeros(2)})
    assert select_output(out, 0).sum() == 2
    assert select_output({"logits": torch.zeros(2)}, "logits").sum() == 0
    with pytest.raises(InvalidInputError, match="output= one of \\['logits'\\]"):
        select_output({"logits": torch.zeros(2)})
    assert select_output(out, lambda o: o[1]["logits"]).shape == (2,)
