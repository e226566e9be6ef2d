"""Wall time and peak memory of ``nngauge report`` on real-network architectures, section by
section, against the budget each report states up front.

The report times one forward and backward pass of the model, then shares its budget between
the sections (each its least work plus a share of the rest; the costliest given up first,
each naming the budget that would run it). Two scales:

- small, at the default 40 s budget, against a 60 s target for the whole report:
  ResNet-18 (torchvision layout, ImageNet stem, 11.7 M parameters) at 3 x 32 x 32, batch 64;
  ViT-tiny (dim 192, depth 12, patch 4) at 3 x 32 x 32, batch 64; a GPT-2-style decoder
  (dim 128, depth 4, vocabulary 256, 64 tokens), batch 64;
- large, at ``--budget`` (default 600 s), against that budget for the sections (the report's
  own setup, timing passes and finding sites, is counted beside it): ResNet-50 (25.6 M
  parameters, torchvision layout) at 3 x 224 x 224, batch 32, 256 samples; a GPT-2-small-sized
  decoder (124 M parameters, tied embeddings, 12 layers, dim 768, vocabulary 50,257) on
  128-token sequences, batch 32, 256 samples.

Each network runs in its own process, so the peak resident memory printed (``ru_maxrss``)
is that report's, the model and data included. The baseline of ``--baseline`` is the same
report on ResNet-18 with the settings of a 10-layer MLP (every sample, every layer, 100 power
iterations, no budget), printed only (one run of each side, not interleaved medians, so not a
recorded ratio). Prints the load average beside the times. With ``NNGAUGE_BENCH_ROWS`` set
(``make bench``), each network's seconds per section, their allotted seconds and the total
against its target are recorded as a table of benchmarks/RESULTS.md (benchmarks/_rows.py).

    python benchmarks/bench_report.py [--networks resnet18,vit,gpt,resnet50,gpt2] [--budget 600]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from typing import Optional

import torch

import _rows  # this folder's scripts share it (the script's directory is on sys.path)
from nngauge._internal.usage import gibibytes, peak_memory_bytes
from nngauge.report import build_report
from nngauge.zoo import gpt, resnet18, resnet50, vit

SMALL_TARGET_SECONDS = 60.0
"""The whole report on a small network at the default budget."""
LARGE = ("resnet50", "gpt2")
"""The networks measured at ``--budget``: their sections against that budget."""
OVER_BUDGET = 1.1
"""A large report's sections are "within" their budget up to this factor of it (the cost
model is coarse: a 10% overrun is within its error)."""


def networks():
    gen = torch.Generator().manual_seed(0)
    images = torch.randn(512, 3, 32, 32, generator=gen)
    labels = torch.randint(0, 10, (512,), generator=gen)
    tokens = torch.randint(0, 256, (512, 64), generator=gen)
    return {
        "resnet18": (lambda: resnet18(10), lambda: (images, labels), 64),
        "vit": (lambda: vit(32, 4, num_classes=10), lambda: (images, labels), 64),
        "gpt": (lambda: gpt(256, 64), lambda: (tokens, torch.roll(tokens, -1, dims=1)), 64),
        "resnet50": (lambda: resnet50(1000), lambda: (
            torch.randn(256, 3, 224, 224, generator=gen),
            torch.randint(0, 1000, (256,), generator=gen)), 32),
        "gpt2": (lambda: gpt(50257, 128, dim=768, depth=12, heads=12, tie_embeddings=True),
                 _gpt2_tokens, 32),
    }


def _gpt2_tokens():
    tokens = torch.randint(0, 50257, (256, 128), generator=torch.Generator().manual_seed(1))
    return tokens, torch.roll(tokens, -1, dims=1)


def run(name: str, build, data, batch_size: int, budget: Optional[float],
        record: bool = True) -> float:
    """Seconds of one report of ``name`` at ``budget`` (None: the default), printed section
    by section (and recorded as a table when ``record``)."""
    model = build()
    inputs = data()
    large = name in LARGE
    load_before = _rows.load()
    start = time.perf_counter()
    report = build_report(model, inputs, batch_size=batch_size, budget=budget)
    seconds = time.perf_counter() - start
    load_after = _rows.load()
    memory = peak_memory_bytes()
    n_params = sum(p.numel() for p in model.parameters())
    spent = sum(section.seconds for section in report.sections)
    if large:
        target = f"sections <= {OVER_BUDGET:g} x budget {report.settings.budget:g} s"
        verdict = "within" if spent <= OVER_BUDGET * report.settings.budget else "OVER"
    else:
        target = f"report <= {SMALL_TARGET_SECONDS:g} s"
        verdict = "within" if seconds <= SMALL_TARGET_SECONDS else "OVER"
    print(f"\n{name}: {n_params:,} parameters, status {report.status}, {seconds:.1f} s in all, "
          f"{spent:.1f} s in sections ({target}: {verdict}), peak memory {gibibytes(memory)}, "
          f"load {load_before:.2f} before, {load_after:.2f} after")
    allotted = dict(report.settings.allotted)
    for section in report.sections:
        print(f"  {section.key:<12} {section.status:<8} {section.seconds:7.2f} s"
              + (f" of {allotted[section.key]:.3g} s" if section.key in allotted else "")
              + (f"  ({section.error[:110]})" if section.error else ""))
    for choice in report.settings.choices:
        print(f"  - {choice}")
    if record:
        rows = [[section.key, section.status, round(section.seconds, 2),
                 round(allotted[section.key], 2) if section.key in allotted else ""]
                for section in report.sections]
        rows.append([f"sections ({target}: {verdict})", report.status, round(spent, 2),
                     round(sum(allotted.values()), 2)])
        rows.append(["whole report, setup included", "", round(seconds, 2), ""])
        _rows.record_table(
            f"nngauge report on {name}: seconds per section",
            ["section", "status", "seconds", "allotted seconds"], rows,
            setting=(f"{n_params:,} parameters, batch {batch_size}, budget "
                     f"{report.settings.budget:g} s, one report, peak memory "
                     f"{gibibytes(memory)} (the process's resident peak, model and data "
                     "included)"),
            load_before=load_before, load_after=load_after)
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--networks", default="resnet18,vit,gpt,resnet50,gpt2")
    parser.add_argument("--budget", type=float, default=600.0,
                        help="budget of the large networks' reports (seconds)")
    parser.add_argument("--baseline", action="store_true",
                        help="also time ResNet-18 with unscaled settings (slow)")
    args = parser.parse_args()
    names = args.networks.split(",")
    table = networks()
    unknown = sorted(set(names) - set(table))
    if unknown:
        parser.error(f"--networks: unknown {unknown}; choose among {sorted(table)}")
    if len(names) > 1:  # one process each: each peak memory is its own report's
        for name in names:
            subprocess.run([sys.executable, __file__, "--networks", name,
                            "--budget", str(args.budget)], check=True)
    else:
        run(names[0], *table[names[0]], budget=args.budget if names[0] in LARGE else None)
    if args.baseline:
        scaled = run("resnet18", *table["resnet18"], budget=None, record=False)
        base = run("resnet18, unscaled settings", *table["resnet18"], budget=1e9,
                   record=False)
        print(f"\nratio unscaled / scaled on resnet18: {base / scaled:.1f}x (one run each, not "
              "recorded)")


if __name__ == "__main__":
    main()
