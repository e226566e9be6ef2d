"""Data-free layer spectra (Martin and Mahoney): the empirical spectral density of every weight
matrix, its power-law tail, its Marchenko-Pastur bulk, and the norms built from them.

For a weight matrix W, arranged N x M with N >= M (transposed where needed: the spectrum does
not depend on it), the empirical spectral density (ESD) is that of the M x M correlation matrix
X = W^T W (Martin and Mahoney, "Implicit Self-Regularization in Deep Neural Networks: Evidence
from Random Matrix Theory and Implications for Learning", JMLR 22(165), 2021, sections 2-3):
its eigenvalues are the squared singular values lambda_i = s_i(W)^2. They are kept unnormalized,
as in the norm-based metrics of Martin, Peng and Mahoney ("Predicting trends in the quality of
state-of-the-art neural networks without access to training or testing data", Nature
Communications 12, 2021), where sum_i lambda_i = ||W||_F^2 and lambda_max = ||W||_2^2, and as
WeightWatcher reports them; the JMLR paper's X = W^T W / N has the eigenvalues lambda_i / N. The
exponent alpha, the stable rank, the MP soft rank and the spike count do not depend on this
scale; ``log_spectral_norm``, ``log_norm``, ``alpha_weighted`` and ``log_alpha_norm`` do.

Per matrix:

- ``alpha``: the exponent of a power law rho(lambda) ~ lambda^-alpha fitted to the ESD's upper
  tail by the method of Clauset, Shalizi and Newman ("Power-Law Distributions in Empirical
  Data", SIAM Review 51(4), 2009, sections 3.1 and 3.3): for each candidate x_min (every
  distinct positive eigenvalue but the largest) the continuous maximum-likelihood exponent of
  the n eigenvalues x_i >= x_min, alpha = 1 + n / sum_i ln(x_i / x_min) (section 3.1), and
  the Kolmogorov-Smirnov distance D = sup_{x >= x_min} |S(x) - P(x)| between the tail's
  empirical distribution S and the fitted P(x) = 1 - (x / x_min)^(1 - alpha) (section 3.3:
  the supremum over both sides of every step of S); x_min is the candidate of least D. Every
  candidate is scored in one vectorized pass (blocks of candidates x eigenvalues). Reported
  with ``xmin``, ``ks_distance``, ``n_tail`` and the standard error (alpha - 1) / sqrt(n_tail)
  (section 3.1);
- ``log_spectral_norm`` = log10 lambda_max = log10 ||W||_2^2, ``log_norm`` = log10 sum_i
  lambda_i = log10 ||W||_F^2, ``alpha_weighted`` = alpha log10 lambda_max (the "weighted
  alpha"), ``log_alpha_norm`` = log10 sum_i lambda_i^alpha (the log Schatten alpha-norm,
  ||X||_alpha^alpha) (Nature Communications 2021);
- ``stable_rank`` = ||W||_F^2 / ||W||_2^2 = sum_i lambda_i / lambda_max (JMLR 2021);
- ``mp_soft_rank`` = lambda_+ / lambda_max, the bulk edge of the Marchenko-Pastur law fitted to
  the ESD over its largest eigenvalue (JMLR 2021): near 1 for a random matrix, small when a
  heavy tail or spikes carry the largest eigenvalue (it exceeds 1 for a spectrum narrower than
  MP's, e.g. an orthogonal matrix). For entries of variance sigma^2, X / N has the MP law with
  edges sigma^2 (1 +- 1/sqrt(Q))^2, Q = N / M, so lambda_+ = sigma^2 (sqrt(N) + sqrt(M))^2
  here. sigma is fitted to the bulk by matching the ESD's median to the MP law's median (the
  noise-level estimator of Gavish and Donoho, "The Optimal Hard Threshold for Singular Values
  is 4/sqrt(3)", IEEE Trans. Information Theory 60(8), 2014): spikes and a heavy upper tail
  hardly move the median. WeightWatcher fits sigma otherwise (a kernel density matched to the
  MP density over a grid of sigma), so its ``mp_softrank`` differs;
- ``n_spikes``: the eigenvalues above the bulk edge, counted past the edge's finite-size
  (Tracy-Widom) fluctuation: above sigma^2 (mu + t s), mu = (sqrt(N - 1) + sqrt(M))^2,
  s = (sqrt(N - 1) + sqrt(M)) (1 / sqrt(N - 1) + 1 / sqrt(M))^(1/3) (Johnstone, "On the
  Distribution of the Largest Eigenvalue in Principal Components Analysis", Annals of
  Statistics 29(2), 2001, Theorem 1), t = :data:`TRACY_WIDOM_99` the 99% quantile of the
  Tracy-Widom law: a Gaussian matrix shows a spike in about 1% of draws.

Which matrices: every weight matrix of the model, found by walking its modules (no data, no
forward pass): the ``weight`` of ``nn.Linear`` (and of any module whose own ``weight`` is 2-D,
e.g. Hugging Face's ``Conv1D``), ``nn.Embedding`` and ``nn.EmbeddingBag``; the
``weight_ih_l*`` / ``weight_hh_l*`` (and ``weight_hr_l*``) matrices of recurrent modules (LSTM,
GRU, RNN), each its own row; the ``in_proj_weight`` (or ``q_proj_weight``, ...) of
``nn.MultiheadAttention``, whose ``out_proj`` is a Linear; convolutions (``nn.Conv1d/2d/3d``
and transposed ones), as ``conv`` says:

- ``"unfold"`` (default, the issue's reading): one matrix per convolution, its kernel
  C_out x (C_in / groups) k_1 ... k_d, each output channel's incoming weights a row (the matrix
  of the unfolded convolution; groups not separated);
- ``"per_position"``: one C_out x (C_in / groups) matrix per kernel position, their eigenvalues
  pooled into one ESD (Martin and Mahoney's treatment, and WeightWatcher's default); the
  stable rank is then sum over positions of ||W_p||_F^2 / max_p ||W_p||_2^2.

A parameter shared by several modules is one row, under its first name. The graph-based weight
layers of :mod:`nngauge.measures.generalization._weights` are not used: they need a traced
forward pass, which a data-free measure has no input for, and they omit embeddings and
recurrent weights.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Literal, Optional, Sequence

import numpy as np
import torch
from torch import nn

from nngauge._constraints import Choice, Integer, constrained
from nngauge._results import Result
from nngauge.errors import invalid

ConvMatrix = Literal["unfold", "per_position"]
MatrixKind = Literal["linear", "conv", "embedding", "recurrent", "attention"]

TRACY_WIDOM_99 = 2.0234
"""The 99% quantile of the Tracy-Widom law of order 1 (real matrices): the margin, in units of
Johnstone's scale, past which an eigenvalue is a spike."""
KS_BLOCK = 1 << 22
"""Entries (candidates x eigenvalues) of one block of the vectorized KS scan (32 MiB)."""
_MP_GRID = 4097
"""Points of the integration of the Marchenko-Pastur density for its median."""


