"""Torch on one thread for a block of small work (layer 0: no nngauge imports).

Small networks gain nothing from a second intra-op thread: the threads only wait for each
other, and on busy cores far longer (measured on this project's 2 cores under load: 2 s of CPU
per small training run on one thread, 37 s on two). The study workers run on one thread for the
same reason (:mod:`nngauge.studies._executors`).
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator


@contextmanager
def one_thread() -> Iterator[None]:
    """Within: ``torch.set_num_threads(1)``; the caller's thread count is restored after."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)
