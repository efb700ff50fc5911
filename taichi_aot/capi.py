"""The flat, checked Taichi C-API: one Python function per C function.

Names drop the ``ti_`` prefix (``ti_track_image_ext`` is :func:`track_image`).
Handles are the cffi pointers the C functions return. Struct parameters take the
cffi struct (or a pointer to one), a plain ``dict``, or keyword arguments.

What this layer adds to the C library, so that misuse raises instead of crashing:

* every call goes through the error funnel (:mod:`taichi_aot.errors`): the
  thread's last error is read, cleared and raised as a typed exception;
* a registry of live handles: a destroyed or foreign handle raises
  :class:`~taichi_aot.errors.ClosedError` instead of reaching C (1.7.4 segfaults
  on use after destroy), and destroying a runtime retires its children;
* checks where 1.7.4 crashes: arch availability before creating a runtime,
  module folders on LLVM backends, zero-size allocations, ndarray extents that
  exceed their memory;
* uniform errors where backends differ (an unknown kernel is always
  :class:`~taichi_aot.errors.NameNotFoundError`).
"""

from __future__ import annotations

import enum
import os
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from . import _library
from ._native import ffi, lib
from ._probe import ArchStatus, host_cpu_arch, probe
from .enums import ArgumentType, Arch, Capability, DataType, ImageLayout
from .errors import (
    ArgumentNotFoundError,
    ArgumentNullError,
    ArgumentTypeError,
    ClosedError,
    InvalidArgumentError,
    InvalidStateError,
    NameNotFoundError,
    NotSupportedError,
    OutOfMemoryError,
    TaichiError,
    check,
    check_quiet,
    clear_last_error,
    make_error,
    quiet,
    take_last_error,
)

NULL = ffi.NULL

#: Bytes per element of each data type (U1 is stored as a byte).
DATA_TYPE_SIZE = {
    DataType.F16: 2,
    DataType.F32: 4,
    DataType.F64: 8,
    DataType.I8: 1,
    DataType.I16: 2,
    DataType.I32: 4,
    DataType.I64: 8,
    DataType.U1: 1,
    DataType.U8: 1,
    DataType.U16: 2,
    DataType.U32: 4,
    DataType.U64: 8,
}

#: Types the C-API accepts in a TI_ARGUMENT_TYPE_SCALAR argument (F16 travels as an f32 in ``x32``).
SCALAR_ARGUMENT_TYPES = frozenset({DataType.I16, DataType.U16, DataType.F16})

LLVM_ARCHS = frozenset({Arch.X64, Arch.ARM64, Arch.CUDA})
CPU_ARCHS = frozenset({Arch.X64, Arch.ARM64})
MAX_ND_DIMS = 16

# ---------------------------------------------------------------------------
# Live handles. Keys are tuples of cffi pointers (they hash and compare by
# address); memory and images are keyed with their runtime because the x64
# backend numbers memory 0x1, 0x2, ... in every runtime.


class _Entry:
    __slots__ = ("kind", "runtime", "parent", "arch", "size", "mapped", "children", "name", "host", "pending")

    def __init__(self, kind, runtime=None, parent=None, arch=None, size=0, name=""):
        self.kind = kind
        self.runtime = runtime
        self.parent = parent
        self.arch = arch
        self.size = size
        self.mapped = False
        self.host = False  # allocated host-visible: mapping it is known to be quiet
        # runtimes: a C int set when work is enqueued (also by the extension's launch helpers) and
        # cleared by wait(), so a host copy waits only when something may still be running
        self.pending = ffi.new("int32_t *") if kind == "runtime" else None
        self.children: set = set()
        self.name = name


_live: dict[tuple, _Entry] = {}
_lock = threading.RLock()


def _add(key: tuple, entry: _Entry, parent_key: tuple | None) -> None:
    with _lock:
        _live[key] = entry
        if parent_key is not None:
            _live[parent_key].children.add(key)


def _retire(key: tuple) -> None:
    with _lock:
        entry = _live.pop(key, None)
        if entry is None:
            return
        for child in list(entry.children):
            _retire(child)
        if entry.parent is not None and entry.parent in _live:
            _live[entry.parent].children.discard(key)


def live_handle_count(kind: str | None = None) -> int:
    """How many handles created through this module are alive (for leak checks)."""
    with _lock:
        return sum(1 for e in _live.values() if kind is None or e.kind == kind)


def _handle(value: Any, ctype: str, what: str) -> Any:
    if not isinstance(value, ffi.CData) or ffi.typeof(value) != ffi.typeof(ctype):
        raise ArgumentTypeError(f"{what}: expected a {ctype} handle, got {_describe(value)}")
    if value == NULL:
        raise ArgumentNullError(f"{what}: the {ctype} handle is NULL")
    return value


def _describe(value: Any) -> str:
    if isinstance(value, ffi.CData):
        return f"cdata '{ffi.typeof(value).cname}'"
    return f"{type(value).__name__} {value!r}"[:120]


def _runtime(runtime: Any, what: str) -> _Entry:
    _handle(runtime, "TiRuntime", what)
    entry = _live.get(("runtime", runtime))
    if entry is None:
        raise ClosedError(f"{what}: runtime {runtime} is not alive (destroyed, or not created by taichi_aot)")
    return entry


def _child(kind: str, ctype: str, runtime: Any, value: Any, what: str) -> tuple[tuple, _Entry]:
    _handle(value, ctype, what)
    key = (kind, runtime, value)
    entry = _live.get(key)
    if entry is None:
        raise ClosedError(f"{what}: {kind} {value} is not alive in runtime {runtime} (freed, or from another runtime)")
    return key, entry


def _owned(kind: str, ctype: str, value: Any, what: str) -> tuple[tuple, _Entry]:
    _handle(value, ctype, what)
    key = (kind, value)
    entry = _live.get(key)
    if entry is None:
        raise ClosedError(f"{what}: {kind} {value} is not alive (destroyed, or its module or runtime was)")
    return key, entry


def _struct(ctype: str, value: Any, fields: Mapping[str, Any], what: str) -> Any:
    """A ``ctype *`` built from a cffi struct/pointer, a dict, and/or keywords."""
    try:
        if isinstance(value, ffi.CData):
            t = ffi.typeof(value)
            if t is ffi.typeof(ctype):
                ptr = ffi.new(ctype + " *", value)
            elif t is ffi.typeof(ctype + " *"):
                if value == NULL:
                    raise ArgumentNullError(f"{what}: NULL {ctype} pointer")
                ptr = ffi.new(ctype + " *", value[0])
            else:
                raise ArgumentTypeError(f"{what}: expected {ctype}, got {_describe(value)}")
            for k, v in fields.items():
                setattr(ptr, k, v)
            return ptr
        if value is None:
            init = dict(fields)
        elif isinstance(value, Mapping):
            init = {**value, **fields}
        else:
            raise ArgumentTypeError(f"{what}: expected {ctype}, a dict or keywords, got {_describe(value)}")
        return ffi.new(ctype + " *", init)
    except TaichiError:
        raise
    except (TypeError, KeyError, AttributeError) as e:
        raise ArgumentTypeError(f"{what}: bad {ctype}: {e}") from None
    except (OverflowError, ValueError) as e:
        raise InvalidArgumentError(f"{what}: bad {ctype}: {e}") from None


