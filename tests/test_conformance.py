"""Conformance: every public measure on every zoo network (ResNet with batchnorm, max pooling
and a ReLU called twice; ViT with fused attention, and one whose forward takes timm's optional
``attn_mask`` / ``is_causal``; GPT with token ids and a dict output; BERT
with a ModelOutput; LSTMs; GroupNorm CNN; MobileNet block with Hardswish, SE and a fused
BatchNormAct2d; ConvNeXt block; dropout MLP; float64; bfloat16) ends in a value or a clear
NNGaugeError, leaves the model as it found it, and, where brute force exists, agrees with it.
"""

import copy
import math

import numpy as np
import pytest
import torch
from torch import nn

from nngauge import (
    NNGaugeError,
    activation_patterns,
    correlations,
    jacobian_norm,
    kernel_conditioning,
    margin,
    nlc,
    nlc_profile,
    trajectory_length,
    transitions,
)
from nngauge.conformance import MEASURES, format_matrix, prepare, run_cell
from nngauge.trajectories import line
from nngauge.zoo import ZOO, sample_inputs, sample_labels

EXPECTED_REFUSALS = {
    # measure: the zoo networks it must refuse (with a clear error), and why
    "path_norm": {"resnet_small", "resnet_small_timm", "resnet_bfloat16",  # max pooling
                  "vit_small", "vit_optional_args", "convnext_block",  # sample normalization
                  "groupnorm_cnn",
                  "gpt_small", "bert_small", "lstm", "lstm_tokens",  # attention, LSTM, tokens
                  "mobilenet_block", "elementwise_zoo"},  # gates, smooth activations
    "fold_batchnorm": {"mobilenet_block",  # BatchNormAct2d would lose its activation
                       "gpt_small", "bert_small", "lstm", "lstm_tokens"},  # untraceable/tokens
    "hessian": {"mobilenet_block"},  # torch has no second derivative of hardsigmoid
    "loss_landscape[regions]": {"lstm", "lstm_tokens"},  # no activation modules: no patterns
    "weight_transitions": {"vit_small", "vit_optional_args", "gpt_small", "bert_small", "lstm",
                           "lstm_tokens", "groupnorm_cnn", "mobilenet_block", "convnext_block",
                           "elementwise_zoo"},  # not piecewise linear from their input
    # no layer output with channels over positions (MLPs, LSTM classifiers): MeCo undefined
    "proxies.meco": {"lstm", "lstm_tokens", "dropout_mlp", "elementwise_zoo", "mlp_float64"},
    "proxies.meco_opt": {"lstm", "lstm_tokens", "dropout_mlp", "elementwise_zoo",
                         "mlp_float64"},
}


@pytest.mark.slow
@pytest.mark.parametrize("model_name", list(ZOO))
def test_every_measure_gives_a_value_or_a_clear_refusal(model_name):
    """Every measure and proxy of the conformance matrix (every catalogue entry and variant)
    on this zoo network ends in a value or an NNGaugeError saying what was expected and how to
    fix it, never a crash; none changes the model's state; the measures every network
    supports give a value, and exact transitions, Hessian, landscape regions, weight
    transitions and MeCo refuse exactly the expected networks."""
    cells = [run_cell(measure, model_name)[0] for measure in MEASURES]
    crashes = [f"{c.measure}: {c.summary}" for c in cells if c.status == "crash"]
    assert not crashes, crashes
    changed = [c.measure for c in cells if not c.state_kept]
    assert not changed, f"model state changed by {changed}"
    for cell in cells:
        if cell.status == "refused":
            assert "expected" in cell.summary and "Fix:" in cell.summary, cell.summary
        refused = EXPECTED_REFUSALS.get(cell.measure, set())
        if model_name in refused:
            assert cell.status == "refused", (cell.measure, cell.summary)
    # the measures every network supports
    always = ("nlc", "nlc_profile", "jacobian_norm", "gradient_metrics", "correlations",
              "kernel_conditioning", "kernel_conditioning[ntk]", "linear_region_diameter",
              "error_preserving_perturbation", "trajectory_length", "transitions[sampled]",
              "activation_patterns", "margin", "sharpness", "expected_sharpness", "pac_bayes",
              "loss_landscape", "proxies.zico", "proxies.zen_score")
    assert [c.measure for c in cells if c.measure in always and c.status != "ok"] == []
    exact = next(c for c in cells if c.measure == "transitions")
    assert exact.status == ("ok" if ZOO[model_name].piecewise_linear else "refused"), exact
    for measure in ("hessian", "loss_landscape[regions]", "weight_transitions", "proxies.meco",
                    "proxies.meco_opt"):
        cell = next(c for c in cells if c.measure == measure)
        expected = "refused" if model_name in EXPECTED_REFUSALS[measure] else "ok"
        assert cell.status == expected, (measure, cell.summary)


