"""The scaling section's reference on the CPU: n independent processes, no pool, running what n pool workers run.

Each process is what a pool worker is (pinned to the cores the pool would give it, a one-thread x64 runtime, the
same module and warm-up) and runs its share of the same simulations on a common start, in rounds; the best
round's throughput is the machine's ceiling for n one-core workers. The pool's figure against it measures the
pool rather than the machine: memory bandwidth, shared caches and clock speeds with every core busy cost both
alike.
"""

from __future__ import annotations

import multiprocessing
import os
import time
from types import SimpleNamespace
from typing import Any

from taichi_aot import Arch, Runtime
from taichi_aot.cli.sweep import simulate, warm_up
from taichi_aot.pool._plan import plan_cpus

_TIMEOUT = 600.0


def _process(cores: tuple[int, ...] | None, module: str, tasks: list[Any], rounds: int, start: Any, ends: Any) -> None:
    if cores and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, cores)
    with Runtime(Arch.X64, cpu_threads=1) as rt:
        worker = SimpleNamespace(runtime=rt, module=rt.load_module(module), cache={})
        warm_up(worker)
        simulate(worker, tasks[0])
        for _ in range(rounds):
            start.wait(_TIMEOUT)
            for task in tasks:
                simulate(worker, task)
            ends.put(time.perf_counter())
        worker.cache.clear()


def independent(module: str, workers: int, tasks: list[Any], rounds: int) -> list[float]:
    """Throughput (tasks/s) of each round of ``workers`` independent processes sharing ``tasks`` evenly."""
    _threads, cpus = plan_cpus(workers, 1, "local")
    ctx = multiprocessing.get_context("spawn")
    start, ends = ctx.Barrier(workers + 1), ctx.Queue()
    share = len(tasks) // workers
    procs = [ctx.Process(target=_process, args=(cpus[i], module, tasks[i * share:(i + 1) * share], rounds, start,
                                                ends), daemon=True) for i in range(workers)]
    for p in procs:
        p.start()
    samples = []
    try:
        for _ in range(rounds):
            start.wait(_TIMEOUT)
            t0 = time.perf_counter()
            last = max(ends.get(timeout=_TIMEOUT) for _ in procs)  # the monotonic clock is the machine's
            samples.append(share * workers / (last - t0))
    finally:
        for p in procs:
            p.join(_TIMEOUT if samples else 1)
            if p.is_alive():
                p.kill()
    return samples
