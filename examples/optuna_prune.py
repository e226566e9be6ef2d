"""Optuna with nngauge: each trial's predictors recorded before training, and the trials whose
NLC lies outside the NLC paper's ideal range (1, 3) pruned before they train.

    pip install 'nngauge[optuna]'
    python examples/optuna_prune.py [--storage sqlite:///optuna.db] [--trials 12]

With an RDB storage several workers can run this script at once on the same study: the pruner
reads the predictors of every trial from the storage.
"""

import argparse

import optuna
import torch

from nngauge.data import waveform_noise
from nngauge.integrations.optuna import PredictorPruner, record_predictors
from nngauge.nn import mlp
from nngauge.training import fit


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--storage", default=None, help="an Optuna storage URL (default: memory)")
    parser.add_argument("--trials", type=int, default=12)
    parser.add_argument("--seed", type=int, default=0, help="seed of Optuna's sampler")
    args = parser.parse_args()
    train, val = waveform_noise(1000, generator=0), waveform_noise(300, generator=2)
    test = waveform_noise(500, generator=1)
    data = (train.inputs, train.labels)

    def objective(trial: optuna.Trial) -> float:
        model = mlp(train.inputs.shape[1], trial.suggest_categorical("width", [16, 64]),
                    trial.suggest_int("depth", 2, 30), 3,
                    activation=trial.suggest_categorical("activation", ["tanh", "relu", "selu"]),
                    init="gaussian", sigma_w=trial.suggest_float("sigma_w", 0.5, 4.0),
                    generator=trial.number)
        record_predictors(trial, model, data, measures=["nlc", "n_params"])
        if trial.should_prune():  # before any training
            raise optuna.TrialPruned()
        fit(model, train, val, lr=0.01, max_epochs=3, generator=trial.number)
        with torch.no_grad():
            return float((model(test.inputs).argmax(1) != test.labels).float().mean())

    study = optuna.create_study(storage=args.storage, study_name="nngauge-nlc",
                                load_if_exists=True, direction="minimize",
                                sampler=optuna.samplers.TPESampler(seed=args.seed),
                                pruner=PredictorPruner("nlc", good=(1.0, 3.0)))
    study.optimize(objective, n_trials=args.trials)
    for trial in study.trials:
        print(trial.number, trial.state.name, trial.params,
              {k: round(v, 3) for k, v in trial.user_attrs.items() if v is not None},
              trial.value)


if __name__ == "__main__":
    main()
