"""The device every other one builds on: libtaichi's memory as the C-API allocates it (the gfx backends), and
what the object layer asks of a device (see the package's docstring); a runtime's native part (:class:`Native`),
libtaichi's as the C-API makes it (:func:`library_native`); and this room's registration's ``open_native`` and
``device``, the fallback for every arch no other room serves."""

from __future__ import annotations

import functools
import math
import operator
import weakref
from collections.abc import Iterable
from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING, Any, Callable, NamedTuple

import numpy as np

from .. import capi
from .._native import ffi, lib
from ..capi.handles import mark_enqueued
from ..errors import ArgumentTypeError, ClosedError, InvalidArgumentError, check

if TYPE_CHECKING:  # pragma: no cover
    from .._lifetime import Parent
    from .staging import Read, Staging

__all__ = ["Block", "Device", "DeviceAliases", "LaunchState", "Mover", "Native", "Traits", "device", "library_native",
           "open_native"]


class DeviceAliases:
    """The names a runtime answered before its device did, kept for a release: a ``Runtime``'s own, read from its
    ``device``."""

    device: Device

    @property
    def cuda_device(self) -> Any:
        """taichi_aot's own CUDA runtime's GPU (``_cudart.CudaDevice``; None: libtaichi's runtime). An alias kept for
        a release: ``rt.device`` says what the runtime is (``own_runtime``) and holds it (``cuda``)."""
        return getattr(self.device, "cuda", None)


class Native(NamedTuple):
    """A runtime's native part, as a device room's ``open_native`` made it."""

    #: libtaichi's ``TiRuntime`` (NULL on the own CUDA runtime until a module needs libtaichi's beside it)
    handle: Any
    #: the runtime's C flags (``capi.pending_flag``): [0] work may be running, [1] libtaichi's launches refused,
    #: [2] the most launches queued before one waits
    pending: Any
    #: what destroys it (its memory and modules given back first)
    release: Callable[[], object]
    #: the device it was made on (Vulkan's: the one libtaichi was shown)
    device_index: int
    #: taichi_aot's own CUDA runtime's device (``_cudart.CudaDevice``), or None: libtaichi's runtime
    cuda: Any
    #: the own CUDA runtime's libtaichi runtime, once a module needs it (its handle, or empty)
    library: list[Any]
    #: the registered room that made it (``placement.register``), which gives its device
    room: str = ""


def library_native(handle: Any, index: int, destroy: Callable[[Any], object] | None = None) -> Native:
    """libtaichi's runtime ``handle`` (made on device ``index``) as a :class:`Native`, destroyed by ``destroy``
    (``capi.destroy_runtime``)."""
    return Native(handle, capi.pending_flag(handle), functools.partial(destroy or capi.destroy_runtime, handle), index,
                  None, [])


def open_native(arch: Any, device_index: int | None, cpu_threads: int | None, cuda_runtime: str | None) -> Native:
    """libtaichi's runtime of ``arch``, as the C-API makes it (this room's registration: every arch)."""
    index = 0 if device_index is None else device_index
    return library_native(capi.create_runtime(arch, index, cpu_threads=cpu_threads).cdata, index)


def device(runtime: Parent, native: Native) -> Device:
    """The device of a runtime this room made: libtaichi's memory as the C-API allocates it."""
    return Device(runtime)


class LaunchState(NamedTuple):
    """The native state a device opened for an own launch of its arch (:meth:`Device.launch_state`): its id in C (0:
    none), and why there is none."""

    id: int
    why: str


#: How the host's bytes move between a numpy array and a memory: ``(memory, array)``.
Mover = Callable[[Any, np.ndarray], None]


class Block(NamedTuple):
    """What an allocation gives the memory that holds it: the native handle (a ``TiMemory``, or the own CUDA
    runtime's tagged pointer), the release, and where the host and CUDA address it (None: not known yet)."""

    handle: Any
    release: Callable[[], object]
    host_address: int | None = None
    cuda_address: int | None = None
    context: int | None = None


def _inside(calls: Callable[[], AbstractContextManager[None]], call: Callable[[], object]) -> None:
    with calls():
        call()


def _read_direct(memory: Any, out: np.ndarray) -> None:
    memory.copy_host(out, memory.size, to_device=False)


