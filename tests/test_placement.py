"""Where a runtime's memory lives (taichi_aot.placement): Vulkan's policy decided from the runtime's own device,
the discrete GPU's policy (device memory, staging buffers) forced on lavapipe by TAICHI_AOT_VULKAN_MEMORY=device so
that it runs on every commit, the host arrays copied by the device alone, and any Vulkan device of the machine."""

from __future__ import annotations

import gc
import os
import re
import subprocess
import sys

import numpy as np
import pytest
from test_backends import package_copy

from conftest import ROOT, require_arch
from taichi_aot import Arch, Runtime, _probe, capi
from taichi_aot.errors import ExportError, InvalidArgumentError, InvalidStateError, NotSupportedError
from taichi_aot.metadata.gfx import MAX_GROUPS
from taichi_aot.placement import staging
from taichi_aot.placement import vulkan as vk


def test_the_policy_follows_the_device(vulkan, monkeypatch):
    monkeypatch.delenv(vk.MEMORY_VARIABLE, raising=False)
    with Runtime(Arch.VULKAN) as rt:
        facts = rt.device.facts
        assert facts is not None and facts.heaps  # read from the runtime's own VkPhysicalDevice
        shared = facts.type in ("integrated GPU", "CPU") or all(local for _, local in facts.heaps)
        assert rt.device.policy == ("vulkan-shared" if shared else "vulkan-device")
        x = rt.ndarray((16,), np.float32)
        assert (x.memory.host_read, x.memory.host_write) == ((True, True) if shared else (False, False))
        assert facts.name in rt.device.why_default()
    with Runtime(Arch.X64) as cpu:
        assert cpu.device.policy == "host" and cpu.ndarray((4,), np.int32).memory.host_read


def test_a_device_prints_its_arch_gpu_and_policy(vulkan, monkeypatch):
    monkeypatch.delenv(vk.MEMORY_VARIABLE, raising=False)
    with Runtime(Arch.VULKAN) as rt:
        facts, policy = rt.device.facts, rt.device.policy
        memory = "device memory" if policy == "vulkan-device" else "host-visible memory"
        assert repr(rt.device) == f"<Device vulkan:0 {facts.name!r} policy={policy} ({memory} by default)>"
        assert str(rt.device) == repr(rt.device) and rt.device.describe()["policy"] in repr(rt.device)
    assert repr(rt.device).startswith("<Device vulkan:0 ")  # the runtime closed: the device still says what it was
    monkeypatch.setenv(vk.MEMORY_VARIABLE, "device")  # the policy the variable forces, on the same GPU
    with Runtime(Arch.VULKAN) as rt:
        assert repr(rt.device) == f"<Device vulkan:0 {facts.name!r} policy=vulkan-device (device memory by default)>"
    with Runtime(Arch.X64) as cpu:
        assert repr(cpu.device) == "<Device x64:0 policy=host (host memory by default)>"


def test_the_variable_is_checked(vulkan, monkeypatch):
    monkeypatch.setenv(vk.MEMORY_VARIABLE, "fast")
    with pytest.raises(InvalidArgumentError, match="TAICHI_AOT_VULKAN_MEMORY='fast'"):
        Runtime(Arch.VULKAN)
    monkeypatch.setenv(vk.MEMORY_VARIABLE, "host")
    with Runtime(Arch.VULKAN) as rt:
        assert rt.device.policy == "vulkan-shared" and rt.ndarray((4,), np.float32).memory.host_read


def test_device_memory_by_default_and_copies_through_staging(device_policy):
    rt = device_policy
    assert rt.device.describe()["default_host_access"] == "none"
    x = rt.ndarray((1000, 3), np.float32)
    assert not (x.memory.host_read or x.memory.host_write)
    assert np.array_equal(x.to_numpy(), np.zeros((1000, 3), np.float32))  # zero-filled through a staging buffer
    data = np.random.default_rng(1).random((1000, 3), dtype=np.float32)
    x.from_numpy(data)
    assert np.array_equal(x.to_numpy(), data)
    x.fill(2.5)
    assert np.all(x.to_numpy() == 2.5)
    y = rt.ndarray((1000, 3), np.float32)
    y.copy_from(x)
    assert np.all(np.asarray(y) == 2.5)  # __array__ copies memory the host cannot address
    explicit = rt.ndarray((8,), np.int32, host_access="readwrite")  # host_access keeps its meaning
    assert explicit.memory.host_read
    with explicit.map() as view:
        view[:] = np.arange(8)
    assert np.array_equal(explicit.to_numpy(), np.arange(8))


