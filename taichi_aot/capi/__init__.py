"""The flat, checked Taichi C-API: one Python function per C function.

Names drop the ``ti_`` prefix (``ti_track_image_ext`` is :func:`track_image_ext`, also :func:`track_image`).
A handle a function returns is a :class:`Handle`: an int (what a ctypes structure's ``c_void_p`` field takes) that
keeps its C type and its cffi pointer (``cdata``); the functions take Handles and cffi pointers alike. Struct
parameters take the cffi struct (or a pointer to one), a plain ``dict``, keyword arguments, or a ctypes structure
of the C layout.

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
from . import core as _core
from . import handles as handles
from . import interop as _interop
from . import modules as _modules
from . import structs as structs
from .coerce import Handle, enum_arg, flat, pack_arguments, pack_named_arguments
from .core import MAX_ND_DIMS as MAX_ND_DIMS
from .core import NULL as NULL
from .core import (
    arch_status,
    get_available_archs,
    get_available_devices,
    get_last_error,
    get_last_error_code,
    get_version,
    set_last_error,
)
from .handles import live_handle_count
from .interop import (
    get_cuda_stream,
    set_cuda_stream,
)
from .modules import (
    create_checked,
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

# The flat functions as exported: a Handle given to them reaches them as its cffi pointer, a handle they return is a
# Handle (coerce.flat): an int that a ctypes structure of the C layout takes in its c_void_p fields.
allocate_image = flat(_core.allocate_image)
allocate_memory = flat(_core.allocate_memory)
copy_image_device_to_device = flat(_core.copy_image_device_to_device)
copy_memory_device_to_device = flat(_core.copy_memory_device_to_device)
create_runtime = flat(_core.create_runtime)
create_sampler = flat(_core.create_sampler)
destroy_runtime = flat(_core.destroy_runtime)
destroy_sampler = flat(_core.destroy_sampler)
flush = flat(_core.flush)
free_image = flat(_core.free_image)
free_memory = flat(_core.free_memory)
get_runtime_capabilities = flat(_core.get_runtime_capabilities)
launch_compute_graph = flat(_core.launch_compute_graph)
launch_kernel = flat(_core.launch_kernel)
map_memory = flat(_core.map_memory)
memcpy_host = flat(_core.memcpy_host)
memory_size = flat(_core.memory_size)
pending_flag = flat(_core.pending_flag)
runtime_arch = flat(_core.runtime_arch)
runtime_threads = flat(_core.runtime_threads)
set_runtime_capabilities_ext = flat(_core.set_runtime_capabilities_ext)
track_image = flat(_core.track_image)
transition_image = flat(_core.transition_image)
unmap_memory = flat(_core.unmap_memory)
wait = flat(_core.wait)
create_vulkan_runtime_ext = flat(_interop.create_vulkan_runtime_ext)
export_cpu_memory = flat(_interop.export_cpu_memory)
export_cuda_memory = flat(_interop.export_cuda_memory)
export_opengl_image = flat(_interop.export_opengl_image)
export_opengl_memory = flat(_interop.export_opengl_memory)
export_opengl_runtime = flat(_interop.export_opengl_runtime)
export_vulkan_image = flat(_interop.export_vulkan_image)
export_vulkan_memory = flat(_interop.export_vulkan_memory)
export_vulkan_runtime = flat(_interop.export_vulkan_runtime)
import_cpu_memory = flat(_interop.import_cpu_memory)
import_cuda_memory = flat(_interop.import_cuda_memory)
import_opengl_image = flat(_interop.import_opengl_image)
import_opengl_memory = flat(_interop.import_opengl_memory)
import_opengl_runtime = flat(_interop.import_opengl_runtime)
import_vulkan_image = flat(_interop.import_vulkan_image)
import_vulkan_memory = flat(_interop.import_vulkan_memory)
import_vulkan_runtime = flat(_interop.import_vulkan_runtime)
create_aot_module = flat(_modules.create_aot_module)
destroy_aot_module = flat(_modules.destroy_aot_module)
get_aot_module_compute_graph = flat(_modules.get_aot_module_compute_graph)
get_aot_module_kernel = flat(_modules.get_aot_module_kernel)
load_aot_module = flat(_modules.load_aot_module)
track_image_ext = track_image  # its name in the C-API (ti_track_image_ext)

#: The loaded library: path, install folder, version.
library = _library.info

__all__ = [
    "CapabilityList",
    "Handle",
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
