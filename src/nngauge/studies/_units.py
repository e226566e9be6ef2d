"""Units of a study: what one worker does, and the plan of all of them.

A unit is either

- ``init``: build architecture ``arch_index`` with initialization seed ``seed`` and take the
  spec's measures at initialization on the training inputs (the NLC paper computes NLC and
  bias on the training set), or
- ``train``: build the same initialized network and train it with :func:`nngauge.training.fit`
  from starting learning rate ``lr`` (appendix E.2's protocol; with ``lr_start = "auto"`` the
  rate is ``smallest_lr(network) * factor ** lr_index``), recording validation and test errors,
- or, in a ``[grid]`` study (a model zoo, :mod:`nngauge.studies._grid`), ``network``: build grid
  point ``arch_index``'s network with seed ``seed``, take the measures at initialization, train
  it on its training set (subset, label noise) to the target loss or the step cap, take the
  ``measure_after`` measures, and record its accuracies, losses, gap, steps and stop reason and
  (with ``keep_weights``) its initial and final weights,
- or, in a study over the user's builder function (:mod:`nngauge.studies._builder`),
  ``builder``: build candidate ``arch_index`` (a point of the user's grid or sampler) with
  seed ``seed``, measure it, train it (the user's train function or ``fit``) and record its
  arguments, metrics and, when a stage raised, the stage and the error.

A measure that reads the network at initialization (``entry.initial``: the distance from
initialization) gets it: the network itself at initialization, a copy of it as built before
training after training.

Every random choice of a unit comes from seeds derived (by hashing) from the study seed, the
architecture index and the unit's seed, so a unit's results depend only on its key: the same on
any machine, in any order, under any executor. Workers use one torch thread.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import inspect
import math
import time
from dataclasses import dataclass
from typing import Any, Callable, Literal, Optional

from nngauge.errors import InvalidInputError, NNGaugeError
from nngauge.studies._spec import AFTER, ENTRIES, MEASURES, StudySpec

Kind = Literal["init", "train", "network", "builder"]


@dataclass(frozen=True)
class Architecture:
    """An architecture of the study: :func:`nngauge.nn.mlp` arguments (``config``, the
    ``MLPConfig`` as a dict), or :func:`nngauge.nn.cnn` ones (the ``CNNConfig`` as a dict,
    with ``"family": "cnn"``; a config without a family is an MLP's, as databases written
    before families hold), and, for sampled ones, the sampler's description."""

    index: int
    config: dict
    description: Optional[dict] = None

    @property
    def skip(self) -> bool:
        return self.config.get("skip") is not None


@dataclass(frozen=True)
class Unit:
    """One unit of work; ``key`` is its identity in the results database."""

    key: str
    kind: Kind
    arch_index: int
    seed: int
    lr: Optional[float] = None
    lr_index: Optional[int] = None
    """Position in the learning-rate grid (training units); with an automatic grid ``lr`` is
    None and the unit computes its rate."""


@dataclass(frozen=True)
class UnitTask:
    """Everything a worker needs for one unit (picklable)."""

    spec: StudySpec
    architecture: Architecture
    unit: Unit


UnitRunner = Callable[[UnitTask], dict]
"""``runner(task) -> {"measures": {name: value}, "train": {...} or None, "seconds": s}``."""


def derive_seed(*parts: Any) -> int:
    """A 63-bit seed from any parts, stable across processes and machines.

    Example:
        >>> derive_seed(0, "init", 3) == derive_seed(0, "init", 3) != derive_seed(0, "init", 4)
        True
    """
    text = "/".join(map(repr, parts)).encode()
    return int.from_bytes(hashlib.sha256(text).digest()[:8], "big") >> 1


def plan_units(spec: StudySpec) -> list[Unit]:
    """All units of a study, in order: per architecture and seed, init then the rates.

    Example:
        >>> from nngauge.studies._spec import parse_spec
        >>> spec = parse_spec({"architectures": {"explicit": [{"width": 4, "depth": 2}]},
        ...                    "training": {"lrs": [0.1, 0.3]}})
        >>> [(u.kind, u.lr) for u in plan_units(spec)]
        [('init', None), ('train', 0.1), ('train', 0.3)]
    """
    if spec.builder is not None:
        from nngauge.studies._builder import KIND, builder_architectures

        return [_unit(spec, KIND, index, seed)
                for index in range(len(builder_architectures(spec))) for seed in spec.seeds]
    if spec.grid is not None:
        from nngauge.studies._grid import expand_grid

        return [_unit(spec, "network", index, seed)
                for index in range(len(expand_grid(spec.grid, spec.seed))) for seed in spec.seeds]
    units = []
    for index in range(spec.architectures.count):
        for seed in spec.seeds:
            if spec.measures.names:
                units.append(_unit(spec, "init", index, seed))
            if spec.training.enabled:
                auto = spec.training.auto_lr
                rates = [None] * auto[1] if auto else spec.training.lrs
                units.extend(_unit(spec, "train", index, seed, lr, i)
                             for i, lr in enumerate(rates))
    return units


