"""The bench's raw C loops (``_csrc/steps.c``, built into this room's extension ``_steps``) over launches taichi_aot
prepared: bound launches' C structs (``TaichiAotLaunch``, ``taichi_aot/_csrc/taichi_aot.h``), launched with no
Python in between and no check, through taichi_aot._native's own functions (bound once, at import)."""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Callable

from taichi_aot import Arch, NotSupportedError
from taichi_aot._native import ffi as native_ffi
from taichi_aot._native import lib as native_lib
from taichi_aot.drivers import cuda as _cuda

from ._steps import ffi, lib

if TYPE_CHECKING:
    import numpy as np

    from taichi_aot import BoundLaunch, Memory, Runtime


def _bind() -> None:
    """Hand steps.c the address of each _native function it calls (each field of the table is named for one)."""
    calls = ffi.new("TaichiAotBenchCalls *")
    for name, _ in ffi.typeof("TaichiAotBenchCalls").fields:
        address = int(native_ffi.cast("uintptr_t", native_ffi.addressof(native_lib, name)))
        setattr(calls, name, ffi.cast("void *", address))
    lib.taichi_aot_bench_bind(calls)


_bind()


def readback(rt: Runtime, memory: Memory, buf: np.ndarray) -> Any:
    """The read back a C program makes of ``memory`` into ``buf``: ``cuMemcpyDtoH`` on CUDA, else map and copy (a
    ``TaichiAotReadback *`` for :func:`c_loop`)."""
    out = ffi.new("TaichiAotReadback *")
    out.dst = ffi.cast("void *", buf.ctypes.data)
    out.size = buf.nbytes
    if rt.arch == Arch.CUDA:
        out.kind = 2
        out.cuda_copy = ffi.cast("void *", ctypes.cast(_cuda.driver().cuMemcpyDtoH_v2, ctypes.c_void_p).value)
        out.device_pointer = memory.cuda_pointer()
    else:
        out.kind = 1
        out.runtime = rt.handle
        out.memory = memory.handle
    return out


def c_loop(step: Sequence[BoundLaunch], every: Sequence[BoundLaunch] = (), readback: Any = None
           ) -> Callable[[int, int], float]:
    """The raw C loop over bound launches: ``run(steps, each)`` launches ``step`` ``steps`` times, and every ``each``
    steps (0: never) ``every``, a wait and ``readback`` (a ``TaichiAotReadback *``; None: nothing read); returns the
    seconds per step."""
    launches = native_ffi.new("TaichiAotLaunch[]", len(step))
    for i, b in enumerate(step):
        launches[i] = b._c[0]  # the bound launch's prepared struct: its handle and packed arguments
    others = native_ffi.new("TaichiAotLaunch[]", max(len(every), 1))
    for i, b in enumerate(every):
        others[i] = b._c[0]
    if readback is None:
        readback = ffi.new("TaichiAotReadback *")  # kind 0: no read back
    keep = (step, every, launches, others, readback)  # the structs point into the bound launches' buffers

    def run(steps: int, each: int) -> float:
        assert keep
        seconds = lib.taichi_aot_steps(launches, len(step), others, len(every), steps, each, readback)
        if seconds == -2.0:
            raise NotSupportedError("the raw C step loop times kernels and graphs of libtaichi and of the own CUDA "
                                    f"launcher only; a launch of kind {[b._c.kind for b in (*step, *every)]} is "
                                    "neither (nothing was launched)")
        if seconds < 0:
            raise RuntimeError("the raw C step loop failed")
        return seconds / steps

    return run


def import_loop(bound: BoundLaunch, ptrs: list[int], count: int, size: int, cuda: bool) -> Callable[[int], float]:
    """Raw C's launch of arrays handed anew: ``run(n)`` imports the memory at the first ``count`` of ``ptrs``
    (``size`` bytes each; CUDA memory where ``cuda``) into ``bound``'s first ndarray arguments (on taichi_aot's own
    CUDA runtime, the pointers themselves) and launches it, ``n`` times; returns the seconds per launch."""
    c_ptrs = ffi.new("uint64_t[]", ptrs)
    keep = (bound, c_ptrs)

    def run(n: int) -> float:
        assert keep
        seconds = lib.taichi_aot_import_steps(bound._c, c_ptrs, count, size, int(cuda), n)
        if seconds < 0:
            raise RuntimeError("the raw C import loop failed")
        return seconds / n

    return run
