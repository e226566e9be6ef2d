"""The study spec: a TOML file validated into frozen dataclasses.

A study (NLC paper sections 3-4, appendix E.2, figure 2) instantiates architectures, measures
each at initialization, trains each with a grid of starting learning rates, and correlates the
measures with the test error of the best run. The spec says which data, architectures,
measures, training protocol, learning rates and seeds::

    name = "small"
    seed = 0                        # data, split, preprocessing, architecture sampling
    seeds = [0]                     # initializations per architecture (replicates)
    dtype = "float32"               # of the networks; the paper trained in float64

    [data]
    source = "waveform"             # waveform | mnist1d | digits | gaussian:d=100 | file.npz
    n = 300                         # samples of generated data sets (optional)
    split = [0.6, 0.2, 0.2]         # train / validation / test fractions
    preprocess = "standardize"      # none | standardize | pca  (NLC paper D.2)

    [architectures]
    family = "mlp"                  # mlp | cnn (small CNNs on flat images, nngauge.nn.cnn)
    image_shape = [1, 8, 8]         # (C, H, W) of the flat inputs; cnn only (digits' shape)
    sample = 6                      # architectures from nngauge.nn.sample_architecture
                                    # (sample_cnn for family cnn)
    overrides = {}                  # keyword arguments of the sampler
    explicit = [{width = 16, depth = 3, activation = "tanh"}]   # nngauge.nn.mlp (or cnn)
                                                                # keywords

    [measures]
    names = ["nlc", "jacobian_norm"]   # or proxies: "synflow", "naswot", "n_params", ...

    [measures.options.jacobian_norm]   # keyword options of a measure's function, for every
    n_iter = 10                        # run of it (at initialization and after training)

    [training]
    enabled = true
    lrs = [0.1, 0.3]                # or lr_start, lr_factor, n_lrs: a geometric grid;
                                    # lr_start = "auto": the paper's E.2 heuristic per
                                    # network (smallest_lr with lr_scale, default 1e-8)
    max_epochs = 5
    measure_after = ["nlc"]         # measures of each trained network (columns nlc_after,
                                    # output_bias_after; NLC paper figures 3B-C, 9)

A model zoo (Jiang et al. 2020, section 4; :mod:`nngauge.studies._grid`) replaces
``[architectures]`` by ``[grid]``, one network per point of a hyperparameter grid, each trained
once per seed to a target training loss::

    [data]
    source = "mnist1d"
    split = [0.8, 0.2]              # train / test (a zoo needs no validation split)

    [grid]                          # each a list of values, or one fixed value
    family = ["mlp", "cnn", "resnet"]
    depth = [2, 4]                  # hidden layers / convolutional blocks
    width = [16, 32]                # units / channels
    batch_norm = false
    dropout = [0.0, 0.25]
    weight_decay = [0.0, 0.0005]
    lr = [0.01, 0.05]
    batch_size = [32, 128]
    train_size = 1000               # default: the whole training split
    label_noise = 0.0
    optimizer = "momentum"          # momentum | sgd | adam
    sample = 0                      # 0: the full product; N: a seeded subset of >= N networks

    [measures]
    names = ["n_params"]            # at initialization

    [training]                      # the zoo's protocol (nngauge.training.fit, target_loss)
    target_loss = 0.01              # stop at this training-set cross-entropy (Jiang's 0.01)
    max_steps = 2000                # ... or after this many optimizer steps
    momentum = 0.9                  # of optimizer = "momentum"
    loss_scaling = false
    measure_after = ["nlc"]         # columns nlc_after, ...
    keep_weights = true             # initial and final state_dicts in the database
"""

from __future__ import annotations

import dataclasses
import hashlib
import inspect
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, Union

from nngauge._catalogue import Entry, catalogue
from nngauge._numbers import is_finite
from nngauge.errors import InvalidInputError, MissingDependencyError, UnknownNameError

if TYPE_CHECKING:
    from nngauge.studies._builder import BuilderSpec
    from nngauge.studies._grid import GridSpec


