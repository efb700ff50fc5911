"""taichi_aot's own CUDA runtime: a runtime on any CUDA device, without libtaichi's.

libtaichi_c_api 1.7.4 makes its CUDA runtime on device 0 only, and one at a time (a process that destroys two
aborts). A CUDA runtime of our own needs none of it where every kernel of its modules runs on the own CUDA launcher
(a module with PTX: :mod:`taichi_aot.backends.cuda`): it lives in its device's *primary context* (the one torch,
JAX and CuPy use, so their memory and streams are its own), allocates ndarrays with the driver, loads each module's
PTX in that context, and waits through the driver. Several may be open at once, on one device or on several.

Which runtime a ``Runtime("cuda", device_index=k)`` gets (:func:`chosen`): the ``cuda_runtime`` it is given, else
``TAICHI_AOT_CUDA_RUNTIME``, else "auto", which is "own": taichi_aot's own on every device. On device 0 libtaichi's
runtime is made beside it for a module whose kernels need it (SNode fields, ``print``, what the PTX step refuses,
a module without PTX where llvmlite is missing, ``launcher="taichi"``): ``Runtime.library_runtime``; their launches
get the own runtime's memory as libtaichi's imports (``_csrc/imports.c``). On other devices such kernels are refused,
saying why. "taichi" asks for libtaichi's runtime alone (device 0 only, one at a time in a process).

Threads: any thread may use a runtime of the own CUDA runtime (launches, copies, waits, ops, gradients), as torch's
and CuPy's arrays are used, whichever thread made it: a launch from another thread than the runtime's packs its
arguments into a buffer of its own (``launch.py``), the launches made in Python take the runtime's lock
(``backends.RuntimeBackends.lock``), and a kernel's tasks are queued under its stand-in's (``_csrc/backends/cuda.c``).
Kernels run on the runtime's stream (:meth:`Runtime.set_cuda_stream`, one for every thread). libtaichi's runtimes
(``cuda_runtime="taichi"``, x64, Vulkan) and libtaichi's launches beside the own runtime keep to the thread that
made the runtime (WrongThreadError, saying so).

Memory of the own runtime is ``cuMemAlloc``'s (device memory), or ``cuMemAllocManaged``'s where the host maps it
(``host_access``); its ``TiMemory`` in a launch record is the device pointer tagged with ``TAICHI_AOT_POINTER_TAG``,
which the own launcher takes as it is (``_csrc/backends/cuda.c``); libtaichi never sees it.
"""

from __future__ import annotations

import ctypes
import os
import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any

from . import _cuda
from ._native import ffi, lib
from .enums import archs_instead
from .errors import (
    ArgumentOutOfRangeError,
    ArgumentTypeError,
    InvalidArgumentError,
    InvalidStateError,
    NotSupportedError,
    OutOfMemoryError,
    WrongThreadError,
)

__all__ = ["AUTO", "ENV", "LIBTAICHI", "OWN", "CudaDevice", "chosen", "device_count", "device_name", "no_library",
           "release", "stream_handle", "tagged", "wrong_thread"]

ENV = "TAICHI_AOT_CUDA_RUNTIME"
AUTO, OWN, LIBTAICHI = "auto", "own", "taichi"
_TAG = int(lib.TAICHI_AOT_POINTER_TAG)
_MEM_ATTACH_GLOBAL = 1


def chosen(given: str | None, device_index: int) -> str:
    """Which CUDA runtime a runtime on ``device_index`` gets: OWN or LIBTAICHI (``given``, else the environment's,
    else "auto": the own runtime but on device 0)."""
    if given is not None and not isinstance(given, str):
        raise ArgumentTypeError(f"cuda_runtime must be 'auto', 'own' or 'taichi', got {given!r}")
    value = (given if given is not None else os.environ.get(ENV, "")).strip().lower() or AUTO
    if value not in (AUTO, OWN, LIBTAICHI):
        where = "cuda_runtime" if given is not None else ENV
        raise InvalidArgumentError(f"{where} must be one of 'auto', 'own' or 'taichi', got {value!r}")
    if value == LIBTAICHI and device_index != 0:
        raise NotSupportedError(f"cuda_runtime='taichi' on CUDA device {device_index}: libtaichi_c_api 1.7.4 makes its "
                                "CUDA runtime on device 0 only; taichi_aot's own runtime ('own', or 'auto') drives "
                                "every device")
    return LIBTAICHI if value == LIBTAICHI else OWN


