"""The import layering of docs/architecture.md: no module imports from a higher layer.

The layer table is read from the document itself (its "Layers" section), so the document and
this test cannot disagree. Every module of src/nngauge is read with ``ast``: imports at any
depth (module level and inside functions), absolute and relative, and
``importlib.import_module`` / ``__import__`` calls whose target can be read without running
them (a constant string, or the constant head of an f-string).
"""

from __future__ import annotations

import ast
import importlib
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Optional

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "nngauge"
ARCHITECTURE = ROOT / "docs" / "architecture.md"
FACE = "face"
"""The table's name for the layer of ``nngauge/__init__.py``, which may import any layer."""


@dataclass(frozen=True)
class Layer:
    """One row of the table: its rank (None for the face), its modules, torch allowed."""

    rank: Optional[int]
    modules: tuple[str, ...]
    torch: bool


def read_layers(text: str) -> list[Layer]:
    """The rows of the first table under the "## Layers" heading of ``text``."""
    section = re.search(r"^## Layers\n(.*?)(?=^## |\Z)", text, flags=re.M | re.S)
    if section is None:
        raise AssertionError("docs/architecture.md has no '## Layers' section")
    rows = [line for line in section.group(1).splitlines() if line.startswith("|")]
    layers = []
    for row in rows[2:]:  # header and separator first
        rank, modules, _, torch_ = (cell.strip() for cell in row.strip("|").split("|"))
        layers.append(Layer(None if rank == FACE else int(rank),
                            tuple(re.findall(r"`([\w.]+)`", modules)), torch_ == "yes"))
    return layers


def layer_table(layers: list[Layer]) -> dict[str, Optional[int]]:
    """Top-level package or module name (``measures``, ``__init__``) -> its rank."""
    return {module: layer.rank for layer in layers for module in layer.modules}


