"""The CUDA driver, bound once for the package (ctypes), and what every CUDA room asks of it: contexts (each
device's primary context, retained once; the context a pointer lives in), streams and events (ordering one stream
after another, capture), pointer attributes, error names, and the driver tables handed to the extension's C.

Taichi 1.7.4's C-API lacks most of this on CUDA memory (its ``ti_copy_memory_device_to_device`` reports NOT_SUPPORTED
on LLVM backends): the object layer asks the driver itself, each call in the context that owns the pointer (pushed,
then popped) or, for pointers that name none, in the runtime's context. How host arrays move to and from the device
(page-locked arrays, the page-lock budget, staged copies) is :mod:`taichi_aot.drivers.cuda_host`'s.
"""

from __future__ import annotations

import ctypes
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from .._native import ffi as _ffi
from ..errors import InvalidStateError

#: The CUDA device a Taichi 1.7.4 runtime drives: its CUDA context is always made on device 0 (of the
#: devices the process sees; a pool's CUDA worker sees only its own GPU, as device 0). No default of what else runs
#: on a GPU: the own runtime lives on any, so every function here that works on a device is told which.
RUNTIME_DEVICE = 0
_lock = threading.Lock()
_driver = None
#: The driver's copy functions for the extension's taichi_aot_cuda_transfer (set with _driver).
_driver_functions: Any = None
_POINTER_ATTRIBUTE_CONTEXT, _POINTER_ATTRIBUTE_MEMORY_TYPE, _POINTER_ATTRIBUTE_DEVICE_ORDINAL = 1, 2, 9
_MEMORYTYPE_HOST = 1
_STREAM_NON_BLOCKING = 1
_EVENT_DISABLE_TIMING = 2
_NOT_READY = 600  # CUDA_ERROR_NOT_READY
_CAPTURE_MODE_RELAXED = 2  # CU_STREAM_CAPTURE_MODE_RELAXED
#: The driver's table (``TaichiAotCudaDriver``, _csrc/taichi_aot.h): each field and the driver function it holds.
DRIVER_TABLE = {
    "push": "cuCtxPushCurrent_v2", "pop": "cuCtxPopCurrent_v2", "htod": "cuMemcpyHtoD_v2", "dtoh": "cuMemcpyDtoH_v2",
    "launch": "cuLaunchKernel", "current": "cuCtxGetCurrent", "sync": "cuStreamSynchronize",
    "memset": "cuMemsetD32Async", "capturing": "cuStreamIsCapturing", "memset8_async": "cuMemsetD8Async",
    "htod_async": "cuMemcpyHtoDAsync_v2", "dtod_async": "cuMemcpyDtoDAsync_v2", "error_name": "cuGetErrorName",
    "ctx_device": "cuCtxGetDevice", "pointer_attribute": "cuPointerGetAttribute",
    "event_create": "cuEventCreate", "event_record": "cuEventRecord", "event_query": "cuEventQuery",
    "event_sync": "cuEventSynchronize", "event_elapsed": "cuEventElapsedTime", "event_destroy": "cuEventDestroy_v2"}


