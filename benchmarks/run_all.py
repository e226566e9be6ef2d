"""Run every benchmark and write ``benchmarks/RESULTS.md`` (``make bench``).

Each benchmark script runs in its own process with ``NNGAUGE_BENCH_ROWS`` set; the rows it
records (:mod:`_rows`) become one table: measure | setting | nngauge | baseline or peer |
speed-up | goal | load | command. Every speed-up is the baseline's (or peer's) median time
over nngauge's, from one run in which both sides were warm and interleaved (A, B, A, B, ...;
medians of >= 3 repeats). Tables that are not ratios (cost against depth, the report's time
per section) follow. A benchmark that fails is listed with the end of its output; the others
still run.

Peers are used when installed, never installed by this script:
- neural-tangents, in its own environment: ``--peer-python`` (or NNGAUGE_PEER_PYTHON), that
  environment's python (``python3 -m venv nt-venv && nt-venv/bin/pip install "jax==0.4.30"
  "jaxlib==0.4.30" neural-tangents numpy scipy``);
- regioncam and PyHessian, importable from ``--peers-path`` (or NNGAUGE_PEERS_PATH), folders
  joined by ':' put on PYTHONPATH (``pip install --target DIR regioncam``; ``pip install
  --no-deps --target DIR2 pyhessian``);
- weightwatcher, in its own environment: ``--ww-python`` (or NNGAUGE_WW_PYTHON), that
  environment's python (``python3 -m venv ww && ww/bin/pip install torch==2.13.0 &&
  ww/bin/pip install weightwatcher``).

    python benchmarks/run_all.py [--only kernels sharpness ...] [--out benchmarks/RESULTS.md]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


@dataclass(frozen=True)
class Benchmark:
    """One script and the arguments ``make bench`` runs it with (each script's defaults are
    the issue's settings; the arguments here only pin the threads where the script's own
    docstring says one thread is the fair comparison)."""

    name: str
    args: tuple[str, ...] = ()
    peer: str = ""  # "neural-tangents" (--peer-python) or "weightwatcher" (--ww-python)

    @property
    def script(self) -> Path:
        return HERE / f"bench_{self.name}.py"


BENCHMARKS = (
    Benchmark("kernels", peer="neural-tangents"),
    Benchmark("sharpness", ("--threads", "1")),
    Benchmark("pac_bayes", ("--threads", "1", "--n-samples", "300")),
    Benchmark("jacobian"),
    Benchmark("nlc", ("--batches", "20", "--width", "256", "--threads", "1")),
    Benchmark("hessian", ("--threads", "1")),
    Benchmark("landscape", ("--threads", "1")),
    Benchmark("region_size"),
    Benchmark("region_density", ("--threads", "1")),
    Benchmark("regions", ("--threads", "1")),
    Benchmark("transitions", ("--threads", "1")),
    Benchmark("tracker", ("--threads", "1")),
    Benchmark("report", ("--networks", "resnet18,vit,gpt,resnet50,gpt2", "--budget", "600")),
    Benchmark("layer_spectra", ("--threads", "1"), peer="weightwatcher"),
)


def machine() -> str:
    """CPU model, cores, Python and torch versions, in one line."""
    import torch

    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return (f"{cpu}, {os.cpu_count()} cores, {platform.system()} {platform.release()}, "
            f"Python {platform.python_version()}, torch {torch.__version__} "
            f"({torch.get_num_threads()} threads by default)")


def run(bench: Benchmark, rows_path: Path, peer_python: str, peers_path: str,
        log_dir: Path, ww_python: str = "") -> tuple[int, float, Path]:
    """Run one benchmark; (exit code, seconds, its log file)."""
    args = list(bench.args)
    if bench.peer == "neural-tangents" and peer_python:
        args += ["--peer-python", peer_python]
    if bench.peer == "weightwatcher" and ww_python:
        args += ["--ww-python", ww_python]
    env = dict(os.environ, NNGAUGE_BENCH_ROWS=str(rows_path))
    if peers_path:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (peers_path, env.get("PYTHONPATH"))
                                            if p)
    log = log_dir / f"{bench.name}.log"
    start = time.perf_counter()
    with open(log, "w", encoding="utf-8") as out:
        code = subprocess.call([sys.executable, str(bench.script), *args], cwd=ROOT, env=env,
                               stdout=out, stderr=subprocess.STDOUT)
    return code, time.perf_counter() - start, log


def _seconds(s: float) -> str:
    return f"{s:.3g} s" if s >= 1e-3 else f"{s * 1e3:.3g} ms"


def ratio_table(rows: list[dict]) -> list[str]:
    lines = ["| measure | setting | nngauge | baseline or peer | speed-up | goal | "
             "load (before / after) | command |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        goal = "" if r["goal"] is None else (
            f"≥ {r['goal']:g}x ({'met' if r['speedup'] >= r['goal'] else 'NOT met'})")
        lines.append(
            f"| {r['measure']} | {r['setting']} ({r['threads']} thread"
            f"{'s' if r['threads'] != 1 else ''}) | {_seconds(r['ours_s'])} | {r['baseline']}: "
            f"{_seconds(r['baseline_s'])} | {r['speedup']:.2f}x | {goal} | "
            f"{r['load'][0]:.2f} / {r['load'][1]:.2f} | `{r['command']}` |")
    return lines


def other_table(table: dict) -> list[str]:
    columns = table["columns"]
    load = ("load not measured" if table["load"] is None
            else f"load {table['load'][0]:.2f} / {table['load'][1]:.2f}")
    threads = f"{table['threads']} thread{'s' if table['threads'] != 1 else ''}"
    lines = [f"### {table['title']}", "",
             ", ".join(p for p in (table["setting"], threads, load) if p) + ".", "",
             f"`{table['command']}`", "",
             "| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(str(v) for v in row) + " |" for row in table["rows"]]
    return lines + [""]


def write_results(path: Path, runs: dict[str, dict]) -> None:
    """RESULTS.md from ``runs`` (benchmark name -> its run: when, peers, exit code, seconds,
    records, output tail), in :data:`BENCHMARKS` order."""
    ordered = [(b.name, runs[b.name]) for b in BENCHMARKS if b.name in runs]
    records = [r for _, run_ in ordered for r in run_["records"]]
    peers = {k: v for _, run_ in ordered for k, v in run_["peers"].items() if v}
    lines = [
        "# Benchmark results", "",
        "Written by `make bench` (`python benchmarks/run_all.py`; `--only NAME` reruns some "
        "benchmarks and keeps the others' rows, each with its date under Runs).", "",
        f"Machine: {machine()}.", "",
        "Peers used: " + (", ".join(peers) or "none") + " (neural-tangents, regioncam, "
        "PyHessian and weightwatcher when installed: benchmarks/README.md).", "",
        "Every speed-up is the baseline's (or peer's) median time over nngauge's, from one run "
        "in which both sides were warm and interleaved (A, B, A, B, ...; medians of >= 3): "
        "above 1, nngauge is faster. The load average is the machine's before and after "
        "the timed runs. Each row's command reproduces it.", "",
        "## Speed-ups", "", *ratio_table([r for r in records if "table" not in r]), "",
    ]
    tables = [r for r in records if "table" in r]
    if tables:
        lines += ["## Other measurements", ""]
        for table in tables:
            lines += other_table(table)
    lines += ["## Runs", "", "| benchmark | run on | exit code | seconds | rows |",
              "|---|---|---|---|---|"]
    for name, run_ in ordered:
        lines.append(f"| {name} | {run_['started']} | {run_['exit']} | {run_['seconds']:.0f} | "
                     f"{len(run_['records'])} |")
    for name, run_ in ordered:
        if run_["exit"] != 0:
            lines += ["", f"### {name} failed", "", "```", *run_["tail"], "```"]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    path.with_suffix(".json").write_text(json.dumps(runs, indent=1) + "\n", encoding="utf-8")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="+", choices=[b.name for b in BENCHMARKS],
                        help="run these benchmarks only, keeping the other rows of --out")
    parser.add_argument("--out", type=Path, default=HERE / "RESULTS.md",
                        help="the table (its runs are kept beside it, in the .json)")
    parser.add_argument("--peer-python", default=os.environ.get("NNGAUGE_PEER_PYTHON", ""),
                        help="python of an environment with neural-tangents")
    parser.add_argument("--peers-path", default=os.environ.get("NNGAUGE_PEERS_PATH", ""),
                        help="folders (':'-joined) where regioncam and pyhessian import from")
    parser.add_argument("--ww-python", default=os.environ.get("NNGAUGE_WW_PYTHON", ""),
                        help="python of an environment with weightwatcher")
    args = parser.parse_args()
    chosen = [b for b in BENCHMARKS if not args.only or b.name in args.only]
    kept = args.out.with_suffix(".json")
    runs = json.loads(kept.read_text()) if args.only and kept.exists() else {}
    peers = {"neural-tangents": bool(args.peer_python),
             "regioncam": _importable("regioncam", args.peers_path),
             "PyHessian": _importable("pyhessian", args.peers_path),
             "weightwatcher": bool(args.ww_python)}
    log_dir = Path(tempfile.mkdtemp(prefix="nngauge-bench-"))
    print(f"each benchmark's output: {log_dir}/<name>.log")
    failed = False
    for bench in chosen:
        rows_path = log_dir / f"{bench.name}.jsonl"
        print(f"==> {bench.script.name} {' '.join(bench.args)}", flush=True)
        started = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
        code, seconds, log = run(bench, rows_path, args.peer_python, args.peers_path,
                                 log_dir, args.ww_python)
        records = ([json.loads(line) for line in rows_path.read_text().splitlines()]
                   if rows_path.exists() else [])
        runs[bench.name] = {"started": started, "exit": code, "seconds": seconds,
                            "peers": peers, "records": records,
                            "tail": log.read_text(errors="replace").splitlines()[-20:]}
        failed |= code != 0
        print(f"    exit {code}, {seconds:.0f} s, {len(records)} rows", flush=True)
        write_results(args.out, runs)  # after each: a stopped run keeps what it measured
    print(f"wrote {args.out}")
    if failed:
        sys.exit(1)


def _importable(module: str, peers_path: str) -> bool:
    """Whether ``module`` imports in a fresh interpreter with ``peers_path`` on PYTHONPATH."""
    env = dict(os.environ)
    if peers_path:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (peers_path, env.get("PYTHONPATH"))
                                            if p)
    return subprocess.call([sys.executable, "-c", f"import {module}"], env=env,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) == 0


if __name__ == "__main__":
    main()
