"""Host-visible buffers of one runtime, kept mapped and reused, through which the host's bytes reach memory the host
cannot map (device memory of a discrete GPU), and the host arrays that the device copies at the link's speed.

A copy to the device takes a free buffer (or makes one), writes the bytes into its mapping and enqueues the device's
copy; the buffer is in flight until the runtime's next wait, so a copy returns without waiting and the next one
takes another buffer (past ``FLIGHT_BYTES`` in flight, the runtime is waited for first). A copy from the device
enqueues the device's copy into a buffer, waits, and reads the mapping. Copies larger than ``CHUNK`` go in pieces.
Mapping memory waits for the device on Vulkan: buffers are mapped once, when made.

:meth:`Staging.host_array` hands out a numpy array over such a buffer (what ``Runtime.host_array`` gives on such a
device): ``to_numpy(out=)`` and ``from_numpy`` of it copy with the device alone, no pass of the host's.
"""

from __future__ import annotations

import bisect
import functools
import threading
import weakref
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import capi
from .._cpus import usable_cpus
from .._lifetime import Owned
from .._native import ffi, lib
from ..enums import MemoryUsage
from ..errors import ClosedError, InvalidStateError

if TYPE_CHECKING:  # pragma: no cover
    from .._lifetime import Parent
    from .parts import Transfers

__all__ = ["CHUNK", "FLIGHT_BYTES", "Staging"]

#: The largest piece of one copy through a buffer.
CHUNK = 64 << 20
#: Bytes of buffers in flight (written, their device copies not waited for) before a copy waits for the runtime.
FLIGHT_BYTES = 256 << 20
#: Bytes of free buffers kept for the next copies; more are given back.
SPARE_BYTES = 256 << 20
#: The smallest buffer made (small copies share its size, so one serves many).
SMALLEST = 64 << 10
#: Uploads of fewer bytes than this share one buffer (a page, filled from its start, in flight whole until the next
#: wait): many small arrays staged between two waits take a page, not a buffer each.
SMALL_UPLOAD = 16 << 10
#: Where each small upload starts in its page.
SMALL_ALIGN = 64
#: Bytes from which the host's pass between a buffer and an array is split over threads (``_csrc/hostcopy.c``): a
#: new array's pages, faulted and zeroed one at a time by one thread, come at a few GB/s.
THREADED_BYTES = 4 << 20
#: The most threads that pass takes (each at least THREADED_BYTES of it).
MOVE_THREADS = 8


#: The cores this process may keep busy (its affinity, within its CPU quota), asked once.
_cores = functools.lru_cache(maxsize=1)(usable_cpus)