def _unit(spec: StudySpec, kind: Kind, index: int, seed: int, lr: Optional[float] = None,
          lr_index: Optional[int] = None) -> Unit:
    content = (spec.study_id, kind, index, seed, lr, lr_index)
    key = hashlib.sha256(repr(content).encode()).hexdigest()[:24]
    return Unit(key, kind, index, seed, lr, lr_index)


# ------------------------------------------------------------------------------------- data


@functools.lru_cache(maxsize=4)
def study_data(spec_data, seed: int):
    """(train, val, test) :class:`LabelledData` of the spec, split and preprocessed (cached
    per process: workers load it once); val is None for a (train, test) split."""
    from nngauge.data import preprocess, split, standardize
    from nngauge.data._sources import load_data

    source = load_data(spec_data.source, seed=seed, n=spec_data.n)
    if source.labels is None or source.labels.is_floating_point():
        raise InvalidInputError(f"study spec field data.source expected a data set with integer "
                                f"class labels; got {spec_data.source!r} without them. Fix: "
                                "save labels beside the inputs (key 'labels').")
    parts = split(source.as_pair(), spec_data.split, generator=seed)
    if spec_data.preprocess == "standardize":
        parts = standardize(*parts).data
    elif spec_data.preprocess == "pca":
        parts = preprocess(*parts, generator=seed).data
    return parts if len(parts) == 3 else (parts[0], None, parts[1])


def resolve_architectures(spec: StudySpec) -> list[Architecture]:
    """The study's architectures: sampled ones first (index 0..sample-1), then explicit ones.

    Input and output widths come from the (preprocessed) data. An explicit entry that
    :func:`nngauge.nn.mlp` (or :func:`nngauge.nn.cnn`) rejects raises an error naming the entry.
    """
    from nngauge.nn import cnn, mlp

    if spec.builder is not None:
        from nngauge.studies._builder import builder_architectures

        study_data(spec.data, spec.seed)  # bad data refused before anything is written
        return builder_architectures(spec)
    parts = study_data(spec.data, spec.seed)
    d_in, d_out = _widths(parts)
    if spec.grid is not None:
        return _grid_architectures(spec, parts[0], d_in, d_out)
    arch = spec.architectures
    family, extra = arch.family, {}
    if family == "cnn":
        shape = arch.image_shape
        if math.prod(shape) != d_in:
            raise InvalidInputError(f"study spec field architectures.image_shape expected C*H*W "
                                    f"= {d_in}, the data's features; got {list(shape)}. Fix: "
                                    "give the (C, H, W) of the flattened inputs (digits: "
                                    "[1, 8, 8], without PCA).")
        extra = {"image_shape": shape}
    build, name = (cnn, "cnn()") if family == "cnn" else (mlp, "mlp()")
    out = []
    if arch.sample:
        sample = _sampler(family)
        overrides = dict(arch.overrides)
        for index in range(arch.sample):
            generator = _generator(derive_seed(spec.seed, "architecture", index))
            try:
                model, description = sample(generator, d_in, d_out, **extra, **overrides)
            except TypeError as exc:
                raise InvalidInputError(f"study spec field architectures.overrides expected "
                                        f"keywords of {sample.__name__}(); got "
                                        f"{overrides!r} ({exc}). Fix: check their names.") from None
            out.append(Architecture(index, model.config.to_dict(), description.to_dict()))
    for i, entry in enumerate(arch.explicit):
        try:
            model = build(d_in, d_out=d_out, **extra, **dict(entry))
        except (NNGaugeError, TypeError) as exc:
            raise InvalidInputError(f"study spec field architectures.explicit[{i}] is not a "
                                    f"valid {name}: {exc}") from None
        out.append(Architecture(len(out), model.config.to_dict()))
    return out


