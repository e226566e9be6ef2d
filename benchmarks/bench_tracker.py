"""Benchmark: Tracker overhead per training step, default measures, on a small MLP.

Setting: a depth-4, width-256 ReLU MLP on waveform-noise (40 inputs, 3 classes), SGD on
minibatches of 250. In one run, on the same batches: the bare training step (forward,
backward, optimizer step) and the same loop with ``Tracker()`` (default measures: nlc with one
probe on the step's batch, weight_norm, grad_norm) at every=1 and every=10.

The three loops run interleaved, ``--repeats`` times each, and the fastest repeat of each is
kept, so that load from other processes on a shared machine distorts the ratios less.
Prints seconds per step and the ratio tracked / bare. Expected: a few x at every=1 (the NLC
probe costs a forward and a JVP/VJP pair, about one training step), about 1.1-1.3x at every=10.
Run:  python benchmarks/bench_tracker.py [--steps 200] [--repeats 3] [--width 256] [--depth 4]
"""

from __future__ import annotations

import argparse
import time

import torch
from torch import nn

from nngauge.data import waveform_noise
from nngauge.nn import mlp
from nngauge.training import Tracker


def run(steps: int, width: int, depth: int, tracker) -> float:
    """Seconds per training step of ``steps`` SGD steps (after 5 warm-up steps)."""
    net = mlp(40, width, depth, 3, generator=torch.Generator().manual_seed(0))
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    data = waveform_noise(250 * 8, seed=0)
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
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    configs = {"bare": None, "every=1": 1, "every=10": 10}
    best = {name: float("inf") for name in configs}
    for _ in range(args.repeats):
        for name, every in configs.items():
            tracker = None if every is None else Tracker(every=every)
            best[name] = min(best[name], run(args.steps, args.width, args.depth, tracker))
    print(f"bare training step          {best['bare'] * 1e3:8.3f} ms/step")
    for name in ("every=1", "every=10"):
        print(f"Tracker() {name:<9}         {best[name] * 1e3:8.3f} ms/step  "
              f"ratio {best[name] / best['bare']:5.2f}x")


if __name__ == "__main__":
    main()
