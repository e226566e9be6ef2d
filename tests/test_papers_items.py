"""docs/papers.md maps every item of the five papers to the command that rebuilds it or to the
reason it is not rebuilt (issue 36): every row says one or the other, every command named
exists and names the item in its own documentation (target, description, claim or module
docstring), and every command rebuilds an item of the list."""

import re
from importlib import import_module
from pathlib import Path

from nngauge.reproduce import REPRODUCTIONS

PAPERS = Path(__file__).resolve().parents[1] / "docs" / "papers.md"
HEADER = "| paper | item | rebuilt by | or why not |"
LABEL = re.compile(r"^(?:Figures?|Tables?|Theorems?|Corollar(?:y|ies)|Definition|Remarks?|"
                   r"Lemmas?|Proposition|Section|Appendix)\s+([0-9A-Z](?:\.?[0-9]+)*)")


def _rows() -> list[tuple[str, str, list[str], str]]:
    text = PAPERS.read_text(encoding="utf-8")
    table = text.split(HEADER, 1)[1].split("\n\n", 1)[0].strip().splitlines()[1:]
    rows = []
    for line in table:
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        assert len(cells) == 4, f"a row of four cells: {line}"
        paper, item, commands, reason = cells
        rows.append((paper, item, re.findall(r"`([a-z0-9-]+)`", commands), reason))
    return rows


def _documentation(name: str) -> str:
    """The command's target, description and claim, and its module's docstring."""
    from nngauge.reproduce import _MODULES

    modules = {module.REPRODUCTION.name: module
               for module in (import_module(f"nngauge.reproduce.{m}") for m in _MODULES)}
    record = REPRODUCTIONS[name]
    return " ".join((record.target, record.description, record.claim,
                     modules[name].__doc__ or ""))


def test_every_item_has_a_command_or_a_reason():
    rows = _rows()
    assert len(rows) >= 60
    for paper, item, commands, reason in rows:
        assert paper in {"NLC", "Raghu", "Neyshabur", "Shrinkage", "Conditioning",
                         "Other work"}, paper
        assert bool(commands) != bool(reason), f"{item}: a command or a reason, not both"
        assert not reason or len(reason) > 40, f"{item}: say why it is not rebuilt"
        for name in commands:
            assert name in REPRODUCTIONS, f"{item}: no command {name}"


def test_every_command_names_its_items_and_rebuilds_one():
    named = set()
    for _, item, commands, _ in _rows():
        named.update(commands)
        label = LABEL.match(item)
        if commands and label:
            identifier = re.compile(rf"(?<![\w.]){re.escape(label.group(1))}(?![\w])")
            assert any(identifier.search(_documentation(name)) for name in commands), (
                f"{item}: none of {commands} names {label.group(1)} in its documentation")
    assert not set(REPRODUCTIONS) - named, sorted(set(REPRODUCTIONS) - named)
