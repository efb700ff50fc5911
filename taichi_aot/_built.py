"""Whether this package's compiled parts are here: a source tree never built (a clone, where the README's wheel was
built and installed elsewhere) shadows the installed package when Python runs in it, and says so at import, with
what to do, instead of "No module named 'taichi_aot._native'"."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys

PACKAGE = __name__.rpartition(".")[0]
_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


def unbuilt() -> str:
    """What to do where this package is a source tree never built (its compiled ``_native`` absent): Python found it
    first (the current folder comes first on ``sys.path``), hiding any taichi_aot installed in this Python."""
    here = os.path.dirname(_PACKAGE_DIR)
    others = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    installed = importlib.machinery.PathFinder.find_spec(PACKAGE, others)
    where = installed.submodule_search_locations if installed is not None else None
    hidden = (f"the taichi_aot installed in this Python ({next(iter(where))})" if where
              else "any taichi_aot installed in this Python")
    return (f"taichi_aot was imported from {_PACKAGE_DIR}, a source tree whose compiled parts (taichi_aot/_native) "
            f"were never built: Python finds it before {hidden}, because {here} is the "
            "current folder or on sys.path. Run Python from another folder to use the installed package, or build "
            f"this tree in place: pip install -e . (or bash scripts/setup.sh) in {here}")


def check() -> None:
    """ImportError saying what to do where the compiled extension, which the package's first imports need, is
    absent."""
    if importlib.util.find_spec(f"{PACKAGE}._native") is None:
        raise ImportError(unbuilt(), name=PACKAGE)


check()
