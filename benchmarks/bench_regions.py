"""Benchmark: the exact partition of a plane into linear regions (the 2-D piecewise-linear
engine, ``regions``) vs a dense grid and regioncam, on ReLU MLPs.

Settings: ``nngauge.nn.mlp(d_in, width, depth + 1, 10, activation="relu", sigma_w=--sigma-w,
bias_std=--bias-std)`` (``depth`` hidden ReLU layers, orthogonal init, sigma_w sqrt(2), bias
std 0.2), float64, on the default box (-0.5, 1.5) x (-0.5, 1.5) of a plane's coordinates. Two
networks: (d_in 2, width 64, depth 4) on the plane whose box is the square [-1, 1]^2 of the
input space (x0 = (-1/2, -1/2), directions e1, e2), and (d_in 784, width 256, depth 3) on the
plane through three Gaussian inputs of norm sqrt(784) (drawn after the network, seed + 1).
For each, in one run, each warmed by one untimed call, then interleaved, ``--repeats`` (>= 3)
times (medians printed, with the load average before and after the timed runs):

- exact: ``regions(net, plane)``: regions (= linear regions = distinct activation patterns,
  Theorem 2), edges and vertices of the partition, seconds, regions per second;
- baseline, dense grid: the distinct activation patterns (every ReLU on/off) at the centres
  of r x r cells of the box, the network run on the plane (its first layer folded with the
  plane, chunks of 2^16 points, patterns hashed), r the resolution that finds the exact count:
  the smallest power of 2 from 64 at which the grid's count equals the exact one, found before
  the timed runs (when the next doubling would take longer than ``--grid-budget`` seconds: the
  last one, with the regions it misses); printed: r, its count, seconds, and the time ratio
  grid / exact;
- regioncam (only when the package is importable: ``pip install --target DIR regioncam`` and
  ``PYTHONPATH=DIR``): ``regioncam.Regioncam(1.0)``, whose square [-1, 1]^2 is the box once
  the first layer is folded with the plane (weight W [d1 d2], bias W (x0 + (d1 + d2) / 2) + b,
  d1 = x1 - x0, d2 = x2 - x0), then the same Linear and ReLU layers (regioncam computes in
  float32, single-threaded; nngauge in float64); printed: its regions, edges and vertices
  beside nngauge's, seconds, regions per second, and the ratio of nngauge's regions/s to
  regioncam's (target >= 0.5).

Then a cost-vs-depth table at (d_in 2, width 64), depths 1..6: regions, seconds and regions
per second of both, and their ratio.

With ``NNGAUGE_BENCH_ROWS`` set (``make bench``), it records (benchmarks/_rows.py) per network
the time ratios grid / exact and regioncam / exact on the same box (regioncam's partition has
the same counts when the row says so: then the time ratio is the regions/s ratio), and the
cost-vs-depth table.

Run:  PYTHONPATH=/tmp/peers python benchmarks/bench_regions.py [--repeats 3] [--threads 1]
      [--grid-budget 40] [--max-depth 6]
Threads default to 1 (regioncam runs on one; on a busy 2-core machine torch's two threads wait
for each other at every operation).
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import time
from typing import Callable

import torch
from torch import nn

import _rows  # this folder's scripts share it (the script's directory is on sys.path)
from nngauge._internal.patterns import CHUNK_POINTS, PatternHasher
from nngauge.measures.expressivity._regions import DEFAULT_BOUNDS, regions
from nngauge.nn import mlp
from nngauge.trajectories import Plane, plane

SETTINGS = ((2, 64, 4), (784, 256, 3))
"""(d_in, width, depth) of the two benchmarked networks."""


def build(args: argparse.Namespace, d_in: int, width: int, depth: int
          ) -> tuple[nn.Module, Plane]:
    """The float64 MLP with ``depth`` hidden layers and its plane: for 2 inputs the one whose
    default box is the square [-1, 1]^2, else the plane through three Gaussian inputs of norm
    sqrt(d_in)."""
    gen = torch.Generator().manual_seed(args.seed)
    net = mlp(d_in, width, depth + 1, 10, activation="relu", sigma_w=args.sigma_w,
              bias_std=args.bias_std, generator=gen, dtype=torch.float64).eval()
    if d_in == 2:
        return net, plane(torch.full((2,), -0.5, dtype=torch.float64),
                          directions=torch.eye(2, dtype=torch.float64))
    x = torch.randn(3, d_in, generator=gen.manual_seed(args.seed + 1), dtype=torch.float64)
    return net, plane(*(x * math.sqrt(d_in) / x.norm(dim=1, keepdim=True)))


def on_plane(net: nn.Module, p: Plane) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(W, b) of every Linear, the first folded with the plane's coordinates (u, v) shifted
    by (0.5, 0.5): the network on the box's square [-1, 1]^2 (the default box's centre and
    half-width)."""
    linears = [m for m in net.modules() if isinstance(m, nn.Linear)]
    layers = [(m.weight.detach(), m.bias.detach()) for m in linears]
    weight, bias = layers[0]
    spans = p.directions.reshape(2, -1).to(weight)
    centre = p.origin.reshape(-1).to(weight) + 0.5 * spans.sum(0)
    return [(weight @ spans.T, weight @ centre + bias)] + layers[1:]


