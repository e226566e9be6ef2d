"""Write the README's generalization-benchmark table from a run of ``nngauge reproduce
fantastic`` (numbers in the docs come from a script, never by hand).

    nngauge reproduce fantastic --seed 0 --out reproduce/fantastic
    python docs/write_fantastic.py reproduce/fantastic     # rewrites README.md's section

The section between ``<!-- fantastic:begin -->`` and ``<!-- fantastic:end -->`` gets, per
measure, seed 0's Kendall tau, Psi and CMI with their 95% bootstrap intervals and how many of
the seeds rank it in the top ten by Psi, then the verdict and the run's time, read from the
run's README.md.
"""

from __future__ import annotations

import csv
import re
import sys
from pathlib import Path

BEGIN, END = "<!-- fantastic:begin -->", "<!-- fantastic:end -->"
TOP = 10


def _number(text: str) -> str:
    value = float(text)
    return "-" if value != value else f"{value:.2f}"


def section(folder: Path) -> str:
    rows = list(csv.DictReader(open(folder / "fantastic.csv", encoding="utf-8")))
    seeds = sorted({int(r["seed"]) for r in rows})
    top = {seed: [r["measure"] for r in rows if int(r["seed"]) == seed][:TOP] for seed in seeds}
    first = [r for r in rows if int(r["seed"]) == seeds[0]]
    readme = (folder / "README.md").read_text(encoding="utf-8")
    verdict = re.search(r"\*\*Verdict: (.*?)\*\*", readme)
    took = re.search(r"in ([0-9.]+) s", readme)
    lines = [f"Seed {seeds[0]}, ranked by Psi; `top-{TOP}` counts the seeds (of {len(seeds)}) "
             f"that rank the measure among their best {TOP}:", "",
             f"| measure | tau [95%] | Psi [95%] | CMI | top-{TOP} |",
             "| --- | --- | --- | --- | --- |"]
    for r in first:
        count = sum(r["measure"] in top[s] for s in seeds)
        lines.append(f"| `{r['measure']}` | {_number(r['tau'])} [{_number(r['tau_low'])}, "
                     f"{_number(r['tau_high'])}] | {_number(r['psi'])} "
                     f"[{_number(r['psi_low'])}, {_number(r['psi_high'])}] | "
                     f"{_number(r['cmi'])} | {count} |")
    lines += ["", f"Verdict: {verdict.group(1).rstrip('.') if verdict else 'none'}; the run took "
              f"{float(took.group(1)) / 60:.1f} min on this machine "
              "(`nngauge reproduce fantastic --seed 0`; the claims and their numbers are in "
              "the run's README.md and fantastic.html)."]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    folder = Path(argv[1] if len(argv) > 1 else "reproduce/fantastic")
    readme = Path(__file__).resolve().parents[1] / "README.md"
    text = readme.read_text(encoding="utf-8")
    if BEGIN not in text or END not in text:
        print(f"README.md has no {BEGIN} ... {END} section", file=sys.stderr)
        return 1
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    readme.write_text(f"{head}{BEGIN}\n{section(folder)}\n{END}{tail}", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
