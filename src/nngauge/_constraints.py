"""Declared parameter constraints: each public function states the range of every option once,
and the declaration is checked before any work (scikit-learn's ``_parameter_constraints``
habit).

    @constrained(n_iter=Integer(1), tol=Real(0, 1, open=True), method=Choice("probe", "exact"))
    def jacobian_norm(model, data, *, n_iter=100, tol=1e-6, method="probe"): ...

A violation raises :class:`~nngauge.errors.InvalidInputError` naming the parameter, what was
expected, what was got and the fix (the default value when the parameter has one). The
declarations are public data (``function.__constraints__``): the test suite feeds every
constraint its own violations (:meth:`Constraint.violations`) and asserts each call ends in
that error, and that every option with a scalar default is declared.

Checks here are the ones a value can fail alone; those that relate arguments (``top_k`` at most
the number of parameters) or read the data stay in the function.
"""

from __future__ import annotations

import functools
import inspect
import itertools
import math
import numbers
import sys
import typing
from dataclasses import dataclass
from typing import Any, Callable, Literal, Optional, TypeVar

import numpy as np

from nngauge._numbers import is_finite
from nngauge.errors import invalid

F = TypeVar("F", bound=Callable)

NormMode = Literal["train", "eval", "frozen"]
NORM_MODES = typing.get_args(NormMode)
"""Batchnorm modes of the model adapter (declared here, torch-free, for the shared
constraint; :mod:`nngauge._internal.adapter` imports them)."""


class Constraint:
    """A set of accepted values: :meth:`accepts`, its description, and values outside it."""

    def accepts(self, value: Any) -> bool:
        raise NotImplementedError

    def expected(self) -> str:
        """The accepted values as a phrase completing "<name> ...", e.g. "an integer >= 1"."""
        raise NotImplementedError

    def violations(self) -> list[Any]:
        """Values outside the set (for the generated bad-input tests)."""
        raise NotImplementedError

    def normalized(self, value: Any) -> Any:
        """The accepted ``value`` as the function receives it (itself, unless the constraint
        reads one value several ways, as :class:`RandomSource` does)."""
        return value

    def shown(self, value: Any) -> str:
        """The refused ``value`` as the message's "got" shows it."""
        return _shown(value)

    def fix(self, value: Any) -> Optional[str]:
        """The fix for the refused ``value`` where one is known beyond "pass <name>
        <expected>", else None."""
        return None


def _is_integer(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_))


@dataclass(frozen=True)
class Integer(Constraint):
    """A Python or numpy integer (not a bool) in [low, high] (None: unbounded)."""

    low: int | None = None
    high: int | None = None

    def accepts(self, value: Any) -> bool:
        return (_is_integer(value)
                and (self.low is None or value >= self.low)
                and (self.high is None or value <= self.high))

    def expected(self) -> str:
        if self.low is not None and self.high is not None:
            return f"an integer in [{self.low}, {self.high}]"
        if self.low is not None:
            return f"an integer >= {self.low}"
        return "an integer" if self.high is None else f"an integer <= {self.high}"

    def violations(self) -> list[Any]:
        out: list[Any] = [2.5, "3", True]
        if self.low is not None:
            out.append(self.low - 1)
        if self.high is not None:
            out.append(self.high + 1)
        return out


@dataclass(frozen=True)
class Real(Constraint):
    """A finite real scalar (not a bool) between low and high; ``open`` excludes both ends,
    ``low_open`` / ``high_open`` one of them."""

    low: float | None = None
    high: float | None = None
    open: bool = False
    low_open: bool = False
    high_open: bool = False

    def _opens(self) -> tuple[bool, bool]:
        return self.open or self.low_open, self.open or self.high_open

    def accepts(self, value: Any) -> bool:
        if not is_finite(value):
            return False
        low_open, high_open = self._opens()
        if self.low is not None and (value < self.low or (low_open and value == self.low)):
            return False
        return self.high is None or not (value > self.high or (high_open and value == self.high))

    def expected(self) -> str:
        low_open, high_open = self._opens()
        if self.low is not None and self.high is not None:
            return (f"a number in {'(' if low_open else '['}{self.low:g}, {self.high:g}"
                    f"{')' if high_open else ']'}")
        if self.low is not None:
            return f"a finite number {'>' if low_open else '>='} {self.low:g}"
        if self.high is not None:
            return f"a finite number {'<' if high_open else '<='} {self.high:g}"
        return "a finite number"

    def violations(self) -> list[Any]:
        low_open, high_open = self._opens()
        out: list[Any] = [float("nan"), float("inf"), "0.1", True]
        if self.low is not None:
            out.append(self.low if low_open else self.low - 1)
        if self.high is not None:
            out.append(self.high if high_open else self.high + 1)
        return out


