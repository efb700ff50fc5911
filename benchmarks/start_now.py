"""Issue "vkwait"'s rows measured with the APIs every taichi_aot since 7dd3952 (the issue's start) has, so that an
older checkout and this one run the same program alternately (build each into its own folder and put it first on
PYTHONPATH):

    python benchmarks/start_now.py vulkan|cuda

One line: a launch of the bench's ``saxpy`` @16 and ``rt.wait()``; 64 launches and ``rt.wait()`` (µs, the median of 5
runs); a waited ``saxpy`` over 2^24 floats beyond its device time (the profile's mean over 100 launches back to back);
four threads sharing the runtime, each 40 rounds of 10 launches of ``tiny`` and a value (``to_numpy``), against one
thread doing the four's rounds in turn (one thread's time over the threads', the median of 3 pairs). The modules are
compiled by Taichi (``taichi_aot_bench.compile``).
"""

from __future__ import annotations

import functools
import statistics
import sys
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable

import numpy as np

from taichi_aot import Runtime
from taichi_aot_bench.compile import taichi_module


def per_step(rt: Any, step: Callable[[], object], n: int, repeats: int) -> float:
    """Microseconds of ``n`` calls of ``step`` and a wait, the median of 5 runs of ``repeats``."""
    runs = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(repeats):
            for _ in range(n):
                step()
            rt.wait()
        runs.append((time.perf_counter() - t0) / repeats * 1e6)
    return statistics.median(runs)


def _rounds(tiny: Any, a: Any) -> None:
    """40 rounds of 10 launches of ``tiny`` on ``a`` and a value."""
    for _ in range(40):
        for _ in range(10):
            tiny(a, 1.0)
        a.to_numpy()


def _in_turn(bodies: Sequence[Callable[[], None]]) -> float:
    t0 = time.perf_counter()
    for body in bodies:
        body()
    return time.perf_counter() - t0


def _gated(gate: threading.Barrier, body: Callable[[], None]) -> None:
    gate.wait(timeout=60)
    body()


def _together(bodies: Sequence[Callable[[], None]]) -> float:
    """Seconds threads take to run ``bodies``, a thread each, from a gate (a thread's error raised). Not
    taichi_aot_bench.sharing's ``together``: the start's bench, which this program runs beside, has none."""
    gate = threading.Barrier(len(bodies) + 1)
    with ThreadPoolExecutor(len(bodies)) as pool:
        done = [pool.submit(_gated, gate, body) for body in bodies]
        gate.wait(timeout=60)
        t0 = time.perf_counter()
        for each in done:
            each.result()
        return time.perf_counter() - t0


def threads_kept(tiny: Any, arrays: list[Any]) -> float:
    """One thread's time over four threads' for 40 rounds each of 10 launches and a value, the median of 3 pairs."""
    bodies = [functools.partial(_rounds, tiny, a) for a in arrays]
    _in_turn(bodies), _together(bodies)  # warm
    return statistics.median(_in_turn(bodies) / _together(bodies) for _ in range(3))


def main(arch: str) -> str:
    with Runtime(arch) as rt:
        mod = rt.load_module(taichi_module("bench", arch))
        saxpy, tiny = mod.kernels["saxpy"], mod.kernels["tiny"]
        x, y = rt.ndarray((16,), np.float32), rt.ndarray((16,), np.float32)
        small = lambda: saxpy(x, y, 0.5)  # noqa: E731
        per_step(rt, small, 1, 200)
        out = {"launch+wait us": per_step(rt, small, 1, 1000), "64 launches+wait us": per_step(rt, small, 64, 30)}
        bx, by = rt.ndarray((1 << 24,), np.float32), rt.ndarray((1 << 24,), np.float32)
        big = lambda: saxpy(bx, by, 0.5)  # noqa: E731
        per_step(rt, big, 1, 20)
        waited = per_step(rt, big, 1, 100)
        with rt.profile() as prof:
            for _ in range(100):
                big()
            rt.wait()
        device = next(r for r in prof.kernels() if r.name.startswith("saxpy")).mean * 1e6
        out["2^24 waited beyond device us"] = waited - device
        out["4 threads, a value every 10 (x one thread)"] = threads_kept(
            tiny, [rt.ndarray((16,), np.float32) for _ in range(4)])
    return f"{arch} " + " | ".join(f"{k} {v:.2f}" for k, v in out.items())


if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1] not in ("vulkan", "cuda"):
        sys.exit("usage: python benchmarks/start_now.py vulkan|cuda")
    print(main(sys.argv[1]), flush=True)
