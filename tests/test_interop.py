"""The arrays users already have: numpy's protocol on NdArray, and ndarrays made over numpy arrays (zero-copy where
the backend can address them)."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import require_arch
from taichi_aot import Arch, ArgumentTypeError, InvalidArgumentError, InvalidStateError, Runtime


@pytest.fixture
def rt(arch):
    with Runtime(arch) as runtime:
        yield runtime


def test_numpy_protocol(rt):
    x = rt.ndarray_from_numpy(np.arange(6, dtype=np.float32).reshape(2, 3))
    a = np.asarray(x)
    assert a.shape == (2, 3) and a.dtype == np.float32 and a.tolist() == [[0, 1, 2], [3, 4, 5]]
    assert np.sum(x) == 15.0  # was the NdArray itself
    assert np.asarray(x, dtype=np.float64).dtype == np.float64
    copied = np.array(x, copy=True)
    copied[0, 0] = 42
    assert x.to_numpy()[0, 0] == 0
    if rt.arch == Arch.X64:  # host memory: np.asarray is a view, no copy
        view = np.asarray(x)
        view[1, 2] = 7
        assert x.to_numpy()[1, 2] == 7
        assert np.asarray(x, copy=False).base is not None
    device_only = rt.ndarray((4,), np.float32, host_access="none")
    if rt.arch != Arch.X64:
        with pytest.raises(InvalidStateError, match="to_numpy"):
            np.asarray(device_only, copy=False)
    assert np.asarray(device_only).tolist() == [0, 0, 0, 0]  # a copy where needed


def test_ndarray_from_shares_on_x64_and_copies_elsewhere(rt, arch, modules):
    host = np.arange(8, dtype=np.float32)
    x = rt.ndarray_from(host)
    ones = rt.ndarray_from(np.ones(8, np.float32), copy=True)
    rt.load_module(modules.path(arch)).kernels["add"](x, ones, 10.0)
    rt.wait()
    expected = np.arange(8, dtype=np.float32) + 10
    assert np.array_equal(x.to_numpy(), expected)
    if arch == Arch.X64:  # the kernel wrote the caller's array itself
        assert np.array_equal(host, expected)
        assert x.memory._host is host
        with pytest.raises(InvalidArgumentError, match="not C-contiguous"):
            rt.ndarray_from(np.arange(8, dtype=np.float32)[::2], copy=False)
        with pytest.raises(InvalidArgumentError, match="read-only"):
            ro = np.arange(4, dtype=np.float32)
            ro.flags.writeable = False
            rt.ndarray_from(ro, copy=False)
    else:
        assert np.array_equal(host, np.arange(8, dtype=np.float32))  # a copy: the source is untouched
        with pytest.raises(InvalidArgumentError, match="cannot address host memory"):
            rt.ndarray_from(host, copy=False)
    reversed_copy = rt.ndarray_from(np.arange(8, dtype=np.float32)[::-1])  # copy=None: copies what it must
    assert reversed_copy.to_numpy().tolist() == list(range(7, -1, -1))
    vec = rt.ndarray_from(np.zeros((5, 3), np.float32), elem_ndim=1)
    assert vec.shape == (5,) and vec.elem_shape == (3,)
    buf = rt.ndarray_from(bytearray(b"\x01\x02\x03"))  # the buffer protocol
    assert buf.to_numpy().tolist() == [1, 2, 3]
    for bad, exc in ((np.zeros(3, np.complex64), ArgumentTypeError), (np.zeros(0, np.float32), InvalidArgumentError),
                     ("text", ArgumentTypeError), (object(), ArgumentTypeError)):
        with pytest.raises(exc):
            rt.ndarray_from(bad)
    with pytest.raises(InvalidArgumentError, match="elem_ndim"):
        rt.ndarray_from(np.zeros(3), elem_ndim=2)


def test_the_shared_source_outlives_its_owner():
    import gc

    require_arch(Arch.X64)
    with Runtime(Arch.X64) as rt:
        x = rt.ndarray_from(np.full(1 << 16, 3, np.int32))  # nobody else holds the array: the ndarray does
        gc.collect()
        assert int(x.to_numpy().sum()) == 3 << 16
