"""Citations name papers, never files a user does not have (issue "the first hour of a new
user"): the package, the README, docs/ and the report templates cite a paper by its authors,
title, venue, arXiv id and section, never by the markdown file a developer read it from, nor by
a design document outside the repository; every file path they mention exists."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAPER_FILES = ("nonlinearity-coefficient", "expressive-power-trajectory-length",
               "exploring-generalization", "gradient-explosion-representation-shrinkage",
               "deep-conditioning")
"""The names of the papers' markdown files beside the design document (not in this
repository): a reader cannot open them, so they are no citation."""
OUTSIDE = ("DESIGN.md", "shared/papers", "papers/", "nlc.md")
PLACEHOLDERS = ("file.py", "_my_name.py", "s.toml")
"""File names used as placeholders in help texts and docstrings (``file.py:function``, a
temporary ``s.toml`` in a doctest), not references; ``path/to/...`` likewise."""
PATH = re.compile(r"(?<![\w/.-])((?:[\w.-]+/)*[\w-]+\.(?:md|py|toml))\b")
TEXT = (".py", ".md", ".html", ".j2", ".jinja", ".txt", ".css", ".js", ".toml")


def repository_files() -> list[str]:
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"],
                            cwd=ROOT, capture_output=True, text=True)
    if listed.returncode != 0:
        pytest.skip("not a git checkout")
    return [name for name in listed.stdout.split() if (ROOT / name).is_file()]


def checked_files(files: list[str]) -> list[str]:
    """The package (its report templates included), the README and docs/."""
    return [name for name in files if name.endswith(TEXT) and (
        name.startswith(("src/nngauge/", "docs/")) or name == "README.md")]


def lines_of(files):
    for name in checked_files(files):
        for number, line in enumerate((ROOT / name).read_text(encoding="utf-8").splitlines(), 1):
            yield f"{name}:{number}", line


def test_no_paper_is_cited_by_its_markdown_file_nor_a_document_outside():
    found = [f"{where}: {line.strip()}" for where, line in lines_of(repository_files())
             if any(name in line for name in PAPER_FILES + OUTSIDE)]
    assert not found, "cite the paper (authors, title, venue, section) instead:\n" + "\n".join(
        found)


def test_every_file_path_mentioned_exists():
    files = repository_files()
    missing = []
    for where, line in lines_of(files):
        for match in PATH.finditer(line):
            ref = match.group(1)
            if ref.startswith("path/to/") or ref in PLACEHOLDERS:
                continue
            if not any(name == ref or name.endswith("/" + ref) for name in files):
                missing.append(f"{where}: {ref}")
    assert not missing, "paths to files that are not in the repository:\n" + "\n".join(missing)


def test_the_checks_see_the_report_templates_and_the_docs():
    """Guard against a scan that silently covers nothing."""
    names = checked_files(repository_files())
    assert "README.md" in names and "docs/papers.md" in names
    assert any(name.startswith("src/nngauge/report/") for name in names)


def test_the_papers_page_gives_each_paper_in_full():
    text = (ROOT / "docs" / "papers.md").read_text(encoding="utf-8")
    for title, arxiv in (
        ("The Nonlinearity Coefficient - Predicting Generalization in Deep Neural Networks",
         "arXiv:1806.00179"),
        ("On the Expressive Power of Deep Neural Networks", "arXiv:1606.05336"),
        ("Exploring\nGeneralization in Deep Learning", "arXiv:1706.08947"),
        ("Gradient Explosion and Representation Shrinkage in Infinite Networks", None),
        ("A Deep Conditioning Treatment of Neural\nNetworks", "arXiv:2002.01523"),
    ):
        assert " ".join(title.split()) in " ".join(text.split())
        if arxiv:
            assert arxiv in text
    assert "docs/papers.md" in (ROOT / "README.md").read_text(encoding="utf-8")


def test_the_theory_table_names_its_papers():
    out = subprocess.run([sys.executable, "-m", "nngauge", "theory", "relu"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    text = " ".join(out.stdout.split())
    assert "A Deep Conditioning Treatment of Neural Networks" in text
    assert not any(name in out.stdout for name in PAPER_FILES)