def _study_entries() -> dict[str, Entry]:
    """Name -> the catalogue entry a study runs under that name: every entry with study
    columns, the proxy where a measure and a proxy share the name (``region_density``: the
    proxy's one number, not the measure's breakdown)."""
    entries = {}
    for entry in catalogue().measures() + catalogue().proxies():  # proxies last: they win
        if entry.columns:
            entries[entry.name] = entry
    return entries


ENTRIES = _study_entries()
"""Name -> the catalogue entry (:func:`nngauge.catalogue`) a study takes under that name."""
MEASURES: dict[str, tuple[str, ...]] = {name: tuple(entry.columns)
                                        for name, entry in ENTRIES.items()}
"""Measures a study can take (at initialization, or of each trained network with
``training.measure_after``) -> the scalar columns each one records: the catalogue's entries
with study columns (``entry.columns``)."""
PROXIES = tuple(name for name, entry in ENTRIES.items() if entry.kind == "proxy")
"""The predictors of :mod:`nngauge.proxies` a study can take at initialization, each into the
column of its name (zero-cost proxies, cost baselines and nngauge's own predictors; those whose
number a measure's column records, nlc_score, output_bias and rho_max, are taken through the
measures nlc and correlations)."""

AFTER = "_after"
"""Suffix of the columns a measure records of a trained network (``nlc_after``)."""
STUDY_COLUMNS = tuple(dict.fromkeys(column + after for after in ("", AFTER)
                                    for columns in MEASURES.values() for column in columns))
"""Every column a study's measures can write, at initialization then after training, in the
catalogue's order."""


def ordered_columns(names) -> list[str]:
    """The measure columns ``names`` in :data:`STUDY_COLUMNS` order (others last, by name)."""
    position = {column: i for i, column in enumerate(STUDY_COLUMNS)}
    return sorted(set(names), key=lambda c: (position.get(c, len(position)), c))

PREPROCESSING = ("none", "standardize", "pca")
DTYPES = ("float32", "float64")
OPTIMIZERS = ("sgd", "adam")
MLP_KEYS = ("width", "depth", "activation", "norm", "skip", "skip_start", "init", "sigma_w",
            "bias_std", "scale")
CNN_KEYS = ("width", "depth", "activation", "norm", "skip", "pool_after", "init", "sigma_w",
            "bias_std", "scale")
"""Keywords of an explicit architecture, per family (d_in, d_out come from the data)."""
FAMILIES = {"mlp": MLP_KEYS, "cnn": CNN_KEYS}
DEFAULT_IMAGE_SHAPE = (1, 8, 8)
TRAINING_KEYS = ("enabled", "lrs", "lr_start", "lr_factor", "n_lrs", "lr_scale", "optimizer",
                 "batch_size", "max_epochs", "patience", "decay_patience", "n_decays",
                 "loss_scaling", "measure_after")
"""The ``[training]`` fields of a study of ``[architectures]``."""
MEASURES_KEYS = ("names", "batch_size", "options")
"""The ``[measures]`` fields."""
GRID_TRAINING = ("target_loss", "max_steps", "momentum", "keep_weights")
"""The ``[training]`` fields only a ``[grid]`` study has."""
GRID_TRAINING_KEYS = ("loss_scaling", "measure_after", *GRID_TRAINING)
"""The ``[training]`` fields of a ``[grid]`` study (the rest of its protocol is in the grid)."""
DEFAULT_TARGET_LOSS = 0.01
DEFAULT_MAX_STEPS = 2000


@dataclass(frozen=True)
class DataSpec:
    """Where the data come from and how they are split and preprocessed."""

    source: str = "waveform"
    n: Optional[int] = None
    split: tuple[float, ...] = (0.6, 0.2, 0.2)
    """(train, validation, test) fractions, or (train, test) in a ``[grid]`` study."""
    preprocess: str = "standardize"


