"""The flat, checked Taichi C-API: one Python function per C function.

Names drop the ``ti_`` prefix (``ti_track_image_ext`` is :func:`track_image_ext`, also :func:`track_image`).
Handles are the cffi pointers the C functions return. Struct parameters take the
cffi struct (or a pointer to one), a plain ``dict``, or keyword arguments.

What this layer adds to the C library, so that misuse raises instead of crashing:

* every call goes through the error funnel (:mod:`taichi_aot.errors`): the
  thread's last error is read, cleared and raised as a typed exception;
* a registry of live handles (:mod:`.handles`): a destroyed or foreign handle raises
  :class:`~taichi_aot.errors.ClosedError` instead of reaching C (1.7.4 segfaults
  on use after destroy), and destroying a runtime retires its children;
* checks where 1.7.4 crashes: arch availability before creating a runtime,
  module folders on LLVM backends, zero-size allocations, ndarray extents that
  exceed their memory;
* uniform errors where backends differ (an unknown kernel is always
  :class:`~taichi_aot.errors.NameNotFoundError`).

The rooms: :mod:`.core` (``taichi_core.h``), :mod:`.interop` (the CPU, CUDA,
OpenGL and Vulkan interop headers), :mod:`.coerce` (Python values to C values),
:mod:`.handles` (the registry, read only by this package).
"""

from __future__ import annotations

from .. import _library
from .._native import ffi as ffi
from .._native import lib as lib
from .._probe import ArchStatus as ArchStatus
from ..enums import CPU_ARCHS as CPU_ARCHS
from ..enums import DATA_TYPE_SIZE as DATA_TYPE_SIZE
from ..enums import LLVM_ARCHS as LLVM_ARCHS
from ..enums import SCALAR_ARGUMENT_TYPES as SCALAR_ARGUMENT_TYPES
from ..enums import Arch as Arch
from ..enums import ArgumentType as ArgumentType
from ..enums import Capability as Capability
from ..enums import DataType as DataType
from ..enums import ImageLayout as ImageLayout
from ..errors import clear_last_error
from . import coerce as coerce
from . import handles as handles
from . import structs as structs
from .coerce import enum_arg, pack_arguments, pack_named_arguments
from .core import MAX_ND_DIMS as MAX_ND_DIMS
from .core import NULL as NULL
from .core import (
    allocate_image,
    allocate_memory,
    arch_status,
    copy_image_device_to_device,
    copy_memory_device_to_device,
    create_runtime,
    create_sampler,
    destroy_runtime,
    destroy_sampler,
    flush,
    free_image,
    free_memory,
    get_available_archs,
    get_available_devices,
    get_last_error,
    get_last_error_code,
    get_runtime_capabilities,
    get_version,
    launch_compute_graph,
    launch_kernel,
    map_memory,
    memcpy_host,
    memory_size,
    pending_flag,
    runtime_arch,
    runtime_threads,
    set_last_error,
    set_runtime_capabilities_ext,
    track_image,
    track_image_ext,
    transition_image,
    unmap_memory,
    wait,
)
from .handles import live_handle_count
from .interop import (
    create_vulkan_runtime_ext,
    export_cpu_memory,
    export_cuda_memory,
    export_opengl_image,
    export_opengl_memory,
    export_opengl_runtime,
    export_vulkan_image,
    export_vulkan_memory,
    export_vulkan_runtime,
    get_cuda_stream,
    import_cpu_memory,
    import_cuda_memory,
    import_opengl_image,
    import_opengl_memory,
    import_opengl_runtime,
    import_vulkan_image,
    import_vulkan_memory,
    import_vulkan_runtime,
    set_cuda_stream,
)
from .modules import (
    create_aot_module,
    create_checked,
    destroy_aot_module,
    get_aot_module_compute_graph,
    get_aot_module_kernel,
    load_aot_module,
    load_checked,
)
from .structs import (  # the C structures as ctypes classes that take this package's handles
    CapabilityList,
    TiArgument,
    TiArgumentValue,
    TiCapabilityLevelInfo,
    TiImageAllocateInfo,
    TiImageExtent,
    TiImageOffset,
    TiImageSlice,
    TiMemoryAllocateInfo,
    TiMemorySlice,
    TiNamedArgument,
    TiNdArray,
    TiNdShape,
    TiSamplerCreateInfo,
    TiScalar,
    TiScalarValue,
    TiTensor,
    TiTensorValue,
    TiTensorValueWithLength,
    TiTexture,
)

#: The loaded library: path, install folder, version.
library = _library.info

__all__ = [
    "CapabilityList",
    "TiArgument",
    "TiArgumentValue",
    "TiCapabilityLevelInfo",
    "TiImageAllocateInfo",
    "TiImageExtent",
    "TiImageOffset",
    "TiImageSlice",
    "TiMemoryAllocateInfo",
    "TiMemorySlice",
    "TiNamedArgument",
    "TiNdArray",
    "TiNdShape",
    "TiSamplerCreateInfo",
    "TiScalar",
    "TiScalarValue",
    "TiTensor",
    "TiTensorValue",
    "TiTensorValueWithLength",
    "TiTexture",
    "allocate_image",
    "allocate_memory",
    "arch_status",
    "clear_last_error",
    "copy_image_device_to_device",
    "copy_memory_device_to_device",
    "create_aot_module",
    "create_checked",
    "create_runtime",
    "create_sampler",
    "create_vulkan_runtime_ext",
    "destroy_aot_module",
    "destroy_runtime",
    "destroy_sampler",
    "enum_arg",
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
    "get_last_error_code",
    "get_runtime_capabilities",
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
    "load_checked",
    "map_memory",
    "memcpy_host",
    "memory_size",
    "pack_arguments",
    "pack_named_arguments",
    "pending_flag",
    "runtime_arch",
    "runtime_threads",
    "set_cuda_stream",
    "set_last_error",
    "set_runtime_capabilities_ext",
    "track_image",
    "track_image_ext",
    "transition_image",
    "unmap_memory",
    "wait",
]
