"""Benchmark: batched expected sharpness (vmap over functional_call) vs a loop over copies.

Setting of the generalization issue: expected sharpness with 1,000 Gaussian perturbations
(appendix A noise, sigma_i = alpha (10 |w_i| + 1)), each scored on its own mini-batch of 64,
on a ReLU MLP of about 1M parameters (nngauge.nn.mlp(1000, 1000, 2, 10): 1,011,010).

1. baseline: a Python loop over perturbations, each a deep copy of the model whose parameters
   get the noise added in place, then one forward pass on its mini-batch;
2. nngauge.expected_sharpness: chunks of perturbations evaluated by one vmapped
   functional_call each (no copies of the module).

Both draw the same amount of Gaussian noise (one value per parameter per perturbation), which
is a fixed cost shared by the two. Prints both wall times, the ratio loop / batched (target
>= 5x) and both estimates (they agree within a few standard errors: different noise draws).

    python benchmarks/bench_sharpness.py [--n-samples 1000] [--chunk-size 50] [--threads N]
"""

from __future__ import annotations

import argparse
import copy
import time

import torch
import torch.nn.functional as F

from nngauge.measures._sharpness import expected_sharpness
from nngauge.nn import mlp


def loop_over_copies(model, x, y, alpha, n_samples, batch_size, generator) -> float:
    """Mean of L_B(w + nu) - L_B(w) by copying and perturbing the model once per sample."""
    model.eval()
    total = 0.0
    with torch.no_grad():
        for _ in range(n_samples):
            idx = torch.randperm(len(y), generator=generator)[:batch_size]
            perturbed = copy.deepcopy(model)
            for p in perturbed.parameters():
                std = alpha * (10 * p.abs() + 1)
                p.add_(std * torch.randn(p.shape, generator=generator))
            total += (F.cross_entropy(perturbed(x[idx]), y[idx])
                      - F.cross_entropy(model(x[idx]), y[idx])).item()
    return total / n_samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n-samples", type=int, default=1000)
    parser.add_argument("--chunk-size", type=int, default=50)
    parser.add_argument("--width", type=int, default=1000)
    parser.add_argument("--alpha", type=float, default=1e-3)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    gen = torch.Generator().manual_seed(0)
    model = mlp(1000, args.width, 2, 10, generator=gen)
    n_params = sum(p.numel() for p in model.parameters())
    x = torch.randn(2000, 1000, generator=gen)
    y = torch.randint(0, 10, (2000,), generator=gen)
    print(f"MLP 1000-{args.width}-10 ({n_params:,} parameters), {args.n_samples} perturbations "
          f"x mini-batch 64, {torch.get_num_threads()} threads")

    start = time.perf_counter()
    batched = expected_sharpness(model, F.cross_entropy, (x, y), alpha=args.alpha,
                                 n_samples=args.n_samples, batch_size=64,
                                 chunk_size=args.chunk_size,
                                 generator=torch.Generator().manual_seed(1))
    t_batched = time.perf_counter() - start

    start = time.perf_counter()
    looped = loop_over_copies(model, x, y, args.alpha, args.n_samples, 64,
                              torch.Generator().manual_seed(2))
    t_loop = time.perf_counter() - start

    print(f"loop over copies      : {t_loop:8.2f} s   expected sharpness {looped:.5f}")
    print(f"nngauge (vmap, chunks): {t_batched:8.2f} s   expected sharpness "
          f"{batched.expected_sharpness:.5f} +- {batched.stderr:.5f}")
    print(f"ratio loop / batched  : {t_loop / t_batched:8.2f}x  (target >= 5x)")


if __name__ == "__main__":
    main()
