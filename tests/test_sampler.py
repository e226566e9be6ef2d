"""The NLC paper's architecture sampler (appendix C): determinism, ranges, frequencies, overrides.

Frequencies are checked with chi-square goodness-of-fit tests over N descriptions drawn from a
fixed seed. Threshold p > 1e-3: under the paper's distribution a random seed fails one such
test with probability 1e-3 (with the fixed seed the outcome is deterministic); each test also
checks that a plausible wrong distribution (uniform activations, the pre-post-processing
normalization frequencies, ...) is rejected by the same counts at p < 1e-6, so the test can
fail.
"""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest
import torch
from scipy import stats

from nngauge.activations import get
from nngauge.errors import InvalidInputError, NNGaugeError, UnknownNameError
from nngauge.nn._sampler import (
    ACTIVATIONS,
    DEPTHS,
    OVERRIDABLE,
    ArchitectureDescription,
    count_parameters,
    sample_architecture,
    sample_description,
    width_for_parameters,
)

N_DRAWS = 6000


@pytest.fixture(scope="module")
def draws() -> list[ArchitectureDescription]:
    gen = torch.Generator().manual_seed(2024)
    return [sample_description(gen, 784, 10) for _ in range(N_DRAWS)]


def _chi2(counts: Counter, probabilities: dict) -> float:
    observed = [counts.get(k, 0) for k in probabilities]
    assert sum(observed) == sum(counts.values()), "a value outside the paper's support"
    expected = [p * sum(observed) for p in probabilities.values()]
    return stats.chisquare(observed, expected).pvalue


def _check_frequencies(counts: Counter, paper: dict, wrong: dict) -> None:
    assert math.isclose(sum(paper.values()), 1.0)
    assert _chi2(counts, paper) > 1e-3
    assert _chi2(counts, wrong) < 1e-6


def test_activation_frequencies_match_the_paper(draws):
    counts = Counter(d.activation for d in draws)
    paper = {"relu": 2 / 11, "selu": 2 / 11, "gaussian": 2 / 11, "tanh": 1 / 11,
             "even_tanh": 1 / 11, "sigmoid": 1 / 11, "square": 1 / 11, "odd_square": 1 / 11}
    _check_frequencies(counts, paper, {k: 1 / 8 for k in paper})


def test_depth_is_uniform_over_the_odd_numbers_3_to_49(draws):
    counts = Counter(d.depth for d in draws)
    odd = list(range(3, 50, 2))
    assert len(odd) == 24 and tuple(odd) == DEPTHS
    uniform = {k: 1 / 24 for k in odd}
    # wrong: probability proportional to depth (what a sampler favouring deep nets would do)
    _check_frequencies(counts, uniform, {k: k / sum(odd) for k in odd})


def test_normalization_frequencies_after_post_processing(draws):
    # P(post-processing applies) = P(square or odd square, or skips) = 1 - (9/11)(1/2) = 13/22;
    # none: 1/2 * 9/22 = 9/44 = 20.45%; batch, layer: 1/4 + 1/2 * 13/22 * 1/2 = 35/88 each.
    final = {None: 9 / 44, "batch": 35 / 88, "layer": 35 / 88}
    assert [round(100 * p, 1) for p in final.values()] == [20.5, 39.8, 39.8]  # paper: 20.4
    _check_frequencies(Counter(d.norm for d in draws), final,
                       {None: 0.5, "batch": 0.25, "layer": 0.25})
    _check_frequencies(Counter(d.norm_sampled for d in draws),
                       {None: 0.5, "batch": 0.25, "layer": 0.25}, final)


@pytest.mark.parametrize("field, paper, wrong", [
    ("dilation", {1.0: 0.5, 1.2: 0.25, 0.8: 0.25}, {1.0: 1 / 3, 1.2: 1 / 3, 0.8: 1 / 3}),
    ("shift", {0.0: 0.5, 0.2: 0.25, -0.2: 0.25}, {0.0: 1 / 3, 0.2: 1 / 3, -0.2: 1 / 3}),
    ("scale", {1.0: 0.5, 0.9: 0.25, 1.1: 0.25}, {1.0: 1 / 3, 0.9: 1 / 3, 1.1: 1 / 3}),
    ("debias", {True: 0.5, False: 0.5}, {True: 0.45, False: 0.55}),
    ("skip_start", {"linear": 0.5, "norm": 0.5}, {"linear": 0.45, "norm": 0.55}),
])
def test_modification_frequencies(draws, field, paper, wrong):
    _check_frequencies(Counter(getattr(d, field) for d in draws), paper, wrong)


