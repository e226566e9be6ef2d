"""A Vision Transformer in timm's module layout (:func:`vit`, :func:`vit_small`), and timm's
newer forward signature with optional arguments (:class:`MaskableVisionTransformer`)."""

from __future__ import annotations

from typing import Callable, Optional

import torch
import torch.nn.functional as F
from torch import nn

from nngauge._constraints import Real, constrained
from nngauge._vocabulary import renamed
from nngauge.errors import invalid
from nngauge.zoo._common import GENERATOR, PROBABILITY, SIZE, seeded, trunc_normal_init

_VIT_OPTIONS = dict(image_size=SIZE, patch_size=SIZE, in_channels=SIZE, dim=SIZE, depth=SIZE,
                    heads=SIZE, mlp_ratio=Real(0, low_open=True), num_classes=SIZE,
                    dropout=PROBABILITY, generator=GENERATOR)
"""Declared once for :func:`vit` and its fast variant :func:`vit_small`."""


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
    """timm's ``Attention``: fused ``qkv`` Linear, ``scaled_dot_product_attention``, ``proj``;
    ``attn_mask`` and ``is_causal`` go to the attention as they are.

    Shapes: (b, n, dim) -> (b, n, dim).
    """

    def __init__(self, dim: int, heads: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.num_heads = heads
        self.dropout_p = dropout
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.proj_drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, attn_mask: Optional[torch.Tensor] = None,
                is_causal: bool = False) -> torch.Tensor:
        b, n, dim = x.shape
        qkv = self.qkv(x).reshape(b, n, 3, self.num_heads, dim // self.num_heads)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)
        x = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask,
                                           dropout_p=self.dropout_p if self.training else 0.0,
                                           is_causal=is_causal)
        return self.proj_drop(self.proj(x.transpose(1, 2).reshape(b, n, dim)))


class Block(nn.Module):
    """timm's pre-norm transformer ``Block``. Shapes: (b, n, dim) -> (b, n, dim)."""

    def __init__(self, dim: int, heads: int, mlp_ratio: float, dropout: float) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=1e-6)
        self.attn = Attention(dim, heads, dropout)
        self.norm2 = nn.LayerNorm(dim, eps=1e-6)
        self.mlp = Mlp(dim, int(dim * mlp_ratio), GELU, dropout)

    def forward(self, x: torch.Tensor, attn_mask: Optional[torch.Tensor] = None,
                is_causal: bool = False) -> torch.Tensor:
        x = x + self.attn(self.norm1(x), attn_mask, is_causal)
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
        trunc_normal_init(self, (nn.Linear,))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classify(self.blocks(self.tokens(x)))

    def tokens(self, x: torch.Tensor) -> torch.Tensor:
        """The class token and the patch tokens with their position embedding."""
        x = self.patch_embed(x)
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1)
        return self.pos_drop(x + self.pos_embed)

    def classify(self, x: torch.Tensor) -> torch.Tensor:
        """The head on the normalized class token."""
        return self.head(self.norm(x)[:, 0])


class MaskableVisionTransformer(VisionTransformer):
    """A :class:`VisionTransformer` with timm's newer signature
    ``forward(x, attn_mask=None, is_causal=False)``: the optional arguments reach every
    block's attention (a network whose forward takes more than its input, as timm's and
    Hugging Face's do).

    Shapes: (b, in_channels, image_size, image_size) -> (b, num_classes).
    """

    def forward(self, x: torch.Tensor, attn_mask: Optional[torch.Tensor] = None,
                is_causal: bool = False) -> torch.Tensor:
        x = self.tokens(x)
        for block in self.blocks:
            x = block(x, attn_mask, is_causal)
        return self.classify(x)


@renamed(seed="generator")
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
    generator: torch.Generator | int = 0,
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
        generator: an int seed of the initialization, or a torch.Generator (one draw from
            it is the seed).

    Returns:
        The model in train mode: (b, in_channels, image_size, image_size) -> (b, num_classes).
    """
    if image_size % patch_size:
        raise invalid("vit()", "image_size a multiple of patch_size",
                      f"image_size={image_size}, patch_size={patch_size}", "change either")
    if dim % heads:
        raise invalid("vit()", "dim a multiple of heads", f"dim={dim}, heads={heads}",
                      "change either")
    with seeded(generator):
        return VisionTransformer(image_size, patch_size, in_channels, dim, depth, heads,
                                 mlp_ratio, num_classes, dropout)


@renamed(seed="generator")
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
    generator: torch.Generator | int = 0,
) -> VisionTransformer:
    """A fast :func:`vit` for tests: dim 32, 2 blocks, 2 heads.

    Returns:
        The model in train mode: (b, in_channels, image_size, image_size) -> (b, num_classes).
    """
    return vit(image_size, patch_size, in_channels=in_channels, dim=dim, depth=depth,
               heads=heads, mlp_ratio=mlp_ratio, num_classes=num_classes, dropout=dropout,
               generator=generator)


@constrained(generator=GENERATOR)
def vit_optional_arguments(*, generator: torch.Generator | int = 0) -> MaskableVisionTransformer:
    """A tiny :class:`MaskableVisionTransformer` for the conformance zoo: 16 x 16 inputs,
    patches of 4, dim 16, two blocks of 2 heads, 10 classes.

    Returns:
        The model in train mode: (b, 3, 16, 16) -> (b, 10).
    """
    with seeded(generator):
        return MaskableVisionTransformer(16, 4, 3, 16, 2, 2, 4.0, 10, 0.0)


__all__ = ["GELU", "MaskableVisionTransformer", "Mlp", "VisionTransformer", "vit", "vit_small",
           "vit_optional_arguments"]
