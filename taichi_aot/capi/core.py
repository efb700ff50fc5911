"""``taichi_core.h``, one checked Python function per C function: runtimes, memory, images, launches (modules:
:mod:`.modules`).

Every handle is looked up in the registry (:mod:`.handles`) before it reaches C,
every call goes through the error funnel, and the calls known to chatter run
under :class:`~taichi_aot._library.Quiet`. Also here: the checks where 1.7.4
crashes (arch availability, LLVM module folders, zero sizes, ndarray extents) and
the hot paths the objects use (:func:`memcpy_host`, :func:`pending_flag`).
"""

from __future__ import annotations

import ctypes
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from .. import _cpus, _library, _nvtx, errors
from .._library import Quiet, check_quiet
from .._native import ffi, lib
from .._probe import Answers, ArchStatus, host_cpu_arch, keep_vulkan_loaded, vulkan_kept_by_parent
from ..enums import (
    CPU_ARCHS,
    DATA_TYPE_SIZE,
    SCALAR_ARGUMENT_TYPES,
    Arch,
    ArgumentType,
    Capability,
    DataType,
    Error,
    ImageLayout,
    archs_instead,
)
from ..errors import (
    ArgumentNotFoundError,
    ArgumentNullError,
    ArgumentTypeError,
    ClosedError,
    InvalidArgumentError,
    InvalidStateError,
    NotSupportedError,
    OutOfMemoryError,
    TaichiError,
    WrongProcessError,
    check,
    make_error,
    take_last_error,
)
from . import handles, structs
from .coerce import describe, enum_arg, pack_arguments, pack_named_arguments, plain, struct_arg
from .handles import lookup_module_or_child, lookup_runtime, lookup_runtime_child
from .images import check_image

NULL = ffi.NULL
#: The most dimensions an ndarray shape (or element shape) may have.
MAX_ND_DIMS = 16


# ---------------------------------------------------------------------------
# Version and errors


def get_version() -> int:
    """``ti_get_version``: the C-API version of the loaded library (1007000 for Taichi 1.7.4)."""
    return int(lib.ti_get_version())


def get_last_error() -> str:
    """``ti_get_last_error``: the message of this thread's last error ("" when there is none).

    A pending error of the library is read without clearing it; after a call of this API raised, its
    error is still what this returns (the exception was made from it), until ``clear_last_error()``.
    The code is the exception's ``code``, or :func:`get_last_error_code`.
    """
    return _last_error()[1]


def get_last_error_code() -> Error:
    """The code of the error :func:`get_last_error` describes (``Error.SUCCESS`` when there is none)."""
    code = _last_error()[0]
    return Error(code) if code in Error._value2member_map_ else Error.SUCCESS


def _last_error() -> tuple[int, str]:
    size = ffi.new("uint64_t *", 0)
    code = lib.ti_get_last_error(size, NULL)
    if code == 0:
        return errors.taken.code, errors.taken.message
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
        raise ArgumentTypeError(f"set_last_error: message must be str or None, got {describe(message)}")
    with Quiet():
        lib.ti_set_last_error(error, message.encode() if message is not None else NULL)


# ---------------------------------------------------------------------------
# Runtimes

#: The probe's answers this process holds (``_probe.Answers``).
_answers = Answers()


def arch_status(refresh: bool = False, archs: Iterable[Arch] | None = None,
                named: bool = False) -> dict[Arch, ArchStatus]:
    """Per-arch probe results (available, device count, reason); probed once per process. ``archs``: those alone,
    probed alone where the answer for every arch is not known yet. An arch asked for by name (``archs``, or every
    arch with ``named``: ``python -m taichi_aot archs``) found unavailable is asked again: its cause may be gone."""
    return _answers.status(_library.info.path, refresh, archs, named)