def test_a_copy_back_that_fails_to_queue_leaves_no_buffer_to_reuse_early(device_policy, monkeypatch):
    """A queued copy back (a written host array's) whose later piece fails to enqueue: the pieces queued already are
    not written again until the device is done with them; a read given up or made twice is typed."""
    monkeypatch.setattr(staging, "CHUNK", 1 << 16)
    rt = device_policy
    data = np.arange(1 << 18, dtype=np.uint32)
    src, dst = rt.ndarray_from_numpy(data), rt.ndarray(data.shape, np.uint32)
    pool, transfers = rt.device.transfers.staging, rt.device.transfers
    copy, calls = transfers.copy, []

    def failing(*args):
        calls.append(1)
        if len(calls) == 2:
            raise InvalidStateError("a copy that failed to enqueue")
        return copy(*args)

    monkeypatch.setattr(transfers, "copy", failing)
    with pytest.raises(InvalidStateError, match="failed to enqueue"):
        pool.download_later(src.memory, src.nbytes)
    monkeypatch.setattr(transfers, "copy", copy)
    dst.from_numpy(np.full(data.shape, 7, np.uint32))  # its pieces in buffers other than the ones still queued
    assert np.array_equal(dst.to_numpy(), np.full(data.shape, 7, np.uint32))
    read = pool.download_later(src.memory, src.nbytes)
    rt.wait()
    out = np.empty_like(data)
    read(out)
    assert np.array_equal(out, data)
    with pytest.raises(InvalidStateError, match="already"):
        read(out)
    read.drop()  # nothing: made already


def test_a_map_of_device_memory_says_what_to_do(device_policy):
    x = device_policy.ndarray((4,), np.float32)
    with pytest.raises(InvalidStateError, match=r"to_numpy\(\)/from_numpy\(\).*host_access='readwrite'"):
        x.map()
    with pytest.raises(ExportError, match="to_numpy"):
        x.__array__(copy=False)
    assert x.__dlpack_device__() == (7, device_policy.device_index)  # kDLVulkan: not the host's
    with pytest.raises(ExportError, match="to_numpy"):
        x.__dlpack__()
    assert np.array_equal(np.from_dlpack(x, copy=True), np.zeros(4, np.float32))


def test_large_copies_go_in_pieces_through_reused_buffers(device_policy, monkeypatch):
    monkeypatch.setattr(staging, "CHUNK", 1 << 16)  # pieces of 64 KiB: a copy of 1 MiB takes sixteen
    rt = device_policy
    data = np.arange(1 << 18, dtype=np.uint32)  # 1 MiB
    x = rt.ndarray(data.shape, np.uint32)
    for k in range(5):
        x.from_numpy(data + k)  # each returns without a wait: its buffers are in flight until the next
        assert np.array_equal(x.to_numpy(), data + k)
    pool = rt.device.transfers.staging
    kept = len(pool._free) + len(pool._flight)
    for k in range(5):
        x.from_numpy(data - k)
        rt.wait()
    assert len(pool._free) + len(pool._flight) <= max(kept, 17)  # reused, not made anew each copy
    assert np.array_equal(x.to_numpy(), data - 4)


def test_host_arrays_are_copied_by_the_device_alone(device_policy):
    rt = device_policy
    h = rt.host_array((300, 2), np.float64)
    assert h.shape == (300, 2) and h.dtype == np.float64 and not h.any()
    assert rt.device.transfers.staging._host_array_of(h.reshape(-1).view(np.uint8)) is not None
    assert rt.device.transfers.staging._host_array_of(np.zeros(4)) is None
    x = rt.ndarray((300, 2), np.float64)
    h[:] = np.arange(600).reshape(300, 2)
    x.from_numpy(h)
    h[:] = 0  # the copy is done when from_numpy returns
    x.to_numpy(out=h)
    assert np.array_equal(h, np.arange(600).reshape(300, 2))
    part = h[100:]  # a view inside the host array: still the device's copy
    y = rt.ndarray((200, 2), np.float64)
    y.from_numpy(part)
    assert np.array_equal(y.to_numpy(), part)
    del part
    start = h.__array_interface__["data"][0]
    del h
    gc.collect()
    assert all(first != start for first, _, _ in rt.device.transfers.staging._arrays)  # given back with the array


