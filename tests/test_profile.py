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
    _waits_on_their_own_track(trace)
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
    _dispatch_rows_under_their_graph(prof)


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
            threads = [threading.Thread(target=work, args=pair, name=f"launcher-{i}") for i, pair in enumerate(pairs)]
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
        _tracks_named_by_threads(prof.trace(), {"launcher-0", "launcher-1"})


def test_the_states_are_the_c_lists():
    """A record's states come from profile.h's one list (taichi_aot_profile_state), each value and name once; each
    state says how its record was timed, as Launch.timed documents."""
    from taichi_aot import profile
    from taichi_aot._native import ffi, lib

    assert len(profile.STATES) == len(set(profile.STATES.values())) == lib.TAICHI_AOT_PROFILE_STATES
    assert lib.taichi_aot_profile_state(lib.TAICHI_AOT_PROFILE_STATES, ffi.new("int32_t *")) == ffi.NULL
    assert set(profile._TIMED) == set(profile.STATES.values())
    assert set(profile._TIMED.values()) == {"device", "call", "enqueue", "wait", "copy"}
    assert profile._TIMED[profile._DEVICE] == "device"
    assert sorted(profile._HOST_TIMED) == ["copy", "wait"]


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


def _with_ptx(cuda_modules, tmp_path_factory) -> str:
    """The test kernels' CUDA module with its PTX added, for the own launcher (skipped where there is no CUDA)."""
    from conftest import with_ptx_copies
    from taichi_aot import capi

    status = capi.arch_status()[Arch.CUDA]
    if not status.available:
        pytest.skip(f"no CUDA here: {status.reason}")
    require_extra("llvmlite", "ptx")
    return with_ptx_copies(cuda_modules, ["tests"], tmp_path_factory)["tests"]


def test_cuda_launches_are_timed_by_events_on_the_own_launcher(cuda_modules, tmp_path_factory):
    path = _with_ptx(cuda_modules, tmp_path_factory)
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


def test_cuda_device_times_keep_the_hosts_spacing_across_renewed_references(cuda_modules, tmp_path_factory):
    """A profile of the own CUDA launcher over more than a second: its reference event is renewed without a wait
    (backends/cudaprofile.c), each renewal placed on the host's clock from the one before. Launches made after idle
    pauses start on the device as far apart as their calls were made (the GPU idle, each starts right after its
    call), with another thread reading the profile while this one launches; every launch is timed on the device."""
    path = _with_ptx(cuda_modules, tmp_path_factory)
    with Runtime(Arch.CUDA) as rt:
        add = rt.load_module(path).kernels["add"]
        x, y = _arrays(rt)
        read: list[int] = []
        with rt.profile() as prof:
            for _ in range(3):
                reader = threading.Thread(target=lambda: read.append(len(prof.kernels())))
                reader.start()  # the profile read (its later times resolved) while this thread launches
                for _ in range(5):
                    add(x, y, 0.5)
                reader.join()
                rt.wait()
                time.sleep(0.6)  # idle: by the third round the reference is renewed
        events = sorted((e for e in prof.launches if e.name == "add"), key=lambda e: e.host_start)
    assert len(events) == 15 and all(e.timed == "device" for e in events), events
    assert all(0 < e.end - e.start < 0.1 for e in events), events
    for a, b in zip(events, events[1:]):
        assert b.start >= a.start, (a, b)  # one stream: in the order they were made
        if b.host_start - a.host_start > 0.5:  # across a pause: as far apart as their calls, within 5 ms
            assert abs((b.start - a.start) - (b.host_start - a.host_start)) < 0.005, (a, b)


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


# -- the profile's rows, files and command line as users meet them ----------------------------------------------------


def _profile_cli(*args, **kw):
    """``python -m taichi_aot profile ARGS``, its output captured."""
    return subprocess.run([sys.executable, "-m", "taichi_aot", "profile", *map(str, args)], capture_output=True,
                          text=True, timeout=300, **kw)


_ARGV_SCRIPT = "import sys\nprint('argv', sys.argv[1:])\n"