def get_available_archs() -> tuple[list[int], list[Arch]]:
    """``ti_get_available_archs``, made safe: ``(values, archs)`` of the archs on which a runtime can really
    be created here, as ``uint32`` values and as :class:`Arch` members (``Arch.CUDA in archs``).

    The C function crashes without libcuda and reports archs that cannot create a
    runtime; this probes each arch in a child process once and caches the answer.
    Device counts are in :func:`get_available_devices`.
    """
    archs = [a for a, s in arch_status().items() if s.available]
    return [int(a) for a in archs], archs


def get_available_devices() -> dict[Arch, int | None]:
    """``{arch: device count}`` for every available arch; None where the count is not known."""
    return {a: s.device_count for a, s in arch_status().items() if s.available}


def require_available(arch: Arch, what: str) -> None:
    """NotSupportedError unless a runtime on ``arch`` can be created here (asked before every runtime is made)."""
    if arch in CPU_ARCHS and arch == host_cpu_arch():
        return  # creating an LLVM CPU runtime is safe in process; errors come back as errors
    status = arch_status(archs=(arch,)).get(arch)
    if status is None or not status.available:
        why = status.reason if status is not None else "unknown arch"
        raise NotSupportedError(f"{what}: arch {arch.name} is not available here ({why})"
                                f"{archs_instead(arch_status(), why)}")


def create_runtime(arch: Arch | int | str, device: int = 0, *, device_index: int | None = None,
                   cpu_threads: int | None = None) -> Any:
    """``ti_create_runtime``: a new runtime (TiRuntime) on ``arch`` and its ``device`` (the C header's
    ``device_index``, accepted under that name too). A CPU runtime starts ``cpu_threads`` threads (default:
    ``TAICHI_AOT_CPU_THREADS``, else the cores this process may use; the library alone would start one per
    online core of the machine).

    Raises NotSupportedError when the arch cannot create a runtime here (checked
    before calling C: 1.7.4 crashes or silently falls back to x64 on some).
    """
    if device_index is not None:
        if device != 0:
            raise ArgumentTypeError("create_runtime: device given twice (device and device_index)")
        device = device_index
    device_index = device
    arch = enum_arg(Arch, arch, "create_runtime: arch")
    if isinstance(device_index, bool) or not isinstance(device_index, int):
        raise ArgumentTypeError(f"create_runtime: device_index must be an int, got {device_index!r}")
    if not 0 <= device_index < 2**32:
        raise InvalidArgumentError(f"create_runtime: device_index {device_index} out of range")
    threads = _cpus.runtime_threads(arch, cpu_threads, "create_runtime")
    require_available(arch, "create_runtime")
    if arch == Arch.CUDA and handles.has_runtime(Arch.CUDA):
        # measured: with two CUDA runtimes alive, destroying the second one aborts the process
        raise InvalidStateError(
            "create_runtime(CUDA): a CUDA runtime already exists in this process. libtaichi_c_api 1.7.4 aborts "
            "the process when two CUDA runtimes are destroyed, so one may exist at a time: close the other first "
            "(a closed runtime lives on while a numpy view of its memory does)"
        )
    if arch == Arch.VULKAN and vulkan_kept_by_parent() and not arch_status(archs=(arch,))[arch].software:
        raise WrongProcessError(
            "create_runtime(VULKAN): this process was forked from one whose GPU's Vulkan driver was loaded "
            "(taichi_aot keeps it loaded from the first Vulkan runtime on), and a GPU driver does not survive "
            "fork (NVIDIA's hangs the child): start GPU work in a new process (multiprocessing's 'spawn' or "
            "'forkserver', as taichi_aot.Pool does)"
        )
    q = Quiet()
    with _cpus.starting(threads), q:  # holds _library.busy
        if arch == Arch.VULKAN:
            keep_vulkan_loaded()  # the driver reloaded again and again crashes (_probe.keep_vulkan_loaded)
        runtime = lib.ti_create_runtime(arch, device_index)
    check_quiet(f"create_runtime({arch.name}, {device_index})", q)
    return handles.register_runtime(runtime, arch, f"create_runtime({arch.name})", threads)


