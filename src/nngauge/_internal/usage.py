"""What this process has used: CPU seconds and peak memory (Unix ``resource``; None elsewhere)."""

from __future__ import annotations

import sys
from typing import Optional


def cpu_seconds() -> Optional[float]:
    """User + system CPU seconds of this process and its finished children (a reproduction's
    worker processes, once its pool has shut down); None where the platform has no
    ``resource`` module (Windows)."""
    try:
        import resource
    except ImportError:
        return None
    usages = [resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
    return sum(usage.ru_utime + usage.ru_stime for usage in usages)


def peak_memory_bytes() -> Optional[int]:
    """The largest resident memory of this process so far, bytes (``ru_maxrss``: kilobytes
    on Linux, bytes on macOS); None where the platform has no ``resource`` module. It counts
    everything the process held, the model and data included, not one call's share."""
    try:
        import resource
    except ImportError:
        return None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)


def gibibytes(n_bytes: Optional[int]) -> str:
    """``n_bytes`` as "3.21 GiB" (or "unknown")."""
    return "unknown" if n_bytes is None else f"{n_bytes / 2**30:.2f} GiB"
