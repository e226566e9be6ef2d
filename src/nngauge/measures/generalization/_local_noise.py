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

Layers that run before any perturbed output exists see only the data, so their mean and
variance are computed once per distinct data point of a chunk and then gathered for every
(perturbation, point) pair: the first layer of an MLP costs one pass over the distinct points
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
ELEMENT_BUDGET = 2**25  # widest layer output of one chunk, in elements (128 MiB in float32)


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

    ``stds`` maps parameter names to their noise standard deviations; ``select`` maps the
    model's output to the measured tensor (an adapter's output selection). State of one forward
    pass: ``inverse`` (when not None, the pass runs on the distinct points of a chunk and
    ``inverse`` maps each (perturbation, point) row to its distinct point; a hooked layer
    whose input still has ``n_distinct`` rows gathers its output rows), ``fill`` (fills a
    (rows, ...) tensor with standard Gaussians) and ``shift`` (when set, layers compute
    W + shift exactly instead of sampling: the structural check). ``widest`` is the largest
    hooked output of one point, in elements, seen by the check.
    """

    def __init__(self, model: nn.Module, stds: dict,
                 select: Callable[[Any], torch.Tensor] = lambda out: out):
        self.model, self.stds, self.select = model, stds, select
        self.names = {module: name for name, module in model.named_modules()
                      if type(module) in LOCAL_MODULES}
        # each hooked module's (weight, bias) names in named_parameters(); bias None if absent
        self.keys = {module: (_qualified(name, "weight"),
                              None if module.bias is None else _qualified(name, "bias"))
                     for module, name in self.names.items()}
        self.inverse: Optional[torch.Tensor] = None
        self.n_distinct = 0
        self.fill: Callable[[torch.Tensor], None] = lambda noise: None
        self.shift: Optional[dict] = None
        self.calls: dict[str, int] = {}
        self.widest = 1

    @contextmanager
    def hooked(self) -> Iterator["LocalNoise"]:
        """The hooks, registered while the context is open (removed on exit and on error)."""
        handles = [module.register_forward_hook(self._hook) for module in self.names]
        try:
            yield self
        finally:
            for handle in handles:
                handle.remove()

    def _hook(self, module: nn.Module, args: tuple, output: torch.Tensor) -> torch.Tensor:
        name = self.names[module]
        self.calls[name] = self.calls.get(name, 0) + 1
        x = args[0]
        gather = self.inverse is not None and x.shape[0] == self.n_distinct
        weight_key, bias_key = self.keys[module]
        if self.shift is not None:
            bias = None if bias_key is None else module.bias + self.shift[bias_key]
            output = _affine(module, x, module.weight + self.shift[weight_key], bias)
            self.widest = max(self.widest, output[0].numel())
            return output[self.inverse] if gather else output
        var_bias = None if bias_key is None else self.stds[bias_key].square()
        std = _affine(module, x.square(), self.stds[weight_key].square(), var_bias).sqrt_()
        if gather:
            output, std = output.index_select(0, self.inverse), std.index_select(0, self.inverse)
        noise = torch.empty_like(output)
        self.fill(noise)
        return noise.mul_(std).add_(output)

    def blocker(self, params: dict, x: torch.Tensor) -> Optional[str]:
        """Why this estimator cannot stand for weight noise on the model (None when it can).

        Structure: every parameter in an exact Linear/ConvNd module under its own name, no
        module registered twice, no batch statistics. Then numerically, on up to
        ``PROBE_POINTS`` = 16 points of ``x`` each repeated twice (so the gathering runs): the hooked pass with every layer
        shifted by a sizeable random shift equals ``functional_call`` with the shifted
        parameters (no parameter is used outside its module's forward, and the data flow
        survives the gathering), each hooked module runs once, and a point's output does not
        depend on the rest of its batch.
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
        self.shift, self.inverse, self.n_distinct, self.calls = shift, rows, len(distinct), {}
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
            self.shift, self.inverse = None, None
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
        """Perturbations per chunk keeping the widest layer output under ELEMENT_BUDGET."""
        return max(1, ELEMENT_BUDGET // (batch_size * self.widest))

    def perturbed_losses(self, loss_at: Callable, x: torch.Tensor, y: torch.Tensor, *,
                         seeds: list[int], minibatch: Callable, chunk_size: int,
                         pool: Executor) -> tuple[torch.Tensor, torch.Tensor]:
        """L_B(w + nu) and L_B(w) per perturbation, unit noise drawn per (perturbation, point).

        Perturbation k: a CPU generator seeded with ``seeds[k]`` draws its mini-batch
        (``minibatch(generator)`` -> indices), then, at each hooked layer in call order, a
        standard normal tensor of shape (batch, *layer output of one point) (on another
        device, from a generator of that device with the same seed).

        Args:
            loss_at: ``loss_at(outputs, labels)`` for stacked (c, B, ...) -> (c,) losses.
            chunk_size: perturbations per forward pass.
            pool: runs the per-perturbation noise fills.
        """
        losses, bases = [], []
        with torch.no_grad():
            for start in range(0, len(seeds), chunk_size):
                chunk = seeds[start:start + chunk_size]
                cpu = [torch.Generator().manual_seed(s) for s in chunk]
                idx = torch.stack([minibatch(g) for g in cpu]).to(x.device)
                gens = cpu if x.device.type == "cpu" else [
                    torch.Generator(x.device).manual_seed(s) for s in chunk]
                c, size = idx.shape
                flat = idx.reshape(-1)
                distinct, inverse = torch.unique(flat, return_inverse=True)
                gathered = len(distinct) < len(flat)
                inputs = x[distinct] if gathered else x[flat]

                def fill(tensor: torch.Tensor, gens=gens, c=c, size=size) -> None:
                    per = tensor.view(c, size, *tensor.shape[1:])
                    list(pool.map(lambda k: per[k].normal_(generator=gens[k]), range(c)))

                base = self.select(self.model(inputs))
                self.fill, self.n_distinct = fill, len(distinct)
                self.inverse = inverse if gathered else None
                try:
                    with self.hooked():
                        out = self.select(self.model(inputs))
                finally:
                    self.inverse = None
                if gathered:
                    base = base[inverse]
                labels = y[idx]
                losses.append(loss_at(out.view(c, size, *out.shape[1:]), labels))
                bases.append(loss_at(base.view(c, size, *base.shape[1:]), labels))
        return torch.cat(losses), torch.cat(bases)
