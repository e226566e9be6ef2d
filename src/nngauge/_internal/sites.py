"""Sites: the places where a forward pass computes something a measure can read.

A *site* is one call of one submodule during one forward pass. A module called once is one
site named by its module name; a module called k > 1 times per forward pass (torchvision's
ResNet calls each block's single ``relu`` twice) gives the k sites ``"name#1"`` ...
``"name#k"`` in call order. Every measure reads layers through sites, so all of them treat a
reused module the same way (and :mod:`nngauge._internal.graph` names its nodes alike).

Values are recorded as clones: an in-place activation (``nn.ReLU(inplace=True)``, timm's
default) overwrites the tensor a hook saw, while the clone keeps the value, and the autograd
path to the input, of the moment the module returned (or, for inputs, was called).

Kinds: linear, conv, norm, activation and pool for torch's classes and their subclasses (and
modules marked ``is_activation``); for other leaf modules the kind comes from their behaviour
on the input they received (:mod:`nngauge._internal.behaviour`): an elementwise nonlinearity
is an activation (timm's and Hugging Face's GELU classes, a user's Swish), an affine map with
a weight is linear (GPT-2's Conv1D); modules with children are blocks; the rest is "other",
and results list those leaves as ``unclassified``, except torch's no-op and reshape modules
(Identity, Flatten, Unflatten, Dropout, ...), which are known to do nothing a measure reads.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Literal, Optional, Sequence

import torch
from torch import nn

from nngauge._internal.behaviour import classify_behaviour
from nngauge._internal.graph import FunctionSite, site_name
from nngauge._internal.layers import layer_kind, passthrough
from nngauge.errors import invalid

SiteKind = Literal["linear", "conv", "norm", "activation", "pool", "block", "other"]


@dataclass(frozen=True)
class Site:
    """One call of one submodule in a forward pass.

    Attributes:
        name: ``module_name`` for a module called once, ``"module_name#k"`` for its k-th call.
        module_name: the name in ``model.named_modules()``.
        module: the module (not compared, not printed).
        call: 1-based index of this call among the module's calls in one forward pass.
        calls: how many times the module is called per forward pass (0: a module the
            forward pass never calls, named by the user).
        kind: see the module docstring.
        type_name: the module's class name (``"function relu"`` for an activation function
            made a site, :class:`~nngauge._internal.graph.FunctionSite`).
        leaf: whether the module has no children.
    """

    name: str
    module_name: str
    module: nn.Module = field(repr=False, compare=False)
    call: int = 1
    calls: int = 1
    kind: SiteKind = "other"
    type_name: str = ""
    leaf: bool = True

    @property
    def label(self) -> str:
        """``"name (Type)"``, the name with its module type, as reports show it."""
        return f"{self.name} ({self.type_name})"

    @property
    def depth(self) -> int:
        """Nesting depth of the module (1 for a child of the model)."""
        return self.module_name.count(".") + 1


class _Stop(Exception):
    """Raised by a recording hook to end a forward pass early (see :meth:`SiteRecorder.run`)."""


@contextmanager
def _hooks(model: nn.Module, on_call: Callable[[str, nn.Module, int, Any, Any], None],
           *, before: bool) -> Iterator[None]:
    """Hooks on every submodule calling ``on_call(name, module, call, args, output)`` with the
    1-based call index of the module within the current forward pass (``output`` is None for
    ``before=True``, which fires as the module is called). Counters restart with each forward
    pass of ``model``. Removed on exit, also on error."""
    counts: Counter = Counter()
    handles = [model.register_forward_pre_hook(lambda module, args: counts.clear())]
    try:
        for name, module in model.named_modules():
            if not name:
                continue

            def hook(module, args, output=None, _name=name):
                if before or output is not None:
                    counts[_name] += 1
                    on_call(_name, module, counts[_name], args, output)

            handles.append(module.register_forward_pre_hook(hook) if before
                           else module.register_forward_hook(hook))
        yield
    finally:
        for handle in handles:
            handle.remove()


def first_tensor(value: Any) -> Optional[torch.Tensor]:
    """A tensor, or the first tensor of a (nested) tuple, list or dict; None if there is none."""
    if isinstance(value, torch.Tensor):
        return value
    items = value.values() if isinstance(value, dict) else value if isinstance(
        value, (tuple, list)) else ()
    for item in items:
        found = first_tensor(item)
        if found is not None:
            return found
    return None


def discover_sites(model: nn.Module, forward: Callable[[], Any]) -> tuple[Site, ...]:
    """Every site of ``model``, in the order the calls return, found by running ``forward()``
    (one forward pass of ``model``) once with hooks."""
    order: list[tuple[str, nn.Module, int, Optional[torch.Tensor]]] = []

    def record(name, module, call, args, output):
        sample = first_tensor(args) if call == 1 else None
        order.append((name, module, call, None if sample is None else sample.detach().clone()))

    with _hooks(model, record, before=False):
        forward()
    calls = Counter(name for name, _, _, _ in order)
    sites = []
    for name, module, call, sample in order:
        leaf = not any(True for _ in module.children())
        kind = _kind(module, leaf, sample) if call == 1 else next(
            s.kind for s in sites if s.module_name == name)
        type_name = (f"function {module.function}" if isinstance(module, FunctionSite)
                     else type(module).__name__)
        sites.append(Site(site_name(name, call, calls[name]), name, module, call, calls[name],
                          kind, type_name, leaf))
    return tuple(sites)


def _kind(module: nn.Module, leaf: bool, sample: Optional[torch.Tensor]) -> SiteKind:
    kind = layer_kind(module)
    if kind != "other":
        return kind
    if not leaf:
        return "block"
    if type(module).__module__.startswith("torch."):
        return "other"
    behaviour = classify_behaviour(module, sample)
    if behaviour == "activation":
        return "activation"
    if behaviour == "affine" and isinstance(getattr(module, "weight", None), torch.Tensor):
        return "linear"
    return "other"


def unclassified(sites: Sequence[Site]) -> tuple[str, ...]:
    """Labels of the leaf modules no kind could be given to (reported by every result); torch's
    no-op and reshape modules (:func:`~nngauge._internal.layers.passthrough`) are known."""
    seen = dict.fromkeys(s.module_name + f" ({s.type_name})" for s in sites
                         if s.leaf and s.kind == "other" and not passthrough(s.module))
    return tuple(seen)


def resolve_sites(model: nn.Module, sites: Sequence[Site], names: Optional[Sequence[str]], *,
                  default_kinds: Sequence[SiteKind], where: str) -> list[Site]:
    """The sites a measure reads: those named in ``names`` (a site name, or a module name
    standing for all its calls), or by default every site of ``default_kinds``. A module of
    ``model`` that the forward pass never calls gives a site with ``calls == 0`` (measures
    report it as not called)."""
    if names is None:
        return [s for s in sites if s.kind in default_kinds]
    names = [names] if isinstance(names, str) else list(names)
    modules = dict(model.named_modules())
    by_module: dict[str, list[Site]] = defaultdict(list)
    for s in sites:
        by_module[s.module_name].append(s)
    chosen, unknown = [], []
    for name in names:
        matches = [s for s in sites if s.name == name] or by_module.get(name, [])
        if not matches and name in modules and name:
            module = modules[name]
            matches = [Site(name, name, module, 1, 0, "other", type(module).__name__)]
        if not matches:
            unknown.append(name)
        chosen.extend(m for m in matches if m not in chosen)
    if unknown:
        raise invalid(where, "layer names from model.named_modules() (a module called k times "
                      "per forward pass has the sites 'name#1'..'name#k')", f"{unknown}",
                      f"use names such as {[s.name for s in sites][:20]}")
    order = {s.name: i for i, s in enumerate(sites)}
    return sorted(chosen, key=lambda s: order.get(s.name, len(order)))


CONTAINERS = (nn.Sequential, nn.ModuleList, nn.ModuleDict)


def block_sites(model: nn.Module, sites: Sequence[Site], kinds: Sequence[SiteKind],
                limit: int = 50) -> tuple[list[Site], bool]:
    """At most about ``limit`` sites to plot a deep network by: the sites of ``kinds`` when
    there are at most ``limit``, else one per block plus the sites of ``kinds`` outside any
    block (stem, head), evenly thinned (first and last kept) if still over ``limit``.

    A block is a module with children held by an nn.Sequential / ModuleList / ModuleDict (a
    residual block, a transformer layer): its own output when the forward pass calls it, else
    (a plain container whose children the parent calls one by one, as nngauge's MLP does) the
    last site of ``kinds`` inside it. Returns the sites, in forward order, and whether they
    were grouped."""
    chosen = [s for s in sites if s.kind in kinds]
    if len(chosen) <= limit:
        return chosen, False
    modules = dict(model.named_modules())
    blocks = {name for name, module in modules.items() if any(True for _ in module.children())
              and isinstance(modules.get(name.rpartition(".")[0]), CONTAINERS) and name}
    outside: set[str] = set()
    by_block: dict[str, Site] = {}  # one site per block, replaced as the forward pass goes on
    for site in sites:
        owner = _owner(site.module_name, blocks)
        if owner is None:
            if site.kind in kinds:
                outside.add(site.name)
            continue
        current = by_block.get(owner)
        block_output = current is not None and not current.leaf and current.module_name == owner
        if site.module_name == owner or (site.kind in kinds and not block_output):
            by_block[owner] = site
    keep = outside | {site.name for site in by_block.values()}
    return evenly_thinned([s for s in sites if s.name in keep], limit), True


def evenly_thinned(items: Sequence, limit: int) -> list:
    """At most ``limit`` of ``items``, evenly spaced, the first and the last kept."""
    items = list(items)
    if len(items) <= limit:
        return items
    if limit <= 1:
        return items[-1:]
    step = -(-(len(items) - 1) // (limit - 1))
    return items[:-1:step] + items[-1:]


def _owner(module_name: str, blocks: set[str]) -> Optional[str]:
    """The outermost block containing (or equal to) ``module_name``, if any."""
    parts = module_name.split(".")
    return next((".".join(parts[:i]) for i in range(1, len(parts) + 1)
                 if ".".join(parts[:i]) in blocks), None)


class SiteRecorder:
    """Records the outputs (or the inputs) of chosen sites during forward passes.

    Use as a context manager around forward passes; ``values`` maps site names to the clone
    recorded in the last forward pass. With ``stop_after``, the forward pass ends as soon as
    that site is recorded (run it with :meth:`run`).
    """

    def __init__(self, model: nn.Module, sites: Sequence[Site], *, inputs: bool = False,
                 stop_after: Optional[str] = None) -> None:
        self.model = model
        self.inputs = inputs
        self.stop_after = stop_after
        self.values: dict[str, torch.Tensor] = {}
        self.calls: list[str] = []
        self._wanted = {(s.module_name, s.call): s.name for s in sites}
        self._stack = None

    def __enter__(self) -> "SiteRecorder":
        self._stack = _hooks(self.model, self._record, before=self.inputs)
        self._stack.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self._stack.__exit__(*exc)

    def _record(self, name, module, call, args, output):
        site = self._wanted.get((name, call))
        if site is None:
            return
        value = first_tensor(args if self.inputs else output)
        if value is not None:
            self.values[site] = value.clone()
            self.calls.append(site)
        if site == self.stop_after:
            raise _Stop

    def run(self, forward: Callable[[], Any]) -> Any:
        """``forward()``, stopped quietly where ``stop_after`` ends it (then returns None)."""
        try:
            return forward()
        except _Stop:
            return None
