"""taichi_aot: run ahead-of-time compiled Taichi kernels from Python through the Taichi C-API.

    from taichi_aot import Runtime, Arch
    with Runtime(Arch.VULKAN) as rt:
        mod = rt.load_module("physics.tcm")
        x = rt.ndarray((1024,), np.float32)
        mod.kernels["step"](x, 0.01)
        rt.wait()

``taichi_aot.capi`` is the flat, checked API (one function per C function).
"""

from __future__ import annotations

from . import (
    _built,  # noqa: F401  (first: where the compiled parts were never built, says so and what to do)
    _library,  # noqa: F401  (loads libtaichi_c_api first; ImportError if none fits)
    capi,
    enums,
    errors,
    launch,
    memory,
    metadata,
    module,
    ndarray,
)
from ._arrays import ArrayArgument
from ._version import __version__ as __version__
from .config import devices, show_config
from .enums import (
    Access,
    AddressMode,
    Arch,
    ArgumentType,
    Capability,
    DataType,
    Error,
    Filter,
    Format,
    ImageDimension,
    ImageLayout,
    ImageUsage,
    MemoryUsage,
)
from .errors import (
    ArgumentNotFoundError,
    ArgumentNullError,
    ArgumentOutOfRangeError,
    ArgumentTypeError,
    ClosedError,
    CorruptedDataError,
    ExportError,
    IncompatibleModuleError,
    InvalidArgumentError,
    InvalidInteropError,
    InvalidStateError,
    MissingFileError,
    NameNotFoundError,
    NotSupportedError,
    OutOfMemoryError,
    PoolClosedError,
    PoolError,
    ReadOnlyArrayError,
    TaichiError,
    UnknownError,
    WorkerCrashedError,
    WorkerStartError,
    WorkerTaskError,
    WrongProcessError,
    WrongThreadError,
)
from .image import Image, Sampler, Texture
from .launch import BoundLaunch, ComputeGraph, Kernel, ReturningKernel
from .memory import Memory, MemorySlice
from .module import AotModule
from .ndarray import NdArray
from .replay import LaunchSequence
from .runtime import Runtime, arch_for_module, best_arch


def freeze_support() -> None:
    """Call first thing in a program frozen by a freezer other than PyInstaller (Nuitka, cx_Freeze), as
    ``multiprocessing.freeze_support()`` is: where the process is a child taichi_aot started (its probes, a module's
    first check), it runs taichi_aot's work there and exits; else it returns at once. A frozen app's executable is
    the app, so without it taichi_aot starts no child and answers in the process (its archs then are probed anew
    each start). PyInstaller needs nothing: taichi_aot's hook does this before the app runs. Harmless anywhere
    else."""
    from ._child import serve_child

    serve_child()


# NdArray and data_type lived in taichi_aot.memory, a room below theirs now: the face keeps
# the old path working without memory.py importing upward.
for _name in ("NdArray", "data_type"):
    setattr(memory, _name, getattr(ndarray, _name))
del _name

__all__ = [
    "Access",
    "AddressMode",
    "AotModule",
    "Arch",
    "ArgumentNotFoundError",
    "ArgumentNullError",
    "ArgumentOutOfRangeError",
    "ArgumentType",
    "ArgumentTypeError",
    "ArrayArgument",
    "BoundLaunch",
    "Capability",
    "ClosedError",
    "ComputeGraph",
    "CorruptedDataError",
    "DataType",
    "Error",
    "ExportError",
    "Filter",
    "Format",
    "Image",
    "ImageDimension",
    "ImageLayout",
    "ImageUsage",
    "IncompatibleModuleError",
    "InvalidArgumentError",
    "InvalidInteropError",
    "InvalidStateError",
    "Kernel",
    "LaunchSequence",
    "Memory",
    "MemorySlice",
    "MemoryUsage",
    "MissingFileError",
    "NameNotFoundError",
    "NdArray",
    "NotSupportedError",
    "OutOfMemoryError",
    "PoolClosedError",
    "PoolError",
    "ReadOnlyArrayError",
    "ReturningKernel",
    "Runtime",
    "Sampler",
    "TaichiError",
    "Texture",
    "UnknownError",
    "WorkerCrashedError",
    "WorkerStartError",
    "WorkerTaskError",
    "WrongProcessError",
    "WrongThreadError",
    "arch_for_module",
    "best_arch",
    "capi",
    "devices",
    "enums",
    "errors",
    "freeze_support",
    "launch",
    "metadata",
    "module",
    "ndarray",
    "show_config",
]
