"""Task functions for the pool tests, at module level so that worker processes (and Ray actors) import them."""

from __future__ import annotations

import os
import signal
import time

import numpy as np


def axpy(worker, a):
    """x = 0 + a * arange(8) through the test module's ``add`` kernel; (values, worker pid)."""
    rt = worker.runtime
    x = rt.ndarray((8,), np.float32)
    y = rt.ndarray_from_numpy(np.arange(8, dtype=np.float32))
    worker.module.kernels["add"](x, y, a)
    rt.wait()
    return x.to_numpy(), os.getpid()


def axpy_on_each(worker, a):
    """``axpy`` on each of the worker's runtimes (one a GPU it holds): [(values, its device index)]."""
    out = []
    for rt, modules in zip(worker.runtimes, worker.modules_on):
        x = rt.ndarray((8,), np.float32)
        modules[next(iter(modules))].kernels["add"](x, rt.ndarray_from_numpy(np.arange(8, dtype=np.float32)), a)
        out.append((x.to_numpy(), rt.device_index))
    return out


def slow_axpy(worker, a):
    time.sleep(0.15)
    return axpy(worker, a)


def on_node(worker, a):
    """``slow_axpy`` on a Ray worker: (values, the id of the Ray node it ran on, worker pid)."""
    import ray

    values, pid = slow_axpy(worker, a)
    return values, ray.get_runtime_context().get_node_id(), pid


def whoami(worker, _item):
    return {"pid": os.getpid(), "slot": worker.slot, "device": worker.device, "arch": worker.arch.name,
            "modules": sorted(worker.modules), "cache": sorted(worker.cache),
            "cuda_visible": os.environ.get("CUDA_VISIBLE_DEVICES")}


def slow_whoami(worker, item):
    """``whoami`` after a pause, so that every worker of a pool takes some of a map's items."""
    time.sleep(0.1)
    return whoami(worker, item)


def fails(worker, item):
    if item == 2:
        raise ValueError(f"item {item} is bad")
    return item


class UnpicklableError(Exception):
    def __init__(self, a, b):  # pickle gives back only args: rebuilding it fails
        super().__init__(f"{a}-{b}")


def fails_late(worker, item):
    """Item 0 fails after item 1 has failed: map must raise item 0's error (input order, as Executor.map)."""
    import time

    if item == 0:
        time.sleep(0.5)
    raise ValueError(f"item {item} failed")


def fails_oddly(worker, item):
    raise UnpicklableError(1, 2)


def returns_lock(worker, item):
    import threading

    return threading.Lock()


def crashes(worker, item):
    os.kill(os.getpid(), signal.SIGKILL)


def crashes_once(worker, item):
    """Kill the worker the first time ``item`` is seen (a marker file says it was)."""
    value, marker = item
    if marker and not os.path.exists(marker):
        open(marker, "w").close()
        os.abort()
    return value * 2


def straggles_once(worker, item):
    """The first run of ``item`` with a marker takes ``first`` seconds (then writes ``marker + ".done"``), a run
    after it ``again`` seconds; without a marker, 50 ms."""
    value, marker, first, again = item if len(item) == 4 else (*item, 60.0, 0.0)
    if marker and not os.path.exists(marker):
        open(marker, "w").close()
        time.sleep(first)
        open(marker + ".done", "w").close()
    elif marker:
        time.sleep(again)
    time.sleep(0.05)
    return value * 2, os.getpid()


def setup_fails(worker):
    raise RuntimeError("setup refused")


def setup_cache(worker):
    worker.cache["ready"] = True


def cores(worker, _item):
    """The cores this worker may run on, and its pid."""
    return sorted(os.sched_getaffinity(0)), os.getpid()


def threads(worker, _item):
    """(the threads the worker's runtime says it started, the cores it may run on, its pid, how many threads
    a second runtime made here with the same count adds to the process)."""
    from taichi_aot import Runtime

    before = len(os.listdir("/proc/self/task"))
    with Runtime(worker.arch, cpu_threads=worker.runtime.cpu_threads) as rt:
        added = len(os.listdir("/proc/self/task")) - before
        assert rt.cpu_threads == worker.runtime.cpu_threads
    return worker.runtime.cpu_threads, sorted(os.sched_getaffinity(0)), os.getpid(), added


def react(worker, steps):
    """``steps`` x 16 Gray-Scott steps of the demo module from a fixed start (no random seeding): the same
    numbers on any thread count."""
    rt = worker.runtime
    start = np.zeros((32, 32, 2), np.float32)
    start[..., 0] = 1.0
    start[12:20, 12:20] = (0.5, 0.25)
    a = rt.ndarray_from_numpy(start, elem_ndim=1)
    b = rt.ndarray((32, 32), np.float32, (2,))
    for _ in range(steps):
        worker.module.graphs["steps16"](a=a, b=b, feed=0.037, kill=0.06)
    rt.wait()
    return a.to_numpy()


def arrays(worker, n):
    """Arrays of ``n`` elements in several layouts (a large result comes back through the worker's arena)."""
    import numpy as np

    frozen = np.arange(n, dtype=np.int16)
    frozen.flags.writeable = False
    fortran = np.asfortranarray(np.arange(2 * n, dtype=np.float64).reshape(2, n))
    return {"a": np.arange(n, dtype=np.float32), "f": fortran, "two": [np.full(n, 7, np.int64), np.ones(n)],
            "frozen": frozen, "tail": n}


def axpy_times(worker, n):
    """``add`` launched ``n`` times on the worker's runtime; its slot."""
    rt = worker.runtime
    x = rt.ndarray((8,), np.float32)
    y = rt.ndarray_from_numpy(np.ones(8, dtype=np.float32))
    for _ in range(n):
        worker.module.kernels["add"](x, y, 1.0)
    rt.wait()
    return worker.slot
