"""CUDA driver calls for what the C-API of Taichi 1.7.4 lacks on CUDA memory.

Its ``ti_copy_memory_device_to_device`` reports NOT_SUPPORTED on LLVM backends (CUDA included),
so device memory could neither be filled nor read back. The object layer copies with the driver
instead: ``ti_export_cuda_memory`` gives the device pointer, and each call runs in the context
that owns the pointer (pushed, then popped) or, for pointers that name none, in the runtime's
context, current on the runtime's thread.

Transfers from pageable host memory (any numpy array) run at half the bus's speed or less when
the driver stages them itself. From 16 MiB up they go through two page-locked staging buffers of
our own instead: host copies (several threads) into one buffer overlap the DMA out of the other.
Page-locked memory is allocated in the device's primary context (retained for the life of the
process, with ``CU_MEMHOSTALLOC_PORTABLE``), so it outlives every Taichi runtime; arrays of it
(:func:`pinned_array`) are copied directly, at the bus's full speed.
"""

from __future__ import annotations

import ctypes
import os
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

import numpy as np

from .errors import InvalidStateError, OutOfMemoryError

#: The CUDA device a Taichi 1.7.4 runtime drives: its CUDA context is always made on device 0 (of the
#: devices the process sees; a pool's CUDA worker sees only its own GPU, as device 0).
RUNTIME_DEVICE = 0
#: Transfers of at least this many bytes from or to pageable memory are staged through page-locked buffers
#: (below it the driver's own pageable copy was faster on an H100 host: 9.4 against 5.6 GB/s at 1 MiB).
STAGE_MIN = 16 << 20
#: Size of each of the two staging buffers; host copies of a chunk are split over threads in pieces of
#: at least MEMCPY_PIECE bytes.
CHUNK = 8 << 20
MEMCPY_PIECE = 1 << 20
_THREADS = max(1, min(4, (os.cpu_count() or 2) // 2))  # 4 was best on an H100 host (8 and 16 slower)

_lock = threading.Lock()
_driver = None
_POINTER_ATTRIBUTE_CONTEXT, _POINTER_ATTRIBUTE_MEMORY_TYPE, _POINTER_ATTRIBUTE_DEVICE_ORDINAL = 1, 2, 9
_MEMORYTYPE_HOST = 1
_MEMHOSTALLOC_PORTABLE = 1
_STREAM_NON_BLOCKING = 1
_EVENT_DISABLE_TIMING = 2


def _cuda() -> ctypes.CDLL:
    global _driver
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
                               ("cuStreamSynchronize", (vp,)),
                               ("cuStreamGetFlags", (vp, ctypes.POINTER(ctypes.c_uint))),
                               ("cuEventCreate", (pvp, ctypes.c_uint)), ("cuEventRecord", (vp, vp)),
                               ("cuEventSynchronize", (vp,)), ("cuEventDestroy_v2", (vp,))):
                fn = getattr(lib, name)
                fn.argtypes = args
                fn.restype = ctypes.c_int
            _driver = lib
        return _driver


def _ok(code: int, what: str) -> None:
    if code != 0:
        raise InvalidStateError(f"{what}: the CUDA driver returned error {code}")


@contextmanager
def _context_of(device_ptr: int, what: str) -> Iterator[Any]:
    """The driver, with the context that owns ``device_ptr`` current (pushed, then popped)."""
    cu = _cuda()
    ctx = ctypes.c_uint64(0)  # a CUcontext, read as a pointer-sized integer
    _ok(cu.cuPointerGetAttribute(ctypes.byref(ctx), _POINTER_ATTRIBUTE_CONTEXT, device_ptr), what)
    if not ctx.value:
        # Taichi maps its memory with the virtual memory API: such pointers name no context, and
        # the runtime's own context is current on its thread (the only thread that may use it)
        yield cu
        return
    _ok(cu.cuCtxPushCurrent_v2(ctypes.c_void_p(ctx.value)), what)
    try:
        yield cu
    finally:
        cu.cuCtxPopCurrent_v2(ctypes.byref(ctypes.c_void_p()))


def htod(dst: int, src: int, nbytes: int) -> None:
    """Copy ``nbytes`` from host address ``src`` to device pointer ``dst`` (staged from 16 MiB of pageable memory)."""
    _transfer(dst, src, nbytes, to_device=True)


def dtoh(dst: int, src: int, nbytes: int) -> None:
    """Copy ``nbytes`` from device pointer ``src`` to host address ``dst`` (staged from 16 MiB of pageable memory)."""
    _transfer(src, dst, nbytes, to_device=False)


def _transfer(device: int, host: int, nbytes: int, *, to_device: bool) -> None:
    what = "copy to CUDA memory" if to_device else "copy from CUDA memory"
    with _context_of(device, what) as cu:
        if nbytes >= STAGE_MIN and not is_pinned(host):
            with _staging_lock:
                _staged(cu, what, nbytes, to_device=to_device, device=device, host=host)
        elif to_device:
            _ok(cu.cuMemcpyHtoD_v2(device, host, nbytes), what)
        else:
            _ok(cu.cuMemcpyDtoH_v2(host, device, nbytes), what)


def dtod(dst: int, src: int, nbytes: int) -> None:
    """Copy ``nbytes`` between device pointers."""
    what = "copy within CUDA memory"
    with _context_of(src, what) as cu:
        _ok(cu.cuMemcpyDtoD_v2(dst, src, nbytes), what)


def stream_synchronize(stream: int) -> None:
    """Wait for the work queued on ``stream`` (a CUstream handle)."""
    _ok(_cuda().cuStreamSynchronize(ctypes.c_void_p(stream)), "synchronize a CUDA stream")


def stream_is_blocking(stream: int) -> bool:
    """Whether ``stream`` synchronizes with the legacy default stream (made without CU_STREAM_NON_BLOCKING)."""
    if stream in (0, 1):  # the legacy default stream itself
        return True
    flags = ctypes.c_uint(0)
    _ok(_cuda().cuStreamGetFlags(ctypes.c_void_p(stream), ctypes.byref(flags)), "read a CUDA stream's flags")
    return not flags.value & _STREAM_NON_BLOCKING


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


# -- page-locked host memory ---------------------------------------------------------------

_primary: ctypes.c_void_p | None = None


@contextmanager
def _primary_context() -> Iterator[Any]:
    """The driver, with device 0's primary context current (retained once, never released)."""
    global _primary
    cu = _cuda()
    with _lock:
        if _primary is None:
            _ok(cu.cuInit(0), "initialize CUDA")
            device, ctx = ctypes.c_int(0), ctypes.c_void_p()
            _ok(cu.cuDeviceGet(ctypes.byref(device), RUNTIME_DEVICE), "find the CUDA device")
            _ok(cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), device), "retain the CUDA primary context")
            _primary = ctx
    _ok(cu.cuCtxPushCurrent_v2(_primary), "use the CUDA primary context")
    try:
        yield cu
    finally:
        cu.cuCtxPopCurrent_v2(ctypes.byref(ctypes.c_void_p()))


