"""Benchmark: the NLC estimator against plain forward+backward passes and full Jacobians.

Setting of the measures issue: a depth-20, width-1000 ReLU MLP (nngauge.nn.mlp), inputs of
dimension 810, 10 outputs, batches of 250. Three timings in one run, on the same batches:

1. baseline: plain forward + backward passes (a training step's gradient: loss.backward()
   into the parameters);
2. nngauge.nlc (Gaussian probe per batch, section G);
3. full Jacobians with torch.func.jacrev, two ways: per sample (vmap over samples, valid only
   without batchnorm: d_out backward passes per batch) and of the whole batch (what the
   section G definition needs for batchnorm networks: b * d_out backward passes per batch).

Prints wall times and the ratios nlc / baseline (target <= 1.3) and jacrev / nlc (target
>= 10). Per-sample jacrev costs about one forward plus d_out vectorized backward passes against
the NLC's one forward and one backward, so with d_out = 10 outputs its ratio is bounded near
d_out / 2; the whole-batch Jacobian is the one the NLC estimator replaces. Run:  python benchmarks/bench_nlc.py [--batches 100] [--threads N]
"""

from __future__ import annotations

import argparse
import time

import torch

from nngauge import nlc
from nngauge.nn import mlp


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=100)
    parser.add_argument("--jacrev-batches", type=int, default=2,
                        help="batches timed for jacrev (extrapolated to --batches)")
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    gen = torch.Generator().manual_seed(0)
    model = mlp(810, 1000, 20, 10, activation="relu", generator=gen)
    data = torch.randn(args.batches * 250, 810, generator=gen)
    batches = data.split(250)

    def baseline():
        for x in batches:
            model.zero_grad(set_to_none=True)
            model(x).pow(2).sum().backward()
        model.zero_grad(set_to_none=True)

    def measure():
        nlc(model, data, batch_size=250, generator=torch.Generator().manual_seed(1))

    def per_sample_jacobians():
        per_sample = torch.func.vmap(torch.func.jacrev(lambda v: model(v[None])[0]))
        for x in batches[: args.jacrev_batches]:
            per_sample(x).pow(2).sum()

    def batch_jacobians():
        whole = torch.func.jacrev(model, chunk_size=25)
        for x in batches[: args.jacrev_batches]:
            whole(x).pow(2).sum()

    timed(lambda: model(batches[0]))  # warm-up
    t_base = timed(baseline)
    t_nlc = timed(measure)
    scale = len(batches) / args.jacrev_batches
    for param in model.parameters():  # Jacobians with respect to the inputs only, as nlc
        param.requires_grad_(False)
    t_sample = timed(per_sample_jacobians) * scale
    t_batch = timed(batch_jacobians) * scale
    print(f"{len(batches)} batches of 250, depth 20, width 1000, d_in 810, threads "
          f"{torch.get_num_threads()}")
    print(f"forward+backward baseline: {t_base:8.2f} s")
    print(f"nngauge.nlc:               {t_nlc:8.2f} s   ratio to baseline {t_nlc / t_base:.2f} "
          "(target <= 1.3)")
    note = f"(timed on {args.jacrev_batches} batches, extrapolated)"
    print(f"jacrev per sample (vmap):  {t_sample:8.2f} s   {note}   nlc is "
          f"{t_sample / t_nlc:.1f}x faster (target >= 10; bound near d_out / 2 = 5)")
    print(f"jacrev whole batch:        {t_batch:8.2f} s   {note}   nlc is "
          f"{t_batch / t_nlc:.1f}x faster (target >= 10)")


if __name__ == "__main__":
    main()