def test_bias_and_skip_frequencies(draws):
    bias = Counter("zero" if d.bias_std == 0 else "gauss" for d in draws)
    _check_frequencies(bias, {"zero": 0.5, "gauss": 0.5}, {"zero": 0.45, "gauss": 0.55})
    kinds = Counter("none" if d.skip is None else "unit" if d.skip == 1.0 else "uniform"
                    for d in draws)
    _check_frequencies(kinds, {"none": 0.5, "unit": 0.25, "uniform": 0.25},
                       {"none": 1 / 3, "unit": 1 / 3, "uniform": 1 / 3})
    strengths = [d.skip for d in draws if d.skip is not None and d.skip != 1.0]
    assert stats.kstest(strengths, "uniform").pvalue > 1e-3


def test_every_drawn_value_is_in_the_papers_ranges(draws):
    for d in draws:
        assert d.depth % 2 == 1 and 3 <= d.depth <= 49
        assert d.activation in ACTIVATIONS
        assert d.dilation in (1.0, 1.2, 0.8) and d.shift in (0.0, 0.2, -0.2)
        assert d.scale in (0.9, 1.0, 1.1) and d.init == "orthogonal"
        assert d.bias_std in (0.0, math.sqrt(0.05))
        assert d.skip is None or d.skip == 1.0 or 0.0 < d.skip < 1.0
        needs_norm = d.activation in ("square", "odd_square") or d.skip is not None
        if d.norm_sampled is not None or not needs_norm:
            assert d.norm == d.norm_sampled and not d.post_processed
        else:
            assert d.norm in ("batch", "layer") and d.post_processed
        assert d.width == width_for_parameters(d.depth, 784, 10)
        # integer widths: within half a width step, about 1M / width <= 0.75% for width >= 137
        assert abs(d.n_parameters - 1_000_000) < 0.01 * 1_000_000


@pytest.mark.parametrize("depth, d_in, d_out", [(3, 784, 10), (3, 3072, 10), (25, 784, 10),
                                                (49, 50, 2), (2, 100, 10)])
def test_width_gives_the_parameter_count_closest_to_one_million(depth, d_in, d_out):
    widths = np.arange(1, 20_000)
    counts = count_parameters(depth, widths, d_in, d_out)  # vectorized over widths
    best = int(widths[np.argmin(np.abs(counts - 1_000_000))])
    assert width_for_parameters(depth, d_in, d_out) == best


@pytest.mark.slow
def test_built_models_have_the_described_parameters_and_config():
    """For 3 seeds, the sampled network's trainable parameters equal the description's count,
    within 10,000 of the paper's 1 million (appendix C), its config (depth, width, norm, skip,
    init, scale, bias, activation) is the description's, and it maps (8, 30) to (8, 5)."""
    for seed in range(3):
        model, d = sample_architecture(torch.Generator().manual_seed(seed), 30, 5)
        trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
        assert trainable == d.n_parameters and abs(trainable - 1_000_000) < 10_000
        cfg = model.config
        assert (cfg.depth, cfg.width, cfg.norm, cfg.skip, cfg.init, cfg.scale, cfg.bias_std) == (
            d.depth, d.width, d.norm, d.skip, d.init, d.scale, d.bias_std)
        assert cfg.activation == d.activation_function().label
        assert model(torch.randn(8, 30)).shape == (8, 5)