def enum_arg(cls, value: Any, what: str):
    """``value`` (a member, its int or its name) as a member of the enum ``cls``; typed errors otherwise."""
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, str):
            try:
                return cls[value.upper()]
            except KeyError:
                pass
        raise ArgumentTypeError(f"{what}: expected a {cls.__name__} ({', '.join(cls.__members__)}), got {value!r}")
    if issubclass(cls, enum.IntFlag):
        all_bits = 0
        for member in cls:
            all_bits |= int(member)
        if value < 0 or value & ~all_bits:
            raise InvalidArgumentError(f"{what}: {value:#x} has bits that are not {cls.__name__} flags")
    try:
        return cls(value)
    except ValueError:
        raise InvalidArgumentError(f"{what}: {value} is not a {cls.__name__}") from None


# ---------------------------------------------------------------------------
# Version and errors


def get_version() -> int:
    """``ti_get_version``: the C-API version of the loaded library (1007000 for Taichi 1.7.4)."""
    return int(lib.ti_get_version())


def get_last_error() -> tuple[int, str]:
    """``ti_get_last_error``: ``(code, message)`` of this thread's pending error, without clearing it."""
    size = ffi.new("uint64_t *", 0)
    code = lib.ti_get_last_error(size, NULL)
    buf = ffi.new("char[]", int(size[0]) + 1)
    size[0] = len(buf)
    lib.ti_get_last_error(size, buf)
    return int(code), ffi.string(buf).decode("utf-8", "replace")


def set_last_error(error: int, message: str | None = None) -> None:
    """``ti_set_last_error``: record an error (or clear it with ``Error.SUCCESS``) for this thread."""
    if isinstance(error, bool) or not isinstance(error, int):
        raise ArgumentTypeError(f"set_last_error: error must be an int or Error, got {error!r}")
    if not -(2**31) <= error < 2**32:
        raise InvalidArgumentError(f"set_last_error: error code {error} out of range")
    if message is not None and not isinstance(message, str):
        raise ArgumentTypeError(f"set_last_error: message must be str or None, got {_describe(message)}")
    with quiet():
        lib.ti_set_last_error(error, message.encode() if message is not None else NULL)


# ---------------------------------------------------------------------------
# Runtimes

_arch_status: dict[Arch, ArchStatus] | None = None
_arch_lock = threading.Lock()


def arch_status(refresh: bool = False) -> dict[Arch, ArchStatus]:
    """Per-arch probe results (available, device count, reason); probed once per process."""
    global _arch_status
    with _arch_lock:
        if _arch_status is None or refresh:
            _arch_status = probe()
        return dict(_arch_status)


def get_available_archs() -> list[Arch]:
    """Archs on which a runtime can really be created here (``ti_get_available_archs``, made safe).

    The C function crashes without libcuda and reports archs that cannot create a
    runtime; this probes each arch in a child process once and caches the answer.
    Device counts are in :func:`get_available_devices`.
    """
    return [a for a, s in arch_status().items() if s.available]


def get_available_devices() -> dict[Arch, int | None]:
    """``{arch: device count}`` for every available arch; None where the count is not known."""
    return {a: s.device_count for a, s in arch_status().items() if s.available}


def _require_available(arch: Arch, what: str) -> None:
    if arch in (Arch.X64, Arch.ARM64) and arch == host_cpu_arch():
        return  # creating an LLVM CPU runtime is safe in process; errors come back as errors
    status = arch_status().get(arch)
    if status is None or not status.available:
        why = status.reason if status is not None else "unknown arch"
        raise NotSupportedError(f"{what}: arch {arch.name} is not available here ({why})")


def create_runtime(arch: Arch | int | str, device_index: int = 0) -> Any:
    """``ti_create_runtime``: a new runtime (TiRuntime) on ``arch``.

    Raises NotSupportedError when the arch cannot create a runtime here (checked
    before calling C: 1.7.4 crashes or silently falls back to x64 on some).
    """
    arch = enum_arg(Arch, arch, "create_runtime: arch")
    if isinstance(device_index, bool) or not isinstance(device_index, int):
        raise ArgumentTypeError(f"create_runtime: device_index must be an int, got {device_index!r}")
    if not 0 <= device_index < 2**32:
        raise InvalidArgumentError(f"create_runtime: device_index {device_index} out of range")
    _require_available(arch, "create_runtime")
    if arch == Arch.CUDA and any(e.kind == "runtime" and e.arch == Arch.CUDA for e in list(_live.values())):
        # measured: with two CUDA runtimes alive, destroying the second one aborts the process
        raise InvalidStateError(
            "create_runtime(CUDA): a CUDA runtime already exists in this process. libtaichi_c_api 1.7.4 aborts "
            "the process when two CUDA runtimes are destroyed, so one may exist at a time: close the other first "
            "(a closed runtime lives on while a numpy view of its memory does)"
        )
    q = quiet()
    with q:
        runtime = lib.ti_create_runtime(arch, device_index)
    check_quiet(f"create_runtime({arch.name}, {device_index})", q)
    if runtime == NULL:
        raise InvalidStateError(f"create_runtime({arch.name}): the library returned no runtime")
    _add(("runtime", runtime), _Entry("runtime", runtime=runtime, arch=arch), None)
    return runtime


def _register_runtime(runtime: Any, arch: Arch, what: str) -> Any:
    if runtime == NULL:
        raise InvalidStateError(f"{what}: the library returned no runtime")
    _add(("runtime", runtime), _Entry("runtime", runtime=runtime, arch=arch), None)
    return runtime


def pending_flag(runtime: Any) -> Any:
    """The ``int32_t *`` that is non-zero while work enqueued on ``runtime`` may not have finished."""
    return _runtime(runtime, "pending_flag").pending


def _enqueued(runtime: Any) -> None:
    entry = _live.get(("runtime", runtime))
    if entry is not None:
        entry.pending[0] = 1


def runtime_arch(runtime: Any) -> Arch:
    """The arch a live runtime was created for."""
    return _runtime(runtime, "runtime_arch").arch


def destroy_runtime(runtime: Any) -> None:
    """``ti_destroy_runtime``: destroy a runtime; its memory, images, modules and kernels die with it."""
    _runtime(runtime, "destroy_runtime")
    _retire(("runtime", runtime))
    with quiet():
        lib.ti_destroy_runtime(runtime)
    check("destroy_runtime")


def get_runtime_capabilities(runtime: Any) -> dict[Capability | int, int]:
    """``ti_get_runtime_capabilities``: ``{capability: level}`` of the runtime's device."""
    _runtime(runtime, "get_runtime_capabilities")
    count = ffi.new("uint32_t *", 0)
    lib.ti_get_runtime_capabilities(runtime, count, NULL)
    check("get_runtime_capabilities")
    caps = ffi.new("TiCapabilityLevelInfo[]", max(int(count[0]), 1))
    count[0] = len(caps)
    lib.ti_get_runtime_capabilities(runtime, count, caps)
    check("get_runtime_capabilities")
    out: dict[Capability | int, int] = {}
    for i in range(min(int(count[0]), len(caps))):
        cap = int(caps[i].capability)
        out[Capability(cap) if cap in Capability._value2member_map_ else cap] = int(caps[i].level)
    return out


