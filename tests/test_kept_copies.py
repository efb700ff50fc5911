"""Host arrays passed to a kernel again (a loop's step) under a discrete GPU's policy (conftest's device_policy):
the copies the last call kept (its call plan's, _callplan.KeptCopies) are filled from the arrays as they are now,
and whatever the first call would refuse or copy anew takes its path again."""

from __future__ import annotations

import contextlib
import gc
import threading
from typing import Any

import numpy as np
import pytest

from conftest import require_extra
from taichi_aot import Arch, Runtime
from taichi_aot.errors import ArgumentTypeError, ClosedError, InvalidArgumentError, ReadOnlyArrayError


def test_host_arrays_passed_again_reuse_their_copies(device_policy, modules):
    """A kernel called again with the same host arrays (a loop's step) fills, launches and reads back through the
    copies its last call made (no policy in between): the values are the arrays' as they are now, and another array,
    a changed layout or a read-only array takes the policy's path again, as the first call did."""
    rt = device_policy
    add = rt.load_module(modules.path(Arch.VULKAN)).kernels["add"]  # x += a * y
    x, y = np.zeros(64, np.float32), np.arange(64, dtype=np.float32)
    expect = x.copy()
    for step in range(5):
        y[:] = step  # the kernel reads what the array holds now
        add(x, y, 0.5)
        expect += 0.5 * step
        assert np.array_equal(x, expect)
    kept = add._callplan.kept
    assert kept is not None
    add(x, y, 2.0)
    expect += 8.0
    assert add._callplan.kept is kept and np.array_equal(x, expect)  # the same copies again
    other = x.copy()  # another array of the same layout: the policy's path, and copies kept for it
    add(other, y, 1.0)
    assert np.array_equal(other, expect + 4.0) and add._callplan.kept is not kept
    add(x, y.reshape(8, 8).reshape(64), 1.0)  # a new view of y's memory: the same values
    expect += 4.0
    assert np.array_equal(x, expect)
    x.flags.writeable = False  # a written array made read-only: refused as the first call would
    with pytest.raises(ReadOnlyArrayError):
        add(x, y, 1.0)
    x.flags.writeable = True
    add(x, y, 1.0)
    expect += 4.0
    assert np.array_equal(x, expect)
    with pytest.raises(ArgumentTypeError):  # another shape: checked as at the first call
        add(np.zeros((64, 1), np.float32), y, 1.0)
    del other
    gc.collect()
    add(x, y, 1.0)  # the kept copies hold no array of the caller's
    expect += 4.0
    assert np.array_equal(x, expect)


def test_an_array_passed_with_a_read_only_view_of_itself_again(device_policy, modules):
    """An array and a read-only view of it in one call (one copy for both the first time, as the layouts match but
    for the flag): no kept copies (each host array must be one copy's alone), and every step reads the array as it
    is now."""
    rt = device_policy
    add = rt.load_module(modules.path(Arch.VULKAN)).kernels["add"]  # x += a * y
    x = np.arange(64, dtype=np.float32)
    xv = x.view()
    xv.flags.writeable = False
    expect = x.copy()
    for _ in range(4):
        add(x, xv, 0.5)
        expect = expect + 0.5 * expect
        np.testing.assert_allclose(x, expect, rtol=1e-6)
    assert add._callplan.kept is None


def test_torch_tensors_passed_again_reuse_their_copies(device_policy, modules):
    torch = require_extra("torch", "interop")
    rt = device_policy
    add = rt.load_module(modules.path(Arch.VULKAN)).kernels["add"]
    x, y = torch.zeros(64), torch.arange(64, dtype=torch.float32)
    for _ in range(3):
        add(x, y, 1.0)
    assert add._callplan.kept is not None
    assert torch.equal(x, 3 * y)
    x.set_(torch.zeros(64))  # new memory under the same tensor: read and written there
    add(x, y, 1.0)
    assert torch.equal(x, y)
    y.requires_grad_(True)  # now refused, as a first call refuses it (the kept copies are not used)
    with pytest.raises(ArgumentTypeError, match="grad"):
        add(x, y, 1.0)
    y.requires_grad_(False)
    add(x, y, 1.0)
    assert torch.equal(x, 2 * y)