@dataclass(frozen=True)
class ArchitectureSpec:
    """``sample`` architectures from the NLC sampler (with ``overrides``) plus ``explicit``
    ones, each a mapping of :func:`nngauge.nn.mlp` keywords (d_in, d_out come from the data);
    with ``family = "cnn"``, :func:`nngauge.nn.sample_cnn` and :func:`nngauge.nn.cnn` on
    inputs reshaped to ``image_shape``."""

    sample: int = 0
    overrides: tuple[tuple[str, Any], ...] = ()
    explicit: tuple[tuple[tuple[str, Any], ...], ...] = ()
    family: str = "mlp"
    image_shape: tuple[int, int, int] = DEFAULT_IMAGE_SHAPE

    @property
    def count(self) -> int:
        return self.sample + len(self.explicit)


@dataclass(frozen=True)
class MeasureSpec:
    """Measures taken at initialization on the training inputs (the paper: NLC and bias)."""

    names: tuple[str, ...] = ("nlc",)
    batch_size: int = 250
    options: tuple[tuple[str, tuple[tuple[str, Any], ...]], ...] = ()
    """Keyword options of measures' functions, by study name, sorted (``[measures.options.
    flatness] n_iter = 8``): every run of that measure, at initialization and after training,
    takes them on top of the study's own. Empty: each function's defaults."""

    def options_of(self) -> dict[str, dict[str, Any]]:
        """The options as ``{measure name: {keyword: value}}``."""
        return {name: dict(pairs) for name, pairs in self.options}


@dataclass(frozen=True)
class TrainingSpec:
    """The training protocol (:func:`nngauge.training.fit`) and the learning-rate grid."""

    enabled: bool = True
    lrs: tuple[float, ...] = (0.1,)
    auto_lr: Optional[tuple[float, int, float]] = None
    """(factor, n_lrs, scale) when lr_start = "auto": rates smallest_lr * factor**i, i < n_lrs,
    the smallest rate computed per initialized network (NLC paper E.2); ``lrs`` is then ()."""
    optimizer: str = "sgd"
    batch_size: int = 250
    max_epochs: Optional[int] = None
    patience: int = 10
    decay_patience: int = 5
    n_decays: int = 10
    loss_scaling: bool = True
    measure_after: tuple[str, ...] = ()
    """Measures taken of each trained network (its best weights), as at initialization, into
    the columns ``<column>_after`` (the NLC paper's "NLC after training", figures 3B-C, 9)."""
    target_loss: Optional[float] = None
    """``[grid]`` studies: training stops once the training set's cross-entropy is at most
    this (:func:`nngauge.training.fit`'s ``target_loss``; Jiang et al.'s 0.01)."""
    max_steps: Optional[int] = None
    """``[grid]`` studies: ... or after this many optimizer steps."""
    momentum: float = 0.0
    """``[grid]`` studies: the momentum of the optimizer "momentum" (default 0.9)."""
    keep_weights: bool = False
    """``[grid]`` studies: store each network's initial and final ``state_dict`` (default
    true), for :func:`nngauge.studies.load_network`."""


