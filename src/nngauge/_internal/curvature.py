"""Curvature engine: products of the Hessian or the Gauss-Newton matrix of a loss with vectors
in parameter space, and the Krylov estimators built on them.

With f(theta, x) the network's output and l(f, y) a loss averaged over a batch, the loss of the
samples used is the mean L(theta) = sum_b (n_b / N) L_b(theta) over batches b of n_b samples
(N in all). For a block theta_B of parameters (the others held fixed) and vectors v in R^|B|:

- Hessian-vector product H v = d/dt grad L(theta_B + t v) at t = 0 (Pearlmutter, "Fast Exact
  Multiplication by the Hessian", Neural Computation 1994);
- generalized Gauss-Newton product G v = J^T H_l J v, J = d f / d theta_B the Jacobian of a
  batch's outputs and H_l = d^2 L_b / d f^2 the Hessian of the loss in the outputs
  (Schraudolph, "Fast Curvature Matrix-Vector Products for Second-Order Gradient Descent",
  Neural Computation 2002).

Products are taken batch by batch and weighted by n_b / N; the vectors of one call go through
``torch.func.vmap`` in chunks sized to the memory one tangent costs (a loop where vmap cannot
batch the model). A batch's product is differentiated one of two ways:

- afresh at each call, forward-over-reverse: H v = ``jvp(grad(L_b))``; J v by ``jvp``, H_l (J v)
  by ``jvp`` of ``grad``, J^T (.) by ``vjp``. The primal pass is shared by a chunk's vectors
  but repeated at every call;
- from a retained graph, reverse-over-reverse: the pullback of ``vjp(grad(L_b))`` is v -> H v
  (H is symmetric), that of ``vjp(f)`` is u -> J^T u and J v its own vjp (it is linear in u).
  Each product is then one backward pass of the kept graph: on CPU about a third of a fresh
  product for one vector (a Lanczos step), as fast for a chunk. Graphs are kept while they fit
  in RETAIN_BUDGET elements, batch by batch; the others are differentiated afresh.

A model with no forward-mode derivative (LSTM's fused CPU kernels), or whose forward-mode pass
fails (``F.mse_loss`` under ``vmap``), is differentiated afresh by reverse-over-reverse, and the
measure's notes say so. Iterates are kept in the model's dtype (float64 models are measured in
float64); tridiagonal and scalar algebra is float64. On top of the products:

- :func:`lanczos`: the largest eigenpairs by Lanczos with full reorthogonalization;
- :func:`estimate_trace`: the trace by Hutch++ (Meyer, Musco, Musco & Woodruff, "Hutch++:
  Optimal Stochastic Trace Estimation", SOSA 2021) or Hutchinson's estimator, chosen from the
  sketch's own products;
- :func:`slq`: the nodes and weights of stochastic Lanczos quadrature (Lin, Saad & Yang,
  "Approximating Spectral Densities of Large Matrices", SIAM Review 2016; Ghorbani, Krishnan &
  Xiao, "An Investigation into Neural Net Optimization via Hessian Eigenvalue Density", ICML
  2019).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Literal, Optional, Sequence

import numpy as np
import torch
from torch import nn
from torch.autograd.graph import saved_tensors_hooks
from torch.func import functional_call, grad, jvp, vjp

from nngauge._internal.batching import Vectorizer
from nngauge._internal.lanczos import Lanczos, tridiagonal_eigh

Kind = Literal["hessian", "ggn"]
KINDS = ("hessian", "ggn")
VECTOR_BUDGET = 2**26
"""Elements a chunk of vectors may hold for its products (saved activations and tangents)."""
RETAIN_BUDGET = 2**27
"""Elements the retained graphs of an operator and its restrictions may hold."""
BASIS_BUDGET = 2**27
"""Elements the Lanczos bases of a chunk of quadrature probes may hold."""
_BATCH_STATISTICS = nn.modules.batchnorm._BatchNorm
_RUNNING = ("running_mean", "running_var", "num_batches_tracked")


def functional_model(model: nn.Module, select: Callable[[Any], torch.Tensor]
                     ) -> Callable[[dict, torch.Tensor], torch.Tensor]:
    """``(theta, x) -> select(model(x))`` with the parameters in ``theta`` replaced
    (``torch.func.functional_call``). Batchnorm layers in train mode normalize by the batch's
    statistics without updating their running statistics (passed as None)."""
    skipped = {f"{name}.{b}" if name else b: None for name, m in model.named_modules()
               if isinstance(m, _BATCH_STATISTICS) and m.training
               for b in _RUNNING if getattr(m, b, None) is not None}
    return lambda theta, x: select(functional_call(model, {**theta, **skipped}, (x,)))


@dataclass
class _Shared:
    """State shared by an operator and its restrictions: how fresh products are
    differentiated, the vmap fallback, the retained products and the room left for them, the
    cost of a sample, and the number of matrix-vector products taken."""

    vectorize: Vectorizer
    note: Callable[[str], None]
    room: int
    forward: bool = True
    products: int = 0
    saved_per_sample: float = 0.0
    retained: dict = field(default_factory=dict)


class CurvatureOperator:
    """v -> C v, C the Hessian or the Gauss-Newton matrix of the mean loss over ``batches`` in
    the parameters of ``params``; vectors are rows of a (k, dim) tensor, the parameters
    flattened in order and concatenated.

    A batch's product reuses its retained graph while the graphs' estimated size (3 times the
    tensors one backward pass saves) fits in RETAIN_BUDGET elements, else is differentiated
    afresh at each call (see the module docstring).

    Args:
        call: ``call(theta, x)`` -> outputs, theta a dict of (some) parameters.
        loss_fn: ``loss_fn(outputs, labels)`` -> the scalar mean loss of a batch.
        params: the differentiated parameters, name -> tensor (not modified).
        batches: (inputs, labels) pairs.
        kind: "hessian" or "ggn".
        chunk_size: vectors per vmapped product (None: as many as VECTOR_BUDGET allows).
        retain: retain graphs (within RETAIN_BUDGET); False: every product afresh.
        note: called once with a sentence when a fallback is taken.
    """

    def __init__(self, call: Callable, loss_fn: Callable, params: dict,
                 batches: Sequence[tuple[torch.Tensor, torch.Tensor]], *, kind: Kind = "hessian",
                 chunk_size: Optional[int] = None, retain: bool = True,
                 note: Callable[[str], None] = lambda s: None,
                 _shared: Optional[_Shared] = None) -> None:
        self.call, self.loss_fn, self.kind = call, loss_fn, kind
        self.params = dict(params)
        self.batches = list(batches)
        first = next(iter(self.params.values()))
        self.dtype, self.device = first.dtype, first.device
        self.dim = sum(p.numel() for p in self.params.values())
        if _shared is None:
            _shared = _Shared(Vectorizer(note), note, room=RETAIN_BUDGET if retain else 0)
            _shared.saved_per_sample = self._saved_per_sample()
        self._shared = _shared
        largest = max(len(y) for _, y in self.batches)
        self.chunk_size = chunk_size or max(1, VECTOR_BUDGET // int(
            2 * (_shared.saved_per_sample * largest + self.dim)))

    @property
    def products(self) -> int:
        """Matrix-vector products taken so far (by this operator and its restrictions)."""
        return self._shared.products

    def restricted(self, *, names: Optional[Sequence[str]] = None,
                   batches: Optional[Sequence[tuple]] = None) -> "CurvatureOperator":
        """The same curvature on a sub-block of parameters and/or other batches."""
        params = self.params if names is None else {n: self.params[n] for n in names}
        return CurvatureOperator(self.call, self.loss_fn, params,
                                 self.batches if batches is None else batches, kind=self.kind,
                                 chunk_size=self.chunk_size, _shared=self._shared)

    def split(self, vectors: torch.Tensor) -> dict[str, torch.Tensor]:
        """Rows (k, dim) as a dict name -> (k, *shape)."""
        parts = torch.split(vectors, [p.numel() for p in self.params.values()], dim=1)
        return {n: part.reshape(len(vectors), *p.shape).to(p.dtype)
                for (n, p), part in zip(self.params.items(), parts)}

    def flat(self, tensors: dict[str, torch.Tensor]) -> torch.Tensor:
        """A dict name -> (k, *shape) as rows (k, dim)."""
        return torch.cat([tensors[n].reshape(tensors[n].shape[0], -1).to(self.dtype)
                          for n in self.params], dim=1)

    def apply(self, vectors: torch.Tensor) -> torch.Tensor:
        """C v for each row v of ``vectors`` (k, dim), in the model's dtype."""
        vectors = vectors.to(dtype=self.dtype, device=self.device)
        try:
            out = self._apply(vectors)
        except (NotImplementedError, RuntimeError) as exc:
            if not self._shared.forward:
                raise
            # a missing forward-mode derivative (a genuine error raises again below)
            out = self._reverse(vectors, exc)
        self._shared.products += len(vectors)
        return out

    def _reverse(self, vectors: torch.Tensor, exc: Exception) -> torch.Tensor:
        """The products by reverse-over-reverse differentiation, from now on."""
        self._shared.forward = False
        out = self._apply(vectors)
        self._shared.note(f"forward-mode differentiation failed ({str(exc).splitlines()[0]}); "
                          "curvature products by reverse-over-reverse differentiation")
        return out

    def _apply(self, vectors: torch.Tensor) -> torch.Tensor:
        out = torch.zeros_like(vectors)
        total = sum(len(y) for _, y in self.batches)
        for x, y in self.batches:
            product = self._product(x, y)
            for start in range(0, len(vectors), self.chunk_size):
                rows = slice(start, start + self.chunk_size)
                out[rows] += self._mapped(product, vectors[rows]) * (len(y) / total)
        return out

    def _mapped(self, product: Callable[[dict], dict], vectors: torch.Tensor) -> torch.Tensor:
        """``product`` of each row, vmapped (called directly for one vector: a Lanczos step)."""
        if len(vectors) > 1:
            return self.flat(self._shared.vectorize(product)(self.split(vectors)))
        one = product({n: v[0] for n, v in self.split(vectors).items()})
        return self.flat({n: v[None] for n, v in one.items()})

    def _product(self, x: torch.Tensor, y: torch.Tensor) -> Callable[[dict], dict]:
        """v -> C_b v for one batch (one vector; vmapped by the caller): retained while there
        is room, else afresh."""
        shared = self._shared
        key = (self.kind, tuple(self.params), id(x))
        if key in shared.retained:
            return shared.retained[key]
        cost = int(3 * shared.saved_per_sample * len(y)) + self.dim
        if cost > shared.room:
            return self._fresh(x, y)
        shared.room -= cost
        shared.retained[key] = self._retained(x, y)
        return shared.retained[key]

    def _retained(self, x: torch.Tensor, y: torch.Tensor) -> Callable[[dict], dict]:
        """C_b v from the graph of one pass, kept: the vjp of the gradient is H v (H is
        symmetric); for G, J v is the vjp of the pullback u -> J^T u (linear in u). The
        closures hold no reference to the operator (no cycle keeps a graph alive)."""
        call, loss_fn = self.call, self.loss_fn
        if self.kind == "hessian":
            _, pull = vjp(grad(lambda theta: loss_fn(call(theta, x), y)), self.params)
            return lambda v: pull(v)[0]
        out, pull = vjp(lambda theta: call(theta, x), self.params)
        push = _transposed(pull, out)
        return lambda v: pull(_hvp(lambda o: loss_fn(o, y), out, push(v), False))[0]

    def _fresh(self, x: torch.Tensor, y: torch.Tensor) -> Callable[[dict], dict]:
        """C_b v differentiated at each call: forward-over-reverse, or reverse-over-reverse
        after a forward-mode failure."""
        forward, params = self._shared.forward, self.params

        def outputs(theta: dict) -> torch.Tensor:
            return self.call(theta, x)

        def batch_loss(out: torch.Tensor) -> torch.Tensor:
            return self.loss_fn(out, y)

        if self.kind == "hessian":
            return lambda v: _hvp(lambda theta: batch_loss(outputs(theta)), params, v, forward)
        out, pull = vjp(outputs, params)
        push = None if forward else _transposed(pull, out)

        def ggn(v: dict) -> dict:
            jv = jvp(outputs, (params,), (v,))[1] if forward else push(v)
            return pull(_hvp(batch_loss, out, jv, forward))[0]

        return ggn

    def _saved_per_sample(self) -> float:
        """Elements autograd saves for one backward pass of the loss, per sample of the
        largest batch (the memory a tangent or a retained graph costs)."""
        x, y = max(self.batches, key=lambda b: len(b[1]))
        saved = 0

        def pack(t: torch.Tensor) -> torch.Tensor:
            nonlocal saved
            saved += t.numel()
            return t

        leaves = {n: p.detach().requires_grad_() for n, p in self.params.items()}
        with torch.enable_grad(), saved_tensors_hooks(pack, lambda t: t):
            self.loss_fn(self.call(leaves, x), y)
        return saved / len(y)


