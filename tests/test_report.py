"""nngauge report: verdicts on healthy and pathological networks, numbers equal to the
functional measures, escaping, failed sections, and the CLI's exit codes."""

import json
import math
import sys

import pytest
import torch
from torch import nn

from nngauge import correlations, jacobian_norm, kernel_conditioning, nlc_profile
from nngauge.cli._app import main
from nngauge.data._sources import load_data
from nngauge.errors import NNGaugeError
from nngauge.nn import mlp
from nngauge.nn._sources import load_model
from nngauge.report import NotApplicable, SectionBuilder, SectionOutput, build_report
from nngauge.theory import critical_init
from report_checks import assert_complete_real_network_report


def _gen(seed=0):
    return torch.Generator().manual_seed(seed)


@pytest.fixture(scope="module")
def wave():
    return load_data("waveform", n=500, seed=0)


def _by_key(report):
    return {v.key: v for v in report.verdicts}


@pytest.mark.slow
def test_healthy_shallow_critical_tanh_is_ok(wave):
    """A shallow tanh MLP at critical initialization (critical_init, Poole et al. (NIPS 2016))
    on waveform gets "ok" for every verdict and the report, an NLC between 1 and 3, and a
    theory card that calls it critical."""
    sigma_w, sigma_b = critical_init("tanh", sigma_b=0.05 ** 0.5, arch="mlp")
    net = mlp(40, 100, 3, 3, activation="tanh", sigma_w=sigma_w, bias_std=sigma_b,
              generator=_gen())
    report = build_report(net, wave.as_pair())
    verdicts = _by_key(report)
    assert {v.status for v in report.verdicts} == {"ok"}, [
        (v.key, v.status, v.message) for v in report.verdicts]
    assert 1.0 <= verdicts["nlc"].value <= 3.0
    assert "critical" in verdicts["theory"].message
    assert report.status == "ok"
    assert {s.key: s.status for s in report.sections}["theory"] == "ok"


@pytest.mark.slow
def test_deep_batchnorm_relu_nlc_explodes_with_fix(wave):
    """A 30-layer batchnorm-ReLU MLP gets a "bad" NLC verdict (NLC > 10) whose fix suggests
    fewer layers or skip connections, at about the depth where the measured NLC profile
    crosses 3, and a Jacobian verdict of warn or bad that says it explodes."""
    net = mlp(40, 100, 30, 3, activation="relu", norm="batch", generator=_gen())
    verdicts = _by_key(build_report(net, wave.as_pair(), quick=True))
    nlc = verdicts["nlc"]
    assert nlc.status == "bad" and nlc.value > 10
    assert "fewer layers" in nlc.fix and "skip connections" in nlc.fix
    # the suggested depth is where the measured profile crosses 3
    profile = nlc_profile(net, wave.as_pair(), n_batches=1, method="forward", generator=_gen())
    acts = [row.nlc for row in profile.layers if row.name.endswith(".act")]
    within = next(i for i, v in enumerate(acts) if v > 3)
    assert f"about {within + 1} layers" in nlc.fix
    assert verdicts["jacobian"].status in ("warn", "bad") and "explodes" in verdicts[
        "jacobian"].message


@pytest.mark.slow
def test_deep_relu_without_norm_shrinks_with_critical_init_fix(wave):
    """A 30-layer ReLU MLP without normalization gets shrinkage (fix: critical initialization),
    vanishing-Jacobian and kernel-degeneration (fix: NormReLU) warnings, and a theory card that
    suggests He initialization sigma_w = sqrt(2), the critical relu MLP without bias."""
    net = mlp(40, 100, 30, 3, activation="relu", generator=_gen())
    verdicts = _by_key(build_report(net, wave.as_pair(), quick=True))
    assert verdicts["shrinkage"].status in ("warn", "bad")
    assert "critical initialization" in verdicts["shrinkage"].fix
    assert verdicts["jacobian"].status == "bad" and "vanishes" in verdicts["jacobian"].message
    assert verdicts["kernel"].status in ("warn", "bad") and "NormReLU" in verdicts["kernel"].fix
    # He initialization: the critical relu MLP without bias has sigma_w^2 E[relu'(z)^2] = 1
    theory = verdicts["theory"]
    assert theory.status == "warn" and f"sigma_w={math.sqrt(2):.4g}" in theory.fix