def library_absent(device: int) -> str:
    """Why libtaichi launches nothing on taichi_aot's own CUDA runtime of ``device`` (the end of a sentence)."""
    return (f"this runtime is taichi_aot's own CUDA runtime on device {device}, which has no libtaichi runtime to "
            "launch it (libtaichi_c_api 1.7.4 makes one on device 0 only): give the module PTX (python -m taichi_aot "
            "ptx, with llvmlite installed), or run it on device 0")


def no_library(device: int, owner: int) -> Exception:
    """Why the own CUDA runtime of ``device`` makes no libtaichi runtime beside it: not device 0 (NotSupportedError),
    or asked from another thread than ``owner``, the runtime's (WrongThreadError: libtaichi's runtime is the thread's
    that made the own one)."""
    if device != 0:
        return NotSupportedError(
            f"taichi_aot's own CUDA runtime on device {device} has no libtaichi runtime: libtaichi_c_api 1.7.4 makes "
            "one on device 0 only; give the module PTX (python -m taichi_aot ptx, with llvmlite installed) for the "
            "own CUDA launcher")
    return WrongThreadError(
        f"a module whose kernels libtaichi launches needs libtaichi's CUDA runtime, which is used from the thread that "
        f"made the own runtime ({owner}), not from thread {threading.get_ident()}: load it there, or give the module "
        "PTX (python -m taichi_aot ptx) for the own CUDA launcher, which any thread may use")


def wrong_thread(arch: str, owner: int, why: str = "") -> str:
    """What WrongThreadError says where a runtime of libtaichi (on ``arch``) made on thread ``owner`` is used from
    this one; ``why``: the device's own reason it keeps to its thread, with what to do (else libtaichi's)."""
    own = ", or taichi_aot's own CUDA runtime (cuda_runtime='own'), which any thread may use" if arch == "CUDA" else ""
    why = why or f"libtaichi's runtime is used from the thread that made it: create one runtime per thread{own}"
    return f"this {arch} runtime belongs to thread {owner}; it was used from thread {threading.get_ident()} ({why})"


def release(device: CudaDevice, library: list[Any]) -> None:
    """A runtime on ``device`` is destroyed (its memory and modules were given back): libtaichi's runtime made beside
    it (``library``: its handle, or empty) destroyed, its imports forgotten first; the device's work waited for."""
    if library:
        lib.taichi_aot_imports_forget(library[0])
        destroy_library_runtime(library[0])
    device.settle()


def destroy_library_runtime(handle: Any) -> None:
    """libtaichi's CUDA runtime ``handle`` destroyed in device 0's context (its teardown frees memory and waits:
    in another GPU's context, left current by another library, the driver refuses them)."""
    from . import capi

    with library_context():
        capi.destroy_runtime(handle)


def device_count() -> int:
    """How many CUDA devices this process sees (0 where the driver cannot say)."""
    cu = _cuda.driver()
    count = ctypes.c_int(0)
    if cu.cuInit(0) != 0 or cu.cuDeviceGetCount(ctypes.byref(count)) != 0:
        return 0
    return int(count.value)


def tagged(pointer: int) -> object:
    """A device pointer as a launch record's ``TiMemory``: tagged, so that the own launches take it as it is."""
    return ffi.cast("TiMemory", pointer | _TAG)


def stream_handle(stream: Any) -> int | None:
    """The CUstream handle of ``stream`` (None, an int, or a torch or CuPy stream object), checked."""
    if stream is not None and not isinstance(stream, int):
        handle = getattr(stream, "cuda_stream", None)
        if handle is None:
            handle = getattr(stream, "ptr", None)
        if not isinstance(handle, int):
            raise ArgumentTypeError(f"set_cuda_stream: {type(stream).__name__} is not a CUDA stream (a CUstream "
                                    "handle, a torch.cuda.Stream or a cupy.cuda.Stream)")
        stream = handle
    if isinstance(stream, bool) or (stream is not None and stream < 0):
        raise ArgumentTypeError(f"set_cuda_stream: {stream!r} is not a CUstream handle")
    return stream


