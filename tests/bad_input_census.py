"""Bad inputs a new user hands the measures, generated over the catalogue: every measure and
proxy (``nngauge.catalogue()``, so a new one is covered) on a valid call in which one thing is
wrong, plus the trajectory helpers' own bad inputs. Each call must end in an
:class:`~nngauge.errors.InvalidInputError` saying "expected ..., got ..., Fix: ..."; anything
else is a *raw* error (another exception) or a *silent* value (a result returned where the
input makes any value meaningless, or a non-finite number returned).

The cases (:data:`MODEL_CASES`, :data:`DATA_CASES`, :data:`HELPER_CASES`):

- models that return a 0-d scalar, None, or an integer tensor (predicted classes), for every
  entry that runs the model, and a model on the meta device (shapes, no values), for every
  entry;
- 0-d scalar data for every entry reading a batch, points or a segment;
- data of magnitude 1e30 (finite in float32) for every entry reading data: a finite result or
  the clear error, never NaN.

Used by tests/test_bad_inputs.py (one test per call); ``python tests/bad_input_census.py``
prints the counts: calls, clear errors, raw errors, silent values, and each failing call.
"""

from __future__ import annotations

import dataclasses
import math
import re
import sys
from typing import Any, Callable, Iterator

import torch
from torch import nn

from nngauge import catalogue
from nngauge.conformance import _cell, cell_name, prepare
from nngauge.errors import InvalidInputError
from nngauge.zoo import ZOO

ZOO_NETWORK = "dropout_mlp"
"""The float32 MLP the cases start from (its valid call is a conformance cell)."""

CLEAR = re.compile(r"expected .+; got .+\. Fix: .+", re.DOTALL)


class _Wrapped(nn.Module):
    """The zoo MLP with its output replaced by ``change(output)``."""

    def __init__(self, change: Callable[[torch.Tensor], Any]) -> None:
        super().__init__()
        self.net = ZOO[ZOO_NETWORK].build(generator=0)
        self.change = change

    def forward(self, x):
        return self.change(self.net(x))


def _meta() -> nn.Module:
    with torch.device("meta"):
        return ZOO[ZOO_NETWORK].build(generator=0)


MODEL_CASES: dict[str, Callable[[], nn.Module]] = {
    "scalar_output": lambda: _Wrapped(lambda out: out.sum()),
    "none_output": lambda: _Wrapped(lambda out: None),
    "integer_output": lambda: _Wrapped(lambda out: out.argmax(-1)),
    "meta_model": _meta,
}
"""A model a user may pass by mistake, in place of the valid one (entries reading the
weights alone, which never run the model, are fed only :data:`WEIGHT_CASES`)."""

WEIGHT_CASES = {"meta_model"}


def _scalar_data(d):
    return dataclasses.replace(d, x=d.x[0, 0], y=d.y[0], point0=d.point0[0], point1=d.point1[0])


def _huge_data(d):
    scale = 1e30
    return dataclasses.replace(d, x=d.x * scale, point0=d.point0 * scale,
                               point1=d.point1 * scale, point2=d.point2 * scale)


DATA_CASES: dict[str, tuple[Callable, frozenset]] = {
    "scalar_data": (_scalar_data, frozenset({"batch", "points", "segment"})),
    "huge_data": (_huge_data, frozenset({"batch", "points", "segment", "trajectory", "plane"})),
}
"""Data a user may pass by mistake -> (how the valid inputs change, the ``reads`` it applies
to). Huge data may give a finite value: only NaN / inf is silent there."""

SILENT_ONLY_IF_NON_FINITE = {"huge_data"}


def _helper_cases() -> dict[str, Callable[[], Any]]:
    from nngauge.trajectories import arc, polyline_length

    return {
        "arc_from_a_zero_vector": lambda: arc(torch.zeros(5), torch.ones(5), 9),
        "arc_to_a_zero_vector": lambda: arc(torch.ones(5), torch.zeros(5), 9),
        "polyline_length_of_a_1d_tensor": lambda: polyline_length(torch.arange(5.0)),
        "polyline_length_of_a_0d_tensor": lambda: polyline_length(torch.tensor(1.0)),
    }


HELPER_CASES = tuple(_helper_cases())


def calls() -> Iterator[tuple[str, str]]:
    """(cell, case) of every generated call: each catalogue cell (entries, without their
    variants) with each case that applies to what it reads, then ("helper", case)."""
    for entry in catalogue():
        name = cell_name(entry)
        for case in MODEL_CASES:
            if entry.reads != "weights" or case in WEIGHT_CASES:
                yield name, case
        for case, (_, reads) in DATA_CASES.items():
            if entry.reads in reads:
                yield name, case
    for case in HELPER_CASES:
        yield "helper", case


def _entry(cell: str):
    kind, _, name = cell.rpartition(".")
    return catalogue().proxy(name) if kind == "proxies" else catalogue()[name]


def run(cell: str, case: str) -> Any:
    """The generated call ``case`` of ``cell``: its result (or raises)."""
    if cell == "helper":
        return _helper_cases()[case]()
    entry = _entry(cell)
    valid = ZOO[ZOO_NETWORK].build(generator=0)
    inputs = prepare(ZOO[ZOO_NETWORK], valid, generator=0)
    model = valid
    if case in MODEL_CASES:
        model = MODEL_CASES[case]()
    else:
        inputs = DATA_CASES[case][0](inputs)
    return _cell(entry, None)(model, inputs)


def _non_finite(value: Any, depth: int = 0) -> bool:
    """Whether a result holds a NaN or inf number (fields, rows, tensors)."""
    if depth > 4 or isinstance(value, (str, bytes, nn.Module)):
        return False
    if isinstance(value, float):
        return not math.isfinite(value)
    if isinstance(value, torch.Tensor):
        return value.is_floating_point() and not bool(torch.isfinite(value).all())
    if isinstance(value, dict):
        return any(_non_finite(v, depth + 1) for v in value.values())
    if isinstance(value, (tuple, list)):
        return any(_non_finite(v, depth + 1) for v in value[:50])
    if dataclasses.is_dataclass(value):
        return any(_non_finite(getattr(value, f.name), depth + 1)
                   for f in dataclasses.fields(value))
    return False


def outcome(cell: str, case: str) -> tuple[str, str]:
    """("clear" | "ok" | "raw" | "silent", what happened) for one generated call."""
    try:
        value = run(cell, case)
    except InvalidInputError as exc:
        message = str(exc)
        if CLEAR.search(message):
            return "clear", message
        return "raw", f"InvalidInputError without expected / got / Fix: {message}"
    except Exception as exc:  # the census counts them
        return "raw", f"{type(exc).__name__}: {exc}"[:300]
    if case in SILENT_ONLY_IF_NON_FINITE and not _non_finite(value):
        return "ok", "a finite value"
    return "silent", f"returned {type(value).__name__}"


def main() -> int:
    import warnings

    warnings.simplefilter("ignore")
    counts: dict[str, int] = {}
    failures = []
    for cell, case in calls():
        status, what = outcome(cell, case)
        counts[status] = counts.get(status, 0) + 1
        if status in ("raw", "silent"):
            failures.append(f"{status:6} {cell} / {case}: {what.splitlines()[0][:200]}")
    print("\n".join(failures))
    total = sum(counts.values())
    print(f"{total} generated calls: {counts.get('clear', 0)} clear errors, "
          f"{counts.get('ok', 0)} finite values (huge data), {counts.get('raw', 0)} raw errors, "
          f"{counts.get('silent', 0)} silent values")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
