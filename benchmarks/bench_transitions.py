"""Benchmark: exact linear regions along a segment vs dense sampling, on a wide deep ReLU MLP.

Setting: ``nngauge.nn.mlp(d_in, 1000, 10, 10, activation="relu")`` (orthogonal init, biases of
std ``--bias-std``), float64, a segment between two Gaussian inputs x0, x1 (scaled to norm
sqrt(d_in)). In one run:

- exact: ``transitions(net, x0, x1)`` (every breakpoint crossing solved for layer by layer),
  giving the linear pieces of the network along the segment; printed: pieces (= distinct
  activation patterns, Corollary 1), seconds, regions found per second;
- baseline, dense sampling: the activation pattern (every ReLU on/off) at ``--dense`` equally
  spaced points of the segment (10^5 by default; one chunked forward pass with hooks, the
  naive method), distinct patterns counted by their packed bits; printed: seconds, patterns
  found, and how many of the exact regions it misses, counted two ways (exact patterns minus
  dense patterns; exact pieces that contain no grid point) that agree when both are right.

Run:  python benchmarks/bench_transitions.py [--width 1000] [--depth 10] [--dense 100000]
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np
import torch
from torch import nn

from nngauge.activations._torch import ActivationModule
from nngauge.measures._transitions import transitions
from nngauge.nn import mlp


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


def pieces_without_grid_point(pieces: np.ndarray, n: int) -> int:
    """Exact pieces [a, b) that hold none of the grid points j / (n - 1), j = 0..n-1."""
    a, b = pieces[:, 0] * (n - 1), pieces[:, 1] * (n - 1)
    first = np.ceil(a)  # smallest grid index >= a
    hit = first < b
    hit[-1] = True  # the last piece is closed: it holds t = 1
    return int((~hit).sum())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--width", type=int, default=1000)
    parser.add_argument("--depth", type=int, default=10)
    parser.add_argument("--d-in", type=int, default=100)
    parser.add_argument("--bias-std", type=float, default=math.sqrt(0.05))
    parser.add_argument("--dense", type=int, default=10**5)
    parser.add_argument("--chunk", type=int, default=4096)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    gen = torch.Generator().manual_seed(args.seed)
    net = mlp(args.d_in, args.width, args.depth, 10, activation="relu", bias_std=args.bias_std,
              generator=gen, dtype=torch.float64).eval()
    x0, x1 = torch.randn(2, args.d_in, generator=gen, dtype=torch.float64)
    x0, x1 = (x * math.sqrt(args.d_in) / x.norm() for x in (x0, x1))
    print(f"mlp({args.d_in}, {args.width}, {args.depth}, 10, relu, bias_std={args.bias_std:.3g})"
          f", float64, segment |x1 - x0| = {float((x1 - x0).norm()):.2f}, "
          f"{torch.get_num_threads()} threads")

    start = time.perf_counter()
    exact = transitions(net, x0, x1)
    exact_s = time.perf_counter() - start
    widths = exact.pieces[:, 1] - exact.pieces[:, 0]
    print(f"exact:  {exact.n_pieces} pieces, {exact.n_patterns} distinct patterns, "
          f"{exact.n_transitions} neuron transitions, narrowest piece {widths.min():.2e} in t, "
          f"{exact_s:.2f} s -> {exact.n_patterns / exact_s:,.0f} regions/s")

    start = time.perf_counter()
    found = dense_patterns(net, x0, x1, args.dense, args.chunk)
    dense_s = time.perf_counter() - start
    missed_grid = pieces_without_grid_point(exact.pieces, args.dense)
    print(f"dense:  {args.dense:,} points, {found} distinct patterns, {dense_s:.2f} s "
          f"-> {found / dense_s:,.0f} regions/s")
    print(f"dense sampling misses {exact.n_patterns - found} of {exact.n_patterns} regions "
          f"({100 * (exact.n_patterns - found) / exact.n_patterns:.1f} %); exact pieces holding "
          f"no grid point: {missed_grid}")
    print(f"time dense / exact: {dense_s / exact_s:.2f}x")


if __name__ == "__main__":
    main()