GRAPH_CELLS = ("path_norm", "capacity", "norm_measures", "fold_batchnorm",
               "sharpness_conditions", "transitions", "weight_transitions",
               "proxies.region_density")
"""The cells whose measure reads the network's torch.fx graph."""


def test_optional_forward_arguments_run_through_every_graph_based_measure():
    """timm's forward(x, attn_mask=None, is_causal=False) was refused by every graph-based
    measure ("forward() with 3 arguments"): traced with its defaults, each gives a value or
    refuses naming an operation of the network (attention, LayerNorm), and the traced graph
    computes the model's function."""
    from nngauge._internal.graph import trace_graph

    cells = {m: run_cell(m, "vit_optional_args")[0] for m in GRAPH_CELLS}
    for cell in cells.values():
        assert cell.status != "crash" and cell.state_kept, cell
        assert "argument" not in cell.summary, cell.summary
        if cell.status == "refused":
            assert "blocks.0." in cell.summary, cell.summary  # names the operation
    assert {m for m, c in cells.items() if c.status == "ok"} == {
        "capacity", "norm_measures", "fold_batchnorm"}
    model = ZOO["vit_optional_args"].build(generator=0).eval()
    x = sample_inputs("vit_optional_args", 4)
    graph = trace_graph(model, x, where="test")
    assert [n.target for n in graph.module.graph.nodes if n.op == "placeholder"] == ["x"]
    torch.testing.assert_close(graph.module(x), model(x))
    causal = model(x, is_causal=True)  # the argument matters: traced is the default
    assert not torch.allclose(causal, model(x))


def test_matrix_table_marks_every_cell():
    cells = [run_cell(m, "dropout_mlp")[0] for m in ("nlc", "path_norm")]
    table = format_matrix(cells)
    assert "dropout_mlp" in table and "0: nlc" in table and " ok" in table


# --------------------------------------------------------------------- brute-force checks


def _function(entry, model):
    """x (measured input) -> logits, for a brute-force Jacobian (embedding output replaced)."""
    if entry.input_module is None:
        return lambda x, raw: model(x) if entry.output is None else model(x)[entry.output]
    module = model.get_submodule(entry.input_module)

    def run(x, raw):
        handle = module.register_forward_hook(lambda m, a, o: x)
        try:
            out = model(raw)
        finally:
            handle.remove()
        return out if entry.output is None else out[entry.output]

    return run


def _per_sample_jacobians(entry, model, x, raw):
    f = _function(entry, model)
    rows = []
    for i in range(len(x)):
        jac = torch.autograd.functional.jacobian(lambda t: f(t, raw[i:i + 1]), x[i:i + 1])
        out = f(x[i:i + 1], raw[i:i + 1])
        rows.append(jac.reshape(out.numel(), x[i].numel()).double())
    return rows


BATCH_INDEPENDENT = ["vit_small", "vit_optional_args", "gpt_small", "bert_small", "lstm",
                     "lstm_tokens", "groupnorm_cnn", "convnext_block", "dropout_mlp", "elementwise_zoo",
                     "mlp_float64"]


