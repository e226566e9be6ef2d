"""Benchmark: the NLC estimator against plain forward+backward passes and full Jacobians.

Setting of the measures issue: a depth-20, width-1000 ReLU MLP (nngauge.nn.mlp), inputs of
dimension 810, 10 outputs, batches of 250. Three timings in one run, on the same batches:

1. baseline: plain forward + backward passes (a training step's gradient: loss.backward()
   into the parameters);
2. nngauge.nlc (Gaussian probe per batch, section G);
3. full Jacobians with torch.func.jacrev, two ways: per sample (vmap over samples, valid only
   without batchnorm: d_out backward passes per batch) and of the whole batch (what the
   section G definition needs for batchnorm networks: b * d_out backward passes per batch).

All four are warmed by one untimed call, then timed interleaved, ``--repeats`` (>= 3) times;
prints the medians, the load average before and after the timed runs, and the ratios
nlc / baseline (target <= 1.3) and jacrev / nlc (target >= 10); with ``NNGAUGE_BENCH_ROWS`` set
(``make bench``) each is recorded as a row of benchmarks/RESULTS.md (benchmarks/_rows.py), as
a speed-up baseline / nlc. Per-sample jacrev costs about one forward plus d_out vectorized
backward passes against the NLC's one forward and one backward, so with d_out = 10 outputs its
ratio is bounded near d_out / 2; the whole-batch Jacobian is the one the NLC estimator replaces.

Run:  python benchmarks/bench_nlc.py [--batches 100] [--jacrev-batches 1] [--repeats 3]
      [--width 1000] [--depth 20] [--threads N]
The whole-batch Jacobian costs b x d_out = 2,500 backward passes of the batch (vmapped 25 at a
time) per batch timed: at the defaults, with its warm-up call, many minutes on 2 cores.
"""

from __future__ import annotations

import argparse

import torch

import _rows  # this folder's scripts share it (the script's directory is on sys.path)
from nngauge import nlc
from nngauge.nn import mlp


def inputs_only(model: torch.nn.Module, fn):
    """fn run with the parameters frozen: Jacobians with respect to the inputs only, as nlc."""
    def run():
        for param in model.parameters():
            param.requires_grad_(False)
        try:
            fn()
        finally:
            for param in model.parameters():
                param.requires_grad_(True)
    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=100)
    parser.add_argument("--width", type=int, default=1000)
    parser.add_argument("--depth", type=int, default=20)
    parser.add_argument("--jacrev-batches", type=int, default=1,
                        help="batches timed for jacrev (extrapolated to --batches)")
    parser.add_argument("--repeats", type=_rows.repeats, default=3)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    gen = torch.Generator().manual_seed(0)
    model = mlp(810, args.width, args.depth, 10, activation="relu", generator=gen)
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

    timed, (load_before, load_after) = _rows.interleaved(
        {"baseline": baseline, "nlc": measure,
         "per sample": inputs_only(model, per_sample_jacobians),
         "whole batch": inputs_only(model, batch_jacobians)}, args.repeats)
    scale = len(batches) / args.jacrev_batches
    t_base, t_nlc = timed["baseline"][0], timed["nlc"][0]
    t_sample, t_batch = timed["per sample"][0] * scale, timed["whole batch"][0] * scale
    print(f"{len(batches)} batches of 250, depth {args.depth}, width {args.width}, d_in 810, "
          f"threads {torch.get_num_threads()}, medians of {args.repeats} interleaved runs (warm), "
          f"load average {load_before:.2f} before, {load_after:.2f} after")
    print(f"forward+backward baseline: {t_base:8.2f} s")
    print(f"nngauge.nlc:               {t_nlc:8.2f} s   ratio to baseline {t_nlc / t_base:.2f} "
          "(target <= 1.3)")
    note = f"(timed on {args.jacrev_batches} batches, extrapolated)"
    print(f"jacrev per sample (vmap):  {t_sample:8.2f} s   {note}   nlc is "
          f"{t_sample / t_nlc:.1f}x faster (target >= 10; bound near d_out / 2 = 5)")
    print(f"jacrev whole batch:        {t_batch:8.2f} s   {note}   nlc is "
          f"{t_batch / t_nlc:.1f}x faster (target >= 10)")
    setting = (f"ReLU mlp depth {args.depth}, width {args.width}, d_in 810, 10 outputs, "
               f"{len(batches)} batches of 250")
    jacrev = f"timed on {args.jacrev_batches} of the batches, scaled"
    for baseline_name, baseline_s, goal in (
            ("forward + backward passes (a training step's gradient)", t_base, 1 / 1.3),
            (f"jacrev per sample (vmap; {jacrev})", t_sample, 10.0),
            (f"jacrev of the whole batch ({jacrev})", t_batch, 10.0)):
        _rows.record("NLC estimator (nngauge.nlc, one Gaussian probe per batch)", ours_s=t_nlc,
                     baseline=baseline_name, baseline_s=baseline_s, goal=goal, setting=setting,
                     load_before=load_before, load_after=load_after)


if __name__ == "__main__":
    main()
