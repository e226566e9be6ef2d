"""Benchmark: infinite-width NNGP + NTK of 1,000 Gaussian inputs (d = 50) through 20 layers.

nngauge: ``ntk(X, act, depth, with_nngp=True)``, ONE call that returns both kernels (all
depth + 1 layers of each, float64), timed twice: with its default threads (the erf / relu
passes share blocks of rows among the CPUs) and with one thread. Peer: neural-tangents' jitted
``stax.serial(Dense, *[act, Dense] * depth)`` kernel_fn with ``get=("nngp", "ntk")`` (float64,
CPU; it returns the last layer only), run in its own Python environment: neural-tangents is not
a dependency of nngauge. Pass that environment's python with ``--peer-python`` (or the
NNGAUGE_PEER_PYTHON variable); this file then also serves as the peer's worker process.

Fairness: both sides are warm (one untimed call each first, which includes the peer's jit
compilation); timings are interleaved A, B, A, B, ... in one run: the peer worker stays alive
and times one call per request inside its own process (the call plus block_until_ready), so
neither side pays process start-up or pipes; the ratio is median(nngauge) / median(peer), with
the machine's load average printed beside it; each round times nngauge (default threads),
nngauge (one thread), then the peer. The final kernels of both sides are compared.

Run:  python benchmarks/bench_kernels.py --peer-python /path/to/nt-venv/bin/python
      [--n 1000] [--d 50] [--depth 20] [--repeats 5] [--acts erf relu]
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

SIGMA_W, SIGMA_B = 1.5, 0.1
PEER_ACTS = {"erf": "Erf", "relu": "Relu"}  # nngauge name -> stax layer


def peer_worker(x_path: str, act: str, depth: int, out_dir: str) -> None:
    """The peer's side (run under the peer's python): compile, save the kernels, then time one
    warm call per 'time' line read from stdin, answering with the seconds."""
    import jax

    jax.config.update("jax_enable_x64", True)
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
    print(f"ready jax {jax.__version__}", flush=True)
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


def time_nngauge(X, act, depth, threads):
    """Seconds of one ``ntk(..., with_nngp=True)`` call with at most ``threads`` threads (None:
    the library's default), and its result."""
    from nngauge.theory import _kernel_maps, ntk

    default = _kernel_maps.MAX_THREADS
    _kernel_maps.MAX_THREADS = default if threads is None else threads
    try:
        start = time.perf_counter()
        trace = ntk(X, act, depth, sigma_w=SIGMA_W, sigma_b=SIGMA_B, with_nngp=True,
                    max_seconds=None)
        return time.perf_counter() - start, trace
    finally:
        _kernel_maps.MAX_THREADS = default


def rel_diff(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(a - b).max() / np.abs(b).max())


def load() -> str:
    return "/".join(f"{v:.2f}" for v in os.getloadavg())


def bench(act: str, X: np.ndarray, depth: int, repeats: int, peer_python, tmp: str) -> None:
    """Print nngauge's times and, with a peer, the interleaved ratio row for ``act``."""
    x_path = str(Path(tmp) / "x.npy")
    np.save(x_path, X)
    peer = None
    if peer_python:
        peer = Peer(peer_python, x_path, act, depth, tmp)
    series = {"default threads": None, "1 thread": 1}
    trace = None
    for threads in series.values():  # untimed warm-up calls
        _, trace = time_nngauge(X, act, depth, threads)
    ours = {label: [] for label in series}
    theirs, loads = [], [load()]
    for _ in range(repeats):
        for label, threads in series.items():
            ours[label].append(time_nngauge(X, act, depth, threads)[0])
        if peer is not None:
            theirs.append(peer.time_call())
    loads.append(load())
    medians = {label: float(np.median(times)) for label, times in ours.items()}
    for label, times in ours.items():
        print(f"{act}: nngauge ntk(with_nngp=True), {label}, one call, {depth + 1} layers of "
              f"both kernels: median {medians[label]:.3f} s of {[round(t, 3) for t in times]} "
              f"({medians[label] / depth * 1e3:.1f} ms per layer)")
    if peer is None:
        print(f"{act}: no peer row (pass --peer-python: see the module docstring); "
              f"load {loads[0]} -> {loads[1]}")
        return
    b = float(np.median(theirs))
    nt_nngp, nt_ntk = peer.kernels()
    peer.close()
    diff = max(rel_diff(trace.nngp.kernels[-1], nt_nngp), rel_diff(trace.kernels[-1], nt_ntk))
    print(f"{act}: neural-tangents jitted kernel_fn (warm, {peer.version}), last layer: "
          f"median {b:.3f} s of {[round(t, 3) for t in theirs]}")
    for label, a in medians.items():
        print(f"RATIO {act} NNGP+NTK n={X.shape[0]} d={X.shape[1]} depth={depth} float64, "
              f"nngauge {label}: nngauge / neural-tangents = {a / b:.2f}  (medians of "
              f"{repeats}, interleaved; load average {loads[0]} -> {loads[1]}; max relative "
              f"difference of the last kernels {diff:.1e})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--d", type=int, default=50)
    parser.add_argument("--depth", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--acts", nargs="+", default=["erf", "relu"], choices=list(PEER_ACTS))
    parser.add_argument("--peer-python", default=os.environ.get("NNGAUGE_PEER_PYTHON"),
                        help="a python with neural-tangents (its own environment)")
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))  # run from a checkout
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