def _dot(a: dict, b: dict) -> torch.Tensor:
    return sum((a[n] * b[n]).sum() for n in a)


def _hvp(fn: Callable, primal: Any, tangent: Any, forward: bool) -> Any:
    """The Hessian of scalar ``fn`` at ``primal`` times ``tangent`` (tensors or dicts)."""
    if forward:
        return jvp(grad(fn), (primal,), (tangent,))[1]
    if isinstance(primal, dict):
        return grad(lambda p: _dot(grad(fn)(p), tangent))(primal)
    return grad(lambda p: (grad(fn)(p) * tangent).sum())(primal)


def _transposed(pull: Callable, out: torch.Tensor) -> Callable[[dict], torch.Tensor]:
    """v -> J v from the pullback u -> J^T u (the vjp of a linear map is its transpose)."""
    _, push = vjp(lambda u: pull(u)[0], torch.zeros_like(out))
    return lambda v: push(v)[0]


# ------------------------------------------------------------------------------- random draws


def rademacher(count: int, dim: int, like: CurvatureOperator,
               generator: Optional[torch.Generator]) -> torch.Tensor:
    """(count, dim) independent +-1 entries, in the operator's dtype and device."""
    device = generator.device if generator is not None else torch.device("cpu")
    signs = torch.randint(0, 2, (count, dim), generator=generator, device=device,
                          dtype=like.dtype)
    return signs.mul_(2).sub_(1).to(like.device)


