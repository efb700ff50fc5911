"""Arrays made anew at every call (outputs, inputs, slices), as PyTorch and numpy programs make them: taken by the C
call over the runtime's pool of imported memory on CPU backends, never the memory of anything but the live argument;
on Vulkan, staged copies through reused buffers that no queued kernel still reads when they are filled again."""

from __future__ import annotations

import gc

import numpy as np
import pytest

from conftest import raised_in_thread, require_arch, require_extra
from taichi_aot import Arch, ArgumentTypeError, ClosedError, InvalidArgumentError, Runtime, WrongThreadError


@pytest.fixture
def x64(modules):
    require_arch(Arch.X64)
    with Runtime(Arch.X64) as rt:
        yield rt, rt.load_module(modules.path(Arch.X64))


def test_new_numpy_arrays_each_call_are_taken_in_c(x64, slow_calls):
    rt, mod = x64
    add = mod.kernels["add"]
    y = np.arange(16, dtype=np.float32)
    add(np.zeros(16, np.float32), y, 1.0)  # the first: the launcher learns its slots
    slow_calls[0] = 0
    big = np.zeros(64, np.float32)
    for i in range(200):
        out = np.full(16, i, np.float32)
        add(out, y, 2.0)  # a new output
        assert np.array_equal(out, i + 2 * y)
        add(big[16 * (i % 4):16 * (i % 4 + 1)], y, 1.0)  # slices of a bigger array, a new view each call
    assert slow_calls[0] == 0
    assert np.array_equal(big, np.tile(50 * y, 4))
    assert len(rt.foreign.imports) <= 64  # one import an address, as the allocator hands addresses out again


def test_memory_handed_to_an_array_of_another_size_or_dtype(x64):
    _rt, mod = x64
    add = mod.kernels["add"]
    raw = np.zeros(1024, np.uint8)
    small = raw[:64].view(np.float32)  # 16 f32 at the start of raw
    add(small, np.ones(16, np.float32), 1.0)
    larger = raw[:256].view(np.float32)  # 64 f32 at the same address: imported anew, larger
    add(larger, np.ones(64, np.float32), 1.0)
    assert np.array_equal(larger, np.r_[np.full(16, 2.0), np.ones(48)].astype(np.float32))
    with pytest.raises((ArgumentTypeError, InvalidArgumentError), match=r"i32|int32"):
        add(raw[:64].view(np.int32), np.ones(16, np.float32), 1.0)  # the same address, another dtype
    with pytest.raises(InvalidArgumentError, match="ndim"):
        add(raw[:64].view(np.float32).reshape(4, 4), np.ones(16, np.float32), 1.0)
    add(small, np.ones(16, np.float32), 1.0)  # and the first again, as it was
    assert np.array_equal(larger[:16], np.full(16, 3, np.float32)) and np.array_equal(larger[16:], np.ones(48))


def test_refused_arrays_go_to_python_and_raise(x64):
    _rt, mod = x64
    add = mod.kernels["add"]
    y = np.ones(16, np.float32)
    add(np.zeros(16, np.float32), y, 1.0)
    frozen = np.zeros(16, np.float32)
    frozen.flags.writeable = False
    with pytest.raises(Exception, match="read-only"):
        add(frozen, y, 1.0)
    strided = np.zeros(32, np.float32)[::2]  # taken as a staged copy, written back
    add(strided, y, 3.0)
    assert np.array_equal(strided, np.full(16, 3, np.float32))
    swapped = np.zeros(16, ">f4")
    add(swapped, y, 1.0)
    assert np.array_equal(swapped, np.ones(16))


def test_torch_tensors_made_anew_and_resized(x64, slow_calls):
    torch = require_extra("torch", "interop")
    _rt, mod = x64
    add = mod.kernels["add"]
    y = torch.arange(16, dtype=torch.float32)
    add(torch.zeros(16), y, 1.0)
    slow_calls[0] = 0
    for i in range(100):
        out = torch.full((16,), float(i))
        add(out, y, 1.0)
        assert torch.equal(out, i + y)
    assert slow_calls[0] == 0  # found by torch's C functions, where this torch has them
    t = torch.zeros(16)
    add(t, y, 1.0)
    t.resize_(4096)  # its storage reallocated: the next call takes the new memory and shape
    t.zero_()
    add(t, torch.ones(4096), 2.0)
    assert torch.equal(t, torch.full((4096,), 2.0))
    with pytest.raises(ArgumentTypeError, match="resolve_neg"):
        add(torch.zeros(16), torch.complex(torch.arange(16.0), torch.arange(16.0)).conj().imag, 1.0)
    with pytest.raises(Exception, match="grad"):
        add(torch.zeros(16, requires_grad=True), y, 1.0)