def test_json_numbers_equal_the_functional_measures(wave, tmp_path):
    net = mlp(40, 64, 4, 3, activation="tanh", norm="layer", bias_std=0.2, generator=_gen())
    report = build_report(net, wave.as_pair(), generator=5, quick=True)
    out = json.loads(report.to_json())
    s = report.settings
    prof = nlc_profile(net, wave.as_pair(), batch_size=s.batch_size, n_batches=s.n_batches,
                       method="forward", generator=_gen(5))
    corr = correlations(net, wave.as_pair(), max_samples=s.correlation_samples)
    linear = [n for n, m in net.named_modules() if isinstance(m, nn.Linear)]
    jac = jacobian_norm(net, wave.as_pair(), ord="op", rms=True, layers=linear,
                        batch_size=s.jacobian_samples, n_batches=1, n_iter=s.power_iterations,
                        tol=s.jacobian_tol, generator=_gen(5))
    kern = kernel_conditioning(net, wave.as_pair(), max_samples=s.kernel_samples)
    sections = out["sections"]
    assert sections["nlc"]["result"] == json.loads(json.dumps(prof.to_dict()))
    assert sections["correlations"]["result"] == json.loads(json.dumps(corr.to_dict()))
    assert sections["jacobian"]["result"] == json.loads(json.dumps(jac.to_dict()))
    assert sections["kernels"]["result"]["layers"][1]["condition_number"] == pytest.approx(
        kern.layers[1].condition_number, rel=1e-12)
    verdicts = {v["key"]: v for v in out["verdicts"]}
    assert verdicts["nlc"]["value"] == prof.layers[-1].nlc
    assert verdicts["output_bias"]["value"] == prof.layers[-1].output_bias
    assert verdicts["shrinkage"]["value"] == corr.rho_max
    assert set(out["timings"]) == {sec.key for sec in report.sections}


def test_user_strings_are_escaped():
    net = nn.Sequential()
    net.add_module("lin<script>alert(1)</script>", nn.Linear(4, 8))
    net.add_module("act", nn.Tanh())
    net.add_module("out", nn.Linear(8, 2))
    report = build_report(net, torch.randn(40, 4, generator=_gen()), quick=True,
                          model_name="models/<script>evil()</script>.py:build")
    html = report.to_html()
    assert "<script" not in html
    assert "&lt;script&gt;evil()&lt;/script&gt;" in html
    assert "lin&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "://" not in html  # no external URL: plots are inline data URIs


