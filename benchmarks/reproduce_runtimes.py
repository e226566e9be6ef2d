"""The wall time of each ``nngauge reproduce NAME`` at its default (small) scale, beside what
``nngauge reproduce --list`` promises.

Each command runs as a user runs it (a fresh ``nngauge`` process, so Python, torch and
matplotlib start-up are included) into a temporary folder, ``--repeats`` times, one command
after the other; prints the median, the listed runtime, the load average before each command,
and flags a listed time off by more than half. Update each reproduction's ``small_runtime``
(``src/nngauge/reproduce/_*.py``) from this table, measured on 2 idle cores.

    python benchmarks/reproduce_runtimes.py [--repeats 3] [NAME ...]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

from nngauge.reproduce import REPRODUCTIONS


def wall_time(name: str, out: str) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "nngauge", "reproduce", name, "--out", out],
                   check=True, capture_output=True)
    return time.perf_counter() - start


def listed_seconds(text: str) -> float:
    """'~15 s' -> 15.0, '~2 min' -> 120.0."""
    value, unit = re.match(r"~?\s*([\d.]+)\s*(s|min)", text).groups()
    return float(value) * (60.0 if unit == "min" else 1.0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", default=list(REPRODUCTIONS))
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print(f"{os.cpu_count()} cores; median of {args.repeats} runs")
    print(f"{'name':<26}{'median s':>10}{'listed':>10}{'load':>7}")
    with tempfile.TemporaryDirectory() as root:
        for name in args.names:
            loads, times = [], []
            for k in range(args.repeats):
                loads.append(os.getloadavg()[0])
                times.append(wall_time(name, os.path.join(root, f"{name}-{k}")))
            median, listed = statistics.median(times), REPRODUCTIONS[name].small_runtime
            off = abs(median - listed_seconds(listed)) > 0.5 * listed_seconds(listed)
            print(f"{name:<26}{median:>10.1f}{listed:>10}{max(loads):>7.2f}"
                  + ("  <- update small_runtime" if off else ""))


if __name__ == "__main__":
    main()
