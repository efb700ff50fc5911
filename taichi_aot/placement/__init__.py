"""Where a runtime's memory lives and how bytes move: one :class:`Device` a runtime, chosen once when it is made; and
the runtime's native part itself (:func:`open_native`: libtaichi's runtime, or taichi_aot's own CUDA runtime), which
the device's room makes.

The object layer (``memory.py``, ``ndarray.py``, ``_foreign.py``, ``runtime.py``) asks its runtime's device and
never decides by arch itself (``tests/test_layers.py`` keeps it so):

* :meth:`Device.default_access`: what ``host_access=None`` means (``(host_read, host_write)``);
* :meth:`Device.allocate`: a :class:`Block` of ``size`` bytes with those flags (who allocates, who frees);
* :attr:`Device.zeroed`: whether new memory is zero-filled already;
* :meth:`Device.reader` / :meth:`Device.writer`: how the host's bytes move to and from a block, chosen once a
  memory (directly through a mapping, through the CUDA driver, or through the device's staging buffers);
* :meth:`Device.copy`: a device-to-device copy between two blocks of the runtime;
* :meth:`Device.host_visible`: whether the host addresses a block as it is (``__array__``, DLPack);
* :attr:`Device.kernel_copies_on_device`: whether a host array a kernel takes is copied into device memory (else
  into host-visible memory the kernel reads in place);
* :meth:`Device.release` after each wait (staging buffers in flight are free again), :meth:`Device.close` before
  the native runtime goes.

The rooms: ``host.py`` (the CPU backends), ``cuda.py`` (CUDA: libtaichi's runtime and the own one),
``vulkan.py`` (the policy of Vulkan devices: device memory on a discrete GPU, host-visible memory where the host and
the GPU share it), ``staging.py`` (host-visible buffers kept mapped and reused), ``base.py`` (libtaichi's memory of the
other GPU backends, as the C-API allocates it) and this file (the choice).
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, Callable, NamedTuple

from .. import _cuda, _cudart, _library, capi
from .._native import ffi
from ..enums import CPU_ARCHS, Arch
from .base import Block, Device, Mover

if TYPE_CHECKING:  # pragma: no cover
    from .._lifetime import Parent

__all__ = ["Block", "Device", "Mover", "Native", "device_for", "open_native"]


class Native(NamedTuple):
    """A runtime's native part, as :func:`open_native` made it."""

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


def open_native(arch: Arch, device_index: int | None, cpu_threads: int | None, cuda_runtime: str | None) -> Native:
    """The native runtime of ``arch`` on ``device_index`` (None: the backend's default): taichi_aot's own CUDA runtime
    (``cuda_runtime`` "own", on any GPU: :mod:`taichi_aot._cudart`), or libtaichi's (Vulkan on the device asked for:
    ``vulkan.create_runtime``; CUDA in device 0's primary context, whatever another library left current)."""
    index = 0 if device_index is None else device_index
    library: list[Any] = []
    if arch == Arch.CUDA and _cudart.chosen(cuda_runtime, index) == _cudart.OWN:
        cuda = _cudart.CudaDevice(index)
        # its memory and modules are given back before it, then libtaichi's runtime where one was made
        release = functools.partial(_cudart.release, cuda, library)
        return Native(ffi.cast("TiRuntime", 0), ffi.new("int32_t[3]"), release, index, cuda, library)
    if arch == Arch.VULKAN:
        with _library.busy:  # the policy's file, imported as device_for imports it
            from .vulkan import create_runtime
        handle, index = create_runtime(device_index, cpu_threads)
    else:
        with _cudart.library_calls(arch == Arch.CUDA):
            handle = capi.create_runtime(arch, index, cpu_threads=cpu_threads).cdata
    if arch == Arch.CUDA:  # its frees run in the driver's relaxed capture mode (_cuda.relaxed_capture)
        _cuda.driver()
    destroy = _cudart.destroy_library_runtime if arch == Arch.CUDA else capi.destroy_runtime
    return Native(handle, capi.pending_flag(handle), functools.partial(destroy, handle), index, None, library)


def device_for(runtime: Parent, native: Native) -> Device:
    """The device of a runtime being made (its arch and handle set) on ``native``. Its policy's file is imported
    at the first runtime of its arch, under the library's busy lock: a fork waits for it (a child forked while
    another thread imports a module inherits that module's import lock held, and hangs importing it)."""
    with _library.busy:
        if runtime.arch in CPU_ARCHS:
            from .host import HostDevice

            return HostDevice(runtime)
        if runtime.arch == Arch.CUDA:
            from .cuda import LibraryCudaDevice, OwnCudaDevice

            return OwnCudaDevice(runtime, native.cuda) if native.cuda is not None else LibraryCudaDevice(runtime)
        if runtime.arch == Arch.VULKAN:
            from .vulkan import vulkan_device

            return vulkan_device(runtime)
        return Device(runtime)
