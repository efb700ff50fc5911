"""rt.profile(): each launch's device time (Vulkan timestamps in the own launch's batches, a CPU runtime's call), read
as rows, a table, a Chrome trace and a chart; python -m taichi_aot profile SCRIPT.py; nothing recorded outside."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from conftest import require_extra
from taichi_aot import Arch, Runtime
from taichi_aot.errors import InvalidArgumentError, InvalidStateError
from taichi_aot.profile import Profile

N = 1 << 16


def _arrays(rt):
    return rt.ndarray_from_numpy(np.zeros(N, np.float32)), rt.ndarray_from_numpy(np.arange(N, dtype=np.float32))


def _twenty(rt, add, x, y):
    """20 launches of ``add`` inside a profile (and a wait): the profile, the wall seconds, the kernel's row."""
    t0 = time.perf_counter()
    with rt.profile() as prof:
        for _ in range(20):
            add(x, y, 0.5)
        rt.wait()
    wall = time.perf_counter() - t0
    (row,) = [r for r in prof.kernels() if r.name == "add"]
    assert row.launches == 20 and 0 < row.min <= row.mean <= row.max and row.total <= wall, (row, wall)
    return prof, row


def test_twenty_launches_give_a_row_and_a_trace_of_twenty(env, launcher, modules, arch, tmp_path):
    rt, _ = env
    mod = rt.load_module(modules.path(arch), launcher=launcher)
    add = mod.kernels["add"]
    x, y = _arrays(rt)
    add(x, y, 1.0)
    rt.wait()
    prof, row = _twenty(rt, add, x, y)
    np.testing.assert_array_equal(x.to_numpy(), np.arange(N, dtype=np.float32) * 11.0)  # the kernel's own results
    own_vulkan = arch == Arch.VULKAN and launcher == "auto"
    assert row.timed == ("call" if arch == Arch.X64 else "device" if own_vulkan else "enqueue"), row
    assert row.device == f"{arch.name.lower()}:0"
    with open(prof.save(tmp_path / "trace.json"), encoding="utf-8") as f:
        trace = json.load(f)
    named = [e for e in trace["traceEvents"] if e["ph"] == "X" and e["name"] == "add"]
    assert len(named) == 20 and all(e["dur"] > 0 for e in named)
    assert any(e["name"] == "wait" for e in trace["traceEvents"])  # the host's wait, an event of its own
    assert "add" in str(prof) and "launches" in str(prof)
    for _ in range(3):  # the profile closed: nothing more is recorded
        add(x, y, 0.5)
    rt.wait()
    assert sum(r.launches for r in prof.kernels()) == 20


def test_a_graph_is_a_row_spanning_its_dispatches_and_each_dispatch_one(vulkan, modules):
    with Runtime(vulkan) as rt:
        mod = rt.load_module(modules.path(vulkan))
        x, y = _arrays(rt)
        with rt.profile() as prof:
            for _ in range(5):
                mod.graphs["add_twice"](x=x, y=y, a=1.0)
            mod.kernels["add"](x, y, 1.0)
        np.testing.assert_array_equal(x.to_numpy(), np.arange(N, dtype=np.float32) * 11.0)
        assert {r.name: r for r in prof.kernels()}["add"].launches == 1
        _graph_rows(prof, 5)


def _graph_rows(prof, launches):
    """``add_twice``, launched ``launches`` times: a row timed on the device, and each dispatch a row of its own,
    named by the graph and the kernel, numbered where a kernel repeats; the graph's record spans them."""
    rows = {r.name: r for r in prof.kernels()}
    assert rows["add_twice"].launches == launches and rows["add_twice"].timed == "device"
    assert rows["add_twice"].min > 0
    parts = sorted(n for n in rows if n.startswith("add_twice/"))
    assert len(parts) == 2 and parts[0].endswith("#1") and parts[1].endswith("#2")
    for n in parts:
        assert rows[n].launches == launches and rows[n].timed == "device" and rows[n].min > 0
    graph_events = [e for e in prof.launches if e.name == "add_twice"]
    for e in prof.launches:
        if e.name in parts:
            assert any(g.start <= e.start and e.end <= g.end for g in graph_events), e


