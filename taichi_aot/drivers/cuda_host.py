"""How host arrays move to and from CUDA memory: page-locked arrays, the page-lock budget, staged copies.

Transfers from pageable host memory (any numpy array) run at a quarter of the bus's speed when the driver stages them
itself. A numpy array of 1 MiB or more that moves a second time is page-locked where it lies (``cuMemHostRegister``:
its whole allocation, once, within a budget) and copied directly from then on; it is unregistered when the array that
owns the memory is collected, before numpy frees it (the pages policy is :mod:`taichi_aot._hostpages`', which a
Vulkan runtime's imports share). The first transfer of an array goes through two page-locked
staging buffers of our own from 16 MiB up: host copies (several threads) into one buffer overlap the DMA out of the
other. Page-locked memory is allocated and registered in the device's primary context (retained for the life of the
process, portable: every context sees it as pinned), so it outlives every Taichi runtime; arrays of it
(:func:`pinned_array`) are copied directly, at the bus's full speed. The driver itself is
:mod:`taichi_aot.drivers.cuda`'s.
"""

from __future__ import annotations

import ctypes
import os
import threading
from typing import Any, Callable

import numpy as np

from .. import _hostpages
from .._hostpages import HostPages, Pin, register_limit
from .._native import ffi as _ffi
from .._native import lib as _lib
from ..errors import OutOfMemoryError
from . import cuda as _cuda
from .cuda import context_of, error_name, is_pinned, primary_context, relaxed_capture

