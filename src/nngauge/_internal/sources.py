"""Turn the command line's MODEL and DATA strings into a module and a data set.

Shared by ``nngauge report`` and the study runner. MODEL is one of

- ``path/to/file.py:function``: the function is called with no arguments and must return an
  ``nn.Module``;
- a saved module: TorchScript (``torch.jit.save``), a ``torch.export`` program (``.pt2``), or a
  pickled ``nn.Module`` (``torch.save(model)``), the last only with ``trust_pickle=True``
  because unpickling runs arbitrary code;
- a built-in spec ``NAME[:key=value,...]``, e.g. ``mlp:depth=20,width=100,activation=relu``,
  whose keys are the keyword arguments of the builder (``d_in`` / ``d_out`` default to the
  data's width and number of classes).

DATA is ``waveform``, ``digits`` (64 features; ``digits:image`` for 1 x 8 x 8 images),
``gaussian:d=100[,n=...]`` or ``gaussian:shape=3x32x32[,n=...]`` (standard Gaussian inputs of
that shape, for convolutional networks), ``tokens:vocab=256,length=64[,n=...]`` (uniform
random token ids with next-token labels, for language models), or a ``.npz`` / ``.pt`` file
(integer inputs other than uint8 images stay token ids).
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import math
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

import numpy as np
import torch
from torch import nn

from nngauge.errors import NNGaugeError, UnknownNameError, invalid

DEFAULT_N = 1000
"""Samples drawn from the generated data sets (waveform, gaussian) when n is not given."""


@dataclass(frozen=True)
class DataSource:
    """Inputs (n, ...) float32, optional integer labels (n,), and the spec they came from."""

    inputs: torch.Tensor
    labels: Optional[torch.Tensor]
    spec: str

    @property
    def width(self) -> int:
        """Features per sample (numel of one input)."""
        return int(self.inputs[0].numel())

    @property
    def n_classes(self) -> Optional[int]:
        """max label + 1 for integer labels (the vocabulary for next-token labels), else
        None."""
        if self.labels is None or self.labels.is_floating_point() or not len(self.labels):
            return None
        return int(self.labels.max()) + 1

    def as_pair(self) -> Any:
        """``(inputs, labels)`` or the inputs alone: the form measures accept."""
        return self.inputs if self.labels is None else (self.inputs, self.labels)


# ---------------------------------------------------------------------------------------- data


def load_data(spec: str, *, seed: int = 0, n: Optional[int] = None) -> DataSource:
    """Load DATA: ``waveform``, ``digits`` / ``digits:image``, ``gaussian:d=100[,n=...]`` or
    ``gaussian:shape=3x32x32[,n=...]``, a .npz or a .pt file.

    Args:
        spec: the DATA string.
        seed: seed of the generated data sets (waveform, gaussian).
        n: samples of the generated data sets (default ``DEFAULT_N``; a ``n=`` key in the
            spec wins), or a cap on the samples of the other sources.

    Returns:
        A :class:`DataSource`.

    Example:
        >>> import numpy as np, tempfile, os
        >>> path = os.path.join(tempfile.mkdtemp(), "d.npz")
        >>> np.savez(path, x=np.ones((5, 3)), y=np.arange(5))
        >>> src = load_data(path)
        >>> src.width, src.n_classes
        (3, 5)
    """
    where = "load_data()"
    if not isinstance(spec, str) or not spec.strip():
        raise invalid(where, "a DATA string", repr(spec),
                      "pass waveform, digits, digits:image, gaussian:d=100, "
                      "gaussian:shape=3x32x32 or a .npz/.pt file")
    path = Path(spec)
    name, _, rest = spec.partition(":")
    parts = _top_level_split(rest)
    flags = [part.strip() for part in parts if "=" not in part]
    name, options = _split_spec(":".join([name] + [",".join(p for p in parts if "=" in p)]),
                                where)
    if flags and name != "digits":
        raise invalid(where, "key=value options", f"{flags} in {spec!r}",
                      "write e.g. gaussian:shape=3x32x32,n=500")
    if path.suffix in (".npz", ".pt", ".pth"):
        inputs, labels = _load_data_file(path, where)
    elif name == "digits":
        inputs, labels = _digits(options, seed=seed, n=n, where=where, layout=",".join(flags))
    elif name in _DATASETS:
        inputs, labels = _DATASETS[name](options, seed=seed, n=n, where=where)
    else:
        raise UnknownNameError(
            f"{where} expected a data set in {sorted(_DATASETS)} or a .npz/.pt file; got "
            f"{spec!r}. Fix: use e.g. 'gaussian:d=100' or the path of a saved file.")
    if n is not None and name not in _DATASETS:
        inputs, labels = inputs[:n], None if labels is None else labels[:n]
    return _checked(inputs, labels, spec, where)


def _waveform(options: dict, *, seed: int, n: Optional[int], where: str):
    _no_options(options, ("n",), "waveform", where)
    from nngauge.data import waveform_noise

    data = waveform_noise(int(options.get("n", n or DEFAULT_N)), generator=seed)
    return data.inputs, data.labels


def _digits(options: dict, *, seed: int, n: Optional[int], where: str, layout: str = ""):
    _no_options(options, ("n",), "digits", where)
    from nngauge.data import digits

    data = digits()
    limit = options.get("n", n)
    inputs, labels = ((data.inputs, data.labels) if limit is None
                      else (data.inputs[:int(limit)], data.labels[:int(limit)]))
    if layout == "image":
        inputs = inputs.reshape(len(inputs), 1, 8, 8)
    elif layout:
        raise invalid(where, "digits or digits:image", f"digits:{layout}",
                      "use digits (64 features) or digits:image (1 x 8 x 8 images)")
    return inputs, labels


def _gaussian(options: dict, *, seed: int, n: Optional[int], where: str):
    _no_options(options, ("d", "shape", "n", "n_classes"), "gaussian", where)
    shape = _shape(options, where)
    from nngauge.data import gaussian

    data = gaussian(int(options.get("n", n or DEFAULT_N)), math.prod(shape), generator=seed,
                    n_classes=int(options.get("n_classes", 2)))
    return data.inputs.reshape(len(data.inputs), *shape), data.labels


def _shape(options: dict, where: str) -> tuple[int, ...]:
    """One sample's shape from ``d=WIDTH`` or ``shape=CxHxW``."""
    if ("d" in options) == ("shape" in options):
        raise invalid(where, "gaussian:d=WIDTH or gaussian:shape=CxHxW (one of the two)",
                      f"options {sorted(options)}", "e.g. gaussian:d=100 or "
                      "gaussian:shape=3x32x32")
    text = str(options.get("shape", options.get("d")))
    try:
        shape = tuple(int(part) for part in text.lower().split("x"))
    except ValueError:
        shape = ()
    if not shape or any(size < 1 for size in shape):
        raise invalid(where, "positive sizes separated by x (e.g. 3x32x32)", repr(text),
                      "write the shape of one sample, e.g. shape=3x32x32")
    return shape


