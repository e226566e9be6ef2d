"""Which generalization measures predict the generalization gap over a family of trained
networks: Kendall's tau, Jiang et al.'s granulated Kendall coefficient, the conditional mutual
information of the PGDL competition, and Dziugaite et al.'s robust sign-error, each with a
bootstrap interval.

The input is a table (a pandas DataFrame) with one row per trained network: a column per
measure, the generalization-gap column (``target``), and one column per hyperparameter of the
grid the networks were trained on (any hashable values: numbers, strings, booleans).

- Rows whose measure or gap is not finite are left out (``n`` counts the rows used); a missing
  hyperparameter value is refused.
- Rows sharing every hyperparameter value are repeats (training seeds). To make the seed an axis
  of the grid instead, list its column among ``hyperparameters``.
- A measure is read as a complexity: larger values predict a larger gap (Jiang et al.'s
  convention). Negate a column whose larger values predict a smaller gap (a margin) first.

Bootstrap (every score): the networks are resampled with replacement ``n_resamples`` times,
from ``numpy.random.default_rng(seed)``, ``seed`` the int ``generator`` (or one draw from a
torch.Generator). A resample is a table of n networks in which a network drawn k times appears k
times; its k copies are one network, so that a pair of two copies counts as a network's pair
with itself: left out where pairs of distinct networks are read (Kendall's tau, the granulated
coefficient, Jiang et al.'s form of the mutual information), kept where the PGDL program pairs
every network with itself. A measure equal to the gap thus scores as on the table in every
resample. ``low``, ``high`` are the equal-tailed 95% percentile interval of a score's finite
values over the resamples (NaN with ``n_resamples=0``). A resample is held as each network's
multiplicity, so that every sum over pairs of networks, for the table and all its resamples at
once, is a matrix product: nothing loops over pairs.

Example:
    >>> import itertools
    >>> import pandas as pd
    >>> hyperparameters = ["lr", "width", "depth"]
    >>> table = pd.DataFrame(itertools.product([0.1, 1.0], [8, 16], [2, 4]),
    ...                      columns=hyperparameters)
    >>> table["gap"] = [0.10, 0.15, 0.22, 0.31, 0.35, 0.41, 0.52, 0.60]
    >>> table["norm"] = table["gap"] ** 2  # a measure ranking the networks as their gaps
    >>> result = granulated_kendall(table, "norm", "gap", hyperparameters, n_resamples=0)
    >>> result.per_hyperparameter, result.mean
    ({'lr': 1.0, 'width': 1.0, 'depth': 1.0}, 1.0)
    >>> conditional_mutual_information(table, "norm", "gap", hyperparameters,
    ...                                n_resamples=0).score
    1.0
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import combinations
from typing import Any, Literal, Optional, Sequence, Union

import numpy as np

from nngauge._constraints import SEED_OR_GENERATOR, Choice, Integer, Maybe, Real, constrained
from nngauge._random import seed_of
from nngauge._results import Result, plain, row_named
from nngauge.errors import UnknownNameError, invalid, require_extra
from nngauge.studies._predictors import CONFIDENCE, _interval

Conditioning = Literal["pgdl", "jiang"]
"""How :func:`conditional_mutual_information` conditions: ``"pgdl"``, the competition's
scoring program; ``"jiang"``, Jiang et al. (ICLR 2020)'s conditional independence test."""

SortKey = Literal["granulated", "tau", "cmi", "sign_error"]
"""The column :func:`score_measures` ranks by."""

N_RESAMPLES = 200
"""Default bootstrap resamples of every score."""

MAX_CHUNK = 1 << 22
"""Most numbers of one block of resamples held at once (pairs x resamples)."""

Hyperparameters = Union[str, Sequence[str]]


# ------------------------------------------------------------------------------- the table


@dataclass(frozen=True)
class _Rows:
    """What a score reads of a table: the measure ``x`` and gap ``y`` of the rows where both
    are finite, and each hyperparameter's value codes on those rows (index into ``values``)."""

    x: np.ndarray
    y: np.ndarray
    names: tuple[str, ...]
    codes: np.ndarray
    values: tuple[tuple, ...]

    @property
    def n(self) -> int:
        return len(self.x)

    def combined(self, names: Sequence[str]) -> np.ndarray:
        """Per row, the code (0, 1, ...) of its combination of the values of ``names`` (all 0
        for no names)."""
        if not names:
            return np.zeros(self.n, dtype=np.intp)
        rows = self.codes[[self.names.index(name) for name in names]]
        return np.unique(rows, axis=1, return_inverse=True)[1].reshape(-1)

    def value_of(self, name: str, row: int) -> Any:
        h = self.names.index(name)
        return self.values[h][self.codes[h, row]]


def _names(where: str, hyperparameters: Hyperparameters, *, least: int) -> tuple[str, ...]:
    names = (hyperparameters,) if isinstance(hyperparameters, str) else tuple(hyperparameters)
    if len(names) < least or len(set(names)) != len(names):
        got = f"hyperparameters={list(names)!r}"
        need = f"at least {max(least, 1)} distinct column name{'s' * (least > 1)}"
        fix = ("name two or more hyperparameter columns, or pass conditioning='jiang', which "
               "also conditions on one" if least == 2 and len(set(names)) < 2
               else "name each hyperparameter column once")
        raise invalid(where, f"hyperparameters {need}", got, fix)
    return names


