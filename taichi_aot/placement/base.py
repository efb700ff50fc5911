"""The device every other one builds on: libtaichi's memory as the C-API allocates it (the gfx backends), and
what the object layer asks of a device (see the package's docstring); a runtime's native part (:class:`Native`),
libtaichi's as the C-API makes it (:func:`library_native`); and this room's registration's ``open_native`` and
``device``, the fallback for every arch no other room serves."""

from __future__ import annotations

import functools
import weakref
from collections.abc import Mapping
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Callable, NamedTuple

from .. import capi
from .._native import ffi, lib
from ..errors import check
from .parts import Library, Stream, Transfers, live

if TYPE_CHECKING:  # pragma: no cover
    from .._lifetime import Parent

__all__ = ["Block", "Device", "LaunchState", "Native", "Traits", "device", "library_native", "open_native"]


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
    #: taichi_aot's own CUDA runtime's device (``drivers.cudart.CudaDevice``), or None: libtaichi's runtime
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
    #: capabilities and images) unless a module needs one beside it, on device 0 (:meth:`.parts.Library.runtime`).
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


class Device:
    """libtaichi's memory as the C-API allocates it (OpenGL, GLES, Metal; the base of the others): host-visible by
    default, copies through a mapping, or through a staging buffer for memory made without host access.

    Composed of small parts, each a room's own where it differs (:mod:`taichi_aot.placement.parts`): what it is
    (:attr:`traits`), how bytes move (:attr:`transfers`), libtaichi's runtime as it has it (:attr:`library`) and the
    CUDA stream its kernels run on (:attr:`stream`)."""

    #: the policy's name, as ``config`` and ``archs`` show it
    policy = "libtaichi"
    #: what the device is (:class:`Traits`)
    traits = Traits()
    #: the classes of its parts, each made with the device and its runtime (a room's class names its own)
    transfers_type: type[Transfers] = Transfers
    library_type: type[Library] = Library
    stream_type: type[Stream] = Stream

    def __init__(self, runtime: Parent):
        self.arch = runtime.arch
        self.device_index = runtime.device_index
        self._runtime_ref = weakref.ref(runtime)  # the runtime owns its device (and its finalizer the close)
        #: the pool of other libraries' memory imported for kernel arguments (:meth:`pooled`): address -> (bytes,
        #: TiMemory as an int), read by the C call too
        self.imports: dict[int, tuple[int, int]] = {}
        #: how bytes move between the host and the device's memory (:class:`~.parts.Transfers`)
        self.transfers = self.transfers_type(self, runtime)
        #: libtaichi's runtime as the device has it (:class:`~.parts.Library`)
        self.library = self.library_type(self, runtime)
        #: the CUDA stream the runtime's kernels run on (:class:`~.parts.Stream`)
        self.stream = self.stream_type(self, runtime)

    @property
    def _runtime(self) -> Parent:
        return live(self._runtime_ref)

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
        with self.library.memory_context():
            handle = capi.allocate_memory(rt, size=size, host_read=flags[0], host_write=flags[1],
                                          export_sharing=flags[2], usage=flags[3]).cdata
        free = functools.partial(capi.free_memory, rt, handle)
        calls = self.library.calls  # the free runs inside it too, whenever the memory goes
        return Block(handle, free if calls is None else functools.partial(_inside, calls, free))

    def launch_state(self) -> LaunchState:
        """The native state an own launch of the runtime's arch takes (the Vulkan devices': the own Vulkan state they
        open, ``_csrc/backends/vkqueue.c``); none here."""
        return LaunchState(0, "the runtime's device opened none")

    def set_wait(self, policy: str) -> None:
        """How the device's own waits wait (:mod:`taichi_aot.waits`: one of its POLICIES): nothing here, where the
        driver's waits are taken as they are."""

    def host_visible(self, memory: Any) -> bool:
        """Whether the host addresses ``memory`` as it is (a view without a copy)."""
        return bool(memory.host_read)

    def module_source(self, data: bytes | None, path: str,
                      files: Mapping[str, bytes] | None = None) -> tuple[bytes | None, str]:
        """A checked module as this device loads it: ``(bytes of a .tcm, or None, path)``; as it is here. ``files``:
        the folder's files as they were read, by name (where ``path`` is a folder that holds them as they were),
        which a device that changes the module starts from: none is read again."""
        return data, path

    def loop_threads(self) -> int | None:
        """The threads a kernel's loop over a range known only at launch is dispatched with at the most (None: as
        the module says)."""
        return None

    def close(self) -> None:
        """The runtime closes: its transfers' staging buffers' mappings end (its memory goes with the native runtime);
        the closed staging stays, refusing new buffers to a copy another thread makes after this."""
        self.transfers.close()

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