def set_runtime_capabilities_ext(runtime: Any, capabilities: Mapping | Sequence | Any) -> None:
    """``ti_set_runtime_capabilities_ext``: replace the runtime's capability levels.

    ``capabilities``: ``{Capability: level}``, pairs, or a cffi ``TiCapabilityLevelInfo[]``.
    """
    _runtime(runtime, "set_runtime_capabilities_ext")
    if isinstance(capabilities, ffi.CData):
        array = capabilities
        count = len(array)
    else:
        items = capabilities.items() if isinstance(capabilities, Mapping) else capabilities
        try:
            pairs = [(int(enum_arg(Capability, c, "capability")), int(level)) for c, level in items]
        except (TypeError, ValueError) as e:
            if isinstance(e, TaichiError):
                raise
            raise ArgumentTypeError(f"set_runtime_capabilities_ext: bad capabilities: {e}") from None
        if any(not 0 <= level < 2**32 for _, level in pairs):
            raise InvalidArgumentError("set_runtime_capabilities_ext: capability level out of range")
        array = ffi.new("TiCapabilityLevelInfo[]", [{"capability": c, "level": v} for c, v in pairs] or 1)
        count = len(pairs)
    lib.ti_set_runtime_capabilities_ext(runtime, count, array)
    check("set_runtime_capabilities_ext")


def flush(runtime: Any) -> None:
    """``ti_flush``: submit queued work without waiting."""
    _runtime(runtime, "flush")
    lib.ti_flush(runtime)
    check("flush")


def wait(runtime: Any) -> None:
    """``ti_wait``: submit queued work and wait for the device to finish it."""
    entry = _runtime(runtime, "wait")
    lib.ti_wait(runtime)
    check("wait")
    entry.pending[0] = 0


# ---------------------------------------------------------------------------
# Memory


def _register_memory(runtime: Any, memory: Any, size: int, what: str) -> Any:
    if memory == NULL:
        raise InvalidStateError(f"{what}: the library returned no memory")
    _add(("memory", runtime, memory), _Entry("memory", runtime=runtime, parent=("runtime", runtime), size=size),
         ("runtime", runtime))
    return memory


def allocate_memory(runtime: Any, allocate_info: Any = None, **fields: Any) -> Any:
    """``ti_allocate_memory``: allocate device memory (TiMemory).

    ``allocate_info``: a ``TiMemoryAllocateInfo`` (cffi), a dict, or keywords
    (``size``, ``host_write``, ``host_read``, ``export_sharing``, ``usage``).
    A size of 0 raises InvalidArgumentError (1.7.4 aborts on Vulkan).
    """
    rt = _runtime(runtime, "allocate_memory")
    info = _struct("TiMemoryAllocateInfo", allocate_info, fields, "allocate_memory")
    if info.size == 0:
        raise InvalidArgumentError("allocate_memory: size must be at least 1 byte, got 0")
    q = quiet()
    with q:
        memory = lib.ti_allocate_memory(runtime, info)
    code, message = take_last_error()
    if code != 0:
        what = f"allocate_memory({info.size} bytes on {rt.arch.name})"
        if code == InvalidStateError.code and "allocation" in message.lower() and "failed" in message.lower():
            # the x64 backend reports a failed host allocation as INVALID_STATE
            raise OutOfMemoryError(f"{what}: {message}", -11)
        raise make_error(code, message, what)
    handle = _register_memory(runtime, memory, int(info.size), "allocate_memory")
    _live[("memory", runtime, memory)].host = bool(info.host_read or info.host_write) or rt.arch in CPU_ARCHS
    return handle


def free_memory(runtime: Any, memory: Any) -> None:
    """``ti_free_memory``: free device memory.

    On x64 1.7.4 cannot free (NotSupportedError; the memory stays valid and is
    released with the runtime).
    """
    rt = _runtime(runtime, "free_memory")
    key, entry = _child("memory", "TiMemory", runtime, memory, "free_memory")
    if entry.mapped:
        raise InvalidStateError("free_memory: the memory is mapped; unmap it first")
    if rt.arch in CPU_ARCHS:
        # 1.7.4 reports NOT_SUPPORTED on CPU backends only after breaking the
        # allocation (it can no longer be mapped): refuse before calling C.
        raise NotSupportedError(
            f"free_memory: libtaichi_c_api 1.7.4 cannot free memory on {rt.arch.name}; "
            "it stays valid and is released with its runtime"
        )
    with quiet():
        lib.ti_free_memory(runtime, memory)
    check("free_memory")
    _retire(key)


def memory_size(runtime: Any, memory: Any) -> int:
    """Size in bytes of a live memory allocation."""
    return _child("memory", "TiMemory", runtime, memory, "memory_size")[1].size


def map_memory(runtime: Any, memory: Any) -> Any:
    """``ti_map_memory``: a ``void *`` to host-visible memory. Mapping twice raises InvalidStateError."""
    _runtime(runtime, "map_memory")
    _, entry = _child("memory", "TiMemory", runtime, memory, "map_memory")
    if entry.mapped:
        raise InvalidStateError("map_memory: the memory is already mapped")
    if entry.host:  # the common case, kept off the fd-redirecting path
        ptr = lib.ti_map_memory(runtime, memory)
        check("map_memory")
    else:
        q = quiet()
        with q:
            ptr = lib.ti_map_memory(runtime, memory)
        check_quiet("map_memory", q)
    if ptr == NULL:
        raise InvalidStateError("map_memory: the library returned a NULL mapping")
    entry.mapped = True
    return ptr


def unmap_memory(runtime: Any, memory: Any) -> None:
    """``ti_unmap_memory``: end a mapping made by :func:`map_memory`."""
    _runtime(runtime, "unmap_memory")
    _, entry = _child("memory", "TiMemory", runtime, memory, "unmap_memory")
    if not entry.mapped:
        raise InvalidStateError("unmap_memory: the memory is not mapped")
    lib.ti_unmap_memory(runtime, memory)
    entry.mapped = False
    check("unmap_memory")


def memcpy_host(runtime: Any, memory: Any, data: Any, nbytes: int, to_device: bool) -> None:
    """Copy ``nbytes`` between the buffer ``data`` and live host-visible ``memory``, mapped for just this copy.

    The hot path of ``NdArray.to_numpy``/``from_numpy``: one registry lookup, then the library directly
    (no fd redirection: host-visible memory maps quietly). Raises ClosedError for a dead handle and
    InvalidStateError while the memory is mapped elsewhere.
    """
    entry = _live.get(("memory", runtime, memory))
    if entry is None:
        raise ClosedError(f"memcpy_host: memory {memory} is not alive in runtime {runtime}")
    if entry.mapped:
        raise InvalidStateError("memcpy_host: the memory is mapped; copy through the mapping")
    ptr = lib.ti_map_memory(runtime, memory)
    check("map_memory")
    entry.mapped = True
    try:
        if to_device:
            ffi.memmove(ptr, data, nbytes)
        else:
            ffi.memmove(data, ptr, nbytes)
    finally:
        lib.ti_unmap_memory(runtime, memory)
        entry.mapped = False
        check("unmap_memory")


