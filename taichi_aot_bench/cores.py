"""Rows of ``taichi-aot bench``'s cores section: a CPU module built for a few threads, run on the cores of the
machine it runs on (issue "x64cores").

Taichi writes a CPU loop's split into the module where it compiles it: a module built on a 2-core laptop or CI
machine held its loops to 2 threads wherever it ran. The load now splits each loop over an ndarray's length for the
runtime's threads (taichi_aot/metadata/retarget.py). The module here (``cores_kernels.py``'s ``relax``,
compute-bound, no element reading another's) is built with Taichi's CPU threads set to BUILT_FOR, then timed, in
paired rounds (measure.py):

* on a runtime of this machine's usable cores (the default), against
* the same module on a runtime of BUILT_FOR threads: what every runtime ran it as before the load split loops anew
  (the module's own split held it there), target a speed-up of at least 0.8 x (cores / BUILT_FOR), and
* Taichi's JIT of the same kernel on this machine (its default threads, in a child process), target within 1.1x.

Both runtimes' values are checked equal, bit for bit, before the timing.
"""

from __future__ import annotations

import os
import sys
import time
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from taichi_aot import Runtime
from taichi_aot.enums import CPU_ARCHS

from .compile import HERE, taichi_module
from .harness import Server
from .measure import measure, usable_cores
from .row import Row

if TYPE_CHECKING:
    from .harness import Bench

__all__ = ["cores"]

BUILT_FOR = 2  # the thread count the module is built with: a small CI machine's
LENGTH = 1 << 16  # cores_kernels.LENGTH: the elements the kernel runs over
JIT_TARGET = 1.1
OWN = "built for 2 threads, on this runtime's threads"
BUILT = "as built: a runtime of 2 threads"
JIT = "Taichi JIT of the kernel (its default threads)"


def _start() -> np.ndarray:
    return np.linspace(0.0, 1.0, LENGTH, dtype=np.float32)


def _timed(rt: Any, relax: Any, x: Any, n: int, steps: int) -> Callable[[], float]:
    """A method: ms a launch, ``n`` launches of ``relax`` then a wait."""
    def one() -> float:
        t0 = time.perf_counter()
        for _ in range(n):
            relax(x, steps)
        rt.wait()
        return (time.perf_counter() - t0) / n * 1e3
    return one


def _jit(bench: Bench) -> tuple[Server | None, str]:
    """Taichi's JIT of the kernel in a child process, or None and why not."""
    if not bench.jit:
        return None, "the JIT row is off (--no-jit)"
    try:
        server = Server([sys.executable, os.path.join(HERE, "cores_kernels.py"), "jit", bench.name],
                        "Taichi JIT (cores)")
    except (RuntimeError, OSError) as e:
        return None, f"no Taichi JIT row: {e}"
    return server, ""


def cores(bench: Bench) -> list[Row]:
    """The cores rows on a CPU arch (see the module docstring); none elsewhere, saying why."""
    if bench.arch not in CPU_ARCHS:
        bench.log(f"  cores: the section is the CPU's (no rows on {bench.name})")
        return []
    path = taichi_module("cores", bench.name, str(BUILT_FOR))
    steps, n, rounds = (40, 2, 3) if bench.quick else (200, 4, 7)
    spread = Runtime(bench.arch)
    built = Runtime(bench.arch, cpu_threads=BUILT_FOR)
    server, why = _jit(bench)
    try:
        methods: dict[str, Callable[[], float]] = {}
        values = []
        for name, rt in ((OWN, spread), (BUILT, built)):
            relax = rt.load_module(path).kernels["relax"]
            x = rt.ndarray_from_numpy(_start())
            for _ in range(3):
                relax(x, steps)
            values.append(x.to_numpy())
            methods[name] = _timed(rt, relax, x, n, steps)
        if not np.array_equal(values[0], values[1]):
            raise RuntimeError("cores: the module split for this runtime's threads gave other values than as built")
        if server is not None:
            jit_server = server
            methods[JIT] = lambda: jit_server.seconds(f"run {n} {steps}") / n * 1e3
        measured = measure(methods, None, rounds, reps=1)
    finally:
        if server is not None:
            server.close()
        spread.close()
        built.close()
    cores_here = usable_cores()
    params = {"steps": steps, "launches": n, "rounds": rounds, "length": LENGTH, "built_for": BUILT_FOR,
              "threads": spread.cpu_threads, "cores": cores_here}
    rows = {k: Row("cores", bench.name, k, "ms/launch", v, params=params) for k, v in measured.bests.items()}
    speedup = measured.pair(BUILT, OWN)
    target = 0.8 * cores_here / BUILT_FOR
    if speedup is not None:
        row = rows[OWN]
        row.limit, row.ratio, row.spread = BUILT, speedup[0], speedup[1]
        row.target, row.met = f">= {target:.2f}", row.ratio >= target
        row.note = f"speed-up over as built ({cores_here} usable cores, the runtime's {spread.cpu_threads} threads)"
    against_jit = measured.pair(OWN, JIT)
    if against_jit is not None:
        row = rows[JIT]
        row.limit, row.ratio, row.spread = OWN, 1 / against_jit[0], against_jit[1]
        row.target, row.met = f">= {1 / JIT_TARGET:.3f}", against_jit[0] <= JIT_TARGET
        row.note = f"the JIT's time over the split module's: the module within {JIT_TARGET:g}x of the JIT"
    elif why:
        bench.log(f"  cores: {why}")
    if measured.warnings:
        rows[OWN].note += "; " + "; ".join(measured.warnings)
    return list(rows.values())