def host_alloc(nbytes: int) -> int:
    """``nbytes`` of page-locked host memory (portable: every context sees it as pinned)."""
    ptr = ctypes.c_void_p()
    with _primary_context() as cu:
        code = cu.cuMemHostAlloc(ctypes.byref(ptr), max(nbytes, 1), _MEMHOSTALLOC_PORTABLE)
    if code != 0 or not ptr.value:
        raise OutOfMemoryError(f"page-locked host memory of {nbytes} bytes: the CUDA driver returned error {code}")
    return int(ptr.value)


def host_free(ptr: int) -> None:
    with _primary_context() as cu:
        cu.cuMemFreeHost(ctypes.c_void_p(ptr))


class _PinnedBlock:
    """Page-locked memory for a numpy array's base: freed when the last array over it is collected."""

    def __init__(self, nbytes: int):
        self.ptr = host_alloc(nbytes)
        self.__array_interface__ = {"shape": (nbytes,), "typestr": "|u1", "data": (self.ptr, False), "version": 3}

    def __del__(self) -> None:
        ptr, self.ptr = self.ptr, 0
        if ptr:
            try:
                host_free(ptr)
            except Exception:  # the driver is gone (interpreter exit): the process frees it
                pass


def pinned_array(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """A zero-filled numpy array in page-locked memory."""
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    raw = np.asarray(_PinnedBlock(nbytes))[:nbytes]
    raw[:] = 0
    return raw.view(dtype).reshape(shape)


# -- staged transfers -------------------------------------------------------------------------

_staging_lock = threading.Lock()
_staging: list[int] = []
_copier: ThreadPoolExecutor | None = None


def _memcpy(dst: int, src: int, nbytes: int) -> None:
    """A host copy, split over threads where it is large (ctypes.memmove runs without the GIL)."""
    global _copier
    pieces = min(_THREADS, nbytes // MEMCPY_PIECE)
    if pieces <= 1:
        ctypes.memmove(dst, src, nbytes)
        return
    if _copier is None:
        _copier = ThreadPoolExecutor(_THREADS, thread_name_prefix="taichi_aot-copy")
    step = -(-nbytes // pieces)
    spans = [(o, min(step, nbytes - o)) for o in range(0, nbytes, step)]
    for f in [_copier.submit(ctypes.memmove, dst + o, src + o, n) for o, n in spans]:
        f.result()


def _staged(cu: Any, what: str, nbytes: int, *, to_device: bool, device: int, host: int) -> None:
    """A transfer through the two staging buffers, host copies overlapping DMA (the legacy default stream:
    ordered after the runtime's kernels, as the plain copies are)."""
    if not _staging:
        _staging.extend(host_alloc(CHUNK) for _ in range(2))
    events = [ctypes.c_void_p(), ctypes.c_void_p()]
    for e in events:
        _ok(cu.cuEventCreate(ctypes.byref(e), _EVENT_DISABLE_TIMING), what)
    stream = ctypes.c_void_p(0)
    chunks = [(o, min(CHUNK, nbytes - o)) for o in range(0, nbytes, CHUNK)]
    try:
        if to_device:
            for i, (off, n) in enumerate(chunks):
                k = i & 1
                if i >= 2:  # the DMA that last read this buffer is done
                    _ok(cu.cuEventSynchronize(events[k]), what)
                _memcpy(_staging[k], host + off, n)
                _ok(cu.cuMemcpyHtoDAsync_v2(device + off, ctypes.c_void_p(_staging[k]), n, stream), what)
                _ok(cu.cuEventRecord(events[k], stream), what)
            _ok(cu.cuStreamSynchronize(stream), what)
        else:
            def fetch(i: int) -> None:
                off, n = chunks[i]
                _ok(cu.cuMemcpyDtoHAsync_v2(ctypes.c_void_p(_staging[i & 1]), device + off, n, stream), what)
                _ok(cu.cuEventRecord(events[i & 1], stream), what)

            fetch(0)
            for i, (off, n) in enumerate(chunks):
                if i + 1 < len(chunks):
                    fetch(i + 1)  # its buffer's last host copy (chunk i - 1) is done
                _ok(cu.cuEventSynchronize(events[i & 1]), what)
                _memcpy(host + off, _staging[i & 1], n)
    finally:
        for e in events:
            cu.cuEventDestroy_v2(e)