def test_torch_tensors_changed_under_kept_copies(device_policy, modules):
    """A tensor passed again is found unchanged by its print (memory, layout, requires_grad): one given memory of
    another dtype or a strided view's, or one collected, is not taken through the kept copies' views of its old
    memory."""
    torch = require_extra("torch", "interop")
    rt = device_policy
    add = rt.load_module(modules.path(Arch.VULKAN)).kernels["add"]  # x += a * y
    x, y = torch.zeros(64), torch.arange(64, dtype=torch.float32)
    add(x, y, 1.0)
    add(x, y, 1.0)
    assert add._callplan.kept is not None and torch.equal(x, 2 * y)
    y.data = torch.arange(64, dtype=torch.float64)  # new memory, of another dtype: refused as at a first call
    with pytest.raises(ArgumentTypeError):
        add(x, y, 1.0)
    y.data = torch.arange(64, dtype=torch.float32)
    add(x, y, 1.0)
    add(x, y, 1.0)
    assert torch.equal(x, 4 * y)
    base = torch.arange(256, dtype=torch.float32)
    y.data = base[:128:2]  # a strided view: the policy's path (its copy made anew)
    add(x, y, 1.0)
    assert torch.equal(x, 4 * torch.arange(64, dtype=torch.float32) + base[:128:2])
    add(x, y, 1.0)  # again: kept copies of a strided tensor
    y.data = base[:192:3]  # another stride, the same start and shape: read through its own strides
    x.zero_()
    add(x, y, 1.0)
    assert torch.equal(x, base[:192:3])
    add(x, y, 1.0)
    kept = add._callplan.kept
    del y, base
    gc.collect()
    y2 = torch.ones(64)
    add(x, y2, 1.0)  # a new tensor: the policy's path; the collected one's views were let go
    assert add._callplan.kept is not kept
    assert torch.equal(x, 2 * torch.arange(0, 192, 3, dtype=torch.float32) + 1)


def test_a_kept_copy_filled_by_the_devices_own_write(device_policy):
    """A discrete GPU's kept copy of a few bytes is filled by the device's own write (Vulkan: the command buffer's);
    sizes of no whole words are staged, and large copies take the device's writer."""
    rt = device_policy
    small = rt.ndarray((16,), np.float32)
    fill = rt.device.transfers.fill(small.memory)
    assert fill is not None
    data = np.arange(16, dtype=np.float32)
    fill(data)
    data[:] = -1  # the bytes were taken when the write returned
    assert np.array_equal(small.to_numpy(), np.arange(16, dtype=np.float32))
    odd = rt.ndarray((3,), np.uint8)
    rt.device.transfers.fill(odd.memory)(np.array([7, 8, 9], np.uint8))  # three bytes: through staging
    assert odd.to_numpy().tolist() == [7, 8, 9]
    large = rt.ndarray((1 << 15,), np.float32)
    assert rt.device.transfers.fill(large.memory) is None
    # from_numpy and fill of such an ndarray take the same write: the staging buffers stay unused
    staging = rt.device.transfers.staging
    rt.wait()  # the buffers in flight given back
    small.from_numpy(np.full(16, 3, np.float32))
    assert not staging.in_flight()
    odd.fill(5)
    assert len(staging.in_flight()) == 1  # the three bytes went through a buffer
    assert np.array_equal(small.to_numpy(), np.full(16, 3, np.float32)) and odd.to_numpy().tolist() == [5, 5, 5]
    strided = np.arange(32, dtype=np.float32)[::2]  # not contiguous: packed first, as from_numpy does
    small.from_numpy(strided)
    assert np.array_equal(small.to_numpy(), strided)


def test_a_fill_checks_what_it_is_given(device_policy):
    """``rt.device.transfers.fill`` is public: it takes a Memory of its runtime alone, and each write an array of that
    memory's size into a memory still open (typed errors, nothing written); a strided array is packed first."""
    rt = device_policy
    nd = rt.ndarray((8,), np.float32)
    for bad in (nd, 3, None):
        with pytest.raises(ArgumentTypeError):
            rt.device.transfers.fill(bad)
    with Runtime(rt.arch) as other, pytest.raises(ArgumentTypeError):
        rt.device.transfers.fill(other.ndarray((8,), np.float32).memory)
    fill = rt.device.transfers.fill(nd.memory)
    assert fill is not None
    nd.from_numpy(np.full(8, 2, np.float32))
    for bad, error in ((np.zeros(16, np.float32), InvalidArgumentError),
                       (np.zeros(4, np.float32), InvalidArgumentError), ([0.0] * 8, ArgumentTypeError)):
        with pytest.raises(error):
            fill(bad)
    assert np.array_equal(nd.to_numpy(), np.full(8, 2, np.float32))  # nothing was written
    with pytest.raises(ArgumentTypeError):
        fill(np.array([None] * 4, dtype=object))  # 32 bytes of pointers: not numbers
    fill(np.arange(16, dtype=np.float32)[::2])
    fill(np.arange(8, dtype=np.int32))  # bytes: any dtype of the size
    assert np.array_equal(nd.to_numpy().view(np.int32), np.arange(8, dtype=np.int32))
    memory = nd.memory
    nd.close()
    with pytest.raises(ClosedError):
        fill(np.zeros(8, np.float32))
    with pytest.raises(ClosedError):
        rt.device.transfers.fill(memory)