def _slice(runtime: Any, value: Any, what: str) -> Any:
    s = _struct("TiMemorySlice", value, {}, what)
    _, entry = _child("memory", "TiMemory", runtime, s.memory, what + ".memory")
    if s.offset + s.size > entry.size:
        raise InvalidArgumentError(
            f"{what}: slice [{s.offset}, {s.offset + s.size}) exceeds the memory's {entry.size} bytes"
        )
    return s


def copy_memory_device_to_device(runtime: Any, dst_memory: Any, src_memory: Any) -> None:
    """``ti_copy_memory_device_to_device``: copy between memory slices (dicts or ``TiMemorySlice``).

    Unsupported on x64 in 1.7.4 (NotSupportedError).
    """
    _runtime(runtime, "copy_memory_device_to_device")
    dst = _slice(runtime, dst_memory, "copy_memory_device_to_device: dst_memory")
    src = _slice(runtime, src_memory, "copy_memory_device_to_device: src_memory")
    if dst.size != src.size:
        raise InvalidArgumentError(f"copy_memory_device_to_device: sizes differ (dst {dst.size}, src {src.size})")
    _enqueued(runtime)
    with quiet():
        lib.ti_copy_memory_device_to_device(runtime, dst, src)
    check("copy_memory_device_to_device")


# ---------------------------------------------------------------------------
# Images and samplers


def allocate_image(runtime: Any, allocate_info: Any = None, **fields: Any) -> Any:
    """``ti_allocate_image``: allocate an image (TiImage); dict/keywords as ``TiImageAllocateInfo``."""
    rt = _runtime(runtime, "allocate_image")
    info = _struct("TiImageAllocateInfo", allocate_info, fields, "allocate_image")
    ext = info.extent
    if 0 in (ext.width, ext.height, ext.depth):
        raise InvalidArgumentError(
            f"allocate_image: extent {ext.width}x{ext.height}x{ext.depth} has a zero side (use 1 for unused sides)"
        )
    q = quiet()
    with q:
        image = lib.ti_allocate_image(runtime, info)
    check_quiet(f"allocate_image on {rt.arch.name}", q)
    if image == NULL:
        raise InvalidStateError("allocate_image: the library returned no image")
    _add(("image", runtime, image), _Entry("image", runtime=runtime, parent=("runtime", runtime)), ("runtime", runtime))
    return image


def free_image(runtime: Any, image: Any) -> None:
    """``ti_free_image``: free an image."""
    _runtime(runtime, "free_image")
    key, _ = _child("image", "TiImage", runtime, image, "free_image")
    with quiet():
        lib.ti_free_image(runtime, image)
    check("free_image")
    _retire(key)


def create_sampler(runtime: Any, create_info: Any = None, **fields: Any) -> Any:
    """``ti_create_sampler``: create a sampler (TiSampler). Taichi 1.7.4 implements it on no backend."""
    _runtime(runtime, "create_sampler")
    info = _struct("TiSamplerCreateInfo", create_info, fields, "create_sampler")
    with quiet():
        sampler = lib.ti_create_sampler(runtime, info)
    check("create_sampler")
    if sampler == NULL:
        raise InvalidStateError("create_sampler: the library returned no sampler")
    _add(("sampler", runtime, sampler), _Entry("sampler", runtime=runtime, parent=("runtime", runtime)),
         ("runtime", runtime))
    return sampler


def destroy_sampler(runtime: Any, sampler: Any) -> None:
    """``ti_destroy_sampler``: destroy a sampler."""
    _runtime(runtime, "destroy_sampler")
    key, _ = _child("sampler", "TiSampler", runtime, sampler, "destroy_sampler")
    with quiet():
        lib.ti_destroy_sampler(runtime, sampler)
    check("destroy_sampler")
    _retire(key)


def _image_slice(runtime: Any, value: Any, what: str) -> Any:
    s = _struct("TiImageSlice", value, {}, what)
    _child("image", "TiImage", runtime, s.image, what + ".image")
    return s


def copy_image_device_to_device(runtime: Any, dst_image: Any, src_image: Any) -> None:
    """``ti_copy_image_device_to_device``: copy between image slices (dicts or ``TiImageSlice``)."""
    _runtime(runtime, "copy_image_device_to_device")
    dst = _image_slice(runtime, dst_image, "copy_image_device_to_device: dst_image")
    src = _image_slice(runtime, src_image, "copy_image_device_to_device: src_image")
    with quiet():
        _enqueued(runtime)
        lib.ti_copy_image_device_to_device(runtime, dst, src)
    check("copy_image_device_to_device")


def track_image(runtime: Any, image: Any, layout: ImageLayout | int) -> None:
    """``ti_track_image_ext``: tell the runtime the layout an image is in now."""
    _runtime(runtime, "track_image")
    _child("image", "TiImage", runtime, image, "track_image")
    layout = enum_arg(ImageLayout, layout, "track_image: layout")
    with quiet():
        _enqueued(runtime)
        lib.ti_track_image_ext(runtime, image, layout)
    check("track_image")


def transition_image(runtime: Any, image: Any, layout: ImageLayout | int) -> None:
    """``ti_transition_image``: move an image to ``layout``."""
    _runtime(runtime, "transition_image")
    _child("image", "TiImage", runtime, image, "transition_image")
    layout = enum_arg(ImageLayout, layout, "transition_image: layout")
    with quiet():
        _enqueued(runtime)
        lib.ti_transition_image(runtime, image, layout)
    check("transition_image")


# ---------------------------------------------------------------------------
# AOT modules, kernels, graphs


def _register_module(runtime: Any, module: Any, what: str) -> Any:
    if module == NULL:
        raise InvalidStateError(f"{what}: the library returned no module")
    _add(("module", module), _Entry("module", runtime=runtime, parent=("runtime", runtime)), ("runtime", runtime))
    return module


def _check_llvm_module_dir(path: str, what: str) -> None:
    # libtaichi_c_api 1.7.4 segfaults on LLVM backends when the folder is
    # missing, empty or a .tcm file: refuse anything that is not a module folder.
    from .errors import CorruptedDataError

    if not os.path.exists(path):
        raise CorruptedDataError(f"{what}: no module at {path!r} (path does not exist)", -2)
    if not os.path.isdir(path):
        raise NotSupportedError(
            f"{what}: {path!r} is a file; the x64/CUDA backends of libtaichi_c_api 1.7.4 load only module "
            "folders (Runtime.load_module extracts .tcm archives for you)"
        )
    meta = os.path.join(path, "metadata.tcb")
    if not os.path.isfile(meta) or os.path.getsize(meta) == 0:
        raise CorruptedDataError(f"{what}: {path!r} is not an LLVM AOT module folder (no metadata.tcb)", -2)