def pending_flag(runtime: Any) -> Any:
    """The ``int32_t *`` that is non-zero while work enqueued on ``runtime`` may not have finished."""
    return lookup_runtime(runtime, "pending_flag").pending


def runtime_arch(runtime: Any) -> Arch:
    """The arch a live runtime was created for."""
    return lookup_runtime(runtime, "runtime_arch").arch


def runtime_threads(runtime: Any) -> int:
    """The threads a live CPU runtime started (0 for the others)."""
    return lookup_runtime(runtime, "runtime_threads").threads


def destroy_runtime(runtime: Any) -> None:
    """``ti_destroy_runtime``: destroy a runtime; its memory, images, modules and kernels die with it (memory still
    mapped is unmapped first: libtaichi 1.7.4 aborts the process destroying a mapped allocation)."""
    lookup_runtime(runtime, "destroy_runtime")
    mapped = handles.mapped_memory(runtime)
    handles.retire(("runtime", runtime))
    with _library.busy, Quiet():
        for memory in mapped:
            lib.ti_unmap_memory(runtime, memory)
        lib.ti_destroy_runtime(runtime)
    check("destroy_runtime")


def get_runtime_capabilities(runtime: Any) -> structs.CapabilityList:
    """``ti_get_runtime_capabilities``: the runtime device's ``TiCapabilityLevelInfo`` list, which also
    answers as the mapping ``{capability: level}`` (:class:`~taichi_aot.capi.structs.CapabilityList`)."""
    lookup_runtime(runtime, "get_runtime_capabilities")
    count = ffi.new("uint32_t *", 0)
    lib.ti_get_runtime_capabilities(runtime, count, NULL)
    check("get_runtime_capabilities")
    caps = ffi.new("TiCapabilityLevelInfo[]", max(int(count[0]), 1))
    count[0] = len(caps)
    lib.ti_get_runtime_capabilities(runtime, count, caps)
    check("get_runtime_capabilities")
    return structs.CapabilityList(
        structs.TiCapabilityLevelInfo(capability=caps[i].capability, level=caps[i].level)
        for i in range(min(int(count[0]), len(caps))))


def set_runtime_capabilities_ext(runtime: Any, capabilities: Mapping | Sequence | Any) -> None:
    """``ti_set_runtime_capabilities_ext``: replace the runtime's capability levels.

    ``capabilities``: ``{Capability: level}``, pairs, ``TiCapabilityLevelInfo`` structures (ctypes or cffi,
    in a list or an array), or a cffi ``TiCapabilityLevelInfo[]``.
    """
    lookup_runtime(runtime, "set_runtime_capabilities_ext")
    if isinstance(capabilities, ffi.CData):
        array = capabilities
        count = len(array)
    else:
        items: Any = capabilities.items() if isinstance(capabilities, Mapping) else capabilities
        if isinstance(items, (Sequence, ctypes.Array)) and not isinstance(items, (str, bytes)):
            items = [(c.capability, c.level) if isinstance(c, (ctypes.Structure, ffi.CData)) else c for c in items]
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
    lookup_runtime(runtime, "flush")
    lib.ti_flush(runtime)
    check("flush")


def wait(runtime: Any) -> None:
    """``ti_wait``: submit queued work and wait for the device to finish it."""
    entry = lookup_runtime(runtime, "wait")
    lib.ti_wait(runtime)
    check("wait")
    entry.pending[0] = 0


# ---------------------------------------------------------------------------
# Memory


