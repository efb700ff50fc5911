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
import logging
import os
import re
from dataclasses import replace
from typing import Any

from ..enums import ARCH_PREFERENCE, CPU_ARCHS, GFX_ARCHS, LLVM_ARCHS, Access, Arch
from ..errors import CorruptedDataError, IncompatibleModuleError
from .model import (
    GRAPH_KINDS,
    PTYPE_KINDS,
    ArgInfo,
    FieldLayout,
    GraphInfo,
    KernelInfo,
    LlvmCode,
    ModuleInfo,
    graph_access,
)
from .multi import SIDECAR, apply_names, part_for, parts_of, recorded_seal
from .source import (
    MAX_ARCHIVE_BYTES,
    MAX_ARCHIVE_MEMBERS,
    MAX_METADATA_BYTES,
    ModuleFiles,
    _Source,
    extract_archive,
    is_zip,
    loadable,
    nearest_module,
)

_log = logging.getLogger("taichi_aot")

#: Names of the format rooms, imported at their first use (a module's reading imports its family's alone: gfx for
#: Vulkan, Metal and OpenGL, LLVM for x64 and CUDA; importing the package reads neither).
_LAZY = {"GfxArgument": ".gfx140", "GfxGraph": ".gfx140", "GfxGraphArg": ".gfx140", "GfxKernel": ".gfx140",
         "GfxRuntime140": ".gfx140", "forget_shaders": ".gfx", "MAX_DEPTH": ".llvm", "parse_text": ".llvm",
         "_llvm_graphs": ".llvm"}