@pytest.mark.slow
@pytest.mark.parametrize("name", BATCH_INDEPENDENT)
def test_nlc_and_jacobian_norms_equal_the_full_jacobian(name):
    """NLC paper Definition 1 and the operator norm, from explicit per-sample Jacobians."""
    entry = ZOO[name]
    model = entry.build(generator=0).eval()
    raw = sample_inputs(entry, 6)
    data = prepare(entry, model)
    x = model.get_submodule(entry.input_module)(raw).detach() if entry.input_module else raw
    jacobians = _per_sample_jacobians(entry, model, x.detach(), raw)
    f = _function(entry, model)
    with torch.no_grad():
        y = f(x, raw).reshape(len(x), -1).double()
    flat = x.reshape(len(x), -1).double()
    q_jac = math.sqrt(np.mean([float(j.pow(2).sum()) for j in jacobians]))
    in_std = math.sqrt(float(flat.var(0, unbiased=False).mean()))
    out_std = math.sqrt(float(y.var(0, unbiased=False).mean()))
    expected = q_jac * in_std / (math.sqrt(y.shape[1]) * out_std)
    got = nlc(model, raw, method="exact", batch_size=6)
    assert got.nlc == pytest.approx(expected, rel=1e-4)
    op = jacobian_norm(model, raw, batch_size=6, n_iter=500, tol=1e-10,
                       generator=torch.Generator().manual_seed(0))
    singular = [float(torch.linalg.matrix_norm(j, ord=2)) for j in jacobians]
    # a generator also shuffles the batch order: compare the sets of values
    np.testing.assert_allclose(np.sort(op.layers[-1].per_sample), np.sort(singular), rtol=1e-3)
    assert data.input_module == entry.input_module


@pytest.mark.parametrize("name", ["lstm", "gpt_small", "dropout_mlp", "mobilenet_block"])
def test_empirical_ntk_equals_the_parameter_jacobian_gram(name):
    """The output NTK (exact over units, or Gaussian probes for the vocabulary) against
    J J^T / units from torch.func.jacrev over every parameter."""
    entry = ZOO[name]
    model = entry.build(generator=0).eval().double()
    raw = sample_inputs(entry, 4)
    raw = raw.double() if raw.is_floating_point() else raw
    params = {k: v.detach() for k, v in model.named_parameters()}

    def logits(p):
        out = torch.func.functional_call(model, p, (raw,))
        return out if entry.output is None else out[entry.output]

    jac = torch.func.jacrev(logits)(params)
    units = logits(params)[0].numel()
    flat = torch.cat([j.reshape(4, units, -1) for j in jac.values()], dim=2)
    exact = (torch.einsum("icp,jcp->ij", flat, flat) / units).numpy()
    result = kernel_conditioning(model, raw, kind="ntk", layers=[], n_probes=400,
                                 generator=torch.Generator().manual_seed(1))
    got = result.layers[-1].kernel
    if units <= 16:
        np.testing.assert_allclose(got, exact, rtol=1e-9)
    else:  # probes: unbiased, standard error ~ sqrt(2 / 400) relative
        assert np.abs(got - exact).max() <= 0.25 * np.abs(exact).max()
        assert "probes" in result.layers[-1].method


@pytest.mark.parametrize("name", ["resnet_small", "gpt_small", "lstm_tokens", "vit_small"])
def test_correlations_trajectory_and_margin_against_direct_computation(name):
    entry = ZOO[name]
    model = entry.build(generator=0)
    data = prepare(entry, model)
    result = correlations(model, data.x, norm_mode="eval")
    with torch.no_grad():
        out = copy.deepcopy(model).eval()(data.x)
    logits = out if entry.output is None else out[entry.output]
    flat = logits.reshape(len(logits), -1).double()
    unit = flat / flat.norm(dim=1, keepdim=True)
    cos = unit @ unit.T
    off = cos[~torch.eye(len(cos), dtype=torch.bool)]
    assert result.layers[-1].min == pytest.approx(float(off.min()), abs=1e-5)
    length = trajectory_length(model, line(data.point0, data.point1, 5),
                               **{**data.per_point, "norm_mode": "eval"})
    assert length.lengths[0] == pytest.approx(float((data.point1 - data.point0).norm()),
                                              rel=1e-5)
    labels = sample_labels(entry, len(data.x))
    result = margin(model, data.x, labels)
    scores = logits.reshape(-1, logits.shape[-1]).double()
    flat_labels = labels.reshape(-1)
    true = scores[torch.arange(len(scores)), flat_labels]
    others = scores.scatter(1, flat_labels[:, None], -math.inf).max(1).values
    np.testing.assert_allclose(result.margins, (true - others).numpy(), rtol=1e-5, atol=1e-6)


# ------------------------------------------------- real networks' habits, treated the same


def _no_inplace(model):
    copy_ = copy.deepcopy(model)
    for module in copy_.modules():
        if hasattr(module, "inplace"):
            module.inplace = False
    return copy_


