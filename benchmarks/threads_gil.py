"""Python's lock's ceiling for the sharing section's CUDA shape, with no taichi_aot in the loop: four Python threads,
each ROUNDS rounds of FEW launches of a tiny kernel and a value read back (checked), against one thread doing the
four's rounds in turn, the CUDA driver called through ctypes.

    python benchmarks/threads_gil.py [--rounds 40] [--pairs 5] [--json FILE]

Each variant is a way a Python binding could launch:

- the launch keeps Python's lock (``ctypes.PyDLL``: as taichi_aot's quick launch keeps it), or lets it go in the
  driver's ``cuLaunchKernel`` (``ctypes.CDLL``: the other threads' Python runs meanwhile, and the thread takes the lock
  back after);
- on the legacy default stream (as taichi_aot's own CUDA runtime launches), on one stream the threads share, on a
  stream each (non-blocking), or on a blocking stream each, whose work the legacy default stream orders with the
  copies made on it (the value then read there); and the last with a thread's launch that follows another thread's
  made on the legacy stream, which orders it after every blocking stream's work and their later work after it (where
  the launch keeps the lock, the threads' launches run in the order they were made, as on one stream; where it lets
  the lock go, two threads' launches made at once may pass each other).

The value's copy and its stream's synchronization let the lock go in every variant. Each figure is one thread's time
over the four threads' (higher is better: at least 1.5x is issue "vkwait"'s target), the median and range of PAIRS
alternated pairs. benchmarks/threads_raw.c gives the same shape in C alone (no Python's lock). Exits 2 saying why
where no CUDA driver or GPU answers, 1 where a call fails or a value is wrong once the runs began.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import statistics
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any, Callable

THREADS, FEW = 4, 10
#: A kernel that adds v to the first n floats at p: sm_50 PTX, which the driver compiles for any later GPU.
TINY_PTX = (b".version 7.0\n.target sm_50\n.address_size 64\n"
            b".visible .entry tiny(.param .u64 p, .param .f32 v, .param .u32 n) {\n"
            b".reg .pred %p; .reg .b32 %r<3>; .reg .f32 %f<3>; .reg .b64 %rd<4>;\n"
            b"ld.param.u64 %rd1, [p]; ld.param.f32 %f1, [v]; ld.param.u32 %r1, [n];\n"
            b"mov.u32 %r2, %tid.x; setp.ge.u32 %p, %r2, %r1; @%p bra DONE;\n"
            b"cvta.to.global.u64 %rd2, %rd1; mul.wide.u32 %rd3, %r2, 4; add.s64 %rd2, %rd2, %rd3;\n"
            b"ld.global.f32 %f2, [%rd2]; add.f32 %f2, %f2, %f1; st.global.f32 [%rd2], %f2;\n"
            b"DONE: ret;\n}\n\0")
STREAMS = ("the legacy stream", "one stream", "a stream each", "a blocking stream each",
           "a blocking stream each, a switch on the legacy stream")
#: The driver's functions called, and their arguments' C types (each returns a CUresult, an int).
SIGNATURES: dict[str, tuple[Any, ...]] = {
    "cuInit": (ctypes.c_uint,),
    "cuDeviceGet": (ctypes.POINTER(ctypes.c_int), ctypes.c_int),
    "cuDevicePrimaryCtxRetain": (ctypes.POINTER(ctypes.c_void_p), ctypes.c_int),
    "cuCtxSetCurrent": (ctypes.c_void_p,),
    "cuCtxSynchronize": (),
    "cuModuleLoadData": (ctypes.POINTER(ctypes.c_void_p), ctypes.c_char_p),
    "cuModuleGetFunction": (ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p, ctypes.c_char_p),
    "cuStreamCreate": (ctypes.POINTER(ctypes.c_void_p), ctypes.c_uint),
    "cuStreamSynchronize": (ctypes.c_void_p,),
    "cuMemAlloc_v2": (ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t),
    "cuMemsetD32_v2": (ctypes.c_uint64, ctypes.c_uint, ctypes.c_size_t),
    "cuMemcpyDtoH_v2": (ctypes.c_void_p, ctypes.c_uint64, ctypes.c_size_t),
    "cuMemcpyDtoHAsync_v2": (ctypes.c_void_p, ctypes.c_uint64, ctypes.c_size_t, ctypes.c_void_p),
    "cuLaunchKernel": (ctypes.c_void_p,) + (ctypes.c_uint,) * 7 + (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p),
}
#: Launches an array sees in a run, at most: its value is a float, exact to 2^24.
MOST_LAUNCHES = 1 << 24


class CudaError(Exception):
    """A driver call failed, or a value read back is wrong, once the runs began: the program's answer (exit 1)."""


