"""Building blocks: the NLC paper's MLPs and architecture sampler, small CNNs and their
sampler (the predictor benchmark's second family), the Agarwal et al. 2021 NormReLU, and Raghu
et al.'s trajectory regularization."""

from nngauge.nn._cnn import CNN, CNNConfig, CNNDescription, cnn, sample_cnn
from nngauge.nn._mlp import MLP, MLPConfig, mlp
from nngauge.nn._norm_relu import NormReLU
from nngauge.nn._sampler import ArchitectureDescription, sample_architecture, sample_description
from nngauge.nn._trajectory_regularization import TrajectoryRegularization, trajectory_penalty

__all__ = [
    "CNN",
    "CNNConfig",
    "CNNDescription",
    "MLP",
    "MLPConfig",
    "ArchitectureDescription",
    "NormReLU",
    "TrajectoryRegularization",
    "cnn",
    "mlp",
    "sample_architecture",
    "sample_cnn",
    "sample_description",
    "trajectory_penalty",
]