def test_a_host_array_keeps_its_runtime_until_it_goes(vulkan, monkeypatch):
    monkeypatch.setenv(vk.MEMORY_VARIABLE, "device")
    rt = Runtime(Arch.VULKAN)
    h = rt.host_array(64, np.int16)
    rt.close()
    h[:] = 3  # still the runtime's mapped memory: never dangling
    assert int(h.sum()) == 192
    del h
    gc.collect()


def test_kernels_take_host_arrays_through_device_memory(device_policy, modules):
    rt = device_policy
    add = rt.load_module(modules.path(Arch.VULKAN)).kernels["add"]
    x = np.ones(64, np.float32)
    y = np.arange(64, dtype=np.float32)
    for _ in range(3):
        add(x, y, 2.0)  # x is written: copied back; y only read
    assert np.array_equal(x, 1 + 6 * np.arange(64, dtype=np.float32))
    nd = rt.ndarray_from_numpy(y)
    assert not nd.memory.host_read and np.array_equal(nd.to_numpy(), y)
    dx = rt.ndarray((64,), np.float32)
    add(dx, nd, 1.0)
    rt.wait()
    assert np.array_equal(dx.to_numpy(), y)
    # a written host array's copy comes back with the launch's one wait: its copies in, the kernel and its copy to
    # the host recorded in one batch of the runtime's own Vulkan queue, submitted and waited for once; libtaichi's
    # queue untouched (no submit, no fence)
    from taichi_aot.config import vulkan_fences

    def counts() -> tuple[int, int, int]:
        own = rt.device.counts()
        return own["submits"], own["fence waits"], vulkan_fences()["reused"] + vulkan_fences()["made"]

    before = counts()
    for _ in range(4):
        add(x, y, 1.0)
    assert tuple(a - b for a, b in zip(counts(), before)) == (4, 4, 0)
    assert np.array_equal(x, 1 + 10 * np.arange(64, dtype=np.float32))
    # the user's wait after such a launch finds nothing queued: no submit, no fence (50-75 us on a discrete GPU)
    before = counts()
    add(x, y, 1.0)
    rt.wait()
    rt.wait()
    assert tuple(a - b for a, b in zip(counts(), before)) == (1, 1, 0)
    # what is queued is still waited for: a device copy, then a kernel
    nd.memory.slice(0, 256).copy_to(dx.memory.slice(0, 256))
    rt.wait()
    assert tuple(a - b for a, b in zip(counts(), before)) == (2, 2, 0)
    assert np.array_equal(dx.to_numpy(), y)
    add(dx, nd, 1.0)  # after to_numpy's own wait (its copy through staging)
    rt.wait()
    assert tuple(a - b for a, b in zip(counts(), before)) == (4, 4, 0)
    assert np.array_equal(dx.to_numpy(), 2 * y)


def test_both_policies_give_the_same_results(vulkan, modules, monkeypatch):
    results = []
    for policy in ("host", "device"):
        monkeypatch.setenv(vk.MEMORY_VARIABLE, policy)
        with Runtime(Arch.VULKAN) as rt:
            mod = rt.load_module(modules.path(Arch.VULKAN))
            x = rt.ndarray_from_numpy(np.linspace(0, 1, 100, dtype=np.float32))
            y = rt.ndarray_from_numpy(np.full(100, 0.5, np.float32))
            for _ in range(4):
                mod.kernels["add"](x, y, 0.25)
            rt.wait()
            results.append(x.to_numpy())
    assert np.array_equal(results[0], results[1])


