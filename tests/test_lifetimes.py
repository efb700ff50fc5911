"""Lifetimes: children keep parents alive, close order, finalizers, no leaks, clean exits."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import textwrap
import time
import warnings

import numpy as np
import pytest

from conftest import require_arch
from taichi_aot import Arch, Runtime, WrongProcessError, capi


def test_child_keeps_parent_alive(arch, modules):
    def make():
        rt = Runtime(arch)
        return rt.load_module(modules.path(arch)), rt.ndarray_from_numpy(np.ones(4, np.float32))

    mod, x = make()  # the Runtime object itself is gone
    gc.collect()
    mod.kernels["add"](x, x, 1.0)
    np.testing.assert_array_equal(x.to_numpy(), [2, 2, 2, 2])
    assert not x.runtime.closed
    rt = x.runtime
    del mod, x
    rt.close()


def test_runtime_close_closes_children_first(arch, modules):
    rt = Runtime(arch)
    children = [rt.load_module(modules.path(arch)), rt.ndarray((3,)), rt.allocate_memory(16)]
    rt.close()
    assert all(c.closed for c in children)
    assert capi.live_handle_count() == 0 or not capi.handles.is_live("runtime", rt._handle)


def test_garbage_collection_releases_handles(arch, modules):
    gc.collect()
    before = capi.live_handle_count()
    rt = Runtime(arch)
    mod = rt.load_module(modules.path(arch))
    mod.kernels["add"]
    rt.ndarray((16,))
    with pytest.warns(ResourceWarning, match=r"unclosed <Runtime .*: close it, or use it in a with block"):
        del rt, mod
        gc.collect()
    assert capi.live_handle_count() == before


def test_closed_runtime_collects_without_warning(arch):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        rt = Runtime(arch)
        rt.ndarray((4,))
        rt.close()
        del rt
        gc.collect()
        with Runtime(arch) as rt:
            rt.ndarray((4,))
        del rt
        gc.collect()


def test_runtime_left_open_at_exit_closes_quietly(arch):
    # at interpreter exit an open runtime is closed without a warning, even with warnings as errors
    code = textwrap.dedent(f"""
        import numpy as np
        from taichi_aot import Arch, Runtime
        rt = Runtime(Arch({int(arch)}))
        x = rt.ndarray((8,), np.float32)
        print("ok")
    """)
    proc = subprocess.run([sys.executable, "-W", "error", "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr
    assert proc.stderr == ""


def test_no_leak_over_ten_thousand_cycles(arch):
    with Runtime(arch) as rt:
        gc.collect()
        before = capi.live_handle_count()
        for _ in range(10_000):
            m = rt.allocate_memory(256, host_read=True, host_write=True)
            m.close()
        gc.collect()
        assert capi.live_handle_count() - before <= 1  # x64 keeps one block for reuse
        for _ in range(2_000):
            with rt.ndarray((8,), np.float32, host_access="readwrite") as x, x.map() as view:
                view[:] = 1
        del view, x  # the last view pins the last ndarray until it goes
        gc.collect()
        # bounded, not growing: on x64 the reuse pool holds the 256-byte block and two
        # 32-byte ones (each view outlives its ndarray until the next iteration)
        assert capi.live_handle_count() - before <= 3


def test_runtime_cycles_do_not_leak(arch, modules):
    gc.collect()
    before = capi.live_handle_count()
    for _ in range(20):
        with Runtime(arch) as rt:
            rt.load_module(modules.path(arch)).kernels["add"]
            rt.ndarray((4,))
    gc.collect()
    assert capi.live_handle_count() == before


EXIT_SCRIPT = """
import sys, numpy as np
from taichi_aot import Runtime, Arch
arch, path, order = Arch[sys.argv[1]], sys.argv[2], sys.argv[3]
rt = Runtime(arch)
mod = rt.load_module(path)
x = rt.ndarray_from_numpy(np.arange(8, dtype=np.float32), host_access="readwrite")
view = x.map().view()
mod.kernels["add"](x, x, 1.0)
if order == "close_runtime_keep_view":
    rt.close()
