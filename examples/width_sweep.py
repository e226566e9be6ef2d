"""Capacity measures against hidden width (generalization paper, section 3, Figure 4).

Trains two-layer ReLU perceptrons of growing width on scikit-learn's digits (no explicit
regularization, SGD with momentum until the cross-entropy is below --target-loss), then prints
train/test error, the 5th-percentile margin, the four norm-based capacities over margin (the
Figure 1/4 versions without constants, and the l2-path and spectral ones with their width
factors) and the expected sharpness at one alpha. Runs in well under a minute by default:

    python examples/width_sweep.py
    python examples/width_sweep.py --widths 16 64 256 1024 --n-train 1000
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F

from nngauge.data import digits
from nngauge.measures.generalization._norms import capacity
from nngauge.measures.generalization._sharpness import expected_sharpness
from nngauge.nn import mlp


def train(width: int, x: torch.Tensor, y: torch.Tensor, *, epochs: int, target_loss: float,
          seed: int) -> torch.nn.Module:
    """SGD (batch 64, lr 0.01, momentum 0.9: appendix A) until the loss is below target."""
    gen = torch.Generator().manual_seed(seed)
    net = mlp(x.shape[1], width, 2, 10, init="gaussian", generator=gen)
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    for _ in range(epochs):
        for idx in torch.randperm(len(y), generator=gen).split(64):
            opt.zero_grad()
            F.cross_entropy(net(x[idx]), y[idx]).backward()
            opt.step()
        with torch.no_grad():
            if F.cross_entropy(net(x), y).item() < target_loss:
                break
    return net


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--widths", type=int, nargs="+", default=[8, 32, 128, 512])
    parser.add_argument("--n-train", type=int, default=600)
    parser.add_argument("--epochs", type=int, default=150)
    parser.add_argument("--target-loss", type=float, default=1e-2)
    parser.add_argument("--alpha", type=float, default=1e-3, help="expected-sharpness alpha")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    data = digits()
    order = torch.randperm(len(data.labels), generator=torch.Generator().manual_seed(args.seed))
    x, y = data.inputs[order] / 16.0, data.labels[order]
    x_train, y_train = x[:args.n_train], y[:args.n_train]
    x_test, y_test = x[args.n_train:], y[args.n_train:]

    header = (f"{'width':>6} {'train err':>9} {'test err':>8} {'margin':>7} {'l2':>9} "
              f"{'l1-path':>9} {'l2-path':>9} {'spectral':>9} {'l2-path*h':>9} "
              f"{'spectral*h':>10} {'E-sharp':>8}")
    print(header)
    for width in args.widths:
        net = train(width, x_train, y_train, epochs=args.epochs, target_loss=args.target_loss,
                    seed=args.seed).eval()
        with torch.no_grad():
            train_err = (net(x_train).argmax(1) != y_train).float().mean().item()
            test_err = (net(x_test).argmax(1) != y_test).float().mean().item()
        cap = capacity(net, x_train, y_train)
        sharp = expected_sharpness(net, (x_train, y_train), loss=F.cross_entropy,
                                   alpha=args.alpha, n_probes=200, generator=1)
        print(f"{width:>6} {train_err:>9.3f} {test_err:>8.3f} {cap.margin:>7.3f} "
              f"{cap['l2'].plain:>9.3g} {cap['l1_path'].plain:>9.3g} "
              f"{cap['l2_path'].plain:>9.3g} {cap['spectral'].plain:>9.3g} "
              f"{cap.l2_path:>9.3g} {cap.spectral:>10.3g} {sharp.expected_sharpness:>8.4f}")


if __name__ == "__main__":
    main()
