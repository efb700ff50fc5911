"""Runtime: the object that owns a C-API runtime and everything allocated on it.

Lifetimes. Every native handle is held by an :class:`Owned` record. A child
(memory, image, module) *pins* its parent's record, and a live numpy view pins
its memory's record, so a native object is released only once it is closed
**and** nothing that needs it remains:

* ``close()`` (or leaving a ``with`` block, or garbage collection through
  ``weakref.finalize``) marks an object closed at once: every public method then
  raises :class:`~taichi_aot.errors.ClosedError`;
* the native release follows as soon as nothing pins it. A numpy view from
  ``map()`` therefore never dangles: its memory (and runtime) stay mapped and
  alive until the last view is garbage collected.

Threads. The C-API keeps its error state per thread and a runtime is meant to
be driven from one thread. A Runtime and its children may only be used from the
thread that created it; any other thread gets
:class:`~taichi_aot.errors.WrongThreadError`. (Views and closing by garbage
collection work from any thread.)
"""

from __future__ import annotations

import os
import threading
import weakref
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from . import capi
from ._native import lib
from .enums import Arch, Capability, ImageDimension, ImageUsage, MemoryUsage
from .errors import ClosedError, InvalidArgumentError, NotSupportedError, WrongThreadError

if TYPE_CHECKING:  # pragma: no cover
    from .image import Image, Sampler
    from .memory import Memory, NdArray
    from .module import AotModule

_pin_lock = threading.RLock()

#: ``lib.taichi_aot_epoch`` is bumped whenever any native object is closed. Prepared launches
#: (kernels, bound launches) compare it in C with the epoch at which they last found their objects
#: open, and come back to Python to re-check only when it has moved: the hot path stays in C.

#: Preference when ``Runtime(arch=None)``: GPU backends first.
ARCH_PREFERENCE = (Arch.CUDA, Arch.VULKAN, Arch.METAL, Arch.OPENGL, Arch.GLES, Arch.X64, Arch.ARM64)


class Owned:
    """A native handle, its release function, and what still needs it (pins)."""

    __slots__ = ("handle", "_release", "_pins", "_closed", "_released", "_parent", "__weakref__")

    def __init__(self, handle: Any, release: Callable[[Any], None], parent: Owned | None = None):
        self.handle = handle
        self._release = release
        self._pins = 0
        self._closed = False
        self._released = False
        self._parent = parent
        if parent is not None:
            parent.pin()

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def released(self) -> bool:
        return self._released

    def pin(self) -> None:
        with _pin_lock:
            self._pins += 1

    def unpin(self) -> None:
        with _pin_lock:
            self._pins -= 1
            ready = self._closed and self._pins == 0 and not self._released
            if ready:
                self._released = True
        if ready:
            self._do_release()

    def close(self) -> None:
        """Mark closed; release now if nothing pins it. Safe to call twice, never raises."""
        with _pin_lock:
            if self._closed:
                return
            self._closed = True
            lib.taichi_aot_epoch += 1
            ready = self._pins == 0 and not self._released
            if ready:
                self._released = True
        if ready:
            self._do_release()

    def _do_release(self) -> None:
        try:
            self._release(self.handle)
        except Exception:
            pass  # a finalizer never raises; the handle is gone either way
        finally:
            parent, self._parent = self._parent, None
            if parent is not None:
                parent.unpin()


class _Recording:
    """The context manager of :meth:`Runtime.record`."""

    def __init__(self, runtime: Runtime, sequence: Any):
        self._runtime = runtime
        self.sequence = sequence

    def __enter__(self):
        self._runtime._recorder = self.sequence
        return self.sequence

    def __exit__(self, *exc) -> None:
        self._runtime._recorder = None


