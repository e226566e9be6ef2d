"""Evidence behind the report's verdicts: how benchmark networks in each status fared.

The report's thresholds come from the papers (the NLC's ideal range 1-3 and its high-bias flag
1000: Philipp & Carbonell, "The Nonlinearity Coefficient - Predicting Generalization in Deep
Neural Networks", arXiv 2018, section 4) or are nngauge's heuristics (rho_max, Jacobian
growth). Whether a status says anything about a network like the user's is an empirical
question, answered here from a committed table written by ``benchmarks/verdict_evidence.py``
(its command, commit and date are in the file): populations of networks (sampled MLPs on
waveform-noise, sampled CNNs on digits images, a model zoo of MLPs, 1-D CNNs and residual 1-D
CNNs on MNIST-1D) measured at initialization as the report measures them, trained, and
counted per verdict status: how many reached a test accuracy within :data:`GOOD_WITHIN` of the
best of their family in their population.

A user's network is covered by a group (population and family) when it has the group's family
and data type and its depth (activation layers) and width (widest hidden layer) lie within the
group's ranges; outside every group the report says so, and the threshold stands as the
paper's (or nngauge's heuristic), not as evidence.
"""

from __future__ import annotations

import csv
import json
import math
import operator
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Optional, Sequence

import torch
from torch import nn

from nngauge.report._verdicts import verdict_status as status_of

EVIDENCE_JSON = Path(__file__).with_name("verdict_evidence.json")
"""The committed counts and their provenance."""
EVIDENCE_CSV = Path(__file__).with_name("verdict_evidence.csv")
"""The committed per-network rows the counts are computed from."""
GOOD_WITHIN = 0.05
"""A benchmark network counts as good when its test error is at most the best of its family in
its population plus this (5 points of accuracy); fixed before the benchmark ran."""
JUDGED = {"nlc": "nlc", "output_bias": "output_bias", "shrinkage": "rho_max_before_pooling",
          "jacobian": "jacobian_growth"}
"""Verdict key -> the benchmark column holding the value the verdict judges."""
FAMILIES = ("mlp", "cnn", "resnet", "transformer", "rnn", "unknown")
DATA_TYPES = ("vectors", "images", "sequences", "tokens")


@dataclass(frozen=True)
class NetworkTraits:
    """What decides whether a benchmark group covers a network.

    Attributes:
        family: ``mlp`` (linear maps and activations), ``cnn`` (convolutions), ``resnet``
            (convolutions with residual additions), ``transformer`` (attention), ``rnn``
            (recurrent modules) or ``unknown`` (convolutions in a network torch.fx cannot
            trace, so residual additions cannot be told).
        depth: activation layers the forward pass calls.
        width: the widest hidden linear map, convolution or recurrent layer (output features,
            channels or hidden size; the last linear map, the read-out, excluded).
        data: ``vectors`` (n, d), ``images`` (n, C, H, W), ``sequences`` (n, T, d) or
            ``tokens`` (integer ids).
    """

    family: str
    depth: int
    width: int
    data: str


def describe_network(model: nn.Module, inputs: torch.Tensor,
                     activation_sites: Optional[int] = None) -> NetworkTraits:
    """The :class:`NetworkTraits` of ``model`` on ``inputs`` (a batch of raw inputs);
    ``activation_sites``: the count of activation sites when the caller has it (the report),
    else counted here (:class:`nngauge.ModelAdapter`'s sites of kind activation)."""
    if activation_sites is None:
        from nngauge._internal.adapter import ModelAdapter
        from nngauge._internal.options import ModelOptions

        adapter = ModelAdapter(model, ModelOptions(), where="describe_network()")
        with adapter.active():
            sites = adapter.sites(inputs[:2], None, default_kinds=("activation",))
        activation_sites = sum(1 for s in sites if s.kind == "activation")
    return NetworkTraits(_family(model), int(activation_sites), _width(model),
                         _data_type(inputs))


