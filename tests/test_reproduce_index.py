"""Several reproductions in one run: ``nngauge reproduce NAME NAME ... --out DIR`` (and
``--all``, the same for every name) writes DIR/NAME/ per reproduction and one offline index page
DIR/index.html with each figure beside the paper's claim and a verdict; every reproduction
states the claim it checks and judges it.

Two quick reproductions stand for all: ``--all`` differs only in the list of names (it takes
minutes, every command being tested on its own elsewhere)."""

import csv
import os
import re
import subprocess
import sys

import pytest
from browser_checks import console_errors, run_chromium

from nngauge.reproduce import REPRODUCTIONS, VERDICTS, get

NAMES = ("nlc-table2", "raghu-transitions")


@pytest.fixture(scope="module")
def several(tmp_path_factory):
    out = tmp_path_factory.mktemp("several")
    done = subprocess.run([sys.executable, "-m", "nngauge", "reproduce", *NAMES, "--out",
                           str(out), "--seed", "0", "--seeds", "2"], capture_output=True, text=True,
                          timeout=600, env={**os.environ, "COLUMNS": "200"})
    return out, done


def test_every_reproduction_states_its_claim_and_judges_it():
    """No reproduction without the paper's claim in words and a judge of its own numbers."""
    for name, record in REPRODUCTIONS.items():
        assert len(record.claim) > 40 and record.claim.endswith("."), name
        assert callable(record.judge), name


@pytest.mark.slow
def test_several_names_write_a_folder_each_and_the_index(several):
    """The CLI runs each name into OUT/NAME (CSV, PNG, README.md with the claim and the
    verdict, at two seeds: every seed's values) and prints one table of verdicts with each
    seed's; the index page holds a section per name with the claim, the verdict and its
    reason, the figure inlined, and links to the files; verdicts.csv the same verdicts."""
    out, done = several
    assert done.returncode == 0, done.stderr
    assert f"wrote {out / 'index.html'}" in done.stdout
    page = (out / "index.html").read_text(encoding="utf-8")
    for name in NAMES:
        folder = out / name
        assert {p.name for p in folder.iterdir()} == {f"{name}.csv", f"{name}.png",
                                                       f"{name}_seeds.csv", "README.md"}
        readme = (folder / "README.md").read_text(encoding="utf-8")
        verdict = re.search(r"\*\*Verdict: ([a-z ]+?)(?: \(software check, not "
                            r"evidence\))?\.\*\*", readme).group(1)
        assert verdict in VERDICTS and get(name).claim in readme
        assert " of 2 seeds agree on " in readme
        assert re.search(rf"{re.escape(name)}\s*│\s*{verdict}[^│]*│\s*0: ", done.stdout)
        section = page[page.index(f'<section id="{name}">'):]
        section = section[:section.index("</section>")]
        assert 'class="verdict ' + verdict.replace(" ", "-") + '"' in section
        assert "The paper's claim:" in section and 'src="data:image/png;base64,' in section
        assert f'href="{name}/{name}.csv"' in section and f'href="{name}/README.md"' in section
    with open(out / "verdicts.csv", newline="", encoding="utf-8") as handle:
        table = {row["name"]: row for row in csv.DictReader(handle)}
    assert sorted(table) == sorted(NAMES)
    for name in NAMES:
        statuses = [part.split(" ", 1)[1] for part in table[name]["per_seed"].split("; ")]
        assert table[name]["seeds"] == "2" and len(statuses) == 2
        assert int(table[name]["agree"]) == statuses.count(table[name]["verdict"])


@pytest.mark.slow
def test_the_judges_read_the_figures_as_the_tests_do(several):
    """nlc-table2 is within 25% of the paper's Table 2 at every depth and raghu-transitions
    follows the linear law (the claims their own tests assert): both 'reproduced'."""
    out, _ = several
    for name in NAMES:
        readme = (out / name / "README.md").read_text(encoding="utf-8")
        assert "**Verdict: reproduced.**" in readme, readme


@pytest.mark.slow
def test_the_index_loads_offline_in_a_browser_with_every_figure(several):
    """Headless Chromium loads index.html with no console error; its DOM holds one section
    and one inlined PNG per reproduction, and nothing is fetched from a network."""
    out, _ = several
    page = out / "index.html"
    assert not re.search(r"(src|href)=\"https?://", page.read_text(encoding="utf-8"))
    result = run_chromium(page, "--dump-dom")
    assert result.returncode == 0, result.stderr
    assert console_errors(result.stderr) == []
    dom = result.stdout
    assert dom.count("<section id=") == len(NAMES)
    assert len(re.findall(r'<img alt="[^"]+" src="data:image/png;base64,', dom)) == len(NAMES)


def test_all_and_names_together_or_an_unknown_name_exit_2(tmp_path):
    """--all with names, and an unknown name among several, are usage errors: one line, exit 2,
    nothing written."""
    for args in (("--all", "nlc-table2"), ("nlc-table2", "nope")):
        done = subprocess.run([sys.executable, "-m", "nngauge", "reproduce", *args, "--out",
                               str(tmp_path / "out")], capture_output=True, text=True,
                              timeout=120)
        assert done.returncode == 2, done.stderr
        assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr
        assert not (tmp_path / "out").exists()
