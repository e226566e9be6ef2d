"""A BERT classifier in Hugging Face's module layout, with its ``ModelOutput`` (:func:`bert`)."""

from __future__ import annotations

import collections

import torch
import torch.nn.functional as F
from torch import nn

from nngauge._constraints import constrained
from nngauge._vocabulary import renamed
from nngauge.errors import invalid
from nngauge.zoo._common import GENERATOR, SIZE, seeded


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


@renamed(seed="generator")
@constrained(vocab_size=SIZE, max_len=SIZE, dim=SIZE, depth=SIZE, heads=SIZE, num_classes=SIZE,
             generator=GENERATOR)
def bert(
    vocab_size: int = 256,
    max_len: int = 64,
    *,
    dim: int = 128,
    depth: int = 2,
    heads: int = 4,
    num_classes: int = 2,
    generator: torch.Generator | int = 0,
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
        generator: an int seed of the initialization, or a torch.Generator (one draw from
            it is the seed).

    Returns:
        The model in train mode: int64 token ids (b, t) -> a :class:`ModelOutput` with
        ``logits`` (b, num_classes), ``last_hidden_state`` (b, t, dim) and ``pooler_output``
        (b, dim).
    """
    if dim % heads:
        raise invalid("bert()", "dim a multiple of heads", f"dim={dim}, heads={heads}",
                      "change either")
    with seeded(generator):
        return BertClassifier(vocab_size, max_len, dim, depth, heads, num_classes)


__all__ = ["BertClassifier", "ModelOutput", "bert"]