def _family(model: nn.Module) -> str:
    modules = list(model.modules())
    if any(isinstance(m, nn.MultiheadAttention) or "attention" in type(m).__name__.lower()
           for m in modules):
        return "transformer"
    if any(isinstance(m, nn.RNNBase) for m in modules):
        return "rnn"
    if not any(isinstance(m, nn.modules.conv._ConvNd) for m in modules):
        return "mlp"
    residual = _has_residual_addition(model)
    if residual is None:
        return "unknown"
    return "resnet" if residual else "cnn"


def _has_residual_addition(model: nn.Module) -> Optional[bool]:
    """Whether the traced graph adds two computed tensors (a skip connection); None when
    torch.fx cannot trace the model, or the model has more modules than nngauge traces
    (:data:`~nngauge._internal.adapter.MAX_TRACED_SITES`: tracing grows with them)."""
    from nngauge._internal.adapter import MAX_TRACED_SITES

    if sum(1 for _ in model.modules()) > MAX_TRACED_SITES:
        return None
    try:
        graph = torch.fx.symbolic_trace(model).graph
    except Exception:  # any failure of a user's forward under tracing: unknown
        return None
    adds = (operator.add, operator.iadd, torch.add)
    for node in graph.nodes:
        is_add = (node.op == "call_function" and node.target in adds) or (
            node.op == "call_method" and node.target in ("add", "add_"))
        if is_add and sum(isinstance(a, torch.fx.Node) for a in node.args[:2]) == 2:
            return True
    return False


def _width(model: nn.Module) -> int:
    kinds = (nn.Linear, nn.modules.conv._ConvNd, nn.RNNBase)
    layers = [m for m in model.modules() if isinstance(m, kinds)]
    widths = [m.out_features if isinstance(m, nn.Linear) else m.hidden_size
              if isinstance(m, nn.RNNBase) else m.out_channels for m in layers]
    readout = max((i for i, m in enumerate(layers) if isinstance(m, nn.Linear)), default=None)
    hidden = [w for i, w in enumerate(widths) if i != readout]
    return max(hidden, default=max(widths, default=0))


def _data_type(inputs: torch.Tensor) -> str:
    if not inputs.is_floating_point():
        return "tokens"
    return {1: "vectors", 2: "sequences"}.get(inputs.dim() - 1, "images")


# ------------------------------------------------------------------------------ counting


def mark_good(rows: list[dict]) -> list[dict]:
    """``rows`` (one per benchmark network: population, family, test_error, ...) with
    ``good``: test error at most the best of its (population, family) plus
    :data:`GOOD_WITHIN` (False where the test error is missing)."""
    best: dict[tuple, float] = {}
    for row in rows:
        error = float(row["test_error"])
        if math.isfinite(error):
            group = (row["population"], row["family"])
            best[group] = min(best.get(group, math.inf), error)
    return [{**row, "good": math.isfinite(float(row["test_error"])) and float(
        row["test_error"]) <= best[(row["population"], row["family"])] + GOOD_WITHIN}
        for row in rows]


def count_evidence(rows: Sequence[dict]) -> dict[str, Any]:
    """The committed table's ``groups`` (per population and family: networks, data type,
    depth and width ranges) and ``counts`` (per verdict key, group and status: networks and
    good ones), from per-network rows with ``good`` (:func:`mark_good`)."""
    groups: dict[str, dict] = {}
    counts: dict[str, dict] = {key: {} for key in JUDGED}
    for row in rows:
        name = f"{row['population']}/{row['family']}"
        group = groups.setdefault(name, {"population": row["population"],
                                         "family": row["family"], "data": row["data"],
                                         "networks": 0, "depth": [math.inf, -math.inf],
                                         "width": [math.inf, -math.inf]})
        group["networks"] += 1
        for trait in ("depth", "width"):
            value = int(row[trait])
            group[trait] = [min(group[trait][0], value), max(group[trait][1], value)]
        for key, column in JUDGED.items():
            status = status_of(key, float(row[column]))
            cell = counts[key].setdefault(name, {}).setdefault(status, {"n": 0, "good": 0})
            cell["n"] += 1
            cell["good"] += bool(row["good"])
    return {"groups": groups, "counts": counts}