def test_profile_options_after_the_script_are_refused_and_a_dash_dash_hands_them_to_it(tmp_path):
    """Profile's options come before the script; after it they would be the script's: refused before it runs, with
    the right order shown; a ``--`` before the script hands them to it, and the script's arguments reach it as
    given (a ``--`` among them too)."""
    script = tmp_path / "takes_args.py"
    script.write_text(_ARGV_SCRIPT)
    trace = tmp_path / "t.json"
    for slip in (["--trace", trace], [f"--plot={tmp_path / 'k.png'}"]):
        proc = _profile_cli(script, "a", *slip)
        option = str(slip[0]).split("=")[0]
        assert proc.returncode == 2 and "argv" not in proc.stdout, proc.stderr
        assert f"{option} after the script" in proc.stderr and f"profile {option} FILE {script}" in proc.stderr
        assert f"profile -- {script}" in proc.stderr
    assert not trace.exists() and not (tmp_path / "k.png").exists()
    proc = _profile_cli("--trace", trace, "--", script, "--trace", "x")  # the script's own --trace
    assert proc.returncode == 0 and "argv ['--trace', 'x']" in proc.stdout, proc.stderr
    assert trace.exists()
    proc = _profile_cli(script, "--", "b")
    assert "argv ['--', 'b']" in proc.stdout, proc.stderr  # as python SCRIPT -- b gives it


_RAISING_SCRIPT = """
import sys
import numpy as np
from taichi_aot import Runtime

def fail():
    raise ValueError("the script's own error")

with Runtime(sys.argv[1]) as rt:
    add = rt.load_module(sys.argv[2]).kernels["add"]
    x, y = rt.ndarray_from_numpy(np.zeros(64, np.float32)), rt.ndarray_from_numpy(np.ones(64, np.float32))
    for _ in range(7):
        add(x, y, 0.5)
    rt.wait()
    fail()
"""


def test_a_raising_script_keeps_its_profile_and_its_traceback_starts_at_its_own_frame(modules, tmp_path):
    script = tmp_path / "raises.py"
    script.write_text(_RAISING_SCRIPT)
    proc = _profile_cli(script, "x64", modules.path(Arch.X64))
    assert proc.returncode == 1, proc.stderr
    tb = proc.stderr[proc.stderr.index("Traceback (most recent call last):"):]
    frames = [ln.strip() for ln in tb.splitlines() if ln.strip().startswith("File ")]
    assert frames and all(f.startswith(f'File "{script}"') for f in frames), tb
    assert "ValueError: the script's own error" in tb
    (line,) = [ln for ln in proc.stderr.splitlines() if ln.startswith("add ")]
    assert line.split()[1:3] == ["x64:0", "7"], proc.stderr


def _dispatch_rows_under_their_graph(prof):
    """``add_twice``'s dispatch rows are named by the kernel (``add``, not Taichi's copy of it for the graph), listed
    right under the graph's row, indented in the table, and counted once in its total (in the graph's row)."""
    rows = prof.kernels()
    names = [r.name for r in rows]
    at = names.index("add_twice")
    assert names[at + 1:at + 3] == ["add_twice/add#1", "add_twice/add#2"], names  # the kernel's name, not Taichi's
    assert [r.graph for r in rows[at:at + 3]] == [None, "add_twice", "add_twice"]
    top = [r for r in rows if r.graph is None]
    (total,) = [ln for ln in str(prof).splitlines() if ln.startswith("total")]
    assert total.split()[1:3] == [str(sum(r.launches for r in top)), f"{sum(r.total for r in top) * 1e3:.3f}"]
    lines = str(prof).splitlines()
    assert lines[2 + at + 1].startswith("  add_twice/add#1"), lines  # indented under its graph


def test_save_and_plot_refuse_what_they_cannot_write_and_an_empty_profile_draws_nothing(modules, tmp_path):
    require_extra("matplotlib", "plot")
    with Runtime(Arch.X64) as rt:
        empty, prof = rt.profile(), rt.profile()
        with empty:
            pass
        with prof:
            rt.load_module(modules.path(Arch.X64)).kernels["add"](*_arrays(rt), 1.0)
    afile = tmp_path / "a.json"
    afile.write_text("{}")
    for bad, why in ((tmp_path, "is a folder"), (afile / "t", "is a file, not a folder"),
                     (tmp_path / "no" / "t", "does not exist")):
        for write in (prof.save, prof.plot):
            with pytest.raises(InvalidArgumentError, match=why) as e:
                write(bad)
            assert str(bad) in str(e.value)
    with pytest.raises(InvalidArgumentError, match=r"\.xyz"):
        prof.plot(tmp_path / "k.xyz")
    assert prof.plot(tmp_path / "kplot") == str(tmp_path / "kplot.png")  # the path reported is the path written
    assert (tmp_path / "kplot.png").read_bytes()[:4] == b"\x89PNG" and not (tmp_path / "kplot").exists()
    with pytest.raises(InvalidStateError, match="no launch was recorded"):
        empty.plot(tmp_path / "empty.png")
    assert not (tmp_path / "empty.png").exists()


