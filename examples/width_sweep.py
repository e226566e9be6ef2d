"""Capacity measures against hidden width (generalization paper, section 3, Figure 4).

Trains two-layer ReLU perceptrons of growing width on scikit-learn's digits (no explicit
regularization, appendix A's SGD with momentum until the cross-entropy is below --target-loss:
the sweep of ``nngauge reproduce neyshabur-figure4``, nngauge.reproduce._neyshabur_figure4's
``width_sweep``), then prints train/test error, the 5th-percentile margin, the four norm-based
capacities over margin (the Figure 1/4 versions without constants, and the l2-path and spectral
ones with their width factors) and the expected sharpness at one alpha. Runs in well under a
minute by default:

    python examples/width_sweep.py
    python examples/width_sweep.py --widths 16 64 256 1024 --n-train 1000
"""

from __future__ import annotations

import argparse

import torch

from nngauge import expected_sharpness
from nngauge.data import digits, split, standardize
from nngauge.reproduce._neyshabur_figure4 import width_sweep


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--widths", type=int, nargs="+", default=[8, 32, 128, 512])
    parser.add_argument("--n-train", type=int, default=600)
    parser.add_argument("--epochs", type=int, default=150, help="at most this many epochs")
    parser.add_argument("--target-loss", type=float, default=1e-2)
    parser.add_argument("--lr", type=float, default=0.01, help="SGD step (appendix A: 0.01)")
    parser.add_argument("--repeats", type=int, default=1, help="networks per width")
    parser.add_argument("--alpha", type=float, default=1e-3, help="expected-sharpness alpha")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    data = digits()
    n = len(data.labels)
    train, test = split(data, (args.n_train / n, 1 - args.n_train / n), generator=args.seed)
    (train, test), _ = standardize(train, test)

    print(f"{'width':>6} {'train err':>9} {'test err':>8} {'margin':>7} {'l2':>9} "
          f"{'l1-path':>9} {'l2-path':>9} {'spectral':>9} {'l2-path*h':>9} "
          f"{'spectral*h':>10} {'E-sharp':>8}")
    for point in width_sweep(train, test, args.widths, repeats=args.repeats, lr=args.lr,
                             loss_target=args.target_loss, max_epochs=args.epochs,
                             generator=torch.Generator().manual_seed(args.seed)):
        cap = point.capacity
        sharp = expected_sharpness(point.net, tuple(train), alpha=args.alpha, n_probes=200,
                                   generator=1)
        print(f"{point.width:>6} {point.fitted.train_error:>9.3f} {point.test_error:>8.3f} "
              f"{cap.margin:>7.3f} {cap['l2'].plain:>9.3g} {cap['l1_path'].plain:>9.3g} "
              f"{cap['l2_path'].plain:>9.3g} {cap['spectral'].plain:>9.3g} "
              f"{cap.l2_path:>9.3g} {cap.spectral:>10.3g} {sharp.expected_sharpness:>8.4f}")


if __name__ == "__main__":
    main()