def allocate_memory(runtime: Any, allocate_info: Any = None, **fields: Any) -> Any:
    """``ti_allocate_memory``: allocate device memory (TiMemory).

    ``allocate_info``: a ``TiMemoryAllocateInfo`` (cffi), a dict, or keywords
    (``size``, ``host_write``, ``host_read``, ``export_sharing``, ``usage``).
    A size of 0 raises InvalidArgumentError (1.7.4 aborts on Vulkan).
    """
    rt = lookup_runtime(runtime, "allocate_memory")
    info = struct_arg("TiMemoryAllocateInfo", allocate_info, fields, "allocate_memory")
    if info.size == 0:
        raise InvalidArgumentError("allocate_memory: size must be at least 1 byte, got 0")
    q = Quiet()
    with q:
        memory = lib.ti_allocate_memory(runtime, info)
    code, message = take_last_error()
    if code != 0:
        what = f"allocate_memory({info.size} bytes on {rt.arch.name})"
        if code == InvalidStateError.code and "allocation" in message.lower() and "failed" in message.lower():
            # the x64 backend reports a failed host allocation as INVALID_STATE
            raise OutOfMemoryError(f"{what}: {message}")
        raise make_error(code, message, what)
    host = bool(info.host_read or info.host_write) or rt.arch in CPU_ARCHS
    return handles.register_in_runtime("memory", runtime, memory, "allocate_memory", size=int(info.size), host=host)


def free_memory(runtime: Any, memory: Any) -> None:
    """``ti_free_memory``: free device memory.

    On x64 1.7.4 cannot free what it allocated (NotSupportedError; the memory stays valid and is
    released with the runtime); memory imported with ``import_cpu_memory`` is forgotten (the handle
    becomes invalid, the host memory stays its owner's).
    """
    rt = lookup_runtime(runtime, "free_memory")
    key, entry = lookup_runtime_child("memory", "TiMemory", runtime, memory, "free_memory")
    if entry.mapped:
        raise InvalidStateError("free_memory: the memory is mapped; unmap it first")
    if entry.imported:
        handles.retire(key)  # nothing of the library's to free: it only recorded the caller's pointer
        return
    if rt.arch in CPU_ARCHS:
        # 1.7.4 reports NOT_SUPPORTED on CPU backends only after breaking the
        # allocation (it can no longer be mapped): refuse before calling C.
        raise NotSupportedError(
            f"free_memory: libtaichi_c_api 1.7.4 cannot free memory on {rt.arch.name}; "
            "it stays valid and is released with its runtime"
        )
    handles.retire(key)  # first: the library may hand the same handle to another thread's allocation once freed
    with Quiet():
        lib.ti_free_memory(runtime, memory)
    check("free_memory")


def memory_size(runtime: Any, memory: Any) -> int:
    """Size in bytes of a live memory allocation."""
    return lookup_runtime_child("memory", "TiMemory", runtime, memory, "memory_size")[1].size


def map_memory(runtime: Any, memory: Any) -> int:
    """``ti_map_memory``: the address of host-visible memory, an int (``ctypes.c_void_p(address)``,
    ``ffi.cast("float *", address)``, ``numpy`` through ctypes). Mapping twice raises InvalidStateError."""
    lookup_runtime(runtime, "map_memory")
    _, entry = lookup_runtime_child("memory", "TiMemory", runtime, memory, "map_memory")
    if entry.mapped:
        raise InvalidStateError("map_memory: the memory is already mapped")
    if entry.host:  # the common case, kept off the fd-redirecting path
        ptr = lib.ti_map_memory(runtime, memory)
        check("map_memory")
    else:
        q = Quiet()
        with q:
            ptr = lib.ti_map_memory(runtime, memory)
        check_quiet("map_memory", q)
    if ptr == NULL:
        raise InvalidStateError("map_memory: the library returned a NULL mapping")
    entry.mapped = True
    return int(ffi.cast("uintptr_t", ptr))


def unmap_memory(runtime: Any, memory: Any) -> None:
    """``ti_unmap_memory``: end a mapping made by :func:`map_memory`."""
    lookup_runtime(runtime, "unmap_memory")
    _, entry = lookup_runtime_child("memory", "TiMemory", runtime, memory, "unmap_memory")
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
    entry = handles.find(("memory", runtime, memory))
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