@dataclass(frozen=True)
class StudySpec:
    """A validated study spec; see the module docstring for the TOML layout."""

    name: str
    seed: int = 0
    seeds: tuple[int, ...] = (0,)
    dtype: str = "float32"
    data: DataSpec = field(default_factory=DataSpec)
    architectures: ArchitectureSpec = field(default_factory=ArchitectureSpec)
    measures: MeasureSpec = field(default_factory=MeasureSpec)
    training: TrainingSpec = field(default_factory=TrainingSpec)
    grid: Optional[GridSpec] = None
    """The hyperparameter grid of a model zoo (:mod:`nngauge.studies._grid`); None for a study
    of ``[architectures]``."""
    builder: Optional[BuilderSpec] = None
    """A study over the user's builder function (:mod:`nngauge.studies._builder`); None
    otherwise."""

    def to_dict(self) -> dict:
        """Plain JSON-ready content (tuples of pairs become mappings again)."""
        out = dataclasses.asdict(self)
        if self.measures.options:
            out["measures"]["options"] = self.measures.options_of()
        else:  # as before measure options: the ids of studies without them unchanged
            del out["measures"]["options"]
        if self.builder is None:  # as before builders: the ids of other studies unchanged
            del out["builder"]
        else:
            del out["architectures"]
        if self.grid is None:  # as before grids: the ids of other studies unchanged
            del out["grid"]
            for key in GRID_TRAINING:
                del out["training"][key]
        else:
            out["grid"] = {"sample": self.grid.sample,
                           **{name: list(values) for name, values in self.grid.axes}}
        if self.builder is not None:
            return out
        arch = out["architectures"]
        arch["overrides"] = dict(self.architectures.overrides)
        arch["explicit"] = [dict(entry) for entry in self.architectures.explicit]
        if self.architectures.family == "mlp":  # as before families: MLP study ids unchanged
            del arch["family"], arch["image_shape"]
        else:
            arch["image_shape"] = list(self.architectures.image_shape)
        return out

    @property
    def study_id(self) -> str:
        """Hash of everything that changes results (all but ``name``): same spec, same id."""
        content = {k: v for k, v in self.to_dict().items() if k != "name"}
        return hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()[:16]


def load_spec(path: Union[str, Path]) -> StudySpec:
    """Read and validate a study spec: a TOML file, or the same tables as a JSON object in a
    ``.json`` file.

    Raises:
        InvalidInputError / UnknownNameError: one line naming the bad field and the valid
        choices; nothing is run or written.

    Example:
        >>> import os, tempfile
        >>> path = os.path.join(tempfile.mkdtemp(), "s.toml")
        >>> _ = open(path, "w").write('[architectures]\\nexplicit = [{width = 8, depth = 2}]')
        >>> spec = load_spec(path)
        >>> spec.name, spec.architectures.count, spec.measures.names
        ('s', 1, ('nlc',))
    """
    path = Path(path)
    where = "study spec"
    kind = "JSON" if path.suffix == ".json" else "TOML"
    if not path.is_file():
        raise InvalidInputError(f"{where} expected an existing {kind} file; got {str(path)!r} "
                                "(not found). Fix: check the path, e.g. examples/study_small.toml.")
    if kind == "JSON":
        loads, error = json.loads, json.JSONDecodeError
    else:
        toml = _toml()
        loads, error = toml.loads, toml.TOMLDecodeError
    try:
        raw = loads(path.read_text(encoding="utf-8"))
    except (error, UnicodeDecodeError) as exc:
        raise InvalidInputError(f"{where} expected valid {kind} in {path}; got a parse error: "
                                f"{exc}. Fix: correct the syntax.") from None
    return parse_spec(raw, default_name=path.stem)


