"""Benchmark: infinite-width NNGP + NTK of 1,000 Gaussian inputs (d = 50) through 20 layers.

nngauge: ``ntk(X, act, depth, with_nngp=True, layers=...)``, ONE call that returns both kernels
(float64) in four variants: ``layers="last"`` (the deepest NNGP and NTK only, computed in place:
like for like with the peer, which returns the last layer only) and ``layers="all"`` (all
depth + 1 layers of each), each with its default threads (the erf / relu passes share blocks of
rows among the CPUs) and with one thread. Peer: neural-tangents' jitted
``stax.serial(Dense, *[act, Dense] * depth)`` kernel_fn with ``get=("nngp", "ntk")`` (float64,
CPU), run in its own Python environment: neural-tangents is not a dependency of nngauge. Pass
that environment's python with ``--peer-python`` (or the NNGAUGE_PEER_PYTHON variable); this
file then also serves as the peer's worker process.

Fairness: both sides are warm (one untimed call each first, which includes the peer's jit
compilation); timings are interleaved A, B, A, B, ... in one run: the peer worker stays alive
and times one call per request inside its own process (the call plus block_until_ready), so
neither side pays process start-up or pipes; each round times the four nngauge variants, then
the peer. The ratio is median(nngauge) / median(peer) (the issue's goal: <= 0.5 for the
last-layer call), with the machine's load average printed beside it; the deepest kernels of
every variant are compared with the peer's. With ``NNGAUGE_BENCH_ROWS`` set (``run_all.py``),
each variant is also recorded as a speed-up row (``benchmarks/_rows.py``; goal 2.0 for the
last-layer rows, none for the all-layer ones). For a one-core comparison of both sides, run it
under ``taskset -c 0`` (both sides on one core; nngauge then uses one thread).

The empirical NTK per layer (``--parts empirical``): ``kernel_conditioning(kind="ntk")`` on
the conformance zoo's ResNet (``resnet_small``, eval mode, 3 x 32 x 32) at 12 samples, every
default layer (13 convolutions and Linear layers, then the output), against the path it
replaced, run in the same process: per layer and probe, per-sample gradients of every
parameter by ``vmap`` over samples of ``grad`` (``old_gram`` below); both warm, interleaved,
medians of ``--repeats``, the load beside them, and the largest relative difference of their
kernels (the same probes). Issue 34's goal: <= 10 s on 2 cores.

Run:  python benchmarks/bench_kernels.py --peer-python /path/to/nt-venv/bin/python
      [--n 1000] [--d 50] [--depth 20] [--repeats 5] [--acts erf relu]
      [--parts theory empirical]
Peer environment:  python3 -m venv nt-venv && nt-venv/bin/pip install "jax==0.4.30" \\
      "jaxlib==0.4.30" neural-tangents numpy scipy
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import _rows

SIGMA_W, SIGMA_B = 1.5, 0.1
PEER_ACTS = {"erf": "Erf", "relu": "Relu"}  # nngauge name -> stax layer


def peer_worker(x_path: str, act: str, depth: int, out_dir: str) -> None:
    """The peer's side (run under the peer's python): compile, save the kernels, then time one
    warm call per 'time' line read from stdin, answering with the seconds."""
    import jax

    jax.config.update("jax_enable_x64", True)
    import neural_tangents
    from neural_tangents import stax

    def dense():
        return stax.Dense(512, W_std=SIGMA_W, b_std=SIGMA_B)

    layer = getattr(stax, PEER_ACTS[act])
    _, _, kernel_fn = stax.serial(dense(), *[layer(), dense()] * depth)
    kernel_fn = jax.jit(kernel_fn, static_argnames="get")
    x = jax.numpy.asarray(np.load(x_path))

    def call():
        k = kernel_fn(x, None, get=("nngp", "ntk"))
        k.ntk.block_until_ready()
        return k

    k = call()  # untimed: compiles
    np.save(Path(out_dir) / "nngp.npy", np.asarray(k.nngp))
    np.save(Path(out_dir) / "ntk.npy", np.asarray(k.ntk))
    print(f"ready neural-tangents {neural_tangents.__version__}, jax {jax.__version__}",
          flush=True)
    for line in sys.stdin:
        if line.strip() != "time":
            break
        start = time.perf_counter()
        call()
        print(time.perf_counter() - start, flush=True)


class Peer:
    """The peer worker process for one activation."""

    def __init__(self, python: str, x_path: str, act: str, depth: int, out_dir: str):
        self.out_dir = Path(out_dir)
        self.proc = subprocess.Popen(
            [python, __file__, "--peer-worker", x_path, act, str(depth), out_dir],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self.version = self._read().removeprefix("ready ")

    def _read(self) -> str:
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("the peer worker exited (is neural-tangents installed there?)")
        return line.strip()

    def time_call(self) -> float:
        self.proc.stdin.write("time\n")
        self.proc.stdin.flush()
        return float(self._read())

    def kernels(self) -> tuple[np.ndarray, np.ndarray]:
        return np.load(self.out_dir / "nngp.npy"), np.load(self.out_dir / "ntk.npy")

    def close(self) -> None:
        self.proc.stdin.write("stop\n")
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


VARIANTS = {  # label -> (layers, threads: None for the library's default)
    "last layer, default threads": ("last", None), "last layer, 1 thread": ("last", 1),
    "all layers, default threads": ("all", None), "all layers, 1 thread": ("all", 1)}


def time_nngauge(X, act, depth, layers, threads):
    """Seconds of one ``ntk(..., with_nngp=True, layers=layers)`` call with at most ``threads``
    threads (None: the library's default), the threads it used, and its result."""
    from nngauge.theory import _kernel_maps, ntk

    default = _kernel_maps.MAX_THREADS
    _kernel_maps.MAX_THREADS = default if threads is None else threads
    try:
        used = _kernel_maps._threads(X.shape[0])
        start = time.perf_counter()
        trace = ntk(X, act, depth, sigma_w=SIGMA_W, sigma_b=SIGMA_B, with_nngp=True,
                    max_seconds=None, layers=layers)
        return time.perf_counter() - start, used, trace
    finally:
        _kernel_maps.MAX_THREADS = default


def rel_diff(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(a - b).max() / np.abs(b).max())


def load() -> str:
    return "/".join(f"{v:.2f}" for v in os.getloadavg())


def bench(act: str, X: np.ndarray, depth: int, repeats: int, peer_python, tmp: str) -> None:
    """Print nngauge's times and, with a peer, the interleaved ratio rows for ``act``."""
    x_path = str(Path(tmp) / "x.npy")
    np.save(x_path, X)
    peer = None
    if peer_python:
        peer = Peer(peer_python, x_path, act, depth, tmp)
    traces, threads = {}, {}
    for label, (layers, limit) in VARIANTS.items():  # untimed warm-up calls
        _, threads[label], traces[label] = time_nngauge(X, act, depth, layers, limit)
    ours = {label: [] for label in VARIANTS}
    theirs, loads, load_before = [], [load()], _rows.load()
    for _ in range(repeats):
        for label, (layers, limit) in VARIANTS.items():
            ours[label].append(time_nngauge(X, act, depth, layers, limit)[0])
        if peer is not None:
            theirs.append(peer.time_call())
    loads.append(load())
    load_after = _rows.load()
    medians = {label: float(np.median(times)) for label, times in ours.items()}
    for label, times in ours.items():
        kept = "the last layer" if VARIANTS[label][0] == "last" else f"{depth + 1} layers"
        print(f"{act}: nngauge ntk(with_nngp=True), {label} (threads used: {threads[label]}), "
              f"one call, {kept} of both kernels: median {medians[label]:.3f} s of "
              f"{[round(t, 3) for t in times]} ({medians[label] / depth * 1e3:.1f} ms per layer)")
    if peer is None:
        print(f"{act}: no peer row (pass --peer-python: see the module docstring); "
              f"load {loads[0]} -> {loads[1]}")
        return
    b = float(np.median(theirs))
    nt_nngp, nt_ntk = peer.kernels()
    peer.close()
    print(f"{act}: {peer.version} jitted kernel_fn (warm), last layer: "
          f"median {b:.3f} s of {[round(t, 3) for t in theirs]}")
    setting = f"{X.shape[0]:,} x {X.shape[1]} inputs, {depth} layers, float64"
    for label, a in medians.items():
        trace = traces[label]
        diff = max(rel_diff(trace.nngp.kernels[-1], nt_nngp), rel_diff(trace.kernels[-1], nt_ntk))
        last = VARIANTS[label][0] == "last"
        print(f"RATIO {act} NNGP+NTK n={X.shape[0]} d={X.shape[1]} depth={depth} float64, "
              f"nngauge {label}: nngauge / neural-tangents = {a / b:.2f}"
              f"{' (goal <= 0.50)' if last else ''}  (medians of {repeats}, interleaved; load "
              f"average {loads[0]} -> {loads[1]}; max relative difference of the last kernels "
              f"{diff:.1e})")
        kept = label if last else label.replace("all layers", f"all {depth + 1} layers")
        _rows.record(f"NNGP+NTK, {act}, {kept}", ours_s=a,
                     baseline=f"{peer.version} (jitted, warm, last layer)", baseline_s=b,
                     setting=setting, load_before=load_before, load_after=load_after,
                     goal=2.0 if last else None, threads=threads[label])


def old_gram(call, params, x, raw, probes):
    """The replaced path: sum over probes u of G(u) G(u)^T, G(u) by vmap over samples of grad
    of <u, h(x_i)> with respect to every parameter, one probe at a time."""
    import torch
    from torch.func import functional_call, grad, vmap

    theta = torch.zeros(len(x), len(x), dtype=torch.float64)
    for u in probes:
        def projected(p, xi, ri, u=u):
            return (functional_call(call, p, (xi.unsqueeze(0), ri.unsqueeze(0))).reshape(-1)
                    * u).sum()

        grads = vmap(grad(projected), in_dims=(None, 0, 0))(params, x, raw)
        g = torch.cat([v.reshape(len(x), -1) for v in grads.values()], dim=1)
        theta += (g @ g.T).to(torch.float64)
    return theta


def bench_empirical(repeats: int, n_samples: int = 12) -> None:
    """kernel_conditioning(kind="ntk") on the zoo's ResNet, now and by the replaced path."""
    import torch

    from nngauge import kernel_conditioning
    from nngauge._internal import ntk
    from nngauge.zoo import ZOO, sample_inputs

    entry = ZOO["resnet_small"]
    model = entry.build(generator=0).eval()
    x = sample_inputs(entry, n_samples, generator=0)
    new_gram = ntk._vmapped_gram

    def run(gram):
        def call():
            ntk._vmapped_gram = gram
            try:
                return kernel_conditioning(model, x, kind="ntk", max_samples=n_samples,
                                           generator=0)
            finally:
                ntk._vmapped_gram = new_gram
        return call

    timed, (before, after) = _rows.interleaved({"new": run(new_gram), "old": run(old_gram)},
                                               repeats)
    (ours, new), (theirs, old) = timed["new"], timed["old"]
    diff = max(rel_diff(a.kernel, b.kernel) for a, b in zip(new.layers, old.layers))
    threads = torch.get_num_threads()
    print(f"empirical NTK per layer, resnet_small eval, {n_samples} samples, "
          f"{len(new.layers)} layers, {threads} threads: nngauge median {ours:.2f} s, the "
          f"replaced vmap(grad) path {theirs:.2f} s; speed-up {theirs / ours:.1f}x (goal: "
          f"<= 10 s); load {before:.2f} -> {after:.2f}; max relative kernel difference "
          f"{diff:.1e}")
    _rows.record("empirical NTK per layer (kernel_conditioning kind='ntk')", ours_s=ours,
                 baseline="the replaced path: vmap(grad) per probe over every parameter",
                 baseline_s=theirs,
                 setting=f"zoo resnet_small, eval, {n_samples} x 3x32x32, {len(new.layers)} "
                         f"layers, float32; goal <= 10 s",
                 load_before=before, load_after=after, goal=None, threads=threads)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--d", type=int, default=50)
    parser.add_argument("--depth", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--acts", nargs="+", default=["erf", "relu"], choices=list(PEER_ACTS))
    parser.add_argument("--peer-python", default=os.environ.get("NNGAUGE_PEER_PYTHON"),
                        help="a python with neural-tangents (its own environment)")
    parser.add_argument("--parts", nargs="+", default=["theory", "empirical"],
                        choices=["theory", "empirical"])
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))  # run from a checkout
    if "empirical" in args.parts:
        bench_empirical(max(args.repeats, 3))
    if "theory" not in args.parts:
        return
    X = np.random.default_rng(0).normal(size=(args.n, args.d))
    print(f"command: {' '.join([Path(sys.executable).name] + sys.argv)}")
    print(f"inputs: {args.n} x {args.d} Gaussian; {args.depth} layers; sigma_w={SIGMA_W}, "
          f"sigma_b={SIGMA_B}; float64; {os.cpu_count()} CPUs")
    with tempfile.TemporaryDirectory() as tmp:
        for act in args.acts:
            bench(act, X, args.depth, args.repeats, args.peer_python, tmp)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--peer-worker"]:
        peer_worker(sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5])
    else:
        main()