def _pair(dst: Any, dst_named: Any, src: Any, src_named: Any, what: str) -> tuple[Any, Any]:
    """The (destination, source) of a copy given positionally or by ``dst=``/``src=``, each once."""
    if (dst is not None and dst_named is not None) or (src is not None and src_named is not None):
        raise ArgumentTypeError(f"{what}: a slice given twice (by position and by dst=/src=)")
    dst, src = dst if dst is not None else dst_named, src if src is not None else src_named
    if dst is None or src is None:
        raise ArgumentTypeError(f"{what}: needs a destination and a source slice")
    return dst, src


def _slice(runtime: Any, value: Any, what: str) -> Any:
    s = struct_arg("TiMemorySlice", value, {}, what)
    _, entry = lookup_runtime_child("memory", "TiMemory", runtime, s.memory, what + ".memory")
    if s.offset + s.size > entry.size:
        raise InvalidArgumentError(
            f"{what}: slice [{s.offset}, {s.offset + s.size}) exceeds the memory's {entry.size} bytes"
        )
    return s


def copy_memory_device_to_device(runtime: Any, dst_memory: Any = None, src_memory: Any = None, *, dst: Any = None,
                                 src: Any = None) -> None:
    """``ti_copy_memory_device_to_device``: copy between memory slices (dicts, cffi or ctypes ``TiMemorySlice``),
    positionally in C's order (destination first), or by name: ``dst=``/``src=`` (the design document's).

    Unsupported on x64 in 1.7.4 (NotSupportedError).
    """
    lookup_runtime(runtime, "copy_memory_device_to_device")
    dst_memory, src_memory = _pair(dst_memory, dst, src_memory, src, "copy_memory_device_to_device")
    dst = _slice(runtime, dst_memory, "copy_memory_device_to_device: dst_memory")
    src = _slice(runtime, src_memory, "copy_memory_device_to_device: src_memory")
    if dst.size != src.size:
        raise InvalidArgumentError(f"copy_memory_device_to_device: sizes differ (dst {dst.size}, src {src.size})")
    handles.mark_enqueued(runtime)
    with Quiet():
        lib.ti_copy_memory_device_to_device(runtime, dst, src)
    check("copy_memory_device_to_device")


# ---------------------------------------------------------------------------
# Images and samplers


def allocate_image(runtime: Any, allocate_info: Any = None, **fields: Any) -> Any:
    """``ti_allocate_image``: allocate an image (TiImage); dict/keywords as ``TiImageAllocateInfo``."""
    rt = lookup_runtime(runtime, "allocate_image")
    info = struct_arg("TiImageAllocateInfo", allocate_info, fields, "allocate_image")
    ext = info.extent
    if 0 in (ext.width, ext.height, ext.depth):
        raise InvalidArgumentError(
            f"allocate_image: extent {ext.width}x{ext.height}x{ext.depth} has a zero side (use 1 for unused sides)"
        )
    status = arch_status().get(rt.arch)
    check_image(info, status.devices if status is not None else (), f"allocate_image on {rt.arch.name}")
    q = Quiet()
    with q:
        image = lib.ti_allocate_image(runtime, info)
    check_quiet(f"allocate_image on {rt.arch.name}", q)
    return handles.register_in_runtime("image", runtime, image, "allocate_image")


def free_image(runtime: Any, image: Any) -> None:
    """``ti_free_image``: free an image."""
    lookup_runtime(runtime, "free_image")
    key, _ = lookup_runtime_child("image", "TiImage", runtime, image, "free_image")
    handles.retire(key)  # first: a handle freed may be another thread's next
    with Quiet():
        lib.ti_free_image(runtime, image)
    check("free_image")


def create_sampler(runtime: Any, create_info: Any = None, **fields: Any) -> Any:
    """``ti_create_sampler``: create a sampler (TiSampler). Taichi 1.7.4 implements it on no backend."""
    lookup_runtime(runtime, "create_sampler")
    info = struct_arg("TiSamplerCreateInfo", create_info, fields, "create_sampler")
    with Quiet():
        sampler = lib.ti_create_sampler(runtime, info)
    check("create_sampler")
    return handles.register_in_runtime("sampler", runtime, sampler, "create_sampler")


