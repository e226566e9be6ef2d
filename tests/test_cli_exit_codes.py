"""The ``nngauge`` command's exit status (issue 18): a failure never exits 0, an error is one
``error: ...`` line on stderr without a traceback. Run as a separate process, since the status
is made by the console entry point (``nngauge.cli.main``), which CliRunner bypasses.

Status: 0 success; 2 bad input (a library error, a usage error); 1 a command that failed; 130
Ctrl-C; a command's own ``typer.Exit(code)`` / ``SystemExit(code)``."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

SCRIPT = Path(sys.executable).with_name("nngauge")


def run_cli(*args: str, cwd=None, env=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "nngauge", *args], capture_output=True,
                          text=True, timeout=300, cwd=cwd, env=env)


def one_error_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), stderr
    assert "Traceback" not in stderr
    return lines[0]


@pytest.mark.parametrize("args, match, help_of", [
    # unknown command
    (("bogus",), "No such command 'bogus'", "nngauge"),
    (("study", "bogus"), "No such command 'bogus'", "nngauge study"),
    # missing argument / option
    (("theory",), "Missing argument 'ACTIVATION'", "nngauge theory"),
    (("report",), "Missing argument 'MODEL'", "nngauge report"),
    (("study", "run"), "Missing argument 'SPEC'", "nngauge study run"),
    (("report", "mlp:depth=2"), "--data", "nngauge report"),
    (("reproduce", "--scale"), "--scale", "nngauge"),  # click knows no command here
    # unknown option
    (("--no-such-option",), "--no-such-option", "nngauge"),
    (("theory", "relu", "--no-such-option"), "--no-such-option", "nngauge theory"),
    (("study", "run", "spec.toml", "--no-such-option"), "--no-such-option", "nngauge study run"),
    # a flag given a value: --quick is a flag, 'true' is an extra argument
    (("report", "mlp:depth=2", "--data", "waveform", "--quick", "true"), "true",
     "nngauge report"),
    (("theory", "relu", "--json", "true"), "true", "nngauge theory"),
    # a bad value
    (("theory", "relu", "--depth", "0"), "'--depth'", "nngauge theory"),
    (("theory", "relu", "--depth", "x"), "'--depth'", "nngauge theory"),
])
def test_usage_errors_are_one_line_and_exit_2(args, match, help_of):
    """Issue "the first hour of a new user": every usage error is one ``error: ...`` line on
    stderr naming the help to read, exit status 2, no traceback, nothing on stdout. (Checked by
    hand with Typer 0.12 + click 8.1.7, Typer 0.18 + click 8.5.1 and Typer 0.29; see
    ``nngauge.cli.main``.)"""
    out = run_cli(*args)
    assert out.returncode == 2, out.stderr
    line = one_error_line(out.stderr)
    assert match in line
    assert line.endswith(f"(see '{help_of} --help')")  # where to read more
    assert out.stdout == ""


@pytest.mark.parametrize("args", [(), ("study",)])
def test_a_group_without_a_command_shows_its_help(args):
    """Not an error line: the help, with its examples (exit 2 with click 8.2+, 0 before)."""
    out = run_cli(*args)
    assert out.returncode in (0, 2)
    assert "Traceback" not in out.stderr and not out.stderr.strip()
    assert "Usage: nngauge" in out.stdout and "Examples:" in out.stdout


@pytest.mark.parametrize("args, match", [
    (("report", "missing.py:build", "--data", "waveform"), "not found"),
    (("report", "mlp:depth=2", "--data", "imagenet"), "imagenet"),
    (("reproduce", "nope"), "nlc-table1"),
    (("theory", "nope"), "relu"),
])
def test_library_errors_are_one_line_and_exit_2(args, match, tmp_path):
    out = run_cli(*args, "--out", str(tmp_path / "out")) if args[0] != "theory" else run_cli(*args)
    assert out.returncode == 2
    assert match in one_error_line(out.stderr)
    assert not (tmp_path / "out").exists()


def test_the_console_script_gives_the_same_status():
    if not SCRIPT.exists():
        pytest.skip("the nngauge console script is not installed next to this Python")
    out = subprocess.run([str(SCRIPT), "theory", "nope"], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 2 and "relu" in one_error_line(out.stderr)
    ok = subprocess.run([str(SCRIPT), "--version"], capture_output=True, text=True, timeout=300)
    assert ok.returncode == 0 and ok.stdout.startswith("nngauge ")


@pytest.mark.parametrize("option", ["--out", "--json"])
def test_a_report_that_could_not_be_written_is_refused_before_measuring(option, tmp_path):
    """A missing folder is found before minutes of measuring, not when writing at the end (a
    write that fails anyway exits 1: test_commands_exit_with_their_status, "os-error")."""
    target = tmp_path / "no" / "such" / "folder" / "r.html"
    out = run_cli("report", "mlp:depth=2,width=4", "--data", "gaussian:d=3,n=20", "--quick",
                  option, str(target), cwd=tmp_path)
    assert out.returncode == 2
    line = one_error_line(out.stderr)
    assert f"{option} {target}" in line and "does not exist" in line and "mkdir -p" in line
    assert not (tmp_path / "report.html").exists()  # --out's default is not written either


COMMANDS = textwrap.dedent("""
    import sys
    import typer
    from nngauge.cli import app, main
    from nngauge.errors import invalid

    def exit_3():
        raise typer.Exit(3)

    def exit_0():
        raise typer.Exit()

    def system_exit_4():
        raise SystemExit(4)

    def invalid_input():
        raise invalid("a command", "a good value", "a bad one", "pass a good one")

    def ctrl_c():
        raise KeyboardInterrupt

    def abort():
        raise typer.Abort()

    def os_error():
        raise OSError(2, "No such file or directory", "/gone/r.html")

    def returns_none():
        return None

    def returns_text():
        return "done"  # not a status

    for function in (exit_3, exit_0, system_exit_4, invalid_input, ctrl_c, abort, os_error,
                     returns_none, returns_text):
        app.command(function.__name__.replace("_", "-"))(function)
    main()