def _cuda() -> ctypes.CDLL:
    global _driver
    if _driver is not None:  # no lock once loaded: a collected array's finalizer may call in under _lock
        return _driver
    with _lock:
        if _driver is None:
            lib = ctypes.CDLL("libcuda.so.1")
            ptr, size, vp = ctypes.c_uint64, ctypes.c_size_t, ctypes.c_void_p
            pvp, i32 = ctypes.POINTER(vp), ctypes.c_int
            for name, args in (("cuMemcpyHtoD_v2", (ptr, vp, size)), ("cuMemcpyDtoH_v2", (vp, ptr, size)),
                               ("cuMemcpyDtoD_v2", (ptr, ptr, size)), ("cuMemsetD8_v2", (ptr, ctypes.c_ubyte, size)),
                               ("cuMemcpyHtoDAsync_v2", (ptr, vp, size, vp)),
                               ("cuMemcpyDtoHAsync_v2", (vp, ptr, size, vp)),
                               ("cuPointerGetAttribute", (ctypes.POINTER(ctypes.c_uint64), ctypes.c_int, ptr)),
                               ("cuCtxPushCurrent_v2", (vp,)), ("cuCtxPopCurrent_v2", (pvp,)),
                               ("cuInit", (ctypes.c_uint,)), ("cuDeviceGet", (ctypes.POINTER(i32), i32)),
                               ("cuDevicePrimaryCtxRetain", (pvp, i32)),
                               ("cuMemHostAlloc", (pvp, size, ctypes.c_uint)), ("cuMemFreeHost", (vp,)),
                               ("cuMemHostRegister_v2", (vp, size, ctypes.c_uint)), ("cuMemHostUnregister", (vp,)),
                               ("cuStreamSynchronize", (vp,)),
                               ("cuStreamGetFlags", (vp, ctypes.POINTER(ctypes.c_uint))),
                               ("cuStreamIsCapturing", (vp, ctypes.POINTER(i32))),
                               ("cuThreadExchangeStreamCaptureMode", (ctypes.POINTER(i32),)),
                               ("cuEventCreate", (pvp, ctypes.c_uint)), ("cuEventRecord", (vp, vp)),
                               ("cuEventSynchronize", (vp,)), ("cuEventDestroy_v2", (vp,)), ("cuEventQuery", (vp,)),
                               ("cuStreamWaitEvent", (vp, vp, ctypes.c_uint)),
                               ("cuDeviceGetName", (ctypes.c_char_p, i32, i32)),
                               # the own CUDA launcher's (backends/cuda.py)
                               ("cuModuleLoadData", (pvp, ctypes.c_char_p)),
                               ("cuModuleGetFunction", (pvp, vp, ctypes.c_char_p)), ("cuModuleUnload", (vp,)),
                               ("cuModuleGetGlobal_v2", (ctypes.POINTER(ptr), ctypes.POINTER(size), vp,
                                                         ctypes.c_char_p)),
                               ("cuMemsetD32Async", (ptr, ctypes.c_uint, size, vp)),
                               ("cuMemAlloc_v2", (ctypes.POINTER(ptr), size)), ("cuMemFree_v2", (ptr,)),
                               ("cuMemAllocManaged", (ctypes.POINTER(ptr), size, ctypes.c_uint)),
                               ("cuDeviceGetCount", (ctypes.POINTER(i32),)),
                               ("cuCtxGetCurrent", (pvp,)), ("cuCtxSynchronize", ()), ("cuCtxSetCurrent", (vp,)),
                               ("cuStreamGetCtx", (vp, pvp)), ("cuCtxGetDevice", (ctypes.POINTER(i32),)),
                               ("cuLaunchKernel", (vp, *(ctypes.c_uint,) * 7, vp, vp, vp))):
                fn = getattr(lib, name)
                fn.argtypes = args
                fn.restype = ctypes.c_int
            global _driver_functions
            _driver_functions = functions_struct(lib, "TaichiAotCudaDriver", DRIVER_TABLE)
            _driver = lib
        return _driver


def function(lib: ctypes.CDLL, name: str) -> Any:
    """The address of the driver's function ``name``, as a cffi ``void *`` (the extension's C calls it directly)."""
    return _ffi.cast("void *", ctypes.cast(getattr(lib, name), ctypes.c_void_p).value)


def functions_struct(lib: ctypes.CDLL, ctype: str, fields: dict[str, str]) -> Any:
    """A new C struct ``ctype`` whose ``fields`` hold the addresses of the driver's functions of those names."""
    out = _ffi.new(ctype + " *")
    for field, name in fields.items():
        setattr(out, field, function(lib, name))
    return out


def driver() -> ctypes.CDLL:
    """libcuda, loaded once (raises where it is absent)."""
    return _driver or _cuda()


def table() -> Any:
    """The driver's table every C file of the package calls it through (``TaichiAotCudaDriver *``: the copies of
    ``cuda.c``, the own launcher's launches, the op cells), filled once a process; kept for its life."""
    if _driver_functions is None:
        _cuda()
    return _driver_functions


def error_name(code: int) -> str:
    """A CUDA driver error ``code`` as its name and number ("CUDA_ERROR_ILLEGAL_ADDRESS (700)"; the number alone
    where the driver cannot be asked)."""
    name = ctypes.c_char_p()
    try:
        found = driver().cuGetErrorName(ctypes.c_int(code), ctypes.byref(name))
    except (OSError, AttributeError):
        found = -1
    return f"{name.value.decode('ascii', 'replace')} ({code})" if found == 0 and name.value else str(code)


@contextmanager
def relaxed_capture() -> Iterator[None]:
    """The block's driver calls on this thread (a free, an unregistration: through libtaichi too) in the driver's
    relaxed capture mode: where another library is capturing a CUDA graph meanwhile (torch's ``torch.cuda.graph``,
    in the driver's global mode), an object of this package collected or closed inside its capture no longer
    invalidates the capture (a ``cuMemFree`` would: torch then raised "operation failed due to a previous error
    during capture"). Nothing is done where the package has not loaded libcuda (no CUDA runtime was made)."""
    lib = _driver
    mode = ctypes.c_int(_CAPTURE_MODE_RELAXED)
    swapped = lib is not None and lib.cuThreadExchangeStreamCaptureMode(ctypes.byref(mode)) == 0
    try:
        yield
    finally:
        if swapped and lib is not None:
            lib.cuThreadExchangeStreamCaptureMode(ctypes.byref(mode))  # the thread's mode before


