"""Turn the command line's MODEL string into a module (``nngauge report``, the study runner).

MODEL is one of

- ``path/to/file.py:function``: the function is called with no arguments and must return an
  ``nn.Module``;
- a saved module: TorchScript (``torch.jit.save``), a ``torch.export`` program (``.pt2``), or a
  pickled ``nn.Module`` (``torch.save(model)``), the last only with ``trust_pickle=True``
  because unpickling runs arbitrary code;
- a built-in spec ``NAME[:key=value,...]``, e.g. ``mlp:depth=20,width=100,activation=relu``,
  whose keys are the keyword arguments of the builder (``d_in`` / ``d_out`` default to the
  data's width and number of classes: :class:`nngauge.data._sources.DataSource`);
- the ecosystem's names, ``timm:resnet50``, ``torchvision:resnet18`` or ``hf:path/to/folder``
  (:mod:`nngauge.nn._ecosystem`: randomly initialized, never downloaded).

Weights (``--weights FILE``) load into any of them: a ``.safetensors`` file (safe to read:
tensors only), or a ``torch.save`` checkpoint (``.pt``, ``.pth``, ``.bin``, ``.ckpt``) under the
one rule for pickles: read with torch's ``weights_only`` unpickler, and one that needs code to
load only with ``trust_pickle=True``.
"""

from __future__ import annotations

import contextlib
import json
import pickle
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Callable, Optional, Union

import torch
from torch import nn

from nngauge.data._sources import DataSource, split_spec
from nngauge._user_code import load_function
from nngauge.errors import NNGaugeError, UnknownNameError, invalid, require_extra
from nngauge.nn._ecosystem import PICKLE_SUFFIXES, SOURCES, load_ecosystem
from nngauge.nn._mlp import mlp


def load_model(spec: str, *, data: Optional[DataSource] = None, trust_pickle: bool = False,
               seed: int = 0, weights: Union[str, Path, None] = None) -> nn.Module:
    """Load MODEL: ``file.py:function``, a saved module, a built-in spec or an ecosystem name,
    then its ``weights`` if given.

    Args:
        spec: the MODEL string (module docstring).
        data: the data, for the defaults of built-ins (``d_in``: its width, ``d_out``: its
            number of classes, or 1 without labels).
        trust_pickle: allow unpickling what needs code to load, a full ``nn.Module`` or a
            checkpoint holding more than tensors (runs code from the file: only for files you
            trust).
        seed: seed of a built-in's or an ecosystem network's random initialization.
        weights: a ``.safetensors`` file or a ``torch.save`` checkpoint of the model's state
            dict (or a dict holding it under ``state_dict``, ``model_state_dict`` or
            ``model``), loaded strictly: every name and shape must be the model's (weights tied
            in the model may be stored once).

    Returns:
        The ``nn.Module``.

    Example:
        >>> net = load_model("mlp:d_in=4,width=8,depth=3,d_out=2,activation=tanh")
        >>> type(net).__name__, net.config.depth
        ('MLP', 3)
    """
    where = "load_model()"
    state = None if weights is None else _read_weights(Path(weights), trust_pickle, where)
    model = _load(spec, data, trust_pickle, seed, weights is not None, where)
    if state is not None:
        _load_weights(model, state, Path(weights), where)
    return model


def _load(spec: str, data: Optional[DataSource], trust_pickle: bool, seed: int,
          weights_given: bool, where: str) -> nn.Module:
    if not isinstance(spec, str) or not spec.strip():
        raise invalid(where, "a MODEL string", repr(spec),
                      "pass file.py:function, a saved .pt/.pt2 module or e.g. mlp:depth=10")
    head = spec.split(":", 1)[0]
    if head.endswith(".py"):
        return _from_python(spec, where)
    if head in SOURCES:
        return load_ecosystem(spec, seed=seed, weights_given=weights_given, where=where)
    if Path(spec).suffix in (".pt", ".pth", ".pt2", ".ts"):
        return _from_saved(Path(spec), trust_pickle, where)
    if head in BUILTINS:
        return _from_builtin(spec, data, seed, where)
    if Path(spec).suffix == ".safetensors":
        raise invalid(where, "a MODEL that builds the architecture", repr(spec),
                      "a .safetensors file holds weights only: pass the architecture as MODEL "
                      "and the file as --weights")
    raise UnknownNameError(
        f"{where} expected file.py:function, a saved .pt/.pth/.pt2 module, timm:NAME, "
        f"torchvision:NAME, hf:FOLDER, or a built-in in {sorted(BUILTINS)}; got {spec!r}. "
        "Fix: e.g. 'mlp:depth=10,width=100,activation=relu'.")


