"""Studies over a user's own search space: a builder function and its keyword arguments.

An architecture designer's candidates are not nngauge's MLPs: they come from a function of a
few keyword arguments (depth, width, a block type...). A study of such a family names the
function, the values of its arguments (a grid, or a seeded sampler of ranges and choices), the
data (a bundled set, a ``.npz`` file or the user's ``file.py:function``) and how to train (by
:func:`nngauge.training.fit`, or the user's ``file.py:train``)::

    [data]
    source = "path/to/data.py:load"          # returns (inputs, labels), a Dataset or a DataLoader
    split = [0.8, 0.2]                  # train / test (or train / validation / test)
    preprocess = "none"

    [architectures]
    builder = "path/to/family.py:build"      # build(**arguments) -> torch.nn.Module
    grid = {depth = [2, 4], width = [64, 256]}    # every combination is one candidate
    # or: sample = 12 and space = {depth = {low = 2, high = 8}, width = {low = 16,
    #     high = 512, log = true}, block = ["plain", "bottleneck"]}

    [measures]
    names = ["nlc", "te_nas", "n_params"]     # at initialization, on the training inputs

    [training]
    train = "path/to/family.py:train"        # train(model, data, config) -> {metric: number}
    config = {epochs = 3}               # the config the function gets (with "seed" added)
    # or nngauge's fit: lr = 0.05, optimizer = "momentum" | "sgd" | "adam", batch_size,
    #     weight_decay, momentum, target_loss (0.01), max_steps (2000); enabled = false: none

Paths are read relative to the directory the study runs in (as ``nngauge rank`` reads its
builder); workers of a Ray cluster need the same files at the same paths.

Every candidate and seed is one unit (kind ``builder``): the network is built under a seed
derived from the study seed, the candidate and the seed (``torch.manual_seed`` inside a
forked random state), measured at initialization, trained, and recorded in the ``candidates``
table with its arguments and metrics. A candidate whose builder call, measures or training
raise is recorded with the stage and the error, and the others go on; a rerun resumes, keeping
recorded errors (the same code fails the same way: change the builder and its file's hash
makes a new study). The identity of the study includes the SHA-256 of the builder's and the
train function's files, so editing them starts a new study rather than mixing results.

The user's train function gets ``data``, a :class:`StudyData` of
:class:`nngauge.data.LabelledData` (``train``, ``val`` (None for a two-way split), ``test``),
and returns a mapping of metric names to numbers (``test_accuracy`` or ``test_error`` is what
the study report scores the predictors against). :func:`nngauge.studies.load_table` reads the
study back as one row per candidate and seed.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import itertools
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple, Optional

from nngauge.errors import InvalidInputError, UnknownNameError

KIND = "builder"
"""The unit kind of a builder study's candidates."""
BUILDER_KEYS = ("builder", "grid", "sample", "space")
"""The ``[architectures]`` fields of a builder study."""
FIT_KEYS = ("lr", "optimizer", "batch_size", "weight_decay", "momentum", "target_loss",
            "max_steps", "loss_scaling")
"""The ``[training]`` fields that configure :func:`nngauge.training.fit`."""
TRAINING_KEYS = ("enabled", "train", "config", "measure_after", *FIT_KEYS)
"""The ``[training]`` fields of a builder study."""
FIT_DEFAULTS = {"lr": 0.05, "optimizer": "momentum", "batch_size": 64, "weight_decay": 0.0,
                "momentum": 0.9, "target_loss": 0.01, "max_steps": 2000, "loss_scaling": False}
""":func:`nngauge.training.fit`'s settings when the spec leaves them out (a model zoo's)."""
STAGES = ("data", "build", "measure", "train", "measure_after")
"""Where a candidate can fail, as recorded in its ``stage``."""


