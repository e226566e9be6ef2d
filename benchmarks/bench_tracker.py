"""Benchmark: Tracker overhead per training step, default measures, on a small MLP.

Setting: a depth-4, width-256 ReLU MLP on waveform-noise (40 inputs, 3 classes), SGD on
minibatches of 250. In one run, on the same batches: the bare training step (forward,
backward, optimizer step) and the same loop with ``Tracker()`` (default measures: nlc with one
probe on the step's batch, weight_norm, grad_norm) at every=1 and every=10.

The three loops are warmed (one untimed short loop each), then run interleaved, ``--repeats``
(>= 3) times each; prints the median seconds per step, the load average before and after the
timed loops, and the ratio tracked / bare. With ``NNGAUGE_BENCH_ROWS`` set (``make bench``),
each ratio is recorded as a row of benchmarks/RESULTS.md (benchmarks/_rows.py) as the
speed-up bare / tracked (below 1: the Tracker's overhead). Expected: a few x at every=1 (the NLC
probe costs a forward and a JVP/VJP pair, about one training step), about 1.1-1.3x at every=10.
Run:  python benchmarks/bench_tracker.py [--steps 200] [--repeats 3] [--width 256] [--depth 4]
      [--threads N]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from torch import nn

import _rows  # this folder's scripts share it (the script's directory is on sys.path)
from nngauge.data import waveform_noise
from nngauge.nn import mlp
from nngauge.training import Tracker


def run(steps: int, width: int, depth: int, tracker) -> float:
    """Seconds per training step of ``steps`` SGD steps (after 5 warm-up steps)."""
    net = mlp(40, width, depth, 3, generator=torch.Generator().manual_seed(0))
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    data = waveform_noise(250 * 8, generator=0)
    batches = [(data.inputs[i:i + 250], data.labels[i:i + 250]) for i in range(0, 2000, 250)]

    def step(i):
        x, y = batches[i % len(batches)]
        opt.zero_grad()
        nn.functional.cross_entropy(net(x), y).backward()
        opt.step()
        if tracker is not None:
            tracker.step(net, (x, y))

    for i in range(5):
        step(i)
    start = time.perf_counter()
    for i in range(steps):
        step(i)
    return (time.perf_counter() - start) / steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--depth", type=int, default=4)
    parser.add_argument("--repeats", type=_rows.repeats, default=3)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    configs = {"bare": None, "every=1": 1, "every=10": 10}

    def loop(every, steps):
        return run(steps, args.width, args.depth, None if every is None else Tracker(every=every))

    for every in configs.values():  # warm: one untimed short loop each
        loop(every, 10)
    load_before = _rows.load()
    times = {name: [] for name in configs}
    for _ in range(args.repeats):
        for name, every in configs.items():
            times[name].append(loop(every, args.steps))
    load_after = _rows.load()
    median = {name: statistics.median(spent) for name, spent in times.items()}
    print(f"{args.steps} steps per loop, medians of {args.repeats} interleaved loops (warm), "
          f"{torch.get_num_threads()} threads, load average {load_before:.2f} before, "
          f"{load_after:.2f} after")
    print(f"bare training step          {median['bare'] * 1e3:8.3f} ms/step")
    for name in ("every=1", "every=10"):
        print(f"Tracker() {name:<9}         {median[name] * 1e3:8.3f} ms/step  "
              f"ratio {median[name] / median['bare']:5.2f}x")
        _rows.record(f"training step with Tracker({name}) (default measures: nlc, weight_norm, "
                     "grad_norm)", ours_s=median[name],
                     baseline="the bare training step (forward, backward, SGD step)",
                     baseline_s=median["bare"],
                     setting=f"ReLU mlp(40, {args.width}, {args.depth}, 3), waveform-noise, "
                             "minibatches of 250; seconds per step, the median over "
                             f"{args.steps}-step loops",
                     load_before=load_before, load_after=load_after)


if __name__ == "__main__":
    main()
