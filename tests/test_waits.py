"""A runtime's wait policy (``Runtime(wait=...)``, ``TAICHI_AOT_WAIT``; ``taichi_aot/waits.py``, ``_csrc/waits.c``):
each policy's waits are what it says (the own Vulkan state's counts: fence waits polled to their end, or blocked),
every value is right under each, from one thread and from several; "auto" blocks on a CPU device (lavapipe), whose
work runs on the cores a poll would take, and where threads share the runtime; a policy that is none is refused, by
argument and by variable."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from conftest import require_arch
from taichi_aot import Arch, InvalidArgumentError, Runtime
from taichi_aot._native import lib
from taichi_aot.waits import POLICIES


def _values_in_threads(rt: Runtime, add, size: int, launches: int, every: int, here: bool = False) -> None:
    """Four threads (and this one, where ``here``) each adding 1 ``launches`` times to an array of its own and reading
    it every ``every`` launches: every value its own; the first failure raised."""
    failures: list[BaseException] = []
    go = threading.Barrier(5 if here else 4)

    def work(seed: int) -> None:
        try:
            go.wait()
            mine = rt.ndarray_from_numpy(np.full(size, seed, np.float32))
            one = rt.ndarray_from_numpy(np.ones(size, np.float32))
            for i in range(1, launches + 1):
                add(mine, one, 1.0)
                if i % every == 0:
                    np.testing.assert_array_equal(mine.to_numpy(), np.full(size, seed + i, np.float32))
        except BaseException as e:  # raised below
            failures.append(e)

    threads = [threading.Thread(target=work, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    if here:
        work(4)
    for t in threads:
        t.join()
    if failures:
        raise failures[0]


def _waited_adds(rt: Runtime, add, rounds: int) -> np.ndarray:
    """``rounds`` launches of add, each waited for, then read."""
    x = rt.ndarray_from_numpy(np.arange(64, dtype=np.float32))
    y = rt.ndarray_from_numpy(np.ones(64, np.float32))
    for _ in range(rounds):
        add(x, y, 1.0)
        rt.wait()
    return x.to_numpy()


@pytest.mark.parametrize("policy", POLICIES)
def test_each_policy_waits_as_it_says_and_values_are_right(vulkan, modules, policy):
    with Runtime(vulkan, wait=policy) as rt:
        assert rt.wait_policy == policy
        add = rt.load_module(modules.path(vulkan)).kernels["add"]
        before = rt.device.counts()
        got = _waited_adds(rt, add, 20)
        np.testing.assert_array_equal(got, np.arange(64, dtype=np.float32) + 20)
        counts = {k: v - before[k] for k, v in rt.device.counts().items()}
        assert counts["fence waits"] >= 20, counts
        polls = policy in ("spin", "yield") or (policy == "auto" and rt.device.facts.type != "CPU")
        if polls:  # spin and yield poll to the end; auto within its bound (a tiny kernel's wait is well within it)
            assert counts["waits polled"] >= 20 and (policy == "auto" or counts["waits blocked"] == 0), counts
        else:  # block, and auto on a CPU device: the driver's wait, no poll
            assert counts["waits polled"] == 0 and counts["waits blocked"] >= 20, counts


@pytest.mark.parametrize("policy", ["spin", "auto"])
def test_threads_waiting_under_a_policy_each_get_their_values(vulkan, modules, policy):
    """Four threads and this one, each launching and waiting and reading its own array (more polling threads than this
    machine has cores under "spin"): every value right, the runtime this thread's after."""
    with Runtime(vulkan, wait=policy) as rt:
        add = rt.load_module(modules.path(vulkan)).kernels["add"]
        _values_in_threads(rt, add, 32, 30, 10, here=True)
        np.testing.assert_array_equal(_waited_adds(rt, add, 3), np.arange(64, dtype=np.float32) + 3)


def _auto_in_c(rt: Runtime) -> None:
    """The own Vulkan state's waits under "auto" as on a GPU, on lavapipe too (where the runtime's "auto" blocks at
    once: a CPU device's threads need the cores), so that what auto does where threads share shows here."""
    lib.taichi_aot_vk_set_wait(rt.device.vulkan_id, POLICIES.index("auto"), 0)


def _moved(rt: Runtime, before: dict[str, int]) -> dict[str, int]:
    return {k: v - before[k] for k, v in rt.device.counts().items()}