def test_the_profile_command_checks_plot_before_the_script_runs_and_reports_the_file_written(modules, tmp_path):
    require_extra("matplotlib", "plot")
    script = tmp_path / "user_script.py"
    script.write_text(_SCRIPT)
    run_args = [script, "x64", modules.path(Arch.X64)]
    no_matplotlib = subprocess.run(  # matplotlib not importable (None in sys.modules): refused before the script
        [sys.executable, "-c", "import sys; sys.modules['matplotlib'] = None; from taichi_aot.__main__ import main; "
         "sys.exit(main(sys.argv[1:]))", "profile", "--plot", str(tmp_path / "k.png"), *map(str, run_args)],
        capture_output=True, text=True, timeout=300)
    assert no_matplotlib.returncode == 2 and "needs matplotlib" in no_matplotlib.stderr, no_matplotlib.stderr
    assert "x0" not in no_matplotlib.stdout
    proc = _profile_cli("--plot", tmp_path / "kplot", *run_args)
    assert proc.returncode == 3 and f"plot: {tmp_path / 'kplot.png'}\n" in proc.stderr, proc.stderr
    assert (tmp_path / "kplot.png").exists()
    folder = _profile_cli("--plot", tmp_path, *run_args)
    assert folder.returncode == 2 and "is a folder" in folder.stderr and "x0" not in folder.stdout
    empty = tmp_path / "no_launch.py"
    empty.write_text("print('nothing launched')\n")
    proc = _profile_cli("--plot", tmp_path / "e.png", empty)
    assert proc.returncode == 0 and "no launch was profiled, nothing to draw" in proc.stderr, proc.stderr
    assert not (tmp_path / "e.png").exists()


def _track_names(trace):
    """Each track's name in a Chrome trace (its ``thread_name`` metadata event), by (process, track)."""
    return {(e["pid"], e["tid"]): e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "thread_name"}


def _tracks_named_by_threads(trace, threads):
    """The launches of ``add`` are on tracks named by the launching threads' names, not their ids."""
    names = _track_names(trace)
    assert {names[(e["pid"], e["tid"])] for e in trace["traceEvents"] if e["name"] == "add"} == threads, names


def _waits_on_their_own_track(trace):
    """The host's waits are on a track of their own (``<thread>: waits and copies``), never on a launches' track:
    those are the device's times, which the waits overlap."""
    names = _track_names(trace)
    waits = {(e["pid"], e["tid"]) for e in trace["traceEvents"] if e["ph"] == "X" and e["name"] == "wait"}
    launches = {(e["pid"], e["tid"]) for e in trace["traceEvents"] if e["ph"] == "X" and e["name"] == "add"}
    assert waits and not waits & launches
    assert {names[w] for w in waits} == {"MainThread: waits and copies"}, names


def test_a_pools_profile_saves_and_plots_and_the_profile_command_shows_its_workers(modules, tmp_path):
    import pool_tasks

    from taichi_aot.pool import Pool

    require_extra("matplotlib", "plot")

    with Pool(modules.path(Arch.X64), arch="x64", workers=2) as pool, pool.profile() as prof:
        slots = pool.map(pool_tasks.axpy_times, [3, 3])
    with open(prof.save(tmp_path / "pool.json"), encoding="utf-8") as f:
        events = json.load(f)["traceEvents"]
    processes = {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}
    adds = [e for e in events if e["ph"] == "X" and e["name"] == "add"]
    assert len(adds) == 6 and {processes[e["pid"]] for e in adds} == {f"worker {s} x64:0" for s in slots}
    with pytest.raises(InvalidArgumentError, match="is a folder"):
        prof.save(tmp_path)
    assert prof.plot(tmp_path / "pool.png") == str(tmp_path / "pool.png")
    script = tmp_path / "pool_script.py"
    script.write_text("import sys\nimport pool_tasks\nfrom taichi_aot.pool import Pool\n"
                      "if __name__ == '__main__':\n"
                      "    with Pool(sys.argv[1], arch='x64', workers=1) as pool:\n"
                      "        print(pool.map(pool_tasks.axpy_times, [4, 4]))\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([os.path.dirname(pool_tasks.__file__),
                                                        os.environ.get("PYTHONPATH", "")])}
    proc = _profile_cli("--trace", tmp_path / "cli.json", script, modules.path(Arch.X64), env=env)
    assert proc.returncode == 0, proc.stderr
    workers = proc.stderr[proc.stderr.index("-- the workers of its pool"):]
    (line,) = [ln for ln in workers.splitlines() if ln.startswith("add ")]
    assert line.split()[1:4] == ["x64:0", "0", "8"], proc.stderr
    traced = [e for e in json.loads((tmp_path / "cli.json").read_text())["traceEvents"] if e.get("name") == "add"]
    assert len(traced) == 8
