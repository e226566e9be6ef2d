"""Gaussian weight noise sampled at the units: the local reparameterization estimator.

Kingma, Salimans & Welling (2015, "Variational dropout and the local reparameterization
trick", section 2.3). For a Linear or ConvNd layer z = W x + b whose weights and bias carry
independent Gaussian noise nu ~ N(0, diag(s_W^2, s_b^2)), the output for one input x is
Gaussian, unit by unit independent, with

    E[z] = W x + b,    Var[z] = s_W^2 (x^2) + s_b^2

(for a convolution both products are the convolution with the layer's stride, padding,
dilation and groups). Layers carry independent noise, so drawing each layer's output from
these Gaussians given its (already perturbed) input reproduces exactly, for one input, the
distribution of the network's output under the weight noise. Drawing it independently for
every input of a mini-batch only removes the correlation between inputs: the mini-batch loss
has the same expectation E_nu[L_B(w + nu)] (generalization paper, eq. 5), with lower
variance, for one Gaussian per unit and input instead of one per parameter.

Layers that run before any perturbed output exists ("data-only" layers) see only the data, so
their mean and standard deviation are computed once per distinct data point of a block of
perturbations (all of them when the data's layer outputs fit ``ELEMENT_BUDGET``), kept, and
gathered for every (perturbation, point) pair; the perturbations of a block then run in small
chunks (``CHUNK_BUDGET`` elements per layer output: the working tensors stay in cache) in which
those layers compute nothing. The first layer of an MLP costs one pass over the distinct points
instead of one per perturbation.

This needs every parameter to sit in a Linear or ConvNd module (exactly those classes) that
runs once per forward pass, and examples that do not interact; :meth:`LocalNoise.blocker`
checks the structure and then checks numerically, on a few points, that the hooked forward
pass with gathering reproduces ``functional_call`` with shifted parameters.
"""

from __future__ import annotations

from concurrent.futures import Executor
from contextlib import contextmanager
from typing import Any, Callable, Iterator, Optional

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call

from nngauge._internal.adapter import batch_coupled

LOCAL_MODULES = (nn.Linear, nn.Conv1d, nn.Conv2d, nn.Conv3d)
ELEMENT_BUDGET = 2**25  # largest tensor of one block, in elements (128 MiB in float32)
CHUNK_BUDGET = 2**20  # widest layer output of one local chunk (4 MiB in float32: cache-sized)


def _affine(module: nn.Module, x: torch.Tensor, weight: torch.Tensor,
            bias: Optional[torch.Tensor]) -> torch.Tensor:
    """The module's affine map with the given weight and bias."""
    if isinstance(module, nn.Linear):
        return F.linear(x, weight, bias)
    return module._conv_forward(x, weight, bias)


def _qualified(module_name: str, parameter: str) -> str:
    """The parameter's name in ``named_parameters()`` (the root module has name "")."""
    return f"{module_name}.{parameter}" if module_name else parameter


PROBE_POINTS = 16
"""Points of the numerical check in :meth:`LocalNoise.blocker`: a tied parameter goes unseen
only when no probe point reaches it (e.g. every ReLU before its second use is off); with 3
points a small tied ReLU network fooled the check for 7 of 3,000 random initializations."""


