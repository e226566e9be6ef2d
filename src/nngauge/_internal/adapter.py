"""The model adapter: the one door through which every measure runs a user's network.

Real networks differ from the papers' MLPs in how they are called, what they return and how
they behave in train mode. The adapter answers, once for every measure, the report, the
Tracker and the CLI:

- **which output** is measured (``output=``): a tensor output as it is; from a dict, tuple or
  Hugging Face ``ModelOutput`` the key, index or callable given, and by default the
  ``"logits"`` entry when there is one (an output selector never indexes a plain tensor);
- **where the measure starts** (``input_module=``): the input a measure differentiates or
  moves along a trajectory is the output of this submodule (an embedding, or any module);
  the model still runs on its raw inputs (token ids) with that module's output replaced.
  Integer inputs with no ``input_module`` use the first ``nn.Embedding`` the forward pass
  calls, and say so;
- **the mode of normalization and dropout** (``norm_mode=``, ``dropout=``): batchnorm uses
  batch statistics (``"train"``), its running statistics (``"eval"``), or statistics computed
  once on the measured data and then fixed (``"frozen"``: a per-sample function equal, over
  the data's distribution, to what train mode computes); None keeps each batchnorm as found.
  Dropout and any other train-time randomness is off unless ``dropout=True`` (then every
  module but the normalization runs in train mode and draws from the measure's generator);
- **numerics**: bfloat16/float16 models are measured on a float32 copy (low precision makes
  lengths, crossings and small differences meaningless); scaled-dot-product attention runs
  with the math kernel (the fused CPU kernels have no double backward and no forward-mode
  derivative);
- **what happened**: :class:`MeasurementMode`, recorded in every result, with the notes of
  any fallback taken (forward-mode derivatives, loops instead of ``vmap``) and the leaf
  modules that could not be classified.

The options arrive as one :class:`~nngauge._internal.options.ModelOptions` (built from a
public function's keywords by :func:`~nngauge._internal.options.model_options`).

The user's model is never changed: modes, ``requires_grad`` flags, buffers and parameters are
restored on exit (also on error), and no hook survives.
"""

from __future__ import annotations

import copy
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import Any, Iterator, Optional, Sequence

import torch
from torch import nn
from torch._C._functorch import is_functorch_wrapped_tensor

from nngauge._constraints import NormMode  # noqa: F401  (re-exported)
from nngauge._internal.data import Batch, as_batches, collect, require_model_output
from nngauge._internal.graph import FunctionSite, expose_functions, trace_graph
from nngauge._internal.layers import preserved_state
from nngauge._internal.options import ModelOptions
from nngauge._internal.sites import Site, SiteKind, SiteRecorder, discover_sites, resolve_sites
from nngauge._internal.sites import unclassified as unclassified_sites
from nngauge.errors import InvalidInputError, invalid, rejected_inputs

FROZEN_SAMPLES = 1024
"""Samples whose batch statistics fix batchnorm for ``norm_mode="frozen"``."""
LOW_PRECISION = (torch.bfloat16, torch.float16)
_BATCH_STATISTICS = nn.modules.batchnorm._BatchNorm


@dataclass(frozen=True)
class MeasurementMode:
    """How a model was measured; every result records one as ``mode``.

    Attributes:
        output: which output was measured ("the tensor output", "'logits' (chosen
            automatically: the model returns a dict)", "key 'hidden'", ...).
        input_module: the module whose output was the measured input (None: the model's
            input), with " (chosen automatically ...)" when inferred.
        norm_mode: "train", "eval", "frozen", "as found (train)" / "as found (eval)", or
            "no batch statistics" when the model has no batchnorm.
        dropout: "off" or "on".
        precision: the dtype measured, e.g. "float32", or "float32 (upcast copy of a
            bfloat16 model)".
        notes: fallbacks taken and other facts a reader of the numbers needs.
        unclassified: leaf modules no kind could be given to (neither a known layer type nor
            recognised by behaviour); torch's no-op and reshape modules (Identity, Flatten,
            Unflatten, Dropout, ...) are known and not listed.
    """

    output: str
    input_module: Optional[str]
    norm_mode: str
    dropout: str
    precision: str
    notes: tuple[str, ...] = ()
    unclassified: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"output": self.output, "input_module": self.input_module,
                "norm_mode": self.norm_mode, "dropout": self.dropout,
                "precision": self.precision, "notes": list(self.notes),
                "unclassified": list(self.unclassified)}


