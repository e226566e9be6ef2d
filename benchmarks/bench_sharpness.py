"""Benchmark: expected sharpness against a Python loop perturbing the model in place.

Setting of the generalization issue: expected sharpness with 1,000 Gaussian perturbations
(appendix A noise, sigma_i = alpha (10 |w_i| + 1)), each scored on its own mini-batch of 64,
on a ReLU MLP of about 1M parameters (nngauge.nn.mlp(1000, 1000, 2, 10): 1,011,010), 2,000
Gaussian points.

- baseline: what a user writes: under ``torch.no_grad``, per perturbation a mini-batch of 64,
  the loss at w, noise added to every parameter in place, the loss at w + nu, the parameters
  restored exactly by ``copy_`` from a saved copy (no module copies); the stds are computed
  once;
- nngauge: ``expected_sharpness`` with the default ``method="auto"`` (the local
  reparameterization for this model), optionally also ``--method weights``.

Both sides run warm (one untimed call each), interleaved A, B, A, B, medians of ``--repeats``;
the load average is printed before and after. Prints both estimates with their standard errors
(different draws: they agree within a few standard errors) and the ratio loop / nngauge
(issue goal >= 5x).

    python benchmarks/bench_sharpness.py [--n-samples 1000] [--repeats 3] [--threads 1]
"""

from __future__ import annotations

import argparse
import math
import statistics
import time

import torch
import torch.nn.functional as F

import _rows
from nngauge.measures.generalization._sharpness import expected_sharpness
from nngauge.nn import mlp


@torch.no_grad()
def in_place_loop(model, x, y, alpha, n_samples, batch_size, generator) -> tuple[float, float]:
    """Mean and standard error of L_B(w + nu) - L_B(w), perturbing the parameters in place."""
    model.eval()
    params = list(model.parameters())
    saved = [p.detach().clone() for p in params]
    stds = [alpha * (10 * w.abs() + 1) for w in saved]
    diffs = torch.empty(n_samples, dtype=torch.float64)
    try:
        for k in range(n_samples):
            idx = torch.randperm(len(y), generator=generator)[:batch_size]
            xb, yb = x[idx], y[idx]
            base = F.cross_entropy(model(xb), yb)
            for p, s in zip(params, stds):
                p.add_(s * torch.randn(p.shape, generator=generator))
            diffs[k] = float(F.cross_entropy(model(xb), yb) - base)
            for p, w in zip(params, saved):
                p.copy_(w)
    finally:
        for p, w in zip(params, saved):
            p.copy_(w)
    return float(diffs.mean()), float(diffs.std() / math.sqrt(n_samples))


def interleaved(sides: dict, repeats: int) -> dict:
    """Median seconds and the last result of each side: one warm call, then A, B, A, B, ..."""
    for run in sides.values():
        run()
    times = {name: [] for name in sides}
    results = {}
    for _ in range(repeats):
        for name, run in sides.items():
            start = time.perf_counter()
            results[name] = run()
            times[name].append(time.perf_counter() - start)
    return {name: (statistics.median(t), results[name]) for name, t in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n-samples", type=int, default=1000)
    parser.add_argument("--width", type=int, default=1000)
    parser.add_argument("--alpha", type=float, default=1e-3)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--method", choices=("auto", "weights"), nargs="+", default=["auto"])
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    gen = torch.Generator().manual_seed(0)
    model = mlp(1000, args.width, 2, 10, generator=gen)
    n_params = sum(p.numel() for p in model.parameters())
    x = torch.randn(2000, 1000, generator=gen)
    y = torch.randint(0, 10, (2000,), generator=gen)
    setting = (f"mlp(1000, {args.width}, 2, 10) ({n_params:,} parameters), "
               f"{args.n_samples} perturbations x mini-batch 64, alpha {args.alpha:g}")
    print(f"{setting}, {torch.get_num_threads()} threads")

    seeds = iter(range(1, 10**6))
    sides = {"loop": lambda: in_place_loop(model, x, y, args.alpha, args.n_samples, 64,
                                           torch.Generator().manual_seed(next(seeds)))}
    for method in args.method:
        sides[method] = lambda method=method: expected_sharpness(
            model, (x, y), loss=F.cross_entropy, alpha=args.alpha, n_probes=args.n_samples,
            batch_size=64, method=method, generator=torch.Generator().manual_seed(next(seeds)))

    load_before = _rows.load()
    timed = interleaved(sides, args.repeats)
    load_after = _rows.load()
    print(f"load average {load_before:.2f} before, {load_after:.2f} after; "
          f"medians of {args.repeats}")
    t_loop, (loop_mean, loop_se) = timed.pop("loop")
    print(f"in-place loop            : {t_loop:8.3f} s   expected sharpness "
          f"{loop_mean:.6f} +- {loop_se:.6f}")
    for method, (seconds, r) in timed.items():
        gap = abs(r.expected_sharpness - loop_mean) / math.hypot(r.stderr, loop_se)
        print(f"expected_sharpness({method!r}) [{r.method}]: {seconds:8.3f} s   expected "
              f"sharpness {r.expected_sharpness:.6f} +- {r.stderr:.6f}   loop / this "
              f"{t_loop / seconds:6.2f}x   ({gap:.1f} standard errors apart)")
        _rows.record(f"expected sharpness (method {method!r}: {r.method})", ours_s=seconds,
                     baseline="Python loop perturbing the parameters in place (no_grad, warm)",
                     baseline_s=t_loop, setting=setting, load_before=load_before,
                     load_after=load_after, goal=5.0 if method == "auto" else None)
    print("goal: loop / expected_sharpness(method='auto') >= 5x")


if __name__ == "__main__":
    main()
