"""The three small parts a :class:`~taichi_aot.placement.base.Device` is composed of, as libtaichi's runtime has them
(the gfx backends'; each room's device gives its own where it differs):

* :class:`Transfers`: how bytes move between the host and the device's memory. The object layer calls four verbs,
  each pinning the memory while it works and saying whether it waits for the queued kernels: :meth:`Transfers.read`,
  :meth:`Transfers.write`, :meth:`Transfers.fill` (a writer for the same memory again and again) and
  :meth:`Transfers.read_later` (a read queued after the kernels, made after the runtime's wait). A room chooses how
  (:meth:`Transfers.reader`, :meth:`Transfers.writer`, :meth:`Transfers.filler`, :meth:`Transfers.read_waits`,
  :meth:`Transfers.write_waits`, :meth:`Transfers.copy`); the staging buffers and host arrays are this part's too.
* :class:`Library`: libtaichi's runtime as the device has it: what its calls run inside, whether one is made beside
  the device's own, and why there is none.
* :class:`Stream`: the CUDA stream the runtime's kernels run on (``Runtime.set_cuda_stream``): selecting one (its
  checks), waiting for it, whether it captures. None here: only the CUDA room's devices have one.
"""

from __future__ import annotations

import functools
import math
import operator
import weakref
from collections.abc import Iterable
from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from .._native import ffi, lib
from ..capi.handles import mark_enqueued
from ..errors import ArgumentTypeError, ClosedError, InvalidArgumentError, NotSupportedError, check

if TYPE_CHECKING:  # pragma: no cover
    from .._lifetime import Parent
    from .base import Device
    from .staging import Read, Staging

__all__ = ["Filler", "Library", "Mover", "Moves", "Stream", "Transfers"]

#: How the host's bytes move between a numpy array and a memory: ``(memory, array)``.
Mover = Callable[[Any, np.ndarray], None]
#: A write of a host array of one memory's size into it (:meth:`Transfers.fill`).
Filler = Callable[[np.ndarray], None]


def live(runtime_ref: weakref.ref[Parent]) -> Parent:
    """The runtime a device or part holds weakly (the runtime owns them)."""
    runtime = runtime_ref()
    if runtime is None:  # pragma: no cover - a device is used only through its live runtime
        raise ClosedError("the runtime of this device is gone")
    return runtime


class _Part:
    """What every part keeps: its device (the room's, whose attributes a room's part reads) and the runtime, weakly
    (the runtime owns its device and its parts)."""

    def __init__(self, device: Device, runtime: Parent):
        self._device = device
        self._runtime_ref = weakref.ref(runtime)

    @property
    def _runtime(self) -> Parent:
        return live(self._runtime_ref)


def read_direct(memory: Any, out: np.ndarray) -> None:
    """A memory the host reads, read through a mapping (or at its host address)."""
    memory.copy_host(out, memory.size, to_device=False)


def write_direct(memory: Any, data: np.ndarray) -> None:
    """A memory the host writes, written through a mapping (or at its host address)."""
    memory.copy_host(data, memory.size, to_device=True)


def _pinned(write: Filler, memory: Any, array: np.ndarray) -> None:
    owned = memory.owned
    owned.pin()  # a close on another thread releases the memory after the write, never under it
    try:
        if owned.closed:
            raise ClosedError("this memory is closed")
        write(array)
    finally:
        owned.unpin()


def _checked(write: Filler, memory: Any, array: Any) -> None:
    """A fill of an open ``memory`` from a numpy array of its size, made C-contiguous, pinned meanwhile."""
    memory.ensure_open()
    if not isinstance(array, np.ndarray):
        raise ArgumentTypeError(f"a fill needs a numpy array, got {type(array).__name__}")
    if array.nbytes != memory.size:
        raise InvalidArgumentError(f"a fill of a memory of {memory.size} bytes needs an array of as many, got "
                                   f"{array.nbytes}")
    if array.dtype.hasobject:
        raise ArgumentTypeError("a fill needs an array of numbers, not of Python objects")
    with memory.in_use():
        write(np.ascontiguousarray(array))