def relaxed(release: Callable[[], object]) -> None:
    """``release()`` under :func:`relaxed_capture` where libcuda is loaded, else as it is (no cost off CUDA)."""
    if _driver is None:
        release()
        return
    with relaxed_capture():
        release()


def check(code: int, what: str) -> None:
    if code != 0:
        raise InvalidStateError(f"{what}: the CUDA driver returned error {error_name(code)}")


def context_of(device_ptr: int) -> int:
    """The CUcontext (as an integer) that owns ``device_ptr``. Memory mapped with the virtual memory API (Taichi's)
    names none: its device's primary context then, the one Taichi 1.7.4 maps it in (another library may have left
    another GPU's context current on the thread: XLA leaves the one it ran on)."""
    cu, ctx = _cuda(), ctypes.c_uint64(0)
    check(cu.cuPointerGetAttribute(ctypes.byref(ctx), _POINTER_ATTRIBUTE_CONTEXT, device_ptr),
        "find the CUDA context of a device pointer")
    if ctx.value:
        return int(ctx.value)
    device = device_of(device_ptr)
    return int(retain_primary(cu, device).value or 0)


@contextmanager
def _context_of(device_ptr: int, what: str) -> Iterator[Any]:
    """The driver, with the context that owns ``device_ptr`` current (pushed, then popped)."""
    cu, ctx = _cuda(), context_of(device_ptr)
    if ctx:
        check(cu.cuCtxPushCurrent_v2(ctypes.c_void_p(ctx)), what)
    try:
        yield cu
    finally:
        if ctx:
            cu.cuCtxPopCurrent_v2(ctypes.byref(ctypes.c_void_p()))


def dtod(dst: int, src: int, nbytes: int) -> None:
    """Copy ``nbytes`` between device pointers."""
    what = "copy within CUDA memory"
    with _context_of(src, what) as cu:
        check(cu.cuMemcpyDtoD_v2(dst, src, nbytes), what)


_orders = threading.local()  # each thread's events of order_after, a device each (one thread's never another's)


def order_after(producer: int, consumer: int | None, device: int) -> None:
    """Make ``consumer`` (a CUstream handle; None: the legacy default stream) wait on the device for the work queued
    on ``producer`` so far (what a ``__cuda_array_interface__``'s ``stream`` asks of its consumer): an event recorded
    there and waited for here, the host never waiting; nothing where both are one stream. ``device``: the GPU of
    ``producer`` (and of the array), whose primary context the event is made and recorded in. Legal while either
    stream is being captured into a CUDA graph (the wait is recorded in it)."""
    if producer == (consumer or 1) or (producer == 1 and not consumer):
        return
    events = getattr(_orders, "events", None)
    if events is None:
        events = _orders.events = {}
    with primary_context(device) as cu:
        event = events.get(device)
        if event is None:
            made = ctypes.c_void_p()
            check(cu.cuEventCreate(ctypes.byref(made), _EVENT_DISABLE_TIMING), "create a CUDA event")
            event = events[device] = made
        check(cu.cuEventRecord(event, ctypes.c_void_p(producer)), "record a CUDA event on an array's stream")
        check(cu.cuStreamWaitEvent(ctypes.c_void_p(consumer or 0), event, 0), "order a CUDA stream after an array's")


def stream_synchronize(stream: int) -> None:
    """Wait for the work queued on ``stream`` (a CUstream handle)."""
    check(_cuda().cuStreamSynchronize(ctypes.c_void_p(stream)), "synchronize a CUDA stream")


def stream_is_blocking(stream: int) -> bool:
    """Whether ``stream`` synchronizes with the legacy default stream (made without CU_STREAM_NON_BLOCKING)."""
    if stream in (0, 1):  # the legacy default stream itself
        return True
    flags = ctypes.c_uint(0)
    check(_cuda().cuStreamGetFlags(ctypes.c_void_p(stream), ctypes.byref(flags)), "read a CUDA stream's flags")
    return not flags.value & _STREAM_NON_BLOCKING


