"""The CPU cores this process may use, and how many threads a CPU runtime starts.

libtaichi_c_api 1.7.4 gives every x64 runtime one thread per online core of the machine, whatever the
process's affinity (``taskset``, a pool worker's share of the cores) or its container's CPU quota allows,
and has no setting for it. taichi_aot answers the library's question itself (``_csrc/threads.c``): a CPU
runtime starts :func:`default_threads` threads, or the count given to ``Runtime(cpu_threads=...)``.

A kernel runs on at most as many threads as its module was built for (``build --cpu-threads``) and at most
as many as its runtime has.
"""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Iterator

from . import _library  # loaded (its slot is looked for below), and its lock held while a runtime starts
from ._native import lib
from .enums import CPU_ARCHS, Arch
from .errors import ArgumentTypeError, InvalidArgumentError, NotSupportedError

#: The most threads a CPU runtime may be asked for.
MAX_THREADS = 4096
#: The variable that sets the default thread count of CPU runtimes.
THREADS_VARIABLE = "TAICHI_AOT_CPU_THREADS"


def affinity() -> list[int]:
    """The cores this process may run on, in order (every core where the OS keeps no affinity)."""
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))


def _siblings(core: int) -> str:
    """The hardware threads sharing ``core``'s physical core, as the kernel lists them ('' where unknown)."""
    base = f"/sys/devices/system/cpu/cpu{core}/topology/"
    return _read(base + "core_cpus_list") or _read(base + "thread_siblings_list") or ""


def spread(cores: list[int]) -> list[int]:
    """``cores`` ordered for placing workers: one hardware thread of each physical core first, then their
    second threads, and so on (two workers on the two threads of one core run at about 60% of two cores)."""
    rank: dict[int, int] = {}
    seen: dict[str, int] = {}
    for core in cores:
        group = _siblings(core) or str(core)
        rank[core] = seen.get(group, 0)
        seen[group] = rank[core] + 1
    return sorted(cores, key=lambda core: (rank[core], core))


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="ascii") as f:
            return f.read().strip()
    except (OSError, UnicodeDecodeError):
        return None


def quota() -> float | None:
    """The CPUs the process's cgroup may use per period (``cpu.max``, or v1's ``cpu.cfs_quota_us``), None
    where no quota is set or none can be read."""
    text = _read("/sys/fs/cgroup/cpu.max")
    parts = text.split() if text else []
    try:
        if len(parts) == 2 and parts[0] != "max":
            return int(parts[0]) / int(parts[1])
        limit, period = _read("/sys/fs/cgroup/cpu/cpu.cfs_quota_us"), _read("/sys/fs/cgroup/cpu/cpu.cfs_period_us")
        if limit and period and int(limit) > 0:
            return int(limit) / int(period)
    except (ValueError, ZeroDivisionError):
        pass
    return None


def usable_cpus() -> int:
    """How many cores this process may keep busy: its affinity, within its cgroup's CPU quota."""
    count = len(affinity())
    limit = quota()
    if limit is not None and limit > 0:
        count = min(count, max(1, math.ceil(limit)))
    return max(1, count)


def check_threads(value: object, what: str) -> int:
    """``value`` as a thread count (an int in 1..MAX_THREADS); ArgumentTypeError (not an int) or
    InvalidArgumentError (out of range) naming ``what``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ArgumentTypeError(f"{what} must be an int from 1 to {MAX_THREADS}, got {value!r}")
    if not 1 <= value <= MAX_THREADS:
        raise InvalidArgumentError(f"{what} must be an int from 1 to {MAX_THREADS}, got {value!r}")
    return value


def default_threads() -> int:
    """The threads a CPU runtime starts unless told: ``TAICHI_AOT_CPU_THREADS``, else :func:`usable_cpus`."""
    text = os.environ.get(THREADS_VARIABLE, "").strip()
    if not text:
        return usable_cpus()
    try:
        value: object = int(text)
    except ValueError:
        value = text
    return check_threads(value, THREADS_VARIABLE)


#: Whether the library's thread count can be set (its get_nprocs slot was found and pointed at ours); where
#: not, a CPU runtime starts what the library chooses, and asking for a count is refused.
SETTABLE = lib.taichi_aot_hook_cpu_threads() > 0


@contextlib.contextmanager
def starting(count: int) -> Iterator[None]:
    """Within the block, CPU runtimes created start ``count`` threads. It holds the library (``_library.busy``),
    so no other thread creates a runtime meanwhile."""
    with _library.busy:
        lib.taichi_aot_set_cpu_threads(count)
        try:
            yield
        finally:
            lib.taichi_aot_set_cpu_threads(0)


def runtime_threads(arch: Arch, cpu_threads: int | None, what: str) -> int:
    """The threads a new runtime of ``arch`` starts: ``cpu_threads`` (checked) or the default on a CPU arch,
    0 on the others (where ``cpu_threads`` must be None). Where the count cannot be set (not SETTABLE), the
    library's own count, and NotSupportedError for a count asked for."""
    if arch not in CPU_ARCHS:
        if cpu_threads is not None:
            raise InvalidArgumentError(f"{what}: cpu_threads is for CPU runtimes (x64, arm64), not {arch.name}")
        return 0
    if not SETTABLE:
        if cpu_threads is not None:
            raise NotSupportedError(f"{what}: cpu_threads cannot be set here (libtaichi_c_api's core count could "
                                    "not be answered on this processor); its runtimes start one thread per core")
        return int(lib.taichi_aot_get_cpu_threads())
    if cpu_threads is None:
        return default_threads()
    return check_threads(cpu_threads, f"{what}: cpu_threads")
