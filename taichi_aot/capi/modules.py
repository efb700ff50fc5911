"""The flat API's AOT modules, kernels and graphs: ``ti_load_aot_module``, ``ti_create_aot_module``,
``ti_destroy_aot_module``, ``ti_get_aot_module_kernel``, ``ti_get_aot_module_compute_graph``.

What C reads of a module is checked before C sees it (metadata.read_module, the compatibility rules, an LLVM
module's first load in a child process); ``load_checked``/``create_checked`` take a module the object layer has
already read and checked, so its metadata is read once per load.
"""

from __future__ import annotations

import atexit
import os
import shutil
from collections.abc import Callable
from typing import Any

from .. import _library, metadata
from .._firstload import module_crash
from .._library import Cerr, Quiet, check_quiet
from .._native import ffi, lib
from .._probe import host_cpu_arch
from ..enums import LLVM_ARCHS, Arch
from ..errors import (
    ArgumentTypeError,
    CorruptedDataError,
    IncompatibleModuleError,
    InvalidArgumentError,
    MissingFileError,
    NameNotFoundError,
    NotSupportedError,
    take_last_error,
)
from ..metadata.private import copy_module, copy_reason, private_folder
from . import handles, structs
from .coerce import describe
from .core import NULL, arch_status, check
from .handles import lookup_module_or_child, lookup_runtime


def _check_module(source: str | bytes, arch: Arch, what: str) -> metadata.ModuleInfo:
    # What the object layer checks, before C sees the module: 1.7.4 segfaults on garbage LLVM metadata
    # and on damaged SPIR-V (at launch), and reports a missing path or another backend's module as
    # corrupt data or an invalid state.
    if isinstance(source, str) and not os.path.exists(source):
        raise MissingFileError(f"{what}: no module at {source!r}{metadata.nearest_module(source)}")
    try:
        meta = metadata.read_module(source)
    except CorruptedDataError as e:
        raise CorruptedDataError(f"{what}: {e}") from None
    if meta.parts:
        raise IncompatibleModuleError(
            f"{what}: a multi-arch module (parts: {', '.join(meta.parts)}); the C-API loads one plain module: "
            "Runtime.load_module takes the part for its arch"
        )
    metadata.check_compatible(meta, arch, _library.info.version, host_cpu_arch(), repr(source)[:200])
    return meta


def _check_llvm_module_dir(path: str, what: str) -> None:
    # libtaichi_c_api 1.7.4 segfaults on LLVM backends when the folder is
    # missing, empty or a .tcm file: refuse anything that is not a module folder.
    if not os.path.exists(path):
        raise CorruptedDataError(f"{what}: no module at {path!r} (path does not exist){metadata.nearest_module(path)}")
    if not os.path.isdir(path):
        raise NotSupportedError(
            f"{what}: {path!r} is a file; the x64/CUDA backends of libtaichi_c_api 1.7.4 load only module "
            "folders (Runtime.load_module extracts .tcm archives for you)"
        )
    meta = os.path.join(path, "metadata.tcb")
    if not os.path.isfile(meta) or os.path.getsize(meta) == 0:
        raise CorruptedDataError(f"{what}: {path!r} is not an LLVM AOT module folder (no metadata.tcb)")


def load_aot_module(runtime: Any, filepath: str | os.PathLike | None = None, *,
                    module_path: str | os.PathLike | None = None) -> Any:
    """``ti_load_aot_module``: load a module from a folder (or a ``.tcm`` file on gfx backends); the path is
    ``filepath`` (the design document's name) or ``module_path`` (the C header's)."""
    rt = lookup_runtime(runtime, "load_aot_module")
    if (filepath is None) == (module_path is None):
        raise ArgumentTypeError("load_aot_module: give the module's path once (filepath or module_path)")
    module_path = filepath if filepath is not None else module_path
    if not isinstance(module_path, (str, bytes, os.PathLike)):
        raise ArgumentTypeError(f"load_aot_module: module_path must be a path, got {describe(module_path)}")
    path = os.fsdecode(os.fspath(module_path))
    if "\0" in path:
        raise InvalidArgumentError("load_aot_module: module_path contains a NUL byte")
    meta = _check_module(path, rt.arch, f"load_aot_module({path!r})")
    if rt.arch not in LLVM_ARCHS or not os.path.isdir(path) or not copy_reason(path):
        return load_checked(runtime, path, meta)
    # libtaichi_c_api 1.7.4 segfaults where it cannot make its lock file beside an LLVM module, or finds one there:
    # a private copy is loaded instead, removed with the module (or at exit, where the runtime took it along)
    folder = private_folder()
    try:
        copy_module(path, folder)
        module = load_checked(runtime, folder, meta)
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    _copies[int(ffi.cast("uintptr_t", module))] = folder
    return module


