"""Write the evidence table behind the report's verdicts (nngauge.report._evidence).

    python benchmarks/verdict_evidence.py                 # the committed table (about 30 min
                                                          # on 2 cores)
    python benchmarks/verdict_evidence.py --scale small --out /tmp/evidence   # a smoke run

Four populations of networks, each measured at initialization as ``nngauge report`` measures
them (the NLC and output bias, rho_max before global pooling, the Jacobian growth), trained,
and described (family, depth, width, data type: :func:`nngauge.report._evidence.describe_network`):

- ``mlp-waveform``: the NLC paper's architecture sampler (Philipp & Carbonell, appendix C:
  depths 3-49, activations, normalizations, skips, about 1M parameters) on waveform-noise,
  trained with the NLC study protocol at two learning rates (the better by validation error);
- ``cnn-digits``: nngauge's CNN sampler's ranges (depth 2-8, width 8-32, with and without
  skip connections, pooling) as a builder study on 8 x 8 digit images, trained by
  ``nngauge.training.fit`` (Adam);
- ``vit-digits``: the small transformer of ``tests/user_family.py`` over the digits' rows
  (depth 1-4, width 16-64, heads 1-4), same training;
- ``zoo-mnist1d``: the default model zoo (``nngauge.studies.zoo_spec("default")``, MLPs, 1-D
  CNNs and residual 1-D CNNs on MNIST-1D), one seed, trained to the training loss 0.01.

Per network: its verdict values, its test error and ``good`` (test error within
``GOOD_WITHIN`` of the best of its family in its population, a rule fixed before the run).
Writes ``verdict_evidence.csv`` (one row per network) and ``verdict_evidence.json`` (the counts
per verdict, group and status, the groups' coverage, the command, commit, date and run time)
into ``--out`` (default: the package's ``src/nngauge/report/``, where the report reads them,
and then also ``docs/verdict_evidence.md``, the table as a page).
"""

from __future__ import annotations

import argparse
import csv
import datetime
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from torch import nn

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from nngauge.report._evidence import (  # noqa: E402
    EVIDENCE_JSON,
    GOOD_WITHIN,
    JUDGED,
    committed,
    count_evidence,
    describe_network,
    mark_good,
    render_markdown,
)

DOCS = ROOT / "docs" / "verdict_evidence.md"
"""The page of the committed table (regenerated with --markdown from the committed JSON)."""

MEASURES = ["nlc", "correlations", "jacobian_growth"]
"""The study measures whose columns the verdicts judge (nngauge.report._evidence.JUDGED)."""
FIT = {"lr": 0.002, "optimizer": "adam", "batch_size": 64, "max_steps": 600,
       "target_loss": 0.01}
"""Training of the builder populations (nngauge.training.fit)."""
SCALES = {"full": {"mlp": 120, "cnn": 120, "vit": 60, "zoo": 0},
          "small": {"mlp": 3, "cnn": 3, "vit": 2, "zoo": 4}}
"""Networks per population (the zoo: 0 = the full default grid of 192, N = a subset)."""
COLUMNS = ("population", "family", "data", "depth", "width", "seed", "arguments", "test_error",
           *dict.fromkeys(JUDGED.values()), "rho_max", "good")


# ----------------------------------------------------------------- the builder populations


def build_vit(depth: int, width: int, heads: int) -> nn.Module:
    """The vit-digits population's builder: the small transformer of tests/user_family.py
    (rows of an 8 x 8 image as 8 tokens, pre-norm blocks, a mean-pooled read-out), its width
    rounded down to a multiple of the heads."""
    from nngauge._user_code import load_function

    family = load_function(f"{ROOT / 'tests' / 'user_family.py'}:DigitTransformer",
                           "verdict_evidence", what="architecture")
    return family(depth, heads, width - width % heads)


def build_cnn(depth: int, width: int, skip: bool, pool: int, activation: str) -> nn.Module:
    """The cnn-digits population's builder: nngauge's CNN on (1, 8, 8) images."""
    from nngauge.nn import cnn

    return cnn(64, width, depth, 10, image_shape=(1, 8, 8), activation=activation,
               skip=1.0 if skip else None, pool_after=tuple(range(min(pool, depth))))


