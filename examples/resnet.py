"""Measure a ResNet-18 the way the papers do: the network users bring from torchvision or timm.

The model is :func:`nngauge.zoo.resnet18`, a plain-torch copy of torchvision's layout (one
in-place ReLU module called twice per block, batchnorm, 3x3 max pooling in the stem), so this
runs without torchvision. Replace ``build()`` by your own network to measure it instead.

    python examples/resnet.py                     # report + measures on ResNet-18, ~1 minute
    python examples/resnet.py --small --quick     # a small ResNet, a few seconds
    nngauge report examples/resnet.py:build --data gaussian:shape=3x32x32,n=512 --batch-size 64

What it shows: the report on a 60-layer network (measured at its blocks, sections scaled to
a time budget); batchnorm's mode stated explicitly (batch statistics for the NLC, as at
initialization in the NLC paper; statistics frozen on the data for per-point measures); exact
linear pieces through max pooling and residual additions; and the norms behind the
norm-based capacities that max pooling leaves defined (l2, spectral) beside those it does not
(path norms).
"""

from __future__ import annotations

import argparse

import torch
from torch import nn

import nngauge
from nngauge.report import build_report
from nngauge.zoo import resnet18, resnet_small


def build() -> nn.Module:
    """ResNet-18 for 10 classes, torchvision layout, freshly initialized (train mode)."""
    return resnet18(10)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description="Measure a ResNet-18.")
    parser.add_argument("--small", action="store_true", help="a small ResNet (fast)")
    parser.add_argument("--quick", action="store_true", help="the report's quick settings")
    parser.add_argument("--out", default="resnet-report.html")
    args = parser.parse_args(argv)
    model = resnet_small() if args.small else build()
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(256, 3, 32, 32, generator=gen)
    y = torch.randint(0, 10, (256,), generator=gen)

    report = build_report(model, (x, y), batch_size=64, quick=args.quick)
    print(report.summary())
    print(f"wrote {report.save(args.out)}")

    result = nngauge.nlc(model, x, batch_size=64, generator=torch.Generator().manual_seed(1))
    print(f"NLC {result.nlc:.3g} +- {result.stderr:.2g} (batchnorm {result.mode.norm_mode}, "
          f"dropout {result.mode.dropout})")
    pieces = nngauge.transitions(model, x[0], x[1], norm_mode="frozen", norm_data=x)
    print(f"exact linear pieces between two images: {pieces.n_pieces} "
          f"({len(pieces.layers)} ReLU and max-pooling sites, batchnorm {pieces.mode.norm_mode})")
    # an untrained network misclassifies most points: its margin is negative, and a capacity
    # over margin is undefined (capacity() warns); the norms it divides stay defined
    capacity = nngauge.capacity(model, x, y)
    print(f"norms behind the capacities (Neyshabur et al. 2017): Lipschitz bound "
          f"prod ||W_i||_2 = {capacity.lipschitz_l2:.3g} over {capacity.depth} layers; "
          f"margin {capacity.margin:.3g} (capacity over margin defined once trained); path "
          f"norms undefined: {capacity.undefined.get('l1_path', 'no')[:60]}")


if __name__ == "__main__":
    main()
