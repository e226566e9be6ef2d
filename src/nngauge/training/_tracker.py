"""Measures tracked every N steps in any training loop.

The Tracker calls the measure functions of :mod:`nngauge.measures` themselves (one
implementation, so the tracked and the functional values cannot disagree) and keeps each
result's float fields as columns. By name:

- "nlc": :func:`nngauge.nlc` (columns nlc, nlc/stderr, nlc/jacobian_rms, nlc/input_std,
  nlc/output_std, nlc/output_bias);
- "jacobian_norm": :func:`nngauge.jacobian_norm` (jacobian_norm/norm, /mean, /median, /max);
- "correlations": :func:`nngauge.correlations` (correlations/rho_max);
- "gradient_metrics": :func:`nngauge.gradient_metrics` (gvcs, gradient_length, lipschitz,
  mean_loss; needs labels);
- "weight_norm": sqrt(sum_p ||p||^2) over the parameters;
- "grad_norm": the same over the gradients the training step left in ``.grad`` (NaN if none).

Default: ("nlc", "weight_norm", "grad_norm"). The NLC is the NLC paper's predictor of test
error and its single-probe estimate on the current batch costs about one forward and one
backward pass, i.e. about one training step; the norms cost O(parameters). Measuring every
10th step thus adds about 10%; "jacobian_norm" (power iteration) and "correlations" (all pairs)
are heavier and left to the user's choice.
"""

from __future__ import annotations

import dataclasses
import math
from importlib import import_module
from typing import Any, Callable, Mapping, Optional, Sequence, Union

import torch
from torch import nn

from nngauge.errors import UnknownNameError, invalid, require_extra
from nngauge.training._sinks import as_sink

MeasureSpec = Union[str, Callable[..., Any]]
DEFAULT_MEASURES = ("nlc", "weight_norm", "grad_norm")


def _library(name: str, batched: bool) -> Callable[..., Any]:
    def run(model, data, n, generator, **options):
        measure = getattr(import_module("nngauge.measures"), name)
        if batched:
            options = {"batch_size": n, "generator": generator, **options}
        return measure(model, data, **options)

    run.__name__ = name
    return run


def _weight_norm(model: nn.Module, data, n, generator) -> float:
    with torch.no_grad():
        return math.sqrt(sum(float(p.double().pow(2).sum()) for p in model.parameters()))


def _grad_norm(model: nn.Module, data, n, generator) -> float:
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    if not grads:
        return math.nan
    return math.sqrt(sum(float(g.double().pow(2).sum()) for g in grads))


REGISTRY: dict[str, Callable[..., Any]] = {
    "nlc": _library("nlc", batched=True),
    "jacobian_norm": _library("jacobian_norm", batched=True),
    "gradient_metrics": _library("gradient_metrics", batched=True),
    "correlations": _library("correlations", batched=False),
    "weight_norm": _weight_norm,
    "grad_norm": _grad_norm,
}