def _checked_fill(fill: Callable[[np.ndarray], None], memory: Any, array: Any) -> None:
    """A fill (:meth:`Device.fill_writer`) of an open ``memory`` from a numpy array of its size, made C-contiguous,
    with the memory pinned (a close on another thread releases it after the write, never under it)."""
    memory.ensure_open()
    if not isinstance(array, np.ndarray):
        raise ArgumentTypeError(f"a fill needs a numpy array, got {type(array).__name__}")
    if array.nbytes != memory.size:
        raise InvalidArgumentError(f"a fill of a memory of {memory.size} bytes needs an array of as many, got "
                                   f"{array.nbytes}")
    if array.dtype.hasobject:
        raise ArgumentTypeError("a fill needs an array of numbers, not of Python objects")
    with memory.in_use():
        fill(np.ascontiguousarray(array))


def _write_direct(memory: Any, data: np.ndarray) -> None:
    memory.copy_host(data, memory.size, to_device=True)


#: Where a device's ndarrays live by default, by their default host access (``describe()``'s words).
_MEMORY_WORDS = {"readwrite": "host-visible memory", "none": "device memory"}


class Traits(NamedTuple):
    """What a device is, fixed when it is made: a room's class gives its own (its base's ``_replace``-d); a device
    may give itself another once, as it opens (a Vulkan device with the own launch open serves any thread). Read
    as ``device.traits.<name>``."""

    #: new memory is zero-filled already (else the ndarray writes zeros)
    zeroed: bool = False
    #: a host array passed to a kernel is copied into device memory (else into host-visible memory, read in place)
    kernel_copies_on_device: bool = False
    #: the DLPack device type of memory the host does not address (kDLVulkan; CUDA's is 2)
    dlpack_type: int = 7
    #: memory handles are the driver's pointers, and host-visible memory is addressed as it is (the own CUDA
    #: runtime's managed memory), never mapped through libtaichi
    pointer_handles: bool = False
    #: other libraries' CUDA arrays are the runtime's memory as they are, imported by pointer (the CUDA devices), not
    #: arrays of another device, copied
    addresses_cuda_arrays: bool = False
    #: the caller's host memory can be imported as it is (the CPU backends: libtaichi imports host memory there only)
    imports_host_memory: bool = False
    #: memory the host does not map is copied through staging buffers (the gfx backends), not by a driver or as it is
    stages: bool = True
    #: all the runtime's work goes through libtaichi's queue and is counted in its pending flags (the gfx backends),
    #: so a wait with none counted has nothing to wait for; not where a driver runs copies of its own (CUDA)
    waits_counted: bool = True
    #: a mapping is a copy of the memory made when it is mapped, written back when it ends (libtaichi's CUDA), not
    #: the memory itself: what kernels write meanwhile is not seen through it
    mapping_is_copy: bool = False
    #: the runtime and its objects may be used from any thread, not only the one that made it (the own CUDA runtime;
    #: a Vulkan runtime with the own launch open, whose calls are made one at a time)
    any_thread: bool = False
    #: the runtime is taichi_aot's own (CUDA, ``_cudart``), not libtaichi's: it has no libtaichi runtime (nor its
    #: capabilities and images) unless a module needs one beside it, on device 0 (:meth:`Device.library_runtime`).
    #: Read inside placement/ only: the rooms above ask the traits and methods below
    own_runtime: bool = False
    #: libtaichi's runtime is the runtime itself: it loads the modules, has capability levels and threads (False:
    #: the own CUDA runtime, which loads its modules' PTX itself)
    library_native: bool = True
    #: why the device makes no images, or None where libtaichi's runtime makes them
    no_images: str | None = None
    #: what a runtime's repr says of it beside its arch
    runtime_words: str = ""
    #: kernels run on a CUDA stream the caller may set (``Runtime.set_cuda_stream``)
    cuda_streams: bool = False
    #: a launch returns once its kernels have run (the CPU backends: they run on the caller's thread and the
    #: runtime's pool), so no thread's work is left running that a wait on another thread, which found nothing
    #: counted, could miss: a runtime any thread uses waits only where work was counted, as one thread's does
    launches_finish: bool = False
    #: libtaichi's launches on the runtime may be made from any thread too (its calls are made one at a time: the
    #: own Vulkan launch's wrappers), not only the runtime's
    library_any_thread: bool = False


_TRAIT_NAMES = frozenset(Traits._fields)


