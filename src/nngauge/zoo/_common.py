"""What the zoo's builders share: the declared option ranges, seeded construction, and the
torchvision and timm initializations."""

from __future__ import annotations

import contextlib
from typing import Iterator

import torch
from torch import nn

from nngauge._constraints import Check, Either, Integer, Real, TorchInstance
from nngauge._random import seed_of

SIZE = Integer(1)
"""A width, depth, channel or class count."""
GENERATOR = Either((TorchInstance("torch.Generator", "a torch.Generator", (None, "seed")),
                    Integer(0, 2**64 - 1)))
"""The zoo's ``generator``: a torch.Generator, or an int seed as ``torch.Generator.manual_seed``
takes it (an int gives the same network and inputs as the same ``seed`` did)."""
PROBABILITY = Real(0, 1)
"""A dropout probability."""


def counts(multiple: int, what: str) -> Check:
    """A non-empty list or tuple of integers >= ``multiple``, each a multiple of it."""
    return Check(lambda v: isinstance(v, (list, tuple)) and bool(v) and all(
        Integer(multiple).accepts(c) and c % multiple == 0 for c in v), what,
        ((), (multiple, 0), (multiple + 1,) if multiple > 1 else (2.0,), "2"))


@contextlib.contextmanager
def seeded(generator: torch.Generator | int) -> Iterator[None]:
    """Seed the CPU random generator for the block and restore its state afterwards: with
    ``generator`` itself when it is an int, else with one draw from it
    (:func:`nngauge._random.seed_of`).

    Only the CPU generator is seeded (``torch.manual_seed`` would also reseed every CUDA
    generator, which ``fork_rng(devices=[])`` does not restore); models are built on the CPU.
    """
    seed = seed_of(generator)
    with torch.random.fork_rng(devices=[]):
        torch.default_generator.manual_seed(seed)
        yield


def kaiming_fan_out(model: nn.Module) -> None:
    """torchvision's CNN initialization: He-normal conv weights (fan-out mode), zero biases."""
    for module in model.modules():
        if isinstance(module, nn.Conv2d):
            nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")
            if module.bias is not None:
                nn.init.zeros_(module.bias)


def trunc_normal_init(model: nn.Module, types: tuple[type, ...]) -> None:
    """timm's initialization: truncated N(0, 0.02^2) weights and zero biases for ``types``."""
    for module in model.modules():
        if isinstance(module, types):
            nn.init.trunc_normal_(module.weight, std=0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)


__all__ = ["GENERATOR", "PROBABILITY", "SIZE", "counts", "kaiming_fan_out", "seeded",
           "trunc_normal_init"]