class _Detached(nn.Module):
    """Runs, but its output has no gradient path to the input: gradient measures fail."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 3)

    def forward(self, x):
        return torch.tanh(self.lin(x)).detach()


def test_failing_measures_become_failed_sections_not_a_crash():
    report = build_report(_Detached(), torch.randn(30, 4, generator=_gen()), quick=True)
    status = {s.key: s for s in report.sections}
    assert status["nlc"].status == "failed" and "differentiab" in status["nlc"].error
    assert status["correlations"].status == "ok"
    assert _by_key(report)["nlc"].status == "n/a"
    html = report.to_html()
    assert 'class="section failed"' in html and "This measure failed" in html


def test_custom_section_builders_failed_and_skipped():
    def broken(ctx):
        raise RuntimeError("kaputt")

    def absent(ctx):
        raise NotApplicable("not for this model")

    def fine(ctx):
        return SectionOutput(result={"answer": 42}, notes=["fine"])

    report = build_report(nn.Linear(3, 2), torch.randn(10, 3), sections=[
        SectionBuilder("broken", "Broken", "-", broken),
        SectionBuilder("absent", "Absent", "-", absent),
        SectionBuilder("fine", "Fine", "-", fine)])
    sections = {s.key: s for s in report.sections}
    assert sections["broken"].status == "failed" and "kaputt" in sections["broken"].error
    assert sections["absent"].status == "skipped"
    assert report.to_dict()["sections"]["fine"]["result"] == {"answer": 42}


def test_model_state_is_restored(wave):
    net = mlp(40, 32, 4, 3, activation="relu", norm="batch", generator=_gen())
    net.eval()
    before = {k: v.clone() for k, v in net.state_dict().items()}
    build_report(net, wave.as_pair(), quick=True)
    assert not net.training
    assert all(torch.equal(before[k], v) for k, v in net.state_dict().items())
    assert all(p.requires_grad for p in net.parameters())


def test_wrong_width_raises_one_clear_error():
    with pytest.raises(NNGaugeError) as err:
        build_report(mlp(10, 8, 2, 2), torch.randn(20, 7))
    assert "build_report()" in str(err.value) and "(2, 7)" in str(err.value)


# ------------------------------------------------------------------------------------- CLI


def _cli(monkeypatch, capsys, *args):
    monkeypatch.setattr(sys, "argv", ["nngauge", "report", *args])
    with pytest.raises(SystemExit) as exit_:
        main()
    captured = capsys.readouterr()
    return exit_.value.code, captured.out, captured.err


@pytest.mark.parametrize("model, data, match", [
    ("missing.py:build", "gaussian:d=4,n=20", "not found"),
    ("{bad}:build", "gaussian:d=4,n=20", "broken import"),
    ("{none}:build", "gaussian:d=4,n=20", "nn.Module"),
    ("mlp:d_in=10,depth=2,width=8", "gaussian:d=4,n=20", "shape (2, 4)"),
    ("resnet:depth=3", "gaussian:d=4,n=20", "built-in"),
    ("mlp:depth=2,widht=3", "gaussian:d=4,n=20", "'width'"),
    ("{pickle}", "gaussian:d=4,n=20", "--trust-pickle"),
    ("mlp:depth=2", "imagenet", "data set"),
])
def test_cli_bad_inputs_exit_2_with_one_line(monkeypatch, capsys, tmp_path, model, data, match):
    (tmp_path / "bad.py").write_text("raise ImportError('broken import')\n")
    (tmp_path / "none.py").write_text("def build():\n    return 'not a model'\n")
    torch.save(nn.Linear(4, 2), tmp_path / "full.pt")
    model = model.format(bad=tmp_path / "bad.py", none=tmp_path / "none.py",
                         pickle=tmp_path / "full.pt")
    code, out, err = _cli(monkeypatch, capsys, model, "--data", data, "--out",
                          str(tmp_path / "r.html"))
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and match in lines[0], err
    assert not (tmp_path / "r.html").exists()


def test_cli_writes_html_and_json(monkeypatch, capsys, tmp_path):
    path = tmp_path / "model.py"
    path.write_text("import torch\ndef build():\n    torch.manual_seed(0)\n"
                    "    return torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Tanh(),"
                    " torch.nn.Linear(16, 2))\n")
    monkeypatch.setattr(sys, "argv", ["nngauge", "report", f"{path}:build", "--data",
                                      "gaussian:d=6,n=200", "--out", str(tmp_path / "r.html"),
                                      "--json", str(tmp_path / "r.json"), "--quick"])
    main()
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and "wrote" in out  # no progress bar when not a terminal
    data = json.loads((tmp_path / "r.json").read_text())
    assert data["model"] == f"{path}:build" and len(data["verdicts"]) == 6
    assert (tmp_path / "r.html").read_text().startswith("<!DOCTYPE html>")


def test_cli_escapes_a_model_path_with_markup(monkeypatch, capsys, tmp_path):
    folder = tmp_path / "<script>alert(1)"  # a directory name cannot hold "/"
    folder.mkdir()
    (folder / "net.py").write_text("import torch\ndef build():\n"
                                   "    return torch.nn.Sequential(torch.nn.Linear(5, 2))\n")
    monkeypatch.setattr(sys, "argv", ["nngauge", "report", f"{folder / 'net.py'}:build",
                                      "--data", "gaussian:d=5,n=50", "--quick", "--out",
                                      str(tmp_path / "r.html")])
    main()
    html = (tmp_path / "r.html").read_text()
    assert "<script" not in html and "&lt;script&gt;alert(1)" in html


@pytest.mark.slow
def test_readme_command_matches_the_functional_measures(monkeypatch, capsys, tmp_path):
    """The README's `nngauge report mlp:depth=10,...,norm=batch --data waveform` command writes
    a JSON report whose output NLC equals nlc_profile() on the same model and data."""
    monkeypatch.setattr(sys, "argv", [
        "nngauge", "report", "mlp:depth=10,width=100,activation=relu,norm=batch", "--data",
        "waveform", "--out", str(tmp_path / "report.html"), "--json", str(tmp_path / "r.json")])
    main()
    data = json.loads((tmp_path / "r.json").read_text())
    model = load_model("mlp:depth=10,width=100,activation=relu,norm=batch",
                       data=load_data("waveform"))
    settings = data["settings"]
    prof = nlc_profile(model, load_data("waveform").as_pair(), n_batches=settings["n_batches"],
                       method="forward", generator=_gen(0))
    assert data["sections"]["nlc"]["result"]["layers"][-1]["nlc"] == prof.layers[-1].nlc


def _sections(report):
    return {s.key: s for s in report.sections}


def test_expressivity_sections_equal_the_functional_measures():
    """The trajectory and transitions sections report trajectory_length(model, line(x0, x1,
    200)) and transitions(model, x0, x1) exactly; a smooth network falls back to sampled."""
    from nngauge import trajectory_length, transitions
    from nngauge.trajectories import line

    x = torch.randn(20, 3, generator=_gen())
    relu_net = nn.Sequential(nn.Linear(3, 16), nn.ReLU(), nn.Linear(16, 2))
    report = build_report(relu_net, x, quick=True)
    sections = _sections(report)
    assert sections["trajectory"].status == "ok" and sections["transitions"].status == "ok"
    out = report.to_dict()["sections"]
    expected = transitions(relu_net, x[0], x[1])
    assert out["transitions"]["result"]["n_patterns"] == expected.n_patterns
    assert out["transitions"]["result"]["per_layer"] == list(expected.per_layer)
    lengths = trajectory_length(relu_net, line(x[0], x[1], 200)).lengths
    assert out["trajectory"]["result"]["lengths"] == list(lengths)
    assert f"{expected.n_patterns} distinct activation patterns" in report.to_html()
    tanh_net = nn.Sequential(nn.Linear(3, 16), nn.Tanh(), nn.Linear(16, 2))
    notes = _sections(build_report(tanh_net, x, quick=True))["transitions"].output.notes
    assert any("sampled instead" in note for note in notes)


def test_regions_section_equals_the_functional_measures():
    """The linear-regions section reports regions(model, plane(x0, x1, x2)) exactly, the
    density near data, and, for an nngauge ReLU MLP, bounds that hold the measured count; a
    smooth network falls back to a grid; a token model is drawn on a plane of embeddings."""
    from nngauge import regions
    from nngauge.theory import max_regions_upper_bound
    from nngauge.trajectories import plane

    x = torch.randn(20, 2, generator=_gen())
    net = mlp(2, 8, 3, 2, activation="relu", init="gaussian", sigma_w=2**0.5, bias_std=0.2,
              generator=_gen())
    report = build_report(net, x, quick=True)
    section = _sections(report)["regions"]
    assert section.status == "ok"
    expected = regions(net, plane(x[0], x[1], x[2]))
    result = report.to_dict()["sections"]["regions"]["result"]
    assert result["n_regions"] == expected.n_regions and result["method"] == "exact"
    assert result["per_depth"] == list(expected.per_depth)
    titles = [table.title for table in section.output.tables]
    assert titles == ["Regions after each layer", "Regions near the data",
                      "Bounds on the number of regions"]
    bounds = {row[0]: row[1] for row in section.output.tables[2].rows}
    assert int(bounds["most regions of the architecture in R^d (upper bound)"]) == \
        max_regions_upper_bound(2, [8, 8]).bound >= expected.n_regions
    assert "Hanin &amp; Rolnick" in report.to_html() and section.output.figures
    tanh_net = nn.Sequential(nn.Linear(2, 16), nn.Tanh(), nn.Linear(16, 2))
    smooth = _sections(build_report(tanh_net, x, quick=True))["regions"]
    assert smooth.status == "ok" and smooth.output.result.method == "grid"
    assert any("exact regions do not apply" in note for note in smooth.output.notes)
    from nngauge.zoo import ZOO, sample_inputs

    tokens = sample_inputs(ZOO["gpt_small"], 8)
    embedded = _sections(build_report(ZOO["gpt_small"].build(generator=0), tokens,
                                      quick=True))["regions"]
    assert embedded.status == "ok" and embedded.output.result.method == "grid"
    assert any("output of 'wte'" in note for note in embedded.output.notes)


def test_regions_section_zooms_in_past_the_piece_budget_then_falls_back_to_a_grid():
    from types import SimpleNamespace

    from nngauge import regions
    from nngauge.report._region_section import ZOOM, _exact_or_grid
    from nngauge.trajectories import plane

    net = mlp(2, 16, 3, 2, activation="relu", init="gaussian", sigma_w=2**0.5, bias_std=0.2,
              generator=_gen())
    through = plane(*torch.randn(3, 2, generator=_gen(1)))
    full = regions(net, through).n_regions
    near = regions(net, through, bounds=(-1 / ZOOM, 1 / ZOOM, -1 / ZOOM, 1 / ZOOM)).n_regions
    assert near < full // 8
    for pieces, method in ((full, "exact"), (4 * near, "exact"), (near, "grid")):
        ctx = SimpleNamespace(model=net, settings=SimpleNamespace(region_pieces=pieces,
                                                                  region_resolution=32))
        notes = []
        result = _exact_or_grid(ctx, through, {}, notes)
        assert result.method == method
        if pieces == full:
            assert result.n_regions == full and not notes
        elif method == "exact":
            assert result.n_regions == near and "times smaller" in notes[0]
        else:
            assert "also 8 times closer" in notes[0] and result.image.shape[1:] == (32, 32)


@pytest.mark.slow
def test_correlation_overlay_matches_a_wide_layernorm_network():
    """Infinite-width theory (shrinkage paper eq. 2.3) vs a width-800 LayerNorm tanh MLP: the
    mean pairwise correlation per linear layer agrees to Monte Carlo accuracy (~1/sqrt(width)
    fluctuations of each cosine, averaged over 4950 pairs)."""
    from nngauge.report import SECTION_BUILDERS
    from nngauge.report._sections import Context, _theory_correlations

    x = load_data("gaussian:d=40,n=100", seed=1).inputs
    sigma_w, sigma_b = critical_init("tanh", sigma_b=0.3, arch="layernorm")
    net = mlp(40, 800, 5, 2, activation="tanh", norm="layer", sigma_w=sigma_w,
              bias_std=sigma_b, generator=_gen(2))
    report = build_report(net, x, quick=True,
                          sections=[s for s in SECTION_BUILDERS if s.key == "correlations"])
    section = report.sections[0]
    assert len(section.output.figures) == 1
    measured = {row.name: row.mean for row in section.output.result.layers}
    overlay = _theory_correlations(Context(net, x, x, report.settings), list(measured))
    pairs = [(measured[n], t) for n, t in zip(measured, overlay) if t is not None]
    assert len(pairs) == 4  # the hidden linear layers (the 2-unit read-out is not wide)
    assert pairs[0][0] == pytest.approx(pairs[0][1], abs=1e-6)  # the starting point
    for got, predicted in pairs[1:]:
        assert got == pytest.approx(predicted, abs=0.03)
    assert pairs[-1][1] > pairs[1][1] + 0.1  # correlations do rise with depth: not trivial


# ------------------------------------------------------------------- real networks


@pytest.mark.slow
@pytest.mark.parametrize("name", ["bert_small", "mobilenet_block", "convnext_block"])
def test_report_on_real_networks_computes_or_skips_every_section(name):
    """The zoo's networks that no example measures (the ResNet, ViT, GPT and LSTM reports are
    checked the same way in tests/test_examples.py, on the examples' own runs)."""
    from nngauge.zoo import ZOO, sample_inputs, sample_labels

    entry = ZOO[name]
    report = build_report(entry.build(generator=0), (sample_inputs(entry, 64),
                                                sample_labels(entry, 64)), quick=True)
    assert_complete_real_network_report(report, input_module=entry.input_module)


