"""The report page: one jinja2 template (autoescaped), inline CSS, inline PNGs, no URLs."""

from __future__ import annotations

import dataclasses

from nngauge._internal.usage import gibibytes
from nngauge.errors import require_extra

TEMPLATE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>nngauge report: {{ report.model_name }}</title>
<style>
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 0 auto;
       max-width: 1100px; padding: 1.5rem; color: #1d232a; background: #fafbfc; }
h1 { margin-bottom: 0.2rem; } h2 { border-bottom: 2px solid #d0d7de; padding-bottom: 0.2rem; }
.meta { color: #57606a; margin-top: 0; }
.verdicts { display: grid; grid-template-columns: repeat(auto-fill, minmax(320px, 1fr));
            gap: 0.8rem; }
.verdict { border-radius: 8px; padding: 0.8rem 1rem; border-left: 8px solid #8c959f;
           background: #fff; box-shadow: 0 1px 3px rgba(0,0,0,0.12); }
.verdict.status-ok { border-left-color: #1a7f37; }
.verdict.status-warn { border-left-color: #bf8700; }
.verdict.status-bad { border-left-color: #cf222e; }
.badge { display: inline-block; font-weight: 700; font-size: 0.8rem; padding: 0.1rem 0.5rem;
         border-radius: 1rem; color: #fff; background: #8c959f; text-transform: uppercase; }
.status-ok .badge, .badge.status-ok { background: #1a7f37; }
.status-warn .badge, .badge.status-warn { background: #bf8700; }
.status-bad .badge, .badge.status-bad, .badge.status-failed { background: #cf222e; }
.verdict h3 { margin: 0.3rem 0; font-size: 1.05rem; }
.value { font-size: 1.4rem; font-weight: 600; }
.small { font-size: 0.85rem; color: #57606a; }
.close-call { background: #ddf4ff; padding: 0.4rem; border-radius: 4px; } .fix { background: #fff8c5; padding: 0.4rem;
         border-radius: 4px; }
.section { background: #fff; border-radius: 8px; padding: 0.5rem 1rem 1rem; margin: 1rem 0;
           box-shadow: 0 1px 3px rgba(0,0,0,0.12); }
.section.failed { border: 2px solid #cf222e; } .section.skipped { opacity: 0.8; }
.error { background: #ffebe9; padding: 0.5rem; white-space: pre-wrap; overflow-x: auto; }
img.plot { max-width: 100%; height: auto; display: block; margin: 0.5rem 0; }
table { border-collapse: collapse; font-size: 0.8rem; margin: 0.5rem 0; }
th, td { border: 1px solid #d0d7de; padding: 0.2rem 0.5rem; text-align: right; }
th { background: #f6f8fa; } td:first-child, th:first-child { text-align: left; }
details { margin: 0.5rem 0; } .scroll { overflow-x: auto; }
.banner { background: #fff8c5; border: 2px solid #bf8700; border-radius: 8px;
          padding: 0.6rem 1rem; margin: 1rem 0; }
</style>
</head>
<body>
<h1>nngauge report <span class="badge status-{{ report.status }}">{{ report.status }}</span></h1>
<p class="meta">model <code id="model-name">{{ report.model_name }}</code> on data
<code>{{ report.data_name }}</code> &middot; {{ report.model_summary['parameters'] }} parameters
&middot; {{ '%.1f' % report.seconds }} s &middot; peak memory {{ memory }} &middot; nngauge
{{ version }}</p>
{% if report.quick_changes %}<div class="banner" id="quick"><b>Quick report (--quick):</b>
fewer samples and iterations than the default, so the numbers are noisier and a verdict near
its threshold can differ from the full report's. Changed: {{ report.quick_changes|join('; ') }}.
</div>{% endif %}
{% if report.interrupted %}<div class="banner" id="interrupted"><b>Incomplete report:</b>
{{ report.banner }}. The verdicts below use only the finished sections; run the report again
to measure the rest.</div>{% endif %}

<h2>Verdicts</h2>
<div class="verdicts" id="verdicts">
{% for v in report.verdicts %}
<div class="verdict status-{{ v.status|replace('/', '') }}" data-key="{{ v.key }}">
<span class="badge">{{ v.status }}</span>
<h3>{{ v.title }}</h3>
{% if v.value is not none %}<div class="value">{{ fmt(v.value) }}{% if v.stderr is not none %}
<span class="small">&plusmn; {{ '%.2g' % v.stderr }} (standard error)</span>{% endif %}</div>
{% if v.meaning %}<div class="small meaning">{{ v.meaning }}</div>{% endif %}{% endif %}
<p>{{ v.message }}</p>
{% if v.close_call %}<p class="close-call"><b>Close call:</b> {{ v.close_call }}</p>{% endif %}
{% if v.evidence_text %}<p class="small evidence">{{ v.evidence_text }}</p>{% endif %}
{% if v.fix %}<p class="fix"><b>What to change:</b> {{ v.fix }}</p>{% endif %}
<p class="small">Threshold: {{ v.threshold }}<br>Source: {{ v.source }}</p>
</div>
{% endfor %}
</div>

{% for s in report.sections %}
<div class="section {{ s.status }}" id="section-{{ s.key }}">
<h2>{{ s.title }} <span class="badge status-{{ report.badge(s) }}">{{ report.badge(s) }}</span></h2>
<p class="small">{{ s.source }} &middot; {{ '%.2f' % s.seconds }} s</p>
{% if s.status == 'failed' %}<p><b>This measure failed on this model:</b></p>
<pre class="error">{{ s.error }}</pre>{% endif %}
{% if s.status == 'skipped' %}<p class="small">Not shown: {{ s.error }}.</p>{% endif %}
{% for f in s.output.figures %}
<figure><img class="plot" alt="{{ f.title }}" src="{{ f.uri }}">
<figcaption class="small">{{ f.caption }}</figcaption></figure>
{% endfor %}
{% for note in s.output.notes %}<p class="small">Note: {{ note }}</p>{% endfor %}
{% for t in s.output.tables %}
<details{% if loop.first and t.rows|length <= 12 %} open{% endif %}><summary>{{ t.title }}</summary>
<div class="scroll"><table><tr>{% for c in t.columns %}<th>{{ c }}</th>{% endfor %}</tr>
{% for row in t.rows %}<tr>{% for cell in row %}<td>{{ cell }}</td>{% endfor %}</tr>{% endfor %}
</table></div></details>
{% endfor %}
</div>
{% endfor %}

<div class="section" id="settings">
<h2>Settings and timings</h2>
<table>
{% for key, value in settings.items() %}<tr><th>{{ key }}</th><td>{{ value }}</td></tr>{% endfor %}
{% for s in report.sections %}
<tr><th>time: {{ s.title }}</th><td>{{ '%.3f' % s.seconds }} s</td></tr>
{% endfor %}
</table>
</div>
</body>
</html>
"""


def render(report) -> str:
    """Render ``report`` with jinja2, autoescape on: every user string is escaped."""
    require_extra("jinja2", "report", "Report.to_html()")
    import jinja2

    from nngauge._version import __version__

    env = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined)
    template = env.from_string(TEMPLATE)
    return template.render(report=report, version=__version__, fmt=lambda v: f"{v:.4g}",
                           settings=_shown(report.settings),
                           memory=gibibytes(report.peak_memory))


def _shown(settings) -> dict:
    """The settings as the page's table shows them: the plan's seconds and the sections it
    gave up in words, not as Python tuples."""
    shown = dataclasses.asdict(settings)
    shown["allotted"] = ", ".join(f"{key} {seconds:.3g} s" for key, seconds in settings.allotted)
    shown["given_up"] = "; ".join(f"{key}: {why}" for key, why in settings.given_up) or "none"
    return shown
