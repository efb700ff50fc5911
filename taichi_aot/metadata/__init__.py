"""Pure-Python reader of AOT module metadata: kernel signatures from both formats Taichi 1.7.4 writes.

* gfx backends (Vulkan, Metal, OpenGL): ``metadata.json`` and ``graphs.json`` are JSON (:mod:`.gfx`);
* LLVM backends (x64, CUDA): ``metadata.json`` is Taichi's *text serializer* output, which is
  JSON-like but not JSON (``{1, 7, 4}`` tuples, ``ptr {...}`` tagged values, missing commas).
  :func:`parse_text` reads it with a small tokenizer and a depth-limited parser (:mod:`.llvm`).

This room decides which format a module is and assembles its :class:`ModuleInfo`; the records are
in :mod:`.model`, reading folders and archives in :mod:`.source`, the structured gfx round trip
in :mod:`.gfx140`. No Taichi import, no ``eval``; hostile or truncated input raises CorruptedDataError.
"""

from __future__ import annotations

import json
import os
import re

from ..enums import ARCH_PREFERENCE, CPU_ARCHS, GFX_ARCHS, LLVM_ARCHS, Arch
from ..errors import CorruptedDataError, IncompatibleModuleError
from .gfx import _gfx, _gfx_graphs, _texture_formats
from .gfx140 import GfxArgument, GfxGraph, GfxGraphArg, GfxKernel, GfxRuntime140
from .llvm import MAX_DEPTH, _llvm, _llvm_arch, parse_text
from .llvm import _llvm_graphs as _llvm_graphs  # tests read graphs.tcb bytes through it
from .model import GRAPH_KINDS, PTYPE_KINDS, ArgInfo, GraphInfo, KernelInfo, ModuleInfo
from .source import MAX_ARCHIVE_BYTES, MAX_ARCHIVE_MEMBERS, MAX_METADATA_BYTES, _Source, extract_archive, is_zip

# the archs that load a gfx module, in order of preference (Vulkan first)
_GFX_LOADERS = tuple(a for a in ARCH_PREFERENCE if a in GFX_ARCHS)


def _content(text: str) -> tuple[list[str], list[str]]:
    """(kernel names, graph names) of a module's ``__content__`` listing."""
    kernels, graphs = [], []
    for line in text.splitlines():
        kind, _, name = line.strip().partition(":")
        if kind == "kernel" and name:
            kernels.append(name)
        elif kind == "cgraph" and name:
            graphs.append(name)
    return kernels, graphs


def check_compatible(meta: ModuleInfo, arch: Arch, library_version: int, host_cpu: Arch | None, where: str) -> None:
    """Refuse a module built for another kind of backend than ``arch`` or by an incompatible Taichi.

    ``library_version`` is the loaded libtaichi_c_api's (1007000 loads Taichi 1.7.x modules);
    ``host_cpu`` is this machine's CPU arch (an x64 module loads on any x64 runtime).

    Raises:
        IncompatibleModuleError: another backend family, another LLVM arch, or another Taichi minor version.
    """
    if (meta.format == "llvm") != (arch in LLVM_ARCHS):
        built = "an LLVM backend (x64/CUDA)" if meta.format == "llvm" else "a gfx backend (Vulkan/Metal/OpenGL)"
        raise IncompatibleModuleError(f"module {where} was compiled for {built}; this runtime is {arch.name}")
    if meta.arch is not None and meta.arch != arch and not (
        meta.arch in CPU_ARCHS and arch in CPU_ARCHS and meta.arch == host_cpu
    ):
        raise IncompatibleModuleError(f"module {where} was compiled for {meta.arch.name}; this runtime is {arch.name}")
    wanted = library_version // 1000  # e.g. 1007 for Taichi 1.7.x
    if meta.version is not None and len(meta.version) >= 2 and meta.version[0] * 1000 + meta.version[1] != wanted:
        have = ".".join(map(str, meta.version))
        raise IncompatibleModuleError(
            f"module {where} was compiled by Taichi {have}; libtaichi_c_api {library_version} "
            f"loads modules of Taichi {wanted // 1000}.{wanted % 1000}.x"
        )


def read_module(source: str | bytes | os.PathLike) -> ModuleInfo:
    """Read a module's metadata from a folder, a ``.tcm`` path or ``.tcm`` bytes.

    Raises:
        CorruptedDataError: anything that is not a well-formed Taichi 1.7 module.
        MissingFileError: no file or folder at the path.
    """
    src = _Source(source)
    try:
        return _read(src)
    finally:
        src.close()


def _read(src: _Source) -> ModuleInfo:
    raw = src.read("metadata.json")
    if raw is None:
        raise CorruptedDataError("module has no metadata.json")
    text = raw.decode("utf-8", "replace")
    version = None
    raw_version = src.read("__version__", 64)
    if raw_version is not None:
        parts = re.findall(r"\d+", raw_version.decode("ascii", "replace"))
        version = tuple(int(p) for p in parts[:3]) or None
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError):
        doc = None
    if isinstance(doc, dict) and isinstance(doc.get("kernels"), list):
        info = _gfx(doc, _texture_formats(doc, src))
        graphs = src.read("graphs.json")
        if graphs is not None:
            try:
                info.graphs = _gfx_graphs(json.loads(graphs.decode("utf-8", "replace")), info.kernels)
            except (ValueError, RecursionError):
                raise CorruptedDataError("graphs.json is not valid JSON") from None
        info.archs = _GFX_LOADERS
    else:
        info = _llvm(parse_text(text))
        graphs = src.read("graphs.tcb")
        if graphs is not None:
            info.graphs = _llvm_graphs(graphs)
        info.arch = _llvm_arch(src)
        info.archs = (info.arch,) if info.arch is not None else ()
    if version is not None:
        info.version = version
    info.graph_names = list(info.graphs)
    content = src.read("__content__")
    if content is not None:
        listed, listed_graphs = info.content = _content(content.decode("utf-8", "replace"))
        if not info.graph_names:
            info.graph_names = list(listed_graphs)
        info.internal = [k for k in info.kernels if k not in listed]
        order = {name: i for i, name in enumerate(listed)}
        info.kernels = dict(sorted(info.kernels.items(), key=lambda kv: order.get(kv[0], len(order))))
    return info


__all__ = [
    "GFX_ARCHS",
    "GRAPH_KINDS",
    "MAX_ARCHIVE_BYTES",
    "MAX_ARCHIVE_MEMBERS",
    "MAX_DEPTH",
    "MAX_METADATA_BYTES",
    "PTYPE_KINDS",
    "ArgInfo",
    "GfxArgument",
    "GfxGraph",
    "GfxGraphArg",
    "GfxKernel",
    "GfxRuntime140",
    "GraphInfo",
    "KernelInfo",
    "ModuleInfo",
    "check_compatible",
    "extract_archive",
    "is_zip",
    "parse_text",
    "read_module",
]