@dataclass(frozen=True)
class BuilderSpec:
    """A validated builder study's ``[architectures]`` and training.

    Attributes:
        function: ``"path/to/file.py:name"`` of the builder.
        source_sha256: the SHA-256 of the builder's file (part of the study's identity).
        grid: (keyword, values) pairs: every combination is one candidate.
        sample: candidates drawn from ``space`` (0 with a grid).
        space: (keyword, ("choice", values) or ("range", low, high, log, integer)) pairs.
        train: ``"path/to/file.py:name"`` of the user's train function, or None for
            :func:`nngauge.training.fit` (``fit``) or none (``enabled`` false).
        train_sha256: the SHA-256 of the train function's file ("" without one).
        config: (key, value) pairs given to the train function.
        fit: (key, value) pairs of :func:`nngauge.training.fit`'s settings.
        enabled: whether candidates are trained.
    """

    function: str
    source_sha256: str
    grid: tuple[tuple[str, tuple], ...] = ()
    sample: int = 0
    space: tuple[tuple[str, tuple], ...] = ()
    train: Optional[str] = None
    train_sha256: str = ""
    config: tuple[tuple[str, Any], ...] = ()
    fit: tuple[tuple[str, Any], ...] = ()
    enabled: bool = True

    @property
    def keys(self) -> tuple[str, ...]:
        """The keyword arguments the study varies, in the spec's order."""
        return tuple(name for name, _ in (self.grid or self.space))

    def points(self, seed: int) -> list[dict[str, Any]]:
        """The candidates' keyword arguments: the grid's product in order, or ``sample``
        distinct draws from ``space`` with a generator seeded from ``seed``."""
        if self.grid:
            names = [name for name, _ in self.grid]
            return [dict(zip(names, values))
                    for values in itertools.product(*(values for _, values in self.grid))]
        return _sample_points(self.space, self.sample, seed)

    def varied(self, points: list[dict]) -> list[str]:
        """The keys that take more than one value over ``points``."""
        return [k for k in self.keys if len({repr(p[k]) for p in points}) > 1]


class StudyData(NamedTuple):
    """What a user's train function gets as ``data``: the study's splits, each
    :class:`nngauge.data.LabelledData` (``val`` None for a (train, test) split)."""

    train: Any
    val: Any
    test: Any


# ------------------------------------------------------------------------------ parsing


def parse_builder_spec(top, default_name: str):
    """A builder study's :class:`~nngauge.studies.StudySpec` from the spec's top table."""
    from nngauge.studies._spec import (
        MEASURES,
        StudySpec,
        TrainingSpec,
        _fail,
        _Table,
        shared_fields,
    )

    if "grid" in top.raw:
        raise _fail("grid", "either [grid] (a model zoo) or [architectures] builder, not both",
                    "both", "put the builder's values under [architectures] grid")
    arch = _Table(top.get("architectures", {}), "architectures.", BUILDER_KEYS)
    training = _Table(top.get("training", {}), "training.", TRAINING_KEYS)
    function = arch.string("builder", "")
    build = _load("architectures.builder", function, "architecture")
    grid, sample, space = _values(arch, build)
    train = training.get("train", None)
    if train is not None:
        _load("training.train", training.string("train", ""), "train")
        given = sorted(set(training.raw) & set(FIT_KEYS))
        if given:
            raise _fail(f"training.{given[0]}", "either train = \"file.py:function\" or "
                        "nngauge's fit settings", "both", "set them in your train function "
                        "(through [training] config), or drop train")
    elif "config" in training.raw:
        raise _fail("training.config", "train = \"file.py:function\" beside it (the config "
                    "is that function's)", training.raw["config"], "add train, or drop config")
    return StudySpec(
        **shared_fields(top, default_name, training),
        training=TrainingSpec(lrs=(), measure_after=tuple(training.names("measure_after", [],
                                                                         MEASURES))),
        builder=BuilderSpec(
            function=function, source_sha256=_file_hash(function), grid=grid, sample=sample,
            space=space, train=train, train_sha256=_file_hash(train) if train else "",
            config=tuple(sorted(training.table("config").items())),
            fit=() if train else _fit_settings(training),
            enabled=training.boolean("enabled", True)),
    )


def _load(field: str, spec: str, what: str):
    from nngauge._user_code import load_function

    return load_function(spec, f"study spec field {field}", what=what)


def _file_hash(spec: str) -> str:
    return hashlib.sha256(Path(spec.partition(":")[0]).read_bytes()).hexdigest()