def sphere_probes(count: int, dim: int, like: CurvatureOperator,
                  generator: Optional[torch.Generator]) -> torch.Tensor:
    """(count, dim) unit vectors, each uniform on the sphere, orthonormal in groups of ``dim``
    (rows of Haar-random orthogonal frames: unbiased for tr(.)/dim one by one, exact with
    ``dim`` of them)."""
    device = generator.device if generator is not None else torch.device("cpu")
    frames = []
    for start in range(0, count, dim):
        gauss = torch.randn(dim, min(dim, count - start), generator=generator, device=device,
                            dtype=torch.float64)
        q, r = torch.linalg.qr(gauss)
        frames.append((q * torch.sign(torch.diagonal(r))).T)
    return torch.cat(frames).to(dtype=like.dtype, device=like.device)


# ------------------------------------------------------------------------------------ Lanczos


@dataclass(frozen=True)
class RitzPairs:
    """Ritz pairs of a Lanczos run, largest value first.

    Attributes:
        values: (k,) Ritz values.
        vectors: (k, dim) unit Ritz vectors, or None when not asked for.
        residuals: (k,) ||C u - theta u||: computed with k more products when the vectors
            were asked for, else Lanczos' estimate beta_m |e_m^T y|.
        steps: Lanczos steps taken (matrix-vector products, without the residuals').
        converged: every residual <= tol * max |Ritz value|.
    """

    values: np.ndarray
    vectors: Optional[torch.Tensor]
    residuals: np.ndarray
    steps: int
    converged: bool


