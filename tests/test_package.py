"""Package-level promises: layering, lazy optional dependencies, the error root."""

import subprocess
import sys

import pytest

import nngauge


def _modules_after(statement: str) -> set[str]:
    code = f"import sys; {statement}; print('\\n'.join(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return set(out.stdout.split())


def test_theory_never_imports_torch():
    loaded = _modules_after("import nngauge.theory, nngauge.activations")
    assert "torch" not in loaded


@pytest.mark.parametrize("optional", ["matplotlib", "pandas", "jinja2", "ray", "tensorboard",
                                      "lightning"])
def test_package_import_loads_no_optional_dependency(optional):
    loaded = _modules_after("import nngauge, nngauge.theory, nngauge.activations, nngauge.nn")
    assert optional not in loaded


def test_error_root_is_exported():
    assert issubclass(nngauge.InvalidInputError, nngauge.NNGaugeError)
    assert issubclass(nngauge.UnknownNameError, nngauge.NNGaugeError)
    assert nngauge.__version__
