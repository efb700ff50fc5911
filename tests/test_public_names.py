"""The package's public surface, held as PyTorch's test_public_bindings.py holds torch's: every public module's
``__all__`` is the list recorded in tests/data/public_names.json, so a name that joins or leaves the surface is a
change made on purpose (the record updated with it, ``python tests/test_public_names.py --write``), never a side
effect of a move; every name listed exists, and every public class and function of the top level carries a
docstring and is on a reference page."""

from __future__ import annotations

import glob
import importlib
import inspect
import json
import os
import re
import sys
import types

from conftest import ROOT

RECORD = os.path.join(ROOT, "tests", "data", "public_names.json")

#: The modules whose ``__all__`` is public: the package, its flat API, its rooms a user imports, and the two rooms
#: (backends, placement) whose registration and device a new backend is written against (docs/contributing.md).
MODULES = ("taichi_aot", "taichi_aot.capi", "taichi_aot.metadata", "taichi_aot.pool", "taichi_aot.enums",
           "taichi_aot.backends", "taichi_aot.placement", "taichi_aot.launch", "taichi_aot.memory",
           "taichi_aot.ndarray", "taichi_aot.module", "taichi_aot.runtime", "taichi_aot.image", "taichi_aot.replay")


def _surface() -> dict[str, list[str]]:
    return {name: sorted(importlib.import_module(name).__all__) for name in MODULES}


def test_every_public_module_lists_what_the_record_lists():
    with open(RECORD, encoding="utf-8") as f:
        recorded = json.load(f)
    now = _surface()
    for name in MODULES:
        added = sorted(set(now[name]) - set(recorded.get(name, ())))
        gone = sorted(set(recorded.get(name, ())) - set(now[name]))
        assert not added and not gone, (
            f"{name}.__all__ changed: added {added}, removed {gone}; if that is meant, update the record "
            "(python tests/test_public_names.py --write) and the reference pages")
    assert sorted(recorded) == sorted(MODULES)


def test_every_listed_name_exists_and_the_top_level_is_documented():
    with open(os.path.join(ROOT, "docs", "reference", "index.md"), encoding="utf-8") as f:
        pages = f.read()
    for path in glob.glob(os.path.join(ROOT, "docs", "reference", "*.md")):
        with open(path, encoding="utf-8") as f:
            pages += f.read()
    for name in MODULES:
        module = importlib.import_module(name)
        for attr in module.__all__:
            assert hasattr(module, attr), f"{name}.__all__ lists {attr!r}, which it does not define"
    top = importlib.import_module("taichi_aot")
    for attr in top.__all__:
        value = getattr(top, attr)
        if isinstance(value, types.ModuleType) or attr.startswith("__"):
            continue
        if inspect.isclass(value) or inspect.isfunction(value):
            assert inspect.getdoc(value), f"taichi_aot.{attr} has no docstring"
        assert re.search(rf"(?<!\w){re.escape(attr)}(?!\w)", pages), f"taichi_aot.{attr} is on no reference page"


def test_the_rooms_a_backend_is_written_against_are_documented():
    """backends and placement, the rooms a new backend and device are written against, have a reference page that
    renders each whole, and each of their public classes and functions a docstring."""
    with open(os.path.join(ROOT, "docs", "reference", "extending.md"), encoding="utf-8") as f:
        page = f.read()
    for name in ("taichi_aot.backends", "taichi_aot.placement"):
        assert f"::: {name}\n" in page, f"{name} is on no reference page"
        module = importlib.import_module(name)
        for attr in module.__all__:
            value = getattr(module, attr)
            if inspect.isclass(value) or inspect.isfunction(value):
                assert inspect.getdoc(value), f"{name}.{attr} has no docstring"


if __name__ == "__main__":
    if sys.argv[1:] == ["--write"]:
        sys.path.insert(0, ROOT)
        with open(RECORD, "w", encoding="utf-8") as f:
            json.dump(_surface(), f, indent=1)
            f.write("\n")
        print(f"wrote {RECORD}")
