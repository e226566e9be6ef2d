"""Measure an LSTM classifier: a recurrent module with fused kernels and a tuple output.

The model is :func:`nngauge.zoo.lstm_classifier` (``nn.LSTM`` over the 40 waveform features
read as 8 steps of 5, a linear read-out of the last step), measured on Breiman's
waveform-noise data (generated, nothing downloaded). Replace ``build()`` by your own network
to measure it instead.

    python examples/lstm.py [--quick]             # a few seconds
    nngauge report examples/lstm.py:build --data waveform

What it shows: ``nn.LSTM`` has no ``vmap`` batching rule and its oneDNN kernel no forward-mode
derivative; the measures that need them fall back (a loop, oneDNN off) and say so in the
result's ``mode.notes``, with the same numbers.
"""

from __future__ import annotations

import argparse

import torch
from torch import nn

import nngauge
from nngauge.data import waveform_noise
from nngauge.report import build_report
from nngauge.zoo import lstm_classifier


def build() -> nn.Module:
    """An LSTM (hidden 64) over the waveform data's 40 features as 8 steps of 5."""
    return lstm_classifier(5, 64, seq_len=8)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description="Measure an LSTM classifier.")
    parser.add_argument("--quick", action="store_true", help="the report's quick settings")
    parser.add_argument("--out", default="lstm-report.html")
    args = parser.parse_args(argv)
    model = build()
    data = waveform_noise(1000, generator=0)

    report = build_report(model, (data.inputs, data.labels), quick=args.quick)
    print(report.summary())
    print(f"wrote {report.save(args.out)}")

    profile = nngauge.nlc_profile(model, data.inputs, generator=torch.Generator().manual_seed(1))
    print(f"NLC {profile.layers[-1].nlc:.3g}; notes: {list(profile.mode.notes)}")
    sharp = nngauge.expected_sharpness(model, (data.inputs, data.labels), alpha=1e-3,
                                       n_probes=20, generator=torch.Generator().manual_seed(2))
    print(f"expected sharpness {sharp.expected_sharpness:.3g} +- {sharp.stderr:.2g} "
          f"({sharp.method}); notes: {list(sharp.mode.notes)}")


if __name__ == "__main__":
    main()
