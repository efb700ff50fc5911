"""Device memory and memory slices, with zero-copy numpy views of mapped memory.

Views. ``with mem.map() as view`` (and ``NdArray.map()``) gives a numpy array
over the mapped memory itself. The memory stays mapped, and it and its runtime
stay alive, for as long as any such view (or an array derived from it) is
alive; the mapping ends when the last one is garbage collected. A view can
therefore never dangle, even after ``close()``: closing only stops new use.
Views of memory without ``host_write`` are read-only.

Where the memory lives, who allocates it and how bytes move is the runtime's device's to say
(:mod:`taichi_aot.placement`): host memory of our own on CPU backends, device memory on CUDA and on a
discrete GPU's Vulkan, libtaichi's host-visible memory elsewhere.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Iterator
from typing import Any, Callable

import numpy as np

from . import capi
from ._lifetime import Child, Owned, Parent, unpicklable
from ._native import ffi
from .drivers import cuda as _cuda
from .enums import MemoryUsage
from .errors import ArgumentTypeError, ClosedError, InvalidArgumentError, InvalidStateError, NotSupportedError

__all__ = ["Memory", "MemorySlice"]

#: The most bytes a host copy of a CPU backend's memory makes with Python's lock kept (a memmove at its address):
#: a larger one is made in C with the lock let go (it takes long enough for other threads to run meanwhile).
_HOST_COPY_KEPT = 1 << 16


def _size_arg(size: Any, what: str) -> int:
    if isinstance(size, bool) or not isinstance(size, (int, np.integer)):
        raise ArgumentTypeError(f"{what}: size must be an int, got {type(size).__name__}")
    size = int(size)
    if size <= 0:
        raise InvalidArgumentError(f"{what}: size must be positive, got {size}")
    if size >= 2**63:
        raise InvalidArgumentError(f"{what}: size {size} is too large")
    return size


def _forget_imported(runtime: Any, memory: Any, host: object) -> None:
    capi.free_memory(runtime, memory)  # the registry forgets it; ``host`` is the caller's, kept alive until now


def _unkeep(runtime: Any, memory: Any, owned: Owned, device: Any) -> None:
    """End a mapping of :meth:`Memory.keep_mapped`."""
    try:
        with device.library.memory_context():
            capi.unmap_memory(runtime, memory)
    except Exception:  # the runtime was destroyed first: nothing is mapped any more
        pass
    owned.unpin()


def _keep_pooled(host: object) -> None:
    """A pooled import's release: the runtime's device's pool keeps the handle (``Device.pooled``); ``host`` is the
    caller's, kept alive until now."""


class _Mapping:
    """One ti_map_memory of a Memory, shared by every view until the last is gone."""

    __slots__ = ("_device", "_handle", "_lock", "_memory_ref", "_owned", "_refs", "_runtime", "ptr")

    def __init__(self, memory: Memory):
        self._owned = memory._owned
        self._device = device = memory._runtime.device
        own = device.traits.pointer_handles  # the own CUDA runtime's managed memory: mapped as it is
        self._runtime = None if own else memory._runtime.handle
        self._handle = memory._handle
        if own:
            address = memory._cuda_address
        else:
            with device.library.memory_context():
                address = capi.map_memory(self._runtime, self._handle)
        self.ptr: Any = ffi.cast("uint8_t *", address)
        self._owned.pin()
        self._refs = 0
        self._memory_ref: Memory | None = memory
        self._lock = threading.Lock()

    def acquire(self) -> None:
        with self._lock:
            self._refs += 1

    def release(self, _cdata: Any = None) -> None:
        with self._lock:
            self._refs -= 1
            last = self._refs == 0
        if last:
            memory, self._memory_ref = self._memory_ref, None
            if memory is not None:
                memory._mapping = None
            try:
                if self._runtime is not None:
                    with self._device.library.memory_context():
                        capi.unmap_memory(self._runtime, self._handle)
            except Exception:
                pass
            self._owned.unpin()

    def view(self, nbytes: int, offset: int = 0, writable: bool = True) -> np.ndarray:
        """A uint8 numpy array over ``[offset, offset + nbytes)``; keeps the mapping alive. Not ``writable``: over
        a read-only buffer, so that no ``setflags(write=True)`` can make it writable again."""
        self.acquire()
        try:
            base = ffi.gc(ffi.cast("uint8_t *", self.ptr) + offset, self.release)
            buffer = ffi.buffer(base, nbytes)
            return np.frombuffer(buffer if writable else memoryview(buffer).toreadonly(), dtype=np.uint8)
        except BaseException:
            self.release()
            raise