def model_dtype_device(model: nn.Module) -> tuple[Optional[torch.dtype], Optional[torch.device]]:
    """The floating dtype and device of the model's first floating parameter or buffer."""
    for tensor in list(model.parameters()) + list(model.buffers()):
        if torch.is_floating_point(tensor):
            return tensor.dtype, tensor.device
    return None, None


def batch_coupled(model: nn.Module) -> bool:
    """True when some output of a sample depends on the other samples of its batch: a batchnorm
    layer normalizing with batch statistics (train mode, or no running statistics)."""
    return any(isinstance(m, _BATCH_STATISTICS) and (m.training or not m.track_running_stats)
               for m in model.modules())


def select_output(value: Any, selector: Any = None, *, where: str = "measure()"
                  ) -> tuple[torch.Tensor, str]:
    """The measured tensor of a model's output, and how it was chosen.

    A tensor output is taken as it is (a selector other than a callable is refused: it
    would index the batch). From a dict, tuple, list or ``ModelOutput``: ``selector`` (key,
    index, or callable mapping the output to a tensor); with no selector, the ``"logits"``
    entry when there is one, else an error listing what there is.
    """
    if value is None:
        require_model_output(value, where)
    if callable(selector):
        chosen = selector(value)
        how = "chosen by the output= callable"
    elif isinstance(value, torch.Tensor):
        if selector is not None:
            raise invalid(where, "output=None for a model that returns a tensor (a selector "
                          "picks from a dict, tuple or ModelOutput)",
                          f"output={selector!r} on a tensor of shape {tuple(value.shape)}",
                          "drop output= (it would index the batch), or pass a callable")
        return value, "the tensor output"
    elif selector is None:
        if not _has_key(value, "logits"):
            raise invalid(where, "a model returning a tensor, or output= naming the tensor to "
                          "measure", f"a {type(value).__name__} with {_describe(value)}",
                          "pass output=<key or index> (CLI: --output KEY)")
        chosen, how = value["logits"], (f"'logits' (chosen automatically: the model returns a "
                                        f"{type(value).__name__})")
    else:
        try:
            chosen = value[selector]
        except (KeyError, IndexError, TypeError):
            raise invalid(where, f"a model output indexable by output={selector!r}",
                          f"a {type(value).__name__} with {_describe(value)}",
                          "pass one of the keys or indices listed") from None
        how = f"{'key' if isinstance(selector, str) else 'index'} {selector!r}"
    if not isinstance(chosen, torch.Tensor):
        raise invalid(where, "output= selecting a tensor", f"a {type(chosen).__name__}",
                      "select a tensor entry of the model's output")
    return chosen, how


def _has_key(value: Any, key: str) -> bool:
    try:
        return isinstance(value, dict) and key in value
    except TypeError:
        return False


def _describe(value: Any) -> str:
    if isinstance(value, dict):
        return f"keys {list(value)}"
    if isinstance(value, (tuple, list)):
        return f"{len(value)} entries of types {[type(v).__name__ for v in value]}"
    return "no tensor"