def module_name(path: Path, root: Path) -> str:
    """``nngauge.measures._result`` for root/measures/_result.py (root: the package folder)."""
    parts = path.relative_to(root.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def top_level(module: str) -> str:
    """The table's key of a module: its top-level package or module, ``__init__`` for the
    package itself."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def imported_modules(tree: ast.Module, module: str, is_package: bool
                     ) -> Iterator[tuple[str, Optional[str], int]]:
    """(imported module, imported name or None, line) for every import of ``tree``: statements
    at any depth, relative ones resolved against ``module``, and ``import_module`` /
    ``__import__`` calls with a readable target."""
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, None, node.lineno
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([node.module] if node.module else []))
            for alias in node.names:
                yield base, alias.name, node.lineno
        elif isinstance(node, ast.Call) and _is_dynamic_import(node.func) and node.args:
            target = _readable_target(node.args[0])
            if target:
                yield target, None, node.lineno


def _is_dynamic_import(func: ast.expr) -> bool:
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
    return name in ("import_module", "__import__")


def _readable_target(arg: ast.expr) -> Optional[str]:
    """A constant string, or the constant head of an f-string up to its last complete name
    (``f"nngauge.reproduce.{name}"`` -> ``nngauge.reproduce``)."""
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        return arg.value
    if isinstance(arg, ast.JoinedStr) and arg.values and isinstance(arg.values[0], ast.Constant):
        head = str(arg.values[0].value)
        return head.rpartition(".")[0] if "." in head else None
    return None


def upward_imports(root: Path, table: dict[str, Optional[int]],
                   resolve_face: Callable[[str], Optional[str]]) -> list[str]:
    """Every import of a module under ``root`` (the package folder) from a higher layer, as
    ``module -> imported module (layer a -> layer b)``.

    ``from nngauge import name`` imports the module that defines ``name``:
    ``resolve_face(name)`` gives it (None: ``name`` is a submodule of the package).
    """
    found = []
    for path in sorted(root.rglob("*.py")):
        module = module_name(path, root)
        rank = table.get(top_level(module))
        if rank is None:  # the face imports any layer; an unplaced module fails elsewhere
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for target, name, line in imported_modules(tree, module, path.name == "__init__.py"):
            if target != root.name and not target.startswith(root.name + "."):
                continue
            if target == root.name and name is not None:
                target = resolve_face(name) or f"{root.name}.{name}"
            other = table.get(top_level(target))
            if other is not None and other > rank:
                found.append(f"{module} -> {target} (layer {rank} {top_level(module)} -> "
                             f"layer {other} {top_level(target)}), line {line}")
    return found


def unplaced(root: Path, table: dict[str, Optional[int]]) -> list[str]:
    """Top-level packages (any folder holding Python files) and modules under ``root`` that
    the table does not place."""
    names = {path.relative_to(root).parts[0].removesuffix(".py")
             for path in root.rglob("*.py") if "__pycache__" not in path.parts}
    return sorted(names - set(table))


def defining_module(name: str) -> Optional[str]:
    """The module that defines what ``from nngauge import name`` gives: None for a submodule
    of the package (the import names it), else the face's own import of it or, for a name it
    loads on first use, the ``__module__`` of the object."""
    if (PACKAGE / name).is_dir() or (PACKAGE / f"{name}.py").is_file():
        return None
    face = ast.parse((PACKAGE / "__init__.py").read_text(encoding="utf-8"))
    for node in face.body:
        if isinstance(node, ast.ImportFrom) and node.module and any(
                (alias.asname or alias.name) == name for alias in node.names):
            return node.module
    value = getattr(importlib.import_module("nngauge"), name)
    return getattr(value, "__module__", None) or f"nngauge.{name}"


LAYERS = read_layers(ARCHITECTURE.read_text(encoding="utf-8"))
TABLE = layer_table(LAYERS)


def test_the_table_places_the_face_and_ranks_every_other_row():
    assert TABLE.get("__init__") is None and "__init__" in TABLE
    ranks = [layer.rank for layer in LAYERS if layer.rank is not None]
    assert ranks == sorted(set(ranks)) and ranks[0] == 0, ranks


def test_no_module_imports_from_a_higher_layer():
    upward = upward_imports(PACKAGE, TABLE, defining_module)
    assert not upward, ("imports from a higher layer (docs/architecture.md, 'Layers'):\n"
                        + "\n".join(upward))


def test_every_package_and_module_has_a_layer():
    missing = unplaced(PACKAGE, TABLE)
    assert not missing, (f"{missing} under src/nngauge have no layer: add each to the table of "
                         "docs/architecture.md, 'Layers'")


def test_torch_free_layers_import_without_torch():
    modules = [f"nngauge.{name}" for layer in LAYERS if not layer.torch
               for name in layer.modules if (PACKAGE / name).is_dir()
               or (PACKAGE / f"{name}.py").is_file()]
    code = (f"import sys; import {', '.join(modules)}; "
            "print(sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.')))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True).stdout.strip()
    assert loaded == "[]", f"importing {modules} loaded {loaded}"


# ------------------------------------------------------------------ the checker can fail


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "nngauge"
    for name, text in {"__init__.py": "", **files}.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


SYNTHETIC = {"__init__": None, "errors": 0, "theory": 2, "measures": 7}


def test_an_upward_import_is_found_in_every_form(tmp_path):
    """Module-level, function-level, relative, through the face and dynamic imports from a
    higher layer are each reported with both modules and both layers; downward and
    same-layer imports are not."""
    root = _tree(tmp_path, {
        "errors.py": "",
        "measures/__init__.py": "from nngauge.theory import x\nfrom . import _nlc\n",
        "measures/_nlc.py": "import nngauge.errors\n",
        "theory/__init__.py": "from nngauge.measures import nlc\n",
        "theory/_inner.py": "def f():\n    from .._ import y\n    from ..measures import _nlc\n",
        "theory/_face.py": "from nngauge import nlc\n",
        "theory/_dynamic.py": ("import importlib\nimportlib.import_module('nngauge.measures')\n"
                               "importlib.import_module(f'nngauge.measures.{name}')\n"),
    })
    found = upward_imports(root, SYNTHETIC, lambda name: "nngauge.measures._nlc")
    assert found == [
        "nngauge.theory -> nngauge.measures (layer 2 theory -> layer 7 measures), line 1",
        "nngauge.theory._dynamic -> nngauge.measures (layer 2 theory -> layer 7 measures), "
        "line 2",
        "nngauge.theory._dynamic -> nngauge.measures (layer 2 theory -> layer 7 measures), "
        "line 3",
        "nngauge.theory._face -> nngauge.measures._nlc (layer 2 theory -> layer 7 measures), "
        "line 1",
        "nngauge.theory._inner -> nngauge.measures (layer 2 theory -> layer 7 measures), "
        "line 3",
    ]


def test_a_folder_or_module_without_a_layer_is_reported(tmp_path):
    root = _tree(tmp_path, {"errors.py": "", "theory/__init__.py": "", "fresh/_a.py": "",
                            "loose.py": ""})
    assert unplaced(root, SYNTHETIC) == ["fresh", "loose"]


def test_the_table_is_read_from_the_layers_section():
    text = ("# t\n\n## Other\n\n| Layer | Modules | May import | torch |\n| - | - | - | - |\n"
            "| 9 | `x` | all | yes |\n\n## Layers\n\nwords\n\n"
            "| Layer | Modules | May import | torch |\n| --- | --- | --- | --- |\n"
            "| 0 | `errors`, `_random` | layer 0 | no |\n| face | `__init__` | any | no |\n\n"
            "## Later\n\n| 5 | `y` | - | yes |\n")
    assert read_layers(text) == [Layer(0, ("errors", "_random"), False),
                                 Layer(None, ("__init__",), False)]
    with pytest.raises(AssertionError, match="no '## Layers' section"):
        read_layers("# t\n")