class _MapContext:
    """What ``map()`` returns: use as ``with x.map() as view``, or call ``.view()``."""

    __slots__ = ("_make", "_view")

    def __init__(self, make: Callable[[], np.ndarray]):
        self._make = make
        self._view: np.ndarray | None = None

    def view(self) -> np.ndarray:
        return self._make()

    def __enter__(self) -> np.ndarray:
        view = self._view = self._make()
        return view

    def __exit__(self, *exc: object) -> None:
        self._view = None  # the mapping ends when the caller's references go too


class Memory(Child):
    """A block of device memory of one runtime: ``Memory(rt, size)`` or :meth:`Runtime.allocate_memory`.

    Attributes: ``size`` (bytes), ``host_read``, ``host_write``, ``export_sharing``, ``usage``, ``runtime``.
    ``mem[a:b]`` is a :class:`MemorySlice`. Closing frees the memory (once no view needs it).

    Raises:
        ArgumentTypeError: ``size`` is not an int.
        InvalidArgumentError: ``size`` is not positive, too large, or ``usage`` has unknown bits.
        OutOfMemoryError: the device (or host) has no room for it.
    """

    __reduce_ex__ = unpicklable("send its contents as a numpy array and allocate memory there")

    def __init__(
        self,
        runtime: Parent,
        size: int,
        *,
        host_read: bool = False,
        host_write: bool = False,
        export_sharing: bool = False,
        usage: MemoryUsage | int = MemoryUsage.STORAGE,
    ):
        runtime.ensure_open()
        size = _size_arg(size, "allocate_memory")
        usage = MemoryUsage(capi.enum_arg(MemoryUsage, usage, "allocate_memory: usage"))
        flags = (bool(host_read), bool(host_write), bool(export_sharing), int(usage))
        block = runtime.device.allocate(size, flags)
        self._setup(runtime, block.handle, size, flags, block.release, None, block.host_address, block.cuda_address,
                    context=block.context)

    @classmethod
    def _imported_host(cls, runtime: Parent, size: int, address: int, owner: object, pooled: bool = False) -> Memory:
        """NdArray.over_host's memory: the caller's host memory of ``size`` bytes at ``address`` (CPU backends),
        writable and C-contiguous (the caller checked it: a raw address, not for users); ``owner``, what keeps it
        alive, is held as long as the native handle can be used (None: the caller sees to it). Closing forgets it
        rather than frees it; ``pooled``: the handle is the runtime's import of that address, shared and kept
        (``Device.pooled``: for kernel arguments, never mapped)."""
        runtime.ensure_open()
        if not runtime.device.traits.imports_host_memory:
            raise NotSupportedError(
                f"{runtime.arch.name} cannot address host memory of the caller's (libtaichi_c_api 1.7.4 imports "
                "host memory on CPU backends only): copy it instead"
            )
        size = _size_arg(size, "import_cpu_memory")
        if pooled:
            return cls._imported(runtime, runtime.device.pooled(address, size), size, True, owner, address, None, True)
        handle = capi.import_cpu_memory(runtime.handle, address, size).cdata
        return cls._imported(runtime, handle, size, True, owner, address, None)

    @classmethod
    def _imported_cuda(cls, runtime: Parent, size: int, pointer: int, owner: object, pooled: bool = False) -> Memory:
        """NdArray.over_cuda's memory: another library's CUDA memory (torch, CuPy, JAX) of ``size`` bytes at
        ``pointer`` on this runtime's device, shared; ``owner`` and ``pooled`` as :meth:`_imported_host` takes them."""
        runtime.ensure_open()
        size = _size_arg(size, "import_cuda_memory")
        if pooled or runtime.device.traits.pointer_handles:  # the runtime's pool (the own CUDA runtime's: the pointer)
            handle = runtime.device.pooled(pointer, size)
            return cls._imported(runtime, handle, size, False, owner, None, pointer, pooled)
        handle = capi.import_cuda_memory(runtime.handle, pointer, size).cdata
        return cls._imported(runtime, handle, size, False, owner, None, pointer)

    @classmethod
    def _imported(cls, runtime: Parent, handle: Any, size: int, host_visible: bool, owner: object,
                  host_address: int | None, cuda_address: int | None, pooled: bool = False) -> Memory:
        self = cls.__new__(cls)
        release = (functools.partial(_keep_pooled, owner) if pooled or runtime.device.traits.pointer_handles
                   else functools.partial(_forget_imported, runtime.handle, handle, owner))
        flags = (host_visible, host_visible, False, int(MemoryUsage.STORAGE))
        self._setup(runtime, handle, size, flags, release, owner, host_address, cuda_address, quiet=pooled)
        return self

    def _setup(self, runtime: Parent, handle: Any, size: int, flags: tuple[bool, bool, bool, int],
               release: Callable[[], object], owner: object, host_address: int | None,
               cuda_address: int | None, quiet: bool = False, context: int | None = None) -> None:
        """Every route's one list of attributes: the handle, what it holds (``owner``: imported memory's, kept
        by the release too), where the host sees it, and the record that releases it (``quiet`` for a pooled
        import: see Owned)."""
        self._handle: Any = handle
        self._size = size
        self._flags = flags
        self._mapping: _Mapping | None = None
        self._cuda_address = cuda_address
        self._cuda_ctx: int | None = context  # the CUDA context of the pointer: found when first asked
        self._host: Any = owner
        self._host_address = host_address
        self._attach(runtime, Owned(release, runtime.owned, quiet))

    _kind = "memory"

    @property
    def size(self) -> int:
        """Size in bytes."""
        return self._size

    @property
    def handle(self) -> Any:
        """The C-API's ``TiMemory`` handle (for the flat API, :mod:`taichi_aot.capi`)."""
        return self._handle

    @property
    def host_read(self) -> bool:
        """Whether the host may read it through a mapping."""
        return self._flags[0]

    @property
    def host_write(self) -> bool:
        """Whether the host may write it through a mapping (views are writable)."""
        return self._flags[1]

    @property
    def export_sharing(self) -> bool:
        """Whether it was allocated exportable to other APIs."""
        return self._flags[2]

    @property
    def usage(self) -> MemoryUsage:
        """How the device uses it."""
        return MemoryUsage(self._flags[3])

    # -- mapping ------------------------------------------------------------------

    def host_view(self, nbytes: int | None = None, offset: int = 0, writable: bool = True) -> np.ndarray:
        """A uint8 view of ``nbytes`` from ``offset``, whatever the host flags (for the package: staging, CPU
        backends; :meth:`map` is the users' door, whose views are writable only with ``host_write``)."""
        mapping = self._mapping
        if mapping is None:
            mapping = self._mapping = _Mapping(self)
        return mapping.view(self._size - offset if nbytes is None else nbytes, offset, writable)

    def keep_mapped(self) -> tuple[int, Callable[[], None]]:
        """Map this memory until the returned call unmaps it (for the package's staged copies, written between
        launches: on Vulkan, mapping memory waits for the device): its host address, and the unmap, which holds only
        native handles and the lifetime record, so that no reference cycle runs through a mapping kept so (a view's
        would: numpy does not show the collector what its arrays hold). The memory stays pinned until then."""
        self.ensure_open()
        if self._runtime.device.traits.pointer_handles:  # managed memory: the host addresses it as it is
            self._owned.pin()
            return self.cuda_pointer(), self._owned.unpin
        device = self._runtime.device
        with device.library.memory_context():
            address = capi.map_memory(self._runtime.handle, self._handle)
        self._owned.pin()
        return address, functools.partial(_unkeep, self._runtime.handle, self._handle, self._owned, device)

    def host_span(self) -> tuple[int, int] | None:
        """The host's addresses of this memory, first and one past the last (CPU backends, or while mapped)."""
        address = self._host_address
        mapping = self._mapping
        if address is None and mapping is not None:
            address = int(ffi.cast("uintptr_t", mapping.ptr))
        return None if address is None else (address, address + self._size)

    def cuda_pointer(self) -> int:
        """The CUDA device pointer of this memory (CUDA runtimes)."""
        ptr = self._cuda_address
        if ptr is None:
            info = capi.export_cuda_memory(self._runtime.handle, self._handle)
            ptr = self._cuda_address = int(ffi.cast("uintptr_t", info.ptr))
        return ptr

    def cuda_context(self) -> int:
        """The CUDA context that owns this memory's pointer (0: none, Taichi's own memory), found once."""
        ctx = self._cuda_ctx
        if ctx is None:
            ctx = self._cuda_ctx = _cuda.context_of(self.cuda_pointer())
        return ctx

    @contextlib.contextmanager
    def in_use(self) -> Iterator[None]:
        """The memory pinned for a use of several steps (a copy through a mapping or staging buffers): a close on
        another thread (a runtime any thread uses) releases it after the use, never under it. ClosedError where it
        was closed before."""
        owned = self._owned
        owned.pin()
        try:
            if owned.closed:
                raise ClosedError(f"this {self._kind} is closed")
            yield
        finally:
            owned.unpin()

    def copy_host(self, data: Any, nbytes: int, to_device: bool) -> None:
        """memcpy between ``data`` (a contiguous buffer) and this memory, mapped for just this copy.

        Hot path of to_numpy/from_numpy: a live view's mapping is used as it is, and so is a CPU backend's memory
        of a few bytes (at its host address: no C call, which would let Python's lock go, and come back for it after
        another thread's launches made with it kept); otherwise :func:`capi.memcpy_host` maps, copies and unmaps in
        one call. Its callers (an ndarray's reads and writes) hold the memory :meth:`in_use` meanwhile.
        """
        mapping = self._mapping
        if mapping is not None or (self._host_address is not None and nbytes <= _HOST_COPY_KEPT):
            if mapping is not None:  # a live view holds a mapping: use it
                self.refuse_mapped_copy()
            ptr = mapping.ptr if mapping is not None else ffi.cast("uint8_t *", self._host_address)
            if to_device:
                ffi.memmove(ptr, data, nbytes)
            else:
                ffi.memmove(data, ptr, nbytes)
            return
        if self._runtime.device.traits.pointer_handles:  # managed memory: copied where it is (the caller waited)
            ptr = ffi.cast("uint8_t *", self.cuda_pointer())
            if to_device:
                ffi.memmove(ptr, data, nbytes)
            else:
                ffi.memmove(data, ptr, nbytes)
            return
        calls = self._runtime.device.library.calls
        if calls is None:
            capi.memcpy_host(self._runtime.handle, self._handle, data, nbytes, to_device)
            return
        with calls():
            capi.memcpy_host(self._runtime.handle, self._handle, data, nbytes, to_device)

    def refuse_mapped_copy(self) -> None:
        """Raise InvalidStateError while a view of this memory lives where a mapping is a copy made when it was
        mapped and written back when it ends (libtaichi's CUDA): a copy into or out of the memory meanwhile would
        read that snapshot, or be undone by it."""
        if self._mapping is not None and self._runtime.device.traits.mapping_is_copy:
            raise InvalidStateError(
                "a view of this memory (from map(), or numpy.asarray of its ndarray) is alive, and on this runtime a "
                "mapping is a copy made when it was mapped (libtaichi's CUDA), written back when the last view goes: "
                "drop the views before copying")

    def require_host_access(self, what: str) -> None:
        """Raise InvalidStateError (naming ``what``) unless the memory was allocated for host access."""
        if not (self.host_read or self.host_write):
            raise InvalidStateError(
                f"{what}: this memory was allocated without host_read/host_write, so it cannot be mapped; "
                "allocate it with host access, or use NdArray.to_numpy()/from_numpy() which stage the copy"
            )

    def map(self) -> _MapContext:
        """``with mem.map() as view``: a uint8 numpy view of the whole memory (zero-copy).

        Writable only if the memory has ``host_write``. The memory stays mapped while a view lives.
        """
        self.ensure_open()
        self.require_host_access("Memory.map")

        def make() -> np.ndarray:
            self.ensure_open()
            self._runtime.sync()
            return self.host_view(writable=self.host_write)

        return _MapContext(make)

    # -- slices and copies ----------------------------------------------------------

    def __getitem__(self, index: slice) -> MemorySlice:
        if not isinstance(index, slice):
            raise ArgumentTypeError(f"Memory can only be sliced (mem[a:b]), not indexed with {index!r}")
        start, stop, step = index.indices(self._size)
        if step != 1:
            raise InvalidArgumentError("Memory slices must be contiguous (step 1)")
        if stop <= start:
            raise InvalidArgumentError(f"empty memory slice [{start}:{stop}]")
        return MemorySlice(self, start, stop - start)

    def slice(self, offset: int = 0, size: int | None = None) -> MemorySlice:
        """A :class:`MemorySlice` of ``size`` bytes from ``offset`` (bounds checked)."""
        size = self._size - offset if size is None else size
        return MemorySlice(self, offset, size)

    def copy_to(self, dst: Memory | MemorySlice) -> None:
        """Copy the whole memory into ``dst`` (a Memory or MemorySlice of the same size)."""
        self.slice().copy_to(dst)

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        return f"<Memory {self._size} bytes on {self._runtime.arch.name} ({state})>"


