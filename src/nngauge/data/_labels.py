"""Random labels and confusion sets (generalization paper, sections 2.2 and 3).

Random labels (after Zhang et al. 2017): a fraction of the labels replaced by labels drawn
uniformly at random, so that fitting them needs capacity without generalizing. A confusion set
(section 3, "Different Global Minima"): extra samples, disjoint from the training set, carrying
random labels; training on the union of the training set (true labels) and a confusion set of
growing size reaches different global minima of the training loss that generalize worse.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Optional

import numpy as np
import torch

from nngauge._constraints import Integer, Maybe, Real, constrained
from nngauge.errors import invalid


class ConfusionSet(NamedTuple):
    """A training set with true labels and a disjoint confusion set with random labels.

    Attributes:
        train_inputs, train_labels: the training set (n_train, ...), (n_train,).
        confusion_inputs, confusion_labels: the confusion set, labels uniform at random.
        inputs, labels: their union (training set first), what the network is trained on.
        is_confusion: bool mask (n_train + n_confusion,) marking the confusion samples.
    """

    train_inputs: torch.Tensor
    train_labels: torch.Tensor
    confusion_inputs: torch.Tensor
    confusion_labels: torch.Tensor
    inputs: torch.Tensor
    labels: torch.Tensor
    is_confusion: torch.Tensor


@constrained(fraction=Real(0, 1), n_classes=Maybe(Integer(2)))
def random_labels(labels: Any, fraction: float = 1.0, *, n_classes: Optional[int] = None,
                  generator: Optional[torch.Generator | int] = None) -> Any:
    """A copy of ``labels`` with ``round(fraction * n)`` of them, chosen at random, replaced by
    labels drawn uniformly from ``0..n_classes-1`` (a replacement may equal the old label).

    Args:
        labels: integer labels (n,), a torch tensor or numpy array (returned as the same type).
        fraction: share of labels to randomize, in [0, 1] (1: all random, as in Figure 1).
        n_classes: number of classes (default: max label + 1).
        generator: torch.Generator for the choice and the new labels (deterministic).

    Returns:
        The new labels, same type, dtype and shape; the input is not changed.

    Example:
        >>> import torch
        >>> y = torch.arange(10) % 3
        >>> new = random_labels(y, 0.5, generator=torch.Generator().manual_seed(0))
        >>> int((new != y).sum()) <= 5 and int(new.max()) < 3
        True
    """
    where = "random_labels()"
    tensor = _as_labels(labels, where)
    k = _n_classes(tensor, n_classes, where)
    n = len(tensor)
    chosen = torch.randperm(n, generator=generator)[:round(fraction * n)]
    out = tensor.clone()
    out[chosen] = torch.randint(k, (len(chosen),), generator=generator).to(out.dtype)
    return out.numpy() if isinstance(labels, np.ndarray) else out


@constrained(n_train=Integer(1), n_confusion=Integer(0), n_classes=Maybe(Integer(2)))
def confusion_set(inputs: Any, labels: Any, *, n_train: int, n_confusion: int,
                  n_classes: Optional[int] = None,
                  generator: Optional[torch.Generator | int] = None) -> ConfusionSet:
    """Split labelled data into a training set and a disjoint confusion set with random labels.

    Section 3: ``n_train`` random samples keep their true labels; ``n_confusion`` other
    samples get uniformly random labels. Training on ``.inputs, .labels`` (the union) to zero
    error gives a global minimum of the training-set loss; larger confusion sets give minima
    that generalize worse (Figure 3).

    Args:
        inputs: (n, ...) tensor or array; labels: integer (n,).
        n_train, n_confusion: sizes, n_train >= 1, n_confusion >= 0, n_train + n_confusion <= n.
        n_classes: number of classes (default: max label + 1).
        generator: for the split and the random labels.

    Returns:
        :class:`ConfusionSet`.

    Example:
        >>> import torch
        >>> x, y = torch.randn(20, 3), torch.arange(20) % 4
        >>> gen = torch.Generator().manual_seed(0)
        >>> s = confusion_set(x, y, n_train=10, n_confusion=5, generator=gen)
        >>> tuple(s.inputs.shape), int(s.is_confusion.sum())
        ((15, 3), 5)
    """
    where = "confusion_set()"
    x = torch.as_tensor(inputs)
    y = _as_labels(labels, where)
    if len(x) != len(y):
        raise invalid(where, "as many labels as inputs", f"{len(y)} labels for {len(x)} inputs",
                      "pass aligned inputs and labels")
    if n_train + n_confusion > len(y):
        raise invalid(where, f"n_train + n_confusion <= {len(y)} samples",
                      f"n_train={n_train}, n_confusion={n_confusion}",
                      "use fewer samples or pass more data")
    k = _n_classes(y, n_classes, where)
    order = torch.randperm(len(y), generator=generator)
    train, confusion = order[:n_train], order[n_train:n_train + n_confusion]
    noisy = torch.randint(k, (n_confusion,), generator=generator).to(y.dtype)
    mask = torch.cat([torch.zeros(n_train, dtype=torch.bool),
                      torch.ones(n_confusion, dtype=torch.bool)])
    return ConfusionSet(x[train], y[train], x[confusion], noisy,
                        torch.cat([x[train], x[confusion]]), torch.cat([y[train], noisy]), mask)


def _as_labels(labels: Any, where: str) -> torch.Tensor:
    tensor = torch.as_tensor(labels) if isinstance(labels, (torch.Tensor, np.ndarray)) else None
    if (tensor is None or tensor.dim() != 1 or tensor.dtype.is_floating_point
            or tensor.dtype == torch.bool):
        raise invalid(where, "integer labels of shape (n,) as a tensor or numpy array",
                      f"{type(labels).__name__} {getattr(labels, 'dtype', '')} "
                      f"{tuple(getattr(labels, 'shape', ()))}",
                      "pass class indices, e.g. torch.tensor([...]).long()")
    if len(tensor) == 0:
        raise invalid(where, "at least one label", "empty labels", "pass non-empty labels")
    if bool((tensor < 0).any()):
        raise invalid(where, "labels >= 0", f"min label {int(tensor.min())}",
                      "map the labels to 0..n_classes-1")
    return tensor


def _n_classes(labels: torch.Tensor, n_classes: Optional[int], where: str) -> int:
    top = int(labels.max()) + 1
    if n_classes is None:
        return top
    if n_classes < top:
        raise invalid(where, f"n_classes >= {top} (labels reach {top - 1})",
                      f"n_classes={n_classes!r}", "pass the number of classes")
    return int(n_classes)