def parse_spec(raw: dict, *, default_name: str = "study") -> StudySpec:
    """Validate a spec given as a mapping (the parsed TOML) into a :class:`StudySpec`.

    Example:
        >>> parse_spec({"measures": {"names": ["nlc", "rho"]}})  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        nngauge.errors.UnknownNameError: study spec field measures.names expected names from ['correlations', ..., 'nlc', ...]; got 'rho'. Fix: use one of those.
    """
    top = _Table(raw, "", ("name", "seed", "seeds", "dtype", "data", "architectures",
                           "measures", "training", "grid"))
    if isinstance(raw.get("architectures"), dict) and "builder" in raw["architectures"]:
        from nngauge.studies._builder import parse_builder_spec

        return parse_builder_spec(top, default_name)
    if "grid" in raw:
        return _parse_grid_spec(top, default_name)
    data = _Table(top.get("data", {}), "data.", ("source", "n", "split", "preprocess"))
    arch = _Table(top.get("architectures", {}), "architectures.",
                  ("family", "image_shape", "sample", "overrides", "explicit"))
    measures = _Table(top.get("measures", {}), "measures.", MEASURES_KEYS)
    training = _Table(top.get("training", {}), "training.", TRAINING_KEYS)
    family = arch.choice("family", "mlp", tuple(FAMILIES))
    spec = StudySpec(
        name=top.string("name", default_name),
        seed=top.integer("seed", 0, least=0),
        seeds=tuple(top.integers("seeds", [0], least=0)),
        dtype=top.choice("dtype", "float32", DTYPES),
        data=_data(data),
        architectures=ArchitectureSpec(
            sample=arch.integer("sample", 0, least=0),
            overrides=tuple(sorted(arch.table("overrides").items())),
            explicit=tuple(_explicit(arch, FAMILIES[family])),
            family=family,
            image_shape=_image_shape(arch, family),
        ),
        measures=_measures(measures, ["nlc"], training),
        training=TrainingSpec(
            enabled=training.boolean("enabled", True),
            lrs=_lrs(training) if training.get("lr_start", None) != "auto" else (),
            auto_lr=_auto_lr(training) if training.get("lr_start", None) == "auto" else None,
            optimizer=training.choice("optimizer", "sgd", OPTIMIZERS),
            batch_size=training.integer("batch_size", 250, least=1),
            max_epochs=training.integer("max_epochs", None, least=1),
            patience=training.integer("patience", 10, least=1),
            decay_patience=training.integer("decay_patience", 5, least=1),
            n_decays=training.integer("n_decays", 10, least=0),
            loss_scaling=training.boolean("loss_scaling", True),
            measure_after=tuple(training.names("measure_after", [], MEASURES)),
        ),
    )
    if spec.architectures.count == 0:
        raise InvalidInputError("study spec field architectures expected sample >= 1 or a "
                                "non-empty explicit list; got none. Fix: add e.g. "
                                "[architectures] sample = 10.")
    if not spec.training.enabled and not spec.measures.names:
        raise InvalidInputError("study spec expected measures or training; got neither. Fix: "
                                "add [measures] names = [\"nlc\"].")
    return spec


def _parse_grid_spec(top: _Table, default_name: str) -> StudySpec:
    """A model zoo's spec: ``[grid]`` instead of ``[architectures]``, the zoo's training
    protocol, a (train, test) or (train, validation, test) split."""
    from nngauge.studies._grid import parse_grid

    if "architectures" in top.raw:
        raise _fail("architectures", "either [architectures] or [grid], not both",
                    "both", "keep [grid] for a model zoo, [architectures] for sampled or "
                    "listed architectures")
    training = top.get("training", {})
    if isinstance(training, dict):
        misplaced = sorted(set(training) & (set(TRAINING_KEYS) - set(GRID_TRAINING_KEYS)))
        if misplaced:
            raise _fail(f"training.{misplaced[0]}", f"the fields of a [grid] study's training: "
                        f"{', '.join(GRID_TRAINING_KEYS)}", misplaced[0],
                        "give learning rates, batch sizes and the optimizer as grid "
                        "hyperparameters (grid.lr, grid.batch_size, grid.optimizer)")
    training = _Table(training, "training.", GRID_TRAINING_KEYS)
    target_loss = training.get("target_loss", DEFAULT_TARGET_LOSS)
    if not is_finite(target_loss) or target_loss <= 0:
        raise _fail("training.target_loss", "a finite number > 0", target_loss,
                    f"write target_loss = {DEFAULT_TARGET_LOSS} (Jiang et al.'s)")
    momentum = training.get("momentum", 0.9)
    if not is_finite(momentum) or not 0 <= momentum < 1:
        raise _fail("training.momentum", "a number in [0, 1)", momentum, "write momentum = 0.9")
    return StudySpec(
        **shared_fields(top, default_name, training),
        training=TrainingSpec(
            lrs=(), optimizer="sgd", loss_scaling=training.boolean("loss_scaling", False),
            measure_after=tuple(training.names("measure_after", [], MEASURES)),
            target_loss=float(target_loss),
            max_steps=training.integer("max_steps", DEFAULT_MAX_STEPS, least=1),
            momentum=float(momentum), keep_weights=training.boolean("keep_weights", True)),
        grid=parse_grid(top.get("grid", {})),
    )


