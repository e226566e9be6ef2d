"""Benchmark: ``nngauge.layer_spectra`` beside WeightWatcher's ``analyze()`` on the same layers.

Three networks (an MLP 784-1024-512-256-10, a CNN of three 3x3 convolutions 3-64-128-256 and a
Linear head, a GPT-style decoder from ``nngauge.zoo.gpt``: vocabulary 1,000, 64 positions, width
256, 4 blocks), each in two weight states: PyTorch's initialization, and heavy-tailed (every
weight matrix redrawn with i.i.d. Student-t entries, 2.5 degrees of freedom, scaled by
1/sqrt(fan_in): an ESD with a power-law tail, as Martin and Mahoney's heavy-tailed random
matrices). nngauge reads convolutions with ``conv="per_position"`` (WeightWatcher's reading: one
matrix per kernel position, the eigenvalues pooled).

Agreement, per layer that both fit: alpha, its x_min, the stable rank and the log spectral norm
(log10 lambda_max), against ``analyze(conv2d_norm=False)``: by default WeightWatcher multiplies
Conv2d weights by sqrt(1/2) (its ``conv2d_norm``), which lowers its log spectral norm of a
convolution by log10(2) = 0.301 and changes neither alpha nor the stable rank. The fits differ
by design in one place: WeightWatcher's KS distance is max |P(x_(k)) - k/n| (the empirical
distribution's left limits), nngauge's is Clauset, Shalizi and Newman's supremum over both sides
of each step, max(|P - k/n|, |P - (k+1)/n|); where the two pick different x_min the alphas
differ: the column "one-sided KS" refits nngauge's eigenvalues with WeightWatcher's distance
(and its 1e-5 floor), which gives WeightWatcher's alpha. WeightWatcher fits an ESD of fewer than
20 eigenvalues with another estimator: those layers (the 10-class heads) are compared on the
norms only.

Speed (only with the peer): nngauge's whole result (alpha, norms and the MP fit of every layer)
against WeightWatcher's default ``analyze()`` (alpha and norms, no MP fit), both warm (one
untimed call each), interleaved A, B, A, B, ... ``--repeats`` times, medians, the peer timing
its own call in a long-lived worker process; the machine's load average beside the ratio.
``--threads`` pins both sides (torch's threads here; OMP/MKL/OpenBLAS threads in the worker).

The peer runs in its own environment (weightwatcher is not a dependency of nngauge):

    python3 -m venv /work/venvs/ww && /work/venvs/ww/bin/pip install torch==2.13.0 && \\
        /work/venvs/ww/bin/pip install weightwatcher
    python benchmarks/bench_layer_spectra.py --ww-python /work/venvs/ww/bin/python \\
        [--repeats 3] [--threads 1]

Without ``--ww-python`` (or NNGAUGE_WW_PYTHON) it prints nngauge's numbers alone. With
``NNGAUGE_BENCH_ROWS`` set (``run_all.py``) it records the agreement table and one speed row
per network.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NETWORKS = ("mlp", "cnn", "gpt")
STATES = ("init", "heavy-tailed")
STUDENT_DOF = 2.5


def build(name: str, state: str):
    """The network ``name`` in weight state ``state`` (the same weights in both processes)."""
    import torch
    from torch import nn

    from nngauge.zoo import gpt

    torch.manual_seed(0)
    if name == "mlp":
        net = nn.Sequential(nn.Linear(784, 1024), nn.ReLU(), nn.Linear(1024, 512), nn.ReLU(),
                            nn.Linear(512, 256), nn.ReLU(), nn.Linear(256, 10))
    elif name == "cnn":
        net = nn.Sequential(nn.Conv2d(3, 64, 3), nn.ReLU(), nn.Conv2d(64, 128, 3), nn.ReLU(),
                            nn.Conv2d(128, 256, 3), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                            nn.Flatten(), nn.Linear(256, 10))
    else:
        net = gpt(1000, 64, dim=256, depth=4, heads=4, generator=0)
    if state == "heavy-tailed":
        student = torch.distributions.StudentT(STUDENT_DOF)
        with torch.no_grad():
            for module in net.modules():
                weight = getattr(module, "weight", None)
                if isinstance(weight, nn.Parameter) and weight.dim() >= 2:
                    fan_in = weight[0].numel() if weight.dim() > 2 or not hasattr(
                        module, "nf") else weight.shape[0]
                    weight.copy_(student.sample(weight.shape) / fan_in ** 0.5)
    return net


# ------------------------------------------------------------------ the peer's side


def peer_worker() -> None:
    """Run under WeightWatcher's python: answer 'details NET STATE PATH' with its per-layer
    values (as JSON in PATH) and 'time NET STATE' with the seconds of one warm ``analyze()``."""
    sys.path.insert(0, str(ROOT / "src"))
    import logging
    import warnings

    warnings.simplefilter("ignore")
    import weightwatcher as ww

    logging.getLogger("weightwatcher").setLevel(logging.ERROR)
    models = {}

    def watcher(net: str, state: str):
        if (net, state) not in models:
            models[net, state] = ww.WeightWatcher(model=build(net, state))
        return models[net, state]

    print(f"ready weightwatcher {ww.__version__}", flush=True)
    for line in sys.stdin:
        command, *args = line.split()
        if command == "details":
            net, state, path = args
            details = watcher(net, state).analyze(conv2d_norm=False)
            columns = ["name", "longname", "alpha", "xmin", "stable_rank",
                       "log_spectral_norm", "num_evals", "layer_type"]
            details[columns].to_json(path, orient="records")
            print("done", flush=True)
        elif command == "time":
            net, state = args
            w = watcher(net, state)
            start = time.perf_counter()
            with open(os.devnull, "w") as sink:  # its small-N fits print
                stdout, sys.stdout = sys.stdout, sink
                try:
                    w.analyze()
                finally:
                    sys.stdout = stdout
            print(time.perf_counter() - start, flush=True)
        else:
            break


class Peer:
    """The WeightWatcher worker process."""

    def __init__(self, python: str, threads: int) -> None:
        env = dict(os.environ, **{k: str(threads) for k in (
            "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")})
        self.proc = subprocess.Popen([python, __file__, "--peer-worker"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     text=True, env=env)
        self.version = self._ask(None).removeprefix("ready ")

    def _ask(self, line) -> str:
        if line is not None:
            self.proc.stdin.write(line + "\n")
            self.proc.stdin.flush()
        while True:
            answer = self.proc.stdout.readline()
            if not answer:
                raise RuntimeError("the weightwatcher worker exited (is weightwatcher "
                                   "installed in --ww-python's environment?)")
            if answer.startswith(("ready", "done")) or answer[:1].isdigit():
                return answer.strip()

    def details(self, net: str, state: str) -> list[dict]:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "details.json"
            self._ask(f"details {net} {state} {path}")
            return json.loads(path.read_text())

    def time_call(self, net: str, state: str) -> float:
        return float(self._ask(f"time {net} {state}"))

    def close(self) -> None:
        self.proc.stdin.write("stop\n")
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


# ------------------------------------------------------------------ nngauge's side


def ours(net: str, state: str, model=None):
    from nngauge import layer_spectra

    return layer_spectra(model if model is not None else build(net, state),
                         conv="per_position")


WW_SMALL_N = 20
"""WeightWatcher fits an ESD of fewer eigenvalues with another estimator (a bias-corrected
exponent and a penalized x_min): those layers are compared for the norms only."""
WW_EVALS_THRESH = 1e-5
"""WeightWatcher fits the eigenvalues above this (absolute) value only."""


def one_sided_alpha(eigenvalues) -> float:
    """The fit with WeightWatcher's KS distance max_k |P(x_(k)) - k/n| (left limits only) in
    place of the two-sided supremum, on the eigenvalues above its threshold, one candidate
    at a time: written out here to show that this one choice is the whole difference."""
    import numpy as np

    x = np.sort(np.asarray(eigenvalues))
    x = x[x > WW_EVALS_THRESH]
    logs = np.log(x)
    best = (float("inf"), float("nan"))
    for i in range(x.size - 1):
        n = x.size - i
        alpha = 1 + n / (logs[i:].sum() - n * logs[i])
        fitted = 1 - (x[i:] / x[i]) ** (1 - alpha)
        distance = np.abs(fitted - np.arange(n) / n).max()
        if distance < best[0]:
            best = (distance, alpha)
    return best[1]


def agreement(result, details: list[dict]) -> tuple[list[list], dict]:
    """Per-layer rows (ours beside theirs) and the summary of the differences."""
    theirs = {d["longname"]: d for d in details if d["alpha"] is not None and d["alpha"] > 0}
    rows, da, dl, ds, d1, same, small = [], [], [], [], [], 0, []
    for r in result.layers:
        if r.note or r.name not in theirs:
            continue
        t = theirs[r.name]
        dl.append(abs(r.log_spectral_norm - t["log_spectral_norm"]))
        ds.append(abs(r.stable_rank / t["stable_rank"] - 1))
        if r.n_eigenvalues < WW_SMALL_N:
            small.append(r.name)
            continue
        one_sided = one_sided_alpha(r.eigenvalues)
        da.append(abs(r.alpha - t["alpha"]))
        d1.append(abs(one_sided - t["alpha"]))
        same += abs(r.xmin / t["xmin"] - 1) < 1e-6
        rows.append([r.name, r.n_eigenvalues, f"{r.alpha:.3f}", f"{t['alpha']:.3f}",
                     f"{one_sided:.3f}", f"{r.xmin:.4g}", f"{t['xmin']:.4g}",
                     f"{r.stable_rank:.3f}", f"{t['stable_rank']:.3f}",
                     f"{r.log_spectral_norm:.4f}", f"{t['log_spectral_norm']:.4f}"])
    names = {r.name for r in result.layers}
    summary = {"layers": len(rows), "same_xmin": same,
               "max_dalpha": max(da, default=float("nan")),
               "median_dalpha": statistics.median(da) if da else float("nan"),
               "max_dalpha_one_sided": max(d1, default=float("nan")),
               "max_dlogspec": max(dl, default=float("nan")),
               "max_rel_dstable": max(ds, default=float("nan")), "small": small,
               "only_ours": sorted(names - set(theirs)),
               "only_theirs": sorted(set(theirs) - names)}
    return rows, summary


def main() -> None:
    import _rows
    import torch

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ww-python", default=os.environ.get("NNGAUGE_WW_PYTHON", ""),
                        help="python of an environment with weightwatcher")
    parser.add_argument("--repeats", type=_rows.repeats, default=3)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    peer = Peer(args.ww_python, args.threads) if args.ww_python else None
    header = ["layer", "eigenvalues", "alpha (nngauge)", "alpha (ww)", "alpha (one-sided KS)",
              "xmin (nngauge)", "xmin (ww)", "stable rank (nngauge)", "stable rank (ww)",
              "log spectral norm (nngauge)", "log spectral norm (ww)"]
    summaries = []
    try:
        for net in NETWORKS:
            for state in STATES:
                result = ours(net, state)
                print(f"\n== {net}, {state}: nngauge alpha {result.alpha:.3f}, alpha_weighted "
                      f"{result.alpha_weighted:.3f}, {result.n_fitted} layers fitted")
                if peer is None:
                    for r in result.layers:
                        print(f"  {r.name:24s} alpha {r.alpha:.3f} stable rank "
                              f"{r.stable_rank:.2f} log spectral norm {r.log_spectral_norm:.4f}"
                              f"{'  (' + r.note + ')' if r.note else ''}")
                    continue
                rows, summary = agreement(result, peer.details(net, state))
                print("| " + " | ".join(header) + " |")
                for row in rows:
                    print("| " + " | ".join(str(c) for c in row) + " |")
                print(f"summary: {summary}")
                summaries.append([net, state, summary["layers"],
                                  f"{summary['same_xmin']}/{summary['layers']}",
                                  f"{summary['max_dalpha']:.2g}",
                                  f"{summary['median_dalpha']:.2g}",
                                  f"{summary['max_dalpha_one_sided']:.1e}",
                                  f"{summary['max_rel_dstable']:.1e}",
                                  f"{summary['max_dlogspec']:.1e}",
                                  ", ".join(summary["small"]) or "-",
                                  ", ".join(summary["only_ours"]) or "-",
                                  ", ".join(summary["only_theirs"]) or "-"])
        if peer is None:
            print("\nno peer rows: pass --ww-python (see the module docstring)")
            return
        columns = ["network", "weights", "layers fitted (>= 20 eigenvalues)", "same x_min",
                   "max |d alpha|", "median |d alpha|", "max |d alpha|, one-sided KS",
                   "max rel. d stable rank", "max |d log spectral norm|",
                   "norms only (< 20 eigenvalues)", "rows only nngauge has",
                   "rows only weightwatcher has"]
        print("\n| " + " | ".join(columns) + " |")
        for row in summaries:
            print("| " + " | ".join(str(c) for c in row) + " |")
        _rows.record_table(f"layer_spectra vs {peer.version}: agreement per layer", columns,
                           summaries, setting="nngauge conv='per_position'; weightwatcher "
                           "analyze(conv2d_norm=False)")
        for net in NETWORKS:
            model = build(net, "heavy-tailed")
            ours(net, "heavy-tailed", model)  # warm
            peer.time_call(net, "heavy-tailed")  # warm
            before = _rows.load()
            mine, theirs = [], []
            for _ in range(args.repeats):
                start = time.perf_counter()
                ours(net, "heavy-tailed", model)
                mine.append(time.perf_counter() - start)
                theirs.append(peer.time_call(net, "heavy-tailed"))
            after = _rows.load()
            a, b = statistics.median(mine), statistics.median(theirs)
            print(f"{net}: nngauge {a:.3f} s, {peer.version} analyze() {b:.3f} s, speed-up "
                  f"{b / a:.2f}x (load {before:.2f} -> {after:.2f}, {args.threads} thread(s))")
            _rows.record(f"layer_spectra, {net}", ours_s=a, baseline=f"{peer.version} "
                         "analyze() (warm)", baseline_s=b, setting=f"{net}, heavy-tailed "
                         "weights, every layer", load_before=before, load_after=after,
                         threads=args.threads)
    finally:
        if peer is not None:
            peer.close()


if __name__ == "__main__":
    if sys.argv[1:2] == ["--peer-worker"]:
        peer_worker()
    else:
        sys.path.insert(0, str(ROOT / "src"))
        main()
