"""Benchmark: a 31 x 31 loss landscape, batched with vmap vs a loop over perturbed copies.

Setting of the loss-landscape issue: a ReLU MLP 40-256-256-3 (nngauge.nn.mlp(40, 256, 3, 3):
77,059 parameters) on 1,000 waveform-noise points, the loss on a 31 x 31 grid (961 points,
span [-1, 1]^2) of a plane of filter-normalized directions (Li et al., "Visualizing the Loss
Landscape of Neural Nets", NeurIPS 2018).

1. baseline: a Python loop over grid points, each a deep copy of the model whose state_dict
   with theta + a d1 + b d2 is loaded, then one forward pass on all 1,000 points;
2. loss_landscape(): the same directions (passed as given directions), chunks of grid points
   evaluated by one vmapped functional_call each (no copies of the module).

Both are warmed first (one untimed call each), then timed interleaved, --repeats (>= 3) times;
prints the load average before and after the timed runs, the median wall times, the ratio
loop / batched (target >= 5x) and the largest difference between the two grids. With
``NNGAUGE_BENCH_ROWS`` set (``make bench``), the ratio is recorded as a row of
benchmarks/RESULTS.md (benchmarks/_rows.py).

Every grid point costs one forward pass over the data either way; batching removes the
per-point copy, load and call overhead. With 1,000 points the forward pass dominates (on 2 CPU
threads about 1.1 ms of the loop's 2.5 ms per point), which bounds the ratio near 2x; with
fewer points per evaluation (``--n 100``, a probe batch) the overhead dominates and the ratio
is larger.

    python benchmarks/bench_landscape.py [--steps 31] [--n 1000] [--repeats 3] [--threads N]
"""

from __future__ import annotations

import argparse
import copy

import numpy as np
import torch
import torch.nn.functional as F

import _rows  # this folder's scripts share it (the script's directory is on sys.path)
from nngauge.data import waveform_noise
from nngauge.measures.curvature._landscape import loss_landscape
from nngauge.nn import mlp


def loop_over_copies(model, directions, coordinates, x, y) -> np.ndarray:
    """The loss at every grid point from a deep copy with the perturbed weights loaded."""
    grids = np.meshgrid(*coordinates, indexing="ij")
    losses = np.empty(grids[0].shape)
    weights = {n: w.detach() for n, w in model.named_parameters()}
    with torch.no_grad():
        for idx in np.ndindex(losses.shape):
            copied = copy.deepcopy(model).eval()
            state = copied.state_dict()
            for name, w in weights.items():
                state[name] = w + sum(float(g[idx]) * d[name] for g, d in zip(grids, directions))
            copied.load_state_dict(state)
            losses[idx] = float(F.cross_entropy(copied(x), y))
    return losses


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=31)
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--repeats", type=_rows.repeats, default=3)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    model = mlp(40, args.width, 3, 3, generator=torch.Generator().manual_seed(0))
    data = waveform_noise(args.n, generator=0)
    x, y = data.inputs, data.labels
    n_params = sum(p.numel() for p in model.parameters())
    steps = (args.steps, args.steps)
    print(f"MLP 40-{args.width}-{args.width}-3 ({n_params:,} parameters), {args.n} points, "
          f"grid {steps[0]} x {steps[1]}, {torch.get_num_threads()} threads")

    reference = loss_landscape(model, (x, y), resolution=steps, generator=torch.Generator()
                               .manual_seed(1))
    directions = reference.directions

    def batched():
        return loss_landscape(model, (x, y), directions=directions, resolution=steps).losses

    def looped():
        return loop_over_copies(model, directions, reference.coordinates, x, y)

    timed, (load_before, load_after) = _rows.interleaved(
        {"loop": looped, "batched": batched}, args.repeats)
    (t_loop, loop_losses), (t_batched, batched_losses) = timed["loop"], timed["batched"]
    diff = float(np.abs(loop_losses - batched_losses).max())
    print(f"loop over copies      : {t_loop:8.2f} s (median of {args.repeats})")
    print(f"loss_landscape (vmap) : {t_batched:8.2f} s (median of {args.repeats}), chunk size "
          f"{reference.settings['chunk_size']}")
    print(f"loop / batched {t_loop / t_batched:6.2f}x (target >= 5x); max |difference| "
          f"{diff:.2e}; load average {load_before:.2f} before the timed runs, {load_after:.2f} "
          "after")
    _rows.record(f"loss landscape, {steps[0]} x {steps[1]} grid (loss_landscape, vmap)",
                 ours_s=t_batched, baseline="a loop over deep copies with the perturbed weights "
                 "loaded", baseline_s=t_loop, goal=5.0,
                 setting=f"MLP 40-{args.width}-{args.width}-3 ({n_params:,} parameters), "
                         f"{args.n} waveform-noise points; max |difference| {diff:.1e}",
                 load_before=load_before, load_after=load_after)


if __name__ == "__main__":
    main()
