"""Section 6 comparators: closed forms on linear models and the confounders the paper names."""

import math

import pytest
import torch
from torch import nn

from nngauge import InvalidInputError
from nngauge.measures import gradient_metrics, nlc

G = torch.Generator().manual_seed(0)
X = torch.randn(80, 6, generator=G, dtype=torch.float64)
Y = torch.randint(0, 3, (80,), generator=G)


def linear():
    torch.manual_seed(1)
    return nn.Linear(6, 3).double()


def test_linear_model_closed_forms():
    model = linear()
    result = gradient_metrics(model, (X, Y))
    w = model.weight.detach()
    probs = torch.softmax(model(X).detach(), 1)
    grads = (probs - nn.functional.one_hot(Y, 3).double()) @ w  # d CE / dx per sample
    assert result.gvcs == pytest.approx(float(grads.pow(2).mean().sqrt()), rel=1e-10)
    assert result.gradient_length == pytest.approx(result.gvcs * math.sqrt(6), rel=1e-12)
    assert result.lipschitz == pytest.approx(float(torch.linalg.matrix_norm(w, ord=2)), rel=1e-6)


def test_input_scale_confounds_gvcs_but_not_the_nlc():
    torch.manual_seed(2)
    model = nn.Sequential(nn.Linear(6, 16), nn.BatchNorm1d(16), nn.Tanh(), nn.Linear(16, 3)).double()
    small = gradient_metrics(model, (X, Y), batch_size=40)
    large = gradient_metrics(model, (10 * X, Y), batch_size=40)
    assert large.gvcs == pytest.approx(small.gvcs / 10, rel=1e-3)  # shrinks by c
    nlc_small = nlc(model, X, batch_size=40, method="exact").nlc
    nlc_large = nlc(model, 10 * X, batch_size=40, method="exact").nlc
    assert nlc_large == pytest.approx(nlc_small, rel=1e-4)  # the NLC does not move


def test_labels_and_loss_shape_are_checked():
    with pytest.raises(InvalidInputError, match="labels"):
        gradient_metrics(linear(), X)
    with pytest.raises(InvalidInputError, match="one number"):
        gradient_metrics(linear(), (X, Y), loss=lambda out, y: out.sum(1))
    # the deprecated loss_fn= took per-sample losses: its shape is still checked
    with pytest.warns(DeprecationWarning, match="'loss'"), \
            pytest.raises(InvalidInputError, match="per-sample"):
        gradient_metrics(linear(), (X, Y), loss_fn=lambda out, y: out.sum())


def test_labels_apart_and_a_loss_callable_give_the_default_values():
    pair = gradient_metrics(linear(), (X, Y))
    apart = gradient_metrics(linear(), X, Y, loss=nn.functional.cross_entropy)
    assert apart.gvcs == pytest.approx(pair.gvcs, rel=1e-12)
    assert apart.mean_loss == pytest.approx(pair.mean_loss, rel=1e-12)
