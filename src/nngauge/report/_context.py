"""What the report's sections share: the settings, the context every builder reads, the
shapes of their outputs (figures, tables, notes) and the helpers that turn measure rows into
tables and notes."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence

import torch
from torch import nn

from nngauge._catalogue import catalogue
from nngauge._internal.adapter import ModelAdapter
from nngauge._internal.options import ModelOptions
from nngauge._internal.sites import Site
from nngauge._results import plain
from nngauge.errors import UnknownNameError


class NotApplicable(Exception):
    """Raised by a section builder when its section does not apply to this model."""


@dataclass(frozen=True)
class ReportSettings:
    """Options of the measures the report runs (recorded in the report).

    Attributes:
        seed: seed of every measure's generator.
        batch_size: NLC batch size (the paper's 250).
        n_batches: NLC batches (None: as many as the budget allows, at most one pass).
        correlation_samples: samples whose pairs enter the correlations (an upper bound).
        kernel_samples: n of the n x n kernel matrices.
        jacobian_samples: samples (one batch) for the per-layer operator norms (upper bound).
        power_iterations: power-iteration budget of the operator norms.
        jacobian_tol: relative error bound at which the Lanczos estimate of each layer's
            Jacobian norm stops.
        trajectory_points: most points of the trajectory-length refinement.
        transition_pieces: most linear pieces the exact transitions may find.
        transition_evaluations: most evaluations of the sampled transitions.
        region_pieces: most pieces the exact linear regions of a plane may have.
        region_resolution: cells per side of the grid when regions are not exact.
        loss_samples: labelled samples of the loss-surface section (an upper bound).
        hessian_steps: Lanczos steps for the top Hessian eigenvalue.
        hessian_probes: products for the Hessian trace (Hutch++ or Hutchinson).
        landscape_steps: points of the 1-D loss slice.
        hessian_per_batch: also each loss batch's own top eigenvalue (their interval).
        loss_batches: batches the loss-surface samples are split into (the interval's
            unit; with batch statistics, the batches normalized together).
        jacobian_positions: layers (the output included) the Jacobian section measures
            (None: every chosen one).
        budget: seconds the sections may spend, split between them (see ``choices``).
        output, input_module, norm_mode, dropout: how the model is run (as in
            :func:`nngauge.nlc`).
        quick: whether the quick settings were asked for.
        choices: what the report chose to measure from the model's cost, and why.
        allotted: (section, seconds) the plan gave each section that runs the model.
        given_up: (section, why) for the sections whose least work does not fit the budget:
            they are skipped with that reason.
    """

    seed: int = 0
    batch_size: int = 250
    n_batches: Optional[int] = None
    correlation_samples: int = 200
    kernel_samples: int = 32
    jacobian_samples: int = 100
    power_iterations: int = 100
    jacobian_tol: float = 1e-3
    trajectory_points: int = 2**14 + 1
    transition_pieces: int = 2**17
    transition_evaluations: int = 2**16
    region_pieces: int = 2**14
    region_resolution: int = 256
    loss_samples: int = 512
    hessian_steps: int = 30
    hessian_probes: int = 30
    landscape_steps: int = 41
    hessian_per_batch: bool = True
    loss_batches: int = 4
    jacobian_positions: Optional[int] = None
    budget: float = 40.0
    output: Any = None
    input_module: Optional[str] = None
    norm_mode: Optional[str] = None
    dropout: bool = False
    quick: bool = False
    choices: tuple[str, ...] = ()
    allotted: tuple[tuple[str, float], ...] = ()
    given_up: tuple[tuple[str, str], ...] = ()

    @classmethod
    def make(cls, *, quick: bool = False, **given: Any) -> "ReportSettings":
        """Defaults, or the quick ones (fewer samples and iterations), overridden by ``given``."""
        base = dict(n_batches=1, correlation_samples=100, kernel_samples=16,
                    jacobian_samples=50, power_iterations=30, loss_samples=128,
                    hessian_steps=12, hessian_probes=9, landscape_steps=21,
                    budget=10.0) if quick else {}
        base.update({k: v for k, v in given.items() if v is not None})
        return cls(quick=quick, **base)

    def seconds(self, key: str) -> Optional[float]:
        """The seconds the plan gave section ``key`` (None before planning or for a section
        the plan does not time)."""
        return dict(self.allotted).get(key)

    @property
    def options(self) -> dict[str, Any]:
        """How every measure runs the model: the keywords the sections pass to the public
        measures, so that each number equals the measure called with them (the report's own
        adapters take ``ModelOptions(**settings.options)``)."""
        return {"output": self.output, "input_module": self.input_module,
                "norm_mode": self.norm_mode, "dropout": self.dropout}


@dataclass(frozen=True)
class Figure:
    """A plot: title, caption and the PNG as a data URI."""

    title: str
    uri: str
    caption: str = ""


EMPTY_CELLS = frozenset({"None", ""})
"""Cells that hold no value; a column of nothing else is not shown."""


@dataclass(frozen=True)
class Table:
    """A table of strings: title, column names, rows. Columns whose every cell is empty
    (:data:`EMPTY_CELLS`) are dropped when the table is made (the first column, the row
    labels, is always kept)."""

    title: str
    columns: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]

    def __post_init__(self) -> None:
        if not self.rows:
            return
        keep = [i for i in range(len(self.columns))
                if i == 0 or any(row[i] not in EMPTY_CELLS for row in self.rows)]
        if len(keep) < len(self.columns):
            object.__setattr__(self, "columns", tuple(self.columns[i] for i in keep))
            object.__setattr__(self, "rows", tuple(tuple(row[i] for i in keep)
                                                   for row in self.rows))


@dataclass
class SectionOutput:
    """What a builder returns."""

    result: Any = None
    figures: list[Figure] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


@dataclass
class Context:
    """What builders share: the model, the data (any supported form), ``inputs`` (its first
    samples as one raw tensor), the settings, the model's sites and the layers the sections
    measure, and the results of earlier sections by key."""

    model: nn.Module
    data: Any
    inputs: torch.Tensor
    settings: ReportSettings
    results: dict[str, Any] = field(default_factory=dict)
    sites: tuple[Site, ...] = ()
    profile_layers: Optional[list[str]] = None
    jacobian_layers: list[str] = field(default_factory=list)
    coupled: bool = False

    def generator(self) -> torch.Generator:
        """A fresh generator seeded with the report's seed (one per measure)."""
        return torch.Generator().manual_seed(self.settings.seed)

    @property
    def config(self):
        """The MLPConfig when the model is an nngauge MLP, else None."""
        from nngauge.nn import MLP

        return self.model.config if isinstance(self.model, MLP) else None

    @property
    def labels(self) -> dict[str, str]:
        """Site names with their module types ("layer1.0 (BasicBlock)")."""
        return {s.name: s.label for s in self.sites}

    @property
    def kinds(self) -> dict[str, str]:
        """Site names with their kinds ("linear", "norm", "activation", ...)."""
        return {s.name: s.kind for s in self.sites}

    @property
    def hidden_layers(self) -> list[str]:
        """The Jacobian section's layers except the last (the read-out)."""
        return self.jacobian_layers[:-1]

    @property
    def activation_sites(self) -> set[str]:
        return {s.name for s in self.sites if s.kind == "activation"}

    def per_point(self) -> tuple[dict[str, Any], list[str]]:
        """Options of per-point measures (trajectories, transitions) and notes: batchnorm with
        batch statistics is frozen on the data (a point's output must not depend on its
        batch); token models measure between embedded inputs."""
        options = dict(self.settings.options)
        notes = []
        if self.coupled and options["norm_mode"] in (None, "train"):
            options["norm_mode"] = "frozen"
            notes.append("batchnorm used statistics computed on the data, then fixed "
                         "(norm_mode='frozen'): a per-point measure needs each point's output "
                         "to depend on that point alone")
        options["norm_data"] = self.data
        return options, notes

    def endpoints(self) -> tuple[torch.Tensor, torch.Tensor, dict[str, Any]]:
        """Two data points in the space of the measured input, and the options that run the
        model from there (see :meth:`measured_points`)."""
        points, options = self.measured_points(2)
        return points[0], points[1], options

    def measured_points(self, n: int) -> tuple[torch.Tensor, dict[str, Any]]:
        """The first ``n`` data points in the space of the measured input, and the options
        that run the model from there: the input module (integer data: the first embedding)
        and a raw template input."""
        s = self.settings
        adapter = ModelAdapter(self.model, ModelOptions(output=s.output,
                                                        input_module=s.input_module,
                                                        norm_mode="eval"),
                               where="nngauge report")
        with adapter.active():
            points = adapter.measured(self.inputs[:n]).detach()
        options = {} if adapter.input_module is None else {
            "input_module": adapter.input_module, "template": self.inputs[0]}
        return points, options


@dataclass(frozen=True)
class SectionBuilder:
    """A section of the report: ``run(context)`` returns its :class:`SectionOutput`.

    Attributes:
        key, title: the section's key (in ``report.results``) and heading.
        source: what the section cites (see :meth:`of_measure`).
        run: the builder.
        measure: the catalogue entry (:func:`nngauge.catalogue`) the section presents, or
            None for a section that presents no measure (the infinite-width theory).

    Raises:
        UnknownNameError: a ``measure`` the catalogue does not list.
    """

    key: str
    title: str
    source: str
    run: Callable[[Context], SectionOutput]
    measure: Optional[str] = None

    def __post_init__(self) -> None:
        if self.measure is not None and self.measure not in catalogue():
            raise UnknownNameError(
                f"SectionBuilder expected measure= a name of nngauge.catalogue(); got "
                f"{self.measure!r}. Fix: use one of {sorted(catalogue().names())}, or None for "
                "a section that presents no measure.")

    @classmethod
    def of_measure(cls, key: str, title: str, measure: str, run: Callable[[Context],
                   SectionOutput], *also: str) -> "SectionBuilder":
        """The section of the catalogue entry ``measure``, citing the entry's paper and
        section first, then ``also`` (further sources of the section)."""
        return cls(key, title, "; ".join([catalogue()[measure].citation, *also]), run, measure)


def rows_table(title: str, rows: Sequence[Any], labels: Optional[dict] = None) -> Table:
    """A table of result rows; a ``name`` column shows the layer with its module type."""
    dicts = [plain(row) for row in rows]
    columns = tuple(k for k, v in dicts[0].items() if not isinstance(v, dict)) if dicts else ()
    labels = labels or {}
    return Table(title, columns, tuple(
        tuple(labels.get(d[c], d[c]) if c == "name" else format_value(d.get(c)) for c in columns)
        for d in dicts))


def format_value(value: Any) -> str:
    if isinstance(value, bool) or value is None:
        return str(value)
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, list):
        return ", ".join(format_value(v) for v in value)
    return str(value)


def mode_notes(result) -> list[str]:
    """The skipped layers, fallbacks and unclassified modules a result reports."""
    skipped = getattr(result, "skipped", None) or {}
    notes = [f"layer {name!r} not measured: {why}" for name, why in skipped.items()]
    mode = getattr(result, "mode", None)
    if mode is not None:
        source = f", from {mode.input_module}" if mode.input_module else ""
        notes.insert(0, f"measured with batchnorm {mode.norm_mode}, dropout {mode.dropout}, "
                     f"output: {mode.output}{source}, {mode.precision}")
        notes += list(mode.notes)
        if mode.unclassified:
            notes.append("modules neither a known layer type nor recognised by behaviour "
                         f"(measured as opaque layers): {', '.join(mode.unclassified[:8])}")
    return notes


def layer_labels(ctx: Context, rows) -> list[str]:
    return [ctx.labels.get(row.name, row.name) for row in rows]