def __getattr__(name: str) -> Any:
    """A format room's name (``_LAZY``), imported at its first use."""
    room = _LAZY.get(name)
    if room is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(room, __name__), name)

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
        IncompatibleModuleError: another backend family, another LLVM arch, or another Taichi minor version
            (a gfx module of a later 1.x is loaded: the library checks no version there, and its metadata
            and SPIR-V are checked in full).
    """
    _check_backend(meta, arch, host_cpu, where)
    _check_taichi_version(meta, library_version, where)


def _check_backend(meta: ModuleInfo, arch: Arch, host_cpu: Arch | None, where: str) -> None:
    """Refuse a module of another backend family than ``arch``'s, or of another LLVM arch (but the host's CPU)."""
    way_out = (f": Runtime.for_module({where!r}) opens a backend the module runs on, or build one file for "
               f"several with python -m taichi_aot build FILE.py --arch "
               f"{meta.arch.name.lower() if meta.arch else 'vulkan'} {arch.name.lower()} -o FILE.tcm")
    if (meta.format == "llvm") != (arch in LLVM_ARCHS):
        built = (f"{meta.arch.name if meta.arch else 'an LLVM backend'} (LLVM code)" if meta.format == "llvm"
                 else "a gfx backend (Vulkan, Metal, OpenGL)")
        raise IncompatibleModuleError(f"module {where} was compiled for {built}; this runtime is {arch.name}{way_out}")
    if meta.arch is not None and meta.arch != arch and not (
        meta.arch in CPU_ARCHS and arch in CPU_ARCHS and meta.arch == host_cpu
    ):
        raise IncompatibleModuleError(f"module {where} was compiled for {meta.arch.name}; this runtime is "
                                      f"{arch.name}{way_out}")


def _check_taichi_version(meta: ModuleInfo, library_version: int, where: str) -> None:
    """Refuse a module of another Taichi minor version than the library loads (a gfx module of a later 1.x
    loads)."""
    wanted = library_version // 1000  # e.g. 1007 for Taichi 1.7.x
    if meta.version is None or len(meta.version) < 2 or meta.version[0] * 1000 + meta.version[1] == wanted:
        return
    have = ".".join(map(str, meta.version))
    if meta.format == "gfx" and meta.version[0] == wanted // 1000 and meta.version[1] > wanted % 1000:
        # the library checks no version of a gfx module: it runs what its metadata and SPIR-V say, which
        # taichi_aot has just read and checked in full (a later 1.x writes them as 1.7 does)
        _log.info("module %s was compiled by Taichi %s; libtaichi_c_api %s runs it as its own gfx format", where,
                  have, library_version)
        return
    raise IncompatibleModuleError(
        f"module {where} was compiled by Taichi {have}; libtaichi_c_api {library_version} "
        f"loads modules of Taichi {wanted // 1000}.{wanted % 1000}.x"
        + (" (and, on Vulkan, later 1.x)" if meta.format == "gfx" else "")
    )


def read_module(source: str | bytes | os.PathLike, arch: Arch | None = None) -> ModuleInfo:
    """Read a module's metadata from a folder, a ``.tcm`` path or ``.tcm`` bytes.

    A multi-arch module (:mod:`.multi`) is described by one of its parts: the one for ``arch``, or, with no
    arch, the first in order of preference; ``parts`` lists them all and ``archs`` is every arch they load on.

    Raises:
        CorruptedDataError: anything that is not a well-formed Taichi 1.7 module.
        MissingFileError: no file or folder at the path.
        IncompatibleModuleError: a multi-arch module without a part for ``arch``.
    """
    return open_module(source, arch)[1]


def open_module(source: str | bytes | os.PathLike, arch: Arch | None = None, where: str = "",
                files: bool = False) -> tuple[str | bytes | os.PathLike, ModuleInfo, str | None]:
    """``(what to load, its metadata, part name)``: ``source`` itself for a plain module (part None), the bytes
    of the part for ``arch`` (or the preferred part) for a multi-arch module. See :func:`read_module`. ``files``: a
    module folder's digests recorded too (``ModuleInfo.files``, ``ModuleInfo.sealed``), from the files as read, each
    read once: what loads the module after needs none of them again."""
    src = _Source(source)
    try:
        parts = parts_of(src)
        if parts is None:
            info = _read(src)
            if files:
                _note_files(info, src)
            return source, info, None
        name = next(iter(parts)) if arch is None else None
        member = parts[name] if name is not None else part_for(parts, arch, where or describe(source))  # type: ignore[arg-type]
        data = _part_bytes(src, member)
    finally:
        src.close()
    part = _part_source(data, member)
    try:
        info = _read(part)
    finally:
        part.close()
    info.parts = tuple(parts)
    info.archs = _loaders(parts)
    return data, info, name or next(p for p, m in parts.items() if m == member)


def _note_files(info: ModuleInfo, src: _Source) -> None:
    """A module folder's digests, and whether its sidecar's seal is theirs (:class:`.ModuleFiles`)."""
    info.files = src.files(SIDECAR)
    if info.files is not None:
        info.sealed = recorded_seal(src.read(SIDECAR)) == info.files.seal


def loads_on(source: str | bytes | os.PathLike) -> tuple[Arch, ...]:
    """The archs that can load the module, in order of preference; a multi-arch module's from its manifest alone.

    Raises:
        CorruptedDataError, MissingFileError: as :func:`read_module`.
    """
    src = _Source(source)
    try:
        parts = parts_of(src)
        return _read(src).archs if parts is None else _loaders(parts)
    finally:
        src.close()


def cpu_threads(source: str | bytes | os.PathLike) -> int | None:
    """How many threads the kernels of a CPU (x64, arm64) module, or of a multi-arch module's CPU part, run on
    at most: fixed when the module was built (``build --cpu-threads N``; Taichi's default is the building
    machine's core count, which also bounds it). None for a module without CPU code.

    Raises:
        CorruptedDataError, MissingFileError: as :func:`read_module`.
    """
    from .llvm import _cpu_threads

    src = _Source(source)
    try:
        parts = parts_of(src)
        if parts is None:
            return _cpu_threads(src)
        member = parts.get("x64") or parts.get("arm64")
        data = _part_bytes(src, member) if member else None
    finally:
        src.close()
    if data is None:
        return None
    part = _part_source(data, member)  # type: ignore[arg-type]  # set with data
    try:
        return _cpu_threads(part)
    finally:
        part.close()


def _part_bytes(src: _Source, member: str) -> bytes:
    data = src.read(member, MAX_METADATA_BYTES)
    assert data is not None  # parts_of checked that the member is there
    return data


def _part_source(data: bytes, member: str) -> _Source:
    """A multi-arch module's part, opened; a part that is itself multi-arch is refused."""
    part = _Source(data)
    if parts_of(part) is not None:
        part.close()
        raise CorruptedDataError(f"the part {member!r} of a multi-arch module is not a plain module")
    return part


def _loaders(parts: dict[str, str]) -> tuple[Arch, ...]:
    """The archs that load a multi-arch module's parts (each part loads on the arch it is named after)."""
    return tuple(a for a in ARCH_PREFERENCE if a.name.lower() in parts)


def describe(source: object) -> str:
    """A module source in words, as messages name it: the path, or ``<N bytes>``."""
    return os.fsdecode(source) if isinstance(source, (str, os.PathLike)) else f"<{len(source)} bytes>"  # type: ignore[arg-type]


def _read_gfx(doc: dict, src: _Source) -> ModuleInfo:
    """A gfx module: its metadata's shape (schema), its agreement with itself (consistency), its tasks' SPIR-V,
    then its kernels and graphs."""
    from . import consistency, schema
    from .gfx import _check_tasks, _gfx, _gfx_graphs

    schema.check(doc, schema.METADATA, "metadata.json")
    graphs, graph_doc = src.read("graphs.json"), None
    if graphs is not None:
        try:
            graph_doc = json.loads(graphs.decode("utf-8", "replace"))
        except (ValueError, RecursionError):
            raise CorruptedDataError("graphs.json is not valid JSON") from None
        schema.check(graph_doc, schema.GRAPHS, "graphs.json")
    consistency.check(doc, graph_doc)
    info = _gfx(doc, _check_tasks(doc, src))
    info.fields = FieldLayout(doc["root_buffer_size"], json.dumps(doc["fields"], sort_keys=True),
                              consistency.binds_root(doc))
    if graph_doc is not None:
        info.graphs = _gfx_graphs(graph_doc, info.kernels)
    info.archs = _GFX_LOADERS
    return info


def _read_llvm(raw: bytes, text: str, src: _Source) -> ModuleInfo:
    """An LLVM module from its metadata.json (``raw``, decoded: ``text``): written as metadata.tcb, it must be
    metadata.tcb (what C reads), and agree with itself and its kernels' code (llvm_code); then its kernels and
    graphs, each graph's dispatches checked."""
    from . import llvm_code, tcb
    from .llvm import _llvm, _llvm_graphs, parse_text

    doc = parse_text(text)
    info = _llvm(doc)
    tcb_raw = src.read("metadata.tcb")
    if tcb_raw is None:
        raise CorruptedDataError("module has no metadata.tcb")
    tcb.check(text, doc["cache"], tcb_raw)
    info.llvm = LlvmCode(dict(doc["cache"]["kernels"]), metadata=raw)
    for name, why in llvm_code.check(doc["cache"], src, info.llvm).items():
        info.kernels[name] = replace(info.kernels[name], unsupported=why)
    graphs = src.read("graphs.tcb")
    if graphs is not None:
        info.graphs = _llvm_graphs(graphs)
        llvm_code.check_graphs(info.kernels, info.graphs)
    return info


def _read(src: _Source) -> ModuleInfo:
    raw = src.read("metadata.json")
    if raw is None:
        raise src.no_metadata()
    text = raw.decode("utf-8", "replace")
    version = _version(src)
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError):
        doc = None
    if isinstance(doc, dict):  # gfx: JSON (LLVM modules' text is not)
        info = _read_gfx(doc, src)
    else:
        from .llvm import _llvm_arch

        info = _read_llvm(raw, text, src)
        info.arch = _llvm_arch(src)
        info.archs = (info.arch,) if info.arch is not None else ()
    if version is not None:
        info.version = version
    apply_names(info, src)
    if info.llvm is not None:  # what neither the metadata nor taichi_aot.json records, from the kernels' IR
        _infer_access(info)
    graph_access(info)
    info.graph_names = list(info.graphs)
    content = src.read("__content__")
    if content is not None:
        _apply_content(info, content)
    return info