def test_any_vulkan_device_by_its_index(vulkan):
    """device_index k is the k-th device as archs lists them (the loader's order); None, libtaichi's own pick."""
    devices = capi.arch_status()[Arch.VULKAN].devices
    with pytest.raises(InvalidArgumentError, match=f"sees {len(devices)} Vulkan device"):
        Runtime(Arch.VULKAN, device_index=len(devices))
    with pytest.raises(InvalidArgumentError, match="non-negative"):
        Runtime(Arch.VULKAN, device_index=-1)
    with Runtime(Arch.VULKAN) as rt:
        assert rt.device_index == vk.best_device(devices)
        assert rt.device.facts.name == devices[rt.device_index].name
    for k, device in enumerate(devices):  # each device of the machine, the one shown to libtaichi alone
        with Runtime(Arch.VULKAN, device_index=k) as rt:
            assert rt.device.facts.name == device.name and rt.device_index == k


def test_the_object_layer_decides_no_placement():
    """Placement is the device's: memory.py and ndarray.py ask their runtime's device, never the arch."""
    import inspect

    from taichi_aot import memory, ndarray

    allowed = {  # (file, text): why it is no placement decision
        ("ndarray", "Arch.CUDA"): "the CUDA Array Interface is an export CUDA ndarrays have, wherever they live",
    }
    for room in (memory, ndarray):
        source = inspect.getsource(room)
        name = room.__name__.rsplit(".", 1)[1]
        for word in ("CPU_ARCHS", "Arch.CUDA", "Arch.VULKAN", "cuda_device", ".arch =="):
            if (name, word) in allowed:
                continue
            assert word not in source, f"{name}.py decides by {word}: ask runtime.device (taichi_aot.placement)"


def test_runtimes_on_every_vulkan_device_at_once_agree(vulkan, modules):
    """A runtime on each Vulkan device (two on the one device where there is one), all alive at once, run the same
    kernels and give the same results."""
    devices, _ = _probe.vulkan_devices()
    indices = list(range(len(devices))) if len(devices) > 1 else [0, 0]
    runtimes = [Runtime(Arch.VULKAN, device_index=k) for k in indices]
    try:
        names = [rt.device.facts.name for rt in runtimes]
        if len(devices) > 1:
            assert sorted(names) == sorted(d.name for d in devices)
        results = []
        for rt in runtimes:
            add = rt.load_module(modules.path(Arch.VULKAN)).kernels["add"]
            x = rt.ndarray_from_numpy(np.linspace(-1, 1, 4096, dtype=np.float32))
            y = rt.ndarray_from_numpy(np.cos(np.arange(4096, dtype=np.float32)))
            for _ in range(10):
                add(x, y, 0.125)
            results.append((x, rt))
        values = [x.to_numpy() for x, _ in results]
        for v in values[1:]:
            assert np.array_equal(v, values[0])
    finally:
        for rt in runtimes:
            rt.close()


def test_runtime_sized_loops_are_dispatched_wide_on_a_gpu_of_its_own(vulkan, modules, monkeypatch):
    """On a GPU with memory of its own, a loop over an ndarray's shape runs on more threads than Taichi records
    (its loop strides by the threads dispatched): the same results, on any count; the variable is checked."""
    import io
    import json
    import zipfile

    path = modules.path(Arch.VULKAN)
    data = vk.widened(None, path, 4 * vk.MODULE_GRID)
    assert data is not None and vk.widened(None, path, vk.MODULE_GRID) is None
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        meta = json.loads(zf.read("metadata.json"))
    counts = {t["advisory_total_num_threads"] for k in meta["kernels"] for t in k["tasks_attribs"]
              if t["range_for_attribs"] and not t["range_for_attribs"]["const_end"]}
    assert counts == {4 * vk.MODULE_GRID}
    monkeypatch.setenv(vk.MEMORY_VARIABLE, "device")
    results = []
    for grid in ("module", "1", str(vk.GRID), "3000000"):
        monkeypatch.setenv(vk.GRID_VARIABLE, grid)
        with Runtime(Arch.VULKAN) as rt:
            add = rt.load_module(path).kernels["add"]
            x = rt.ndarray_from_numpy(np.arange(300_000, dtype=np.float32))
            y = rt.ndarray_from_numpy(np.ones(300_000, np.float32))
            add(x, y, 3.0)
            results.append(x.to_numpy())
    for r in results:
        assert np.array_equal(r, np.arange(300_000, dtype=np.float32) + 3)
    monkeypatch.setenv(vk.GRID_VARIABLE, "wide")
    with Runtime(Arch.VULKAN) as rt, pytest.raises(InvalidArgumentError, match="TAICHI_AOT_VULKAN_GRID"):
        rt.load_module(path)