def test_per_layer_values_do_not_depend_on_inplace_activations():
    model = ZOO["resnet_small"].build(generator=0)
    x = sample_inputs("resnet_small", 16)
    gen = torch.Generator

    def measure(net):
        return (nlc_profile(net, x, batch_size=16, generator=gen().manual_seed(0)),
                correlations(net, x),
                trajectory_length(net, line(x[0], x[1], 9), norm_mode="frozen", norm_data=x,
                                  max_points=33))

    for a, b in zip(measure(model), measure(_no_inplace(model))):
        assert [r.name for r in a.layers] == [r.name for r in b.layers]
        for ra, rb in zip(a.layers, b.layers):
            _same_row(ra, rb)


def _same_row(a, b):
    """Every number of two per-layer rows agrees (nan with nan)."""
    for key, value in a.__dict__.items():
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            assert value == pytest.approx(b.__dict__[key], rel=1e-6, abs=1e-9,
                                          nan_ok=True), (a.name, key)


def test_bn_output_is_not_overwritten_by_the_inplace_relu_after_it():
    """The torchvision stem applies an in-place ReLU to bn1's output: bn1's row must show
    the batchnorm's output, not the ReLU's."""
    model = ZOO["resnet_small"].build(generator=0).eval()
    x = sample_inputs("resnet_small", 16)
    profile = nlc_profile(model, x, layers=["bn1", "relu"], batch_size=16,
                          generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        bn = model.bn1(model.conv1(x))
    expected = float(bn.reshape(16, -1).double().std(0, unbiased=False).pow(2).mean().sqrt())
    assert profile["bn1"].output_std == pytest.approx(expected, rel=1e-5)
    assert profile["relu"].output_std < 0.9 * profile["bn1"].output_std


def test_a_module_called_twice_is_two_sites_in_every_measure():
    """torchvision's block calls one ReLU twice, timm's has act1 / act2: the same function,
    so every per-layer measure gives the same numbers under the two naming schemes."""
    tv = ZOO["resnet_small"].build(generator=0)
    timm = ZOO["resnet_small_timm"].build(generator=0)
    x = sample_inputs("resnet_small", 16)
    rename = {"layer1.0.relu#1": "layer1.0.act1", "layer1.0.relu#2": "layer1.0.act2"}

    def rows(result):
        return {rename.get(r.name, r.name): r for r in result.layers
                if r.name.startswith("layer1.0.") and ("relu" in r.name or "act" in r.name)}

    gen = torch.Generator
    checks = [
        lambda net: nlc_profile(net, x, batch_size=16, generator=gen().manual_seed(0)),
        lambda net: correlations(net, x),
        lambda net: activation_patterns(net, x, norm_mode="frozen"),
        lambda net: trajectory_length(net, line(x[0], x[1], 9), norm_mode="frozen",
                                      norm_data=x, max_points=33),
        lambda net: transitions(net, x[0], x[1], method="sampled", norm_mode="frozen",
                                norm_data=x, n_initial=65, max_evaluations=512),
    ]
    for check in checks:
        a, b = rows(check(tv)), rows(check(timm))
        assert set(a) == {"layer1.0.act1", "layer1.0.act2"} == set(b), (set(a), set(b))
        for key in a:
            _same_row(a[key], b[key])


def test_activations_are_recognised_by_behaviour_and_unknown_modules_listed():
    net = ZOO["elementwise_zoo"].build(generator=0)
    x = sample_inputs("elementwise_zoo", 32)
    patterns = activation_patterns(net, x)
    types = [type(net.get_submodule(r.name)).__name__ for r in patterns.layers]
    assert types == ["QuickGELU", "Hardswish", "Swish"]
    convnext = ZOO["convnext_block"].build(generator=0)
    result = nlc(convnext, sample_inputs("convnext_block", 8), batch_size=8)
    assert any("LayerScale" in name for name in result.mode.unclassified)
    assert not any(kind in name for name in result.mode.unclassified
                   for kind in ("Identity", "Flatten", "Dropout"))
    gpt = ZOO["gpt_small"].build(generator=0)
    profile = nlc_profile(gpt, sample_inputs("gpt_small", 4), batch_size=4)
    kinds = {r.name for r in profile.layers}
    assert "h.0.mlp.act" in kinds and "h.0.mlp.c_fc" in kinds  # NewGELU, Conv1D found


def test_no_op_and_reshape_modules_are_known_and_custom_ones_still_listed():
    """timm's ResNets carry nn.Identity placeholders (drop_block, aa) and an nn.Flatten head:
    33 "neither a known layer type nor recognised by behaviour" notes on a ResNet-50. They are
    known; an unknown custom leaf module is still listed, in the mode and the report's notes."""
    from nngauge.report._context import mode_notes

    class Opaque(nn.Module):  # not elementwise, not affine: unknown
        def forward(self, x):
            return x * x.flatten(1).norm(dim=1).reshape(-1, *[1] * (x.dim() - 1))

    class Block(nn.Module):
        def __init__(self, opaque):
            super().__init__()
            self.conv1, self.bn1 = nn.Conv2d(4, 4, 3, padding=1), nn.BatchNorm2d(4)
            self.drop_block, self.aa = nn.Identity(), (Opaque() if opaque else nn.Identity())
            self.act1 = nn.ReLU()
            self.conv2, self.drop = nn.Conv2d(4, 4, 3, padding=1), nn.Dropout2d(0.1)

        def forward(self, x):
            y = self.aa(self.drop_block(self.act1(self.bn1(self.conv1(x)))))
            return torch.relu(x + self.drop(self.conv2(y)))

    def resnet(opaque):
        torch.manual_seed(0)
        return nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), Block(False), Block(opaque),
                             nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Unflatten(1, (2, 2)),
                             nn.Flatten(), nn.Identity(), nn.Linear(4, 3)).eval()

    x = torch.randn(8, 3, 8, 8, generator=torch.Generator().manual_seed(0))
    plain = correlations(resnet(False), x)
    assert plain.mode.unclassified == ()
    assert not any("neither a known" in note for note in mode_notes(plain))
    custom = correlations(resnet(True), x)
    assert custom.mode.unclassified == ("2.aa (Opaque)",)
    assert any("neither a known" in note and "2.aa (Opaque)" in note
               for note in mode_notes(custom))


