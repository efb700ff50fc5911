"""The flat API on real backends with real modules: every function, numbers against numpy."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from capi_args import F32, host_memory, nd, read, write
from taichi_aot import (
    Arch,
    ArgumentType,
    Capability,
    DataType,
    Error,
    ImageDimension,
    ImageLayout,
    MemoryUsage,
    capi,
    errors,
)
from taichi_aot._native import ffi, lib
from taichi_aot.enums import ARCH_PREFERENCE


@pytest.fixture
def rt(flat_rt):
    """Here ``rt`` is the flat API's runtime (conftest's flat_rt)."""
    return flat_rt


@pytest.fixture
def module(rt, arch, modules):
    return capi.load_aot_module(rt, modules.path(arch))


# -- version, library, errors -------------------------------------------------


def test_version_matches_headers():
    assert capi.get_version() == 1007000
    assert capi.library.version == 1007000
    assert os.path.isfile(capi.library.path)


def test_last_error_roundtrip_and_funnel_clears():
    capi.set_last_error(Error.INVALID_ARGUMENT, "from python")
    assert capi.get_last_error() == "from python" and capi.get_last_error_code() == Error.INVALID_ARGUMENT
    # the funnel raises the pending error once, then the slot is clean; its message stays readable
    with pytest.raises(errors.InvalidArgumentError, match="from python"):
        errors.check("after set")
    assert lib.ti_get_last_error(ffi.NULL, ffi.NULL) == 0
    assert capi.get_last_error() == "from python"
    errors.check("clean")  # nothing pending, nothing raised
    capi.clear_last_error()
    assert capi.get_last_error() == "" and capi.get_last_error_code() == Error.SUCCESS


@pytest.mark.parametrize(
    "code,cls,builtin",
    [
        (-1, errors.NotSupportedError, NotImplementedError),
        (-2, errors.CorruptedDataError, ValueError),
        (-3, errors.NameNotFoundError, KeyError),
        (-4, errors.InvalidArgumentError, ValueError),
        (-5, errors.ArgumentNullError, ValueError),
        (-6, errors.ArgumentOutOfRangeError, ValueError),
        (-7, errors.ArgumentNotFoundError, KeyError),
        (-8, errors.InvalidInteropError, ValueError),
        (-9, errors.InvalidStateError, RuntimeError),
        (-10, errors.IncompatibleModuleError, ValueError),
        (-11, errors.OutOfMemoryError, MemoryError),
        (-99, errors.UnknownError, RuntimeError),
    ],
)
def test_every_error_code_maps_to_a_typed_exception(code, cls, builtin):
    capi.set_last_error(code, f"code {code}")
    with pytest.raises(cls) as info:
        errors.check("provoked")
    assert isinstance(info.value, builtin) and isinstance(info.value, errors.TaichiError)
    assert info.value.code == code
    assert f"code {code}" in str(info.value)


def test_set_last_error_rejects_bad_input():
    with pytest.raises(TypeError):
        capi.set_last_error("bad")  # type: ignore[arg-type]  # wrong on purpose
    with pytest.raises(TypeError):
        capi.set_last_error(-4, b"bytes")  # type: ignore[arg-type]  # wrong on purpose


# -- archs and runtimes --------------------------------------------------------


def test_available_archs_never_crash_and_are_real():
    archs = capi.get_available_archs()[1]
    assert Arch.X64 in archs or os.uname().machine != "x86_64"
    devices = capi.get_available_devices()
    assert set(devices) == set(archs)
    for a in archs:  # every arch reported can really create a runtime
        rt = capi.create_runtime(a)
        capi.destroy_runtime(rt)
    assert capi.get_available_archs()[1] == archs  # cached, same answer


def test_unavailable_arch_raises_instead_of_crashing():
    status = capi.arch_status()
    missing = [a for a, s in status.items() if not s.available]
    assert missing, "some arch (Metal on Linux at least) is unavailable"
    for a in missing:
        with pytest.raises(errors.NotSupportedError, match=a.name):
            capi.create_runtime(a)


def test_an_unavailable_arch_names_those_that_work_here():
    status = capi.arch_status()
    works = [a.name.lower() for a in ARCH_PREFERENCE if a in status and status[a].available]
    assert works, "x64 works here at least"
    for arch, s in status.items():
        if s.available:
            continue
        with pytest.raises(errors.NotSupportedError) as info:
            capi.create_runtime(arch)
        message = str(info.value)
        assert f"; use one that works here: {', '.join(works)}" in message, message
        assert message.count("python -m taichi_aot archs") == 1, message  # the probe's reason may name it already


def test_create_runtime_bad_input():
    with pytest.raises(errors.InvalidArgumentError):
        capi.create_runtime(12345)
    with pytest.raises(TypeError):
        capi.create_runtime(Arch.X64, "0")  # type: ignore[arg-type]  # wrong on purpose
    with pytest.raises(TypeError):
        capi.create_runtime(None)  # type: ignore[arg-type]  # wrong on purpose
    with pytest.raises(errors.NotSupportedError):  # 1.7.4 supports device 0 only
        capi.create_runtime(Arch.X64, 1)


def test_runtime_lifecycle(arch):
    before = capi.live_handle_count()
    rt = capi.create_runtime(arch)
    assert capi.runtime_arch(rt) == arch
    capi.flush(rt)
    capi.wait(rt)
    capi.destroy_runtime(rt)
    assert capi.live_handle_count() == before
    for fn in (capi.flush, capi.wait, capi.destroy_runtime, capi.get_runtime_capabilities):
        with pytest.raises(errors.ClosedError):
            fn(rt)


def test_capabilities(rt, arch):
    caps = capi.get_runtime_capabilities(rt)
    if arch == Arch.VULKAN:
        assert caps[Capability.SPIRV_VERSION] >= 0x10000
        capi.set_runtime_capabilities_ext(rt, {Capability.SPIRV_VERSION: 0x10300, Capability.SPIRV_HAS_INT64: 1})
        assert capi.get_runtime_capabilities(rt) == {Capability.SPIRV_VERSION: 0x10300, Capability.SPIRV_HAS_INT64: 1}
    else:
        assert caps == {}
    with pytest.raises(errors.InvalidArgumentError):
        capi.set_runtime_capabilities_ext(rt, {9999: 1})
    with pytest.raises(TypeError):
        capi.set_runtime_capabilities_ext(rt, 5)


# -- memory --------------------------------------------------------------------


def test_memory_map_write_read(rt):
    data = np.arange(256, dtype=np.float32)
    mem = host_memory(rt, data.nbytes)
    assert capi.memory_size(rt, mem) == data.nbytes
    write(rt, mem, data)
    np.testing.assert_array_equal(read(rt, mem, np.float32, 256), data)


def test_memory_struct_forms(rt):
    info = ffi.new("TiMemoryAllocateInfo *", {"size": 64, "host_read": 1, "host_write": 1, "usage": 1})
    for form in (info, info[0], {"size": 64, "host_read": 1, "host_write": 1, "usage": 1}):
        mem = capi.allocate_memory(rt, form)
        assert capi.memory_size(rt, mem) == 64
    mem = capi.allocate_memory(rt, {"size": 64, "usage": 1}, host_read=1, host_write=1)
    write(rt, mem, np.full(16, 7, np.int32))
    assert read(rt, mem, np.int32, 16).tolist() == [7] * 16


def test_memory_bad_input(rt):
    with pytest.raises(errors.InvalidArgumentError, match="at least 1 byte"):
        capi.allocate_memory(rt, size=0, usage=1)
    with pytest.raises(errors.OutOfMemoryError):
        capi.allocate_memory(rt, size=1 << 50, usage=1)
    with pytest.raises(TypeError):
        capi.allocate_memory(rt, size="big")
    with pytest.raises(TypeError):
        capi.allocate_memory(rt, no_such_field=1)
    with pytest.raises(ValueError):
        capi.allocate_memory(rt, size=-1)
    with pytest.raises(TypeError):
        capi.allocate_memory("runtime", size=4)
    mem = host_memory(rt, 16)
    with pytest.raises(TypeError):
        capi.map_memory(rt, rt)  # a runtime is no memory
    ptr = capi.map_memory(rt, mem)
    assert ptr != ffi.NULL
    with pytest.raises(errors.InvalidStateError, match="already mapped"):
        capi.map_memory(rt, mem)
    with pytest.raises(errors.InvalidStateError, match="mapped"):
        capi.free_memory(rt, mem)
    capi.unmap_memory(rt, mem)
    with pytest.raises(errors.InvalidStateError, match="not mapped"):
        capi.unmap_memory(rt, mem)


def test_free_memory(rt, arch):
    mem = host_memory(rt, 64)
    if arch == Arch.X64:
        with pytest.raises(errors.NotSupportedError):  # 1.7.4 cannot free on x64
            capi.free_memory(rt, mem)
        write(rt, mem, np.ones(16, np.float32))  # still valid afterwards
        return
    capi.free_memory(rt, mem)
    with pytest.raises(errors.ClosedError):
        capi.map_memory(rt, mem)
    with pytest.raises(errors.ClosedError):
        capi.free_memory(rt, mem)


def test_memory_from_another_runtime_is_refused(arch):
    a = capi.create_runtime(arch)
    b = capi.create_runtime(arch)
    try:
        mem = host_memory(a, 64)
        if arch == Arch.VULKAN:  # x64 numbers memory per runtime, so 0x1 exists in both
            with pytest.raises(errors.ClosedError):
                capi.map_memory(b, mem)
    finally:
        capi.destroy_runtime(a)
        capi.destroy_runtime(b)
    with pytest.raises(errors.ClosedError):
        capi.map_memory(a, mem)


def test_copy_memory_device_to_device(rt, arch):
    src = host_memory(rt, 64)
    dst = host_memory(rt, 64)
    write(rt, src, np.arange(16, dtype=np.int32))
    write(rt, dst, np.zeros(16, np.int32))
    s = {"memory": src, "offset": 16, "size": 32}
    d = {"memory": dst, "offset": 0, "size": 32}
    if arch == Arch.X64:
        with pytest.raises(errors.NotSupportedError):
            capi.copy_memory_device_to_device(rt, d, s)
        return
    capi.copy_memory_device_to_device(rt, d, s)
    capi.wait(rt)
    assert read(rt, dst, np.int32, 16).tolist() == list(range(4, 12)) + [0] * 8
    with pytest.raises(errors.InvalidArgumentError, match="exceeds"):
        capi.copy_memory_device_to_device(rt, d, {"memory": src, "offset": 48, "size": 32})
    with pytest.raises(errors.InvalidArgumentError, match="sizes differ"):
        capi.copy_memory_device_to_device(rt, d, {"memory": src, "offset": 0, "size": 16})


# -- modules and launches ------------------------------------------------------


def test_launch_add_kernel(rt, module):
    n = 1000
    x, y = np.arange(n, dtype=np.float32), np.linspace(0, 1, n, dtype=np.float32)
    mx, my = host_memory(rt, x.nbytes), host_memory(rt, y.nbytes)
    write(rt, mx, x)
    write(rt, my, y)
    add = capi.get_aot_module_kernel(module, "add")
    capi.launch_kernel(rt, add, [nd(mx, (n,)), nd(my, (n,)), 2.5])
    capi.wait(rt)
    np.testing.assert_allclose(read(rt, mx, np.float32, n), x + np.float32(2.5) * y, rtol=1e-6)
    # the same launch from a pre-packed cffi array
    args = capi.pack_arguments([nd(mx, (n,)), nd(my, (n,)), {"type": ArgumentType.F32, "value": {"f32": -1.0}}])
    capi.launch_kernel(rt, add, args)
    capi.wait(rt)
    np.testing.assert_allclose(read(rt, mx, np.float32, n), x + np.float32(1.5) * y, rtol=1e-6)


def test_launch_2d_i32(rt, module):
    mem = host_memory(rt, 6 * 7 * 4)
    k = capi.get_aot_module_kernel(module, "fill_i32")
    capi.launch_kernel(rt, k, [nd(mem, (6, 7), DataType.I32), 5])
    capi.wait(rt)
    expected = 5 + np.arange(6)[:, None] * 100 + np.arange(7)[None, :]
    np.testing.assert_array_equal(read(rt, mem, np.int32, 42).reshape(6, 7), expected)


def test_tensor_arguments(rt, module):
    n = 8
    mem = host_memory(rt, n * 3 * 4)
    k = capi.get_aot_module_kernel(module, "scale_vec3")
    contents = {"length": 3, "data": {"x32": [0] * 32}}
    s = {"type": ArgumentType.TENSOR, "value": {"tensor": {"type": F32, "contents": contents}}}
    arg = capi.pack_arguments([nd(mem, (n,), F32, (3,)), s])
    vec = np.array([1.5, -2.0, 0.25], np.float32)
    ffi.memmove(arg[1].value.tensor.contents.data.x32, vec.tobytes(), 12)
    capi.launch_kernel(rt, k, arg)
    capi.wait(rt)
    expected = vec[None, :] * np.arange(1, n + 1, dtype=np.float32)[:, None]
    np.testing.assert_allclose(read(rt, mem, np.float32, n * 3).reshape(n, 3), expected)

    m = np.array([[0.0, 1.0], [2.0, 3.0]], np.float32)
    mats = np.arange(n * 4, dtype=np.float32).reshape(n, 2, 2)
    mm = host_memory(rt, mats.nbytes)
    write(rt, mm, mats)
    tensor = {"type": ArgumentType.TENSOR, "value": {"tensor": {"type": F32, "contents": {"length": 4}}}}
    t = capi.pack_arguments([nd(mm, (n,), F32, (2, 2)), tensor])
    ffi.memmove(t[1].value.tensor.contents.data.x32, m.tobytes(), 16)
    capi.launch_kernel(rt, capi.get_aot_module_kernel(module, "mat_apply"), t)
    capi.wait(rt)
    np.testing.assert_allclose(read(rt, mm, np.float32, n * 4).reshape(n, 2, 2), m @ mats)


def scalar(dtype, value):
    """A typed-scalar TiArgument: the C-API takes i16 and u16 in x16, f16 as an f32 in x32."""
    if dtype == np.float16:
        bits = int(np.array([value], np.float32).view(np.uint32)[0])
        return {"type": ArgumentType.SCALAR, "value": {"scalar": {"type": DataType.F16, "value": {"x32": bits}}}}
    code = {np.int16: DataType.I16, np.uint16: DataType.U16}[dtype]
    bits = int(np.array([value], dtype).view(np.uint16)[0])
    return {"type": ArgumentType.SCALAR, "value": {"scalar": {"type": code, "value": {"x16": bits}}}}


def test_typed_scalar_arguments(rt, module):
    out = host_memory(rt, 4 * 8)
    k = capi.get_aot_module_kernel(module, "typed_scalars")
    args = [nd(out, (4,), DataType.F64), scalar(np.int16, -1234), scalar(np.uint16, 60000), scalar(np.float16, 0.5), -7]
    capi.launch_kernel(rt, k, args)
    capi.wait(rt)
    np.testing.assert_array_equal(read(rt, out, np.float64, 4), [-1234, 60000, 0.5, -7])
    # the C-API passes no other scalar type: refused before C with the list of what works
    bad = {"type": ArgumentType.SCALAR, "value": {"scalar": {"type": DataType.F64, "value": {"x64": 0}}}}
    with pytest.raises(errors.NotSupportedError, match="I16, U16, F16"):
        capi.launch_kernel(rt, k, [args[0], bad, args[2], args[3], args[4]])


def test_f16_u8_i64_kernels(rt, module):
    h = np.array([1.0, 2.0, -3.5, 0.25], np.float16)
    mh = host_memory(rt, 8)
    write(rt, mh, h)
    half_scale = capi.get_aot_module_kernel(module, "half_scale")
    capi.launch_kernel(rt, half_scale, [nd(mh, (4,), DataType.F16), scalar(np.float16, 2.0)])
    mu = host_memory(rt, 300)
    capi.launch_kernel(rt, capi.get_aot_module_kernel(module, "iota_u8"), [nd(mu, (300,), DataType.U8)])
    vals = np.arange(1, 101, dtype=np.int64) * (2**33)
    mi, mo = host_memory(rt, vals.nbytes), host_memory(rt, 8)
    write(rt, mi, vals)
    write(rt, mo, np.zeros(1, np.int64))
    sum_i64 = capi.get_aot_module_kernel(module, "sum_i64")
    capi.launch_kernel(rt, sum_i64, [nd(mi, (100,), DataType.I64), nd(mo, (1,), DataType.I64)])
    capi.wait(rt)
    np.testing.assert_array_equal(read(rt, mh, np.float16, 4), h * np.float16(2))
    np.testing.assert_array_equal(read(rt, mu, np.uint8, 300), (np.arange(300) % 256).astype(np.uint8))
    assert read(rt, mo, np.int64, 1)[0] == vals.sum()


def test_compute_graph(rt, module):
    n = 64
    x, y = np.arange(n, dtype=np.float32), np.full(n, 0.5, np.float32)
    mx, my = host_memory(rt, x.nbytes), host_memory(rt, y.nbytes)
    write(rt, mx, x)
    write(rt, my, y)
    g = capi.get_aot_module_compute_graph(module, "add_twice")
    capi.launch_compute_graph(rt, g, {"x": nd(mx, (n,)), "y": nd(my, (n,)), "a": 3.0})
    capi.wait(rt)
    np.testing.assert_allclose(read(rt, mx, np.float32, n), x + 3.0)
    capi.launch_compute_graph(rt, g, [("x", nd(mx, (n,))), ("y", nd(my, (n,))), ("a", 1.0)])
    capi.wait(rt)
    np.testing.assert_allclose(read(rt, mx, np.float32, n), x + 4.0)
    with pytest.raises(errors.ArgumentNotFoundError, match="y"):
        capi.launch_compute_graph(rt, g, {"x": nd(mx, (n,)), "a": 1.0})
    with pytest.raises(TypeError):
        capi.launch_compute_graph(rt, g, 5)
    with pytest.raises(TypeError):
        capi.launch_compute_graph(rt, g, {1: 2})


def test_unknown_names_raise_keyerror_on_every_arch(module):
    for getter in (capi.get_aot_module_kernel, capi.get_aot_module_compute_graph):
        with pytest.raises(errors.NameNotFoundError) as info:
            getter(module, "no_such_thing")
        assert isinstance(info.value, KeyError)
        assert "no_such_thing" in str(info.value)
        with pytest.raises(errors.NameNotFoundError):
            getter(module, "")
        with pytest.raises(TypeError):
            getter(module, 3)  # type: ignore[arg-type]  # wrong on purpose
    # a failed lookup leaves nothing pending: the next call is clean
    capi.get_aot_module_kernel(module, "add")
    assert lib.ti_get_last_error(ffi.NULL, ffi.NULL) == 0


def test_launch_bad_arguments(rt, module):
    add = capi.get_aot_module_kernel(module, "add")
    small = host_memory(rt, 16)
    big = host_memory(rt, 4096)
    with pytest.raises(errors.InvalidArgumentError, match="needs 4000 bytes but its memory holds 16"):
        capi.launch_kernel(rt, add, [nd(small, (1000,)), nd(big, (1000,)), 1.0])
    with pytest.raises(errors.InvalidArgumentError, match="i32"):
        capi.launch_kernel(rt, add, [2**40])
    with pytest.raises(TypeError, match="bool"):
        capi.launch_kernel(rt, add, [True])
    with pytest.raises(TypeError):
        capi.launch_kernel(rt, add, ["text"])
    with pytest.raises(TypeError):
        capi.launch_kernel(rt, add, 5)
    with pytest.raises(errors.InvalidArgumentError):
        capi.launch_kernel(rt, add, [{"type": 77, "value": {"i32": 0}}])
    with pytest.raises(errors.InvalidArgumentError, match="dims"):
        too_many = {"ndarray": {"memory": big, "shape": {"dim_count": 17}}}
        capi.launch_kernel(rt, add, [{"type": ArgumentType.NDARRAY, "value": too_many}])
    with pytest.raises(TypeError):
        capi.launch_kernel(rt, module, [])  # a module is no kernel


def test_load_module_errors(rt, arch, modules, tmp_path):
    with pytest.raises(errors.MissingFileError):  # and so a FileNotFoundError, as in the object layer
        capi.load_aot_module(rt, str(tmp_path / "missing"))
    shutil.copytree(modules.path(arch), tmp_path / "physics")
    with pytest.raises(errors.MissingFileError, match=f"did you mean {re.escape(repr(str(tmp_path / 'physics')))}"):
        capi.load_aot_module(rt, str(tmp_path / "physcs"))  # the nearest module of the folder named
    (tmp_path / "empty").mkdir()
    with pytest.raises(errors.CorruptedDataError):
        capi.load_aot_module(rt, str(tmp_path / "empty"))
    with pytest.raises(TypeError):
        capi.load_aot_module(rt, 42)  # type: ignore[arg-type]  # wrong on purpose
    with pytest.raises(errors.CorruptedDataError):
        capi.create_aot_module(rt, b"")
    with pytest.raises(errors.CorruptedDataError):
        capi.create_aot_module(rt, b"PK\x03\x04" + b"\x00" * 64)
    with pytest.raises(TypeError):
        capi.create_aot_module(rt, "not bytes")  # type: ignore[arg-type]  # wrong on purpose
    tcm = modules.path(arch, tcm=True)
    data = Path(tcm).read_bytes()
    if arch == Arch.X64:
        # 1.7.4 segfaults loading a .tcm path on x64 and refuses .tcm bytes
        with pytest.raises(errors.NotSupportedError, match="folder"):
            capi.load_aot_module(rt, tcm)
        with pytest.raises(errors.NotSupportedError):
            capi.create_aot_module(rt, data)
    else:
        for mod in (capi.load_aot_module(rt, tcm), capi.create_aot_module(rt, data)):
            assert capi.get_aot_module_kernel(mod, "add") != ffi.NULL
            capi.destroy_aot_module(mod)


def test_flat_api_refuses_what_crashes_the_library(rt, arch, modules, tmp_path):
    # the same checks as the object layer, before C: garbage metadata (x64: SIGSEGV in 1.7.4), damaged
    # SPIR-V (Vulkan: loads, then the launch segfaults), another backend's module
    import shutil

    garbage = tmp_path / "garbage"
    shutil.copytree(modules.path(arch), garbage)
    for name in os.listdir(garbage):
        if name.startswith("metadata"):
            (garbage / name).write_bytes(b"\x00\xff garbage " * 64)
    with pytest.raises(errors.CorruptedDataError):
        capi.load_aot_module(rt, str(garbage))
    if arch == Arch.VULKAN:
        damaged = tmp_path / "damaged"
        shutil.copytree(modules.path(arch), damaged)
        spv = damaged / next(n for n in os.listdir(damaged) if n.startswith("add_") and n.endswith(".spv"))
        spv.write_bytes(spv.read_bytes()[: len(spv.read_bytes()) // 2])
        with pytest.raises(errors.CorruptedDataError):
            capi.load_aot_module(rt, str(damaged))
    other = Arch.VULKAN if arch == Arch.X64 else Arch.X64
    with pytest.raises(errors.IncompatibleModuleError):
        capi.load_aot_module(rt, modules.path(other))
    with pytest.raises(errors.IncompatibleModuleError):
        capi.create_aot_module(rt, Path(modules.path(other, tcm=True)).read_bytes())


def test_flat_api_tells_memory_of_another_runtime_apart(arch, modules):
    # x64 numbers memory 1, 2, ... in every runtime: a handle of another runtime with the same value
    # used to pass and compute with this runtime's memory (8.0 instead of 5.0)
    def ndarray(memory):
        return {"type": ArgumentType.NDARRAY, "value": {"ndarray": {
            "memory": memory, "shape": {"dim_count": 1, "dims": [4]}, "elem_shape": {"dim_count": 0},
            "elem_type": DataType.F32}}}

    a, b = capi.create_runtime(arch), capi.create_runtime(arch)
    try:
        mems = {}
        for rt in (a, b):
            for name in ("x", "y"):
                m = capi.allocate_memory(rt, size=16, host_read=True, host_write=True, usage=MemoryUsage.STORAGE)
                ptr = capi.map_memory(rt, m)
                ffi.cast("float *", ptr)[0:4] = [1.0 if name == "x" else (2.0 if rt == a else 9.0)] * 4
                capi.unmap_memory(rt, m)
                mems[rt, name] = m
        kernel = capi.get_aot_module_kernel(capi.load_aot_module(a, modules.path(arch)), "add")
        same_values = mems[a, "y"] == mems[b, "y"]
        if same_values:  # x64: the values repeat; the object tells them apart
            with pytest.raises(errors.InvalidArgumentError, match="more than one runtime"):
                capi.launch_kernel(a, kernel, [ndarray(mems[a, "x"]), ndarray(mems[b, "y"]), 2.0])
        else:  # Vulkan: the values differ; another runtime's memory is not alive here
            with pytest.raises(errors.ClosedError):
                capi.launch_kernel(a, kernel, [ndarray(mems[a, "x"]), ndarray(mems[b, "y"]), 2.0])
        capi.launch_kernel(a, kernel, [ndarray(mems[a, "x"]), ndarray(mems[a, "y"]), 2.0])
        capi.wait(a)
        ptr = capi.map_memory(a, mems[a, "x"])
        assert list(ffi.cast("float *", ptr)[0:4]) == [5.0] * 4
        capi.unmap_memory(a, mems[a, "x"])
    finally:
        capi.destroy_runtime(b)
        capi.destroy_runtime(a)


def test_module_lifetimes(rt, arch, modules):
    mod = capi.load_aot_module(rt, modules.path(arch))
    k = capi.get_aot_module_kernel(mod, "add")
    g = capi.get_aot_module_compute_graph(mod, "add_twice")
    capi.destroy_aot_module(mod)
    with pytest.raises(errors.ClosedError):
        capi.launch_kernel(rt, k, [])
    with pytest.raises(errors.ClosedError):
        capi.launch_compute_graph(rt, g, {})
    with pytest.raises(errors.ClosedError):
        capi.get_aot_module_kernel(mod, "add")
    with pytest.raises(errors.ClosedError):
        capi.destroy_aot_module(mod)
    mod = capi.load_aot_module(rt, modules.path(arch))
    k = capi.get_aot_module_kernel(mod, "add")
    mem = host_memory(rt, 64)
    capi.destroy_runtime(rt)  # children die with the runtime
    for call in (lambda: capi.get_aot_module_kernel(mod, "add"), lambda: capi.map_memory(rt, mem),
                 lambda: capi.launch_kernel(rt, k, [])):
        with pytest.raises(errors.ClosedError):
            call()


def test_kernel_of_another_runtime_is_refused(arch, modules):
    a, b = capi.create_runtime(arch), capi.create_runtime(arch)
    try:
        k = capi.get_aot_module_kernel(capi.load_aot_module(a, modules.path(arch)), "add")
        with pytest.raises(errors.InvalidArgumentError, match="another runtime"):
            capi.launch_kernel(b, k, [])
    finally:
        capi.destroy_runtime(a)
        capi.destroy_runtime(b)


# -- images, samplers, textures -------------------------------------------------


def image_info(w=16, h=8, fmt=None):
    from taichi_aot import Format, ImageUsage

    return {
        "dimension": ImageDimension.DIM_2D,
        "extent": {"width": w, "height": h, "depth": 1, "array_layer_count": 1},
        "mip_level_count": 1,
        "format": fmt if fmt is not None else Format.R32F,
        "usage": ImageUsage.STORAGE | ImageUsage.SAMPLED,
    }


def texture(image, w=16, h=8):
    from taichi_aot import Format

    return {
        "type": ArgumentType.TEXTURE,
        "value": {"texture": {"image": image, "dimension": ImageDimension.DIM_2D,
                              "extent": {"width": w, "height": h, "depth": 1, "array_layer_count": 1},
                              "format": Format.R32F}},
    }


def test_images_unsupported_on_x64():
    require = capi.create_runtime(Arch.X64)
    try:
        with pytest.raises(errors.NotSupportedError):
            capi.allocate_image(require, image_info())
    finally:
        capi.destroy_runtime(require)


def test_texture_kernels_and_image_copy(vulkan, modules):
    rt = capi.create_runtime(vulkan)
    try:
        mod = capi.load_aot_module(rt, modules.path(vulkan))
        img = capi.allocate_image(rt, image_info())
        capi.transition_image(rt, img, ImageLayout.SHADER_READ_WRITE)
        capi.launch_kernel(rt, capi.get_aot_module_kernel(mod, "tex_write"), [texture(img), 0.5, 16, 8])
        out = host_memory(rt, 16 * 8 * 4)
        capi.launch_kernel(rt, capi.get_aot_module_kernel(mod, "tex_read"), [texture(img), nd(out, (16, 8))])
        capi.wait(rt)
        expected = 0.5 + np.arange(16)[:, None] * 10.0 + np.arange(8)[None, :]
        np.testing.assert_allclose(read(rt, out, np.float32, 128).reshape(16, 8), expected)

        img2 = capi.allocate_image(rt, image_info())
        capi.track_image(rt, img2, ImageLayout.UNDEFINED)
        extent = {"width": 16, "height": 8, "depth": 1, "array_layer_count": 1}
        region = {"offset": {}, "extent": extent, "mip_level": 0}
        capi.copy_image_device_to_device(rt, {**region, "image": img2}, {**region, "image": img})
        capi.launch_kernel(rt, capi.get_aot_module_kernel(mod, "tex_read"), [texture(img2), nd(out, (16, 8))])
        capi.wait(rt)
        np.testing.assert_allclose(read(rt, out, np.float32, 128).reshape(16, 8), expected)

        capi.free_image(rt, img2)
        with pytest.raises(errors.ClosedError):
            capi.launch_kernel(rt, capi.get_aot_module_kernel(mod, "tex_read"), [texture(img2), nd(out, (16, 8))])
        with pytest.raises(errors.ClosedError):
            capi.free_image(rt, img2)
        with pytest.raises(errors.InvalidArgumentError, match="zero"):
            capi.allocate_image(rt, image_info(w=0))
        with pytest.raises(errors.InvalidArgumentError):
            capi.transition_image(rt, img, 999)
    finally:
        capi.destroy_runtime(rt)


def test_sampler_is_not_implemented_by_the_library(rt):
    with pytest.raises(errors.NotSupportedError):
        capi.create_sampler(rt, mag_filter=0, min_filter=0, address_mode=0, max_anisotropy=1.0)


# -- interop ---------------------------------------------------------------------


def test_cpu_interop(modules):
    rt = capi.create_runtime(Arch.X64)
    try:
        mod = capi.load_aot_module(rt, modules.path(Arch.X64))
        host = np.zeros((6, 7), np.int32)
        mem = capi.import_cpu_memory(rt, host.ctypes.data, host.nbytes)
        capi.launch_kernel(rt, capi.get_aot_module_kernel(mod, "fill_i32"), [nd(mem, (6, 7), DataType.I32), 1])
        capi.wait(rt)
        np.testing.assert_array_equal(host, 1 + np.arange(6)[:, None] * 100 + np.arange(7)[None, :])
        info = capi.export_cpu_memory(rt, mem)
        assert info.size == host.nbytes and int(ffi.cast("uintptr_t", info.ptr)) == host.ctypes.data
        for bad in (lambda: capi.import_cpu_memory(rt, 0, 16), lambda: capi.import_cpu_memory(rt, "p", 16),
                    lambda: capi.import_cpu_memory(rt, host.ctypes.data, 0)):
            with pytest.raises((TypeError, ValueError)):
                bad()
        for call in (lambda: capi.export_cuda_memory(rt, mem), lambda: capi.export_vulkan_memory(rt, mem),
                     lambda: capi.export_opengl_memory(rt, mem), lambda: capi.export_vulkan_runtime(rt)):
            with pytest.raises(errors.NotSupportedError):
                call()
    finally:
        capi.destroy_runtime(rt)


def test_vulkan_interop(vulkan):
    rt = capi.create_runtime(vulkan)
    try:
        info = capi.export_vulkan_runtime(rt)
        assert info.instance != ffi.NULL and info.device != ffi.NULL and info.compute_queue != ffi.NULL
        mem = host_memory(rt, 256)
        minfo = capi.export_vulkan_memory(rt, mem)
        assert minfo.buffer != ffi.NULL and minfo.size == 256
        with pytest.raises(errors.NotSupportedError):
            capi.export_cpu_memory(rt, mem)
        with pytest.raises(errors.ArgumentNullError):
            capi.import_vulkan_runtime({})
        with pytest.raises(errors.ArgumentNullError):
            capi.import_vulkan_memory(rt, {"size": 16})
        # a second Taichi runtime sharing this Vulkan device
        shared = capi.import_vulkan_runtime(info)
        capi.wait(shared)
        capi.destroy_runtime(shared)
    finally:
        capi.destroy_runtime(rt)
    ext = capi.create_vulkan_runtime_ext(1 << 22 | 2 << 12, [], [])  # Vulkan 1.2
    assert capi.runtime_arch(ext) == Arch.VULKAN
    capi.destroy_runtime(ext)
    with pytest.raises(TypeError):
        capi.create_vulkan_runtime_ext(1 << 22, "VK_KHR_surface", [])


def test_cuda_stream_functions_need_cuda():
    if Arch.CUDA in capi.get_available_archs()[1]:
        rt = capi.create_runtime(Arch.CUDA)
        capi.set_cuda_stream(None)
        assert capi.get_cuda_stream() == ffi.NULL
        capi.destroy_runtime(rt)
    else:  # the library aborts the process here without CUDA
        with pytest.raises(errors.NotSupportedError):
            capi.set_cuda_stream(None)
        with pytest.raises(errors.NotSupportedError):
            capi.get_cuda_stream()
    with pytest.raises(TypeError):
        capi.set_cuda_stream("stream")


def test_unavailable_interop_runtimes_raise():
    if Arch.OPENGL not in capi.get_available_archs()[1]:
        with pytest.raises(errors.NotSupportedError):
            capi.import_opengl_runtime({"get_proc_addr": ffi.NULL})