def load_aot_module(runtime: Any, module_path: str | os.PathLike) -> Any:
    """``ti_load_aot_module``: load a module from a folder (or a ``.tcm`` file on gfx backends)."""
    rt = _runtime(runtime, "load_aot_module")
    if not isinstance(module_path, (str, bytes, os.PathLike)):
        raise ArgumentTypeError(f"load_aot_module: module_path must be a path, got {_describe(module_path)}")
    path = os.fsdecode(os.fspath(module_path))
    if "\0" in path:
        raise InvalidArgumentError("load_aot_module: module_path contains a NUL byte")
    if rt.arch in LLVM_ARCHS:
        _check_llvm_module_dir(path, "load_aot_module")
    q = quiet()
    with q:
        module = lib.ti_load_aot_module(runtime, os.fsencode(path))
    check_quiet(f"load_aot_module({path!r})", q)
    return _register_module(runtime, module, "load_aot_module")


def create_aot_module(runtime: Any, tcm: bytes | bytearray | memoryview) -> Any:
    """``ti_create_aot_module``: load a module from the bytes of a ``.tcm`` archive.

    The x64/CUDA backends of 1.7.4 refuse bytes (NotSupportedError).
    """
    rt = _runtime(runtime, "create_aot_module")
    if not isinstance(tcm, (bytes, bytearray, memoryview)):
        raise ArgumentTypeError(f"create_aot_module: tcm must be bytes-like, got {_describe(tcm)}")
    data = bytes(tcm)
    if not data:
        from .errors import CorruptedDataError

        raise CorruptedDataError("create_aot_module: empty module data", -2)
    q = quiet()
    with q:
        module = lib.ti_create_aot_module(runtime, data, len(data))
    check_quiet(f"create_aot_module({len(data)} bytes on {rt.arch.name})", q)
    return _register_module(runtime, module, "create_aot_module")


def destroy_aot_module(aot_module: Any) -> None:
    """``ti_destroy_aot_module``: destroy a module; its kernels and graphs die with it."""
    key, _ = _owned("module", "TiAotModule", aot_module, "destroy_aot_module")
    _retire(key)
    with quiet():
        lib.ti_destroy_aot_module(aot_module)
    check("destroy_aot_module")


def _get_named(kind: str, getter, ctype: str, aot_module: Any, name: str, what: str) -> Any:
    key, entry = _owned("module", "TiAotModule", aot_module, what)
    if not isinstance(name, str):
        raise ArgumentTypeError(f"{what}: name must be str, got {_describe(name)}")
    if not name or "\0" in name:
        raise NameNotFoundError(f"{what}: no {kind} named {name!r}", -3)
    q = quiet()
    with q:
        handle = getter(aot_module, name.encode())
    code, message = take_last_error()
    if code != 0 or handle == NULL:
        # x64 reports an unknown kernel as INVALID_STATE, Vulkan as NAME_NOT_FOUND.
        raise NameNotFoundError(f"{what}: the module has no {kind} named {name!r}" + (f" ({message})" if message and message != name else ""), -3)
    hkey = (kind, handle)
    if hkey not in _live:
        _add(hkey, _Entry(kind, runtime=entry.runtime, parent=key, name=name), key)
    return handle


def get_aot_module_kernel(aot_module: Any, name: str) -> Any:
    """``ti_get_aot_module_kernel``: a kernel (TiKernel) by name; unknown names raise NameNotFoundError."""
    return _get_named("kernel", lib.ti_get_aot_module_kernel, "TiKernel", aot_module, name, "get_aot_module_kernel")


def get_aot_module_compute_graph(aot_module: Any, name: str) -> Any:
    """``ti_get_aot_module_compute_graph``: a compute graph by name; unknown names raise NameNotFoundError."""
    return _get_named(
        "graph", lib.ti_get_aot_module_compute_graph, "TiComputeGraph", aot_module, name,
        "get_aot_module_compute_graph",
    )


# ---------------------------------------------------------------------------
# Launches


def _argument_init(value: Any, what: str) -> Any:
    """A TiArgument initializer (or cdata) from one Python argument."""
    if isinstance(value, ffi.CData):
        t = ffi.typeof(value)
        if t is ffi.typeof("TiArgument"):
            return value
        if t is ffi.typeof("TiArgument *"):
            if value == NULL:
                raise ArgumentNullError(f"{what}: NULL TiArgument pointer")
            return value[0]
        raise ArgumentTypeError(f"{what}: expected a TiArgument, got {_describe(value)}")
    if isinstance(value, bool):
        raise ArgumentTypeError(f"{what}: bool is not a kernel argument (pass int or float)")
    if isinstance(value, int):
        if not -(2**31) <= value < 2**31:
            raise InvalidArgumentError(f"{what}: int {value} does not fit in i32")
        return {"type": ArgumentType.I32, "value": {"i32": value}}
    if isinstance(value, float):
        return {"type": ArgumentType.F32, "value": {"f32": value}}
    if isinstance(value, Mapping):
        return value
    raise ArgumentTypeError(f"{what}: expected TiArgument, dict, int or float, got {_describe(value)}")


def _check_argument(runtime: Any, arg: Any, what: str) -> None:
    t = int(arg.type)
    if t == ArgumentType.NDARRAY:
        nd = arg.value.ndarray
        _, entry = _child("memory", "TiMemory", runtime, nd.memory, what + " ndarray memory")
        elem_type = int(nd.elem_type)
        if elem_type not in DATA_TYPE_SIZE:
            raise InvalidArgumentError(f"{what}: ndarray elem_type {elem_type} is not a storable DataType")
        for label, shape in (("shape", nd.shape), ("elem_shape", nd.elem_shape)):
            if shape.dim_count > MAX_ND_DIMS:
                raise InvalidArgumentError(f"{what}: ndarray {label} has {shape.dim_count} dims (at most 16)")
        n = DATA_TYPE_SIZE[DataType(elem_type)]
        for shape in (nd.shape, nd.elem_shape):
            for i in range(shape.dim_count):
                n *= shape.dims[i]
        if n > entry.size:
            dims = [nd.shape.dims[i] for i in range(nd.shape.dim_count)]
            edims = [nd.elem_shape.dims[i] for i in range(nd.elem_shape.dim_count)]
            raise InvalidArgumentError(
                f"{what}: ndarray of shape {dims}, element shape {edims} and type {DataType(elem_type).name} "
                f"needs {n} bytes but its memory holds {entry.size}"
            )
    elif t == ArgumentType.TEXTURE:
        _child("image", "TiImage", runtime, arg.value.texture.image, what + " texture image")
    elif t == ArgumentType.SCALAR:
        st = int(arg.value.scalar.type)
        if st not in SCALAR_ARGUMENT_TYPES:
            name = DataType(st).name if st in DataType._value2member_map_ else str(st)
            raise NotSupportedError(
                f"{what}: the C-API passes typed scalars of type I16, U16, F16 only, not {name} "
                "(i32 and f32 have their own argument types)"
            )
    elif t == ArgumentType.TENSOR:
        tensor = arg.value.tensor
        if int(tensor.type) not in DATA_TYPE_SIZE:
            raise InvalidArgumentError(f"{what}: tensor type {int(tensor.type)} is not a DataType")
        capacity = 128 // DATA_TYPE_SIZE[DataType(int(tensor.type))]
        if tensor.contents.length > capacity:
            raise InvalidArgumentError(f"{what}: tensor of {tensor.contents.length} elements (at most {capacity})")
    elif t not in (ArgumentType.I32, ArgumentType.F32):
        raise InvalidArgumentError(f"{what}: {t} is not an ArgumentType")


