"""The Tracker: same values as the functional measures, in its DataFrame and every sink.

Every named measure, and the training state left alone: test_tracker_measures.py; schedules,
epochs and the Lightning callback: test_tracker_schedules.py."""

import csv
import json
import math

import numpy as np
import pytest
import torch
from torch import nn

import nngauge
from nngauge.data import waveform_noise
from nngauge.errors import NNGaugeError, UnknownNameError
from nngauge.nn import mlp
from nngauge.training import CSVSink, JSONLSink, TensorBoardSink, Tracker, fit


def _loop(tracker, steps=6, seed=0):
    """A plain SGD loop on waveform batches; returns the model and the batches it saw."""
    net = mlp(40, 32, 2, 3, generator=torch.Generator().manual_seed(seed))
    opt = torch.optim.SGD(net.parameters(), lr=0.05)
    data = waveform_noise(20 * steps, generator=seed)
    batches, snapshots = [], []
    for step in range(steps):
        x, y = data.inputs[20 * step:20 * step + 20], data.labels[20 * step:20 * step + 20]
        opt.zero_grad()
        nn.functional.cross_entropy(net(x), y).backward()
        opt.step()
        batches.append((x, y))
        snapshots.append(({k: v.clone() for k, v in net.state_dict().items()},
                          [p.grad.clone() for p in net.parameters()]))
        tracker.step(net, (x, y))
    return net, batches, snapshots


def test_tracker_equals_the_functional_measures_at_the_same_step():
    tracker = Tracker(["nlc", "gradient_metrics", "correlations", "weight_norm", "grad_norm"],
                      every=2, seed=7)
    net, batches, snapshots = _loop(tracker)
    history = tracker.history
    assert history["step"].tolist() == [0, 2, 4]
    for _, row in history.iterrows():
        s = int(row["step"])
        state, grads = snapshots[s]
        net.load_state_dict(state)
        gen = lambda: torch.Generator().manual_seed(7)  # noqa: E731 (the same at every step)
        r = nngauge.nlc(net, batches[s], batch_size=20, generator=gen())
        assert row["nlc"] == r.nlc and row["nlc/output_bias"] == r.output_bias
        assert row["nlc/jacobian_rms"] == r.jacobian_rms
        g = nngauge.gradient_metrics(net, batches[s], batch_size=20, generator=gen())
        assert row["gradient_metrics/gvcs"] == g.gvcs and row["gradient_metrics/lipschitz"] == \
            g.lipschitz
        # correlations read the fixed probe points: here the first batch measured
        assert row["correlations/rho_max"] == nngauge.correlations(
            net, batches[0][0], generator=gen()).rho_max
        weights = torch.cat([v.detach().flatten() for v in net.parameters()]).double()
        assert row["weight_norm"] == pytest.approx(float(weights.norm()), rel=1e-12)
        assert row["grad_norm"] == pytest.approx(
            float(torch.cat([g.flatten() for g in grads]).double().norm()), rel=1e-12)


