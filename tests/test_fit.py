"""The NLC paper's training protocol (E.2), loss scaling (appendix C) and LR search."""

import math

import pytest
import torch
from torch import nn

from nngauge.data import split, standardize, waveform_noise
from nngauge.errors import InvalidInputError, NNGaugeError
from nngauge.nn import mlp
from nngauge.training import (StallSchedule, classification_error, fit, lr_search, output_scale,
                              smallest_lr, steps_to_loss)
from nngauge.training import _fit


def test_schedule_paper_defaults_on_a_plateau():
    # 3 improving epochs after epoch 0, then a plateau forever: by hand, E.2 gives a decay
    # after 10 stalled epochs, then one after every 5 stalled epochs (10 decays in all), then
    # a stop after 5 more: 1 + 3 + 10 + 9 * 5 + 5 = 64 updates.
    s = StallSchedule()
    actions = [s.update(e) for e in [0.9, 0.8, 0.7, 0.6]]
    assert actions == ["improved"] * 4
    while not s.stopped:
        actions.append(s.update(0.6))
    assert len(actions) == 64 and actions[-1] == "stop"
    decays = [i for i, a in enumerate(actions) if a == "decay"]
    assert decays == [13] + [13 + 5 * k for k in range(1, 10)]
    assert s.decays_done == 10 and math.isclose(s.lr_scale, 3.0 ** -10)
    assert s.best == 0.6 and s.best_epoch == 3
    with pytest.raises(NNGaugeError):
        s.update(0.5)


def test_schedule_improvement_resets_the_stall_count():
    s = StallSchedule(patience=3, decay_patience=2, n_decays=2)
    curve = [0.5, 0.5, 0.5, 0.4, 0.4, 0.4, 0.4, 0.45, 0.3, 0.3, 0.3, 0.35, 0.3, 0.3]
    expected = ["improved", "continue", "continue", "improved", "continue", "continue", "decay",
                "continue", "improved", "continue", "decay", "continue", "stop"]
    assert [s.update(e) for e in curve[:13]] == expected
    assert (s.best, s.best_epoch, s.decays_done) == (0.3, 8, 2)


def test_schedule_nan_never_improves():
    s = StallSchedule(patience=1, n_decays=0)
    assert [s.update(e) for e in [0.5, float("nan")]] == ["improved", "stop"]


class _Recorder:
    """An optimizer factory remembering the rate and the weights at every creation."""

    def __init__(self):
        self.created = []

    def __call__(self, params, lr):
        params = list(params)
        self.created.append((lr, [p.detach().clone() for p in params]))
        return torch.optim.SGD(params, lr=lr)


def test_fit_follows_a_scripted_validation_curve(monkeypatch):
    curve = iter([0.6, 0.5, 0.55, 0.5, 0.4, 0.45, 0.45, 0.45, 0.45, 0.45])
    states = []

    def scripted(model, data, batch_size=250):
        if len(data.labels) == 40:  # the validation set
            states.append([p.detach().clone() for p in model.parameters()])
            return next(curve)
        return 0.0

    monkeypatch.setattr(_fit, "_error_rate", scripted)
    train, val = split(waveform_noise(100), (0.6, 0.4))
    net = mlp(40, 8, 1, 3, generator=torch.Generator().manual_seed(0))
    recorder = _Recorder()
    result = fit(net, train, val, lr=0.2, optimizer=recorder, batch_size=20, patience=2,
                 decay_patience=1, n_decays=2, generator=torch.Generator().manual_seed(0))
    # by hand: epochs 0..9 -> improved, improved, continue, decay (stall 2), improved,
    # decay (stall 1), stop (stall 1 after 2 decays); the rest of the curve is never used
    assert [r.action for r in result.history] == ["improved", "improved", "continue", "decay",
                                                  "improved", "decay", "stop"]
    assert [r.lr for r in result.history] == pytest.approx([0.2, 0.2, 0.2, 0.2, 0.2 / 3,
                                                            0.2 / 3, 0.2 / 9])
    assert (result.best_val_error, result.best_epoch, result.epochs) == (0.4, 4, 6)
    assert result.n_decays == 2 and result.stopped_by == "schedule"
    assert result.final_lr == pytest.approx(0.2 / 9)
    # every rewind restarts the optimizer at the best weights (epoch 1, then epoch 4)
    assert [lr for lr, _ in recorder.created] == pytest.approx([0.2, 0.2 / 3, 0.2 / 9, 0.2 / 9])
    for (_, weights), best in zip(recorder.created[1:], [1, 4, 4]):
        assert all(torch.equal(w, s) for w, s in zip(weights, states[best]))
    # and the model ends at the best weights
    assert all(torch.equal(p, s) for p, s in zip(net.parameters(), states[4]))


