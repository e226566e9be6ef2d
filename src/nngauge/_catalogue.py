"""The measure catalogue: one record per public measure and proxy of nngauge.

Everything that lists measures reads this module: the top-level exports of :mod:`nngauge`,
the names a :class:`~nngauge.training.Tracker` knows and how it feeds them, the measures a
study records (:mod:`nngauge.studies`), the conformance matrix (:mod:`nngauge.conformance`),
the report's measure sections and the API table of ``docs/api.md``. Adding a measure means
writing its module and one :class:`Entry` here.

The module is data: functions are named by their public module and loaded on first use, so
reading the catalogue imports neither torch nor any measure (``import nngauge.theory`` stays
torch-free).

Example:
    >>> from nngauge import catalogue
    >>> entry = catalogue()["nlc"]
    >>> entry.family, entry.reads, entry.headline
    ('propagation', 'batch', ('nlc', 'output_bias'))
    >>> catalogue().proxy("synflow").qualified_name
    'nngauge.proxies.synflow'
"""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib import import_module
from types import MappingProxyType
from typing import Any, Callable, Iterator, Literal, Mapping, Optional

from nngauge._citations import cite, short
from nngauge.errors import UnknownNameError

Kind = Literal["measure", "proxy"]
Reads = Literal["batch", "points", "segment", "trajectory", "plane", "weights"]
READS: dict[str, str] = {
    "batch": "a batch of data (statistics over its samples)",
    "points": "a fixed set of points of input space, compared with each other",
    "segment": "a segment of input space between two points (x0, x1)",
    "trajectory": "a trajectory of input space (nngauge.trajectories)",
    "plane": "a plane of input space (nngauge.trajectories.plane)",
    "weights": "the weights alone (no data values)",
}
"""What a measure reads, in words: the catalogue's ``reads`` values."""

FAMILIES: dict[str, str] = {
    "propagation": "signal propagation at initialization (nngauge.measures.propagation)",
    "expressivity": "expressivity: trajectories, transitions, regions "
                    "(nngauge.measures.expressivity)",
    "generalization": "generalization: margins, norms, sharpness, PAC-Bayes "
                      "(nngauge.measures.generalization)",
    "curvature": "the loss surface: Hessian, landscapes (nngauge.measures.curvature)",
    "saliency": "zero-cost proxies from loss gradients: saliencies and their statistics "
                "(nngauge.proxies)",
    "activation": "zero-cost proxies from activation statistics (nngauge.proxies)",
    "te-nas": "TE-NAS's indicators (nngauge.proxies)",
    "cost": "cost baselines (nngauge.proxies)",
    "predictor": "nngauge's own predictors, one number per network (nngauge.proxies)",
}
"""Family -> what it holds."""

_EMPTY: Mapping[str, Any] = MappingProxyType({})


class DataSize:
    """A Tracker option's value meaning "the number of samples of the measure's data at that
    step" (use the one instance, :data:`DATA_SIZE`): ``{"batch_size": DATA_SIZE}`` reads the
    step's whole batch as one batch, whatever its size (250 for data without a length)."""

    def __repr__(self) -> str:
        return "len(data)"


DATA_SIZE = DataSize()
"""The Tracker option value "as many as the measure's data has samples" (see :class:`DataSize`)."""


@dataclass(frozen=True)
class FirstProbes:
    """A Tracker option's value meaning "the first ``n`` of the Tracker's probe points": the
    points a measure whose cost grows with them reads when the Tracker feeds them
    (``{"data": FirstProbes(8)}``); a ``data=`` the user gives replaces it whole."""

    n: int

    def __repr__(self) -> str:
        return f"P[:{self.n}]"


