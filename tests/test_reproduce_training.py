"""``nngauge reproduce raghu-training``: trajectory length, transitions and weight scale over
training, and training one layer at each depth (Raghu et al., "On the Expressive Power of
Deep Neural Networks", ICML 2017, section 3, figures 7, 8, 9 and 18).

The small scale runs once. Checked: the files and the long-format CSV (declared columns, every
value finite, every tracked step and layer present), that the printed comparisons are the
CSV's numbers, and the paper's claims as they hold on digits:

- figures 8 and 18: training increases the length at the last hidden layer; at step 0 the
  length does not grow from hidden layer to hidden layer, after training it grows (both
  networks);
- figure 9: the weight scale fan_in x mean W^2 increases in every weight layer;
- figure 7: the training accuracy reached decreases strictly as later layers are trained.

Not asserted (it does not hold at every seed, and the paper does not claim it): transitions
of the ReLU network over training. Those of the hard-tanh network grow with its length.
"""

import math
from collections import defaultdict

import pytest

from nngauge.reproduce import get, names
from nngauge.reproduce._raghu_training import (COLUMNS, ONE_LAYER_NETWORK, QUANTITIES,
                                               SETTINGS, TRACKED, network_key)
from test_reproduce import check_files, run

SMALL = SETTINGS["small"]
HIDDEN = SMALL.hidden
STEPS_PER_EPOCH = 22  # ceil(1078 digits training points / minibatches of 50)


@pytest.fixture(scope="module")
def result(tmp_path_factory):
    return run("raghu-training", tmp_path_factory)


def rows_of(result, experiment, quantity, activation=None):
    rows = [dict(zip(result.computed.columns, row)) for row in result.computed.rows]
    return [r for r in rows if (r["experiment"], r["quantity"]) == (experiment, quantity)
            and activation in (None, r["activation"])]


def table(result, activation, quantity):
    """(step, layer) -> value of the tracked training of ``activation``'s network."""
    return {(r["step"], r["layer"]): r["value"]
            for r in rows_of(result, "training", quantity, activation)}


def one_layer(result, quantity):
    """Trained layer -> the final accuracies of the initializations, in order."""
    values = defaultdict(list)
    for r in rows_of(result, "one_layer", quantity):
        values[r["layer"]].append(r["value"])
    return dict(values)


def printed(result, key):
    return result.computed.compared(key).ours


def test_registered_with_both_scales():
    assert "raghu-training" in names()
    record = get("raghu-training")
    assert set(record.differences) == {"small", "paper"}
    assert all(record.differences[scale] for scale in ("small", "paper"))
    assert "Raghu" in record.paper and "Figures 8" in record.target


@pytest.mark.slow
def test_files_and_long_format(result):
    """raghu-training's CSV holds exactly the computed rows in long format with the declared
    columns and finite values: every tracked network from step 0 to the last step, with length,
    transitions and weight scale at every layer, and the one-layer runs at layers 2 to HIDDEN."""
    rows = check_files(result, COLUMNS, len(result.computed.rows))
    assert [tuple(r.values()) for r in rows] == [
        tuple("" if v is None else repr(v) if isinstance(v, float) else str(v) for v in row)
        for row in result.computed.rows]
    steps_by_network = defaultdict(set)
    for r in rows:
        assert r["quantity"] in QUANTITIES
        assert math.isfinite(float(r["value"]))
        if r["experiment"] == "training":
            assert r["network"] == "0"
            steps_by_network[r["activation"]].add(int(r["step"]))
        else:
            assert (r["activation"], float(r["sigma_w2_init"])) == ONE_LAYER_NETWORK
            assert 2 <= int(r["layer"]) <= HIDDEN
            assert 0 <= int(r["network"]) < SMALL.one_layer_nets
    last = SMALL.epochs * STEPS_PER_EPOCH
    for activation, _ in TRACKED:
        steps = steps_by_network[activation]
        assert min(steps) == 0 and max(steps) == last
        length = table(result, activation, "length")
        transitions = table(result, activation, "transitions")
        scale = table(result, activation, "sigma_w2")
        for step in {s for s, _ in length}:  # every layer at every measured step
            assert {d for s, d in length if s == step} == set(range(HIDDEN + 1))
            assert {d for s, d in transitions if s == step} == set(range(1, HIDDEN + 1))
            assert {d for s, d in scale if s == step} == set(range(1, HIDDEN + 2))


@pytest.mark.slow
def test_training_increases_length_into_growth_with_depth(result):
    """Figures 8 and 18, and figure 9's weight scale."""
    last = SMALL.epochs * STEPS_PER_EPOCH
    for activation, sigma_w2 in TRACKED:
        length = table(result, activation, "length")
        ratio = length[last, HIDDEN] / length[0, HIDDEN]
        assert ratio > 1.5, activation
        network = network_key(activation, sigma_w2)
        assert printed(result, f"{network}_length_ratio") == ratio
        start, end = (printed(result, f"{network}_growth_{when}") for when in ("start", "end"))
        assert start == (length[0, HIDDEN] / length[0, 1]) ** (1 / (HIDDEN - 1))
        assert start < 1.0  # step 0: no growth with depth (digits, seed 0; about 1 at others)
        assert end > 1.03 and end > start  # trained: growth with depth
        scale = table(result, activation, "sigma_w2")
        assert all(scale[last, d] > scale[0, d] for d in range(1, HIDDEN + 2)), activation
        assert printed(result, f"{network}_sigma_w2_increased") == HIDDEN + 1
        assert printed(result, f"{network}_test_accuracy") > 0.9
    transitions = table(result, "hard_tanh", "transitions")
    assert transitions[last, HIDDEN] > 2 * transitions[0, HIDDEN]


@pytest.mark.slow
def test_training_lower_layers_reaches_higher_accuracy(result):
    """Figure 7: accuracy falls as the one trained layer moves up."""
    train = one_layer(result, "final_train_accuracy")
    assert sorted(train) == list(range(2, HIDDEN + 1))
    assert all(len(v) == SMALL.one_layer_nets for v in train.values())
    mean = [sum(train[d]) / len(train[d]) for d in sorted(train)]
    assert all(a > b for a, b in zip(mean, mean[1:])), mean
    assert all(first > last for first, last in zip(train[2], train[HIDDEN]))  # every network
    assert printed(result, "one_layer_inversions") == 0
    assert printed(result, "one_layer_lowest_minus_highest") == \
        pytest.approx(mean[0] - mean[-1])
    test = one_layer(result, "final_test_accuracy")
    assert sum(test[2]) > sum(test[HIDDEN])


@pytest.mark.slow
def test_the_verdict_reads_the_training_figures_as_the_tests_do(result):
    """Trajectories lengthen in training and a lower layer trained alone fits better than a
    higher one (figures 7-9): 'reproduced', with the numbers in the reason."""
    assert result.verdict.status == "reproduced", result.verdict.reason
    assert "train accuracy" in result.verdict.reason