class Device:
    """libtaichi's memory as the C-API allocates it (OpenGL, GLES, Metal; the base of the others): host-visible by
    default, copies through a mapping, or through a staging buffer for memory made without host access."""

    #: the policy's name, as ``config`` and ``archs`` show it
    policy = "libtaichi"
    #: what the device is (:class:`Traits`)
    traits = Traits()
    #: what libtaichi's memory calls (map, unmap, copies, frees) run inside, or None: nothing (libtaichi's CUDA
    #: runtime: device 0's primary context, whatever another library left current on the thread)
    library_calls: Callable[[], AbstractContextManager[None]] | None = None

    def __init__(self, runtime: Parent):
        self.arch = runtime.arch
        self.device_index = runtime.device_index
        self._staging: Staging | None = None
        self._closed = False  # set by close(): no staging is made after it
        self._runtime_ref = weakref.ref(runtime)  # the runtime owns its device (and its finalizer the close)
        #: the pool of other libraries' memory imported for kernel arguments (:meth:`pooled`): address -> (bytes,
        #: TiMemory as an int), read by the C call too
        self.imports: dict[int, tuple[int, int]] = {}
        #: the CUDA stream the runtime's kernels run on (a ``CUstream`` handle: :meth:`select_stream`), or None: the
        #: legacy default stream
        self.stream: int | None = None

    def __init_subclass__(cls, **kwargs: Any):
        """A room's class that still gives a trait as a class attribute of its own (``any_thread = True``, as rooms
        did before :attr:`traits`, for a release): folded into its traits."""
        super().__init_subclass__(**kwargs)
        given = {name: cls.__dict__[name] for name in _TRAIT_NAMES if name in cls.__dict__}
        for name in given:
            delattr(cls, name)
        if given:
            cls.traits = cls.traits._replace(**given)

    def __getattr__(self, name: str) -> Any:
        """A trait by the name it had before :attr:`traits` held them (``device.any_thread``), kept for a release."""
        if name in _TRAIT_NAMES:
            return getattr(self.traits, name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __setattr__(self, name: str, value: Any) -> None:
        """A trait set by its old name (``device.any_thread = True``) sets it in the device's own traits."""
        if name in _TRAIT_NAMES:
            name, value = "traits", self.traits._replace(**{name: value})
        object.__setattr__(self, name, value)

    @property
    def _runtime(self) -> Parent:
        runtime = self._runtime_ref()
        if runtime is None:  # pragma: no cover - a device is used only through its live runtime
            raise ClosedError("the runtime of this device is gone")
        return runtime

    def pooled(self, address: int, nbytes: int) -> Any:
        """The runtime's import of the ``nbytes`` at ``address`` (another library's host memory on a CPU, CUDA memory
        on CUDA) that kernel arguments travel in: imported once an address, kept for the runtime's life
        (libtaichi_c_api 1.7.4 cannot release an import), and shared by every array found there later, as allocators
        hand the same addresses out again. An import says only where memory is: each launch writes the live array's
        own shape and dtype beside it. A larger array at an address imported smaller is imported anew (the device's
        :meth:`_import`); the own CUDA runtime's launches take the pointer itself (its own ``pooled``)."""
        entry = self.imports.get(address)
        if entry is not None and entry[0] >= nbytes:  # the C call's imports too
            return ffi.cast("TiMemory", entry[1])
        rt = self._runtime
        rt.ensure_open()
        # straight to the library, as the C call does (the flat API's registry never sees these handles: x64
        # numbers memory 1, 2, ... in every runtime, and a pool lives as long as its runtime)
        handle = self._import(rt.handle, address, nbytes)
        self.imports[address] = (nbytes, int(ffi.cast("uintptr_t", handle)))
        return handle

    def _import(self, handle: Any, address: int, nbytes: int) -> Any:
        """libtaichi's import of another library's memory at ``address`` into runtime ``handle``: host memory here
        (libtaichi_c_api 1.7.4 imports it on the CPU backends only)."""
        memory = lib.ti_import_cpu_memory(handle, ffi.cast("void *", address), nbytes)
        check("import_cpu_memory")
        return memory

    # -- what memory is made of --------------------------------------------------------------------------------

    def default_access(self) -> tuple[bool, bool]:
        """``(host_read, host_write)`` of an ndarray made with ``host_access=None``."""
        return True, True

    def one_thread_why(self) -> str:
        """Why the runtime keeps to the thread that made it, with what to do, where it does (``traits.any_thread``
        false: what WrongThreadError says); "": libtaichi's reason."""
        return ""

    def why_default(self) -> str:
        """Why the default is what it is, in a few words (``config``, the guide's table)."""
        return "libtaichi's memory, mapped by the host"

    def allocate(self, size: int, flags: tuple[bool, bool, bool, int]) -> Block:
        """``size`` bytes with ``flags`` (host_read, host_write, export_sharing, usage)."""
        rt = self._runtime.handle
        with self.memory_context():
            handle = capi.allocate_memory(rt, size=size, host_read=flags[0], host_write=flags[1],
                                          export_sharing=flags[2], usage=flags[3]).cdata
        free = functools.partial(capi.free_memory, rt, handle)
        calls = self.library_calls  # the free runs inside it too, whenever the memory goes
        return Block(handle, free if calls is None else functools.partial(_inside, calls, free))

    def memory_context(self) -> AbstractContextManager[None]:
        """What one of libtaichi's memory calls runs inside (:attr:`library_calls`; nothing where it is None)."""
        calls = self.library_calls
        return nullcontext() if calls is None else calls()

    def libtaichi_context(self) -> AbstractContextManager[None]:
        """What libtaichi's calls on the whole runtime (module loads, waits) run inside: nothing here (CUDA: device
        0's primary context, whatever another library left current on the thread)."""
        return nullcontext()

    def library_beside(self) -> bool:
        """Whether libtaichi's runtime may be made beside this one, for a module's kernels only libtaichi launches
        (the own CUDA runtime of device 0: the one place that rule is kept)."""
        return False

    def library_why_not(self) -> str | None:
        """Why libtaichi has no runtime here to launch a kernel (the end of a sentence), or None where it has one or
        may make one beside."""
        return None

    def library_runtime(self, handle: Any, on_its_thread: bool, thread: int) -> Any:
        """libtaichi's runtime for a module's kernels only libtaichi launches: the runtime's own (``handle``), or one
        made beside the own runtime now (:meth:`library_beside`), or raises with the reason there is none."""
        return handle

    def launch_state(self) -> LaunchState:
        """The native state an own launch of the runtime's arch takes (the Vulkan devices': the own Vulkan state they
        open, ``_csrc/backends/vkqueue.c``); none here."""
        return LaunchState(0, "the runtime's device opened none")

    def select_stream(self, stream: int | None, library: Any) -> None:
        """Kernels run on ``stream`` from now on (``Runtime.set_cuda_stream`` checked it, waited, and gave it to the
        launch backends first); libtaichi's launches too, where it has a runtime (``library``: its handle, NULL where
        none was made: its setting is the process's, not the runtime's). A device with no CUDA stream never gets
        here (``traits.cuda_streams``)."""
        if library:
            capi.set_cuda_stream(stream)
        self.stream = stream

    def set_wait(self, policy: str) -> None:
        """How the device's own waits wait (:mod:`taichi_aot.waits`: one of its POLICIES): nothing here, where the
        driver's waits are taken as they are."""

    def synchronize(self) -> None:
        """Wait for the device's work outside libtaichi's queue (the own CUDA runtime's legacy default stream):
        nothing here."""

    def host_visible(self, memory: Any) -> bool:
        """Whether the host addresses ``memory`` as it is (a view without a copy)."""
        return bool(memory.host_read)

    # -- how bytes move ----------------------------------------------------------------------------------------

    def reader(self, memory: Any) -> Mover:
        """How ``memory``'s bytes reach a host array, chosen once."""
        return _read_direct if memory.host_read else self.staging.download

    def read_later(self, memory: Any, into: np.ndarray | None = None) -> Read | None:
        """A copy of ``memory`` the host does not read, enqueued now into staging buffers (after the queued kernel
        that writes it), and what reads it into an array once the runtime has waited; None where the memory is read
        as it is after the wait (host-visible memory, a driver's copies; ``into``, the array it will be read into
        where the caller has one, where the device's reader takes it as it is)."""
        return None if memory.host_read or not self.traits.stages else self.staging.download_later(memory, memory.size)

    def writer(self, memory: Any) -> Mover:
        """How a host array's bytes reach ``memory``, chosen once (memory the host reads but does not write: staged,
        and waited for, so that a view of it shows the bytes once the copy returns)."""
        if memory.host_write:
            return _write_direct
        return self.staging.upload_waited if memory.host_read else self.staging.upload

    def fill_writer(self, memory: Any) -> Callable[[np.ndarray], None] | None:
        """How a host array of ``memory``'s size reaches it when it is written again and again, with the least work on
        the host's side: the device's own write (:meth:`_fill`), which waits or orders itself as :meth:`writer`'s
        does; None where :meth:`writer` serves. ``memory`` is a Memory of this device's runtime; each write checks
        that it is still open and that the array is a numpy array of its size (typed errors). The kept copies
        (``_staged.Again``), which check their arrays at each call, take :meth:`_fill` itself."""
        if not all(hasattr(memory, a) for a in ("handle", "host_write", "ensure_open")) or (
                memory.runtime is not self._runtime):
            raise ArgumentTypeError(f"fill_writer needs a Memory of this device's runtime (an ndarray's: nd.memory), "
                                    f"got {type(memory).__name__}")
        memory.ensure_open()
        fill = self._fill(memory)
        return None if fill is None else functools.partial(_checked_fill, fill, memory)

    def _fill(self, memory: Any) -> Callable[[np.ndarray], None] | None:
        """:meth:`fill_writer`'s write, with no check around it (a C-contiguous array of ``memory``'s size, an open
        memory: the caller's to see to); None here: :meth:`writer` serves."""
        return None

    def read_waits(self, memory: Any) -> bool:
        """Whether a read of ``memory`` into a host array waits for the queued kernels first (they may write what it
        reads); not where the read is a copy the device queues after them and waits for (device memory, through
        staging)."""
        return bool(memory.host_read or not self.traits.stages)

    def write_waits(self, memory: Any) -> bool:
        """Whether a host array's write into ``memory`` waits for the queued kernels first (they may read what it
        overwrites); not where the write is a copy the device queues after them (device memory, through staging)."""
        return bool(memory.host_write or memory.host_read or not self.traits.stages)

    def copy(self, dst: Any, dst_offset: int, src: Any, src_offset: int, size: int) -> None:
        """Copy ``size`` bytes between two memories of the runtime, enqueued (the callers' slices are checked: a
        MemorySlice's, or staging buffers' sized for the copy)."""
        d, s = ffi.new("TiMemorySlice *"), ffi.new("TiMemorySlice *")
        d.memory, d.offset, d.size = dst.handle, dst_offset, size
        s.memory, s.offset, s.size = src.handle, src_offset, size
        # the C call itself: the flat function's lookups and coercions cost ten times it on a staged launch's path
        lib.ti_copy_memory_device_to_device(self._runtime.handle, d, s)
        mark_enqueued(self._runtime.handle)  # after: a wait another thread clears the count in meanwhile waits for it
        check("copy_memory_device_to_device")

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
        return self._host_array(dims, dt)

    def _host_array(self, dims: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        """The host array of a checked shape and dtype: a plain one, where nothing is faster."""
        return np.zeros(dims, dtype)

    def module_source(self, data: bytes | None, path: str) -> tuple[bytes | None, str]:
        """A checked module as this device loads it: ``(bytes of a .tcm, or None, path)``; as it is here."""
        return data, path

    def loop_threads(self) -> int | None:
        """The threads a kernel's loop over a range known only at launch is dispatched with at the most (None: as
        the module says)."""
        return None

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

    def describe(self) -> dict[str, Any]:
        """What ``config`` and the bench show of the device."""
        read, write = self.default_access()
        access = {(True, True): "readwrite", (True, False): "read", (False, True): "write"}.get((read, write), "none")
        return {"policy": self.policy, "default_host_access": access, "why": self.why_default()}

    def device_name(self) -> str | None:
        """The name of the device the runtime runs on, where this policy knows it cheaply (None: not known)."""
        return None

    def __repr__(self) -> str:
        """``<Device vulkan:0 'llvmpipe (LLVM 15.0.6, 256 bits)' policy=vulkan-shared (host-visible memory by
        default)>``: the arch, the device's index and name, the placement policy and where ndarrays live by it."""
        facts = self.describe()
        name = self.device_name()
        named = f" {name!r}" if name else ""
        return (f"<Device {self.arch.name.lower()}:{self.device_index}{named} policy={facts['policy']} "
                f"({self.memory_words(facts['default_host_access'])} by default)>")

    def memory_words(self, access: str) -> str:
        """Where ndarrays of the default host ``access`` (``describe()``'s word) live, in a few words."""
        return _MEMORY_WORDS.get(access) or f"memory of host access {access}"
