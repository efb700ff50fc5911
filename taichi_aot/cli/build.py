"""``taichi-aot build``: compile a Python file of Taichi kernels into an AOT module.

The only place taichi_aot imports Taichi, and only when this command runs.

Convention for FILE.py (imported after ``ti.init(arch=...)``, so it must not call ``ti.init`` itself):

* kernels decorated with ``@ti.aot.export`` or ``@ti.aot.export_as("name", template_types={...})``
  go into the module;
* a function ``export_graphs()``, if present, returns ``{name: compiled_graph}`` (from
  ``ti.graph.GraphBuilder().compile()``); it is called once the file is imported;
* a list ``AOT_CAPS``, if present, names device capabilities for gfx backends
  (e.g. ``["spirv_has_float64"]``), added to those given with ``--caps``.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from types import ModuleType

from .. import enums

#: Taichi's names (``ti.vulkan``, ...) of the gfx backends (enums.GFX_ARCHS), in order of preference.
GFX_ARCHS = tuple(a.name.lower() for a in enums.ARCH_PREFERENCE if a in enums.GFX_ARCHS)
#: Every backend Taichi can compile a module for, by Taichi's name, as the error message lists them.
ARCHS = ("x64", "arm64", "cuda", *GFX_ARCHS)


class BuildError(Exception):
    """The file could not be built into a module (message says why)."""


def _import(source: str) -> ModuleType:
    """Import the user's file as a module (its folder on ``sys.path`` meanwhile, for its own imports)."""
    spec = importlib.util.spec_from_file_location("_taichi_aot_build_source", os.path.abspath(source))
    if spec is None or spec.loader is None:
        raise BuildError(f"cannot import {source}: not a Python file")
    user = importlib.util.module_from_spec(spec)
    sys.path.insert(0, os.path.dirname(os.path.abspath(source)))
    try:
        spec.loader.exec_module(user)
    except Exception as e:
        raise BuildError(f"importing {source} failed: {type(e).__name__}: {e}") from e
    finally:
        sys.path.pop(0)
    return user


def build(source: str, arch: str, out: str, caps: list[str] | None = None) -> dict:
    """Compile ``source`` for ``arch`` into ``out`` (a folder, or a ``.tcm`` file). Returns a summary."""
    if arch not in ARCHS:
        raise BuildError(f"unknown arch {arch!r} (one of {', '.join(ARCHS)})")
    if not os.path.isfile(source):
        raise BuildError(f"no such file: {source}")
    # Taichi 1.7.4 has no public way to find the kernels a file marks with @ti.aot.export: the
    # decorators append records (.kernel, .name, .template_types) to the private list
    # taichi.aot._export._aot_kernels, so we read what the import of the file added to it.
    # The taichi==1.7.4 pin in pyproject keeps the list where it is.
    try:
        import taichi as ti
        from taichi.aot import _export
    except ImportError as e:  # pragma: no cover - taichi is a dependency on supported Pythons
        raise BuildError(f"building needs the taichi package: {e}") from None

    ti.init(arch=getattr(ti, arch), log_level=ti.ERROR, offline_cache=False)
    got = ti.lang.impl.current_cfg().arch
    if got != getattr(ti, arch):
        raise BuildError(f"Taichi cannot target {arch} on this machine (it fell back to {got.name})")
    before = len(_export._aot_kernels)  # private, see above
    user = _import(source)
    records = _export._aot_kernels[before:]  # what the file's @ti.aot.export decorators added
    try:
        graphs = user.export_graphs() if callable(getattr(user, "export_graphs", None)) else {}
    except Exception as e:
        raise BuildError(f"export_graphs() in {source} failed: {type(e).__name__}: {e}") from e
    if not isinstance(graphs, dict):
        raise BuildError("export_graphs() must return a dict of name -> compiled graph")
    if not records and not graphs:
        raise BuildError(f"{source} exports nothing: mark kernels with @ti.aot.export or define export_graphs()")
    names = [r.name for r in records]
    if len(set(names)) != len(names):
        raise BuildError(f"two exported kernels share a name: {sorted(n for n in names if names.count(n) > 1)}")
    all_caps = list(caps or []) + list(getattr(user, "AOT_CAPS", []) or [])
    module = ti.aot.Module(getattr(ti, arch), caps=all_caps if arch in GFX_ARCHS else None)
    for r in records:
        try:
            if r.template_types:
                module.add_kernel(r.kernel, template_args=r.template_types, name=r.name)
            else:
                module.add_kernel(r.kernel, name=r.name)
        except Exception as e:
            hint = (" (gfx backends may need --caps, e.g. spirv_has_int64 spirv_has_float64)"
                    if arch in GFX_ARCHS else "")
            raise BuildError(f"Taichi could not compile kernel {r.name!r} for {arch}: {e}{hint}") from e
    for name, graph in graphs.items():
        try:
            module.add_graph(name, graph)
        except Exception as e:
            raise BuildError(f"Taichi could not add graph {name!r}: {e}") from e
    out = os.path.abspath(out)
    if out.endswith(".tcm"):
        os.makedirs(os.path.dirname(out), exist_ok=True)
        module.archive(out)  # not after save(): Taichi 1.7.4 then writes an empty archive on x64
    else:
        os.makedirs(out, exist_ok=True)  # Taichi 1.7.4 needs the folder to exist (gfx)
        module.save(out)
    return {"kernels": names, "graphs": list(graphs), "out": out, "arch": arch}