def read_rows(path: Path = EVIDENCE_CSV) -> list[dict]:
    """The committed per-network rows (strings from the CSV, ``good`` as a bool)."""
    with open(path, newline="", encoding="utf-8") as handle:
        return [{**row, "good": row["good"] == "True"} for row in csv.DictReader(handle)]


@lru_cache(maxsize=1)
def committed() -> Optional[dict]:
    """The committed evidence table (None when the file is absent: an installation without
    it reports the thresholds as the papers' only)."""
    if not EVIDENCE_JSON.is_file():
        return None
    return json.loads(EVIDENCE_JSON.read_text(encoding="utf-8"))


# ------------------------------------------------------------------------------ the report


def covering_groups(traits: NetworkTraits, table: dict) -> tuple[list[str], str]:
    """The groups of ``table`` that cover a network of ``traits``, and, when none does, why
    (the nearest miss, in words)."""
    covering, misses = [], []
    for name, group in table["groups"].items():
        reasons = []
        if group["family"] != traits.family:
            reasons.append(f"family {traits.family}, not {group['family']}")
        if group["data"] != traits.data:
            reasons.append(f"{traits.data} data, not {group['data']}")
        for trait in ("depth", "width"):
            low, high = group[trait]
            value = getattr(traits, trait)
            if not low <= value <= high:
                reasons.append(f"{trait} {value} outside {low}-{high}")
        if reasons:
            misses.append((len(reasons), f"{name} ({'; '.join(reasons)})"))
        else:
            covering.append(name)
    why = "" if covering else "nearest: " + min(misses)[1] if misses else "no groups"
    return covering, why


def evidence_for(key: str, status: str, traits: NetworkTraits,
                 table: Optional[dict] = None) -> Optional[dict]:
    """The evidence record of verdict ``key`` at ``status`` for a network of ``traits``:
    ``covered`` and, per covering group, the networks in this status and how many were good
    against those in the others; the table's ``provenance``. None for verdicts the table does
    not count (kernel, theory) or without a committed table."""
    table = table if table is not None else committed()
    if table is None or key not in JUDGED or status == "n/a":
        return None
    groups, why = covering_groups(traits, table)
    record: dict[str, Any] = {"covered": bool(groups), "traits": asdict(traits),
                              "provenance": table["provenance"], "groups": []}
    if not groups:
        record["outside"] = why
        return record
    for name in groups:
        cells = table["counts"][key].get(name, {})
        here = cells.get(status, {"n": 0, "good": 0})
        others = [c for s, c in cells.items() if s not in (status, "n/a")]
        record["groups"].append({
            "group": name, "status": status, "n": here["n"], "good": here["good"],
            "n_other": sum(c["n"] for c in others),
            "good_other": sum(c["good"] for c in others)})
    return record


def evidence_sentence(key: str, record: Optional[dict]) -> str:
    """The evidence in words, for the verdict's card."""
    if record is None:
        return ""
    source = record["provenance"]
    where = (f"(benchmarks/verdict_evidence.py, commit {source['commit'][:10]}, "
             f"{source['date']})")
    if not record["covered"]:
        return (f"No benchmark evidence for this network: it lies outside what the benchmark "
                f"covered ({record['outside']}) {where}; the threshold is the paper's or "
                "nngauge's heuristic, as stated, not a measured rate.")
    parts = []
    for g in record["groups"]:
        rate = _rate(g["good"], g["n"])
        other = _rate(g["good_other"], g["n_other"])
        parts.append(f"among {g['n']} benchmark networks of {g['group']} with this status "
                     f"({g['status']}), {g['good']} ({rate}) reached within "
                     f"{source['good_within'] * 100:g} points of their family's best test "
                     f"accuracy; of the {g['n_other']} in the other statuses, "
                     f"{g['good_other']} ({other})")
    return "Evidence " + where + ": " + "; ".join(parts) + "."


