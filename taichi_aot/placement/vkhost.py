"""Host arrays the GPU copies through their own pages (``_csrc/backends/vkcopy.c``): a Vulkan device that imports host
memory (VK_EXT_external_memory_host) moves a large numpy array with no pass through a staging buffer.

Its first copy goes through the staging buffers, the host's pass over several threads: the driver pins an array's
pages slower than threads copy them (an H100 host: 64 MiB imported for one copy at 9-11 GB/s, 3.4 into a new array
whose pages the import must first fault in). A numpy array that moves a second time has the pages of its whole
allocation (the array that owns the memory: ``base`` followed
to its end) imported and kept, within the page-lock budget CUDA's transfers share (``_hostpages.register_limit``),
and copied at the bus's speed from then on; the import is let go when that array is collected, before numpy frees
the memory, or with the runtime.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._hostpages import HostPages, Pin
from .._native import ffi, lib

__all__ = ["Imports"]

#: How many arrays seen once are remembered (a second copy of one imports its pages for good).
_SEEN_MAX = 64


class Imports:
    """The imports a runtime's Vulkan device keeps (one an array's allocation), and the arrays it has seen once: the
    pages policy (:class:`~taichi_aot._hostpages.HostPages`), pinned by importing them into the runtime."""

    def __init__(self, runtime_handle: Any):
        self._handle = runtime_handle
        self._pages = HostPages(self._import, self._free, seen_max=_SEEN_MAX, evict=False)

    def _import(self, start: int, size: int) -> int | None:
        return int(lib.taichi_aot_vk_import(self._handle, ffi.cast("void *", start), size)) or None

    def _free(self, pin: Pin) -> None:
        if pin.handle:
            lib.taichi_aot_vk_import_free(self._handle, pin.handle)

    def copy(self, memory: Any, array: np.ndarray, to_device: bool) -> int:
        """``array`` (contiguous) copied to or from ``memory`` through its pages, where they are kept imported: the C
        code (1: they are not, the caller copies otherwise)."""
        host, nbytes = array.ctypes.data, array.nbytes
        pin = self._pages.take(array, host, nbytes)
        if pin is None:
            return 1
        try:
            return int(lib.taichi_aot_vk_host_copy(self._handle, memory.handle, 0, ffi.cast("void *", host), nbytes,
                                                   int(to_device), pin.handle))
        finally:
            self._pages.done(pin)

    def kept_bytes(self) -> int:
        """The bytes of host memory kept imported."""
        return self._pages.kept_bytes()
