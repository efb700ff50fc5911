"""An x64 runtime serves any thread, as the GPU runtimes do: libtaichi's calls on it (launches, memory, copies, waits,
module loads) and the own x64 launch's are made one at a time under its calls lock (``_csrc/backends/cpucalls.c``).
Four threads launch on one runtime through both call paths (numpy arrays, ndarrays, graphs, bound launches, kernels
that return values), copy and wait, with values right over many rounds; the runtime closed from its thread while
workers launch ends their calls with typed errors, never a crash (in a child: a signal is a failed test here)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from conftest import HERE, ROOT, build_beside_taichi, raised_in_thread, require_arch, require_extra
from taichi_aot import Arch, ClosedError, InvalidStateError, Runtime, TaichiError, WrongThreadError, capi

WORKERS = 4
N = 256


@pytest.fixture
def x64(modules):
    require_arch(Arch.X64)
    with Runtime(Arch.X64) as rt:
        yield rt, rt.load_module(modules.path(Arch.X64))


def _on_workers(work, count: int = WORKERS) -> list[BaseException]:
    """``work(i)`` on ``count`` threads started together; what they raised."""
    errors: list[BaseException] = []
    go = threading.Barrier(count)

    def run(i: int) -> None:
        try:
            go.wait(timeout=60)
            work(i)
        except BaseException as e:  # the test reads it
            errors.append(e)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not any(t.is_alive() for t in threads), "a worker still runs: it hangs"
    return errors


def test_the_runtime_serves_any_thread(x64):
    rt, _ = x64
    assert rt.device.traits.any_thread and rt.device.traits.library_any_thread
    assert rt.device.one_thread_why() == ""


def test_four_threads_launch_copy_and_wait_on_one_runtime(x64, modules):
    """Each worker launches ``add`` on ndarrays (made in C from its second call), numpy arrays (new arrays each call,
    and the same ones again), a strided numpy array (a staged copy: the Python path), a graph, a bound launch; copies
    in and out and waits, ROUNDS times; one loads the module again from its archive. Every value is what those
    launches give, and each worker's own launcher made calls in C and in Python."""
    rt, mod = x64
    add, twice = mod.kernels["add"], mod.graphs["add_twice"]
    rounds = 40
    seen: dict[int, tuple[int, int]] = {}

    def work(i: int) -> None:
        y = rt.ndarray_from_numpy(np.arange(N, dtype=np.float32) + i)
        yh = y.to_numpy()
        x, g, bx, z = (rt.ndarray((N,), np.float32) for _ in range(4))
        xh, wide = np.zeros(N, np.float32), np.zeros(2 * N, np.float32)
        bound = add.bind(bx, y, 1.0)
        for r in range(rounds):
            add(x, y, 1.0)
            add(xh, yh, 2.0)  # the same numpy arrays again
            fresh = np.full(N, r, np.float32)
            add(fresh, yh, 1.0)  # a new array each call
            np.testing.assert_array_equal(fresh, r + yh)
            add(wide[::2], yh, 1.0)  # strided: a staged copy, in and back (the Python path)
            twice(x=g, y=y, a=0.5)
            bound()
            z.from_numpy(np.full(N, r + i, np.float32))
            np.testing.assert_array_equal(z.to_numpy(), np.full(N, r + i, np.float32))
            if r % 8 == 0:
                rt.wait()
        if i == 0:  # a module loaded by a worker: libtaichi's load on its thread
            mine = rt.load_module(modules.path(Arch.X64, tcm=True))
            mine.kernels["add"](x, y, 1.0)
            x.to_numpy()
            add(x, y, -1.0)
        rt.wait()
        for got, want in ((x.to_numpy(), rounds * yh), (xh, 2 * rounds * yh), (wide[::2], rounds * yh),
                          (g.to_numpy(), rounds * yh), (bx.to_numpy(), rounds * yh)):
            np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(wide[1::2], 0)
        twin = add._twin()  # this thread's launcher
        assert twin is not None
        seen[i] = twin.call_counts

    assert _on_workers(work) == []
    assert all(in_c > 0 and in_python > 0 for in_c, in_python in seen.values()), seen
    x = rt.ndarray_from_numpy(np.zeros(4, np.float32))
    add(x, x, 1.0)  # the owner's launcher still serves its thread
    rt.wait()