def pack_arguments(args: Sequence[Any] | Any) -> Any:
    """A cffi ``TiArgument[]`` from TiArguments, dicts, ints (i32) and floats (f32)."""
    if isinstance(args, ffi.CData):
        if ffi.typeof(args).kind == "array" and ffi.typeof(args).item is ffi.typeof("TiArgument"):
            return args
        raise ArgumentTypeError(f"launch_kernel: args must be a TiArgument[] or a sequence, got {_describe(args)}")
    if not isinstance(args, Sequence) or isinstance(args, (str, bytes)):
        raise ArgumentTypeError(f"launch_kernel: args must be a sequence, got {_describe(args)}")
    inits = [_argument_init(a, f"argument {i}") for i, a in enumerate(args)]
    try:
        return ffi.new("TiArgument[]", inits) if inits else ffi.new("TiArgument[]", 0)
    except (TypeError, KeyError) as e:
        raise ArgumentTypeError(f"launch_kernel: bad argument: {e}") from None
    except (OverflowError, ValueError) as e:
        raise InvalidArgumentError(f"launch_kernel: bad argument: {e}") from None


def launch_kernel(runtime: Any, kernel: Any, args: Sequence[Any] | Any = ()) -> None:
    """``ti_launch_kernel``: enqueue a kernel launch.

    ``args``: a cffi ``TiArgument[]`` or a sequence of TiArgument / dict / int / float.
    Ndarray memories must be alive in this runtime and large enough for the shape
    given; the kernel's own signature is not known at this layer.
    """
    _runtime(runtime, "launch_kernel")
    _, entry = _owned("kernel", "TiKernel", kernel, "launch_kernel")
    if entry.runtime != runtime:
        raise InvalidArgumentError("launch_kernel: the kernel belongs to another runtime")
    array = pack_arguments(args)
    for i in range(len(array)):
        _check_argument(runtime, array[i], f"launch_kernel({entry.name!r}) argument {i}")
    _enqueued(runtime)
    lib.ti_launch_kernel(runtime, kernel, len(array), array)
    check(f"launch_kernel({entry.name!r})")


def pack_named_arguments(args: Mapping[str, Any] | Sequence[Any] | Any) -> tuple[Any, list]:
    """A cffi ``TiNamedArgument[]`` (and the name buffers it points to) from a mapping or a sequence."""
    if isinstance(args, ffi.CData):
        if ffi.typeof(args).kind == "array" and ffi.typeof(args).item is ffi.typeof("TiNamedArgument"):
            return args, []
        raise ArgumentTypeError(f"launch_compute_graph: bad args {_describe(args)}")
    if isinstance(args, Mapping):
        items = list(args.items())
    elif isinstance(args, Sequence) and not isinstance(args, (str, bytes)):
        items = []
        for i, item in enumerate(args):
            if isinstance(item, Mapping) and "name" in item:
                name = item["name"]
                items.append((name.decode() if isinstance(name, bytes) else name, item.get("argument")))
            elif isinstance(item, tuple) and len(item) == 2:
                items.append(item)
            else:
                raise ArgumentTypeError(f"launch_compute_graph: item {i} must be (name, argument) or a dict")
    else:
        raise ArgumentTypeError(f"launch_compute_graph: args must be a mapping or a sequence, got {_describe(args)}")
    keep = []
    inits = []
    for name, value in items:
        if not isinstance(name, str) or not name or "\0" in name:
            raise ArgumentTypeError(f"launch_compute_graph: argument name must be a non-empty str, got {name!r}")
        cname = ffi.new("char[]", name.encode())
        keep.append(cname)
        inits.append({"name": cname, "argument": _argument_init(value, f"argument {name!r}")})
    try:
        return ffi.new("TiNamedArgument[]", inits) if inits else ffi.new("TiNamedArgument[]", 0), keep
    except (TypeError, KeyError) as e:
        raise ArgumentTypeError(f"launch_compute_graph: bad argument: {e}") from None
    except (OverflowError, ValueError) as e:
        raise InvalidArgumentError(f"launch_compute_graph: bad argument: {e}") from None


def launch_compute_graph(runtime: Any, compute_graph: Any, args: Mapping[str, Any] | Sequence[Any] | Any = ()) -> None:
    """``ti_launch_compute_graph``: enqueue a graph with named arguments ``{name: argument}``."""
    _runtime(runtime, "launch_compute_graph")
    _, entry = _owned("graph", "TiComputeGraph", compute_graph, "launch_compute_graph")
    if entry.runtime != runtime:
        raise InvalidArgumentError("launch_compute_graph: the graph belongs to another runtime")
    array, keep = pack_named_arguments(args)
    for i in range(len(array)):
        name = ffi.string(array[i].name).decode() if array[i].name != NULL else None
        if name is None:
            raise ArgumentNullError(f"launch_compute_graph: argument {i} has a NULL name")
        _check_argument(runtime, array[i].argument, f"launch_compute_graph({entry.name!r}) argument {name!r}")
    with quiet():
        _enqueued(runtime)
        lib.ti_launch_compute_graph(runtime, compute_graph, len(array), array)
    code, message = take_last_error()
    if code != 0:
        if "Missing runtime value for" in message:
            raise ArgumentNotFoundError(f"launch_compute_graph({entry.name!r}): {message}", -7)
        raise make_error(code, message, f"launch_compute_graph({entry.name!r})")
    del keep


# ---------------------------------------------------------------------------
# Interop (taichi_cpu.h, taichi_cuda.h, taichi_opengl.h, taichi_vulkan.h)


def _require_arch(runtime: Any, archs: tuple, what: str) -> _Entry:
    entry = _runtime(runtime, what)
    if entry.arch not in archs:
        raise NotSupportedError(f"{what}: needs a {'/'.join(a.name for a in archs)} runtime, not {entry.arch.name}")
    return entry


def export_cpu_memory(runtime: Any, memory: Any) -> Any:
    """``ti_export_cpu_memory``: ``TiCpuMemoryInteropInfo`` (``ptr``, ``size``) of memory on a CPU runtime."""
    _require_arch(runtime, (Arch.X64, Arch.ARM64), "export_cpu_memory")
    _child("memory", "TiMemory", runtime, memory, "export_cpu_memory")
    info = ffi.new("TiCpuMemoryInteropInfo *")
    lib.ti_export_cpu_memory(runtime, memory, info)
    check("export_cpu_memory")
    return info


