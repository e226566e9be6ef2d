"""The one loss resolver (docs/api.md, "The loss"): each name, a callable, the refusals, and
the same default loss in every measure that takes one."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import nngauge
from nngauge import proxies
from nngauge._internal.losses import resolve_loss
from nngauge.errors import InvalidInputError

G = torch.Generator().manual_seed(0)
X = torch.randn(24, 5, generator=G, dtype=torch.float64)
Y = torch.randint(0, 3, (24,), generator=G)
T = torch.randn(24, 3, generator=G, dtype=torch.float64)  # floating targets


def _net() -> nn.Module:
    torch.manual_seed(1)
    return nn.Sequential(nn.Linear(5, 8), nn.Tanh(), nn.Linear(8, 3)).double()


OUT = _net()(X).detach()


def test_auto_is_the_cross_entropy_for_integer_labels_and_the_summed_squared_error_for_targets():
    loss, name = resolve_loss("auto", OUT, Y, "m()")
    assert name == "cross_entropy"
    assert float(loss(OUT, Y)) == pytest.approx(float(F.cross_entropy(OUT, Y)), rel=1e-14)
    loss, name = resolve_loss("auto", OUT, T, "m()")
    assert name == "squared_error"
    assert float(loss(OUT, T)) == pytest.approx(float((OUT - T).square().sum(1).mean()),
                                                rel=1e-14)


def test_auto_averages_a_sequence_output_over_its_positions():
    scores = torch.randn(4, 6, 3, generator=G, dtype=torch.float64)
    labels = torch.randint(0, 3, (4, 6), generator=G)
    loss, _ = resolve_loss("auto", scores, labels, "m()")
    assert float(loss(scores, labels)) == pytest.approx(
        float(F.cross_entropy(scores.reshape(-1, 3), labels.reshape(-1))), rel=1e-14)


def test_cross_entropy_takes_integer_labels_only_and_mse_one_hot_encodes_them():
    loss, name = resolve_loss("cross_entropy", OUT, Y, "m()")
    assert name == "cross_entropy" and float(loss(OUT, Y)) == pytest.approx(
        float(F.cross_entropy(OUT, Y)), rel=1e-14)
    with pytest.raises(InvalidInputError, match="integer class labels for loss='cross_entropy'"):
        resolve_loss("cross_entropy", OUT, T, "m()")
    loss, name = resolve_loss("mse", OUT, Y, "m()")
    assert name == "mse" and float(loss(OUT, Y)) == pytest.approx(
        float(F.mse_loss(OUT, F.one_hot(Y, 3).double())), rel=1e-14)
    assert float(resolve_loss("mse", OUT, T, "m()")[0](OUT, T)) == pytest.approx(
        float(F.mse_loss(OUT, T)), rel=1e-14)


def test_labels_are_checked_once_against_the_outputs():
    with pytest.raises(InvalidInputError, match=r"labels in \[0, 2\]"):
        resolve_loss("auto", OUT, Y + 3, "m()")
    with pytest.raises(InvalidInputError, match="regression targets shaped like the outputs"):
        resolve_loss("auto", OUT, T[:, :2], "m()")


def test_a_callable_is_used_as_given_and_named_by_its_name():
    def halved(outputs, labels):
        return F.cross_entropy(outputs, labels) / 2

    loss, name = resolve_loss(halved, OUT[:2], Y, "m()")
    assert name == "halved"
    assert float(loss(OUT, Y)) == pytest.approx(float(F.cross_entropy(OUT, Y)) / 2, rel=1e-14)
    assert loss(OUT, Y).shape == ()  # a (1,) result comes back as one number
    assert resolve_loss(lambda o, t: F.cross_entropy(o, t).reshape(1), OUT, Y,
                        "m()")[0](OUT, Y).shape == ()


@pytest.mark.parametrize("bad, match", [
    (lambda o, t: F.cross_entropy(o, t, reduction="none"), "one number"),
    (lambda o, t: 1.0, "one number"),
    (lambda o, t: o[:, 5].sum(), "IndexError"),
    (lambda o: o.sum(), "TypeError"),
])
def test_a_bad_callable_is_refused_with_what_it_returned_or_raised(bad, match):
    with pytest.raises(InvalidInputError, match=match) as info:
        resolve_loss(bad, OUT[:2], Y, "hessian()")
    assert str(info.value).startswith("hessian() expected loss(outputs, labels)")
    assert "Fix:" in str(info.value)


def test_a_bad_callable_is_refused_by_every_loss_measure_before_its_work():
    bad = lambda o, t: F.cross_entropy(o, t, reduction="none")  # noqa: E731
    for call in (lambda: nngauge.hessian(_net(), (X, Y), loss=bad),
                 lambda: nngauge.loss_landscape(_net(), (X, Y), loss=bad, resolution=3),
                 lambda: nngauge.sharpness(_net(), (X, Y), loss=bad, n_iter=1),
                 lambda: nngauge.expected_sharpness(_net(), (X, Y), alpha=0.1, loss=bad),
                 lambda: nngauge.pac_bayes(_net(), (X, Y), alphas=[0.1], loss=bad),
                 lambda: nngauge.gradient_metrics(_net(), (X, Y), loss=bad)):
        with pytest.raises(InvalidInputError, match="one number"):
            call()


@pytest.mark.parametrize("labels", [Y, T], ids=["integer labels", "floating targets"])
def test_every_measure_evaluates_the_same_default_loss(labels):
    """At the same weights on the same batch: loss_landscape's centre, sharpness's L(w),
    expected sharpness's and PAC-Bayes's (on all the data), gradient_metrics' mean loss; the
    Hessian of "auto" is that of the loss written out; a proxy's gradient is that of the same
    loss."""
    net, data = _net(), (X, labels)
    if labels.is_floating_point():
        def written(out, t):
            return (out - t).square().sum(1).mean()
    else:
        written = F.cross_entropy
    with torch.no_grad():
        expected = float(written(net(X), labels))
    values = {
        "loss_landscape": nngauge.loss_landscape(net, data, dims=1, resolution=3,
                                                 generator=0).center_loss,
        "sharpness": nngauge.sharpness(net, data, n_iter=1, generator=0).loss,
        "expected_sharpness": nngauge.expected_sharpness(
            net, data, alpha=1e-3, n_probes=2, batch_size=len(X), generator=0).loss,
        "pac_bayes": nngauge.pac_bayes(net, data, alphas=[1e-3], n_probes=2,
                                       generator=0).train_loss,
        "gradient_metrics": nngauge.gradient_metrics(net, data, n_iter=3).mean_loss,
    }
    for name, value in values.items():
        assert value == pytest.approx(expected, rel=1e-12), name
    auto = nngauge.hessian(net, data, trace=False, per_batch=False, generator=0)
    by_hand = nngauge.hessian(net, data, loss=written, trace=False, per_batch=False,
                              generator=0)
    assert auto.eigenvalues == pytest.approx(by_hand.eigenvalues, rel=1e-10)
    net.zero_grad()
    written(net(X), labels).backward()
    norm = math.sqrt(sum(float(p.grad.pow(2).sum()) for p in net.parameters()))
    assert proxies.grad_norm(net, X, labels, batch_size=len(X)) == pytest.approx(norm, rel=1e-10)
