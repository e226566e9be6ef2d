"""The zoo's registry: :data:`ZOO`, its small configurations by name, and the inputs and labels
that feed them (:func:`sample_inputs`, :func:`sample_labels`)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Callable, Literal, Optional

import torch
from torch import nn

from nngauge._constraints import Instance, Integer, constrained
from nngauge._random import torch_generator
from nngauge._vocabulary import renamed
from nngauge.errors import UnknownNameError
from nngauge.zoo._bert import bert
from nngauge.zoo._common import GENERATOR
from nngauge.zoo._gpt import gpt_small
from nngauge.zoo._lstm import lstm_classifier
from nngauge.zoo._resnet import resnet_small
from nngauge.zoo._small import (
    convnext_block_net,
    dropout_mlp,
    elementwise_zoo_net,
    groupnorm_cnn,
    mobilenet_block_net,
)
from nngauge.zoo._vit import vit_optional_arguments, vit_small


@dataclass(frozen=True, kw_only=True)
class ZooEntry:
    """A small configuration of a zoo architecture and what a tool needs to measure it.

    Attributes:
        name: the key in :data:`ZOO`.
        build: ``build(generator=...)`` returns a fresh model in train mode (an int seed or a
            torch.Generator; ``seed=`` is the deprecated name).
        input_shape: shape of one sample: (C, H, W), (features,), (steps, features) or (seq,)
            for token sequences.
        input_kind: ``"float"`` (Gaussian inputs) or ``"tokens"`` (int64 ids).
        vocab_size: number of token ids for token models, else None.
        num_classes: width of the logits' last dimension (the vocabulary for a language model).
        output: the key that selects the logits tensor from the model's output (``"logits"``
            for dict and :class:`ModelOutput` outputs), or None when the output is the tensor.
        input_module: name of the embedding module of token models (perturb its output where
            an input gradient is needed), else None.
        piecewise_linear: whether the model in eval mode is built only from Linear / Conv /
            ReLU / MaxPool / AvgPool / BatchNorm (eval: affine) / residual adds (Dropout, the
            identity in eval mode, and Flatten / Identity allowed).
        description: one line on what it is and which quirk it carries.
        label_shape: shape of one sample's labels: () for classifiers, (seq,) for a language
            model (one next-token label per position); the logits have shape
            (n, *label_shape, num_classes).
        dtype: the floating dtype of the model's parameters (and of :func:`sample_inputs`).
    """

    name: str
    build: Callable[..., nn.Module]
    input_shape: tuple[int, ...]
    input_kind: Literal["float", "tokens"] = "float"
    vocab_size: Optional[int] = None
    num_classes: int
    output: Optional[str] = None
    input_module: Optional[str] = None
    piecewise_linear: bool
    description: str
    label_shape: tuple[int, ...] = ()
    dtype: torch.dtype = torch.float32


@renamed(seed="generator")
def _in_dtype(build: Callable[..., nn.Module], dtype: torch.dtype, *,
              generator: torch.Generator | int = 0) -> nn.Module:
    """``build(generator=generator)`` converted to ``dtype``."""
    return build(generator=generator).to(dtype)


#: The zoo's small configurations by name (see :class:`ZooEntry`).
ZOO: dict[str, ZooEntry] = {entry.name: entry for entry in (
    ZooEntry(
        name="resnet_small", build=resnet_small, input_shape=(3, 32, 32), num_classes=10,
        piecewise_linear=True,
        description="torchvision-layout ResNet (ImageNet stem): one ReLU module called twice "
                    "per block, in-place ReLU and residual add, BatchNorm"),
    ZooEntry(
        name="resnet_small_timm", build=partial(resnet_small, layout="timm"),
        input_shape=(3, 32, 32), num_classes=10, piecewise_linear=True,
        description="timm-layout ResNet: separate act1 / act2 ReLU modules per block"),
    ZooEntry(
        name="vit_small", build=vit_small, input_shape=(3, 32, 32), num_classes=10,
        piecewise_linear=False,
        description="timm-layout ViT: timm's GELU class, fused scaled_dot_product_attention, "
                    "cls_token / pos_embed parameters"),
    ZooEntry(
        name="vit_optional_args", build=vit_optional_arguments, input_shape=(3, 16, 16),
        num_classes=10, piecewise_linear=False,
        description="timm's newer ViT signature forward(x, attn_mask=None, is_causal=False): "
                    "optional arguments graph-based measures trace with their defaults"),
    ZooEntry(
        name="gpt_small", build=gpt_small, input_shape=(16,), input_kind="tokens",
        vocab_size=64, num_classes=64, output="logits", input_module="wte",
        piecewise_linear=False, label_shape=(16,),
        description="GPT-2 decoder: token input, dict output, transposed-weight Conv1D, "
                    "NewGELUActivation, causal attention"),
    ZooEntry(
        name="bert_small", build=partial(bert, 64, 16, dim=32, depth=1, heads=2),
        input_shape=(16,), input_kind="tokens", vocab_size=64, num_classes=2, output="logits",
        input_module="embeddings.word_embeddings", piecewise_linear=False,
        description="BERT classifier: token input, ModelOutput (OrderedDict) output, "
                    "post-norm layers, Tanh pooler"),
    ZooEntry(
        name="lstm", build=partial(lstm_classifier, 5, 16), input_shape=(8, 5), num_classes=3,
        piecewise_linear=False,
        description="LSTM classifier on float sequences: tuple-returning nn.LSTM"),
    ZooEntry(
        name="lstm_tokens", build=partial(lstm_classifier, 16, 16, vocab_size=64),
        input_shape=(12,), input_kind="tokens", vocab_size=64, num_classes=3,
        input_module="embedding", piecewise_linear=False,
        description="LSTM classifier on token ids through an nn.Embedding"),
    ZooEntry(
        name="groupnorm_cnn", build=groupnorm_cnn, input_shape=(3, 16, 16), num_classes=10,
        piecewise_linear=False, description="CNN with GroupNorm (per-sample normalization)"),
    ZooEntry(
        name="mobilenet_block", build=mobilenet_block_net, input_shape=(3, 16, 16),
        num_classes=10, piecewise_linear=False,
        description="MobileNetV3 block: BatchNormAct2d (a BatchNorm2d subclass with an "
                    "activation), depthwise conv, squeeze-excitation"),
    ZooEntry(
        name="convnext_block", build=convnext_block_net, input_shape=(3, 32, 32),
        num_classes=10, piecewise_linear=False,
        description="ConvNeXt blocks: LayerNorm2d, GELUTanh (an nn.GELU subclass), "
                    "LayerScale, pooling in forward"),
    ZooEntry(
        name="dropout_mlp", build=dropout_mlp, input_shape=(40,), num_classes=3,
        piecewise_linear=True, description="MLP with Dropout(0.5): random in train mode"),
    ZooEntry(
        name="elementwise_zoo", build=elementwise_zoo_net, input_shape=(16,), num_classes=3,
        piecewise_linear=False,
        description="MLP with QuickGELU, Hardswish and a custom Swish: activations known "
                    "only by behaviour"),
    ZooEntry(
        name="mlp_float64", build=partial(_in_dtype, dropout_mlp, torch.float64),
        input_shape=(40,), num_classes=3, piecewise_linear=True, dtype=torch.float64,
        description="the dropout MLP in float64"),
    ZooEntry(
        name="resnet_bfloat16", build=partial(_in_dtype, resnet_small, torch.bfloat16),
        input_shape=(3, 32, 32), num_classes=10, piecewise_linear=True, dtype=torch.bfloat16,
        description="the torchvision-layout ResNet in bfloat16 (too coarse to measure as is)"),
)}


def _entry(entry_or_name: ZooEntry | str, where: str) -> ZooEntry:
    if isinstance(entry_or_name, ZooEntry):
        return entry_or_name
    if entry_or_name not in ZOO:
        raise UnknownNameError(f"{where} expected a zoo entry name; got {entry_or_name!r}. "
                               f"Fix: use one of {', '.join(ZOO)}.")
    return ZOO[entry_or_name]


ENTRY = Instance((ZooEntry, str), "a ZooEntry or the name of one in nngauge.zoo.ZOO",
                 (3, None, ("lstm",)))


@renamed(seed="generator")
@constrained(entry_or_name=ENTRY, n=Integer(0), generator=GENERATOR)
def sample_inputs(entry_or_name: ZooEntry | str, n: int, *,
                  generator: torch.Generator | int = 0) -> torch.Tensor:
    """``n`` inputs for a zoo model: standard Gaussian floats, or uniform int64 token ids.

    Args:
        entry_or_name: a :class:`ZooEntry` or its name in :data:`ZOO`.
        n: number of samples.
        generator: an int seed of the draw, or a torch.Generator to draw from (the global
            random state is not used).

    Returns:
        Shape (n, *input_shape): the entry's dtype for ``"float"`` entries, int64 in
        [0, vocab_size) for ``"tokens"`` entries.

    Example:
        >>> from nngauge.zoo import sample_inputs
        >>> sample_inputs("gpt_small", 3).shape, sample_inputs("resnet_small", 3).shape
        (torch.Size([3, 16]), torch.Size([3, 3, 32, 32]))
    """
    entry = _entry(entry_or_name, "sample_inputs()")
    draws = torch_generator(generator)
    shape = (int(n), *entry.input_shape)
    if entry.input_kind == "tokens":
        return torch.randint(0, entry.vocab_size, shape, generator=draws)
    return torch.randn(shape, generator=draws).to(entry.dtype)


@renamed(seed="generator")
@constrained(entry_or_name=ENTRY, n=Integer(0), generator=GENERATOR)
def sample_labels(entry_or_name: ZooEntry | str, n: int, *,
                  generator: torch.Generator | int = 0) -> torch.Tensor:
    """``n`` uniform int64 labels for a zoo model: classes, or next tokens for a language model.

    Args:
        entry_or_name: a :class:`ZooEntry` or its name in :data:`ZOO`.
        n: number of samples.
        generator: an int seed of the draw, or a torch.Generator to draw from (the global
            random state is not used).

    Returns:
        Shape (n, *label_shape), int64 in [0, num_classes): (n,) for classifiers, (n, seq)
        for ``"gpt_small"`` (num_classes is the vocabulary there).

    Example:
        >>> from nngauge.zoo import sample_labels
        >>> sample_labels("gpt_small", 3).shape, sample_labels("lstm", 3).shape
        (torch.Size([3, 16]), torch.Size([3]))
    """
    entry = _entry(entry_or_name, "sample_labels()")
    return torch.randint(0, entry.num_classes, (int(n), *entry.label_shape),
                         generator=torch_generator(generator))


__all__ = ["ZOO", "ZooEntry", "sample_inputs", "sample_labels"]
