"""Build a report: run the sections, judge the numbers, render one page.

A builder that raises gives a failed section carrying the error (the report still renders),
one that raises :class:`NotApplicable` a skipped section with its reason. Verdicts are
computed from the sections' results afterwards.
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional, Sequence, Union

import torch
from torch import nn

from nngauge._constraints import (
    CALLABLE,
    SEED_OR_GENERATOR,
    Flag,
    Instance,
    Integer,
    Maybe,
    Real,
    constrained,
)
from nngauge._internal.adapter import ModelAdapter
from nngauge._internal.options import ModelOptions
from nngauge._internal.sites import block_sites
from nngauge._internal.usage import gibibytes, peak_memory_bytes
from nngauge._random import seed_of
from nngauge._results import plain
from nngauge._version import __version__
from nngauge._vocabulary import renamed
from nngauge.errors import NNGaugeError
from nngauge.measures.propagation._nlc import PROFILE_KINDS
from nngauge.report import _verdicts as V
from nngauge.report._context import (
    Context,
    NotApplicable,
    ReportSettings,
    SectionBuilder,
    SectionOutput,
)
from nngauge.report._plan import (
    JACOBIAN_POSITIONS,
    OVERRUN,
    check_affordable,
    measure_cost,
    plan,
)
from nngauge.report._sections import SECTION_BUILDERS


@dataclass(frozen=True)
class Section:
    """One rendered section: ``status`` is "ok", "failed" (``error`` says why) or "skipped"."""

    key: str
    title: str
    source: str
    status: str
    seconds: float
    output: SectionOutput
    error: str = ""

    def to_dict(self) -> dict[str, Any]:
        result = self.output.result
        if result is not None and hasattr(result, "to_dict"):
            result = result.to_dict()
        return {"title": self.title, "status": self.status, "seconds": self.seconds,
                "error": self.error, "notes": list(self.output.notes),
                "result": plain(result)}


# ------------------------------------------------------------------------------------ verdicts


def _verdicts(ctx: Context, not_run: frozenset[str] = frozenset()) -> tuple[V.Verdict, ...]:
    """The verdicts on the sections' results; ``not_run``: keys of the sections an interrupt
    stopped before they ran (their verdicts say so rather than "failed")."""
    results = ctx.results

    def missing(key: str, what: str) -> str:
        return (f"the {what} section was not run (the report was interrupted)"
                if key in not_run else f"the {what} section failed")

    out = []
    prof = results.get("nlc")
    if prof is None:
        out += [V.not_available("nlc", "Nonlinearity coefficient", V.NLC_PAPER,
                                missing("nlc", "NLC")),
                V.not_available("output_bias", "Output bias", V.NLC_PAPER,
                                missing("nlc", "NLC"))]
    else:
        # layer by layer: the activations' rows, or every block's row when grouped by block
        acts = [row.nlc for row in prof.layers[:-1] if ctx.profile_layers is not None
                or row.name in ctx.activation_sites]
        out += [V.nlc_verdict(prof, V.layers_within(acts)), V.bias_verdict(prof)]
    corr, jac = results.get("correlations"), results.get("jacobian")
    if corr is None:
        out.append(V.not_available("shrinkage", "Representation shrinkage (rho_max)",
                                   V.SHRINK_PAPER, missing("correlations", "correlations")))
    else:
        measured = None if jac is None else _last_hidden_norm(jac, ctx.hidden_layers) ** 2
        cfg = ctx.config
        out.append(V.shrinkage_verdict(corr, _shrinkage_bound(ctx, corr.rho_max), measured,
                                       None if cfg is None else cfg.norm))
    out.append(V.jacobian_verdict(jac, ctx.hidden_layers) if jac is not None else
               V.not_available("jacobian", "Jacobian growth across layers", V.SHRINK_PAPER,
                               missing("jacobian", "Jacobian")))
    kernels = results.get("kernels")
    out.append(V.kernel_verdict(kernels, ctx.hidden_layers) if kernels is not None else
               V.not_available("kernel", "Kernel conditioning over depth", V.COND_PAPER,
                               missing("kernels", "kernel")))
    theory = results.get("theory")
    out.append(V.theory_verdict(theory) if theory is not None else
               V.not_available("theory", "Theory phase (infinite width)", V.SHRINK_PAPER,
                               missing("theory", "theory") if "theory" in not_run else
                               "only for nngauge MLPs without skip connections"))
    return _with_evidence(ctx, out)


def _with_evidence(ctx: Context, verdicts: list) -> tuple:
    """The verdicts with the committed benchmark's evidence for a network like this one
    (:mod:`nngauge.report._evidence`); unchanged without inputs or a table."""
    from nngauge.report._evidence import committed, describe_network, evidence_for

    if committed() is None or not len(ctx.inputs):
        return tuple(verdicts)
    traits = describe_network(ctx.model, ctx.inputs, len(ctx.activation_sites))
    return tuple(dataclasses.replace(v, evidence=evidence_for(v.key, v.status, traits))
                 for v in verdicts)


def _last_hidden_norm(jac, hidden: list[str]) -> float:
    """||J||_op of the input -> last hidden layer (Theorem 1's z^(L)), else of the output."""
    rows = {row.name: row.norm for row in jac.layers}
    return next((rows[name] for name in reversed(hidden) if name in rows), jac.norm)


def _shrinkage_bound(ctx: Context, rho_max: float):
    """Theorem 1's lower bound for an nngauge MLP's activations (None otherwise)."""
    from nngauge.theory import shrinkage_bound

    cfg = ctx.config
    if cfg is None or cfg.depth < 2 or not -1.0 <= rho_max <= 1.0:
        return None
    try:
        return shrinkage_bound(cfg.activation, cfg.depth - 1, rho_max=rho_max)
    except NNGaugeError:
        return None


# -------------------------------------------------------------------------------------- report

VERDICT_SECTIONS = {"nlc": "nlc", "output_bias": "nlc", "shrinkage": "correlations",
                    "jacobian": "jacobian", "kernel": "kernels", "theory": "theory"}
"""The section whose measure each verdict judges (its badge is never better than them)."""
_RANK = {"ok": 0, "n/a": 0, "warn": 1, "bad": 2}


@dataclass(frozen=True)
class Report:
    """A built report: verdicts, sections, settings; render with :meth:`to_html`.

    Attributes:
        model_name, data_name: how the model and the data were given.
        model_summary: class name, parameters, layers.
        settings: the :class:`ReportSettings` used.
        verdicts: one :class:`~nngauge.report.Verdict` per judged quantity.
        sections: the :class:`Section` s in page order (those finished, when interrupted).
        seconds: total wall time.
        interrupted: True when Ctrl-C stopped the report before every section ran (see
            :class:`ReportInterrupted`); the page then says so at the top.
        not_run: titles of the sections the interrupt kept from running (empty otherwise).
        peak_memory: the largest resident memory of the process up to the end of the report,
            bytes (the model, its data and whatever the process held before included; None
            where the platform does not say).
    """

    model_name: str
    data_name: str
    model_summary: dict
    settings: ReportSettings
    verdicts: tuple[V.Verdict, ...]
    sections: tuple[Section, ...]
    seconds: float
    interrupted: bool = False
    not_run: tuple[str, ...] = ()
    peak_memory: Optional[int] = None

    @property
    def failed(self) -> list[str]:
        """Keys of the sections whose measure failed on this model."""
        return [s.key for s in self.sections if s.status == "failed"]

    def badge(self, section: Section) -> str:
        """A section's badge: "failed" or "skipped" as it ran, else the worst status of the
        verdicts on its numbers ("ok", "warn" or "bad"; a verdict that is "n/a" counts as
        neither)."""
        if section.status != "ok":
            return section.status
        ranks = [_RANK[v.status] for v in self.verdicts
                 if VERDICT_SECTIONS.get(v.key) == section.key]
        return ("ok", "warn", "bad")[max(ranks, default=0)]

    @property
    def quick_changes(self) -> list[str]:
        """What ``quick=True`` changed against the default settings, in words (empty when the
        report is not quick): the sizes it lowered before the budget was applied."""
        if not self.settings.quick:
            return []
        default, quick = ReportSettings.make(), ReportSettings.make(quick=True)
        names = {"n_batches": "NLC batches", "correlation_samples": "correlation samples",
                 "kernel_samples": "kernel samples (n of the n x n kernels)",
                 "jacobian_samples": "Jacobian samples",
                 "power_iterations": "power iterations of the operator norms",
                 "loss_samples": "loss-surface samples", "hessian_steps": "Lanczos steps",
                 "hessian_probes": "Hessian trace products",
                 "landscape_steps": "points of the loss slice", "budget": "budget (seconds)"}
        def shown(value):
            return "as many as the budget allows" if value is None else value

        return [f"{label}: {shown(getattr(quick, key))} instead of {shown(getattr(default, key))}"
                for key, label in names.items() if getattr(default, key) != getattr(quick, key)]

    @property
    def status(self) -> str:
        """The worst verdict status; a report with a failed section, an interrupted one, or
        one with no verdict at all, is never "ok" but "incomplete"."""
        statuses = {v.status for v in self.verdicts}
        worst = "bad" if "bad" in statuses else "warn" if "warn" in statuses else "ok"
        if worst == "ok" and (self.failed or self.interrupted or statuses <= {"n/a"}):
            return "incomplete"
        return worst

    @property
    def banner(self) -> str:
        """"interrupted after N of M sections (not run: ...)" for an interrupted report, else
        empty."""
        if not self.interrupted:
            return ""
        total = len(self.sections) + len(self.not_run)
        text = f"interrupted after {len(self.sections)} of {total} sections"
        return text + (f" (not run: {', '.join(self.not_run)})" if self.not_run else "")

    def to_dict(self) -> dict[str, Any]:
        """Every number: verdicts, each section's result ``to_dict()``, settings, timings.
        Non-finite floats become the strings "inf", "-inf", "nan" (valid JSON)."""
        return _finite({
            "nngauge_version": __version__, "model": self.model_name, "data": self.data_name,
            "model_summary": self.model_summary, "settings": plain(self.settings),
            "status": self.status, "failed_sections": self.failed,
            "interrupted": self.interrupted, "not_run_sections": list(self.not_run),
            "verdicts": [v.to_dict() for v in self.verdicts],
            "sections": {s.key: {**s.to_dict(), "badge": self.badge(s)}
                         for s in self.sections},
            "quick_changes": self.quick_changes,
            "timings": {s.key: s.seconds for s in self.sections}, "seconds": self.seconds,
            "peak_memory_bytes": self.peak_memory})

    def summary(self) -> str:
        """A few lines of text: the status, the time, then one line per verdict."""
        lines = [f"{self.status} in {self.seconds:.1f} s ({len(self.failed)} failed sections), "
                 f"peak memory {gibibytes(self.peak_memory)}"]
        if self.interrupted:
            lines.append(f"  {self.banner}")
        lines += [f"  {v.status:>4}  {v.title}: {v.message}"
                  + (f" [close call: {v.close_call}]" if v.close_call else "")
                  for v in self.verdicts]
        return "\n".join(lines)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, allow_nan=False)

    def to_html(self) -> str:
        """The single self-contained HTML page (inline CSS and PNGs, no external URL)."""
        from nngauge.report._template import render

        return render(self)

    def save(self, path: str | Path) -> Path:
        """Write the HTML page (or the JSON when ``path`` ends in ``.json``); returns the path."""
        path = Path(path)
        path.write_text(self.to_json() if path.suffix == ".json" else self.to_html(),
                        encoding="utf-8")
        return path


