"""Infinite-width theory: numpy/scipy only (this package never imports torch).

Gaussian covariances of activations, mean-field correlation maps and phases, critical
initialization, infinite-width NNGP/NTK kernels, the nonlinearity of activations and the
papers' bounds.
"""

from nngauge.theory._gaussian import gaussian_covariance, gaussian_mean

__all__ = ["gaussian_covariance", "gaussian_mean"]