def test_output_scale_is_the_initial_quadratic_mean_in_training_mode():
    net = mlp(6, 16, 2, 3, norm="batch", generator=torch.Generator().manual_seed(1)).eval()
    x = torch.randn(40, 6, generator=torch.Generator().manual_seed(2))
    before = [b.clone() for b in net.buffers()]
    c = output_scale(net, x, batch_size=20)
    assert not net.training and all(torch.equal(a, b) for a, b in zip(before, net.buffers()))
    net.train()
    with torch.no_grad():
        out = torch.cat([net(x[:20]), net(x[20:])])
    assert c == pytest.approx(float(out.double().pow(2).mean().sqrt()), rel=1e-6)


def test_fit_divides_the_logits_by_c_in_the_loss(monkeypatch):
    # one full-batch SGD step; the scripted validation error improves so the step is kept
    x = 5 * torch.randn(30, 5, generator=torch.Generator().manual_seed(0))  # c about 4.6
    y = torch.arange(30) % 3
    net = mlp(5, 8, 1, 3, generator=torch.Generator().manual_seed(0))
    manual = mlp(5, 8, 1, 3, generator=torch.Generator().manual_seed(0))
    c = float(manual(x).detach().double().pow(2).mean().sqrt())
    nn.functional.cross_entropy(manual(x) / c, y).backward()
    with torch.no_grad():
        for p in manual.parameters():
            p -= 0.1 * p.grad
    val = (torch.randn(20, 5), y[:20])
    curve = iter([0.5, 0.4])
    monkeypatch.setattr(_fit, "_error_rate",
                        lambda model, data, batch_size=250:
                        next(curve) if len(data.labels) == 20 else 0.0)
    result = fit(net, (x, y), val, lr=0.1, batch_size=30, max_epochs=1)
    assert result.loss_scale == pytest.approx(c, rel=1e-6) and c > 3
    for p, q in zip(net.parameters(), manual.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)


@pytest.fixture(scope="module")
def waveform():
    train, val, test = split(waveform_noise(3000, generator=0), (0.6, 0.2, 0.2))
    return standardize(train, val, test).data


def test_fit_trains_an_mlp_on_waveform_well_below_chance(waveform):
    train, val, test = waveform
    net = mlp(40, 64, 2, 3, generator=torch.Generator().manual_seed(0))
    result = fit(net, train, val, lr=0.3, test=test, max_epochs=25, patience=3,
                 decay_patience=2, n_decays=2, generator=torch.Generator().manual_seed(0))
    # chance is 2/3; Breiman's Bayes error for waveform is about 14%
    assert result.best_val_error < 0.25 and result.test_error < 0.25
    assert result.best_val_error == min(r.val_error for r in result.history)
    assert result.best_val_error == _fit.classification_error(net, val)  # ends at the best
    assert result.train_error == pytest.approx(_fit.classification_error(net, train))


def test_fit_in_float64(waveform):
    train, val, _ = waveform
    net = mlp(40, 16, 1, 3, generator=torch.Generator().manual_seed(0))
    result = fit(net, train, val, lr=0.3, dtype=torch.float64, max_epochs=3,
                 generator=torch.Generator().manual_seed(0))
    assert all(p.dtype == torch.float64 for p in net.parameters())
    assert result.best_val_error < 0.5 and result.epochs == 3
    assert result.stopped_by == "max_epochs" and not result.diverged
    frame = result.to_frame()
    assert list(frame.columns) == ["epoch", "lr", "train_loss", "train_error", "val_error",
                                   "action", "steps", "train_set_loss"] and len(frame) == 4


def test_fit_reports_divergence_and_keeps_the_best_weights():
    train, val = split(waveform_noise(200), (0.5, 0.5))
    net = mlp(40, 16, 2, 3, generator=torch.Generator().manual_seed(0))
    initial = [p.detach().clone() for p in net.parameters()]
    result = fit(net, train, val, lr=1e30, batch_size=50, max_epochs=5)
    assert result.diverged and result.stopped_by == "diverged"
    assert result.history[-1].action == "diverged" and result.best_epoch == 0
    assert all(torch.equal(p, q) for p, q in zip(net.parameters(), initial))


