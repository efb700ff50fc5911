"""The interop headers, one checked Python function per C function.

``taichi_cpu.h``, ``taichi_cuda.h``, ``taichi_opengl.h`` and ``taichi_vulkan.h``:
import native memory, images and runtimes as taichi_aot handles, and export
ours. Each function first checks that the runtime is of the backend it names.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING, Any

from .._library import Quiet, check_quiet
from .._native import ffi, lib
from ..enums import CPU_ARCHS, Arch
from ..errors import ArgumentNullError, ArgumentTypeError, InvalidArgumentError, NotSupportedError, check
from . import handles
from .coerce import pointer_arg, size_arg, struct_arg
from .core import require_available
from .handles import lookup_runtime, lookup_runtime_child

if TYPE_CHECKING:
    from .handles import HandleRecord

NULL = ffi.NULL
_OPENGL_ARCHS = (Arch.OPENGL, Arch.GLES)


def _require_arch(runtime: Any, archs: Collection[Arch], what: str) -> HandleRecord:
    entry = lookup_runtime(runtime, what)
    if entry.arch not in archs:
        names = "/".join(a.name for a in sorted(archs))
        raise NotSupportedError(f"{what}: needs a {names} runtime, not {entry.arch.name}")
    return entry


def export_cpu_memory(runtime: Any, memory: Any) -> Any:
    """``ti_export_cpu_memory``: ``TiCpuMemoryInteropInfo`` (``ptr``, ``size``) of memory on a CPU runtime."""
    _require_arch(runtime, CPU_ARCHS, "export_cpu_memory")
    lookup_runtime_child("memory", "TiMemory", runtime, memory, "export_cpu_memory")
    info = ffi.new("TiCpuMemoryInteropInfo *")
    lib.ti_export_cpu_memory(runtime, memory, info)
    check("export_cpu_memory")
    return info


def import_cpu_memory(runtime: Any, ptr: Any, memory_size: int) -> Any:
    """``ti_import_cpu_memory``: wrap host memory at ``ptr`` (cffi pointer or int address) as TiMemory.

    The caller keeps that host memory alive for as long as the TiMemory is used; :func:`free_memory`
    of the TiMemory forgets it (the host memory stays the caller's).
    """
    _require_arch(runtime, CPU_ARCHS, "import_cpu_memory")
    p = pointer_arg(ptr, "import_cpu_memory: ptr")
    size = size_arg(memory_size, "import_cpu_memory: memory_size")
    memory = lib.ti_import_cpu_memory(runtime, p, size)
    check("import_cpu_memory")
    return handles.register_in_runtime("memory", runtime, memory, "import_cpu_memory", size=size, host=True,
                                       imported=True)


def export_cuda_memory(runtime: Any, memory: Any) -> Any:
    """``ti_export_cuda_memory``: ``TiCudaMemoryInteropInfo`` (device ``ptr``, ``size``)."""
    _require_arch(runtime, (Arch.CUDA,), "export_cuda_memory")
    lookup_runtime_child("memory", "TiMemory", runtime, memory, "export_cuda_memory")
    info = ffi.new("TiCudaMemoryInteropInfo *")
    lib.ti_export_cuda_memory(runtime, memory, info)
    check("export_cuda_memory")
    return info


def import_cuda_memory(runtime: Any, ptr: Any, memory_size: int) -> Any:
    """``ti_import_cuda_memory``: wrap a CUDA device pointer as TiMemory (caller keeps it alive)."""
    _require_arch(runtime, (Arch.CUDA,), "import_cuda_memory")
    p = pointer_arg(ptr, "import_cuda_memory: ptr")
    size = size_arg(memory_size, "import_cuda_memory: memory_size")
    memory = lib.ti_import_cuda_memory(runtime, p, size)
    check("import_cuda_memory")
    return handles.register_in_runtime("memory", runtime, memory, "import_cuda_memory", size=size, imported=True)


def set_cuda_stream(stream: Any) -> None:
    """``ti_set_cuda_stream``: the CUDA stream later launches use (``None`` for the default)."""
    p = NULL if stream is None else pointer_arg(stream, "set_cuda_stream: stream", allow_null=True)
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
    if not handles.has_runtime(Arch.CUDA):
        raise NotSupportedError(f"{what}: needs a live CUDA runtime")


def import_opengl_runtime(interop_info: Any = None, use_gles: bool = False, **fields: Any) -> Any:
    """``ti_import_opengl_runtime``: a runtime on the current OpenGL context."""
    info = struct_arg("TiOpenglRuntimeInteropInfo", interop_info, fields, "import_opengl_runtime")
    arch = Arch.GLES if use_gles else Arch.OPENGL
    require_available(arch, "import_opengl_runtime")
    with Quiet():
        runtime = lib.ti_import_opengl_runtime(info, bool(use_gles))
    check("import_opengl_runtime")
    return handles.register_runtime(runtime, arch, "import_opengl_runtime")


def export_opengl_runtime(runtime: Any) -> Any:
    """``ti_export_opengl_runtime``: ``TiOpenglRuntimeInteropInfo`` of an OpenGL runtime."""
    _require_arch(runtime, _OPENGL_ARCHS, "export_opengl_runtime")
    info = ffi.new("TiOpenglRuntimeInteropInfo *")
    lib.ti_export_opengl_runtime(runtime, info)
    check("export_opengl_runtime")
    return info


def import_opengl_memory(runtime: Any, interop_info: Any = None, **fields: Any) -> Any:
    """``ti_import_opengl_memory``: wrap a GL buffer as TiMemory."""
    _require_arch(runtime, _OPENGL_ARCHS, "import_opengl_memory")
    info = struct_arg("TiOpenglMemoryInteropInfo", interop_info, fields, "import_opengl_memory")
    memory = lib.ti_import_opengl_memory(runtime, info)
    check("import_opengl_memory")
    return handles.register_in_runtime("memory", runtime, memory, "import_opengl_memory", size=int(info.size))


def export_opengl_memory(runtime: Any, memory: Any) -> Any:
    """``ti_export_opengl_memory``: ``TiOpenglMemoryInteropInfo`` (GL buffer, size)."""
    _require_arch(runtime, _OPENGL_ARCHS, "export_opengl_memory")
    lookup_runtime_child("memory", "TiMemory", runtime, memory, "export_opengl_memory")
    info = ffi.new("TiOpenglMemoryInteropInfo *")
    lib.ti_export_opengl_memory(runtime, memory, info)
    check("export_opengl_memory")
    return info


def import_opengl_image(runtime: Any, interop_info: Any = None, **fields: Any) -> Any:
    """``ti_import_opengl_image``: wrap a GL texture as TiImage."""
    _require_arch(runtime, _OPENGL_ARCHS, "import_opengl_image")
    info = struct_arg("TiOpenglImageInteropInfo", interop_info, fields, "import_opengl_image")
    image = lib.ti_import_opengl_image(runtime, info)
    check("import_opengl_image")
    return handles.register_in_runtime("image", runtime, image, "import_opengl_image")


def export_opengl_image(runtime: Any, image: Any) -> Any:
    """``ti_export_opengl_image``: ``TiOpenglImageInteropInfo`` of an image."""
    _require_arch(runtime, _OPENGL_ARCHS, "export_opengl_image")
    lookup_runtime_child("image", "TiImage", runtime, image, "export_opengl_image")
    info = ffi.new("TiOpenglImageInteropInfo *")
    lib.ti_export_opengl_image(runtime, image, info)
    check("export_opengl_image")
    return info


def create_vulkan_runtime_ext(
    api_version: int, instance_extensions: Sequence[str] = (), device_extensions: Sequence[str] = ()
) -> Any:
    """``ti_create_vulkan_runtime_ext``: a Vulkan runtime with a chosen API version and extensions."""
    require_available(Arch.VULKAN, "create_vulkan_runtime_ext")
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
    q = Quiet()
    with q:
        runtime = lib.ti_create_vulkan_runtime_ext(api_version, len(instance_extensions), inst,
                                                   len(device_extensions), dev)
    check_quiet("create_vulkan_runtime_ext", q)
    return handles.register_runtime(runtime, Arch.VULKAN, "create_vulkan_runtime_ext")


def import_vulkan_runtime(interop_info: Any = None, **fields: Any) -> Any:
    """``ti_import_vulkan_runtime``: a runtime on an existing Vulkan device."""
    info = struct_arg("TiVulkanRuntimeInteropInfo", interop_info, fields, "import_vulkan_runtime")
    for name in ("instance", "physical_device", "device", "compute_queue"):
        if getattr(info, name) == NULL:
            raise ArgumentNullError(f"import_vulkan_runtime: interop_info.{name} is NULL")
    with Quiet():
        runtime = lib.ti_import_vulkan_runtime(info)
    check("import_vulkan_runtime")
    return handles.register_runtime(runtime, Arch.VULKAN, "import_vulkan_runtime")


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
    info = struct_arg("TiVulkanMemoryInteropInfo", interop_info, fields, "import_vulkan_memory")
    if info.buffer == NULL:
        raise ArgumentNullError("import_vulkan_memory: interop_info.buffer is NULL")
    memory = lib.ti_import_vulkan_memory(runtime, info)
    check("import_vulkan_memory")
    return handles.register_in_runtime("memory", runtime, memory, "import_vulkan_memory", size=int(info.size))


def export_vulkan_memory(runtime: Any, memory: Any) -> Any:
    """``ti_export_vulkan_memory``: ``TiVulkanMemoryInteropInfo`` (VkBuffer, size, usage, ...)."""
    _require_arch(runtime, (Arch.VULKAN,), "export_vulkan_memory")
    lookup_runtime_child("memory", "TiMemory", runtime, memory, "export_vulkan_memory")
    info = ffi.new("TiVulkanMemoryInteropInfo *")
    lib.ti_export_vulkan_memory(runtime, memory, info)
    check("export_vulkan_memory")
    return info


def import_vulkan_image(runtime: Any, interop_info: Any, view_type: int, layout: int) -> Any:
    """``ti_import_vulkan_image``: wrap a VkImage as TiImage (``view_type``/``layout`` are Vulkan enums)."""
    _require_arch(runtime, (Arch.VULKAN,), "import_vulkan_image")
    info = struct_arg("TiVulkanImageInteropInfo", interop_info, {}, "import_vulkan_image")
    if info.image == NULL:
        raise ArgumentNullError("import_vulkan_image: interop_info.image is NULL")
    image = lib.ti_import_vulkan_image(runtime, info, view_type, layout)
    check("import_vulkan_image")
    return handles.register_in_runtime("image", runtime, image, "import_vulkan_image")


def export_vulkan_image(runtime: Any, image: Any) -> Any:
    """``ti_export_vulkan_image``: ``TiVulkanImageInteropInfo`` of an image."""
    _require_arch(runtime, (Arch.VULKAN,), "export_vulkan_image")
    lookup_runtime_child("image", "TiImage", runtime, image, "export_vulkan_image")
    info = ffi.new("TiVulkanImageInteropInfo *")
    lib.ti_export_vulkan_image(runtime, image, info)
    check("export_vulkan_image")
    return info
