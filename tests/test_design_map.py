"""DESIGN.md's module map (§2) names every module of the package and nothing else, so it cannot
drift from the code: a module added, moved or removed fails here until the map says so."""

from __future__ import annotations

import re

from .conftest import ROOT

NAME = re.compile(r"[A-Za-z_][\w]*(\.py|/)")


def _modules() -> set[str]:
    """Every module under dpsql/, a package by its folder ("dpsql/sql/" for its __init__.py)."""
    out = set()
    for path in (ROOT / "dpsql").rglob("*.py"):
        rel = path.relative_to(ROOT).as_posix()
        out.add(rel.removesuffix("__init__.py") if path.name == "__init__.py" else rel)
    return out


def _mapped(design: str) -> set[str]:
    """The paths the map's first column names. A line's first column is its text up to two
    spaces; a comma-separated list of names (x.py, or a folder x/) is an entry, anything else
    continues the description above. An entry's folder is the nearest folder entry above it
    indented less."""
    block = design[design.index("```\ndpsql/") + 4 :]
    block = block[: block.index("```")]
    folders: list[tuple[int, str]] = []
    named: set[str] = set()
    for line in block.splitlines():
        indent = len(line) - len(line.lstrip())
        names = [n.strip() for n in re.split(r"\s{2,}", line.strip())[0].split(",")]
        if not all(NAME.fullmatch(n) for n in names):
            continue
        while folders and folders[-1][0] >= indent:
            folders.pop()
        prefix = folders[-1][1] if folders else ""
        named |= {prefix + n for n in names}
        if len(names) == 1 and names[0].endswith("/"):
            folders.append((indent, prefix + names[0]))
    return named


def test_the_design_module_map_names_every_module_and_only_those():
    mapped, modules = _mapped((ROOT / "DESIGN.md").read_text()), _modules()
    assert len(modules) > 90 and "dpsql/guarantee/bounding.py" in mapped  # the map was found and read
    assert not modules - mapped, f"modules DESIGN.md's map (§2) does not name: {sorted(modules - mapped)}"
    assert not mapped - modules, f"names in DESIGN.md's map (§2) that are no module: {sorted(mapped - modules)}"