def destroy_sampler(runtime: Any, sampler: Any) -> None:
    """``ti_destroy_sampler``: destroy a sampler."""
    lookup_runtime(runtime, "destroy_sampler")
    key, _ = lookup_runtime_child("sampler", "TiSampler", runtime, sampler, "destroy_sampler")
    handles.retire(key)  # first: a handle freed may be another thread's next
    with Quiet():
        lib.ti_destroy_sampler(runtime, sampler)
    check("destroy_sampler")


def _image_slice(runtime: Any, value: Any, what: str) -> Any:
    s = struct_arg("TiImageSlice", value, {}, what)
    lookup_runtime_child("image", "TiImage", runtime, s.image, what + ".image")
    return s


def copy_image_device_to_device(runtime: Any, dst_image: Any = None, src_image: Any = None, *, dst: Any = None,
                                src: Any = None) -> None:
    """``ti_copy_image_device_to_device``: copy between image slices (dicts, cffi or ctypes ``TiImageSlice``),
    positionally in C's order (destination first), or by name: ``dst=``/``src=``."""
    lookup_runtime(runtime, "copy_image_device_to_device")
    dst_image, src_image = _pair(dst_image, dst, src_image, src, "copy_image_device_to_device")
    dst = _image_slice(runtime, dst_image, "copy_image_device_to_device: dst_image")
    src = _image_slice(runtime, src_image, "copy_image_device_to_device: src_image")
    with Quiet():
        handles.mark_enqueued(runtime)
        lib.ti_copy_image_device_to_device(runtime, dst, src)
    check("copy_image_device_to_device")


def track_image(runtime: Any, image: Any, layout: ImageLayout | int) -> None:
    """``ti_track_image_ext``: tell the runtime the layout an image is in now."""
    lookup_runtime(runtime, "track_image")
    lookup_runtime_child("image", "TiImage", runtime, image, "track_image")
    layout = enum_arg(ImageLayout, layout, "track_image: layout")
    with Quiet():
        handles.mark_enqueued(runtime)
        lib.ti_track_image_ext(runtime, image, layout)
    check("track_image")


track_image_ext = track_image  # the C name (``ti_track_image_ext``)


def transition_image(runtime: Any, image: Any, layout: ImageLayout | int) -> None:
    """``ti_transition_image``: move an image to ``layout``."""
    lookup_runtime(runtime, "transition_image")
    lookup_runtime_child("image", "TiImage", runtime, image, "transition_image")
    layout = enum_arg(ImageLayout, layout, "transition_image: layout")
    with Quiet():
        handles.mark_enqueued(runtime)
        lib.ti_transition_image(runtime, image, layout)
    check("transition_image")


# ---------------------------------------------------------------------------
# Launches


def _check_argument(runtime: Any, arg: Any, what: str) -> None:
    t = int(arg.type)
    if t == ArgumentType.NDARRAY:
        _check_ndarray_argument(runtime, arg.value.ndarray, what)
    elif t == ArgumentType.TEXTURE:
        lookup_runtime_child("image", "TiImage", runtime, arg.value.texture.image, what + " texture image")
    elif t == ArgumentType.SCALAR:
        st = int(arg.value.scalar.type)
        if st not in SCALAR_ARGUMENT_TYPES:
            name = DataType(st).name if st in DataType._value2member_map_ else str(st)
            raise NotSupportedError(
                f"{what}: the C-API passes typed scalars of type I16, U16, F16 only, not {name} "
                "(i32 and f32 have their own argument types)"
            )
    elif t == ArgumentType.TENSOR:
        _check_tensor_argument(arg.value.tensor, what)
    elif t not in (ArgumentType.I32, ArgumentType.F32):
        raise InvalidArgumentError(f"{what}: {t} is not an ArgumentType")