def _stream_device(given: Any, stream: int | None) -> int | None:
    """The GPU of stream ``given`` (the object) whose handle is ``stream``: the context's the driver places it in, or,
    for a default stream (whose handle, 0, 1 or 2, names no GPU), what a torch or CuPy stream object says
    (``device_index``, ``device_id``); None: any."""
    if stream in (None, 0, 1, 2):  # the legacy and per-thread default streams: every context's, so the object's
        said = getattr(given, "device_index", getattr(given, "device_id", None))  # (CuPy's default ones say -1)
        return said if isinstance(said, int) and not isinstance(said, bool) and said >= 0 else None
    cu, ctx, found = _cuda.driver(), ctypes.c_void_p(), ctypes.c_int(-1)
    if cu.cuStreamGetCtx(ctypes.c_void_p(stream), ctypes.byref(ctx)) != 0 or not ctx.value:
        return None  # one the driver cannot place
    if cu.cuCtxPushCurrent_v2(ctx) != 0:
        return None
    try:
        known = cu.cuCtxGetDevice(ctypes.byref(found)) == 0  # a CUdevice: the driver numbers them as the ordinals
    finally:
        cu.cuCtxPopCurrent_v2(ctypes.byref(ctypes.c_void_p()))
    return int(found.value) if known else None


def check_stream(given: Any, stream: int | None, device: int) -> None:
    """Raise InvalidArgumentError where stream ``given`` (handle ``stream``) is another GPU's than ``device``: a torch
    or CuPy stream of another GPU (its default stream too), or one made in another GPU's context."""
    found = _stream_device(given, stream)
    if found is not None and found != device:
        raise InvalidArgumentError(f"set_cuda_stream: the stream is GPU {found}'s, and this runtime drives GPU "
                                   f"{device}: give a stream of its GPU (torch.cuda.current_stream({device}), a stream "
                                   f"made under cupy.cuda.Device({device}))")


@contextmanager
def library_context() -> Iterator[None]:
    """The block's libtaichi calls (its CUDA runtime made, a module loaded, memory allocated) in device 0's primary
    context, the one Taichi 1.7.4 uses and allocates in without making it current: where another context is current
    on the thread (XLA leaves the GPU's it ran on; ``torch.cuda.set_device(1)``), it is pushed and the other one
    restored after; where none is, it is made current and left so, as libtaichi's first runtime makes it (CUDA's
    runtime API, torch's and CuPy's, then takes it as device 0). Nothing where libcuda or a GPU is missing:
    libtaichi says so itself."""
    try:
        cu = _cuda.driver()
        primary = _cuda.retain_primary(cu, 0)
    except (OSError, InvalidStateError):
        yield
        return
    current = ctypes.c_void_p()
    if cu.cuCtxGetCurrent(ctypes.byref(current)) != 0 or current.value == primary.value:
        yield
        return
    if not current.value:
        cu.cuCtxSetCurrent(primary)
        yield
        return
    if cu.cuCtxPushCurrent_v2(primary) != 0:
        raise InvalidStateError("libtaichi's CUDA calls: device 0's primary context cannot be made current")
    try:
        yield
    finally:
        cu.cuCtxPopCurrent_v2(ctypes.byref(ctypes.c_void_p()))


def library_calls(cuda: bool) -> AbstractContextManager[None]:
    """:func:`library_context` for a CUDA runtime's libtaichi calls (``cuda``), else nothing."""
    return library_context() if cuda else nullcontext()


def _error(code: int, what: str) -> Exception:
    """The exception of the driver's error ``code`` (``what`` was asked): OutOfMemoryError for
    CUDA_ERROR_OUT_OF_MEMORY, else InvalidStateError (a kernel's fault stays the context's error: every later call
    reports it)."""
    message = f"{what}: the CUDA driver returned error {_cuda.error_name(code)}"
    return OutOfMemoryError(message) if code == 2 else InvalidStateError(message)


def _refused(why: str) -> NotSupportedError:
    """A CUDA runtime refused here (``why``), naming the archs that work instead."""
    from . import capi

    return NotSupportedError(f"CUDA: {why}{archs_instead(capi.arch_status(), why)}")


