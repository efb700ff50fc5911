"""Where a runtime's memory lives and how bytes move: one :class:`Device` a runtime, chosen once when it is made.

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

from typing import TYPE_CHECKING

from .. import _library
from ..enums import CPU_ARCHS, Arch
from .base import Block, Device, Mover

if TYPE_CHECKING:  # pragma: no cover
    from .._lifetime import Parent

__all__ = ["Block", "Device", "Mover", "device_for"]


def device_for(runtime: Parent) -> Device:
    """The device of a runtime being made (its arch, handle and own CUDA device set). Its policy's file is imported
    at the first runtime of its arch, under the library's busy lock: a fork waits for it (a child forked while
    another thread imports a module inherits that module's import lock held, and hangs importing it)."""
    with _library.busy:
        if runtime.arch in CPU_ARCHS:
            from .host import HostDevice

            return HostDevice(runtime)
        if runtime.arch == Arch.CUDA:
            from .cuda import LibraryCudaDevice, OwnCudaDevice

            return OwnCudaDevice(runtime) if runtime.cuda_device is not None else LibraryCudaDevice(runtime)
        if runtime.arch == Arch.VULKAN:
            from .vulkan import vulkan_device

            return vulkan_device(runtime)
        return Device(runtime)
