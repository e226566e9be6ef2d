"""Probing machinery: data adapters, sites (one per module call), hooks that never leak,
in-place-safe capture, output selection, state restoration."""

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from nngauge._internal.adapter import ModelAdapter, select_output
from nngauge._internal.data import as_batches, collect
from nngauge._internal.layers import preserved_state
from nngauge._internal.sites import SiteRecorder, discover_sites, resolve_sites
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


def test_discovery_walks_nested_blocks_in_call_order():
    model = small_model()
    sites = discover_sites(model, lambda: model(X))
    leaves = [s for s in sites if s.leaf]
    assert [s.kind for s in leaves] == ["linear", "norm", "activation", "linear", "activation",
                                        "linear"]
    assert [s.name for s in sites if s.kind == "linear"] == ["0", "3.0", "4"]
    assert [s.name for s in sites if s.kind == "block"] == ["3"]
    with pytest.raises(InvalidInputError, match="layer names"):
        resolve_sites(model, sites, ["nope"], default_kinds=["linear"], where="correlations()")


class Shared(nn.Module):
    """One ReLU called twice, in place, and a custom elementwise unit."""

    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(4, 4), nn.Linear(4, 4)
        self.relu = nn.ReLU(inplace=True)
        self.swish = _Swish()

    def forward(self, x):
        return self.swish(self.relu(self.b(self.relu(self.a(x)))))


class _Swish(nn.Module):
    def forward(self, x):
        return x * torch.sigmoid(x)


def test_a_module_called_twice_is_two_sites_and_in_place_units_cannot_overwrite():
    model = Shared()
    sites = discover_sites(model, lambda: model(X))
    assert [(s.name, s.kind) for s in sites] == [
        ("a", "linear"), ("relu#1", "activation"), ("b", "linear"), ("relu#2", "activation"),
        ("swish", "activation")]  # the custom unit is an activation by its behaviour
    assert resolve_sites(model, sites, ["relu"], default_kinds=(), where="t") == list(sites[1:4:2])
    with SiteRecorder(model, [sites[0], sites[2]]) as rec:  # outputs of a and b
        model(X)
    torch.testing.assert_close(rec.values["a"], model.a(X))  # not relu(a(x)) in place
    assert bool((rec.values["b"] < 0).any())


def test_hooks_are_removed_also_when_the_model_raises():
    model = small_model()
    sites = discover_sites(model, lambda: model(X))
    with SiteRecorder(model, sites) as rec:
        model(X)
    assert set(rec.values) == {s.name for s in sites}
    with pytest.raises(RuntimeError):
        with SiteRecorder(model, sites):
            model(torch.randn(10, 5))  # wrong width: the model raises
    assert all(not m._forward_hooks and not m._forward_pre_hooks for m in model.modules())


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
    assert select_output(out, 0)[0].sum() == 2
    assert select_output({"logits": torch.zeros(2)}, "logits")[1] == "key 'logits'"
    tensor, how = select_output({"logits": torch.zeros(2), "aux": 1})
    assert tensor.shape == (2,) and "chosen automatically" in how
    with pytest.raises(InvalidInputError, match=r"keys \['aux'\]"):
        select_output({"aux": torch.zeros(2)})
    with pytest.raises(InvalidInputError, match="would index the batch"):
        select_output(torch.zeros(3, 2), 1)
    assert select_output(out, lambda o: o[1]["logits"])[0].shape == (2,)


def test_adapter_embeds_token_ids_through_the_first_embedding():
    model = nn.Sequential(nn.Embedding(10, 3), nn.Flatten(), nn.Linear(6, 2))
    adapter = ModelAdapter(model, where="t")
    tokens = torch.tensor([[1, 2], [3, 4]])
    with adapter.active():
        x = adapter.measured(tokens)
        torch.testing.assert_close(adapter(x, tokens), model(tokens))
    assert x.shape == (2, 2, 3) and adapter.mode.input_module.startswith("0 (chosen")


class _Residual(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.act, self.fc2 = nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 4)

    def forward(self, x):
        return x + self.fc2(self.act(self.fc1(x)))


def test_block_sites_give_one_site_per_block_in_forward_order():
    """A deep network is plotted by block: a residual block called by its container gives its
    own output; a container whose children the parent calls (nngauge's MLP) gives its last
    site of the kinds asked for; the stem and head outside any block are kept."""
    from nngauge._internal.sites import block_sites
    from nngauge.nn import mlp

    class ResNetLike(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem, self.head = nn.Linear(4, 4), nn.Linear(4, 2)
            self.blocks = nn.Sequential(*[_Residual() for _ in range(60)])

        def forward(self, x):
            return self.head(self.blocks(self.stem(x)))

    net = ResNetLike()
    sites = discover_sites(net, lambda: net(torch.randn(3, 4)))
    chosen, grouped = block_sites(net, sites, ("linear",), limit=70)
    assert grouped
    assert [s.name for s in chosen] == ["stem"] + [f"blocks.{i}" for i in range(60)] + ["head"]
    deep = mlp(4, 8, 70, 2)
    sites = discover_sites(deep, lambda: deep(torch.randn(3, 4)))
    kinds = ("linear", "activation")
    chosen, grouped = block_sites(deep, sites, kinds, limit=80)  # 139 sites of those kinds
    assert grouped and [s.name for s in chosen] == (
        [f"layers.{i}.act" for i in range(69)] + ["layers.69.linear"])
    few, _ = block_sites(deep, sites, kinds, limit=10)
    assert len(few) <= 10 and few[0].name == "layers.0.act"
    assert few[-1].name == "layers.69.linear"