class NoCudaError(Exception):
    """No CUDA driver, or no GPU it can set up the runs on: the program's answer is why (exit 2)."""


class Driver:
    """libcuda twice: calls that let Python's lock go (``free``) and calls that keep it (``held``), on the primary
    context of device 0."""

    def __init__(self) -> None:
        try:
            self.free = ctypes.CDLL("libcuda.so.1")
            self.held = ctypes.PyDLL("libcuda.so.1")
            for lib in (self.free, self.held):
                for name, argtypes in SIGNATURES.items():
                    function = getattr(lib, name)
                    function.argtypes, function.restype = argtypes, ctypes.c_int
        except (OSError, AttributeError) as e:
            raise NoCudaError(f"no CUDA here: no driver: {e}") from None
        device = ctypes.c_int()
        self.context, module, self.function = ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_void_p()
        self.check(self.free.cuInit(0), "cuInit")
        self.check(self.free.cuDeviceGet(ctypes.byref(device), 0), "cuDeviceGet")
        self.check(self.free.cuDevicePrimaryCtxRetain(ctypes.byref(self.context), device), "the primary context")
        self.current()
        self.check(self.free.cuModuleLoadData(ctypes.byref(module), TINY_PTX), "the kernel's module")
        self.check(self.free.cuModuleGetFunction(ctypes.byref(self.function), module, b"tiny"), "the kernel")

    @staticmethod
    def check(code: int, what: str) -> None:
        if code != 0:
            raise CudaError(f"{what}: CUresult {code}")

    def current(self) -> None:
        """The primary context current on this thread."""
        self.check(self.free.cuCtxSetCurrent(self.context), "cuCtxSetCurrent")

    def stream(self, blocking: bool) -> ctypes.c_void_p:
        made = ctypes.c_void_p()
        self.check(self.free.cuStreamCreate(ctypes.byref(made), 0 if blocking else 1), "cuStreamCreate")
        return made


class Body:
    """One thread's work: an array of 16 floats of its own, the launches' parameters, its streams, and how many
    launches its array has seen (what a value must read)."""

    def __init__(self, cu: Driver, shared: ctypes.c_void_p):
        self.cu, self.data, self.got, self.done = cu, ctypes.c_uint64(), ctypes.c_float(), 0
        cu.check(cu.free.cuMemAlloc_v2(ctypes.byref(self.data), 64), "cuMemAlloc")
        cu.check(cu.free.cuMemsetD32_v2(self.data, 0, 16), "cuMemsetD32")
        self._v, self._n = ctypes.c_float(1.0), ctypes.c_uint32(16)
        self.params = (ctypes.c_void_p * 3)(*(ctypes.cast(ctypes.byref(p), ctypes.c_void_p)
                                              for p in (self.data, self._v, self._n)))
        blocking = cu.stream(True)
        self.streams = {STREAMS[0]: ctypes.c_void_p(), STREAMS[1]: shared, STREAMS[2]: cu.stream(False),
                        STREAMS[3]: blocking, STREAMS[4]: blocking}

    def rounds(self, count: int, keeps_lock: bool, streams: str, last: list[object]) -> None:
        """``count`` rounds of FEW launches and a value, checked; ``last``: the body that launched last (the variant's
        own, where a thread's launch after another's goes on the legacy stream)."""
        cu, stream, got = self.cu, self.streams[streams], self.got
        launch = (cu.held if keeps_lock else cu.free).cuLaunchKernel
        # the copy on the legacy default stream, which orders it after every blocking stream's launches
        legacy = streams in (STREAMS[0], STREAMS[3], STREAMS[4])
        switch, nothing = streams == STREAMS[4], ctypes.c_void_p()
        for _ in range(count):
            for _ in range(FEW):
                on = stream
                if switch and last[0] is not self:  # after another thread's launch: on the legacy stream, which
                    last[0], on = self, nothing    # orders it after every blocking stream's work, and theirs after it
                cu.check(launch(cu.function, 1, 1, 1, 32, 1, 1, 0, on, self.params, None), "cuLaunchKernel")
            if legacy:
                cu.check(cu.free.cuMemcpyDtoH_v2(ctypes.byref(got), self.data, 4), "cuMemcpyDtoH")
            else:
                cu.check(cu.free.cuMemcpyDtoHAsync_v2(ctypes.byref(got), self.data, 4, stream), "cuMemcpyDtoHAsync")
                cu.check(cu.free.cuStreamSynchronize(stream), "cuStreamSynchronize")
            self.done += FEW
            if got.value != float(self.done):
                raise CudaError(f"a value read {got.value} after {self.done} launches")


