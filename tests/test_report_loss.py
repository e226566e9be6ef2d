"""The report's loss-surface section: the same numbers as hessian() and loss_landscape() on
the same samples, skipped without labels, mse for regression targets, batch statistics shared
by both measures."""

import numpy as np
import pytest
import torch
from torch import nn

from nngauge import hessian, loss_landscape
from nngauge.nn import mlp
from nngauge.report import build_report
from nngauge.report._sections import SECTION_BUILDERS

LOSS = [s for s in SECTION_BUILDERS if s.key == "loss"]


def _data(n=96, d=6, classes=3, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(n, d, generator=gen), torch.randint(0, classes, (n,), generator=gen)


def _section(report):
    (section,) = [s for s in report.sections if s.key == "loss"]
    return section


def test_section_equals_the_functional_measures():
    net = mlp(6, 16, 3, 3, activation="relu", generator=torch.Generator().manual_seed(1))
    x, y = _data()
    # a roomy budget: the plan (and so the per-batch interval) must not depend on the timing
    report = build_report(net, (x, y), sections=LOSS, quick=True, budget=1e4)
    section = _section(report)
    assert section.status == "ok", section.error
    s = report.settings
    n = min(s.loss_samples, len(y))
    size = -(-n // 4)
    direct = hessian(net, (x[:n], y[:n]), top_k=1, batch_size=size,
                     n_iter=s.hessian_steps, n_probes=s.hessian_probes,
                     generator=torch.Generator().manual_seed(s.seed))
    assert section.output.result.eigenvalues == pytest.approx(direct.eigenvalues, rel=1e-6)
    assert section.output.result.trace == pytest.approx(direct.trace, rel=1e-6)
    assert section.output.result.eigenvalues_ci is not None  # four batches: an interval
    line = loss_landscape(net, (x[:n], y[:n]), dims=1, resolution=s.landscape_steps, span=1.0,
                          count_regions=True, batch_size=size,
                          generator=torch.Generator().manual_seed(s.seed))
    (table,) = section.output.tables
    rows = {row[0]: row[1] for row in table.rows}
    assert rows["loss at the weights"] == f"{line.center_loss:.4g}"
    assert rows["lowest loss on the slice"] == f"{line.min_loss:.4g}"
    assert f"{line.pattern_distance[0]:.1%}" in rows["unit regions changed at alpha = -1 / +1"]
    assert len(section.output.figures) == 1
    assert any("region changes sampled" in note for note in section.output.notes)


def test_without_labels_the_section_is_skipped_with_the_reason():
    net = mlp(6, 8, 2, 3, generator=torch.Generator().manual_seed(2))
    section = _section(build_report(net, _data()[0], sections=LOSS, quick=True))
    assert section.status == "skipped" and "no labels" in section.error


def test_regression_targets_use_mse():
    net = mlp(6, 8, 2, 2, activation="tanh", generator=torch.Generator().manual_seed(3))
    x = _data()[0]
    section = _section(build_report(net, (x, torch.randn(len(x), 2)), sections=LOSS,
                                    quick=True))
    assert section.status == "ok", section.error
    assert section.output.result.loss == "mse"
    assert any("mse loss" in note for note in section.output.notes)


def test_batchnorm_in_train_mode_uses_batch_statistics_in_both_measures():
    net = nn.Sequential(nn.Linear(6, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 3))
    x, y = _data(n=64)
    section = _section(build_report(net, (x, y), sections=LOSS, quick=True))
    assert section.status == "ok", section.error
    assert section.output.result.mode.norm_mode == "train"
    assert any("statistics of each batch" in note for note in section.output.notes)
    assert net.training and np.isfinite(section.output.result.eigenvalues[0])


def test_a_model_torch_cannot_differentiate_twice_keeps_its_slice():
    net = nn.Sequential(nn.Linear(6, 16), nn.Hardsigmoid(), nn.Linear(16, 3))
    x, y = _data(n=32)
    section = _section(build_report(net, (x, y), sections=LOSS, quick=True))
    assert section.status == "ok", section.error
    assert any(note.startswith("Hessian not measured") and "Fix:" in note
               for note in section.output.notes)
    rows = {row[0] for row in section.output.tables[0].rows}
    assert "loss at the weights" in rows and "Hessian trace" not in rows


class _TinyLM(nn.Module):
    """A GPT-style language model: token embedding, one causal attention block, a logit per
    position and vocabulary entry (batch, positions, vocabulary)."""

    def __init__(self, vocabulary=11, width=8):
        super().__init__()
        self.embed = nn.Embedding(vocabulary, width)
        self.attention = nn.MultiheadAttention(width, 2, batch_first=True)
        self.head = nn.Linear(width, vocabulary)

    def forward(self, tokens):
        h = self.embed(tokens)
        mask = nn.Transformer.generate_square_subsequent_mask(tokens.shape[1])
        h = h + self.attention(h, h, h, attn_mask=mask, need_weights=False)[0]
        return self.head(torch.relu(h))


def test_labels_that_do_not_fit_the_output_skip_the_section_saying_which_it_needs():
    """Per-sample labels for an output per position: skipped (not failed), naming the label
    shape the loss needs; per-position labels: measured."""
    torch.manual_seed(4)
    lm, tokens = _TinyLM(), torch.randint(0, 11, (24, 6))
    section = _section(build_report(lm, (tokens, torch.randint(0, 11, (24,))), sections=LOSS,
                                    quick=True))
    assert section.status == "skipped", (section.status, section.error)
    assert "labels do not fit" in section.error and "per position" in section.error
    n = min(24, build_report(lm, tokens, sections=[], quick=True).settings.loss_samples)
    assert f"({n}, 6)" in section.error and f"labels of shape ({n},)" in section.error
    section = _section(build_report(lm, (tokens, torch.randint(0, 11, (24, 6))), sections=LOSS,
                                    quick=True))
    assert section.status == "ok", section.error
