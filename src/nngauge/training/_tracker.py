"""The Tracker: measures of :mod:`nngauge` at chosen steps of any training loop.

Which measures and how each is called at a step (data, fixed probe points, seeds, defaults,
columns): :mod:`nngauge.training._registry`. How results become columns:
:mod:`nngauge.training._flatten`. When to measure: :mod:`nngauge.training._schedules`.

Default measures: ("nlc", "weight_norm", "grad_norm"). The NLC is the NLC paper's predictor
of test error and its single-probe estimate on the current batch costs about one forward and
one backward pass, i.e. about one training step; the norms cost O(parameters). Measuring every
10th step thus adds about 10%; the other measures are heavier and left to the user's choice.
"""

from __future__ import annotations

import copy
from typing import Any, Callable, Mapping, Optional, Sequence, Union

import torch
from torch import nn

from nngauge._constraints import GENERATOR
from nngauge._internal.data import collect
from nngauge._random import seed_of
from nngauge._vocabulary import renamed
from nngauge.errors import invalid, require_extra
from nngauge.training._flatten import columns
from nngauge.training._registry import PROBE_SAMPLES, StepInputs, bind
from nngauge.training._schedules import Schedule, as_schedule, check_count
from nngauge.training._sinks import as_sink

MeasureSpec = Union[str, Callable[..., Any], tuple]
DEFAULT_MEASURES = ("nlc", "weight_norm", "grad_norm")
Snapshot = tuple[int, dict[str, torch.Tensor]]


