"""Benchmark: exact linear regions along a segment (the piecewise-linear engine) vs dense
sampling and regioncam, on a wide deep ReLU MLP.

Setting: ``nngauge.nn.mlp(d_in, 1000, 10, 10, activation="relu")`` (orthogonal init, biases of
std ``--bias-std``), float64, a segment between two Gaussian inputs x0, x1 (scaled to norm
sqrt(d_in)). In one run, each warmed by one untimed call, then interleaved, ``--repeats``
(>= 3) times each (medians printed, with the load average before and after the timed runs):

- exact: ``transitions(net, x0, x1)``: the piecewise-linear engine (every piece carries the
  affine map of every live node at t = 0 and t = 1; each layer is one batched matmul over all
  pieces of a chunk, skipping the units off on all of them; crossings are solved for in closed
  form); printed: pieces (= distinct activation patterns, Corollary 1; 2,749 for the
  defaults), seconds, regions per second;
- baseline, dense sampling: the activation pattern (every ReLU on/off) at ``--dense`` equally
  spaced points of the segment (10^5 by default; chunked forward passes with hooks, the naive
  method), distinct patterns counted by their packed bits; printed: seconds, patterns found,
  and the regions it misses, counted two ways (exact patterns minus dense patterns; exact
  pieces that contain no grid point) that agree when both are right;
- regioncam (only when the package is importable, e.g. ``pip install --target DIR regioncam``
  and ``PYTHONPATH=DIR``): ``Regioncam1D.through_points([x0, x1], size=2)`` (exactly the
  segment) with the same Linear and ReLU layers (regioncam computes in float32, one row per
  vertex, single-threaded; the engine in float64, two rows per piece); printed: its regions,
  seconds, regions per second, and the ratio of nngauge's regions/s to regioncam's.

Then a cost-vs-depth table: for depth 2..``--depth``, the exact method on the sub-segment of
``mlp(d_in, width, depth, 10)`` holding its first ``--pieces`` linear pieces (the same piece
count at every depth): the engine's cost grows linearly with depth (each layer is evaluated
once per piece), where re-running the network's prefix per layer costs depth^2.

With ``NNGAUGE_BENCH_ROWS`` set (``make bench``), it records the time ratios dense / exact and
regioncam / exact on the same segment (benchmarks/_rows.py) and the cost-vs-depth table.

Run:  python benchmarks/bench_transitions.py [--width 1000] [--depth 10] [--dense 100000]
      [--repeats 3] [--pieces 500] [--threads N]     (--dense 0: no dense baseline)
On a busy 2-core machine pass --threads 1: with other processes running, torch's two threads
wait for each other at every operation (runs then take several times longer).
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import os
from typing import Callable, Optional

import numpy as np
import torch
from torch import nn

import _rows  # this folder's scripts share it (the script's directory is on sys.path)
from nngauge.activations._torch import ActivationModule
from nngauge.measures.expressivity._transitions import transitions
from nngauge.nn import mlp

EXPECTED_PIECES = 2749
"""Linear pieces of the default setting (seed 0, width 1000, depth 10, d_in 100)."""


def build(args: argparse.Namespace, depth: int) -> tuple[nn.Module, torch.Tensor, torch.Tensor]:
    """The benchmark's float64 MLP of ``depth`` layers and its segment's endpoints."""
    gen = torch.Generator().manual_seed(args.seed)
    net = mlp(args.d_in, args.width, depth, 10, activation="relu", bias_std=args.bias_std,
              generator=gen, dtype=torch.float64).eval()
    x0, x1 = torch.randn(2, args.d_in, generator=gen, dtype=torch.float64)
    x0, x1 = (x * math.sqrt(args.d_in) / x.norm() for x in (x0, x1))
    return net, x0, x1


def dense_patterns(net: nn.Module, x0: torch.Tensor, x1: torch.Tensor, n: int,
                   chunk: int) -> int:
    """Distinct ReLU on/off patterns at n equally spaced points of [x0, x1] (the baseline)."""
    relus = [m for m in net.modules() if isinstance(m, (nn.ReLU, ActivationModule))]
    signs: dict[nn.Module, torch.Tensor] = {}
    handles = [m.register_forward_pre_hook(lambda mod, args: signs.__setitem__(mod, args[0] > 0))
               for m in relus]
    seen: set[bytes] = set()
    t = torch.linspace(0.0, 1.0, n, dtype=torch.float64)
    try:
        with torch.no_grad():
            for start in range(0, n, chunk):
                s = t[start:start + chunk].unsqueeze(1)
                net((1 - s) * x0 + s * x1)
                bits = torch.cat([signs[m] for m in relus], 1).numpy()
                seen.update(map(bytes, np.packbits(bits, axis=1)))
    finally:
        for handle in handles:
            handle.remove()
    return len(seen)


def regioncam_regions(net: nn.Module, x0: torch.Tensor, x1: torch.Tensor) -> int:
    """Regions regioncam finds on [x0, x1] for the MLP's Linear / ReLU chain (float32).
    ``through_points`` spans the midpoint +- size |x1 - x0| / 4: size=2 is the segment (the
    default 1.5 covers its middle 75 %)."""
    import regioncam

    linears = [m for m in net.modules() if isinstance(m, nn.Linear)]
    cam = regioncam.Regioncam1D.through_points(torch.stack([x0, x1]).float().numpy(), size=2.0)
    for i, linear in enumerate(linears):
        cam.linear(linear.weight.detach().T.float().numpy().copy(),
                   linear.bias.detach().float().numpy())
        if i < len(linears) - 1:
            cam.relu()
    return cam.num_edges


def pieces_without_grid_point(pieces: np.ndarray, n: int) -> int:
    """Exact pieces [a, b) that hold none of the grid points j / (n - 1), j = 0..n-1."""
    a, b = pieces[:, 0] * (n - 1), pieces[:, 1] * (n - 1)
    first = np.ceil(a)  # smallest grid index >= a
    hit = first < b
    hit[-1] = True  # the last piece is closed: it holds t = 1
    return int((~hit).sum())


def depth_table(args: argparse.Namespace) -> None:
    """Seconds of the exact method on the first ``args.pieces`` pieces, per depth, and the
    least-squares line through them."""
    print(f"\ncost vs depth, {args.pieces} pieces at every depth (the sub-segment holding the "
          f"first {args.pieces} pieces of each network's segment), medians of {args.repeats}:")
    print(f"{'depth':>5} {'pieces':>7} {'seconds':>8} {'added by the last layer':>24}")
    depths, seconds, rows = [], [], []
    load_before = _rows.load()
    for depth in range(2, args.depth + 1):
        net, x0, x1 = build(args, depth)
        pieces = transitions(net, x0, x1).pieces
        end = float(pieces[min(args.pieces, len(pieces)) - 1, 1])
        x_end = x0 + end * (x1 - x0)
        timed, _ = _rows.interleaved({"exact": lambda: transitions(net, x0, x_end)},
                                     args.repeats)
        spent, result = timed["exact"]
        added = f"{spent - seconds[-1]:+.3f}" if seconds else ""
        print(f"{depth:>5} {result.n_pieces:>7} {spent:>8.3f} {added:>24}")
        depths.append(depth)
        seconds.append(spent)
        rows.append([depth, result.n_pieces, round(spent, 4),
                     round(spent - seconds[-2], 4) if len(seconds) > 1 else ""])
    load_after = _rows.load()
    slope, intercept = np.polyfit(depths, seconds, 1)
    worst = max(abs(s - intercept - slope * d) for d, s in zip(depths, seconds)) / seconds[-1]
    line = (f"least-squares line: {intercept:.3f} + {slope:.4f} x depth seconds (largest "
            f"deviation {100 * worst:.0f} % of the deepest's time)")
    print(f"{line}. Caveat: each depth is another network, whose first pieces split at "
          "different layers (deeper networks split later, so their early layers carry fewer "
          "pieces): the seconds are comparable only as an upper trend, not per layer")
    _rows.record_table(
        f"transitions: cost vs depth, the first {args.pieces} pieces of the segment",
        ["depth", "pieces", "seconds (median)", "added by the last layer (s)"], rows,
        setting=f"mlp({args.d_in}, {args.width}, depth, 10, relu), float64, medians of "
                f"{args.repeats} warm runs; {line}; each depth is another network whose first "
                "pieces split at different layers, so the seconds are not a per-layer cost",
        load_before=load_before, load_after=load_after)


def report_exact(args: argparse.Namespace, seconds: float, exact) -> float:
    """Print the exact method's line; returns its regions per second."""
    widths = exact.pieces[:, 1] - exact.pieces[:, 0]
    defaults = (args.width, args.depth, args.d_in, args.seed) == (1000, 10, 100, 0)
    check = (f" (expected {EXPECTED_PIECES:,}: "
             f"{'same' if exact.n_pieces == EXPECTED_PIECES else 'DIFFERENT'})" if defaults
             else "")
    rate = exact.n_patterns / seconds
    print(f"exact:     {exact.n_pieces:,} pieces{check}, {exact.n_patterns:,} distinct patterns, "
          f"{exact.n_transitions:,} neuron transitions, narrowest piece {widths.min():.2e} in t,"
          f" {exact.near_coincident} near-coincident crossings, {seconds:.2f} s "
          f"-> {rate:,.0f} regions/s")
    return rate


