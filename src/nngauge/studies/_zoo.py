"""A model zoo's networks: how one is trained and recorded, and the table of all of them.

One ``network`` unit (:mod:`nngauge.studies._units`) per grid point and seed
(:mod:`nngauge.studies._grid`): the network is built, measured at initialization on its
training set, trained by :func:`nngauge.training.fit` with the zoo's stopping rule (Jiang et
al. 2020, section 4: the training set's cross-entropy at most ``training.target_loss``, or
``training.max_steps`` optimizer steps), measured again, and recorded in the ``networks`` table
(:data:`RECORD`) with, unless ``keep_weights = false``, its initial and final ``state_dict``
in the ``weights`` table (blobs: written in the unit's one transaction, so a unit is whole or
absent on resume, and on any database and executor: a Ray worker on another machine returns
the bytes with its result and the driver writes them).

:func:`network_table` reads a zoo back as one pandas DataFrame, one row per network and seed:
the ``table`` that :func:`nngauge.studies.granulated_kendall` and
:func:`nngauge.studies.conditional_mutual_information` take, with ``gap`` as the target.
:func:`load_network` rebuilds a stored network.
"""

from __future__ import annotations

import copy
import math
from typing import Optional

from nngauge.errors import InvalidInputError
from nngauge.studies._db import DEFAULT_URL
from nngauge.studies._grid import HYPERPARAMETERS, load_state, optimizer_options, state_bytes
from nngauge.studies._spec import AFTER, MEASURES

MILESTONES = (0.1, 0.01)
"""The training losses whose first crossing is recorded (:func:`nngauge.training.steps_to_loss`:
Jiang et al.'s step.to.0.1 and step.0.1.to.0.01)."""

RECORD = {
    "train_accuracy": "accuracy on the network's training set (its labels after label noise), "
                      "final weights, eval mode",
    "test_accuracy": "accuracy on the test split (true labels)",
    "train_loss": "cross-entropy on the training set (outputs divided by the loss scale, 1 "
                  "unless loss_scaling)",
    "test_loss": "cross-entropy on the test split",
    "gap": "generalization gap: train_accuracy - test_accuracy (Jiang et al., PGDL)",
    "loss_gap": "test_loss - train_loss",
    "test_error": "1 - test_accuracy",
    "steps": "optimizer steps taken",
    "epochs": "epochs started (the last may be cut short by max_steps)",
    "stop_reason": "target_loss, max_steps or diverged",
    "steps_to_0_1": "steps until the training loss was first found <= 0.1 (checked after "
                    "every epoch; Jiang et al.'s step.to.0.1), None when never",
    "steps_0_1_to_0_01": "steps from there until <= 0.01 (step.0.1.to.0.01), None when never",
    "labels_changed": "fraction of training labels the label noise changed",
}
"""The ``networks`` table's record of a trained network (besides its hyperparameters), and
what each column holds."""


