"""Pre-bound launches and recorded sequences: same results as dynamic calls, same safety."""

from __future__ import annotations

import _thread
import os
import signal
import threading
import time

import numpy as np
import pytest

from conftest import raised_in_thread
from taichi_aot import (
    Arch,
    BoundLaunch,
    ClosedError,
    InvalidArgumentError,
    LaunchSequence,
    NotSupportedError,
    Runtime,
    WrongThreadError,
)


def test_bound_launch_matches_dynamic_call(env):
    rt, mod = env
    add = mod.kernels["add"]
    x = rt.ndarray_from_numpy(np.zeros(8, np.float32))
    y = rt.ndarray_from_numpy(np.arange(8, dtype=np.float32))
    bound = add.bind(x, y, 2.0)
    assert isinstance(bound, BoundLaunch) and bound.entry is add
    bound()
    run = bound.launch
    run()
    rt.wait()
    assert np.array_equal(x.to_numpy(), 4 * np.arange(8, dtype=np.float32))
    bound.set(2, -1.0)  # by index
    bound()
    rt.wait()
    assert np.array_equal(x.to_numpy(), 3 * np.arange(8, dtype=np.float32))
    z = rt.ndarray_from_numpy(np.ones(8, np.float32))
    bound.set(1, z)
    bound()
    rt.wait()
    assert np.array_equal(x.to_numpy(), 3 * np.arange(8, dtype=np.float32) - 1)
    with pytest.raises(TypeError, match="expected f32 scalar"):
        bound.set(2, x)
    with pytest.raises(ValueError):
        bound.set(1, rt.ndarray((8,), np.int32))
    with pytest.raises(TypeError, match="no argument"):
        bound.set(7, 1.0)
    with pytest.raises(TypeError, match="takes 3"):
        add.bind(x, y)


def test_bound_launch_refuses_closed_objects(env):
    rt, mod = env
    add = mod.kernels["add"]
    x, y = rt.ndarray((4,), np.float32), rt.ndarray((4,), np.float32)
    bound = add.bind(x, y, 1.0)
    run = bound.launch
    bound()
    y.close()
    with pytest.raises(ClosedError):
        bound()
    with pytest.raises(ClosedError):
        run()
    x2, y2 = rt.ndarray((4,), np.float32), rt.ndarray((4,), np.float32)
    other = add.bind(x2, y2, 1.0)
    other()  # unrelated objects closing does not stop it
    mod.close()
    with pytest.raises(ClosedError):
        other()
    with pytest.raises(ClosedError):
        add(x2, y2, 1.0)


def _wrong_thread_errors(*calls) -> int:
    """How many of ``calls``, made from another thread, raise WrongThreadError."""
    return len(raised_in_thread(WrongThreadError, *calls))


def test_dynamic_call_after_close_and_from_another_thread(env):
    rt, mod = env
    add = mod.kernels["add"]
    x, y = rt.ndarray((4,), np.float32), rt.ndarray((4,), np.float32)
    add(x, y, 1.0)
    bound = add.bind(x, y, 1.0)
    # refused on libtaichi's runtime; made on a Vulkan runtime (its calls one at a time: any thread)
    errors = _wrong_thread_errors(lambda: add(x, y, 1.0), bound, bound.launch)
    assert errors == (0 if rt.device.traits.any_thread else 3)
    add(x, y, 1.0)  # still fine on the owning thread
    x.close()
    with pytest.raises(ClosedError):
        add(x, y, 1.0)


def test_recorded_sequence_replays_in_order(env):
    rt, mod = env
    add, graph = mod.kernels["add"], mod.graphs["add_twice"]
    x = rt.ndarray_from_numpy(np.zeros(4, np.float32))
    y = rt.ndarray_from_numpy(np.ones(4, np.float32))
    with rt.record() as seq:
        add(x, y, 1.0)
        graph(x=x, y=y, a=10.0)
    assert isinstance(seq, LaunchSequence) and len(seq) == 2
    rt.wait()
    assert np.array_equal(x.to_numpy(), np.zeros(4))  # recording runs nothing
    seq.replay()
    seq.replay(3)
    rt.wait()
    assert np.array_equal(x.to_numpy(), np.full(4, 4 * 21.0))
    seq.replay(0)
    with pytest.raises(TypeError):
        seq.replay(-1)
    for times in (2**64, 2**100):  # more than the C replay counts: refused, nothing run
        with pytest.raises(InvalidArgumentError, match="below 2\\*\\*64"):
            seq.replay(times)
    rt.wait()
    assert np.array_equal(x.to_numpy(), np.full(4, 4 * 21.0))
    with pytest.raises(TypeError), rt.record():
        add(x, 1.0)  # checked when recorded
    manual = rt.sequence()
    manual.append(add.bind(x, y, -84.0))
    manual.replay()
    rt.wait()
    assert np.array_equal(x.to_numpy(), np.zeros(4))
    with pytest.raises(TypeError):
        manual.append(lambda: None)
    y.close()
    with pytest.raises(ClosedError):
        seq.replay()