@dataclass(frozen=True)
class Array(Constraint):
    """A real scalar or array (anything ``numpy.asarray`` makes float) whose entries are all
    finite and within [low, high] (``low_open``: > low), for the theory's vectorized
    arguments (variances, correlations)."""

    low: float | None = None
    high: float | None = None
    low_open: bool = False

    def accepts(self, value: Any) -> bool:
        if isinstance(value, (str, bytes, bool)):
            return False
        try:
            arr = np.asarray(value, dtype=np.float64)
        except (TypeError, ValueError):
            return False
        if arr.size == 0 or not np.all(np.isfinite(arr)):
            return False
        if self.low is not None and np.any(arr <= self.low if self.low_open else arr < self.low):
            return False
        return self.high is None or not np.any(arr > self.high)

    def expected(self) -> str:
        if self.low is not None and self.high is not None:
            return f"real values in [{self.low:g}, {self.high:g}] (a number or an array)"
        if self.low is not None:
            return (f"real values {'>' if self.low_open else '>='} {self.low:g} (a number or "
                    "an array)")
        return "finite real values (a number or an array)"

    def violations(self) -> list[Any]:
        out: list[Any] = [float("nan"), "0.5", [], [0.5, float("inf")]]
        if self.low is not None:
            out.append(self.low if self.low_open else self.low - 1)
        if self.high is not None:
            out.append([self.high + 1])
        return out


class Choice(Constraint):
    """One of the given values (strings or other constants)."""

    def __init__(self, *options: Any) -> None:
        self.options = options

    @classmethod
    def literal(cls, kind: Any) -> "Choice":
        """The values of a ``typing.Literal`` type (declared once, as the annotation)."""
        return cls(*typing.get_args(kind))

    def accepts(self, value: Any) -> bool:
        return any(type(value) is type(o) and value == o for o in self.options)

    def expected(self) -> str:
        return f"in {self.options!r}"

    def violations(self) -> list[Any]:
        return [v for v in ("no-such-option", -1, 2.5) if not self.accepts(v)]

    def __repr__(self) -> str:
        return f"Choice{self.options!r}"


class Flag(Constraint):
    """True or False."""

    def accepts(self, value: Any) -> bool:
        return isinstance(value, bool)

    def expected(self) -> str:
        return "True or False"

    def violations(self) -> list[Any]:
        return ["yes", 1, None]


@dataclass(frozen=True)
class Instance(Constraint):
    """An instance of ``types``, described as ``what``."""

    types: tuple
    what: str
    bad: tuple = ("not it", 3)

    def accepts(self, value: Any) -> bool:
        return isinstance(value, self.types) and not isinstance(value, bool)

    def expected(self) -> str:
        return self.what

    def violations(self) -> list[Any]:
        return list(self.bad)


def _torch_class(path: str) -> Any:
    """The class ``path`` ("torch.nn.Module") if its module is imported, else None: no value can
    be a torch object before torch is imported, so the check never imports it."""
    module, _, name = path.rpartition(".")
    return getattr(sys.modules.get(module), name, None)


@dataclass(frozen=True)
class TorchInstance(Constraint):
    """An instance of the torch class ``path`` (e.g. ``"torch.nn.Module"``), checked without
    importing torch, so that torch-free layers (activations, theory) can import this module."""

    path: str
    what: str
    bad: tuple = ("not it", 3)

    def accepts(self, value: Any) -> bool:
        cls = _torch_class(self.path)
        return cls is not None and isinstance(value, cls)

    def expected(self) -> str:
        return self.what

    def violations(self) -> list[Any]:
        return list(self.bad)


@dataclass(frozen=True)
class Check(Constraint):
    """Any value ``test`` accepts, described as ``what``, with known ``bad`` values."""

    test: Callable[[Any], bool]
    what: str
    bad: tuple

    def accepts(self, value: Any) -> bool:
        try:
            return bool(self.test(value))
        except (TypeError, ValueError):
            return False

    def expected(self) -> str:
        return self.what

    def violations(self) -> list[Any]:
        return list(self.bad)


@dataclass(frozen=True)
class Either(Constraint):
    """A value one of ``options`` accepts."""

    options: tuple[Constraint, ...]

    def accepts(self, value: Any) -> bool:
        return any(c.accepts(value) for c in self.options)

    def expected(self) -> str:
        return " or ".join(c.expected() for c in self.options)

    def violations(self) -> list[Any]:
        return [v for c in self.options for v in c.violations() if not self.accepts(v)]


@dataclass(frozen=True)
class Maybe(Constraint):
    """None (the default behaviour) or a value ``inner`` accepts."""

    inner: Constraint

    def accepts(self, value: Any) -> bool:
        return value is None or self.inner.accepts(value)

    def expected(self) -> str:
        return f"None or {self.inner.expected()}"

    def violations(self) -> list[Any]:
        return [v for v in self.inner.violations() if v is not None]

    def normalized(self, value: Any) -> Any:
        return None if value is None else self.inner.normalized(value)

    def shown(self, value: Any) -> str:
        return self.inner.shown(value)

    def fix(self, value: Any) -> Optional[str]:
        return self.inner.fix(value)


