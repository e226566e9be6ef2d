"""Architecture studies (NLC paper sections 3-4, figure 2): sample or list architectures,
measure each at initialization, train each over a learning-rate grid, store every unit in a
database, and correlate the measures with test error. Model zoos (Jiang et al., ICLR 2020,
section 4): a ``[grid]`` of hyperparameters, one network per point trained to a target
training loss, measured before and after training, read back by :func:`network_table` as the
table the scoring functions take (see :mod:`nngauge.studies._grid`).

From the command line::

    nngauge study run examples/study_small.toml --db sqlite:///study.db [--executor ray]
    nngauge study summarize --db sqlite:///study.db --out study_out

Which measures predict the generalization gap over a family of trained networks (a table, a
row per network) is scored by ``kendall_tau``, ``granulated_kendall`` (Jiang et al., ICLR
2020), ``conditional_mutual_information`` (the PGDL competition's score) and
``robust_sign_error`` (Dziugaite et al., NeurIPS 2020), and ranked by ``score_measures``.

Studies over the user's own search space (:mod:`nngauge.studies._builder`):
``[architectures] builder = "file.py:build"`` with a ``grid`` or a seeded sampler (``sample``
and ``space``) of its keyword arguments, data from ``[data] source = "file.py:load"`` and
training by ``fit`` or the user's ``[training] train = "file.py:train"``; every candidate is a
row of :func:`load_table` with its arguments as columns. ``nngauge rank`` orders candidates
before any training (:func:`rank`).

A rerun of the same spec skips the units already in the database, so an interrupted study is
resumed by running the same command again. Several runs may share one database, on one machine
or many: they claim units under leases and split the work (see ``nngauge.studies._claims``).

Example:
    >>> from nngauge.studies import parse_spec, plan_units
    >>> spec = parse_spec({"architectures": {"explicit": [{"width": 8, "depth": 2}]},
    ...                    "training": {"lrs": [0.1, 0.3]}, "seeds": [0, 1]})
    >>> len(plan_units(spec))  # per seed: one init unit and two training runs
    6
"""

from nngauge.studies._db import DEFAULT_URL, open_db
from nngauge.studies._executors import RunSummary, run_study, warning_lines
from nngauge.studies._grid import HYPERPARAMETERS, zoo_spec
from nngauge.studies._rank import Candidate, Ranking, rank
from nngauge.studies._spec import MEASURES, StudySpec, load_spec, parse_spec
from nngauge.studies._table import load_table
from nngauge.studies._units import Architecture, Unit, UnitTask, plan_units, run_unit

__all__ = [
    "Architecture",
    "Candidate",
    "ConditionalMutualInformation",
    "ConditionScore",
    "Correlation",
    "DEFAULT_URL",
    "Environment",
    "GranulatedKendall",
    "HyperparameterKendall",
    "HyperparameterSignError",
    "KendallTau",
    "HYPERPARAMETERS",
    "MEASURES",
    "MeasureScore",
    "MeasureScores",
    "PredictorPair",
    "PredictorRow",
    "PredictorTable",
    "RobustSignError",
    "Ranking",
    "RunSummary",
    "StudySpec",
    "StudySummary",
    "Unit",
    "UnitTask",
    "conditional_mutual_information",
    "granulated_kendall",
    "kendall_tau",
    "load_network",
    "load_spec",
    "load_table",
    "network_table",
    "open_db",
    "parse_spec",
    "plan_units",
    "predictor_table",
    "rank",
    "robust_sign_error",
    "run_study",
    "run_unit",
    "score_measures",
    "summarize",
    "warning_lines",
    "zoo_spec",
]

_SUMMARY = ("Correlation", "StudySummary", "summarize")
_PREDICTORS = ("PredictorPair", "PredictorRow", "PredictorTable", "predictor_table")
_SCORING = ("ConditionScore", "ConditionalMutualInformation", "Environment", "GranulatedKendall",
            "HyperparameterKendall", "HyperparameterSignError", "KendallTau", "MeasureScore",
            "MeasureScores", "RobustSignError", "conditional_mutual_information",
            "granulated_kendall", "kendall_tau", "robust_sign_error", "score_measures")
_NETWORKS = ("load_network", "network_table")


def __getattr__(name: str):
    # the analysis imports torch (through the measures' result type): loaded when asked for,
    # so that worker processes unpickling a unit stay light
    if name in _SUMMARY:
        from nngauge.studies import _summarize

        value = getattr(_summarize, name)
        globals()[name] = value
        return value
    if name in _PREDICTORS:
        from nngauge.studies import _predictors

        value = getattr(_predictors, name)
        globals()[name] = value
        return value
    if name in _SCORING:
        from nngauge.studies import _scoring

        value = getattr(_scoring, name)
        globals()[name] = value
        return value
    if name in _NETWORKS:
        from nngauge.studies import _zoo

        value = getattr(_zoo, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'nngauge.studies' has no attribute {name!r}")