class LocalNoise:
    """Forward hooks that replace each Linear/ConvNd output by a draw of its Gaussian.

    ``stds`` maps parameter names to their noise standard deviations at scale 1 (a pass
    draws with ``scale`` times them); ``select`` maps the model's output to the measured
    tensor (an adapter's output selection). :meth:`blocker` must run first: besides checking
    the model, it finds the data-only layers. ``reuse``: run the unperturbed pass on all the
    data and keep it (``kept``) for calls at other scales (a PAC-Bayes curve). State of one
    forward pass: ``rows`` (the (perturbation, point) rows of the pass as indices of the
    distinct points the model runs on; None: the unperturbed pass, which fills ``cache``),
    ``cache`` (when not None, each data-only layer's output mean and std on those distinct
    points: in the perturbed passes such a layer computes one row and gathers ``rows`` from
    the cache), ``fill`` (fills a
    (rows, ...) tensor with standard Gaussians) and ``shift`` (when set, layers compute
    W + shift exactly instead of sampling, and layers whose input has ``n_distinct`` rows
    gather ``rows``: the structural check). ``widest`` is the largest hooked output of one
    point, in elements, seen by the check.
    """

    def __init__(self, model: nn.Module, stds: dict,
                 select: Callable[[Any], torch.Tensor] = lambda out: out):
        self.model, self.stds, self.select = model, stds, select
        self.variances = {n: s.square() for n, s in stds.items()}
        self.names = {module: name for name, module in model.named_modules()
                      if type(module) in LOCAL_MODULES}
        # each hooked module's (weight, bias) names in named_parameters(); bias None if absent
        self.keys = {module: (_qualified(name, "weight"),
                              None if module.bias is None else _qualified(name, "bias"))
                     for module, name in self.names.items()}
        self.rows: Optional[torch.Tensor] = None
        self.scale, self.reuse = 1.0, False
        self.kept: Optional[tuple[torch.Tensor, dict]] = None
        self.n_distinct = 0
        self.data_only: set[nn.Module] = set()
        self.cache: Optional[dict] = None
        self.fill: Callable[[torch.Tensor], None] = lambda noise: None
        self.shift: Optional[dict] = None
        self.calls: dict[str, int] = {}
        self.widest = 1

    @contextmanager
    def hooked(self) -> Iterator["LocalNoise"]:
        """The hooks, registered while the context is open (removed on exit and on error)."""
        handles = [module.register_forward_hook(self._hook) for module in self.names]
        handles += [module.register_forward_pre_hook(self._pre_hook) for module in self.names]
        try:
            yield self
        finally:
            for handle in handles:
                handle.remove()

    def _pre_hook(self, module: nn.Module, args: tuple) -> Optional[tuple]:
        """A data-only layer whose output is cached computes one row only."""
        if self.cache is not None and module in self.cache:
            return (args[0][:1], *args[1:])
        return None

    def _std(self, module: nn.Module, x: torch.Tensor) -> torch.Tensor:
        """Std of the layer's output given its input x at scale 1: sqrt(s_W^2 (x^2) + s_b^2)."""
        weight_key, bias_key = self.keys[module]
        var_bias = None if bias_key is None else self.variances[bias_key]
        return _affine(module, x.square(), self.variances[weight_key], var_bias).sqrt_()

    def _hook(self, module: nn.Module, args: tuple, output: torch.Tensor) -> torch.Tensor:
        name = self.names[module]
        self.calls[name] = self.calls.get(name, 0) + 1
        x = args[0]
        if self.shift is not None:
            weight_key, bias_key = self.keys[module]
            bias = None if bias_key is None else module.bias + self.shift[bias_key]
            output = _affine(module, x, module.weight + self.shift[weight_key], bias)
            self.widest = max(self.widest, output[0].numel())
            if x.shape[0] != self.n_distinct:
                return output
            self.data_only.add(module)
            return output[self.rows]
        if self.rows is None:  # the unperturbed pass of a block fills the cache
            if module in self.data_only:
                self.cache[module] = (output.clone(), self._std(module, x))
            return output
        if module in self.data_only:
            mean, std = (t.index_select(0, self.rows) for t in self.cache[module])
        else:
            mean, std = output, self._std(module, x)
        noise = torch.empty_like(mean)
        self.fill(noise)
        return mean.addcmul_(noise, std, value=self.scale)

    def blocker(self, params: dict, x: torch.Tensor) -> Optional[str]:
        """Why this estimator cannot stand for weight noise on the model (None when it can).

        Structure: every parameter in an exact Linear/ConvNd module under its own name, no
        module registered twice, no batch statistics. Then numerically, on up to
        ``PROBE_POINTS`` = 16 points of ``x`` each repeated twice (so the gathering runs): the
        hooked pass with every layer shifted by a sizeable random shift equals
        ``functional_call`` with the shifted parameters (no parameter is used outside its
        module's forward, and the data flow survives the gathering), each hooked module runs
        once, and a point's output does not depend on the rest of its batch. The layers whose
        input had the distinct points' rows in that pass are the data-only layers.
        """
        model = self.model
        if batch_coupled(model):
            return "a batchnorm layer normalizes with batch statistics (examples interact)"
        seen: set[int] = set()
        for name, module in model.named_modules(remove_duplicate=False):
            if type(module) in LOCAL_MODULES and id(module) in seen:
                return f"module {name!r} is registered twice (shared weights)"
            seen.add(id(module))
            for pname, _ in module.named_parameters(recurse=False):
                qualified = _qualified(name, pname)
                if type(module) not in LOCAL_MODULES:
                    return (f"parameter {qualified!r} belongs to a {type(module).__name__}, not "
                            "to a torch.nn Linear or Conv1d/2d/3d")
                if qualified not in params:
                    return f"parameter {qualified!r} is tied to another parameter"
        gen = torch.Generator().manual_seed(0)
        shift = {n: torch.randn(w.shape, generator=gen, dtype=w.dtype).to(w.device)
                 * (0.5 * (w.abs() + w.abs().mean() + 1e-3)) for n, w in params.items()}
        distinct = torch.arange(min(len(x), PROBE_POINTS), device=x.device)
        rows = distinct.repeat(2)
        self.shift, self.rows, self.n_distinct, self.calls = shift, rows, len(distinct), {}
        self.data_only = set()
        try:
            with torch.no_grad():
                reference = self.select(functional_call(
                    model, {n: params[n] + shift[n] for n in params}, (x[rows],)))
                with self.hooked():
                    hooked = self.select(model(x[distinct]))
                alone, together = self.select(model(x[:1])), self.select(model(x[rows]))
        except Exception as error:  # any failure means the hooked pass is not the model's
            return f"the hooked forward pass fails ({type(error).__name__}: {error})"
        finally:
            self.shift, self.rows = None, None
        if len(self.calls) != len(self.names) or any(c != 1 for c in self.calls.values()):
            return f"Linear/ConvNd modules do not each run once per forward pass: {self.calls}"
        scale = float(reference.abs().max()) + 1e-12
        if (hooked.shape != reference.shape
                or float((hooked - reference).abs().max()) > 1e-4 * scale):
            return "some parameter is used outside its Linear/ConvNd module's forward"
        if float((alone[0] - together[0]).abs().max()) > 1e-4 * (float(alone.abs().max()) + 1e-12):
            return "an example's output depends on the other examples of its batch"
        return None

    def chunk_for(self, batch_size: int) -> int:
        """Perturbations per chunk keeping the widest layer output under CHUNK_BUDGET."""
        return max(1, CHUNK_BUDGET // (batch_size * self.widest))

    def perturbed_losses(self, loss_at: Callable, x: torch.Tensor, y: torch.Tensor, *,
                         seeds: list[int], minibatch: Callable, size: int, chunk_size: int,
                         pool: Executor, scale: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
        """L_B(w + nu) and L_B(w) per perturbation, unit noise drawn per (perturbation, point).

        The noise stds are ``scale`` times ``stds``. Perturbation k: a CPU generator seeded
        with ``seeds[k]`` draws its mini-batch (``minibatch(generator)`` -> indices), then, at
        each hooked layer in call order, a standard normal tensor of shape (batch, *layer
        output of one point) (on another device, from a generator of that device with the
        same seed).

        Perturbations run in blocks whose distinct points' layer outputs fit
        ``ELEMENT_BUDGET`` (one block when all of ``x`` does): per block, one unperturbed pass
        (L(w), and the data-only layers' cache); then chunks of ``chunk_size`` perturbations.
        The unperturbed pass runs on the block's distinct points, or on all of ``x`` when the
        block draws at least ``len(x)`` points or ``reuse`` is set; that pass does not
        depend on ``scale`` and is kept for the next call.

        Args:
            loss_at: ``loss_at(outputs, labels)`` for stacked (c, B, ...) -> (c,) losses.
            size: points per mini-batch (``minibatch``'s length).
            chunk_size: perturbations per forward pass.
            pool: runs the per-perturbation noise fills (when torch has several threads).
            scale: the noise scale (alpha, or the isotropic sigma).
        """
        fits = len(x) * self.widest <= ELEMENT_BUDGET
        block = len(seeds) if fits else max(chunk_size, ELEMENT_BUDGET // (size * self.widest))
        whole = fits and (self.reuse or len(seeds) * size >= len(x))
        parallel = torch.get_num_threads() > 1
        self.scale = scale
        losses, bases = [], []
        with torch.no_grad():
            for start in range(0, len(seeds), block):
                cpu = [torch.Generator().manual_seed(s) for s in seeds[start:start + block]]
                idx = torch.stack([minibatch(g) for g in cpu]).to(x.device)
                gens = cpu if x.device.type == "cpu" else [
                    torch.Generator(x.device).manual_seed(s)
                    for s in seeds[start:start + block]]
                if whole:
                    inputs, inverse = x, idx
                    self.kept = self.kept or self._unperturbed(x)
                    base, self.cache = self.kept
                else:
                    distinct, inverse = torch.unique(idx, return_inverse=True)
                    inputs = x[distinct]
                    base, self.cache = self._unperturbed(inputs)
                try:
                    with self.hooked():
                        for j in range(0, len(idx), chunk_size):
                            rows = inverse[j:j + chunk_size]
                            c = len(rows)
                            self.rows = rows.reshape(-1)
                            self.fill = _filler(gens[j:j + c], c, size, pool if parallel else None)
                            out = self.select(self.model(inputs))
                            labels = y[idx[j:j + c]]
                            losses.append(loss_at(out.view(c, size, *out.shape[1:]), labels))
                            ref = base.index_select(0, self.rows)
                            bases.append(loss_at(ref.view(c, size, *ref.shape[1:]), labels))
                finally:
                    self.cache, self.rows = None, None
        return torch.cat(losses), torch.cat(bases)

    def _unperturbed(self, inputs: torch.Tensor) -> tuple[torch.Tensor, dict]:
        """The model's output on ``inputs`` and the data-only layers' (mean, unit std) there."""
        self.cache, self.rows = {}, None
        try:
            with self.hooked():
                return self.select(self.model(inputs)), self.cache
        finally:
            self.cache = None


def _filler(gens: list, c: int, size: int,
            pool: Optional[Executor]) -> Callable[[torch.Tensor], None]:
    """Fills a (c * size, ...) tensor: rows k * size ... of perturbation k from ``gens[k]``."""
    def fill(tensor: torch.Tensor) -> None:
        per = tensor.view(c, size, *tensor.shape[1:])
        if pool is None or c == 1:
            for k in range(c):
                per[k].normal_(generator=gens[k])
        else:  # torch draws Gaussians on one core; perturbations are independent streams
            list(pool.map(lambda k: per[k].normal_(generator=gens[k]), range(c)))
    return fill
