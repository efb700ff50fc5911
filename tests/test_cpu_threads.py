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


@pytest.fixture(scope="module")
def built_for(tmp_path_factory):
    """``{threads: module folder}``: tests/cpu_threads_kernels.py built for 1 and 2 threads, and for 2 with a cap of
    1 (``--max-cpu-threads``)."""
    require_arch(Arch.X64)
    root = tmp_path_factory.mktemp("cpu-threads")
    source = os.path.join(os.path.dirname(os.path.abspath(__file__)), "cpu_threads_kernels.py")
    out = {}
    for key, extra in ((1, ["--cpu-threads", "1"]), (2, ["--cpu-threads", "2"]),
                       ("capped", ["--cpu-threads", "2", "--max-cpu-threads", "1"])):
        folder = str(root / f"built-{key}")
        proc = subprocess.run([sys.executable, "-m", "taichi_aot", "build", source, "--arch", "x64", "--no-access",
                               "-o", folder, *extra], capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stderr[-2000:]
        out[key] = folder
    return out


def _run_all(folder: str, threads: int) -> tuple[dict[str, np.ndarray], str | None]:
    """Every kernel's values on a runtime of ``threads`` threads, and the folder its module was read from."""
    with Runtime(Arch.X64, cpu_threads=threads) as rt:
        mod = rt.load_module(folder)
        k = mod.kernels
        y = rt.ndarray_from_numpy(np.ones(100_003, np.float32))
        k["saxpy"](rt.ndarray_from_numpy(np.linspace(0, 1, 100_003).astype(np.float32)), y, 2.0)
        grid = rt.ndarray((301, 77), np.float32)
        k["grid"](grid, 1.5)
        fixed = rt.ndarray((1000,), np.float32)
        k["fixed"](fixed)
        heavy = rt.ndarray((5000,), np.float32)
        k["heavy"](heavy, 50)
        rt.wait()
        return ({"saxpy": y.to_numpy(), "grid": grid.to_numpy(), "fixed": fixed.to_numpy(),
                 "heavy": heavy.to_numpy()}, mod.files)


def _splits(folder: str, constant: bool = False) -> set[int]:
    """The chunk counts of the parallel loops over an ndarray's length in a module folder's IR (``constant``: of the
    kernel whose loop is over a constant range)."""
    import glob
    import re

    found = set()
    for path in glob.glob(os.path.join(folder, "*.ll")):
        if os.path.basename(path).startswith("fixed") != constant:
            continue
        with open(path, encoding="utf-8") as f:
            found |= {int(m) for m in re.findall(r"i32 noundef (\d+), i32 noundef \d+, i8\* noundef nonnull", f.read())}
    return found


def test_loops_run_on_the_runtimes_threads_whatever_the_module_was_built_for(built_for):
    """A module built for 1 thread, loaded on a runtime of 3, has its loops over an ndarray's length split for 3, in
    a private copy (the user's files untouched, still sealed as build made them); a module built for 2 on a runtime
    of 1, for 1; a loop over a constant range stays as built (its chunk a constant the compiler may have unrolled
    for); every kernel (loops over an ndarray's length, 1-D and 2-D, with an inner loop; a constant range) gives the
    same values, bit for bit, built for 1 or 2 and on 1, 2 or 3 threads."""
    from taichi_aot import _firstload

    with open(os.path.join(built_for[1], "saxpy.ll"), encoding="utf-8") as f:
        as_built = f.read()
    assert _splits(built_for[1]) == {1} and _splits(built_for[2]) == {2}
    expect, files = _run_all(built_for[2], 2)
    assert files == built_for[2]  # built for the runtime's threads: loaded where it lies
    for folder, threads in ((built_for[1], 3), (built_for[1], 2), (built_for[2], 1), (built_for[2], 3)):
        with Runtime(Arch.X64, cpu_threads=threads) as rt:
            mod = rt.load_module(folder)
            assert mod.files != folder and _splits(mod.files) == {threads}, (folder, threads)
            assert _splits(mod.files, constant=True) == _splits(folder, constant=True)  # as built
            assert _firstload.sealed(mod.files)  # sealed anew: its first load needs no child process
        got, _ = _run_all(folder, threads)
        for name in expect:
            np.testing.assert_array_equal(got[name], expect[name], err_msg=f"{name} ({folder}, {threads} threads)")
    with open(os.path.join(built_for[1], "saxpy.ll"), encoding="utf-8") as f:
        assert f.read() == as_built
    assert _firstload.sealed(built_for[1])


def test_a_cap_the_build_recorded_is_kept(built_for):
    """``build --max-cpu-threads 1``: the module's loops stay on 1 thread on a runtime of 3 (a cap the user asked
    for); ``info`` says what it was built for and that loads spread its loops."""
    with Runtime(Arch.X64, cpu_threads=3) as rt:
        assert _splits(rt.load_module(built_for["capped"]).files) == {1}
    info = subprocess.run([sys.executable, "-m", "taichi_aot", "info", built_for[1]], capture_output=True, text=True,
                          timeout=120)
    assert info.returncode == 0 and "built for 1 thread" in info.stdout and "spreads" in info.stdout, info.stdout


def test_a_copy_loaded_again_and_a_loop_of_another_start_are_left_as_they_are(built_for):
    """The private copy a load made (``module.files``), loaded by a runtime of other threads, is used as it is (its
    loops were split once; a second rewrite would define its values twice) and gives the same values; IR whose
    chunk is made for a loop that starts elsewhere than 0 is not taken for one that starts at 0 (its last elements
    would be lost)."""
    from taichi_aot.metadata.retarget import retarget

    expect, _ = _run_all(built_for[2], 2)
    with Runtime(Arch.X64, cpu_threads=3) as rt:
        copy = rt.load_module(built_for[1]).files
        assert copy is not None and _splits(copy) == {3}
        got, files = _run_all(copy, 2)  # while the first module is open: its copy is still there
        assert files == copy and _splits(copy) == {3}
    for name in expect:
        np.testing.assert_array_equal(got[name], expect[name], err_msg=name)
    with open(os.path.join(built_for[2], "saxpy.ll"), encoding="utf-8") as f:
        text = f.read()
    once = retarget(text, 4)
    assert once is not None and retarget(once[0], 3) is None
    assert text.count("= add i32 %8, 1\n") == 1  # the shape of a loop from 0 built for 2
    assert retarget(text.replace("= add i32 %8, 1\n", "= add i32 %8, 10\n"), 4) is None  # a loop from -9


#: The one room that opens a module's files after metadata/ read them: the first load's verdict and seal
#: (``_firstload``) hash the files as they stand, as libtaichi is about to read them (bytes, never read as IR or
#: metadata; the seal is read from the sidecar), and the sharing key is such a hash too.
_FILE_CHECKERS = {"taichi_aot._firstload"}


def _reads_after_metadata(monkeypatch, folder: str, run) -> list[str]:
    """The reads of ``folder``'s ``.ll``, ``.json`` and ``.spv`` files made while ``run()`` runs once metadata/ has
    read the module (``metadata.open_module`` returned), each as ``file: the package's room that opened it`` (its
    innermost frame in taichi_aot); those of :data:`_FILE_CHECKERS` left out. Every way of opening is watched: the
    builtin ``open`` (pathlib's and shutil's too) and ``os.open``."""
    import builtins
    import io

    import taichi_aot.metadata as metadata

    folder = os.path.realpath(folder)
    armed, found = [False], []

    def note(file, mode: str | int) -> None:
        if not armed[0] or not isinstance(file, (str, bytes, os.PathLike)):
            return
        path = os.path.realpath(os.fsdecode(file))
        writes = any(c in mode for c in "wxa+") if isinstance(mode, str) else bool(mode & (os.O_WRONLY | os.O_RDWR))
        if writes or os.path.dirname(path) != folder or not path.endswith((".ll", ".json", ".spv")):
            return
        frame = sys._getframe(2)
        while frame is not None and not frame.f_globals.get("__name__", "").startswith("taichi_aot"):
            frame = frame.f_back
        room = frame.f_globals["__name__"] if frame is not None else "?"
        if room not in _FILE_CHECKERS:
            found.append(f"{os.path.basename(path)}: {room}")

    real_open, real_os_open, real_open_module = builtins.open, os.open, metadata.open_module

    def watched_open(file, mode="r", *args, **kwargs):
        note(file, mode)
        return real_open(file, mode, *args, **kwargs)

    def watched_os_open(path, flags, *args, **kwargs):
        note(path, flags)
        return real_os_open(path, flags, *args, **kwargs)

    def open_module(*args, **kwargs):
        out = real_open_module(*args, **kwargs)
        armed[0] = True
        return out

    monkeypatch.setattr(builtins, "open", watched_open)
    monkeypatch.setattr(io, "open", watched_open)
    monkeypatch.setattr(os, "open", watched_os_open)
    monkeypatch.setattr(metadata, "open_module", open_module)
    run()
    return found


def test_a_load_and_launch_read_no_file_metadata_read(built_for, monkeypatch):
    """What metadata/ read of a module (its ``ModuleInfo``: the kernels' IR, read once into ``llvm_ir.IrKernel``,
    metadata.json and taichi_aot.json) is all a load and its launches read of those files: a module built for 2
    threads, loaded on 3 (its loops retargeted, in a private copy written from what metadata/ read) and each kernel
    launched, opens none of its ``.ll`` and ``.json`` files again but to hash them (:data:`_FILE_CHECKERS`)."""
    assert _reads_after_metadata(monkeypatch, built_for[2], lambda: _run_all(built_for[2], 3)) == []


def test_the_read_check_sees_a_reader(built_for, monkeypatch):
    """The check above finds what it looks for: a reader planted in the load (a kernel's IR and metadata.json read
    again through pathlib, ``open`` and ``os.open``), named by the room it runs in."""
    from pathlib import Path

    import taichi_aot.module

    folder, real = built_for[2], taichi_aot.module._on_threads

    def reading(*args):
        Path(folder, "saxpy.ll").read_text(encoding="utf-8")
        open(os.path.join(folder, "metadata.json"), "rb").close()
        os.close(os.open(os.path.join(folder, "grid.ll"), os.O_RDONLY))
        return real(*args)

    monkeypatch.setattr(taichi_aot.module, "_on_threads", reading)
    found = _reads_after_metadata(monkeypatch, folder, lambda: _run_all(folder, 3))
    assert sorted(found) == ["grid.ll: taichi_aot.module", "metadata.json: taichi_aot.module",
                             "saxpy.ll: taichi_aot.module"], found
