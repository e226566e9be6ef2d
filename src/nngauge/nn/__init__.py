"""Building blocks: the NLC paper's MLPs and the deep-conditioning NormReLU."""

from nngauge.nn._mlp import MLP, MLPConfig, mlp
from nngauge.nn._norm_relu import NormReLU

__all__ = ["MLP", "MLPConfig", "NormReLU", "mlp"]