def together(cu: Driver, bodies: Sequence[Callable[[], None]]) -> float:
    """Milliseconds THREADS threads take to run ``bodies``, a thread each, from a gate to the last one's end (not
    taichi_aot_bench.sharing's ``together``: this program runs where taichi_aot is not installed, and makes each
    thread's CUDA context current before the gate)."""
    gate, ends, errors = threading.Barrier(len(bodies) + 1), [], []

    def run(body: Callable[[], None]) -> None:
        try:
            cu.current()
            gate.wait(timeout=60)
            body()
            ends.append(time.perf_counter())
        except BaseException as e:  # the first error is the program's answer
            errors.append(e)
            gate.abort()

    threads = [threading.Thread(target=run, args=(b,)) for b in bodies]
    for t in threads:
        t.start()
    try:
        gate.wait(timeout=60)
    except threading.BrokenBarrierError:
        pass
    start = time.perf_counter()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return (max(ends) - start) * 1e3


def variant(cu: Driver, bodies: list[Body], keeps_lock: bool, streams: str, rounds: int, pairs: int) -> dict[str, Any]:
    """One variant's pairs: one thread in turn, then THREADS threads at once."""
    last: list[object] = [None]
    work = [lambda b=b: b.rounds(rounds, keeps_lock, streams, last) for b in bodies]
    for body in work:  # warm
        body()
    ratios, ones, fours = [], [], []
    for _ in range(pairs):
        t0 = time.perf_counter()
        for body in work:
            body()
        ones.append((time.perf_counter() - t0) * 1e3)
        fours.append(together(cu, work))
        ratios.append(ones[-1] / fours[-1])
    name = f"launch {'keeps' if keeps_lock else 'lets go'} Python's lock, {streams}"
    return {"variant": name, "ratio": statistics.median(ratios), "ratios": [round(r, 3) for r in ratios],
            "one_ms": statistics.median(ones), "four_ms": statistics.median(fours)}


def setup() -> tuple[Driver, list[Body]]:
    """The driver, and THREADS bodies with their arrays zeroed; NoCudaError where the driver or a GPU does not
    answer."""
    try:
        cu = Driver()
        shared = cu.stream(False)
        bodies = [Body(cu, shared) for _ in range(THREADS)]
        cu.check(cu.free.cuCtxSynchronize(), "the arrays' zeroing")
    except CudaError as e:
        raise NoCudaError(f"no CUDA here: {e}") from None
    return cu, bodies


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=40, help="rounds of FEW launches and a value a thread")
    parser.add_argument("--pairs", type=int, default=5, help="alternated pairs of one thread and four a variant")
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.pairs < 1:
        parser.error("--rounds and --pairs are counts from 1")
    if 2 * len(STREAMS) * (1 + 2 * args.pairs) * args.rounds * FEW > MOST_LAUNCHES:
        parser.error(f"--rounds x --pairs: an array's launches in the run past {MOST_LAUNCHES} (its value: a float)")
    try:
        cu, bodies = setup()
        rows = []
        for keeps_lock in (True, False):
            for streams in STREAMS:
                row = variant(cu, bodies, keeps_lock, streams, args.rounds, args.pairs)
                rows.append(row)
                print(f"{row['variant']:58} {row['ratio']:.2f}x one thread ({min(row['ratios']):.2f}-"
                      f"{max(row['ratios']):.2f}); one {row['one_ms']:.2f} ms, four {row['four_ms']:.2f} ms",
                      flush=True)
    except NoCudaError as e:
        print(f"threads_gil: {e}", file=sys.stderr)
        return 2
    except CudaError as e:
        print(f"threads_gil: failed: {e}", file=sys.stderr)
        return 1
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"threads": THREADS, "few": FEW, "rounds": args.rounds, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
