"""How ``nngauge ... --help`` reads: examples under every command, flags shown as flags."""

from __future__ import annotations

from typer.core import TyperCommand, TyperGroup


def epilog(*examples: str) -> str:
    """The ``Examples:`` block closing a command's help, one command line a paragraph (so that
    both click's plain help and Typer's rich help keep one example a line)."""
    return "\n\n".join(["Examples:", *(f"  {line}" for line in examples)])


def _flags_as_flags(params: list) -> list:
    """Blank the value placeholder of on/off options (recent Typer versions print ``<bool>``
    beside ``--quick``, which reads as ``--quick <bool>``; a flag takes no value)."""
    for param in params:
        if getattr(param, "is_flag", False) and not getattr(param, "count", False):
            param.metavar = ""
    return params


class Command(TyperCommand):
    """A Typer command whose flags, ``--help`` included, show no value placeholder."""

    def get_params(self, ctx):  # noqa: D102 - click's
        return _flags_as_flags(super().get_params(ctx))


class Group(TyperGroup):
    """A Typer group whose flags, ``--help`` included, show no value placeholder."""

    def get_params(self, ctx):  # noqa: D102 - click's
        return _flags_as_flags(super().get_params(ctx))