""")


@pytest.mark.parametrize("command, status, stderr", [
    ("exit-3", 3, ""),
    ("exit-0", 0, ""),
    ("system-exit-4", 4, ""),
    ("invalid-input", 2, "error: a command expected a good value; got a bad one. Fix: pass a "
                         "good one."),
    ("ctrl-c", 130, ""),
    ("abort", 1, "aborted"),
    ("os-error", 1, "error: No such file or directory: /gone/r.html"),
    ("returns-none", 0, ""),
    ("returns-text", 0, ""),
])
def test_commands_exit_with_their_status(command, status, stderr, tmp_path):
    script = tmp_path / "cli.py"
    script.write_text(COMMANDS)
    out = subprocess.run([sys.executable, str(script), command], capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == status, out.stderr
    assert "Traceback" not in out.stderr
    if stderr:
        assert out.stderr.strip() == stderr


@pytest.mark.slow
def test_a_report_too_deep_for_its_budget_skips_what_does_not_fit_and_says_so(tmp_path):
    """Issue 18: ``nngauge report mlp:depth=10000,... --quick`` ran for hours. A network deep
    enough that the costliest sections' least work does not fit the quick budget gets the
    plan printed up front, those sections skipped with the --budget that runs them, and the
    page (exit 0). (Depth 3000 keeps the building of the network short; OMP_NUM_THREADS=1
    keeps its orthogonal initialization fast on a busy machine.)"""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    out = run_cli("report", "mlp:depth=3000,width=8", "--data", "waveform", "--quick",
                  "--out", str(tmp_path / "r.html"), env=env)
    assert out.returncode == 0, out.stderr
    plan = next(line for line in out.stderr.splitlines() if line.startswith("plan: "))
    assert "budget 10 s: " in plan and "skipped (needs --budget " in plan
    assert " skipped in " in out.stdout and "0 skipped" not in out.stdout
    page = (tmp_path / "r.html").read_text(encoding="utf-8")
    assert "over the budget: its least work takes about" in page
