"""The report in a real browser: headless Chromium loads it without console errors, the
verdict panel and every plot are in the DOM, and the screenshot is not blank.

Needs Chromium (Debian: ``apt-get install chromium``); without it these tests fail, saying so.
"""

import re

import pytest
import torch
from browser_checks import console_errors as _console_errors
from browser_checks import run_chromium as _run

from nngauge.nn import mlp
from nngauge.report import build_report


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    net = mlp(12, 48, 6, 3, activation="relu", norm="batch",
              generator=torch.Generator().manual_seed(0))
    x = torch.randn(200, 12, generator=torch.Generator().manual_seed(1))
    report = build_report(net, x, quick=True, model_name="<b>model</b>")
    path = tmp_path_factory.mktemp("report") / "report.html"
    report.save(path)
    return report, path


def test_error_detection_catches_a_broken_page(tmp_path):
    control = tmp_path / "control.html"
    control.write_text("<!DOCTYPE html><html><body><p>control</p><script>"
                       "console.error('nngauge-control'); throw new Error('boom');"
                       "</script></body></html>")
    errors = _console_errors(_run(control, "--dump-dom").stderr)
    assert any("nngauge-control" in e for e in errors)
    assert any("boom" in e for e in errors)


@pytest.mark.slow
def test_page_loads_without_console_errors_with_panel_and_plots(page):
    """Headless Chromium loads the saved report with no console errors; its DOM holds the
    verdict panel with all 6 verdicts, one inline PNG per figure (at least 5), the NLC,
    correlations, Jacobian, kernels and theory sections, and the model name escaped."""
    report, path = page
    result = _run(path, "--dump-dom")
    assert result.returncode == 0, result.stderr
    assert _console_errors(result.stderr) == []
    dom = result.stdout
    assert 'id="verdicts"' in dom
    assert dom.count('class="verdict status-') == len(report.verdicts) == 6
    n_figures = sum(len(s.output.figures) for s in report.sections)
    assert n_figures >= 5  # NLC, correlations, Jacobian, kernels, theory
    assert len(re.findall(r'<img class="plot"[^>]*src="data:image/png;base64,', dom)) == n_figures
    for key in ("nlc", "correlations", "jacobian", "kernels", "theory"):
        assert f'id="section-{key}"' in dom
    assert "&lt;b&gt;model&lt;/b&gt;" in dom


@pytest.mark.slow
def test_screenshot_is_not_blank(page, tmp_path):
    """A headless Chromium screenshot of the report (1280 x 2000, no console errors) is not
    blank: its pixels vary (standard deviation above 0.05)."""
    import matplotlib.image

    _, path = page
    shot = tmp_path / "shot.png"
    result = _run(path, f"--screenshot={shot}")
    assert result.returncode == 0 and shot.exists(), result.stderr
    assert _console_errors(result.stderr) == []
    pixels = matplotlib.image.imread(shot)
    assert pixels.shape[0] == 2000 and pixels.shape[1] == 1280
    assert pixels[..., :3].std() > 0.05  # text, coloured panels and plots, not a blank page
