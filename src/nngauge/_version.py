"""The package version, read from the installed metadata."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("nngauge")
except PackageNotFoundError:  # running from a source tree without installation
    __version__ = "0.1.0"