class ReportInterrupted(KeyboardInterrupt):
    """Ctrl-C (a ``KeyboardInterrupt``) stopped :func:`build_report`; ``report`` holds what was
    finished: the sections that ran, verdicts on their results, ``report.interrupted`` True.

    It is a ``KeyboardInterrupt``, so a caller that does not look for it stops as on any
    Ctrl-C; ``nngauge report`` saves the partial page and exits with status 130.
    """

    def __init__(self, report: "Report") -> None:
        super().__init__(report.banner)
        self.report = report


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


@renamed(seed="generator")
@constrained(generator=SEED_OR_GENERATOR, batch_size=Maybe(Integer(1)), quick=Flag(),
             budget=Maybe(Real(0, low_open=True)),
             model_name=Maybe(Instance((str,), "a display name", (3,))),
             data_name=Maybe(Instance((str,), "a display name", (3,))),
             planned=Maybe(CALLABLE))
def build_report(
    model: nn.Module,
    data: Any,
    *,
    generator: Union[int, torch.Generator, None] = 0,
    batch_size: Optional[int] = None,
    n_batches: Optional[int] = None,
    quick: bool = False,
    output: Any = None,
    input_module: Optional[str] = None,
    norm_mode: Optional[str] = None,
    dropout: bool = False,
    budget: Optional[float] = None,
    model_name: Optional[str] = None,
    data_name: Optional[str] = None,
    sections: Optional[Sequence[SectionBuilder]] = None,
    progress: Optional[Callable[[str], None]] = None,
    planned: Optional[Callable[[ReportSettings], None]] = None,
) -> Report:
    """Measure ``model`` on ``data`` and judge it against the papers: the ``nngauge report``.

    Runs the sections of :data:`SECTION_BUILDERS` (NLC profile, correlations, Jacobian norms,
    kernel conditioning, infinite-width theory for nngauge MLPs, trajectory length and
    transitions where available), then computes the verdicts. A section whose measure fails on
    this model is kept as a failed section with the error (and the report's status is then
    "incomplete" at best); a model that cannot run on the data at all raises.

    Before the sections run, one forward and backward pass is timed and the ``budget`` is
    shared between the sections: each gets its least work plus a share of the rest, and when
    the least work of all does not fit, the costliest sections are skipped, each saying the
    budget that would run it; each section's work (samples, points, evaluations) is then
    fitted to its seconds. Networks with more than 50 layers are measured at the outputs of
    their blocks. What was chosen is in ``report.settings.choices`` (the seconds in
    ``report.settings.allotted``), the peak memory in ``report.peak_memory``.

    Args:
        model: any ``nn.Module`` mapping (b, ...) inputs to outputs; batchnorm runs as found
            unless ``norm_mode`` says otherwise (train mode: batch statistics, as at
            initialization in the NLC paper), dropout is off unless ``dropout``; its mode,
            parameters and buffers are left as they were found.
        data: inputs (n, ...), ``(inputs, labels)``, a Dataset or a DataLoader.
        generator: an int seed (default 0) or a torch.Generator (one seed is drawn from it):
            every measure gets its own generator seeded with that int (reproducible numbers;
            ``report.settings.seed`` records it).
        batch_size, n_batches: the NLC's batches (default 250; batches: as the budget allows,
            at most one pass).
        quick: fewer samples and iterations, a 10 s budget (a first look).
        output, input_module, norm_mode, dropout: how the model runs (as in
            :func:`nngauge.nlc`); per-point sections (trajectory, transitions) freeze batch
            statistics on the data when batchnorm would use batch statistics.
        budget: seconds the sections may spend (default 40, quick 10), stated up front in
            the choices. A model on which not even the cheapest section's least work fits
            ten times the budget is refused with the estimate; a budget that large runs it.
        model_name, data_name: how to name them on the page (default: the class names).
        sections: the builders to run (default :data:`SECTION_BUILDERS`).
        progress: called with each section's title before it runs.
        planned: called once with the settings the plan chose (its seconds per section,
            the sections given up, ``choices`` in words), before the first section runs.

    Returns:
        A :class:`Report`.

    Raises:
        BudgetExceededError: the least work of the cheapest section is estimated at more than
            ten times ``budget`` (checked before any section runs; the message gives the budget
            that would run it).
        ReportInterrupted: on Ctrl-C (a ``KeyboardInterrupt`` subclass), with the partial
            report (the sections finished so far) as its ``report``.

    Example:
        >>> import torch
        >>> from nngauge.nn import mlp
        >>> from nngauge.report import build_report
        >>> net = mlp(8, 32, 3, 2, activation="tanh", generator=torch.Generator().manual_seed(0))
        >>> report = build_report(net, torch.randn(64, 8), quick=True)
        >>> [v.key for v in report.verdicts][:2], report.to_html().startswith("<!DOCTYPE html>")
        (['nlc', 'output_bias'], True)
    """
    where = "build_report()"
    start = time.perf_counter()
    settings = ReportSettings.make(quick=quick, seed=seed_of(generator), batch_size=batch_size,
                                   n_batches=n_batches, output=output, input_module=input_module,
                                   norm_mode=norm_mode, dropout=dropout, budget=budget)
    builders = list(SECTION_BUILDERS if sections is None else sections)
    ctx: Optional[Context] = None
    done: list[Section] = []

    def finished(not_run: Sequence[SectionBuilder] = (), interrupted: bool = False) -> Report:
        context = ctx if ctx is not None else Context(model, data, torch.empty(0), settings)
        return Report(model_name=model_name or type(model).__name__,
                      data_name=data_name or type(data).__name__,
                      model_summary=_summary(model, context), settings=context.settings,
                      verdicts=_verdicts(context, frozenset(b.key for b in not_run)),
                      sections=tuple(done), seconds=time.perf_counter() - start,
                      interrupted=interrupted, not_run=tuple(b.title for b in not_run),
                      peak_memory=peak_memory_bytes())

    kept: set[str] = set()  # results of the finished sections
    try:
        ctx = _context(model, data, settings, where, [b.key for b in builders])
        if planned is not None:
            planned(ctx.settings)
        sections_start = time.perf_counter()
        for builder in builders:
            if progress is not None:
                progress(builder.title)
            done.append(_run_section(builder, ctx, time.perf_counter() - sections_start))
            kept = set(ctx.results)
    except KeyboardInterrupt as exc:  # Ctrl-C: keep what is finished
        if ctx is not None:  # not what the interrupted section had stored before it stopped
            ctx.results = {k: v for k, v in ctx.results.items() if k in kept}
        raise ReportInterrupted(finished(builders[len(done):], interrupted=True)) from exc
    return finished()