@dataclass(frozen=True)
class Entry:
    """One public measure or proxy.

    Attributes:
        name: the function's name (``nngauge.<name>`` for a measure,
            ``nngauge.proxies.<name>`` for a proxy); unique within its kind.
        kind: "measure" (returns a result with a breakdown) or "proxy" (one float per
            network, for ranking architectures).
        family: one of :data:`FAMILIES`.
        reads: what the measure reads, one of :data:`READS`: the argument after ``model``
            (``data``; ``x0`` and ``x1`` for a segment; ``trajectory``; ``plane``; none for
            the weights).
        labels: whether it needs labels (in ``data`` or ``labels=``).
        trained: whether it is a statement about a trained network (margins, sharpness, ...);
            it runs at initialization all the same.
        initial: whether it reads the same network at initialization, ``initial_model=``
            (distance from initialization, Jiang et al.'s measures "from init"): the Tracker
            gives it the network it was built with (``Tracker(initial_model=...)``, else a copy
            of the model as it first sees it), a study the unit's network before training, the
            conformance matrix the zoo network built with another seed.
        per_point: whether the output for a point must not depend on the rest of its batch
            (the measure refuses batchnorm with batch statistics): the Tracker runs it with
            ``norm_mode="eval"``, the conformance matrix with ``norm_mode="frozen"`` on
            networks whose batchnorm uses batch statistics.
        result: the name of the result class (in :mod:`nngauge`), or None for a float
            (proxies, ``path_norm``) or a module (``fold_batchnorm``).
        headline: the result's summary fields, most important first: fields of the result
            class, or of its per-layer rows (e.g. ``nlc_profile``'s ``nlc``); for a float, its
            name.
        cheap: keyword options for a quick run on a small network (conformance, tests,
            documentation examples): seconds, not minutes.
        variants: named alternative option sets that change what is measured (e.g. the NTK
            instead of the conjugate kernel), each a cell of the conformance matrix.
        requires: the keyword options without a default, which every caller gives (e.g.
            ``layer``); the Tracker refuses the measure without them unless ``track`` gives
            them.
        paper: (citation key of :mod:`nngauge._citations`, section or figure).
        track: options the Tracker uses by default besides ``per_point``'s norm mode (its
            settings for a measurement every few steps: lighter than the function's
            defaults; :data:`DATA_SIZE` for "as many as the step's data has"), or None where
            the Tracker does not take it (proxies; ``fold_batchnorm`` returns a module).
        columns: study column -> what a study records there: the result's field, or the
            float a proxy returns (its name), or ``"variant:field"``, the field of the result
            the function gives with that variant's options (the study calls the function once
            per variant its columns name; e.g. flatness's four searches); empty: a study does
            not take it under this name (it takes the proxy of the same name, or the measure
            whose column it is).
    """

    name: str
    kind: Kind
    family: str
    reads: Reads
    result: Optional[str]
    headline: tuple[str, ...]
    paper: tuple[str, str]
    labels: bool = False
    trained: bool = False
    initial: bool = False
    per_point: bool = False
    cheap: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)
    variants: Mapping[str, Mapping[str, Any]] = field(default_factory=lambda: _EMPTY)
    requires: tuple[str, ...] = ()
    track: Optional[Mapping[str, Any]] = field(default_factory=lambda: _EMPTY)
    columns: Mapping[str, str] = field(default_factory=lambda: _EMPTY)

    @property
    def module(self) -> str:
        """The public module holding the function."""
        return "nngauge.measures" if self.kind == "measure" else "nngauge.proxies"

    @property
    def qualified_name(self) -> str:
        """How a user calls it: ``nngauge.nlc``, ``nngauge.proxies.synflow``."""
        return f"nngauge.{self.name}" if self.kind == "measure" else f"{self.module}.{self.name}"

    @property
    def function(self) -> Callable[..., Any]:
        """The function (its module imported on first use)."""
        return getattr(import_module(self.module), self.name)

    @property
    def citation(self) -> str:
        """The paper and section, in full."""
        return cite(*self.paper)

    @property
    def short_citation(self) -> str:
        """The paper (authors, venue) and section."""
        return short(*self.paper)

    @property
    def tracker_options(self) -> Optional[dict[str, Any]]:
        """The options a Tracker runs it with by default: ``norm_mode="eval"`` for a per-point
        measure, then ``track``; None where the Tracker does not take it."""
        if self.track is None:
            return None
        return {**({"norm_mode": "eval"} if self.per_point else {}), **self.track}

    def column_sources(self) -> dict[Optional[str], dict[str, str]]:
        """The study columns grouped by the variant whose result holds them (None: the
        function's own defaults): variant -> {column: field}."""
        groups: dict[Optional[str], dict[str, str]] = {}
        for column, source in self.columns.items():
            variant, _, name = source.rpartition(":")
            groups.setdefault(variant or None, {})[column] = name
        return groups

    def options(self, variant: Optional[str] = None) -> dict[str, Any]:
        """The cheap options, with ``variant``'s on top."""
        if variant is None:
            return dict(self.cheap)
        if variant not in self.variants:
            raise UnknownNameError(
                f"catalogue entry {self.name!r} expected a variant in {sorted(self.variants)}; "
                f"got {variant!r}. Fix: use one of those, or None for the cheap options.")
        return {**self.cheap, **self.variants[variant]}