def dense_patterns(layers: list[tuple[torch.Tensor, torch.Tensor]], resolution: int) -> int:
    """Distinct ReLU on/off patterns at the centres of resolution^2 cells of [-1, 1]^2."""
    s = (torch.arange(resolution, dtype=torch.float64) + 0.5) * 2 / resolution - 1
    points = torch.stack(torch.meshgrid(s, s, indexing="xy"), -1).reshape(-1, 2)
    hasher, keys = PatternHasher(), []
    for chunk in points.split(8 * CHUNK_POINTS):
        h, key = chunk, torch.zeros(len(chunk), 2, dtype=torch.int64)
        for i, (weight, bias) in enumerate(layers[:-1]):
            pre = torch.addmm(bias, h, weight.T)
            key += hasher((pre > 0).to(torch.int8), i)
            h = pre.clamp_(min=0)
        keys.append(key[:, 0] * 1_000_003 + key[:, 1])  # one key (collisions ~ n^2 2^-64)
    return len(torch.unique(torch.cat(keys)))


def regioncam_partition(layers: list[tuple[torch.Tensor, torch.Tensor]]) -> tuple[int, ...]:
    """(regions, edges, vertices) regioncam finds on [-1, 1]^2 for the folded layers."""
    import regioncam

    cam = regioncam.Regioncam(1.0)
    for i, (weight, bias) in enumerate(layers):
        cam.linear(weight.T.float().numpy().copy(), bias.float().numpy())
        if i < len(layers) - 1:
            cam.relu()
    return cam.num_faces, cam.num_edges, cam.num_vertices


def grid_resolution(layers, target: int, budget: float) -> tuple[int, int]:
    """The smallest power-of-2 resolution from 64 whose grid finds ``target`` patterns, and
    its count; or, when the next doubling would take longer than ``budget`` seconds (4 times
    the last grid's time), the last resolution and its count."""
    resolution = 64
    while True:
        start = time.perf_counter()
        found = dense_patterns(layers, resolution)
        if found >= target or 4 * (time.perf_counter() - start) > budget:
            return resolution, found
        resolution *= 2


def compare(args: argparse.Namespace, d_in: int, width: int, depth: int,
            peer: bool) -> None:
    net, p = build(args, d_in, width, depth)
    layers = on_plane(net, p)
    exact = regions(net, p)
    resolution, found = grid_resolution(layers, exact.n_regions, args.grid_budget)
    runs: dict[str, Callable[[], object]] = {
        "exact": lambda: regions(net, p),
        "grid": lambda: dense_patterns(layers, resolution)}
    if peer:
        runs["regioncam"] = lambda: regioncam_partition(layers)
    timed, (load_before, load_after) = _rows.interleaved(runs, args.repeats)
    print(f"\nmlp({d_in}, {width}, {depth} hidden, 10), box {DEFAULT_BOUNDS} of the plane "
          f"through 3 inputs; load average {load_before:.2f} before the timed runs, "
          f"{load_after:.2f} after; medians of {args.repeats} interleaved runs (warm)")
    exact_s, exact = timed["exact"]
    rate = exact.n_regions / exact_s
    print(f"exact:     {exact.n_regions:,} regions, {exact.n_edges:,} edges, "
          f"{exact.n_vertices:,} vertices, smallest area {exact.smallest_area:.1e}, "
          f"{exact.near_coincident} near-coincident, {exact_s:.3f} s -> {rate:,.0f} regions/s")
    grid_s, grid = timed["grid"]
    verdict = ("the same count" if grid == exact.n_regions else
               f"misses {exact.n_regions - grid:,} regions; the next power of 2 would take "
               f"over {args.grid_budget:.0f} s")
    print(f"grid:      {resolution} x {resolution} cells, {grid:,} patterns ({verdict}), "
          f"{grid_s:.3f} s; time grid / exact: {grid_s / exact_s:.1f}x")
    measure = "exact 2-D partition into linear regions (regions)"
    setting = (f"mlp({d_in}, {width}, {depth} hidden, 10, relu), float64, "
               f"{'the square [-1, 1]^2' if d_in == 2 else 'plane through 3 Gaussian inputs'}: "
               f"{exact.n_regions:,} regions")
    loads = {"load_before": load_before, "load_after": load_after}
    _rows.record(measure, ours_s=exact_s, baseline=f"dense grid {resolution}^2 cells (finds "
                 f"{grid:,} of {exact.n_regions:,} regions)", baseline_s=grid_s,
                 setting=setting, **loads)
    if peer:
        peer_s, (faces, edges, vertices) = timed["regioncam"]
        same = (faces, edges, vertices) == (exact.n_regions, exact.n_edges, exact.n_vertices)
        print(f"regioncam: {faces:,} regions, {edges:,} edges, {vertices:,} vertices (float32; "
              f"{'the same partition counts' if same else 'DIFFERENT counts'}), {peer_s:.3f} s "
              f"-> {faces / peer_s:,.0f} regions/s; nngauge / regioncam regions/s: "
              f"{rate / (faces / peer_s):.2f}; time regioncam / exact {peer_s / exact_s:.2f}x")
        import regioncam
        counts = ("the same regions, edges and vertices" if same else
                  f"{faces:,} regions, {edges:,} edges, {vertices:,} vertices against "
                  f"nngauge's {exact.n_regions:,}, {exact.n_edges:,}, {exact.n_vertices:,}")
        _rows.record(measure, ours_s=exact_s, baseline=f"regioncam {regioncam.__version__} "
                     f"Regioncam (float32, one thread; {counts})", baseline_s=peer_s, goal=0.5,
                     setting=setting + "; the ratio is of seconds on the same box", **loads)