def import_cpu_memory(runtime: Any, ptr: Any, memory_size: int) -> Any:
    """``ti_import_cpu_memory``: wrap host memory at ``ptr`` (cffi pointer or int address) as TiMemory.

    The caller keeps that host memory alive for as long as the TiMemory is used.
    """
    _require_arch(runtime, (Arch.X64, Arch.ARM64), "import_cpu_memory")
    p = _pointer(ptr, "import_cpu_memory: ptr")
    size = _size(memory_size, "import_cpu_memory: memory_size")
    memory = lib.ti_import_cpu_memory(runtime, p, size)
    check("import_cpu_memory")
    return _register_memory(runtime, memory, size, "import_cpu_memory")


def export_cuda_memory(runtime: Any, memory: Any) -> Any:
    """``ti_export_cuda_memory``: ``TiCudaMemoryInteropInfo`` (device ``ptr``, ``size``)."""
    _require_arch(runtime, (Arch.CUDA,), "export_cuda_memory")
    _child("memory", "TiMemory", runtime, memory, "export_cuda_memory")
    info = ffi.new("TiCudaMemoryInteropInfo *")
    lib.ti_export_cuda_memory(runtime, memory, info)
    check("export_cuda_memory")
    return info


def import_cuda_memory(runtime: Any, ptr: Any, memory_size: int) -> Any:
    """``ti_import_cuda_memory``: wrap a CUDA device pointer as TiMemory (caller keeps it alive)."""
    _require_arch(runtime, (Arch.CUDA,), "import_cuda_memory")
    p = _pointer(ptr, "import_cuda_memory: ptr")
    size = _size(memory_size, "import_cuda_memory: memory_size")
    memory = lib.ti_import_cuda_memory(runtime, p, size)
    check("import_cuda_memory")
    return _register_memory(runtime, memory, size, "import_cuda_memory")


def set_cuda_stream(stream: Any) -> None:
    """``ti_set_cuda_stream``: the CUDA stream later launches use (``None`` for the default)."""
    p = NULL if stream is None else _pointer(stream, "set_cuda_stream: stream", allow_null=True)
    _require_cuda_runtime("set_cuda_stream")
    lib.ti_set_cuda_stream(p)
    check("set_cuda_stream")


def get_cuda_stream() -> Any:
    """``ti_get_cuda_stream``: the CUDA stream in use (a ``void *``, NULL for the default)."""
    _require_cuda_runtime("get_cuda_stream")
    out = ffi.new("void **")
    lib.ti_get_cuda_stream(out)
    check("get_cuda_stream")
    return out[0]


def _require_cuda_runtime(what: str) -> None:
    # 1.7.4 aborts the process on the stream functions when CUDA was never initialised.
    with _lock:
        if not any(e.kind == "runtime" and e.arch == Arch.CUDA for e in _live.values()):
            raise NotSupportedError(f"{what}: needs a live CUDA runtime")


def import_opengl_runtime(interop_info: Any = None, use_gles: bool = False, **fields: Any) -> Any:
    """``ti_import_opengl_runtime``: a runtime on the current OpenGL context."""
    info = _struct("TiOpenglRuntimeInteropInfo", interop_info, fields, "import_opengl_runtime")
    arch = Arch.GLES if use_gles else Arch.OPENGL
    _require_available(arch, "import_opengl_runtime")
    with quiet():
        runtime = lib.ti_import_opengl_runtime(info, bool(use_gles))
    check("import_opengl_runtime")
    return _register_runtime(runtime, arch, "import_opengl_runtime")


def export_opengl_runtime(runtime: Any) -> Any:
    """``ti_export_opengl_runtime``: ``TiOpenglRuntimeInteropInfo`` of an OpenGL runtime."""
    _require_arch(runtime, (Arch.OPENGL, Arch.GLES), "export_opengl_runtime")
    info = ffi.new("TiOpenglRuntimeInteropInfo *")
    lib.ti_export_opengl_runtime(runtime, info)
    check("export_opengl_runtime")
    return info


def import_opengl_memory(runtime: Any, interop_info: Any = None, **fields: Any) -> Any:
    """``ti_import_opengl_memory``: wrap a GL buffer as TiMemory."""
    _require_arch(runtime, (Arch.OPENGL, Arch.GLES), "import_opengl_memory")
    info = _struct("TiOpenglMemoryInteropInfo", interop_info, fields, "import_opengl_memory")
    memory = lib.ti_import_opengl_memory(runtime, info)
    check("import_opengl_memory")
    return _register_memory(runtime, memory, int(info.size), "import_opengl_memory")


def export_opengl_memory(runtime: Any, memory: Any) -> Any:
    """``ti_export_opengl_memory``: ``TiOpenglMemoryInteropInfo`` (GL buffer, size)."""
    _require_arch(runtime, (Arch.OPENGL, Arch.GLES), "export_opengl_memory")
    _child("memory", "TiMemory", runtime, memory, "export_opengl_memory")
    info = ffi.new("TiOpenglMemoryInteropInfo *")
    lib.ti_export_opengl_memory(runtime, memory, info)
    check("export_opengl_memory")
    return info


def import_opengl_image(runtime: Any, interop_info: Any = None, **fields: Any) -> Any:
    """``ti_import_opengl_image``: wrap a GL texture as TiImage."""
    _require_arch(runtime, (Arch.OPENGL, Arch.GLES), "import_opengl_image")
    info = _struct("TiOpenglImageInteropInfo", interop_info, fields, "import_opengl_image")
    image = lib.ti_import_opengl_image(runtime, info)
    check("import_opengl_image")
    return _register_image(runtime, image, "import_opengl_image")


def export_opengl_image(runtime: Any, image: Any) -> Any:
    """``ti_export_opengl_image``: ``TiOpenglImageInteropInfo`` of an image."""
    _require_arch(runtime, (Arch.OPENGL, Arch.GLES), "export_opengl_image")
    _child("image", "TiImage", runtime, image, "export_opengl_image")
    info = ffi.new("TiOpenglImageInteropInfo *")
    lib.ti_export_opengl_image(runtime, image, info)
    check("export_opengl_image")
    return info


def create_vulkan_runtime_ext(
    api_version: int, instance_extensions: Sequence[str] = (), device_extensions: Sequence[str] = ()
) -> Any:
    """``ti_create_vulkan_runtime_ext``: a Vulkan runtime with a chosen API version and extensions."""
    _require_available(Arch.VULKAN, "create_vulkan_runtime_ext")
    if isinstance(api_version, bool) or not isinstance(api_version, int) or not 0 <= api_version < 2**32:
        raise InvalidArgumentError(f"create_vulkan_runtime_ext: bad api_version {api_version!r}")
    keep = []

    def strings(names, what):
        if isinstance(names, (str, bytes)) or not isinstance(names, Sequence):
            raise ArgumentTypeError(f"create_vulkan_runtime_ext: {what} must be a sequence of str")
        arr = ffi.new("char *[]", max(len(names), 1))
        for i, n in enumerate(names):
            if not isinstance(n, str):
                raise ArgumentTypeError(f"create_vulkan_runtime_ext: {what}[{i}] must be str, got {n!r}")
            keep.append(ffi.new("char[]", n.encode()))
            arr[i] = keep[-1]
        return arr

    inst = strings(instance_extensions, "instance_extensions")
    dev = strings(device_extensions, "device_extensions")
    q = quiet()
    with q:
        runtime = lib.ti_create_vulkan_runtime_ext(api_version, len(instance_extensions), inst,
                                                   len(device_extensions), dev)
    check_quiet("create_vulkan_runtime_ext", q)
    return _register_runtime(runtime, Arch.VULKAN, "create_vulkan_runtime_ext")