# ------------------------------------------------------------- determinism and refusals


DROPOUT_MEASURES = ["nlc", "nlc_profile", "gradient_metrics", "jacobian_norm", "correlations",
                    "kernel_conditioning", "linear_region_diameter"]


@pytest.mark.parametrize("measure", list(MEASURES))
def test_the_same_seed_gives_the_same_values(measure):
    first = run_cell(measure, "dropout_mlp")[1]
    second = run_cell(measure, "dropout_mlp")[1]
    if hasattr(first, "to_dict"):
        assert _identical(first.to_dict(), second.to_dict())
    elif not isinstance(first, nn.Module):
        assert first == second


def _identical(a, b) -> bool:
    """Equal plain values, nan equal to nan."""
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_identical(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_identical(x, y) for x, y in zip(a, b))
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b


def test_dropout_on_is_random_but_seeded():
    model = ZOO["dropout_mlp"].build(generator=0)
    x = sample_inputs("dropout_mlp", 64)
    gen = torch.Generator
    a = nlc(model, x, dropout=True, generator=gen().manual_seed(3))
    b = nlc(model, x, dropout=True, generator=gen().manual_seed(3))
    c = nlc(model, x, dropout=True, generator=gen().manual_seed(4))
    off = nlc(model, x, generator=gen().manual_seed(3))
    assert a.nlc == b.nlc and a.nlc != c.nlc and off.nlc != a.nlc
    assert a.mode.dropout == "on" and off.mode.dropout == "off"
    assert model.training  # the model's own mode is untouched


def test_batch_statistics_refused_by_per_point_measures_with_the_option_that_fixes_it():
    model = ZOO["resnet_small"].build(generator=0)
    x = sample_inputs("resnet_small", 8)
    with pytest.raises(NNGaugeError, match="norm_mode='frozen'.*--mode"):
        trajectory_length(model, line(x[0], x[1], 9))
    frozen = trajectory_length(model, line(x[0], x[1], 9), norm_mode="frozen", norm_data=x)
    assert frozen.mode.norm_mode == "frozen"


def test_low_precision_models_are_measured_on_a_float32_copy():
    model = ZOO["resnet_bfloat16"].build(generator=0)
    x = sample_inputs("resnet_bfloat16", 8)
    length = trajectory_length(model, line(x[0].float(), x[1].float(), 9), norm_mode="eval")
    assert length.lengths[0] == pytest.approx(float((x[1].float() - x[0].float()).norm()),
                                              rel=1e-6)
    assert "upcast copy of a bfloat16 model" in length.mode.precision
    assert next(model.parameters()).dtype == torch.bfloat16