def test_closed_runtime_and_another_thread(modules):
    """New arrays taken in C serve another thread of a CPU runtime (any thread may use it), its own arrays into its
    own launcher's slots; after the close, every thread's call raises ClosedError."""
    require_arch(Arch.X64)
    rt = Runtime(Arch.X64)
    add = rt.load_module(modules.path(Arch.X64)).kernels["add"]
    y = np.ones(8, np.float32)
    add(np.zeros(8, np.float32), y, 1.0)
    theirs = [np.zeros(8, np.float32) for _ in range(3)]
    assert raised_in_thread(WrongThreadError, *(lambda x=x: add(x, y, 2.0) for x in theirs)) == []
    for x in theirs:
        np.testing.assert_array_equal(x, np.full(8, 2, np.float32))
    rt.close()
    with pytest.raises(ClosedError):
        add(np.zeros(8, np.float32), y, 1.0)
    assert len(raised_in_thread(ClosedError, lambda: add(np.zeros(8, np.float32), y, 1.0))) == 1


def test_new_numpy_arrays_leak_no_references(x64):
    import sys

    _rt, mod = x64
    add = mod.kernels["add"]
    y = np.ones(16, np.float32)
    add(np.zeros(16, np.float32), y, 1.0)
    gc.collect()
    before = (sys.getrefcount(y), len(gc.get_objects()))
    for _ in range(20_000):
        add(np.empty(16, np.float32), y, 1.0)
    gc.collect()
    assert sys.getrefcount(y) == before[0]
    assert len(gc.get_objects()) - before[1] < 100


def test_staged_inputs_are_not_refilled_while_queued_kernels_read_them(vulkan, modules):
    # on Vulkan a host array travels as a copy; a copy only read is not waited for, so the next call must fill
    # another one while queued kernels may still read it
    with Runtime(vulkan) as rt:
        add = rt.load_module(modules.path(vulkan)).kernels["add"]
        x = rt.ndarray((4096,), np.float32)
        for i in range(100):
            add(x, np.full(4096, i, np.float32), 1.0)  # a new input each call
        rt.wait()
        assert np.array_equal(x.to_numpy(), np.full(4096, sum(range(100)), np.float32))
        out = np.zeros(4096, np.float32)
        for i in range(20):  # written: copied back after each call
            add(out, np.full(4096, i, np.float32), 1.0)
            assert out[0] == sum(range(i + 1))


def _remembered_ndarray(x64, n: int):
    """``(rt, add, y, nd)``: kernel ``add`` called twice with an NdArray ``nd`` of ``n`` f32 (so its slot remembers it)
    and a numpy ``y`` of ones."""
    rt, mod = x64
    add = mod.kernels["add"]
    y = np.ones(n, np.float32)
    nd = rt.ndarray((n,), np.float32)
    add(nd, y, 1.0)
    add(nd, y, 1.0)
    return rt, add, y, nd


def test_an_ndarray_passed_again_after_an_array_taken_anew(x64):
    # the slot held the new array's argument: the NdArray it remembered must be written again
    rt, add, y, nd = _remembered_ndarray(x64, 4)
    a = np.zeros(4, np.float32)
    add(a, y, 1.0)
    add(nd, y, 1.0)
    rt.wait()
    assert np.array_equal(nd.to_numpy(), np.full(4, 3, np.float32)) and np.array_equal(a, np.ones(4))


def test_a_runtime_closed_while_a_call_reads_its_arrays(x64):
    # Python code run by the first phase's reads (a torch mode) closes the runtime: the call raises, no crash
    torch = require_extra("torch", "interop")
    rt, mod = x64
    add = mod.kernels["add"]
    add(torch.zeros(16), torch.ones(16), 1.0)

    class Closing(torch.overrides.TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            rt.close()
            return func(*args, **(kwargs or {}))

    x, y = torch.zeros(1 << 16), torch.ones(1 << 16)
    with Closing(), pytest.raises(ClosedError):
        add(x, y, 1.0)


def test_staged_copies_let_a_runtime_go(vulkan, modules):
    # staged copies keep their memory mapped: closing the runtime, or dropping it unclosed, releases it all
    import warnings

    owneds = []
    for close in (True, False):
        rt = Runtime(vulkan)
        add = rt.load_module(modules.path(vulkan)).kernels["add"]
        x = rt.ndarray((16,), np.float32)
        for _ in range(3):
            add(x, np.ones(16, np.float32), 1.0)  # only read: copies left in flight
        add(np.zeros(16, np.float32), np.ones(16, np.float32), 1.0)  # written: copied back
        owneds.append(rt._owned)
        if close:
            rt.close()
        del rt, add, x
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ResourceWarning)
            gc.collect()
    assert all(o.closed and o._released for o in owneds)


def test_an_array_taken_anew_then_passed_again_is_remembered(x64, slow_calls):
    # the same array given again after it was taken anew: Python learns it once, then the C call finds it by its
    # record (as before arrays were taken anew), and the NdArray the slot remembered before is written again
    rt, add, y, nd = _remembered_ndarray(x64, 8)
    a = np.zeros(8, np.float32)
    slow_calls[0] = 0
    for _ in range(50):
        add(a, y, 1.0)
    assert slow_calls[0] == 1  # taken anew, then learnt
    add(nd, y, 1.0)
    rt.wait()
    assert np.array_equal(a, np.full(8, 50, np.float32)) and np.array_equal(nd.to_numpy(), np.full(8, 3, np.float32))