elif order == "close_module_only":
    mod.close()
elif order == "drop_runtime_ref":
    del rt
elif order == "cycle":
    x.self_ref = x  # objects in a reference cycle at exit
    rt.me = rt
print("done", float(view.sum()))
"""


@pytest.mark.parametrize("order", ["keep_all", "close_runtime_keep_view", "close_module_only", "drop_runtime_ref",
                                   "cycle"])
def test_exit_with_live_objects_is_clean(arch, modules, order, tmp_path):
    script = tmp_path / "exit.py"
    script.write_text(textwrap.dedent(EXIT_SCRIPT))
    out = subprocess.run([sys.executable, str(script), arch.name, modules.path(arch), order],
                         capture_output=True, text=True, timeout=120, env={**os.environ})
    assert out.returncode == 0, out.stderr
    assert out.stderr == ""
    assert out.stdout.startswith("done ")


@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork is POSIX")
def test_objects_refuse_a_forked_child(arch, modules):
    # after fork the child must not drive the parent's runtime (undefined behaviour of the driver):
    # every use raises WrongProcessError, and the child's exit releases nothing of the parent's
    with Runtime(arch) as rt:
        mod = rt.load_module(modules.path(arch))
        add = mod.kernels["add"]
        x, y = rt.ndarray((4,), np.float32), rt.ndarray((4,), np.float32)
        add(x, y, 1.0)
        bound = add.bind(x, y, 1.0)
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: report what each use raised, then leave without cleanup handlers
            results = []
            for use in (lambda: add(x, y, 1.0), bound.launch, x.to_numpy, rt.wait, lambda: rt.ndarray((2,))):
                try:
                    use()
                    results.append("ran")
                except WrongProcessError:
                    results.append("refused")
                except BaseException as e:
                    results.append(type(e).__name__)
            if arch == Arch.X64:  # a CPU runtime of its own works in the child (a GPU driver may refuse
                # a forked child a device: NVIDIA's Vulkan driver aborts it; GPU work belongs in a new process)
                with Runtime(arch) as own:
                    results.append("own" if own.ndarray((2,)).to_numpy().shape == (2,) else "bad")
            else:
                results.append("own")
            os.write(w, ",".join(results).encode())
            os._exit(0)
        os.close(w)
        _, status = os.waitpid(pid, 0)
        report = os.read(r, 1000).decode()
        os.close(r)
        assert status == 0 and report == "refused,refused,refused,refused,refused,own", report
        add(x, y, 1.0)  # the parent's objects are untouched
        rt.wait()


DAEMON = """
import threading, time, numpy as np
from taichi_aot import Runtime
started = threading.Event()
def loop():
    rt = Runtime({arch!r})
    mod = rt.load_module({module!r})
    x, y = rt.ndarray((1 << 16,), np.float32), rt.ndarray((1 << 16,), np.float32)
    started.set()
    while True:
        mod.kernels["add"](x, y, 0.5)
        rt.wait()
threading.Thread(target=loop, daemon=True).start()
started.wait()
time.sleep(0.2)
print("main returns")
"""


def test_interpreter_exit_while_a_daemon_thread_launches(arch, modules, tmp_path):
    """The main thread returns while a daemon thread launches on its own runtime: the runtime is abandoned at
    exit, never destroyed under it (this crashed 1 run in 3 on x64), and the thread, out of its C call, waits for
    the process's end at its next use of it: nothing printed (it raised ClosedError, whose traceback was)."""
    import subprocess
    import sys

    script = tmp_path / "daemon.py"
    script.write_text(DAEMON.format(arch=arch.name.lower(), module=modules.path(arch)))
    for _ in range(4):
        proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0 and proc.stdout == "main returns\n", proc.stderr[-2000:]
        assert proc.stderr == "", proc.stderr  # the thread waits for the process's end: no traceback


