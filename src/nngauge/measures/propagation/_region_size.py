"""Size of the linearly approximable region (NLC paper E.1) and of the error-preserving
perturbation (E.3), both in units of the input space's diameter.

Both walk from a batch X along a random direction: X'(k) = X + k * 2 Q_i(S_x x(i)) * D, where
each column of D is a Gaussian direction u / ||u||_2 and 2 Q_i(S_x x(i)) is the paper's proxy
for the diameter of the input space, so k counts how many times the input space is traversed.
(The extracted text writes the step as k u / (||u||_2 2 Q); we read it as the distance k times
the diameter, the only reading under which k is "the number of traversals" the text
describes, and normalize each sample's direction, so that networks without batchnorm give
the per-sample definition of E.1.) k runs over the paper's geometric grid from 1e-9 with
factor 10^(1/10).

- Linearly approximable region (E.1): the largest k such that, for an output direction V,
  the change predicted by the Jacobian, (J(X)(X' - X)) . V, lies between 1/2 and 2 times
  the actual change (f(X') - f(X)) . V (read as a ratio, so that a linear map passes for
  either sign). Median over batches x input directions x output directions.
- Error-preserving perturbation (E.3): the largest k such that the error "over the path"
  (the fraction of the batch not classified correctly at every grid point from X to X')
  is at most the error at X plus 5%. Median over batches x input directions.

A k that fails at the first grid point is reported as 0 (below the grid, as the paper's
architectures with NLC > 1e9); one that never fails up to ``k_max`` as ``k_max``.

The linearly approximable region is measured in float64 (on a float64 copy of a float32
model, which the result's ``mode.precision`` says): the grid's first steps, 1e-9 of the
diameter, change the outputs by less than float32 resolves (relative 1e-7), so in float32
every walk would fail at once and read 0.
"""

from __future__ import annotations

import math
from contextlib import nullcontext
from dataclasses import dataclass, field, replace
from typing import Any, Optional

import numpy as np
import torch
from torch import nn

from nngauge._constraints import Integer, Real, constrained
from nngauge._internal.adapter import MeasurementMode, ModelAdapter, mappable_batch_statistics
from nngauge._internal.batching import Vectorizer
from nngauge._internal.jacobian import JacobianProducts
from nngauge._internal.losses import check_class_labels, with_labels
from nngauge._internal.options import ModelOptions, model_options
from nngauge._internal.probing import Moments, check_min_samples, gaussian_like
from nngauge._results import Result
from nngauge.errors import invalid

K_MIN = 1e-9
K_FACTOR = 10.0 ** 0.1
ERROR_SLACK = 0.05
K_CHUNK = 16


def k_grid(k_max: float) -> np.ndarray:
    """The paper's grid 1e-9 * 10^(j/10), j = 0, 1, ... up to k_max."""
    steps = int(math.floor(math.log10(k_max / K_MIN) * 10 + 1e-9)) + 1
    return K_MIN * K_FACTOR ** np.arange(steps)


@dataclass(frozen=True)
class RegionSize(Result):
    """Relative size of a region in units of the input-space diameter.

    Attributes:
        median: the median over configurations (the paper's reported value).
        values: every configuration's largest k (numpy).
        below_grid: configurations failing at k = 1e-9 (reported as 0).
        above_grid: configurations never failing up to k_max (reported as k_max).
        input_diameter: 2 Q_i(S_x x(i)).
        mode: how the model was run (:class:`~nngauge.MeasurementMode`).
        base_error: mean error at X (error_preserving_perturbation only, else None).
    """

    _distribution = "values"
    _summary = "median"

    median: float
    values: np.ndarray = field(repr=False, compare=False)
    below_grid: int
    above_grid: int
    input_diameter: float
    mode: MeasurementMode
    base_error: Optional[float] = None


@constrained(n_input_directions=Integer(1), n_output_directions=Integer(1),
             k_max=Real(K_MIN, low_open=True))
