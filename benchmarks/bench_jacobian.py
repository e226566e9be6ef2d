"""Per-layer Jacobian operator norms: warm-started Lanczos against power iteration.

``jacobian_norm`` estimates each input -> layer Jacobian's operator norm by Lanczos on J^T J
with a residual error bound, each layer started from the previous layer's vector. The
baseline is the previous method, power iteration from a random start stopping when the
estimates change by at most ``tol``, reached only here (it replaces the measure's estimate).
Both run warm, interleaved (A, B, A, B, ...), on one thread; the ratio is of medians.

Rows, on ``nngauge.nn.mlp(64, 512, 20, 10)`` (depth 20, width 512):

- ``section``: the report's Jacobian section as the report plans it (its samples, layers,
  iteration budget and tolerance; the figure and table included);
- ``measure``: ``jacobian_norm`` at its defaults (tol 1e-6, 100 iterations) on 100 samples at
  every linear layer: the setting of issue 22's measurement.

    python benchmarks/bench_jacobian.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from contextlib import contextmanager

import torch

import nngauge.measures.propagation._jacobian as measure_module
from nngauge._internal.jacobian import NormEstimate, _norms, _unit
from nngauge._internal.probing import gaussian_like
from nngauge.measures import jacobian_norm
from nngauge.nn import mlp
from nngauge.report._build import _context
from nngauge.report._context import ReportSettings
from nngauge.report._sections import _jacobian_section


def power_iteration(products, *, coupled, n_iter, tol, generator, start=None):
    """The previous method, kept here only: power iteration on J^T J from a random direction
    until every estimate changes by at most ``tol`` (relative) or ``n_iter`` iterations."""
    x = products.x
    v = _unit(gaussian_like(x, generator), coupled)
    sigma = torch.zeros(1 if coupled else len(x), dtype=torch.float64)
    for iteration in range(1, n_iter + 1):
        jv = products.jvp(v)
        new = _norms(jv, coupled).to(torch.float64).cpu()
        change = float(((new - sigma).abs() / new.clamp_min(1e-300)).max())
        sigma = new
        if change <= tol:
            break
        v = _unit(products.vjp(jv), coupled)
    return NormEstimate(sigma, iteration, change, change <= tol, v)


@contextmanager
def previous_method():
    """Swap the measure's Lanczos estimate for :func:`power_iteration` (random starts)."""
    lanczos = measure_module.operator_norm_estimate
    measure_module.operator_norm_estimate = power_iteration
    try:
        yield
    finally:
        measure_module.operator_norm_estimate = lanczos


def timed(call, cold: bool) -> tuple[float, object]:
    with previous_method() if cold else contextmanager(lambda: (yield))():
        start = time.perf_counter()
        result = call()
        return time.perf_counter() - start, result


def compare(name: str, call, repeats: int) -> None:
    call(), timed(call, True)  # warm-up of both
    times: dict[bool, list[float]] = {False: [], True: []}
    results = {}
    for _ in range(repeats):
        for cold in (True, False):
            seconds, results[cold] = timed(call, cold)
            times[cold].append(seconds)
    old, new = statistics.median(times[True]), statistics.median(times[False])
    print(f"{name}: power iteration {old:.3f} s, Lanczos {new:.3f} s (medians of {repeats}), "
          f"ratio old/new {old / new:.2f}x, load {os.getloadavg()[0]:.2f}")
    for cold in (True, False):
        r = results[cold]
        print(f"  {'power  ' if cold else 'lanczos'}: steps (max over layers) {r.iterations}, "
              f"converged {r.converged} at tol {r.tol:g} "
              f"(error {max(row.error for row in r.layers):.2g}), output norm {r.norm:.8g}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = mlp(64, 512, 20, 10)
    x = torch.randn(512, 64, generator=torch.Generator().manual_seed(0))
    ctx = _context(model, x, ReportSettings.make(), "bench", ["jacobian"])
    s = ctx.settings
    print(f"torch threads 1; report plan: {s.jacobian_samples} samples, "
          f"{len(ctx.jacobian_layers)} layers, at most {s.power_iterations} iterations, "
          f"tol {s.jacobian_tol:g}")

    def section():
        _jacobian_section(ctx)
        return ctx.results["jacobian"]

    linear = [name for name, m in model.named_modules() if isinstance(m, torch.nn.Linear)]
    compare("section", section, args.repeats)
    compare("measure", lambda: jacobian_norm(model, x[:100], layers=linear[:-1],
                                             generator=torch.Generator().manual_seed(0)),
            args.repeats)


if __name__ == "__main__":
    main()