def shared_fields(top: _Table, default_name: str, training: _Table) -> dict[str, Any]:
    """The :class:`StudySpec` fields a ``[grid]`` study and a builder study read alike: name,
    seeds, dtype, data with a (train, test) or (train, validation, test) split, and the
    measures (none by default)."""
    return {"name": top.string("name", default_name),
            "seed": top.integer("seed", 0, least=0),
            "seeds": tuple(top.integers("seeds", [0], least=0)),
            "dtype": top.choice("dtype", "float32", DTYPES),
            "data": _data(_Table(top.get("data", {}), "data.",
                                 ("source", "n", "split", "preprocess")), grid=True),
            "measures": _measures(_Table(top.get("measures", {}), "measures.", MEASURES_KEYS),
                                  [], training)}


def _data(data: _Table, *, grid: bool = False) -> DataSpec:
    return DataSpec(source=data.string("source", "waveform"),
                    n=data.integer("n", None, least=2),
                    split=_split(data, grid),
                    preprocess=data.choice("preprocess", "standardize", PREPROCESSING))


def _measures(measures: _Table, default: list, training: _Table) -> MeasureSpec:
    names = tuple(measures.names("names", default, MEASURES))
    taken = {*names, *training.names("measure_after", [], MEASURES)}
    return MeasureSpec(names=names, batch_size=measures.integer("batch_size", 250, least=2),
                       options=_measure_options(measures.table("options"), taken))


STUDY_KEYWORDS = ("model", "data", "labels", "generator", "initial_model")
"""Arguments a study gives every measure itself: not options of ``[measures.options]``."""


def _measure_options(raw: dict, taken: set) -> tuple:
    """``[measures.options]`` validated: a table per measure the study takes, of keywords of
    its function (checked against the function's declared constraints), none the study gives
    itself (:data:`STUDY_KEYWORDS`) or a variant of the measure sets (flatness' ``kind``)."""
    from nngauge._constraints import declared
    from nngauge.studies._units import DERIVED, RULES

    out = []
    for name, options in sorted(raw.items()):
        where = f"measures.options.{name}"
        if name not in taken:
            raise _fail(where, "options of a measure the study takes (measures.names or "
                        f"training.measure_after: {sorted(taken)})", name,
                        f"add {name!r} to measures.names, or remove the table")
        if name in RULES or name in DERIVED:
            raise _fail(where, "a measure the study runs through its function", name,
                        f"remove the table: a study takes {name} its own way "
                        "(nngauge.studies.MEASURES' docs)")
        if not isinstance(options, dict) or not options:
            raise _fail(where, "a table of keyword arguments", options,
                        f"write [{where}] and keyword = value lines, e.g. n_iter = 8")
        entry = ENTRIES[name]
        own = {key for variant in entry.variants.values() for key in variant}
        parameters = inspect.signature(entry.function).parameters
        valid = sorted(key for key, p in parameters.items() if p.kind == p.KEYWORD_ONLY
                       and key not in (*STUDY_KEYWORDS, *own))
        constraints = declared(entry.function)
        for key, value in options.items():
            if key not in valid:
                raise UnknownNameError(
                    f"study spec field {where}.{key} is not an option a study can give "
                    f"{entry.function.__name__}(); valid: {', '.join(valid)}. Fix: remove or "
                    "rename it" + (" (the study sets it for each of its columns)"
                                   if key in (*STUDY_KEYWORDS, *own) else "") + ".")
            constraint = constraints.get(key)
            if constraint is not None and not constraint.accepts(value):
                raise _fail(f"{where}.{key}", constraint.expected(), value,
                            f"write {key} = a value of that kind, or remove it")
        out.append((name, tuple(sorted(options.items()))))
    return tuple(out)