def test_bad_input_is_typed_and_leaves_nothing_behind(vulkan, monkeypatch):
    from taichi_aot.capi import handles
    from taichi_aot.errors import ArgumentTypeError

    before = handles.live_handle_count()
    monkeypatch.setenv(vk.MEMORY_VARIABLE, "gpu")
    for _ in range(2):
        with pytest.raises(InvalidArgumentError, match="TAICHI_AOT_VULKAN_MEMORY"):
            Runtime(Arch.VULKAN)
    assert handles.live_handle_count() == before  # refused before a runtime was made
    monkeypatch.setenv(vk.MEMORY_VARIABLE, "device")
    monkeypatch.setenv(vk.GRID_VARIABLE, "\u00b2")  # a digit to str.isdigit, no number to int()
    with pytest.raises(InvalidArgumentError, match="TAICHI_AOT_VULKAN_GRID"):
        vk.grid_threads()
    with Runtime(Arch.VULKAN) as rt:
        assert rt.host_array(np.int64(3), np.float32).shape == (3,)
        for shape, dtype in (((2, True), np.float32), ("ab", np.float32), ((4,), object), ((-1,), np.int8)):
            with pytest.raises(ArgumentTypeError):
                rt.host_array(shape, dtype)
        with pytest.raises(InvalidArgumentError, match="too large"):
            rt.host_array((2**40, 2**40), np.float32)
        seen = rt.ndarray((4,), np.float32, host_access="read")  # read by the host, written through staging
        view = seen.map().view()
        seen.from_numpy(np.arange(4, dtype=np.float32))
        assert view.tolist() == [0, 1, 2, 3]  # the copy is done when from_numpy returns


def test_a_wider_dispatch_stays_within_every_devices_workgroup_limit(vulkan, modules):
    import io
    import json
    import zipfile

    data = vk.widened(None, modules.path(Arch.VULKAN), 1 << 26)
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        meta = json.loads(zf.read("metadata.json"))
    for kernel in meta["kernels"]:
        for task in kernel["tasks_attribs"]:
            assert task["advisory_total_num_threads"] <= MAX_GROUPS * task["advisory_num_threads_per_group"]


def test_large_host_arrays_move_through_their_own_imported_pages(device_policy, modules):
    """A host array of a MiB or more that moves again is copied by the GPU from and to its own pages (imported: no
    staging buffer), at any offset in its pages and of any length (a copy whose host side is off 256-byte alignment
    goes as its head and the rest); its first move, smaller ones and strided ones through staging buffers (the
    host's pass over threads where large); every byte right, and nothing beside the array's bytes written."""
    rt = device_policy
    if not vk.HOST_IMPORT_BYTES or not rt.device.vulkan_id:
        pytest.fail(f"the own Vulkan state is not open: {rt.device.vulkan_why}")
    n = (vk.HOST_IMPORT_BYTES >> 2) + 12345
    backing, out = np.arange(n + 2048, dtype=np.float32), np.empty(n + 2, np.float32)
    for start in (0, 1, 4, 63, 64, 1023):  # the array's first byte anywhere in its page
        src = backing[start:start + n]
        x = rt.ndarray((n,), np.float32)
        before = rt.device.counts()["host copies"]
        for _ in range(2):
            x.from_numpy(src)
            out[:] = -1.0
            x.to_numpy(out=out[1:n + 1])
            np.testing.assert_array_equal(out[1:n + 1], src)
            assert out[0] == -1.0 and out[n + 1] == -1.0
        # in and out through the arrays' own pages, but the first move of each (backing's, out's): staged
        assert rt.device.counts()["host copies"] - before == (2 if start == 0 else 4)
    add = rt.load_module(modules.path(Arch.VULKAN)).kernels["add"]
    big, ones = np.zeros(n, np.float32), np.ones(n, np.float32)
    for _ in range(3):
        add(big, ones, 2.0)  # a host array a kernel writes: in and out through its pages
    assert (big == 6.0).all()
    small = rt.ndarray((16,), np.float32)
    small.from_numpy(np.arange(16, dtype=np.float32)[::-1].copy())
    assert small.to_numpy().tolist() == list(range(15, -1, -1))


