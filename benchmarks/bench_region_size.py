"""Region-size walks (NLC paper E.1 / E.3) on a network that normalizes with batch statistics.

``linear_region_diameter`` and ``error_preserving_perturbation`` evaluate f(X + k step) at 121
values of k per random direction. A batchnorm network in train mode couples its batch, so the
values of k cannot be stacked into one batch; the walk maps chunks of them with ``vmap``, each
k's batch normalized by its own statistics. The baseline is the previous walk, one forward
pass per k, kept only here. Both run warm (one untimed call each first), interleaved A, B,
A, B, ``--repeats`` (>= 3) times, on one thread, on the same walk (same data, direction and
grid); the ratio is of medians, printed with the load average before and after the timed runs,
and with ``NNGAUGE_BENCH_ROWS`` set (``make bench``) recorded as a row of
benchmarks/RESULTS.md (benchmarks/_rows.py).

    python benchmarks/bench_region_size.py [--depth 30] [--width 16] [--repeats 5]
"""

from __future__ import annotations

import argparse

import torch

import _rows  # this folder's scripts share it (the script's directory is on sys.path)
from nngauge._internal.adapter import ModelAdapter
from nngauge.data import waveform_noise
from nngauge.measures.propagation._region_size import _forward_along, k_grid
from nngauge.nn import mlp


@torch.no_grad()
def one_pass_per_k(adapter, x, step, ks):
    """The previous walk on batch-coupled networks: one forward pass per value of k."""
    return [adapter(x + k * step, x) for k in (0.0, *ks.tolist())]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--depth", type=int, default=30)
    parser.add_argument("--width", type=int, default=16)
    parser.add_argument("--repeats", type=_rows.repeats, default=5)
    args = parser.parse_args()
    torch.set_num_threads(1)
    x, _ = waveform_noise(100)
    model = mlp(x.shape[1], args.width, args.depth, 3, norm="batch",
                generator=torch.Generator().manual_seed(0))
    adapter = ModelAdapter(model, where="bench_region_size")
    ks = k_grid(1e3)
    step = 0.1 * torch.randn(x.shape, generator=torch.Generator().manual_seed(1))
    with adapter.active(data=x):
        sides = {"one pass per k": lambda: one_pass_per_k(adapter, x, step, ks),
                 "vmap over k": lambda: _forward_along(adapter, x, x, step, ks, True)}
        timed, (load_before, load_after) = _rows.interleaved(sides, args.repeats)
    (old, old_out), (new, new_out) = timed["one pass per k"], timed["vmap over k"]
    difference = max(float((a - b).abs().max()) for a, b in zip(old_out, new_out))
    print(f"mlp depth {args.depth}, width {args.width}, batchnorm (train), 100 points, "
          f"{len(ks) + 1} values of k, one thread, median of {args.repeats}")
    print(f"one pass per k {old:.3f} s, vmap over k {new:.3f} s: ratio {old / new:.2f}x, "
          f"load {load_before:.2f} before, {load_after:.2f} after, largest output difference "
          f"{difference:.1e}")
    _rows.record("region-size walk f(X + k step), batchnorm in train mode (vmap over k)",
                 ours_s=new, baseline="one forward pass per k (the previous walk)",
                 baseline_s=old, threads=1,
                 setting=f"mlp depth {args.depth}, width {args.width}, batchnorm (train), 100 "
                         f"waveform-noise points, {len(ks) + 1} values of k; largest output "
                         f"difference {difference:.1e}",
                 load_before=load_before, load_after=load_after)


if __name__ == "__main__":
    main()
