"""Errors raised by nngauge.

Every error derives from :class:`NNGaugeError`. At a public entry point an error says what
was expected, what was got, and how to fix it; :func:`invalid` builds such a message.
"""

from __future__ import annotations

__all__ = [
    "BudgetExceededError",
    "NNGaugeError",
    "InvalidInputError",
    "UnknownNameError",
    "MissingDependencyError",
    "ConvergenceError",
    "invalid",
    "rejected_inputs",
    "require_extra",
    "warn_caller",
]


class NNGaugeError(Exception):
    """Root of every error nngauge raises."""


class InvalidInputError(NNGaugeError, ValueError):
    """An argument has the wrong value, shape, type or range."""


class BudgetExceededError(InvalidInputError):
    """A computation would go past a limit the caller set (``max_pieces``, ``max_regions``):
    raise the limit, or ask for less (a smaller box, a sampled method)."""


class UnknownNameError(NNGaugeError, KeyError):
    """A name (activation, architecture, option) is not known."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class MissingDependencyError(NNGaugeError, ImportError):
    """An optional dependency needed for this feature is not installed."""


class ConvergenceError(NNGaugeError, RuntimeError):
    """An iterative computation did not reach its tolerance."""


def invalid(where: str, expected: str, got: str, fix: str, *,
            error: type[InvalidInputError] = InvalidInputError) -> InvalidInputError:
    """Build an :class:`InvalidInputError` (or the subclass ``error``) with the expected / got /
    fix message shape.

    Example:
        >>> raise invalid("gaussian_covariance()", "rho in [-1, 1]", "rho=1.5", "clip rho")
        Traceback (most recent call last):
        ...
        nngauge.errors.InvalidInputError: gaussian_covariance() expected rho in [-1, 1]; got rho=1.5. Fix: clip rho.
    """
    return error(f"{where} expected {expected}; got {got}. Fix: {fix}.")


def rejected_inputs(where: str, shape: tuple, dtype: object, error: Exception
                    ) -> InvalidInputError:
    """The error for inputs a model's forward() raised on (chain the original with ``from``)."""
    return invalid(where, "inputs the model's forward() accepts",
                   f"inputs of shape {tuple(shape)} and dtype {dtype}, on which it raised "
                   f"{type(error).__name__}: {error}",
                   "pass data shaped as the model expects (samples along dimension 0)")


def require_counts(where: str, **values: object) -> None:
    """Refuse any of ``values`` (by argument name) that is not an integer >= 1."""
    for name, value in values.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise invalid(where, f"{name} an integer >= 1", f"{name}={value!r}",
                          f"pass a positive integer {name}")


def warn_caller(message: str, category: type[Warning] = UserWarning) -> None:
    """Warn with ``message``, attributed to the first frame outside nngauge: the line of the
    user's code that called the library, however many of nngauge's functions and decorators
    lie between (a hand-counted ``stacklevel`` breaks whenever a decorator is added)."""
    import sys
    import warnings

    frame, level = sys._getframe(1), 2
    while frame is not None and frame.f_globals.get("__name__", "").split(".")[0] == "nngauge":
        frame, level = frame.f_back, level + 1
    warnings.warn(message, category, stacklevel=level)


def require_extra(module: str, extra: str, feature: str, *, install: str = ""):
    """Import an optional dependency or raise :class:`MissingDependencyError` naming the extra
    (or ``install``, the command to run where no extra of nngauge provides the package); a
    package that is installed but fails on a missing package of its own names that one."""
    import importlib

    package = module.split(".")[0]
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        missing = (exc.name or package).split(".")[0]
        if missing != package:
            raise MissingDependencyError(
                f"{feature} needs '{package}', which is installed but failed to import: {exc}. "
                f"Install what it needs: pip install {missing}") from exc
        command = install or f"pip install 'nngauge[{extra}]'"
        raise MissingDependencyError(
            f"{feature} needs the optional package '{package}', which is not installed. "
            f"Install it with: {command}") from exc