def test_more_threads_than_a_launcher_keeps_at_hand_each_call_their_own_twin(x64):
    """Twelve threads at once (more than the eight whose launchers a kernel's C call finds without a lookup), then
    twelve more (given the first ones' idents again, mostly): every thread's calls are made by its own twin, in C but
    for a few after another thread made or let go of an array, each value is its own, and the owner's launcher still
    serves its thread."""
    rt, mod = x64
    add = mod.kernels["add"]
    ones = rt.ndarray_from_numpy(np.ones(N, np.float32))

    def wave(seen: dict[int, tuple[int, int]] | None) -> None:
        def work(i: int) -> None:
            x = rt.ndarray_from_numpy(np.full(N, i, np.float32))
            for _ in range(50):
                add(x, ones, 1.0)
            np.testing.assert_array_equal(x.to_numpy(), np.full(N, i + 50, np.float32))
            if seen is not None:  # (a thread of the second wave made through Python would make a twin anew)
                twin = add._twin()
                assert twin is not None
                seen[i] = twin.call_counts

        assert _on_workers(work, 12) == []

    first: dict[int, tuple[int, int]] = {}
    wave(first)
    assert len(first) == 12 and all(in_c >= 40 for in_c, _ in first.values()), sorted(first.items())
    wave(None)
    x = rt.ndarray_from_numpy(np.zeros(N, np.float32))
    add(x, ones, 1.0)
    np.testing.assert_array_equal(x.to_numpy(), np.ones(N, np.float32))


def test_threads_of_their_own_runtime_and_a_shared_one(modules):
    """A runtime made on a worker thread serves the main thread too, and runtimes on several threads at once each
    keep their own calls: each worker makes a runtime, launches on it and on the shared one."""
    require_arch(Arch.X64)
    path = modules.path(Arch.X64)
    with Runtime(Arch.X64) as shared:
        shared_add = shared.load_module(path).kernels["add"]
        totals = [shared.ndarray((N,), np.float32) for _ in range(WORKERS)]
        made: list[Runtime] = [None] * WORKERS  # type: ignore[list-item]

        def work(i: int) -> None:
            rt = made[i] = Runtime(Arch.X64, cpu_threads=1)
            add = rt.load_module(path).kernels["add"]
            x = rt.ndarray((N,), np.float32)
            y = np.ones(N, np.float32)
            for _ in range(50):
                add(x, y, 1.0)
                shared_add(totals[i], y, 2.0)
            np.testing.assert_array_equal(x.to_numpy(), np.full(N, 50, np.float32))

        assert _on_workers(work) == []
        for i, rt in enumerate(made):  # their threads ended: this thread uses and closes them
            np.testing.assert_array_equal(totals[i].to_numpy(), np.full(N, 100, np.float32))
            x = rt.ndarray_from_numpy(np.ones(3, np.float32))
            rt.load_module(path).kernels["add"](x, x, 1.0)
            np.testing.assert_array_equal(x.to_numpy(), [2, 2, 2])
            rt.close()


def test_the_owner_closes_from_its_thread_alone(x64):
    """Any thread launches; the runtime itself closes on its thread while that runs (it may be inside a launch), and
    another thread's close is refused saying so."""
    rt, _ = x64
    errors = raised_in_thread(WrongThreadError, rt.close)
    assert len(errors) == 1 and "close them there" in str(errors[0]) and not rt.closed
    x = rt.ndarray((4,), np.float32)
    assert raised_in_thread(WrongThreadError, x.close) == [] and x.closed  # its objects close from any thread


@pytest.fixture(scope="module")
def returning(tmp_path_factory) -> tuple[str, dict]:
    """tests/returns_kernels.py built for x64 (kernels that return values, and take f64/i64/u64/u8 scalars: the own x64
    launch), and what Taichi's own JIT gives."""
    require_arch(Arch.X64)
    require_extra("llvmlite.binding", "ptx")
    root = tmp_path_factory.mktemp("x64_threads")
    out, expect = str(root / "returns.tcm"), str(root / "expect.npz")
    return out, build_beside_taichi(os.path.join(HERE, "returns_kernels.py"), ["x64"], out, expect)[0]


def test_four_threads_call_kernels_that_return_values(returning):
    """The own x64 launch (a kernel's temporaries and result memory are one for all its launches) serves four threads
    at once: each call's value is its own arrays', the wide scalars' writes right, over many rounds."""
    sys.path.insert(0, HERE)
    from returns_kernels import CALLS, X32, X64

    path, expect = returning
    with Runtime(Arch.X64) as rt:
        mod = rt.load_module(path)
        assert {k: mod.launchers()[k] for k in ("total", "stats", "wide")} == {"total": "x64", "stats": "x64",
                                                                                "wide": "x64"}
        total, stats, wide, count_and_mean = (mod.kernels[k] for k in ("total", "stats", "wide", "count_and_mean"))

        def work(i: int) -> None:
            mine = X32 * np.float32(i + 1)  # sums exact in f32: each thread's value is its own
            nd = rt.ndarray_from_numpy(X32)
            for _ in range(30):
                assert total(mine) == expect["total"] * (i + 1)
                assert total(nd) == expect["total"]
                np.testing.assert_array_equal(stats(X64, *CALLS["stats"]), expect["stats"])
                assert count_and_mean(X32, *CALLS["count_and_mean"]) == (expect["count"], expect["mean"])
                x = X64.copy()
                wide(x, *CALLS["wide"])  # made in C from the second call: the own launch, no value
                np.testing.assert_array_equal(x, expect["wide"])

        assert _on_workers(work) == []