# ------------------------------------------------------------------------------- validation


def _toml():
    if sys.version_info >= (3, 11):
        import tomllib

        return tomllib
    try:
        import tomli
    except ImportError:
        raise MissingDependencyError(
            "study specs need a TOML parser: Python >= 3.11 has tomllib; on Python 3.10 "
            "install it with: pip install tomli") from None
    return tomli


def _fail(field_name: str, expected: str, got: Any, fix: str) -> InvalidInputError:
    return InvalidInputError(f"study spec field {field_name} expected {expected}; got "
                             f"{got!r}. Fix: {fix}.")


class _Table:
    """A TOML table with a fixed set of keys and typed getters that name the field on error."""

    def __init__(self, raw: Any, prefix: str, keys: tuple[str, ...]) -> None:
        name = prefix.rstrip(".") or "(top level)"
        if not isinstance(raw, dict):
            raise _fail(name, "a table", raw, f"write it as [{name}]")
        unknown = sorted(set(raw) - set(keys))
        if unknown:
            raise UnknownNameError(
                f"study spec field {prefix}{unknown[0]} is not known; valid fields"
                f"{' of ' + name if prefix else ''}: {', '.join(keys)}. Fix: remove or "
                "rename it.")
        self.raw, self.prefix = raw, prefix

    def get(self, key: str, default: Any) -> Any:
        return self.raw.get(key, default)

    def string(self, key: str, default: str) -> str:
        value = self.raw.get(key, default)
        if not isinstance(value, str) or not value.strip():
            raise _fail(self.prefix + key, "a non-empty string", value, f'write {key} = "..."')
        return value

    def integer(self, key: str, default: Optional[int], *, least: int) -> Optional[int]:
        value = self.raw.get(key, default)
        if value is None and default is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise _fail(self.prefix + key, f"an integer >= {least}", value,
                        f"write e.g. {key} = {max(least, 1)}")
        return value

    def integers(self, key: str, default: list, *, least: int) -> list[int]:
        values = self.raw.get(key, default)
        if (not isinstance(values, list) or not values or len(set(values)) != len(values)
                or any(isinstance(v, bool) or not isinstance(v, int) or v < least
                       for v in values)):
            raise _fail(self.prefix + key, f"a non-empty list of distinct integers >= {least}",
                        values, f"write e.g. {key} = [0, 1]")
        return values

    def boolean(self, key: str, default: bool) -> bool:
        value = self.raw.get(key, default)
        if not isinstance(value, bool):
            raise _fail(self.prefix + key, "true or false", value, f"write {key} = true")
        return value

    def choice(self, key: str, default: str, choices: tuple[str, ...]) -> str:
        value = self.raw.get(key, default)
        if value not in choices:
            raise UnknownNameError(f"study spec field {self.prefix}{key} expected one of "
                                   f"{list(choices)}; got {value!r}. Fix: use one of those.")
        return value

    def names(self, key: str, default: list, valid: dict) -> list[str]:
        values = self.raw.get(key, default)
        if not isinstance(values, list) or len(set(map(str, values))) != len(values):
            raise _fail(self.prefix + key, "a list of distinct measure names", values,
                        f"write e.g. {key} = [\"nlc\"]")
        for value in values:
            if value not in valid:
                raise UnknownNameError(
                    f"study spec field {self.prefix}{key} expected names from {sorted(valid)}; "
                    f"got {value!r}. Fix: use one of those.")
        return values

    def table(self, key: str) -> dict:
        value = self.raw.get(key, {})
        if not isinstance(value, dict):
            raise _fail(self.prefix + key, "a table of keyword arguments", value,
                        f"write {key} = {{depth = 5}}")
        return value


