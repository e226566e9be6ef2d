"""Reference architectures: plain-PyTorch copies of the networks users actually bring.

nngauge measures any ``torch.nn.Module``, and the networks people measure are rarely the clean
MLPs of the papers: they come from torchvision, timm and Hugging Face, and each library has
habits that trip up measurement tools (hooks, Jacobians, activation detection, BatchNorm
folding). This module rebuilds those networks with torch alone, in the libraries' own module
layouts, so that nngauge's conformance tests, examples, benchmarks and CLI can run on "real"
networks without torchvision, timm or transformers installed.

The quirks each architecture carries, and the failure mode each one exercises:

* :func:`resnet18`, torchvision layout: one ``relu`` module is called twice per block (forward
  hooks fire twice; per-module statistics must not double count); ``ReLU(inplace=True)`` and
  the in-place residual add ``out += identity`` mutate tensors that hooks have already seen;
  BatchNorm2d behaves differently in train and eval mode. timm layout: separate ``act1`` /
  ``act2`` modules for the same function.
* :func:`vit`: timm's own ``GELU`` class (not ``nn.GELU``), attention fused into
  ``scaled_dot_product_attention`` (no module sees the attention weights), and parameters
  (``cls_token``, ``pos_embed``) that belong to no layer.
* :func:`gpt`: int64 token input (no input gradient: perturb the ``wte`` output instead), a
  dict output, Hugging Face's ``Conv1D`` whose weight is stored transposed (in, out) and applied
  with ``torch.addmm``, the ``NewGELUActivation`` class, causal attention, and one output per
  position.
* :func:`bert`: a :class:`ModelOutput` (an ``OrderedDict`` read by attribute, key or integer
  position), post-norm layers, a Tanh pooler on the first token.
* :func:`lstm_classifier`: a recurrent module with a tuple output, an input reshaped inside
  ``forward``, and an optional token embedding.
* :func:`groupnorm_cnn`: GroupNorm (per-sample normalization, not piecewise linear).
* :func:`mobilenet_block_net`: timm's ``BatchNormAct2d``, an ``nn.BatchNorm2d`` subclass whose
  forward also applies an activation (an eval-mode "BatchNorm" that is not affine), depthwise
  convolution, and squeeze-excitation gating (a product of two branches).
* :func:`convnext_block_net`: ``LayerNorm2d`` (an ``nn.LayerNorm`` subclass over channels-first
  maps), ``GELUTanh`` (an ``nn.GELU`` subclass that is the tanh approximation), a LayerScale
  parameter, channels-last permutes, and a global pool done in ``forward`` with no module.
* :func:`dropout_mlp`: Dropout (random in train mode, the identity in eval mode).
* :func:`elementwise_zoo_net`: activations recognisable only by behaviour, not by class
  (``QuickGELU``, ``nn.Hardswish``, a parameter-free custom ``Swish``).

Every builder is deterministic: it takes a keyword-only ``seed`` and initializes all parameters
from it without touching the global random state. Models are returned in train mode, as freshly
constructed models are. :data:`ZOO` names small, fast configurations (a forward pass of a batch
of 8 takes milliseconds on a CPU) with what a measurement tool needs to feed them
(:func:`sample_inputs`, :func:`sample_labels`) and to read their logits (``output``).

Example:
    >>> from nngauge.zoo import ZOO, sample_inputs
    >>> entry = ZOO["bert_small"]
    >>> model = entry.build(seed=0)
    >>> model(sample_inputs(entry, 2))[entry.output].shape
    torch.Size([2, 2])
"""

from __future__ import annotations

import collections
import contextlib
import math
from dataclasses import dataclass
from functools import partial
from typing import Callable, Iterator, Literal, Optional, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from nngauge._constraints import Check, Choice, Instance, Integer, Maybe, Real, constrained
from nngauge.errors import UnknownNameError, invalid

__all__ = [
    "ZOO",
    "ZooEntry",
    "sample_inputs",
    "sample_labels",
    "resnet18",
    "resnet_small",
    "vit",
    "vit_small",
    "gpt",
    "gpt_small",
    "bert",
    "lstm_classifier",
    "groupnorm_cnn",
    "mobilenet_block_net",
    "convnext_block_net",
    "dropout_mlp",
    "elementwise_zoo_net",
    "ModelOutput",
    "GELU",
    "Conv1D",
    "NewGELUActivation",
    "BatchNormAct2d",
    "LayerNorm2d",
    "GELUTanh",
    "LayerScale",
    "QuickGELU",
    "Swish",
]


Stem = Literal["imagenet", "cifar"]
Layout = Literal["torchvision", "timm"]

SIZE = Integer(1)
"""A width, depth, channel or class count."""
SEED = Integer(0, 2**64 - 1)
"""A seed, as ``torch.Generator.manual_seed`` takes it."""
PROBABILITY = Real(0, 1)
"""A dropout probability."""


def _counts(multiple: int, what: str) -> Check:
    """A non-empty list or tuple of integers >= ``multiple``, each a multiple of it."""
    return Check(lambda v: isinstance(v, (list, tuple)) and bool(v) and all(
        Integer(multiple).accepts(c) and c % multiple == 0 for c in v), what,
        ((), (multiple, 0), (multiple + 1,) if multiple > 1 else (2.0,), "2"))


_RESNET_OPTIONS = dict(
    num_classes=SIZE, in_channels=SIZE, width=SIZE,
    blocks=_counts(1, "a non-empty list or tuple of positive block counts, one per stage"),
    stem=Choice.literal(Stem), layout=Choice.literal(Layout), seed=SEED)
_VIT_OPTIONS = dict(image_size=SIZE, patch_size=SIZE, in_channels=SIZE, dim=SIZE, depth=SIZE,
                    heads=SIZE, mlp_ratio=Real(0, low_open=True), num_classes=SIZE,
                    dropout=PROBABILITY, seed=SEED)
_GPT_OPTIONS = dict(vocab_size=SIZE, block_size=SIZE, dim=SIZE, depth=SIZE, heads=SIZE,
                    dropout=PROBABILITY, seed=SEED)
"""Declared once for each builder and its fast variant (``resnet_small``, ``vit_small``,
``gpt_small``)."""


@contextlib.contextmanager
def _seeded(seed: int) -> Iterator[None]:
    """Seed the CPU random generator for the block and restore its state afterwards.

    Only the CPU generator is seeded (``torch.manual_seed`` would also reseed every CUDA
    generator, which ``fork_rng(devices=[])`` does not restore); models are built on the CPU.
    """
    with torch.random.fork_rng(devices=[]):
        torch.default_generator.manual_seed(int(seed))
        yield