@model_options("output", "input_module", "norm_mode", "dropout")
def linear_region_diameter(
    model: nn.Module,
    data: Any,
    *,
    batch_size: int = 250,
    n_batches: int = 10,
    n_input_directions: int = 10,
    n_output_directions: int = 10,
    k_max: float = 1e3,
    options: ModelOptions,
    generator: Optional[torch.Generator | int] = None,
) -> RegionSize:
    """Relative diameter of the linearly approximable region (NLC paper E.1, figure 1).

    Args:
        model: any module (float64 models avoid round-off at small k: in float32 the first
            grid points often fail on noise).
        data: any supported data form.
        batch_size, n_batches: the paper's 10 batches of 250.
        n_input_directions, n_output_directions: U and V per batch (paper: 10 and 10).
        k_max: largest k tried.
        output, input_module, norm_mode, dropout, generator: as in :func:`nngauge.nlc`
            (the walk moves the measured input).

    Returns:
        :class:`RegionSize` (median over batches x U x V).
    """
    adapter = ModelAdapter(model, replace(options, precision=torch.float64),
                           where="linear_region_diameter()")
    values = []
    for fs, predicted, _, diameter in _walks(adapter, data, batch_size, n_batches,
                                             n_input_directions, k_max, generator,
                                             with_jvp=True):
        base = fs[0]
        for _ in range(n_output_directions):
            v = gaussian_like(base, generator).reshape(-1).to(torch.float64)
            actual = torch.stack([(f - base).reshape(-1).to(torch.float64) @ v for f in fs[1:]])
            slope = predicted.reshape(-1).to(torch.float64) @ v
            ks = torch.as_tensor(k_grid(k_max), dtype=torch.float64)
            ratio = ks * slope / actual
            ok = (ratio >= 0.5) & (ratio <= 2.0)
            values.append(_largest_k(ok.numpy(), k_max))
    return _summary(values, diameter, k_max, adapter.mode)


@constrained(n_input_directions=Integer(1), k_max=Real(K_MIN, low_open=True))
@model_options("output", "input_module", "norm_mode", "dropout")
def error_preserving_perturbation(
    model: nn.Module,
    data: Any,
    labels: Any = None,
    *,
    batch_size: int = 250,
    n_batches: int = 10,
    n_input_directions: int = 10,
    k_max: float = 1e3,
    options: ModelOptions,
    generator: Optional[torch.Generator | int] = None,
) -> RegionSize:
    """Largest perturbation keeping the error over the path within 5% (NLC paper E.3).

    Args:
        data: ``(inputs, labels)`` with integer class labels (a classifier's argmax output
            is compared with them; for sequence outputs (b, ..., C), labels (b, ...) and
            every position is a point), or the inputs with ``labels=``.
        labels: the class labels when ``data`` holds the inputs only.
        Others: as :func:`linear_region_diameter` (paper: 10 batches x 10 directions).

    Returns:
        :class:`RegionSize` with ``base_error`` the mean error at X.
    """
    where = "error_preserving_perturbation()"
    data = with_labels(data, labels, where)
    adapter = ModelAdapter(model, options, where=where)
    values, base_errors = [], []
    for fs, _, labels, diameter in _walks(adapter, data, batch_size, n_batches,
                                          n_input_directions, k_max, generator, with_jvp=False):
        if labels is None:
            raise invalid(where, "(inputs, labels) with class labels", "inputs only",
                          "pass the labels (labels= or data=(inputs, labels)) to compare the "
                          "classification with")
        check_class_labels(fs[0], labels.to(fs[0].device), where)
        # (1+K, points): every position of a sequence output is a classified point
        correct = torch.stack([(f.argmax(-1).cpu() == labels.cpu()).reshape(-1) for f in fs])
        base_error = 1.0 - float(correct[0].double().mean())
        along = torch.cumprod(correct[1:].int(), dim=0).bool() & correct[0]
        path_error = 1.0 - along.double().mean(1)
        ok = (path_error <= base_error + ERROR_SLACK).numpy()
        values.append(_largest_k(ok, k_max))
        base_errors.append(base_error)
    result = _summary(values, diameter, k_max, adapter.mode)
    return RegionSize(**{**result.__dict__, "base_error": float(np.mean(base_errors))})