def in_model_dtype(model, parts):
    """The splits with floating inputs in the dtype of the model's first floating parameter
    (copies; token ids and labels as they are)."""
    from nngauge.data import LabelledData

    dtype = next((p.dtype for p in model.parameters() if p.is_floating_point()), None)
    if dtype is None:
        return parts
    return tuple(None if part is None else LabelledData(
        part.inputs.to(dtype) if part.inputs.is_floating_point() else part.inputs,
        part.labels) for part in parts)


def _widths(parts) -> tuple[int, int]:
    """(input features, classes) of the study's data."""
    return (int(parts[0].inputs[0].numel()),
            max(int(part.labels.max()) for part in parts if part is not None) + 1)


def _grid_architectures(spec: StudySpec, train, d_in: int, d_out: int) -> list[Architecture]:
    """One :class:`Architecture` per grid point: the builder's config and, as its description,
    the point's hyperparameters (``train_size`` resolved against the training split)."""
    from nngauge.studies._grid import build_network, resolve_points

    configs: dict[tuple, dict] = {}
    out = []
    for index, point in enumerate(resolve_points(spec.grid, spec.seed, len(train.labels))):
        key = (point["family"], point["depth"], point["width"], point["batch_norm"],
               point["dropout"])
        if key not in configs:  # the config is the same for every seed and training setting
            configs[key] = build_network(point, d_in, d_out).config.to_dict()
        out.append(Architecture(index, configs[key], point))
    return out


def _sampler(family: str):
    if family == "cnn":
        from nngauge.nn import sample_cnn

        return sample_cnn
    try:
        from nngauge.nn._sampler import sample_architecture
    except ImportError:
        raise InvalidInputError("study spec field architectures.sample needs "
                                "nngauge.nn.sample_architecture, which this installation lacks; "
                                "got sample > 0. Fix: list architectures under "
                                "architectures.explicit.") from None
    return sample_architecture


def _generator(seed: int):
    import torch

    return torch.Generator().manual_seed(seed)


def build_model(task: UnitTask):
    """The unit's network at initialization: the same weights for every unit of one
    (architecture, seed) (in a zoo: of one family, depth, width and seed);
    :func:`nngauge.nn.mlp` or, for ``"family": "cnn"``, :func:`nngauge.nn.cnn`."""
    import torch

    spec = task.spec
    if spec.grid is None:
        seed = derive_seed(spec.seed, "init", task.unit.arch_index, task.unit.seed)
    else:  # a zoo: networks differing only in how they are trained start alike
        from nngauge.studies._grid import ARCHITECTURE

        seed = derive_seed(spec.seed, "init", *(task.architecture.description[name]
                                                for name in ARCHITECTURE), task.unit.seed)
    return build_from_config(task.architecture.config, generator=_generator(seed),
                             dtype=getattr(torch, spec.dtype))


def build_from_config(config: dict, *, generator=None, dtype=None):
    """:func:`nngauge.nn.mlp` or, for ``"family": "cnn"``, :func:`nngauge.nn.cnn` from an
    architecture's stored config."""
    import torch

    from nngauge.nn import cnn, mlp

    config = dict(config)
    build = cnn if config.pop("family", "mlp") == "cnn" else mlp
    return build(config.pop("d_in"), config.pop("width"), config.pop("depth"), config.pop("d_out"),
                 generator=generator, dtype=dtype or torch.float32, **config)


# ---------------------------------------------------------------------------------- running


def run_unit(task: UnitTask) -> dict:
    """Run one unit (the default runner of every executor); see :data:`UnitRunner`. The
    warnings the unit raises are recorded under the result's ``"warnings"`` (each distinct
    text once, as ``"Category: message"``) instead of printed by the worker; the driver
    counts them over units (:attr:`~nngauge.studies.RunSummary.warnings`). The warning filters
    in force decide as always (an "error" filter still raises)."""
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        result = _run_unit(task)
    result["warnings"] = sorted({f"{w.category.__name__}: {w.message}" for w in caught})
    return result