def test_the_own_vulkan_writes_refuse_bytes_past_a_memorys_end(device_policy):
    """Below the Python checks, the own Vulkan state's writes and copies refuse a range past a memory's end with
    the library's error (ArgumentOutOfRangeError), writing nothing, rather than hand the GPU an invalid copy."""
    from taichi_aot._native import ffi, lib
    from taichi_aot.errors import ArgumentOutOfRangeError, check

    rt = device_policy
    nd = rt.ndarray((8,), np.float32)
    nd.from_numpy(np.full(8, 2, np.float32))
    data = np.arange(64, dtype=np.float32)
    handle, memory, host = rt.handle, nd.memory.handle, ffi.from_buffer(data)
    for what, call in (("update", lambda: lib.taichi_aot_vk_update(handle, memory, 0, host, data.nbytes)),
                       ("update at an offset", lambda: lib.taichi_aot_vk_update(handle, memory, 16, host, 32)),
                       ("copy", lambda: lib.taichi_aot_vk_copy(handle, memory, 4, memory, 0, 32))):
        assert call() == lib.TI_ERROR_ARGUMENT_OUT_OF_RANGE, what
        with pytest.raises(ArgumentOutOfRangeError, match="past the end"):
            check(what)
    assert np.array_equal(nd.to_numpy(), np.full(8, 2, np.float32))


def _moved_bytes(rt, monkeypatch) -> dict[str, int]:
    """Counters of the bytes ``rt``'s policy stages from now on (``staged``: the host arrays it describes, decides and
    copies anew) and of those its device moves through its staging buffers (``buffers``)."""
    from taichi_aot._staged import StagedCopies

    moved = {"staged": 0, "buffers": 0}
    stage = StagedCopies.stage

    def staging(copies: Any, a: np.ndarray, *args: Any) -> Any:
        moved["staged"] += a.nbytes
        return stage(copies, a, *args)

    monkeypatch.setattr(StagedCopies, "stage", staging)
    buffers = rt.device.transfers.staging
    for name in ("upload", "upload_waited", "download", "download_later"):
        method = getattr(buffers, name)

        def moving(memory: Any, data: Any, method: Any = method) -> Any:
            moved["buffers"] += data if isinstance(data, int) else data.nbytes
            return method(memory, data)

        monkeypatch.setattr(buffers, name, moving)
    return moved


def test_a_profile_runs_the_calls_it_measures(device_policy, modules, monkeypatch):
    """Host arrays passed again inside a profile take the route they take outside it (their plan's kept copies): the
    same bytes staged by the policy (none) and through the staging buffers, and each call's copies a copy event of
    the profile's, the kept route's too."""
    rt = device_policy
    moved = _moved_bytes(rt, monkeypatch)  # before any copy is made: each memory's writer is chosen when it is made
    add = rt.load_module(modules.path(Arch.VULKAN)).kernels["add"]  # x += a * y
    n = 1024
    x, y = np.zeros(n, np.float32), np.arange(n, dtype=np.float32)
    add(x, y, 1.0)  # the copies made, and kept
    rt.wait()
    assert moved["staged"] == 2 * n * 4
    kept, per_call = add._callplan.kept, []
    for profiled in (False, True, False):
        before = dict(moved)
        with rt.profile() if profiled else contextlib.nullcontext() as prof:
            for _ in range(3):
                add(x, y, 1.0)
                assert add._callplan.kept is kept  # the same copies, in the profile too
            rt.wait()
        per_call.append({k: moved[k] - before[k] for k in moved})
        if profiled:
            copies = [launch for launch in prof.launches if launch.timed == "copy"]
            assert [(c.name, c.bytes) for c in copies] == [("add", 3 * n * 4)] * 3, copies  # x in and back, y in
    assert per_call[0] == per_call[1] == per_call[2] and per_call[0]["staged"] == 0, per_call
    np.testing.assert_array_equal(x, 10 * y)


def test_a_kernels_kept_copies_are_its_threads_own(device_policy, modules):
    """The runtime's thread and another (through a call plan of its own: Vulkan's own launches are any thread's)
    calling one kernel at once, each with host arrays of its own: each plan keeps copies of its own (the other
    thread's plan starts with none of the kernel's, and gives none of them back), and every value is right over
    1,000 rounds."""
    rt = device_policy
    add = rt.load_module(modules.path(Arch.VULKAN)).kernels["add"]  # x += a * y
    rounds, n = 1000, 64
    xs = [np.zeros(n, np.float32) for _ in range(2)]
    ys = [np.arange(n, dtype=np.float32) + 1000 * k for k in range(2)]
    for _ in range(2):  # the runtime's thread keeps copies before the other thread's first call
        add(xs[0], ys[0], 0.0)
    owner = add._callplan.kept
    assert owner is not None
    go, failures, plans = threading.Barrier(2), [], {}

    def work(k: int) -> None:
        try:
            go.wait()
            for r in range(rounds):
                add(xs[k], ys[k], 1.0)
                np.testing.assert_array_equal(xs[k], (r + 1) * ys[k])
                if r % 50 == 49:  # the copies in flight free to fill again
                    rt.wait()
            twin = add._twin()
            plans[k] = add._callplan if twin is None else twin.plan
        except BaseException as e:  # the test reads them
            failures.append(e)

    other = threading.Thread(target=work, args=(1,))
    other.start()
    work(0)
    other.join()
    assert failures == []
    assert plans[0] is add._callplan and plans[1] is not plans[0]
    assert plans[0].kept is owner and plans[1].kept is not None  # each its own, kept all along
    mine, theirs = ({id(s.nd) for s, _, _ in p.kept._staged} for p in (plans[0], plans[1]))
    assert mine and theirs and not mine & theirs
