"""The C call of kernels and graphs (_csrc/call.c): a call it makes itself, with the arrays of the last launch and
plain floats and ints, checks exactly what the Python path checks; whatever it cannot vouch for goes to Python."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from conftest import named_module, raised_in_thread, require_arch
from taichi_aot import (
    Arch,
    ArgumentNotFoundError,
    ArgumentTypeError,
    ClosedError,
    InvalidArgumentError,
    ReadOnlyArrayError,
    Runtime,
    WrongThreadError,
)


def test_repeated_calls_go_to_the_array_given(env):
    rt, mod = env
    add = mod.kernels["add"]
    y = rt.ndarray_from_numpy(np.arange(8, dtype=np.float32))
    a, b = rt.ndarray((8,), np.float32), rt.ndarray((8,), np.float32)
    for _ in range(3):
        add(a, y, 1.0)  # the second and third: made in C
    add(b, y, 2)  # another array, an int for an f32
    add(a, y, 0.5)
    rt.wait()
    assert np.array_equal(a.to_numpy(), 3.5 * np.arange(8, dtype=np.float32))
    assert np.array_equal(b.to_numpy(), 2 * np.arange(8, dtype=np.float32))
    for _ in range(5):  # objects made and dropped: a new one at a dead one's address is still checked
        c = rt.ndarray((8,), np.float32)
        add(c, y, 1.0)
        add(c, y, 1.0)
        rt.wait()
        assert np.array_equal(c.to_numpy(), 2 * np.arange(8, dtype=np.float32))
        del c


def test_every_check_holds_after_calls_made_in_c(env):
    rt, mod = env
    add = mod.kernels["add"]
    x, y = rt.ndarray((4,), np.float32), rt.ndarray((4,), np.float32)
    add(x, y, 1.0)
    add(x, y, 1.0)
    with pytest.raises(InvalidArgumentError, match="out of range for f32"):
        add(x, y, 1e39)
    with pytest.raises(InvalidArgumentError, match="out of range for f32"):
        add(x, y, 10**400)
    with pytest.raises(ArgumentTypeError, match="expected f32 scalar"):
        add(x, y, True)
    with pytest.raises(InvalidArgumentError):
        add(x, rt.ndarray((4,), np.int32), 1.0)
    with pytest.raises(InvalidArgumentError):
        add(x, rt.ndarray((2, 2), np.float32), 1.0)
    with pytest.raises(ArgumentTypeError, match="takes 3"):
        add(x, y)
    if rt.arch != Arch.CUDA:  # (two CUDA runtimes in one process abort it when destroyed)
        with Runtime(rt.arch) as other, pytest.raises(InvalidArgumentError, match="another runtime"):
            add(x, other.ndarray((4,), np.float32), 1.0)
    add(x, y, 1.0)
    y.close()
    with pytest.raises(ClosedError):
        add(x, y, 1.0)
    fill = mod.kernels["fill_i32"]
    m = rt.ndarray((2, 3), np.int32)
    fill(m, 7)
    fill(m, 8)
    with pytest.raises(InvalidArgumentError, match="out of range for i32"):
        fill(m, 2**31)
    with pytest.raises(ArgumentTypeError):
        fill(m, 1.5)
    fill(m, -(2**31))
    rt.wait()
    assert m.to_numpy()[0, 0] == -(2**31)


def test_keywords_then_positions(env):
    rt, mod = env
    add = mod.kernels["add"]
    x, y = rt.ndarray((4,), np.float32), rt.ndarray_from_numpy(np.ones(4, np.float32))
    if rt.arch == Arch.VULKAN:  # gfx modules record argument names
        add(x=x, y=y, a=1.0)
        add(x, y=y, a=1.0)
    else:
        add(x, y, 1.0)
        add(x, y, 1.0)
    add(x, y, 1.0)
    rt.wait()
    assert np.array_equal(x.to_numpy(), np.full(4, 3, np.float32))


def test_recording_records_calls_that_were_made_in_c(env):
    rt, mod = env
    add = mod.kernels["add"]
    x, y = rt.ndarray((4,), np.float32), rt.ndarray_from_numpy(np.ones(4, np.float32))
    add(x, y, 1.0)
    add(x, y, 1.0)
    with rt.record() as seq:
        add(x, y, 1.0)
        add(x, y, 1.0)
    rt.wait()
    assert len(seq) == 2 and np.array_equal(x.to_numpy(), np.full(4, 2, np.float32))  # recorded, not launched
    seq.replay(2)
    add(x, y, 1.0)
    rt.wait()
    assert np.array_equal(x.to_numpy(), np.full(4, 7, np.float32))


def test_another_thread_is_refused_after_calls_made_in_c(env):
    """A runtime of libtaichi that keeps to its thread refuses another thread; a Vulkan or CPU runtime (its calls made
    one at a time) takes its call, which writes its own arguments, never the shared buffer the calls made in C use."""
    rt, mod = env
    add = mod.kernels["add"]
    x, y = rt.ndarray((4,), np.float32), rt.ndarray_from_numpy(np.ones(4, np.float32))
    add(x, y, 1.0)
    add(x, y, 1.0)
    errors = raised_in_thread(WrongThreadError, lambda: add(x, y, 5.0))
    assert len(errors) == (0 if rt.device.traits.any_thread else 1)
    assert rt.device.traits.any_thread == (rt.arch in (Arch.VULKAN, Arch.X64))
    add(x, y, 1.0)
    rt.wait()
    expected = 8 if rt.device.traits.any_thread else 3  # else: the other thread's 5.0 never went in
    assert np.array_equal(x.to_numpy(), np.full(4, expected, np.float32))


def test_declared_access_applies_to_calls_made_in_c(env):
    rt, mod = env
    add = mod.kernels["add"]
    x, y = np.zeros(4, np.float32), np.ones(4, np.float32)
    add(x, y, 1.0)
    add(x, y, 1.0)
    add.declare_access({1: "read"})
    y.flags.writeable = False  # y is only read, as declared: taken
    add(x, y, 1.0)
    add(x, y, 1.0)
    x.flags.writeable = False  # x is written: refused, after calls made in C too
    with pytest.raises(ReadOnlyArrayError):
        add(x, y, 1.0)
    rt.wait()
    assert np.array_equal(x, np.full(4, 4, np.float32))


def test_shared_numpy_arrays_are_checked_on_every_call(modules):
    require_arch(Arch.X64)  # numpy arrays are shared (and their checks cached) on the CPU
    with Runtime(Arch.X64) as rt:
        add = rt.load_module(modules.path(Arch.X64)).kernels["add"]
        x, y = np.zeros(8, np.float32), np.ones(8, np.float32)
        add(x, y, 1.0)
        add(x, y, 1.0)  # made in C
        assert np.array_equal(x, np.full(8, 2, np.float32))
        x.flags.writeable = False
        with pytest.raises(ReadOnlyArrayError):
            add(x, y, 1.0)
        x.flags.writeable = True
        x.shape = (2, 4)  # reshaped in place: no longer a 1-D array
        with pytest.raises(InvalidArgumentError):
            add(x, y, 1.0)
        x.shape = (8,)
        add(x, y, 1.0)
        rt.wait()
        assert np.array_equal(x, np.full(8, 3, np.float32))


def test_graph_calls_made_in_c_check_their_names(env):
    rt, mod = env
    graph = mod.graphs["add_twice"]
    x, y = rt.ndarray((4,), np.float32), rt.ndarray_from_numpy(np.ones(4, np.float32))
    graph(x=x, y=y, a=1.0)
    graph(x=x, y=y, a=1.0)
    graph.launch({"x": x, "y": y, "a": 1.0})
    with pytest.raises(ArgumentNotFoundError, match="missing"):
        graph(x=x, y=y)
    with pytest.raises(ArgumentTypeError, match="no argument 'b'"):
        graph(x=x, y=y, b=1.0)
    with pytest.raises(ArgumentTypeError, match="no argument 1"):
        graph.launch({1: x, "y": y, "a": 1.0})
    with pytest.raises(ArgumentTypeError, match="named arguments only"):
        graph(x, y, 1.0)
    rt.wait()
    assert np.array_equal(x.to_numpy(), np.full(4, 6, np.float32))  # three launches of two adds


def test_bound_launches_are_made_in_c_and_checked_after_a_close(env):
    rt, mod = env
    add = mod.kernels["add"]
    x = rt.ndarray((4,), np.float32)
    y = rt.ndarray_from_numpy(np.ones(4, np.float32))
    bound = add.bind(x, y, 1.0)
    run = bound.launch
    for _ in range(3):  # the first checks in Python; the next two are made in C
        run()
    bound()
    rt.wait()
    assert np.array_equal(x.to_numpy(), np.full(4, 4.0, np.float32))
    with pytest.raises(ArgumentTypeError, match="takes no arguments"):
        bound(x)
    with pytest.raises(ArgumentTypeError, match="takes no arguments"):
        run(a=1.0)
    bound.set(2, 2.0)
    run()
    rt.wait()
    assert np.array_equal(x.to_numpy(), np.full(4, 6.0, np.float32))
    y.close()
    with pytest.raises(ClosedError):
        run()
    with pytest.raises(ClosedError):
        bound()


def test_keyword_calls_are_made_in_c(arch, modules, tmp_path):
    with Runtime(arch) as rt:
        add = rt.load_module(named_module(arch, modules, tmp_path)).kernels["add"]
        assert [a.name for a in add.signature] == ["x", "y", "a"]
        x, y = rt.ndarray((4,), np.float32), rt.ndarray_from_numpy(np.ones(4, np.float32))
        add(x, y, a=1.0)  # the first call of each array learns it
        before = add.call_counts
        a = "".join(["a"])  # a name made at run time, not the interned one of the code: found by equality
        calls = [lambda: add(x, y, a=1.0), lambda: add(x, y=y, a=1.0), lambda: add(a=1.0, y=y, x=x),
                 lambda: add(x, **{"y": y, a: 1.0}), lambda: add(x, y, 1.0)]
        for call in calls:
            call()
        assert add.call_counts == (before[0] + len(calls), before[1])  # every form in C
        errors = [(ArgumentTypeError, "argument 'x' given twice", lambda: add(x, y, x=x)),
                  (ArgumentTypeError, "argument 'a' given twice", lambda: add(x, y, 1.0, a=1.0)),
                  (ArgumentTypeError, "no argument 'b'", lambda: add(x, y, b=1.0)),
                  (ArgumentTypeError, "missing argument.s. a", lambda: add(x, y=y)),
                  (ArgumentTypeError, "missing argument.s. y", lambda: add(x, a=1.0)),
                  (ArgumentTypeError, "no argument 'b'", lambda: add(x, a=1.0, b=2.0))]
        for error, message, call in errors:  # the Python path's checks and messages, as before
            with pytest.raises(error, match=message):
                call()
        assert add.call_counts == (before[0] + len(calls), before[1] + len(errors))
        with pytest.raises(ArgumentTypeError, match="expected f32 scalar"):
            add(x, y, a="1")
        with pytest.raises(InvalidArgumentError, match="out of range for f32"):
            add(x, y=y, a=1e39)
        rt.wait()
        assert np.array_equal(x.to_numpy(), np.full(4, 1 + len(calls), np.float32))


def test_call_counts_tell_the_path_each_call_took(env):
    rt, mod = env
    add, graph = mod.kernels["add"], mod.graphs["add_twice"]
    x, y = rt.ndarray((4,), np.float32), rt.ndarray_from_numpy(np.ones(4, np.float32))
    assert add.call_counts == (0, 0) and graph.call_counts == (0, 0)
    for _ in range(4):
        add(x, y, 1.0)
        graph(x=x, y=y, a=1.0)
    assert add.call_counts == (3, 1) and graph.call_counts == (3, 1)  # the first call of each: Python's
    with pytest.raises(ArgumentTypeError):
        add(x, y, True)  # a bool for an f32: Python checks (and refuses) it
    add(x, y, 2)  # after a refusal the slots are learnt anew: Python's
    add(x, y, 2)  # an exact int for an f32: C
    assert add.call_counts == (4, 3)
    bound = add.bind(x, y, 1.0)
    for _ in range(3):
        bound()
    assert bound.call_counts == (2, 1)  # its first launch checks in Python
    y.close()
    with pytest.raises(ClosedError):
        add(x, y, 1.0)
    assert add.call_counts == (4, 4)


#: Floats and ints for an f32 scalar where a conversion to f32 may round two ways: f32's largest, the halfway point
#: past it (which rounds to infinity: refused) and the doubles just below it, subnormals and halfway cases among
#: them, halfway cases of 1.0's neighbours, ints rounded to a double first, signed zeros, infinities and NaNs (a
#: signaling one: CPython 3.14's struct keeps its payload, C's conversion quiets it).
F32_EDGES = [3.4028234663852886e38, 3.4028235677973362e38, 3.4028235677973366e38, -3.4028235677973366e38,
             3.4028235677973e38, 1.401298464324817e-45, 7.006492321624085e-46, 7.006492321624087e-46,
             2.1019476964872256e-45, 1.1754942106924411e-38, 5.877471754111438e-39, 1e-46, 5e-324, 1.0000000596046448,
             1.0000001788139343, 0.1, 16777217.0, 2**24 + 1, 2**53 + 2**29 + 1, -(2**53 + 2**29 + 1), 2**128 - 2**103,
             2**128 - 2**103 - 1, 2**1030, -0.0, 0.0, float("inf"), float("-inf"), float("nan"),
             struct.unpack("<d", struct.pack("<Q", 0x7FF4000000000000))[0]]


def test_both_call_paths_write_a_float_alike(env):
    """An f32 scalar is converted once, the same way on either call path: the first call (the Python call's packer)
    and the next with the same arrays (the C call) write the same bits, numpy's value for the element; a value past
    f32's range is refused with the same error (the C call leaves it to the Python call, which refuses it)."""
    rt, mod = env
    add = mod.kernels["add"]  # x += a * y
    y = rt.ndarray_from_numpy(np.ones(1, np.float32))
    for value in F32_EDGES:
        x = rt.ndarray((1,), np.float32)  # a new array: the first call is Python's
        got = []
        for path in ("python", "c"):
            before = add.call_counts
            x.from_numpy(np.full(1, -0.0, np.float32))  # -0.0 + a * 1.0 is a, signed zeros too
            try:
                add(x, y, value)
                rt.wait()
                got.append(int(x.to_numpy().view(np.uint32)[0]))
            except InvalidArgumentError as e:
                assert "is out of range for f32" in str(e)
                got.append(None)
            took = (add.call_counts[0] - before[0], add.call_counts[1] - before[1])
            # a value refused once is the Python call's to refuse again (the C call leaves what it cannot write to it)
            assert took == ((0, 1) if path == "python" or got[0] is None else (1, 0)), (value, path, took)
        assert got[0] == got[1], (value, [hex(g) if g is not None else g for g in got])
        if isinstance(value, int) and abs(value) >= 2**1024:  # past every double: no f32 either
            assert got[0] is None
            continue
        with np.errstate(over="ignore", invalid="ignore"):
            expected = np.array([float(value)]).astype(np.float32)
        if got[0] is None:
            assert np.isinf(expected[0]) and not np.isinf(float(value)), value
        else:
            np.testing.assert_array_equal(np.array([got[0]], np.uint32).view(np.float32), expected)
