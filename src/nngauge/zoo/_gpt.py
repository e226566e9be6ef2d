"""A GPT-2 decoder in Hugging Face's module layout (:func:`gpt`, :func:`gpt_small`)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from nngauge._constraints import Flag, constrained
from nngauge._vocabulary import renamed
from nngauge.errors import invalid
from nngauge.zoo._common import GENERATOR, PROBABILITY, SIZE, seeded

_GPT_OPTIONS = dict(vocab_size=SIZE, block_size=SIZE, dim=SIZE, depth=SIZE, heads=SIZE,
                    dropout=PROBABILITY, generator=GENERATOR)
"""Declared once for :func:`gpt` and its fast variant :func:`gpt_small`."""


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
                 dropout: float, tie_embeddings: bool = False) -> None:
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
        if tie_embeddings:  # GPT2LMHeadModel's tie_word_embeddings: one shared parameter
            self.lm_head.weight = self.wte.weight

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


@renamed(seed="generator")
@constrained(**_GPT_OPTIONS, tie_embeddings=Flag())
def gpt(
    vocab_size: int = 256,
    block_size: int = 64,
    *,
    dim: int = 128,
    depth: int = 4,
    heads: int = 4,
    dropout: float = 0.0,
    tie_embeddings: bool = False,
    generator: torch.Generator | int = 0,
) -> GPT:
    """A GPT-2 style decoder in Hugging Face's ``GPT2LMHeadModel`` layout.

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
        tie_embeddings: share one parameter between ``lm_head.weight`` and ``wte.weight``, as
            GPT-2 does (``tie_word_embeddings``); GPT-2 small's size is
            ``gpt(50257, 1024, dim=768, depth=12, heads=12, tie_embeddings=True)``,
            124,439,808 parameters. Default: untied (a separate head).
        generator: an int seed of the initialization, or a torch.Generator (one draw from
            it is the seed).

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
    with seeded(generator):
        return GPT(vocab_size, block_size, dim, depth, heads, dropout, tie_embeddings)


@renamed(seed="generator")
@constrained(**_GPT_OPTIONS)
def gpt_small(
    vocab_size: int = 64,
    block_size: int = 16,
    *,
    dim: int = 32,
    depth: int = 2,
    heads: int = 2,
    dropout: float = 0.0,
    generator: torch.Generator | int = 0,
) -> GPT:
    """A fast :func:`gpt` for tests: vocabulary 64, 16 positions, dim 32, 2 blocks, 2 heads.

    Returns:
        The model in train mode: int64 token ids (b, t) -> a dict with ``"logits"``
        (b, t, vocab_size) and ``"hidden_states"`` (b, t, dim).
    """
    return gpt(vocab_size, block_size, dim=dim, depth=depth, heads=heads, dropout=dropout,
               generator=generator)


__all__ = ["Conv1D", "GPT", "NewGELUActivation", "gpt", "gpt_small"]
