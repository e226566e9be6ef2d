"""Turn the command line's DATA string into a data set (``nngauge report``, the study runner).

DATA is ``waveform``, ``mnist1d[:n=...,seed=...]`` (MNIST-1D, 40 features, 10 classes; by
default the published 5,000 samples, its 4,000 training then 1,000 test samples), ``digits``
(64 features; ``digits:image`` for 1 x 8 x 8 images), ``gaussian:d=100[,n=...]`` or
``gaussian:shape=3x32x32[,n=...]`` (standard Gaussian inputs of that shape, for convolutional
networks), ``tokens:vocab=256,length=64[,n=...]`` (uniform random token ids with next-token
labels, for language models), a ``.npz`` / ``.pt`` file (integer inputs other than uint8
images stay token ids), or ``path/to/file.py:function``: the user's function, called with no
arguments (or with ``seed=`` when it takes one), returning ``(inputs, labels)`` tensors or
arrays, a mapping with ``inputs`` / ``labels``, a map-style ``Dataset`` of ``(input, label)``
items, or a ``DataLoader`` (any iterable of ``(inputs, labels)`` batches), gathered into one
pair of tensors.

The ``NAME:key=value,...`` syntax (:func:`split_spec`) is shared with the MODEL string's
built-in specs (:mod:`nngauge.nn._sources`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

import numpy as np
import torch

from nngauge.data._digits import digits
from nngauge.data._gaussian import gaussian
from nngauge.data._mnist1d import PUBLISHED_SEED, mnist1d
from nngauge.data._waveform import waveform_noise
from nngauge.errors import UnknownNameError, invalid

DEFAULT_N = 1000
"""Samples drawn from the generated data sets (waveform, gaussian, tokens) when n is not
given."""
MNIST1D_N = 5000
"""Samples of ``mnist1d`` when n is not given: the published data set (4,000 + 1,000)."""
DATA_FORMS = ("waveform", "mnist1d", "digits", "digits:image", "gaussian:d=100",
              "gaussian:shape=3x32x32", "tokens:vocab=256,length=64")
"""One example of each named DATA form, for messages."""


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


def load_data(spec: str, *, seed: int = 0, n: Optional[int] = None) -> DataSource:
    """Load DATA: ``waveform``, ``mnist1d``, ``digits`` / ``digits:image``,
    ``gaussian:d=100[,n=...]`` or ``gaussian:shape=3x32x32[,n=...]``, ``tokens:...``, a .npz or
    a .pt file, or ``path/to/file.py:function`` (the module docstring says what it may
    return).

    Args:
        spec: the DATA string.
        seed: seed of the generated data sets (waveform, gaussian, tokens); ``mnist1d`` keeps
            the published data set's seed (42) unless the spec says ``mnist1d:seed=...``.
        n: samples of the generated data sets (default ``DEFAULT_N``, ``MNIST1D_N`` for
            ``mnist1d``; a ``n=`` key in the spec wins), or a cap on the samples of the other
            sources.

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
                      f"pass {', '.join(DATA_FORMS)}, a .npz/.pt file or file.py:function")
    path = Path(spec)
    name, _, rest = spec.partition(":")
    if name.endswith(".py"):
        inputs, labels = _from_function(spec, seed, where)
        if n is not None:
            inputs, labels = inputs[:n], None if labels is None else labels[:n]
        return _checked(inputs, labels, spec, where)
    parts = _top_level_split(rest)
    flags = [part.strip() for part in parts if "=" not in part]
    name, options = split_spec(":".join([name] + [",".join(p for p in parts if "=" in p)]),
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
    data = waveform_noise(int(options.get("n", n or DEFAULT_N)), generator=seed)
    return data.inputs, data.labels


def _mnist1d(options: dict, *, seed: int, n: Optional[int], where: str):
    """MNIST-1D's n samples (training then test order: the published set by default); the
    spec's ``seed=`` replaces the published seed, not the caller's ``seed``."""
    _no_options(options, ("n", "seed"), "mnist1d", where)
    data = mnist1d(int(options.get("n", n or MNIST1D_N)), 0,
                   generator=int(options.get("seed", PUBLISHED_SEED))).train
    return data.inputs, data.labels


def _digits(options: dict, *, seed: int, n: Optional[int], where: str, layout: str = ""):
    _no_options(options, ("n",), "digits", where)
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


_DATASETS: dict[str, Callable] = {"waveform": _waveform, "mnist1d": _mnist1d, "digits": _digits,
                                  "gaussian": _gaussian, "tokens": _tokens}
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


def _from_function(spec: str, seed: int, where: str):
    """(inputs, labels) of the user's data function ``path/to/file.py:function`` (module
    docstring): called with ``seed=seed`` when it takes a ``seed`` keyword."""
    import inspect

    from nngauge._user_code import load_function

    function = load_function(spec, where, what="data")
    try:
        takes_seed = "seed" in inspect.signature(function).parameters
    except (TypeError, ValueError):
        takes_seed = False
    try:
        made = function(seed=seed) if takes_seed else function()
    except Exception as exc:  # the user's function: say which and what it raised
        raise invalid(where, f"the data function {spec!r} to return data", f"it raised "
                      f"{type(exc).__name__}: {exc}", "run it by hand to see the traceback"
                      ) from None
    if isinstance(made, dict):
        return _from_mapping(made, spec, where)
    if isinstance(made, (tuple, list)) and len(made) == 2 and not _is_batches(made):
        return made[0], made[1]
    if hasattr(made, "__getitem__") and hasattr(made, "__len__"):  # a map-style Dataset
        return _gathered([made[i] for i in range(len(made))], spec, where, stack=True)
    if hasattr(made, "__iter__"):  # a DataLoader, or any iterable of batches
        return _gathered(list(made), spec, where, stack=False)
    raise invalid(where, "a data function returning (inputs, labels), a Dataset or a "
                  "DataLoader", f"{spec!r} returned {type(made).__name__}",
                  "return e.g. (torch.randn(500, 20), torch.randint(0, 3, (500,)))")


def _is_batches(pair) -> bool:
    """Whether a pair holds two loaders (or datasets) rather than (inputs, labels)."""
    return all(not torch.is_tensor(v) and not isinstance(v, np.ndarray)
               and hasattr(v, "__iter__") and not isinstance(v, (list, tuple)) for v in pair)


def _gathered(items: list, spec: str, where: str, *, stack: bool):
    """One (inputs, labels) pair from a Dataset's items (``stack``) or a loader's batches."""
    if not items:
        raise invalid(where, "data with at least 2 samples", f"{spec!r} gave none",
                      "return a non-empty data set")
    pairs = [item if isinstance(item, (tuple, list)) else (item,) for item in items]
    if any(len(p) not in (1, 2) for p in pairs) or len({len(p) for p in pairs}) != 1:
        raise invalid(where, "items or batches (input, label) or input alone",
                      f"{spec!r} gave items of {len(pairs[0])} parts",
                      "return (input, label) from __getitem__, or batches (inputs, labels)")
    join = torch.stack if stack else torch.cat
    columns = [join([torch.as_tensor(p[i]) for p in pairs]) for i in range(len(pairs[0]))]
    return columns[0], columns[1] if len(columns) == 2 else None


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


def split_spec(spec: str, where: str) -> tuple[str, dict[str, Any]]:
    """``name:key=value,key=value`` -> (name, {key: parsed value}: None, a bool, an int, a
    float or the text); commas inside parentheses (``activation=leaky_relu(negative_slope=0.2)``)
    do not split."""
    name, _, rest = spec.partition(":")
    options: dict[str, Any] = {}
    for item in _top_level_split(rest):
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise invalid(where, "key=value options after the name", repr(item),
                          "write e.g. mlp:depth=10,width=100")
        options[key.strip()] = parse_value(value.strip())
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


def parse_value(text: str) -> Any:
    """A ``key=value`` value: None, a bool, an int, a finite float, else the text."""
    if text.lower() in ("none", "null"):
        return None
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
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


__all__ = ["DATA_FORMS", "DEFAULT_N", "MNIST1D_N", "DataSource", "load_data", "split_spec"]