class CudaDevice:
    """One CUDA device as the own runtime uses it: its primary context (retained for the process's life), memory
    through the driver in that context, and waits for its work."""

    def __init__(self, ordinal: int):
        if isinstance(ordinal, bool) or not isinstance(ordinal, int):
            raise ArgumentTypeError(f"device_index must be an int, got {ordinal!r}")
        try:
            cu = _cuda.driver()
        except OSError as e:
            raise _refused(f"the driver (libcuda.so.1) cannot be loaded ({e})") from None
        count = device_count()
        if count == 0:
            code = cu.cuInit(0)
            raise _refused(f"the driver cannot start ({_cuda.error_name(code)})" if code else
                           "this process sees no CUDA device (CUDA_VISIBLE_DEVICES may hide them)")
        if not 0 <= ordinal < count:
            raise ArgumentOutOfRangeError(f"CUDA device {ordinal}: this process sees {count} CUDA "
                                          f"device{'s' if count != 1 else ''} (0 to {count - 1}; CUDA_VISIBLE_DEVICES "
                                          "may hide others)")
        self.ordinal = ordinal
        primary = _cuda.retain_primary(cu, ordinal)
        self.context = int(primary.value or 0)
        current = ctypes.c_void_p()
        if ordinal == 0 and cu.cuCtxGetCurrent(ctypes.byref(current)) == 0 and not current.value:
            # device 0's primary context current on a thread that has none, as libtaichi's runtime made its own: the
            # driver's calls there need no push (the launches, a C program's copies), and CUDA's runtime API (torch,
            # CuPy) takes it as device 0, its default; another device's is pushed where it is used, never left current
            cu.cuCtxSetCurrent(primary)

    def alloc(self, nbytes: int, managed: bool) -> int:
        """``nbytes`` of device memory (``managed``: managed memory, which the host can address too)."""
        ptr = ctypes.c_uint64()
        with _cuda.primary_context(self.ordinal) as cu:
            code = (cu.cuMemAllocManaged(ctypes.byref(ptr), nbytes, _MEM_ATTACH_GLOBAL) if managed
                    else cu.cuMemAlloc_v2(ctypes.byref(ptr), nbytes))
        if code != 0:
            raise _error(code, f"allocate_memory: {nbytes} bytes of {'managed' if managed else 'device'} memory on "
                               f"CUDA device {self.ordinal}")
        return int(ptr.value)

    def free(self, pointer: int) -> None:
        """Give ``pointer`` back (its work is done: the caller's runtime waited), in the driver's relaxed capture
        mode (another library may be capturing a CUDA graph)."""
        with _cuda.relaxed_capture(), _cuda.primary_context(self.ordinal) as cu:
            cu.cuMemFree_v2(pointer)

    def memset(self, pointer: int, nbytes: int) -> None:
        """Zero ``nbytes`` at ``pointer``, done before this returns (on the legacy default stream, waited for: a
        kernel on any stream, a non-blocking one too, finds the memory zeroed)."""
        with _cuda.primary_context(self.ordinal) as cu:
            code = cu.cuMemsetD8_v2(pointer, 0, nbytes)
            code = code or cu.cuStreamSynchronize(None)
        if code != 0:
            raise _error(code, f"zero {nbytes} bytes on CUDA device {self.ordinal}")

    def synchronize(self) -> None:
        """Wait for the work queued on the legacy default stream of the device's primary context (the runtime's own
        stream where it has none set; the runtime waits for a stream it set itself). Not cuCtxSynchronize: that would
        wait for other libraries' streams too, and is refused while another thread captures a CUDA graph."""
        with _cuda.primary_context(self.ordinal) as cu:
            code = cu.cuStreamSynchronize(None)
        if code != 0:
            raise _error(code, f"wait for CUDA device {self.ordinal}")

    def settle(self) -> None:
        """A runtime on the device is destroyed: its work waited for, quietly (an error is the next user's to see)."""
        try:
            with _cuda.primary_context(self.ordinal) as cu:
                cu.cuStreamSynchronize(None)
        except Exception:  # the driver is gone (interpreter exit)
            pass

    def name(self) -> str:
        """The device's name, as the driver gives it."""
        return device_name(self.ordinal)


def device_name(ordinal: int) -> str:
    """CUDA device ``ordinal``'s name, as the driver gives it."""
    buffer = ctypes.create_string_buffer(256)
    with _cuda.primary_context(ordinal) as cu:
        handle = ctypes.c_int(0)
        cu.cuDeviceGet(ctypes.byref(handle), ordinal)
        cu.cuDeviceGetName(buffer, 256, handle)
    return buffer.value.decode("utf-8", "replace")