def lanczos(op: CurvatureOperator, k: int, steps: int, tol: float,
            generator: Optional[torch.Generator], *, vectors: bool = False) -> RitzPairs:
    """The ``k`` largest eigenvalues of C by Lanczos with full reorthogonalization
    (:class:`nngauge._internal.lanczos.Lanczos`).

    From a Rademacher start q_1 / ||q_1||, m steps give T_m = Q_m^T C Q_m, whose Ritz pairs
    (theta_i, Q_m y_i) have residuals beta_m |e_m^T y_i|; the run stops when the ``k``
    largest are <= tol * max_i |theta_i|, after ``steps`` steps, or when the Krylov space is
    the whole space. When the Krylov space is invariant before that, the run restarts from a
    random vector orthogonal to q_1..q_j. The start and restarts draw from ``generator``: the
    result is deterministic given it.

    Args:
        op: the operator.
        k: eigenvalues wanted (<= op.dim and <= steps).
        steps: most Lanczos steps.
        tol: relative residual at which to stop.
        generator: for the start vector.
        vectors: also return the Ritz vectors and their residuals computed explicitly (k more
            products).

    Returns:
        :class:`RitzPairs`.
    """
    n, m = op.dim, min(steps, op.dim)
    run = Lanczos(rademacher(1, n, op, generator) / math.sqrt(n), m)
    for j in range(m):
        invariant = run.step(op.apply(run.q))
        values, ritz = run.ritz()
        top = ritz[:, :, -k:]
        scale = float(values.abs().max())
        if j + 1 == m or (j + 1 >= k and bool((run.residuals(top) <= tol * scale).all())):
            break
        run.advance(rademacher(1, n, op, generator) if bool(invariant.any()) else None)
    order = values[0].flip(0)[:k]
    residuals = run.residuals(ritz.flip(2)[:, :, :k])[0].numpy()
    u = None
    if vectors:
        u = _signed(torch.nn.functional.normalize(run.vectors(ritz.flip(2)[:, :, :k])[0], dim=1))
        theta = order.to(dtype=op.dtype, device=op.device)
        residuals = (op.apply(u) - theta[:, None] * u).norm(dim=1).double().cpu().numpy()
    return RitzPairs(values=order.numpy().copy(), vectors=u, residuals=residuals,
                     steps=run.steps, converged=bool((residuals <= tol * scale).all()))