def test_tensorboard_csv_and_jsonl_hold_the_dataframe_values(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    sinks = [TensorBoardSink(tmp_path / "tb"), CSVSink(tmp_path / "run.csv"),
             tmp_path / "run.jsonl"]
    with Tracker(every=3, sinks=[sinks[0], sinks[1], str(sinks[2])]) as tracker:
        _loop(tracker, steps=7)
    history = tracker.history
    columns = [c for c in history.columns if c != "step"]
    assert history["step"].tolist() == [0, 3, 6] and {"nlc", "weight_norm", "grad_norm"} <= \
        set(columns)

    events = EventAccumulator(str(tmp_path / "tb"))
    events.Reload()
    assert set(events.Tags()["scalars"]) == set(columns)
    for column in columns:
        scalars = events.Scalars(column)
        assert [e.step for e in scalars] == [0, 3, 6]
        # TensorBoard stores float32: identical to the DataFrame's values rounded to float32
        assert [e.value for e in scalars] == [float(np.float32(v)) for v in history[column]]

    with open(tmp_path / "run.csv") as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == ["step", *columns]
    for row, (_, expected) in zip(rows, history.iterrows()):
        assert int(row["step"]) == expected["step"]
        assert all(float(row[c]) == expected[c] for c in columns)  # repr round-trips exactly

    lines = [json.loads(line) for line in (tmp_path / "run.jsonl").read_text().splitlines()]
    assert [line["step"] for line in lines] == [0, 3, 6]
    assert all(line[c] == expected[c] for line, (_, expected) in zip(lines, history.iterrows())
               for c in columns)


def test_custom_callables_options_fixed_data_and_explicit_steps():
    fixed = waveform_noise(50, generator=9)

    def mean_output(model, data):
        return float(model(data[0]).detach().mean())

    tracker = Tracker({"mean_output": mean_output, "stats": lambda m, d: {"n": len(d[0])},
                       "nlc": "nlc"}, data=fixed, options={"nlc": {"n_probes": 3}})
    net = mlp(40, 8, 1, 3)
    row = tracker.step(net, step=10)
    assert row["step"] == 10 and row["stats/n"] == 50.0
    assert row["mean_output"] == float(net(fixed.inputs).detach().mean())
    expected = nngauge.nlc(net, fixed, batch_size=50, n_probes=3,
                           generator=torch.Generator().manual_seed(0))
    assert row["nlc"] == expected.nlc
    assert [r["step"] for r in tracker.records] == [10]


def test_tracker_counts_steps_and_skips_between():
    tracker = Tracker(["weight_norm"], every=4)
    net = mlp(3, 4, 1, 2)
    rows = [tracker.step(net, torch.randn(5, 3)) for _ in range(9)]
    assert [i for i, r in enumerate(rows) if r is not None] == [0, 4, 8]


def test_fit_drives_a_tracker():
    from nngauge.data import split

    train, val = split(waveform_noise(120), (0.5, 0.5))
    tracker = Tracker(["weight_norm", "grad_norm"], every=1)
    result = fit(mlp(40, 8, 1, 3), train, val, lr=0.1, batch_size=20, max_epochs=2,
                 tracker=tracker)
    assert len(tracker.records) == 3 * result.epochs  # 60 samples / 20 per step
    assert all(math.isfinite(r["grad_norm"]) for r in tracker.records)
    at_epochs = Tracker(["weight_norm"], schedule="epoch")
    result = fit(mlp(40, 8, 1, 3), train, val, lr=0.1, batch_size=20, max_epochs=2,
                 tracker=at_epochs)
    assert [r["epoch"] for r in at_epochs.records] == list(range(result.epochs))


def test_unknown_measure_lists_the_known_ones():
    with pytest.raises(UnknownNameError, match="nlc.*weight_norm|weight_norm.*nlc") as info:
        Tracker(["nlcc"])
    assert "'nlcc'" in str(info.value) and "Fix" in str(info.value)


@pytest.mark.parametrize("call", [
    lambda: Tracker(every=0),
    lambda: Tracker(every=1.5),
    lambda: Tracker(sinks=["run.txt"]),
    lambda: Tracker(["nlc"], options={"jacobian_norm": {}}),
    lambda: Tracker([3]),
    lambda: Tracker().step(mlp(3, 4, 1, 2)),
])
def test_bad_input_raises_with_expected_got_fix(call):
    with pytest.raises(NNGaugeError, match="expected .*got .*Fix"):
        call()


def test_csv_sink_widens_for_columns_that_appear_later(tmp_path):
    sink = CSVSink(tmp_path / "a.csv")
    sink.write(0, {"a": 1.0})
    sink.write(1, {"a": 2.0, "b": 0.5})
    sink.write(2, {"b": 0.25})
    sink.close()
    with open(tmp_path / "a.csv") as f:
        assert list(csv.reader(f)) == [["step", "a", "b"], ["0", "1.0", ""], ["1", "2.0", "0.5"],
                                       ["2", "", "0.25"]]
    jsonl = JSONLSink(tmp_path / "a.jsonl")
    jsonl.write(0, {"a": float("nan")})
    jsonl.close()
    assert json.loads((tmp_path / "a.jsonl").read_text()) == {"step": 0, "a": None}