def _run_unit(task: UnitTask) -> dict:
    started = time.perf_counter()
    if task.unit.kind == "builder":
        from nngauge.studies._builder import run_builder_unit

        return run_builder_unit(task, started)
    if task.unit.kind == "network":
        from nngauge.studies._zoo import run_network

        return run_network(task, started)
    train, val, test = study_data(task.spec.data, task.spec.seed)
    model = build_model(task)
    unit = task.unit
    if unit.kind == "init":
        generator = _generator(derive_seed(task.spec.seed, "measure", unit.arch_index, unit.seed))
        measures = _measure(task.spec.measures.names, model, (train, val, test),
                            task.spec.measures.batch_size, generator,
                            options=task.spec.measures.options_of())
        return {"measures": measures, "train": None,
                "seconds": time.perf_counter() - started}
    from nngauge.training import fit, smallest_lr

    t = task.spec.training
    initial = copy.deepcopy(model) if _reads_initial(t.measure_after) else None
    lr = unit.lr
    if lr is None:  # the paper's grid, from this network's smallest rate (E.2)
        factor, _, scale = t.auto_lr
        start = smallest_lr(model, train, optimizer=t.optimizer, batch_size=t.batch_size,
                            scale=scale, loss_scaling=t.loss_scaling,
                            generator=_generator(derive_seed(task.spec.seed, "smallest_lr",
                                                             unit.arch_index, unit.seed)))
        lr = start * factor ** unit.lr_index
    result = fit(model, train, val, test=test, lr=lr, optimizer=t.optimizer,
                 batch_size=t.batch_size, max_epochs=t.max_epochs, patience=t.patience,
                 decay_patience=t.decay_patience, n_decays=t.n_decays,
                 loss_scaling=t.loss_scaling,
                 generator=_generator(derive_seed(task.spec.seed, "train", unit.arch_index,
                                                  unit.seed, unit.lr)))
    after = {}
    if t.measure_after:  # fit leaves the network at its best weights: the trained network
        generator = _generator(derive_seed(task.spec.seed, "measure_after", unit.arch_index,
                                           unit.seed, lr))
        after = {f"{column}{AFTER}": value for column, value in _measure(
            t.measure_after, model, (train, val, test), task.spec.measures.batch_size,
            generator, undefined_as_nan=True, initial=initial,
            options=task.spec.measures.options_of()).items()}
    return {"measures": after,
            "train": {"lr": lr, "best_val_error": result.best_val_error,
                      "test_error": result.test_error, "train_error": result.train_error,
                      "epochs": result.epochs, "diverged": result.diverged},
            "seconds": time.perf_counter() - started}


def _reads_initial(names) -> bool:
    """Whether a measure of ``names`` reads the network at initialization (``entry.initial``)."""
    return any(name in ENTRIES and ENTRIES[name].initial for name in names)


def _measure(names, model, parts, batch_size, generator, *, undefined_as_nan=False,
             initial=None, options=None) -> dict:
    """The columns of the measures ``names`` of ``model`` (:data:`MEASURES`); ``parts`` =
    (train, val, test); ``initial``: the network before training, for the measures that read
    it (``entry.initial``; None: ``model`` itself, a network at initialization). A measure of
    :data:`DERIVED` is computed from the columns of the measures it derives from, each taken
    once per call (and recorded only when named). With ``undefined_as_nan``, a measure
    undefined on a network whose output is constant over the data (no NLC or bias: e.g. one
    that training killed) records NaN instead of failing the unit (a trained network's errors
    are kept). ``options``: {name: keyword options} of the spec's ``[measures.options]``."""
    taken: dict[str, dict] = {}
    options = options or {}

    def columns(name: str) -> dict:
        if name in taken:
            return taken[name]
        if name in DERIVED:
            sources, rule = DERIVED[name]
            taken[name] = rule({k: v for source in sources for k, v in columns(source).items()})
            return taken[name]
        run = _MEASURE_RUNNERS[name]
        if name in ENTRIES and ENTRIES[name].initial and name not in RULES:
            run = functools.partial(run, initial=model if initial is None else initial)
        if name in options:
            run = functools.partial(run, options=options[name])
        try:
            taken[name] = run(model, parts, batch_size, generator)
        except InvalidInputError as exc:
            if not undefined_as_nan or "constant output" not in str(exc):
                raise
            taken[name] = {column: math.nan for column in MEASURES[name]}
        return taken[name]

    measures = {}
    for name in names:
        measures.update(columns(name))
    return measures