def test_closing_belongs_to_the_runtimes_thread(arch, modules):
    """close() from another thread while the runtime's thread runs is refused (it crashed the thread that was
    replaying or launching); once that thread has ended, any thread may close what it left. A Vulkan runtime's
    objects close from any thread (its calls are made one at a time): the replay stops with ClosedError."""
    import threading

    import numpy as np


    with Runtime(arch) as probe:
        any_thread = probe.device.traits.any_thread
    if any_thread:
        _closed_under_a_replay(arch, modules)
        return

    with Runtime(arch) as rt:
        mod = rt.load_module(modules.path(arch))
        x, y = rt.ndarray((64,), np.float32), rt.ndarray_from_numpy(np.ones(64, np.float32))
        with rt.record() as seq:
            mod.kernels["add"](x, y, 1.0)
        errors: list[str] = []
        closer = threading.Thread(target=_close_each, args=((mod, x, rt), errors))
        closer.start()
        seq.replay(200)  # meanwhile: nothing of it is closed under us
        closer.join()
        rt.wait()
        assert len(errors) == 3 and all("still running; close them there" in e for e in errors), errors
        assert not (mod.closed or x.closed or rt.closed)
        np.testing.assert_array_equal(x.to_numpy(), np.full(64, 200, np.float32))  # every replay ran

    made = {}

    def make():
        made["rt"] = Runtime(arch)
        made["x"] = made["rt"].ndarray((4,), np.float32)

    t = threading.Thread(target=make)
    t.start()
    t.join()
    made["x"].close()  # its thread is gone: nothing can be inside a call of it
    made["rt"].close()
    assert made["x"].closed and made["rt"].closed