def test_deep_networks_are_measured_at_their_blocks():
    net = mlp(16, 32, 60, 2, activation="relu", generator=_gen())
    report = build_report(net, torch.randn(64, 16, generator=_gen()), quick=True)
    rows = [row.name for row in report.sections[0].output.result.layers]
    assert len(rows) <= 51 and all(r.endswith(".act") or r.endswith(".linear") or r == "output"
                                   for r in rows)
    assert any("blocks" in choice for choice in report.settings.choices)


def test_detached_model_report_is_incomplete_not_ok():
    report = build_report(_Detached(), torch.randn(30, 4, generator=_gen()), quick=True)
    assert report.failed and report.status == "incomplete"


def test_cli_measures_a_token_model_and_an_image_model(monkeypatch, capsys, tmp_path):
    path = tmp_path / "nets.py"
    path.write_text("from nngauge.zoo import gpt_small, groupnorm_cnn\n"
                    "def lm():\n    return gpt_small()\n"
                    "def cnn():\n    return groupnorm_cnn(1, 10, channels=(4, 8))\n")
    for model, data, extra in (("lm", "tokens:vocab=64,length=16,n=32", ["--output", "logits"]),
                               ("cnn", "digits:image,n=64", ["--mode", "eval"])):
        monkeypatch.setattr(sys, "argv", ["nngauge", "report", f"{path}:{model}", "--data", data,
                                          "--quick", "--json", str(tmp_path / "r.json"),
                                          "--out", str(tmp_path / "r.html"), *extra])
        main()
        out = json.loads((tmp_path / "r.json").read_text())
        assert not out["failed_sections"], out["failed_sections"]
        assert out["peak_memory_bytes"] > 2**20  # the process's resident peak
        printed = capsys.readouterr()
        assert "section(s) failed" in printed.out and "(budget 10 s), peak memory " in printed.out
        assert printed.err.startswith("plan: one forward and backward pass costs ")
        assert "budget 10 s: nlc " in printed.err  # each section's seconds, up front
    code, _, err = _cli(monkeypatch, capsys, f"{path}:cnn", "--data", "digits:image",
                        "--mode", "sideways", "--out", str(tmp_path / "x.html"))
    assert code == 2 and "--mode one of train, eval, frozen" in err


def test_nlc_verdict_says_when_the_inputs_are_far_from_isotropic():
    gen = _gen(3)
    low_rank = torch.randn(200, 3, generator=gen) @ torch.randn(3, 30, generator=gen)
    net = nn.Sequential(nn.Linear(30, 30), nn.Tanh(), nn.Linear(30, 2))
    message = _by_key(build_report(net, low_rank, quick=True))["nlc"].message
    assert "far from isotropic" in message and "preprocess" in message
    isotropic = _by_key(build_report(net, torch.randn(200, 30, generator=gen), quick=True))
    assert "isotropic" not in isotropic["nlc"].message