def _calls_until_closed(rt, mod, i: int, stop: threading.Event, errors: list, modules_path: str) -> None:
    """Worker ``i``'s launches, arrays, copies, waits and module loads on ``rt`` until it is closed (a typed error then
    ends them) or ``stop`` is set; anything else raised, or a typed error while the runtime is open, goes into
    ``errors``."""
    try:  # the module's kernel and graph looked up here, as the other workers look theirs up
        add, twice = mod.kernels["add"], mod.graphs["add_twice"]
        x, y = rt.ndarray((N,), np.float32), rt.ndarray_from_numpy(np.ones(N, np.float32))
    except (ClosedError, InvalidStateError):
        return
    host, step = np.zeros(N, np.float32), 0
    while not stop.is_set():
        try:
            which = step % 5
            if which == 0:
                add(x, y, 1.0)
            elif which == 1:
                add(host, np.ones(N, np.float32), 1.0)
            elif which == 2:
                twice(x=x, y=y, a=0.5)
            elif which == 3:
                with rt.ndarray((64,), np.float32) as z:
                    z.from_numpy(np.ones(64, np.float32))
                    z.to_numpy()
                rt.wait()
            elif step % 200 == 4 and i == 0:
                rt.load_module(modules_path).kernels["add"](x, y, 1.0)
            step += 1
        except TaichiError as e:
            if not rt.closed:
                errors.append(e)
            return
        except BaseException as e:  # the test reads it
            errors.append(e)
            return


def test_a_runtime_closed_under_workers_calls(modules):
    """The owner thread closes the runtime while four workers launch (C and Python paths, graphs), make, copy, read,
    wait and load modules on it: every call comes wholly before the close or raises a typed error (ClosedError, or
    InvalidStateError from a call refused on the closed runtime); nothing crashes, and the workers end."""
    require_arch(Arch.X64)
    path = modules.path(Arch.X64)
    for round_ in range(8):
        rt = Runtime(Arch.X64)
        mod = rt.load_module(path)
        stop, errors = threading.Event(), []
        threads = [threading.Thread(target=_calls_until_closed, args=(rt, mod, i, stop, errors, path))
                   for i in range(WORKERS)]
        for t in threads:
            t.start()
        time.sleep(0.01 + 0.01 * round_)
        rt.close()
        stop.set()
        for t in threads:
            t.join(timeout=120)
        assert not any(t.is_alive() for t in threads) and errors == [], errors


def test_closes_under_other_threads_launches_never_crash(modules):
    """tests/close_stress.py on x64, in a child: the arrays, the module or the runtime closed on the owner thread
    while four threads launch kernels, graphs, bound launches, replays and numpy arguments and copy, 20 rounds of
    each; every call comes wholly before its objects' close or raises a typed error, no signal, no hang."""
    require_arch(Arch.X64)
    rounds = 20
    # this tree's package, wherever the interpreter's site-packages point
    env = {**os.environ, "PYTHONFAULTHANDLER": "1",
           "PYTHONPATH": os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p)}
    proc = subprocess.run([sys.executable, os.path.join(HERE, "close_stress.py"), modules.path(Arch.X64), "--arch",
                           "x64", "--rounds", str(rounds)], env=env, capture_output=True, text=True, timeout=900)
    died = f" (killed by {signal.Signals(-proc.returncode).name})" if proc.returncode < 0 else ""
    assert proc.returncode == 0, f"exit {proc.returncode}{died}:\n{proc.stdout}{proc.stderr[-4000:]}"
    assert f"{rounds * 3} rounds" in proc.stdout, proc.stdout


def test_a_module_at_a_destroyed_modules_address_is_not_refused(modules):
    """A module destroyed on a CPU runtime is refused as destroyed (a look-up on another thread after the destroy);
    a module libtaichi later makes at the same address, on a runtime of the flat API, is not: its look-ups and its
    destroy go through (before, they were refused as destroyed, and the module never freed)."""
    require_arch(Arch.X64)
    path = modules.path(Arch.X64)
    flat = capi.create_runtime(Arch.X64)  # a runtime the calls' registry never noted
    try:
        with Runtime(Arch.X64) as rt:
            made = [capi.load_aot_module(rt.handle, path) for _ in range(60)]
            for module in made:
                capi.destroy_aot_module(module)
            again = [capi.load_aot_module(flat, path) for _ in range(60)]
            for module in again:
                assert capi.get_aot_module_kernel(module, "add")
                capi.destroy_aot_module(module)
    finally:
        capi.destroy_runtime(flat)