FORK_WHILE_CREATING = """
import os, sys, threading, time
import taichi_aot as ta
arch = sys.argv[1]
def churn():
    while True:
        with ta.Runtime(arch):
            pass
threading.Thread(target=churn, daemon=True).start()
time.sleep(0.3)
for _ in range(4):
    pid = os.fork()
    if pid == 0:
        with ta.Runtime(arch):
            pass
        os._exit(0)
    deadline = time.time() + 20
    while not os.waitpid(pid, os.WNOHANG)[0]:
        if time.time() > deadline:
            os.kill(pid, 9)
            print("a child hung")
            sys.exit(1)
        time.sleep(0.01)
print("children ok")
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork is POSIX")
def test_fork_while_another_thread_creates_runtimes():
    """A fork waits for a runtime creation another thread has under way (the child would inherit the library's
    locks held and hang creating its own), and the parent, exiting with that thread still at it, ends cleanly.
    On x64, where a forked child may start a runtime of its own (a GPU driver may refuse a forked child a
    device: NVIDIA's Vulkan driver does; GPU work belongs in a new process)."""
    require_arch(Arch.X64)
    proc = subprocess.run([sys.executable, "-c", FORK_WHILE_CREATING, "x64"], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0 and "children ok" in proc.stdout, (proc.returncode, proc.stdout, proc.stderr[-2000:])


FORK_INSIDE_NO_COLLECTION = """
import gc, os, threading
from taichi_aot import _lifetime
inside, leave = threading.Event(), threading.Event()
def hold():
    with _lifetime.without_collection():
        inside.set()
        leave.wait()
threading.Thread(target=hold).start()
inside.wait()
parent_off = not gc.isenabled()
pid = os.fork()
if pid == 0:
    with _lifetime.without_collection():  # the child's own block, and the collector on again after it
        pass
    os._exit(0 if gc.isenabled() else 3)
code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
leave.set()
print("parent off", parent_off, "child", code)
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork is POSIX")
def test_a_forked_child_collects_though_another_thread_held_collection_off():
    """Python's collector, off while another thread of the parent makes a runtime where none may run, is on in a
    forked child (that thread is not the child's: nothing there would turn it on again)."""
    proc = subprocess.run([sys.executable, "-c", FORK_INSIDE_NO_COLLECTION], capture_output=True, text=True,
                          timeout=120)
    assert proc.stdout.split() == ["parent", "off", "True", "child", "0"], (proc.stdout, proc.stderr[-2000:])


RUNTIME_OF_A_FOREIGN_THREAD = """
import _thread, threading, time
import taichi_aot as ta
made = threading.Event()
def foreign():
    threading.current_thread()  # Python code on a thread it did not start (XLA's, calling in through cffi)
    rt = ta.Runtime("x64")
    made.set()
    while True:
        time.sleep(1)
_thread.start_new_thread(foreign, ())
made.wait()
print("main exits")
"""


def test_the_exit_hook_abandons_a_runtime_of_a_thread_python_did_not_start():
    """A runtime made on a thread Python did not start (XLA's, where a JAX op's twin runtime is made), still open at
    the interpreter's exit, is abandoned quietly: the exit hook never joins such a thread (threading refuses)."""
    require_arch(Arch.X64)
    proc = subprocess.run([sys.executable, "-c", RUNTIME_OF_A_FOREIGN_THREAD], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "main exits", (proc.stdout, proc.stderr[-2000:])
    assert "Exception ignored" not in proc.stderr and "dummy thread" not in proc.stderr, proc.stderr[-2000:]


VULKAN_AGAIN_AND_AGAIN = """
import sys
import numpy as np
import taichi_aot as ta
from taichi_aot import _probe
for _ in range(int(sys.argv[1])):
    with ta.Runtime("vulkan") as rt:
        assert not rt.ndarray((4,), np.float32).to_numpy().any()
print("kept", _probe.keep_vulkan_loaded())
"""


def test_vulkan_runtimes_made_again_and_again(vulkan):
    """Vulkan runtimes made and closed one after another, with nothing else of Vulkan in the process: the driver
    stays loaded between them (on an H100, NVIDIA's driver segfaulted at its 20th to 30th reload, with bare
    ti_create_runtime and ti_destroy_runtime too), so 40 come and go (in a child: a crash fails the test)."""
    proc = subprocess.run([sys.executable, "-c", VULKAN_AGAIN_AND_AGAIN, "40"], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0 and "kept True" in proc.stdout, (proc.returncode, proc.stderr[-2000:])


@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork is POSIX")
def test_a_forked_child_and_vulkan(vulkan):
    """A child forked after the parent's first Vulkan runtime (the driver kept loaded since) gets WrongProcessError
    for a Vulkan runtime of its own where the driver is a GPU's (NVIDIA's hung there); on Mesa's CPU driver it
    works on. A CPU runtime works in it either way."""
    with Runtime(vulkan):
        pass
    software = capi.arch_status()[Arch.VULKAN].software
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            try:
                with Runtime(vulkan) as own:
                    said = "ran " + str(own.ndarray((2,)).to_numpy().shape)
            except WrongProcessError as e:
                said = "refused: " + str(e)
            with Runtime(Arch.X64) as own:
                said += " | x64 " + str(own.ndarray((2,)).to_numpy().shape)
            os.write(w, said.encode())
        finally:
            os._exit(0)
    os.close(w)
    deadline = time.monotonic() + 60
    while not os.waitpid(pid, os.WNOHANG)[0]:
        if time.monotonic() > deadline:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            pytest.fail("the forked child hung")
        time.sleep(0.01)
    said = os.read(r, 4096).decode()
    os.close(r)
    expected = "ran (2,)" if software else "refused: "
    assert said.startswith(expected) and said.endswith("x64 (2,)"), said



def test_extraction_folders_of_ended_processes_are_removed(modules, tmp_path):
    """An LLVM module loaded from a .tcm is extracted to a folder named for its process; one that ended without
    removing it (os._exit, a kill) has its folder removed by the next process's first extraction."""
    require_arch(Arch.X64)
    temp = tmp_path / "tmp"
    temp.mkdir()
    child = textwrap.dedent("""
        import os, sys
        from taichi_aot import Arch, Runtime
        rt = Runtime(Arch.X64)
        rt.load_module(sys.argv[1]).kernels["add"]
        print(os.getpid(), flush=True)
        if sys.argv[2] == "exit":
            os._exit(0)
        rt.close()
        """)
    env = {**os.environ, "TMPDIR": str(temp)}
    run = [sys.executable, "-c", child, modules.path(Arch.X64, tcm=True)]
    first = subprocess.run([*run, "exit"], capture_output=True, text=True, env=env, timeout=120)
    assert first.returncode == 0, first.stderr
    left = os.listdir(temp)
    assert [n for n in left if n.startswith(f"taichi_aot_module_{first.stdout.strip()}_")] == left and left
    (temp / "taichi_aot_module_1_of_pid_1").mkdir()  # a live process's (init's): kept
    second = subprocess.run([*run, "close"], capture_output=True, text=True, env=env, timeout=120)
    assert second.returncode == 0, second.stderr
    assert os.listdir(temp) == ["taichi_aot_module_1_of_pid_1"]


def test_load_close_cycles_leave_no_folder(modules, tmp_path, monkeypatch):
    require_arch(Arch.X64)
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    with Runtime(Arch.X64) as rt:
        for _ in range(50):
            mod = rt.load_module(modules.path(Arch.X64, tcm=True))
            mod.kernels["add"]
            mod.close()
        assert len(os.listdir(tmp_path)) <= 1  # the module the runtime keeps loaded for a load of it again
    assert os.listdir(tmp_path) == []


def _closed_under_a_replay(arch, modules):
    """A module and an array closed by another thread while this one replays launches of them: each launch comes
    wholly before or after the close (the runtime's calls held around both), the replay ends with ClosedError, and
    the runtime keeps working; only the runtime's own close is refused there."""
    import threading

    import numpy as np

    from taichi_aot import ClosedError

    with Runtime(arch) as rt:
        mod = rt.load_module(modules.path(arch))
        x, y = rt.ndarray((64,), np.float32), rt.ndarray_from_numpy(np.ones(64, np.float32))
        with rt.record() as seq:
            mod.kernels["add"](x, y, 1.0)
        seq.replay(3)
        errors: list[str] = []
        started = threading.Event()
        closer = threading.Thread(target=_close_each, args=((mod, x, rt), errors, started))
        closer.start()
        with pytest.raises(ClosedError):
            started.set()
            for _ in range(10**6):  # until the close lands between two launches
                seq.replay(50)
        closer.join()
        assert len(errors) == 1 and "Runtime.close()" in errors[0], errors
        assert mod.closed and x.closed and not rt.closed
        fresh = rt.load_module(modules.path(arch))
        z = rt.ndarray_from_numpy(np.zeros(4, np.float32))
        fresh.kernels["add"](z, rt.ndarray_from_numpy(np.ones(4, np.float32)), 2.0)
        np.testing.assert_array_equal(z.to_numpy(), np.full(4, 2, np.float32))


def _close_each(objects, errors: list[str], start=None) -> None:
    """Close each of ``objects`` (once ``start`` is set, where given), the WrongThreadError messages in ``errors``."""
    from taichi_aot import WrongThreadError

    if start is not None:
        start.wait()
    for obj in objects:
        try:
            obj.close()
        except WrongThreadError as e:
            errors.append(str(e))


def test_a_runtime_destroyed_with_memory_still_mapped(arch):
    """libtaichi 1.7.4 aborts the process destroying a mapped allocation: the flat API unmaps it first."""
    rt = capi.create_runtime(arch)
    mem = capi.allocate_memory(rt, {"size": 64, "usage": 1}, host_read=1, host_write=1)
    capi.map_memory(rt, mem)
    capi.destroy_runtime(rt)
    assert not capi.handles.is_live("runtime", rt) and not capi.handles.is_live("memory", rt, mem)