_SEED = Integer(0, 2**64 - 1)
_TORCH_GENERATOR = TorchInstance("torch.Generator", "a torch.Generator")


@dataclass(frozen=True)
class RandomSource(Constraint):
    """A ``torch.Generator`` or an int seed in [0, 2^64) (what ``Generator.manual_seed``
    takes), normalized for the function by :func:`nngauge._random.torch_generator` (an int
    becomes a fresh generator seeded with it), or kept as given with ``keep_seed`` (for
    functions seeding numpy through :func:`nngauge._random.seed_of`, where an int must stay
    the int)."""

    keep_seed: bool = False

    def accepts(self, value: Any) -> bool:
        return _SEED.accepts(value) or _TORCH_GENERATOR.accepts(value)

    def expected(self) -> str:
        return "a torch.Generator or an int seed >= 0"

    def violations(self) -> list[Any]:
        return ["seed", -1, 2.5, True]

    def normalized(self, value: Any) -> Any:
        if self.keep_seed:
            return value
        from nngauge._random import torch_generator

        return torch_generator(value)


def _finite_numbers(values: Any, low: float, low_open: bool) -> bool:
    items = list(values)
    return bool(items) and all(
        is_finite(v) and (v > low if low_open else v >= low) for v in items)


def Numbers(low: float = -math.inf, *, low_open: bool = False) -> Check:  # noqa: N802
    """A non-empty sequence (list, tuple, 1-D array) of finite numbers above ``low``."""
    sign = ">" if low_open else ">="
    return Check(lambda v: not isinstance(v, (str, bytes)) and _finite_numbers(v, low, low_open),
                 f"a non-empty sequence of finite numbers {sign} {low:g}",
                 ((), ("a",), (float("nan"),), (low,) if low_open else (low - 1,)))


@dataclass(frozen=True)
class Module(TorchInstance):
    """A ``torch.nn.Module`` whose parameters and buffers hold values: a model on the meta
    device (shapes only, as ``with torch.device("meta")`` builds it) is refused before any
    work, with how to materialize it."""

    def accepts(self, value: Any) -> bool:
        return super().accepts(value) and not _on_meta(value)

    def violations(self) -> list[Any]:
        torch = sys.modules.get("torch")
        meta = [] if torch is None else [torch.nn.Linear(2, 2, device="meta")]
        return [*self.bad, *meta]

    def shown(self, value: Any) -> str:
        if not super().accepts(value):
            return super().shown(value)
        return f"a {type(value).__name__} with meta-device parameters (shapes, no values)"

    def fix(self, value: Any) -> Optional[str]:
        if not super().accepts(value):
            return None
        return ("materialize it: model.to_empty(device='cpu'), then load or initialize its "
                "weights")


def _on_meta(module: Any) -> bool:
    return any(t.is_meta for t in itertools.chain(module.parameters(), module.buffers()))


MODEL = Module("torch.nn.Module", "a torch.nn.Module holding values (not on the meta device; "
               "the network to measure)", (None, "mlp", lambda x: x))
"""The ``model`` argument of every measure."""

NAME = Instance((str,), "a module name (as in model.named_modules())", (3, None, ["fc"]))
"""A submodule's name."""

GENERATOR = Maybe(RandomSource())
"""The ``generator`` argument: None (torch's global generator), a torch.Generator, or an int
seed (the function receives ``torch.Generator().manual_seed(seed)``): normalized here, once
for every function, so that an int and a generator seeded with it give the same values."""

SEED_OR_GENERATOR = Maybe(RandomSource(keep_seed=True))
"""The ``generator`` argument of functions that seed numpy (the bundled data sets, the
report): as :data:`GENERATOR`, but an int reaches the function as it is
(:func:`nngauge._random.seed_of` gives it back; a generator gives one draw)."""

CALLABLE = Check(callable, "a callable", ("mse", 3))

OUTPUT = Check(lambda v: v is None or callable(v) or (
    isinstance(v, (int, str)) and not isinstance(v, bool)),
    "None, a key (str), an index (int) or a callable selecting the measured output",
    (1.5, True, ("logits",)))
"""The ``output=`` selector for models returning dicts, tuples or ModelOutputs."""