def _from_python(spec: str, where: str) -> nn.Module:
    file, _, function = spec.partition(":")
    build = load_function(spec, where, what="model")
    try:
        model = build()
    except Exception as exc:
        raise NNGaugeError(f"{where}: {function}() in {file!r} raised {type(exc).__name__}: "
                           f"{exc}. Fix: it is called with no arguments; make it build and "
                           "return the model.") from exc
    if not isinstance(model, nn.Module):
        raise invalid(where, f"{function}() to return a torch.nn.Module",
                      f"{type(model).__name__}", "return the model object")
    return model



def _from_saved(path: Path, trust_pickle: bool, where: str) -> nn.Module:
    if not path.is_file():
        raise invalid(where, "an existing model file", f"{str(path)!r} (not found)",
                      "check the path")
    if path.suffix == ".pt2":
        return _from_export(path, trust_pickle, where)
    if _is_torchscript(path):
        try:
            return torch.jit.load(path, map_location="cpu")
        except Exception as exc:
            raise invalid(where, "a loadable TorchScript file", f"{path}: {exc}",
                          "re-save it with torch.jit.save") from None
    loaded = _unpickle(path, trust_pickle, where, "a TorchScript or torch.export file, or a "
                       "pickled module explicitly trusted")
    if isinstance(loaded, nn.Module):
        return loaded
    raise invalid(where, "a saved nn.Module", f"{path} holding a {type(loaded).__name__} "
                  "(weights without the architecture)" if isinstance(loaded, dict)
                  else f"{path} holding a {type(loaded).__name__}",
                  "pass the architecture as MODEL (file.py:function returning the model, a "
                  "built-in, timm:NAME, ...) and this file as --weights")


def _unpickle(path: Path, trust_pickle: bool, where: str, expected: str) -> Any:
    """A ``torch.save`` file, by the one rule for pickles: torch's ``weights_only`` unpickler
    (tensors, containers, numbers, strings: no code runs), and the full unpickler only when
    trusted."""
    try:
        return torch.load(path, weights_only=True, map_location="cpu")
    except pickle.UnpicklingError:
        if not trust_pickle:
            raise invalid(where, expected, f"{path}, which torch's weights_only loader "
                          "refused (a pickle that needs code to load, or no checkpoint)",
                          "pass --trust-pickle (trust_pickle=True) if you trust this file: "
                          "unpickling runs arbitrary code") from None
    except Exception as exc:
        raise _unloadable(path, exc, where) from None
    try:
        return torch.load(path, weights_only=False, map_location="cpu")
    except Exception as exc:
        raise _unloadable(path, exc, where) from None


def _unloadable(path: Path, exc: Exception, where: str) -> NNGaugeError:
    """The error for a ``torch.save`` file a loader could not read."""
    return invalid(where, "a loadable torch.save file", f"{path}: {type(exc).__name__}: {exc}",
                   "load it in Python to see why")