def run_network(task, started: float) -> dict:
    """Run one ``network`` unit (see the module docstring); the result for
    :func:`nngauge.studies._db.write_unit`."""
    import time

    from nngauge.studies._grid import training_set
    from nngauge.studies._units import (
        _generator,
        _measure,
        _widths,
        build_model,
        derive_seed,
        in_model_dtype,
        study_data,
    )
    from nngauge.training import fit, steps_to_loss
    from nngauge.training._fit import evaluate

    spec, unit, h = task.spec, task.unit, task.architecture.description
    t = spec.training
    train, _, test = study_data(spec.data, spec.seed)
    n_classes = _widths((train, None, test))[1]
    train, changed = training_set(train, h["train_size"], h["label_noise"], n_classes,
                                  spec.seed, unit.seed)
    model = build_model(task)
    train, _, test = in_model_dtype(model, (train, None, test))
    initial = copy.deepcopy(model)
    parts = (train, None, test)
    batch = spec.measures.batch_size
    measures = _measure(spec.measures.names, model, parts, batch,
                        _generator(derive_seed(spec.seed, "measure", unit.arch_index, unit.seed)),
                        initial=initial, options=spec.measures.options_of())
    result = fit(model, train, test=test, lr=h["lr"], weight_decay=h["weight_decay"],
                 batch_size=h["batch_size"], loss_scaling=t.loss_scaling,
                 target_loss=t.target_loss, max_steps=t.max_steps,
                 generator=_generator(derive_seed(spec.seed, "minibatches", unit.seed)),
                 **optimizer_options(h["optimizer"], t.momentum))
    if result.diverged:
        measures.update({f"{c}{AFTER}": math.nan for n in t.measure_after for c in MEASURES[n]})
    else:
        measures.update({f"{column}{AFTER}": value for column, value in _measure(
            t.measure_after, model, parts, batch,
            _generator(derive_seed(spec.seed, "measure_after", unit.arch_index, unit.seed)),
            undefined_as_nan=True, initial=initial, options=spec.measures.options_of()).items()})
    train_loss, train_error = evaluate(model, train, scale=result.loss_scale)
    test_loss, test_error = evaluate(model, test, scale=result.loss_scale)
    to_01, to_001 = (steps_to_loss(result, m) for m in MILESTONES)
    network = {**h, "train_accuracy": 1 - train_error, "test_accuracy": 1 - test_error,
               "train_loss": train_loss, "test_loss": test_loss,
               "gap": (1 - train_error) - (1 - test_error), "loss_gap": test_loss - train_loss,
               "test_error": test_error, "steps": result.steps, "epochs": result.epochs,
               "stop_reason": result.stopped_by, "steps_to_0_1": to_01,
               "steps_0_1_to_0_01": None if to_001 is None else to_001 - to_01,
               "labels_changed": changed}
    weights = ({"initial": state_bytes(initial), "final": state_bytes(model)}
               if t.keep_weights else None)
    return {"measures": measures, "network": network, "weights": weights,
            "train": {"lr": h["lr"], "best_val_error": None, "test_error": test_error,
                      "train_error": train_error, "epochs": result.epochs,
                      "diverged": result.diverged},
            "seconds": time.perf_counter() - started}


def network_table(db: str = DEFAULT_URL, *, study: Optional[str] = None):
    """A model zoo as one pandas DataFrame: one row per network and seed.

    Columns: ``key`` (the unit's key, for :func:`load_network`), ``network`` (the grid point's
    index), ``seed``, every hyperparameter (:data:`nngauge.studies._grid.HYPERPARAMETERS`:
    family, depth, width, batch_norm, dropout, weight_decay, lr, batch_size, train_size,
    label_noise, optimizer), the record (:data:`RECORD`: train_accuracy, test_accuracy,
    train_loss, test_loss, gap, loss_gap, test_error, steps, epochs, stop_reason,
    steps_to_0_1, steps_0_1_to_0_01, labels_changed), ``seconds``, then the measure columns:
    at initialization under their names, after training with the suffix ``_after`` (NaN where
    undefined). ``table.attrs["hyperparameters"]`` lists the hyperparameters the grid varies
    (what the scoring functions condition on); ``attrs["study_id"]`` and ``attrs["name"]``
    name the study.

    Seeds are replicates of the whole zoo: score each seed's rows (``table[table.seed == s]``)
    and compare, or pool them.

    Args:
        db: SQLAlchemy URL of the results database.
        study: the study's id or name; default: the only study in the database.

    Raises:
        InvalidInputError: no such study, or a study without a ``[grid]`` (use
            :func:`nngauge.studies.summarize`).

    Example:
        >>> from nngauge.studies import load_network, network_table, parse_spec, run_study
        >>> import os, tempfile
        >>> url = "sqlite:///" + os.path.join(tempfile.mkdtemp(), "zoo.db")
        >>> spec = parse_spec({"data": {"source": "digits", "n": 300},
        ...                    "grid": {"width": [8, 16], "lr": [0.05, 0.1]},
        ...                    "training": {"max_steps": 20}})
        >>> _ = run_study(spec, url, workers=1)
        >>> table = network_table(url)
        >>> len(table), table.attrs["hyperparameters"], "gap" in table
        (4, ['width', 'lr'], True)
        >>> type(load_network(url, table.key[0])).__name__  # its trained weights
        'MLP'
    """
    from sqlalchemy import select

    from nngauge.errors import require_extra
    from nngauge.studies._db import networks, open_db, units
    from nngauge.studies._summarize import study_spec
    from nngauge.studies._table import measured_columns

    pd = require_extra("pandas", "report", "network_table()")
    engine = open_db(db, create=False)
    try:
        with engine.connect() as conn:
            study_id, name, spec = study_spec(conn, study, "network_table()")
            if "grid" not in spec:
                raise InvalidInputError(
                    f"network_table() expected a study with a [grid] (a model zoo); got "
                    f"{name!r}, a study of [architectures]. Fix: use nngauge.studies."
                    "summarize() for it, or pass --study with a zoo's name.")
            rows = conn.execute(select(networks, units.c.seconds)
                                .join(units, units.c.key == networks.c.key)
                                .where(networks.c.study_id == study_id)
                                .order_by(networks.c.arch_index, networks.c.seed)
                                ).mappings().all()
            by_key, columns = measured_columns(conn, study_id)
    finally:
        engine.dispose()
    records = []
    for row in rows:
        record = {k: v for k, v in row.items() if k != "study_id"}
        record["network"] = record.pop("arch_index")
        measured = by_key.get(row["key"], {})
        record.update({c: measured.get(c, math.nan) for c in columns})
        records.append(record)
    leading = ["key", "network", "seed", *HYPERPARAMETERS, *RECORD, "seconds"]
    table = pd.DataFrame(records, columns=leading + columns)
    for column in ("steps_to_0_1", "steps_0_1_to_0_01"):  # None where never reached
        table[column] = table[column].astype("Int64")
    table.attrs.update(hyperparameters=[n for n in HYPERPARAMETERS if len(spec["grid"][n]) > 1],
                       study_id=study_id, name=name)
    return table