def _tokens(options: dict, *, seed: int, n: Optional[int], where: str):
    _no_options(options, ("vocab", "length", "n"), "tokens", where)
    missing = [k for k in ("vocab", "length") if k not in options]
    if missing or any(int(options[k]) < 2 for k in ("vocab", "length") if k in options):
        raise invalid(where, "tokens:vocab=V,length=L with V, L >= 2", f"options {options}",
                      "e.g. tokens:vocab=256,length=64")
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, int(options["vocab"]),
                        (int(options.get("n", n or DEFAULT_N)), int(options["length"])),
                        generator=generator)
    return ids, torch.roll(ids, -1, dims=1)


_DATASETS: dict[str, Callable] = {"waveform": _waveform, "digits": _digits, "gaussian": _gaussian,
                                  "tokens": _tokens}
_INPUT_KEYS = ("inputs", "x", "X")
_LABEL_KEYS = ("labels", "y")


def _load_data_file(path: Path, where: str):
    if not path.is_file():
        raise invalid(where, "an existing data file", f"{str(path)!r} (not found)",
                      "check the path")
    if path.suffix == ".npz":
        try:
            archive = np.load(path, allow_pickle=False)
        except Exception as exc:
            raise invalid(where, "a readable .npz file", f"{path}: {exc}", "re-save it with "
                          "numpy.savez(path, inputs=..., labels=...)") from None
        return _from_mapping(dict(archive), str(path), where)
    try:
        loaded = torch.load(path, weights_only=True, map_location="cpu")
    except Exception as exc:
        raise invalid(where, "a .pt file of tensors (loaded with weights_only=True)",
                      f"{path}: {str(exc).splitlines()[0]}",
                      "save tensors only: torch.save({'inputs': x, 'labels': y}, path)") from None
    if isinstance(loaded, dict):
        return _from_mapping(loaded, str(path), where)
    if isinstance(loaded, (tuple, list)) and len(loaded) == 2:
        return loaded[0], loaded[1]
    return loaded, None