def _check_ndarray_argument(runtime: Any, nd: Any, what: str) -> None:
    """A TiNdArray: memory of this runtime, a storable element type, at most 16 dims each, within its memory."""
    _, entry = lookup_runtime_child("memory", "TiMemory", runtime, nd.memory, what + " ndarray memory")
    elem_type = int(nd.elem_type)
    if elem_type not in DATA_TYPE_SIZE:
        raise InvalidArgumentError(f"{what}: ndarray elem_type {elem_type} is not a storable DataType")
    for label, shape in (("shape", nd.shape), ("elem_shape", nd.elem_shape)):
        if shape.dim_count > MAX_ND_DIMS:
            raise InvalidArgumentError(f"{what}: ndarray {label} has {shape.dim_count} dims (at most 16)")
    dims = [nd.shape.dims[i] for i in range(nd.shape.dim_count)]
    edims = [nd.elem_shape.dims[i] for i in range(nd.elem_shape.dim_count)]
    n = DATA_TYPE_SIZE[DataType(elem_type)] * math.prod(dims) * math.prod(edims)
    if n > entry.size:
        raise InvalidArgumentError(
            f"{what}: ndarray of shape {dims}, element shape {edims} and type {DataType(elem_type).name} "
            f"needs {n} bytes but its memory holds {entry.size}"
        )


def _check_tensor_argument(tensor: Any, what: str) -> None:
    """A TiTensorValue: a known element type, at most its 128 bytes of elements."""
    if int(tensor.type) not in DATA_TYPE_SIZE:
        raise InvalidArgumentError(f"{what}: tensor type {int(tensor.type)} is not a DataType")
    capacity = 128 // DATA_TYPE_SIZE[DataType(int(tensor.type))]
    if tensor.contents.length > capacity:
        raise InvalidArgumentError(f"{what}: tensor of {tensor.contents.length} elements (at most {capacity})")


def _check_owners(runtime: Any, args: Any, what: str) -> None:
    """Refuse another runtime's memory whose handle has the same value as one of this runtime's.

    The value alone cannot tell them apart (x64 numbers memory 1, 2, ... in each runtime), so where a
    value is live in more than one runtime the handle object itself must be the one this runtime
    gave out; inside a TiArgument struct it cannot be told, and is refused.
    """
    if isinstance(args, Mapping):
        items = list(args.items())
    elif isinstance(args, Sequence) and not isinstance(args, (str, bytes)):
        items = list(enumerate(args))
    else:  # a cffi array: values only
        items = [(i, args[i]) for i in range(len(args))]
    for key, arg in items:
        memory, given = _ndarray_memory(arg)
        if memory is None or not isinstance(memory, ffi.CData) or handles.runtimes_holding("memory", memory) < 2:
            continue
        record = handles.find(("memory", runtime, memory))
        if record is not None and given is not None and record.handle is given:
            continue
        raise InvalidArgumentError(
            f"{what} argument {key!r}: memory {memory} is live in more than one runtime (x64 numbers memory "
            f"1, 2, ... in each), and this handle is not the one this runtime allocated"
            + ("" if given is not None else "; pass the handle from allocate_memory in a dict so it can be told")
        )


def _ndarray_memory(arg: Any) -> tuple[Any, Any]:
    """An ndarray argument's memory handle, and the handle object as the caller gave it in a dict (None inside a
    cffi TiArgument, where only its value is left); (None, None) for other arguments."""
    if isinstance(arg, Mapping) and "argument" in arg:  # a named argument as a dict
        arg = arg["argument"]
    if isinstance(arg, Mapping):
        given = plain(((arg.get("value") or {}).get("ndarray") or {}).get("memory"))
        return given, given
    if isinstance(arg, ffi.CData) and ffi.typeof(arg) in (ffi.typeof("TiArgument"), ffi.typeof("TiArgument *")):
        a = arg if ffi.typeof(arg) is ffi.typeof("TiArgument") else arg[0]
        if int(a.type) == ArgumentType.NDARRAY:
            return a.value.ndarray.memory, None
    return None, None