class Tracker:
    """Compute measures every ``every`` steps of a training loop and keep their history.

    At a measured step s the measures run on ``data`` (or the step's batch) with a generator
    seeded ``seed + s``, so ``tracker.history`` at step s equals e.g.
    ``nngauge.nlc(model, batch, batch_size=len(batch), generator=torch.Generator()
    .manual_seed(seed + s))``. Measures leave the model as they found it (mode, buffers,
    parameters, gradients) and run it in its current mode.

    Args:
        measures: names from :data:`REGISTRY` (module docstring), callables
            ``f(model, data) -> float | dict | measure result``, or a dict name -> either;
            default ("nlc", "weight_norm", "grad_norm").
        every: measure when the step index is a multiple of ``every`` (>= 1; default 1).
        sinks: where rows go as well: :class:`CSVSink`, :class:`JSONLSink`,
            :class:`TensorBoardSink`, or paths ending in .csv / .jsonl.
        data: fixed data to measure on (e.g. a held-out batch); None: the step's batch.
        seed: base seed of the measures' generators.
        options: per-measure keyword options, e.g. ``{"nlc": {"n_probes": 4}}``.

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

    def __init__(self, measures: Union[Sequence[MeasureSpec], Mapping[str, MeasureSpec]] =
                 DEFAULT_MEASURES, *, every: int = 1, sinks: Sequence[Any] = (), data: Any = None,
                 seed: int = 0, options: Optional[Mapping[str, Mapping[str, Any]]] = None) -> None:
        if isinstance(every, bool) or not isinstance(every, int) or every < 1:
            raise invalid("Tracker()", "every an integer >= 1", repr(every),
                          "pass every=1 to measure at every step or e.g. every=10")
        if isinstance(measures, (str, bytes)) or callable(measures):
            measures = [measures]
        items = measures.items() if isinstance(measures, Mapping) else \
            [(m if isinstance(m, str) else getattr(m, "__name__", "measure"), m) for m in measures]
        self._measures = {name: self._resolve(spec) for name, spec in items}
        self._options = {name: dict(o) for name, o in (options or {}).items()}
        unknown = set(self._options) - set(self._measures)
        if unknown:
            raise invalid("Tracker()", f"options for tracked measures {sorted(self._measures)}",
                          f"options for {sorted(unknown)}", "add the measure or drop its options")
        self.every, self.data, self.seed = every, data, seed
        self._sinks = [as_sink(s) for s in sinks]
        self._rows: list[dict[str, Any]] = []
        self._calls = 0

    @staticmethod
    def _resolve(spec: MeasureSpec):
        if isinstance(spec, str):
            if spec not in REGISTRY:
                raise UnknownNameError(
                    f"Tracker() expected a measure name in {sorted(REGISTRY)} or a callable; "
                    f"got {spec!r}. Fix: use one of those names or pass a function "
                    "f(model, data) -> float.")
            return REGISTRY[spec]
        if callable(spec):
            return lambda model, data, n, generator, **options: spec(model, data, **options)
        raise invalid("Tracker()", "measure names or callables", repr(spec),
                      f"use names from {sorted(REGISTRY)}")

    def step(self, model: nn.Module, batch: Any = None, *, step: Optional[int] = None
             ) -> Optional[dict[str, float]]:
        """Count a training step; at every ``every``-th, measure and return the row.

        Args:
            model: the network being trained.
            batch: the step's batch (tensor or ``(inputs, labels)``); used when the tracker
                has no fixed ``data``.
            step: the step index (e.g. a global step); default: the number of earlier calls.

        Returns:
            ``{"step": s, column: value, ...}`` at a measured step, else None.
        """
        index = self._calls if step is None else int(step)
        self._calls += 1
        if index % self.every:
            return None
        data = self.data if self.data is not None else batch
        if data is None:
            raise invalid("Tracker.step()", "a batch (or a Tracker built with data=)", "None",
                          "call tracker.step(model, batch)")
        values: dict[str, float] = {}
        for name, measure in self._measures.items():
            generator = torch.Generator().manual_seed(self.seed + index)
            result = measure(model, data, _n_samples(data), generator,
                             **self._options.get(name, {}))
            values.update(_columns(name, result))
        for sink in self._sinks:
            sink.write(index, values)
        row = {"step": index, **values}
        self._rows.append(row)
        return row

    @property
    def records(self) -> list[dict[str, Any]]:
        """The measured rows as dicts, oldest first."""
        return [dict(row) for row in self._rows]

    @property
    def history(self):
        """The measured rows as a pandas DataFrame (a ``step`` column, one per measure field)."""
        pd = require_extra("pandas", "report", "Tracker.history")
        return pd.DataFrame(self._rows)

    def close(self) -> None:
        """Flush and close the sinks."""
        for sink in self._sinks:
            sink.close()

    def __enter__(self) -> "Tracker":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _n_samples(data: Any) -> int:
    inputs = data[0] if isinstance(data, (tuple, list)) else data
    return len(inputs) if hasattr(inputs, "__len__") else 250


def _columns(name: str, result: Any) -> dict[str, float]:
    """A measure's outputs as columns ``name`` (a scalar, or a field called ``name``) and
    ``name/field``; of a result dataclass, the float fields (summary values, not counts)."""
    if dataclasses.is_dataclass(result):
        fields = {f.name: getattr(result, f.name) for f in dataclasses.fields(result)
                  if isinstance(getattr(result, f.name), float)}
    elif isinstance(result, Mapping):
        fields = dict(result)
    else:
        return {name: float(result)}
    return {(name if key == name else f"{name}/{key}"): float(value)
            for key, value in fields.items()}