def test_smallest_lr_matches_a_hand_computed_gradient_ratio():
    # one minibatch holding all data, SGD at rate 1: dW_l = -grad_l, so the heuristic is
    # 1e-8 / sum_l ||grad_l||_F / ||W_l||_F with the loss on f / c: at that rate no layer's
    # update moves its weights by more than 1e-8 of their norm (E.2's rationale)
    train = waveform_noise(60, generator=3)
    net = mlp(40, 12, 2, 3, generator=torch.Generator().manual_seed(0))
    before = [p.detach().clone() for p in net.parameters()]
    got = smallest_lr(net, train, batch_size=60)
    assert all(torch.equal(p, q) for p, q in zip(net.parameters(), before))  # untouched
    c = float(net(train.inputs).detach().double().pow(2).mean().sqrt())
    nn.functional.cross_entropy(net(train.inputs) / c, train.labels).backward()
    linears = [m for m in net.modules() if isinstance(m, nn.Linear)]
    ratios = [float(m.weight.grad.norm() / m.weight.detach().norm()) for m in linears]
    assert got == pytest.approx(1e-8 / sum(ratios), rel=1e-5)
    assert max(got * r for r in ratios) <= 1e-8 * (1 + 1e-5)


def test_smallest_lr_for_adam_is_a_sign_step():
    # Adam's first update at rate 1 is -m / (sqrt(v) + eps) = -g / (|g| + eps): about -sign(g),
    # so without warm-up and with one minibatch ||dW_l||_F = sqrt(#nonzero gradient entries)
    train = waveform_noise(60, generator=3)
    net = mlp(40, 12, 2, 3, generator=torch.Generator().manual_seed(0))
    got = smallest_lr(net, train, optimizer="adam", warmup_epochs=0, batch_size=60)
    c = float(net(train.inputs).detach().double().pow(2).mean().sqrt())
    nn.functional.cross_entropy(net(train.inputs) / c, train.labels).backward()
    linears = [m for m in net.modules() if isinstance(m, nn.Linear)]
    expected = 1e-8 / sum(math.sqrt(int((m.weight.grad.abs() > 1e-6).sum()))
                          / float(m.weight.detach().norm()) for m in linears)
    assert got == pytest.approx(expected, rel=1e-3)
    # with one minibatch the gradient repeats, so warm-up changes nothing; with three, the
    # paper's 4 warm-up epochs mix their gradients into the running averages
    assert smallest_lr(net, train, optimizer="adam", batch_size=60) == pytest.approx(got)

    def adam(warmup):
        return smallest_lr(net, train, optimizer="adam", batch_size=20, warmup_epochs=warmup,
                           generator=torch.Generator().manual_seed(0))

    assert adam(4) > adam(0) / 0.9  # averaged (partly cancelling) gradients: shorter steps


def test_lr_search_grid_and_choice():
    train, val = split(waveform_noise(200), (0.5, 0.5))
    net = mlp(40, 16, 1, 3, generator=torch.Generator().manual_seed(0))
    result = lr_search(net, train, val, test=val, start=1e-3, n_rates=4, edge=1, max_epochs=2,
                       batch_size=50)
    assert result.rates == pytest.approx([1e-3, 3e-3, 9e-3, 2.7e-2])
    errors = [run.best_val_error for run in result.runs]
    assert result.best_index == errors.index(min(errors))
    assert result.best is result.runs[result.best_index] and result.best_lr == result.rates[
        result.best_index]
    assert result.at_edge == (result.best_index in (0, 3))
    assert _fit.classification_error(result.model, val) == result.best.best_val_error
    assert len(result.to_frame()) == 4
    # the default start is the E.2 heuristic on the same initialization
    torch.manual_seed(0)  # the heuristic's minibatch shuffling
    heuristic = lr_search(net, train, val, n_rates=1, max_epochs=1, batch_size=50)
    torch.manual_seed(0)
    assert heuristic.start == pytest.approx(smallest_lr(net, train, batch_size=50), rel=1e-12)


def test_lr_search_stop_after():
    train, val = split(waveform_noise(100), (0.5, 0.5))
    calls = []

    def factory():
        calls.append(1)
        return mlp(40, 8, 1, 3, generator=torch.Generator().manual_seed(0))

    result = lr_search(factory, train, val, start=1e-9, n_rates=10, stop_after=2, max_epochs=1)
    # rates 1e-9.. change nothing: no run improves on the first, so the search stops at 3
    assert len(result.runs) == 3 and len(calls) == 3