class Tracker:
    """Compute measures at scheduled steps of a training loop and keep their history.

    At a measured step every measure runs on the model as it is (in its current mode; the
    measures leave mode, buffers, parameters and gradients as they found them), each with a
    new ``torch.Generator`` seeded with the Tracker's seed (:attr:`seed`), so that
    ``tracker.history`` at step s equals the functional call, e.g. ``nngauge.nlc(model, batch,
    batch_size=len(batch), generator=torch.Generator().manual_seed(tracker.seed))``, and a
    model that did not change gives the same values at every step. Each row holds ``step`` (and ``epoch`` for rows of
    :meth:`epoch_end`) and the measures' columns ``measure/.../field``.

    Args:
        measures: names (every measure of :func:`nngauge.catalogue` but fold_batchnorm,
            and "weight_norm", "grad_norm"; how each is fed:
            :mod:`nngauge.training._registry`), callables ``f(model, data, **options) ->
            number | dict | measure result`` (given ``generator=`` if they take one),
            ``(name or callable, options)`` pairs, or a dict column name -> any of these (to
            track one measure twice with different options); default ("nlc",
            "weight_norm", "grad_norm").
        every: measure at every ``every``-th step (>= 1); shorthand for ``schedule=every``.
        schedule: an integer N (every N steps), ``("log", n)`` (steps 0 and
            round(10^(k/n)): :func:`log_steps`), a list of steps, or ``"epoch"`` (at each
            :meth:`epoch_end` call instead of at steps). Default: every step.
        sinks: where rows go as well: :class:`CSVSink`, :class:`JSONLSink`,
            :class:`TensorBoardSink`, or paths ending in .csv / .jsonl.
        data: fixed data for the measures of data (e.g. a held-out batch); None: the step's
            batch.
        probe_data: the fixed probe points (trajectory endpoints, points of patterns,
            regions and kernels); None: the first 256 inputs of ``data``, else of the first
            measured batch. Copied.
        generator: an int seed (default 0), or a torch.Generator from which one seed is drawn
            when the Tracker is built (:func:`nngauge._random.seed_of`); every measure's
            generator is seeded with it at every step. ``seed=``: its deprecated name.
        options: per-measure keyword options, e.g. ``{"nlc": {"n_probes": 4}}`` (merged over
            those of a ``(name, options)`` pair).
        keep_weights: also keep a detached CPU copy of the named parameters at every
            measurement (True) or every k-th measurement (an integer k), in
            :attr:`weight_snapshots`.
        initial_model: the network at initialization, for the measures that compare with it
            (``distance_from_init``, ``norm_measures``, ``flatness``: their
            ``initial_model=``); None: a copy of the model as the Tracker first sees it, at
            its first :meth:`step` or :meth:`epoch_end` call (in :func:`fit`, after the first
            optimizer step: pass the untrained copy for the exact initialization). Kept as
            given (not copied).

    Example:
        >>> import torch
        >>> from nngauge.training import Tracker
        >>> from nngauge.nn import mlp
        >>> net, tracker = mlp(8, 16, 2, 2), Tracker(every=2)
        >>> for step in range(4):
        ...     _ = tracker.step(net, torch.randn(32, 8))
        >>> tracker.history["step"].tolist(), "nlc" in tracker.history
        ([0, 2], True)
    """

    @renamed(seed="generator")
    def __init__(self, measures: Union[Sequence[MeasureSpec], Mapping[str, MeasureSpec]] =
                 DEFAULT_MEASURES, *, every: Optional[int] = None, schedule: Any = None,
                 sinks: Sequence[Any] = (), data: Any = None, probe_data: Any = None,
                 generator: Union[torch.Generator, int] = 0,
                 options: Optional[Mapping[str, Mapping[str, Any]]] = None,
                 keep_weights: Union[bool, int] = False,
                 initial_model: Optional[nn.Module] = None) -> None:
        self.schedule = _schedule(every, schedule)
        self.keep_weights = _keep_every(keep_weights)
        specs = _named_specs(measures)
        unknown = set(options or {}) - set(specs)
        if unknown:
            raise invalid("Tracker()", f"options for tracked measures {sorted(specs)}",
                          f"options for {sorted(unknown)}", "add the measure or drop its options")
        self._measures = {name: bind(name, spec, {**given, **(options or {}).get(name, {})})
                          for name, (spec, given) in specs.items()}
        if generator is None or not GENERATOR.accepts(generator):
            raise invalid("Tracker()", "generator an int seed >= 0 or a torch.Generator",
                          f"generator={generator!r}", "pass e.g. generator=0 (the default)")
        self.data, self.seed = data, seed_of(generator)
        self._probes = None if probe_data is None else _probe_points(probe_data, None)
        if initial_model is not None and not isinstance(initial_model, nn.Module):
            raise invalid("Tracker()", "initial_model a torch.nn.Module (the network at "
                          "initialization) or None", f"a {type(initial_model).__name__}",
                          "pass copy.deepcopy(model) taken before training")
        self._initial = initial_model
        self._reads_initial = any(getattr(m, "reads_initial", False)
                                  for m in self._measures.values())
        self._sinks = [as_sink(s) for s in sinks]
        self._rows: list[dict[str, Any]] = []
        self._snapshots: list[Snapshot] = []
        self._steps = self._epochs = self._measured = self._last_step = 0
        self._last_batch: Any = None

    def step(self, model: nn.Module, batch: Any = None, *, step: Optional[int] = None
             ) -> Optional[dict[str, float]]:
        """Count a training step; at a scheduled one, measure and return the row.

        Args:
            model: the network being trained.
            batch: the step's batch (tensor or ``(inputs, labels)``); measured when the
                tracker has no fixed ``data``, and kept for :meth:`epoch_end`.
            step: the step index (e.g. a global step); default: the number of earlier calls.

        Returns:
            ``{"step": s, column: value, ...}`` at a measured step, else None.
        """
        self._keep_initial(model)
        index = self._steps if step is None else int(step)
        self._steps += 1
        self._last_step, self._last_batch = index, batch
        if self.schedule.unit != "step" or not self.schedule(index):
            return None
        return self._measure(model, batch, {"step": index})

    def epoch_end(self, model: nn.Module, batch: Any = None, *, epoch: Optional[int] = None,
                  step: Optional[int] = None) -> Optional[dict[str, float]]:
        """Count the end of an epoch; with ``schedule="epoch"``, measure and return the row.

        With a schedule of steps this only counts the epoch, so a loop (or the Lightning
        callback) may call it whatever the schedule.

        Args:
            model: the network being trained.
            batch: the data to measure when the tracker has no fixed ``data``; default the
                last batch given to :meth:`step`.
            epoch: the epoch index; default: the number of earlier calls.
            step: the row's step index; default: that of the last :meth:`step` call (0 if
                none).

        Returns:
            ``{"step": s, "epoch": e, column: value, ...}`` when measured, else None.
        """
        self._keep_initial(model)
        index = self._epochs if epoch is None else int(epoch)
        self._epochs += 1
        if self.schedule.unit != "epoch" or not self.schedule(index):
            return None
        return self._measure(model, self._last_batch if batch is None else batch,
                             {"step": self._last_step if step is None else int(step),
                              "epoch": index})

    def _keep_initial(self, model: nn.Module) -> None:
        """A copy of the model as first seen, when a measure reads it and none was given."""
        if self._reads_initial and self._initial is None:
            self._initial = copy.deepcopy(model)

    @property
    def initial_model(self) -> Optional[nn.Module]:
        """The network at initialization the measures compare with (None before the first
        call when none was given, or when no measure reads it)."""
        return self._initial

    def _measure(self, model: nn.Module, batch: Any, keys: dict[str, int]) -> dict[str, Any]:
        if self.keep_weights and self._measured % self.keep_weights == 0:
            self._snapshots.append((keys["step"], {
                name: p.detach().to("cpu", copy=True) for name, p in model.named_parameters()}))
        self._measured += 1
        inputs = StepInputs(self.data if self.data is not None else batch,
                            lambda: self._probe_points_from(batch), lambda: self._initial)
        values: dict[str, float] = {}
        for name, measure in self._measures.items():
            generator = torch.Generator().manual_seed(self.seed)
            values.update(columns(name, measure(model, inputs, generator)))
        row = {**keys, **values}
        for sink in self._sinks:
            sink.write(keys["step"], {k: v for k, v in row.items() if k != "step"})
        self._rows.append(row)
        return row

    def _probe_points_from(self, batch: Any) -> torch.Tensor:
        if self._probes is None:
            source = self.data if self.data is not None else batch
            if source is None:
                raise invalid("Tracker", "probe points: probe_data=, data= or a batch",
                              "none of them", "build the Tracker with probe_data= or pass the "
                              "step's batch")
            self._probes = _probe_points(source, PROBE_SAMPLES)
        return self._probes

    @property
    def records(self) -> list[dict[str, Any]]:
        """The measured rows as dicts, oldest first."""
        return [dict(row) for row in self._rows]

    @property
    def history(self):
        """The measured rows as a pandas DataFrame (``step``, then one column per measure
        field; NaN where a row lacks a column)."""
        pd = require_extra("pandas", "report", "Tracker.history")
        return pd.DataFrame(self._rows)

    @property
    def weight_snapshots(self) -> list[Snapshot]:
        """``(step, {parameter name: CPU tensor})`` at the kept measurements, oldest first:
        e.g. the ``trajectory=`` of the principal-component directions of
        ``loss_landscape(..., directions="pca")`` (Li, Xu, Taylor, Studer and Goldstein,
        "Visualizing the Loss Landscape of Neural Nets", NeurIPS 2018, section 7) as
        ``[weights for _, weights in tracker.weight_snapshots]``."""
        return list(self._snapshots)

    @property
    def probes(self) -> Optional[torch.Tensor]:
        """The fixed probe points P (n, ...), once known."""
        return self._probes

    def close(self) -> None:
        """Flush and close the sinks."""
        for sink in self._sinks:
            sink.close()

    def __enter__(self) -> "Tracker":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _schedule(every: Optional[int], schedule: Any) -> Schedule:
    if every is not None and schedule is not None:
        raise invalid("Tracker()", "every= or schedule=", f"every={every!r} and "
                      f"schedule={schedule!r}", "pass one of them")
    if every is not None:
        check_count(every, "every", "Tracker()")
        return as_schedule(every)
    return as_schedule(1 if schedule is None else schedule)


