"""Write the README's table of reproductions from a run of ``nngauge reproduce`` over several
commands (numbers in the docs come from a script, never by hand).

    nngauge reproduce --all --out reproduce            # or several names, in several runs
    python docs/write_reproductions.py reproduce      # rewrites README.md's section
    python docs/write_reproductions.py run-a run-b    # the rows of several runs, merged

The section between ``<!-- reproductions:begin -->`` and ``<!-- reproductions:end -->`` gets,
per reproduction of the run (its ``verdicts.csv``, written beside ``index.html``), the paper's
item, the verdict ("software check" where only a bug could fail it), every seed's status and
how many agree, the wall time and the command that reruns it, with the day of the run, then
the commands the run left out. The runs' ``verdicts.csv`` rows are merged (in the listing order
of ``nngauge reproduce --list``) into ``docs/reproductions/verdicts.csv``;
``tests/test_readme.py`` checks that the README's section is what this script writes from it.
"""

from __future__ import annotations

import csv
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from readme_sections import write_section  # noqa: E402

BEGIN, END = "<!-- reproductions:begin -->", "<!-- reproductions:end -->"
KEPT = Path(__file__).resolve().parent / "reproductions"


def section(folder: Path, all_names: list[str]) -> str:
    """The README's section for the run whose ``verdicts.csv`` is in ``folder``;
    ``all_names``: every reproduction, to name those the run left out."""
    with open(folder / "verdicts.csv", newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    days = sorted({r["date"] for r in rows})
    seconds = sum(float(r["seconds"]) for r in rows)
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["verdict"]] = counts.get(r["verdict"], 0) + 1
    lines = [f"{len(rows)} reproductions, run on {' and '.join(days)} on this project's 2-core "
             f"machine in {seconds / 60:.0f} min at the small scale: "
             + ", ".join(f"{n} {status}" for status, n in counts.items())
             + " (the table: [docs/reproductions/verdicts.csv](docs/reproductions/verdicts.csv)"
             "). Each time is the command's own at its seeds: a command reusing the studies an "
             "earlier one of the run computed (the NLC figures after `nlc-figure2`) shows only "
             "its own work.", "",
             "| command | the paper's item | verdict | per seed (agree) | time | rerun |",
             "| --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        label = r["verdict"] + (" (software check)" if r["software_check"] == "True" else "")
        lines.append(f"| `{r['name']}` | {r['target']} | {label} | {r['per_seed']} "
                     f"({r['agree']} of {r['seeds']}) | {float(r['seconds']):.0f} s | "
                     f"`{r['command']}` |")
    left_out = [name for name in all_names if name not in {r["name"] for r in rows}]
    if left_out:
        lines += ["", "Not in this run (their own sections of this README; hours at three seeds): "
                  + ", ".join(f"`{name}`" for name in left_out) + "."]
    return "\n".join(lines)


def merge(folders: list[Path], order: list[str]) -> None:
    """Write ``KEPT/verdicts.csv``: the rows of every folder's ``verdicts.csv`` (a later
    folder's row replaces an earlier one's for the same command), in the order ``order``."""
    rows, columns = {}, None
    for folder in folders:
        with open(folder / "verdicts.csv", newline="", encoding="utf-8") as handle:
            reader = csv.DictReader(handle)
            columns = reader.fieldnames
            rows.update({row["name"]: row for row in reader})
    KEPT.mkdir(exist_ok=True)
    with open(KEPT / "verdicts.csv", "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows[name] for name in order if name in rows)


def main(argv: list[str]) -> int:
    from nngauge.reproduce import names

    folders = [Path(arg) for arg in argv[1:]] or [Path("reproduce")]
    if [folder.resolve() for folder in folders] != [KEPT]:
        merge(folders, names())
    return write_section(BEGIN, END, section(KEPT, names()))


if __name__ == "__main__":
    sys.exit(main(sys.argv))