def report_dense(args: argparse.Namespace, seconds: float, found: int, exact,
                 exact_s: float) -> None:
    missed_grid = pieces_without_grid_point(exact.pieces, args.dense)
    missed = exact.n_patterns - found
    print(f"dense:     {args.dense:,} points, {found:,} distinct patterns, {seconds:.2f} s "
          f"-> {found / seconds:,.0f} regions/s; misses {missed} of {exact.n_patterns:,} regions"
          f" ({100 * missed / exact.n_patterns:.1f} %); exact pieces holding no grid point: "
          f"{missed_grid}")
    print(f"time dense / exact: {seconds / exact_s:.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--width", type=int, default=1000)
    parser.add_argument("--depth", type=int, default=10)
    parser.add_argument("--d-in", type=int, default=100)
    parser.add_argument("--bias-std", type=float, default=math.sqrt(0.05))
    parser.add_argument("--dense", type=int, default=10**5, help="grid points (0: no baseline)")
    parser.add_argument("--chunk", type=int, default=4096)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeats", type=_rows.repeats, default=3)
    parser.add_argument("--pieces", type=int, default=500, help="pieces of the depth table")
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    net, x0, x1 = build(args, args.depth)
    print(f"mlp({args.d_in}, {args.width}, {args.depth}, 10, relu, bias_std={args.bias_std:.3g})"
          f", float64, segment |x1 - x0| = {float((x1 - x0).norm()):.2f}, "
          f"{torch.get_num_threads()} torch threads, load average {os.getloadavg()}")
    runs: dict[str, Callable[[], object]] = {"exact": lambda: transitions(net, x0, x1)}
    if args.dense:
        runs["dense"] = lambda: dense_patterns(net, x0, x1, args.dense, args.chunk)
    if importlib.util.find_spec("regioncam") is not None:
        runs["regioncam"] = lambda: regioncam_regions(net, x0, x1)
    timed, (load_before, load_after) = _rows.interleaved(runs, args.repeats)
    print(f"load average before the timed runs {load_before:.2f}, after {load_after:.2f}; "
          f"medians of {args.repeats} interleaved runs (after one warm-up call each)")

    exact_s, exact = timed["exact"]
    rate = report_exact(args, exact_s, exact)
    setting = (f"mlp({args.d_in}, {args.width}, {args.depth}, 10, relu), float64, segment "
               f"between 2 Gaussian inputs: {exact.n_pieces:,} pieces, {exact.n_patterns:,} "
               "patterns")
    loads = {"load_before": load_before, "load_after": load_after}
    if "dense" in timed:
        dense_s, found = timed["dense"]
        report_dense(args, dense_s, found, exact, exact_s)
        _rows.record("exact linear regions along a segment (transitions)", ours_s=exact_s,
                     baseline=f"dense sampling, {args.dense:,} points (finds {found:,} of "
                              f"{exact.n_patterns:,} patterns)",
                     baseline_s=dense_s, setting=setting, **loads)
    peer: Optional[tuple] = timed.get("regioncam")
    if peer is None:
        print("regioncam: not importable (pip install --target DIR regioncam; PYTHONPATH=DIR)")
    else:
        peer_s, regions = peer
        print(f"regioncam: {regions:,} regions (float32), {peer_s:.2f} s -> "
              f"{regions / peer_s:,.0f} regions/s; nngauge / regioncam regions/s: "
              f"{rate / (regions / peer_s):.2f}; time regioncam / exact on the same segment: "
              f"{peer_s / exact_s:.2f}x")
        import regioncam
        same = ("the same pieces" if regions == exact.n_pieces else
                f"{regions:,} pieces against nngauge's {exact.n_pieces:,}")
        _rows.record("exact linear regions along a segment (transitions)", ours_s=exact_s,
                     baseline=f"regioncam {regioncam.__version__} Regioncam1D (float32, one "
                              f"thread; {same})",
                     baseline_s=peer_s, goal=0.5,
                     setting=setting + "; the ratio is of seconds on the same segment",
                     **loads)
    depth_table(args)


if __name__ == "__main__":
    main()