def depth_table(args: argparse.Namespace, peer: bool) -> None:
    load_before = _rows.load()
    print(f"\ncost vs depth at mlp(2, 64, depth hidden, 10), medians of {args.repeats} "
          f"interleaved runs (warm); load average before {load_before:.2f}:")
    print(f"{'depth':>5} {'regions':>8} {'exact s':>8} {'regions/s':>10} "
          f"{'regioncam s':>12} {'regions/s':>10} {'ratio':>6}")
    rows = []
    for depth in range(1, args.max_depth + 1):
        net, p = build(args, 2, 64, depth)
        layers = on_plane(net, p)
        runs: dict[str, Callable[[], object]] = {"exact": lambda: regions(net, p)}
        if peer:
            runs["regioncam"] = lambda: regioncam_partition(layers)
        timed, _ = _rows.interleaved(runs, args.repeats)
        exact_s, exact = timed["exact"]
        line = (f"{depth:>5} {exact.n_regions:>8,} {exact_s:>8.3f} "
                f"{exact.n_regions / exact_s:>10,.0f}")
        row = [depth, exact.n_regions, round(exact_s, 4), round(exact.n_regions / exact_s)]
        if peer:
            peer_s, (faces, _, _) = timed["regioncam"]
            ratio = exact.n_regions * peer_s / (exact_s * faces)
            line += f" {peer_s:>12.3f} {faces / peer_s:>10,.0f} {ratio:>6.2f}"
            row += [faces, round(peer_s, 4), round(faces / peer_s), round(ratio, 3)]
        print(line)
        rows.append(row)
    load_after = _rows.load()
    print(f"load average after {load_after:.2f}")
    columns = ["depth", "regions", "nngauge s", "nngauge regions/s"]
    if peer:
        columns += ["regioncam regions", "regioncam s", "regioncam regions/s",
                    "ratio of regions/s"]
    _rows.record_table("regions: cost vs depth on the square [-1, 1]^2", columns, rows,
                       setting="mlp(2, 64, depth hidden, 10, relu), float64 (regioncam float32),"
                               f" medians of {args.repeats} warm interleaved runs",
                       load_before=load_before, load_after=load_after)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sigma-w", type=float, default=math.sqrt(2.0))
    parser.add_argument("--bias-std", type=float, default=0.2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeats", type=_rows.repeats, default=3)
    parser.add_argument("--grid-budget", type=float, default=40.0,
                        help="seconds a grid may take (the resolution search stops there)")
    parser.add_argument("--max-depth", type=int, default=6)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    peer = importlib.util.find_spec("regioncam") is not None
    print(f"{torch.get_num_threads()} torch threads; regioncam "
          f"{'importable' if peer else 'not importable (pip install --target DIR regioncam; '}"
          f"{'' if peer else 'PYTHONPATH=DIR)'}")
    for setting in SETTINGS:
        compare(args, *setting, peer)
    depth_table(args, peer)


if __name__ == "__main__":
    main()