def _read_weights(path: Path, trust_pickle: bool, where: str) -> dict[str, torch.Tensor]:
    """The state dict in a ``.safetensors`` file or a ``torch.save`` checkpoint."""
    if path.suffix not in (".safetensors",) + PICKLE_SUFFIXES:
        raise invalid(where, "--weights a .safetensors file or a torch.save checkpoint "
                      f"({', '.join(PICKLE_SUFFIXES)})", str(path),
                      "save model.state_dict() with safetensors.torch.save_file")
    if not path.is_file():
        raise invalid(where, "an existing weights file", f"{str(path)!r} (not found)",
                      "check the path")
    if path.suffix == ".safetensors":
        reader = require_extra("safetensors.torch", "safetensors", "--weights FILE.safetensors")
        try:
            return reader.load_file(str(path), device="cpu")
        except Exception as exc:
            raise invalid(where, "a readable safetensors file", f"{path}: {exc}",
                          "write it with safetensors.torch.save_file(model.state_dict(), "
                          "path)") from None
    loaded = _unpickle(path, trust_pickle, where, "a safetensors file, or a pickled checkpoint "
                       "explicitly trusted")
    nested = ("state_dict", "model_state_dict", "model")
    candidates = [loaded] + ([loaded.get(key) for key in nested]
                             if isinstance(loaded, Mapping) else [])
    for state in candidates:
        if isinstance(state, Mapping) and state and all(
                isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in state.items()):
            return dict(state)
    keys = f" with keys {list(loaded)[:8]}" if isinstance(loaded, Mapping) else ""
    raise invalid(where, "a state dict (names to tensors), alone or under 'state_dict', "
                  "'model_state_dict' or 'model'", f"{path} holding a "
                  f"{type(loaded).__name__}{keys}", "save model.state_dict()")


def _load_weights(model: nn.Module, state: dict[str, torch.Tensor], path: Path, where: str
                  ) -> None:
    """``model.load_state_dict(state, strict=True)`` after checking names and shapes, so that
    a mismatch is one message listing them; a name missing from ``state`` whose tensor is tied
    in the model to one ``state`` has (a language model's head and embedding, stored once)
    takes that one."""
    own = model.state_dict()
    state = dict(state)
    tied: dict[tuple, list[str]] = {}
    for key, value in own.items():
        if value.numel():
            tied.setdefault((value.data_ptr(), tuple(value.shape)), []).append(key)
    for names in tied.values():
        stored = next((name for name in names if name in state), None)
        for name in names:
            if stored is not None and name not in state:
                state[name] = state[stored]
    missing = [key for key in own if key not in state]
    unexpected = [key for key in state if key not in own]
    shapes = [f"{key} {tuple(state[key].shape)} in the file, {tuple(own[key].shape)} in the "
              "model" for key in own if key in state and state[key].shape != own[key].shape]
    if missing or unexpected or shapes:
        found = [f"{len(items)} {what} {items[:5]}" for what, items in (
            ("missing", missing), ("unexpected", unexpected), ("of another shape", shapes))
            if items]
        prefix = unexpected[0].split(".")[0] + "." if unexpected else ""
        stripped = {key[len(prefix):] for key in unexpected if key.startswith(prefix)}
        fix = (f"the file's names carry the prefix {prefix!r}: save the inner module's "
               "state_dict()" if missing and set(missing) <= stripped else
               "load weights saved from this architecture with the same options (e.g. "
               "num_classes)")
        raise invalid(where, f"--weights with the model's {len(own)} names and shapes",
                      f"{path}: " + "; ".join(found), fix)
    model.load_state_dict(state, strict=True)


class _Unpickling(Exception):
    """Raised in place of a ``torch.load(..., weights_only=False)`` that was not trusted."""


def _from_export(path: Path, trust_pickle: bool, where: str) -> nn.Module:
    """A ``torch.export`` program. ``torch.export.load`` unpickles whatever the archive says
    to (weights or constants marked ``use_pickle``, opaque objects, sample inputs that are not
    plain tensors: code runs from the file); without ``trust_pickle`` those are found in the
    archive's configs first, and any unpickling torch still attempts is stopped."""
    refuse = ("pass --trust-pickle (trust_pickle=True) only if you trust this file "
              "(unpickling runs code from it), or re-save it with torch.export.save from a "
              "model whose weights are plain tensors")
    expected = ("a torch.export program whose weights, constants and sample inputs load "
                "without unpickling")
    if not trust_pickle:
        pickled = _pickled_export_payloads(path, where)
        if pickled:
            raise invalid(where, expected, f"{path} with pickled payloads {pickled[:4]}",
                          refuse)
    try:
        with (contextlib.nullcontext() if trust_pickle else _no_unpickling()):
            return torch.export.load(path).module()
    except _Unpickling:
        raise invalid(where, expected, f"{path}, whose sample inputs or constants need "
                      "unpickling", refuse) from None
    except Exception as exc:
        raise invalid(where, "a torch.export program (.pt2)", f"{path}: {exc}",
                      "save it with torch.export.save(torch.export.export(model, args), "
                      "path)") from None


