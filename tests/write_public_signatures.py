"""Write the snapshot of the public signatures that ``tests/test_model_options.py`` compares
the library with.

    python tests/write_public_signatures.py   # rewrite tests/data/public_signatures.json

The snapshot holds ``str(inspect.signature(f))`` of every public function of
:data:`MODULES` and of :data:`FUNCTIONS`, by qualified public name. Rerun it only for a
deliberate change of a public signature (and say so in the change): the test exists so that
internal refactors (the model options travelling as one object, issue 32) cannot change one
by accident.
"""

from __future__ import annotations

import importlib
import inspect
import json
from pathlib import Path
from typing import Callable, Iterator

SNAPSHOT = Path(__file__).parent / "data" / "public_signatures.json"
MODULES = ("nngauge.measures", "nngauge.proxies")
"""Modules whose every public function is in the snapshot."""
FUNCTIONS = ("nngauge.report.build_report", "nngauge.training.fit")
"""Further public functions whose modules build model adapters."""


def public_functions() -> Iterator[tuple[str, Callable]]:
    """(qualified public name, function) of every function the snapshot covers."""
    for module_name in MODULES:
        module = importlib.import_module(module_name)
        for name in module.__all__:
            obj = getattr(module, name)
            if callable(obj) and not inspect.isclass(obj):
                yield f"{module_name}.{name}", obj
    for qualified in FUNCTIONS:
        module_name, _, name = qualified.rpartition(".")
        yield qualified, getattr(importlib.import_module(module_name), name)


def signatures() -> dict[str, str]:
    """``str(inspect.signature(f))`` of every covered function, by qualified name."""
    return {name: str(inspect.signature(f)) for name, f in sorted(public_functions())}


def main() -> None:
    SNAPSHOT.parent.mkdir(exist_ok=True)
    SNAPSHOT.write_text(json.dumps(signatures(), indent=1) + "\n")
    print(f"wrote {len(signatures())} signatures to {SNAPSHOT}")


if __name__ == "__main__":
    main()
