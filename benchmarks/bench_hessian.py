"""Benchmark: Hessian top eigenvalue and trace, nngauge's curvature engine vs a per-vector loop
of double-backward Hessian-vector products (and PyHessian when importable).

Setting of the curvature issue: a ReLU MLP 784-256-256-10 (269,322 parameters, float32) at
initialization, 1,000 random inputs with random labels, mean cross-entropy, one batch of 1,000.
With ``--trained``, the inputs are 10 Gaussian classes (a random centre each plus noise of
standard deviation 2) and the MLP is first trained on them (300 full-batch SGD steps, learning
rate 0.05, to 100% training accuracy): a trained network's Hessian, whose spectrum is dominated
by a few outliers, where Hutch++'s deflation pays.

1. baseline: the *same* estimators as nngauge (Lanczos with full reorthogonalization to
   relative residual ``--tol`` for the top eigenvalue; the trace with ``--probes`` products,
   Hutch++ or Hutchinson as ``trace_method="auto"`` chooses from the sketch, the same draws),
   each Hessian-vector product one ``torch.autograd.grad`` call on
   the retained graph of the gradient (built once with ``create_graph=True``, timed with the
   eigenvalue), one vector at a time: same number of vectors, same accuracy;
2. nngauge engine: the same estimators on ``CurvatureOperator`` (here the batch's graph is
   retained: ``vjp`` of ``torch.func.grad``, built at the first product; the vectors of one
   call vmapped in chunks);
3. ``nngauge.measures.curvature.hessian(top_k=1, trace=True)`` end to end (adds the explicit
   residual of the Ritz pair);
4. the common recipe on the same per-vector loop: power iteration for lambda_max (as PyHessian
   does) until its relative residual is as small as hessian()'s Ritz pair's, and plain
   Hutchinson until its standard error is as small as hessian()'s trace error (at most
   ``--max-products`` products each): equal accuracy, the algorithms people use;
5. PyHessian (Yao et al., "PyHessian: Neural Networks Through the Lens of the Hessian", IEEE
   BigData 2020), when importable: ``eigenvalues(top_n=1)`` (power iteration, relative change
   < 1e-3, at most 100 products) and ``trace()`` (Hutchinson, relative change < 1e-3, at most
   100 products). Other algorithms, so its products and accuracy differ; printed for scale.

All warm (one untimed run each first), interleaved, ``--repeats`` (>= 3) rounds, medians
printed with the load average before and after the timed rounds; ratio = baseline / nngauge.
With ``NNGAUGE_BENCH_ROWS`` set (``make bench``), each printed ratio is recorded as a row of
benchmarks/RESULTS.md (benchmarks/_rows.py).

    python benchmarks/bench_hessian.py [--repeats 3] [--probes 90] [--tol 1e-4] [--threads N]
    python benchmarks/bench_hessian.py --trained      # a trained network's Hessian
    PYTHONPATH=/tmp/peers_pyhessian python benchmarks/bench_hessian.py   # + PyHessian
"""

from __future__ import annotations

import argparse
import copy
import importlib.metadata
import importlib.util
import math
import statistics
import time

import torch
import torch.nn.functional as F

import _rows  # this folder's scripts share it (the script's directory is on sys.path)
from nngauge._internal.adapter import ModelAdapter
from nngauge._internal.curvature import (CurvatureOperator, estimate_trace, functional_model,
                                         lanczos)
from nngauge.measures.curvature import hessian
from nngauge.nn import mlp


class DoubleBackward:
    """v -> H v by ``torch.autograd.grad`` on the gradient's retained graph, vector by vector
    (the interface the estimators read: dim, dtype, device, apply)."""

    def __init__(self, model, x, y):
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.dim = sum(p.numel() for p in self.params)
        self.dtype, self.device = self.params[0].dtype, self.params[0].device
        self.grads = torch.autograd.grad(F.cross_entropy(model(x), y), self.params,
                                         create_graph=True)

    def apply(self, vectors: torch.Tensor) -> torch.Tensor:
        rows = []
        for v in vectors:
            parts = [part.view_as(p) for part, p in
                     zip(torch.split(v, [p.numel() for p in self.params]), self.params)]
            hv = torch.autograd.grad(self.grads, self.params, parts, retain_graph=True)
            rows.append(torch.cat([h.reshape(-1) for h in hv]))
        return torch.stack(rows)


def power_iteration(op, target: float, generator, max_products: int):
    """The common recipe for lambda_max (PyHessian's): v <- H v / ||H v|| until the relative
    residual ||H v - lambda v|| / |lambda| of the Rayleigh quotient lambda = v.H v is at most
    ``target``; returns (lambda, products, reached)."""
    v = torch.randn(op.dim, generator=generator, dtype=op.dtype)
    v /= v.norm()
    for products in range(1, max_products + 1):
        w = op.apply(v[None])[0]
        value = float(v @ w)
        if float((w - value * v).norm()) <= target * abs(value):
            return value, products, True
        v = w / w.norm()
    return value, max_products, False


