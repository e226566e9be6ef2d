"""Reproductions of the papers' tables and figures: ``nngauge reproduce NAME``.

Each reproduction is one small module holding a :class:`Reproduction` record (name, paper,
table or figure, description, what differs from the paper at each scale, ``compute`` and
``plot``); :meth:`Reproduction.run` writes ``NAME.csv`` and ``NAME.png`` and returns a
:class:`ReproductionResult`. To add one: write ``_my_name.py`` with a ``REPRODUCTION`` record
and list its module below.

Example:
    >>> from nngauge.reproduce import get, names
    >>> "nlc-table1" in names()
    True
    >>> get("nlc-table1").target
    'Table 1'
"""

from __future__ import annotations

from importlib import import_module

from nngauge.errors import UnknownNameError
from nngauge.reproduce._base import (
    SCALES,
    VERDICTS,
    Comparison,
    Computed,
    Reproduction,
    ReproductionResult,
    Verdict,
    write_csv,
)

_MODULES = (  # by paper, in the order of the papers' figures
    "_nlc_definition1",
    "_nlc_table1",
    "_nlc_table2",
    "_nlc_table2_illustration",
    "_nlc_figure1",
    "_nlc_figure2",
    "_nlc_figure3",
    "_nlc_figure3_df",
    "_nlc_figure4",
    "_nlc_confounders",
    "_nlc_lr",
    "_nlc_figure9",
    "_nlc_figure10",
    "_shrinkage_figure1",
    "_shrinkage_remark1",
    "_shrinkage_theorem2",
    "_shrinkage_figure2",
    "_shrinkage_figure3",
    "_shrinkage_figure4",
    "_shrinkage_critical",
    "_conditioning_depth",
    "_conditioning_figure1",
    "_conditioning_figure2",
    "_conditioning_mu_table",
    "_conditioning_normrelu",
    "_conditioning_theorems",
    "_conditioning_figures3_5",
    "_conditioning_figures7_8",
    "_neyshabur_capacities",
    "_neyshabur_random_labels",
    "_neyshabur_figure2",
    "_neyshabur_figure3",
    "_neyshabur_figure4",
    "_neyshabur_conditions",
    "_raghu_figure1",
    "_raghu_theorem1",
    "_raghu_figure2",
    "_raghu_figure3",
    "_raghu_figure4",
    "_raghu_transitions",
    "_raghu_trajectory",
    "_raghu_figure6",
    "_raghu_training",
    "_raghu_figure10",
    "_raghu_figure11",
    "_raghu_dichotomies",
    "_regions_vs_bounds",
    "_regions_and_loss",
    "_predictors",
    "_predictors_cnn",
    "_fantastic",
)

REPRODUCTIONS: dict[str, Reproduction] = {
    record.name: record
    for record in (import_module(f"nngauge.reproduce.{module}").REPRODUCTION
                   for module in _MODULES)
}
"""Every reproduction by name, in the order of ``nngauge reproduce --list``."""


def names() -> list[str]:
    """The reproduction names, in listing order."""
    return list(REPRODUCTIONS)


def get(name: str) -> Reproduction:
    """The reproduction called ``name``.

    Raises:
        UnknownNameError: an unknown name (the message lists the known ones).
    """
    if name not in REPRODUCTIONS:
        raise UnknownNameError(
            f"nngauge reproduce expected a reproduction name in {names()}; got {name!r}. "
            "Fix: pick one of them (nngauge reproduce --list describes each).")
    return REPRODUCTIONS[name]


__all__ = [
    "REPRODUCTIONS",
    "SCALES",
    "Comparison",
    "Computed",
    "Reproduction",
    "ReproductionResult",
    "VERDICTS",
    "Verdict",
    "get",
    "names",
    "write_csv",
]