def _context(model: nn.Module, data: Any, settings: ReportSettings, where: str,
             keys: Sequence[str]) -> Context:
    """Check that the model runs on the data and that the sections ``keys`` can keep near
    the budget on it, find its sites, choose the layers to measure and fit the sections' work
    to the budget."""
    adapter = ModelAdapter(model, ModelOptions(**settings.options), where=where)
    with adapter.active(generator=torch.Generator().manual_seed(settings.seed), data=data):
        batch = adapter.collect(data, max(settings.correlation_samples,
                                          settings.kernel_samples, 2))
        with torch.no_grad():  # fail early: can the model run on the data?
            adapter(adapter.measured(batch.inputs[:2]), batch.inputs[:2])
        check_affordable(adapter, batch.inputs, settings, keys, batch.labels is not None,
                         where)  # before the work that grows with depth
        sites = adapter.sites(batch.inputs, None, default_kinds=PROFILE_KINDS + ("block",))
        profile, grouped = block_sites(adapter.model, sites, PROFILE_KINDS)
        weights, _ = block_sites(adapter.model, sites, ("linear", "conv"),
                                 limit=JACOBIAN_POSITIONS)
        cost = measure_cost(adapter, batch.inputs, profile)
        coupled = adapter.coupled
        found = adapter.discover(batch.inputs)
        known = {s.name for s in found}  # and the activation functions measures find
        found += tuple(s for s in adapter.sites(batch.inputs, None, default_kinds=("activation",))
                       if s.name not in known)
    changes, choices = plan(settings, cost, n_data=_count(data), n_sites=len(profile),
                            n_jacobian=len(weights) + 1, grouped=grouped, coupled=coupled,
                            keys=keys, labelled=batch.labels is not None)
    settings = dataclasses.replace(settings, **changes, choices=tuple(choices))
    return Context(model, data, batch.inputs, settings, sites=found,
                   profile_layers=[s.name for s in profile] if grouped else None,
                   jacobian_layers=[s.name for s in weights], coupled=coupled)


