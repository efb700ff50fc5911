"""How host arrays move to and from CUDA memory: page-locked arrays, the page-lock budget, staged copies.

Transfers from pageable host memory (any numpy array) run at a quarter of the bus's speed when the driver stages them
itself. A numpy array of 1 MiB or more that moves a second time is page-locked where it lies (``cuMemHostRegister``:
its whole allocation, once, within a budget) and copied directly from then on; it is unregistered when the array that
owns the memory is collected, before numpy frees it. The first transfer of an array goes through two page-locked
staging buffers of our own from 16 MiB up: host copies (several threads) into one buffer overlap the DMA out of the
other. Page-locked memory is allocated and registered in the device's primary context (retained for the life of the
process, portable: every context sees it as pinned), so it outlives every Taichi runtime; arrays of it
(:func:`pinned_array`) are copied directly, at the bus's full speed. The driver itself is :mod:`taichi_aot._cuda`'s.
"""

from __future__ import annotations

import ctypes
import os
import threading
import weakref
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from . import _cuda
from ._cuda import context_of, error_name, is_pinned, primary_context, relaxed_capture
from ._native import ffi as _ffi
from ._native import lib as _lib
from .errors import InvalidArgumentError, OutOfMemoryError

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
    if nbytes < REGISTER_MIN:  # small (a step loop's read back): one call into the extension, the GIL released
        code = _lib.taichi_aot_cuda_transfer(_cuda.table(), ctx, _ffi.cast("void *", host), device, nbytes,
                                             to_device)
        _cuda.check(code, what)
        return
    cu = _cuda.driver()
    registering = REGISTER_LIMIT or register_limit()
    entry = _entry_for(array, host, nbytes) if registering else None
    pushed = False
    try:  # everything after _entry_for inside: the entry stays busy (never unregistered) only while copying
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
            with _lock_registered:
                entry.busy -= 1


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


# -- registered arrays ------------------------------------------------------------------------

#: Transfers of at least this many bytes page-lock a numpy array the second time they move it.
REGISTER_MIN = 1 << 20
_MEMHOSTREGISTER_PORTABLE = 1
_SEEN_MAX = 256  # arrays seen once, remembered (by weak reference) for a second sight


def register_limit() -> int:
    """The most bytes of the caller's arrays page-locked at once: ``TAICHI_AOT_REGISTER_LIMIT`` (bytes, or with
    a K, M or G suffix; 0 turns registration off), else a quarter of the memory the process may use (the
    physical memory, or its cgroup's limit where lower). Read once."""
    global REGISTER_LIMIT
    if REGISTER_LIMIT is None:
        raw = os.environ.get("TAICHI_AOT_REGISTER_LIMIT", "")
        REGISTER_LIMIT = _parse_bytes(raw) if raw.strip() else _usable_memory() // 4
    return REGISTER_LIMIT


def _parse_bytes(raw: str) -> int:
    text = raw.strip().upper().removesuffix("B").removesuffix("I")
    shift = {"K": 10, "M": 20, "G": 30, "T": 40}.get(text[-1:], 0)
    try:
        value = float(text[:-1] if shift else text) * (1 << shift)
        if not 0 <= value < 1 << 62:  # negative, infinite or NaN
            raise ValueError(raw)
        return int(value)
    except (ValueError, OverflowError):
        raise InvalidArgumentError(f"TAICHI_AOT_REGISTER_LIMIT: expected a size such as 4G, 512M or 0 (off), "
                                   f"got {raw!r}") from None


def _usable_memory() -> int:
    try:
        total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError):  # pragma: no cover - not Linux
        total = 16 << 30
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            with open(path) as f:
                text = f.read().strip()
        except OSError:
            continue
        if text.isdigit():
            total = min(total, int(text))
    return total


REGISTER_LIMIT: int | None = None


class _Registered:
    """A numpy array whose memory (its whole allocation) the transfers page-locked. The weak reference
    unregisters it as the array is collected, before numpy frees the memory; while it lives, numpy refuses
    to resize the array in place (``ndarray.resize`` would move the memory under the registration), and a
    lookup checks that the memory is still where it was (``__setstate__`` can move it)."""

    __slots__ = ("busy", "key", "ref", "size", "start")

    def __init__(self, owner: np.ndarray, start: int):
        self.key, self.start, self.size, self.busy = id(owner), start, owner.nbytes, 0
        self.ref: weakref.ref[np.ndarray] | None = weakref.ref(owner, self._collected)

    def _collected(self, _ref: object) -> None:
        with _lock_registered:
            self.unregister()

    def unregister(self) -> None:
        """Unpin the memory, then forget the array (under the lock). In this order an interruption leaves the
        range tracked (unpinned twice at worst, which the driver refuses harmlessly), never pinned untracked."""
        global _registered_bytes
        if self.ref is None:
            return
        try:
            with relaxed_capture(), primary_context(None) as cu:
                cu.cuMemHostUnregister(ctypes.c_void_p(self.start))
        except Exception:  # the driver is gone (interpreter exit)
            pass
        if self.ref is None:  # forgotten meanwhile (a fork's child, a callback that ran inside this one)
            return
        self.ref = None
        if _registered.get(self.key) is self:
            del _registered[self.key]
        _registered_bytes -= self.size

    def holds(self, root: np.ndarray, host: int, nbytes: int) -> bool:
        """Whether this registration page-locks the memory ``root`` owns now, ``host`` to ``host + nbytes`` in it
        (cheap checks: a transfer makes them each time)."""
        return (self.ref is not None and self.ref() is root and root.base is None and root.flags.owndata
                and root.nbytes == self.size and self.start <= host and host + nbytes <= self.start + self.size)