class Child:
    """What every object owned by a runtime shares: closing, ``closed``, context manager, checks."""

    _kind = "object"

    def _attach(self, runtime: Runtime, owned: Owned) -> None:
        self._runtime = runtime
        self._owned = owned
        self._finalizer = weakref.finalize(self, owned.close)
        runtime._adopt(self)

    def _check(self) -> None:
        if self._owned._closed:
            raise ClosedError(f"this {self._kind} is closed")
        self._runtime._check()

    @property
    def runtime(self) -> Runtime:
        """The runtime this object belongs to."""
        return self._runtime

    @property
    def closed(self) -> bool:
        """True once :meth:`close` was called (or the object or its runtime was finalized)."""
        return self._owned._closed

    def close(self) -> None:
        """Release the native object (deferred while something still needs it). Safe to call twice."""
        self._finalizer()

    def __enter__(self):
        self._check()
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _destroy_runtime(handle: Any) -> None:
    if ("runtime", handle) in capi._live:
        capi.destroy_runtime(handle)


def resolve_arch(arch: Arch | int | str | None) -> Arch:
    """An Arch from an Arch, int or name; None picks ``TAICHI_AOT_ARCH`` or the best available."""
    if arch is None:
        env = os.environ.get("TAICHI_AOT_ARCH")
        if env:
            arch = env
        else:
            available = capi.get_available_archs()
            for candidate in ARCH_PREFERENCE:
                if candidate in available:
                    return candidate
            raise NotSupportedError("no Taichi backend can create a runtime on this machine")
    if isinstance(arch, str):
        try:
            return Arch[arch.strip().upper()]
        except KeyError:
            names = ", ".join(a.name.lower() for a in Arch if a not in (Arch.RESERVED,))
            raise InvalidArgumentError(f"unknown arch {arch!r} (expected one of {names})") from None
    return capi.enum_arg(Arch, arch, "Runtime: arch")