class MemorySlice:
    """``size`` bytes of a :class:`Memory` from ``offset`` (``mem[a:b]`` or ``mem.slice(offset, size)``)."""

    __reduce_ex__ = unpicklable("send its contents as a numpy array and allocate memory there")

    __slots__ = ("memory", "offset", "size")

    def __init__(self, memory: Memory, offset: int, size: int):
        if not isinstance(memory, Memory):
            raise ArgumentTypeError(f"MemorySlice needs a Memory, got {type(memory).__name__}")
        for name, v in (("offset", offset), ("size", size)):
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
                raise ArgumentTypeError(f"MemorySlice {name} must be an int, got {v!r}")
        if offset < 0 or size <= 0 or offset + size > memory.size:
            raise InvalidArgumentError(
                f"memory slice [{offset}, {offset + size}) is outside the memory's {memory.size} bytes"
            )
        self.memory = memory
        self.offset = int(offset)
        self.size = int(size)

    def copy_to(self, dst: Memory | MemorySlice) -> None:
        """Copy these bytes into ``dst`` (same size, same runtime). Works on every backend."""
        if isinstance(dst, Memory):
            dst = dst.slice()
        if not isinstance(dst, MemorySlice):
            raise ArgumentTypeError(f"copy_to: dst must be a Memory or MemorySlice, got {type(dst).__name__}")
        src_mem, dst_mem = self.memory, dst.memory
        src_mem.ensure_open()
        dst_mem.ensure_open()
        if src_mem._runtime is not dst_mem._runtime:
            raise InvalidArgumentError("copy_to: source and destination belong to different runtimes")
        if dst.size != self.size:
            raise InvalidArgumentError(f"copy_to: sizes differ (source {self.size} bytes, destination {dst.size})")
        src_mem._runtime.device.transfers.copy(dst_mem, dst.offset, src_mem, self.offset, self.size)

    def __repr__(self) -> str:
        return f"<MemorySlice [{self.offset}, {self.offset + self.size}) of {self.memory!r}>"