_lock_registered = threading.RLock()  # reentrant: a collected array's callback may run inside a section
_registered: OrderedDict[int, _Registered] = OrderedDict()  # by id() of the owning array, least recent first
_registered_bytes = 0
_seen: OrderedDict[int, tuple[weakref.ref[np.ndarray], bool]] = OrderedDict()  # id() -> the array, refused


def _registrable(root: np.ndarray) -> bool:
    """Whether numpy allocated ``root``'s memory (its lifetime is the array's), contiguous, within the budget."""
    return (root.base is None and bool(root.flags.owndata) and root.nbytes <= register_limit()
            and bool(root.flags.c_contiguous or root.flags.f_contiguous))


def _seen_before(key: int, root: np.ndarray) -> bool:
    """Whether the transfers saw ``root`` (at ``id()`` ``key``) before and the driver did not refuse it; else it is
    remembered now (the least recent forgotten past _SEEN_MAX)."""
    seen = _seen.pop(key, None)  # id() may name a dead array's successor: the weak reference tells
    if seen is not None and seen[0]() is root and not seen[1]:
        return True
    _seen[key] = (weakref.ref(root), seen is not None and seen[0]() is root and seen[1])
    while len(_seen) > _SEEN_MAX:
        _seen.popitem(last=False)
    return False


def _entry_for(array: np.ndarray, host: int, nbytes: int) -> _Registered | None:
    """The registration that page-locks ``array``'s memory, marked busy for one transfer (the caller ends it).
    The array that owns the memory is registered the second time the transfers see it, if numpy allocated
    the memory (its lifetime is the array's), and the budget allows. A registration whose array no longer
    owns that memory (``__setstate__`` replaced it) is dropped as the array comes by."""
    root = array
    while isinstance(root.base, np.ndarray):
        root = root.base
    key = id(root)
    if key not in _registered and root.base is not None:  # memory numpy does not own: nothing to do, no lock
        return None
    with _lock_registered:
        entry = _registered.get(key)
        if entry is not None:
            if entry.holds(root, host, nbytes):
                _registered.move_to_end(key)
                entry.busy += 1
                return entry
            if entry.busy:  # in use by another thread's transfer: left to it
                return None
            entry.unregister()  # a dead array's successor at the same id(), or memory that moved
        if not _registrable(root) or not _seen_before(key, root):
            return None
        made = _register(root, root.__array_interface__["data"][0])
        if not isinstance(made, _Registered):  # over the budget: tried again; the driver refused: not again
            _seen[key] = (weakref.ref(root), made == "refused")
            return None
        made.busy += 1
        return made


def _register(owner: np.ndarray, start: int) -> _Registered | str:
    """Page-lock ``owner``'s memory (under the lock), unregistering the least recently used arrays that are
    not being copied as far as the budget needs; else "over budget" or "refused" (by the driver)."""
    global _registered_bytes
    limit, size = register_limit(), owner.nbytes
    for e in list(_registered.values()):  # memory that moved while nobody copied it: unpinned now
        target = e.ref() if e.ref is not None else None
        if not e.busy and (target is None or target.__array_interface__["data"][0] != e.start):
            e.unregister()
    for e in list(_registered.values()):
        if _registered_bytes + size <= limit:
            break
        if not e.busy:
            e.unregister()
    if _registered_bytes + size > limit:
        return "over budget"
    # tracked before the driver pins it: an interruption leaves a range tracked (and unpinned when its array
    # goes), never a pinned range nobody unpins
    entry = _Registered(owner, start)
    _registered[entry.key] = entry
    _registered_bytes += size
    code = -1
    try:
        with primary_context(None) as cu:
            code = cu.cuMemHostRegister_v2(ctypes.c_void_p(start), size, _MEMHOSTREGISTER_PORTABLE)
    finally:
        if code != 0:  # already page-locked by someone else (copied directly anyway), or out of resources
            entry.ref = None
            del _registered[entry.key]
            _registered_bytes -= size
    return entry if code == 0 else "refused"


def registered_bytes() -> int:
    """How many bytes of the caller's arrays are page-locked by the transfers now."""
    return _registered_bytes


def _forget_after_fork() -> None:
    """In a forked child: the parent's CUDA state is unusable there, and its registrations are not the child's
    (its copies of the pages are ordinary memory). Drop them without calling the driver; fresh locks."""
    global _lock_registered, _staging_lock, _registered_bytes, _copier
    for entry in _registered.values():
        entry.ref = None
    _registered.clear()
    _seen.clear()
    _registered_bytes = 0
    _lock_registered, _staging_lock = threading.RLock(), threading.Lock()
    _staging.clear()
    _copier = None


# -- staged transfers -------------------------------------------------------------------------

_staging_lock = threading.Lock()
_staging: list[int] = []
_copier: ThreadPoolExecutor | None = None
os.register_at_fork(after_in_child=_forget_after_fork)


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