def _kaiming_fan_out(model: nn.Module) -> None:
    """torchvision's CNN initialization: He-normal conv weights (fan-out mode), zero biases."""
    for module in model.modules():
        if isinstance(module, nn.Conv2d):
            nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")
            if module.bias is not None:
                nn.init.zeros_(module.bias)


def _trunc_normal_init(model: nn.Module, types: tuple[type, ...]) -> None:
    """timm's initialization: truncated N(0, 0.02^2) weights and zero biases for ``types``."""
    for module in model.modules():
        if isinstance(module, types):
            nn.init.trunc_normal_(module.weight, std=0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)


# --------------------------------------------------------------------------------------------
# ResNet (torchvision and timm layouts)
# --------------------------------------------------------------------------------------------


def _downsample(in_planes: int, planes: int, stride: int) -> Optional[nn.Sequential]:
    """The projection shortcut (1x1 conv + BatchNorm) where the block changes the shape."""
    if stride == 1 and in_planes == planes:
        return None
    return nn.Sequential(nn.Conv2d(in_planes, planes, 1, stride=stride, bias=False),
                         nn.BatchNorm2d(planes))


class BasicBlock(nn.Module):
    """torchvision's ``BasicBlock``: one ``relu`` module called twice per forward.

    Shapes: (b, in_planes, H, W) -> (b, planes, H / stride, W / stride).
    """

    def __init__(self, in_planes: int, planes: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_planes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(planes, planes, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = _downsample(in_planes, planes, stride)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        if self.downsample is not None:
            identity = self.downsample(x)
        out += identity
        return self.relu(out)


class TimmBasicBlock(nn.Module):
    """timm's ``BasicBlock``: the same function with separate ``act1`` and ``act2`` modules.

    Shapes: (b, in_planes, H, W) -> (b, planes, H / stride, W / stride).
    """

    def __init__(self, in_planes: int, planes: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_planes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.act1 = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(planes, planes, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.act2 = nn.ReLU(inplace=True)
        self.downsample = _downsample(in_planes, planes, stride)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shortcut = x
        x = self.act1(self.bn1(self.conv1(x)))
        x = self.bn2(self.conv2(x))
        if self.downsample is not None:
            shortcut = self.downsample(shortcut)
        x += shortcut
        return self.act2(x)


class ResNet(nn.Module):
    """A BasicBlock ResNet with torchvision's module names (see :func:`resnet18`).

    Shapes: (b, in_channels, H, W) -> (b, num_classes).
    """

    def __init__(self, num_classes: int, in_channels: int, width: int, blocks: Sequence[int],
                 stem: str, layout: str) -> None:
        super().__init__()
        self.layout = layout
        if stem == "imagenet":
            self.conv1 = nn.Conv2d(in_channels, width, 7, stride=2, padding=3, bias=False)
        else:
            self.conv1 = nn.Conv2d(in_channels, width, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        if layout == "torchvision":
            self.relu = nn.ReLU(inplace=True)
        else:
            self.act1 = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, stride=2, padding=1) if stem == "imagenet" else nn.Identity()
        block = BasicBlock if layout == "torchvision" else TimmBasicBlock
        in_planes = width
        for i, count in enumerate(blocks):
            planes = width * 2**i
            stride = 1 if i == 0 else 2
            layer = [block(in_planes, planes, stride)]
            layer += [block(planes, planes) for _ in range(count - 1)]
            self.add_module(f"layer{i + 1}", nn.Sequential(*layer))
            in_planes = planes
        self.num_layers = len(blocks)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(in_planes, num_classes)
        _kaiming_fan_out(self)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        stem_act = self.relu if self.layout == "torchvision" else self.act1
        x = self.maxpool(stem_act(self.bn1(self.conv1(x))))
        for i in range(self.num_layers):
            x = getattr(self, f"layer{i + 1}")(x)
        return self.fc(torch.flatten(self.avgpool(x), 1))


@constrained(**_RESNET_OPTIONS)
def resnet18(
    num_classes: int = 10,
    *,
    in_channels: int = 3,
    width: int = 64,
    blocks: Sequence[int] = (2, 2, 2, 2),
    stem: Stem = "imagenet",
    layout: Layout = "torchvision",
    seed: int = 0,
) -> ResNet:
    """ResNet-18 (BasicBlocks, BatchNorm2d), as torchvision's ``resnet18`` or timm's.

    Modules ``conv1, bn1, relu | act1, maxpool, layer1..layer4, avgpool, fc``; stage i has
    ``width * 2**i`` channels and stride 2 from the second stage on. Convolutions get
    torchvision's He-normal (fan-out) initialization.

    Args:
        num_classes: output width.
        in_channels: input channels.
        width: channels of the stem and the first stage.
        blocks: BasicBlocks per stage (one ``layer<i>`` per entry).
        stem: ``"imagenet"`` (7x7 stride-2 conv, BN, ReLU, 3x3 stride-2 max pool; 32x32 inputs
            reach the first stage at 8x8) or ``"cifar"`` (3x3 stride-1 conv, BN, ReLU, no pool).
        layout: ``"torchvision"`` (each block calls one ``relu`` module twice; the stem
            activation is ``relu``) or ``"timm"`` (``act1`` and ``act2`` modules).
        seed: seed of the initialization.

    Returns:
        The model in train mode: (b, in_channels, H, W) -> (b, num_classes).

    Example:
        >>> import torch
        >>> from nngauge.zoo import resnet18
        >>> resnet18(stem="cifar", width=8)(torch.randn(2, 3, 16, 16)).shape
        torch.Size([2, 10])
    """
    with _seeded(seed):
        return ResNet(num_classes, in_channels, width, blocks, stem, layout)


@constrained(**_RESNET_OPTIONS)
def resnet_small(
    num_classes: int = 10,
    *,
    in_channels: int = 3,
    width: int = 16,
    blocks: Sequence[int] = (1, 1, 1, 1),
    stem: Stem = "imagenet",
    layout: Layout = "torchvision",
    seed: int = 0,
) -> ResNet:
    """A fast :func:`resnet18` for tests: width 16, one block per stage.

    Returns:
        The model in train mode: (b, in_channels, H, W) -> (b, num_classes).
    """
    return resnet18(num_classes, in_channels=in_channels, width=width, blocks=blocks, stem=stem,
                    layout=layout, seed=seed)


# --------------------------------------------------------------------------------------------
# Vision Transformer (timm layout)
# --------------------------------------------------------------------------------------------


class GELU(nn.Module):
    """timm's own ``GELU`` class: ``F.gelu`` in a module that is not ``nn.GELU``."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(x)


class Mlp(nn.Module):
    """timm's ``Mlp``: fc1, activation, fc2 (with dropout). Shapes: (..., dim) -> (..., dim)."""

    def __init__(self, dim: int, hidden: int, act_layer: Callable[[], nn.Module],
                 dropout: float = 0.0) -> None:
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.act = act_layer()
        self.drop1 = nn.Dropout(dropout)
        self.fc2 = nn.Linear(hidden, dim)
        self.drop2 = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.drop2(self.fc2(self.drop1(self.act(self.fc1(x)))))


class PatchEmbed(nn.Module):
    """timm's ``PatchEmbed``: a strided Conv2d ``proj``, flattened to tokens.

    Shapes: (b, C, H, W) -> (b, (H / patch) * (W / patch), dim).
    """

    def __init__(self, in_channels: int, dim: int, patch_size: int) -> None:
        super().__init__()
        self.proj = nn.Conv2d(in_channels, dim, patch_size, stride=patch_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x).flatten(2).transpose(1, 2)


class Attention(nn.Module):
    """timm's ``Attention``: fused ``qkv`` Linear, ``scaled_dot_product_attention``, ``proj``.

    Shapes: (b, n, dim) -> (b, n, dim).
    """

    def __init__(self, dim: int, heads: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.num_heads = heads
        self.dropout_p = dropout
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.proj_drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, dim = x.shape
        qkv = self.qkv(x).reshape(b, n, 3, self.num_heads, dim // self.num_heads)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)
        x = F.scaled_dot_product_attention(q, k, v,
                                           dropout_p=self.dropout_p if self.training else 0.0)
        return self.proj_drop(self.proj(x.transpose(1, 2).reshape(b, n, dim)))


class Block(nn.Module):
    """timm's pre-norm transformer ``Block``. Shapes: (b, n, dim) -> (b, n, dim)."""

    def __init__(self, dim: int, heads: int, mlp_ratio: float, dropout: float) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=1e-6)
        self.attn = Attention(dim, heads, dropout)
        self.norm2 = nn.LayerNorm(dim, eps=1e-6)
        self.mlp = Mlp(dim, int(dim * mlp_ratio), GELU, dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class VisionTransformer(nn.Module):
    """A ViT with timm's module names (see :func:`vit`).

    Shapes: (b, in_channels, image_size, image_size) -> (b, num_classes).
    """

    def __init__(self, image_size: int, patch_size: int, in_channels: int, dim: int, depth: int,
                 heads: int, mlp_ratio: float, num_classes: int, dropout: float) -> None:
        super().__init__()
        num_patches = (image_size // patch_size) ** 2
        self.patch_embed = PatchEmbed(in_channels, dim, patch_size)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos_embed = nn.Parameter(torch.zeros(1, num_patches + 1, dim))
        self.pos_drop = nn.Dropout(dropout)
        self.blocks = nn.Sequential(*[Block(dim, heads, mlp_ratio, dropout)
                                      for _ in range(depth)])
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.head = nn.Linear(dim, num_classes)
        nn.init.trunc_normal_(self.pos_embed, std=0.02)
        nn.init.normal_(self.cls_token, std=1e-6)
        _trunc_normal_init(self, (nn.Linear,))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.patch_embed(x)
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1)
        x = self.blocks(self.pos_drop(x + self.pos_embed))
        return self.head(self.norm(x)[:, 0])


@constrained(**_VIT_OPTIONS)
def vit(
    image_size: int = 32,
    patch_size: int = 4,
    *,
    in_channels: int = 3,
    dim: int = 192,
    depth: int = 12,
    heads: int = 3,
    mlp_ratio: float = 4.0,
    num_classes: int = 10,
    dropout: float = 0.0,
    seed: int = 0,
) -> VisionTransformer:
    """ViT-Tiny (dim 192, 12 blocks, 3 heads) in timm's ``VisionTransformer`` layout.

    Modules ``patch_embed.proj`` (Conv2d), parameters ``cls_token`` and ``pos_embed``, then
    ``blocks.<i>`` (``norm1, attn.qkv, attn.proj, norm2, mlp.fc1, mlp.act, mlp.fc2``; the
    activation is timm's ``GELU`` class), final ``norm`` and ``head`` on the class token.
    timm's initialization: truncated N(0, 0.02^2) Linear weights and position embedding.

    Args:
        image_size: input height and width (a multiple of ``patch_size``).
        patch_size: side of the square patches.
        in_channels: input channels.
        dim: token width (a multiple of ``heads``).
        depth: number of blocks.
        heads: attention heads.
        mlp_ratio: MLP hidden width over ``dim``.
        num_classes: output width.
        dropout: dropout probability (positions, attention, projections, MLP).
        seed: seed of the initialization.

    Returns:
        The model in train mode: (b, in_channels, image_size, image_size) -> (b, num_classes).
    """
    if image_size % patch_size:
        raise invalid("vit()", "image_size a multiple of patch_size",
                      f"image_size={image_size}, patch_size={patch_size}", "change either")
    if dim % heads:
        raise invalid("vit()", "dim a multiple of heads", f"dim={dim}, heads={heads}",
                      "change either")
    with _seeded(seed):
        return VisionTransformer(image_size, patch_size, in_channels, dim, depth, heads,
                                 mlp_ratio, num_classes, dropout)


@constrained(**_VIT_OPTIONS)
def vit_small(
    image_size: int = 32,
    patch_size: int = 4,
    *,
    in_channels: int = 3,
    dim: int = 32,
    depth: int = 2,
    heads: int = 2,
    mlp_ratio: float = 4.0,
    num_classes: int = 10,
    dropout: float = 0.0,
    seed: int = 0,
) -> VisionTransformer:
    """A fast :func:`vit` for tests: dim 32, 2 blocks, 2 heads.

    Returns:
        The model in train mode: (b, in_channels, image_size, image_size) -> (b, num_classes).
    """
    return vit(image_size, patch_size, in_channels=in_channels, dim=dim, depth=depth,
               heads=heads, mlp_ratio=mlp_ratio, num_classes=num_classes, dropout=dropout,
               seed=seed)


# --------------------------------------------------------------------------------------------
# GPT-2 (Hugging Face layout)
# --------------------------------------------------------------------------------------------


class Conv1D(nn.Module):
    """Hugging Face's GPT-2 ``Conv1D``: a linear layer with its weight stored transposed.

    ``weight`` has shape (nx, nf) = (in_features, out_features), the reverse of ``nn.Linear``,
    and the output is ``addmm(bias, x, weight)``. Shapes: (..., nx) -> (..., nf).

    Args:
        nf: output features.
        nx: input features.
    """

    def __init__(self, nf: int, nx: int) -> None:
        super().__init__()
        self.nf = nf
        self.weight = nn.Parameter(torch.empty(nx, nf))
        self.bias = nn.Parameter(torch.zeros(nf))
        nn.init.normal_(self.weight, std=0.02)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        size_out = x.size()[:-1] + (self.nf,)
        x = torch.addmm(self.bias, x.view(-1, x.size(-1)), self.weight)
        return x.view(size_out)


class NewGELUActivation(nn.Module):
    """Hugging Face's GPT-2 GELU: 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        inner = math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))
        return 0.5 * x * (1.0 + torch.tanh(inner))


class GPT2Attention(nn.Module):
    """Causal self-attention with ``Conv1D`` projections. Shapes: (b, t, dim) -> (b, t, dim)."""

    def __init__(self, dim: int, heads: int, dropout: float) -> None:
        super().__init__()
        self.num_heads = heads
        self.dropout_p = dropout
        self.c_attn = Conv1D(3 * dim, dim)
        self.c_proj = Conv1D(dim, dim)
        self.resid_dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, dim = x.shape
        q, k, v = (z.view(b, t, self.num_heads, dim // self.num_heads).transpose(1, 2)
                   for z in self.c_attn(x).split(dim, dim=2))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                           dropout_p=self.dropout_p if self.training else 0.0)
        return self.resid_dropout(self.c_proj(y.transpose(1, 2).reshape(b, t, dim)))


class GPT2MLP(nn.Module):
    """c_fc (Conv1D), NewGELUActivation, c_proj (Conv1D). Shapes: (b, t, dim) -> (b, t, dim)."""

    def __init__(self, dim: int, dropout: float) -> None:
        super().__init__()
        self.c_fc = Conv1D(4 * dim, dim)
        self.act = NewGELUActivation()
        self.c_proj = Conv1D(dim, 4 * dim)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.c_proj(self.act(self.c_fc(x))))


class GPT2Block(nn.Module):
    """Pre-norm decoder block: ln_1, attn, ln_2, mlp. Shapes: (b, t, dim) -> (b, t, dim)."""

    def __init__(self, dim: int, heads: int, dropout: float) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(dim)
        self.attn = GPT2Attention(dim, heads, dropout)
        self.ln_2 = nn.LayerNorm(dim)
        self.mlp = GPT2MLP(dim, dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    """A GPT-2 language model with Hugging Face's module names (see :func:`gpt`).

    Shapes: int64 token ids (b, t), t <= block_size -> ``{"logits": (b, t, vocab_size),
    "hidden_states": (b, t, dim)}``.
    """

    def __init__(self, vocab_size: int, block_size: int, dim: int, depth: int, heads: int,
                 dropout: float) -> None:
        super().__init__()
        self.block_size = block_size
        self.wte = nn.Embedding(vocab_size, dim)
        self.wpe = nn.Embedding(block_size, dim)
        self.drop = nn.Dropout(dropout)
        self.h = nn.ModuleList([GPT2Block(dim, heads, dropout) for _ in range(depth)])
        self.ln_f = nn.LayerNorm(dim)
        self.lm_head = nn.Linear(dim, vocab_size, bias=False)
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding, Conv1D)):
                nn.init.normal_(module.weight, std=0.02)
        for name, parameter in self.named_parameters():
            if name.endswith("c_proj.weight"):  # GPT-2's residual-path scaling
                nn.init.normal_(parameter, std=0.02 / math.sqrt(2 * depth))

    def forward(self, input_ids: torch.Tensor) -> dict[str, torch.Tensor]:
        t = input_ids.shape[1]
        if t > self.block_size:
            raise invalid("GPT.forward()", f"at most block_size={self.block_size} tokens",
                          f"{t} tokens", "shorten the sequence or build with a larger block_size")
        positions = torch.arange(t, device=input_ids.device)
        h = self.drop(self.wte(input_ids) + self.wpe(positions))
        for block in self.h:
            h = block(h)
        h = self.ln_f(h)
        return {"logits": self.lm_head(h), "hidden_states": h}


@constrained(**_GPT_OPTIONS)
def gpt(
    vocab_size: int = 256,
    block_size: int = 64,
    *,
    dim: int = 128,
    depth: int = 4,
    heads: int = 4,
    dropout: float = 0.0,
    seed: int = 0,
) -> GPT:
    """A GPT-2 style decoder in Hugging Face's ``GPT2LMHeadModel`` layout (untied head).

    Modules ``wte`` and ``wpe`` (embeddings, added), ``drop``, ``h.<i>`` (``ln_1``,
    ``attn.c_attn``, ``attn.c_proj``, ``ln_2``, ``mlp.c_fc``, ``mlp.act``, ``mlp.c_proj``; the
    projections are :class:`Conv1D`, the activation :class:`NewGELUActivation`), ``ln_f`` and
    ``lm_head`` (Linear, no bias). Causal attention via ``scaled_dot_product_attention``.
    GPT-2's initialization: N(0, 0.02^2) weights, ``c_proj`` weights scaled by
    1 / sqrt(2 depth).

    Args:
        vocab_size: number of token ids.
        block_size: longest sequence (positions embedded).
        dim: token width (a multiple of ``heads``).
        depth: number of blocks.
        heads: attention heads.
        dropout: dropout probability (embeddings, attention, residual branches).
        seed: seed of the initialization.

    Returns:
        The model in train mode: int64 token ids (b, t) -> a dict with ``"logits"``
        (b, t, vocab_size) and ``"hidden_states"`` (b, t, dim), the output of ``ln_f``.

    Example:
        >>> import torch
        >>> from nngauge.zoo import gpt_small
        >>> out = gpt_small()(torch.randint(0, 64, (2, 16)))
        >>> out["logits"].shape, out["hidden_states"].shape
        (torch.Size([2, 16, 64]), torch.Size([2, 16, 32]))
    """
    if dim % heads:
        raise invalid("gpt()", "dim a multiple of heads", f"dim={dim}, heads={heads}",
                      "change either")
    with _seeded(seed):
        return GPT(vocab_size, block_size, dim, depth, heads, dropout)


@constrained(**_GPT_OPTIONS)
def gpt_small(
    vocab_size: int = 64,
    block_size: int = 16,
    *,
    dim: int = 32,
    depth: int = 2,
    heads: int = 2,
    dropout: float = 0.0,
    seed: int = 0,
) -> GPT:
    """A fast :func:`gpt` for tests: vocabulary 64, 16 positions, dim 32, 2 blocks, 2 heads.

    Returns:
        The model in train mode: int64 token ids (b, t) -> a dict with ``"logits"``
        (b, t, vocab_size) and ``"hidden_states"`` (b, t, dim).
    """
    return gpt(vocab_size, block_size, dim=dim, depth=depth, heads=heads, dropout=dropout,
               seed=seed)


# --------------------------------------------------------------------------------------------
# BERT (Hugging Face layout)
# --------------------------------------------------------------------------------------------


class ModelOutput(collections.OrderedDict):
    """A Hugging Face ``ModelOutput`` look-alike: read a field as ``out.logits``,
    ``out["logits"]`` or by position, ``out[0]`` (fields in the order given).

    Example:
        >>> out = ModelOutput(logits=1, pooler_output=2)
        >>> out.logits, out["pooler_output"], out[0], out[-1]
        (1, 2, 1, 2)
    """

    def __getattr__(self, name: str):
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None

    def __getitem__(self, key):
        if isinstance(key, (int, slice)):
            return tuple(self.values())[key]
        return super().__getitem__(key)


class BertEmbeddings(nn.Module):
    """Word + position embeddings, then LayerNorm. Shapes: (b, t) int64 -> (b, t, dim)."""

    def __init__(self, vocab_size: int, max_len: int, dim: int) -> None:
        super().__init__()
        self.word_embeddings = nn.Embedding(vocab_size, dim)
        self.position_embeddings = nn.Embedding(max_len, dim)
        self.LayerNorm = nn.LayerNorm(dim, eps=1e-12)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)
        x = self.word_embeddings(input_ids) + self.position_embeddings(positions)
        return self.LayerNorm(x)


class BertSelfAttention(nn.Module):
    """query / key / value Linears and attention. Shapes: (b, t, dim) -> (b, t, dim)."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.num_heads = heads
        self.query = nn.Linear(dim, dim)
        self.key = nn.Linear(dim, dim)
        self.value = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, dim = x.shape
        q, k, v = (layer(x).view(b, t, self.num_heads, dim // self.num_heads).transpose(1, 2)
                   for layer in (self.query, self.key, self.value))
        return F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, t, dim)


class BertOutput(nn.Module):
    """Post-norm residual: ``LayerNorm(dense(x) + residual)``. Shapes: (b, t, d_in) -> (b, t, dim).

    Hugging Face's ``BertSelfOutput`` (d_in = dim) and ``BertOutput`` (d_in = 4 dim).
    """

    def __init__(self, d_in: int, dim: int) -> None:
        super().__init__()
        self.dense = nn.Linear(d_in, dim)
        self.LayerNorm = nn.LayerNorm(dim, eps=1e-12)

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return self.LayerNorm(self.dense(x) + residual)


class BertAttention(nn.Module):
    """``self`` (attention) and ``output`` (dense + post-norm residual)."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.self = BertSelfAttention(dim, heads)
        self.output = BertOutput(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.output(self.self(x), x)


class BertIntermediate(nn.Module):
    """dense (dim -> 4 dim) and ``nn.GELU``. Shapes: (b, t, dim) -> (b, t, 4 dim)."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.dense = nn.Linear(dim, 4 * dim)
        self.intermediate_act_fn = nn.GELU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.intermediate_act_fn(self.dense(x))


class BertLayer(nn.Module):
    """A post-norm encoder layer. Shapes: (b, t, dim) -> (b, t, dim)."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.attention = BertAttention(dim, heads)
        self.intermediate = BertIntermediate(dim)
        self.output = BertOutput(4 * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.attention(x)
        return self.output(self.intermediate(x), x)


class BertEncoder(nn.Module):
    """``layer``: the encoder layers in order. Shapes: (b, t, dim) -> (b, t, dim)."""

    def __init__(self, dim: int, depth: int, heads: int) -> None:
        super().__init__()
        self.layer = nn.ModuleList([BertLayer(dim, heads) for _ in range(depth)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layer:
            x = layer(x)
        return x


class BertPooler(nn.Module):
    """dense + Tanh on the first token. Shapes: (b, t, dim) -> (b, dim)."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.dense = nn.Linear(dim, dim)
        self.activation = nn.Tanh()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.activation(self.dense(x[:, 0]))


class BertClassifier(nn.Module):
    """A BERT sequence classifier with Hugging Face's module names (see :func:`bert`).

    Shapes: int64 token ids (b, t), t <= max_len -> :class:`ModelOutput` with ``logits``
    (b, num_classes), ``last_hidden_state`` (b, t, dim) and ``pooler_output`` (b, dim).
    """

    def __init__(self, vocab_size: int, max_len: int, dim: int, depth: int, heads: int,
                 num_classes: int) -> None:
        super().__init__()
        self.embeddings = BertEmbeddings(vocab_size, max_len, dim)
        self.encoder = BertEncoder(dim, depth, heads)
        self.pooler = BertPooler(dim)
        self.classifier = nn.Linear(dim, num_classes)
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, std=0.02)
                if isinstance(module, nn.Linear):
                    nn.init.zeros_(module.bias)

    def forward(self, input_ids: torch.Tensor) -> ModelOutput:
        hidden = self.encoder(self.embeddings(input_ids))
        pooled = self.pooler(hidden)
        return ModelOutput(logits=self.classifier(pooled), last_hidden_state=hidden,
                           pooler_output=pooled)


@constrained(vocab_size=SIZE, max_len=SIZE, dim=SIZE, depth=SIZE, heads=SIZE, num_classes=SIZE,
             seed=SEED)
def bert(
    vocab_size: int = 256,
    max_len: int = 64,
    *,
    dim: int = 128,
    depth: int = 2,
    heads: int = 4,
    num_classes: int = 2,
    seed: int = 0,
) -> BertClassifier:
    """A BERT encoder classifier in Hugging Face's ``BertForSequenceClassification`` layout.

    Modules ``embeddings`` (``word_embeddings``, ``position_embeddings``, ``LayerNorm``),
    ``encoder.layer.<i>`` (``attention.self.query|key|value``, ``attention.output.dense``,
    ``attention.output.LayerNorm``, ``intermediate.dense``, ``intermediate.intermediate_act_fn``
    (``nn.GELU``), ``output.dense``, ``output.LayerNorm``: post-norm), ``pooler`` (dense + Tanh
    on the first token) and ``classifier``. No token types, attention mask or dropout.
    BERT's initialization: N(0, 0.02^2) weights, zero biases.

    Args:
        vocab_size: number of token ids.
        max_len: longest sequence (positions embedded).
        dim: token width (a multiple of ``heads``).
        depth: number of encoder layers.
        heads: attention heads.
        num_classes: output width.
        seed: seed of the initialization.

    Returns:
        The model in train mode: int64 token ids (b, t) -> a :class:`ModelOutput` with
        ``logits`` (b, num_classes), ``last_hidden_state`` (b, t, dim) and ``pooler_output``
        (b, dim).
    """
    if dim % heads:
        raise invalid("bert()", "dim a multiple of heads", f"dim={dim}, heads={heads}",
                      "change either")
    with _seeded(seed):
        return BertClassifier(vocab_size, max_len, dim, depth, heads, num_classes)


# --------------------------------------------------------------------------------------------
# LSTM classifier
# --------------------------------------------------------------------------------------------


class LSTMClassifier(nn.Module):
    """[Embedding], ``nn.LSTM(batch_first=True)``, Linear on the last step (see
    :func:`lstm_classifier`).

    Shapes: (b, seq, d_in) floats, (b, seq_len * d_in) floats when ``seq_len`` is set, or
    (b, seq) int64 token ids with an embedding -> (b, num_classes).
    """

    def __init__(self, d_in: int, hidden: int, num_layers: int, num_classes: int,
                 seq_len: Optional[int], vocab_size: Optional[int]) -> None:
        super().__init__()
        self.d_in = d_in
        self.seq_len = seq_len
        self.embedding = None if vocab_size is None else nn.Embedding(vocab_size, d_in)
        self.lstm = nn.LSTM(d_in, hidden, num_layers, batch_first=True)
        self.fc = nn.Linear(hidden, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.embedding is not None:
            x = self.embedding(x)
        elif self.seq_len is not None:
            x = x.reshape(x.shape[0], self.seq_len, self.d_in)
        out, _ = self.lstm(x)
        return self.fc(out[:, -1])


@constrained(d_in=SIZE, hidden=SIZE, num_layers=SIZE, num_classes=SIZE,
             seq_len=Maybe(SIZE), vocab_size=Maybe(SIZE), seed=SEED)
def lstm_classifier(
    d_in: int = 40,
    hidden: int = 64,
    *,
    num_layers: int = 1,
    num_classes: int = 3,
    seq_len: Optional[int] = None,
    vocab_size: Optional[int] = None,
    seed: int = 0,
) -> LSTMClassifier:
    """A sequence classifier: ``nn.LSTM(batch_first=True)`` and a Linear ``fc`` on the last step.

    Three input forms: float sequences (b, seq, d_in); with ``seq_len``, flat float vectors
    (b, seq_len * d_in) reshaped inside ``forward`` (the 40-feature waveform data as 8 steps of
    5: ``seq_len=8, d_in=5``); with ``vocab_size``, int64 token ids (b, seq) through an
    ``embedding`` (``nn.Embedding(vocab_size, d_in)``). PyTorch's default initialization.

    Args:
        d_in: features per step (the embedding width with ``vocab_size``).
        hidden: LSTM hidden width.
        num_layers: stacked LSTM layers.
        num_classes: output width.
        seq_len: steps of a flat float input, or None for (b, seq, d_in) inputs.
        vocab_size: number of token ids, or None for float inputs.
        seed: seed of the initialization.

    Returns:
        The model in train mode: (b, seq, d_in), (b, seq_len * d_in) or (b, seq) int64
        -> (b, num_classes).

    Example:
        >>> import torch
        >>> from nngauge.zoo import lstm_classifier
        >>> lstm_classifier(5, 16, seq_len=8)(torch.randn(4, 40)).shape
        torch.Size([4, 3])
    """
    if seq_len is not None and vocab_size is not None:
        raise invalid("lstm_classifier()", "seq_len (flat float input) or vocab_size (token "
                      "input), not both", f"seq_len={seq_len}, vocab_size={vocab_size}",
                      "drop one")
    with _seeded(seed):
        return LSTMClassifier(int(d_in), int(hidden), int(num_layers), int(num_classes),
                              None if seq_len is None else int(seq_len),
                              None if vocab_size is None else int(vocab_size))


# --------------------------------------------------------------------------------------------
# Small CNNs and MLPs
# --------------------------------------------------------------------------------------------


@constrained(in_channels=SIZE, num_classes=SIZE,
             channels=_counts(4, "a non-empty list or tuple of channel counts, each a positive "
                                "multiple of 4 (GroupNorm(4))"), seed=SEED)
def groupnorm_cnn(
    in_channels: int = 3,
    num_classes: int = 10,
    *,
    channels: Sequence[int] = (16, 32),
    seed: int = 0,
) -> nn.Sequential:
    """A GroupNorm CNN as one ``nn.Sequential``: per stage Conv2d(3x3, padding 1),
    GroupNorm(4 groups), ReLU, MaxPool2d(2); then AdaptiveAvgPool2d(1), Flatten, Linear.
    PyTorch's default initialization.

    Args:
        in_channels: input channels.
        num_classes: output width.
        channels: output channels of each stage (multiples of 4).
        seed: seed of the initialization.

    Returns:
        The model in train mode: (b, in_channels, H, W) -> (b, num_classes); H and W are
        halved by each stage.
    """
    with _seeded(seed):
        layers: list[nn.Module] = []
        for c_in, c_out in zip((in_channels, *channels), channels):
            layers += [nn.Conv2d(c_in, c_out, 3, padding=1), nn.GroupNorm(4, c_out), nn.ReLU(),
                       nn.MaxPool2d(2)]
        layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(channels[-1], num_classes)]
        return nn.Sequential(*layers)


class BatchNormAct2d(nn.BatchNorm2d):
    """timm's ``BatchNormAct2d``: an ``nn.BatchNorm2d`` whose forward also applies ``act``.

    An ``isinstance(m, nn.BatchNorm2d)`` test finds it, yet in eval mode it is not affine.
    Shapes: (b, C, H, W) -> (b, C, H, W).

    Args:
        num_features: channels C.
        act_layer: the activation class, instantiated as ``self.act``.
    """

    def __init__(self, num_features: int, act_layer: Callable[[], nn.Module] = nn.ReLU) -> None:
        super().__init__(num_features)
        self.act = act_layer()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(super().forward(x))


class SqueezeExcite(nn.Module):
    """Squeeze-excitation: pool, 1x1 conv reduce, ReLU, 1x1 conv expand, Hardsigmoid gate that
    multiplies the input. Shapes: (b, C, H, W) -> (b, C, H, W)."""

    def __init__(self, channels: int, reduced: int) -> None:
        super().__init__()
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.conv_reduce = nn.Conv2d(channels, reduced, 1)
        self.act1 = nn.ReLU(inplace=True)
        self.conv_expand = nn.Conv2d(reduced, channels, 1)
        self.gate = nn.Hardsigmoid()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scale = self.conv_expand(self.act1(self.conv_reduce(self.pool(x))))
        return x * self.gate(scale)


class InvertedResidual(nn.Module):
    """timm's MobileNetV3 ``InvertedResidual`` (stride 1).

    conv_pw (1x1 expand) + bn1 (BatchNormAct2d, Hardswish), conv_dw (3x3 depthwise) + bn2
    (BatchNormAct2d, ReLU), se, conv_pwl (1x1 project) + bn3 (BatchNorm2d), and the residual
    add when input and output channels match. Shapes: (b, c_in, H, W) -> (b, c_out, H, W).
    """

    def __init__(self, c_in: int, c_out: int, expanded: int) -> None:
        super().__init__()
        self.has_skip = c_in == c_out
        self.conv_pw = nn.Conv2d(c_in, expanded, 1, bias=False)
        self.bn1 = BatchNormAct2d(expanded, act_layer=nn.Hardswish)
        self.conv_dw = nn.Conv2d(expanded, expanded, 3, padding=1, groups=expanded, bias=False)
        self.bn2 = BatchNormAct2d(expanded, act_layer=nn.ReLU)
        self.se = SqueezeExcite(expanded, expanded // 4)
        self.conv_pwl = nn.Conv2d(expanded, c_out, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(c_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.bn2(self.conv_dw(self.bn1(self.conv_pw(x))))
        out = self.bn3(self.conv_pwl(self.se(out)))
        return out + x if self.has_skip else out


class MobileNetBlockNet(nn.Module):
    """MobileNetV3 stem, one inverted-residual block and a linear head (see
    :func:`mobilenet_block_net`). Shapes: (b, in_channels, H, W) -> (b, num_classes)."""

    def __init__(self, in_channels: int, num_classes: int, width: int) -> None:
        super().__init__()
        self.conv_stem = nn.Conv2d(in_channels, width, 3, stride=2, padding=1, bias=False)
        self.bn1 = BatchNormAct2d(width, act_layer=nn.Hardswish)
        self.blocks = nn.Sequential(InvertedResidual(width, width, 4 * width))
        self.global_pool = nn.AdaptiveAvgPool2d(1)
        self.flatten = nn.Flatten()
        self.classifier = nn.Linear(width, num_classes)
        _kaiming_fan_out(self)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.blocks(self.bn1(self.conv_stem(x)))
        return self.classifier(self.flatten(self.global_pool(x)))


@constrained(in_channels=SIZE, num_classes=SIZE, width=SIZE, seed=SEED)
def mobilenet_block_net(
    in_channels: int = 3,
    num_classes: int = 10,
    *,
    width: int = 16,
    seed: int = 0,
) -> MobileNetBlockNet:
    """A MobileNetV3-style network in timm's layout, built around :class:`BatchNormAct2d`.

    Modules ``conv_stem`` (3x3, stride 2) and ``bn1`` (BatchNormAct2d, Hardswish), then
    ``blocks.0``, an inverted residual of expansion 4 (``conv_pw, bn1, conv_dw, bn2,
    se.conv_reduce, se.act1, se.conv_expand, se.gate, conv_pwl, bn3``, residual add), then
    ``global_pool``, ``flatten`` and ``classifier``. torchvision's convolution initialization.

    Args:
        in_channels: input channels.
        num_classes: output width.
        width: channels of the stem and the block (which expands to 4 * width channels and
            squeezes them to width in the squeeze-excitation).
        seed: seed of the initialization.

    Returns:
        The model in train mode: (b, in_channels, H, W) -> (b, num_classes).
    """
    with _seeded(seed):
        return MobileNetBlockNet(in_channels, num_classes, width)


class LayerNorm2d(nn.LayerNorm):
    """timm's ``LayerNorm2d``: LayerNorm over the channels of a channels-first map.

    Shapes: (b, C, H, W) -> (b, C, H, W).
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.permute(0, 2, 3, 1)
        x = F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)
        return x.permute(0, 3, 1, 2)


class GELUTanh(nn.GELU):
    """timm's ``GELUTanh`` as an ``nn.GELU`` subclass: ``isinstance(m, nn.GELU)`` holds, yet it
    is the tanh approximation (``approximate="tanh"``), not the exact GELU."""

    def __init__(self) -> None:
        super().__init__(approximate="tanh")


class LayerScale(nn.Module):
    """A learnable per-channel scale ``gamma`` on the last dimension.

    Shapes: (..., dim) -> (..., dim).
    """

    def __init__(self, dim: int, init_value: float) -> None:
        super().__init__()
        self.gamma = nn.Parameter(init_value * torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.gamma


class ConvNeXtBlock(nn.Module):
    """timm's ``ConvNeXtBlock``: depthwise 7x7 conv, channels-last LayerNorm, MLP (GELUTanh),
    LayerScale, residual add. Shapes: (b, dim, H, W) -> (b, dim, H, W)."""

    def __init__(self, dim: int, ls_init_value: float = 0.1) -> None:
        super().__init__()
        self.conv_dw = nn.Conv2d(dim, dim, 7, padding=3, groups=dim)
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.mlp = Mlp(dim, 4 * dim, GELUTanh)
        self.ls = LayerScale(dim, ls_init_value)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shortcut = x
        x = self.conv_dw(x).permute(0, 2, 3, 1)
        x = self.ls(self.mlp(self.norm(x)))
        return x.permute(0, 3, 1, 2) + shortcut


class ConvNeXtBlockNet(nn.Module):
    """ConvNeXt stem, one stage of blocks and a LayerNorm head (see
    :func:`convnext_block_net`). Shapes: (b, in_channels, H, W) -> (b, num_classes)."""

    def __init__(self, in_channels: int, num_classes: int, dim: int, depth: int) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(in_channels, dim, 4, stride=4),
                                  LayerNorm2d(dim, eps=1e-6))
        self.blocks = nn.Sequential(*[ConvNeXtBlock(dim) for _ in range(depth)])
        self.head_norm = nn.LayerNorm(dim, eps=1e-6)
        self.head = nn.Linear(dim, num_classes)
        _trunc_normal_init(self, (nn.Conv2d, nn.Linear))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.blocks(self.stem(x))
        return self.head(self.head_norm(x.mean((2, 3))))


@constrained(in_channels=SIZE, num_classes=SIZE, dim=SIZE, depth=SIZE, seed=SEED)
def convnext_block_net(
    in_channels: int = 3,
    num_classes: int = 10,
    *,
    dim: int = 32,
    depth: int = 2,
    seed: int = 0,
) -> ConvNeXtBlockNet:
    """A ConvNeXt-Atto-style network in timm's layout.

    Modules ``stem`` (Conv2d kernel 4 stride 4, :class:`LayerNorm2d`), ``blocks.<i>``
    (``conv_dw`` 7x7 depthwise, permute to channels-last, ``norm``, ``mlp.fc1`` (dim -> 4 dim),
    ``mlp.act`` (:class:`GELUTanh`), ``mlp.fc2``, ``ls`` (:class:`LayerScale`, gamma 0.1 so that
    the blocks matter at initialization; timm uses 1e-6), permute back, residual add), then a
    global average pool computed in ``forward`` (no module), ``head_norm`` and ``head``.
    timm's initialization: truncated N(0, 0.02^2) conv and Linear weights, zero biases.

    Args:
        in_channels: input channels.
        num_classes: output width.
        dim: channels.
        depth: number of blocks.
        seed: seed of the initialization.

    Returns:
        The model in train mode: (b, in_channels, H, W) -> (b, num_classes); H and W are
        multiples of 4.
    """
    with _seeded(seed):
        return ConvNeXtBlockNet(in_channels, num_classes, dim, depth)


@constrained(d_in=SIZE, width=SIZE, depth=SIZE, num_classes=SIZE, p=PROBABILITY, seed=SEED)
def dropout_mlp(
    d_in: int = 40,
    width: int = 64,
    *,
    depth: int = 3,
    num_classes: int = 3,
    p: float = 0.5,
    seed: int = 0,
) -> nn.Sequential:
    """An MLP with dropout as one ``nn.Sequential``: ``depth`` times Linear, ReLU, Dropout(p),
    then a Linear head. PyTorch's default initialization.

    Args:
        d_in: input width.
        width: hidden width.
        depth: hidden layers.
        num_classes: output width.
        p: dropout probability.
        seed: seed of the initialization.

    Returns:
        The model in train mode (dropout active): (b, d_in) -> (b, num_classes).
    """
    with _seeded(seed):
        layers: list[nn.Module] = []
        features = d_in
        for _ in range(depth):
            layers += [nn.Linear(features, width), nn.ReLU(), nn.Dropout(p)]
            features = width
        layers.append(nn.Linear(features, num_classes))
        return nn.Sequential(*layers)


class QuickGELU(nn.Module):
    """CLIP's ``QuickGELU``: x sigmoid(1.702 x), a GELU approximation that is not ``nn.GELU``."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.sigmoid(1.702 * x)


class Swish(nn.Module):
    """A parameter-free custom Swish (SiLU): x sigmoid(x), a class no tool has heard of."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.sigmoid(x)


@constrained(d_in=SIZE, width=SIZE, num_classes=SIZE, seed=SEED)
def elementwise_zoo_net(
    d_in: int = 16,
    width: int = 32,
    *,
    num_classes: int = 3,
    seed: int = 0,
) -> nn.Sequential:
    """An MLP as one ``nn.Sequential`` whose three activations are, in order,
    :class:`QuickGELU`, ``nn.Hardswish`` and :class:`Swish`: measures must recognise
    activations by behaviour, not by class. PyTorch's default initialization.

    Args:
        d_in: input width.
        width: hidden width.
        num_classes: output width.
        seed: seed of the initialization.

    Returns:
        The model in train mode: (b, d_in) -> (b, num_classes).
    """
    with _seeded(seed):
        return nn.Sequential(
            nn.Linear(d_in, width), QuickGELU(),
            nn.Linear(width, width), nn.Hardswish(),
            nn.Linear(width, width), Swish(),
            nn.Linear(width, num_classes),
        )


# --------------------------------------------------------------------------------------------
# The registry
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class ZooEntry:
    """A small configuration of a zoo architecture and what a tool needs to measure it.

    Attributes:
        name: the key in :data:`ZOO`.
        build: ``build(seed=...)`` returns a fresh model in train mode.
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


def _in_dtype(build: Callable[..., nn.Module], dtype: torch.dtype, *, seed: int = 0) -> nn.Module:
    """``build(seed=seed)`` converted to ``dtype``."""
    return build(seed=seed).to(dtype)


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


@constrained(entry_or_name=ENTRY, n=Integer(0), seed=SEED)
def sample_inputs(entry_or_name: ZooEntry | str, n: int, *, seed: int = 0) -> torch.Tensor:
    """``n`` inputs for a zoo model: standard Gaussian floats, or uniform int64 token ids.

    Args:
        entry_or_name: a :class:`ZooEntry` or its name in :data:`ZOO`.
        n: number of samples.
        seed: seed of the draw (the global random state is not used).

    Returns:
        Shape (n, *input_shape): the entry's dtype for ``"float"`` entries, int64 in
        [0, vocab_size) for ``"tokens"`` entries.

    Example:
        >>> from nngauge.zoo import sample_inputs
        >>> sample_inputs("gpt_small", 3).shape, sample_inputs("resnet_small", 3).shape
        (torch.Size([3, 16]), torch.Size([3, 3, 32, 32]))
    """
    entry = _entry(entry_or_name, "sample_inputs()")
    generator = torch.Generator().manual_seed(int(seed))
    shape = (int(n), *entry.input_shape)
    if entry.input_kind == "tokens":
        return torch.randint(0, entry.vocab_size, shape, generator=generator)
    return torch.randn(shape, generator=generator).to(entry.dtype)


@constrained(entry_or_name=ENTRY, n=Integer(0), seed=SEED)
def sample_labels(entry_or_name: ZooEntry | str, n: int, *, seed: int = 0) -> torch.Tensor:
    """``n`` uniform int64 labels for a zoo model: classes, or next tokens for a language model.

    Args:
        entry_or_name: a :class:`ZooEntry` or its name in :data:`ZOO`.
        n: number of samples.
        seed: seed of the draw (the global random state is not used).

    Returns:
        Shape (n, *label_shape), int64 in [0, num_classes): (n,) for classifiers, (n, seq)
        for ``"gpt_small"`` (num_classes is the vocabulary there).

    Example:
        >>> from nngauge.zoo import sample_labels
        >>> sample_labels("gpt_small", 3).shape, sample_labels("lstm", 3).shape
        (torch.Size([3, 16]), torch.Size([3]))
    """
    entry = _entry(entry_or_name, "sample_labels()")
    generator = torch.Generator().manual_seed(int(seed))
    return torch.randint(0, entry.num_classes, (int(n), *entry.label_shape),
                         generator=generator)
