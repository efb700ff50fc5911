"""Runtime: the object that owns a C-API runtime and everything allocated on it.

Lifetimes (see :mod:`taichi_aot._lifetime`): children pin the runtime, so it is
destroyed only once it is closed and its last child is gone; ``close()`` closes
every live child first. A runtime collected without ``close()`` (or a ``with``
block) is closed by the garbage collector with a ``ResourceWarning``, as an open
file is; runtimes still open when the interpreter exits are closed quietly.

Threads. The C-API keeps its error state per thread and takes no lock: a Runtime of libtaichi and its children may
only be used from the thread that created it; any other thread gets :class:`~taichi_aot.errors.WrongThreadError`
(views and closing by garbage collection work from any thread). taichi_aot's own CUDA runtime may be used from
any thread, as torch's and CuPy's arrays are (:mod:`taichi_aot._cudart`), and so may a Vulkan runtime with the own
Vulkan launch open, whose calls (its own and libtaichi's) are made one at a time (``backends/vulkan.c``); the
device says which (``device.traits.any_thread``).
"""

from __future__ import annotations

import atexit
import gc
import os
import threading
import time
import warnings
import weakref
from collections.abc import Mapping
from contextlib import nullcontext
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from . import _cudart, _dlpack, _library, capi
from ._archs import arch_for_module, best_arch, resolve_arch
from ._call import came_back
from ._foreign import ForeignArgs
from ._lifetime import PID, Child, LaunchGate, Owned, collection_held, unpicklable
from ._native import lib
from .backends import RuntimeBackends
from .enums import ARCH_PREFERENCE, Arch, Capability, ImageDimension, ImageUsage, MemoryUsage
from .errors import (
    ArgumentTypeError,
    ClosedError,
    InvalidArgumentError,
    NotSupportedError,
    WrongProcessError,
    WrongThreadError,
    check,
)
from .image import Image, Sampler
from .memory import Memory
from .module import AotModule
from .ndarray import NdArray
from .placement import Device, device_for, open_native
from .profile import Profile, adopt
from .replay import LaunchSequence
from .waits import resolve_wait

if TYPE_CHECKING:  # pragma: no cover
    from collections.abc import Iterable

    from .module import ModuleSource
    from .ndarray import DTypeLike, HostAccess

__all__ = ["ARCH_PREFERENCE", "Runtime", "arch_for_module", "best_arch", "resolve_arch"]

#: Every runtime not yet closed, closed quietly at interpreter exit.
_open_runtimes: weakref.WeakSet[Runtime] = weakref.WeakSet()
#: How many runtimes may be alive before making another first collects reference cycles.
_COLLECT_AT = 4


class _Recording:
    """The context manager of :meth:`Runtime.record`."""

    def __init__(self, runtime: Runtime, sequence: LaunchSequence):
        self._runtime = runtime
        self.sequence = sequence

    def __enter__(self) -> LaunchSequence:
        self._runtime.gate.record(self.sequence)  # every launch takes the slow path, which records it
        return self.sequence

    def __exit__(self, *exc: object) -> None:
        self._runtime.gate.record(None)


def _close_runtime(owned: Owned, children: weakref.WeakSet[Child], name: str, warn: bool,
                   unmaps: dict[int, Callable[[], None]]) -> None:
    if warn:
        warnings.warn(f"unclosed {name}: close it, or use it in a with block", ResourceWarning, stacklevel=2)
    # closed first, released last: every check on another thread (a launch made again after a stale one, a copy)
    # raises ClosedError from here on, and the native runtime goes once the children below, which pin it, are released
    owned.close()
    # staged copies' mappings (ForeignArgs.unmaps), which pin their memory, the own CUDA launcher's stand-ins and
    # the modules kept for reuse (module.py's _Shared); none in a forked child (the parent's, whose locks another
    # thread of the parent may have held at the fork)
    for unmap in list(unmaps.values()) if owned.in_its_process else []:
        unmap()
    unmaps.clear()
    for child in list(children):
        try:
            child._finalizer()  # the runtime's own teardown: already allowed here
        except Exception:
            pass


