"""Benchmark: the PAC-Bayes bi-criteria curve against a Python loop perturbing in place.

Setting of the generalization issue (appendix A noise sigma_i = alpha (10 |w_i| + 1), 1,000
perturbations per alpha, each on its own mini-batch of 64) on nngauge.nn.mlp(1000, 1000, 2, 10)
(1,011,010 parameters), 2,000 Gaussian points, alphas 1e-3, 3e-3, 1e-2:

- baseline: what a user writes: the training loss on all points, then per alpha the KL
  sum_i w_i^2 / (2 sigma_i^2), the expected sharpness by the in-place loop of
  ``bench_sharpness.in_place_loop`` (no_grad, noise added in place, weights restored by
  ``copy_``), and the bound L(w) + expected sharpness + sqrt((KL + ln(2m / delta)) / m);
- nngauge: ``pac_bayes(model, (x, y), loss=F.cross_entropy, alphas=...)`` at its defaults
  (``method="auto"``: the local reparameterization for this model).

Both warm (one untimed call each), interleaved A, B, A, B, medians of ``--repeats``, load
printed before and after; both curves are printed (expected sharpness with standard errors:
different draws), with the ratio loop / nngauge (issue goal >= 5x).

    python benchmarks/bench_pac_bayes.py [--n-samples 1000] [--repeats 3] [--threads 1]
"""

from __future__ import annotations

import argparse
import math

import torch
import torch.nn.functional as F

import _rows
from bench_sharpness import in_place_loop, interleaved
from nngauge import pac_bayes
from nngauge.nn import mlp


@torch.no_grad()
def in_place_curve(model, x, y, alphas, n_samples, batch_size, delta, generator) -> list:
    """(alpha, KL, expected sharpness, its stderr, bound) per alpha, as a user computes them."""
    model.eval()
    m = len(y)
    train_loss = float(F.cross_entropy(model(x), y))
    curve = []
    for alpha in alphas:
        kl = float(sum(((w / (alpha * (10 * w.abs() + 1))) ** 2).sum() / 2
                       for w in model.parameters()))
        sharp, stderr = in_place_loop(model, x, y, alpha, n_samples, batch_size, generator)
        bound = train_loss + sharp + math.sqrt((kl + math.log(2 * m / delta)) / m)
        curve.append((alpha, kl, sharp, stderr, bound))
    return curve


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n-samples", type=int, default=1000)
    parser.add_argument("--alphas", type=float, nargs="+", default=[1e-3, 3e-3, 1e-2])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    gen = torch.Generator().manual_seed(0)
    model = mlp(1000, 1000, 2, 10, generator=gen)
    n_params = sum(p.numel() for p in model.parameters())
    x = torch.randn(2000, 1000, generator=gen)
    y = torch.randint(0, 10, (2000,), generator=gen)
    alphas = ", ".join(f"{a:g}" for a in args.alphas)
    setting = (f"mlp(1000, 1000, 2, 10) ({n_params:,} parameters), alphas {alphas}, "
               f"{args.n_samples} perturbations x mini-batch 64 per alpha")
    print(f"{setting}, {torch.get_num_threads()} threads")

    seeds = iter(range(1, 10**6))
    sides = {
        "loop": lambda: in_place_curve(model, x, y, args.alphas, args.n_samples, 64, 0.05,
                                       torch.Generator().manual_seed(next(seeds))),
        "nngauge": lambda: pac_bayes(model, (x, y), loss=F.cross_entropy, alphas=args.alphas,
                                     n_probes=args.n_samples, batch_size=64,
                                     generator=torch.Generator().manual_seed(next(seeds))),
    }
    load_before = _rows.load()
    timed = interleaved(sides, args.repeats)
    load_after = _rows.load()
    (t_loop, curve), (t_ours, ours) = timed["loop"], timed["nngauge"]
    print(f"load average {load_before:.2f} before, {load_after:.2f} after; "
          f"medians of {args.repeats}")
    print(f"in-place loop: {t_loop:8.3f} s   pac_bayes [{ours.method}]: {t_ours:8.3f} s   "
          f"loop / pac_bayes {t_loop / t_ours:6.2f}x   (goal >= 5x)")
    print(f"{'alpha':>7} {'KL loop':>12} {'KL ours':>12} {'sharpness loop':>22} "
          f"{'sharpness ours':>22} {'gap/se':>6} {'bound loop':>10} {'bound ours':>10}")
    for (alpha, kl, sharp, stderr, bound), p in zip(curve, ours.points):
        gap = abs(p.expected_sharpness - sharp) / math.hypot(p.stderr, stderr)
        print(f"{alpha:7.0e} {kl:12.1f} {p.kl:12.1f} {sharp:12.6f} +- {stderr:.6f} "
              f"{p.expected_sharpness:12.6f} +- {p.stderr:.6f} {gap:6.1f} {bound:10.4f} "
              f"{p.bound:10.4f}")
    _rows.record("PAC-Bayes curve (pac_bayes, method 'auto': " + ours.method + ")",
                 ours_s=t_ours, baseline="Python loop perturbing the parameters in place "
                 "(no_grad, warm)", baseline_s=t_loop, setting=setting,
                 load_before=load_before, load_after=load_after, goal=5.0)


if __name__ == "__main__":
    main()
