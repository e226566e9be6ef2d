"""Benchmark: region_density (every segment of every point in one run of the piecewise-linear
engine) vs a loop of ``transitions`` over the segments, on a width-256 depth-4 ReLU MLP.

Setting: ``nngauge.nn.mlp(d_in, 256, 4, 10, activation="relu", bias_std=sqrt(0.05))`` in
float32 (the engine copies it to float64), ``--points`` Gaussian inputs, ``--directions``
segments of half-length ``--radius`` per point. In one run, each warmed by one untimed call,
then interleaved, ``--repeats`` (>= 3) times each (medians printed, with the load average
before and after the timed runs):

- ``region_density(method="exact")`` with the default neighbourhood (the input's axes: 2 d_in
  vertices per point) and with ``neighbourhood_dims=25`` (the paper's 50 vertices), and the
  sampled method (``neighbourhood_dims=25``);
- the baseline: ``transitions(net, x - r u, x + r u)`` for every segment in a Python loop (the
  same exact counts, one engine run and one affinity check per segment; the segments' centres
  and directions are drawn once, before the timed runs); the ratio is baseline seconds /
  region_density(neighbourhood_dims=25) seconds, and the two must find the same regions on
  every segment. With ``NNGAUGE_BENCH_ROWS`` set (``make bench``), it is recorded as a row of
  benchmarks/RESULTS.md (benchmarks/_rows.py).

Run:  python benchmarks/bench_region_density.py [--d-in 784] [--points 100] [--directions 8]
      [--radius 1.0] [--repeats 3] [--threads N]
"""

from __future__ import annotations

import argparse
import math

import numpy as np
import torch

import _rows  # this folder's scripts share it (the script's directory is on sys.path)
from nngauge.measures.expressivity._density import region_density
from nngauge.measures.expressivity._transitions import transitions
from nngauge.nn import mlp


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--d-in", type=int, default=784)
    parser.add_argument("--points", type=int, default=100)
    parser.add_argument("--directions", type=int, default=8)
    parser.add_argument("--radius", type=float, default=1.0)
    parser.add_argument("--repeats", type=_rows.repeats, default=3)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    gen = torch.Generator().manual_seed(0)
    net = mlp(args.d_in, 256, 4, 10, activation="relu", bias_std=math.sqrt(0.05), generator=gen)
    x = torch.randn(args.points, args.d_in, generator=gen)
    r = args.radius

    def measure(**options):
        return region_density(net, x, radius=r, n_directions=args.directions,
                              generator=torch.Generator().manual_seed(1), **options)

    probe = measure(neighbourhood_dims=1)  # the same centers and directions, drawn once
    anchors = probe.centers[:, None, None] + r * torch.stack(
        [-probe.directions, probe.directions], 2)

    def loop():
        return np.array([transitions(net, a, b).n_pieces for a, b in anchors.flatten(0, 1)])

    runs = {"exact, axes": lambda: measure(),
            "exact, P = 25": lambda: measure(neighbourhood_dims=25),
            "sampled, P = 25": lambda: measure(method="sampled", neighbourhood_dims=25),
            "loop of transitions": loop}
    print(f"mlp({args.d_in}, 256, 4, 10, relu), {args.points} points x {args.directions} "
          f"directions, r = {r}, {torch.get_num_threads()} torch threads")
    timed, (load_before, load_after) = _rows.interleaved(runs, args.repeats)
    seconds = {name: spent for name, (spent, _) in timed.items()}
    values = {name: value for name, (_, value) in timed.items()}
    print(f"load average {load_before:.2f} before the timed runs, {load_after:.2f} after; "
          f"medians of {args.repeats} interleaved runs (warm)")
    for name in runs:
        if name == "loop of transitions":
            found = values[name]
            print(f"{name:>20}: {seconds[name]:7.2f} s, {found.sum():,} regions")
            continue
        res = values[name]
        print(f"{name:>20}: {seconds[name]:7.2f} s, {res.regions.sum():,} regions, density "
              f"{res.density:.3f} +- {res.density_std:.3f} per unit length, local complexity "
              f"{res.local_complexity:.1f} +- {res.local_complexity_std:.1f} "
              f"({res.settings['vertices_per_point']} vertices per point)")
    batched, looped = values["exact, P = 25"], values["loop of transitions"]
    ratio = seconds["loop of transitions"] / seconds["exact, P = 25"]
    same = np.array_equal(batched.regions.reshape(-1), looped)
    print(f"loop / region_density(P = 25): {ratio:.1f}x; same regions on every segment: {same}")
    _rows.record("region_density (exact, P = 25): every segment in one engine run",
                 ours_s=seconds["exact, P = 25"],
                 baseline="a Python loop of transitions over the segments",
                 baseline_s=seconds["loop of transitions"],
                 setting=f"mlp({args.d_in}, 256, 4, 10, relu), {args.points} points x "
                         f"{args.directions} directions, radius {r}; "
                         f"{'the same' if same else 'DIFFERENT'} regions on every segment",
                 load_before=load_before, load_after=load_after)


if __name__ == "__main__":
    main()