def _measure(name: str, family: str, reads: Reads, result: Optional[str],
             headline: tuple[str, ...], paper: tuple[str, str], **extra: Any) -> Entry:
    return Entry(name, "measure", family, reads, result, headline, paper, **_frozen(extra))


def _proxy(name: str, family: str, paper: tuple[str, str], *, reads: Reads = "batch",
           study: bool = True, **extra: Any) -> Entry:
    """A proxy: one float, not tracked; a study column of its name unless ``study`` is False
    (a study records that number through the measure whose column it is)."""
    columns = {name: name} if study else {}
    return Entry(name, "proxy", family, reads, None, (name,), paper,
                 **_frozen({"track": None, "columns": columns, **extra}))


def _frozen(extra: dict[str, Any]) -> dict[str, Any]:
    """Mapping options as read-only mappings (an Entry is immutable)."""
    out = dict(extra)
    for key in ("cheap", "track", "columns"):
        if isinstance(out.get(key), dict):
            out[key] = MappingProxyType(out[key])
    if isinstance(out.get("variants"), dict):
        out["variants"] = MappingProxyType({k: MappingProxyType(v)
                                            for k, v in out["variants"].items()})
    return out


_WHOLE_BATCH = {"batch_size": DATA_SIZE}
"""The Tracker's option for the NLC-paper measures: the step's data as one batch."""
_ONE_BATCH = {"batch_size": DATA_SIZE, "n_batches": 1}
"""The Tracker's option for the region sizes (E.1, E.3): one batch, the step's data (the
functions' defaults read ten batches of 250)."""