class Moves:
    """How bytes move to and from one memory (:meth:`Transfers.moves`): its reader and writer, and whether each
    waits for the queued kernels first, chosen once; each copy pins the memory meanwhile."""

    __slots__ = ("_memory", "_owned", "_read", "_read_waits", "_sync", "_write", "_write_waits")

    def __init__(self, memory: Any, sync: Callable[[], None], reader: Mover, writer: Mover, read_waits: bool,
                 write_waits: bool):
        self._memory, self._owned, self._sync = memory, memory.owned, sync
        self._read, self._write = reader, writer
        self._read_waits, self._write_waits = read_waits, write_waits

    def read(self, out: np.ndarray) -> None:
        """:meth:`Transfers.read` of the memory."""
        self._move(self._read, self._read_waits, out)

    def write(self, array: np.ndarray, new: bool = False) -> None:
        """:meth:`Transfers.write` of the memory."""
        self._move(self._write, self._write_waits and not new, array)

    def _move(self, mover: Mover, waits: bool, array: np.ndarray) -> None:
        """One copy, the memory pinned as Memory.in_use pins it, written out (the context manager's generator costs
        about a microsecond, a fifth of a small value's Python path: to_numpy after a launch)."""
        memory, owned = self._memory, self._owned
        owned.pin()  # not released under the copy by a close on another thread
        try:
            if owned.closed:
                memory.ensure_open()  # raises: the memory's own words
            if waits:
                self._sync()
            mover(memory, array)
        finally:
            owned.unpin()