#: Transfers of at least this many bytes from or to pageable memory are staged through page-locked buffers
#: (below it the driver's own pageable copy was faster on an H100 host: 9.4 against 5.6 GB/s at 1 MiB).
STAGE_MIN = 16 << 20
#: Size of each of the two staging buffers; host copies of a chunk are split over threads in pieces of
#: at least MEMCPY_PIECE bytes.
CHUNK = 8 << 20
MEMCPY_PIECE = 1 << 20
_THREADS = max(1, min(4, (os.cpu_count() or 2) // 2))  # 4 was best on an H100 host (8 and 16 slower)

_MEMHOSTALLOC_PORTABLE = 1
_EVENT_DISABLE_TIMING = 2


def htod(dst: int, src: np.ndarray, context: int | None = None) -> None:
    """Copy the contiguous array ``src`` to device pointer ``dst`` (owned by ``context``, found if None)."""
    _transfer(dst, src, context, to_device=True)


def dtoh(dst: np.ndarray, src: int, context: int | None = None) -> None:
    """Copy from device pointer ``src`` (owned by ``context``, found if None) into the contiguous array ``dst``."""
    _transfer(src, dst, context, to_device=False)


def htod_small(device: int, context: int, wait: Callable[[], None], array: np.ndarray) -> None:
    """Copy the small C-contiguous array ``array`` (below REGISTER_MIN) to device pointer ``device`` (owned by
    ``context``) after ``wait``: one call into the extension (a kept copy's fill, made each call)."""
    wait()
    _small(device, _ffi.from_buffer(array), array.nbytes, context, True)


def _small(device: int, host: Any, nbytes: int, context: int, to_device: bool) -> None:
    """A copy below REGISTER_MIN (a step loop's read back, a kept copy's fill): one call into the extension, the GIL
    released."""
    code = _lib.taichi_aot_cuda_transfer(_cuda.table(), context, host, device, nbytes, to_device)
    _cuda.check(code, "copy to CUDA memory" if to_device else "copy from CUDA memory")


def _transfer(device: int, array: np.ndarray, context: int | None, *, to_device: bool) -> None:
    # the hot path of to_numpy/from_numpy on CUDA: no generator-based context managers here (each costs
    # about a microsecond, which a 1 MiB copy at 50 GB/s notices)
    what = "copy to CUDA memory" if to_device else "copy from CUDA memory"
    try:  # half the cost of __array_interface__, which a 1 MiB copy of page-locked memory notices
        host = int(_ffi.cast("uintptr_t", _ffi.from_buffer(array)))
    except ValueError:  # not C-contiguous
        host = array.__array_interface__["data"][0]
    nbytes = array.nbytes
    ctx = context_of(device) if context is None else context
    if nbytes < REGISTER_MIN:
        _small(device, _ffi.cast("void *", host), nbytes, ctx, to_device)
        return
    cu = _cuda.driver()
    entry = _pages.take(array, host, nbytes) if _hostpages.REGISTER_LIMIT or register_limit() else None
    pushed = False
    try:  # everything after _pages.take inside: the entry stays busy (never unregistered) only while copying
        if ctx:
            _cuda.check(cu.cuCtxPushCurrent_v2(ctypes.c_void_p(ctx)), what)
            pushed = True
        if entry is None and nbytes >= STAGE_MIN and not is_pinned(host):
            with _staging_lock:
                _staged(cu, what, nbytes, to_device=to_device, device=device, host=host)
        elif to_device:
            _cuda.check(cu.cuMemcpyHtoD_v2(device, host, nbytes), what)
        else:
            _cuda.check(cu.cuMemcpyDtoH_v2(host, device, nbytes), what)
    finally:
        if pushed:
            cu.cuCtxPopCurrent_v2(ctypes.byref(ctypes.c_void_p()))
        if entry is not None:
            _pages.done(entry)


# -- page-locked host memory ---------------------------------------------------------------

def host_alloc(nbytes: int) -> int:
    """``nbytes`` of page-locked host memory (portable: every context sees it as pinned)."""
    ptr = ctypes.c_void_p()
    with primary_context(None) as cu:
        code = cu.cuMemHostAlloc(ctypes.byref(ptr), max(nbytes, 1), _MEMHOSTALLOC_PORTABLE)
    if code != 0 or not ptr.value:
        raise OutOfMemoryError(f"page-locked host memory of {nbytes} bytes: the CUDA driver returned error "
                               f"{error_name(code)}")
    return int(ptr.value)


def host_free(ptr: int) -> None:
    with relaxed_capture(), primary_context(None) as cu:
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


# -- registered arrays: the pages policy's (_hostpages), pinned by cuMemHostRegister ------------------

#: Transfers of at least this many bytes page-lock a numpy array the second time they move it.
REGISTER_MIN = 1 << 20
_MEMHOSTREGISTER_PORTABLE = 1
_SEEN_MAX = 256  # arrays seen once, remembered (by weak reference) for a second sight


def _register(start: int, size: int) -> int | None:
    with primary_context(None) as cu:
        code = cu.cuMemHostRegister_v2(ctypes.c_void_p(start), size, _MEMHOSTREGISTER_PORTABLE)
    return start if code == 0 else None  # refused: already page-locked by someone else, or out of resources


def _unregister(pin: Pin) -> None:
    with relaxed_capture(), primary_context(None) as cu:
        cu.cuMemHostUnregister(ctypes.c_void_p(pin.start))


#: The process's page-locked arrays (page-locking is the process's, seen by every context): while one lives, numpy
#: refuses to resize it in place (``ndarray.resize`` would move the memory under the registration).
_pages = HostPages(_register, _unregister, seen_max=_SEEN_MAX, evict=True)


def registered_bytes() -> int:
    """How many bytes of the caller's arrays are page-locked by the transfers now."""
    return _pages.kept_bytes()


def _forget_after_fork() -> None:
    """In a forked child: the parent's CUDA state is unusable there, and its registrations are not the child's
    (its copies of the pages are ordinary memory). Drop them without calling the driver; a fresh lock."""
    global _staging_lock
    _pages.forget_all()
    _staging_lock = threading.Lock()
    _staging.clear()


# -- staged transfers -------------------------------------------------------------------------

_staging_lock = threading.Lock()
_staging: list[int] = []
os.register_at_fork(after_in_child=_forget_after_fork)


def _memcpy(dst: int, src: int, nbytes: int) -> None:
    """A host copy, split over threads where it is large (``_csrc/hostcopy.c``, the GIL released)."""
    pieces = max(1, min(_THREADS, nbytes // MEMCPY_PIECE))
    _lib.taichi_aot_copy_bytes(_ffi.cast("void *", dst), _ffi.cast("void *", src), nbytes, pieces)


def _staged(cu: Any, what: str, nbytes: int, *, to_device: bool, device: int, host: int) -> None:
    """A transfer through the two staging buffers, host copies overlapping DMA (the legacy default stream:
    ordered after the runtime's kernels, as the plain copies are)."""
    if not _staging:
        _staging.extend(host_alloc(CHUNK) for _ in range(2))
    events = [ctypes.c_void_p(), ctypes.c_void_p()]
    for e in events:
        _cuda.check(cu.cuEventCreate(ctypes.byref(e), _EVENT_DISABLE_TIMING), what)
    stream = ctypes.c_void_p(0)
    chunks = [(o, min(CHUNK, nbytes - o)) for o in range(0, nbytes, CHUNK)]
    try:
        if to_device:
            for i, (off, n) in enumerate(chunks):
                k = i & 1
                if i >= 2:  # the DMA that last read this buffer is done
                    _cuda.check(cu.cuEventSynchronize(events[k]), what)
                _memcpy(_staging[k], host + off, n)
                _cuda.check(cu.cuMemcpyHtoDAsync_v2(device + off, ctypes.c_void_p(_staging[k]), n, stream), what)
                _cuda.check(cu.cuEventRecord(events[k], stream), what)
            _cuda.check(cu.cuStreamSynchronize(stream), what)
        else:
            def fetch(i: int) -> None:
                off, n = chunks[i]
                _cuda.check(cu.cuMemcpyDtoHAsync_v2(ctypes.c_void_p(_staging[i & 1]), device + off, n, stream), what)
                _cuda.check(cu.cuEventRecord(events[i & 1], stream), what)

            fetch(0)
            for i, (off, n) in enumerate(chunks):
                if i + 1 < len(chunks):
                    fetch(i + 1)  # its buffer's last host copy (chunk i - 1) is done
                _cuda.check(cu.cuEventSynchronize(events[i & 1]), what)
                _memcpy(host + off, _staging[i & 1], n)
    finally:
        for e in events:
            cu.cuEventDestroy_v2(e)
