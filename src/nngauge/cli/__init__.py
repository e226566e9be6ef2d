"""The ``nngauge`` command line: thin commands over the library."""

from nngauge.cli._app import app, main

__all__ = ["app", "main"]