def _rows(where: str, table: Any, measure: str, target: str, hyperparameters: Hyperparameters,
          *, least: int = 0) -> _Rows:
    """Check ``table`` and read the rows a score uses (see the module docstring)."""
    pd = require_extra("pandas", "report", where)
    if not isinstance(table, pd.DataFrame):
        raise invalid(where, "table a pandas DataFrame with one row per trained network",
                      f"table of type {type(table).__name__}",
                      "build one, e.g. pandas.DataFrame(rows) with a dict per network")
    names = _names(where, hyperparameters, least=least)
    for column in (measure, target, *names):
        if column not in table.columns:
            raise UnknownNameError(
                f"{where} expected a column {column!r} in table; got columns "
                f"{list(table.columns)}. Fix: name one of the table's columns")
    if len({measure, target, *names}) != 2 + len(names):
        raise invalid(where, "the measure, the target and each hyperparameter in different "
                      "columns", f"measure={measure!r}, target={target!r}, "
                      f"hyperparameters={list(names)!r}", "name each column in one role")
    x, y = _numbers(where, table, measure, "measure"), _numbers(where, table, target, "target")
    kept = np.isfinite(x) & np.isfinite(y)
    if kept.sum() < 2:
        raise invalid(where, "at least 2 rows where the measure and the target are finite",
                      f"{int(kept.sum())} of {len(table)} rows", "score a family of 2 or more "
                      "trained networks with finite values")
    codes, values = [], []
    for name in names:
        code, uniques = pd.factorize(table[name].to_numpy()[kept], sort=True)
        if (code < 0).any():
            raise invalid(where, f"a value of hyperparameter {name!r} on every row",
                          f"{int((code < 0).sum())} missing values", "fill them in, or drop "
                          "those rows")
        codes.append(code)
        values.append(tuple(uniques.tolist()))
    codes = np.array(codes, dtype=np.intp).reshape(len(names), int(kept.sum()))
    return _Rows(x[kept], y[kept], names, codes, tuple(values))


def _numbers(where: str, table: Any, column: str, role: str) -> np.ndarray:
    from pandas.api import types

    series = table[column]
    if not types.is_numeric_dtype(series) or types.is_complex_dtype(series):
        raise invalid(where, f"the {role} column {column!r} to hold real numbers",
                      f"dtype {series.dtype}", f"convert it: table[{column!r}] = "
                      f"pandas.to_numeric(table[{column!r}])")
    return series.to_numpy(dtype=float, na_value=np.nan)


# ------------------------------------------------------------------------------ resampling


def _resampling(n: int, n_resamples: int, seed: int) -> np.ndarray:
    """(1 + n_resamples, n) multiplicities: row 0 the table itself (all ones), then each
    bootstrap resample's count of each network (n draws with replacement)."""
    draws = np.random.default_rng(seed).multinomial(n, np.full(n, 1.0 / n), size=n_resamples)
    return np.vstack([np.ones((1, n)), draws]).astype(float)


