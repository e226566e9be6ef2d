"""Zero-cost ranking of a user's candidate architectures before any training.

An architecture designer asks which of their candidates will train and generalize before
spending the GPU-days. :func:`rank` builds every point of a grid of the keyword arguments of
the user's builder, measures each network at initialization on the user's data and orders the
candidates by the first predictor in its known direction. Nothing is trained.

The default predictors are those that ranked best at initialization in nngauge's predictor
benchmark (README, "Predicting test error before training": 100 sampled MLPs on
waveform-noise, Spearman's rho with accuracy): the NLC rule (the NLC in the ideal range 1-3,
a very large output bias ruled out: Philipp & Carbonell, "The Nonlinearity Coefficient -
Predicting Generalization in Deep Neural Networks", arXiv 2018, section 4; rho 0.61) and
TE-NAS's NTK condition number (Chen, Gong & Wang, "Neural Architecture Search on ImageNet in
Four GPU Hours", ICLR 2021, section 3.1; rho 0.48), with the parameter count and the FLOPs as
the baselines every zero-cost proxy is compared with (Abdelfattah et al., "Zero-Cost Proxies
for Lightweight NAS", ICLR 2021). That benchmark covers fully-connected networks on one data
set: on other families the ordering is a hypothesis to check, not evidence.

A candidate whose builder call or forward pass fails is kept, ranked last, with its error;
a grid whose keys the builder does not take is refused before anything is built, as is data
on which no candidate runs. ``nngauge rank`` prints the table and writes a page
(:func:`nngauge.report.rank_page`) and the records as JSON.
"""

from __future__ import annotations

import inspect
import itertools
import math
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional, Sequence, Union

import torch
from torch import nn

from nngauge._random import seed_of
from nngauge.errors import NNGaugeError, UnknownNameError, invalid

DEFAULT_MEASURES = ("nlc_rule", "te_nas", "n_params", "flops")
"""The predictors :func:`rank` measures by default, the first being the one it ranks by."""


@dataclass(frozen=True)
class Candidate:
    """One point of the grid.

    Attributes:
        arguments: the builder's keyword arguments.
        values: each measure column's value (NaN where undefined).
        rank: 1 for the best by the ranking column; None for a candidate that failed.
        error: why the builder call or a measure failed ("" if none did).
    """

    arguments: dict[str, Any]
    values: dict[str, float]
    rank: Optional[int]
    error: str = ""

    def record(self) -> dict[str, Any]:
        """One flat record: the arguments, the measure columns, the rank and the error."""
        return {**self.arguments, **self.values, "rank": self.rank, "error": self.error}


@dataclass(frozen=True)
class Ranking:
    """The candidates in rank order (failed ones last), what was measured and by what ranked.

    Attributes:
        candidates: the :class:`Candidate` s, best first.
        keys: the grid's keyword names, in the grid's order.
        columns: the measure columns, in the order of ``measures``.
        measures: the study measures run (``nngauge.studies.MEASURES`` names).
        key, direction: the column ranked by, and +1 (higher predicts higher accuracy) or -1.
    """

    candidates: tuple[Candidate, ...]
    keys: tuple[str, ...]
    columns: tuple[str, ...]
    measures: tuple[str, ...]
    key: str
    direction: int

    def records(self) -> list[dict[str, Any]]:
        """One record per candidate (:meth:`Candidate.record`), best first."""
        return [candidate.record() for candidate in self.candidates]

    def cells(self) -> tuple[list[str], list[list[str]]]:
        """The header and, per candidate, its cells as text: rank ("-" without one), the
        arguments, the measure columns (4 significant digits), the error."""
        header = ["rank", *self.keys, *self.columns, "error"]
        rows = [[str(c.rank or "-"), *(str(c.arguments[k]) for k in self.keys),
                 *(_cell(c.values.get(col)) for col in self.columns), c.error]
                for c in self.candidates]
        return header, rows

    def table(self) -> str:
        """The ranking as a plain-text table, one line per candidate (errors cut to 60
        characters)."""
        header, rows = self.cells()
        rows = [[*row[:-1], row[-1][:60]] for row in rows]
        widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
        return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip()
                         for row in [header, *rows])

