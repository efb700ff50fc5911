"""NdArray: 0-D arrays, shape arithmetic without wrap-around, conversions that never lose values silently."""

from __future__ import annotations

import math
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from taichi_aot import ArgumentTypeError, InvalidArgumentError, NdArray, Runtime
from taichi_aot._dtypes import MAX_NBYTES


@pytest.mark.parametrize("elem_shape", [(), (3,), (2, 2)])
def test_zero_dimensional_ndarrays(rt, elem_shape):
    x = rt.ndarray((), np.float32, elem_shape, host_access="readwrite")  # mapped below
    assert x.shape == () and x.ndim == 0 and x.full_shape == elem_shape
    assert x.nbytes == 4 * math.prod(elem_shape)
    assert not x.to_numpy().any()
    x.fill(2.5)
    assert np.array_equal(x.to_numpy(), np.full(elem_shape, 2.5, np.float32))
    data = np.arange(math.prod(elem_shape), dtype=np.float32).reshape(elem_shape)
    x.from_numpy(data)
    assert np.array_equal(x.to_numpy(), data)
    with x.map() as view:
        assert view.shape == elem_shape and np.array_equal(view, data)
    y = rt.ndarray_from_numpy(np.float32(4.0))
    assert y.shape == () and y.to_numpy() == np.float32(4.0)
    z = NdArray(rt, (), np.int32)
    z.copy_from(rt.ndarray_from_numpy(np.int32(9)))
    assert z.to_numpy() == 9


def test_shape_whose_bytes_overflow_is_refused(rt):
    # the int64 product of this shape wraps around to 16 bytes; in Python integers it does not fit
    with pytest.raises(InvalidArgumentError, match=r"needs .* bytes"):
        rt.ndarray((769546, 494770, 48448661), np.float32)
    with pytest.raises(InvalidArgumentError, match=r"needs .* bytes"):
        rt.ndarray((2**30, 2**30), np.float64, (2**30,))


@pytest.fixture(scope="module")
def x64_runtime():
    """One x64 runtime for the generated shapes (each refused shape must leave it intact for the next)."""
    with Runtime("x64") as rt:
        yield rt


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    dims=st.lists(st.integers(1, 2**31 - 1), min_size=1, max_size=6),
    elem=st.lists(st.integers(1, 2**31 - 1), max_size=2),
    itemsize=st.sampled_from([1, 2, 4, 8]),
)
def test_huge_shapes_are_a_typed_error(x64_runtime, dims, elem, itemsize):
    nbytes = math.prod(dims + elem) * itemsize
    if nbytes <= MAX_NBYTES:
        return  # fits: nothing to refuse (allocating it is for the device to answer)
    dtype = {1: np.uint8, 2: np.float16, 4: np.float32, 8: np.float64}[itemsize]
    with pytest.raises(InvalidArgumentError, match=r"needs .* bytes"):
        x64_runtime.ndarray(dims, dtype, elem)
    assert x64_runtime.ndarray((2,), np.float32).to_numpy().tolist() == [0.0, 0.0]  # the runtime still serves


def test_from_numpy_refuses_values_that_do_not_fit(rt):
    i32 = rt.ndarray((3,), np.int32)
    with pytest.raises(InvalidArgumentError, match="out of range for int32"):
        i32.from_numpy([2**31, -(2**31) - 1, 2**40])
    assert not i32.to_numpy().any()  # nothing was written
    i32.from_numpy(np.array([1, -2, 2**31 - 1], np.int64))  # values that fit convert
    assert i32.to_numpy().tolist() == [1, -2, 2**31 - 1]
    u8 = rt.ndarray((2,), np.uint8)
    with pytest.raises(InvalidArgumentError, match="out of range for uint8"):
        u8.from_numpy(np.array([-1, 3]))
    f32 = rt.ndarray((2,), np.float32)
    with pytest.raises(InvalidArgumentError, match="out of range for float32"):
        f32.from_numpy([1e40, 0.0])
    f32.from_numpy([np.inf, np.nan])  # infinities and NaN are values of float32 too
    got = f32.to_numpy()
    assert got[0] == np.inf and np.isnan(got[1])
    with pytest.raises(ArgumentTypeError, match="cannot store float64"):
        i32.from_numpy([0.5, np.nan, 1.0])
    with pytest.raises(InvalidArgumentError, match="casting must be"):
        i32.from_numpy([1.0, 2.0, 3.0], casting="wrap")  # type: ignore[arg-type]
    with pytest.raises(ArgumentTypeError, match="is not an array"):  # numpy's own ValueError, typed
        f32.from_numpy([[1.0, 2.0], [3.0]])
    with pytest.raises(ArgumentTypeError, match="expected a number"):
        f32.fill([[1.0, 2.0], [3.0]])