def test_sequence_of_another_runtime_is_refused(arch, modules):
    with Runtime(arch) as a, Runtime(arch) as b:
        ka = a.load_module(modules.path(arch)).kernels["add"]
        x, y = a.ndarray((4,), np.float32), a.ndarray((4,), np.float32)
        with pytest.raises(ValueError, match="another runtime"):
            b.sequence().append(ka.bind(x, y, 1.0))
        kb = b.load_module(modules.path(arch)).kernels["add"]
        with pytest.raises(ValueError, match="another runtime"):
            kb(x, y, 1.0)


def test_graph_bind(env):
    rt, mod = env
    graph = mod.graphs["add_twice"]
    x = rt.ndarray_from_numpy(np.zeros(4, np.float32))
    y = rt.ndarray_from_numpy(np.ones(4, np.float32))
    bound = graph.bind(x=x, y=y, a=0.5)
    bound()
    bound.set("a", 2.0)
    bound.launch()
    rt.wait()
    assert np.array_equal(x.to_numpy(), np.full(4, 5.0))
    with pytest.raises(KeyError):
        graph.bind(x=x, y=y)
    with pytest.raises(TypeError):
        bound.set("b", 1.0)


def test_to_numpy_into_an_existing_array(env):
    rt, _ = env
    nd = rt.ndarray_from_numpy(np.arange(6, dtype=np.float32).reshape(2, 3), host_access="readwrite")
    out = np.empty((2, 3), np.float32)
    assert nd.to_numpy(out=out) is out and np.array_equal(out, np.arange(6).reshape(2, 3))
    for bad, exc in ((np.empty((3, 2), np.float32), ValueError), (np.empty((2, 3), np.float64), ValueError),
                     (np.empty((3, 2), np.float32).T, ValueError), ([0] * 6, TypeError)):
        with pytest.raises(exc):
            nd.to_numpy(out=bad)
    with nd.map() as view:  # a live view: transfers go through its mapping
        nd.from_numpy(np.ones((2, 3)))
        assert np.array_equal(view.reshape(2, 3), np.ones((2, 3)))
        assert np.array_equal(nd.to_numpy(), np.ones((2, 3)))


def test_another_thread_never_writes_the_shared_arguments(env):
    # A call from a foreign thread is refused before it packs anything, or, on a runtime any thread may use (Vulkan),
    # packs into a buffer of its own: the owner's arguments stay as they were (the GIL is released during launches,
    # so a write would tear them).
    rt, mod = env
    refusals = 0 if rt.device.traits.any_thread else 2
    add, graph = mod.kernels["add"], mod.graphs["add_twice"]
    x, y = rt.ndarray_from_numpy(np.zeros(64, np.float32)), rt.ndarray_from_numpy(np.ones(64, np.float32))
    other_x, other_y = rt.ndarray((64,), np.float32), rt.ndarray((64,), np.float32)
    add(x, y, 1.0)
    graph(x=x, y=y, a=1.0)
    packed = [bytes(add._callplan.slots[0].buf), bytes(graph._callplan.slots[0].buf)]
    intruders = (lambda: add(other_x, other_y, 1000.0), lambda: graph(x=other_x, y=other_y, a=1000.0))
    assert _wrong_thread_errors(*intruders) == refusals
    assert [bytes(add._callplan.slots[0].buf), bytes(graph._callplan.slots[0].buf)] == packed

    # and while the owner launches in a loop, an intruder hammering the same kernel changes nothing
    launches, stop = 400, threading.Event()
    refused = []

    def intruder():
        while not stop.is_set():
            for call in (lambda: add(other_x, other_y, 1000.0), lambda: graph(x=other_x, y=other_y, a=1000.0)):
                try:
                    call()
                except WrongThreadError:
                    refused.append(1)

    t = threading.Thread(target=intruder)
    t.start()
    try:
        for _ in range(launches):
            add(x, y, 1.0)
            graph(x=x, y=y, a=1.0)
    finally:
        stop.set()
        t.join()
    rt.wait()
    assert bool(refused) == bool(refusals)
    assert np.array_equal(x.to_numpy(), np.full(64, 3 + 3 * launches, np.float32))
    assert not other_x.to_numpy().any()