@pytest.mark.parametrize("policy", ["spin", "auto"])
def test_waits_while_threads_share_a_runtime_are_told_apart(vulkan, modules, policy):
    """One thread's waits are not made while threads share the runtime; four threads' values on one runtime are
    (``waits while threads share``). There "auto" blocks (a polling thread slows the launching one), and "spin"
    polls as it says; every value is right."""
    with Runtime(vulkan, wait=policy) as rt:
        if policy == "auto":
            _auto_in_c(rt)
        add = rt.load_module(modules.path(vulkan)).kernels["add"]
        before = rt.device.counts()
        np.testing.assert_array_equal(_waited_adds(rt, add, 10), np.arange(64, dtype=np.float32) + 10)
        alone = _moved(rt, before)
        assert alone["fence waits"] >= 10 and alone["waits while threads share"] == 0, alone
        before = rt.device.counts()
        _values_in_threads(rt, add, 32, 30, 10)
        shared = _moved(rt, before)
        assert shared["waits while threads share"] >= 1, shared
        if policy == "spin":
            assert shared["waits blocked"] == 0, shared
        else:
            assert shared["waits blocked"] >= shared["waits while threads share"], shared


def test_auto_blocks_and_submits_at_waits_while_threads_share_then_polls_and_feeds_again(vulkan, modules):
    """Under "auto" (as on a GPU), a launch of another thread makes the runtime shared: this thread's next wait blocks
    at once (it polls alone, for a bounded time), and its launches are submitted by the wait, not early; once this
    thread has made 64 launches in a row the runtime is its own again: its waits are not shared, and a batch begun
    after one is submitted at its second launch. A thread that only reads shares nothing."""
    with Runtime(vulkan, wait="auto") as rt:
        _auto_in_c(rt)
        add = rt.load_module(modules.path(vulkan)).kernels["add"]
        x = rt.ndarray_from_numpy(np.zeros(16, np.float32))
        y = rt.ndarray_from_numpy(np.ones(16, np.float32))
        add(x, y, 1.0)
        rt.wait()

        def other() -> None:
            add(y, y, 0.0)  # y stays ones

        before = rt.device.counts()
        add(x, y, 1.0)
        rt.wait()
        alone = _moved(rt, before)
        assert alone["fence waits"] >= 1 and alone["waits while threads share"] == 0, alone  # polled, within a bound

        reader = threading.Thread(target=x.to_numpy)
        reader.start()
        reader.join()
        before = rt.device.counts()
        add(x, y, 1.0)
        rt.wait()
        assert _moved(rt, before)["waits while threads share"] == 0  # a thread that only reads shares nothing

        t = threading.Thread(target=other)
        t.start()
        t.join()
        before = rt.device.counts()
        for _ in range(3):
            add(x, y, 1.0)
        assert _moved(rt, before)["submits"] == 0  # shared: not early, not fed
        rt.wait()
        shared = _moved(rt, before)
        assert shared["submits"] >= 1 and shared["waits while threads share"] >= 1, shared
        assert shared["waits polled"] == 0 and shared["waits blocked"] >= 1, shared

        for _ in range(64):  # this thread's launches in a row: the runtime its own again
            add(x, y, 1.0)
        rt.wait()
        before = rt.device.counts()
        for _ in range(3):
            add(x, y, 1.0)
        early = _moved(rt, before)
        assert early["submits"] >= 1, early  # at its second launch after the wait
        rt.wait()
        mine = _moved(rt, before)
        assert mine["fence waits"] >= 1 and mine["waits while threads share"] == 0, mine
        np.testing.assert_array_equal(x.to_numpy(), np.full(16, 3 + 3 + 64 + 3, np.float32))
        np.testing.assert_array_equal(y.to_numpy(), np.ones(16, np.float32))