@contextmanager
def measurement_context() -> Iterator[None]:
    """Attention through the math kernel (differentiable twice and in forward mode)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel([SDPBackend.MATH]):
        yield


@contextmanager
def mappable_batch_statistics(model: nn.Module) -> Iterator[None]:
    """Within: the batchnorm layers that normalize with batch statistics read and update no
    running buffers (set to None for the block, restored after), so the model can be mapped
    with ``torch.func.vmap`` over a leading dimension of whole batches, each normalized by its
    own statistics: the same outputs as one call per batch, which in the measurement state
    would not keep its running-buffer updates either."""
    from torch.nn.utils.stateless import _reparametrize_module

    buffers = {f"{name}.{buffer}": None for name, m in model.named_modules()
               if isinstance(m, _BATCH_STATISTICS) and m.training and m.track_running_stats
               for buffer in ("running_mean", "running_var", "num_batches_tracked")}
    with _reparametrize_module(model, buffers):
        yield


def require_real_finite_weights(model: nn.Module, where: str) -> None:
    """Refuse meta-device weights (no values) and NaN or infinite parameters or buffers:
    every number measured from them would be meaningless."""
    tensors = list(model.named_parameters()) + list(model.named_buffers())
    meta = [name for name, t in tensors if t.is_meta]
    if meta:
        raise invalid(where, "a model whose parameters hold values",
                      f"meta-device tensors {meta[:5]}",
                      "materialize the model (model.to_empty(device='cpu'), then load or "
                      "initialize its weights)")
    bad = [name for name, t in tensors
           if t.is_floating_point() and not bool(torch.isfinite(t).all())]
    if bad:
        raise invalid(where, "a model whose parameters and buffers are finite",
                      f"NaN or inf in {bad[:5]}", "reload or reinitialize the weights "
                      "(a diverged training run: lower the learning rate)")


MAX_TRACED_SITES = 4096
"""Module calls above which :meth:`ModelAdapter.expose_functions` does not trace the model to
look for activation functions called outside modules: tracing is linear in the graph's nodes
but slow per node (83 s on a 10,000-layer MLP's 20,000 calls); the deepest networks people
bring (a ResNet-152, a 48-layer transformer) make well under 2,000."""


class ModelAdapter:
    """How one measure call runs ``model`` (see the module docstring).

    Create one per measure call, open :meth:`active` around the measurement, and read
    :attr:`mode` for the result.

    Args:
        model: the user's network (never modified).
        options: the :class:`~nngauge._internal.options.ModelOptions` (output selector,
            input module, batchnorm mode, dropout, precision); checked here, with what only
            the model can tell (``input_module`` naming one of its submodules). A model in a
            less precise dtype than ``options.precision`` (float16, bfloat16, or float32 when
            it is float64) is measured on an upcast copy, which :attr:`mode` says.
        where: the measure's name, for error messages.
    """

    def __init__(self, model: nn.Module, options: ModelOptions = ModelOptions(), *,
                 where: str = "measure()") -> None:
        if not isinstance(model, nn.Module):
            raise invalid(where, "a torch.nn.Module", f"{type(model).__name__}",
                          "pass the network object (an nn.Module)")
        options.check(where)
        input_module = options.input_module
        modules = dict(model.named_modules())
        if input_module is not None and (not isinstance(input_module, str)
                                         or input_module not in modules or not input_module):
            raise invalid(where, "input_module naming a submodule (model.named_modules())",
                          f"input_module={input_module!r}",
                          f"use one of {[n for n in modules if n][:20]}")
        precision = options.precision
        self.user_model = model
        self.where = where
        self.options = options
        self.input_module = input_module
        dtype, _ = model_dtype_device(model)
        below = dtype is not None and dtype.is_floating_point and (
            dtype in LOW_PRECISION or torch.finfo(dtype).eps > torch.finfo(precision).eps)
        self.upcast_from = dtype if below else None
        self.model = copy.deepcopy(model).to(precision) if below else model
        self.notes: list[str] = []
        self._output_how: Optional[str] = None
        self._check_outputs = True
        self._input_how = input_module
        self._sites: Optional[tuple[Site, ...]] = None
        self._found_norm = self._norm_found()
        self.untraced: Optional[str] = None
        self._functions_sought = False

    # ------------------------------------------------------------------------ state and mode

    @contextmanager
    def active(self, *, generator: Optional[torch.Generator] = None, data: Any = None
               ) -> Iterator["ModelAdapter"]:
        """Put the model in its measurement state for the block: modes set, parameters not
        requiring grad, statistics frozen when asked (from ``data``), attention through the
        math kernel, dropout drawing from ``generator``; everything restored on exit."""
        require_real_finite_weights(self.user_model, self.where)
        with ExitStack() as stack:
            stack.enter_context(preserved_state(self.user_model))
            if self.model is not self.user_model:
                stack.enter_context(preserved_state(self.model))
            self._set_modes()
            for param in self.model.parameters():
                param.requires_grad_(False)
            stack.enter_context(measurement_context())
            if self.options.dropout:
                stack.enter_context(torch.random.fork_rng(devices=[]))
                torch.manual_seed(int(torch.randint(2**62, (), generator=generator)))
            if self.options.norm_mode == "frozen":
                stack.enter_context(self._frozen_statistics(data))
            yield self

    def _set_modes(self) -> None:
        found = {m: m.training for m in self.model.modules()}
        self.model.train(self.options.dropout)
        for module in self.model.modules():
            if isinstance(module, _BATCH_STATISTICS):
                module.train(found[module] if self.options.norm_mode is None
                             else self.options.norm_mode in ("train", "frozen"))

    @contextmanager
    def _frozen_statistics(self, data: Any) -> Iterator[None]:
        norms = [m for m in self.model.modules()
                 if isinstance(m, _BATCH_STATISTICS) and m.track_running_stats]
        if not norms:
            yield
            return
        if data is None:
            raise invalid(self.where, "data to compute frozen batchnorm statistics from",
                          "no data", "pass data, or norm_mode='eval' / 'train'")
        momenta = [m.momentum for m in norms]
        try:
            for m in norms:
                m.reset_running_stats()
                m.momentum = None  # cumulative average over the batches below
            with torch.no_grad():
                for batch in as_batches(data, batch_size=256, where=self.where,
                                        require_float=False):
                    self.model(self.prepare_raw(batch.inputs))
                    if int(norms[0].num_batches_tracked) * 256 >= FROZEN_SAMPLES:
                        break
            for m in norms:
                m.eval()
            yield
        finally:
            for m, momentum in zip(norms, momenta):
                m.momentum = momentum

    def _norm_found(self) -> str:
        norms = [m for m in self.model.modules() if isinstance(m, _BATCH_STATISTICS)
                 and (m.track_running_stats or m.training)]
        if not norms:
            return "no batch statistics"
        return "as found (train)" if any(m.training for m in norms) else "as found (eval)"

    @property
    def coupled(self) -> bool:
        """Whether, in the active state, a sample's output depends on the rest of its batch."""
        return batch_coupled(self.model)

    @property
    def mode(self) -> MeasurementMode:
        """The :class:`MeasurementMode` to record in the result."""
        norm = self._found_norm
        if self.options.norm_mode is not None and norm != "no batch statistics":
            norm = self.options.norm_mode
        dtype, _ = model_dtype_device(self.model)
        precision = str(dtype).replace("torch.", "") if dtype is not None else "n/a"
        if self.upcast_from is not None:
            precision += f" (upcast copy of a {str(self.upcast_from).replace('torch.', '')} model)"
        return MeasurementMode(
            output=self._output_how or "not read", input_module=self._input_how,
            norm_mode=norm, dropout="on" if self.options.dropout else "off",
            precision=precision,
            notes=tuple(dict.fromkeys(self.notes)),
            unclassified=unclassified_sites(self._sites or ()))

    def note(self, text: str) -> None:
        """Record a fact for :attr:`mode` (e.g. a fallback taken)."""
        self.notes.append(text)

    def require_independent_samples(self) -> None:
        """Refuse batch-coupled models (per-point measures need a per-sample function)."""
        if self.coupled:
            raise invalid(self.where, "a per-sample function: a model whose outputs do not depend "
                          "on the rest of the batch",
                          "batchnorm using batch statistics (train mode)",
                          "pass norm_mode='frozen' (statistics of the data, then fixed) or "
                          "norm_mode='eval' (running statistics); CLI: --mode frozen or --mode "
                          "eval")

    # ------------------------------------------------------------------------------- inputs

    def batches(self, data: Any, *, batch_size: int = 250, n_batches: Optional[int] = None,
                generator: Optional[torch.Generator] = None) -> Iterator[Batch]:
        """Validated batches of raw inputs (integer inputs allowed: they are embedded)."""
        return as_batches(data, batch_size=batch_size, n_batches=n_batches, generator=generator,
                          where=self.where, require_float=False)

    def collect(self, data: Any, max_samples: Optional[int] = None) -> Batch:
        """The first ``max_samples`` raw samples of ``data`` as one batch."""
        return collect(data, where=self.where, max_samples=max_samples, require_float=False)

    def prepare_raw(self, raw: torch.Tensor) -> torch.Tensor:
        """Raw inputs on the model's device; floating inputs in its dtype (a copy; for a model
        without floating parameters, in the inputs' dtype or ``precision`` if that is finer)."""
        dtype, device = model_dtype_device(self.model)
        if raw.is_floating_point():
            if dtype is None:
                finer = torch.finfo(self.options.precision).eps < torch.finfo(raw.dtype).eps
                dtype = self.options.precision if finer else raw.dtype
            return raw.detach().to(dtype=dtype, device=device or raw.device, copy=True)
        return raw.detach().to(device=device or raw.device)

    def weights(self, purpose: str) -> dict[str, torch.Tensor]:
        """The model's parameters by name, detached (what weight-space measures move); a
        model without any is refused, ``purpose`` saying why they are needed."""
        params = {n: p.detach() for n, p in self.model.named_parameters()}
        if not params:
            raise invalid(self.where, "a model with parameters", "a model without parameters",
                          f"{purpose}; pass a network that has some")
        return params

    def measured(self, raw: torch.Tensor, *, requires_grad: bool = False) -> torch.Tensor:
        """The measured input for raw inputs: the raw inputs themselves (a copy in the model's
        dtype), or the output of ``input_module`` on them (detached)."""
        raw = self.prepare_raw(raw)
        if self.input_module is None and not raw.is_floating_point():
            self._infer_input_module(raw)
        if self.input_module is None:
            return raw.requires_grad_(requires_grad)
        target = self._input_site()
        with torch.no_grad(), SiteRecorder(self.model, [target], stop_after=target.name) as rec:
            rec.run(lambda: self.model(raw))
        if target.name not in rec.values:
            raise invalid(self.where, f"input_module={self.input_module!r} called by the forward "
                          "pass", "a module the forward pass never calls",
                          "name a module the model uses")
        x = rec.values[target.name].detach()
        if not x.is_floating_point():
            raise invalid(self.where, "an input_module whose output is floating point",
                          f"output of dtype {x.dtype}", "name the embedding (or a later module)")
        return x.requires_grad_(requires_grad)

    def _input_site(self) -> Site:
        module = self.model.get_submodule(self.input_module)
        return Site(self.input_module, self.input_module, module)

    def _infer_input_module(self, raw: torch.Tensor) -> None:
        embeddings = []
        handles = [m.register_forward_pre_hook(lambda mod, args, _n=n: embeddings.append(_n))
                   for n, m in self.model.named_modules() if isinstance(m, nn.Embedding)]
        try:
            with torch.no_grad():
                self.model(raw[:1])
        except Exception:
            pass  # the error, if any, is raised by the measure's own forward pass
        finally:
            for handle in handles:
                handle.remove()
        if not embeddings:
            raise invalid(self.where, "floating-point inputs, or input_module= naming the module "
                          "whose output to measure from", f"inputs of dtype {raw.dtype} and no "
                          "nn.Embedding in the model", "convert the inputs with .float(), or "
                          "pass input_module='<embedding module name>' (CLI: --input-module)")
        self.input_module = embeddings[0]
        self._input_how = f"{embeddings[0]} (chosen automatically: integer inputs)"

    # ------------------------------------------------------------------------------ running

    def run(self, x: torch.Tensor, sites: Sequence[Site] = (), *,
            raw: Optional[torch.Tensor] = None, inputs: bool = False,
            stop_after: Optional[str] = None) -> tuple[Optional[torch.Tensor], dict]:
        """The selected model output at measured inputs ``x`` and the values of ``sites``
        (their outputs, or their inputs with ``inputs=True``). With ``input_module``, ``raw``
        (a batch of len(x) raw inputs, or one to repeat) runs the model with the module's
        output replaced by ``x``. With ``stop_after`` the pass ends at that site (output
        None)."""
        with SiteRecorder(self.model, sites, inputs=inputs, stop_after=stop_after) as rec:
            out = rec.run(lambda: self._forward(x, raw))
        stopped = out is None and stop_after is not None
        return (None if stopped else self.select(out)), rec.values

    def check_template(self, template: Any) -> Optional[torch.Tensor]:
        """The raw input (one sample) that runs the model for points given in measured space
        (trajectories), required when measuring from ``input_module``; None otherwise."""
        if self.input_module is None:
            return None
        if not isinstance(template, torch.Tensor) or template.dim() == 0:
            raise invalid(self.where, f"template= one raw input (e.g. the token ids a trajectory "
                          f"starts from) to run the model on when measuring from "
                          f"input_module={self.input_module!r}", f"template={template!r}",
                          "pass template=tokens[0] (points are then in the module's output "
                          "space)")
        return template.unsqueeze(0)

    def __call__(self, x: torch.Tensor, raw: Optional[torch.Tensor] = None) -> torch.Tensor:
        """The selected model output at measured inputs ``x``."""
        return self.select(self._forward(x, raw))

    def _forward(self, x: torch.Tensor, raw: Optional[torch.Tensor]) -> Any:
        if self.input_module is None:
            return self.call_model(x)
        if raw is None:
            raise invalid(self.where, "raw inputs to run the model on when measuring from "
                          f"input_module={self.input_module!r}", "none",
                          "pass the raw inputs (e.g. token ids) the measured inputs came from")
        raw = self.prepare_raw(raw)
        if len(raw) != len(x):
            raw = raw[:1].expand(len(x), *raw.shape[1:])
        module = self.model.get_submodule(self.input_module)

        def replace(mod, args, out):
            if out.shape != x.shape:
                raise invalid(self.where, f"measured inputs shaped like the output of "
                              f"{self.input_module!r}, {tuple(out.shape)}",
                              f"shape {tuple(x.shape)}", "embed inputs with the same model")
            return x

        handle = module.register_forward_hook(replace)
        try:
            return self.call_model(raw)
        finally:
            handle.remove()

    def call_model(self, inputs: torch.Tensor) -> Any:
        """``model(inputs)``; a failure of the forward pass (typically inputs of the wrong
        shape) becomes an InvalidInputError saying what the model got (chained), and an output
        no measure reads (None, a scalar, integers: :func:`require_model_output`) is refused
        here unless ``output=`` selects from it."""
        try:
            out = self.model(inputs)
        except NotImplementedError:
            raise  # a missing derivative (forward mode): callers fall back, not a bad input
        except (RuntimeError, ValueError, TypeError, IndexError) as exc:
            if type(exc).__module__.startswith("nngauge"):
                raise
            raise rejected_inputs(self.where, inputs.shape, inputs.dtype, exc) from exc
        if self.options.output is None:
            require_model_output(out, self.where)
        return out

    @contextmanager
    def perturbed(self) -> Iterator[None]:
        """Within: outputs at points a measure moved away from the given data or weights
        (region-size walks, perturbed weights) are not checked for NaN or inf, which may
        legitimately appear there (an overflow far out); the outputs at the data are."""
        previous, self._check_outputs = self._check_outputs, False
        try:
            yield
        finally:
            self._check_outputs = previous

    def select(self, out: Any) -> torch.Tensor:
        """The measured tensor of a model output (see :func:`select_output`), refused when it
        holds NaN or inf (checked outside torch.func transforms, where values are concrete):
        no measure reports a number computed from them."""
        tensor, how = select_output(out, self.options.output, where=self.where)
        self._output_how = how
        require_model_output(tensor, self.where)
        if self._check_outputs:
            self.require_finite(tensor)
        return tensor

    def require_finite(self, tensor: torch.Tensor) -> None:
        """Refuse an output (at the given data and weights) holding NaN or inf; values inside
        torch.func transforms are not concrete and are not checked."""
        if (tensor.is_floating_point() and not is_functorch_wrapped_tensor(tensor)
                and not bool(torch.isfinite(tensor.detach()).all())):
            bad = int((~torch.isfinite(tensor.detach())).sum())
            raise invalid(self.where, "finite model outputs",
                          f"NaN or inf in {bad} of {tensor.numel()} output entries (finite "
                          "weights and inputs)",
                          "find the operation that produces them, e.g. with "
                          "torch.autograd.detect_anomaly() or forward hooks checking "
                          "torch.isfinite: a log, sqrt or division of a non-positive value, or an "
                          "overflow in float16 / float32")

    # -------------------------------------------------------------------------------- sites

    def discover(self, raw_sample: torch.Tensor) -> tuple[Site, ...]:
        """Every site of the model, found by one forward pass on ``raw_sample`` (cached)."""
        if self._sites is None:
            x = self.measured(raw_sample[:2])
            with torch.no_grad():
                self._sites = discover_sites(self.model, lambda: self._forward(x, raw_sample[:2]))
        return self._sites

    def expose_functions(self, raw_sample: torch.Tensor,
                         names: Optional[Sequence[str]] = None) -> None:
        """Make the activation functions a forward pass calls outside modules (``F.relu``,
        ``torch.relu``, ``x.clamp(min=0)``, ``F.gelu``; hooks do not see them) sites like
        activation modules: the model is traced on ``raw_sample``
        (:func:`~nngauge._internal.graph.trace_graph`) and, when it calls such functions, runs
        from here on as its graph with each call a module
        (:func:`~nngauge._internal.graph.expose_functions`: the same parameters and outputs;
        the new sites are named as the exact piecewise-linear engine names them, and sites of
        blocks the graph traced through are gone). A model ``torch.fx`` cannot trace keeps
        its module sites, as does one whose ``names`` (site or module names a measure reads)
        include such a block; :attr:`untraced` then says why."""
        if self._functions_sought:
            return
        self._functions_sought = True
        found = self.discover(raw_sample)  # the standard error on inputs the model rejects
        if len(found) > MAX_TRACED_SITES:
            self.untraced = (f"{len(found):,} module calls, over the {MAX_TRACED_SITES:,} "
                             "nngauge traces (tracing them would take minutes)")
            self.note("activation functions called outside modules (F.relu, ...) were not "
                      f"looked for: {self.untraced}; measure from activation modules, or name "
                      "the layers (layers=...)")
            return
        try:
            graph = trace_graph(self.model, self.prepare_raw(raw_sample[:2]), where=self.where)
        except InvalidInputError as exc:
            self.untraced = str(exc)
            self.note("activation functions called outside modules (F.relu, ...) were not "
                      "looked for: the model could not be traced")
            return
        exposed = expose_functions(graph, self.model)
        if exposed is None:
            return
        called = {node.target for node in exposed.graph.nodes if node.op == "call_module"}
        found = dict(self.user_model.named_modules())
        named = [names] if isinstance(names, str) else list(names or ())
        gone = [n for n in named + [self.input_module] if n is not None
                and n.split("#")[0] in found and n.split("#")[0] not in called]
        if gone:
            self.untraced = (f"modules {gone} are traced through (blocks the traced graph does "
                             "not call)")
            self.note("activation functions called outside modules (F.relu, ...) were not "
                      f"read: {self.untraced}")
            return
        names = [n for n, m in exposed.named_children() if isinstance(m, FunctionSite)]
        self.model, self._sites = exposed, None
        self.note(f"activation functions called in forward() read from the traced graph as "
                  f"sites {names[:5]}{' ...' if len(names) > 5 else ''}")

    def sites(self, raw_sample: torch.Tensor, names: Optional[Sequence[str]], *,
              default_kinds: Sequence[SiteKind]) -> list[Site]:
        """The sites named in ``names`` (site or module names), or those of ``default_kinds``;
        sites before or at ``input_module`` (which do not depend on the measured input) are
        left out of the defaults. Activations called as functions are sites too
        (:meth:`expose_functions`) where activations are read and blocks are not."""
        if "activation" in default_kinds and "block" not in default_kinds:
            self.expose_functions(raw_sample, names)
        found = self.discover(raw_sample)
        if names is None and self.input_module is not None:
            found = _after_input(found, self.input_module)
        return resolve_sites(self.model, found, names, default_kinds=default_kinds,
                             where=self.where)


def _after_input(sites: Sequence[Site], input_module: str) -> tuple[Site, ...]:
    names = [s.module_name for s in sites]
    if input_module not in names:
        return tuple(sites)
    return tuple(sites[names.index(input_module) + 1:])


__all__ = ["FROZEN_SAMPLES", "MeasurementMode", "ModelAdapter", "ModelOptions", "NormMode",
           "batch_coupled", "measurement_context", "model_dtype_device", "select_output"]
