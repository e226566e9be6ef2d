"""Wall time of ``nngauge report`` on real-network architectures, section by section.

The report times one forward and backward pass of the model, then fits every section's work
to its budget (40 s by default); this benchmark checks the whole report stays within 60 s on
the machine it runs on, for the networks users bring:

- ResNet-18 (torchvision layout, ImageNet stem, 11.7 M parameters) at 3 x 32 x 32, batch 64;
- ViT-tiny (dim 192, depth 12, patch 4) at 3 x 32 x 32, batch 64;
- a GPT-2-style decoder (dim 128, depth 4, vocabulary 256, 64 tokens), batch 64.

The baseline is the same report with the settings of a 10-layer MLP (every sample, every
layer, 100 power iterations, no budget), timed on the ResNet-18 until it exceeds 600 s or
finishes (``--baseline``; slow). Prints the load average beside the times. With
``NNGAUGE_BENCH_ROWS`` set (``make bench``), each network's seconds per section and its total
against the 60 s target are recorded as a table of benchmarks/RESULTS.md
(benchmarks/_rows.py); the ``--baseline`` ratio is printed only (one run of each side, not
interleaved medians, so not a recorded ratio).

    python benchmarks/bench_report.py [--networks resnet18,vit,gpt] [--baseline]
"""

from __future__ import annotations

import argparse
import time

import torch

import _rows  # this folder's scripts share it (the script's directory is on sys.path)
from nngauge.report import build_report
from nngauge.zoo import gpt, resnet18, vit

TARGET_SECONDS = 60.0


def networks():
    gen = torch.Generator().manual_seed(0)
    images = torch.randn(512, 3, 32, 32, generator=gen)
    labels = torch.randint(0, 10, (512,), generator=gen)
    tokens = torch.randint(0, 256, (512, 64), generator=gen)
    return {
        "resnet18": (lambda: resnet18(10), (images, labels)),
        "vit": (lambda: vit(32, 4, num_classes=10), (images, labels)),
        "gpt": (lambda: gpt(256, 64), (tokens, torch.roll(tokens, -1, dims=1))),
    }


def run(name: str, build, data, record: bool = True, **options) -> float:
    """Seconds of one report of ``name``, printed section by section (and recorded as a table
    when ``record``)."""
    model = build()
    load_before = _rows.load()
    start = time.perf_counter()
    report = build_report(model, data, batch_size=64, **options)
    seconds = time.perf_counter() - start
    load_after = _rows.load()
    n_params = sum(p.numel() for p in model.parameters())
    verdict = "within" if seconds <= TARGET_SECONDS else "OVER"
    print(f"\n{name}: {n_params:,} parameters, status {report.status}, {seconds:.1f} s "
          f"(target <= {TARGET_SECONDS:g} s: {verdict}), load {load_before:.2f} before, "
          f"{load_after:.2f} after")
    for section in report.sections:
        print(f"  {section.key:<12} {section.status:<8} {section.seconds:7.2f} s"
              + (f"  ({section.error[:90]})" if section.error else ""))
    for choice in report.settings.choices:
        print(f"  - {choice}")
    if record:
        rows = [[section.key, section.status, round(section.seconds, 2)]
                for section in report.sections]
        rows.append([f"total (target <= {TARGET_SECONDS:g} s: {verdict})", report.status,
                     round(seconds, 2)])
        _rows.record_table(f"nngauge report on {name}: seconds per section",
                           ["section", "status", "seconds"], rows,
                           setting=f"{n_params:,} parameters, batch 64, one report",
                           load_before=load_before, load_after=load_after)
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--networks", default="resnet18,vit,gpt")
    parser.add_argument("--baseline", action="store_true",
                        help="also time ResNet-18 with unscaled settings (slow)")
    args = parser.parse_args()
    table = networks()
    times = {name: run(name, *table[name]) for name in args.networks.split(",")}
    if args.baseline:
        base = run("resnet18, unscaled settings", *table["resnet18"], record=False, budget=1e9)
        print(f"\nratio unscaled / scaled on resnet18: {base / times['resnet18']:.1f}x (one "
              "run each, not recorded)")
    worst = max(times.values())
    print(f"\nslowest report {worst:.1f} s: {'within' if worst <= TARGET_SECONDS else 'over'} "
          f"the {TARGET_SECONDS:g} s target")


if __name__ == "__main__":
    main()