def test_activation_is_modified_debiased_and_unit_scaled():
    z = torch.randn(400_000, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    for seed in range(8):
        d = sample_description(seed, 10, 2, dilation=1.2, shift=-0.2, debias=seed % 2 == 0)
        act = d.activation_function()
        base = get(d.activation)
        values = act(z.numpy())
        raw = base(1.2 * z.numpy() - 0.2)
        c = values.std() / raw.std()  # c tau(d s + t) + b: an affine map of tau(d s + t)
        assert np.allclose(values, c * raw + (values.mean() - c * raw.mean()), atol=1e-9)
        assert abs(np.sqrt(np.mean(values**2)) - 1.0) < 0.01  # Q_s tau(s) = 1
        if d.debias:
            assert abs(values.mean()) < 0.01
        else:
            assert np.allclose(values, c * raw, atol=1e-9)  # b = 0: only rescaled


def test_initialization_orthogonal_with_bias_correction_and_joint_scale():
    model, d = sample_architecture(0, 16, 4, depth=3, width=16, bias_std=math.sqrt(0.05),
                                   scale=1.1, skip=None)
    w = model.layers[1].linear.weight.detach().double()
    factor = (math.sqrt(0.95) * 1.1) ** 2
    assert torch.allclose(w @ w.T, factor * torch.eye(16, dtype=torch.float64), atol=1e-5)
    biases = torch.cat([block.linear.bias.detach() for block in model.layers])
    assert biases.std() > 0
    gaussian, _ = sample_architecture(0, 16, 4, depth=3, width=16, init="gaussian")
    assert gaussian.config.init == "gaussian"


def test_deterministic_given_the_generator():
    m1, d1 = sample_architecture(torch.Generator().manual_seed(7), 12, 3, width=20)
    m2, d2 = sample_architecture(torch.Generator().manual_seed(7), 12, 3, width=20)
    m3, d3 = sample_architecture(7, 12, 3, width=20)  # int seed = a fresh seeded generator
    assert d1 == d2 == d3
    for (k, a), b, c in zip(m1.state_dict().items(), m2.state_dict().values(),
                            m3.state_dict().values()):
        assert torch.equal(a, b) and torch.equal(a, c), k
    others = {sample_description(s, 12, 3) for s in range(20)}
    assert len(others) > 15


def test_overrides_fix_choices_and_leave_the_others_as_drawn():
    base = sample_description(3, 784, 10)
    for name, value in [("dilation", 0.8), ("shift", 0.2), ("scale", 1.1), ("debias", True),
                        ("skip_start", "norm"), ("bias_std", 0.0), ("init", "gaussian")]:
        fixed = sample_description(3, 784, 10, **{name: value})
        assert getattr(fixed, name) == value
        for other in ("depth", "width", "activation", "dilation", "shift", "scale", "debias",
                      "skip", "skip_start", "bias_std", "init"):
            if other != name:
                assert getattr(fixed, other) == getattr(base, other), (name, other)
    d = sample_description(3, 784, 10, depth=7, width=33, activation="square", norm=None,
                           skip=0.5)
    assert (d.depth, d.width, d.activation, d.norm, d.skip) == (7, 33, "square", None, 0.5)
    assert d.n_parameters == count_parameters(7, 33, 784, 10) and not d.post_processed
    assert sample_description(3, 784, 10, depth=7).width == width_for_parameters(7, 784, 10)


def test_post_processing_adds_a_normalization_to_unstable_networks():
    norms = [sample_description(s, 8, 2, activation=a, skip=None).norm
             for s in range(200) for a in ("square", "odd_square")]
    assert None not in norms and {"batch", "layer"} == set(norms)
    with_skips = [sample_description(s, 8, 2, activation="relu", skip=1.0).norm
                  for s in range(200)]
    assert None not in with_skips
    stable = [sample_description(s, 8, 2, activation="relu", skip=None).norm
              for s in range(200)]
    assert None in stable


def test_description_to_dict_is_plain_and_complete():
    d = sample_description(1, 20, 3)
    out = d.to_dict()
    for name in OVERRIDABLE + ("d_in", "d_out", "n_parameters", "norm_sampled",
                               "activation_spec", "post_processed"):
        assert name in out
    assert out["activation_spec"] == d.activation_function().label
    with pytest.raises(Exception):
        d.depth = 5  # frozen


def test_unknown_override_names_are_listed():
    with pytest.raises(UnknownNameError) as info:
        sample_description(0, 10, 2, dropout=0.5)
    message = str(info.value)
    assert "dropout" in message and "Fix" in message
    for name in OVERRIDABLE:
        assert name in message
    assert isinstance(info.value, NNGaugeError)
    with pytest.raises(UnknownNameError):
        sample_architecture(0, 10, 2, n_parameters=5)


@pytest.mark.parametrize("overrides", [{"depth": 0}, {"depth": 3.0}, {"activation": "gelu"},
                                       {"norm": "group"}, {"skip_start": "act"},
                                       {"bias_std": -1.0}, {"dilation": 0.0},
                                       {"scale": float("nan")}, {"debias": 1}, {"width": 0}])
def test_bad_override_values(overrides):
    with pytest.raises(InvalidInputError, match="expected .*got .*Fix"):
        sample_description(0, 10, 2, **overrides)


def test_bad_generator_and_widths():
    with pytest.raises(InvalidInputError, match="torch.Generator"):
        sample_description(np.random.default_rng(0), 10, 2)
    with pytest.raises(InvalidInputError, match="d_in"):
        sample_description(0, 0, 2)
    with pytest.raises(InvalidInputError, match="d_out"):
        sample_architecture(0, 10, 2.5)


def test_numpy_seeds_and_widths_are_accepted_and_bad_seeds_refused():
    assert sample_description(np.int64(3), np.int64(10), np.int64(2)) == sample_description(3, 10, 2)
    assert type(sample_description(np.int64(3), np.int64(10), 2).d_in) is int
    for bad in (-1, 2.0, "0", None):
        with pytest.raises(InvalidInputError, match="generator a torch.Generator or an integer"):
            sample_architecture(bad, 10, 2)