def _from_mapping(mapping: dict, name: str, where: str):
    inputs = next((mapping[k] for k in _INPUT_KEYS if k in mapping), None)
    if inputs is None:
        raise invalid(where, f"inputs under one of the keys {list(_INPUT_KEYS)}",
                      f"{name} with keys {sorted(mapping)}", "save the inputs as 'inputs'")
    labels = next((mapping[k] for k in _LABEL_KEYS if k in mapping), None)
    return inputs, labels


def _checked(inputs: Any, labels: Any, spec: str, where: str) -> DataSource:
    try:
        x = torch.as_tensor(np.asarray(inputs) if not torch.is_tensor(inputs) else inputs)
    except Exception as exc:
        raise invalid(where, "numeric inputs", f"{type(inputs).__name__}: {exc}",
                      "store a float array") from None
    if x.dim() < 2 or len(x) < 2:
        raise invalid(where, "inputs of shape (n >= 2, features...)", f"shape {tuple(x.shape)}",
                      "store one sample per row, at least 2 samples")
    if not (x.is_floating_point() or x.dtype in (torch.int32, torch.int64, torch.uint8)):
        raise invalid(where, "numeric inputs", f"dtype {x.dtype}", "store a float array")
    # floats and uint8 images are measured as float32; other integers are token ids
    x = x.long() if x.dtype in (torch.int32, torch.int64) else x.to(torch.float32)
    y = None
    if labels is not None:
        y = torch.as_tensor(np.asarray(labels) if not torch.is_tensor(labels) else labels)
        if len(y) != len(x):
            raise invalid(where, "one label per sample", f"{len(y)} labels for {len(x)} "
                          "samples", "store labels of the same length as the inputs")
    return DataSource(inputs=x, labels=y, spec=spec)


# --------------------------------------------------------------------------------------- model


