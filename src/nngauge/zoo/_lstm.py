"""An LSTM sequence classifier on float sequences or token ids (:func:`lstm_classifier`)."""

from __future__ import annotations

from typing import Optional

import torch
from torch import nn

from nngauge._constraints import Maybe, constrained
from nngauge._vocabulary import renamed
from nngauge.errors import invalid
from nngauge.zoo._common import GENERATOR, SIZE, seeded


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


@renamed(seed="generator")
@constrained(d_in=SIZE, hidden=SIZE, num_layers=SIZE, num_classes=SIZE,
             seq_len=Maybe(SIZE), vocab_size=Maybe(SIZE), generator=GENERATOR)
def lstm_classifier(
    d_in: int = 40,
    hidden: int = 64,
    *,
    num_layers: int = 1,
    num_classes: int = 3,
    seq_len: Optional[int] = None,
    vocab_size: Optional[int] = None,
    generator: torch.Generator | int = 0,
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
        generator: an int seed of the initialization, or a torch.Generator (one draw from
            it is the seed).

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
    with seeded(generator):
        return LSTMClassifier(int(d_in), int(hidden), int(num_layers), int(num_classes),
                              None if seq_len is None else int(seq_len),
                              None if vocab_size is None else int(vocab_size))


__all__ = ["LSTMClassifier", "lstm_classifier"]