def test_the_policy_comes_from_the_environment_and_a_wrong_one_is_refused(vulkan, monkeypatch):
    monkeypatch.setenv("TAICHI_AOT_WAIT", " Spin ")
    with Runtime(vulkan) as rt:
        assert rt.wait_policy == "spin"
    with Runtime(vulkan, wait="block") as rt:  # the argument wins
        assert rt.wait_policy == "block"
    monkeypatch.setenv("TAICHI_AOT_WAIT", "busy")
    with pytest.raises(InvalidArgumentError, match=r"TAICHI_AOT_WAIT='busy'.*'auto', 'spin', 'yield', 'block'"):
        Runtime(vulkan)
    monkeypatch.delenv("TAICHI_AOT_WAIT")
    for wrong in ("fast", 1, ""):
        with pytest.raises(InvalidArgumentError, match="wait="):
            Runtime(vulkan, wait=wrong)  # type: ignore[arg-type]
    with Runtime(vulkan) as rt:
        assert rt.wait_policy == "auto"


def test_a_cpu_runtime_takes_the_policy_and_its_launches_are_unchanged(modules):
    require_arch(Arch.X64)
    with Runtime(Arch.X64, wait="spin") as rt:
        assert rt.wait_policy == "spin"
        add = rt.load_module(modules.path(Arch.X64)).kernels["add"]
        np.testing.assert_array_equal(_waited_adds(rt, add, 5), np.arange(64, dtype=np.float32) + 5)


@pytest.mark.parametrize("policy", ["block", "spin"])
def test_a_small_read_of_device_memory_waits_for_its_own_copy_alone(vulkan, modules, monkeypatch, policy):
    """Under a discrete GPU's placement, ``to_numpy`` of a few bytes of device memory is one copy recorded after the
    launches that write them, one submit (the launch's and the copy's, where waits block and where they poll) and one
    fence wait, no staging buffer; inside a profile (whose timestamps a wait reads) and for a larger array too, the
    values are right; four threads reading their own arrays while the others launch each get theirs."""
    from taichi_aot.placement import vulkan as vk

    monkeypatch.setenv(vk.MEMORY_VARIABLE, "device")
    with Runtime(Arch.VULKAN, wait=policy) as rt:
        _small_reads(rt, modules, monkeypatch)


def _small_reads(rt: Runtime, modules, monkeypatch) -> None:
    module = rt.load_module(modules.path(Arch.VULKAN))
    add, twice = module.kernels["add"], module.graphs["add_twice"]
    x = rt.ndarray_from_numpy(np.arange(64, dtype=np.float32))
    y = rt.ndarray_from_numpy(np.ones(64, np.float32))
    rt.wait()
    staging = type(rt.device.transfers.staging)
    downloads: list[int] = []  # the staged path's reads, counted (it still serves past a batch's segment)
    download = staging.download
    monkeypatch.setattr(staging, "download", lambda self, memory, out: (downloads.append(out.nbytes),
                                                                         download(self, memory, out)))
    before = rt.device.counts()
    for i in range(1, 6):
        add(x, y, 1.0)
        np.testing.assert_array_equal(x.to_numpy(), np.arange(64, dtype=np.float32) + i)
    counts = {k: v - before[k] for k, v in rt.device.counts().items()}
    assert counts["fence waits"] == 5 and counts["copies"] == 5 and counts["submits"] == 5, counts
    assert downloads == []  # no staging buffer: the reads buffer's segment of the batch
    before = rt.device.counts()  # a graph of two dispatches is one launch: it and its value one submit too
    for i in range(1, 4):
        twice(x=x, y=y, a=1.0)
        np.testing.assert_array_equal(x.to_numpy(), np.arange(64, dtype=np.float32) + 5 + 2 * i)
    counts = {k: v - before[k] for k, v in rt.device.counts().items()}
    assert counts["fence waits"] == 3 and counts["submits"] == 3, counts
    x.from_numpy(np.arange(64, dtype=np.float32) + 5)
    with rt.profile() as prof:
        add(x, y, 1.0)
        np.testing.assert_array_equal(x.to_numpy(), np.arange(64, dtype=np.float32) + 6)
    assert any(r.name == "add" for r in prof.kernels())
    big = rt.ndarray_from_numpy(np.arange(1 << 15, dtype=np.float32))  # 128 KiB: past a batch's segment, staged
    np.testing.assert_array_equal(big.to_numpy(), np.arange(1 << 15, dtype=np.float32))
    assert downloads == [1 << 17]
    _values_in_threads(rt, add, 16, 40, 4)


def test_the_policy_is_read_only(vulkan):
    with Runtime(vulkan, wait="yield") as rt:
        with pytest.raises(AttributeError):
            rt.wait_policy = "spin"  # type: ignore[misc]
        assert rt.wait_policy == "yield"