def _values(arch, build) -> tuple[tuple, int, tuple]:
    """(grid, sample, space) of ``[architectures]``, the keys checked against the builder."""
    from nngauge.studies._rank import _checked_grid
    from nngauge.studies._spec import _fail

    grid, space = arch.table("grid"), arch.table("space")
    sample = arch.integer("sample", 0, least=0)
    if bool(grid) == bool(space or sample):
        raise _fail("architectures", "a grid = {key = [values]} or sample = N with space = "
                    "{...}, one of the two", "both" if grid else "neither",
                    "write e.g. grid = {depth = [2, 4], width = [64, 256]}")
    if grid:
        for key, values in grid.items():
            if not isinstance(values, list) or not values:
                raise _fail(f"architectures.grid.{key}", "a non-empty list of values", values,
                            f"write {key} = [2, 4]")
            if len({repr(v) for v in values}) != len(values):
                raise _fail(f"architectures.grid.{key}", "distinct values", values,
                            "list each value once")
        _checked_grid(build, grid, "study spec field architectures.grid")
        return tuple((k, tuple(v)) for k, v in grid.items()), 0, ()
    if not sample or not space:
        raise _fail("architectures.sample" if not sample else "architectures.space",
                    "sample >= 1 with a space of ranges and choices", sample or space,
                    "write sample = 12 and space = {depth = {low = 2, high = 8}}")
    _checked_grid(build, {k: [0] for k in space}, "study spec field architectures.space")
    return (), sample, tuple((k, _dimension(k, v)) for k, v in space.items())


def _dimension(key: str, value: Any) -> tuple:
    """One sampler dimension: ``[choices]`` or ``{low, high, log}`` (integers when both ends
    are)."""
    from nngauge.studies._spec import _fail

    field = f"architectures.space.{key}"
    if isinstance(value, list):
        if not value or len({repr(v) for v in value}) != len(value):
            raise _fail(field, "a non-empty list of distinct choices", value,
                        f"write {key} = [\"relu\", \"tanh\"]")
        return ("choice", tuple(value))
    if not isinstance(value, dict) or set(value) - {"low", "high", "log"} or not {
            "low", "high"} <= set(value):
        raise _fail(field, "a list of choices or a range {low, high[, log]}", value,
                    f"write {key} = {{low = 2, high = 8}}")
    low, high, log = value["low"], value["high"], value.get("log", False)
    numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
                  for v in (low, high))
    if not numbers or not low < high or not isinstance(log, bool) or (log and low <= 0):
        raise _fail(field, "finite low < high (> 0 with log = true)", value,
                    f"write {key} = {{low = 16, high = 512, log = true}}")
    integer = isinstance(low, int) and isinstance(high, int)
    return ("range", low, high, log, integer)


def _sample_points(space: tuple, n: int, seed: int) -> list[dict]:
    """``n`` distinct candidates drawn from ``space``: choices uniformly, ranges uniformly (or
    log-uniformly), integers rounded; fewer when the space holds fewer."""
    import numpy as np

    from nngauge.studies._units import derive_seed

    rng = np.random.default_rng(derive_seed(seed, "builder_sample"))
    seen, points = set(), []
    for _ in range(100 * n):
        point = {key: _draw(rng, dimension) for key, dimension in space}
        if repr(point) not in seen:
            seen.add(repr(point))
            points.append(point)
            if len(points) == n:
                break
    return points


def _draw(rng, dimension: tuple) -> Any:
    if dimension[0] == "choice":
        return dimension[1][int(rng.integers(len(dimension[1])))]
    _, low, high, log, integer = dimension
    if log:
        value = math.exp(rng.uniform(math.log(low), math.log(high)))
    else:
        value = rng.uniform(low, high)
    return int(min(high, max(low, round(value)))) if integer else float(value)


