"""Write the README's predictor table from a run of ``nngauge reproduce predictors`` (numbers in
the docs come from a script, never by hand).

    nngauge reproduce predictors --seed 0 --out reproduce/predictors
    python docs/write_predictors.py reproduce/predictors     # rewrites README.md's section

The section between ``<!-- predictors:begin -->`` and ``<!-- predictors:end -->`` gets the
run's command, time and date, every predictor's Spearman rho with accuracy (its 95% bootstrap
interval), top-10% precision, n and whether it beats the parameter count significantly, best
first as the run ranked them, then the verdict with its reason and the warnings the study's
workers raised, read from the run's README.md. The run's CSV and README are copied to
``docs/predictors/``, where the section links them; ``tests/test_readme.py`` checks that the
README's section is what this script writes from those files.
"""

from __future__ import annotations

import csv
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from readme_sections import keep_run, two_decimals, write_section  # noqa: E402

BEGIN, END = "<!-- predictors:begin -->", "<!-- predictors:end -->"
COPIED = ("predictors.csv", "README.md")
KEPT = Path(__file__).resolve().parent / "predictors"


def section(folder: Path) -> str:
    """The README's section for the run in ``folder`` (its predictors.csv and README.md)."""
    rows = list(csv.DictReader(open(folder / "predictors.csv", encoding="utf-8")))
    readme = (folder / "README.md").read_text(encoding="utf-8")
    verdict = re.search(r"\*\*Verdict: ([a-z ]*)\.\*\* (.*)", readme)
    command = re.search(r"Rebuilt by `([^`]*)` in ([0-9.]+) s", readme)
    day = re.search(r" s on (\d{4}-\d{2}-\d{2})", readme)
    warnings = re.findall(r"^- (\d+ units?: .*)$", readme, flags=re.M)
    when = f" on {day.group(1)}" if day else ""
    lines = [f"`{command.group(1)}`, {float(command.group(2)):.0f} s on this project's 2-core "
             f"machine{when} (the run's README and CSV: "
             "[docs/predictors/](docs/predictors/README.md)), best first:", "",
             "| predictor | Spearman rho [95%] | top-10% precision | n | beats n_params |",
             "| --- | --- | --- | --- | --- |"]
    for r in rows:
        baseline = " (baseline)" if r["baseline"] == "True" else ""
        lines.append(f"| `{r['predictor']}`{baseline} | {two_decimals(r['spearman'])} "
                     f"[{two_decimals(r['spearman_low'])}, {two_decimals(r['spearman_high'])}] | "
                     f"{two_decimals(r['top_precision'])} | {r['n']} | "
                     f"{'yes' if r['beats_n_params'] == 'True' else 'no'} |")
    if verdict:
        lines += ["", f"Verdict: {verdict.group(1)}. {verdict.group(2)}"]
    if warnings:
        lines += ["", "Warnings from the study's workers: " + "; ".join(warnings) + "."]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    folder = Path(argv[1] if len(argv) > 1 else "reproduce/predictors")
    keep_run(folder, KEPT, COPIED)
    return write_section(BEGIN, END, section(KEPT))


if __name__ == "__main__":
    sys.exit(main(sys.argv))
