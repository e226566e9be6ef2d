"""The ecosystem's model names as MODEL strings (``nngauge report timm:resnet50 ...``).

- ``timm:NAME[:key=value,...]``: ``timm.create_model(NAME, pretrained=False, **options)``;
- ``torchvision:NAME[:key=value,...]``: ``torchvision.models.get_model(NAME, weights=None,
  **options)`` (and ``weights_backbone=None`` where the builder has one);
- ``hf:path/to/folder``: a folder written by Hugging Face's ``save_pretrained`` (its
  ``config.json`` and ``*.safetensors``), built as the class its config names
  (``architectures``; ``AutoModel`` otherwise) from that folder alone, in float32.

The options are the builder's keyword arguments, in the ``NAME:key=value,...`` syntax of the
built-in specs (:func:`nngauge.data._sources.split_spec`). Nothing is downloaded: the networks
are randomly initialized (seeded, without touching the caller's random state) unless local
weights are given (an ``hf:`` folder's safetensors, or ``--weights``). The Hub's offline switches
(``HF_HUB_OFFLINE``, ``TRANSFORMERS_OFFLINE``) are set while timm or transformers load and
build; ``huggingface_hub`` reads them when first imported, so in a process that imported it
before, ``local_files_only=True`` and the folder check are what keep ``hf:`` local. Each source
needs its package, imported only here and only when used.
"""

from __future__ import annotations

import contextlib
import difflib
import inspect
import os
from pathlib import Path
from typing import Callable, Iterable

import torch
from torch import nn

from nngauge.data._sources import split_spec
from nngauge.errors import NNGaugeError, UnknownNameError, invalid, require_extra

SOURCES = ("timm", "torchvision", "hf")
"""The MODEL prefixes this module loads."""
PICKLE_SUFFIXES = (".pt", ".pth", ".bin", ".ckpt")
"""Files written by ``torch.save`` (pickles): loaded only under the ``--trust-pickle`` rule."""
TIMM_INSTALL = ("pip install 'nngauge[timm]' (timm requires torchvision: install the "
                "torchvision built for your torch first, or pip may replace your torch)")
TORCHVISION_INSTALL = ("pip install torchvision (the release built for your torch; nngauge "
                       "has no extra for it)")
_OFFLINE = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
_TIMM_SOURCES = ("hf-hub", "hf_hub", "local-dir")
"""timm's own prefixes that fetch a model (``timm.create_model("hf-hub:...")``)."""
_DOWNLOADING = {"timm": ("pretrained", "pretrained_cfg", "pretrained_cfg_overlay",
                         "checkpoint_path", "cache_dir"),
                "torchvision": ("weights", "weights_backbone")}
"""Builder options that fetch or read weights, which nngauge sets itself."""


def load_ecosystem(spec: str, *, seed: int, weights_given: bool, where: str) -> nn.Module:
    """The module named by a ``timm:``, ``torchvision:`` or ``hf:`` MODEL string (module
    docstring); ``weights_given``: ``--weights`` will load the weights, so an ``hf:`` folder's
    own weights are neither needed nor read."""
    source, _, rest = spec.partition(":")
    if source == "hf":
        return _from_hf(rest, seed, weights_given, where)
    name, _, options_text = rest.partition(":")
    name = name.strip()
    if not name or name in _TIMM_SOURCES:
        raise invalid(where, f"{source}:NAME[:key=value,...] with the name of an architecture",
                      repr(spec), f"e.g. {source}:resnet18 (nngauge never downloads: pass "
                      "local weights with --weights FILE.safetensors)")
    _, options = split_spec(f"{source}:{options_text}", where)
    refused = sorted(set(options) & set(_DOWNLOADING[source]))
    if refused:
        raise invalid(where, f"options of the {source} builder other than {refused}",
                      f"{spec!r}", "nngauge builds the network randomly initialized and never "
                      "downloads: drop them and pass local weights with --weights FILE")
    build = _timm if source == "timm" else _torchvision
    return build(name, options, seed, where)


def _timm(name: str, options: dict, seed: int, where: str) -> nn.Module:
    with _offline():
        timm = require_extra("timm", "timm", f"MODEL timm:{name}", install=TIMM_INSTALL)
        if not timm.is_model(name):
            raise _unknown(where, "timm", name, timm.list_models(),
                           "python -c 'import timm; print(timm.list_models(\"*resnet*\"))'")
        return _built(lambda: timm.create_model(name, pretrained=False, **options), seed,
                      where, "timm.create_model")


