"""``taichi-aot build``: compile a Python file of Taichi kernels into a module, for one arch or several.

Taichi is imported only in the child processes this command starts, one per arch (Taichi 1.7.4 builds
one AOT module per ``ti.init``), each running ``build_part.py`` (by path: the child imports Taichi and not
taichi_aot, so one process never holds two copies of Taichi's runtime).

Convention for FILE.py (imported after ``ti.init(arch=...)``, so it must not call ``ti.init`` itself):

* kernels decorated with ``@ti.aot.export`` or ``@ti.aot.export_as("name", template_types={...})``
  go into the module;
* a function ``export_graphs()``, if present, returns ``{name: compiled_graph}`` (from
  ``ti.graph.GraphBuilder().compile()``); it is called once the file is imported;
* a list ``AOT_CAPS``, if present, names device capabilities for gfx backends
  (e.g. ``["spirv_has_float64"]``), added to those given with ``--caps``.

What is written (:mod:`taichi_aot.metadata.multi` describes the formats):

* one arch: a module folder, or a ``.tcm`` archive when the output ends in ``.tcm``, as Taichi writes them,
  plus ``taichi_aot.json`` with the kernels' argument names (Taichi's loader never reads it);
* several archs: one multi-arch module file at the path given, whatever its suffix, holding a ``.tcm``
  per arch; ``Runtime.load_module`` takes the part for its arch.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import zipfile

from .. import enums
from ..metadata.multi import FORMAT, SIDECAR

#: Taichi's names (``ti.vulkan``, ...) of the gfx backends (enums.GFX_ARCHS), in order of preference.
GFX_ARCHS = tuple(a.name.lower() for a in enums.ARCH_PREFERENCE if a in enums.GFX_ARCHS)
#: Every backend Taichi can compile a module for, by Taichi's name, as the error message lists them.
ARCHS = ("x64", "arm64", "cuda", *GFX_ARCHS)
#: Archive members get this time, so that building the same source twice writes the same bytes.
_FIXED_TIME = (2000, 12, 1, 0, 0, 0)
HERE = os.path.dirname(os.path.abspath(__file__))


class BuildError(Exception):
    """The file could not be built into a module (message says why)."""


# ---------------------------------------------------------------------------
# The command: one child per arch, then the output


def _run_part(source: str, arch: str, folder: str, caps: list[str]) -> dict:
    """Build one arch in a child process (build_part.py); write the argument names beside its files."""
    from .build_part import ERROR, SUMMARY

    cmd = [sys.executable, os.path.join(HERE, "build_part.py"), arch, "gfx" if arch in GFX_ARCHS else "llvm",
           os.path.abspath(source), folder, *caps]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    summary = None
    for line in proc.stdout.splitlines():
        if line.startswith(SUMMARY):
            summary = json.loads(line[len(SUMMARY):])
    if proc.returncode == 0 and summary is not None and os.path.isfile(os.path.join(folder, "metadata.json")):
        sidecar = {"taichi_aot": FORMAT, "arch": arch,
                   "kernels": {name: {"args": args} for name, args in summary["args"].items()}}
        with open(os.path.join(folder, SIDECAR), "w", encoding="utf-8") as f:
            json.dump(sidecar, f, indent=1, sort_keys=True)
        return summary
    said = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()]
    errors = [ln for ln in said if ln.startswith(ERROR)]
    if errors:
        raise BuildError(errors[-1][len(ERROR):])
    if summary is None and proc.returncode >= 0 and not said:
        raise BuildError(f"building {source} for {arch} ended (exit status {proc.returncode}) before a module was "
                         "written: does the file call sys.exit() or os._exit()?")
    how = f"signal {-proc.returncode}" if proc.returncode < 0 else f"exit status {proc.returncode}"
    raise BuildError(f"building {source} for {arch} failed ({how}): " + " | ".join(said[-5:])[-1500:])


def _zip_folder(folder: str, out: str) -> None:
    """A ``.tcm`` of the folder's files, as Taichi's ``Module.archive`` writes one (flat, uncompressed)."""
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as z:
        for name in sorted(os.listdir(folder)):
            info = zipfile.ZipInfo(name, _FIXED_TIME)
            info.external_attr = 0o644 << 16
            with open(os.path.join(folder, name), "rb") as f:
                z.writestr(info, f.read())


def _write_multi(parts: dict[str, str], out: str, source: str, taichi: str) -> None:
    """The multi-arch module: a manifest, then each part's ``.tcm`` (stored: the parts are read in place)."""
    with open(source, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    manifest = {"taichi_aot": FORMAT, "parts": {arch: f"{arch}.tcm" for arch in parts}, "taichi": taichi,
                "source": os.path.basename(source), "source_sha256": digest}
    with tempfile.TemporaryDirectory(prefix="taichi_aot_parts_") as tmp, \
            zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as z:
        info = zipfile.ZipInfo(SIDECAR, _FIXED_TIME)
        info.external_attr = 0o644 << 16
        z.writestr(info, json.dumps(manifest, indent=1, sort_keys=True))
        for arch, folder in parts.items():
            tcm = os.path.join(tmp, f"{arch}.tcm")
            _zip_folder(folder, tcm)
            info = zipfile.ZipInfo(f"{arch}.tcm", _FIXED_TIME)
            info.external_attr = 0o644 << 16
            with open(tcm, "rb") as f:
                z.writestr(info, f.read())


def build(source: str, archs: str | list[str], out: str, caps: list[str] | None = None) -> dict:
    """Compile ``source`` for each of ``archs`` into ``out`` (module docstring: what is written). Returns a
    summary: ``kernels``, ``graphs``, ``archs``, ``out``, ``kind`` ("folder", "tcm" or "multi-arch")."""
    archs = [archs] if isinstance(archs, str) else list(dict.fromkeys(archs))
    unknown = [a for a in archs if a not in ARCHS]
    if not archs or unknown:
        raise BuildError(f"unknown arch {', '.join(map(repr, unknown)) or '(none given)'} (one of {', '.join(ARCHS)})")
    if not os.path.isfile(source):
        raise BuildError(f"no such file: {source}")
    if importlib.util.find_spec("taichi") is None:
        raise BuildError("building needs Taichi 1.7.4 (pip install 'taichi_aot[build]'); running modules does not")
    out = os.path.abspath(out)
    multi = len(archs) > 1
    if multi and os.path.isdir(out):
        raise BuildError(f"-o {out} is a folder; a module for several archs is one file")
    parent = os.path.dirname(out)
    os.makedirs(parent, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".taichi_aot_build_", dir=parent) as tmp:
        summaries = {a: _run_part(source, a, os.path.join(tmp, a), list(caps or [])) for a in archs}
        staged = os.path.join(tmp, "out")
        if multi:
            _write_multi({a: os.path.join(tmp, a) for a in archs}, staged, source, summaries[archs[0]]["taichi"])
            kind = "multi-arch"
        elif out.endswith(".tcm"):
            _zip_folder(os.path.join(tmp, archs[0]), staged)
            kind = "tcm"
        else:
            kind = "folder"
        if kind == "folder":
            os.makedirs(out, exist_ok=True)
            folder = os.path.join(tmp, archs[0])
            for name in os.listdir(folder):
                os.replace(os.path.join(folder, name), os.path.join(out, name))
        else:
            os.replace(staged, out)
    first = summaries[archs[0]]
    return {"kernels": first["kernels"], "graphs": first["graphs"], "archs": archs, "out": out, "kind": kind}