def test_ctrl_c_stops_a_long_replay(env):
    # a replay returns to Python between chunks, so KeyboardInterrupt stops it instead of waiting for
    # a billion launches
    rt, mod = env
    add = mod.kernels["add"]
    x, y = rt.ndarray_from_numpy(np.zeros(1, np.float32)), rt.ndarray_from_numpy(np.ones(1, np.float32))
    with rt.record() as seq:
        add(x, y, 1.0)
    timer = threading.Timer(0.3, _thread.interrupt_main)
    # Python's own handler, which interrupt_main needs: a pytest started with SIGINT ignored has none
    handler = signal.signal(signal.SIGINT, signal.default_int_handler)
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            seq.replay(10**9)
    finally:
        timer.cancel()
        signal.signal(signal.SIGINT, handler)
    started = time.monotonic()
    rt.wait()  # what the interrupted replay left queued drains at once (about _DRAIN_SECONDS of work)
    assert time.monotonic() - started < 2
    made = x.to_numpy()[0]
    assert 0 < made < 10**9
    seq.replay(2)  # the sequence still works
    rt.wait()
    assert x.to_numpy()[0] == made + 2


def test_graph_call_after_close_and_from_another_thread(env):
    rt, mod = env
    graph = mod.graphs["add_twice"]
    x, y = rt.ndarray((4,), np.float32), rt.ndarray((4,), np.float32)
    graph(x=x, y=y, a=1.0)
    assert _wrong_thread_errors(lambda: graph(x=x, y=y, a=1.0)) == (0 if rt.device.traits.any_thread else 1)
    graph(x=x, y=y, a=1.0)
    mod.close()
    with pytest.raises(ClosedError):
        graph(x=x, y=y, a=1.0)


def test_kernels_and_graphs_show_their_arguments(modules, vulkan):
    """inspect.signature (IDEs, help) and repr show what a kernel or graph takes, as the module records it."""
    import inspect
    import pydoc

    with Runtime(Arch.VULKAN) as rt:
        mod = rt.load_module(modules.path(Arch.VULKAN))
        add, graph = mod.kernels["add"], mod.graphs["add_twice"]
        sig = inspect.signature(add)
        assert list(sig.parameters) == ["x", "y", "a"]
        assert sig.parameters["y"].annotation == "f32 ndarray with ndim 1, read"
        assert sig.parameters["x"].kind is inspect.Parameter.POSITIONAL_OR_KEYWORD
        assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in inspect.signature(graph).parameters.values())
        assert repr(add).startswith("<Kernel add(x, y, a) of <AotModule")
        assert "add(x: 'f32 ndarray with ndim 1, read_write'" in pydoc.render_doc(add)
        add.declare_access(y="read_write")
        assert inspect.signature(add).parameters["y"].annotation.endswith("read_write")
    with Runtime(Arch.X64) as rt:  # Taichi's own LLVM module: no names, no access
        llvm = rt.load_module(modules.path(Arch.X64)).kernels["add"]
        params = inspect.signature(llvm).parameters
        assert list(params) == ["arg0", "arg1", "arg2"]
        assert params["arg0"].kind is inspect.Parameter.POSITIONAL_ONLY
        assert params["arg0"].annotation.endswith("access unknown")


