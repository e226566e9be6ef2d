"""``nngauge rank`` and ``nngauge.studies.rank``: candidates of a family nngauge does not ship
(a tiny transformer classifier written here), built from a grid of keyword arguments,
measured at initialization and ranked; bad builders, grids and data refused in one line."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from nngauge.errors import InvalidInputError, NNGaugeError, UnknownNameError
from nngauge.studies import rank
from nngauge.studies._predictors import known_directions

FAST = ["nlc_rule", "n_params"]
"""Measures that keep these tests short (the defaults add TE-NAS and FLOPs)."""


class TinyTransformer(nn.Module):
    """Sequence classifier: 4 tokens of 4 features each, ``depth`` pre-norm attention blocks of
    width ``dim``, mean pooling, a linear head."""

    def __init__(self, depth: int, dim: int):
        super().__init__()
        self.embed = nn.Linear(4, dim)
        self.blocks = nn.ModuleList(nn.TransformerEncoderLayer(
            dim, 2, 2 * dim, dropout=0.0, batch_first=True, norm_first=True)
            for _ in range(depth))
        self.head = nn.Linear(dim, 3)

    def forward(self, x):
        h = self.embed(x.reshape(len(x), 4, 4))
        for block in self.blocks:
            h = block(h)
        return self.head(h.mean(1))


def build(depth: int = 1, dim: int = 8) -> nn.Module:
    if depth > 2:
        raise ValueError("too deep for this test family")
    return TinyTransformer(depth, dim)


@pytest.fixture(scope="module")
def data():
    gen = torch.Generator().manual_seed(0)
    return torch.randn(48, 16, generator=gen), torch.randint(0, 3, (48,), generator=gen)


@pytest.fixture(scope="module")
def ranking(data):
    return rank(build, {"depth": [1, 2], "dim": [8, 16]}, data, measures=FAST)


def test_every_grid_point_is_a_candidate_ranked_by_the_first_predictor(ranking):
    assert ranking.keys == ("depth", "dim") and ranking.columns == ("nlc_rule", "n_params")
    assert ranking.key == "nlc_rule" and ranking.direction == known_directions()["nlc_rule"]
    records = ranking.records()
    assert sorted((r["depth"], r["dim"]) for r in records) == [(1, 8), (1, 16), (2, 8), (2, 16)]
    assert [r["rank"] for r in records] == [1, 2, 3, 4]
    scores = [ranking.direction * r["nlc_rule"] for r in records]
    assert scores == sorted(scores, reverse=True)  # best first in the predictor's direction
    for record in records:
        net = TinyTransformer(record["depth"], record["dim"])
        assert record["n_params"] == sum(p.numel() for p in net.parameters())
        assert record["error"] == ""
    table = ranking.table().splitlines()
    assert table[0].split() == ["rank", "depth", "dim", "nlc_rule", "n_params", "error"]
    assert len(table) == 5


def test_the_candidates_are_built_from_the_seed_without_touching_the_callers_random_state(
        data):
    torch.manual_seed(123)
    before = torch.get_rng_state()
    first = rank(build, {"dim": [8]}, data, measures=FAST, generator=5)
    assert torch.equal(torch.get_rng_state(), before)
    again = rank(build, {"dim": [8]}, data, measures=FAST, generator=5)
    assert first.records() == again.records()


def test_a_failing_builder_call_is_that_candidates_error(data):
    result = rank(build, {"depth": [1, 3]}, data, measures=FAST)
    ok, failed = result.candidates
    assert ok.rank == 1 and ok.arguments == {"depth": 1}
    assert failed.rank is None and failed.arguments == {"depth": 3}
    assert "ValueError: too deep for this test family" in failed.error
    assert failed.record()["rank"] is None


def test_a_grid_the_builder_does_not_take_is_refused_before_building(data):
    built = []

    def counting(depth=1):
        built.append(depth)
        return build(depth)

    with pytest.raises(InvalidInputError, match=r"grid keys among the builder's keyword "
                       r"arguments \['depth'\]; got \['width'\]"):
        rank(counting, {"depth": [1], "width": [8]}, data, measures=FAST)
    assert built == []
    with pytest.raises(InvalidInputError, match="non-empty list of values"):
        rank(counting, {"depth": []}, data, measures=FAST)

    def open_ended(**options):
        return build(**options)

    assert len(rank(open_ended, {"dim": [8]}, data, measures=FAST).candidates) == 1


def test_data_no_candidate_runs_on_is_refused_with_the_first_error(data):
    images = torch.randn(10, 3, 5, 5)
    with pytest.raises(InvalidInputError, match=r"no candidate ran; the first: the network "
                       r"does not run on inputs of shape \(3, 5, 5\)"):
        rank(build, {"depth": [1]}, (images, torch.zeros(10, dtype=torch.long)), measures=FAST)


def test_unknown_measures_are_refused(data):
    with pytest.raises(UnknownNameError, match="measures among"):
        rank(build, {"depth": [1]}, data, measures=["nlc_rule", "vibes"])


def test_the_builder_may_be_a_file_path(tmp_path, data):
    path = tmp_path / "family.py"
    path.write_text("from torch import nn\n"
                    "def build(width=4):\n    return nn.Sequential(nn.Linear(16, width), "
                    "nn.Tanh(), nn.Linear(width, 3))\n")
    result = rank(f"{path}:build", {"width": [4, 32]}, data, measures=FAST)
    assert [c.arguments["width"] for c in result.candidates if c.rank] != []
    for spec, match in ((f"{path}", "name the function"), (f"{path}:nothing", "a function "
                        "'nothing'"), (str(tmp_path / "missing.py:build"), "not found")):
        with pytest.raises(NNGaugeError, match=match):
            rank(spec, {"width": [4]}, data, measures=FAST)


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "nngauge", "rank", *args],
                          capture_output=True, text=True, timeout=600)


def test_cli_prints_the_table_writes_the_page_and_the_records(tmp_path):
    family = tmp_path / "family.py"
    family.write_text("from torch import nn\n"
                      "def build(depth=1, width=8):\n"
                      "    layers = [nn.Linear(64, width), nn.Tanh()]\n"
                      "    for _ in range(depth - 1):\n"
                      "        layers += [nn.Linear(width, width), nn.Tanh()]\n"
                      "    return nn.Sequential(*layers, nn.Linear(width, 10))\n")
    page, records = tmp_path / "rank.html", tmp_path / "rank.json"
    out = run_cli(f"{family}:build", "--grid", "depth=1,4", "--grid", "width=8,32", "--data",
                  "digits", "--samples", "200", "--out", str(page), "--json", str(records))
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].split()[:7] == ["rank", "depth", "width", "nlc_rule", "te_nas", "n_params",
                                    "flops"]
    assert lines[-1].startswith("4 candidates ranked by nlc_rule; wrote ")
    written = json.loads(records.read_text())
    assert written["key"] == "nlc_rule" and len(written["candidates"]) == 4
    first = written["candidates"][0]
    assert {"depth", "width", "nlc_rule", "te_nas", "n_params", "flops", "rank"} <= set(first)
    assert first["rank"] == 1 and isinstance(first["depth"], int)
    text = page.read_text(encoding="utf-8")
    assert text.count('<img alt="') == 4 and "data:image/png;base64," in text
    assert all(math.isfinite(c["n_params"]) for c in written["candidates"])


@pytest.mark.parametrize("args, match", [
    (["missing.py:build", "--grid", "depth=1", "--data", "digits"], "not found"),
    (["{family}:build", "--grid", "depth", "--data", "digits"], "--grid KEY=V1,V2"),
    (["{family}:build", "--grid", "depth=1", "--grid", "depth=2", "--data", "digits"],
     "each --grid key once"),
    (["{family}:build", "--grid", "width=4", "--data", "digits"],
     "grid keys among the builder's keyword arguments"),
    (["{family}:build", "--grid", "depth=1", "--data", "digits:image"],
     "no candidate ran"),
])
def test_cli_refuses_bad_builders_grids_and_data_in_one_line(tmp_path, args, match):
    family = tmp_path / "family.py"
    family.write_text("from torch import nn\n"
                      "def build(depth=1):\n    return nn.Sequential(nn.Linear(64, 8), "
                      "nn.Tanh(), nn.Linear(8, 10))\n")
    out = run_cli(*(a.format(family=family) for a in args), "--samples", "50", "--out",
                  str(tmp_path / "r.html"))
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and match in lines[0], out.stderr


def test_cli_ranks_a_family_nngauge_does_not_ship_on_the_users_data(tmp_path):
    """The small transformer of tests/user_family.py, its data from its own function."""
    family = Path(__file__).with_name("user_family.py")
    page = tmp_path / "rank.html"
    out = run_cli(f"{family}:build", "--grid", "depth=1,2", "--grid", "heads=1,2", "--data",
                  f"{family}:data", "--measures", "nlc_rule,n_params", "--samples", "100",
                  "--out", str(page))
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].split() == ["rank", "depth", "heads", "nlc_rule", "n_params", "error"]
    rows = [line.split() for line in lines[1:5]]
    assert sorted((r[1], r[2]) for r in rows) == [("1", "1"), ("1", "2"), ("2", "1"),
                                                   ("2", "2")]
    assert [r[0] for r in rows] == ["1", "2", "3", "4"]
    assert page.read_text(encoding="utf-8").count('<img alt="') == 2