def _run(entry, model, parts, batch_size, generator, *, initial=None, options=None) -> dict:
    """One catalogue entry's study columns (``entry.columns``): its function on the training
    set, with the study's batch size where a measure takes one (a proxy reads its own default
    batch, as its paper does), ``generator``, ``initial_model=initial`` where the entry reads
    the network at initialization, and the entry's :data:`OPTIONS`; once per variant
    whose result holds some of the columns (``Entry.column_sources``); ``options``, the
    spec's for this measure, on top of all but the variant's own. A proxy
    undefined for this architecture (naswot without piecewise-linear units, region_density of
    a smooth network, a synaptic flow past float64) records NaN: a fact about the
    architecture, not the unit's failure."""
    function = entry.function
    taken = inspect.signature(function).parameters
    study = {"generator": generator} if "generator" in taken else {}
    if entry.kind == "measure" and "batch_size" in taken:
        study["batch_size"] = batch_size
    if entry.initial:
        study["initial_model"] = initial
    study.update(OPTIONS.get(entry.name, lambda train: {})(parts[0]))
    study.update(options or {})
    reads = (parts[0],) if "data" in taken else ()  # a measure of the weights reads none
    out = {}
    for variant, columns in entry.column_sources().items():
        given = {**study, **(entry.variants[variant] if variant else {})}
        try:
            result = function(model, *reads, **given)
        except InvalidInputError:
            if entry.kind == "measure":
                raise
            result = math.nan
        if entry.result is None:  # a float: the proxy's number
            out.update({column: result for column in columns})
        else:
            out.update({column: getattr(result, field) for column, field in columns.items()})
    return out


def _kernel_conditioning(model, parts, batch_size, generator):
    """The last hidden layer's conjugate kernel (Agarwal et al.'s NNGP), read as
    :func:`nngauge.proxies.kernel_condition` reads it: the output of the last linear or
    convolutional layer before the read-out (an MLP's last hidden linear layer, a CNN's last
    convolution) on min(200, half its units per sample) samples of the training set (n
    samples of n_l features put the kernel's smallest eigenvalue at the random-matrix edge,
    near 0, as n nears n_l)."""
    from nngauge.proxies import kernel_condition

    return {"kernel_condition_number": kernel_condition(model, parts[0])}


def _nlc_rule(columns: dict) -> dict:
    """The NLC paper's rule (:func:`nngauge.proxies.nlc_rule`) of the NLC and output bias the
    study records: one NLC per network."""
    from nngauge.proxies._ours import nlc_rule_of

    return {"nlc_rule": nlc_rule_of(columns["nlc"], columns["output_bias"])}


def _error_preserving_perturbation(model, parts, batch_size, generator):
    """NLC paper E.3: the test set is corrupted; 10 random batches x 10 directions, but one
    batch when the test set fits in it (ten copies of the same batch add nothing)."""
    from nngauge.measures import error_preserving_perturbation

    test = parts[2]
    n = len(test.labels)
    return {"error_preserving_perturbation": error_preserving_perturbation(
        model, test, batch_size=min(batch_size, n), n_batches=10 if n > batch_size else 1,
        generator=generator).median}


RULES = {"kernel_conditioning": _kernel_conditioning,
         "error_preserving_perturbation": _error_preserving_perturbation}
"""The study's own ways of taking two measures, by catalogue name (every other entry runs as
:func:`_run` says): runner ``(model, (train, val, test), batch_size, generator) -> {column:
value}``."""
DERIVED = {"nlc_rule": (("nlc",), _nlc_rule)}
"""Study measures computed from others' columns rather than measured again, by catalogue name:
(the measures they read, rule ``{column: value} -> {column: value}``). The nlc_rule column is
the rule of the nlc and output_bias columns (the proxy alone measures its own NLC)."""
OPTIONS = {"jacob_cov": lambda train: {"batch_size": min(128, train.inputs[0].numel())},
           "gradient_noise": lambda train: {"batch_size": max(1, min(
               GRADIENT_NOISE_BATCH, len(train.labels) // 2))}}
"""Catalogue name -> options of the entry's run on the training set ``train``: jacob_cov reads
at most as many samples as the input has dimensions (more make its Jacobian correlation matrix
singular whatever the network, and the score a constant), at most its default 128; the
gradient noise's ``batch_size`` is the size of its mini-batches, not a forward pass's:
:data:`GRADIENT_NOISE_BATCH` (at most half the training set: two batches)."""
GRADIENT_NOISE_BATCH = 32
"""The mini-batch size of a study's gradient noise (the function's default; Jiang et al. use
the training batch size)."""

_MEASURE_RUNNERS = {name: RULES.get(name, functools.partial(_run, entry))
                    for name, entry in ENTRIES.items() if name not in DERIVED}
"""Study name (:data:`MEASURES`, but those of :data:`DERIVED`) -> runner ``(model, (train,
val, test), batch_size, generator) -> {column: value}``: the rule of :data:`RULES`, else
:func:`_run` of the entry."""