def _keep_every(keep: Any) -> int:
    """0 (keep none) or k (keep every k-th measurement)."""
    if isinstance(keep, bool):
        return int(keep)
    check_count(keep, "keep_weights (True, False or every k-th measurement)", "Tracker()")
    return keep


def _named_specs(measures: Any) -> dict[str, tuple[Any, Mapping[str, Any]]]:
    """Column name -> (name or callable, options) for every accepted form of ``measures``."""
    if isinstance(measures, str) or callable(measures) or _is_pair(measures):
        measures = [measures]
    if isinstance(measures, Mapping):
        items = [(name, _with_options(spec)) for name, spec in measures.items()]
    else:
        items = [(_name_of(spec), _with_options(spec)) for spec in measures]
    names = [name for name, _ in items]
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise invalid("Tracker()", "each measure once", f"{repeated} more than once",
                      "pass a dict column name -> (measure, options) to track a measure twice")
    return dict(items)


def _is_pair(spec: Any) -> bool:
    return isinstance(spec, tuple) and len(spec) == 2 and isinstance(spec[1], Mapping)


def _with_options(spec: Any) -> tuple[Any, Mapping[str, Any]]:
    return spec if _is_pair(spec) else (spec, {})


def _name_of(spec: Any) -> str:
    measure = _with_options(spec)[0]
    return measure if isinstance(measure, str) else getattr(measure, "__name__", "measure")


def _probe_points(source: Any, max_samples: Optional[int]) -> torch.Tensor:
    """The inputs of ``source`` (at most ``max_samples``) as a detached copy."""
    inputs = collect(source, where="Tracker probes", max_samples=max_samples,
                     require_float=False).inputs
    return inputs.detach().clone()