def hutchinson(op, target: float, generator, max_products: int):
    """Plain Hutchinson (Rademacher z, the mean of z.H z), one probe per product, until its
    standard error is at most ``target``; returns (trace, products, reached)."""
    samples = []
    for products in range(1, max_products + 1):
        z = torch.randint(0, 2, (op.dim,), generator=generator).to(op.dtype) * 2 - 1
        samples.append(float(z @ op.apply(z[None])[0]))
        if products >= 10 and statistics.stdev(samples) / math.sqrt(products) <= target:
            return statistics.fmean(samples), products, True
    return statistics.fmean(samples), max_products, False


def engine(model, x, y) -> CurvatureOperator:
    adapter = ModelAdapter(model, norm_mode="eval")
    params = {n: p.detach() for n, p in model.named_parameters()}
    return CurvatureOperator(functional_model(model, adapter.select), F.cross_entropy, params,
                             [(x, y)])


def pyhessian_run(model, x, y):
    from pyhessian import hessian as PyHessian  # noqa: N812

    comp = PyHessian(copy.deepcopy(model), F.cross_entropy, data=(x, y), cuda=False)
    top, _ = comp.eigenvalues(top_n=1)
    traces = comp.trace()
    return top[0], sum(traces) / len(traces), len(traces)


def train(model, x, y, steps: int = 300, lr: float = 0.05) -> None:
    """Full-batch SGD on (x, y), then eval mode."""
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    model.train()
    for _ in range(steps):
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        optimizer.step()
    model.eval()
    with torch.no_grad():
        accuracy = float((model(x).argmax(1) == y).double().mean())
    print(f"trained {steps} SGD steps (lr {lr}): training accuracy {accuracy:.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=_rows.repeats, default=3)
    parser.add_argument("--samples", type=int, default=1000)
    parser.add_argument("--probes", type=int, default=90)
    parser.add_argument("--tol", type=float, default=1e-4)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--trained", action="store_true",
                        help="class-structured inputs and a trained MLP (see the docstring)")
    parser.add_argument("--max-products", type=int, default=2000,
                        help="cap of the power-iteration and Hutchinson baselines")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    gen = torch.Generator().manual_seed(0)
    model = mlp(784, 256, 3, 10, generator=gen).eval()
    x = torch.randn(args.samples, 784, generator=gen)
    y = torch.randint(0, 10, (args.samples,), generator=gen)
    if args.trained:
        x = torch.randn(10, 784, generator=gen)[y] + 2.0 * x
        train(model, x, y)
    n = sum(p.numel() for p in model.parameters())
    print(f"MLP 784-256-256-10 ({n:,} parameters, {'trained' if args.trained else 'at init'}), "
          f"{args.samples} samples, float32, "
          f"{torch.get_num_threads()} threads; Lanczos tol {args.tol}, trace {args.probes} "
          "products")
    peers = importlib.util.find_spec("pyhessian") is not None
    if not peers:
        print("PyHessian not importable (PYTHONPATH=/tmp/peers_pyhessian after "
              "`pip install --no-deps --target /tmp/peers_pyhessian pyhessian`): skipped")

    def seeded():
        return torch.Generator().manual_seed(1)

    def estimators(make_op):
        start = time.perf_counter()  # the operator's set-up (the baseline's graph) counts
        op = make_op(model, x, y)
        top = lanczos(op, 1, 90, args.tol, seeded())
        middle = time.perf_counter()
        trace = estimate_trace(op, args.probes, seeded())
        end = time.perf_counter()
        return (middle - start, end - middle), (float(top.values[0]), top.steps, trace.trace,
                                                trace.method)

    def end_to_end():
        start = time.perf_counter()
        r = hessian(model, (x, y), batch_size=args.samples, n_probes=args.probes,
                    tol=args.tol, generator=seeded())
        return time.perf_counter() - start, r

    def peer():
        start = time.perf_counter()
        values = pyhessian_run(model, x, y)
        return time.perf_counter() - start, values

    def common_recipe(full):
        """Power iteration and Hutchinson on the per-vector loop, each run until it is as
        accurate as hessian() (the Ritz pair's relative residual; the trace's standard error)."""
        r = full[1]
        start = time.perf_counter()
        op = DoubleBackward(model, x, y)
        top = power_iteration(op, r.residuals[0] / abs(r.eigenvalues[0]), seeded(),
                              args.max_products)
        middle = time.perf_counter()
        trace = hutchinson(op, r.trace_stderr, seeded(), args.max_products)
        return (middle - start, time.perf_counter() - middle), (top, trace)

    runs = {"baseline": [], "engine": [], "hessian": [], "pyhessian": [], "recipe": []}
    for round_ in range(args.repeats + 1):  # round 0 warms up, untimed
        if round_ == 1:
            load_before = _rows.load()
        base = estimators(DoubleBackward)
        ours = estimators(engine)
        full = end_to_end()
        recipe = common_recipe(full)
        other = peer() if peers else None
        if round_:
            runs["baseline"].append(base)
            runs["engine"].append(ours)
            runs["hessian"].append(full)
            runs["recipe"].append(recipe)
            runs["pyhessian"].append(other)
    load_after = _rows.load()
    print(f"load average {load_before:.2f} before the timed rounds, {load_after:.2f} after, "
          f"{args.repeats} timed rounds, medians:")
    setting = (f"MLP 784-256-256-10 ({n:,} parameters, "
               f"{'trained' if args.trained else 'at init'}), {args.samples} samples, float32, "
               "cross-entropy")
    loop = "per-vector double-backward loop (torch.autograd.grad)"

    def record(measure, ours_s, baseline, baseline_s, detail=""):
        _rows.record(measure, ours_s=ours_s, baseline=baseline, baseline_s=baseline_s,
                     setting=setting + detail, load_before=load_before, load_after=load_after)

    def median(key, index):
        return statistics.median(r[0][index] for r in runs[key])

    (value, steps, trace_b, method) = runs["baseline"][-1][1]
    (value_e, steps_e, trace_e, method_e) = runs["engine"][-1][1]
    for label, index in (("top eigenvalue (Lanczos)", 0), (f"trace ({method_e})", 1)):
        b, e = median("baseline", index), median("engine", index)
        print(f"{label:26s} baseline {b:7.2f} s   nngauge engine {e:7.2f} s   "
              f"baseline / nngauge {b / e:5.2f}x")
        record(f"Hessian {label}, curvature engine", e, f"the same estimator on a {loop}", b,
               f"; Lanczos tol {args.tol}" if index == 0 else f"; {args.probes} products")
    print(f"  values: lambda_max baseline {value:.6f} ({steps} steps), nngauge {value_e:.6f} "
          f"({steps_e} steps); trace baseline {trace_b:.4f} ({method}), nngauge {trace_e:.4f}")
    total_b = statistics.median(sum(r[0]) for r in runs["baseline"])
    t_full = statistics.median(r[0] for r in runs["hessian"])
    r = runs["hessian"][-1][1]
    print(f"hessian() end to end      {t_full:7.2f} s   (baseline estimators {total_b:.2f} s, "
          f"ratio {total_b / t_full:.2f}x): lambda_max {r.eigenvalues[0]:.6f}, residual "
          f"{r.residuals[0]:.2e}, trace {r.trace:.4f} +- {r.trace_stderr:.4f} ({r.trace_method}), "
          f"{r.n_products} products")
    record("hessian(top_k=1, trace=True) end to end", t_full,
           f"the same estimators on a {loop}", total_b,
           f"; Lanczos tol {args.tol}, trace {args.probes} products")
    (top, trace) = runs["recipe"][-1][1]
    recipe_top, recipe_trace = median("recipe", 0), median("recipe", 1)
    recipe_total = statistics.median(sum(r[0]) for r in runs["recipe"])
    print(f"power iteration + Hutchinson (per-vector loop) to hessian()'s accuracy: "
          f"lambda_max {recipe_top:.2f} s ({top[1]} products{'' if top[2] else ', NOT reached'}"
          f"), trace {recipe_trace:.2f} s ({trace[1]} products"
          f"{'' if trace[2] else ', NOT reached: the ratio is a lower bound'}); "
          f"recipe / hessian() {recipe_total / t_full:.2f}x "
          f"(values {top[0]:.6f}, {trace[0]:.4f})")
    reached = top[2] and trace[2]
    record("hessian(top_k=1, trace=True) end to end", t_full,
           f"power iteration + Hutchinson on a {loop}, to hessian()'s accuracy"
           + ("" if reached else f" (NOT reached in {args.max_products} products: a lower "
              "bound)"), recipe_total)
    if peers:
        t_peer = statistics.median(p[0] for p in runs["pyhessian"])
        top, tr, count = runs["pyhessian"][-1][1]
        print(f"PyHessian                 {t_peer:7.2f} s   (PyHessian / hessian() "
              f"{t_peer / t_full:.2f}x): lambda_max {top:.6f} (power iteration), trace "
              f"{tr:.4f} (Hutchinson, {count} products)")
        record("hessian(top_k=1, trace=True) end to end", t_full,
               f"PyHessian {importlib.metadata.version('PyHessian')} eigenvalues(top_n=1) + "
               "trace() (power iteration and Hutchinson to "
               "relative change 1e-3: other algorithms and accuracy)", t_peer)


if __name__ == "__main__":
    main()