def _torchvision(name: str, options: dict, seed: int, where: str) -> nn.Module:
    models = require_extra("torchvision.models", "", f"MODEL torchvision:{name}",
                           install=TORCHVISION_INSTALL)
    names = models.list_models()
    if name not in names:
        raise _unknown(where, "torchvision", name, names,
                       "python -c 'import torchvision; print(torchvision.models.list_models())'")
    if "weights_backbone" in inspect.signature(models.get_model_builder(name)).parameters:
        options["weights_backbone"] = None  # its default fetches ImageNet weights
    return _built(lambda: models.get_model(name, weights=None, **options), seed, where,
                  "torchvision.models.get_model")


def _from_hf(folder_text: str, seed: int, weights_given: bool, where: str) -> nn.Module:
    folder = Path(folder_text)
    expected = "hf:FOLDER, a local folder written by save_pretrained (config.json, *.safetensors)"
    if not folder_text or not folder.is_dir():
        raise invalid(where, expected, f"hf:{folder_text} (not a folder)",
                      "nngauge never downloads: on a machine with the network, save the model "
                      "with AutoModel.from_pretrained(NAME).save_pretrained(FOLDER), then pass "
                      "hf:FOLDER")
    if not (folder / "config.json").is_file():
        raise invalid(where, expected, f"hf:{folder_text} (no config.json in it)",
                      "pass the folder save_pretrained wrote")
    stored = sorted(folder.glob("*.safetensors"))
    pickled = sorted(p.name for p in folder.iterdir() if p.suffix in PICKLE_SUFFIXES)
    if pickled and not stored and not weights_given:
        raise invalid(where, expected, f"hf:{folder_text} whose weights are pickles {pickled}",
                      "re-save it with save_pretrained (it writes safetensors), or pass "
                      f"--weights {folder / pickled[0]} (a pickle needing code to load needs "
                      "--trust-pickle)")
    with _offline():
        transformers = require_extra("transformers", "hf", f"MODEL hf:{folder_text}")
        try:
            config = transformers.AutoConfig.from_pretrained(folder, local_files_only=True)
        except Exception as exc:
            raise NNGaugeError(f"{where}: reading {folder / 'config.json'} raised "
                               f"{type(exc).__name__}: {exc}. Fix: pass a folder written by "
                               "save_pretrained with this transformers version.") from exc
        named = getattr(transformers, (getattr(config, "architectures", None) or [""])[0], None)
        auto = not (isinstance(named, type) and issubclass(named, transformers.PreTrainedModel))
        cls = transformers.AutoModel if auto else named
        if stored and not weights_given:
            model = _built(lambda: cls.from_pretrained(folder, local_files_only=True,
                                                       use_safetensors=True), seed, where,
                           f"{cls.__name__}.from_pretrained")
        else:
            model = _built(lambda: cls.from_config(config) if auto else cls(config), seed,
                           where, f"{cls.__name__}(config)")
    return model.float()


def _built(make: Callable[[], nn.Module], seed: int, where: str, call: str) -> nn.Module:
    """``make()`` with the global generators seeded by ``seed`` inside (the caller's random
    state is restored after); its errors as one line naming the call."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        try:
            model = make()
        except Exception as exc:
            raise NNGaugeError(f"{where}: {call} raised {type(exc).__name__}: {exc}. Fix: check "
                               "the options after the name (passed as keyword arguments)."
                               ) from exc
    if not isinstance(model, nn.Module):
        raise invalid(where, f"{call} to return a torch.nn.Module", type(model).__name__,
                      "pass the name of a network")
    return model


def _unknown(where: str, source: str, name: str, names: Iterable[str], listing: str
             ) -> UnknownNameError:
    close = difflib.get_close_matches(name, list(names), n=5)
    return UnknownNameError(f"{where} expected a {source} model name; got {name!r}. Fix: "
                            + (f"did you mean {close}? " if close else "")
                            + f"list the names with {listing}.")


@contextlib.contextmanager
def _offline():
    """The Hub's offline switches on inside, as they were after."""
    saved = {key: os.environ.get(key) for key in _OFFLINE}
    os.environ.update({key: "1" for key in _OFFLINE})
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


__all__ = ["PICKLE_SUFFIXES", "SOURCES", "load_ecosystem"]