def _diameter(adapter: ModelAdapter, data: Any) -> float:
    """2 Q_i(S_x x(i)) over all of the data (measured inputs)."""
    moments = Moments()
    for batch in adapter.batches(data, batch_size=1024):
        moments.update(adapter.measured(batch.inputs))
    check_min_samples(moments.count, 2, adapter.where, "the input standard deviation")
    return 2.0 * moments.std_quadratic_mean()


def _walks(adapter, data, batch_size, n_batches, n_directions, k_max, generator, *, with_jvp):
    """For each batch and input direction: ([f(X'(k)) for k in (0, *grid)], J(X) D scaled by
    the diameter (or None), labels, the diameter)."""
    ks = k_grid(k_max)
    with adapter.active(generator=generator, data=data):
        diameter = _diameter(adapter, data)
        coupled = adapter.coupled
        for batch in adapter.batches(data, batch_size=batch_size, n_batches=n_batches,
                                     generator=generator):
            check_min_samples(len(batch), 2 if coupled else 1, adapter.where, "batch statistics")
            x = adapter.measured(batch.inputs)
            for _ in range(n_directions):
                u = gaussian_like(x, generator)
                norms = u.reshape(len(u), -1).norm(dim=1).reshape((-1,) + (1,) * (u.dim() - 1))
                step = diameter * u / norms
                predicted = _jvp(adapter, x, batch.inputs, step) if with_jvp else None
                with adapter.perturbed():
                    fs = _forward_along(adapter, x, batch.inputs, step, ks, coupled)
                adapter.require_finite(fs[0])  # at the data (k = 0)
                yield fs, predicted, batch.labels, diameter


def _jvp(adapter, x, raw, step) -> torch.Tensor:
    """J(X) step (double backward, or forward mode where that is missing)."""
    x = x.detach().requires_grad_(True)
    with torch.enable_grad():
        y = adapter(x, raw)
        return JacobianProducts(x, y, lambda t: adapter(t, raw), adapter.note).jvp(step)


@torch.no_grad()
def _forward_along(adapter, x, raw, step, ks, coupled) -> list[torch.Tensor]:
    """f(X + k step) for k = 0 and every grid k, K_CHUNK values of k per forward pass: stacked
    into one batch, or, when the network couples its batch (batch statistics), mapped with
    vmap so that each k's batch is normalized by its own statistics (a loop where vmap fails)."""
    scales = [0.0, *ks.tolist()]
    mapped = Vectorizer(adapter.note)
    outs = []
    with mappable_batch_statistics(adapter.model) if coupled else nullcontext():
        for start in range(0, len(scales), K_CHUNK):
            chunk = torch.as_tensor(scales[start:start + K_CHUNK], dtype=x.dtype,
                                    device=x.device)
            shape = (-1,) + (1,) * x.dim()
            stacked = x.unsqueeze(0) + chunk.reshape(shape) * step.unsqueeze(0)
            if coupled:
                outs.extend(mapped(lambda points: adapter(points, raw))(stacked).unbind(0))
                continue
            y = adapter(stacked.flatten(0, 1), raw.repeat(len(chunk), *([1] * (raw.dim() - 1))))
            outs.extend(y.reshape(len(chunk), len(x), *y.shape[1:]).unbind(0))
    return outs


def _largest_k(ok: np.ndarray, k_max: float) -> float:
    """The last grid k before the first failure; 0 when the first fails."""
    failures = np.flatnonzero(~ok)
    if failures.size == 0:
        return float(k_max)
    first = int(failures[0])
    return 0.0 if first == 0 else float(k_grid(k_max)[first - 1])


def _summary(values, diameter, k_max, mode: MeasurementMode) -> RegionSize:
    array = np.asarray(values, dtype=np.float64)
    return RegionSize(median=float(np.median(array)), values=array,
                      below_grid=int((array == 0).sum()),
                      above_grid=int((array == k_max).sum()), input_diameter=diameter, mode=mode)