def test_host_arrays_copied_for_a_launch_are_counted_and_traced(vulkan, modules, tmp_path):
    """Numpy arrays passed to a Vulkan kernel travel as copies: the kernel's row counts their bytes (copied in where
    it reads one, back where it writes one), the table shows them, and the trace has each launch's copies as an
    event of their own; an ndarray's launch copies nothing."""
    with Runtime(vulkan) as rt:
        add = rt.load_module(modules.path(vulkan)).kernels["add"]
        x, y = np.zeros(N, np.float32), np.ones(N, np.float32)
        nx, ny = _arrays(rt)
        with rt.profile() as prof:
            for _ in range(3):
                add(x, y, 1.0)  # x read and written: in and back; y read: in
            add(nx, ny, 1.0)
        np.testing.assert_array_equal(x, np.full(N, 3, np.float32))
        (row,) = prof.kernels()
        assert row.launches == 4 and row.bytes == 3 * (2 * x.nbytes + y.nbytes)
        assert "copied MB" in str(prof)
        with open(prof.save(tmp_path / "t.json"), encoding="utf-8") as f:
            copies = [e for e in json.load(f)["traceEvents"] if e.get("cat") == "copy"]
        assert [e["name"] for e in copies] == ["copies: add"] * 3 and {e["args"]["bytes"] for e in copies} == {
            2 * x.nbytes + y.nbytes}


def test_launches_from_other_threads_are_profiled_on_their_tracks(vulkan, modules):
    with Runtime(vulkan) as rt:
        mod = rt.load_module(modules.path(vulkan))
        add = mod.kernels["add"]
        pairs = [_arrays(rt) for _ in range(2)]

        both = threading.Barrier(2)  # both alive at once: a thread's id is not reused by the other

        def work(x, y):
            both.wait()
            for _ in range(10):
                add(x, y, 1.0)
            both.wait()

        with rt.profile() as prof:
            threads = [threading.Thread(target=work, args=pair) for pair in pairs]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        for x, _ in pairs:
            np.testing.assert_array_equal(x.to_numpy(), np.arange(N, dtype=np.float32) * 10.0)
        (row,) = [r for r in prof.kernels() if r.name == "add"]
        assert row.launches == 20 and row.timed == "device"
        tracks = {e["tid"] for e in prof.trace()["traceEvents"] if e.get("name") == "add"}
        assert len(tracks) == 2


def test_only_the_profiled_runtime_is_recorded_and_bad_use_is_refused(modules):
    with Runtime(Arch.X64) as a, Runtime(Arch.X64) as b:
        add_a = a.load_module(modules.path(Arch.X64)).kernels["add"]
        add_b = b.load_module(modules.path(Arch.X64)).kernels["add"]
        xa, ya = _arrays(a)
        xb, yb = _arrays(b)
        with a.profile() as prof:
            add_a(xa, ya, 1.0)
            add_b(xb, yb, 1.0)
            with pytest.raises(InvalidStateError, match="profiled already"):
                a.profile().open()
        assert [(r.name, r.launches) for r in prof.kernels()] == [("add", 1)]
        with pytest.raises(InvalidArgumentError):
            Profile()
    with pytest.raises(InvalidStateError):  # closed
        Profile(a).open()


def test_a_runtime_closed_inside_its_profile_keeps_its_rows(vulkan, modules):
    rt = Runtime(vulkan)
    add = rt.load_module(modules.path(vulkan)).kernels["add"]
    x, y = _arrays(rt)
    prof = rt.profile().open()
    for _ in range(4):
        add(x, y, 1.0)
    rt.close()  # its work waited for and its records taken first: its device times read
    (row,) = prof.kernels()
    assert row.launches == 4 and row.min > 0 and row.timed == "device", row
    prof.close()


