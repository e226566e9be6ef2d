"""``nngauge.nn.NormReLU``: the normalized ReLU of Agarwal et al. 2021 (section 7) as a module."""

from __future__ import annotations

import torch
from torch import nn

from nngauge.activations._norm_relu import SELU_MATCHED_B, norm_relu_constants


class NormReLU(nn.Module):
    """NormReLU_b(x) = lambda_b (max(x, b) - mu_b), elementwise (Agarwal et al. 2021, eq. (4)).

    mu_b = b Phi(b) + phi(b) and lambda_b = 1 / std(max(z, b)), z ~ N(0, 1), make the output
    zero-mean and unit-second-moment for standard Gaussian input (Agarwal et al. 2021, eq. (2),
    appendix I). The default b = -1.5908 gives lambda_b = 1.0507, SELU's scale, as in the paper.

    Attributes:
        b: the kink location.
        mu: mu_b.
        lam: lambda_b.

    Shapes: any input shape; the output has the input's shape and dtype.

    Example:
        >>> import torch
        >>> from nngauge.nn import NormReLU
        >>> m = NormReLU()
        >>> round(m.lam, 4), m(torch.zeros(2)).shape
        (1.0507, torch.Size([2]))
    """

    def __init__(self, b: float = SELU_MATCHED_B) -> None:
        super().__init__()
        self.mu, self.lam = norm_relu_constants(b)
        self.b = float(b)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lam * (torch.clamp(x, min=self.b) - self.mu)

    def extra_repr(self) -> str:
        return f"b={self.b:.6g}, mu={self.mu:.6g}, lam={self.lam:.6g}"
