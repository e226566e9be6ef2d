"""Per-layer Jacobian operator norms: exact forward mode and warm-started Lanczos against power
iteration, and their cost against depth.

``jacobian_norm`` computes each input -> layer Jacobian's operator norm either exactly (one
forward-mode pass over the m input basis directions serves every layer: cost ~ m forward
passes, whatever the depth) or by Lanczos on J^T J with a residual error bound, each layer
started from the previous layer's vector (a J v and a J^T w product through the layer's prefix
per step: cost ~ steps x depth^2 / 2 layer passes when every layer is measured); ``op_method=
"auto"`` picks by predicted cost. The baseline is the previous method, power iteration from a
random start stopping when the estimates change by at most ``tol``, reached only here (it
replaces the measure's estimate). All run warm, interleaved (A, B, C, A, B, C, ...), on one
thread; times are medians.

Rows, on ``nngauge.nn.mlp(64, 512, depth, 10)`` (width 512):

- ``section``: the report's Jacobian section as the report plans it (its samples, layers,
  iteration budget and tolerance; the figure and table included), depth 20: power iteration
  against the section as it runs (``op_method="auto"``);
- ``measure``: ``jacobian_norm`` at its defaults (tol 1e-6, 100 iterations) on 100 samples at
  every linear layer, depth 20: exact, Lanczos and power iteration;
- ``depth``: the same measure on ``--depth-samples`` samples at depths 5, 10, 20, 40: seconds
  per method and per measured layer (flat per layer: linear in depth; growing: quadratic).

    python benchmarks/bench_jacobian.py [--repeats 3] [--depths 5 10 20 40] [--depth-samples 25]
"""

from __future__ import annotations

import argparse
from contextlib import contextmanager

import torch

import _rows  # this folder's scripts share it (the script's directory is on sys.path)
import nngauge.measures.propagation._jacobian as measure_module
from nngauge._internal.jacobian import NormEstimate, _norms, _unit
from nngauge._internal.probing import gaussian_like
from nngauge.measures import jacobian_norm
from nngauge.nn import mlp
from nngauge.report._build import _context
from nngauge.report._context import ReportSettings
from nngauge.report._sections import _jacobian_section

POWER = "power iteration (previous method, random starts)"


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
    """Swap the measure's operator-norm estimate for :func:`power_iteration` (random starts)
    and its method choice for Lanczos (whose estimate that is)."""
    lanczos, choose = measure_module.operator_norm_estimate, measure_module.choose_op_method
    measure_module.operator_norm_estimate = power_iteration
    measure_module.choose_op_method = lambda *args, **kwargs: "lanczos"
    try:
        yield
    finally:
        measure_module.operator_norm_estimate = lanczos
        measure_module.choose_op_method = choose


def as_before(call):
    """``call`` run with :func:`previous_method` in place."""
    def run():
        with previous_method():
            return call()
    return run


def describe(label: str, result) -> str:
    error = max(row.error for row in result.layers)
    return (f"  {label:8s}: method {result.op_method}, steps (max over layers) "
            f"{result.iterations}, converged {result.converged} at tol {result.tol:g} "
            f"(error {error:.2g}), output norm {result.norm:.8g}")


def measure_calls(model, x, layers):
    def run(op_method):
        return lambda: jacobian_norm(model, x, layers=layers, op_method=op_method,
                                     generator=torch.Generator().manual_seed(0))
    return {"exact": run("exact"), "lanczos": run("lanczos"), "power": as_before(run("lanczos"))}