def ok_ranges() -> dict[str, tuple[float, float]]:
    """Benchmark column -> the range of values the report calls ok (its thresholds)."""
    from nngauge.report import _verdicts as V

    return {"nlc": (0.0, V.NLC_IDEAL[1]), "output_bias": (0.0, V.HIGH_BIAS),
            "rho_max_before_pooling": (-1.0, V.RHO_WARN),
            "jacobian_growth": (1.0 / V.JACOBIAN_WARN, V.JACOBIAN_WARN)}


def benchmark_range(column: str, table: Optional[dict] = None) -> tuple[float, float]:
    """The good range of a predictor column where the committed benchmark supports it: the
    report's ok range (:func:`ok_ranges`), returned only when, pooled over the table's groups,
    networks inside it reached their family's best more often than networks outside it.

    Raises:
        InvalidInputError: a column the table does not count, a table without networks
            outside the range, or one whose networks outside the range did as well.
    """
    from nngauge.errors import invalid

    where = "benchmark_range()"
    keys = {c: k for k, c in JUDGED.items()}
    table = table if table is not None else committed()
    if column not in keys or table is None:
        raise invalid(where, f"a column the evidence table counts ({sorted(keys)})",
                      repr(column) + ("" if table is not None else " (no table installed)"),
                      "pass one of those, or good=(low, high) of your own")
    ok = others = (0, 0)
    for cells in table["counts"][keys[column]].values():
        for status, cell in cells.items():
            if status == "ok":
                ok = (ok[0] + cell["n"], ok[1] + cell["good"])
            elif status != "n/a":
                others = (others[0] + cell["n"], others[1] + cell["good"])
    if not ok[0] or not others[0] or ok[1] / ok[0] <= others[1] / others[0]:
        raise invalid(where, f"benchmark evidence that networks with {column} in the ok range "
                      "do better than the others", f"ok {ok[1]} of {ok[0]}, others "
                      f"{others[1]} of {others[0]}", "choose good=(low, high) yourself, or "
                      "a percentile of earlier trials")
    return ok_ranges()[column]


def render_markdown(table: dict) -> str:
    """The evidence table as the Markdown page ``docs/verdict_evidence.md`` (written by
    ``benchmarks/verdict_evidence.py``; a test checks the page against the committed table)."""
    p = table["provenance"]
    outcome = p["outcome"].replace("good_within", f"{p['good_within'] * 100:g} points")
    lines = [
        "# Evidence behind the report's verdicts", "",
        f"Written by `{p['command']}` at commit {p['commit'][:10]} on {p['date']} "
        f"({p['networks']} networks, {p['seconds']:.0f} s). Good: a network's "
        f"{outcome}. Each verdict's value is measured at initialization as `nngauge report` "
        "measures it; the statuses are the report's thresholds.", "",
        "## Groups", "", "| group | data | networks | depth | width |", "|---|---|---|---|---|"]
    for name, g in table["groups"].items():
        lines.append(f"| {name} | {g['data']} | {g['networks']} | {g['depth'][0]}-"
                     f"{g['depth'][1]} | {g['width'][0]}-{g['width'][1]} |")
    for key, by_group in table["counts"].items():
        lines += ["", f"## {key} (`{JUDGED[key]}`)", "",
                  "| group | status | networks | good | rate |", "|---|---|---|---|---|"]
        for name, cells in by_group.items():
            for status in ("ok", "warn", "bad", "n/a"):
                if status in cells:
                    c = cells[status]
                    lines.append(f"| {name} | {status} | {c['n']} | {c['good']} | "
                                 f"{_rate(c['good'], c['n'])} |")
    return "\n".join(lines) + "\n"


def _rate(good: int, n: int) -> str:
    return f"{good / n:.0%}" if n else "no networks"


__all__ = ["EVIDENCE_CSV", "EVIDENCE_JSON", "GOOD_WITHIN", "JUDGED", "NetworkTraits",
           "benchmark_range", "committed", "count_evidence", "covering_groups",
           "describe_network", "evidence_for", "evidence_sentence", "mark_good", "ok_ranges",
           "read_rows", "render_markdown", "status_of"]