def _pickled_export_payloads(path: Path, where: str) -> list[str]:
    """Entries of a .pt2 archive's weight and constant configs that torch would unpickle:
    marked ``use_pickle``, or constants that are not plain tensors (custom and opaque
    objects)."""
    from torch.export.pt2_archive.constants import TENSOR_CONSTANT_FILENAME_PREFIX

    found = []
    try:
        with zipfile.ZipFile(path) as archive:
            for name in archive.namelist():
                if not name.endswith("_config.json") or "/data/" not in name:
                    continue
                config = json.loads(archive.read(name)).get("config", {})
                constants = "/data/constants/" in name
                for key, meta in config.items():
                    if meta.get("use_pickle") or (constants and not str(
                            meta.get("path_name", "")).startswith(
                                TENSOR_CONSTANT_FILENAME_PREFIX)):
                        found.append(key)
    except (zipfile.BadZipFile, ValueError, AttributeError) as exc:
        raise invalid(where, "a torch.export program (.pt2, a zip archive)",
                      f"{path}: {exc}", "save it with torch.export.save") from None
    return found


@contextlib.contextmanager
def _no_unpickling():
    """``torch.load`` refuses ``weights_only=False`` inside (torch.export.load falls back to
    it for sample inputs that are not plain tensors)."""
    original = torch.load

    def guarded(*args, **kwargs):
        if kwargs.get("weights_only") is False:
            raise _Unpickling
        return original(*args, **kwargs)

    torch.load = guarded
    try:
        yield
    finally:
        torch.load = original


def _is_torchscript(path: Path) -> bool:
    """TorchScript archives (torch.jit.save) carry a ``constants.pkl`` and compiled ``code/``;
    plain torch.save archives do not."""
    if not zipfile.is_zipfile(path):
        return False
    with zipfile.ZipFile(path) as archive:
        return any(name.endswith("/constants.pkl") for name in archive.namelist())


def _build_mlp(options: dict, data: Optional[DataSource], seed: int) -> nn.Module:
    if data is not None:
        options.setdefault("d_in", data.width)
        options.setdefault("d_out", data.n_classes or 1)
    missing = [k for k in ("d_in", "width", "depth", "d_out") if k not in options]
    defaults = {"width": 100, "depth": 10}
    for key in missing:
        if key not in defaults:
            raise invalid("load_model()", f"{key} for the mlp (or data to take it from)",
                          "neither", f"add {key}=... to the spec or pass --data")
        options[key] = defaults[key]
    return mlp(generator=torch.Generator().manual_seed(seed), **options)


BUILTINS: dict[str, Callable] = {"mlp": _build_mlp}
_BUILTIN_KEYS = {"mlp": ("d_in", "width", "depth", "d_out", "activation", "norm", "skip",
                         "skip_start", "init", "sigma_w", "bias_std", "scale", "dropout")}


def _from_builtin(spec: str, data: Optional[DataSource], seed: int, where: str) -> nn.Module:
    name, options = split_spec(spec, where)
    valid = _BUILTIN_KEYS[name]
    unknown = sorted(set(options) - set(valid))
    if unknown:
        raise UnknownNameError(f"{where} expected keys of {name} in {list(valid)}; got "
                               f"{unknown}. Fix: use only the listed keys.")
    try:
        return BUILTINS[name](dict(options), data, seed)
    except TypeError as exc:
        raise invalid(where, f"values of the right type for {name}", str(exc),
                      "check the spec") from None


__all__ = ["BUILTINS", "load_model"]