def load_network(db: str, key: str, *, which: str = "final"):
    """Rebuild a stored network of a model zoo with its initial or final weights.

    Args:
        db: SQLAlchemy URL of the results database.
        key: the network's unit key (the ``key`` column of :func:`network_table`).
        which: ``"final"`` (default: the trained weights) or ``"initial"``.

    Returns:
        The ``nn.Module`` (:func:`nngauge.nn.mlp` or :func:`nngauge.nn.cnn`), in training
        mode, as built.

    Raises:
        InvalidInputError: an unknown key or ``which``, or a zoo run with
            ``keep_weights = false``.

    Example: see :func:`network_table`.
    """
    import json

    import torch
    from sqlalchemy import select

    from nngauge.studies._db import architectures, networks, open_db, studies, weights
    from nngauge.studies._units import build_from_config

    where = "load_network()"
    if which not in ("final", "initial"):
        raise InvalidInputError(f"{where} expected which 'final' or 'initial'; got {which!r}. "
                                "Fix: pass one of those.")
    engine = open_db(db, create=False)
    try:
        with engine.connect() as conn:
            found = conn.execute(
                select(architectures.c.config, studies.c.spec, getattr(weights.c, which))
                .join(architectures, (architectures.c.study_id == networks.c.study_id)
                      & (architectures.c.arch_index == networks.c.arch_index))
                .join(studies, studies.c.study_id == networks.c.study_id)
                .outerjoin(weights, weights.c.unit_key == networks.c.key)
                .where(networks.c.key == key)).first()
    finally:
        engine.dispose()
    if found is None:
        raise InvalidInputError(f"{where} expected the key of a network in the database; got "
                                f"{key!r}. Fix: take one from network_table(db).key.")
    config, spec, blob = found
    if blob is None:
        raise InvalidInputError(f"{where} expected stored weights for network {key}; got none "
                                "(the zoo ran with training.keep_weights = false). Fix: rerun "
                                "it with keep_weights = true.")
    model = build_from_config(json.loads(config),
                              dtype=getattr(torch, json.loads(spec)["dtype"]))
    return load_state(model, blob)