def _split(data: _Table, grid: bool = False) -> tuple[float, ...]:
    value = data.get("split", [0.8, 0.2] if grid else [0.6, 0.2, 0.2])
    ok = (isinstance(value, list) and len(value) in ((2, 3) if grid else (3,))
          and all(isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0
                  for v in value) and abs(sum(value) - 1) < 1e-6)
    if not ok:
        expected = ("two positive fractions (train, test) or three (train, validation, test) "
                    "summing to 1" if grid else "three positive fractions (train, validation, "
                    "test) summing to 1")
        raise _fail("data.split", expected, value,
                    "write split = [0.8, 0.2]" if grid else "write split = [0.6, 0.2, 0.2]")
    return tuple(float(v) for v in value)


def _image_shape(arch: _Table, family: str) -> tuple[int, int, int]:
    value = arch.get("image_shape", list(DEFAULT_IMAGE_SHAPE))
    if family != "cnn" and "image_shape" in arch.raw:
        raise _fail("architectures.image_shape", 'family = "cnn" beside it', value,
                    'set family = "cnn" or drop image_shape')
    if not (isinstance(value, list) and len(value) == 3 and all(
            isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in value)):
        raise _fail("architectures.image_shape", "three positive integers [C, H, W]", value,
                    "write image_shape = [1, 8, 8]")
    return tuple(value)


def _explicit(arch: _Table, keys: tuple[str, ...]) -> list[tuple[tuple[str, Any], ...]]:
    entries = arch.get("explicit", [])
    if not isinstance(entries, list):
        raise _fail("architectures.explicit", "a list of tables", entries,
                    "write explicit = [{width = 16, depth = 3}]")
    out = []
    for i, entry in enumerate(entries):
        _Table(entry, f"architectures.explicit[{i}].", keys)
        for key in ("width", "depth"):
            if key not in entry:
                raise _fail(f"architectures.explicit[{i}].{key}", "an integer >= 1", None,
                            f"give every explicit architecture its {key}")
        out.append(tuple(sorted((k, tuple(v) if isinstance(v, list) else v)
                                for k, v in entry.items())))
    return out


def _auto_lr(training: _Table) -> tuple[float, int, float]:
    if "lrs" in training.raw:
        raise _fail("training.lrs", "either lrs or lr_start/lr_factor/n_lrs", "both",
                    "keep one of the two")
    factor, scale = training.get("lr_factor", 3.0), training.get("lr_scale", 1e-8)
    for key, value, least in (("lr_factor", factor, 1.0), ("lr_scale", scale, 0.0)):
        if not is_finite(value) or value <= least:
            raise _fail("training." + key, f"a finite number > {least:g}", value,
                        "the paper used lr_factor = 3 and lr_scale = 1e-8")
    return float(factor), training.integer("n_lrs", 40, least=1), float(scale)


def _lrs(training: _Table) -> tuple[float, ...]:
    if "lr_scale" in training.raw:
        raise _fail("training.lr_scale", "lr_start = \"auto\" beside it", training.raw.get(
            "lr_start"), "set lr_start = \"auto\" or drop lr_scale")
    grid_keys = [k for k in ("lr_start", "lr_factor", "n_lrs") if k in training.raw]
    if "lrs" in training.raw and grid_keys:
        raise _fail("training.lrs", "either lrs or lr_start/lr_factor/n_lrs", "both",
                    "keep one of the two")
    if grid_keys:
        start = training.get("lr_start", None)
        factor = training.get("lr_factor", 3.0)
        n = training.integer("n_lrs", 40, least=1)
        for key, value, least in (("lr_start", start, 0.0), ("lr_factor", factor, 1.0)):
            if not is_finite(value) or value <= least:
                raise _fail("training." + key, f"a finite number > {least:g}", value,
                            "the paper used factor 3 and 40 rates")
        return tuple(float(start) * float(factor) ** i for i in range(n))
    values = training.get("lrs", [0.1])
    if (not isinstance(values, list) or not values or len(set(values)) != len(values)
            or not all(is_finite(v) and v > 0 for v in values)):
        raise _fail("training.lrs", "a non-empty list of distinct positive learning rates",
                    values, "write lrs = [0.01, 0.03, 0.1]")
    return tuple(float(v) for v in values)
