"""The examples run as a user would run them, and the report they write is complete."""

import importlib.util
from pathlib import Path

import pytest
from report_checks import assert_complete_real_network_report

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def _load(name):
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
@pytest.mark.parametrize("name, args", [("resnet", ["--small", "--quick"]),
                                        ("vit", ["--small", "--quick"]),
                                        ("gpt", ["--small", "--quick"]),
                                        ("lstm", ["--quick"])])
def test_example_runs_and_writes_a_complete_report(name, args, tmp_path, capsys, monkeypatch):
    """Each example's main() (ResNet, ViT, GPT, LSTM), run as a user would, writes an HTML report,
    prints an ok/warn/bad headline with 0 failed sections, and builds a complete report (every
    section computed or skipped with its reason); its build() returns a model in training mode."""
    module = _load(name)
    reports = []

    def build_and_keep(*args, **kwargs):
        reports.append(real_build_report(*args, **kwargs))
        return reports[-1]

    real_build_report = module.build_report
    monkeypatch.setattr(module, "build_report", build_and_keep)
    out = tmp_path / f"{name}.html"
    module.main([*args, "--out", str(out)])
    printed = capsys.readouterr().out
    assert out.read_text().startswith("<!DOCTYPE html>")
    first = printed.splitlines()[0]
    assert first.split()[0] in ("ok", "warn", "bad") and "(0 failed sections)" in first, printed
    (report,) = reports
    assert_complete_real_network_report(report, input_module=report.settings.input_module)
    assert module.build().training  # build() is what `nngauge report file.py:build` calls