#: The private copies flat loads made, by their module's handle (removed with it, or at exit).
_copies: dict[int, str] = {}
_creator = os.getpid()


@atexit.register
def _remove_copies() -> None:
    if os.getpid() == _creator:
        for folder in _copies.values():
            shutil.rmtree(folder, ignore_errors=True)


def load_checked(runtime: Any, path: str, meta: metadata.ModuleInfo, files: metadata.ModuleFiles | None = None,
                 sealed: bool = False) -> Any:
    """``load_aot_module`` of a module folder (or gfx ``.tcm``) whose metadata the caller has just read and
    checked for this runtime (``metadata.open_module`` and ``metadata.check_compatible``: the object layer),
    so it is not read again; the checks only C's side needs are made here. ``files``: the folder's files as the
    caller read them (and whether ``sealed`` as build wrote them), where ``path`` holds them as they were read."""
    rt = lookup_runtime(runtime, "load_aot_module")
    if rt.arch in LLVM_ARCHS:
        _check_llvm_module_dir(path, "load_aot_module")
        why = module_crash(path, rt.arch, list(meta.kernels), list(meta.graphs), _library.info.path, files, sealed)
        if why:
            raise CorruptedDataError(f"load_aot_module({path!r}): libtaichi_c_api {why}: its metadata.tcb or code "
                                     "is damaged, so this process does not load it")
    _check_fields(rt, meta, f"load_aot_module({path!r})")
    q = Quiet()
    with _library.busy, q:
        module = lib.ti_load_aot_module(runtime, os.fsencode(path))
    check_quiet(f"load_aot_module({path!r})", q)
    return _registered(runtime, rt, module, "load_aot_module", meta)


def create_aot_module(runtime: Any, data: Any, size: int | None = None) -> Any:
    """``ti_create_aot_module``: load a module from the bytes of a ``.tcm`` archive: ``data`` bytes-like, or,
    as C takes it, a ctypes pointer or array with its ``size`` in bytes.

    The x64/CUDA backends of 1.7.4 refuse bytes (NotSupportedError).
    """
    rt = lookup_runtime(runtime, "create_aot_module")
    data = structs.module_bytes(data, size, "create_aot_module")
    if not data:
        raise CorruptedDataError("create_aot_module: empty module data")
    return create_checked(runtime, data, _check_module(data, rt.arch, f"create_aot_module({len(data)} bytes)"))


def create_checked(runtime: Any, data: bytes, meta: metadata.ModuleInfo) -> Any:
    """``create_aot_module`` of ``.tcm`` bytes whose metadata the caller has just read and checked for this
    runtime (the object layer), so they are not read again."""
    rt = lookup_runtime(runtime, "create_aot_module")
    what = f"create_aot_module({len(data)} bytes on {rt.arch.name})"
    _check_fields(rt, meta, what)
    q = Quiet()
    with _library.busy, q:
        module = lib.ti_create_aot_module(runtime, data, len(data))
    check_quiet(what, q)
    return _registered(runtime, rt, module, "create_aot_module", meta)


def _check_fields(rt: handles.HandleRecord, meta: metadata.ModuleInfo, what: str) -> None:
    """A module whose kernels use global fields loads only where the runtime's fields are laid out as it lays them.

    libtaichi_c_api 1.7.4 keeps one SNode tree a runtime: on gfx backends every kernel binds the root buffer of the
    first module loaded (a module of no fields makes one of 4 bytes), on LLVM backends the last module loaded with
    fields replaces the tree under the others. Kernels compiled for another layout would read and write the wrong
    bytes, past the buffer's end; modules of the same layout share their fields."""
    layout = meta.fields
    if layout is None or not layout.bound or rt.fields is None or rt.fields == (layout.size, layout.fields):
        return
    size = rt.fields[0]
    first = "the first module with fields loaded on it" if rt.arch in LLVM_ARCHS else "the first module loaded on it"
    raise IncompatibleModuleError(
        f"{what}: this module's kernels use {layout.describe()}, laid out otherwise than this runtime's "
        f"({f'{size} bytes' if size else 'none'}, laid out by {first}): libtaichi_c_api keeps one set of fields a "
        "runtime, and these kernels would read and write the wrong memory. Load it in a runtime of its own, or first")