def test_a_launch_of_an_unknown_kind_is_refused_on_every_way_in(env):
    """The dispatcher (``_csrc/launch.c``, through the kinds' table of ``_csrc/kinds.c``) refuses a kind it does not
    know, launching nothing, on every way in: a launch from Python, the flat API's, a replay and a launch made
    elsewhere; the bench's raw loop refuses it before timing; no C file compares kind numbers by their order, and the
    dispatcher names no kind and no backend's function."""
    import glob
    import re

    from taichi_aot._native import ffi, lib
    from taichi_aot.backends import launch_error
    from taichi_aot_bench.steps import c_loop

    rt, mod = env
    x = rt.ndarray_from_numpy(np.zeros(8, np.float32))
    y = rt.ndarray_from_numpy(np.ones(8, np.float32))
    bound = mod.kernels["add"].bind(x, y, 2.0)
    bound()  # the record is current (epoch, thread) and launches
    rt.wait()
    record = ffi.new("TaichiAotLaunch *", bound._c[0])
    record.kind = 99
    unknown = lib.TAICHI_AOT_UNKNOWN_KIND
    assert lib.taichi_aot_launch(record) == unknown and lib.taichi_aot_dispatch(record) == unknown
    done = ffi.new("uint64_t *")
    assert lib.taichi_aot_replay(record, 1, 1, done, lib.taichi_aot_epoch) == unknown and done[0] == 0
    where = ffi.new("TaichiAotElsewhere *")
    assert lib.taichi_aot_launch_elsewhere(record, where) == unknown
    assert "does not know" in str(launch_error(unknown, "launch of kernel 'add'"))
    record.kind = 4  # a number no longer used, a gap in the kinds' table
    assert lib.taichi_aot_dispatch(record) == unknown and lib.taichi_aot_launch_elsewhere(record, where) == unknown
    rt.wait()
    assert np.array_equal(x.to_numpy(), np.full(8, 2, np.float32))  # the one real launch, nothing more

    kind, bound._c.kind = bound._c.kind, 99  # the bench's loop over bound launches
    try:
        with pytest.raises(NotSupportedError, match="neither"):
            c_loop([bound])(1, 0)
    finally:
        bound._c.kind = kind
    assert np.array_equal(x.to_numpy(), np.full(8, 2, np.float32))

    here = os.path.dirname(os.path.abspath(__file__))
    for folder, switches in (("taichi_aot/_csrc", 0), ("taichi_aot_bench/_csrc", 1)):
        texts = []
        for path in glob.glob(os.path.join(here, "..", folder, "**", "*.c"), recursive=True):
            with open(path, encoding="utf-8") as f:
                texts.append(f.read())
        assert not any(re.search(r"kind\s*(>=|<=|<|>)\s*TAICHI_AOT_KIND", t) for t in texts), folder
        assert sum(len(re.findall(r"switch \(l->kind\)", t)) for t in texts) == switches, folder
    # every kind the header defines has its entries in kinds.c's table, and the bench's switch names it; the
    # dispatcher names no kind and no backend's function (it calls through the table)
    with open(os.path.join(here, "..", "taichi_aot", "_csrc", "taichi_aot.h"), encoding="utf-8") as f:
        kinds = set(re.findall(r"#define (TAICHI_AOT_KIND_\w+) \d+", f.read()))
    assert len(kinds) >= 6
    for path, entry in (("taichi_aot/_csrc/kinds.c", r"\[(TAICHI_AOT_KIND_\w+)\] ="),
                        ("taichi_aot_bench/_csrc/steps.c", r"case (TAICHI_AOT_KIND_\w+):")):
        with open(os.path.join(here, "..", path), encoding="utf-8") as f:
            cases = re.findall(entry, f.read())
        assert set(cases) == kinds and len(cases) == len(kinds), (path, kinds - set(cases))  # each kind once
    with open(os.path.join(here, "..", "taichi_aot", "_csrc", "launch.c"), encoding="utf-8") as f:
        code = re.sub(r"/\*.*?\*/", "", f.read(), flags=re.S)  # the code, not its comments
    backend = r"\w*(?:_vk_|_cuda_|_cpu_|_library_|aot_vk|aot_cuda|aot_cpu)\w*"
    named = re.findall(rf"TAICHI_AOT_KIND_\w+|{backend}|\bti_launch_\w+", code)
    assert named == [], named
    with open(os.path.join(here, "..", "taichi_aot", "_csrc", "kinds.c"), encoding="utf-8") as f:
        assert len(re.findall(backend, f.read())) >= 10  # the check sees the names where they are


def test_adding_a_backend_touches_the_files_the_contributor_page_lists():
    """Every file of the package that names a backend of its own (the own x64 launch and the own CUDA launcher and
    runtime: their kinds, classes, C, plan and device) is one the contributor page's "Adding a backend" steps name:
    a new backend's steps are the real list."""
    import re

    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    with open(os.path.join(root, "docs", "contributing.md"), encoding="utf-8") as f:
        steps = f.read().split("### Adding a backend", 1)[1].split("\n## ", 1)[0]
    named = set(re.findall(r"`([\w./]+)`", steps))
    marks = re.compile(r"TAICHI_AOT_KIND_CPU_CALL|X64Backend|backends/x64\.c|TAICHI_AOT_KIND_CUDA_KERNEL|CudaBackend|"
                       r"backends/cuda\.c|plan_value|OwnCudaDevice|register\((CUDA|X64|LIBTAICHI)")
    touched = []
    for top in ("taichi_aot", "taichi_aot_bench", "build_ffi.py"):
        for folder, _, files in os.walk(os.path.join(root, top)) if not top.endswith(".py") else [(root, [], [top])]:
            for name in files:
                if name.endswith((".py", ".c", ".h")):
                    with open(os.path.join(folder, name), encoding="utf-8") as f:
                        if marks.search(f.read()):
                            touched.append(os.path.relpath(os.path.join(folder, name), root))
    assert len(touched) >= 6, touched

    def listed(path: str) -> bool:  # named by its name, or its folder (a new module in taichi_aot/backends/)
        return any(path.endswith(n.rstrip("/")) or (n.endswith("/") and n.rstrip("/") in os.path.dirname(path))
                   for n in named)

    assert [p for p in touched if not listed(p)] == []
