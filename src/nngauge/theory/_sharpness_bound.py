"""Theorem 1 of the generalization paper: the expected sharpness of a ReLU network (section 4).

For f_w(x) = W_d D_{d-1} W_{d-1} ... D_1 W_1 x (no biases, ReLU patterns D_i, widths h_0 = input
size, h_1 .. h_d), ||x|| = 1, Gaussian weight noise nu_i with entries N(0, sigma_i^2), and a
network meeting conditions C1 (constant mu), C2 and C3 (:func:`nngauge.sharpness_conditions`
measures them), Theorem 1 states that with probability >= 1 - sum_i delta_i

    E_nu |L(f_{w+nu}(x)) - L(f_w(x))|
        <= O( [ prod_i (1 + gamma_i) - 1
                + prod_i (1 + gamma_i C2 C3) (prod_i (1 + gamma_i C_delta_i C2) - 1) ]
              C_L ||f_w(x)|| ),

    gamma_i = sigma_i sqrt(h_i h_{i-1}) / (mu^2 ||W_i||_F),
    C_delta_i = (1 + delta_i) sqrt(2 ln h_i),

C_L the Lipschitz constant of the loss in the output, and that the generalization error is at
most that (averaged over the m training points) plus sqrt((sum_i ||W_i||_F^2 / sigma_i^2
+ ln(1 / delta)) / m). The first term of the bracket is Lemma 1 (activations held fixed, a
rigorous bound in which the denominators are ||D_i W_i||_F: pass ``active_norms``); the second
is Lemma 2 (activation flips), proved only up to the O(.) and to first order in sigma. Here the
O(.) constant is taken as 1.

The printed theorem puts ||W_i||_F in gamma_i, where Lemma 1, from which its first term comes,
has ||D_i W_i||_F <= ||W_i||_F: the theorem's first term is the smaller of the two. With
``active_norms`` given, the first term is Lemma 1's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Optional, Sequence

import numpy as np

from nngauge._constraints import Array, Check, Integer, Maybe, Numbers, Real, constrained
from nngauge._results import Result, layer_index
from nngauge.errors import invalid

WIDTHS = Check(lambda v: not isinstance(v, (str, bytes)) and len(v) >= 2 and all(
    isinstance(h, (int, np.integer)) and not isinstance(h, bool) and h >= 1 for h in v),
    "a sequence of d + 1 >= 2 positive integer widths h_0 (input) .. h_d (output)",
    ((), (3,), (3, 0), "34", (3, 2.5)))
"""h_0 .. h_d."""


@dataclass(frozen=True)
class SharpnessBound(Result):
    """Theorem 1's bound, its parts and its generalization bound.

    Attributes:
        gammas: gamma_i = sigma_i sqrt(h_i h_{i-1}) / (mu^2 ||W_i||_F), one per layer.
        c_deltas: C_delta_i = (1 + delta_i) sqrt(2 ln h_i).
        linear: prod_i (1 + gamma_i) - 1 (Lemma 1: fixed activations; with ``active_norms``,
            gamma_i uses ||D_i W_i||_F).
        activation: prod_i (1 + gamma_i C2 C3) (prod_i (1 + gamma_i C_delta_i C2) - 1)
            (Lemma 2: activation flips).
        sharpness: (linear + activation) C_L ||f_w(x)||: the bound on the expected sharpness.
        norm_term: sum_i ||W_i||_F^2 / sigma_i^2 (the theorem's KL term).
        generalization: sharpness + sqrt((norm_term + ln(1 / confidence)) / m), the bound on
            E_nu[L(f_{w+nu})] - L_hat(f_w), the expected loss of the perturbed network minus
            the training loss (None without ``n_train``).
        probability: 1 - sum_i delta_i, the probability the bound holds with.

    ``to_dict()`` adds ``depth``; ``to_frame()`` and ``plot()`` give gamma_i and C_delta_i per
    layer.
    """

    _curve = (layer_index("gammas"), "gammas", "c_deltas")
    _derived = ("depth",)

    gammas: tuple[float, ...]
    c_deltas: tuple[float, ...]
    linear: float
    activation: float
    sharpness: float
    norm_term: float
    generalization: Optional[float]
    probability: float

    @property
    def depth(self) -> int:
        """d, the number of weight layers."""
        return len(self.gammas)


@constrained(sigma=Array(0, low_open=True), weight_norms=Numbers(0, low_open=True),
             widths=WIDTHS, mu=Real(0, low_open=True), c2=Real(0), c3=Real(0),
             output_norm=Real(0), failure_probs=Array(0, 1, low_open=True),
             lipschitz=Real(0), active_norms=Maybe(Numbers(0, low_open=True)),
             n_train=Maybe(Integer(1)), confidence=Real(0, 1, open=True))
def sharpness_bound(
    sigma: float | Sequence[float],
    weight_norms: Sequence[float],
    widths: Sequence[int],
    *,
    mu: float,
    c2: float,
    c3: float,
    output_norm: float = 1.0,
    failure_probs: float | Sequence[float] = 0.01,
    lipschitz: float = 1.0,
    active_norms: Optional[Sequence[float]] = None,
    n_train: Optional[int] = None,
    confidence: float = 0.05,
) -> SharpnessBound:
    """Theorem 1 of the generalization paper (section 4): a bound on the expected sharpness.

    E_nu |L(f_{w+nu}(x)) - L(f_w(x))| <= [prod_i (1 + gamma_i) - 1 + prod_i (1 + gamma_i C2 C3)
    (prod_i (1 + gamma_i C_delta_i C2) - 1)] C_L ||f_w(x)||, gamma_i = sigma_i sqrt(h_i h_{i-1})
    / (mu^2 ||W_i||_F), C_delta_i = (1 + delta_i) sqrt(2 ln h_i), for a bias-free ReLU network at
    an input of norm 1 (rescale x: f is positively homogeneous), with probability >= 1 -
    sum_i delta_i; the theorem's O(.) constant is taken as 1. With ``n_train`` = m, also the
    generalization bound: the above plus sqrt((sum_i ||W_i||_F^2 / sigma_i^2 + ln(1/delta)) / m).
    See the module docstring for Lemma 1's ``active_norms``.

    Args:
        sigma: the noise standard deviation, one value or one per layer (> 0).
        weight_norms: ||W_1||_F .. ||W_d||_F.
        widths: h_0 (input size) .. h_d (output size).
        mu: C1's constant (1 / :attr:`~nngauge.ConditionsResult.condition_number`).
        c2, c3: C2's and C3's constants (>= 0).
        output_norm: ||f_w(x)|| (the theorem: its mean over the training points).
        failure_probs: delta_i, one value or one per layer, in (0, 1].
        lipschitz: C_L, the loss's Lipschitz constant in the output (cross-entropy: sqrt 2).
        active_norms: ||D_1 W_1||_F .. ||D_d W_d||_F (D_d = I): Lemma 1's first term.
        n_train: m, for the generalization bound.
        confidence: delta of the ln(1/delta) term, in (0, 1).

    Returns:
        A :class:`SharpnessBound`.

    Raises:
        InvalidInputError: widths, weight norms, sigma, failure_probs or active_norms of
            lengths that disagree with the depth d = len(weight_norms).

    Example:
        >>> from nngauge.theory import sharpness_bound
        >>> b = sharpness_bound(0.01, [2.0], [4, 1], mu=1.0, c2=0.0, c3=1.0)
        >>> round(b.sharpness, 6)  # d = 1, C2 = 0: gamma_1 = 0.01 * 2 / 2
        0.01
    """
    where = "sharpness_bound()"
    norms = np.asarray(weight_norms, dtype=np.float64)
    d = norms.size
    h = np.asarray(widths, dtype=np.float64)
    if h.size != d + 1:
        raise invalid(where, f"d + 1 = {d + 1} widths for {d} weight norms",
                      f"{h.size} widths", "pass h_0 (input size) .. h_d (output size)")
    sigmas = _per_layer(sigma, d, "sigma", where)
    deltas = _per_layer(failure_probs, d, "failure_probs", where)
    if active_norms is not None and len(active_norms) != d:
        raise invalid(where, f"{d} active norms (one per layer)",
                      f"{len(active_norms)} active norms", "pass ||D_i W_i||_F for each layer")
    scale = sigmas * np.sqrt(h[1:] * h[:-1]) / mu**2
    gammas = scale / norms
    lemma1 = gammas if active_norms is None else scale / np.asarray(active_norms, np.float64)
    c_deltas = (1.0 + deltas) * np.sqrt(2.0 * np.log(h[1:]))
    linear = float(np.prod(1.0 + lemma1) - 1.0)
    activation = float(np.prod(1.0 + gammas * c2 * c3)
                       * (np.prod(1.0 + gammas * c_deltas * c2) - 1.0))
    sharp = (linear + activation) * lipschitz * output_norm
    norm_term = float(np.sum(norms**2 / sigmas**2))
    general = None if n_train is None else sharp + math.sqrt(
        (norm_term + math.log(1.0 / confidence)) / n_train)
    return SharpnessBound(
        gammas=tuple(float(g) for g in gammas), c_deltas=tuple(float(c) for c in c_deltas),
        linear=linear, activation=activation, sharpness=float(sharp), norm_term=norm_term,
        generalization=general, probability=float(1.0 - deltas.sum()))


def _per_layer(value: Any, d: int, name: str, where: str) -> np.ndarray:
    arr = np.asarray(value, dtype=np.float64)
    if arr.ndim > 1 or arr.size not in (1, d):
        raise invalid(where, f"{name} as one value or {d} (one per layer)",
                      f"{name} of shape {arr.shape}", "pass one value, or one per layer")
    return np.broadcast_to(arr.ravel(), (d,)).copy()