def test_large_first_moves_split_the_hosts_pass_over_threads(device_policy):
    """An array's first move through staging buffers: the host's pass over threads from staging.THREADED_BYTES up,
    each its part (whole pages; the last what is left); every byte right at any length; taichi_aot_copy_bytes itself
    at any length and thread count."""
    from taichi_aot._native import ffi, lib

    rt = device_policy
    for nbytes in (staging.THREADED_BYTES * 2, staging.THREADED_BYTES * 3 + 4100):
        n = nbytes // 4
        x = rt.ndarray((n,), np.float32)
        src = np.random.default_rng(n).random(n, dtype=np.float32)
        x.from_numpy(src)  # first seen: staged
        np.testing.assert_array_equal(x.to_numpy(), src)  # a new array: staged
    for size in (0, 1, 4095, 4097, (3 << 20) + 3):
        src = np.random.default_rng(size).integers(0, 255, size + 8, dtype=np.uint8)
        for threads in (0, 1, 3, 16, 40):
            dst = np.zeros(size + 8, np.uint8)
            lib.taichi_aot_copy_bytes(ffi.from_buffer(dst[3:]), ffi.from_buffer(src[5:]), size, threads)
            assert np.array_equal(dst[3:3 + size], src[5:5 + size]), (size, threads)
            assert not dst[:3].any() and not dst[3 + size:].any()


def test_small_uploads_between_waits_share_a_page(device_policy, modules):
    """Small host arrays staged between two waits are packed into one page (not a buffer each), each copied in
    order before the kernel after it reads it; the page is free again after the wait."""
    rt = device_policy
    add = rt.load_module(modules.path(Arch.VULKAN)).kernels["add"]
    x, total = rt.ndarray((16,), np.float32), rt.ndarray((16,), np.float32)
    staged = rt.device.transfers.staging
    for i in range(300):
        x.from_numpy(np.full(16, i, np.float32))  # staged, enqueued: no wait
        add(total, x, 1.0)
    pages = len(staged._flight) + (staged._page is not None)
    assert pages <= 1, pages  # 300 uploads of 64 bytes: one page
    np.testing.assert_array_equal(total.to_numpy(), np.full(16, sum(range(300)), np.float32))
    assert staged._page is None and not staged._flight  # the wait took the page: free again


