"""Checks every way data enters a measurement shares: the data layer's batches
(:mod:`nngauge._internal.data`) and the points of trajectories and planes
(:mod:`nngauge.trajectories`)."""

from __future__ import annotations

import torch

from nngauge.errors import invalid


def require_representable(x: torch.Tensor, where: str, what: str = "inputs") -> None:
    """Refuse floating ``what`` (samples along dimension 0) whose squared norms overflow in
    their precision (float32 at least, the precision low-precision models are measured in):
    every distance, kernel, loss curvature and norm of them would be inf or NaN."""
    if not x.is_floating_point() or x.numel() == 0:
        return
    dtype = torch.promote_types(x.dtype, torch.float32)
    squares = x.detach().reshape(len(x), -1).to(dtype).square().sum(1)
    if not bool(torch.isfinite(squares).all()):
        largest = float(x.detach().abs().max())
        raise invalid(where, f"{what} whose squared norms are finite in {dtype} (entries "
                      f"below about {torch.finfo(dtype).max ** 0.5 / x[0].numel() ** 0.5:.1e})",
                      f"entries as large as {largest:.1e}",
                      "standardize the data (nngauge.data.preprocess, or (x - mean) / std), "
                      "or measure a float64 model on float64 inputs")