def _registered(runtime: Any, rt: handles.HandleRecord, module: Any, what: str, meta: metadata.ModuleInfo) -> Any:
    """The loaded module registered, and the runtime's fields noted where this load laid them out."""
    layout = meta.fields
    if rt.fields is None and layout is not None and (layout.bound or rt.arch not in LLVM_ARCHS):
        rt.fields = (layout.size, layout.fields)
    software = rt.arch == Arch.VULKAN and arch_status()[Arch.VULKAN].software  # every device lavapipe's
    return handles.register_module(runtime, module, what, meta.refused(software))


def destroy_aot_module(aot_module: Any) -> None:
    """``ti_destroy_aot_module``: destroy a module; its kernels and graphs die with it."""
    key, _ = lookup_module_or_child("module", "TiAotModule", aot_module, "destroy_aot_module")
    handles.retire(key)
    with Quiet():
        lib.ti_destroy_aot_module(aot_module)
    folder = _copies.pop(int(ffi.cast("uintptr_t", aot_module)), None)
    if folder is not None:
        shutil.rmtree(folder, ignore_errors=True)
    check("destroy_aot_module")


def _get_named(kind: str, getter: Callable[[Any, bytes], Any], aot_module: Any, name: str, what: str) -> Any:
    key, entry = lookup_module_or_child("module", "TiAotModule", aot_module, what)
    if not isinstance(name, str):
        raise ArgumentTypeError(f"{what}: name must be str, got {describe(name)}")
    if not name or "\0" in name:
        raise NameNotFoundError(f"{what}: no {kind} named {name!r}")
    why = entry.refused.get((kind, name))
    if why:  # the driver would crash making or running it
        raise _refusal(what, kind, name, why)
    q, cerr = Quiet(), Cerr()
    with q, cerr:
        handle = getter(aot_module, name.encode())
    code, message = take_last_error()
    if code != 0 or handle == NULL:
        # x64 reports an unknown kernel as INVALID_STATE, Vulkan as NAME_NOT_FOUND.
        detail = f" ({message})" if message and message != name else ""
        raise NameNotFoundError(f"{what}: the module has no {kind} named {name!r}{detail}")
    refused = [line.strip() for line in cerr.text.splitlines() if "RHI Error" in line]
    if refused:
        # On gfx backends a kernel's pipelines are made here; one the driver refused is kept by the library all the
        # same, and a launch of it crashes: this kernel (or graph) is refused, now and on every later look-up.
        why = (f"the driver could not make its pipeline (the library said: {' | '.join(refused[-2:])[:300]}): its "
               "SPIR-V is damaged, or needs what this device does not have")
        entry.refused[(kind, name)] = why
        raise _refusal(what, kind, name, why)
    handles.register_module_child(kind, key, entry, handle, name)
    return handle


def _refusal(what: str, kind: str, name: str, why: str) -> NotSupportedError:
    """The error of a kernel or graph refused at look-up, now and at every later one."""
    return NotSupportedError(f"{what}: {kind} {name!r} cannot run on this backend: {why}")


def get_aot_module_kernel(aot_module: Any, name: str) -> Any:
    """``ti_get_aot_module_kernel``: a kernel (TiKernel) by name; unknown names raise NameNotFoundError."""
    return _get_named("kernel", lib.ti_get_aot_module_kernel, aot_module, name, "get_aot_module_kernel")


def get_aot_module_compute_graph(aot_module: Any, name: str) -> Any:
    """``ti_get_aot_module_compute_graph``: a compute graph by name; unknown names raise NameNotFoundError."""
    return _get_named(
        "graph", lib.ti_get_aot_module_compute_graph, aot_module, name, "get_aot_module_compute_graph"
    )


