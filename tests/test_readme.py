"""The README's Python examples run as written, and every value they show is a finite number
(or a table, a plot, a name) with a comment saying what it means."""

import ast
import math
import numbers
import re
import warnings
from pathlib import Path

import numpy as np

README = Path(__file__).resolve().parents[1] / "README.md"


def _blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


def _numbers(value):
    """The numbers inside a shown value (scalars, tuples, lists, dicts, numpy arrays)."""
    if isinstance(value, bool):
        return
    if isinstance(value, numbers.Number):
        yield float(value)
    elif isinstance(value, np.ndarray) and value.dtype.kind in "fiu":
        yield from (float(v) for v in value.ravel())
    elif isinstance(value, (tuple, list)):
        for item in value:
            yield from _numbers(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _numbers(item)


def test_readme_python_blocks_run_and_show_finite_explained_values():
    """The blocks run as written, statement by statement. Issue "the first hour of a new
    user": the examples ended on ``inf`` (the condition number of a rank-3 kernel) and on a
    capacity of NaN at initialization, without a word. Every shown value is finite, commented
    (on its line or the next), and no nngauge warning fires (a capacity over a negative margin
    warns)."""
    import matplotlib

    matplotlib.use("Agg")
    problems = []
    assert _blocks()
    for block in _blocks():
        lines = block.splitlines()
        namespace = {}
        tree = ast.parse(block)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for node in tree.body:
                if not isinstance(node, ast.Expr):
                    exec(compile(ast.Module([node], []), str(README), "exec"), namespace)
                    continue
                shown = eval(compile(ast.Expression(node.value), str(README), "eval"),
                             namespace)
                source = ast.get_source_segment(block, node).splitlines()[0]
                if not all(math.isfinite(v) for v in _numbers(shown)):
                    problems.append(f"not finite: {source} -> {shown!r}")
                end = node.end_lineno  # 1-based: lines[end - 1] is its last line
                following = lines[end].strip() if end < len(lines) else ""
                if "#" not in lines[end - 1] and not following.startswith("#"):
                    problems.append(f"no comment saying what it shows: {source}")
        problems += [f"warning: {w.message}" for w in caught
                     if w.filename == str(README) or "nngauge" in w.filename]
    assert not problems, "\n".join(problems)


def test_readme_opens_with_the_two_setup_commands():
    first = re.search(r"```bash\n(.*?)```", README.read_text(), flags=re.S).group(1)
    commands = [line.split("#")[0].strip() for line in first.splitlines() if line.strip()]
    assert commands == ["make demo", "make test"]


def test_the_predictor_table_is_the_one_the_script_writes_from_the_committed_run():
    """README.md's predictor table is docs/write_predictors.py's rendering of the run kept in
    docs/predictors/ (its CSV and README): its numbers are never typed by hand."""
    import importlib.util

    path = Path(__file__).resolve().parents[1] / "docs" / "write_predictors.py"
    spec = importlib.util.spec_from_file_location("write_predictors", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    text = README.read_text(encoding="utf-8")
    shown = text.split(module.BEGIN, 1)[1].split(module.END, 1)[0]
    assert shown == "\n" + module.section(module.KEPT) + "\n"
    assert "| `nlc_rule` |" in shown and "Verdict: " in shown


def test_the_reproductions_table_is_the_one_the_script_writes_from_the_committed_runs():
    """README.md's table of reproductions is docs/write_reproductions.py's rendering of the
    runs' verdicts kept in docs/reproductions/verdicts.csv, with the day and the command of
    each; every command it names exists."""
    import importlib.util

    from nngauge.reproduce import names

    path = Path(__file__).resolve().parents[1] / "docs" / "write_reproductions.py"
    spec = importlib.util.spec_from_file_location("write_reproductions", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    text = README.read_text(encoding="utf-8")
    shown = text.split(module.BEGIN, 1)[1].split(module.END, 1)[0]
    assert shown == "\n" + module.section(module.KEPT, names()) + "\n"
    listed = re.findall(r"^\| `([a-z0-9-]+)` \|", shown, flags=re.M)
    assert len(listed) >= 40 and not set(listed) - set(names())
    assert "nngauge reproduce nlc-figure2 --scale small --seed 0 --seeds 3" in shown
