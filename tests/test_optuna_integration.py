"""nngauge.integrations.optuna: predictors recorded as user attributes before training, and a
pruner that stops trials with bad predictors before they train, in memory and on SQLite."""

from __future__ import annotations

import math

import pytest
import torch

from nngauge.errors import InvalidInputError

optuna = pytest.importorskip("optuna", reason="pip install 'nngauge[optuna]'")

from nngauge.integrations.optuna import PREFIX, PredictorPruner, record_predictors  # noqa: E402
from nngauge.nn import mlp  # noqa: E402
from nngauge.studies._rank import measure_candidate  # noqa: E402

optuna.logging.set_verbosity(optuna.logging.WARNING)


@pytest.fixture(scope="module")
def data():
    gen = torch.Generator().manual_seed(0)
    return torch.randn(64, 8, generator=gen), torch.randint(0, 3, (64,), generator=gen)


def test_record_predictors_sets_one_user_attribute_per_column(data):
    study = optuna.create_study()
    trial = study.ask()
    model = mlp(8, 16, 3, 3, activation="tanh", generator=0)
    values = record_predictors(trial, model, data, measures=["nlc", "n_params"])
    assert set(values) == {"nlc", "output_bias", "n_params"}
    assert values == measure_candidate(model, data, ["nlc", "n_params"])  # rank's numbers
    attrs = study.trials[0].user_attrs
    assert attrs == {PREFIX + k: v for k, v in values.items()}
    assert attrs[PREFIX + "n_params"] == sum(p.numel() for p in model.parameters())


PLANTED = {0: 1.5, 1: 40.0, 2: 2.2, 3: 0.01, 4: 1.1, 5: 2.9, 6: 500.0, 7: 1.8, 8: 0.2, 9: 2.5}
"""Trial number -> the NLC planted for it: outside (1, 3) at 1, 3, 6, 8."""


def _objective(trained: list[int]):
    def objective(trial):
        trial.set_user_attr(PREFIX + "nlc", PLANTED[trial.number])
        if trial.should_prune():
            raise optuna.TrialPruned()
        trained.append(trial.number)
        return float(trial.number)
    return objective


@pytest.mark.parametrize("storage", ["memory", "sqlite"])
def test_the_pruner_stops_every_bad_trial_before_training_and_no_good_one(storage, tmp_path):
    url = None if storage == "memory" else f"sqlite:///{tmp_path / 'optuna.db'}"
    study = optuna.create_study(storage=url, study_name="s",
                                pruner=PredictorPruner("nlc", good=(1.0, 3.0)))
    trained: list[int] = []
    study.optimize(_objective(trained), n_trials=len(PLANTED))
    pruned = {t.number for t in study.trials if t.state == optuna.trial.TrialState.PRUNED}
    assert pruned == {1, 3, 6, 8}
    assert trained == [n for n in PLANTED if n not in pruned]  # pruned ones never trained
    if url is not None:  # another worker reading the same storage sees the attributes
        again = optuna.load_study(study_name="s", storage=url)
        assert [t.user_attrs[PREFIX + "nlc"] for t in again.trials] == list(PLANTED.values())


def test_the_percentile_rule_reads_earlier_trials_in_the_known_direction(tmp_path):
    """nlc_rule: lower is better. With 3 start-up trials and the 50th percentile, a trial is
    pruned when its rule is above the median of the trials before it."""
    rules = [0.0, 1.0, 2.0, 3.0, 0.5, 2.5, 0.1, 9.0]
    study = optuna.create_study(storage=f"sqlite:///{tmp_path / 'p.db'}",
                                pruner=PredictorPruner("nlc_rule", percentile=50,
                                                       n_startup_trials=3))
    trained = []

    def objective(trial):
        trial.set_user_attr(PREFIX + "nlc_rule", rules[trial.number])
        if trial.should_prune():
            raise optuna.TrialPruned()
        trained.append(trial.number)
        return 0.0

    study.optimize(objective, n_trials=len(rules))
    expected = []
    for i, rule in enumerate(rules):
        earlier = sorted(-r for r in rules[:i])
        if len(earlier) >= 3:
            rank = 0.5 * (len(earlier) - 1)
            low, high = earlier[math.floor(rank)], earlier[math.ceil(rank)]
            median = low + (high - low) * (rank - math.floor(rank))
            if -rule < median:
                continue
        expected.append(i)
    assert trained == expected and 7 not in trained and 3 not in trained


