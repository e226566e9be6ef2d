"""The model options: how a measure runs a user's network, carried as one object.

Every measure and proxy offers some of four keywords that say how the model is run
(``docs/api.md``, "The model options"): ``output`` (which output is measured), ``input_module``
(where the measured input is), ``norm_mode`` (batchnorm's statistics) and ``dropout``. Inside
the library they travel as one :class:`ModelOptions`, with the ``precision`` a measure needs,
from the public call to the :class:`~nngauge._internal.adapter.ModelAdapter` that runs the
model, and from a proxy or a measure to the measure it calls.

A public function is written with one internal parameter ``options: ModelOptions`` and
decorated with :func:`model_options`, which says which of the four keywords it offers and their
defaults. Its public signature (``inspect.signature``, ``help()``, the declared constraints of
:func:`nngauge._constraints.constrained`, the deprecation decorators of
:mod:`nngauge._vocabulary`) shows the keywords, in their places, and not ``options``::

    @constrained(percentile=Real(0, 100, high_open=True))
    @model_options("output", norm_mode="eval", after={"norm_mode": "batch_size"})
    def margin(model, data, labels=None, *, percentile=5, options: ModelOptions,
               batch_size=1024) -> MarginResult:
        adapter = ModelAdapter(model, options, where="margin()")

    margin(model, data, labels, output="logits", batch_size=512, norm_mode="frozen")

Inside the library, a function passes the object on with ``options=`` instead of the keywords
(``nlc(model, data, options=options)``); ``dataclasses.replace(options, norm_mode="frozen")``
changes one option, ``dataclasses.replace(options, precision=torch.float64)`` asks for a more
precise copy of a low-precision model.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional, TypeVar

import torch

from nngauge._constraints import NORM_MODES, NormMode
from nngauge.errors import invalid

F = TypeVar("F", bound=Callable)


@dataclass(frozen=True)
class ModelOptions:
    """How a measure runs the model (see the module docstring and ``docs/api.md``).

    Attributes:
        output: which output is measured when the model returns a dict, tuple or
            ``ModelOutput``: None (the tensor output, else the ``"logits"`` entry), a key, an
            index or a callable.
        input_module: the submodule whose output is the measured input (None: the model's
            input; integer inputs: the first ``nn.Embedding``).
        norm_mode: batchnorm's statistics: "train" (each batch's own), "eval" (running),
            "frozen" (computed on the data, then fixed), None (each batchnorm as found).
        dropout: keep dropout and other train-time randomness on.
        precision: the least precise floating dtype the measure can resolve its quantity in
            (default float32): a model in a less precise dtype is measured on an upcast copy.
    """

    output: Any = None
    input_module: Optional[str] = None
    norm_mode: Optional[NormMode] = None
    dropout: bool = False
    precision: torch.dtype = torch.float32

    def check(self, where: str) -> None:
        """Refuse an option that no model can accept (the checks that need the model, such as
        ``input_module`` naming one of its submodules, are the adapter's), the error naming
        ``where``."""
        check_output_selector(self.output, where)
        if self.norm_mode is not None and self.norm_mode not in NORM_MODES:
            raise invalid(where, f"norm_mode in {NORM_MODES} or None",
                          f"norm_mode={self.norm_mode!r}",
                          "use 'train' (batch statistics), 'eval' (running statistics) or "
                          "'frozen' (statistics of the data, then fixed)")
        if not isinstance(self.dropout, bool):
            raise invalid(where, "dropout True or False", f"dropout={self.dropout!r}",
                          "pass dropout=False (default) or True")
        if not (isinstance(self.precision, torch.dtype) and self.precision.is_floating_point):
            raise invalid(where, "precision a floating torch.dtype",
                          f"precision={self.precision!r}", "pass e.g. torch.float64")


KEYWORDS = tuple(f.name for f in dataclasses.fields(ModelOptions) if f.name != "precision")
"""The model options a public function may offer as keywords (``precision`` is the measure's
own choice, never a user's)."""


def check_output_selector(output: Any, where: str) -> None:
    """An ``output=`` selector is None, an int, a str or a callable."""
    if output is None or callable(output) or (
            isinstance(output, (int, str)) and not isinstance(output, bool)):
        return
    raise invalid(where, "output= None, a key (str), an index (int) or a callable",
                  f"{type(output).__name__}", "pass e.g. output='logits' or output=0")


def model_options(*names: str, after: Optional[Mapping[str, str]] = None,
                  **defaults: Any) -> Callable[[F], F]:
    """Write a public function with one parameter ``options: ModelOptions`` while it offers
    the model options as keywords.

    Args:
        names: the model options the function offers (of :data:`KEYWORDS`) with the
            :class:`ModelOptions` default, e.g. ``"output", "input_module"``.
        defaults: the model options it offers with another default, e.g. ``norm_mode="eval"``.
            The public signature shows ``names``, then ``defaults``, in the order given. An
            option not offered keeps the :class:`ModelOptions` default in the ``options`` the
            function receives.
        after: ``{option: parameter}`` for an option that follows that parameter of the
            public signature rather than the option before it (the first offered option
            takes the place of the ``options`` parameter, each next one follows the
            previous); keeps historical signatures exact.

    The decorated function's public signature is its own with ``options`` replaced by the
    offered keywords (keyword-only, annotated as :class:`ModelOptions`' fields). A call
    builds the :class:`ModelOptions` once, from the keywords given and the defaults, checks it
    (:meth:`ModelOptions.check`), and runs the function with it. The library passes an
    already-built object with ``options=ModelOptions(...)`` instead (a keyword that the public
    signature does not show): a call giving both ``options=`` and one of the keywords is
    refused, and so is an ``options=`` that sets an option the function does not offer (away
    from its default). Put it below :func:`nngauge._constraints.constrained` (which then checks
    the keywords as it checks every public option) and the deprecation decorators.
    """
    after = dict(after or {})
    plain = ModelOptions()
    offered = {**{name: getattr(plain, name, None) for name in names}, **defaults}
    unknown = ((set(offered) - set(KEYWORDS)) | (set(after) - set(offered))
               | (set(names) & set(defaults)))
    if unknown:
        raise TypeError(f"model_options(): {sorted(unknown)}: offer each of {KEYWORDS} at most "
                        "once, and place with after= only offered ones")
    fixed = {name: getattr(plain, name) for name in KEYWORDS if name not in offered}
    types = {f.name: f.type for f in dataclasses.fields(ModelOptions)}

    def decorate(function: F) -> F:
        signature = inspect.signature(function)
        where = f"{function.__name__}()"
        public = _public_parameters(signature, offered, after, types, function.__qualname__)

        @functools.wraps(function)
        def with_model_options(*args: Any, **kwargs: Any) -> Any:
            given = {name: kwargs.pop(name) for name in offered if name in kwargs}
            options = kwargs.pop("options", None)
            if options is None:
                options = ModelOptions(**{**offered, **given})
            else:
                _check_passed(options, given, fixed, offered, where)
            options.check(where)
            return function(*args, options=options, **kwargs)

        with_model_options.__signature__ = signature.replace(  # type: ignore[attr-defined]
            parameters=public)
        with_model_options.__internal_keywords__ = ("options",)  # type: ignore[attr-defined]
        return with_model_options  # type: ignore[return-value]

    return decorate


def _public_parameters(signature: inspect.Signature, offered: Mapping[str, Any],
                       after: Mapping[str, str], types: Mapping[str, Any],
                       qualname: str) -> list[inspect.Parameter]:
    """The parameters of ``signature`` with ``options`` replaced by the offered keywords."""
    names = list(signature.parameters)
    if "options" not in names or signature.parameters["options"].kind is not (
            inspect.Parameter.KEYWORD_ONLY):
        raise TypeError(f"{qualname} needs a keyword-only parameter 'options' for "
                        "model_options()")
    clash = set(offered) & set(names)
    if clash:
        raise TypeError(f"{qualname} declares {sorted(clash)} itself; model_options() adds them")
    parameters = list(signature.parameters.values())
    position = names.index("options")
    parameters.pop(position)
    for name, default in offered.items():
        if name in after:
            anchors = [p.name for p in parameters]
            if after[name] not in anchors:
                raise TypeError(f"{qualname} has no parameter {after[name]!r} for {name!r} to "
                                "follow")
            position = anchors.index(after[name]) + 1
        parameters.insert(position, inspect.Parameter(
            name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=types[name]))
        position += 1
    return parameters


def _check_passed(options: Any, given: Mapping[str, Any], fixed: Mapping[str, Any],
                  offered: Mapping[str, Any], where: str) -> None:
    """Refuse an ``options=`` that is not a ModelOptions, comes with keywords, or sets an
    option the function does not offer."""
    if not isinstance(options, ModelOptions):
        raise invalid(where, "options= a ModelOptions (the library's internal way to pass the "
                      "model options on)", f"a {type(options).__name__}",
                      f"pass the model options as keywords ({', '.join(offered)})")
    if given:
        raise invalid(where, "the model options either as keywords or as one options= object",
                      f"options= and {', '.join(f'{name}=' for name in given)}",
                      "set them in the object: dataclasses.replace(options, "
                      f"{', '.join(f'{name}=...' for name in given)})")
    not_offered = {name: getattr(options, name) for name, default in fixed.items()
                   if getattr(options, name) != default}
    if not_offered:
        raise invalid(where, f"options= setting only the model options {where} offers "
                      f"({', '.join(offered) or 'none'})",
                      ", ".join(f"{name}={value!r}" for name, value in not_offered.items()),
                      "reset them with dataclasses.replace(options, "
                      f"{', '.join(f'{name}={fixed[name]!r}' for name in not_offered)})")


__all__ = ["KEYWORDS", "ModelOptions", "check_output_selector", "model_options"]
