"""The judges of the study-based reproductions fed planted data that violates their claims
(issue 36): ``predictors`` and ``predictors-cnn`` (one judge: section 4's claim through the NLC
rule against the parameter count) on planted predictor tables, and ``regions-and-loss`` on
planted training curves. Each claim's failing side and the passing side."""

import numpy as np
import pytest

from nngauge.reproduce._base import Computed
from nngauge.reproduce._predictors import judge as predictors_judge
from nngauge.reproduce._predictors_cnn import REPRODUCTION as PREDICTORS_CNN
from nngauge.reproduce._regions_and_loss import judge as regions_and_loss_judge

N_POINTS = 80


def _table(rule_signal: float, params_signal: float, seed: int = 0) -> Computed:
    """A predictor table over N_POINTS planted architectures: accuracy uniform, the NLC rule
    and the parameter count each ``signal * accuracy + noise`` (a negative signal: a predictor
    that ranks the worst first), a zero-cost proxy and the rule with skips uninformative."""
    from nngauge.studies import predictor_table
    from nngauge.studies._summarize import StudySummary

    rng = np.random.default_rng(seed)
    accuracy = rng.uniform(0.2, 0.9, N_POINTS)
    noise = rng.normal(0.0, 0.1, (4, N_POINTS))
    points = tuple({"arch_index": i, "seed": 0, "test_error": 1.0 - a,
                    "nlc_rule": rule_signal * a + noise[0, i],
                    "n_params": params_signal * a + noise[1, i], "synflow": noise[2, i],
                    "nlc_rule+skip": noise[3, i]}
                   for i, a in enumerate(accuracy))
    columns = ("nlc_rule", "nlc_rule+skip", "n_params", "synflow")
    summary = StudySummary("id", "planted", columns, points, (), None, 0.1)
    table = predictor_table(summary, directions=dict.fromkeys(columns, 1),
                            n_resamples=199, generator=seed)
    return Computed(columns=(), rows=(), extra={"table": table})


@pytest.mark.parametrize("judge", [predictors_judge, PREDICTORS_CNN.judge],
                         ids=["predictors", "predictors-cnn"])
def test_predictors_judge_fails_a_rule_that_does_not_predict_or_beat_the_parameter_count(
        judge):
    """The rule predicting accuracy far better than the parameter count: reproduced; as well
    as the parameter count (not significantly better): qualitatively; ranking the worst
    networks first: differs."""
    assert judge(_table(rule_signal=1.0, params_signal=0.0)).status == "reproduced"
    tied = judge(_table(rule_signal=1.0, params_signal=1.0))
    assert tied.status == "qualitatively"
    assert "not significantly better than the parameter count" in tied.reason
    assert judge(_table(rule_signal=-1.0, params_signal=0.0)).status == "differs"


def _curves(length=(1.0, 1.4, 1.8), error=(0.9, 0.3, 0.1),
            complexity=(2.0, 5.0, 3.0)) -> Computed:
    rows = tuple(zip(length, error, complexity))
    return Computed(columns=("trajectory_length", "test_error", "local_complexity_train"),
                    rows=rows)


def test_regions_and_loss_judge_fails_each_planted_violation():
    """Longer trajectories, falling error and a local complexity that rises then falls:
    reproduced; no late fall (peak at the end, or at the start): qualitatively; trajectories
    that shorten, or a network that does not learn: differs."""
    assert regions_and_loss_judge(_curves()).status == "reproduced"
    assert regions_and_loss_judge(_curves(complexity=(2.0, 3.0, 5.0))).status == "qualitatively"
    assert regions_and_loss_judge(_curves(complexity=(5.0, 3.0, 2.0))).status == "qualitatively"
    assert regions_and_loss_judge(_curves(length=(1.8, 1.4, 1.0))).status == "differs"
    assert regions_and_loss_judge(_curves(error=(0.9, 0.9, 0.95))).status == "differs"