ENTRIES: tuple[Entry, ...] = (
    # ------------------------------------------------------------------ propagation
    _measure("nlc", "propagation", "batch", "NLCResult", ("nlc", "output_bias"),
             ("nlc", "Definition 1, section G"), cheap={"batch_size": 8}, track=_WHOLE_BATCH,
             columns={"nlc": "nlc", "output_bias": "output_bias"}),
    _measure("nlc_profile", "propagation", "batch", "NLCProfile", ("nlc",),
             ("nlc", "Definition 1, section G"), cheap={"batch_size": 8}, track=_WHOLE_BATCH),
    _measure("gradient_metrics", "propagation", "batch", "GradientMetrics",
             ("gvcs", "gradient_length", "lipschitz"), ("nlc", "section 6"), labels=True,
             cheap={"batch_size": 8, "n_iter": 5}, track=_WHOLE_BATCH,
             columns={"gvcs": "gvcs", "gradient_length": "gradient_length",
                      "lipschitz": "lipschitz"}),
    _measure("jacobian_norm", "propagation", "batch", "JacobianNormResult",
             ("norm", "median", "max"), ("shrinkage", "section 3, Theorem 1"),
             cheap={"batch_size": 8, "n_iter": 5}, track=_WHOLE_BATCH,
             columns={"jacobian_norm": "norm"}),
    _measure("correlations", "propagation", "points", "CorrelationResult", ("rho_max",),
             ("shrinkage", "Theorem 1, section 3"), cheap={"max_samples": 8},
             columns={"rho_max": "rho_max",
                      "rho_max_before_pooling": "rho_max_before_pooling"}),
    _measure("kernel_conditioning", "propagation", "points", "KernelConditioning",
             ("condition_number", "mean_normalized_dot_product"),
             ("conditioning", "section 3, figure 1"), cheap={"max_samples": 8},
             variants={"ntk": {"kind": "ntk", "max_samples": 6, "layers": [], "n_probes": 2}},
             columns={"kernel_condition_number": "condition_number"}),
    _measure("linear_region_diameter", "propagation", "batch", "RegionSize", ("median",),
             ("nlc", "appendix E.1, figure 1"),
             cheap={"batch_size": 8, "n_batches": 1, "n_input_directions": 2,
                    "n_output_directions": 2, "k_max": 10.0}, track=_ONE_BATCH),
    _measure("error_preserving_perturbation", "propagation", "batch", "RegionSize",
             ("median",), ("nlc", "appendix E.3"), labels=True, trained=True,
             cheap={"batch_size": 8, "n_batches": 1, "n_input_directions": 2, "k_max": 10.0},
             track=_ONE_BATCH, columns={"error_preserving_perturbation": "median"}),
    _measure("skim", "propagation", "batch", "SkimResult", ("deviation",),
             ("shrinkage", "section 4.2"), per_point=True, requires=("layers",)),
    # ------------------------------------------------------------------ expressivity
    _measure("trajectory_length", "expressivity", "trajectory", "TrajectoryLengthResult",
             ("lengths", "growth"), ("expressivity", "section 2.2, Theorem 3"),
             per_point=True, cheap={"max_points": 65}),
    _measure("transitions", "expressivity", "segment", "TransitionsResult",
             ("n_patterns", "n_transitions"), ("expressivity", "section 2.1, Corollary 1"),
             per_point=True,
             variants={"sampled": {"method": "sampled", "n_initial": 65,
                                   "max_evaluations": 1024}}),
    _measure("activation_patterns", "expressivity", "points", "ActivationPatternsResult",
             ("n_patterns",), ("expressivity", "section 2.1"), per_point=True),
    _measure("region_density", "expressivity", "points", "RegionDensityResult",
             ("density", "local_complexity"), ("hanin-rolnick", "Theorem 1"), per_point=True,
             cheap={"max_samples": 4, "radius": 0.5, "n_directions": 2,
                    "neighbourhood_dims": 4, "max_evaluations": 256},
             track={"data": FirstProbes(8)}),
    _measure("regions", "expressivity", "plane", "RegionsResult", ("n_regions",),
             ("expressivity", "section 2.1, Theorem 2, figure 1"), per_point=True,
             cheap={"bounds": (0.0, 0.01, 0.0, 0.01), "max_regions": 4096, "resolution": 32}),
    _measure("dichotomies", "expressivity", "points", "DichotomiesResult",
             ("n_dichotomies",), ("expressivity", "appendix B.3, figures 14-16"),
             cheap={"resolution": 16}, requires=("layer",)),
    _measure("weight_noise_robustness", "expressivity", "batch", "WeightNoiseResult",
             ("clean_accuracy",), ("expressivity", "section 3.1, figure 6"), labels=True,
             trained=True, cheap={"noise_levels": (0.0, 0.1), "n_repeats": 1}),
    # ------------------------------------------------------------------ generalization
    _measure("margin", "generalization", "batch", "MarginResult",
             ("margin", "hard_margin", "train_error"), ("generalization", "section 2.2, eq. 2"),
             labels=True, trained=True),
    _measure("path_norm", "generalization", "weights", None, ("path_norm",),
             ("generalization", "section 2.2"), cheap={"p": 2}, trained=True),
    _measure("capacity", "generalization", "batch", "CapacityResult",
             ("l2", "l1_path", "l2_path", "spectral"), ("generalization", "sections 2.2-2.3"),
             labels=True, trained=True),
    _measure("fold_batchnorm", "generalization", "weights", None, (),
             ("generalization", "appendix A"), track=None),
    _measure("sharpness", "generalization", "batch", "SharpnessResult", ("sharpness",),
             ("generalization", "section 2.4, eq. 4 (after Keskar et al.)"), labels=True,
             trained=True,
             cheap={"n_iter": 3, "batch_size": 4}, track={"n_iter": 100}),
    _measure("expected_sharpness", "generalization", "batch", "ExpectedSharpnessResult",
             ("expected_sharpness", "kl"), ("generalization", "section 2.4, eq. 5-6"),
             labels=True, trained=True, requires=("alpha",),
             cheap={"alpha": 1e-3, "n_probes": 4, "batch_size": 4},
             track={"alpha": 1e-3, "n_probes": 100}),
    _measure("pac_bayes", "generalization", "batch", "PACBayesResult",
             ("best_bound", "best_alpha"), ("generalization", "section 2.4, eq. 5-6, figure 2"),
             labels=True, trained=True, requires=("alphas",),
             cheap={"alphas": (1e-3,), "n_probes": 4, "batch_size": 4},
             track={"alphas": (1e-3, 3e-3, 1e-2), "n_probes": 100}),
    _measure("sharpness_conditions", "generalization", "batch", "ConditionsResult",
             ("mu", "condition_number", "c2", "c3"), ("generalization", "section 4, Theorem 1"),
             trained=True, cheap={"max_samples": 4}),
    _measure("layer_spectra", "generalization", "weights", "LayerSpectra",
             ("alpha", "alpha_weighted", "log_spectral_norm", "stable_rank"),
             ("martin-mahoney-trends", "the power-law and norm metrics (after Martin & Mahoney, "
              "JMLR 2021, sections 2-3)"), trained=True, cheap={"min_eigenvalues": 4},
             columns={"alpha": "alpha", "alpha_weighted": "alpha_weighted",
                      "log_spectral_norm": "log_spectral_norm", "log_norm": "log_norm",
                      "log_alpha_norm": "log_alpha_norm", "stable_rank": "stable_rank",
                      "mp_soft_rank": "mp_soft_rank"}),
    # Jiang et al., "Fantastic Generalization Measures and Where to Find Them" (ICLR 2020)
    _measure("distance_from_init", "generalization", "weights", "DistanceResult",
             ("total", "frobenius"), ("fantastic", "appendix C.2, eq. 40-41"), trained=True,
             initial=True, columns={"distance_from_init": "total"}),
    _measure("norm_measures", "generalization", "batch", "NormMeasures",
             ("log_prod_spectral_over_margin", "spectral"),
             ("fantastic", "appendix C.1-C.2, eq. 20-45"), labels=True, trained=True,
             initial=True, columns={name: name for name in (
                 "inverse_margin", "log_spectral_init", "log_spectral_orig",
                 "log_prod_spectral_over_margin", "log_prod_spectral", "frobenius_over_spectral",
                 "log_sum_spectral_over_margin", "log_sum_spectral",
                 "log_prod_frobenius_over_margin", "log_prod_frobenius",
                 "log_sum_frobenius_over_margin", "log_sum_frobenius", "frobenius_distance",
                 "spectral_distance", "parameter_norm", "path_norm_over_margin", "path_norm",
                 "fisher_rao")}),
    _measure("flatness", "generalization", "batch", "FlatnessResult",
             ("flatness", "sigma", "bound_init"),
             ("fantastic", "appendix C.3, eq. 48-62, Algorithms 1-2"), labels=True,
             trained=True, initial=True,
             cheap={"n_probes": 2, "n_iter": 3, "ascent_iter": 2, "batch_size": 8},
             variants={"magnitude": {"magnitude": True}, "sharpness": {"kind": "sharpness"},
                       "sharpness_magnitude": {"kind": "sharpness", "magnitude": True}},
             track={"n_iter": 10},
             columns={f"{prefix}_{column}": f"{variant}{field}"
                      for prefix, variant in (("pacbayes", ""), ("pacbayes_mag", "magnitude:"),
                                              ("sharpness", "sharpness:"),
                                              ("sharpness_mag", "sharpness_magnitude:"))
                      for column, field in (("init", "bound_init"), ("orig", "bound_orig"),
                                            ("flatness", "flatness"))}),
    _measure("gradient_noise", "generalization", "batch", "GradientNoiseResult",
             ("noise", "mean_gradient_norm"), ("fantastic", "appendix C.4"), labels=True,
             trained=True, cheap={"batch_size": 2}, track={"batch_size": 8},
             columns={"gradient_noise": "noise"}),
    # ------------------------------------------------------------------ curvature
    _measure("hessian", "curvature", "batch", "HessianResult", ("eigenvalues", "trace"),
             ("pyhessian", "section 3"), labels=True, trained=True,
             cheap={"trace": False, "batch_size": 4, "n_batches": 1, "n_iter": 2}),
    _measure("loss_landscape", "curvature", "batch", "LossLandscapeResult",
             ("center_loss", "min_loss"), ("li-landscape", "section 4"), labels=True,
             trained=True, cheap={"resolution": (3, 3), "span": 0.1},
             variants={"regions": {"dims": 1, "resolution": 5, "count_regions": True}},
             track={"dims": 1, "resolution": 21}),
    _measure("weight_transitions", "curvature", "batch", "WeightTransitionsResult",
             ("n_changes", "mean_per_sample"), ("expressivity", "Theorem 2 (weight space)"),
             per_point=True, cheap={"span": (-1e-4, 1e-4), "max_pieces": 4096},
             requires=("layer", "direction")),
    # ------------------------------------------------------------------ proxies
    _proxy("synflow", "saliency", ("synflow", "section 6, Algorithm 1")),
    _proxy("snip", "saliency", ("snip", "section 4.1"), labels=True, cheap={"batch_size": 8}),
    _proxy("grasp", "saliency", ("grasp", "section 4, eq. 8"), labels=True,
           cheap={"batch_size": 8}),
    _proxy("grad_norm", "saliency", ("zero-cost", "section 3"), labels=True,
           cheap={"batch_size": 8}),
    _proxy("fisher", "saliency", ("fisher-pruning", "section 2.1"), labels=True,
           cheap={"batch_size": 8}),
    _proxy("jacob_cov", "activation", ("jacob-cov", "section 3"), cheap={"batch_size": 8}),
    _proxy("naswot", "activation", ("naswot", "section 3, eq. 2"), cheap={"batch_size": 8}),
    _proxy("swap", "activation", ("swap", "section 3"), cheap={"batch_size": 8}),
    _proxy("te_nas", "te-nas", ("te-nas", "section 3.1.1"), cheap={"batch_size": 8}),
    _proxy("te_nas_regions", "te-nas", ("te-nas", "section 3.1.2"), reads="points",
           cheap={"resolution": 8}),
    # the newer zero-cost proxies (issue 33)
    _proxy("zico", "saliency", ("zico", "section 3.3"), labels=True, cheap={"batch_size": 4}),
    _proxy("meco", "activation", ("meco", "section 4"), cheap={"batch_size": 2}),
    _proxy("meco_opt", "activation", ("meco", "section 4"), cheap={"batch_size": 2}),
    _proxy("zen_score", "activation", ("zen-nas", "section 4, Algorithm 1"),
           cheap={"batch_size": 8}),
    _proxy("n_params", "cost", ("zero-cost", "section 4"), reads="weights"),
    _proxy("flops", "cost", ("zero-cost", "section 4")),
    _proxy("nlc_score", "predictor", ("nlc", "Definition 1, section 4"),
           cheap={"batch_size": 8}, study=False),
    _proxy("output_bias", "predictor", ("nlc", "section 4, figure 3A"),
           cheap={"batch_size": 8}, study=False),
    _proxy("nlc_rule", "predictor", ("nlc", "section 4, figure 2"), cheap={"batch_size": 8}),
    _proxy("jacobian_growth", "predictor", ("shrinkage", "section 3, Theorem 1"),
           cheap={"batch_size": 8, "n_iter": 5}),
    _proxy("rho_max", "predictor", ("shrinkage", "Theorem 1, section 3"), reads="points",
           cheap={"max_samples": 8}, study=False),
    _proxy("kernel_condition", "predictor", ("conditioning", "section 3, figure 1"),
           reads="points", cheap={"max_samples": 8}),
    _proxy("trajectory_growth", "predictor", ("expressivity", "section 2.2, Theorem 3"),
           reads="points", cheap={"max_samples": 3, "resolution": 64, "max_points": 65}),
    _proxy("region_density", "predictor", ("hanin-rolnick", "Theorem 1"), reads="points",
           cheap={"max_samples": 2, "n_directions": 2}),
)
"""Every public measure and proxy, measures first, in the order of their families. The
proxies nlc_score, output_bias and rho_max have no study column of their own: a study records
those numbers through the measures nlc (columns nlc, output_bias) and correlations (rho_max)."""


