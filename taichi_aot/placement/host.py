"""The CPU backends' device (x64, arm64): host memory of our own, imported into libtaichi, copied directly.

libtaichi_c_api 1.7.4 cannot free what it allocates on CPU backends, not even when the runtime is destroyed: memory
here is host memory of our own (zero-filled, page-aligned by ``mmap``), imported, and goes back to the system when
closed. Every byte of it is the host's: views without copies, copies with ``memcpy``.

Any thread may use a CPU runtime: libtaichi takes no lock of its own, so its calls on the runtime (launches, the own
x64 launch's, memory, copies, waits, module loads) are made one at a time under the runtime's calls lock
(``_csrc/backends/cpucalls.c``), opened here, which a close on another thread takes too.
"""

from __future__ import annotations

import functools
import mmap
from typing import Any

import numpy as np

from .. import _library, capi
from .._native import ffi, lib
from ..errors import OutOfMemoryError
from .base import Block, Device, Native
from .base import open_native as open_native  # libtaichi's CPU runtime, as the C-API makes it
from .parts import Mover, Transfers, read_direct, write_direct

__all__ = ["HostDevice", "HostTransfers"]


def _release_host(runtime: Any, memory: Any, host: mmap.mmap) -> None:
    try:
        capi.free_memory(runtime, memory)  # imported memory: the registry forgets it (libtaichi frees nothing)
    finally:
        # a launch another thread is making with it ends first (the close moved the epoch: none starts after)
        lib.taichi_aot_cpu_calls_settle(runtime)
        host.close()  # back to the system at once (every view of it is gone by now: views pin the memory)


class HostTransfers(Transfers):
    """Every byte is the host's: read and written where it lies, copied with ``memcpy``; no staging."""

    def reader(self, memory: Any) -> Mover:
        return read_direct

    def writer(self, memory: Any) -> Mover:
        return write_direct

    def copy(self, dst: Any, dst_offset: int, src: Any, src_offset: int, size: int) -> None:
        # 1.7.4 has no device-to-device copy on CPU backends; their memory is host memory.
        self._runtime.wait()
        source = src.host_view(size, src_offset)
        target = dst.host_view(size, dst_offset)
        np.copyto(target, source)
        del source, target


class HostDevice(Device):
    """Host memory of our own, imported; every copy is the host's."""

    policy = "host"
    transfers_type = HostTransfers
    traits = Device.traits._replace(zeroed=True, dlpack_type=1, imports_host_memory=True, launches_finish=True,
                                    stages=False)  # no staging: every copy is the host's

    def __init__(self, runtime: Any):
        super().__init__(runtime)
        # its calls made one at a time (the wrappers of libtaichi's calls, in place since the library loaded): any
        # thread may use it; where its lock could not be opened it keeps to its thread, and one_thread_why says why
        shared = bool(lib.taichi_aot_cpu_calls_open(runtime.handle))
        self._thread_why = "" if shared else (
            f"{lib.taichi_aot_cpu_calls_max()} CPU runtimes are open, the most whose calls can be made one at a time "
            "(close one, or use this one from its own thread)" if _library.cpu_calls else
            "libtaichi's calls could not be wrapped to be made one at a time (use it from its own thread)")
        self.traits = self.traits._replace(any_thread=shared, library_any_thread=shared)

    def one_thread_why(self) -> str:
        return self._thread_why

    def why_default(self) -> str:
        return "host memory: the CPU runs the kernels"

    def memory_words(self, access: str) -> str:
        return "host memory"

    def allocate(self, size: int, flags: tuple[bool, bool, bool, int]) -> Block:
        try:
            host = mmap.mmap(-1, size)
        except (OSError, OverflowError) as e:
            raise OutOfMemoryError(f"allocate_memory: {size} bytes of host memory: {e}") from None
        address = int(ffi.cast("uintptr_t", ffi.from_buffer(host)))
        rt = self._runtime.handle
        handle = capi.import_cpu_memory(rt, address, size).cdata
        return Block(handle, functools.partial(_release_host, rt, handle, host), address)

    def host_visible(self, memory: Any) -> bool:
        return True


def device(runtime: Any, native: Native) -> Device:
    """The device of a CPU runtime (this room's registration): host memory of our own, imported."""
    return HostDevice(runtime)