def _infer_access(info: ModuleInfo) -> None:
    """An LLVM module's kernels' ndarray arguments of unknown access: written where their IR may write them, read
    otherwise (:func:`.llvm_access.written`; left unknown where it cannot tell)."""
    from . import llvm_access

    assert info.llvm is not None
    for name, kernel in info.kernels.items():
        unknown = {i for i, a in enumerate(kernel.args) if a.kind == "ndarray" and a.access is None}
        raw, layout = info.llvm.ir.get(name), info.llvm.layouts.get(name)
        if not unknown or raw is None or layout is None:
            continue
        arrays = {i for i, a in enumerate(kernel.args) if a.kind == "ndarray"}
        written = llvm_access.written_in(raw, layout, arrays, info.llvm.parsed.get(name))
        if written is not None:
            kernel.args = [replace(a, access=Access.READ_WRITE if i in written else Access.READ) if i in unknown
                           else a for i, a in enumerate(kernel.args)]


def _version(src: _Source) -> tuple[int, ...] | None:
    """The Taichi version a module's ``__version__`` file names, or None."""
    raw_version = src.read("__version__", 64)
    if raw_version is None:
        return None
    parts = re.findall(r"\d+", raw_version.decode("ascii", "replace"))
    return tuple(int(p) for p in parts[:3]) or None


def _apply_content(info: ModuleInfo, content: bytes) -> None:
    """What Taichi's ``__content__`` lists: the exported kernels in order (the rest compiled for graphs), and the
    graphs' names where the metadata has none."""
    listed, listed_graphs = info.content = _content(content.decode("utf-8", "replace"))
    if not info.graph_names:
        info.graph_names = list(listed_graphs)
    # kernels Taichi compiled for graphs; a kernel template's instances (add_kernel_template) are unlisted too
    dispatched = {d for g in info.graphs.values() for d in g.dispatches}
    info.internal = [k for k in info.kernels if k not in listed and k in dispatched]
    order = {name: i for i, name in enumerate(listed)}
    info.kernels = dict(sorted(info.kernels.items(), key=lambda kv: order.get(kv[0], len(order))))


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
    "ModuleFiles",
    "ModuleInfo",
    "check_compatible",
    "cpu_threads",
    "extract_archive",
    "forget_shaders",
    "is_zip",
    "loadable",
    "loads_on",
    "nearest_module",
    "parse_text",
    "read_module",
]
