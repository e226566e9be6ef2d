"""Study columns that must agree with the study's own other numbers or be defined on every
family: nlc_rule from the NLC the study records, kernel conditioning at a CNN's last
convolution."""

import math

import numpy as np
import pytest
import torch

from nngauge.nn import sample_cnn
from nngauge.nn._sampler import sample_architecture
from nngauge.proxies import nlc_rule
from nngauge.proxies._ours import nlc_rule_of
from nngauge.studies import parse_spec, run_study, summarize
from nngauge.studies._units import _MEASURE_RUNNERS, _measure


def _kernel_condition_by_hand(model, module, x, n):
    """lambda_max / lambda_min of K = H H^T / n_l, H the outputs of ``module`` (a forward hook)
    on the first n samples, the model in the mode found."""
    seen = []
    handle = module.register_forward_hook(lambda m, i, o: seen.append(o.detach()))
    try:
        with torch.no_grad():
            model(x[:n])
    finally:
        handle.remove()
    h = seen[0].reshape(n, -1).double()
    eig = np.linalg.eigvalsh((h @ h.T / h.shape[1]).numpy())
    return eig[-1] / eig[0], h.shape[1]


def test_kernel_conditioning_reads_a_cnns_last_convolution_and_an_mlps_last_hidden_layer():
    """The study's kernel_condition_number is the condition number of the conjugate kernel of
    the last layer before the read-out (a CNN's last convolution, an MLP's last hidden
    linear layer) on min(200, units / 2) samples: finite on sampled CNNs (it was NaN: the
    rule looked for an MLP's layer names), and on an MLP."""
    x = torch.randn(300, 64, generator=torch.Generator().manual_seed(0))
    for seed in (1, 4):  # SELU without pooling; a shifted ReLU, pooled twice (128 units)
        cnn, _ = sample_cnn(torch.Generator().manual_seed(seed), 64, 10, image_shape=(1, 8, 8),
                            depth=3, width=8)
        value = _MEASURE_RUNNERS["kernel_conditioning"](cnn, (x, None, None), 100, None)
        _, units = _kernel_condition_by_hand(cnn, cnn.blocks[-1].conv, x, 2)
        expected, _ = _kernel_condition_by_hand(cnn, cnn.blocks[-1].conv, x,
                                                min(200, units // 2))
        assert math.isfinite(value["kernel_condition_number"])
        assert value["kernel_condition_number"] == pytest.approx(expected, rel=1e-6)
    mlp, _ = sample_architecture(torch.Generator().manual_seed(3), 64, 10, width=16, depth=4)
    value = _MEASURE_RUNNERS["kernel_conditioning"](mlp, (x, None, None), 100, None)
    expected, units = _kernel_condition_by_hand(mlp, mlp.layers[2].linear, x, 8)
    assert units == 16
    assert value["kernel_condition_number"] == pytest.approx(expected, rel=1e-6)


def test_the_studys_nlc_rule_is_the_rule_of_its_nlc_and_output_bias_columns(tmp_path):
    """Every point's nlc_rule equals the rule (NLC in (1, 3): 0; else the distance in decades;
    inf above an output bias of 1000) applied to the same point's nlc and output_bias
    columns: one NLC per network. The proxy alone measures its own NLC (one batch of 250):
    another estimate, which the study no longer records."""
    spec = parse_spec({
        "name": "nlc-rule", "seed": 1,
        "data": {"source": "gaussian:d=5", "n": 60},
        "architectures": {"explicit": [
            {"width": 8, "depth": 3, "activation": "tanh"},
            {"width": 8, "depth": 6, "activation": "tanh", "scale": 3.0},
            {"width": 8, "depth": 3, "activation": "relu", "bias_std": 0.9},
            {"width": 8, "depth": 4, "activation": "sigmoid"}]},
        "measures": {"names": ["nlc_rule", "nlc"], "batch_size": 16},
        "training": {"enabled": False},
    })
    url = f"sqlite:///{tmp_path / 'study.db'}"
    run_study(spec, url, workers=1)
    points = summarize(url).points
    assert len(points) == 4
    rules = [p["nlc_rule"] for p in points]
    assert rules == [nlc_rule_of(p["nlc"], p["output_bias"]) for p in points]
    assert len(set(rules)) > 1 and any(r > 0 for r in rules)


def test_nlc_rule_alone_takes_the_nlc_once_and_records_only_its_column():
    """A study asking for nlc_rule without nlc records nlc_rule alone, the rule of the NLC
    the nlc measure would have recorded with the same generator; the proxy itself is the rule
    of its own nlc call."""
    model, _ = sample_architecture(torch.Generator().manual_seed(1), 5, 2, width=8, depth=3)
    x = torch.randn(40, 5, generator=torch.Generator().manual_seed(0))
    parts = (x, None, None)
    alone = _measure(["nlc_rule"], model, parts, 16, torch.Generator().manual_seed(7))
    both = _measure(["nlc"], model, parts, 16, torch.Generator().manual_seed(7))
    assert set(alone) == {"nlc_rule"}
    assert alone["nlc_rule"] == nlc_rule_of(both["nlc"], both["output_bias"])
    assert nlc_rule_of(2.0, 5.0) == 0.0 and nlc_rule_of(30.0, 5.0) == pytest.approx(1.0)
    assert nlc_rule_of(2.0, 2000.0) == math.inf and math.isnan(nlc_rule_of(math.nan, 1.0))
    assert nlc_rule(model, x) >= 0
