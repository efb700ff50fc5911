"""The pool: workers on x64 and Vulkan, as local processes and as Ray actors, with real modules.

Fault cases are real: workers are killed with SIGKILL or abort themselves; "no orphan" is checked
by pid. Ray tests run against a local Ray instance (``ray.init()`` here), and one against a cluster of
three Ray nodes on this machine, one of which is removed; Ray is a promised extra, so under CI its
absence fails them.
"""

from __future__ import annotations

import os
import pickle
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pool_tasks as tasks
import pytest

from conftest import interruptible, require_arch, require_extra
from taichi_aot import Arch, ArgumentTypeError, InvalidArgumentError, MissingFileError
from taichi_aot.pool import (
    Pool,
    PoolClosedError,
    RemoteTraceback,
    WorkerCrashedError,
    WorkerStartError,
    WorkerTaskError,
)

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


@pytest.fixture(scope="session")
def ray_module():
    """Ray, shut down at the end of the session."""
    ray = require_extra("ray", "ray")
    cloudpickle = require_extra("ray.cloudpickle", "ray")
    # Ray workers do not see this folder: the task functions travel by value, as a user's own script's would
    cloudpickle.register_pickle_by_value(tasks)
    yield ray
    ray.shutdown()


@pytest.fixture
def ray_session(ray_module):
    """A local Ray instance of 4 CPUs: started by the first test that needs it, again after the cluster's test."""
    if not ray_module.is_initialized():
        ray_module.init(num_cpus=4, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
    return ray_module


@pytest.fixture
def ray_cluster(ray_module):
    """A Ray cluster on this machine, the driver connected to it by its address as to any cluster: a head of 3
    CPUs (room for every worker: where Ray by default would put them all) and two nodes of 2 CPUs.
    ``(cluster, [head, node, node])``."""
    cluster_utils = require_extra("ray.cluster_utils", "ray")
    ray_module.shutdown()  # the local instance of the tests before, if any
    cluster = cluster_utils.Cluster(initialize_head=True, head_node_args={"num_cpus": 3})
    try:
        nodes = [cluster.head_node] + [cluster.add_node(num_cpus=2) for _ in range(2)]
        cluster.wait_for_nodes()
        ray_module.init(address=cluster.address, logging_level="ERROR", log_to_driver=False)
        yield cluster, nodes
    finally:
        ray_module.shutdown()
        cluster.shutdown()


@pytest.fixture(params=["local", "ray"])
def backend(request) -> str:
    if request.param == "ray":
        request.getfixturevalue("ray_session")
    return request.param


def _gone(pids, timeout=15.0) -> bool:
    """True once no process of ``pids`` exists (zombies count as gone: they hold nothing)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        alive = [p for p in pids if _alive(p)]
        if not alive:
            return True
        time.sleep(0.1)
    return False


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def _expect(a: float) -> np.ndarray:
    return a * np.arange(8, dtype=np.float32)


def test_map_on_every_backend(arch, backend, modules):
    items = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    with Pool(modules.path(arch), arch=arch, workers=2, backend=backend, setup=tasks.setup_cache) as pool:
        assert pool.size == 2 and len(pool.workers) == 2
        if arch == Arch.X64:  # a CPU worker is given no device
            assert all(w["device"] is None and "devices" not in w for w in pool.workers), pool.workers
        pids = [w["pid"] for w in pool.workers]
        results = pool.map(tasks.axpy, items)
        for a, (values, _pid) in zip(items, results):
            np.testing.assert_array_equal(values, _expect(a))  # in the order of the items
        seen = pool.map(tasks.whoami, range(4))
        assert {s["slot"] for s in seen} <= {0, 1}
        assert all(s["arch"] == arch.name and s["cache"] == ["ready"] for s in seen)
        assert all(s["modules"] == [os.path.basename(modules.path(arch))] for s in seen)
        future = pool.submit(tasks.axpy, 7.0)
        np.testing.assert_array_equal(future.result(timeout=60)[0], _expect(7.0))
    assert _gone(pids), "a worker outlived its pool"


def test_task_exceptions_come_back_typed(backend, modules):
    require_arch(Arch.X64)
    with Pool(modules.path(Arch.X64), arch="x64", workers=2, backend=backend) as pool:
        with pytest.raises(ValueError, match="item 2 is bad") as info:
            pool.map(tasks.fails, range(5))
        cause = info.value.__cause__
        assert isinstance(cause, RemoteTraceback)
        assert "in fails" in cause.text and "pool_tasks.py" in cause.text  # the worker's own traceback
        with pytest.raises(WorkerTaskError, match="UnpicklableError: 1-2") as odd:
            pool.submit(tasks.fails_oddly, 0).result(timeout=60)
        assert odd.value.type_name.endswith("UnpicklableError") and "fails_oddly" in odd.value.remote_traceback
        with pytest.raises(WorkerTaskError, match="pickle"):
            pool.submit(tasks.returns_lock, 0).result(timeout=60)
        assert pool.map(tasks.fails, [0, 1, 3]) == [0, 1, 3]  # the pool goes on
        assert pool.restarts == 0  # no worker died for any of that
        with pytest.raises(ValueError, match="item 0 failed"):  # the first in input order, not the first to end
            pool.map(tasks.fails_late, [0, 1])


def test_kill_9_during_a_map(backend, modules):
    """Every result exactly once, in order and correct, although a worker is killed while it runs a task."""
    require_arch(Arch.X64)
    items = [float(i) for i in range(10)]
    with Pool(modules.path(Arch.X64), arch="x64", workers=2, backend=backend) as pool:
        first = pool.workers[0]
        victim = first["pid"]
        killer = threading.Timer(0.4, os.kill, (victim, signal.SIGKILL))
        killer.start()
        results = pool.map(tasks.slow_axpy, items)
        killer.join()
        assert len(results) == len(items)
        for a, (values, _pid) in zip(items, results):
            np.testing.assert_array_equal(values, _expect(a))
        assert victim not in {pid for _, pid in results[6:]}  # the victim ran nothing after its death
        assert pool.restarts == 1  # counted when the worker died, before its task was retried
        [lost] = pool.lost_workers  # and recorded: where it ran, what became of its task
        assert (lost.slot, lost.pid, lost.node) == (first["slot"], victim, first.get("node"))  # node: None locally
        assert lost.retried and lost.attempt == 1 and not lost.node_lost and f"under item {lost.index} " in str(lost)
        assert results[lost.index][1] != victim
        if backend == "local":
            assert lost.exitcode == -signal.SIGKILL and lost.cause == "killed by SIGKILL"
        assert _gone([victim])
        place = pool.workers[first["slot"]]  # its place: a replacement starting, or running already
        assert place["state"] in ("starting", "running") and place["pid"] != victim and len(pool.workers) == 2
        assert place["arch"] == first["arch"] == "x64"  # named alike whatever its state
        deadline = time.monotonic() + 60
        while pool.workers[first["slot"]]["state"] == "starting" and time.monotonic() < deadline:
            time.sleep(0.05)
        again = pool.workers[first["slot"]]
        assert again["state"] == "running" and again["pid"] not in (None, victim)


def test_a_task_that_always_crashes(backend, modules):
    require_arch(Arch.X64)
    with Pool(modules.path(Arch.X64), arch="x64", workers=1, backend=backend, retries=1) as pool:
        with pytest.raises(WorkerCrashedError) as info:
            pool.submit(tasks.crashes, "poison").result(timeout=120)
        err = info.value
        assert err.item == "poison" and err.index is None and err.attempts == 2
        assert "'poison'" in str(err) and "retries=1" in str(err)
        if backend == "local":
            assert err.exitcodes == (-signal.SIGKILL, -signal.SIGKILL) and "SIGKILL" in str(err)
        with pytest.raises(WorkerCrashedError) as mapped:
            pool.map(tasks.crashes, ["a", "b"])
        assert mapped.value.index in (0, 1)
        assert [(w.task, w.attempt, w.retried) for w in pool.lost_workers[:2]] == [("item 'poison'", 1, True),
                                                                                    ("item 'poison'", 2, False)]
        np.testing.assert_array_equal(pool.map(tasks.axpy, [2.0])[0][0], _expect(2.0))  # replaced, working


def test_a_retried_task_runs_again(modules, tmp_path):
    require_arch(Arch.X64)
    marker = str(tmp_path / "crashed")
    with Pool(modules.path(Arch.X64), arch="x64", workers=2) as pool:
        results = pool.map(tasks.crashes_once, [(i, marker if i == 3 else None) for i in range(8)])
        assert pool.speculated == 0  # no copies unless asked for
    assert results == [2 * i for i in range(8)] and os.path.exists(marker)


def test_a_straggler_is_copied_onto_an_idle_worker(modules, tmp_path):
    """speculative=True: once no task waits, an idle worker runs a copy of a task that has run longer than the
    median; whichever copy ends first gives the result (each item once, in order) while the other still runs, and
    speculation_won counts only the copies that ended first."""
    require_arch(Arch.X64)
    copied, original = str(tmp_path / "copy-wins"), str(tmp_path / "original-wins")
    pool = Pool(modules.path(Arch.X64), arch="x64", workers=3, speculative=True)
    try:  # the straggler runs a minute, its copy 50 ms: the copy's result comes back
        results = pool.map(tasks.straggles_once, [(i, copied if i == 5 else None) for i in range(8)])
        assert [value for value, _ in results] == [2 * i for i in range(8)]
        assert os.path.exists(copied) and not os.path.exists(copied + ".done")  # the straggler runs still
        assert pool.speculated == 1 and pool.speculation_won == 1
        # the straggler runs 1 s, its copy a minute: the straggler's own result comes back, the copy is no win
        results = pool.map(tasks.straggles_once, [(i, original, 1.0, 60.0) if i == 5 else (i, None)
                                                  for i in range(8)])
        assert [value for value, _ in results] == [2 * i for i in range(8)] and os.path.exists(original + ".done")
        assert pool.speculated == 2 and pool.speculation_won == 1
    finally:
        pool.terminate()  # the workers still running a straggler or a copy are killed, not waited for


def test_workers_that_cannot_start(backend, modules):
    require_arch(Arch.X64)
    require_arch(Arch.VULKAN)
    with pytest.raises(WorkerStartError, match="IncompatibleModuleError") as info:  # a Vulkan module on x64
        Pool(modules.path(Arch.VULKAN, tcm=True), arch="x64", workers=2, backend=backend)
    assert "worker" in str(info.value) and info.value.remote_traceback
    with pytest.raises(WorkerStartError, match="setup refused") as info:
        Pool(modules.path(Arch.X64), arch="x64", workers=1, backend=backend, setup=tasks.setup_fails)
    assert "setup_fails" in info.value.remote_traceback


def test_corrupt_and_missing_modules(tmp_path):
    bad = tmp_path / "bad.tcm"
    bad.write_bytes(b"not a module")
    with pytest.raises(WorkerStartError, match="CorruptedDataError"):
        Pool(str(bad), arch="x64", workers=1)
    with pytest.raises(MissingFileError):
        Pool(str(tmp_path / "nowhere.tcm"), arch="x64")
    with pytest.raises(MissingFileError, match=f"did you mean {str(tmp_path / 'bad.tcm')!r}"):  # the nearest named
        Pool(str(tmp_path / "bda.tcm"), arch="x64")
    import multiprocessing

    assert multiprocessing.active_children() == []  # nothing left of the failed starts


def test_terminate_in_the_middle_of_a_map(backend, modules):
    require_arch(Arch.X64)
    pool = Pool(modules.path(Arch.X64), arch="x64", workers=2, backend=backend)
    pids = [w["pid"] for w in pool.workers]
    stopper = threading.Timer(0.4, pool.terminate)
    stopper.start()
    with pytest.raises(PoolClosedError, match="closed during the map"):
        pool.map(tasks.slow_axpy, [float(i) for i in range(40)])
    stopper.join()
    assert pool.closed and _gone(pids)
    with pytest.raises(PoolClosedError):
        pool.submit(tasks.axpy, 1.0)


def test_close_finishes_submitted_work(modules):
    require_arch(Arch.X64)
    pool = Pool(modules.path(Arch.X64), arch="x64", workers=2)
    futures = [pool.submit(tasks.slow_axpy, float(i)) for i in range(5)]
    pool.close()
    assert all(f.done() and not f.cancelled() for f in futures)
    np.testing.assert_array_equal(futures[4].result()[0], _expect(4.0))
    pool.close()  # twice is fine


def test_bad_arguments(modules):
    require_arch(Arch.X64)
    path = modules.path(Arch.X64)
    for kwargs in ({"workers": 0}, {"workers": "2"}, {"backend": "threads"}, {"retries": -1}):
        with pytest.raises(InvalidArgumentError):
            Pool(path, arch="x64", **kwargs)
    with pytest.raises(ArgumentTypeError):
        Pool(42, arch="x64")
    with pytest.raises(ArgumentTypeError, match="speculative"):
        Pool(path, arch="x64", speculative="yes")
    with pytest.raises(ArgumentTypeError, match="cuda_visible"):
        Pool(path, arch="x64", cuda_visible="yes")
    for devices in ([[0, 0]], [[]], [[0, "1"]], [0, [-1]]):  # a worker's GPUs: distinct device numbers
        with pytest.raises(InvalidArgumentError, match="lists of them"):
            Pool(path, arch="x64", devices=devices)
    with Pool(path, arch="x64", workers=1) as pool:
        with pytest.raises(ArgumentTypeError, match="module level"):
            pool.submit(lambda w, i: i, 1)
        with pytest.raises(ArgumentTypeError, match="callable"):
            pool.map(3, [1])
        with pytest.raises(ArgumentTypeError, match="pickled"):
            pool.submit(tasks.fails, threading.Lock()).result(timeout=60)
        assert pool.map(tasks.fails, []) == []


def test_vulkan_devices_are_checked(vulkan, modules):
    from taichi_aot import ArgumentOutOfRangeError

    with pytest.raises(ArgumentOutOfRangeError, match="device 7"):
        Pool(modules.path(Arch.VULKAN, tcm=True), arch="vulkan", devices=[7])
    with pytest.raises(InvalidArgumentError, match="several devices on CUDA only"):
        Pool(modules.path(Arch.VULKAN, tcm=True), arch="vulkan", devices=[[0, 1]])
    with Pool({"k": modules.path(Arch.VULKAN, tcm=True)}, arch="vulkan", devices=[0], workers=2) as pool:
        seen = pool.map(tasks.whoami, range(2))
        assert [(w["device"], w["devices"]) for w in pool.workers] == [(0, [0]), (0, [0])]
    assert all(s["device"] == 0 and s["modules"] == ["k"] for s in seen)


def test_progress_bar_only_when_asked_or_on_a_terminal(modules, capsys):
    require_arch(Arch.X64)
    with Pool(modules.path(Arch.X64), arch="x64", workers=1) as pool:
        pool.map(tasks.fails, [0, 1, 3, 4])
        assert capsys.readouterr().err == ""  # not a terminal: no frames
        pool.map(tasks.fails, [0, 1, 3, 4], progress=True)
        assert "4/4 tasks" in capsys.readouterr().err
        seen = []  # a function of the caller's (a notebook's widget): called as tasks end, no frames drawn
        pool.map(tasks.fails, [0, 1, 3, 4], progress=lambda done, total: seen.append((done, total)))
        assert seen == [(1, 4), (2, 4), (3, 4), (4, 4)] and capsys.readouterr().err == ""


_SCRIPT = """
import os, sys, time
sys.path.insert(0, {here!r})
import pool_tasks
from taichi_aot.pool import Pool
if __name__ == "__main__":
    with Pool({module!r}, arch="x64", workers=2) as pool:
        print(" ".join(str(w["pid"]) for w in pool.workers), flush=True)
        pool.map(pool_tasks.slow_axpy, [1.0] * 1000)
"""


def _start_script(tmp_path, module):
    script = tmp_path / "pool_script.py"
    script.write_text(_SCRIPT.format(here=HERE, module=module))
    with interruptible():
        proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, start_new_session=True)
    assert proc.stdout is not None
    pids = [int(p) for p in proc.stdout.readline().split()]
    assert len(pids) == 2, proc.stderr.read() if proc.stderr else ""
    time.sleep(0.5)  # inside the map
    return proc, pids


def test_ctrl_c_leaves_no_orphans(modules, tmp_path):
    require_arch(Arch.X64)
    proc, pids = _start_script(tmp_path, modules.path(Arch.X64))
    os.killpg(proc.pid, signal.SIGINT)  # as a terminal's Ctrl-C: the whole group
    _, err = proc.communicate(timeout=60)
    assert proc.returncode != 0 and "KeyboardInterrupt" in err
    assert _gone(pids, 10)


def test_workers_end_with_a_killed_parent(modules, tmp_path):
    require_arch(Arch.X64)
    proc, pids = _start_script(tmp_path, modules.path(Arch.X64))
    proc.kill()
    proc.communicate(timeout=30)
    assert _gone(pids, 10), "workers outlived their parent"


def test_sweep_command(tmp_path):
    """The sweep on CPU workers; its picture has labelled axes with matplotlib (the plot extra), and is the bare
    mosaic of tiles without it (matplotlib hidden from a second run)."""
    require_arch(Arch.X64)
    require_extra("matplotlib", "plot")
    sizes = {}
    for labelled in (True, False):
        png = tmp_path / f"sweep-{labelled}.png"
        hide = "" if labelled else "import sys; sys.modules['matplotlib'] = None; "
        code = (f"{hide}import sys; from taichi_aot.cli import main; sys.exit(main(['sweep', '--arch', 'x64', "
                f"'--workers', '2', '--grid', '3', '--size', '32', '--steps', '32', '--baseline', '2', '--out', "
                f"{str(png)!r}]))")
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, cwd=ROOT,
                              env={**os.environ, "TAICHI_AOT_CACHE": str(tmp_path / "cache")})
        assert proc.returncode == 0, proc.stderr
        assert "9 simulations" in proc.stdout and "speed-up over one worker" in proc.stdout
        assert ("pip install matplotlib" in proc.stdout) is not labelled, proc.stdout
        data = png.read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n"
        sizes[labelled] = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    assert sizes[False] == (3 * 32 + 4, 3 * 32 + 4)  # 3x3 tiles with 1-pixel gaps
    assert sizes[True][0] > 500  # a figure with axes, ticks and a title around the tiles
    bad = subprocess.run([sys.executable, "-m", "taichi_aot", "sweep", "--grid", "0"], capture_output=True, text=True)
    assert bad.returncode == 2 and "--grid" in bad.stderr


def test_cpu_workers_share_the_cores(tmp_path):
    """A CPU pool divides the cores this process may use among its workers: one worker per core by default,
    each pinned to its own share, each runtime starting as many threads as its share (not one per core of the
    machine, as libtaichi_c_api alone would); a module built for more threads than that runs on fewer."""
    from taichi_aot import _cpus, metadata
    from taichi_aot.pool._plan import plan_cpus

    require_arch(Arch.X64)
    out = tmp_path / "t2.tcm"
    proc = subprocess.run([sys.executable, "-m", "taichi_aot", "build", os.path.join(ROOT, "taichi_aot", "cli",
                           "demo_kernels.py"), "--arch", "x64", "--cpu-threads", "2", "-o", str(out)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    cores = sorted(os.sched_getaffinity(0))
    assert metadata.cpu_threads(str(out)) == min(2, len(cores))  # Taichi gives at most the building machine's
    with Pool(str(out), arch="x64") as pool:  # one worker a core, one thread each
        assert len(pool) == _cpus.usable_cpus() and pool.threads == 1
        seen = {pid: (n, tuple(c), added) for n, c, pid, added in pool.map(tasks.threads, range(4 * len(pool)))}
        sim = pool.map(tasks.react, [2, 2])
    assert sorted(c for _, share, _ in seen.values() for c in share) == cores[:len(pool)]  # every core once
    assert all(n == 1 and added == 1 for n, _, added in seen.values())
    if len(cores) > 1:  # a pool of fewer workers than cores leaves the first core (the system's, this process's)
        assert plan_cpus(1, 1, "local") == (1, [(_cpus.spread(cores)[1],)])
    with Pool(str(out), arch="x64", workers=1) as pool:  # one worker: every core, as many threads
        [(n, share, _, added)] = pool.map(tasks.threads, [0])
        assert pool.threads == n == added == len(cores) and share == cores
        np.testing.assert_array_equal(pool.map(tasks.react, [2])[0], sim[0])  # one thread or all: the same
    np.testing.assert_array_equal(sim[0], sim[1])
    with Pool(str(out), arch="x64", workers=3, threads=2) as pool:  # more than fit: the shares wrap around
        assert len(pool) == 3 and pool.threads == 2
        found = pool.map(tasks.threads, range(12))
    assert all(n == added == 2 and len(set(c)) == min(2, len(cores)) for n, c, _, added in found)
    for bad in (0, -1, 10**6):
        with pytest.raises(InvalidArgumentError, match="threads"):
            Pool(str(out), arch="x64", threads=bad)
    with pytest.raises(ArgumentTypeError, match="threads"):
        Pool(str(out), arch="x64", threads=1.5)


def test_threads_are_for_cpu_workers(vulkan, modules):
    with pytest.raises(InvalidArgumentError, match="CPU"):
        Pool(modules.path(vulkan), arch="vulkan", threads=2)


def test_ray_cpu_workers_reserve_their_threads(ray_session, modules):
    """A Ray CPU worker asks Ray for as many CPUs as its runtime starts threads, and starts that many."""
    require_arch(Arch.X64)
    with Pool(modules.path(Arch.X64), arch="x64", backend="ray", workers=1, threads=2) as pool:
        [(n, _, _, added)] = pool.map(tasks.threads, [0])
        assert pool.threads == n == added == 2
        assert ray_session.available_resources().get("CPU", 0) <= 4 - 2  # the session has 4


def test_ray_across_nodes(ray_cluster, modules):
    """A pool on a cluster of three Ray nodes puts a worker on each; a node removed in the middle of a map loses
    no task and repeats none: the task its worker held runs again on another node, every result comes back once,
    in order and correct, the pool says which node was lost and which task was retried, and it is back to three
    workers, none on the lost node."""
    require_arch(Arch.X64)
    cluster, nodes = ray_cluster
    victim = nodes[1]  # a worker node (the head holds the cluster's own services)
    items = [float(i) for i in range(12)]
    with Pool(modules.path(Arch.X64), arch="x64", backend="ray", workers=3, ray_init=False) as pool:
        placed = {w["node"]: w for w in pool.workers}
        assert sorted(placed) == sorted(n.node_id for n in nodes)  # one worker on every node
        removal = threading.Thread(target=cluster.remove_node, args=(victim,))

        def remove_after_first_round(done, _total):  # every worker is then on its next task
            if done == len(nodes):
                removal.start()

        results = pool.map(tasks.on_node, items, progress=remove_after_first_round)
        removal.join()
        assert len(results) == len(items)
        for a, (values, _node, _pid) in zip(items, results):
            np.testing.assert_array_equal(values, _expect(a))
        [lost] = pool.lost_workers
        assert lost.node == victim.node_id and lost.node_lost and "left the cluster" in str(lost)
        assert (lost.slot, lost.pid) == (placed[victim.node_id]["slot"], placed[victim.node_id]["pid"])
        assert lost.retried and lost.attempt == 1 and lost.index is not None and pool.restarts == 1
        assert victim.node_id not in {node for _, node, _ in results[lost.index:]}  # retried elsewhere, and
        # nothing after it ran on the lost node
        deadline = time.monotonic() + 60
        while any(w["state"] == "starting" for w in pool.workers) and time.monotonic() < deadline:  # the
            time.sleep(0.1)  # replacement is starting
        now = pool.workers
        assert [w["state"] for w in now] == ["running"] * len(nodes) and victim.node_id not in {w["node"] for w in now}


def _expect_arrays(got, n):
    assert got["tail"] == n
    np.testing.assert_array_equal(got["a"], np.arange(n, dtype=np.float32))
    assert got["f"].flags.f_contiguous and got["f"].shape == (2, n)
    np.testing.assert_array_equal(got["f"], np.arange(2 * n, dtype=np.float64).reshape(2, n))
    np.testing.assert_array_equal(got["two"][0], np.full(n, 7, np.int64))
    np.testing.assert_array_equal(got["two"][1], np.ones(n))
    np.testing.assert_array_equal(got["frozen"], np.arange(n, dtype=np.int16))
    assert got["a"].flags.writeable


def test_large_results_come_back_through_shared_memory(modules, monkeypatch):
    """A result's large arrays come back through the worker's arena (shared memory), those that do not fit through
    the pipe, and small ones in the pickle: every value, dtype and layout as the task made them."""
    require_arch(Arch.X64)
    from taichi_aot.pool import _arena

    arena = _arena.Arena(1 << 20)  # the mechanism, in this process
    try:
        if arena.where is not None:  # Linux
            mapped = _arena.open_arena(arena.where)
            for n, through in ((10, "pickle"), (20000, "arena"), (300000, "pipe")):  # 1.2 MB > the 1 MiB arena
                data = _arena.dumps(tasks.arrays(None, n), mapped)
                assert data.startswith(_arena.MARK) == (through == "arena"), (n, through)
                _expect_arrays(arena.loads(data), n)
            back = arena.loads(_arena.dumps([pickle.PickleBuffer(b"x" * 100000)], mapped))
            assert back == [b"x" * 100000] and type(back[0]) is bytes  # read-only: in the pickle, bytes again
            mapped.close()
    finally:
        arena.close()
    monkeypatch.setattr(_arena, "ARENA_BYTES", 1 << 20)  # the workers' arenas, as the parent makes them
    with Pool(modules.path(Arch.X64), arch="x64", workers=1) as pool:
        for n in (10, 20000, 300000, 20000):
            _expect_arrays(pool.submit(tasks.arrays, n).result(timeout=60), n)


def test_a_profile_of_the_pool_brings_each_workers_rows_back_with_its_slot(modules):
    """Tasks submitted while ``pool.profile()`` is open run inside a profile of their worker's runtimes; their kernel
    rows come back with their values, by worker slot; tasks submitted after it closed are not profiled."""
    with Pool(modules.path(Arch.X64), arch="x64", workers=2) as pool:
        with pool.profile() as prof:
            slots = pool.map(tasks.axpy_times, [3, 3, 3, 3])
        assert set(slots) <= {0, 1}
        rows = prof.kernels()
        assert {r.slot for r in rows} == set(slots) and all(r.name == "add" and r.device == "x64:0" for r in rows)
        assert sum(r.launches for r in rows) == 12
        assert all(r.launches == 3 * slots.count(r.slot) and 0 < r.min <= r.max and r.timed == "call" for r in rows)
        assert "slot" in str(prof)
        assert pool.map(tasks.axpy_times, [2]) in ([0], [1])  # not profiled: a plain value
        assert sum(r.launches for r in prof.kernels()) == 12