def launch_kernel(runtime: Any, kernel: Any, num_args: Any = None, args: Sequence[Any] | Any = None) -> None:
    """``ti_launch_kernel``: enqueue a kernel launch: ``launch_kernel(runtime, kernel, args)``, or in C's arity
    ``launch_kernel(runtime, kernel, num_args, args)`` (the first ``num_args`` of ``args``).

    ``args``: a cffi or ctypes ``TiArgument`` array, or a sequence of TiArgument (cffi or ctypes) / dict / int /
    float.
    Ndarray memories must be alive in this runtime and large enough for the shape
    given; the kernel's own signature is not known at this layer.
    """
    lookup_runtime(runtime, "launch_kernel")
    args = structs.first(num_args, args, "launch_kernel")
    _, entry = lookup_module_or_child("kernel", "TiKernel", kernel, "launch_kernel")
    if entry.runtime != runtime:
        raise InvalidArgumentError("launch_kernel: the kernel belongs to another runtime")
    _check_owners(runtime, args, f"launch_kernel({entry.name!r})")
    array = pack_arguments(args)
    for i in range(len(array)):
        _check_argument(runtime, array[i], f"launch_kernel({entry.name!r}) argument {i}")
    full = handles.count_launch(runtime)
    _dispatch(runtime, lib.TAICHI_AOT_KIND_KERNEL, kernel, array, entry.name)  # ti_launch_kernel
    check(f"launch_kernel({entry.name!r})")
    if full:  # a gfx runtime's queue, bounded as the object layer's launches bound it
        wait(runtime)


def _dispatch(runtime: Any, kind: int, handle: Any, array: Any, name: str) -> None:
    """libtaichi's launch of ``handle`` (kernel or graph ``name``) with the checked ``array``, made by the dispatcher
    (``_csrc/launch.c``) as every launch is (inside its NVTX range, where ranges are on); its error is left in the
    library's slot."""
    _nvtx.first_use()
    launch = ffi.new("TaichiAotLaunch *")
    launch.runtime, launch.kind, launch.handle, launch.arg_count, launch.args = runtime, kind, handle, len(array), array
    named = _nvtx.range_name(name)  # alive for the call
    launch.name = named
    lib.taichi_aot_dispatch(launch)


def launch_compute_graph(runtime: Any, compute_graph: Any, num_args: Any = None,
                         named_args: Mapping[str, Any] | Sequence[Any] | Any = None) -> None:
    """``ti_launch_compute_graph``: enqueue a graph with named arguments: ``{name: argument}``, ``(name,
    argument)`` pairs or ``TiNamedArgument`` structures (cffi or ctypes); in C's arity ``(runtime, graph,
    num_args, named_args)``."""
    lookup_runtime(runtime, "launch_compute_graph")
    args = structs.first(num_args, named_args, "launch_compute_graph")
    _, entry = lookup_module_or_child("graph", "TiComputeGraph", compute_graph, "launch_compute_graph")
    if entry.runtime != runtime:
        raise InvalidArgumentError("launch_compute_graph: the graph belongs to another runtime")
    _check_owners(runtime, args, f"launch_compute_graph({entry.name!r})")
    array, keep = pack_named_arguments(args)
    for i in range(len(array)):
        name = ffi.string(array[i].name).decode() if array[i].name != NULL else None
        if name is None:
            raise ArgumentNullError(f"launch_compute_graph: argument {i} has a NULL name")
        _check_argument(runtime, array[i].argument, f"launch_compute_graph({entry.name!r}) argument {name!r}")
    with Quiet():
        full = handles.count_launch(runtime)
        _dispatch(runtime, lib.TAICHI_AOT_KIND_GRAPH, compute_graph, array, entry.name)  # ti_launch_compute_graph
    code, message = take_last_error()
    if code != 0:
        if "Missing runtime value for" in message:
            raise ArgumentNotFoundError(f"launch_compute_graph({entry.name!r}): {message}")
        raise make_error(code, message, f"launch_compute_graph({entry.name!r})")
    del keep
    if full:
        wait(runtime)