class Runtime:
    """A Taichi runtime on one backend; a context manager.

    Args:
        arch: an :class:`Arch`, its name (``"vulkan"``) or None for the best available
            (a GPU backend over x64; the ``TAICHI_AOT_ARCH`` environment variable overrides).
        device_index: the device to use (libtaichi_c_api 1.7.4 supports 0 only).

    Raises:
        NotSupportedError: the arch cannot create a runtime here.
    """

    def __init__(self, arch: Arch | int | str | None = None, device_index: int = 0):
        self._arch = resolve_arch(arch)
        self._device_index = device_index
        handle = capi.create_runtime(self._arch, device_index)
        self._handle = handle
        self._owned = Owned(handle, _destroy_runtime)
        self._thread = threading.get_ident()
        self._pending = capi.pending_flag(handle)  # non-zero while enqueued work may be running
        self._recorder = None  # a LaunchSequence while record() is active
        self._children: weakref.WeakSet = weakref.WeakSet()
        self._free_pool: dict[tuple, list] = {}  # CPU backends cannot free: closed memory is reused
        self._finalizer = weakref.finalize(self, Runtime._finalize, self._owned, self._children)

    @staticmethod
    def _finalize(owned: Owned, children: weakref.WeakSet) -> None:
        for child in list(children):
            try:
                child.close()
            except Exception:
                pass
        owned.close()

    # -- state ----------------------------------------------------------------

    def _check(self) -> None:
        """Raise unless the runtime is open and used from its own thread (every public method calls this)."""
        if self._owned._closed:
            raise ClosedError(f"this {self._arch.name} runtime is closed")
        if threading.get_ident() != self._thread:
            raise WrongThreadError(
                f"this {self._arch.name} runtime belongs to thread {self._thread}; "
                f"it was used from thread {threading.get_ident()} (create one runtime per thread)"
            )

    def _adopt(self, child: Any) -> None:
        self._children.add(child)

    @property
    def arch(self) -> Arch:
        """The backend of this runtime."""
        return self._arch

    @property
    def device_index(self) -> int:
        """The device index the runtime was created with."""
        return self._device_index

    @property
    def closed(self) -> bool:
        """True once :meth:`close` was called (or the runtime was finalized)."""
        return self._owned._closed

    @property
    def capabilities(self) -> dict[Capability | int, int]:
        """``{Capability: level}`` of the device (empty on x64)."""
        self._check()
        return capi.get_runtime_capabilities(self._handle)

    def set_capabilities(self, capabilities: dict | None = None, **named: int) -> None:
        """Replace the capability levels: a mapping and/or keywords such as ``spirv_has_int64=1``."""
        self._check()
        caps: dict = dict(capabilities or {})
        for name, level in named.items():
            try:
                caps[Capability[name.upper()]] = level
            except KeyError:
                raise InvalidArgumentError(f"set_capabilities: unknown capability {name!r}") from None
        capi.set_runtime_capabilities_ext(self._handle, caps)

    # -- work -------------------------------------------------------------------

    def flush(self) -> None:
        """Submit queued work without waiting for it."""
        self._check()
        capi.flush(self._handle)

    def wait(self) -> None:
        """Submit queued work and wait until the device has finished it."""
        self._check()
        capi.wait(self._handle)

    def _sync(self) -> None:
        """Wait for enqueued work, if there is any (host copies call this: ti_wait is not free)."""
        if self._pending[0]:
            capi.wait(self._handle)

    def record(self) -> _Recording:
        """Record kernel and graph launches instead of running them; replay them from C later.

        ``with rt.record() as seq: step(x, 0.1); graph(a=x)`` then ``seq.replay(1000)``.
        Arguments are checked when recorded.
        """
        self._check()
        if self._recorder is not None:
            raise InvalidArgumentError("this runtime is already recording")
        from .module import LaunchSequence

        return _Recording(self, LaunchSequence(self))

    def sequence(self) -> Any:
        """An empty :class:`~taichi_aot.module.LaunchSequence` to ``append`` bound launches to."""
        self._check()
        from .module import LaunchSequence

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
        from .memory import Memory

        self._check()
        return Memory._allocate(self, size, host_read, host_write, export_sharing, usage)

    def ndarray(
        self, shape, dtype=np.float32, elem_shape=(), *, host_access: str | bool | None = None
    ) -> NdArray:
        """A new zero-filled ndarray. See :class:`~taichi_aot.memory.NdArray`.

        ``host_access`` (``"none"``, ``"read"``, ``"write"``, ``"readwrite"``): whether ``map()`` views
        are possible. Default: ``"readwrite"``, except on CUDA, where host-visible memory is managed
        memory (slow for kernels and for copies) and the default is ``"none"``; to_numpy/from_numpy
        work either way.
        """
        from .memory import NdArray

        self._check()
        return NdArray._allocate(self, shape, dtype, elem_shape, host_access)

    def ndarray_from_numpy(self, array, elem_ndim: int = 0, *, host_access: str | bool | None = None) -> NdArray:
        """A new ndarray holding a copy of ``array``; its last ``elem_ndim`` axes form the element shape."""
        from .memory import NdArray

        self._check()
        a = np.asarray(array)
        if not 0 <= elem_ndim <= a.ndim:
            raise InvalidArgumentError(f"ndarray_from_numpy: elem_ndim {elem_ndim} for an array of {a.ndim} dims")
        split = a.ndim - elem_ndim
        nd = NdArray._allocate(self, a.shape[:split], a.dtype, a.shape[split:], host_access)
        nd.from_numpy(a)
        return nd

    def allocate_image(
        self,
        dimension: ImageDimension | int | str,
        extent,
        format,
        *,
        mip_level_count: int = 1,
        usage: ImageUsage | int = ImageUsage.STORAGE | ImageUsage.SAMPLED,
    ) -> Image:
        """Allocate an image (Vulkan and other gfx backends). See :class:`~taichi_aot.image.Image`."""
        from .image import Image

        self._check()
        return Image._allocate(self, dimension, extent, format, mip_level_count, usage)

    def create_sampler(self, **kwargs: Any) -> Sampler:
        """Create a sampler (``mag_filter``, ``min_filter``, ``address_mode``, ``max_anisotropy``)."""
        from .image import Sampler

        self._check()
        return Sampler._create(self, **kwargs)

    def load_module(self, source) -> AotModule:
        """Load an AOT module from a folder, a ``.tcm`` file or ``.tcm`` bytes (every arch)."""
        from .module import AotModule

        self._check()
        return AotModule._load(self, source)

    # -- closing --------------------------------------------------------------------

    def close(self) -> None:
        """Close every live child (modules, memory, images), then the runtime. Safe to call twice."""
        self._finalizer()

    def __enter__(self) -> Runtime:
        self._check()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        return f"<Runtime {self._arch.name} device {self._device_index} ({state})>"
