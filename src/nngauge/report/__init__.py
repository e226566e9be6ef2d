"""The nngauge report: one self-contained HTML page of verdicts, plots and tables."""

from nngauge.report._build import Report, ReportInterrupted, Section, build_report
from nngauge.report._context import (
    Context,
    NotApplicable,
    ReportSettings,
    SectionBuilder,
    SectionOutput,
)
from nngauge.report._sections import SECTION_BUILDERS
from nngauge.report._verdicts import Verdict

__all__ = [
    "SECTION_BUILDERS",
    "Context",
    "NotApplicable",
    "Report",
    "ReportInterrupted",
    "ReportSettings",
    "Section",
    "SectionBuilder",
    "SectionOutput",
    "Verdict",
    "build_report",
]