def capturing(stream: int | None) -> bool:
    """Whether ``stream`` is being captured into a CUDA graph now (None and the legacy default stream never are):
    while it is, nothing may synchronize, and memory is not allocated."""
    if not stream or stream == 1:
        return False
    status = ctypes.c_int(0)
    check(_cuda().cuStreamIsCapturing(ctypes.c_void_p(stream), ctypes.byref(status)),
        "ask whether a CUDA stream is being captured")
    return status.value != 0  # active, or invalidated (still no wait until it ends)


def event_after(stream: int | None, device: int) -> int:
    """A CUDA event recorded on ``stream`` (None: the legacy default stream) of GPU ``device``, in its primary context:
    it completes once the work queued there before it has run."""
    event = ctypes.c_void_p()
    with primary_context(device) as cu:
        check(cu.cuEventCreate(ctypes.byref(event), _EVENT_DISABLE_TIMING), "create a CUDA event")
        code = cu.cuEventRecord(event, ctypes.c_void_p(stream or 0))
        if code != 0:
            cu.cuEventDestroy_v2(event)
            check(code, "record a CUDA event")
    return int(event.value or 0)


def event_done(event: int, wait: bool = False) -> bool:
    """Whether ``event`` completed (``wait``: wait until it has); a completed event is destroyed."""
    cu = _cuda()
    code = cu.cuEventSynchronize(ctypes.c_void_p(event)) if wait else cu.cuEventQuery(ctypes.c_void_p(event))
    if code == _NOT_READY:
        return False
    cu.cuEventDestroy_v2(ctypes.c_void_p(event))
    check(code, "wait for a CUDA event")
    return True


def pointer_attribute_address() -> int:
    """The address of the driver's cuPointerGetAttribute (the C call's device check of a CUDA array: the table's),
    0 without one."""
    try:
        return int(_ffi.cast("uintptr_t", table().pointer_attribute))
    except Exception:  # no driver here: the C call takes no CUDA array by its interface anyway
        return 0


def device_of(device_ptr: int) -> int:
    """The ordinal of the device ``device_ptr`` lives on (RUNTIME_DEVICE where the driver cannot say)."""
    ordinal = ctypes.c_uint64(0)
    if _cuda().cuPointerGetAttribute(ctypes.byref(ordinal), _POINTER_ATTRIBUTE_DEVICE_ORDINAL, device_ptr) != 0:
        return RUNTIME_DEVICE
    return int(ordinal.value)


def is_pinned(host_address: int) -> bool:
    """Whether ``host_address`` is page-locked (ours, torch's pinned memory, registered memory)."""
    kind = ctypes.c_uint64(0)
    code = _cuda().cuPointerGetAttribute(ctypes.byref(kind), _POINTER_ATTRIBUTE_MEMORY_TYPE, host_address)
    return code == 0 and kind.value == _MEMORYTYPE_HOST


# -- primary contexts ------------------------------------------------------------------------

_primary: dict[int, ctypes.c_void_p] = {}  # device ordinal -> its primary context, retained once


def retain_primary(cu: Any, device: int) -> ctypes.c_void_p:
    """The primary context of CUDA device ``device`` (an ordinal), retained once for the process's life: the context
    torch, JAX and CuPy use, and the one Taichi 1.7.4 runs in on device 0."""
    ctx = _primary.get(device)
    if ctx is not None:
        return ctx
    with _lock:
        if device not in _primary:
            check(cu.cuInit(0), "initialize CUDA")
            handle, made = ctypes.c_int(0), ctypes.c_void_p()
            check(cu.cuDeviceGet(ctypes.byref(handle), device), f"find CUDA device {device}")
            check(cu.cuDevicePrimaryCtxRetain(ctypes.byref(made), handle), "retain the CUDA primary context")
            _primary[device] = made
        return _primary[device]


@contextmanager
def primary_context(device: int | None) -> Iterator[Any]:
    """The driver, with the primary context of ``device`` current (retained once, never released); None: any primary
    context retained already (device 0's where none is), for what every context sees alike (portable host memory)."""
    cu = _cuda()
    if device is None:
        device = next(iter(_primary), RUNTIME_DEVICE)
    primary = _primary.get(device) or retain_primary(cu, device)
    check(cu.cuCtxPushCurrent_v2(primary), "use the CUDA primary context")
    try:
        yield cu
    finally:
        cu.cuCtxPopCurrent_v2(ctypes.byref(ctypes.c_void_p()))


def _forget_after_fork() -> None:
    """In a forked child: the parent's CUDA contexts are unusable there; a fresh lock."""
    global _lock
    _lock = threading.Lock()
    _primary.clear()


os.register_at_fork(after_in_child=_forget_after_fork)