def test_from_numpy_casting_as_numpy_on_request(rt):
    i32 = rt.ndarray((3,), np.int32)
    i32.from_numpy(np.array([2**31, -(2**31) - 1, 2**40]), casting="same_kind")
    assert i32.to_numpy().tolist() == np.array([2**31, -(2**31) - 1, 2**40]).astype(np.int32).tolist()
    i32.from_numpy([1.7, -2.2, 3.9], casting="unsafe")
    assert i32.to_numpy().tolist() == [1, -2, 3]
    f16 = rt.ndarray((1,), np.float16)
    f16.from_numpy([1e6], casting="same_kind")
    assert f16.to_numpy()[0] == np.inf


def test_fill_refuses_values_that_do_not_fit(rt):
    f32 = rt.ndarray((2,), np.float32)
    with pytest.raises(InvalidArgumentError, match="out of range for float32"):
        f32.fill(1e40)
    f16 = rt.ndarray((2,), np.float16)
    with pytest.raises(InvalidArgumentError, match="out of range for float16"):
        f16.fill(70000.0)
    f16.fill(-65504.0)
    assert (f16.to_numpy() == -65504.0).all()
    i8 = rt.ndarray((2,), np.int8)
    with pytest.raises(InvalidArgumentError, match="out of range"):
        i8.fill(128)


def test_bool_ndarrays(rt):
    b = rt.ndarray((8,), bool)
    assert b.dtype == np.dtype(bool) and not b.to_numpy().any()
    data = np.array([True, False] * 4)
    b.from_numpy(data)
    assert np.array_equal(b.to_numpy(), data)
    b.fill(True)
    assert b.to_numpy().all()
    with pytest.raises(ArgumentTypeError):
        b.fill(1)


def test_taichi_types_are_dtypes(arch):
    # Taichi's type objects are read, never imported by taichi_aot; the test imports taichi itself, in a
    # process of its own (the Taichi compiler and libtaichi_c_api are not meant to share one)
    code = textwrap.dedent(f"""
        import numpy as np
        import taichi as ti
        from taichi_aot import Arch, ArgumentTypeError, InvalidArgumentError, Runtime
        from taichi_aot._dtypes import data_type
        with Runtime(Arch({int(arch)})) as rt:
            assert rt.ndarray((2,), ti.f32).dtype == np.float32
            assert rt.ndarray((2,), ti.u1).dtype == np.dtype(bool)
            v = rt.ndarray((4,), ti.math.vec3)
            assert v.dtype == np.float32 and v.elem_shape == (3,) and v.full_shape == (4, 3)
            m = rt.ndarray((4,), ti.types.matrix(2, 3, ti.f64))
            assert m.dtype == np.float64 and m.elem_shape == (2, 3)
            assert rt.ndarray((), ti.types.vector(2, ti.i32)).full_shape == (2,)
            try:
                rt.ndarray((4,), ti.math.vec3, (2,))
                raise SystemExit("vec3 with an elem_shape was accepted")
            except InvalidArgumentError as e:
                assert "element shape" in str(e)
            assert data_type(ti.i16).name == "I16"
            try:
                data_type(ti.math.vec2)
                raise SystemExit("a vector type was taken as a scalar type")
            except ArgumentTypeError as e:
                assert "vector/matrix" in str(e)
        print("ok")
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), proc.stdout + proc.stderr


def test_zero_dimensional_ndarrays_in_kernels_and_graphs(rt, arch, modules):
    mod = rt.load_module(modules.path(arch))
    sig = mod.kernels["accumulate"].signature
    assert [(a.ndim, a.elem_shape) for a in sig] == [(0, ()), (1, ()), (0, (3,))]  # both readers: true ndim
    total, v = rt.ndarray((), np.float32), rt.ndarray((), np.float32, (3,))
    x = rt.ndarray_from_numpy(np.arange(10, dtype=np.float32))
    v.from_numpy(np.array([1, 2, 3], np.float32))
    mod.kernels["accumulate"](total, x, v)
    rt.wait()
    assert total.to_numpy() == 45 and v.to_numpy().tolist() == [2, 4, 6]
    mod.graphs["accumulate_graph"](total=total, x=x, v=v)
    rt.wait()
    assert total.to_numpy() == 90 and v.to_numpy().tolist() == [4, 8, 12]
    with pytest.raises(InvalidArgumentError, match="ndim 0"):
        mod.kernels["accumulate"](x, x, v)  # a 1-D array where a 0-D one goes
