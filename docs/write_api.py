"""Write the generated sections of ``docs/api.md`` from the library itself.

    python docs/write_api.py           # rewrite the generated sections of the page
    python docs/write_api.py --check   # exit 1, saying which, when a section is stale

A generated section lies between the lines ``<!-- BEGIN GENERATED name (python
docs/write_api.py) -->`` and ``<!-- END GENERATED name -->``; :data:`SECTIONS` maps each name
to the function that writes its body. To add one, write the function, add it to
:data:`SECTIONS` and put the two marker lines on the page. ``tests/test_vocabulary.py`` fails
when the committed page differs from what :func:`render` writes.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import pkgutil
import re
import sys
from pathlib import Path
from typing import Any, Callable

PAGE = Path(__file__).with_name("api.md")
BEGIN = "<!-- BEGIN GENERATED {name} (python docs/write_api.py) -->"
END = "<!-- END GENERATED {name} -->"


def import_all() -> list[str]:
    """Import every nngauge module, so that every decorated function has registered its
    deprecated names; returns the modules skipped for a missing optional dependency."""
    import nngauge

    skipped = []
    for info in pkgutil.walk_packages(nngauge.__path__, "nngauge."):
        try:
            importlib.import_module(info.name)
        except ImportError:  # an optional dependency (lightning, ...) is not installed
            skipped.append(info.name)
    return skipped


def resolve(qualified: str) -> Any:
    """The object named ``module.qualname`` (``"nngauge.reproduce._base.Reproduction.run"``)."""
    parts = qualified.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        module = sys.modules.get(".".join(parts[:cut]))
        if module is not None:
            obj = module
            for name in parts[cut:]:
                obj = getattr(obj, name)
            return obj
    raise LookupError(f"{qualified} is not in an imported module")


def public_name(qualified: str) -> str:
    """The name users call ``qualified`` by: the shortest public module exporting it
    (``nngauge.hessian``, ``nngauge.proxies.region_density``,
    ``nngauge.reproduce.Reproduction.run``); the qualified name when none does."""
    target = resolve(qualified)
    public = sorted((name for name in sys.modules if name.split(".")[0] == "nngauge"
                     and not any(part.startswith("_") for part in name.split("."))),
                    key=lambda name: (name.count("."), name))
    for module_name in public:
        module = sys.modules[module_name]
        for attr in getattr(module, "__all__", ()):
            obj = getattr(module, attr, None)
            if obj is target:
                return f"{module_name}.{attr}"
            tail = qualified.rpartition(f".{attr}.")[2] if inspect.isclass(obj) else ""
            if tail and getattr(obj, tail, None) is target:
                return f"{module_name}.{attr}.{tail}"
    return qualified


def _sentence(function: Callable) -> str:
    return " ".join((inspect.getdoc(function) or "").split())


def deprecated_names() -> str:
    """The table of every deprecated keyword (``RENAMES``), positional layout (``LAYOUTS``)
    and result attribute (``DEPRECATED_ATTRIBUTES``), by public function or class."""
    import_all()
    from nngauge._vocabulary import DEPRECATED_ATTRIBUTES, LAYOUTS, REMOVED_IN, RENAMES

    rows = []
    for rename in RENAMES:
        said = [_sentence(f) for f in (rename.translate, rename.merge) if f is not None]
        note = f" ({' '.join(said)})" if said else ""
        rows.append((public_name(rename.function), f"`{rename.old}=`",
                     f"`{rename.new}=`{note}"))
    for layout in LAYOUTS:
        rows.append((public_name(layout.function), f"`{layout.old}`", f"`{layout.new}`"))
    for attribute in DEPRECATED_ATTRIBUTES:
        rows.append((public_name(attribute.owner), f"`.{attribute.old}`",
                     f"`.{attribute.new}`"))
    lines = [f"| function or result | deprecated (works until nngauge {REMOVED_IN}) | use |",
             "| --- | --- | --- |"]
    lines += [f"| `{function}` | {old} | {new} |" for function, old, new in sorted(rows)]
    return "\n".join(lines)


def _options(options: dict[str, Any]) -> str:
    return ", ".join(f"`{key}={value!r}`" for key, value in options.items())


def catalogue_table() -> str:
    """The API table of every public measure and proxy, from :func:`nngauge.catalogue`: what
    it reads, whether it needs labels, what it returns (its headline fields), its paper and
    the Tracker's defaults (the options it needs without default besides)."""
    from nngauge import catalogue

    lines = ["| function | kind | family | reads | labels | returns: headline | paper "
             "| Tracker defaults |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for entry in catalogue():
        returns = entry.result or inspect.signature(
            inspect.unwrap(entry.function)).return_annotation
        options = entry.tracker_options
        if options is None:
            tracker = "not tracked"
        else:
            needed = [name for name in entry.requires if name not in options]
            tracker = "; ".join(filter(None, [_options(options) or "the function's",
                                              _needs(needed)]))
        headline = ", ".join(entry.headline)
        lines.append(f"| `{entry.qualified_name}` | {entry.kind} | {entry.family} | "
                     f"{entry.reads} | {'yes' if entry.labels else 'no'} | "
                     f"`{returns}`{': ' + headline if headline else ''} | "
                     f"{entry.short_citation} | {tracker} |")
    return "\n".join(lines)


def _needs(names: list[str]) -> str:
    return ("needs " + ", ".join(f"`{name}=`" for name in names)) if names else ""


SECTIONS: dict[str, Callable[[], str]] = {
    "deprecated-names": deprecated_names,
    "catalogue": catalogue_table,
}
"""Generated section name -> the function writing its body (Markdown, no trailing newline)."""


def render(page: str) -> str:
    """``page`` with the body of every generated section rewritten."""
    for name, write in SECTIONS.items():
        begin, end = BEGIN.format(name=name), END.format(name=name)
        pattern = re.compile(re.escape(begin) + r"\n.*?" + re.escape(end), re.DOTALL)
        if not pattern.search(page):
            raise ValueError(f"{PAGE.name} has no section between {begin!r} and {end!r}")
        body = write()
        page = pattern.sub(lambda _: f"{begin}\n{body}\n{end}", page)
    return page


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="exit 1 when the page differs from what would be written")
    args = parser.parse_args(argv)
    current = PAGE.read_text(encoding="utf-8")
    wanted = render(current)
    if args.check:
        if wanted != current:
            print(f"{PAGE} is stale: run python docs/write_api.py", file=sys.stderr)
            return 1
        return 0
    PAGE.write_text(wanted, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