def _chunks(n_rows: int, per_row: int):
    """Slices of the weight rows so that a block holds at most :data:`MAX_CHUNK` numbers."""
    step = max(1, MAX_CHUNK // max(per_row, 1))
    return [slice(start, start + step) for start in range(0, n_rows, step)]


def _estimate(values: np.ndarray) -> tuple[float, float, float]:
    """(value on the table, low, high): row 0 and the interval over the resamples."""
    low, high = _interval(values[1:])
    return float(values[0]), low, high


def _nanmean(values: np.ndarray, axis: int) -> np.ndarray:
    """The mean of the finite values along ``axis`` (NaN where there is none), without
    numpy's warning on an empty slice."""
    finite = np.isfinite(values)
    count = finite.sum(axis)
    total = np.where(finite, values, 0.0).sum(axis)
    return np.divide(total, count, out=np.full(total.shape, np.nan), where=count > 0)


def _groups(codes: np.ndarray) -> list[np.ndarray]:
    """The row indices of each code 0, 1, ... (every code present)."""
    order = np.argsort(codes, kind="stable")
    return np.split(order, np.flatnonzero(np.diff(codes[order])) + 1)


def _sign_products(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """sign(x_i - x_j) sign(y_i - y_j) for every ordered pair (i, j): 1 concordant, -1
    discordant, 0 tied."""
    return np.sign(x[:, None] - x[None, :]) * np.sign(y[:, None] - y[None, :])


# -------------------------------------------------------------------------- Kendall's tau


@dataclass(frozen=True)
class KendallTau(Result):
    """Kendall's tau-a between a measure and the generalization gap (:func:`kendall_tau`).

    Attributes:
        measure, target: the columns compared.
        tau: tau-a on the table; ``low``, ``high``: its bootstrap interval.
        n: networks (rows with both values finite).
        n_resamples, seed: the bootstrap's settings.
    """

    _summary = ("tau", "low", "high")

    measure: str
    target: str
    tau: float
    low: float
    high: float
    n: int
    n_resamples: int
    seed: int


def _tau_within(x: np.ndarray, y: np.ndarray, members: np.ndarray, weights: np.ndarray,
                varying: Optional[np.ndarray] = None) -> np.ndarray:
    """Weighted tau-a of the rows ``members``, one per weight row: the sum over ordered pairs
    of distinct networks of w_i w_j sign(x_i - x_j) sign(y_i - y_j), over their number
    (sum w)^2 - sum w^2 (copies of one network are no pair). NaN with fewer than 2 networks of
    positive weight, or where the codes ``varying`` take fewer than 2 values on them."""
    w = weights[:, members]
    pairs = w.sum(1) ** 2 - (w * w).sum(1)
    numerator = ((w @ _sign_products(x[members], y[members])) * w).sum(1)
    defined = pairs > 0
    if varying is not None:
        present = (w > 0).astype(float) @ np.eye(varying.max() + 1)[varying]
        defined &= (present > 0).sum(1) >= 2
    return np.divide(numerator, pairs, out=np.full(pairs.shape, np.nan), where=defined)


@constrained(n_resamples=Integer(0), generator=SEED_OR_GENERATOR)
def kendall_tau(table: Any, measure: str, target: str, *, n_resamples: int = N_RESAMPLES,
                generator: Any = 0) -> KendallTau:
    """Kendall's rank correlation between a measure and the generalization gap, as tau-a.

    Over the n networks (rows) with a finite measure mu and gap g::

        tau = 1 / (n (n - 1)) * sum over ordered pairs i != j of
              sign(mu_i - mu_j) * sign(g_i - g_j)

    which is tau-a, (concordant - discordant) / (n (n - 1) / 2): a tie in either column counts
    0 and stays in the denominator. This is the coefficient of Jiang, Neyshabur, Mobahi,
    Krishnan & Bengio, "Fantastic Generalization Measures and Where to Find Them", ICLR 2020,
    section 3 ("Kendall's rank-correlation coefficient"), kept so that this tau and
    :func:`granulated_kendall` (which averages it) are theirs. Why tau-a rather than tau-b
    (scipy's default, which shrinks the denominator by the ties): a measure scoring many
    networks alike has not ranked them, and tau-a gives it no credit for them (a constant
    measure scores 0 where tau-b is undefined); on continuous measures without ties the two are
    equal. 1: the measure orders the networks as their gaps; -1: reversed; 0: no relation.

    Args:
        table: a pandas DataFrame, one row per trained network (module docstring).
        measure: the measure's column; ``target``: the generalization gap's column.
        n_resamples: bootstrap resamples of the networks (0: no interval).
        generator: an int seed of the bootstrap (default 0), or a torch.Generator from which
            one seed is drawn.

    Returns:
        :class:`KendallTau`.

    Example:
        >>> import pandas as pd
        >>> t = pd.DataFrame({"mu": [1, 2, 3, 4], "gap": [0.1, 0.3, 0.2, 0.4]})
        >>> round(kendall_tau(t, "mu", "gap", n_resamples=0).tau, 4)  # (5 - 1) / 6
        0.6667
    """
    rows = _rows("kendall_tau()", table, measure, target, ())
    seed = seed_of(generator)
    weights = _resampling(rows.n, n_resamples, seed)
    tau, low, high = _estimate(_tau_within(rows.x, rows.y, np.arange(rows.n), weights))
    return KendallTau(measure, target, tau, low, high, rows.n, n_resamples, seed)


# --------------------------------------------------------------- Jiang's granulated Kendall


@dataclass(frozen=True)
class HyperparameterKendall(Result):
    """psi_i of one hyperparameter: the mean tau-a over the groups of networks that differ in
    it alone (``n_groups`` of them; ``n_skipped`` groups had fewer than 2 networks or a single
    value of it), and the bootstrap interval (``low``, ``high``)."""

    name: str
    psi: float
    low: float
    high: float
    n_groups: int
    n_skipped: int


@dataclass(frozen=True)
class GranulatedKendall(Result):
    """Jiang et al.'s granulated Kendall coefficient (:func:`granulated_kendall`).

    ``result["lr"]`` is the row of hyperparameter ``lr``; ``per_hyperparameter`` maps each
    hyperparameter to its psi_i; ``mean`` is Psi, with its bootstrap interval (``low``,
    ``high``).
    """

    _rows = "rows"
    _headline = "psi"
    _derived = ("per_hyperparameter",)

    measure: str
    target: str
    rows: tuple[HyperparameterKendall, ...]
    mean: float
    low: float
    high: float
    n: int
    n_resamples: int
    seed: int

    @property
    def per_hyperparameter(self) -> dict[str, float]:
        """Hyperparameter -> psi_i."""
        return {row.name: row.psi for row in self.rows}


@constrained(n_resamples=Integer(0), generator=SEED_OR_GENERATOR)
def granulated_kendall(table: Any, measure: str, target: str,
                       hyperparameters: Hyperparameters, *, n_resamples: int = N_RESAMPLES,
                       generator: Any = 0) -> GranulatedKendall:
    """Jiang et al.'s granulated Kendall coefficient: Kendall's tau among networks that differ
    in one hyperparameter only, averaged.

    Jiang, Neyshabur, Mobahi, Krishnan & Bengio, "Fantastic Generalization Measures and Where
    to Find Them", ICLR 2020, section 3 ("Granulated Kendall's coefficient"). For the
    hyperparameters theta_1 ... theta_H of the grid, with value sets Theta_1 ... Theta_H::

        psi_i = 1 / m_i * sum over the settings s of every hyperparameter but theta_i of
                tau({(mu(theta), g(theta)) : theta_i in Theta_i, the others at s})
        m_i   = |Theta_1 x ... x Theta_(i-1) x Theta_(i+1) x ... x Theta_H|
        Psi   = 1 / H * sum_i psi_i

    tau is tau-a, as :func:`kendall_tau` (their definition). Here a setting s is each
    combination of the other hyperparameters' values that occurs in the table, and its group
    holds every network with those values (repeats with the same theta_i included). A group
    with fewer than 2 networks, or in which theta_i takes a single value, says nothing about
    theta_i and is skipped (counted in ``n_skipped``): m_i is the number of groups left, which
    on a complete grid (every combination trained) is Jiang et al.'s m_i. A hyperparameter
    with no group left has psi_i = NaN and is left out of Psi's mean. With one hyperparameter,
    psi_1 is the tau of the whole table.

    Args:
        table, measure, target: as :func:`kendall_tau`.
        hyperparameters: the hyperparameter columns (one or more).
        n_resamples, generator: the bootstrap's (as :func:`kendall_tau`); a resample keeps the
            groups as they fall (a group may lose networks, or all of them).

    Returns:
        :class:`GranulatedKendall` (``per_hyperparameter``, ``mean``).
    """
    where = "granulated_kendall()"
    rows = _rows(where, table, measure, target, hyperparameters, least=1)
    seed = seed_of(generator)
    weights = _resampling(rows.n, n_resamples, seed)
    psi, found = [], []
    for h, name in enumerate(rows.names):
        others = rows.names[:h] + rows.names[h + 1:]
        taus = np.stack([_tau_within(rows.x, rows.y, members, weights,
                                     varying=rows.codes[h, members])
                         for members in _groups(rows.combined(others))], axis=1)
        psi.append(_nanmean(taus, axis=1))
        found.append((int(np.isfinite(taus[0]).sum()), taus.shape[1]))
    psi = np.stack(psi, axis=1)
    mean, low, high = _estimate(_nanmean(psi, axis=1))
    per = tuple(HyperparameterKendall(name, *_estimate(psi[:, h]), used, total - used)
                for h, (name, (used, total)) in enumerate(zip(rows.names, found)))
    return GranulatedKendall(measure, target, per, mean, low, high, rows.n, n_resamples, seed)


# ------------------------------------------------------------ conditional mutual information


@dataclass(frozen=True)
class ConditionScore(Result):
    """The normalized mutual information given one conditioning set of hyperparameters
    (``name``: their names joined by ``,``; ``"none"`` for the empty set): ``mutual_information``
    (bits) and ``entropy`` (of the gap's sign, bits), averaged over the ``n_cells`` cells of
    value pairs, ``normalized`` = their ratio, with its bootstrap interval."""

    name: str
    condition: tuple[str, ...]
    mutual_information: float
    entropy: float
    normalized: float
    low: float
    high: float
    n_cells: int


@dataclass(frozen=True)
class ConditionalMutualInformation(Result):
    """Conditional mutual information between the signs of the gap's and the measure's
    differences (:func:`conditional_mutual_information`).

    ``score``: the minimum over the conditioning sets, attained at ``condition``, with its
    bootstrap interval (``low``, ``high``); ``per_condition``: conditioning set (a tuple of
    hyperparameter names) -> normalized mutual information; ``result["lr,width"]`` is a row.
    The PGDL leaderboard printed 100 x the score.
    """

    _rows = "rows"
    _headline = "normalized"
    _derived = ("per_condition",)

    measure: str
    target: str
    conditioning: str
    rows: tuple[ConditionScore, ...]
    score: float
    low: float
    high: float
    condition: tuple[str, ...]
    n: int
    n_resamples: int
    seed: int

    @property
    def per_condition(self) -> dict[tuple[str, ...], float]:
        """Conditioning set -> normalized mutual information."""
        return {row.condition: row.normalized for row in self.rows}


def _block_sums(matrix: np.ndarray, weights: np.ndarray, codes: np.ndarray) -> np.ndarray:
    """(R, C, C): out[r, c, d] = sum over i of code c and j of code d of
    w_ri matrix[i, j] w_rj, one matrix product per code d (R n^2 operations in all)."""
    order = np.argsort(codes, kind="stable")
    starts = np.flatnonzero(np.r_[True, np.diff(codes[order]) != 0])
    bounds = np.r_[starts, len(codes)]
    m, w = matrix[np.ix_(order, order)], weights[:, order]
    out = np.empty((len(w), len(starts), len(starts)))
    for d in range(len(starts)):
        block = slice(bounds[d], bounds[d + 1])
        out[:, :, d] = np.add.reduceat(w * (w[:, block] @ m[:, block].T), starts, axis=1)
    return out


def _plogp(p: np.ndarray) -> np.ndarray:
    """p log2 p, 0 at p = 0."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(p > 0, p * np.log2(np.where(p > 0, p, 1.0)), 0.0)


def _cell_information(both, gap, measure, total) -> tuple[np.ndarray, np.ndarray]:
    """Per cell, from the counts of pairs with (gap up and measure up), gap up, measure up and
    all pairs: the mutual information of the two signs and the entropy of the gap's sign, in
    bits (NaN in an empty cell)."""
    with np.errstate(divide="ignore", invalid="ignore"):  # (counts are exact: so is 1 - p)
        joint = [count / total for count in
                 (both, gap - both, measure - both, total - gap - measure + both)]
        entropy_gap = -(_plogp(gap / total) + _plogp((total - gap) / total))
        entropy_measure = -(_plogp(measure / total) + _plogp((total - measure) / total))
    information = entropy_gap + entropy_measure + sum(_plogp(p) for p in joint)
    empty = total <= 0
    return np.where(empty, np.nan, information), np.where(empty, np.nan, entropy_gap)


def _condition(signs: tuple, codes: np.ndarray, weights: np.ndarray,
               conditioning: str) -> tuple[np.ndarray, ...]:
    """(mutual information, entropy, normalized, cells) per weight row for the cells of
    ``codes``: a cell per ordered pair of code values (c, d), holding the ordered pairs of
    networks (i, j) with codes (c, d)."""
    up_gap, up_measure, up_both = (_block_sums(s, weights, codes) for s in signs)
    size = weights @ np.eye(codes.max() + 1)[codes]
    total = size[:, :, None] * size[:, None, :]
    if conditioning == "jiang":  # pairs of distinct networks: none of a network's copies
        diagonal = np.arange(size.shape[1])
        total[:, diagonal, diagonal] -= (weights * weights) @ np.eye(size.shape[1])[codes]
    flat = [a.reshape(len(weights), -1) for a in (up_both, up_gap, up_measure, total)]
    information, entropy = _cell_information(*flat)
    total = flat[3]
    filled = total > 0
    if conditioning == "jiang":  # expectations over the cells, weighted by p(cell)
        mass = np.where(filled, total, 0.0)
        information = (mass * np.nan_to_num(information)).sum(1) / mass.sum(1)
        entropy = (mass * np.nan_to_num(entropy)).sum(1) / mass.sum(1)
    else:  # PGDL: plain means over the cells (here: the cells holding pairs)
        information = _nanmean(information, axis=1)
        entropy = _nanmean(entropy, axis=1)
    normalized = np.divide(information, entropy, out=np.full(entropy.shape, np.nan),
                           where=entropy > 0)
    return information, entropy, normalized, filled.sum(1)


@constrained(conditioning=Choice("pgdl", "jiang"), n_resamples=Integer(0),
             generator=SEED_OR_GENERATOR)
def conditional_mutual_information(table: Any, measure: str, target: str,
                                   hyperparameters: Hyperparameters, *,
                                   conditioning: Conditioning = "pgdl",
                                   n_resamples: int = N_RESAMPLES,
                                   generator: Any = 0) -> ConditionalMutualInformation:
    """How much the sign of a measure's difference between two networks tells about the sign
    of their gaps' difference once hyperparameters are held to given values: the score of the
    NeurIPS 2020 competition "Predicting Generalization in Deep Learning" (PGDL).

    Jiang, Foret, Yak, Roy, Mobahi, Dziugaite, Bengio, Gunasekar, Guyon & Neyshabur, "NeurIPS
    2020 Competition: Predicting Generalization in Deep Learning", arXiv:2012.07976 (the
    evaluation metric), computed as the competition's public scoring program computes it
    (``conditioning="pgdl"``, the default):

    - pairs: every ordered pair (i, j) of networks, i = j included (the program's double loop
      over all networks), V_g = [g_i > g_j] and V_mu = [mu_i > mu_j] (a tie, and a network
      with itself, count as "not greater");
    - for every two distinct hyperparameters {a, b}: a cell per value pair
      (a_i, a_j, b_i, b_j); in each cell, from the 2 x 2 table of (V_g, V_mu) counts, the
      mutual information I(V_g; V_mu) and the entropy H(V_g), in bits;
    - the score given {a, b}: mean over cells of I / mean over cells of H (plain means, each
      cell alike);
    - ``score``: the minimum over the pairs {a, b}.

    A complete grid (every combination trained once, as the program requires) fills every
    cell; here the means run over the cells holding pairs, so that a table with missing
    combinations is scored too. The leaderboard showed 100 x the score averaged over tasks.

    ``conditioning="jiang"``: the conditional independence test of Jiang, Neyshabur, Mobahi,
    Krishnan & Bengio, "Fantastic Generalization Measures and Where to Find Them", ICLR 2020,
    section 3 ("Conditional Independence Test: Towards Capturing the Causal Relationships"):
    over the ordered pairs of distinct networks, for every set S of at most 2 hyperparameters
    (the empty set, each one, each two), U_S the pair's values of S (one cell per value),::

        I(V_mu; V_g | U_S) = sum over cells u of p(u) I(V_mu; V_g | U_S = u)
        K(mu) = min over |S| <= 2 of I(V_mu; V_g | U_S) / H(V_g | U_S)

    with H(V_g | U_S) the same p(u)-weighted mean of the cells' entropies. On a complete grid
    with as many runs of every combination, every PGDL cell holds the same number of pairs
    (counting, as PGDL does, a network's pair with itself), so that its plain means are these
    p(u)-weighted ones: the two forms differ there by those pairs and by the sets of fewer
    than two hyperparameters.

    1 for a measure whose signs always agree with the gap's (or always disagree: the mutual
    information has no sign; read :func:`kendall_tau` for the direction), 0 for a measure
    independent of the gap within the cells, e.g. one that only reads a hyperparameter which
    the condition holds fixed.

    Args:
        table, measure, target: as :func:`kendall_tau`.
        hyperparameters: the hyperparameter columns (at least 2 for ``"pgdl"``).
        conditioning: ``"pgdl"`` or ``"jiang"`` (above).
        n_resamples, generator: the bootstrap's (as :func:`kendall_tau`), interval of the
            minimum and of each condition's score.

    Returns:
        :class:`ConditionalMutualInformation` (``score``, ``per_condition``).
    """
    where = "conditional_mutual_information()"
    rows = _rows(where, table, measure, target, hyperparameters,
                 least=2 if conditioning == "pgdl" else 1)
    seed = seed_of(generator)
    weights = _resampling(rows.n, n_resamples, seed)
    up_gap = (rows.y[:, None] > rows.y[None, :]).astype(float)
    up_measure = (rows.x[:, None] > rows.x[None, :]).astype(float)
    signs = (up_gap, up_measure, up_gap * up_measure)
    sizes = (2,) if conditioning == "pgdl" else (0, 1, 2)
    conditions = [c for size in sizes for c in combinations(rows.names, size)]
    scored, per = [], []
    for condition in conditions:
        codes = rows.combined(condition)
        parts = np.empty((4, len(weights)))
        for block in _chunks(len(weights), 2 * rows.n + 8 * (codes.max() + 1) ** 2):
            parts[:, block] = _condition(signs, codes, weights[block], conditioning)
        information, entropy, normalized, cells = parts
        scored.append(normalized)
        per.append(ConditionScore(",".join(condition) or "none", condition,
                                  float(information[0]), float(entropy[0]),
                                  *_estimate(normalized), int(cells[0])))
    scored = np.stack(scored, axis=1)
    minimum = np.where(np.isfinite(scored), scored, np.inf).min(1)
    minimum[np.isinf(minimum)] = np.nan
    score, low, high = _estimate(minimum)
    finite = [row for row in per if math.isfinite(row.normalized)]
    at = min(finite, key=lambda row: row.normalized).condition if finite else ()
    return ConditionalMutualInformation(measure, target, conditioning, tuple(per), score, low,
                                        high, at, rows.n, n_resamples, seed)


# ------------------------------------------------------------------- robust sign-error


@dataclass(frozen=True)
class Environment:
    """One environment: the networks of hyperparameter values ``a`` and those of ``b`` (tuples
    in the order of ``hyperparameters``), which differ in ``hyperparameter`` alone;
    ``sign_error`` over their pairs, the pairs' total ``weight`` and effective sample size
    ``ess``."""

    hyperparameter: str
    a: tuple
    b: tuple
    sign_error: float
    weight: float
    ess: float


@dataclass(frozen=True)
class HyperparameterSignError(Result):
    """The sign-errors of the environments in which hyperparameter ``name`` varies: their
    maximum (``robust``), 90th percentile, mean and number."""

    name: str
    robust: float
    p90: float
    mean: float
    n_environments: int


@dataclass(frozen=True)
class RobustSignError(Result):
    """Dziugaite et al.'s robust sign-error (:func:`robust_sign_error`).

    Over every kept environment: ``robust`` (the maximum, the paper's robust sign-error),
    ``p90`` and ``mean``, with bootstrap intervals of ``p90`` and ``mean`` (a maximum's
    bootstrap is not consistent: none is given); ``rows`` the same per varied hyperparameter
    (``result["lr"]``); ``environments`` each kept environment.
    """

    _rows = "rows"
    _headline = "robust"

    measure: str
    target: str
    robust: float
    p90: float
    p90_low: float
    p90_high: float
    mean: float
    mean_low: float
    mean_high: float
    n_environments: int
    rows: tuple[HyperparameterSignError, ...]
    environments: tuple[Environment, ...]
    test_size: Optional[int]
    min_ess: float
    n: int
    n_resamples: int
    seed: int


def _hoeffding_weight(gap_difference: np.ndarray, test_size: int) -> np.ndarray:
    """Dziugaite et al.'s Monte Carlo filter: (1 - 2 exp(-n d^2 / 2))^2, the Hoeffding
    probability that two gaps measured on n test points and d apart differ, less 1/2, floored
    at 0."""
    certainty = np.clip(1 - 2 * np.exp(-test_size * gap_difference ** 2 / 2), 0, None) ** 2
    return np.clip(certainty - 0.5, 0, None)


def _summaries(losses: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(max, 90th percentile (linear interpolation, as numpy's), mean) of the finite values of
    each row of ``losses`` (NaN for a row without one)."""
    if losses.shape[1] == 0:
        nothing = np.full(len(losses), np.nan)
        return nothing, nothing, nothing
    ordered = np.sort(np.where(np.isfinite(losses), losses, np.inf), axis=1)
    count = np.isfinite(ordered).sum(1)
    ordered[count == 0] = 0.0  # a row without a finite value: NaN below, no inf - inf
    last = np.maximum(count - 1, 0)
    position = 0.9 * last
    below = np.floor(position).astype(int)
    above = np.minimum(below + 1, last)
    def take(index: np.ndarray) -> np.ndarray:
        return np.take_along_axis(ordered, index[:, None], axis=1)[:, 0]

    p90 = take(below) + (position - below) * (take(above) - take(below))
    empty = count == 0
    return (np.where(empty, np.nan, take(last)), np.where(empty, np.nan, p90),
            _nanmean(losses, axis=1))


@constrained(test_size=Maybe(Integer(1)), min_ess=Real(0), n_resamples=Integer(0),
             generator=SEED_OR_GENERATOR)
def robust_sign_error(table: Any, measure: str, target: str,
                      hyperparameters: Hyperparameters, *, test_size: Optional[int] = None,
                      min_ess: float = 1.0, n_resamples: int = N_RESAMPLES,
                      generator: Any = 0) -> RobustSignError:
    """Dziugaite et al.'s robust sign-error: the worst, over environments of networks that
    differ in one hyperparameter, of how often the measure orders two networks against their
    gaps.

    Dziugaite, Drouin, Neal, Rajkumar, Caballero, Wang, Mitliagkas & Roy, "In Search of Robust
    Measures of Generalization", NeurIPS 2020, arXiv:2010.11924 (the sign-error and the robust
    risk over environments of coupled networks). An environment e is a pair of hyperparameter
    combinations (omega, omega') present in the table that differ in exactly one
    hyperparameter; its networks are the runs of omega and of omega' (repeats: rows with equal
    hyperparameters). Over the pairs (i of omega, j of omega')::

        sign-error(e) = sum_ij w_ij (1 - sign(mu_i - mu_j) sign(g_i - g_j)) / 2 / sum_ij w_ij
        ess(e)        = (sum_ij w_ij)^2 / sum_ij w_ij^2

    with w_ij = 1, or with ``test_size`` (the number of test points behind each gap, read as an
    error difference) the paper's Monte Carlo filter w_ij = ((1 - 2 exp(-n d^2 / 2))^2 - 1/2)_+,
    d = |g_i - g_j|, which discounts pairs whose gaps may differ by sampling noise alone. An
    environment is kept when ess(e) >= ``min_ess``. The sign-error is 0 for a pair the measure
    orders as the gaps, 1 against them, 1/2 on a tie. The paper reports the distribution over
    the kept environments, per varied hyperparameter and over all: its maximum (the robust
    sign-error, sup over environments of the expected sign-error), 90th percentile and mean.
    Each unordered environment counts once (the paper's code lists both orders, which leaves
    these three unchanged up to the percentile's interpolation).

    The paper kept environments with ess >= 12, with the filter on, over repeated runs of each
    combination; with one run per combination and no filter every environment is one pair (ess
    1, sign-error 0, 1/2 or 1), hence the default ``min_ess=1.0``.

    Args:
        table, measure, target: as :func:`kendall_tau`.
        hyperparameters: the hyperparameter columns that define the combinations.
        test_size: test points behind each gap (None: no filter, w_ij = 1).
        min_ess: the least effective sample size of a kept environment.
        n_resamples, generator: the bootstrap's (as :func:`kendall_tau`): intervals of the
            90th percentile and the mean.

    Returns:
        :class:`RobustSignError`.
    """
    where = "robust_sign_error()"
    rows = _rows(where, table, measure, target, hyperparameters, least=1)
    seed = seed_of(generator)
    weights = _resampling(rows.n, n_resamples, seed)
    combination = rows.combined(rows.names)
    differing = sum((c[:, None] != c[None, :]).astype(np.int8) for c in rows.codes)
    i, j = np.nonzero((differing == 1) & (combination[:, None] < combination[None, :]))
    key = combination[i] * (combination.max() + 1) + combination[j]
    order = np.argsort(key, kind="stable")
    i, j, key = i[order], j[order], key[order]
    starts = np.flatnonzero(np.r_[True, np.diff(key) != 0]) if len(key) else np.zeros(0, int)
    pair_weight = (np.ones(len(i)) if test_size is None
                   else _hoeffding_weight(np.abs(rows.y[i] - rows.y[j]), test_size))
    error = (1 - np.sign(rows.x[i] - rows.x[j]) * np.sign(rows.y[i] - rows.y[j])) / 2
    losses = np.full((len(weights), len(starts)), np.nan)
    mass = np.zeros((len(weights), len(starts)))
    ess = np.zeros((len(weights), len(starts)))
    for block in (_chunks(len(weights), len(i)) if len(starts) else []):
        w = weights[block][:, i] * weights[block][:, j] * pair_weight
        total = np.add.reduceat(w, starts, axis=1)
        squares = np.add.reduceat(w * w, starts, axis=1)
        with np.errstate(divide="ignore", invalid="ignore"):
            size = np.where(squares > 0, total ** 2 / np.where(squares > 0, squares, 1), 0.0)
            loss = np.add.reduceat(w * error, starts, axis=1) / np.where(total > 0, total, 1)
        kept = (total > 0) & ((size >= min_ess) | np.isclose(size, min_ess))
        losses[block] = np.where(kept, loss, np.nan)
        mass[block], ess[block] = total, size
    varied = np.argmax(rows.codes[:, i[starts]] != rows.codes[:, j[starts]], axis=0)
    robust, p90, mean = _summaries(losses)
    per = []
    for h, name in enumerate(rows.names):
        top, ninety, average = _summaries(losses[:, varied == h])
        per.append(HyperparameterSignError(name, float(top[0]), float(ninety[0]),
                                           float(average[0]),
                                           int(np.isfinite(losses[0, varied == h]).sum())))
    def combo(row: int) -> tuple:
        return tuple(rows.value_of(name, row) for name in rows.names)

    environments = tuple(
        Environment(rows.names[varied[e]], combo(i[s]), combo(j[s]), float(losses[0, e]),
                    float(mass[0, e]), float(ess[0, e]))
        for e, s in enumerate(starts) if np.isfinite(losses[0, e]))
    _, p90_low, p90_high = _estimate(p90)
    _, mean_low, mean_high = _estimate(mean)
    return RobustSignError(measure, target, float(robust[0]), float(p90[0]), p90_low, p90_high,
                           float(mean[0]), mean_low, mean_high, len(environments), tuple(per),
                           environments, test_size, float(min_ess), rows.n, n_resamples, seed)


# ------------------------------------------------------------------------- the ranking


@dataclass(frozen=True)
class MeasureScore(Result):
    """One measure's four scores (``name`` is the measure's column)."""

    _summary = (("tau", lambda row: row.kendall.tau), ("psi", lambda row: row.granulated.mean),
                ("cmi", lambda row: row.cmi.score),
                ("sign_error", lambda row: row.sign_error.robust))

    name: str
    kendall: KendallTau
    granulated: GranulatedKendall
    cmi: ConditionalMutualInformation
    sign_error: RobustSignError

    def to_frame(self):
        """:meth:`summary` as a one-row pandas DataFrame. Needs pandas."""
        pd = require_extra("pandas", "report", "MeasureScore.to_frame()")
        return pd.DataFrame([plain(self.summary())])

    def summary(self) -> dict[str, Any]:
        """The ranking table's row: the scores and their intervals as plain numbers, the
        granulated coefficient per hyperparameter as ``psi[name]``."""
        k, g, c, s = self.kendall, self.granulated, self.cmi, self.sign_error
        return {"measure": self.name, "n": k.n, "tau": k.tau, "tau_low": k.low,
                "tau_high": k.high, "psi": g.mean, "psi_low": g.low, "psi_high": g.high,
                **{f"psi[{row.name}]": row.psi for row in g.rows},
                "cmi": c.score, "cmi_low": c.low, "cmi_high": c.high,
                "cmi_condition": ",".join(c.condition), "sign_error": s.robust,
                "sign_error_p90": s.p90, "sign_error_mean": s.mean,
                "sign_error_mean_low": s.mean_low, "sign_error_mean_high": s.mean_high,
                "n_environments": s.n_environments}


_SORT_COLUMNS = {"granulated": ("psi", -1), "tau": ("tau", -1), "cmi": ("cmi", -1),
                 "sign_error": ("sign_error", 1)}
"""Sort key -> (column of the summary, +1 ascending or -1 descending)."""


@dataclass(frozen=True)
class MeasureScores(Result):
    """The ranking of measures by :func:`score_measures`: ``rows`` best first by ``sort_by``
    (NaN last); ``result["norm"]`` is one measure's :class:`MeasureScore`; ``to_frame()`` the
    ranking table, a row per measure."""

    _rows = "rows"

    target: str
    hyperparameters: tuple[str, ...]
    sort_by: str
    conditioning: str
    rows: tuple[MeasureScore, ...]
    n_resamples: int
    seed: int

    def to_frame(self):
        """The ranking table (:meth:`MeasureScore.summary` per measure, best first). Needs
        pandas."""
        pd = require_extra("pandas", "report", "MeasureScores.to_frame()")
        return pd.DataFrame([plain(row.summary()) for row in self.rows])

    def plot(self, ax=None):
        """Horizontal bars of the sort key per measure, best on top, with the bootstrap
        intervals where the key has one."""
        from nngauge._plots import new_axes

        ax = new_axes(ax)
        column, _ = _SORT_COLUMNS[self.sort_by]
        table = [row.summary() for row in self.rows]
        value = np.array([row[column] for row in table], dtype=float)
        low = np.array([row.get(f"{column}_low", np.nan) for row in table], dtype=float)
        high = np.array([row.get(f"{column}_high", np.nan) for row in table], dtype=float)
        known = np.isfinite(low) & np.isfinite(high) & np.isfinite(value)
        xerr = np.where(known, np.clip([value - low, high - value], 0, None), 0.0)
        y = np.arange(len(table))[::-1]
        ax.barh(y, np.nan_to_num(value), xerr=xerr, capsize=3, color="tab:blue")
        ax.set_yticks(y, [row["measure"] for row in table])
        ax.axvline(0.0, color="black", linewidth=0.8)
        ax.set_xlabel(f"{column} ({CONFIDENCE:.0%} bootstrap interval)")
        return ax

    def __getitem__(self, name: str) -> MeasureScore:
        return row_named(self.rows, name, "a measure of this ranking")


def _measure_names(where: str, measures: Union[str, Sequence[str]]) -> tuple[str, ...]:
    names = (measures,) if isinstance(measures, str) else tuple(measures)
    if not names or len(set(names)) != len(names):
        raise invalid(where, "measures a non-empty list of distinct column names",
                      f"measures={list(names)!r}", "name each measure column once")
    return names


@constrained(sort_by=Choice("granulated", "tau", "cmi", "sign_error"),
             conditioning=Choice("pgdl", "jiang"), test_size=Maybe(Integer(1)),
             min_ess=Real(0), n_resamples=Integer(0), generator=SEED_OR_GENERATOR)
def score_measures(table: Any, measures: Union[str, Sequence[str]], target: str,
                   hyperparameters: Hyperparameters, *, sort_by: SortKey = "granulated",
                   conditioning: Conditioning = "pgdl", test_size: Optional[int] = None,
                   min_ess: float = 1.0, n_resamples: int = N_RESAMPLES,
                   generator: Any = 0) -> MeasureScores:
    """Score every measure of a table of trained networks four ways and rank them.

    Per measure: :func:`kendall_tau`, :func:`granulated_kendall`,
    :func:`conditional_mutual_information` (``conditioning``) and :func:`robust_sign_error`
    (``test_size``, ``min_ess``), each with its bootstrap interval; every measure is
    resampled from the same seed (the same resamples wherever the same rows are finite).

    The ranking's key, ``sort_by``: ``"granulated"`` (default: Jiang et al.'s Psi, larger
    first: signed, so that a measure ordering the networks against their gaps ranks last, and
    averaged over hyperparameters, which a plain tau driven by one hyperparameter is not),
    ``"tau"``, ``"cmi"`` (larger first; unsigned) or ``"sign_error"`` (the robust sign-error,
    smaller first). NaN last; ties keep the order of ``measures``.

    Args:
        table, target, hyperparameters: as :func:`granulated_kendall`.
        measures: the measure columns.
        sort_by, conditioning, test_size, min_ess, n_resamples, generator: above.

    Returns:
        :class:`MeasureScores`; ``to_frame()`` is the ranking table.
    """
    where = "score_measures()"
    names = _measure_names(where, measures)
    _names(where, hyperparameters, least=2 if conditioning == "pgdl" else 1)
    seed = seed_of(generator)
    common = {"n_resamples": n_resamples, "generator": seed}
    rows = [MeasureScore(
        name, kendall_tau(table, name, target, **common),
        granulated_kendall(table, name, target, hyperparameters, **common),
        conditional_mutual_information(table, name, target, hyperparameters,
                                       conditioning=conditioning, **common),
        robust_sign_error(table, name, target, hyperparameters, test_size=test_size,
                          min_ess=min_ess, **common)) for name in names]
    column, direction = _SORT_COLUMNS[sort_by]

    def key(row: MeasureScore) -> float:
        value = row.summary()[column]
        return direction * value if math.isfinite(value) else math.inf

    rows.sort(key=key)
    hyperparameters = ((hyperparameters,) if isinstance(hyperparameters, str)
                       else tuple(hyperparameters))
    return MeasureScores(target, hyperparameters, sort_by, conditioning, tuple(rows),
                         n_resamples, seed)


__all__ = ["ConditionScore", "ConditionalMutualInformation", "Environment",
           "GranulatedKendall", "HyperparameterKendall", "HyperparameterSignError",
           "KendallTau", "MeasureScore", "MeasureScores", "RobustSignError",
           "conditional_mutual_information", "granulated_kendall", "kendall_tau",
           "robust_sign_error", "score_measures"]
