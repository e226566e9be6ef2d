"""Benchmark: infinite-width NNGP and NTK of 1,000 Gaussian inputs (d = 50) through 20 erf layers.

Baselines measured in the same run:
- naive: a Python loop over kernel entries, each a per-entry 2-D Gauss-Hermite quadrature of
  E[erf(u) erf(v)] (and E[erf'(u) erf'(v)] for the NTK). Timed on a random subset of entries
  of one layer and extrapolated to all n (n + 1) / 2 entries of all layers (said in the output).
- neural-tangents (when importable, e.g. run with the python of a separate virtualenv that has
  it): ``stax.serial(Dense, *[Erf, Dense] * 20)`` kernel_fn, float64, first call (compiles)
  and second call.

Run:  python benchmarks/bench_kernels.py [--n 1000] [--depth 20]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))  # run from a checkout

from nngauge.theory._kernels import nngp, ntk  # noqa: E402

SIGMA_W, SIGMA_B = 1.5, 0.1
NAIVE_SAMPLE = 200  # entries timed for the naive baseline
HERMITE_NODES = 20  # per dimension, for the naive baseline


def naive_layer_entry(act, q1, q2, c, z, w):
    """E[act(u) act(v)] for one entry by a tensor Gauss-Hermite rule (a plain per-entry loop)."""
    l11 = np.sqrt(q1)
    l21 = c / l11
    l22 = np.sqrt(max(q2 - l21 * l21, 0.0))
    total = 0.0
    for zi, wi in zip(z, w):
        u = l11 * zi
        total += wi * act(u) * np.sum(w * act(l21 * zi + l22 * z))
    return total


def time_naive(K, kinds, rng):
    """Seconds per entry of one layer for the naive loop (value and, for NTK, derivative)."""
    from scipy.special import erf

    acts = {"nngp": lambda x: erf(x),
            "ntk": lambda x: 2.0 / np.sqrt(np.pi) * np.exp(-x * x)}
    z, w = np.polynomial.hermite_e.hermegauss(HERMITE_NODES)
    w = w / w.sum()
    n = K.shape[0]
    pairs = rng.integers(0, n, size=(NAIVE_SAMPLE, 2))
    start = time.perf_counter()
    for i, j in pairs:
        for kind in kinds:
            naive_layer_entry(acts[kind], K[i, i], K[j, j], K[i, j], z, w)
    return (time.perf_counter() - start) / NAIVE_SAMPLE


def time_neural_tangents(X, depth):
    try:
        import jax
        from neural_tangents import stax
    except ImportError:
        return None
    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp

    dense = lambda: stax.Dense(512, W_std=SIGMA_W, b_std=SIGMA_B)  # noqa: E731
    _, _, kernel_fn = stax.serial(dense(), *[stax.Erf(), dense()] * depth)
    kernel_fn = jax.jit(kernel_fn, static_argnames="get")
    x = jnp.asarray(X)
    times = []
    for _ in range(2):
        start = time.perf_counter()
        k = kernel_fn(x, None, get=("nngp", "ntk"))
        k.ntk.block_until_ready()
        times.append(time.perf_counter() - start)
    return times, np.asarray(k.nngp), np.asarray(k.ntk)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--d", type=int, default=50)
    parser.add_argument("--depth", type=int, default=20)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    X = rng.normal(size=(args.n, args.d))
    entries = args.n * (args.n + 1) // 2
    print(f"inputs: {args.n} x {args.d} Gaussian; {args.depth} erf layers; "
          f"sigma_w={SIGMA_W}, sigma_b={SIGMA_B}; {entries} kernel entries per layer")

    start = time.perf_counter()
    K = nngp(X, "erf", args.depth, sigma_w=SIGMA_W, sigma_b=SIGMA_B)
    t_nngp = time.perf_counter() - start
    start = time.perf_counter()
    T = ntk(X, "erf", args.depth, sigma_w=SIGMA_W, sigma_b=SIGMA_B)
    t_ntk = time.perf_counter() - start
    print(f"nngauge nngp: {t_nngp:8.2f} s   (kappa at depth {args.depth}: "
          f"{K.condition_numbers()[-1]:.3g})")
    print(f"nngauge ntk:  {t_ntk:8.2f} s   (kappa at depth {args.depth}: "
          f"{T.condition_numbers()[-1]:.3g})")

    layer = K.kernels[args.depth // 2]
    per_nngp = time_naive(layer, ("nngp",), rng)
    per_ntk = time_naive(layer, ("nngp", "ntk"), rng)
    naive_nngp = per_nngp * entries * args.depth
    naive_ntk = per_ntk * entries * args.depth
    print(f"naive per-entry loop ({HERMITE_NODES}x{HERMITE_NODES} Gauss-Hermite), EXTRAPOLATED "
          f"from {NAIVE_SAMPLE} random entries of one layer to {entries} entries x "
          f"{args.depth} layers:")
    print(f"  nngp: {naive_nngp:10.1f} s   -> nngauge is {naive_nngp / t_nngp:8.0f}x faster")
    print(f"  ntk:  {naive_ntk:10.1f} s   -> nngauge is {naive_ntk / t_ntk:8.0f}x faster")

    nt = time_neural_tangents(X, args.depth)
    if nt is None:
        print("neural-tangents: not importable here (run with a python that has it to compare)")
        return
    (t_first, t_second), nt_nngp, nt_ntk = nt
    diff = max(np.abs(nt_nngp - K.kernels[-1]).max() / np.abs(K.kernels[-1]).max(),
               np.abs(nt_ntk - T.kernels[-1]).max() / np.abs(T.kernels[-1]).max())
    ours = t_nngp + t_ntk
    print(f"neural-tangents nngp+ntk (one call computes both, float64, CPU): first call "
          f"{t_first:.2f} s (with jit compile), second {t_second:.2f} s")
    print(f"  ratio nngauge (nngp + ntk, {ours:.2f} s) / neural-tangents second call: "
          f"{ours / t_second:.2f}; max relative difference of the kernels: {diff:.1e}")


if __name__ == "__main__":
    main()
