"""How many threads a CPU runtime starts: the cores this process may use (affinity, a container's quota),
``TAICHI_AOT_CPU_THREADS``, or ``Runtime(cpu_threads=N)`` -- where libtaichi_c_api alone starts one per
online core of the machine. Thread counts are read from /proc (the runtime's pool threads)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from conftest import require_arch
from taichi_aot import Arch, ArgumentTypeError, InvalidArgumentError, Runtime, _cpus, capi


def _threads() -> int:
    return len(os.listdir("/proc/self/task"))


def _started(**kwargs) -> tuple[int | None, int]:
    """(what the runtime says it started, how many threads it added to the process)."""
    before = _threads()
    with Runtime(Arch.X64, **kwargs) as rt:
        return rt.cpu_threads, _threads() - before


def test_a_cpu_runtime_starts_the_threads_asked_for():
    require_arch(Arch.X64)
    assert _started(cpu_threads=1) == (1, 1)
    assert _started(cpu_threads=3) == (3, 3)  # more than the cores is allowed (the caller's choice)
    # by default: the cores this process may use (its affinity, within its cgroup's CPU quota)
    cores = _cpus.usable_cpus()
    assert 1 <= cores <= len(os.sched_getaffinity(0))
    assert _started() == (cores, cores)


def test_kernels_give_the_same_results_on_any_thread_count(modules):
    require_arch(Arch.X64)
    y = np.arange(100_000, dtype=np.float32)
    results = []
    for threads in (1, 4):
        with Runtime(Arch.X64, cpu_threads=threads) as rt:
            mod = rt.load_module(modules.path(Arch.X64))
            x = rt.ndarray(y.shape, np.float32)
            mod.kernels["add"](x, rt.ndarray_from_numpy(y), 0.5)
            rt.wait()
            results.append(x.to_numpy())
    np.testing.assert_array_equal(results[0], y * np.float32(0.5))
    np.testing.assert_array_equal(results[0], results[1])


def test_the_default_follows_affinity_and_the_variable():
    """Run in a child: pinned to one core, a runtime starts one thread; TAICHI_AOT_CPU_THREADS overrides it,
    and a bad value is a typed error at creation, after which a good runtime still starts."""
    require_arch(Arch.X64)
    code = textwrap.dedent("""
        import os
        from taichi_aot import InvalidArgumentError, Runtime
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
        with Runtime("x64") as rt:
            print("pinned", rt.cpu_threads)
        os.environ["TAICHI_AOT_CPU_THREADS"] = "3"
        with Runtime("x64") as rt:
            print("variable", rt.cpu_threads)
        with Runtime("x64", cpu_threads=2) as rt:
            print("argument", rt.cpu_threads)
        for bad in ("lots", "0", "-2"):
            os.environ["TAICHI_AOT_CPU_THREADS"] = bad
            try:
                Runtime("x64")
            except InvalidArgumentError as e:
                print("refused", "TAICHI_AOT_CPU_THREADS" in str(e))
        del os.environ["TAICHI_AOT_CPU_THREADS"]
        with Runtime("x64") as rt:
            print("after", rt.cpu_threads)
    """)
    env = {k: v for k, v in os.environ.items() if k != "TAICHI_AOT_CPU_THREADS"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n") == ["pinned 1", "variable 3", "argument 2", "refused True", "refused True",
                                      "refused True", "after 1", ""]


def test_bad_thread_counts_are_typed_errors(vulkan):
    require_arch(Arch.X64)
    for bad in (0, -1, 10**6):
        with pytest.raises(InvalidArgumentError, match="cpu_threads"):
            Runtime(Arch.X64, cpu_threads=bad)
    for bad in (True, 2.0, "2"):
        with pytest.raises(ArgumentTypeError, match="cpu_threads"):
            Runtime(Arch.X64, cpu_threads=bad)
    with pytest.raises(InvalidArgumentError, match="CPU runtimes"):
        Runtime(vulkan, cpu_threads=2)
    with Runtime(vulkan) as rt:
        assert rt.cpu_threads is None
    assert _started(cpu_threads=2) == (2, 2)  # nothing left set by the refusals


def test_the_flat_api_takes_and_reports_the_count():
    require_arch(Arch.X64)
    before = _threads()
    runtime = capi.create_runtime(Arch.X64, cpu_threads=2)
    try:
        assert capi.runtime_threads(runtime) == 2 and _threads() - before == 2
    finally:
        capi.destroy_runtime(runtime)