def test_plot(modules, tmp_path):
    require_extra("matplotlib", "plot")
    with Runtime(Arch.X64) as rt:
        add = rt.load_module(modules.path(Arch.X64)).kernels["add"]
        x, y = _arrays(rt)
        with rt.profile() as prof:
            add(x, y, 1.0)
    path = prof.plot(tmp_path / "kernels.png")
    with open(path, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"


_SCRIPT = """
import sys
import numpy as np
from taichi_aot import Runtime
with Runtime(sys.argv[1]) as rt:
    add = rt.load_module(sys.argv[2]).kernels["add"]
    x, y = rt.ndarray_from_numpy(np.zeros(64, np.float32)), rt.ndarray_from_numpy(np.ones(64, np.float32))
    for _ in range(20):
        add(x, y, 0.5)
    print("x0", x.to_numpy()[0])
sys.exit(3)
"""


def test_the_profile_command_runs_a_script_and_prints_its_kernels(vulkan, modules, tmp_path):
    script = tmp_path / "user_script.py"
    script.write_text(_SCRIPT)
    trace = tmp_path / "t.json"
    proc = subprocess.run([sys.executable, "-m", "taichi_aot", "profile", "--trace", str(trace), str(script),
                           "vulkan", modules.path(vulkan)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 3, proc.stderr[-2000:]  # the script's own status
    assert "x0 10.0" in proc.stdout
    (line,) = [ln for ln in proc.stderr.splitlines() if ln.startswith("add ")]
    assert line.split()[1:3] == ["vulkan:0", "20"] and line.split()[-1] == "device", proc.stderr
    events = [e for e in json.loads(trace.read_text())["traceEvents"] if e.get("name") == "add"]
    assert len(events) == 20
    missing = subprocess.run([sys.executable, "-m", "taichi_aot", "profile", str(tmp_path / "none.py")],
                             capture_output=True, text=True, timeout=120)
    assert missing.returncode == 2 and "no such script" in missing.stderr
    nowhere = subprocess.run([sys.executable, "-m", "taichi_aot", "profile", "--trace",
                              str(tmp_path / "no" / "such" / "t.json"), str(script)], capture_output=True, text=True,
                             timeout=120)  # refused before the script runs
    assert nowhere.returncode == 2 and "--trace" in nowhere.stderr and "x0" not in nowhere.stdout
    assert not os.path.exists(tmp_path / "none.py")


def test_cuda_launches_are_timed_by_events_on_the_own_launcher(cuda_modules, tmp_path_factory):
    from conftest import with_ptx_copies
    from taichi_aot import capi

    status = capi.arch_status()[Arch.CUDA]
    if not status.available:
        pytest.skip(f"no CUDA here: {status.reason}")
    require_extra("llvmlite", "ptx")
    path = with_ptx_copies(cuda_modules, ["tests"], tmp_path_factory)["tests"]
    with Runtime(Arch.CUDA) as rt:
        for launcher, timed in (("auto", "device"), ("taichi", "enqueue")):
            add = rt.load_module(path, launcher=launcher).kernels["add"]
            x, y = _arrays(rt)
            _, row = _twenty(rt, add, x, y)
            np.testing.assert_array_equal(x.to_numpy(), np.arange(N, dtype=np.float32) * 10.0)
            assert row.timed == timed and row.device == "cuda:0", row
        mod = rt.load_module(path)  # a graph of the own launcher: a row, and one for each dispatch (as on Vulkan)
        x, y = _arrays(rt)
        with rt.profile() as prof:
            for _ in range(5):
                mod.graphs["add_twice"](x=x, y=y, a=1.0)
        np.testing.assert_array_equal(x.to_numpy(), np.arange(N, dtype=np.float32) * 10.0)
        _graph_rows(prof, 5)


@pytest.mark.parametrize("framework", ["torch", "jax"])
def test_a_kernel_called_as_an_op_is_profiled_as_itself(framework, modules):
    """The op's launches (torch's eager call and its C kernel, XLA's handler) are the runtime's: a profile of it
    records each under the kernel's name."""
    require_extra(framework, "torch" if framework == "torch" else "jax")
    with Runtime(Arch.X64) as rt:
        mod = rt.load_module(modules.path(Arch.X64))
        y = np.arange(16, dtype=np.float32)
        if framework == "torch":
            import torch

            import taichi_aot.torch as tt

            add = tt.op(mod.kernels["add"], {0: 1})
            with rt.profile() as prof:
                outs = [add(torch.from_numpy(y), 2.0) for _ in range(5)]
        else:
            import jax
            import jax.numpy as jnp

            import taichi_aot.jax as tj

            op = tj.op(mod.kernels["add"], {0: 1})
            step = jax.jit(lambda v: op(v, 2.0))
            # an x64 op: its arrays on the CPU, for this test only (a GPU host's default device is its GPU)
            with jax.default_device(jax.devices("cpu")[0]), rt.profile() as prof:
                outs = [step(jnp.asarray(y)) for _ in range(5)]
                jax.block_until_ready(outs)
        for out in outs:
            np.testing.assert_array_equal(np.asarray(out), 2 * y)
        (row,) = [r for r in prof.kernels() if r.name == "add"]
        assert row.launches == 5 and row.timed == "call" and row.min > 0, row
