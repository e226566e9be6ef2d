"""GaugeCallback: a Tracker inside a lightning.Trainer; the module imports without Lightning."""

import subprocess
import sys

import pytest
import torch
from torch import nn

import nngauge
from nngauge.data import waveform_noise
from nngauge.nn import mlp


def test_module_imports_without_lightning_and_names_the_extra_on_use():
    # a fresh interpreter where importing lightning fails
    code = (
        "import sys; sys.modules['lightning'] = None\n"
        "import nngauge.integrations.lightning as m\n"
        "from nngauge.errors import MissingDependencyError\n"
        "try:\n    m.GaugeCallback\nexcept MissingDependencyError as e:\n"
        "    assert \"nngauge[lightning]\" in str(e); print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "ok", out.stderr


def _train(tmp_path, callbacks, depth=2):
    """Two epochs of SGD (4 steps each) on waveform-noise of a small MLP in a
    lightning.Trainer with ``callbacks``; the trained module and the data."""
    import lightning

    class Module(lightning.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = mlp(40, 16, depth, 3, generator=torch.Generator().manual_seed(0))

        def forward(self, x):
            return self.net(x)

        def training_step(self, batch, batch_idx):
            x, y = batch
            return nn.functional.cross_entropy(self(x), y)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    data = waveform_noise(80, generator=0)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(*data), batch_size=20)
    trainer = lightning.Trainer(max_epochs=2, accelerator="cpu", logger=False,
                                enable_checkpointing=False, enable_progress_bar=False,
                                enable_model_summary=False, callbacks=callbacks,
                                default_root_dir=tmp_path)
    module = Module()
    trainer.fit(module, loader)
    return module, data


@pytest.mark.slow
def test_two_epoch_trainer_records_the_measures(tmp_path):
    """GaugeCallback(every=2) in a two-epoch lightning.Trainer records steps 0, 2, 4, 6 with nlc,
    weight_norm and grad_norm, and each recorded NLC equals nngauge.nlc recomputed on the weights
    and batch that step saw, with the same seeded probe."""
    import lightning
    from nngauge.integrations.lightning import GaugeCallback

    callback = GaugeCallback(every=2, generator=3)
    snapshots = {}

    class Snapshot(lightning.Callback):  # the weights and batch each measured step saw
        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            snapshots[trainer.global_step - 1] = (
                {k: v.clone() for k, v in pl_module.state_dict().items()}, batch)

    module, _ = _train(tmp_path, [callback, Snapshot()])
    history = callback.tracker.history
    assert history["step"].tolist() == [0, 2, 4, 6]  # 4 steps per epoch, 2 epochs
    assert {"nlc", "weight_norm", "grad_norm"} <= set(history.columns)
    for _, row in history.iterrows():
        state, batch = snapshots[int(row["step"])]
        module.load_state_dict(state)
        expected = nngauge.nlc(module, batch, batch_size=20,
                               generator=torch.Generator().manual_seed(3))  # the same probe every step
        assert row["nlc"] == pytest.approx(expected.nlc, rel=1e-6)


@pytest.mark.slow
def test_lightning_callback_measures_at_epoch_ends(tmp_path):
    """With schedule="epoch", GaugeCallback measures at the last step of each epoch (3, 7); the
    kept weight snapshots give back each row's weight norm (the norm of all parameters) and
    transitions' pattern count between the two probe inputs."""
    from nngauge.integrations.lightning import GaugeCallback

    data = waveform_noise(80, generator=0)
    callback = GaugeCallback(measures=["weight_norm", "transitions"], schedule="epoch",
                             probe_data=data.inputs[:2], keep_weights=True)
    module, data = _train(tmp_path, [callback], depth=3)
    history = callback.tracker.history
    assert history[["step", "epoch"]].values.tolist() == [[3, 0], [7, 1]]  # 4 steps an epoch
    for (_, row), (step, weights) in zip(history.iterrows(), callback.tracker.weight_snapshots):
        assert step == row["step"]
        module.load_state_dict(weights)
        assert row["weight_norm"] == pytest.approx(float(torch.cat(
            [w.flatten() for w in weights.values()]).double().norm()), rel=1e-12)
        expected = nngauge.transitions(module, data.inputs[0], data.inputs[1], norm_mode="eval")
        assert row["transitions/n_patterns"] == expected.n_patterns