def _cell(value: Optional[float]) -> str:
    if value is None:
        return ""
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def rank(
    builder: Union[str, Callable[..., nn.Module]],
    grid: Mapping[str, Sequence[Any]],
    data: Any,
    *,
    measures: Sequence[str] = DEFAULT_MEASURES,
    batch_size: int = 256,
    generator: Union[int, torch.Generator] = 0,
) -> Ranking:
    """Measure every candidate of ``grid`` at initialization and rank them, before training.

    Args:
        builder: a function returning an ``nn.Module`` from keyword arguments, or
            ``"path/to/file.py:function"``.
        grid: keyword -> the values to try; every combination is one candidate (keys the
            builder does not take are refused).
        data: ``(inputs, labels)`` tensors: the predictors read the inputs (and labels where
            they need them).
        measures: study measure names (``nngauge.studies.MEASURES``); the first one's first
            column ranks the candidates, in its known direction (default
            :data:`DEFAULT_MEASURES`).
        batch_size: samples per batch of the measures that take one.
        generator: an int seed or a torch.Generator: every candidate is built and measured
            from the same seed.

    Returns:
        A :class:`Ranking`.

    Raises:
        InvalidInputError: a builder path or grid that cannot work, unknown measures, or
            data on which no candidate runs (with the first candidate's error).

    Example:
        >>> import torch
        >>> from nngauge.nn import mlp
        >>> from nngauge.studies import rank
        >>> def build(depth, width):
        ...     return mlp(8, width, depth, 3, activation="tanh")
        >>> x, y = torch.randn(64, 8), torch.randint(0, 3, (64,))
        >>> ranking = rank(build, {"depth": [2, 6], "width": [16]}, (x, y),
        ...                measures=["nlc_rule", "n_params"])
        >>> [c.rank for c in ranking.candidates], ranking.key
        ([1, 2], 'nlc_rule')
    """
    from nngauge.studies._predictors import known_directions

    where = "rank()"
    build = _builder(builder, where)
    keys = _checked_grid(build, grid, where)
    columns = measure_columns(measures, where)
    inputs, labels = _pair(data, where)
    seed = seed_of(generator)
    found: list[Candidate] = []
    ran = False
    for values in itertools.product(*(grid[k] for k in keys)):
        arguments = dict(zip(keys, values))
        try:
            with torch.random.fork_rng(devices=[]):  # the caller's random state is kept
                torch.manual_seed(seed)
                model = build(**arguments)
            if not isinstance(model, nn.Module):
                raise invalid(where, "the builder to return a torch.nn.Module",
                              type(model).__name__, "return the model object")
        except NNGaugeError as exc:
            found.append(Candidate(arguments, {}, None, str(exc)))
            continue
        except Exception as exc:  # the user's builder: any error is that candidate's
            found.append(Candidate(arguments, {}, None, f"the builder raised "
                                   f"{type(exc).__name__}: {exc}"))
            continue
        error = _runs_on(model, inputs, where)
        if error:
            found.append(Candidate(arguments, {}, None, error))
            continue
        ran = True
        try:
            measured = measure_candidate(model, (inputs, labels), measures,
                                         batch_size=batch_size, generator=seed)
        except Exception as exc:  # a measure failing on one candidate is that row's error
            found.append(Candidate(arguments, {}, None, f"{type(exc).__name__}: {exc}"))
            continue
        found.append(Candidate(arguments, measured, None))
    if not ran:
        raise invalid(where, "data on which the candidates run",
                      f"no candidate ran; the first: {found[0].error}" if found else "no grid",
                      "pass inputs of the shape and dtype the builder's networks take")
    key = columns[0]
    direction = known_directions().get(key, 1)
    return Ranking(_ordered(found, key, direction), keys, columns, tuple(measures), key,
                   direction)


def measure_columns(measures: Sequence[str], where: str) -> tuple[str, ...]:
    """The columns of the study measures ``measures``, in order (unknown names refused)."""
    from nngauge.studies._units import MEASURES

    unknown = [name for name in measures if name not in MEASURES]
    if unknown or not measures or isinstance(measures, str):
        raise UnknownNameError(f"{where} expected a list of measures among {sorted(MEASURES)};"
                               f" got {list(unknown) or repr(measures)}. Fix: pass e.g. "
                               f"measures={list(DEFAULT_MEASURES)}.")
    return tuple(column for name in measures for column in MEASURES[name])