def _signed(u: torch.Tensor) -> torch.Tensor:
    """Rows with their largest-magnitude entry made positive (a deterministic sign)."""
    pivot = u.gather(1, u.abs().argmax(dim=1, keepdim=True))
    return u * torch.where(pivot < 0, -1.0, 1.0).to(u.dtype)


# ------------------------------------------------------------------------------------- trace

TraceMethod = Literal["auto", "hutch++", "hutchinson"]
TRACE_METHODS = ("auto", "hutch++", "hutchinson")


@dataclass(frozen=True)
class TraceEstimate:
    """tr(C) by Hutch++ or Hutchinson.

    Attributes:
        trace: the estimate.
        stderr: standard error of its Hutchinson part (0 when the sketch spans the space, NaN
            with fewer than 2 Hutchinson probes).
        products: matrix-vector products spent.
        method: the estimator used, "hutch++" or "hutchinson".
        captured: with method "auto", the estimated fraction of ||C||_F^2 in the span of half
            the sketch (the figure the choice read); None otherwise.
    """

    trace: float
    stderr: float
    products: int
    method: str
    captured: Optional[float] = None


def estimate_trace(op: CurvatureOperator, budget: int, generator: Optional[torch.Generator],
                   method: TraceMethod = "auto") -> TraceEstimate:
    """tr(C) with ``budget`` (>= 3) products of C and Rademacher probes.

    - "hutchinson": the mean of z^T C z over ``budget`` probes (Hutchinson, "A Stochastic
      Estimator of the Trace of the Influence Matrix for Laplacian Smoothing Splines", 1989);
      its variance is 2 (||C||_F^2 - sum_i C_ii^2) / budget.
    - "hutch++": with s = budget // 3 (at most dim) columns S and g = budget - 2 s more G,
      Q = orth(C S) and

          tr(C) ~ tr(Q^T C Q) + (1 / g) sum_i g_i^T (I - Q Q^T) C (I - Q Q^T) g_i

      (Meyer, Musco, Musco & Woodruff, "Hutch++: Optimal Stochastic Trace Estimation",
      SOSA 2021, Algorithm 1): exact on the span of Q, Hutchinson on the rest, whose variance
      is that of the deflated matrix. When s = dim, Q spans the space and tr(Q^T C Q) is the
      trace (2 dim products, no Hutchinson part).
    - "auto": the sketch Y = C S is taken first; its probes are Hutchinson samples already
      (z^T (C z) costs nothing more). The fraction f of ||C||_F^2 that the sketch's span
      captures is estimated from the products at hand, leaving each image out of the span it
      is tested against (:func:`_captured_fraction`; E_z ||Q^T C z||^2 = ||C Q||_F^2 and
      E_z ||C z||^2 = ||C||_F^2 for Rademacher z). Deflating leaves about (1 - f) of the
      variance for g samples, Hutchinson keeps all of it for ``budget`` samples: Hutch++ goes
      on when (1 - f) / g < 1 / budget, else Hutchinson takes the remaining budget - s probes
      (the sketch's s included, so no product is wasted). Rank s - 1 for s errs towards
      Hutchinson. Hutch++ pays on a spectrum dominated by a few eigenvalues (trained networks'
      Hessians); at initialization the spectrum is flat and Hutchinson wins (Persson,
      Cortinovis & Kressner, "Improved Variants of the Hutch++ Algorithm for Trace
      Estimation", SIAM J. Matrix Anal. Appl. 2022, discuss the same trade-off).
    """
    n = op.dim
    s = min(budget // 3, n)
    if method == "hutchinson":
        return _hutchinson(op, rademacher(budget, n, op, generator), None, None)
    sketch = rademacher(s, n, op, generator)
    images = op.apply(sketch)
    if s == n:
        q = torch.linalg.qr(images.T).Q.T
        return TraceEstimate(trace=_quadratic(op, q).sum().item(), stderr=0.0,
                             products=2 * n, method="hutch++")
    captured = _captured_fraction(images) if method == "auto" else None
    g = budget - 2 * s
    if captured is not None and (1 - captured) * budget >= g:
        more = rademacher(budget - s, n, op, generator)
        return _hutchinson(op, more, (sketch, images), captured)
    q = torch.linalg.qr(images.T).Q.T
    low_rank = _quadratic(op, q).sum().item()
    probes = rademacher(g, n, op, generator)
    samples = _quadratic(op, probes - (probes @ q.T) @ q)
    return TraceEstimate(trace=low_rank + samples.mean().item(), stderr=_stderr(samples),
                         products=budget, method="hutch++", captured=captured)


def _quadratic(op: CurvatureOperator, rows: torch.Tensor,
               images: Optional[torch.Tensor] = None) -> torch.Tensor:
    """float64 (count,): v^T C v for each row v (``images`` = C v when already taken). The
    dot products run in the operator's dtype (blocked summation: relative error about
    sqrt(dim) eps, 3e-5 in float32 for 10^5 parameters, far below the estimators' own)."""
    images = op.apply(rows) if images is None else images
    return torch.linalg.vecdot(rows, images).double().cpu()


def _hutchinson(op: CurvatureOperator, probes: torch.Tensor,
                taken: Optional[tuple[torch.Tensor, torch.Tensor]], captured: Optional[float]
                ) -> TraceEstimate:
    samples = _quadratic(op, probes)
    if taken is not None:
        samples = torch.cat([_quadratic(op, *taken), samples])
    return TraceEstimate(trace=samples.mean().item(), stderr=_stderr(samples),
                         products=len(samples), method="hutchinson", captured=captured)


def _captured_fraction(images: torch.Tensor) -> Optional[float]:
    """f = sum_i ||P_{-i} y_i||^2 / sum_i ||y_i||^2 over the sketch's images y_i = C s_i, P_{-i}
    the projection on the span of the other images: each term is an unbiased estimate of
    ||C Q_{-i}||_F^2 (s_i is independent of Q_{-i}), so f estimates the fraction of ||C||_F^2 a
    rank-(s - 1) sketch captures. ||(I - P_{-i}) y_i||^2 = 1 / (G^{-1})_ii with G = Y Y^T
    (the exchangeability trick of Epperly, Tropp & Webber, "XTrace: Making the Most of Every
    Sample in Stochastic Trace Estimation", SIAM J. Matrix Anal. Appl. 2024); eigenvalues of G
    below its round-off are clamped, which sends the residual of an image in the span of the
    others to 0. None with fewer than 2 images, or C S = 0."""
    if len(images) < 2:
        return None
    gram = images.double() @ images.double().T
    norms = gram.diagonal()
    total = float(norms.sum())
    if total <= 0:
        return None
    values, vectors = torch.linalg.eigh(gram)
    values = values.clamp_min(float(values[-1]) * len(images) * torch.finfo(images.dtype).eps)
    residuals = 1 / (vectors.pow(2) / values).sum(1)
    return float((norms - residuals).clamp_min(0).sum()) / total


def _stderr(samples: torch.Tensor) -> float:
    """Standard error of the mean of the samples (NaN with fewer than 2)."""
    return float(samples.std() / math.sqrt(len(samples))) if len(samples) > 1 else math.nan


# --------------------------------------------------------------- stochastic Lanczos quadrature


def slq(op: CurvatureOperator, n_probes: int, steps: int, generator: Optional[torch.Generator]
        ) -> tuple[np.ndarray, np.ndarray]:
    """Nodes and weights of stochastic Lanczos quadrature, (n_probes, m) each, m = min(steps,
    dim).

    For a unit probe v, m Lanczos steps from v give T_m = Y diag(theta) Y^T; the Gauss
    quadrature with nodes theta_i and weights tau_i = (e_1^T y_i)^2 (summing to 1) integrates
    polynomials of degree < 2m exactly against v's spectral measure: sum_i tau_i theta_i^p =
    v^T C^p v. Probes are uniform on the sphere (:func:`sphere_probes`), so the average over
    probes of sum_i tau_i g(theta_i) estimates (1 / dim) tr g(C) = (1 / dim) sum_j g(lambda_j).
    The probes of a chunk run together (one vmapped product per step), each reorthogonalized
    against its own basis; a probe whose Krylov space is invariant stops early (its nodes and
    weights beyond are 0).
    """
    n, m = op.dim, min(steps, op.dim)
    probes = sphere_probes(n_probes, n, op, generator)
    nodes, weights = np.zeros((n_probes, m)), np.zeros((n_probes, m))
    chunk = max(1, BASIS_BUDGET // (m * n))
    for start in range(0, n_probes, chunk):
        run = _lanczos_chunk(op, probes[start:start + chunk], m)
        for i, length in enumerate(run.lengths.tolist()):
            theta, y = tridiagonal_eigh(run.alpha[i:i + 1, :length], run.beta[i:i + 1, :length - 1])
            nodes[start + i, :length] = theta[0].numpy()
            weights[start + i, :length] = (y[0, 0] ** 2).numpy()
    return nodes, weights


def _lanczos_chunk(op: CurvatureOperator, probes: torch.Tensor, m: int) -> Lanczos:
    """m Lanczos steps from each unit probe, all in one vmapped product per step; a probe
    whose Krylov space is invariant stops (no more products for it)."""
    run = Lanczos(probes, m)
    for j in range(m):
        live = run.live.to(probes.device)
        if not bool(live.any()):
            break
        if bool(live.all()):
            w = op.apply(run.q)
        else:
            w = torch.zeros_like(run.q)
            w[live] = op.apply(run.q[live])
        run.step(w)
        if j + 1 < m:
            run.advance()
    return run


__all__ = ["BASIS_BUDGET", "CurvatureOperator", "KINDS", "Kind", "RETAIN_BUDGET", "RitzPairs",
           "TRACE_METHODS", "TraceEstimate", "TraceMethod", "VECTOR_BUDGET", "estimate_trace",
           "functional_model", "lanczos", "rademacher", "slq", "sphere_probes"]