def linear_layers(model):
    return [name for name, m in model.named_modules() if isinstance(m, torch.nn.Linear)][:-1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=_rows.repeats, default=3)
    parser.add_argument("--depths", type=int, nargs="+", default=[5, 10, 20, 40])
    parser.add_argument("--depth-samples", type=int, default=25)
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

    medians, results, (before, after) = timed({"power": as_before(section), "section": section},
                                              args.repeats)
    print(f"section: power iteration {medians['power']:.3f} s, as run "
          f"({results['section'].op_method}) {medians['section']:.3f} s (medians of "
          f"{args.repeats}), ratio {medians['power'] / medians['section']:.2f}x, "
          f"load {before:.2f} -> {after:.2f}")
    for label, result in results.items():
        print(describe(label, result))
    _rows.record("report Jacobian section (op_method auto)", ours_s=medians["section"],
                 baseline=POWER, baseline_s=medians["power"], load_before=before,
                 load_after=after, setting=f"mlp(64, 512, 20, 10), {s.jacobian_samples} "
                 f"samples, {len(ctx.jacobian_layers)} layers, tol {s.jacobian_tol:g}")

    layers = linear_layers(model)
    medians, results, (before, after) = timed(measure_calls(model, x[:100], layers),
                                              args.repeats)
    print(f"measure (defaults, 100 samples, {len(layers) + 1} layers): "
          + ", ".join(f"{label} {t:.3f} s" for label, t in medians.items())
          + f" (medians of {args.repeats}); power/exact {medians['power'] / medians['exact']:.2f}x,"
          f" power/lanczos {medians['power'] / medians['lanczos']:.2f}x, "
          f"lanczos/exact {medians['lanczos'] / medians['exact']:.2f}x, "
          f"load {before:.2f} -> {after:.2f}")
    for label, result in results.items():
        print(describe(label, result))
    for label in ("exact", "lanczos"):
        _rows.record(f"jacobian_norm op norms, op_method={label!r}", ours_s=medians[label],
                     baseline=POWER, baseline_s=medians["power"], load_before=before,
                     load_after=after, setting="mlp(64, 512, 20, 10), 100 samples, every "
                     "linear layer (20 with the output), defaults (tol 1e-6, n_iter 100)")

    depth_table(args.depths, args.depth_samples, args.repeats)


def timed(runs: dict, repeats: int) -> tuple[dict, dict, tuple[float, float]]:
    """:func:`_rows.interleaved` split into medians, last results and loads."""
    out, loads = _rows.interleaved(runs, repeats)
    return ({label: t for label, (t, _) in out.items()},
            {label: r for label, (_, r) in out.items()}, loads)


def depth_table(depths: list[int], samples: int, repeats: int) -> None:
    """Seconds per method and per measured layer against depth (every linear layer measured):
    exact stays flat per layer, Lanczos and power iteration grow with depth."""
    setting = (f"mlp(64, 512, depth, 10), {samples} samples, every linear layer, defaults "
               f"(tol 1e-6, n_iter 100); medians of {repeats} interleaved warm runs, 1 thread")
    print(f"\ncost against depth: {setting}")
    columns = ["depth", "layers", "exact s", "lanczos s", "power s", "exact s/layer",
               "lanczos s/layer", "power s/layer", "lanczos steps", "power steps", "load"]
    print(" ".join(f"{c:>15}" for c in columns))
    rows, loads = [], []
    for depth in depths:
        net = mlp(64, 512, depth, 10, generator=torch.Generator().manual_seed(depth))
        data = torch.randn(samples, 64, generator=torch.Generator().manual_seed(1))
        layers = linear_layers(net)
        medians, results, (before, after) = timed(measure_calls(net, data, layers), repeats)
        loads += [before, after]
        n = len(layers) + 1
        row = [depth, n, *(round(medians[k], 3) for k in ("exact", "lanczos", "power")),
               *(round(medians[k] / n, 4) for k in ("exact", "lanczos", "power")),
               results["lanczos"].iterations, results["power"].iterations,
               f"{before:.2f} -> {after:.2f}"]
        rows.append(row)
        print(" ".join(f"{c:>15}" for c in row), flush=True)
        for label in ("exact", "lanczos"):
            _rows.record(f"jacobian_norm op norms, op_method={label!r}, depth {depth}",
                         ours_s=medians[label], baseline=POWER, baseline_s=medians["power"],
                         load_before=before, load_after=after,
                         setting=f"mlp(64, 512, {depth}, 10), {samples} samples, every linear "
                                 f"layer ({n}), defaults")
    _rows.record_table("jacobian_norm: cost against depth (exact, Lanczos, power iteration)",
                       columns, rows, setting=setting, load_before=loads[0],
                       load_after=loads[-1])


if __name__ == "__main__":
    main()