def _move(dst: Any, src: Any, nbytes: int) -> None:
    """``nbytes`` from ``src`` to ``dst`` (cdata pointers or buffers), over threads where it is large."""
    threads = min(MOVE_THREADS, _cores(), nbytes // THREADED_BYTES)
    if threads < 2:
        ffi.memmove(dst, src, nbytes)
    else:
        lib.taichi_aot_copy_bytes(dst, src, nbytes, threads)


def _free(runtime: Any, handle: Any) -> None:
    try:
        capi.unmap_memory(runtime, handle)
    finally:
        capi.free_memory(runtime, handle)


class _Buffer:
    """One host-visible memory, mapped for good; its record pins the runtime until it is given back."""

    __slots__ = ("address", "handle", "owned", "size")

    def __init__(self, runtime: Parent, size: int):
        rt = runtime.handle
        self.handle = capi.allocate_memory(rt, size=size, host_read=True, host_write=True,
                                           usage=int(MemoryUsage.STORAGE)).cdata
        try:
            self.address = capi.map_memory(rt, self.handle)
        except BaseException:
            capi.free_memory(rt, self.handle)
            raise
        self.size = size
        self.owned = Owned(functools.partial(_free, rt, self.handle), runtime.owned)

    def view(self, nbytes: int) -> Any:
        return ffi.buffer(ffi.cast("char *", self.address), nbytes)


class Staging:
    """The staging buffers of one runtime (see the module docstring)."""

    def __init__(self, runtime: Parent, transfers: Transfers):
        self._runtime = weakref.ref(runtime)
        self._transfers = transfers
        self._free: dict[int, list[_Buffer]] = {}  # free buffers by size
        self._flight: list[_Buffer] = []
        self._free_bytes = self._flight_bytes = 0
        self._page: _Buffer | None = None  # the buffer small uploads are packed into, in flight until the next wait
        self._page_used = 0
        self._lock = threading.RLock()  # a host array's callback may run in a collection inside
        self._arrays: list[tuple[int, int, _Buffer]] = []  # host arrays' buffers: (start, end, buffer)
        self.closed = False

    def _rt(self) -> Parent:
        runtime = self._runtime()
        assert runtime is not None  # the runtime closes its staging before it goes
        return runtime

    def _take(self, nbytes: int) -> _Buffer:
        """A free buffer of at least ``nbytes`` (the smallest that fits), made where none fits. ClosedError once the
        runtime closed them (on another thread): a buffer made then would outlive it, and the runtime with it."""
        with self._lock:
            if self.closed:
                raise ClosedError("the runtime is closed (on another thread): its staging buffers are gone")
            for size in sorted(self._free):  # a few sizes: powers of two from SMALLEST, and larger copies' own
                if size >= nbytes and self._free[size]:
                    self._free_bytes -= size
                    return self._free[size].pop()
        if self._flight_bytes + nbytes > FLIGHT_BYTES and self._flight:
            self._rt().wait()  # frees those in flight (release)
            return self._take(nbytes)
        size = max(SMALLEST, 1 << (nbytes - 1).bit_length())
        made = _Buffer(self._rt(), min(size, CHUNK) if nbytes <= CHUNK else nbytes)
        with self._lock:
            if not self.closed:
                return made
        made.owned.close()  # closed while it was made: nothing else would give it back
        raise ClosedError("the runtime is closed (on another thread): its staging buffers are gone")

    def _give_back(self, buffer: _Buffer) -> None:
        with self._lock:
            if not self.closed and self._free_bytes + buffer.size <= SPARE_BYTES:
                self._free.setdefault(buffer.size, []).append(buffer)
                self._free_bytes += buffer.size
                return
        buffer.owned.close()

    def _pack(self, nbytes: int) -> tuple[_Buffer, int]:
        """Room for a small upload in the page (a new page where it is full: the full one in flight)."""
        room = (nbytes + SMALL_ALIGN - 1) // SMALL_ALIGN * SMALL_ALIGN
        with self._lock:
            page, at = self._page, self._page_used
            if page is not None and at + nbytes <= page.size:
                self._page_used = at + room
                return page, at
            self._page = None
        if page is not None:
            self._later([page])
        page = self._take(SMALLEST)
        with self._lock:
            self._page, self._page_used = page, room
        return page, 0

    def in_flight(self) -> list[_Buffer]:
        """The buffers in flight, taken before a wait (their copies enqueued), the page of small uploads with them:
        what :meth:`release` frees after it, where another thread may put more in flight meanwhile."""
        if not self._flight and self._page is None:  # read without the lock: one filled meanwhile is the next wait's
            return []
        with self._lock:
            flight, self._flight, self._flight_bytes = self._flight, [], 0
            if self._page is not None:
                flight.append(self._page)
                self._page = None
        return flight

    def release(self, flight: list[_Buffer] | None = None) -> None:
        """The runtime waited: the buffers in flight (``flight``, taken before the wait; None: all) are free again."""
        for buffer in self.in_flight() if flight is None else flight:
            self._give_back(buffer)

    # -- copies ------------------------------------------------------------------------------------------------

    def upload(self, memory: Any, data: np.ndarray) -> None:
        """Copy the contiguous array ``data`` into ``memory`` (of at least its size), enqueued: a host array of
        :meth:`host_array` directly, else through buffers in flight until the next wait."""
        source = data.reshape(-1).view(np.uint8)
        found = self._host_array_of(source)
        if found is not None:
            buffer, offset = found
            self._transfers.copy(memory, 0, _Slice(buffer.handle), offset, source.nbytes)
            self._rt().sync()  # the caller may write its array again once this returns
            return
        if source.nbytes < SMALL_UPLOAD:  # packed into the page, in flight with it
            with self._lock:  # enqueued before another thread's wait can take the page (in_flight) and free it
                page, at = self._pack(source.nbytes)
                ffi.memmove(ffi.cast("char *", page.address) + at, ffi.from_buffer(source), source.nbytes)
                self._transfers.copy(memory, 0, _Slice(page.handle), at, source.nbytes)
            return
        for start in range(0, source.nbytes, CHUNK):
            piece = source[start:start + CHUNK]
            buffer = self._take(piece.nbytes)
            _move(ffi.cast("char *", buffer.address), ffi.from_buffer(piece), piece.nbytes)
            try:
                self._transfers.copy(memory, start, _Slice(buffer.handle), 0, piece.nbytes)
            finally:  # in flight once enqueued: a wait that took those in flight before frees only its own
                self._later([buffer])

    def upload_waited(self, memory: Any, data: np.ndarray) -> None:
        """:meth:`upload`, done when this returns."""
        self.upload(memory, data)
        self._rt().sync()

    def download(self, memory: Any, out: np.ndarray) -> None:
        """Copy ``memory``'s first ``out.nbytes`` bytes into the contiguous array ``out``, done when this returns."""
        target = out.reshape(-1).view(np.uint8)
        found = self._host_array_of(target)
        if found is not None:
            buffer, offset = found
            self._transfers.copy(_Slice(buffer.handle), offset, memory, 0, target.nbytes)
            self._rt().sync()
            return
        for start in range(0, target.nbytes, CHUNK):
            piece = target[start:start + CHUNK]
            buffer = self._take(piece.nbytes)
            try:
                self._transfers.copy(_Slice(buffer.handle), 0, memory, start, piece.nbytes)
                self._rt().sync()
                _move(ffi.from_buffer(piece), ffi.cast("char *", buffer.address), piece.nbytes)
            finally:
                self._give_back(buffer)

    def download_later(self, memory: Any, nbytes: int) -> Read:
        """Enqueue copies of ``memory``'s first ``nbytes`` bytes into buffers now, after what is queued (a kernel that
        writes it), and return the read that copies them into a contiguous array once the runtime has waited: one
        wait for a launch and its copies back, not one more for each. Its buffers are the read's until it is made or
        dropped (then free after the next wait, their copies done); a copy that fails to enqueue leaves them so."""
        taken: list[tuple[int, int, _Buffer]] = []
        try:
            for start in range(0, nbytes, CHUNK):
                size = min(CHUNK, nbytes - start)
                taken.append((start, size, self._take(size)))
                self._transfers.copy(_Slice(taken[-1][2].handle), 0, memory, start, size)
        except BaseException:
            self._later([b for _, _, b in taken])
            raise
        return Read(self, taken)

    def _later(self, buffers: list[_Buffer]) -> None:
        """Buffers whose copies may be queued still: free after the next wait (or now, where the runtime closed them
        meanwhile on another thread: a free waits for the copies queued on it)."""
        with self._lock:
            if not self.closed:
                self._flight.extend(buffers)
                self._flight_bytes += sum(b.size for b in buffers)
                return
        for buffer in buffers:
            buffer.owned.close()

    # -- host arrays -------------------------------------------------------------------------------------------

    def host_array(self, dims: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        """A zero-filled numpy array over a buffer of its own, which copies to and from the device's memory use as
        it is; the buffer (and the runtime's memory) stays until the array and every view of it go."""
        nbytes = int(np.prod(dims, dtype=np.int64)) * dtype.itemsize
        buffer = _Buffer(self._rt(), max(nbytes, 1))
        start = int(buffer.address)
        with self._lock:
            bisect.insort(self._arrays, (start, start + buffer.size, buffer))
        # the numpy array holds the cffi buffer, which holds this pointer: collected with the last view
        pointer = ffi.gc(ffi.cast("char *", start), functools.partial(self._forget, start, buffer.owned))
        raw = np.frombuffer(ffi.buffer(pointer, buffer.size), np.uint8)[:nbytes]
        raw[:] = 0
        return raw.view(dtype).reshape(dims)

    def _forget(self, start: int, owned: Owned, _pointer: Any = None) -> None:
        with self._lock:
            self._arrays = [a for a in self._arrays if a[0] != start]
        owned.close()

    def holds(self, array: np.ndarray) -> bool:
        """Whether ``array`` (contiguous) is one of :meth:`host_array`'s: its bytes in a staging buffer."""
        return self._host_array_of(array.reshape(-1).view(np.uint8)) is not None

    def _host_array_of(self, a: np.ndarray) -> tuple[_Buffer, int] | None:
        """The buffer of a host array ``a`` lies in, and its offset there (None: another array)."""
        if not self._arrays:
            return None
        start = a.__array_interface__["data"][0]
        with self._lock:
            i = bisect.bisect_right([first for first, _, _ in self._arrays], start) - 1
            if i < 0:
                return None
            first, end, buffer = self._arrays[i]
        if start + a.nbytes > end:
            return None
        return buffer, start - first

    def close(self) -> None:
        """The runtime closes: give every buffer back (host arrays keep theirs, and the runtime, until they go)."""
        with self._lock:
            self.closed = True
            buffers = [b for free in self._free.values() for b in free] + self._flight
            buffers += [self._page] if self._page is not None else []
            self._free, self._flight, self._page, self._free_bytes, self._flight_bytes = {}, [], None, 0, 0
        for buffer in buffers:
            buffer.owned.close()


class Read:
    """A copy back queued by :meth:`Staging.download_later`: called with an array once the runtime has waited, it
    fills it; :meth:`drop` gives its buffers up unread. Either once."""

    __slots__ = ("_staging", "_taken")

    def __init__(self, staging: Staging, taken: list[tuple[int, int, _Buffer]]):
        self._staging: Staging | None = staging
        self._taken = taken

    def __call__(self, out: np.ndarray) -> None:
        staging = self._staging
        if staging is None:
            raise InvalidStateError("this read was made or dropped already")
        self._staging = None
        target = out.reshape(-1).view(np.uint8)
        try:
            for start, size, buffer in self._taken:
                _move(ffi.from_buffer(target[start:start + size]), ffi.cast("char *", buffer.address), size)
        finally:
            for _, _, buffer in self._taken:
                staging._give_back(buffer)

    def drop(self) -> None:
        staging, self._staging = self._staging, None
        if staging is not None:
            staging._later([b for _, _, b in self._taken])


class _Slice:
    """A staging buffer as :meth:`.parts.Transfers.copy` takes a memory: its handle."""

    __slots__ = ("handle",)

    def __init__(self, handle: Any):
        self.handle = handle
