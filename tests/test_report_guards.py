"""nngauge report under Ctrl-C (the finished sections are written, exit 130), and its budget:
shared between the sections, the costliest given up first with the budget that runs them,
sections skipped after an overrun, and a model too slow for any section refused fast
(issue 18)."""

import dataclasses
import json
import sys
import time

import pytest
import torch

from nngauge.cli._app import main
from nngauge.data import waveform_noise
from nngauge.errors import BudgetExceededError
from nngauge.nn import mlp
from nngauge.report import SECTION_BUILDERS, ReportInterrupted, build_report
from nngauge.report import _build, _plan
from nngauge.report._context import ReportSettings


def _interrupt_at(monkeypatch, key: str, measure: str) -> int:
    """Make the measure of section ``key`` raise KeyboardInterrupt, as Ctrl-C inside it would
    (the sections import their measure from ``nngauge`` when they run); returns the number of
    sections before it."""
    import nngauge

    def ctrl_c(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(nngauge, measure, ctrl_c)
    return next(i for i, b in enumerate(SECTION_BUILDERS) if b.key == key)


def test_ctrl_c_in_the_cli_writes_the_finished_sections_and_exits_130(monkeypatch, capsys,
                                                                       tmp_path):
    done = _interrupt_at(monkeypatch, "jacobian", "jacobian_norm")  # after 2 sections
    total = len(SECTION_BUILDERS)
    out, as_json = tmp_path / "r.html", tmp_path / "r.json"
    monkeypatch.setattr(sys, "argv", [
        "nngauge", "report", "mlp:depth=3,width=8", "--data", "gaussian:d=4,n=40", "--quick",
        "--out", str(out), "--json", str(as_json)])
    with pytest.raises(SystemExit) as exit_:
        main()
    assert exit_.value.code == 130
    err = capsys.readouterr().err
    assert f"interrupted after {done} of {total} sections" in err and str(out) in err
    page = out.read_text(encoding="utf-8")
    assert 'id="interrupted"' in page and f"interrupted after {done} of {total} sections" in page
    assert 'id="section-nlc"' in page and 'id="section-correlations"' in page
    assert 'id="section-jacobian"' not in page and 'id="section-loss"' not in page
    record = json.loads(as_json.read_text(encoding="utf-8"))
    assert record["interrupted"] is True and record["status"] == "incomplete"
    assert list(record["sections"]) == ["nlc", "correlations"]
    assert "Jacobian norms" in record["not_run_sections"]


def test_build_report_raises_a_keyboard_interrupt_carrying_the_partial_report(monkeypatch):
    _interrupt_at(monkeypatch, "kernels", "kernel_conditioning")
    net = mlp(4, 8, 3, 2, generator=torch.Generator().manual_seed(0)).eval()
    before = {k: v.clone() for k, v in net.state_dict().items()}
    with pytest.raises(KeyboardInterrupt) as info:  # a caller that ignores it stops as usual
        build_report(net, torch.randn(40, 4, generator=torch.Generator().manual_seed(1)),
                     quick=True)
    assert isinstance(info.value, ReportInterrupted)
    report = info.value.report
    assert report.interrupted and [s.key for s in report.sections] == ["nlc", "correlations",
                                                                        "jacobian"]
    assert report.not_run[0] == "Kernel conditioning" and report.status != "ok"
    verdicts = {v.key: v for v in report.verdicts}
    assert verdicts["nlc"].status != "n/a"  # judged from the finished section
    assert "not run" in verdicts["kernel"].message and "not run" in verdicts["theory"].message
    assert "interrupted after 3 of" in report.summary()
    # the model is as it was given
    assert not net.training and all(p.requires_grad for p in net.parameters())
    assert all(torch.equal(before[k], v) for k, v in net.state_dict().items())


def test_a_section_interrupted_after_its_measure_gives_no_verdict(monkeypatch):
    """The NLC section stores its result, then draws its figure: Ctrl-C while drawing leaves
    no NLC section, so no verdict may be judged from its result either."""
    from nngauge.report import _sections

    def ctrl_c(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(_sections, "png_data_uri", ctrl_c)
    with pytest.raises(ReportInterrupted) as info:
        build_report(mlp(4, 8, 3, 2), torch.randn(20, 4), quick=True)
    report = info.value.report
    assert report.sections == ()
    assert {v.key: v for v in report.verdicts}["nlc"].status == "n/a"


def test_ctrl_c_while_planning_still_gives_a_page(monkeypatch, tmp_path):
    def ctrl_c(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(_build, "check_affordable", ctrl_c)
    with pytest.raises(ReportInterrupted) as info:
        build_report(mlp(4, 8, 3, 2), torch.randn(20, 4), quick=True)
    report = info.value.report
    assert report.sections == () and len(report.not_run) == len(SECTION_BUILDERS)
    assert f"interrupted after 0 of {len(SECTION_BUILDERS)}" in report.save(
        tmp_path / "r.html").read_text(encoding="utf-8")


@pytest.mark.slow
def test_a_quick_report_on_a_10000_layer_mlp_finishes_fast_with_what_fits():
    """Issue 18: this report ran for hours (minutes alone to choose the layers to plot). Now
    the sections whose least work does not fit its 10 s are skipped, each naming the budget
    that would run it, and the report ends within a minute on two cores."""
    net = mlp(40, 8, 10_000, 3, init="gaussian", generator=torch.Generator().manual_seed(0))
    data = waveform_noise(200, generator=0)
    start = time.perf_counter()
    report = build_report(net, data, quick=True)
    assert time.perf_counter() - start < 60
    skipped = [s for s in report.sections if s.status == "skipped" and s.key != "theory"]
    assert {s.key for s in skipped} >= {"loss", "jacobian"}
    for section in skipped:
        assert section.error.startswith("over the budget: "), section.error
        assert "--budget" in section.error
    assert any(s.status == "ok" for s in report.sections)


def test_the_budget_gives_each_section_its_least_work_and_a_share_of_the_rest():
    least = {"nlc": 1.0, "correlations": 0.5, "kernels": 0.25, "loss": 2.0}
    seconds, given_up = _plan.allot(least, 10.0)
    assert given_up == {}
    assert sum(seconds.values()) == pytest.approx(10.0)
    spare = 10.0 - sum(least.values())
    shares = sum(_plan.SHARES.get(k, 0.0) for k in least)
    for key, value in seconds.items():
        assert value == pytest.approx(least[key] + spare * _plan.SHARES.get(key, 0.0) / shares)
    assert seconds["kernels"] == pytest.approx(0.25)  # no share: its least work only


def test_past_the_budget_the_costliest_sections_go_first_naming_the_budget_that_runs_them():
    least = {"nlc": 3.0, "correlations": 1.0, "jacobian": 20.0, "loss": 50.0}
    seconds, given_up = _plan.allot(least, 10.0)
    assert set(seconds) == {"nlc", "correlations"}
    assert sum(seconds.values()) == pytest.approx(10.0)
    assert given_up == {"loss": 74, "jacobian": 24}  # its least + every cheaper section's
    for key, needed in given_up.items():  # the budget named runs it, one second less does not
        assert key in _plan.allot(least, needed)[0]
        assert key not in _plan.allot(least, needed - 1)[0]
    assert _plan.allot({"nlc": 11.0}, 10.0) == ({}, {"nlc": 11})
    # the NLC opens the report: given up only when nothing else is left to give up
    seconds, given_up = _plan.allot({"nlc": 8.0, "correlations": 1.0, "loss": 5.0}, 10.0)
    assert set(seconds) == {"nlc", "correlations"} and given_up == {"loss": 14}
    seconds, given_up = _plan.allot({"nlc": 12.0, "correlations": 1.0}, 10.0)
    assert set(seconds) == {"correlations"} and given_up == {"nlc": 13}  # too costly alone


def test_a_model_too_slow_even_for_its_cheapest_section_is_refused(monkeypatch):
    monkeypatch.setattr(_plan, "_timed_pass", lambda adapter, batch, sites: (0.5, {}))
    quick = ReportSettings.make(quick=True)
    everything = [b.key for b in SECTION_BUILDERS]
    least = _plan.least_seconds(quick, _plan.Cost(0.25, 0, 0.25), everything, n_data=2,
                                n_jacobian=_plan.MIN_JACOBIAN_POSITIONS, labelled=True,
                                coupled=False)
    assert set(least) == set(everything) - {"theory"}
    cheapest = min(least.values())
    assert _plan.check_affordable(None, torch.zeros(2, 3), quick, everything, True,
                                  "here") == pytest.approx(cheapest)
    tight = dataclasses.replace(quick, budget=cheapest / (_plan.REFUSE_FACTOR * 1.01))
    with pytest.raises(BudgetExceededError, match=f"budget={int(cheapest) + 1}|"
                       f"budget={cheapest:.0f}") as info:
        _plan.check_affordable(None, torch.zeros(2, 3), tight, everything, True, "here")
    assert "cheapest section" in str(info.value)
    assert _plan.check_affordable(None, torch.zeros(2, 3), tight, ["theory"], True,
                                  "here") == 0.0  # no section runs the model


def _priced(monkeypatch, per_sample: float) -> None:
    """Make the report believe one sample's forward and backward pass costs ``per_sample``."""
    monkeypatch.setattr(_build, "measure_cost", lambda adapter, raw, sites: _plan.Cost(
        per_sample, 1000, per_sample))


def test_a_section_given_up_is_skipped_with_its_reason_and_the_budget_named_runs_it(
        monkeypatch):
    _priced(monkeypatch, 0.05)
    net, data = mlp(4, 8, 3, 2, generator=0), (torch.randn(64, 4), torch.randint(0, 2, (64,)))
    loss = [b for b in SECTION_BUILDERS if b.key == "loss"]
    report = build_report(net, data, budget=10.0, sections=SECTION_BUILDERS[:2] + loss)
    section = {s.key: s for s in report.sections}["loss"]
    assert section.status == "skipped" and section.seconds == 0.0
    needed = int(section.error.split("--budget ")[1].split()[0])
    assert needed > 10 and dict(report.settings.given_up)["loss"] in section.error
    assert "loss skipped (needs --budget" in report.settings.choices[0]
    again = build_report(net, data, budget=needed, sections=loss)
    assert {s.key: s for s in again.sections}["loss"].status == "ok"
    assert again.settings.seconds("loss") <= needed


def test_sections_after_an_overrun_are_skipped_saying_so(monkeypatch):
    first, second = SECTION_BUILDERS[0], SECTION_BUILDERS[1]

    def slow(ctx):
        time.sleep(1.6)  # past OVERRUN (1.5) times the 1 s budget on its own
        return first.run(ctx)

    report = build_report(mlp(4, 8, 3, 2, generator=0), torch.randn(40, 4), budget=1.0,
                          sections=[dataclasses.replace(first, run=slow), second])
    done, skipped = report.sections
    assert done.status == "ok"
    assert skipped.status == "skipped"
    assert skipped.error.startswith("over the budget: the sections before it took 2 s of the "
                                    "1 s budget")


def test_the_check_leaves_the_thread_count_as_it_was():
    threads = torch.get_num_threads()
    build_report(mlp(4, 8, 2, 2), torch.randn(20, 4), quick=True,
                 sections=[SECTION_BUILDERS[-1]])
    assert torch.get_num_threads() == threads


@pytest.mark.parametrize("coupled", [False, True])
def test_a_short_budget_keeps_the_jacobian_batch_of_a_batch_statistics_model(coupled):
    """With batch statistics the per-layer norms depend on the batch size (the demo's growth
    read 427 on 4 samples and 13 on 50), so a short budget cuts the power iterations, never
    the batch; a model without coupling may run on fewer samples."""
    settings = ReportSettings(quick=True, budget=10.0)
    cost = _plan.Cost(per_sample=1e-3, recorded_per_sample=1000, marginal_per_sample=1e-4)
    changes, choices = _plan.plan(settings, cost, n_data=1000, n_sites=20, n_jacobian=11,
                                  grouped=False, coupled=coupled)
    if coupled:
        assert changes["jacobian_samples"] == settings.jacobian_samples
        assert changes["power_iterations"] < settings.power_iterations
        assert any("the batch size, so it is kept" in c for c in choices)
    else:
        assert changes["jacobian_samples"] < settings.jacobian_samples


def test_a_short_budget_thins_the_jacobian_layers_of_a_batch_statistics_model():
    """With batch statistics the batch is kept and the steps cut to their least; past that
    the section measures fewer layers (at least five, the output included), and says so."""
    settings = ReportSettings(budget=30.0)  # the loss section's least work does not fit
    cost = _plan.Cost(per_sample=3e-3, recorded_per_sample=1000, marginal_per_sample=1e-3)
    changes, choices = _plan.plan(settings, cost, n_data=1000, n_sites=20, n_jacobian=12,
                                  grouped=True, coupled=True)
    assert changes["jacobian_samples"] == settings.jacobian_samples
    assert changes["power_iterations"] == _plan.MIN_ITERATIONS
    assert changes["jacobian_positions"] == _plan.MIN_JACOBIAN_POSITIONS
    assert any("at 5 layers (of 12, evenly spaced)" in c for c in choices)
    roomy = dataclasses.replace(settings, budget=1e6)
    changes, _ = _plan.plan(roomy, cost, n_data=1000, n_sites=20, n_jacobian=12,
                            grouped=True, coupled=True)
    assert changes["jacobian_positions"] == 12 and "power_iterations" not in changes


def test_a_short_budget_drops_the_per_batch_eigenvalues_before_the_lanczos_steps():
    """Past the least steps and products, the loss section's per-batch Lanczos runs (the
    interval) go, then slice points; a roomy budget keeps both, a slightly short one only
    shrinks the steps."""
    cost = _plan.Cost(per_sample=3e-3, recorded_per_sample=1000, marginal_per_sample=1e-3)
    settings = ReportSettings()
    share = _plan.SHARES["loss"]
    tight = _plan._loss_plan(settings, cost, share * 1.0)
    assert tight["hessian_per_batch"] is False and tight["landscape_steps"] == 21
    assert tight["loss_samples"] == _plan.LOSS_MIN_SAMPLES
    assert tight["loss_batches"] == 1  # no interval, no batch statistics: one batch
    coupled = _plan._loss_plan(settings, cost, share * 1.0, coupled=True)
    assert coupled["loss_batches"] == _plan.LOSS_BATCHES  # the batches batchnorm normalizes
    roomy = _plan._loss_plan(settings, cost, 1e6)
    assert roomy["hessian_per_batch"] is True and roomy["landscape_steps"] == 41
    assert roomy["hessian_steps"] == settings.hessian_steps
    assert roomy["loss_batches"] == _plan.LOSS_BATCHES
    least = dataclasses.replace(settings, hessian_steps=_plan.LOSS_MIN_STEPS,
                                hessian_probes=_plan.LOSS_MIN_PROBES, landscape_steps=41)
    at_least = _plan._loss_plan(least, cost, 1e6)  # the least work's cost, interval included
    with_interval = ((2 * _plan.LOSS_MIN_STEPS + _plan.LOSS_MIN_PROBES) * _plan.PRODUCT_PASSES
                     + 41) * (_plan.LOSS_BATCHES * 2e-3 * 16 + _plan.LOSS_MIN_SAMPLES * 1e-3)
    assert at_least["hessian_per_batch"] is True and at_least["landscape_steps"] == 41
    slightly = _plan._loss_plan(settings, cost, 2 * with_interval)
    assert slightly["hessian_per_batch"] is True and slightly["landscape_steps"] == 41
    assert _plan.LOSS_MIN_STEPS < slightly["hessian_steps"] < settings.hessian_steps


def test_evenly_thinned_keeps_the_first_and_the_last():
    """The thinning used for deep networks' sites and the Jacobian's layers."""
    from nngauge._internal.sites import evenly_thinned

    assert evenly_thinned(range(11), 3) == [0, 5, 10]
    assert evenly_thinned(range(4), 10) == [0, 1, 2, 3]
    assert evenly_thinned(range(4), 1) == [3]
    assert evenly_thinned(range(12), 2) == [0, 11]