class Runtime:
    """A Taichi runtime on one backend; a context manager.

    Args:
        arch: an :class:`Arch`, its name (``"vulkan"``) or None for the fastest here (:func:`best_arch`:
            a GPU, then the CPU, then a software Vulkan device; ``TAICHI_AOT_ARCH`` overrides).
        device_index: the device to use: on CUDA any GPU (:mod:`taichi_aot._cudart`; None: 0); on Vulkan any device
            as ``python -m taichi_aot archs`` lists them (None: the one libtaichi picks, a discrete GPU first;
            :mod:`taichi_aot.placement.vulkan`); elsewhere as libtaichi takes it (None: 0).
        cpu_threads: CPU runtimes only: how many threads it starts (kernels run on at most this many, and at
            most as many as their module was built for). Default: ``TAICHI_AOT_CPU_THREADS``, else the cores
            this process may use (its affinity, within a container's CPU quota).
        cuda_runtime: CUDA only: "own" (the default, also "auto"; ``TAICHI_AOT_CUDA_RUNTIME``), taichi_aot's own
            CUDA runtime in the device's primary context, on any device, several at once, from any thread; on device 0
            libtaichi's runtime is made beside it for a module whose kernels need it. "taichi": libtaichi's alone
            (device 0, one at a time, its thread). ``device.traits.own_runtime`` says which; ``device.cuda`` is the
            own runtime's GPU.
        wait: how its waits wait: "auto", "spin", "yield", "block" (:mod:`taichi_aot.waits`; ``TAICHI_AOT_WAIT``).

    Raises:
        NotSupportedError: the arch cannot create a runtime here.
        InvalidArgumentError: an unknown arch name or wait policy.
    """

    __reduce_ex__ = unpicklable("create a Runtime in the other process (taichi_aot.pool's workers each make theirs)")

    _finalizer: weakref.finalize

    def __init__(self, arch: Arch | int | str | None = None, device_index: int | None = None, *,
                 cpu_threads: int | None = None, cuda_runtime: str | None = None, wait: str | None = None):
        self._arch: Arch = resolve_arch(arch)
        self._wait_policy = resolve_wait(wait)
        self._device_index: int = 0 if device_index is None else device_index  # Vulkan's: the one it is made on
        if len(_open_runtimes) >= _COLLECT_AT and not collection_held():  # runtimes dropped
            gc.collect()  # unclosed, held by a cycle (a module and its kernels), are released before another is made
        # the device's room makes the native runtime (libtaichi's, or the own CUDA runtime) and the device on it
        native = open_native(self._arch, device_index, cpu_threads, cuda_runtime)
        self._device_index = native.device_index
        self._owned = Owned(native.release)
        self._handle: Any = native.handle
        pending = native.pending
        #: Where this runtime's memory lives by default and how bytes move (taichi_aot.placement), chosen once.
        self.device: Device = device_for(self, native)
        self.device.set_wait(self._wait_policy)
        traits = self.device.traits
        self._cpu_threads = capi.runtime_threads(self._handle) or None if traits.library_native else None
        #: a wait is libtaichi's alone, where anything was counted (not CUDA's: the driver copies beside its queue),
        #: and made even where none was: any thread enqueues, and another's wait may have cleared the count while
        #: this thread's work still ran (cheap with nothing queued: the own Vulkan launch's wait); not where a launch
        #: returns once its kernels have run (a CPU runtime's): no work is left running then
        self._counted_waits = bool(self._handle) and traits.waits_counted
        self._wait_always = self._counted_waits and traits.any_thread and not traits.launches_finish
        self._launches_finish = traits.launches_finish and traits.library_native
        self._pid = os.getpid()
        #: The launch gate: the owning thread, the pending-work flags, the fast path's thread, the recorder.
        self.gate = LaunchGate(threading.get_ident(), pending)
        self._children: weakref.WeakSet[Child] = weakref.WeakSet()
        #: Other libraries' arrays as this runtime's ndarrays and kernel arguments: the policy, its cache and the
        #: staged copies of a launch (see taichi_aot._foreign; for the package, not for users).
        self.foreign: ForeignArgs = ForeignArgs(self)
        #: Modules loaded in this runtime, by content: each AotModule of the same content shares one (module.py's
        #: _Shared; for the package, not for users).
        self.modules: dict[Any, Any] = {}
        self.profiles: list[Profile] = []  # the profiles open on it (taichi_aot.profile; for the package)
        #: what the launch backends keep for this runtime (the own CUDA launcher's stand-ins and stream)
        self.backends = RuntimeBackends()
        self.foreign.unmaps[id(self.device)] = self.device.close  # the staging buffers' mappings end first
        self._finalizer = weakref.finalize(self, _close_runtime, self._owned, self._children, repr(self), True,
                                           self.foreign.unmaps)
        self._finalizer.atexit = False  # at exit, _close_open_runtimes closes it without a warning
        _open_runtimes.add(self)
        _register_exit_hook()
        adopt(self)  # where python -m taichi_aot profile profiles every runtime

    # -- state ----------------------------------------------------------------

    def ensure_open(self) -> None:
        """Raise unless the runtime is open and used from its own thread (every public method calls this)."""
        if self._owned.closed:
            if self._owned.abandoned:
                _park_at_exit()
            why = " (the interpreter is exiting while this thread still uses it)" if self._owned.abandoned else ""
            raise ClosedError(f"this {self._arch.name} runtime is closed{why}")
        if PID[0] != self._pid:
            raise WrongProcessError(
                f"this {self._arch.name} runtime belongs to process {self._pid}; it was used in process "
                f"{os.getpid()} (after os.fork(), create a runtime in the child)"
            )
        if threading.get_ident() != self.gate.thread and not self.device.traits.any_thread:
            raise WrongThreadError(_cudart.wrong_thread(self._arch.name, self.gate.thread,
                                                        self.device.one_thread_why()))

    @property
    def arch(self) -> Arch:
        """The backend of this runtime."""
        return self._arch

    @property
    def wait_policy(self) -> str:
        """How this runtime's waits wait (the ``wait`` argument; :mod:`taichi_aot.waits`)."""
        return self._wait_policy

    @property
    def cpu_threads(self) -> int | None:
        """The threads this CPU runtime started (its kernels run on at most this many); None on a GPU."""
        return self._cpu_threads

    @property
    def device_index(self) -> int:
        """The device index the runtime was created with."""
        return self._device_index

    @property
    def closed(self) -> bool:
        """True once :meth:`close` was called (or the runtime was finalized)."""
        return self._owned.closed

    @property
    def handle(self) -> Any:
        """The C-API's ``TiRuntime`` handle (for the flat API, :mod:`taichi_aot.capi`); on the own CUDA runtime, NULL
        until a module needs libtaichi's runtime beside it (:meth:`library_runtime`)."""
        return self._handle

    def library_runtime(self) -> Any:
        """libtaichi's runtime, for the kernels of a module only libtaichi launches (for the package: module loads):
        the runtime's own, or on the own CUDA runtime of device 0 one made beside it now (libtaichi allows one in a
        process: InvalidStateError where another lives); NotSupportedError on another device, WrongThreadError on
        another thread than the runtime's."""
        self._handle = self.device.library.runtime(self._handle, self.on_its_thread(), self.gate.thread)
        return self._handle

    def on_its_thread(self) -> bool:
        """Whether this is the thread (and process) that owns the runtime."""
        return threading.get_ident() == self.gate.thread and PID[0] == self._pid

    @property
    def owned(self) -> Owned:
        """The record of the native runtime's lifetime (for the package: its children's records hang on it)."""
        return self._owned

    @property
    def capabilities(self) -> dict[Capability | int, int]:
        """``{Capability: level}`` of the device (empty on x64 and the own CUDA runtime)."""
        self.ensure_open()
        if not self.device.traits.library_native:
            return {}
        return capi.get_runtime_capabilities(self._handle).as_dict()

    def set_capabilities(self, capabilities: Mapping[Capability | int, int] | None = None, **named: int) -> None:
        """Replace the capability levels: a mapping and/or keywords such as ``spirv_has_int64=1``.

        Raises:
            InvalidArgumentError: an unknown capability name.
        """
        self.ensure_open()
        if not self.device.traits.library_native:
            raise NotSupportedError("set_capabilities: taichi_aot's own CUDA runtime has no capability levels "
                                    "(they are libtaichi's, for its gfx backends)")
        if capabilities is not None and not isinstance(capabilities, Mapping):
            raise ArgumentTypeError(f"set_capabilities: expected a mapping {{capability: level}} or keywords, got "
                                    f"{type(capabilities).__name__}")
        caps: dict[Capability | int, int] = dict(capabilities or {})
        for name, level in named.items():
            try:
                caps[Capability[name.upper()]] = level
            except KeyError:
                raise InvalidArgumentError(f"set_capabilities: unknown capability {name!r}") from None
        capi.set_runtime_capabilities_ext(self._handle, caps)

    # -- work -------------------------------------------------------------------

    def flush(self) -> None:
        """Submit queued work without waiting for it."""
        self.ensure_open()
        if self._handle:  # the own CUDA runtime's work is submitted as it is launched
            capi.flush(self._handle)

    def wait(self) -> None:
        """Submit queued work and wait until the device has finished it."""
        self.ensure_open()
        if not self.profiles:
            self._wait()
            return
        start = time.monotonic_ns()
        self._wait()
        for p in self.profiles:  # the wait, an event of each profile's
            p.note_wait(self, start)

    def profile(self) -> Profile:
        """``with rt.profile() as prof:``: each launch's device time on this runtime, from any thread, while the block
        runs (:mod:`taichi_aot.profile`: ``print(prof)``, ``prof.kernels()``, ``prof.save()``, ``prof.plot()``)."""
        self.ensure_open()
        return Profile(self)

    def _wait(self) -> None:
        # what is in flight now is freed after the wait: another thread may put more in flight meanwhile
        foreign, transfers = self.foreign, self.device.transfers
        flight = (foreign.copies.in_flight(), transfers.in_flight()) if self._wait_always else (None, None)
        if self._counted_waits:  # one C call: libtaichi's wait where anything was queued (gfx devices)
            try:
                code = lib.taichi_aot_runtime_wait(self._handle, self.gate.pending, self._wait_always)
            finally:
                came_back()  # Python's lock this thread's again (_csrc/launch.c: taichi_aot_coming)
            if code:
                check("wait")
        else:
            self._drain()
        if flight[0] is None or flight[0] or foreign.holding:  # nothing held or in flight: nothing to let go
            foreign.release(flight[0])
        if flight[1] is None or flight[1]:
            transfers.release(flight[1])

    def sync(self) -> None:
        """Wait for enqueued work, if there is any (host copies call this: ti_wait is not free)."""
        if self._launches_finish:  # nothing runs once its launch returned (a CPU runtime): nothing to wait for
            if self.gate.pending[0]:
                self.gate.pending[0] = 0
                self.foreign.release()
                self.device.transfers.release()
        elif self._wait_always or self.gate.pending[0]:
            # where waits are counted, the one C call that tells threads launching with Python's lock kept that this
            # one comes back for it (_csrc/launch.c's taichi_aot_coming)
            self._wait()

    def _drain(self) -> None:
        if not self.device.traits.library_native:  # the own CUDA runtime's work: its stream's, below
            self.gate.pending[0] = 0
        # libtaichi's, where anything was queued since its last wait, on a device whose work is all counted (capi
        # counts every enqueue in the flags this runtime shares; a wait with nothing queued costs a submit and a
        # fence, 50-75 us on a discrete GPU's Vulkan); on CUDA, always (the driver copies beside libtaichi's queue)
        if self._handle and (self.gate.pending[0] or not self.device.traits.waits_counted):
            with self.device.library.context():  # CUDA: device 0's streams, whatever is current
                capi.wait(self._handle)
        self.device.stream.synchronize()  # the work beside libtaichi's queue: the stream set, the legacy default

    @property
    def allow_array_copies(self) -> bool:
        """Whether a foreign array the backend cannot address (any host array on a GPU backend, a strided or
        read-only one on the CPU) may be passed to a kernel through a copy in and back out; False makes that
        an InvalidArgumentError. True by default."""
        return self.foreign.allow_copies

    @allow_array_copies.setter
    def allow_array_copies(self, allow: bool) -> None:
        if not isinstance(allow, (bool, np.bool_)):
            raise ArgumentTypeError(f"allow_array_copies must be True or False, got {allow!r}")
        self.foreign.allow_copies = bool(allow)

    @property
    def cuda_stream(self) -> int | None:
        """The caller's CUDA stream (a ``CUstream`` handle) that kernels run on, or None: the legacy default
        stream, which torch's and CuPy's default streams are too. See :meth:`set_cuda_stream`. The device's stream
        keeps it (``device.stream.handle``)."""
        return self.device.stream.handle

    def set_cuda_stream(self, stream: Any) -> None:
        """Run this CUDA runtime's kernels on the caller's stream: ``None`` (the legacy default stream), a
        ``CUstream`` handle (int), or a stream object of torch (``.cuda_stream``) or CuPy (``.ptr``).

        Work on the legacy default stream (torch's and CuPy's default) and kernels are ordered without any
        synchronization, stream or no stream. Kernels launched by taichi_aot's own CUDA launcher (a module with
        PTX, :meth:`AotModule.launchers`) run on any stream, a non-blocking one too (``torch.cuda.Stream()``, a
        stream being captured into a CUDA graph): each stream gets its own stand-in for Taichi's runtime, made
        here. Kernels and graphs launched through libtaichi need a *blocking* stream (CuPy's
        ``cupy.cuda.Stream()``, or None): Taichi 1.7.4 copies a launch's argument buffer and frees it on the legacy
        default stream, which a non-blocking stream does not wait for; while a non-blocking stream is set, their
        launches raise NotSupportedError. :meth:`wait` also waits for the stream.

        CUDA graphs: kernels of the own launcher may be captured (``torch.cuda.graph``, ``torch.compile(mode=
        "reduce-overhead")``). A change of stream waits for the runtime's work first, but not while either stream is
        being captured (nothing may wait then: order the streams as torch does, ``wait_stream``); a stream first
        selected while it captures gets a stand-in made ahead. What a graph holds (stand-ins, the kernels' code)
        stays for the process's life, after the runtime closes too. A kernel launched through libtaichi, or a
        reverse-mode kernel whose autodiff stacks are checked, raises NotSupportedError inside a capture.

        Raises:
            NotSupportedError: not a CUDA runtime.
            ArgumentTypeError: not a stream.
            InvalidArgumentError: a stream of another GPU than the runtime's.
        """
        self.ensure_open()
        self.device.stream.select(stream)  # its checks, the wait and the launch backends' stand-in: the device's

    def host_array(self, shape: Iterable[int] | int, dtype: Any = np.float32) -> np.ndarray:
        """A zero-filled numpy array ``from_numpy`` and ``to_numpy(out=)`` copy at the bus's full speed: page-locked on
        CUDA (it outlives the runtime), a host-visible buffer of the runtime's on a discrete GPU's Vulkan (kept until it
        goes); a plain array elsewhere (see taichi_aot.placement).

        Raises:
            ArgumentTypeError: a bad shape or dtype.
            OutOfMemoryError: no page-locked memory of that size.
        """
        self.ensure_open()
        return self.device.transfers.host_array(shape, dtype)

    def record(self) -> _Recording:
        """Record kernel and graph launches instead of running them; replay them from C later.

        ``with rt.record() as seq: step(x, 0.1); graph(a=x)`` then ``seq.replay(1000)``.
        Arguments are checked when recorded.

        Raises:
            InvalidArgumentError: the runtime is already recording.
        """
        self.ensure_open()
        if self.gate.recorder is not None:
            raise InvalidArgumentError("this runtime is already recording")
        return _Recording(self, LaunchSequence(self))

    def sequence(self) -> LaunchSequence:
        """An empty :class:`~taichi_aot.replay.LaunchSequence` to ``append`` bound launches to."""
        self.ensure_open()
        return LaunchSequence(self)

    # -- factories ----------------------------------------------------------------

    def allocate_memory(
        self,
        size: int,
        *,
        host_read: bool = False,
        host_write: bool = False,
        export_sharing: bool = False,
        usage: MemoryUsage | int = MemoryUsage.STORAGE,
    ) -> Memory:
        """Allocate ``size`` bytes of device memory. See :class:`~taichi_aot.memory.Memory`."""
        return Memory(
            self, size, host_read=host_read, host_write=host_write, export_sharing=export_sharing, usage=usage
        )

    def ndarray(
        self,
        shape: Iterable[int] | int,
        dtype: DTypeLike = np.float32,
        elem_shape: Iterable[int] = (),
        *,
        host_access: HostAccess | None = None,
    ) -> NdArray:
        """A new zero-filled ndarray. See :class:`~taichi_aot.ndarray.NdArray`.

        ``host_access`` (``"none"``, ``"read"``, ``"write"``, ``"readwrite"``): whether ``map()`` views
        are possible. Default: ``"readwrite"``, except on CUDA, where host-visible memory is managed
        memory (slow for kernels and for copies) and the default is ``"none"``; to_numpy/from_numpy
        work either way.
        """
        return NdArray(self, shape, dtype, elem_shape, host_access=host_access)

    def ndarray_from_numpy(
        self, array: Any, elem_ndim: int = 0, *, host_access: HostAccess | None = None
    ) -> NdArray:
        """A new ndarray holding a copy of ``array``; its last ``elem_ndim`` axes form the element shape.

        Raises:
            InvalidArgumentError: ``elem_ndim`` is negative or more than the array's dimensions.
        """
        self.ensure_open()
        try:
            a = np.asarray(array)
        except (TypeError, ValueError) as e:  # ragged nesting, objects numpy cannot hold
            raise ArgumentTypeError(f"ndarray_from_numpy: not an array: {e}") from None
        if isinstance(elem_ndim, bool) or not isinstance(elem_ndim, (int, np.integer)):
            raise ArgumentTypeError(f"ndarray_from_numpy: elem_ndim must be an int (the element's dims), got "
                                    f"{elem_ndim!r}")
        if not 0 <= elem_ndim <= a.ndim:
            raise InvalidArgumentError(f"ndarray_from_numpy: elem_ndim {elem_ndim} for an array of {a.ndim} dims")
        split = a.ndim - elem_ndim
        nd = NdArray(self, a.shape[:split], a.dtype, a.shape[split:], host_access=host_access)
        nd.from_numpy(a)
        return nd

    def ndarray_from(
        self, obj: Any, elem_ndim: int = 0, *, copy: bool | None = None, host_access: HostAccess | None = None
    ) -> NdArray:
        """An ndarray over ``obj`` (numpy array, buffer protocol, ``__array_interface__``, or a CPU ``__dlpack__``
        object such as a torch CPU tensor): its last ``elem_ndim`` axes are the element shape.

        ``copy=None`` shares the memory where this backend can address it (x64: a writable C-contiguous
        array of a Taichi dtype; the source stays alive as long as the ndarray) and copies otherwise;
        ``copy=False`` raises where a copy would be needed; ``copy=True`` always copies (numpy 2's meaning).

        Raises:
            ArgumentTypeError: not an array (a scalar, a masked array, a lazily negated torch tensor), a dtype
                Taichi cannot store, ``elem_ndim`` not an int or ``copy`` not None or a bool.
            InvalidArgumentError: ``copy=False`` where a copy is needed (which case is named), an empty array,
                a bad ``elem_ndim``.
        """
        self.ensure_open()
        return self.foreign.ndarray_from(obj, elem_ndim, copy, host_access)

    def allocate_image(
        self,
        dimension: ImageDimension | int | str,
        extent: Iterable[int] | int,
        format: Any,
        *,
        mip_level_count: int = 1,
        usage: ImageUsage | int = ImageUsage.STORAGE | ImageUsage.SAMPLED,
    ) -> Image:
        """Allocate an image (Vulkan and other gfx backends). See :class:`~taichi_aot.image.Image`."""
        return Image(self, dimension, extent, format, mip_level_count=mip_level_count, usage=usage)

    def create_sampler(self, **kwargs: Any) -> Sampler:
        """Create a sampler (``mag_filter``, ``min_filter``, ``address_mode``, ``max_anisotropy``)."""
        return Sampler(self, **kwargs)

    def load_module(self, source: ModuleSource, *, launcher: str | None = None,
                    cuda_launcher: str | None = None) -> AotModule:
        """Load an AOT module from a folder, a ``.tcm`` file, ``.tcm`` bytes, or a multi-arch module file (the
        part for this runtime's arch), on every arch; any of these may be a package's resource
        (``importlib.resources.files("mypackage") / "physics.tcm"``: a library's module shipped as package data).
        ``launcher``: "auto" launches each kernel with the first backend that takes it, taichi_aot's own launches
        first (on CUDA the kernels the module has PTX for; on x64 those libtaichi's C-API cannot give all they
        need), "taichi" every kernel libtaichi can launch through libtaichi (default: ``TAICHI_AOT_CUDA_LAUNCHER``,
        else "auto"; "cuda", "x64" and "own" read as "auto"). ``cuda_launcher`` is its old name.
        ``module.launchers()`` says which backend took each kernel.

        See :class:`~taichi_aot.module.AotModule` for what is checked and raised.
        """
        return AotModule(self, source, launcher=launcher, cuda_launcher=cuda_launcher)

    @classmethod
    def for_module(cls, source: ModuleSource, device_index: int | None = None, *, cuda_runtime: str | None = None
                   ) -> Runtime:
        """A runtime on the fastest backend that both this machine and the module have::

            with Runtime.for_module("physics.tcm") as rt:
                mod = rt.load_module("physics.tcm")

        Raises:
            IncompatibleModuleError: no arch the module holds works here.
        """
        return cls(arch_for_module(source), device_index, cuda_runtime=cuda_runtime)

    # -- closing --------------------------------------------------------------------

    def _owner_running(self) -> threading.Thread | None:
        """The runtime's own thread, when it is another than the caller's and still runs (in this process)."""
        if threading.get_ident() == self.gate.thread or PID[0] != self._pid:
            return None
        return next((t for t in threading.enumerate() if t.ident == self.gate.thread and t.is_alive()), None)

    def _check_closer(self, what: str) -> None:
        """Closing belongs to the runtime's thread while that thread runs: it may be inside a launch or a replay
        of what would be destroyed. Another thread gets WrongThreadError (and nothing is closed); the own CUDA
        runtime's objects (not the runtime) close from any thread, as torch's and CuPy's arrays are let go."""
        if not self._owned.closed and self._owner_running() is not None and (
                not self.device.traits.any_thread or what == "Runtime.close()"):
            raise WrongThreadError(
                f"{what}: this {self._arch.name} runtime and its objects belong to thread {self.gate.thread}, which is "
                "still running; close them there (closing under a thread that may be using them would crash it)"
            )

    def close(self) -> None:
        """Close every live child (modules, memory, images), then the runtime. Safe to call twice.

        Raises:
            WrongThreadError: called from another thread while the runtime's own thread still runs.
        """
        self._check_closer("Runtime.close()")
        self._close()

    def _close(self) -> None:
        for p in list(self.profiles):  # their records first, while the runtime's counts are its own
            p.runtime_closing(self)
        if not self._owned.closed:  # libtaichi's stream setting outlives the runtime: back to the default
            self.device.stream.close()
        if self._finalizer.detach() is not None:
            self._owned.close()  # first: a launch another thread makes meanwhile finds the runtime closed
            # after a launch with staged copies another thread is making: it waits, then reads them back through
            # the mappings ended here (the launches' lock, taken before the runtime's calls, never after)
            # (not in a forked child: another thread of the parent may have held that lock at the fork)
            with self.backends.lock if self._owned.in_its_process else nullcontext():
                self.foreign.close()
                _close_runtime(self._owned, self._children, "", False, self.foreign.unmaps)
            self.modules.clear()  # released with the runtime: nothing to reuse
        _open_runtimes.discard(self)

    def __enter__(self) -> Runtime:
        self.ensure_open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._owned.closed else "open"
        return f"<Runtime {self._arch.name}{self.device.traits.runtime_words} device {self._device_index} ({state})>"