def test_an_array_that_moves_again_keeps_its_pages_imported(device_policy):
    """The second copy of a numpy array imports the pages of its whole allocation for good; later copies see what
    the host wrote there since; the import goes as the array is collected."""
    import gc

    rt = device_policy
    n = (vk.HOST_IMPORT_BYTES >> 2) * 2
    x = rt.ndarray((n,), np.float32)
    host = np.arange(n, dtype=np.float32)
    x.from_numpy(host)
    assert rt.device.transfers._imports.kept_bytes() == 0  # the first copy: staged
    for i in range(1, 4):
        host[::1000] = i  # written between copies, in place
        x.from_numpy(host)
        assert rt.device.transfers._imports.kept_bytes() == host.nbytes
        np.testing.assert_array_equal(x.to_numpy(), host)
    view = host[n // 2:]  # a part of it, through the same import
    back = np.empty_like(view)
    back[:] = x.to_numpy()[n // 2:]
    x.from_numpy(np.concatenate([host[:n // 2], 2 * view]))
    np.testing.assert_array_equal(x.to_numpy()[n // 2:], 2 * back)
    del host, view
    gc.collect()
    assert rt.device.transfers._imports.kept_bytes() == 0


def test_host_imports_keep_to_the_page_lock_budget(device_policy, monkeypatch):
    """A Vulkan runtime's imports share CUDA's pages policy (taichi_aot._hostpages): past the budget an array is
    copied through staging, and its bytes still arrive; within it, its second copy imports."""
    from taichi_aot import _hostpages

    rt = device_policy
    n = (vk.HOST_IMPORT_BYTES >> 2) * 2
    x = rt.ndarray((n,), np.float32)
    host = np.arange(n, dtype=np.float32)
    monkeypatch.setattr(_hostpages, "REGISTER_LIMIT", host.nbytes - 1)
    for i in range(3):
        host[0] = i
        x.from_numpy(host)
        np.testing.assert_array_equal(x.to_numpy(), host)
    assert rt.device.transfers._imports.kept_bytes() == 0
    monkeypatch.setattr(_hostpages, "REGISTER_LIMIT", host.nbytes)
    x.from_numpy(host)
    assert rt.device.transfers._imports.kept_bytes() == 0  # seen once within the budget
    x.from_numpy(host)
    assert rt.device.transfers._imports.kept_bytes() == host.nbytes


#: A toy device room, as the contributor page's "A runtime and memory of its own" asks: x64 runtimes whose memory is
#: one arena of the room's own (a region of anonymous memory handed out in aligned pieces, imported into libtaichi),
#: with libtaichi's CPU runtime as its native part.
TOY_ROOM = '''
"""A toy device room (the contributor page's steps, followed by tests/test_placement.py)."""

import functools
import mmap

from .. import capi
from .._native import ffi
from ..errors import OutOfMemoryError
from .base import Block, open_native as open_native
from .host import HostDevice

ARENA = 1 << 24


class ArenaDevice(HostDevice):
    policy = "toy"

    def __init__(self, runtime):
        super().__init__(runtime)
        self.arena = mmap.mmap(-1, ARENA)
        self.base = int(ffi.cast("uintptr_t", ffi.from_buffer(self.arena)))
        self.used = 0
        self.blocks = 0

    def why_default(self):
        return "the toy's arena"

    def allocate(self, size, flags):
        start = (self.used + 255) // 256 * 256
        if start + size > ARENA:
            raise OutOfMemoryError(f"allocate_memory: {size} bytes: the toy's arena is full")
        self.used, self.blocks = start + size, self.blocks + 1
        rt = self._runtime.handle
        handle = capi.import_cpu_memory(rt, self.base + start, size).cdata
        return Block(handle, functools.partial(capi.free_memory, rt, handle), self.base + start)


def device(runtime, native):
    return ArenaDevice(runtime)
'''

#: Its registration, one line in placement/__init__.py.
TOY_REGISTRATION = 'register("toy", ".toy", frozenset({Arch.X64}), priority=200)\n'

#: What the copy runs: an x64 runtime on the toy's memory, a Taichi-compiled kernel on it, its values read back.
TOY_RUN = '''
import sys
import numpy as np
import taichi_aot
from taichi_aot import Arch, Runtime
from taichi_aot.placement import registered

assert taichi_aot.__file__.startswith(sys.argv[2]), taichi_aot.__file__
print("rooms", [r.name for r in registered()])
with Runtime(Arch.X64) as rt:
    device = rt.device
    mod = rt.load_module(sys.argv[1])
    x, y = rt.ndarray((8,), np.float32), rt.ndarray((8,), np.float32)
    x.from_numpy(np.arange(8, dtype=np.float32))
    y.from_numpy(np.ones(8, dtype=np.float32))
    mod.kernels["add"](x, y, 2.0)
    rt.wait()
    address = np.asarray(x).__array_interface__["data"][0]
    print("device", device.policy, device.blocks, device.base <= address < device.base + device.used)
    print("values", x.to_numpy().tolist())
'''


def _runtime_steps() -> str:
    with open(os.path.join(ROOT, "docs", "contributing.md"), encoding="utf-8") as f:
        text = f.read()
    return text.split("6. **A runtime and memory of its own**", 1)[1].split("\n7. ", 1)[0]


def test_a_toy_runtime_with_its_own_memory_by_the_contributor_steps_touches_only_the_files_they_list(modules,
                                                                                                      tmp_path):
    """The page's step 6, followed for a runtime whose memory is its own (an arena it hands out): its room in
    ``placement/`` and its registration; in a copy of the package, an x64 runtime is the toy's, a Taichi-compiled
    kernel runs on the arena's memory with the right values, and the files touched are those the page names."""
    require_arch(Arch.X64)
    touched = package_copy(tmp_path, "placement/toy.py", TOY_ROOM, "placement/__init__.py", 'register("library"',
                           TOY_REGISTRATION)
    assert touched == ["placement/__init__.py", "placement/toy.py"]
    named = set(re.findall(r"`([\w./<>]+)`", _runtime_steps()))
    assert {"placement/", "placement/__init__.py"} <= named, named

    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run([sys.executable, "-c", TOY_RUN, modules.path(Arch.X64), str(tmp_path)],
                          capture_output=True, text=True, timeout=300, env=env, cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = dict(line.split(" ", 1) for line in proc.stdout.splitlines())
    assert lines["rooms"] == "['toy', 'cuda', 'vulkan', 'host', 'library']"
    assert lines["device"] == "toy 2 True"  # both arrays in the arena, the kernel's output among them
    assert lines["values"] == str([float(k + 2) for k in range(8)])


def test_a_device_says_what_it_is_in_one_frozen_record(device_policy):
    """A device's traits are one record fixed when it is made (the own Vulkan launch open: any thread), read as
    ``device.traits.<name>`` (the old attribute names, kept for a release, are gone); a room's traits are its base's
    with its own."""
    from taichi_aot.placement.base import Device, Traits
    from taichi_aot.placement.vulkan import DeviceMemoryVulkan, SharedMemoryVulkan

    device = device_policy.device
    traits = device.traits
    assert isinstance(traits, Traits) and traits.any_thread == bool(device.vulkan_id) == traits.library_any_thread
    assert not hasattr(device, "any_thread") and not hasattr(device, "stages")  # the old names: gone
    with pytest.raises(AttributeError):
        traits.any_thread = False  # frozen: a device that opens gives itself a new record
    assert DeviceMemoryVulkan.traits == SharedMemoryVulkan.traits._replace(kernel_copies_on_device=True)
    assert SharedMemoryVulkan.traits == Device.traits == Traits()


def test_a_device_is_composed_of_small_parts(device_policy):
    """A Device keeps what it is and three small parts (house9): under 20 methods of its own (the defs of its class
    body; 41 before); every room's class names parts that implement the small interfaces, and a runtime's device is
    made of them, each asking the device it belongs to."""
    import ast

    from taichi_aot.placement import Device, Library, Stream, Transfers
    from taichi_aot.placement.cuda import LibraryCudaDevice, OwnCudaDevice
    from taichi_aot.placement.host import HostDevice
    from taichi_aot.placement.vulkan import DeviceMemoryVulkan, SharedMemoryVulkan

    with open(os.path.join(ROOT, "taichi_aot", "placement", "base.py"), encoding="utf-8") as f:
        tree = ast.parse(f.read())
    body = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Device").body
    defs = [n.name for n in body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    assert len(defs) < 20, defs
    for room in (Device, HostDevice, LibraryCudaDevice, OwnCudaDevice, SharedMemoryVulkan, DeviceMemoryVulkan):
        assert issubclass(room.transfers_type, Transfers), room
        assert issubclass(room.library_type, Library) and issubclass(room.stream_type, Stream), room
    device = device_policy.device
    assert isinstance(device.transfers, DeviceMemoryVulkan.transfers_type) and device.stream.handle is None
    assert device.library.why_not() is None and not device.library.beside() and not device.stream.capturing()
    with pytest.raises(NotSupportedError, match="no CUDA stream"):
        device.stream.select(None)
    with Runtime(Arch.X64) as rt:
        assert type(rt.device.transfers) is HostDevice.transfers_type and rt.device.library.calls is None


def test_a_device_room_registered_twice_is_refused():
    """One room a name, as the launch backends have it: a second registration of a name is refused, naming the room
    that has it, and leaves the rooms as they were (before, it replaced the first in silence)."""
    from taichi_aot import InvalidArgumentError
    from taichi_aot.placement import register, registered

    before = registered()
    with pytest.raises(InvalidArgumentError, match=r"device room 'host' is registered already \(by module '.host'\)"):
        register("host", ".toy", frozenset({Arch.X64}), priority=500)
    assert registered() == before