def digit_images():
    """scikit-learn's digits as (n, 1, 8, 8) images scaled to mean 0 and variance 1."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    x = torch.tensor(digits.data, dtype=torch.float32)
    x = (x - x.mean()) / x.std()
    return x.reshape(-1, 1, 8, 8), torch.tensor(digits.target)


SPACES = {
    "cnn": {"depth": {"low": 2, "high": 8}, "width": [8, 16, 32], "skip": [True, False],
            "pool": [0, 1, 2], "activation": ["relu", "tanh", "selu"]},
    "vit": {"depth": {"low": 1, "high": 4}, "width": {"low": 16, "high": 64, "log": True},
            "heads": [1, 2, 4]},
}


# ------------------------------------------------------------------------------ running


def run_populations(scale: str, folder: Path, workers: int) -> list[dict]:
    from nngauge.studies import load_table, parse_spec, run_study, summarize
    from nngauge.studies._units import build_from_config, study_data

    sizes = SCALES[scale]
    rows: list[dict] = []
    here = Path(__file__).resolve()

    mlp = parse_spec({"name": "evidence-mlp", "data": {"source": "waveform", "n": 600},
                      "architectures": {"sample": sizes["mlp"]},
                      "measures": {"names": MEASURES, "batch_size": 100},
                      "training": {"lrs": [0.01, 0.1], "batch_size": 50, "max_epochs": 10}})
    url = f"sqlite:///{folder / 'mlp.db'}"
    run_study(mlp, url, workers=workers)
    inputs = study_data(mlp.data, mlp.seed)[0].inputs[:8]
    from sqlalchemy import select

    from nngauge.studies._db import architectures, open_db

    engine = open_db(url, create=False)
    with engine.connect() as conn:
        configs = dict(conn.execute(select(architectures.c.arch_index,
                                           architectures.c.config)).all())
    engine.dispose()
    for point in summarize(url).points:
        model = build_from_config(json.loads(configs[point["arch_index"]]))
        rows.append(_row("mlp-waveform", describe_network(model, inputs), point["seed"],
                         json.loads(configs[point["arch_index"]]), point))

    for name, builder in (("cnn", "build_cnn"), ("vit", "build_vit")):
        spec = parse_spec({"name": f"evidence-{name}", "data": {
            "source": f"{here}:digit_images", "split": [0.6, 0.2, 0.2], "preprocess": "none"},
            "architectures": {"builder": f"{here}:{builder}", "sample": sizes[name],
                              "space": SPACES[name]},
            "measures": {"names": MEASURES, "batch_size": 100}, "training": FIT})
        url = f"sqlite:///{folder / (name + '.db')}"
        run_study(spec, url, workers=workers)
        images = digit_images()[0][:8]
        build = build_cnn if name == "cnn" else build_vit
        for _, record in load_table(url).iterrows():
            if isinstance(record["error"], str):
                print(f"{name}: candidate {record['candidate']} failed: {record['error']}")
                continue
            arguments = {k: record[k] for k in SPACES[name]}
            arguments = {k: (bool(v) if k == "skip" else int(v) if k in ("depth", "width",
                             "heads", "pool") else v) for k, v in arguments.items()}
            traits = describe_network(build(**arguments), images)
            rows.append(_row(f"{name}-digits", traits, int(record["seed"]), arguments, record))

    from nngauge.studies._grid import SCALES as ZOOS

    zoo = parse_spec({"name": "evidence-zoo", "seeds": [0],
                      "data": {"source": "mnist1d", "split": [0.8, 0.2]},
                      "grid": {**ZOOS["default"]["grid"], "sample": sizes["zoo"]},
                      "measures": {"names": MEASURES}, "training": ZOOS["default"]["training"]})
    url = f"sqlite:///{folder / 'zoo.db'}"
    run_study(zoo, url, workers=workers)
    from nngauge.studies import load_network

    inputs = study_data(zoo.data, zoo.seed)[0].inputs[:8]
    for _, record in load_table(url).iterrows():
        model = load_network(url, record["key"], which="initial")
        arguments = {k: record[k] for k in ("family", "depth", "width", "batch_norm",
                                            "weight_decay", "lr", "batch_size")}
        rows.append(_row("zoo-mnist1d", describe_network(model, inputs), int(record["seed"]),
                         arguments, record))
    return rows


def _row(population: str, traits, seed: int, arguments: dict, values) -> dict:
    def number(name: str) -> float:
        value = values.get(name) if hasattr(values, "get") else None
        return math.nan if value is None else float(value)

    return {"population": population, "family": traits.family, "data": traits.data,
            "depth": traits.depth, "width": traits.width, "seed": seed,
            "arguments": json.dumps({k: _plain(v) for k, v in arguments.items()},
                                    sort_keys=True),
            "test_error": number("test_error"),
            **{column: number(column) for column in dict.fromkeys(JUDGED.values())},
            "rho_max": number("rho_max")}


def _plain(value):
    if hasattr(value, "item"):
        return value.item()
    return value


def _commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True,
                              text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", choices=sorted(SCALES), default="full")
    parser.add_argument("--out", type=Path, default=EVIDENCE_JSON.parent)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--markdown", action="store_true",
                        help="only rewrite docs/verdict_evidence.md from the committed table")
    args = parser.parse_args(argv)
    if args.markdown:
        DOCS.write_text(render_markdown(committed()), encoding="utf-8")
        print(f"wrote {DOCS}")
        return
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as folder:
        rows = mark_good(run_populations(args.scale, Path(folder), args.workers))
    args.out.mkdir(parents=True, exist_ok=True)
    with open(args.out / "verdict_evidence.csv", "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    table = count_evidence(rows)
    command = "python benchmarks/verdict_evidence.py" + (
        f" --scale {args.scale}" if args.scale != "full" else "")
    table["provenance"] = {
        "command": command, "commit": _commit(),
        "date": datetime.date.today().isoformat(),
        "seconds": round(time.perf_counter() - started, 1), "scale": args.scale,
        "networks": len(rows), "good_within": GOOD_WITHIN,
        "outcome": "test accuracy within good_within of the best test accuracy of the "
                   "network's family in its population",
        "measures": MEASURES, "judged": JUDGED}
    (args.out / "verdict_evidence.json").write_text(json.dumps(table, indent=1) + "\n",
                                                    encoding="utf-8")
    if args.out.resolve() == EVIDENCE_JSON.parent.resolve():
        DOCS.write_text(render_markdown(table), encoding="utf-8")
    print(f"wrote {args.out}/verdict_evidence.csv and .json: {len(rows)} networks in "
          f"{table['provenance']['seconds']:.0f} s")
    for name, group in table["groups"].items():
        print(f"  {name}: {group['networks']} networks, {group['data']}, depth "
              f"{group['depth']}, width {group['width']}")


if __name__ == "__main__":
    main()