def test_a_trial_without_predictors_is_left_alone_and_bad_options_are_refused():
    pruner = PredictorPruner("nlc", good=(1.0, 3.0))
    study = optuna.create_study(pruner=pruner)
    trial = study.ask()
    assert not trial.should_prune()
    with pytest.raises(InvalidInputError, match="good=\\(low, high\\) or percentile"):
        PredictorPruner("nlc")
    with pytest.raises(InvalidInputError, match="low <= high"):
        PredictorPruner("nlc", good=(3.0, 1.0))
    with pytest.raises(InvalidInputError, match="known direction"):
        PredictorPruner("my_score", percentile=20)
    assert PredictorPruner("my_score", percentile=20, direction=-1).direction == -1


def test_the_example_prunes_exactly_the_trials_outside_the_ideal_nlc_range(tmp_path):
    """examples/optuna_prune.py on SQLite: every pruned trial's NLC lies outside (1, 3), every
    trained one inside, and the pruned ones never trained (no value)."""
    import subprocess
    import sys
    from pathlib import Path

    url = f"sqlite:///{tmp_path / 'ex.db'}"
    example = Path(__file__).resolve().parents[1] / "examples" / "optuna_prune.py"
    out = subprocess.run([sys.executable, str(example), "--trials", "8", "--storage", url],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    trials = optuna.load_study(study_name="nngauge-nlc", storage=url).trials
    assert len(trials) == 8
    states = {t.state for t in trials}
    assert optuna.trial.TrialState.PRUNED in states and optuna.trial.TrialState.COMPLETE in states
    for trial in trials:
        nlc = trial.user_attrs[PREFIX + "nlc"]
        inside = nlc is not None and 1.0 <= nlc <= 3.0
        assert (trial.state == optuna.trial.TrialState.COMPLETE) == inside, (nlc, trial.state)
        assert (trial.value is not None) == inside


def test_the_benchmark_good_range_comes_from_the_evidence_table():
    """good="benchmark": the report's ok range of a column the committed table counts, given
    only where the table shows networks inside it did better; refused otherwise."""
    from nngauge.report._evidence import benchmark_range, committed, ok_ranges

    table = committed()
    supported = []
    for column in ("nlc", "output_bias", "rho_max_before_pooling", "jacobian_growth"):
        try:
            good = benchmark_range(column)
        except InvalidInputError as refused:
            assert "benchmark evidence" in str(refused)
            continue
        supported.append(column)
        assert PredictorPruner(column, good="benchmark").good == good == ok_ranges()[column]
    assert supported, table["provenance"]
    with pytest.raises(InvalidInputError, match="a column the evidence table counts"):
        PredictorPruner("te_nas", good="benchmark")
    planted = {"counts": {"nlc": {"g": {"ok": {"n": 10, "good": 3},
                                        "bad": {"n": 10, "good": 6}}}}}
    with pytest.raises(InvalidInputError, match="ok 3 of 10, others 6 of 10"):
        benchmark_range("nlc", planted)
    planted["counts"]["nlc"]["g"]["bad"]["good"] = 1
    assert benchmark_range("nlc", planted) == ok_ranges()["nlc"]
    planted["counts"]["nlc"]["g"].pop("bad")
    with pytest.raises(InvalidInputError, match="others 0 of 0"):
        benchmark_range("nlc", planted)