def measure_candidate(model: nn.Module, data: tuple[torch.Tensor, Optional[torch.Tensor]],
                      measures: Sequence[str] = DEFAULT_MEASURES, *, batch_size: int = 256,
                      generator: Union[int, torch.Generator] = 0) -> dict[str, float]:
    """The columns of the study measures ``measures`` of ``model`` at initialization on
    ``data`` = (inputs, labels): what :func:`rank` records per candidate (NaN where a measure
    is undefined on a network with a constant output)."""
    from nngauge.studies._units import _measure

    columns = measure_columns(measures, "measure_candidate()")
    measured = _measure(list(measures), model, (data,) * 3, batch_size,
                        torch.Generator().manual_seed(seed_of(generator)),
                        undefined_as_nan=True)
    return {column: float(measured[column]) for column in columns}


def _builder(builder: Union[str, Callable[..., nn.Module]], where: str) -> Callable:
    if isinstance(builder, str):
        from nngauge._user_code import load_function

        return load_function(builder, where, what="architecture")
    if not callable(builder):
        raise invalid(where, "a builder function or 'path/to/file.py:function'",
                      type(builder).__name__, "pass the function that builds a candidate")
    return builder


def _checked_grid(build: Callable, grid: Mapping[str, Sequence[Any]], where: str
                  ) -> tuple[str, ...]:
    """The grid's keys, after checking that the builder takes each and each has values."""
    if not isinstance(grid, Mapping) or not grid:
        raise invalid(where, "a grid: keyword -> list of values", repr(grid),
                      "pass e.g. {'depth': [2, 4], 'width': [64]}")
    try:
        parameters = inspect.signature(build).parameters
    except (TypeError, ValueError):
        parameters = {}
    open_ended = any(p.kind == p.VAR_KEYWORD for p in parameters.values())
    named = [n for n, p in parameters.items() if p.kind in (p.POSITIONAL_OR_KEYWORD,
                                                          p.KEYWORD_ONLY)]
    unknown = [k for k in grid if k not in named]
    if parameters and unknown and not open_ended:
        raise invalid(where, f"grid keys among the builder's keyword arguments {named}",
                      f"{unknown}", "rename them, or add them to the builder's signature")
    empty = [k for k, v in grid.items() if isinstance(v, (str, bytes)) or not _values(v)]
    if empty:
        raise invalid(where, "a non-empty list of values for each grid key",
                      f"{empty} without values", "pass e.g. depth=2,4 (--grid depth=2,4)")
    return tuple(grid)


def _values(values: Any) -> bool:
    try:
        return len(values) > 0
    except TypeError:
        return False


def _pair(data: Any, where: str) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
    if isinstance(data, (tuple, list)) and len(data) == 2:
        inputs, labels = data
    else:
        inputs, labels = data, None
    if not isinstance(inputs, torch.Tensor) or inputs.dim() < 1 or len(inputs) < 2:
        raise invalid(where, "data: (inputs, labels) tensors with at least 2 samples",
                      type(inputs).__name__ if not isinstance(inputs, torch.Tensor)
                      else f"a tensor of shape {tuple(inputs.shape)}",
                      "pass (x, y) with x of shape (n, ...) and n >= 2")
    return inputs, labels


def _runs_on(model: nn.Module, inputs: torch.Tensor, where: str) -> str:
    """Why ``model`` cannot run on two of ``inputs`` ("" when it can)."""
    try:
        with torch.no_grad():
            model.eval()(inputs[:2])
    except Exception as exc:
        first = str(exc).splitlines()[0] if str(exc) else ""
        return (f"the network does not run on inputs of shape {tuple(inputs.shape[1:])} "
                f"({inputs.dtype}): {type(exc).__name__}: {first}")
    finally:
        model.train()
    return ""


def _ordered(found: list[Candidate], key: str, direction: int) -> tuple[Candidate, ...]:
    """Ranked by ``direction * value`` of ``key`` (best first; NaN and failed ones last)."""
    scored = [c for c in found if not c.error and math.isfinite(c.values.get(key, math.nan))]
    scored.sort(key=lambda c: -direction * c.values[key])
    rest = [c for c in found if c not in scored]
    return tuple([Candidate(c.arguments, c.values, i + 1, c.error)
                  for i, c in enumerate(scored)] + rest)


__all__ = ["Candidate", "DEFAULT_MEASURES", "Ranking", "measure_candidate", "measure_columns",
           "rank"]