def load_model(spec: str, *, data: Optional[DataSource] = None, trust_pickle: bool = False,
               seed: int = 0) -> nn.Module:
    """Load MODEL: ``file.py:function``, a saved module, or a built-in spec.

    Args:
        spec: the MODEL string (module docstring).
        data: the data, for the defaults of built-ins (``d_in``: its width, ``d_out``: its
            number of classes, or 1 without labels).
        trust_pickle: allow unpickling a full ``nn.Module`` (runs code from the file: only for
            files you trust).
        seed: seed of a built-in's random initialization.

    Returns:
        The ``nn.Module``.

    Example:
        >>> net = load_model("mlp:d_in=4,width=8,depth=3,d_out=2,activation=tanh")
        >>> type(net).__name__, net.config.depth
        ('MLP', 3)
    """
    where = "load_model()"
    if not isinstance(spec, str) or not spec.strip():
        raise invalid(where, "a MODEL string", repr(spec),
                      "pass file.py:function, a saved .pt/.pt2 module or e.g. mlp:depth=10")
    head = spec.split(":", 1)[0]
    if head.endswith(".py"):
        return _from_python(spec, where)
    if Path(spec).suffix in (".pt", ".pth", ".pt2", ".ts"):
        return _from_saved(Path(spec), trust_pickle, where)
    if head in BUILTINS:
        return _from_builtin(spec, data, seed, where)
    raise UnknownNameError(
        f"{where} expected file.py:function, a saved .pt/.pth/.pt2 module, or a built-in in "
        f"{sorted(BUILTINS)}; got {spec!r}. Fix: e.g. 'mlp:depth=10,width=100,activation=relu'.")


def _from_python(spec: str, where: str) -> nn.Module:
    file, _, function = spec.partition(":")
    path = Path(file)
    if not function:
        raise invalid(where, "path/to/file.py:function", repr(spec),
                      "name the function that builds the model after a colon")
    if not path.is_file():
        raise invalid(where, "an existing model file", f"{file!r} (not found)", "check the path")
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
    try:
        loaded = torch.load(path, weights_only=True, map_location="cpu")
    except Exception:
        if not trust_pickle:
            raise invalid(where, "a TorchScript or torch.export file, or a pickled module "
                          "explicitly trusted", f"{path}, a pickle that needs code to load",
                          "pass --trust-pickle (trust_pickle=True) if you trust this file: "
                          "unpickling runs arbitrary code") from None
        try:
            loaded = torch.load(path, weights_only=False, map_location="cpu")
        except Exception as exc:
            raise invalid(where, "a loadable torch.save file", f"{path}: {exc}",
                          "load it in Python to see why") from None
    if isinstance(loaded, nn.Module):
        return loaded
    raise invalid(where, "a saved nn.Module", f"{path} holding a {type(loaded).__name__} "
                  "(weights without the architecture)" if isinstance(loaded, dict)
                  else f"{path} holding a {type(loaded).__name__}",
                  "write file.py with a function that builds the model and loads these "
                  "weights, and pass file.py:function")


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
    from nngauge.nn import mlp

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
                         "skip_start", "init", "sigma_w", "bias_std", "scale")}


def _from_builtin(spec: str, data: Optional[DataSource], seed: int, where: str) -> nn.Module:
    name, options = _split_spec(spec, where)
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


def _split_spec(spec: str, where: str) -> tuple[str, dict[str, Any]]:
    """``name:key=value,key=value`` -> (name, {key: parsed value}); commas inside
    parentheses (``activation=leaky_relu(negative_slope=0.2)``) do not split."""
    name, _, rest = spec.partition(":")
    options: dict[str, Any] = {}
    for item in _top_level_split(rest):
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise invalid(where, "key=value options after the name", repr(item),
                          "write e.g. mlp:depth=10,width=100")
        options[key.strip()] = _parse_value(value.strip())
    return name.strip(), options


def _top_level_split(text: str) -> list[str]:
    parts, depth, current = [], 0, ""
    for char in text:
        depth += char == "("
        depth -= char == ")"
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    if current.strip():
        parts.append(current)
    return [p for p in parts if p.strip()]


def _parse_value(text: str) -> Any:
    if text.lower() in ("none", "null"):
        return None
    for kind in (int, float):
        try:
            value = kind(text)
        except ValueError:
            continue
        return value if kind is int or math.isfinite(value) else text
    return text


def _no_options(options: dict, allowed: tuple[str, ...], name: str, where: str) -> None:
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        raise UnknownNameError(f"{where} expected options of {name} in {list(allowed)}; got "
                               f"{unknown}. Fix: drop them.")


__all__ = ["BUILTINS", "DEFAULT_N", "DataSource", "load_data", "load_model"]
