"""taichi_aot's own CUDA runtime's driver half: a CUDA device as the own runtime uses it (:class:`CudaDevice`: its
primary context, memory and waits through the driver), the streams a caller hands a runtime (their handles and GPUs),
device 0's primary context for libtaichi's CUDA calls, and the tagged pointer the own launches take. Which runtime a
``Runtime("cuda")`` gets, and what is refused where, is :mod:`taichi_aot._cudart`'s."""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from .._native import ffi, lib
from ..errors import (
    ArgumentOutOfRangeError,
    ArgumentTypeError,
    InvalidArgumentError,
    InvalidStateError,
    NotSupportedError,
    OutOfMemoryError,
)
from . import cuda as _cuda

__all__ = ["CudaDevice", "check_stream", "device_count", "device_name", "library_context", "stream_handle", "tagged"]

_TAG = int(lib.TAICHI_AOT_POINTER_TAG)
_MEM_ATTACH_GLOBAL = 1


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


def _refused(why: str) -> Exception:
    return NotSupportedError(f"CUDA: {why}")


def _error(code: int, what: str) -> Exception:
    """The exception of the driver's error ``code`` (``what`` was asked): OutOfMemoryError for
    CUDA_ERROR_OUT_OF_MEMORY, else InvalidStateError (a kernel's fault stays the context's error: every later call
    reports it)."""
    message = f"{what}: the CUDA driver returned error {_cuda.error_name(code)}"
    return OutOfMemoryError(message) if code == 2 else InvalidStateError(message)


class CudaDevice:
    """One CUDA device as the own runtime uses it: its primary context (retained for the process's life), memory
    through the driver in that context, and waits for its work."""

    def __init__(self, ordinal: int, refused: Callable[[str], Exception] | None = None):
        """Device ``ordinal``, its primary context retained; ``refused`` makes the error of a device the driver
        refuses from why (default: NotSupportedError saying it)."""
        refused = refused or _refused
        if isinstance(ordinal, bool) or not isinstance(ordinal, int):
            raise ArgumentTypeError(f"device_index must be an int, got {ordinal!r}")
        try:
            cu = _cuda.driver()
        except OSError as e:
            raise refused(f"the driver (libcuda.so.1) cannot be loaded ({e})") from None
        count = device_count()
        if count == 0:
            code = cu.cuInit(0)
            raise refused(f"the driver cannot start ({_cuda.error_name(code)})" if code else
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
