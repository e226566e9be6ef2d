"""Running a model on measure batches: dtype/device alignment, batch coupling, moments.

Shared by every measure that pushes data through a model and back-propagates probes from its
outputs (NLC, gradient metrics, Jacobian norms), so they cannot disagree on how inputs are
prepared or how statistics are accumulated.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Iterator, Optional, Sequence

import torch
from torch import nn

from nngauge._internal.data import as_batches
from nngauge._internal.layers import Layer, capture_outputs, preserved_state, select_output
from nngauge.errors import invalid


def model_dtype_device(model: nn.Module) -> tuple[Optional[torch.dtype], Optional[torch.device]]:
    """The floating dtype and device of the model's first floating parameter or buffer."""
    for tensor in list(model.parameters()) + list(model.buffers()):
        if torch.is_floating_point(tensor):
            return tensor.dtype, tensor.device
    return None, None


def prepare_inputs(x: torch.Tensor, model: nn.Module, *, requires_grad: bool) -> torch.Tensor:
    """A detached copy of ``x`` in the model's dtype and on its device (the user's tensor is
    never modified), optionally requiring grad."""
    dtype, device = model_dtype_device(model)
    x = x.detach().to(dtype=dtype or x.dtype, device=device or x.device, copy=True)
    return x.requires_grad_(requires_grad)


def batch_coupled(model: nn.Module) -> bool:
    """True when some output of a sample depends on the other samples of its batch: a batchnorm
    layer normalizing with batch statistics (train mode, or no running statistics)."""
    return any(
        isinstance(m, nn.modules.batchnorm._BatchNorm)
        and (m.training or not m.track_running_stats)
        for m in model.modules()
    )


def gaussian_like(y: torch.Tensor, generator: Optional[torch.Generator],
                  n: Optional[int] = None) -> torch.Tensor:
    """Standard Gaussian probes shaped like ``y`` (with a leading ``n`` when given), drawn from
    ``generator`` on the CPU (so results do not depend on the device), then moved to y's."""
    shape = tuple(y.shape) if n is None else (n, *y.shape)
    u = torch.randn(shape, generator=generator, dtype=torch.float64)
    return u.to(dtype=y.dtype, device=y.device)


@dataclass
class Moments:
    """Per-feature running sums (float64) of a stream of (b, ...) tensors.

    Gives the quadratic mean of the per-feature standard deviations, Q_j(S_x y(j)) =
    sqrt(Tr(C_y) / d), and the quadratic mean of the values, Q_{j,x} y(j). Sums are taken
    around the first batch's mean (``shift``) so that a large mean does not cancel the variance.
    """

    shift: Optional[torch.Tensor] = None
    total: Optional[torch.Tensor] = None
    total_sq: Optional[torch.Tensor] = None
    count: int = 0

    def update(self, y: torch.Tensor) -> None:
        flat = y.detach().reshape(y.shape[0], -1).to(torch.float64).cpu()
        if self.shift is None:
            self.shift = flat.mean(0)
            self.total = torch.zeros_like(self.shift)
            self.total_sq = torch.zeros_like(self.shift)
        centred = flat - self.shift
        self.total += centred.sum(0)
        self.total_sq += centred.pow(2).sum(0)
        self.count += flat.shape[0]

    @property
    def dim(self) -> int:
        return 0 if self.total is None else int(self.total.numel())

    def _mean_and_var(self) -> tuple[torch.Tensor, torch.Tensor]:
        offset = self.total / self.count
        var = (self.total_sq / self.count - offset.pow(2)).clamp_min(0.0)
        return self.shift + offset, var

    def std_quadratic_mean(self) -> float:
        """sqrt(mean_j Var(y_j)), variances with denominator n (population)."""
        return math.sqrt(float(self._mean_and_var()[1].mean()))

    def quadratic_mean(self) -> float:
        """sqrt(mean over features and samples of y^2)."""
        mean, var = self._mean_and_var()
        return math.sqrt(float((var + mean.pow(2)).mean()))


@dataclass
class UnitStats:
    """Running mean and standard error of independent unit values (float64)."""

    values: list = field(default_factory=list)

    def extend(self, values: torch.Tensor) -> None:
        self.values.extend(values.detach().to(torch.float64).cpu().reshape(-1).tolist())

    @property
    def n(self) -> int:
        return len(self.values)

    def mean(self) -> float:
        return math.fsum(self.values) / self.n

    def stderr(self) -> float:
        """Standard error of the mean; nan with fewer than two units."""
        if self.n < 2:
            return math.nan
        mean = self.mean()
        var = math.fsum((v - mean) ** 2 for v in self.values) / (self.n - 1)
        return math.sqrt(var / self.n)


def check_min_samples(n: int, minimum: int, where: str, what: str) -> None:
    if n < minimum:
        raise invalid(where, f"at least {minimum} samples to estimate {what}", f"{n}",
                      f"pass a batch of {minimum} or more samples")


def run_model(model: nn.Module, x: torch.Tensor, where: str) -> Any:
    """``model(x)``; a failure of the forward pass (typically inputs of the wrong shape) is
    re-raised as an InvalidInputError saying which input shape and dtype the model got (the
    original exception is chained)."""
    try:
        return model(x)
    except (RuntimeError, ValueError, TypeError, IndexError) as exc:
        raise invalid(where, "inputs the model's forward() accepts",
                      f"inputs of shape {tuple(x.shape)} and dtype {x.dtype}, on which it "
                      f"raised {type(exc).__name__}: {exc}",
                      "pass data shaped as the model expects (samples along dimension 0)"
                      ) from exc


OUTPUT = "output"
"""The name under which the model's (selected) output appears among a pass's outputs."""


@dataclass(frozen=True)
class ForwardPass:
    """One batch pushed through the model: inputs, outputs by name, labels (or None)."""

    x: torch.Tensor
    outputs: dict
    labels: Optional[torch.Tensor]


def forward_batches(
    model: nn.Module,
    data: Any,
    layers: Sequence[Layer],
    *,
    batch_size: int,
    n_batches: Optional[int],
    generator: Optional[torch.Generator],
    output: Any,
    where: str,
    min_batch: int = 1,
) -> Iterator[ForwardPass]:
    """Yield a :class:`ForwardPass` per batch: x in the model's dtype requiring grad, the
    outputs of ``layers`` (None for a layer the forward pass did not call) and of the model
    (under :data:`OUTPUT`) with their graphs for backward passes to x, and the labels.

    Runs inside :func:`preserved_state`; parameters do not require grad meanwhile (only input
    gradients are needed), and everything is restored when the iteration ends or fails.
    """
    with preserved_state(model):
        for param in model.parameters():
            param.requires_grad_(False)
        for batch in as_batches(data, batch_size=batch_size, n_batches=n_batches,
                                generator=generator, where=where):
            check_min_samples(len(batch), min_batch, where, "batch statistics")
            x = prepare_inputs(batch.inputs, model, requires_grad=True)
            with capture_outputs(layers) as captured:
                y = select_output(run_model(model, x, where), output, where=where)
            yield ForwardPass(x, {**{layer.name: captured.get(layer.name) for layer in layers},
                                  OUTPUT: y}, batch.labels)