def _fit_settings(training) -> tuple:
    from nngauge.studies._grid import OPTIMIZERS
    from nngauge.studies._spec import _fail

    out = {}
    for key, default in FIT_DEFAULTS.items():
        value = training.get(key, default)
        if key == "optimizer":
            value = training.choice(key, default, OPTIMIZERS)
        elif key in ("batch_size", "max_steps"):
            value = training.integer(key, default, least=1)
        elif key == "loss_scaling":
            value = training.boolean(key, default)
        else:
            ok = isinstance(value, (int, float)) and not isinstance(value, bool) \
                and math.isfinite(value) and (value > 0 if key in ("lr", "target_loss")
                                              else value >= 0) and not (key == "momentum"
                                                                        and value >= 1)
            if not ok:
                raise _fail(f"training.{key}", "a finite number (> 0 for lr and target_loss, "
                            "in [0, 1) for momentum, >= 0 for weight_decay)", value,
                            f"write {key} = {default}")
            value = float(value)
        out[key] = value
    return tuple(sorted(out.items()))


# ------------------------------------------------------------------------------ running


@functools.lru_cache(maxsize=8)
def _function(spec: str, sha256: str, what: str):
    """The user's function (cached per process and file content: workers load it once)."""
    from nngauge._user_code import load_function

    return load_function(spec, "builder study", what=what)


class _Failed(Exception):
    """A candidate's failure at a stage: recorded in its row, the study goes on."""

    def __init__(self, stage: str, exc: BaseException) -> None:
        first = str(exc).splitlines()[0] if str(exc) else ""
        super().__init__(f"{type(exc).__name__}: {first}" if first else type(exc).__name__)
        self.stage = stage


def run_builder_unit(task, started: float) -> dict:
    """Run one candidate (module docstring); the result for
    :func:`nngauge.studies._db.write_unit`, with the failure's stage and error recorded."""
    spec, arguments = task.spec, task.architecture.description
    measures: dict[str, float] = {}
    metrics: dict[str, float] = {}
    stage = error = None
    try:
        measures, metrics = _run(task, measures, metrics)
    except _Failed as failed:
        stage, error = failed.stage, str(failed)
    train = None
    if metrics:
        train = {"lr": dict(spec.builder.fit).get("lr"), "best_val_error": None,
                 "test_error": metrics.get("test_error"),
                 "train_error": metrics.get("train_error"), "epochs": metrics.get("epochs"),
                 "diverged": None}
    return {"measures": measures, "train": train,
            "candidate": {"arguments": arguments, "metrics": metrics, "stage": stage,
                          "error": error},
            "seconds": time.perf_counter() - started}


def _run(task, measures: dict, metrics: dict) -> tuple[dict, dict]:
    """Build, measure, train and measure after; fills ``measures`` and ``metrics`` as it goes
    (kept when a later stage raises :class:`_Failed`)."""
    import torch

    from nngauge.studies._units import (
        _generator,
        _measure,
        derive_seed,
        in_model_dtype,
        study_data,
    )

    spec, unit, b = task.spec, task.unit, task.spec.builder
    try:
        train, val, test = study_data(spec.data, spec.seed)
        build = _function(b.function, b.source_sha256, "architecture")
    except Exception as exc:
        raise _Failed("data", exc) from None
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(derive_seed(spec.seed, "init", unit.arch_index, unit.seed))
            model = build(**task.architecture.description)
        if not isinstance(model, torch.nn.Module):
            raise TypeError(f"the builder returned {type(model).__name__}, not a "
                            "torch.nn.Module")
    except Exception as exc:
        raise _Failed("build", exc) from None
    parts = in_model_dtype(model, (train, val, test))
    initial = copy.deepcopy(model)
    batch, options = spec.measures.batch_size, spec.measures.options_of()
    try:
        measures.update(_measure(spec.measures.names, model, parts, batch,
                                 _generator(derive_seed(spec.seed, "measure", unit.arch_index,
                                                        unit.seed)),
                                 undefined_as_nan=True, initial=initial, options=options))
    except Exception as exc:
        raise _Failed("measure", exc) from None
    if not b.enabled:
        return measures, metrics
    try:
        metrics.update(_train(task, model, parts))
    except Exception as exc:
        raise _Failed("train", exc) from None
    if spec.training.measure_after:
        from nngauge.studies._spec import AFTER

        try:
            after = _measure(spec.training.measure_after, model, parts, batch,
                             _generator(derive_seed(spec.seed, "measure_after",
                                                    unit.arch_index, unit.seed)),
                             undefined_as_nan=True, initial=initial, options=options)
        except Exception as exc:
            raise _Failed("measure_after", exc) from None
        measures.update({f"{column}{AFTER}": value for column, value in after.items()})
    return measures, metrics


