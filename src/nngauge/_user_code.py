"""Load a user's function from ``path/to/file.py:function``: a model source (``nngauge report
file.py:make``), a builder (``nngauge rank``, a study's ``[architectures] builder``), a data
function (``--data file.py:load``) or a training loop (a study's ``[training] train``)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any, Callable

from nngauge.errors import NNGaugeError, invalid


def load_function(spec: str, where: str, *, what: str = "model") -> Callable[..., Any]:
    """The function ``function`` of ``path/to/file.py:function`` (the file imported under a
    private name, never added to ``sys.modules``), with one clear error for a missing colon,
    file or function, or a file that fails to import. ``what`` names what the function
    builds, in the errors."""
    file, _, function = spec.partition(":")
    path = Path(file)
    if not function:
        raise invalid(where, "path/to/file.py:function", repr(spec),
                      f"name the function that builds the {what} after a colon")
    if not path.is_file():
        raise invalid(where, f"an existing {what} file", f"{file!r} (not found)",
                      "check the path")
    name = f"_nngauge_model_{abs(hash(path.resolve()))}"
    module_spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[name] = module
    try:
        module_spec.loader.exec_module(module)
    except Exception as exc:
        raise NNGaugeError(f"{where}: importing {file!r} raised {type(exc).__name__}: {exc}. "
                           "Fix: run the file with python to see the full traceback.") from exc
    finally:
        sys.modules.pop(name, None)
    build = getattr(module, function, None)
    if not callable(build):
        found = sorted(k for k, v in vars(module).items() if callable(v) and not k.startswith("_")
                       and getattr(v, "__module__", None) == name)
        raise invalid(where, f"a function {function!r} in {file!r}", f"callables {found}",
                      "name one of them after the colon")
    return build


__all__ = ["load_function"]