def import_vulkan_runtime(interop_info: Any = None, **fields: Any) -> Any:
    """``ti_import_vulkan_runtime``: a runtime on an existing Vulkan device."""
    info = _struct("TiVulkanRuntimeInteropInfo", interop_info, fields, "import_vulkan_runtime")
    for name in ("instance", "physical_device", "device", "compute_queue"):
        if getattr(info, name) == NULL:
            raise ArgumentNullError(f"import_vulkan_runtime: interop_info.{name} is NULL")
    with quiet():
        runtime = lib.ti_import_vulkan_runtime(info)
    check("import_vulkan_runtime")
    return _register_runtime(runtime, Arch.VULKAN, "import_vulkan_runtime")


def export_vulkan_runtime(runtime: Any) -> Any:
    """``ti_export_vulkan_runtime``: ``TiVulkanRuntimeInteropInfo`` (instance, device, queues)."""
    _require_arch(runtime, (Arch.VULKAN,), "export_vulkan_runtime")
    info = ffi.new("TiVulkanRuntimeInteropInfo *")
    lib.ti_export_vulkan_runtime(runtime, info)
    check("export_vulkan_runtime")
    return info


def import_vulkan_memory(runtime: Any, interop_info: Any = None, **fields: Any) -> Any:
    """``ti_import_vulkan_memory``: wrap a VkBuffer as TiMemory."""
    _require_arch(runtime, (Arch.VULKAN,), "import_vulkan_memory")
    info = _struct("TiVulkanMemoryInteropInfo", interop_info, fields, "import_vulkan_memory")
    if info.buffer == NULL:
        raise ArgumentNullError("import_vulkan_memory: interop_info.buffer is NULL")
    memory = lib.ti_import_vulkan_memory(runtime, info)
    check("import_vulkan_memory")
    return _register_memory(runtime, memory, int(info.size), "import_vulkan_memory")


def export_vulkan_memory(runtime: Any, memory: Any) -> Any:
    """``ti_export_vulkan_memory``: ``TiVulkanMemoryInteropInfo`` (VkBuffer, size, usage, ...)."""
    _require_arch(runtime, (Arch.VULKAN,), "export_vulkan_memory")
    _child("memory", "TiMemory", runtime, memory, "export_vulkan_memory")
    info = ffi.new("TiVulkanMemoryInteropInfo *")
    lib.ti_export_vulkan_memory(runtime, memory, info)
    check("export_vulkan_memory")
    return info


def import_vulkan_image(runtime: Any, interop_info: Any, view_type: int, layout: int) -> Any:
    """``ti_import_vulkan_image``: wrap a VkImage as TiImage (``view_type``/``layout`` are Vulkan enums)."""
    _require_arch(runtime, (Arch.VULKAN,), "import_vulkan_image")
    info = _struct("TiVulkanImageInteropInfo", interop_info, {}, "import_vulkan_image")
    if info.image == NULL:
        raise ArgumentNullError("import_vulkan_image: interop_info.image is NULL")
    image = lib.ti_import_vulkan_image(runtime, info, view_type, layout)
    check("import_vulkan_image")
    return _register_image(runtime, image, "import_vulkan_image")


def export_vulkan_image(runtime: Any, image: Any) -> Any:
    """``ti_export_vulkan_image``: ``TiVulkanImageInteropInfo`` of an image."""
    _require_arch(runtime, (Arch.VULKAN,), "export_vulkan_image")
    _child("image", "TiImage", runtime, image, "export_vulkan_image")
    info = ffi.new("TiVulkanImageInteropInfo *")
    lib.ti_export_vulkan_image(runtime, image, info)
    check("export_vulkan_image")
    return info


def _register_image(runtime: Any, image: Any, what: str) -> Any:
    if image == NULL:
        raise InvalidStateError(f"{what}: the library returned no image")
    _add(("image", runtime, image), _Entry("image", runtime=runtime, parent=("runtime", runtime)), ("runtime", runtime))
    return image


def _pointer(value: Any, what: str, allow_null: bool = False) -> Any:
    if isinstance(value, ffi.CData) and ffi.typeof(value).kind == "pointer":
        p = ffi.cast("void *", value)
    elif isinstance(value, int) and not isinstance(value, bool):
        if not 0 <= value < 2**64:
            raise InvalidArgumentError(f"{what}: address {value} out of range")
        p = ffi.cast("void *", value)
    else:
        raise ArgumentTypeError(f"{what}: expected a pointer or an int address, got {_describe(value)}")
    if p == NULL and not allow_null:
        raise ArgumentNullError(f"{what}: NULL pointer")
    return p


def _size(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ArgumentTypeError(f"{what}: expected an int, got {_describe(value)}")
    if not 0 < value < 2**63:
        raise InvalidArgumentError(f"{what}: {value} is not a valid size")
    return value


__all__ = [
    "allocate_image",
    "allocate_memory",
    "arch_status",
    "clear_last_error",
    "copy_image_device_to_device",
    "copy_memory_device_to_device",
    "create_aot_module",
    "create_runtime",
    "create_sampler",
    "create_vulkan_runtime_ext",
    "destroy_aot_module",
    "destroy_runtime",
    "destroy_sampler",
    "export_cpu_memory",
    "export_cuda_memory",
    "export_opengl_image",
    "export_opengl_memory",
    "export_opengl_runtime",
    "export_vulkan_image",
    "export_vulkan_memory",
    "export_vulkan_runtime",
    "flush",
    "free_image",
    "free_memory",
    "get_aot_module_compute_graph",
    "get_aot_module_kernel",
    "get_available_archs",
    "get_available_devices",
    "get_cuda_stream",
    "get_last_error",
    "get_runtime_capabilities",
    "enum_arg",
    "get_version",
    "import_cpu_memory",
    "import_cuda_memory",
    "import_opengl_image",
    "import_opengl_memory",
    "import_opengl_runtime",
    "import_vulkan_image",
    "import_vulkan_memory",
    "import_vulkan_runtime",
    "launch_compute_graph",
    "launch_kernel",
    "library",
    "live_handle_count",
    "load_aot_module",
    "map_memory",
    "memcpy_host",
    "memory_size",
    "pack_arguments",
    "pack_named_arguments",
    "runtime_arch",
    "set_cuda_stream",
    "set_last_error",
    "set_runtime_capabilities_ext",
    "track_image",
    "transition_image",
    "unmap_memory",
    "wait",
]

#: The loaded library: path, install folder, version.
library = _library.info