@dataclass(frozen=True)
class PowerLawFit:
    """A Clauset-Shalizi-Newman fit of a continuous power law to the upper tail of a sample.

    Attributes:
        alpha: the maximum-likelihood exponent of the density x^-alpha above ``xmin``.
        xmin: the lower bound of the tail, chosen by least KS distance.
        ks_distance: the KS distance between the tail and the fitted law.
        n_tail: the sample values >= xmin.
    """

    alpha: float
    xmin: float
    ks_distance: float
    n_tail: int

    @property
    def stderr(self) -> float:
        """The standard error of alpha, (alpha - 1) / sqrt(n_tail) (CSN section 3.1)."""
        return (self.alpha - 1) / math.sqrt(self.n_tail)


def fit_power_law(sample: np.ndarray) -> PowerLawFit:
    """Fit a continuous power law to the upper tail of ``sample`` (Clauset, Shalizi and Newman,
    SIAM Review 2009, sections 3.1 and 3.3).

    For each candidate x_min (each distinct value but the largest) the tail x_i >= x_min has
    the exponent alpha = 1 + n / sum_i ln(x_i / x_min) and the KS distance
    D = max_k max((k + 1) / n - P(x_(k)), P(x_(k)) - k / n) over its sorted values x_(k),
    P(x) = 1 - (x / x_min)^(1 - alpha); the candidate of least D wins (the smallest x_min on a
    tie). All candidates are scored in blocks of at most :data:`KS_BLOCK` entries.

    Args:
        sample: positive values, shape (n,), at least two distinct.

    Returns:
        The :class:`PowerLawFit`.
    """
    x = np.sort(np.asarray(sample, dtype=np.float64))
    n = x.size
    logs = np.log(x)
    suffix = np.cumsum(logs[::-1])[::-1]  # sum_{j >= i} ln x_j
    # the first index of each distinct value, the largest value excepted
    first = np.flatnonzero(np.r_[True, x[1:] != x[:-1]] & (x < x[-1]))
    tail = n - first
    spread = suffix[first] - tail * logs[first]  # sum over the tail of ln(x_j / x_min) > 0
    alphas = 1 + tail / spread
    distances = np.empty(first.size)
    columns = np.arange(n)
    rows = max(1, KS_BLOCK // n)
    for start in range(0, first.size, rows):
        i = first[start:start + rows, None]
        a = alphas[start:start + rows, None]
        m = tail[start:start + rows, None]
        k = columns - i  # rank of x_j within the candidate's tail (negative: not in it)
        inside = k >= 0
        fitted = -np.expm1((1 - a) * np.where(inside, logs - logs[i], 0.0))
        gap = np.maximum((k + 1) / m - fitted, fitted - k / m)
        distances[start:start + rows] = np.where(inside, gap, -np.inf).max(axis=1)
    best = int(np.argmin(distances))
    return PowerLawFit(float(alphas[best]), float(x[first[best]]), float(distances[best]),
                       int(tail[best]))


@lru_cache(maxsize=256)
def mp_median(q: float) -> float:
    """The median of the Marchenko-Pastur law of X / N for unit-variance entries, aspect ratio
    q = N / M >= 1: the density q / (2 pi l) sqrt((b - l)(l - a)) on [a, b] = [(1 - q^-1/2)^2,
    (1 + q^-1/2)^2], integrated with l = a + (b - a)(1 - cos t) / 2 (a smooth integrand in t)."""
    a, b = (1 - q ** -0.5) ** 2, (1 + q ** -0.5) ** 2
    t = np.linspace(0.0, np.pi, _MP_GRID)
    lam = a + (b - a) * (1 - np.cos(t)) / 2
    half = (b - a) / 2
    # sin(t)^2 / lam, whose limit at t = 0 is 4 / b when a = 0 (q = 1)
    ratio = np.divide(np.sin(t) ** 2, lam, out=np.full_like(t, 4 / b), where=lam > 0)
    density = q / (2 * np.pi) * half ** 2 * ratio
    cdf = np.concatenate([[0.0], np.cumsum((density[1:] + density[:-1]) / 2 * np.diff(t))])
    return float(np.interp(0.5 * cdf[-1], cdf, lam))


@dataclass(frozen=True)
class MPFit:
    """The Marchenko-Pastur law fitted to an ESD of N x M matrices (see the module docstring).

    Attributes:
        sigma: the fitted standard deviation of the entries.
        lambda_plus: the bulk edge sigma^2 (sqrt(N) + sqrt(M))^2.
        spike_edge: the edge past its Tracy-Widom fluctuation, above which an eigenvalue is a
            spike.
    """

    sigma: float
    lambda_plus: float
    spike_edge: float


def fit_marchenko_pastur(eigenvalues: np.ndarray, n: int, m: int) -> MPFit:
    """Fit the MP law to the eigenvalues of W^T W (W of shape n x m, n >= m >= 1) by their
    median: sigma^2 = median / (n mp_median(n / m))."""
    variance = float(np.median(eigenvalues)) / (n * mp_median(n / m))
    shifted = math.sqrt(max(n - 1, 1))  # Johnstone's sqrt(N - 1)
    root = shifted + math.sqrt(m)
    scale = root * (1 / shifted + 1 / math.sqrt(m)) ** (1 / 3)
    return MPFit(math.sqrt(variance), variance * (math.sqrt(n) + math.sqrt(m)) ** 2,
                 variance * (root ** 2 + TRACY_WIDOM_99 * scale))


@dataclass(frozen=True)
class LayerSpectrum(Result):
    """The spectrum of one weight matrix (or of a convolution's kernel-position matrices).

    Attributes:
        name: the module's name (``"fc1"``), or the module's and the parameter's for a module
            with several matrices (``"lstm.weight_hh_l0"``, ``"attn.in_proj_weight"``).
        kind: "linear", "conv", "embedding", "recurrent" or "attention".
        shape: (N, M), N >= M: the shape of the matrix (each position's matrix for
            ``conv="per_position"``), transposed where needed.
        n_matrices: 1, or the kernel positions pooled.
        n_eigenvalues: eigenvalues in the ESD (M times ``n_matrices``).
        lambda_max: the largest eigenvalue, ||W||_2^2.
        log_spectral_norm: log10 lambda_max.
        log_norm: log10 of the sum of the eigenvalues, log10 ||W||_F^2.
        stable_rank: sum of the eigenvalues / lambda_max.
        alpha: the power-law exponent of the ESD's tail (NaN when ``note`` says why).
        alpha_stderr: its standard error (alpha - 1) / sqrt(n_tail).
        xmin, ks_distance, n_tail: the fit's tail bound, KS distance and tail size.
        alpha_weighted: alpha log10 lambda_max.
        log_alpha_norm: log10 of the sum of lambda_i^alpha.
        sigma_mp, lambda_plus: the MP fit's entry standard deviation and bulk edge.
        mp_soft_rank: lambda_plus / lambda_max.
        n_spikes: eigenvalues above the bulk edge past its Tracy-Widom fluctuation (None
            without an MP fit).
        note: why alpha (and the MP fit) is missing: "" when fitted.
        eigenvalues: the ESD, ascending, float64 (not in ``to_dict()``).
    """

    name: str
    kind: MatrixKind
    shape: tuple[int, int]
    n_matrices: int
    n_eigenvalues: int
    lambda_max: float
    log_spectral_norm: float
    log_norm: float
    stable_rank: float
    alpha: float
    alpha_stderr: float
    xmin: float
    ks_distance: float
    n_tail: int
    alpha_weighted: float
    log_alpha_norm: float
    sigma_mp: float
    lambda_plus: float
    mp_soft_rank: float
    n_spikes: Optional[int]
    note: str
    eigenvalues: np.ndarray = field(repr=False, compare=False)


@dataclass(frozen=True)
class LayerSpectra(Result):
    """The spectra of a network's weight matrices; ``result["fc1"]`` is one matrix's row.

    The network-level values are the averages over the rows of Martin, Peng and Mahoney
    (Nature Communications 2021): ``alpha`` the mean exponent, ``alpha_weighted`` the mean of
    alpha log10 lambda_max (their "weighted alpha" alpha-hat), ``log_alpha_norm`` their mean
    log alpha-norm, each over the ``n_fitted`` rows with a fit; ``log_spectral_norm``,
    ``log_norm`` and ``stable_rank`` the means over every row with a nonzero matrix;
    ``mp_soft_rank`` the mean, ``n_spikes`` the total over the rows with an MP fit. NaN where no
    row has the value.
    """

    _rows = "layers"
    _headline = "alpha"

    layers: tuple[LayerSpectrum, ...]
    alpha: float
    alpha_weighted: float
    log_alpha_norm: float
    log_spectral_norm: float
    log_norm: float
    stable_rank: float
    mp_soft_rank: float
    n_spikes: int
    n_fitted: int
    conv: ConvMatrix
    min_eigenvalues: int


@dataclass(frozen=True)
class _Matrix:
    name: str
    module: str
    kind: MatrixKind
    batch: torch.Tensor  # (n_matrices, rows, cols)


def _kind(module: nn.Module, parameter: str, value: torch.Tensor) -> Optional[MatrixKind]:
    """What kind of weight matrix ``module``'s own parameter ``parameter`` is (None: none)."""
    if isinstance(module, nn.modules.conv._ConvNd):
        return "conv" if parameter == "weight" and value.dim() >= 3 else None
    if value.dim() != 2:
        return None
    if isinstance(module, nn.RNNBase):
        return "recurrent" if parameter.startswith("weight_") else None
    if isinstance(module, nn.MultiheadAttention):
        return "attention" if parameter.endswith("proj_weight") else None
    if parameter != "weight":
        return None
    return "embedding" if isinstance(module, (nn.Embedding, nn.EmbeddingBag)) else "linear"


def weight_matrices(model: nn.Module, conv: ConvMatrix) -> list[_Matrix]:
    """Every weight matrix of ``model`` in ``named_modules()`` order, each shared parameter
    once, as a batch (n_matrices, rows, cols) of detached tensors."""
    found, seen = [], set()
    for module_name, module in model.named_modules():
        for parameter, value in module.named_parameters(recurse=False):
            kind = _kind(module, parameter, value)
            if kind is None or id(value) in seen:
                continue
            seen.add(id(value))
            w = value.detach()
            if kind != "conv":
                batch = w.unsqueeze(0)
            elif conv == "unfold":
                batch = w.reshape(1, w.shape[0], -1)
            else:
                batch = w.reshape(w.shape[0], w.shape[1], -1).permute(2, 0, 1)
            single = parameter == "weight" and kind in ("linear", "conv", "embedding")
            name = module_name if single else ".".join(p for p in (module_name, parameter) if p)
            found.append(_Matrix(name or parameter, module_name, kind, batch))
    return found


def correlation_eigenvalues(batch: torch.Tensor) -> torch.Tensor:
    """The eigenvalues of X = W^T W (M x M, M the smaller side) of each matrix W of ``batch``
    (k, rows, cols): shape (k, M), ascending, float64, on the batch's device. From the float64
    Gram matrix by a symmetric eigensolver (an order of magnitude faster than an SVD, and far
    less sensitive to a loaded machine's threads), so each is exact to about
    max(N, M) eps lambda_max (the rounding of the Gram matrix); negative rounding is cut to 0."""
    w = batch.to(torch.float64)
    gram = w @ w.mT if w.shape[1] <= w.shape[2] else w.mT @ w
    return torch.linalg.eigvalsh(gram).clamp_min(0.0)


def _selected(matrices: list[_Matrix], layers: Optional[Sequence[str]], where: str
              ) -> list[_Matrix]:
    """The matrices named in ``layers``: a row's name, or a module (every matrix in it)."""
    if layers is None:
        return matrices
    names = [layers] if isinstance(layers, str) else list(layers)
    chosen, unknown = set(), []
    for name in names:
        matches = {m.name for m in matrices if m.name == name} or {
            m.name for m in matrices if m.module == name or m.module.startswith(name + ".")}
        if not matches:
            unknown.append(name)
        chosen |= matches
    if unknown:
        raise invalid(where, "names of weight matrices or of modules holding them",
                      f"{unknown}", f"use names such as {[m.name for m in matrices][:20]}")
    return [m for m in matrices if m.name in chosen]


def _spectrum(matrix: _Matrix, min_eigenvalues: int) -> LayerSpectrum:
    """The row of one matrix."""
    batch = matrix.batch
    rows, cols = batch.shape[1:]
    n, m = max(rows, cols), min(rows, cols)
    eigenvalues = np.sort(correlation_eigenvalues(batch).cpu().numpy().ravel())
    eigenvalues.setflags(write=False)
    top, total = float(eigenvalues[-1]), float(eigenvalues.sum())
    nan = math.nan
    base = dict(name=matrix.name, kind=matrix.kind, shape=(n, m), n_matrices=batch.shape[0],
                n_eigenvalues=eigenvalues.size, lambda_max=top, eigenvalues=eigenvalues)
    if top == 0.0:
        return LayerSpectrum(**base, log_spectral_norm=-math.inf, log_norm=-math.inf,
                             stable_rank=nan, alpha=nan, alpha_stderr=nan, xmin=nan,
                             ks_distance=nan, n_tail=0, alpha_weighted=nan, log_alpha_norm=nan,
                             sigma_mp=nan, lambda_plus=nan, mp_soft_rank=nan, n_spikes=None,
                             note="all-zero weights: no spectrum")
    # numerically zero: within the eigensolver's error of the float64 Gram matrix
    positive = eigenvalues[eigenvalues > top * n * np.finfo(np.float64).eps]
    norms = dict(log_spectral_norm=math.log10(top), log_norm=math.log10(total),
                 stable_rank=total / top)
    note = _unfit(positive, batch.dtype, min_eigenvalues)
    if note:
        return LayerSpectrum(**base, **norms, alpha=nan, alpha_stderr=nan, xmin=nan,
                             ks_distance=nan, n_tail=0, alpha_weighted=nan, log_alpha_norm=nan,
                             sigma_mp=nan, lambda_plus=nan, mp_soft_rank=nan, n_spikes=None,
                             note=note)
    fit = fit_power_law(positive)
    mp = fit_marchenko_pastur(eigenvalues, n, m)
    log_alpha_norm = float(np.logaddexp.reduce(fit.alpha * np.log(positive))) / math.log(10)
    return LayerSpectrum(**base, **norms, alpha=fit.alpha, alpha_stderr=fit.stderr,
                         xmin=fit.xmin, ks_distance=fit.ks_distance, n_tail=fit.n_tail,
                         alpha_weighted=fit.alpha * math.log10(top),
                         log_alpha_norm=log_alpha_norm, sigma_mp=mp.sigma,
                         lambda_plus=mp.lambda_plus, mp_soft_rank=mp.lambda_plus / top,
                         n_spikes=int(np.count_nonzero(eigenvalues > mp.spike_edge)), note="")


def _unfit(positive: np.ndarray, dtype: torch.dtype, min_eigenvalues: int) -> str:
    """Why no fit is made of these nonzero eigenvalues ("" when one is)."""
    if positive.size < min_eigenvalues:
        return (f"{positive.size} nonzero eigenvalues, fewer than min_eigenvalues="
                f"{min_eigenvalues}: too few for a power-law fit")
    spread = positive[-1] / positive[0] - 1
    if spread <= math.sqrt(torch.finfo(dtype).eps):
        return (f"the nonzero eigenvalues are equal to the weights' precision (spread "
                f"{spread:.1e}; e.g. an orthogonal matrix): no tail to fit")
    return ""


def _mean(values: list[float]) -> float:
    finite = [v for v in values if math.isfinite(v)]
    return float(np.mean(finite)) if finite else math.nan


@constrained(conv=Choice.literal(ConvMatrix), min_eigenvalues=Integer(3))
def layer_spectra(model: nn.Module, *, layers: Optional[Sequence[str]] = None,
                  conv: ConvMatrix = "unfold", min_eigenvalues: int = 10) -> LayerSpectra:
    """Data-free spectral metrics of every weight matrix (Martin and Mahoney): the power-law
    exponent alpha of the ESD's tail, the weighted alpha, log norms, stable rank, MP soft rank
    and spikes.

    Per matrix W (N x M, N >= M), the eigenvalues lambda_i = s_i(W)^2 of X = W^T W
    (unnormalized: divide by N for the JMLR paper's X = W^T W / N; only the log norms and the
    weighted alpha change):

    - alpha: the exponent of rho(lambda) ~ lambda^-alpha above x_min, by Clauset, Shalizi and
      Newman's method (continuous MLE alpha = 1 + n / sum ln(lambda_i / x_min) for each
      candidate x_min, x_min of least Kolmogorov-Smirnov distance); with ``xmin``,
      ``ks_distance``, ``n_tail``, ``alpha_stderr``;
    - log_spectral_norm = log10 lambda_max = log10 ||W||_2^2; log_norm = log10 ||W||_F^2;
      alpha_weighted = alpha log10 lambda_max; log_alpha_norm = log10 sum lambda_i^alpha;
    - stable_rank = ||W||_F^2 / ||W||_2^2;
    - mp_soft_rank = lambda_+ / lambda_max, lambda_+ the bulk edge of the Marchenko-Pastur law
      whose sigma matches the ESD's median; n_spikes, the eigenvalues above lambda_+ past its
      Tracy-Widom fluctuation (99%).

    (Martin and Mahoney, "Implicit Self-Regularization in Deep Neural Networks: Evidence from
    Random Matrix Theory and Implications for Learning", JMLR 22(165), 2021, sections 2-3;
    Martin, Peng and Mahoney, "Predicting trends in the quality of state-of-the-art neural
    networks without access to training or testing data", Nature Communications 12, 2021, the
    norm- and power-law-based metrics; Clauset, Shalizi and Newman, "Power-Law Distributions in
    Empirical Data", SIAM Review 51(4), 2009, section 3.) The module docstring of
    :mod:`nngauge.measures.generalization._spectra` gives every definition in full.

    The matrices: Linear (and any module's own 2-D ``weight``, e.g. Hugging Face's Conv1D),
    Embedding, the input / hidden matrices of LSTM / GRU / RNN modules (each its own row), the
    input projections of ``nn.MultiheadAttention``, and convolutions (``conv``). No data is
    read and no forward pass is run; the model is not changed. A matrix with fewer than
    ``min_eigenvalues`` nonzero eigenvalues, or whose eigenvalues are all equal to the
    weights' precision, gets NaN alpha (and no MP fit) with the reason in its ``note``.

    Args:
        model: any module.
        layers: the rows to report: a matrix's name (``"fc1"``, ``"lstm.weight_hh_l0"``) or a
            module's (every matrix in it); None: every weight matrix.
        conv: a convolution as one matrix C_out x (C_in / groups) prod(kernel) (``"unfold"``,
            default), or as one C_out x (C_in / groups) matrix per kernel position with their
            eigenvalues pooled into one ESD (``"per_position"``: Martin and Mahoney's and
            WeightWatcher's treatment).
        min_eigenvalues: the fewest nonzero eigenvalues a matrix needs for the power-law and
            MP fits (CSN's fits are noisy below about 50: see ``alpha_stderr``).

    Returns:
        :class:`LayerSpectra`: one :class:`LayerSpectrum` per matrix in ``layers`` (module
        order) and the network-level means.

    Raises:
        InvalidInputError: a model without weight matrices, or a name in ``layers`` that is
            neither a matrix's nor a module's holding one.

    Example:
        >>> import torch
        >>> net = torch.nn.Sequential(torch.nn.Linear(100, 60), torch.nn.ReLU(),
        ...                           torch.nn.Linear(60, 5))
        >>> spectra = layer_spectra(net)
        >>> [row.name for row in spectra.layers], spectra["0"].shape, spectra.n_fitted
        (['0', '2'], (100, 60), 1)
        >>> spectra["2"].note
        '5 nonzero eigenvalues, fewer than min_eigenvalues=10: too few for a power-law fit'
    """
    where = "layer_spectra()"
    matrices = weight_matrices(model, conv)
    if not matrices:
        raise invalid(where, "a model with weight matrices (Linear, Conv, Embedding, recurrent "
                      "or attention weights)", f"a {type(model).__name__} with none",
                      "pass the network whose weights to measure")
    rows = tuple(_spectrum(m, min_eigenvalues) for m in _selected(matrices, layers, where))
    fitted = [r for r in rows if math.isfinite(r.alpha)]
    with_mp = [r for r in rows if r.n_spikes is not None]
    return LayerSpectra(
        rows,
        alpha=_mean([r.alpha for r in fitted]),
        alpha_weighted=_mean([r.alpha_weighted for r in fitted]),
        log_alpha_norm=_mean([r.log_alpha_norm for r in fitted]),
        log_spectral_norm=_mean([r.log_spectral_norm for r in rows]),
        log_norm=_mean([r.log_norm for r in rows]),
        stable_rank=_mean([r.stable_rank for r in rows]),
        mp_soft_rank=_mean([r.mp_soft_rank for r in with_mp]),
        n_spikes=sum(r.n_spikes for r in with_mp),
        n_fitted=len(fitted), conv=conv, min_eigenvalues=min_eigenvalues)


__all__ = ["LayerSpectra", "LayerSpectrum", "MPFit", "PowerLawFit", "correlation_eigenvalues",
           "fit_marchenko_pastur", "fit_power_law", "layer_spectra", "mp_median",
           "weight_matrices"]