SHARED: dict[str, Constraint] = {
    "model": MODEL,
    "generator": GENERATOR,
    "batch_size": Integer(1),
    "n_batches": Maybe(Integer(1)),
    "chunk_size": Maybe(Integer(1)),
    "norm_mode": Maybe(Choice(*NORM_MODES)),
    "dropout": Flag(),
    "output": OUTPUT,
    "layers": Maybe(Check(lambda v: isinstance(v, str) or (
        isinstance(v, (list, tuple)) and all(isinstance(n, str) for n in v)),
        "a module or site name, or a list of them", (3, [3], {"fc": 1}))),
    "input_shape": Maybe(Check(lambda v: isinstance(v, (list, tuple)) and bool(v) and all(
        isinstance(n, int) and not isinstance(n, bool) and n > 0 for n in v),
        "the shape of one sample: positive integers, e.g. (3, 32, 32)", ((), (3, 0), "32"))),
    "merge_tol": Real(0, 1e-3, high_open=True),
    "n_initial": Integer(2),
    "min_width": Real(0, low_open=True),
    "max_evaluations": Integer(1),
    "input_module": Maybe(Instance((str,), "the name of a submodule (model.named_modules())",
                                   (3, ("embed",)))),
}
"""Options with one meaning across the library, declared here once: a function with a
parameter of that name is checked against it unless it declares its own."""


def constrained(**constraints: Constraint) -> Callable[[F], F]:
    """Check the named arguments of the decorated function against ``constraints`` (and the
    :data:`SHARED` ones of its parameters) before it runs; the declarations are kept in
    ``function.__constraints__``. The keywords named in ``function.__internal_keywords__``
    (the library's own, outside the signature: ``options`` of
    :func:`nngauge._internal.options.model_options`) are passed on unchecked."""

    def decorate(function: F) -> F:
        signature = inspect.signature(function)
        unknown = set(constraints) - set(signature.parameters)
        if unknown:
            raise TypeError(f"constraints on {sorted(unknown)}, not parameters of "
                            f"{function.__qualname__}")
        constraints_ = {**{n: c for n, c in SHARED.items() if n in signature.parameters},
                        **constraints}
        where = f"{function.__name__}()"
        # defaults read another way (an int seed becoming a generator), fresh at every call
        read_defaults = {n: c for n, c in constraints_.items()
                         if signature.parameters[n].default is not inspect.Parameter.empty
                         and c.normalized(signature.parameters[n].default)
                         is not signature.parameters[n].default}

        # keywords the function takes beyond its signature (the library's own, such as the
        # model options object of nngauge._internal.options): passed on, not checked
        internal = tuple(getattr(function, "__internal_keywords__", ()))

        @functools.wraps(function)
        def checked(*args: Any, **kwargs: Any) -> Any:
            passed_on = {name: kwargs.pop(name) for name in internal if name in kwargs}
            try:
                bound = signature.bind(*args, **kwargs)
            except TypeError:  # Python's own message for a bad call
                return function(*args, **kwargs, **passed_on)
            changed = {}
            for name, value in bound.arguments.items():
                constraint = constraints_.get(name)
                if constraint is None:
                    continue
                if not constraint.accepts(value):
                    raise invalid(where, f"{name} {constraint.expected()}",
                                  f"{name}={constraint.shown(value)}",
                                  _fix(name, constraint, value,
                                       signature.parameters[name].default))
                normalized = constraint.normalized(value)
                if normalized is not value:
                    changed[name] = normalized
            changed.update({n: c.normalized(signature.parameters[n].default)
                            for n, c in read_defaults.items() if n not in bound.arguments})
            if not changed:
                return function(*args, **kwargs, **passed_on)
            bound.arguments.update(changed)
            return function(*bound.args, **bound.kwargs, **passed_on)

        checked.__constraints__ = constraints_  # type: ignore[attr-defined]
        return checked  # type: ignore[return-value]

    return decorate


def declared(function: Callable) -> dict[str, Constraint]:
    """The constraints ``function`` declares (empty when it declares none)."""
    return dict(getattr(function, "__constraints__", {}))


def _shown(value: Any) -> str:
    tensor = _torch_class("torch.Tensor")
    text = repr(value) if tensor is None or not isinstance(value, tensor) else (
        f"a tensor of shape {tuple(value.shape)}")
    return text if len(text) <= 80 else text[:77] + "..."


def _fix(name: str, constraint: Constraint, value: Any, default: Any) -> str:
    known = constraint.fix(value)
    if known is not None:
        return known
    wanted = f"pass {name} {constraint.expected()}"
    if default is inspect.Parameter.empty:
        return wanted
    return f"{wanted}, e.g. {name}={default!r} (the default)"


__all__ = ["Array", "CALLABLE", "Check", "Choice", "Constraint", "Either", "Flag", "GENERATOR",
           "Instance", "Integer", "MODEL", "Maybe", "Module", "NAME", "NORM_MODES", "NormMode", "Numbers",
           "OUTPUT", "RandomSource", "Real", "SEED_OR_GENERATOR", "SHARED", "TorchInstance",
           "constrained", "declared"]
