"""The Typer application and its entry point."""

from __future__ import annotations

from typing import Optional

import typer

from nngauge._version import __version__
from nngauge.cli._help import Command, Group, epilog
from nngauge.cli._rank import RANK_EXAMPLES, rank
from nngauge.cli._report import REPORT_EXAMPLES, report
from nngauge.cli._reproduce import REPRODUCE_EXAMPLES, reproduce
from nngauge.cli._study import study_app
from nngauge.cli._theory import THEORY_EXAMPLES, theory
from nngauge.errors import NNGaugeError

PROG_NAME = "nngauge"
"""The name in usage lines and error hints, also under ``python -m nngauge``."""

app = typer.Typer(
    name="nngauge",
    cls=Group,
    help="Measure deep neural networks the way the papers do: theory, measures, reports.",
    epilog=epilog(
        "nngauge theory tanh --sigma-w 1.5",
        "nngauge report mlp:depth=20,width=100,activation=tanh --data waveform --quick",
        "nngauge reproduce --list",
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # help is plain text: 'nngauge[timm]' is an extra, not markup
)
app.command(name="theory", cls=Command, epilog=epilog(*THEORY_EXAMPLES))(theory)
app.command(name="report", cls=Command, epilog=epilog(*REPORT_EXAMPLES))(report)
app.command(name="reproduce", cls=Command, epilog=epilog(*REPRODUCE_EXAMPLES))(reproduce)
app.command(name="rank", cls=Command, epilog=epilog(*RANK_EXAMPLES))(rank)
app.add_typer(study_app, name="study")


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"nngauge {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_print_version, is_eager=True, help="Print the version."
    ),
) -> None:
    """nngauge: the instrument panel for deep neural networks."""


EXIT_BAD_INPUT = 2
"""Exit status of a refused input: a library error (:class:`NNGaugeError`: bad file, bad name,
bad option) or a command-line usage error (click's own convention)."""
EXIT_FAILED = 1
"""Exit status of a command that could not finish (a file it could not write)."""
EXIT_INTERRUPTED = 130
"""Exit status after Ctrl-C (128 + SIGINT, the shell's convention)."""


def main(argv: Optional[list[str]] = None) -> None:
    """Console entry point (``nngauge`` and ``python -m nngauge``): returns on success, raises
    ``SystemExit`` with the status otherwise.

    Exit status: 0 on success; 2 on bad input, with one ``error: ...`` line on stderr and no
    traceback (a library error, a usage error, an unknown command); 1 when a command failed
    (what it says on stderr; a file it could not write); 130 on Ctrl-C; a command's own code
    when it exits with one (``typer.Exit(code)`` or ``SystemExit(code)``, e.g. ``nngauge
    study run``: 1 when some units failed).

    Click runs in non-standalone mode so that library errors can be shown as one line; in that
    mode it *returns* the code of a ``typer.Exit`` (and recent Typer versions return 130 for
    Ctrl-C in a command) instead of exiting with it, so the returned code becomes the
    ``SystemExit`` here; click's usage errors, which it would print with the usage block, are
    printed as one line too. The exception classes are looked up in both click and Typer's
    own copy of it (which recent Typer versions carry), whichever is installed.

    Typer and click versions: checked with Typer 0.12 + click 8.1, Typer 0.18 + click 8.5 and
    Typer 0.29 (its own click). Typer 0.12 to 0.15 do not work with click 8.2 or later, nor
    Typer 0.16 and 0.17 with click 8.3 or later (their help and missing-argument checks fail
    inside Typer); those pairs are outside what nngauge supports.
    """
    try:
        code = app(args=argv, prog_name=PROG_NAME, standalone_mode=False)
    except NNGaugeError as exc:
        _error(str(exc))
        code = EXIT_BAD_INPUT
    except KeyboardInterrupt:  # outside a command (Typer turns one inside into code 130)
        typer.echo("interrupted", err=True)
        code = EXIT_INTERRUPTED
    except _ABORTS as exc:  # a prompt refused, or Ctrl-C as older click versions report it
        interrupted = isinstance(exc.__cause__ or exc.__context__, KeyboardInterrupt)
        typer.echo("interrupted" if interrupted else "aborted", err=True)
        code = EXIT_INTERRUPTED if interrupted else EXIT_FAILED
    except _EXITS as exc:  # raised outside click's own handling
        code = exc.exit_code
    except _CLICK_ERRORS as exc:  # usage errors arrive here in non-standalone mode
        if type(exc).__name__ == "NoArgsIsHelpError":  # a group without a command (click 8.2+)
            _show_help(exc)  # the help is the message: the usage, not an error
        else:
            _error(_usage_message(exc))
        code = getattr(exc, "exit_code", EXIT_BAD_INPUT)
    except OSError as exc:  # e.g. --out in a folder that does not exist or cannot be written
        _error(f"{exc.strerror or exc}" + (f": {exc.filename}" if exc.filename else ""))
        code = EXIT_FAILED
    status = _exit_status(code)
    if status:
        raise SystemExit(status)


def _exit_status(code: object) -> int:
    """What click returned in non-standalone mode as an exit status: the integer code of a
    ``typer.Exit(code)``, else 0 (a command's return value: None for nngauge's commands; click
    cannot tell a returned integer from an Exit's code, so a command returns no integer)."""
    if isinstance(code, bool) or not isinstance(code, int):
        return 0
    return code


def _error(message: str) -> None:
    """One line on stderr: ``error: <message>``."""
    typer.echo("error: " + " ".join(str(message).split()), err=True)


def _usage_message(exc: Exception) -> str:
    """A click error as one sentence, pointing to the command's help (that of the command
    when click knows it, else the program's)."""
    try:
        message = exc.format_message().strip()
    except Exception:  # noqa: BLE001 - a Typer/click pair that cannot format its own error
        message = str(getattr(exc, "message", "") or exc).strip()
    ctx = getattr(exc, "ctx", None)
    command = getattr(ctx, "command_path", None) or PROG_NAME
    return f"{message or type(exc).__name__} (see '{command} --help')"


def _show_help(exc: Exception) -> None:
    """The help that click 8.2+ carries as the message of a group called without a command
    (Typer's rich help has already printed itself, leaving the message empty)."""
    try:
        text = exc.format_message().strip()
    except Exception:  # noqa: BLE001
        text = ""
    if text:
        typer.echo(text)


def _classes(*paths: str) -> tuple[type, ...]:
    """The classes at ``module:attribute`` paths that exist in the installed click / Typer
    (recent Typer versions carry their own copy of click, whose classes are not click's)."""
    import importlib

    found = []
    for path in paths:
        module, _, name = path.partition(":")
        try:
            cls = getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError):
            continue
        if isinstance(cls, type) and cls not in found:
            found.append(cls)
    return tuple(found)


_ABORTS = _classes("typer:Abort", "click.exceptions:Abort", "typer._click.exceptions:Abort")
_EXITS = _classes("typer:Exit", "click.exceptions:Exit", "typer._click.exceptions:Exit")
_CLICK_ERRORS = _classes("click.exceptions:ClickException",
                         "typer._click.exceptions:ClickException")
