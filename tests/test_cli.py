"""The ``nngauge`` command: version, ``theory`` table/JSON/plot, errors as exit code 2."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from nngauge import theory
from nngauge._version import __version__


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "nngauge", *args], capture_output=True,
                          text=True, timeout=120)


def test_version():
    out = run_cli("--version")
    assert out.returncode == 0
    assert out.stdout.strip() == f"nngauge {__version__}"


def test_theory_json_matches_the_library():
    out = run_cli("theory", "erf", "--sigma-w", "2.0", "--arch", "mlp", "--json")
    assert out.returncode == 0, out.stderr
    printed = json.loads(out.stdout)
    direct = theory.profile("erf", 2.0, 0.0, arch="mlp").to_dict()
    assert printed["phase"] == direct["phase"]
    for key in ("slope_at_one", "fixed_point", "nlc", "mu", "linearization_error"):
        assert printed[key] == pytest.approx(direct[key], rel=1e-12)


def test_theory_table_names_every_quantity():
    out = run_cli("theory", "leaky_relu(negative_slope=0.2)")
    assert out.returncode == 0, out.stderr
    for quantity in ("slope at one", "phase", "fixed point", "NLC_tau(1)", "mu",
                     "linearization error", "critical sigma_w", "critical sigma_b"):
        assert quantity in out.stdout


def test_theory_plot_writes_a_png(tmp_path):
    pytest.importorskip("matplotlib")
    target = tmp_path / "relu.png"
    out = run_cli("theory", "relu", "--plot", str(target), "--depth", "10")
    assert out.returncode == 0, out.stderr
    assert target.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_unknown_activation_is_a_readable_error():
    out = run_cli("theory", "nope")
    assert out.returncode == 2
    assert "nope" in out.stderr and "relu" in out.stderr  # lists the known names
    assert "Traceback" not in out.stderr


def test_bad_sigma_is_a_readable_error():
    out = run_cli("theory", "relu", "--sigma-w", "-1")
    assert out.returncode == 2
    assert "sigma_w" in out.stderr and "Fix:" in out.stderr


def test_profile_rows_agree_with_the_fields():
    summary = theory.profile("tanh", 1.5, 0.1, arch="layernorm")
    values = {name: value for name, value, _ in summary.rows()}
    assert values["phase"] == summary.phase
    assert values["slope at one P'(1)"] == summary.slope_at_one
    assert np.isfinite(summary.nlc) and summary.nlc > 1.0


COMMANDS = [(), ("theory",), ("report",), ("reproduce",), ("study",), ("study", "run"),
            ("study", "summarize")]


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c) or "nngauge")
def test_help_shows_examples_and_flags_as_flags(command):
    """Issue "the first hour of a new user": every ``--help`` ends on 2-3 example command lines
    of that command, and an on/off option reads as a flag (``--quick``, not ``--quick <bool>``
    nor ``--quick BOOLEAN``, which look as if they take ``true``)."""
    out = subprocess.run([sys.executable, "-m", "nngauge", *command, "--help"],
                         capture_output=True, text=True, timeout=120,
                         env={**os.environ, "COLUMNS": "200", "TERM": "dumb"})
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert "Examples:" in text
    examples = text[text.index("Examples:"):]
    prefix = " ".join(("nngauge", *command[:1]))
    lines = [line.strip(" │") for line in examples.splitlines() if prefix + " " in line]
    assert 2 <= len(lines) <= 3, examples
    for flag in ("--help", "--version", "--quick", "--dropout", "--trust-pickle", "--json",
                 "--list"):
        for line in text.splitlines():
            if f"{flag} " in line and line.strip(" │").startswith(flag):
                assert "bool" not in line.lower(), line


def test_the_examples_in_the_help_are_commands_that_parse():
    """Each example names options the command has (a renamed option would leave a stale one)."""
    from nngauge.cli._report import REPORT_EXAMPLES
    from nngauge.cli._reproduce import REPRODUCE_EXAMPLES
    from nngauge.cli._study import RUN_EXAMPLES, SUMMARIZE_EXAMPLES
    from nngauge.cli._theory import THEORY_EXAMPLES

    for examples, command in ((REPORT_EXAMPLES, ("report",)), (THEORY_EXAMPLES, ("theory",)),
                              (REPRODUCE_EXAMPLES, ("reproduce",)),
                              (RUN_EXAMPLES, ("study", "run")),
                              (SUMMARIZE_EXAMPLES, ("study", "summarize"))):
        help_text = run_cli(*command, "--help").stdout
        for example in examples:
            assert example.startswith("nngauge " + " ".join(command) + " ")
            for word in example.split():
                if word.startswith("--"):
                    assert word in help_text, (example, word)
