"""Host arrays the GPU copies through their own pages (``_csrc/backends/vkcopy.c``): a Vulkan device that imports host
memory (VK_EXT_external_memory_host) moves a large numpy array with no pass through a staging buffer.

Its first copy goes through the staging buffers, the host's pass over several threads: the driver pins an array's
pages slower than threads copy them (an H100 host: 64 MiB imported for one copy at 9-11 GB/s, 3.4 into a new array
whose pages the import must first fault in). A numpy array that moves a second time has the pages of its whole
allocation (the array that owns the memory: ``base`` followed
to its end) imported and kept, within the page-lock budget CUDA's transfers share (``_cuda_host.register_limit``),
and copied at the bus's speed from then on; the import is let go when that array is collected, before numpy frees
the memory, or with the runtime.
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from typing import Any

import numpy as np

from .._cuda_host import register_limit
from .._native import ffi, lib

__all__ = ["Imports"]

#: How many arrays seen once are remembered (a second copy of one imports its pages for good).
_SEEN_MAX = 64


class _Kept:
    """The pages of an array's whole allocation, imported: let go as the array is collected."""

    __slots__ = ("id", "ref", "size", "start")

    def __init__(self, imports: Imports, owner: np.ndarray, import_id: int):
        self.id, self.start, self.size = import_id, owner.ctypes.data, owner.nbytes
        key = id(owner)
        self.ref = weakref.ref(owner, lambda _: imports.forget(key, self))

    def holds(self, root: np.ndarray, host: int, nbytes: int) -> bool:
        return (self.ref() is root and root.ctypes.data == self.start and root.nbytes == self.size
                and self.start <= host and host + nbytes <= self.start + self.size)


class Imports:
    """The imports a runtime's Vulkan device keeps (one an array's allocation), and the arrays it has seen once."""

    def __init__(self, runtime_handle: Any):
        self._handle = runtime_handle
        self._kept: dict[int, _Kept] = {}
        self._seen: OrderedDict[int, weakref.ref[np.ndarray]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.RLock()  # a collected array's callback may run inside a section

    def copy(self, memory: Any, array: np.ndarray, to_device: bool) -> int:
        """``array`` (contiguous) copied to or from ``memory`` through its pages, where they are kept imported: the C
        code (1: they are not, the caller copies otherwise)."""
        host, nbytes = array.ctypes.data, array.nbytes
        kept = self._import_for(array, host, nbytes)
        if kept is None:
            return 1
        return int(lib.taichi_aot_vk_host_copy(self._handle, memory.handle, 0, ffi.cast("void *", host), nbytes,
                                               int(to_device), kept.id))

    def _import_for(self, array: np.ndarray, host: int, nbytes: int) -> _Kept | None:
        """The kept import of ``array``'s allocation: made the second time the array is seen, where numpy owns the
        memory (its lifetime is the array's) and the budget allows; else None (staged)."""
        root = array
        while isinstance(root.base, np.ndarray):
            root = root.base
        if root.base is not None or not root.flags.owndata:  # memory numpy does not own: its lifetime unknown here
            return None
        key = id(root)
        with self._lock:
            kept = self._kept.get(key)
            if kept is not None:
                if kept.holds(root, host, nbytes):
                    return kept
                self.forget(key, kept)  # the array's memory moved (``resize``, ``__setstate__``)
            seen = self._seen.pop(key, None)
            if seen is None or seen() is not root or self._bytes + root.nbytes > register_limit():
                self._seen[key] = weakref.ref(root)
                while len(self._seen) > _SEEN_MAX:
                    self._seen.popitem(last=False)
                return None
            import_id = int(lib.taichi_aot_vk_import(self._handle, ffi.cast("void *", root.ctypes.data),
                                                     root.nbytes))
            if not import_id:
                return None
            kept = self._kept[key] = _Kept(self, root, import_id)
            self._bytes += root.nbytes
            return kept

    def forget(self, owner_key: int, kept: _Kept) -> None:
        """Let an import go (its array collected, or its memory moved)."""
        with self._lock:
            if self._kept.get(owner_key) is kept:
                del self._kept[owner_key]
                self._bytes -= kept.size
                lib.taichi_aot_vk_import_free(self._handle, kept.id)

    def kept_bytes(self) -> int:
        """The bytes of host memory kept imported."""
        return self._bytes
