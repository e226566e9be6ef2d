"""The Typer application and its entry point."""

from __future__ import annotations

from typing import Optional

import typer

from nngauge._version import __version__
from nngauge.cli._report import report
from nngauge.cli._reproduce import reproduce
from nngauge.cli._study import study_app
from nngauge.cli._theory import theory
from nngauge.errors import NNGaugeError

app = typer.Typer(
    name="nngauge",
    help="Measure deep neural networks the way the papers do: theory, measures, reports.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.command(name="theory")(theory)
app.command(name="report")(report)
app.command(name="reproduce")(reproduce)
app.add_typer(study_app, name="study")


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"nngauge {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Optional[bool] = typer.Option(
        None, "--version", callback=_print_version, is_eager=True, help="Print the version."
    ),
) -> None:
    """nngauge: the instrument panel for deep neural networks."""


def main() -> None:
    """Console entry point: library errors become one readable line and exit code 2."""
    try:
        app(standalone_mode=False)
    except NNGaugeError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise SystemExit(2) from None
    except typer.Abort:
        raise SystemExit(1) from None
    except typer.Exit as exc:
        raise SystemExit(exc.exit_code) from None
    except Exception as exc:  # click usage errors arrive here in non-standalone mode
        from click.exceptions import ClickException

        if isinstance(exc, ClickException):
            exc.show()
            raise SystemExit(exc.exit_code) from None
        raise
