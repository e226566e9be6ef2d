"""When the Tracker measures (steps, log-spaced steps, given steps, epochs), the Lightning
callback at epoch ends, and sinks holding the flat columns of structured results."""

import csv

import numpy as np
import pytest
import torch
from torch import nn

import nngauge
from nngauge.data import waveform_noise
from nngauge.errors import NNGaugeError
from nngauge.nn import mlp
from nngauge.trajectories import line
from nngauge.training import CSVSink, TensorBoardSink, Tracker, log_steps


def _net():
    return mlp(40, 16, 3, 3, generator=torch.Generator().manual_seed(0))


def test_log_steps_are_rounded_powers_of_ten_after_zero():
    assert log_steps(4, 100) == [0, 1, 2, 3, 6, 10, 18, 32, 56, 100]
    assert log_steps(1, 999) == [0, 1, 10, 100]
    assert log_steps(10, 20) == [0, 1, 2, 3, 4, 5, 6, 8, 10, 13, 16, 20]
    assert log_steps(3, 0) == [0]


@pytest.mark.parametrize("kwargs, measured", [
    ({}, list(range(40))),
    ({"every": 7}, [0, 7, 14, 21, 28, 35]),
    ({"schedule": 7}, [0, 7, 14, 21, 28, 35]),
    ({"schedule": ("log", 4)}, [0, 1, 2, 3, 6, 10, 18, 32]),
    ({"schedule": [39, 0, 5, 5]}, [0, 5, 39]),
    ({"schedule": range(0, 40, 13)}, [0, 13, 26, 39]),
])
def test_schedules_fire_at_the_right_steps(kwargs, measured):
    tracker = Tracker(["weight_norm"], **kwargs)
    net = _net()
    rows = [tracker.step(net) for _ in range(40)]
    assert [i for i, row in enumerate(rows) if row is not None] == measured
    assert tracker.history["step"].tolist() == measured
    assert all(tracker.epoch_end(net) is None for _ in range(3))  # a step schedule: counted only


def test_schedules_read_given_global_steps():
    tracker = Tracker(["weight_norm"], schedule=("log", 2))
    net = _net()
    rows = {s: tracker.step(net, step=s) for s in range(95, 105)}
    assert [s for s, row in rows.items() if row is not None] == [100]


def test_epoch_schedule_measures_at_epoch_ends_on_the_last_batch():
    net = _net()
    data = waveform_noise(40, generator=0)
    tracker = Tracker(["nlc", "weight_norm"], schedule="epoch", generator=2)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    for epoch in range(2):
        for i in range(4):
            x, y = data.inputs[10 * i:10 * i + 10], data.labels[10 * i:10 * i + 10]
            opt.zero_grad()
            nn.functional.cross_entropy(net(x), y).backward()
            opt.step()
            assert tracker.step(net, (x, y)) is None
        row = tracker.epoch_end(net)
        assert (row["step"], row["epoch"]) == (4 * epoch + 3, epoch)
        expected = nngauge.nlc(net, (x, y), batch_size=10,
                               generator=torch.Generator().manual_seed(2))
        assert row["nlc"] == expected.nlc
    assert tracker.history[["step", "epoch"]].values.tolist() == [[3, 0], [7, 1]]
    row = tracker.epoch_end(net, data.inputs, epoch=10, step=99)  # explicit data and indices
    assert (row["step"], row["epoch"]) == (99, 10)
    assert row["nlc"] == nngauge.nlc(net, data.inputs, batch_size=40,
                                     generator=torch.Generator().manual_seed(2)).nlc


def test_tensorboard_and_csv_hold_the_flat_columns(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    net = _net()
    data = waveform_noise(30, generator=4)
    sinks = [TensorBoardSink(tmp_path / "tb"), CSVSink(tmp_path / "run.csv")]
    with Tracker(["trajectory_length", "transitions", "weight_norm"], every=2, sinks=sinks,
                 probe_data=data.inputs[:2]) as tracker:
        for _ in range(5):
            tracker.step(net, data)
            with torch.no_grad():
                net.layers[0].linear.weight.mul_(1.1)
    history = tracker.history
    columns = [c for c in history.columns if c != "step"]
    assert {"trajectory_length/layers.1.act/length", "trajectory_length/lengths/3",
            "transitions/layers.0.act/transitions", "transitions/n_patterns",
            "weight_norm"} <= set(columns)

    events = EventAccumulator(str(tmp_path / "tb"))
    events.Reload()
    assert set(events.Tags()["scalars"]) == set(columns)
    for column in columns:
        scalars = events.Scalars(column)
        assert [e.step for e in scalars] == [0, 2, 4]
        np.testing.assert_array_equal([e.value for e in scalars],  # float32 in TensorBoard
                                      history[column].to_numpy(np.float32))

    with open(tmp_path / "run.csv") as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == ["step", *columns]
    np.testing.assert_array_equal([[float(row[c]) for c in ["step", *columns]] for row in rows],
                                  history[["step", *columns]].to_numpy())  # NaN read back too
    # the lengths grew with the first layer's weights: one probe line at every step
    lengths = history["trajectory_length/output/length"].tolist()
    assert lengths == sorted(lengths) and lengths[0] == nngauge.trajectory_length(
        _net(), line(data.inputs[0], data.inputs[1], 65), norm_mode="eval").lengths[-1]


def test_columns_that_appear_later_reach_every_sink(tmp_path):
    calls = []

    def growing(model, data):
        calls.append(None)
        return {"a": 1.0, **({"b": 2.0} if len(calls) > 1 else {})}

    with Tracker([growing], sinks=[tmp_path / "run.csv", tmp_path / "run.jsonl"]) as tracker:
        tracker.step(_net(), torch.randn(2, 40))
        tracker.step(_net(), torch.randn(2, 40))
    with open(tmp_path / "run.csv") as f:
        assert list(csv.reader(f)) == [["step", "growing/a", "growing/b"], ["0", "1.0", ""],
                                       ["1", "1.0", "2.0"]]
    assert np.isnan(tracker.history["growing/b"][0]) and tracker.history["growing/b"][1] == 2.0


@pytest.mark.parametrize("call", [
    lambda: Tracker(every=2, schedule=3),
    lambda: Tracker(schedule="weekly"),
    lambda: Tracker(schedule=("log", 0)),
    lambda: Tracker(schedule=[1, -2]),
    lambda: Tracker(schedule=[]),
    lambda: Tracker(keep_weights=0.5),
    lambda: Tracker(keep_weights=-1),
    lambda: log_steps(0, 10),
    lambda: log_steps(2, -1),
])
def test_bad_schedules_raise_with_expected_got_fix(call):
    with pytest.raises(NNGaugeError, match="expected .*got .*Fix"):
        call()


def test_log_steps_declares_its_counts():
    assert log_steps(np.int64(4), np.int64(100)) == log_steps(4, 100)
    with pytest.raises(NNGaugeError, match="log_steps\\(\\) expected stop an integer >= 0"):
        log_steps(2, 2.5)
    with pytest.raises(NNGaugeError, match="expected n_per_decade an integer >= 1"):
        log_steps(True, 10)