@pytest.mark.parametrize("call", [
    lambda t, v: fit(mlp(40, 4, 1, 3), t, v, lr=0),
    lambda t, v: fit(mlp(40, 4, 1, 3), t, v, lr=0.1, batch_size=0),
    lambda t, v: fit(mlp(40, 4, 1, 3), t, v, lr=0.1, max_epochs=0),
    lambda t, v: fit(mlp(40, 4, 1, 3), t, v, lr=0.1, optimizer="lbfgs"),
    lambda t, v: fit(mlp(40, 4, 1, 3), t.inputs, v, lr=0.1),
    lambda t, v: fit(mlp(40, 4, 1, 3), (t.inputs, t.labels.float()), v, lr=0.1),
    lambda t, v: StallSchedule(patience=0),
    lambda t, v: StallSchedule(decay_factor=1.0),
    lambda t, v: lr_search(mlp(40, 4, 1, 3), t, v, n_rates=0),
    lambda t, v: lr_search(mlp(40, 4, 1, 3), t, v, start=-1.0),
    lambda t, v: lr_search("net", t, v),
])
def test_bad_input_raises_with_expected_got_fix(call):
    train, val = split(waveform_noise(40), (0.5, 0.5))
    with pytest.raises(NNGaugeError, match="expected .*got .*Fix"):
        call(train, val)


def test_zero_outputs_cannot_be_loss_scaled():
    net = nn.Linear(40, 3)
    nn.init.zeros_(net.weight), nn.init.zeros_(net.bias)
    train, val = split(waveform_noise(40), (0.5, 0.5))
    with pytest.raises(NNGaugeError, match="loss_scaling=False"):
        fit(net, train, val, lr=0.1)
    assert fit(net, train, val, lr=0.1, loss_scaling=False, max_epochs=1).loss_scale == 1.0


@pytest.mark.parametrize("options, match", [
    ({"scale": -1}, "scale a finite number > 0"),   # was: a negative learning rate
    ({"scale": 0.0}, "scale a finite number > 0"),
    ({"scale": float("inf")}, "scale a finite number > 0"),
    ({"momentum": 1.0}, "momentum a number in"),
    ({"warmup_epochs": -1}, "warmup_epochs None or an integer >= 0"),
    ({"optimizer": "rmsprop"}, "optimizer in"),
    ({"loss_scaling": 1}, "loss_scaling True or False"),
])
def test_smallest_lr_refuses_bad_options_before_any_work(options, match):
    net = mlp(40, 8, 2, 3, generator=torch.Generator().manual_seed(0))
    with pytest.raises(NNGaugeError, match=f"smallest_lr\\(\\) expected {match}.*Fix"):
        smallest_lr(net, waveform_noise(20), **options)


def _bad_data_cases():
    train, _ = split(waveform_noise(40), (0.5, 0.5))
    x, y = train.inputs, train.labels
    return {
        "empty": ((x[:0], y[:0]), "at least one sample"),
        "label past the classes": ((x, torch.full_like(y, 7)), r"labels in \[0, 2\]"),
        "negative label": ((x, y - 1), r"labels in \[0, 2\]"),
        "2-D labels": ((x, y[:, None]), "labels shaped like the outputs"),
        "float labels": ((x, y.float()), "integer class labels"),
        "meta-device inputs": ((x.to("meta"), y), "inputs holding values"),
        "wrong width": ((x[:, :30], y), "inputs the model's forward\\(\\) accepts"),
        "NaN inputs": ((x * float("nan"), y), "finite inputs"),
        "integer inputs": ((x.long(), y), "floating-point inputs"),
    }


@pytest.mark.parametrize("case", list(_bad_data_cases()))
@pytest.mark.parametrize("role", ["train", "val", "test"])
def test_fit_refuses_bad_data_up_front(case, role):
    """Issue 18: empty data was a ZeroDivisionError, bad labels or inputs raw torch errors;
    each is refused before any training with the shared checks' expected / got / fix."""
    data, match = _bad_data_cases()[case]
    train, val = split(waveform_noise(40), (0.5, 0.5))
    given = {"train": train, "val": val, "test": None, role: data}
    net = mlp(40, 4, 1, 3, generator=torch.Generator().manual_seed(0))
    before = {k: v.clone() for k, v in net.state_dict().items()}
    with pytest.raises(InvalidInputError, match=f"fit\\(\\) \\({role} data\\) expected {match}"
                       ".*; got .*Fix: "):
        fit(net, given["train"], given["val"], test=given["test"], lr=0.1, max_epochs=1,
            dtype=torch.float64)
    # nothing was changed: not the weights, not the dtype asked for with dtype=
    assert all(torch.equal(before[k], v) for k, v in net.state_dict().items())