@dataclass(frozen=True)
class Catalogue:
    """The entries, looked up by name (``catalogue()["nlc"]``; a name both a measure and a
    proxy have, e.g. ``"region_density"``, gives the measure: ask ``proxy(name)`` for the
    other)."""

    entries: tuple[Entry, ...] = field(default=ENTRIES)

    def __iter__(self) -> Iterator[Entry]:
        return iter(self.entries)

    def __len__(self) -> int:
        return len(self.entries)

    def __contains__(self, name: object) -> bool:
        return any(e.name == name for e in self.entries)

    def __getitem__(self, name: str) -> Entry:
        for entry in self.measures() + self.proxies():
            if entry.name == name:
                return entry
        raise UnknownNameError(
            f"catalogue expected a measure or proxy name; got {name!r}. Fix: use one of "
            f"{sorted(self.names())}.")

    def measure(self, name: str) -> Entry:
        """The measure ``name``."""
        return self._of_kind(name, "measure")

    def proxy(self, name: str) -> Entry:
        """The proxy ``name``."""
        return self._of_kind(name, "proxy")

    def _of_kind(self, name: str, kind: Kind) -> Entry:
        for entry in self.entries:
            if entry.name == name and entry.kind == kind:
                return entry
        raise UnknownNameError(
            f"catalogue expected a {kind} name; got {name!r}. Fix: use one of "
            f"{sorted(e.name for e in self.entries if e.kind == kind)}.")

    def measures(self) -> tuple[Entry, ...]:
        """The measures (results with breakdowns), in catalogue order."""
        return tuple(e for e in self.entries if e.kind == "measure")

    def proxies(self) -> tuple[Entry, ...]:
        """The proxies (one float per network), in catalogue order."""
        return tuple(e for e in self.entries if e.kind == "proxy")

    def names(self) -> set[str]:
        """Every entry's name."""
        return {e.name for e in self.entries}

    def family(self, family: str) -> tuple[Entry, ...]:
        """The entries of one family (see :data:`FAMILIES`)."""
        if family not in FAMILIES:
            raise UnknownNameError(
                f"catalogue expected a family in {sorted(FAMILIES)}; got {family!r}. Fix: "
                "use one of those.")
        return tuple(e for e in self.entries if e.family == family)


def catalogue() -> Catalogue:
    """Every public measure and proxy of nngauge: what it reads, returns and cites.

    Returns:
        The :class:`Catalogue` of :class:`Entry` records (``catalogue()["nlc"].function``
        is :func:`nngauge.nlc`).

    Example:
        >>> [e.name for e in catalogue().family("curvature")]
        ['hessian', 'loss_landscape', 'weight_transitions']
    """
    return _CATALOGUE


_CATALOGUE = Catalogue()

__all__ = ["Catalogue", "DATA_SIZE", "DataSize", "ENTRIES", "Entry", "FAMILIES", "READS",
           "catalogue"]
