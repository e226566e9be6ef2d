"""One way in for data: tensors, arrays, (inputs, labels), Datasets and DataLoaders -> batches.

Every measure accepts ``data`` in any of these forms and calls :func:`as_batches`:

- a ``torch.Tensor`` or ``numpy.ndarray`` of inputs, samples along the first dimension;
- a pair ``(inputs, labels)`` of tensors or arrays;
- a map-style ``torch.utils.data.Dataset`` whose items are inputs or ``(inputs, labels, ...)``;
- a ``torch.utils.data.DataLoader`` (its own batch size is kept).

Inputs keep their shape (images stay images); they must be finite, and floating point unless
the caller measures from an embedding (``require_float=False``: token ids). What a model gives
back for them must hold one real floating-point output per sample
(:func:`require_model_output`, for the model adapter and the traced graph).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator, Optional

import numpy as np
import torch
from torch._C._functorch import is_functorch_wrapped_tensor
from torch.utils.data import DataLoader, Dataset

from nngauge.data._checks import require_representable
from nngauge.errors import invalid


@dataclass(frozen=True)
class Batch:
    """A batch of inputs (shape (b, ...)) and optional labels (shape (b, ...))."""

    inputs: torch.Tensor
    labels: Optional[torch.Tensor] = None

    def __len__(self) -> int:
        return int(self.inputs.shape[0])


def as_batches(
    data: Any,
    *,
    batch_size: int = 250,
    n_batches: Optional[int] = None,
    generator: Optional[torch.Generator] = None,
    where: str = "measure()",
    require_float: bool = True,
) -> Iterator[Batch]:
    """Yield validated :class:`Batch` es from any supported data form.

    Args:
        data: inputs, ``(inputs, labels)``, a Dataset or a DataLoader (see the module docstring).
        batch_size: samples per batch (ignored for a DataLoader, which keeps its own).
        n_batches: stop after this many batches; with in-memory data and more batches than one
            pass holds, further passes are drawn (reshuffled when a generator is given).
            None: one pass.
        generator: when given, samples are drawn in a random order from this generator
            (deterministic); otherwise in order.
        where: the calling measure, for error messages.
        require_float: refuse non-floating inputs (False: integer token ids are allowed).

    Raises:
        InvalidInputError: empty data, non-floating or non-finite inputs, mismatched labels,
            or an unsupported container.
    """
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise invalid(where, "batch_size an integer >= 1", f"batch_size={batch_size!r}",
                      "pass a positive batch size")
    if n_batches is not None and (isinstance(n_batches, bool) or not isinstance(n_batches, int)
                                  or n_batches < 1):
        raise invalid(where, "n_batches None or an integer >= 1", f"n_batches={n_batches!r}",
                      "pass a positive number of batches or None for one pass")
    if isinstance(data, DataLoader):
        source = (_from_item(item, where) for item in data)
    elif isinstance(data, Dataset):
        loader = DataLoader(data, batch_size=batch_size, shuffle=generator is not None,
                            generator=generator)
        source = (_from_item(item, where) for item in loader)
    else:
        inputs, labels = _split_pair(data, where)
        source = _tensor_batches(inputs, labels, batch_size, n_batches, generator)
    count = 0
    for batch in source:
        _check_batch(batch, where, require_float)
        yield batch
        count += 1
        if n_batches is not None and count >= n_batches:
            return
    if count == 0:
        raise invalid(where, "at least one sample", "empty data", "pass a non-empty data set")


def collect(data: Any, *, where: str = "measure()", max_samples: Optional[int] = None,
            require_float: bool = True) -> Batch:
    """All of ``data`` (or its first ``max_samples``) as one :class:`Batch`, in order."""
    inputs, labels = [], []
    total = 0
    for batch in as_batches(data, batch_size=max_samples or 1024, where=where,
                            require_float=require_float):
        inputs.append(batch.inputs)
        if batch.labels is not None:
            labels.append(batch.labels)
        total += len(batch)
        if max_samples is not None and total >= max_samples:
            break
    x = torch.cat(inputs)[:max_samples]
    y = torch.cat(labels)[:max_samples] if len(labels) == len(inputs) else None
    return Batch(x, y)


def _as_tensor(value: Any, what: str, where: str) -> torch.Tensor:
    if isinstance(value, torch.Tensor):
        return value
    if isinstance(value, np.ndarray):
        return torch.from_numpy(value)
    raise invalid(where, f"{what} as a torch.Tensor or numpy array, (inputs, labels), a Dataset "
                  "or a DataLoader", f"{type(value).__name__}",
                  "wrap your data in a tensor or a torch.utils.data.Dataset")


def _split_pair(data: Any, where: str) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
    if isinstance(data, (tuple, list)):
        if len(data) != 2:
            raise invalid(where, "a pair (inputs, labels)", f"a {type(data).__name__} of length "
                          f"{len(data)}", "pass (inputs, labels) or the inputs alone")
        inputs = _with_samples(_as_tensor(data[0], "inputs", where), "inputs", where)
        labels = _with_samples(_as_tensor(data[1], "labels", where), "labels", where)
        if labels.shape[0] != inputs.shape[0]:
            raise invalid(where, "as many labels as inputs",
                          f"{labels.shape[0]} labels for {inputs.shape[0]} inputs",
                          "pass labels aligned with the inputs along the first dimension")
        return inputs, labels
    return _with_samples(_as_tensor(data, "data", where), "data", where), None


def _with_samples(tensor: torch.Tensor, what: str, where: str) -> torch.Tensor:
    """``tensor``, refused when it is 0-d: a scalar has no sample dimension to read."""
    if tensor.dim() == 0:
        raise invalid(where, f"{what} with the sample dimension first, (n_samples, ...)",
                      "a 0-d tensor (a scalar)",
                      f"pass a tensor of shape (n_samples, ...), e.g. {what}.reshape(1, 1) "
                      "for one sample of one feature")
    return tensor


def _tensor_batches(inputs, labels, batch_size, n_batches, generator) -> Iterator[Batch]:
    n = int(inputs.shape[0])
    if n == 0:
        return
    passes = 1 if n_batches is None else -(-n_batches * batch_size // n)
    for _ in range(passes):
        order = torch.randperm(n, generator=generator) if generator is not None else None
        for start in range(0, n, batch_size):
            idx = slice(start, start + batch_size) if order is None else order[start:start + batch_size]
            yield Batch(inputs[idx], None if labels is None else labels[idx])


def _from_item(item: Any, where: str) -> Batch:
    if isinstance(item, (tuple, list)):
        if not item:
            raise invalid(where, "batches of (inputs, labels, ...)", "an empty tuple",
                          "make the dataset return inputs or (inputs, labels)")
        labels = item[1] if len(item) > 1 and isinstance(item[1], torch.Tensor) else None
        return Batch(_as_tensor(item[0], "inputs", where), labels)
    if isinstance(item, dict):
        raise invalid(where, "batches that are tensors or (inputs, labels) tuples",
                      f"a dict with keys {sorted(item)}",
                      "wrap the loader so it yields (inputs, labels)")
    return Batch(_as_tensor(item, "inputs", where))


def _check_batch(batch: Batch, where: str, require_float: bool) -> None:
    x = batch.inputs
    if x.is_meta:
        raise invalid(where, "inputs holding values", "meta-device inputs (shapes only)",
                      "materialize the data on a real device (e.g. the CPU) first")
    _with_samples(x, "inputs", where)
    if x.dim() == 1:
        n = len(x)
        raise invalid(where, "inputs of shape (n_samples, *sample_shape): a batch dimension "
                      "first, then the shape the model's first layer reads",
                      f"a 1-D tensor of shape ({n},), which is ambiguous",
                      f"pass x[None] for one sample of {n} features, or x[:, None] for {n} "
                      "samples of one feature")
    if x.dtype == torch.bool or x.is_complex() or (require_float and not x.is_floating_point()):
        raise invalid(where, "floating-point inputs" + ("" if require_float else
                      " or integer token ids"), f"dtype {x.dtype}",
                      "convert the inputs with .float() (or .double())")
    if x.is_floating_point() and not bool(torch.isfinite(x).all()):
        raise invalid(where, "finite inputs", "NaN or inf values",
                      "clean the data (torch.nan_to_num) or drop those samples")
    require_representable(x, where)


def require_model_output(value: Any, where: str) -> None:
    """Refuse a model output that is None (a forward() without ``return``), or a tensor that
    is a 0-d scalar (no sample dimension: a loss or a sum over the batch) or not real floating
    point (predicted classes, masks): no measure of a function reads either. A container
    (dict, tuple, ModelOutput) is the caller's to select from, then to check; tensors inside
    torch.func transforms, which hold one sample, are not checked."""
    if value is None:
        raise invalid(where, "a model whose forward() returns its output", "None",
                      "end forward() with return <output tensor>")
    if not isinstance(value, torch.Tensor) or is_functorch_wrapped_tensor(value):
        return
    tensor = value
    if tensor.dim() == 0:
        raise invalid(where, "model outputs with the sample dimension first, (n_samples, ...)",
                      "a 0-d tensor (a scalar)",
                      "return one output per sample (no .sum() or .mean() over the batch in "
                      "forward()), or pass output= a callable that selects it")
    if not tensor.is_floating_point():
        raise invalid(where, "real floating-point model outputs (logits, scores)",
                      f"outputs of dtype {tensor.dtype}",
                      "return the scores before any argmax / threshold / cast, or pass output= "
                      "a callable that selects a floating-point tensor")