def _close_open_runtimes() -> None:
    """At interpreter exit: close every open runtime whose thread has ended (or is this one), quietly. A runtime
    whose thread still runs (a daemon thread) may be inside a C call: it is abandoned instead, closed for every
    further use (that thread gets ClosedError) but never destroyed, and that thread gets a second to leave it."""
    _dlpack.shutting_down()
    busy = []
    for runtime in list(_open_runtimes):
        owner = runtime._owner_running()
        if owner is not None:
            runtime._owned.abandon()
            if not isinstance(owner, threading._DummyThread):  # one Python did not start (XLA's, made a JAX op's
                busy.append(owner)  # twin runtime there) is never joined: it is idle in its pool, or parks its own
        else:
            runtime._close()
    deadline = time.monotonic() + 1.0
    while busy and time.monotonic() < deadline:  # each has left its C call: ended, or parked (_park_at_exit)
        busy = [t for t in busy if t.is_alive() and t.ident not in _parked]
        if busy:
            busy[0].join(0.005)
    # a creation, destruction or module load another thread has under way (LLVM compiling) finishes before the
    # library's static destructors run at process exit, and none starts after: the library stays held
    _library.busy.acquire(timeout=10.0)


_exit_hook: list[bool] = []  # [True] once _close_open_runtimes is registered
_parked: set[int | None] = set()  # the daemon threads parked at exit (_park_at_exit)


def _park_at_exit() -> None:
    """A daemon thread that uses a runtime abandoned at interpreter exit waits there for the process to end (it is
    out of every C call), rather than raise ClosedError, whose traceback the thread's end would print as the
    program exits normally. Any other thread goes on to the ClosedError."""
    thread = threading.current_thread()
    if thread.daemon and thread is not threading.main_thread():
        _parked.add(thread.ident)
        threading.Event().wait()


def _register_exit_hook() -> None:
    # after the first weakref.finalize exists: atexit runs its functions last registered first, so this runs
    # before the finalizers of runtimes' children, which would otherwise close what another thread still uses
    if not _exit_hook:
        atexit.register(_close_open_runtimes)
        _exit_hook.append(True)