@pytest.mark.parametrize("model, match", [
    (nn.Linear(40, 1), "n_classes >= 2"),  # a regressor
    (nn.Sequential(nn.Unflatten(1, (4, 10)), nn.Linear(10, 3)), r"shape \(n, n_classes\)"),
])
def test_fit_refuses_a_model_that_is_not_a_classifier(model, match):
    train, val = split(waveform_noise(40), (0.5, 0.5))
    with pytest.raises(InvalidInputError, match=match):
        fit(model, train, val, lr=0.1, max_epochs=1)


@pytest.mark.parametrize("call, where", [
    (lambda net, x, y: output_scale(net, x[:0]), "output_scale"),
    (lambda net, x, y: output_scale(net, x[:, :3]), "output_scale"),
    (lambda net, x, y: classification_error(net, (x[:0], y[:0])), "classification_error"),
    (lambda net, x, y: classification_error(net, (x, y + 3)), "classification_error"),
    (lambda net, x, y: smallest_lr(net, (x[:0], y[:0])), "smallest_lr"),
    (lambda net, x, y: smallest_lr(net, (x, y[:, None])), "smallest_lr"),
    (lambda net, x, y: lr_search(net, (x, -y), (x, y), n_rates=1), "smallest_lr"),
])
def test_training_helpers_refuse_bad_data_with_their_name(call, where):
    x, y = waveform_noise(20)
    net = mlp(40, 4, 1, 3, generator=torch.Generator().manual_seed(0))
    with pytest.raises(InvalidInputError, match=f"{where}\\(\\) expected .*; got .*Fix: "):
        call(net, x, y)


