"""Write the README's generalization-benchmark table from a run of ``nngauge reproduce
fantastic`` (numbers in the docs come from a script, never by hand).

    nngauge reproduce fantastic --seed 0 --out reproduce/fantastic
    python docs/write_fantastic.py reproduce/fantastic     # rewrites README.md's section

The section between ``<!-- fantastic:begin -->`` and ``<!-- fantastic:end -->`` gets, for
the best :data:`SHOWN` measures of seed 0 by Psi, their Kendall tau, Psi and CMI with 95%
bootstrap intervals and how many of the seeds rank them in their top ten, then the verdict
with its reason (each claim, its seeds and numbers) and the run's date and time, read from the
run's README.md. The run's CSV (every measure at every seed), its README and its zoo
(one row a network) are copied to ``docs/fantastic/``, where the section links them.
"""

from __future__ import annotations

import csv
import datetime
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from readme_sections import keep_run, two_decimals, write_section  # noqa: E402

BEGIN, END = "<!-- fantastic:begin -->", "<!-- fantastic:end -->"
TOP = 10
SHOWN = 20
COPIED = ("fantastic.csv", "README.md", "fantastic_networks.csv")
"""The run's files kept in the repository (docs/fantastic/), where they exist."""
KEPT = Path(__file__).resolve().parent / "fantastic"


def section(folder: Path) -> str:
    rows = list(csv.DictReader(open(folder / "fantastic.csv", encoding="utf-8")))
    seeds = sorted({int(r["seed"]) for r in rows})
    top = {seed: [r["measure"] for r in rows if int(r["seed"]) == seed][:TOP] for seed in seeds}
    first = [r for r in rows if int(r["seed"]) == seeds[0]]
    readme = (folder / "README.md").read_text(encoding="utf-8")
    verdict = re.search(r"\*\*Verdict: (.*?)\*\*", readme)
    took = re.search(r"in ([0-9.]+) s", readme)
    reason = re.search(r"\*\*Verdict: [a-z ]*\.\*\* (.*)", readme)
    day = datetime.date.fromtimestamp((folder / "fantastic.csv").stat().st_mtime)
    lines = [f"Seed {seeds[0]}'s best {min(SHOWN, len(first))} of {len(first)} measures by Psi; "
             f"`top-{TOP}` counts the seeds (of {len(seeds)}) that rank the measure among their "
             f"best {TOP} (every measure at every seed: "
             "[docs/fantastic/fantastic.csv](docs/fantastic/fantastic.csv)):", "",
             f"| measure | tau [95%] | Psi [95%] | CMI | top-{TOP} |",
             "| --- | --- | --- | --- | --- |"]
    for r in first[:SHOWN]:
        count = sum(r["measure"] in top[s] for s in seeds)
        lines.append(f"| `{r['measure']}` | {two_decimals(r['tau'])} "
                     f"[{two_decimals(r['tau_low'])}, "
                     f"{two_decimals(r['tau_high'])}] | {two_decimals(r['psi'])} "
                     f"[{two_decimals(r['psi_low'])}, {two_decimals(r['psi_high'])}] | "
                     f"{two_decimals(r['cmi'])} | {count} |")
    lines += ["", f"Verdict: {verdict.group(1).rstrip('.') if verdict else 'none'}. "
              + (reason.group(1) if reason else ""), "",
              f"The run took {float(took.group(1)) / 60:.1f} min on this project's 2-core "
              f"machine on {day.isoformat()} (`nngauge reproduce fantastic --seed 0`; its "
              "README: [docs/fantastic/README.md](docs/fantastic/README.md))."]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    folder = Path(argv[1] if len(argv) > 1 else "reproduce/fantastic")
    keep_run(folder, KEPT, COPIED)
    return write_section(BEGIN, END, section(folder))


if __name__ == "__main__":
    sys.exit(main(sys.argv))