def _train(task, model, parts) -> dict[str, float]:
    """The candidate's metrics: the user's train function's, or :func:`nngauge.training.fit`'s
    (accuracies, losses, gap, steps and stop reason as in a model zoo)."""
    spec, unit, b = task.spec, task.unit, task.spec.builder
    from nngauge.studies._units import derive_seed

    if b.train is not None:
        function = _function(b.train, b.train_sha256, "train")
        config = {**dict(b.config), "seed": derive_seed(spec.seed, "train", unit.arch_index,
                                                        unit.seed)}
        returned = function(model, StudyData(*parts), config)
        return _checked_metrics(returned, b.train)
    return _fit(task, model, parts)


def _checked_metrics(returned: Any, where: str) -> dict[str, float]:
    """The train function's metrics as floats; a clear error for anything else."""
    if not isinstance(returned, dict) or not returned:
        raise InvalidInputError(f"the train function {where} expected to return a mapping of "
                                f"metric names to numbers; got {type(returned).__name__}. Fix: "
                                "return e.g. {'test_accuracy': 0.9}.")
    out = {}
    for name, value in returned.items():
        try:
            out[str(name)] = float(value)
        except (TypeError, ValueError):
            raise InvalidInputError(f"the train function {where} expected numbers as metric "
                                    f"values; got {name!r}: {type(value).__name__}. Fix: return "
                                    "floats (e.g. accuracy.item()).") from None
    if "test_error" not in out and "test_accuracy" in out:
        out["test_error"] = 1.0 - out["test_accuracy"]
    if "train_error" not in out and "train_accuracy" in out:
        out["train_error"] = 1.0 - out["train_accuracy"]
    return out


def _fit(task, model, parts) -> dict[str, float]:
    from nngauge.studies._grid import optimizer_options
    from nngauge.studies._units import _generator, derive_seed
    from nngauge.training import fit
    from nngauge.training._fit import evaluate

    spec, unit = task.spec, task.unit
    settings = dict(spec.builder.fit)
    train, val, test = parts
    result = fit(model, train, val, test=test, lr=settings["lr"],
                 weight_decay=settings["weight_decay"], batch_size=settings["batch_size"],
                 loss_scaling=settings["loss_scaling"], target_loss=settings["target_loss"],
                 max_steps=settings["max_steps"],
                 generator=_generator(derive_seed(spec.seed, "minibatches", unit.arch_index,
                                                  unit.seed)),
                 **optimizer_options(settings["optimizer"], settings["momentum"]))
    train_loss, train_error = evaluate(model, train, scale=result.loss_scale)
    test_loss, test_error = evaluate(model, test, scale=result.loss_scale)
    return {"train_accuracy": 1 - train_error, "test_accuracy": 1 - test_error,
            "train_error": train_error, "test_error": test_error, "train_loss": train_loss,
            "test_loss": test_loss, "gap": test_error - train_error,
            "steps": float(result.steps), "epochs": float(result.epochs),
            "diverged": float(result.diverged)}


def builder_architectures(spec) -> list:
    """One :class:`~nngauge.studies._units.Architecture` per candidate: its keyword
    arguments as the description; the config names the builder and its file's hash."""
    from nngauge.studies._units import Architecture

    b = spec.builder
    points = b.points(spec.seed)
    if not points:
        raise UnknownNameError("study spec field architectures expected at least one "
                               "candidate; got none. Fix: widen the space or the grid.")
    return [Architecture(i, {"builder": b.function, "source_sha256": b.source_sha256,
                             "arguments": point}, point) for i, point in enumerate(points)]


__all__ = ["BUILDER_KEYS", "BuilderSpec", "KIND", "StudyData", "builder_architectures",
           "parse_builder_spec", "run_builder_unit"]