def test_classification_error_and_output_scale_on_good_data():
    x, y = waveform_noise(30)
    net = mlp(40, 4, 1, 3, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        out = net.eval()(x)
    assert classification_error(net, (x, y), batch_size=7) == pytest.approx(
        float((out.argmax(1) != y).float().mean()))
    assert output_scale(net, x.numpy()) > 0  # numpy inputs as everywhere else


def test_the_checks_accept_one_validation_sample_on_a_batchnorm_net():
    """The checking forward pass uses running statistics: a batchnorm net in training mode is
    not refused a validation set of one sample (which eval-mode error rates handle)."""
    x, y = waveform_noise(41)
    net = mlp(40, 8, 2, 3, norm="batch", generator=torch.Generator().manual_seed(0))
    result = fit(net, (x[:40], y[:40]), (x[40:], y[40:]), lr=0.1, max_epochs=1, batch_size=20)
    assert result.best_val_error in (0.0, 1.0) and net.training


# ------------------------------------------------- Jiang et al.'s stopping rule (target_loss)


def _blobs(n=200, d=5, seed=0):
    """Two well separated Gaussian blobs: an easy problem any MLP fits to zero loss."""
    g = torch.Generator().manual_seed(seed)
    y = torch.arange(n) % 2
    return (torch.randn(n, d, generator=g) + 4.0 * (2 * y[:, None] - 1)).float(), y


def test_target_loss_stops_at_the_target_on_an_easy_problem():
    """On separable blobs, training stops as soon as the whole training set's cross-entropy
    (eval mode, checked after each epoch) is <= 0.01: reason "target_loss", the final loss
    recomputed by hand at most 0.01 and the loss one epoch earlier above it, the step count
    that of the history, steps_to_loss reading the whole set's loss (0.1 first reached no later
    than 0.01, which is the last step), and the model at its final weights."""
    x, y = _blobs()
    net = mlp(5, 16, 2, 2, generator=torch.Generator().manual_seed(0))
    result = fit(net, (x, y), lr=0.05, momentum=0.9, batch_size=50, target_loss=0.01,
                 max_steps=5000, loss_scaling=False, generator=torch.Generator().manual_seed(0))
    assert result.stopped_by == "target_loss" and not result.diverged
    with torch.no_grad():
        by_hand = float(nn.functional.cross_entropy(net.eval()(x), y))
    assert by_hand == pytest.approx(result.train_set_loss, rel=1e-5) and by_hand <= 0.01
    assert result.history[-2].train_set_loss > 0.01
    assert result.steps == result.history[-1].steps < 5000
    assert result.steps == 4 * result.epochs  # 200 samples in batches of 50
    assert steps_to_loss(result, 0.01) == result.steps
    first = next(row for row in result.history if row.train_set_loss <= 0.1)
    assert 0 < steps_to_loss(result, 0.1) == first.steps <= result.steps
    assert result.history[-1].action == "target_loss" and result.best_epoch == result.epochs
    assert result.train_error == 0.0 and math.isnan(result.best_val_error)


def test_target_loss_stops_at_the_step_cap_on_an_impossible_problem():
    """Random labels a width-2 network cannot fit: training stops at max_steps, within an epoch
    (200 samples in batches of 64 make 4 steps an epoch, so 50 steps end mid-epoch 13), reason
    "max_steps", no loss milestone reached; validation data are then only reported."""
    x = torch.randn(200, 5, generator=torch.Generator().manual_seed(1))
    y = torch.randint(2, (200,), generator=torch.Generator().manual_seed(2))
    net = mlp(5, 2, 2, 2, generator=torch.Generator().manual_seed(0))
    result = fit(net, (x, y), (x[:50], y[:50]), lr=0.01, batch_size=64, target_loss=0.01,
                 max_steps=50, generator=torch.Generator().manual_seed(0))
    assert result.stopped_by == "max_steps" and result.steps == 50
    assert result.epochs == 13 and [r.steps for r in result.history[-2:]] == [48, 50]
    assert steps_to_loss(result, 0.1) is None and result.train_set_loss > 0.5
    assert result.best_val_error == _fit.classification_error(net, (x[:50], y[:50]))
    capped = fit(mlp(5, 2, 2, 2, generator=torch.Generator().manual_seed(0)), (x, y), lr=0.01,
                 batch_size=64, target_loss=0.01, max_epochs=3)
    assert capped.stopped_by == "max_epochs" and capped.epochs == 3 and capped.steps == 12


def test_target_loss_reports_divergence_and_the_schedule_respects_max_steps():
    x, y = _blobs(100)
    result = fit(mlp(5, 8, 2, 2, generator=torch.Generator().manual_seed(0)), (x, y), lr=1e30,
                 batch_size=50, target_loss=0.01, max_steps=100)
    assert result.stopped_by == "diverged" and result.diverged
    assert math.isnan(result.train_set_loss) and result.history[-1].action == "diverged"
    scheduled = fit(mlp(5, 8, 2, 2, generator=torch.Generator().manual_seed(0)), (x, y),
                    (x, y), lr=0.01, batch_size=30, max_steps=10)
    assert scheduled.stopped_by == "max_steps" and scheduled.steps == 10
    assert math.isnan(scheduled.train_set_loss)


def test_weight_decay_is_the_l2_term_of_the_sgd_step():
    """One full-batch SGD step with weight decay lambda is w - lr (grad + lambda w), for every
    parameter (biases included), compared with the hand-made step."""
    x, y = _blobs(40)
    net = mlp(5, 8, 2, 2, bias_std=0.3, generator=torch.Generator().manual_seed(0))
    manual = mlp(5, 8, 2, 2, bias_std=0.3, generator=torch.Generator().manual_seed(0))
    nn.functional.cross_entropy(manual(x), y).backward()
    with torch.no_grad():
        for p in manual.parameters():
            p -= 0.1 * (p.grad + 0.5 * p)
    fit(net, (x, y), lr=0.1, weight_decay=0.5, batch_size=40, target_loss=1e-6, max_steps=1,
        loss_scaling=False)
    for p, q in zip(net.parameters(), manual.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("kwargs, match", [
    ({}, r"val.*target_loss.*Fix"),
    ({"target_loss": 0.0}, "target_loss"),
    ({"target_loss": 0.01, "max_steps": 0}, "max_steps"),
    ({"target_loss": 0.01, "weight_decay": -1.0}, "weight_decay"),
])
def test_the_stopping_rule_refuses_bad_options(kwargs, match):
    x, y = _blobs(20)
    with pytest.raises(InvalidInputError, match=match):
        fit(mlp(5, 4, 2, 2), (x, y), lr=0.1, **kwargs)