def _count(data: Any) -> int:
    """Samples in ``data`` (a large number for a source whose length is unknown)."""
    try:
        return len(data[0]) if isinstance(data, (tuple, list)) else len(data)
    except TypeError:
        return 10**9


def _run_section(builder: SectionBuilder, ctx: Context, spent: float) -> Section:
    """Run one section, or skip it: when its least work does not fit the budget (the plan
    gave it up), or when the ``spent`` seconds of the sections before it leave no room for
    its allotted seconds within :data:`OVERRUN` times the budget."""
    start = time.perf_counter()
    status, error, output = "ok", "", SectionOutput()
    budget = ctx.settings.budget
    seconds = ctx.settings.seconds(builder.key) or 0.0
    given_up = dict(ctx.settings.given_up)
    if builder.key in given_up:
        return Section(builder.key, builder.title, builder.source, "skipped", 0.0, output,
                       f"over the budget: {given_up[builder.key]}")
    if seconds and spent + seconds > OVERRUN * budget:
        return Section(builder.key, builder.title, builder.source, "skipped", 0.0, output,
                       f"over the budget: the sections before it took {spent:.0f} s of the "
                       f"{budget:g} s budget, and its {seconds:.3g} s would end past "
                       f"{OVERRUN:g} times the budget (a larger --budget / budget= runs it)")
    try:
        output = builder.run(ctx)
    except NotApplicable as reason:
        status, error = "skipped", str(reason)
    except Exception as exc:  # a measure failing on this model is reported, not fatal
        status, error = "failed", f"{type(exc).__name__}: {exc}"
    return Section(builder.key, builder.title, builder.source, status,
                   time.perf_counter() - start, output, error)


def _summary(model: nn.Module, ctx: Context) -> dict:
    summary = {"class": type(model).__name__,
               "parameters": int(sum(p.numel() for p in model.parameters()))}
    if ctx.sites:  # none when the report was interrupted before finding them
        summary["layers"] = sum(s.leaf for s in ctx.sites)
    config = getattr(model, "config", None)
    if config is not None and hasattr(config, "to_dict"):
        summary["config"] = config.to_dict()
    return summary