class Transfers(_Part):
    """libtaichi's memory as the host reaches it (OpenGL, GLES, Metal; the base of the others): through a mapping
    where the host sees it, through the runtime's staging buffers where not."""

    def __init__(self, device: Device, runtime: Parent):
        super().__init__(device, runtime)
        self._staging: Staging | None = None
        self._closed = False  # set by close(): no staging is made after it

    # -- what the object layer calls: each pins the memory, and waits where it must ----------------------------

    def read(self, memory: Any, out: np.ndarray) -> None:
        """``memory``'s bytes into ``out`` (C-contiguous, of its size), done when this returns. Waits for the queued
        kernels first where they may write what it reads (:meth:`read_waits`); not where the read is a copy the
        device queues after them and waits for. ClosedError for a closed memory."""
        self.moves(memory).read(out)

    def write(self, memory: Any, array: np.ndarray, new: bool = False) -> None:
        """``array`` (C-contiguous, of ``memory``'s size) into ``memory``. Waits for the queued kernels first where
        they may read what it overwrites (:meth:`write_waits`); not where the write is a copy the device queues
        after them, nor for a ``new`` memory, which no kernel has seen. ClosedError for a closed memory."""
        self.moves(memory).write(array, new)

    def moves(self, memory: Any) -> Moves:
        """:meth:`read` and :meth:`write` of one memory, chosen once: what an ndarray keeps for its copies (a copy
        then costs no choice)."""
        return Moves(memory, self._runtime.sync, self.reader(memory), self.writer(memory), self.read_waits(memory),
                     self.write_waits(memory))

    def fill(self, memory: Any, checked: bool = True) -> Filler | None:
        """How a host array of ``memory``'s size reaches it when it is written again and again, with the least work
        on the host's side: the device's own write (:meth:`filler`), which waits or orders itself as :meth:`write`
        does, the memory pinned at each write; None where :meth:`write` serves. ``memory`` is a Memory of this
        device's runtime (ArgumentTypeError otherwise); each write checks that it is still open and that the array
        is a numpy array of its size (typed errors). ``checked=False``: no checks, where the caller made them (a
        kept copy's plan, which checks its arrays at each call)."""
        if not checked:
            write = self.filler(memory)
            return None if write is None else functools.partial(_pinned, write, memory)
        if not all(hasattr(memory, a) for a in ("handle", "host_write", "ensure_open", "owned")) or (
                memory.runtime is not self._runtime):
            raise ArgumentTypeError(f"fill needs a Memory of this device's runtime (an ndarray's: nd.memory), got "
                                    f"{type(memory).__name__}")
        memory.ensure_open()
        write = self.filler(memory)
        return None if write is None else functools.partial(_checked, write, memory)

    def read_later(self, memory: Any, into: np.ndarray | None = None) -> Read | None:
        """A copy of ``memory`` the host does not read, enqueued now into staging buffers (after the queued kernel
        that writes it; it waits for nothing), and what reads it into an array once the runtime has waited; None
        where the memory is read as it is after the wait (host-visible memory, a driver's copies; ``into``, the
        array it will be read into where the caller has one, where the device's reader takes it as it is)."""
        if memory.host_read or not self._device.traits.stages:
            return None
        with memory.in_use():
            return self.staging.download_later(memory, memory.size)

    # -- what a room chooses ------------------------------------------------------------------------------------

    def reader(self, memory: Any) -> Mover:
        """How ``memory``'s bytes reach a host array."""
        return read_direct if memory.host_read else self.staging.download

    def writer(self, memory: Any) -> Mover:
        """How a host array's bytes reach ``memory`` (memory the host reads but does not write: staged, and waited
        for, so that a view of it shows the bytes once the copy returns)."""
        if memory.host_write:
            return write_direct
        return self.staging.upload_waited if memory.host_read else self.staging.upload

    def filler(self, memory: Any) -> Filler | None:
        """:meth:`fill`'s write of an open ``memory``, with no check around it (a C-contiguous array of its size);
        None here: :meth:`write` serves."""
        return None

    def read_waits(self, memory: Any) -> bool:
        """Whether a read of ``memory`` waits for the queued kernels first (see :meth:`read`)."""
        return bool(memory.host_read or not self._device.traits.stages)

    def write_waits(self, memory: Any) -> bool:
        """Whether a write into ``memory`` waits for the queued kernels first (see :meth:`write`)."""
        return bool(memory.host_write or memory.host_read or not self._device.traits.stages)

    def copy(self, dst: Any, dst_offset: int, src: Any, src_offset: int, size: int) -> None:
        """Copy ``size`` bytes between two memories of the runtime, enqueued (the callers' slices are checked: a
        MemorySlice's, or staging buffers' sized for the copy)."""
        d, s = ffi.new("TiMemorySlice *"), ffi.new("TiMemorySlice *")
        d.memory, d.offset, d.size = dst.handle, dst_offset, size
        s.memory, s.offset, s.size = src.handle, src_offset, size
        handle = self._runtime.handle
        # the C call itself: the flat function's lookups and coercions cost ten times it on a staged launch's path
        lib.ti_copy_memory_device_to_device(handle, d, s)
        mark_enqueued(handle)  # after: a wait another thread clears the count in meanwhile waits for it
        check("copy_memory_device_to_device")

    # -- the staging buffers and host arrays --------------------------------------------------------------------

    @property
    def staging(self) -> Staging:
        """The runtime's staging buffers, made at the first copy that needs one."""
        staging = self._staging
        if staging is None:
            if self._closed:  # a copy on another thread after the close: no new buffers to outlive the runtime
                raise ClosedError("the runtime is closed (on another thread): its staging buffers are gone")
            from .staging import Staging  # the room's own file, imported where first needed

            staging = self._staging = Staging(self._runtime, self)
        return staging

    def host_array(self, shape: Any, dtype: Any) -> np.ndarray:
        """A zero-filled host array the device copies to and from at the link's speed (``Runtime.host_array``).

        Raises:
            ArgumentTypeError: a bad shape or dtype.
        """
        items = tuple(shape) if isinstance(shape, Iterable) and not isinstance(shape, (str, bytes)) else (shape,)
        try:
            dims = tuple(-1 if isinstance(d, bool) else operator.index(d) for d in items)
        except TypeError:
            dims = (-1,)
        if any(d < 0 for d in dims):
            raise ArgumentTypeError(f"host_array: shape {shape!r} is not a tuple of non-negative ints")
        try:
            dt = np.dtype(dtype)
        except TypeError as e:
            raise ArgumentTypeError(f"host_array: {dtype!r} is not a dtype ({e})") from None
        if dt.hasobject:
            raise ArgumentTypeError(f"host_array: {dt} holds Python objects, which no device copies")
        if math.prod(dims) * dt.itemsize >= 2**63:
            raise InvalidArgumentError(f"host_array: shape {dims} of {dt} is too large")
        return self.new_host_array(dims, dt)

    def new_host_array(self, dims: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        """The host array of a checked shape and dtype: a plain one, where nothing is faster."""
        return np.zeros(dims, dtype)

    def in_flight(self) -> list[Any]:
        """The staging buffers in flight, taken before a wait (see :meth:`release`)."""
        return self._staging.in_flight() if self._staging is not None else []

    def release(self, flight: list[Any] | None = None) -> None:
        """The runtime waited: staging buffers in flight (``flight``, :meth:`in_flight` taken before the wait; None:
        all) are free again."""
        if self._staging is not None:
            self._staging.release(flight)

    def close(self) -> None:
        """The runtime closes: the staging buffers' mappings end (its memory goes with the native runtime); the
        closed staging stays, refusing new buffers to a copy another thread makes after this."""
        self._closed = True
        if self._staging is not None:
            self._staging.close()


class Library(_Part):
    """libtaichi's runtime as the device has it: the runtime itself, whose calls need nothing around them."""

    #: what libtaichi's memory calls (map, unmap, copies, frees) run inside, or None: nothing (libtaichi's CUDA
    #: runtime: device 0's primary context, whatever another library left current on the thread)
    calls: Callable[[], AbstractContextManager[None]] | None = None

    def memory_context(self) -> AbstractContextManager[None]:
        """What one of libtaichi's memory calls runs inside (:attr:`calls`; nothing where it is None)."""
        calls = self.calls
        return nullcontext() if calls is None else calls()

    def context(self) -> AbstractContextManager[None]:
        """What libtaichi's calls on the whole runtime (module loads, waits) run inside: nothing here (CUDA: device
        0's primary context, whatever another library left current on the thread)."""
        return nullcontext()

    def beside(self) -> bool:
        """Whether libtaichi's runtime may be made beside the device's own, for a module's kernels only libtaichi
        launches (the own CUDA runtime of device 0: the one place that rule is kept)."""
        return False

    def why_not(self) -> str | None:
        """Why libtaichi has no runtime here to launch a kernel (the end of a sentence), or None where it has one or
        may make one beside."""
        return None

    def runtime(self, handle: Any, on_its_thread: bool, thread: int) -> Any:
        """libtaichi's runtime for a module's kernels only libtaichi launches: the runtime's own (``handle``), or one
        made beside the own runtime now (:meth:`beside`), or raises with the reason there is none."""
        return handle


class Stream(_Part):
    """The CUDA stream the runtime's kernels run on: none here (a device of no CUDA stream, ``traits.cuda_streams``
    false)."""

    #: the CUDA stream the runtime's kernels run on (a ``CUstream`` handle: :meth:`select`), or None: the legacy
    #: default stream
    handle: int | None = None

    def select(self, stream: Any) -> None:
        """Kernels run on ``stream`` from now on (``Runtime.set_cuda_stream``, which says what it takes).

        Raises:
            NotSupportedError: here: the runtime has no CUDA stream.
        """
        raise NotSupportedError(f"set_cuda_stream: a {self._runtime.arch.name} runtime has no CUDA stream")

    def synchronize(self) -> None:
        """Wait for the device's work outside libtaichi's queue (the own CUDA runtime's legacy default stream, the
        stream selected): nothing here."""

    def capturing(self) -> bool:
        """Whether the stream selected is being captured into a CUDA graph (nothing may wait then)."""
        return False

    def close(self) -> None:
        """The runtime closes: libtaichi's launches back on the legacy default stream, where one was selected (its
        setting is the process's, not the runtime's): nothing here."""
