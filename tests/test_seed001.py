"""The flat API against the design document it follows (seed 001): its names, parameters and return types, its
behaviour, a client written as the document shows walking all 29 functions, and its forms given bad input."""

from __future__ import annotations

import contextlib
from pathlib import Path

import numpy as np
import pytest
import seed_client as own_structures

from capi_args import read
from taichi_aot import (
    Arch,
    ArgumentType,
    Capability,
    DataType,
    Error,
    Format,
    ImageDimension,
    ImageLayout,
    ImageUsage,
    capi,
    errors,
)
from taichi_aot._native import ffi

# -- conformance with the design document of the flat API (seed 001) ------------------------------------

SEED_001 = [  # name, parameters in order, return annotation, as the design document gives them
    ("get_version", [], "int"),
    ("get_last_error", [], "str"),
    ("create_runtime", ["arch", "device"], "Any"),
    ("get_available_archs", [], "tuple[list[int], list[Arch]]"),
    ("destroy_runtime", ["runtime"], "None"),
    ("set_last_error", ["error", "message"], "None"),
    ("allocate_memory", ["runtime", "allocate_info"], "Any"),
    ("free_memory", ["runtime", "memory"], "None"),
    ("map_memory", ["runtime", "memory"], "int"),
    ("unmap_memory", ["runtime", "memory"], "None"),
]


@pytest.mark.parametrize(("name", "params", "returns"), SEED_001, ids=[s[0] for s in SEED_001])
def test_seed_001_names_parameters_and_return_types(name, params, returns):
    import inspect

    fn = getattr(capi, name)
    signature = inspect.signature(fn)
    positional = [p.name for p in signature.parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    assert positional == params
    assert signature.return_annotation == returns


def test_seed_001_behaviour(arch, modules):
    import ctypes

    values, archs = capi.get_available_archs()
    assert values == [int(a) for a in archs] and all(isinstance(v, int) for v in values) and arch in archs
    rt = capi.create_runtime(arch, 0)
    try:
        capi.set_last_error(Error.INVALID_ARGUMENT, "seed")
        assert capi.get_last_error() == "seed"
        capi.clear_last_error()
        with pytest.raises(errors.InvalidArgumentError):  # an error of the library itself ...
            capi.allocate_memory(rt, size=0, usage=1)
        with pytest.raises(errors.NameNotFoundError):
            capi.get_aot_module_kernel(capi.load_aot_module(rt, modules.path(arch)), "no_such_kernel")
        assert "no_such_kernel" in capi.get_last_error()  # ... stays readable after the call raised it

        class AllocateInfo(ctypes.Structure):  # what a ctypes caller holds: the C layout
            _fields_ = [("size", ctypes.c_uint64), ("host_write", ctypes.c_uint32), ("host_read", ctypes.c_uint32),
                        ("export_sharing", ctypes.c_uint32), ("usage", ctypes.c_uint32)]

        mem = capi.allocate_memory(rt, AllocateInfo(size=16, host_write=1, host_read=1, usage=1))
        address = capi.map_memory(rt, mem)
        view = (ctypes.c_float * 4).from_address(ctypes.c_void_p(address).value)
        view[:] = [1.0, 2.0, 3.0, 4.0]
        capi.unmap_memory(rt, mem)
        address = capi.map_memory(rt, mem)
        assert list(ffi.cast("float *", address)[0:4]) == [1.0, 2.0, 3.0, 4.0]
        capi.unmap_memory(rt, mem)
        class Small(ctypes.Structure):
            _fields_ = [("size", ctypes.c_uint64)]

        with pytest.raises(TypeError, match="not a TiMemoryAllocateInfo"):
            capi.allocate_memory(rt, Small(size=16))
        # a ctypes array of TiArgument, C layout, for a launch (a cffi structure takes a handle's cffi pointer: cdata)
        module = capi.load_aot_module(rt, modules.path(arch))
        kernel = capi.get_aot_module_kernel(module, "add")
        size = ffi.sizeof("TiArgument")
        args = (ctypes.c_uint8 * (3 * size))()
        nd = {"ndarray": {"memory": mem.cdata, "shape": {"dim_count": 1, "dims": [4]}, "elem_shape": {"dim_count": 0},
                          "elem_type": DataType.F32}}
        cffi_args = ffi.new("TiArgument[]", [{"type": ArgumentType.NDARRAY, "value": nd},
                                             {"type": ArgumentType.NDARRAY, "value": nd},
                                             {"type": ArgumentType.F32, "value": {"f32": 1.0}}])
        ctypes.memmove(args, bytes(ffi.buffer(cffi_args)), 3 * size)

        class TiArgument(ctypes.Structure):
            _fields_ = [("raw", ctypes.c_uint8 * size)]

        as_structs = (TiArgument * 3).from_buffer(args)
        capi.launch_kernel(rt, kernel, as_structs)
        capi.wait(rt)
        address = capi.map_memory(rt, mem)
        assert list(ffi.cast("float *", address)[0:4]) == [2.0, 4.0, 6.0, 8.0]  # x += 1.0 * x
        capi.unmap_memory(rt, mem)
        assert capi.track_image_ext is capi.track_image
    finally:
        capi.destroy_runtime(rt)


def test_own_structures_have_the_c_layout():
    import ctypes

    for name, cls in vars(own_structures).items():
        if isinstance(cls, type) and issubclass(cls, (ctypes.Structure, ctypes.Union)):
            assert ctypes.sizeof(cls) == ffi.sizeof(name), name
            fields = [f for f, *_ in cls._fields_]
            assert [getattr(cls, f).offset for f in fields] == [ffi.offsetof(name, f) for f in fields], name


@pytest.mark.parametrize("own", [False, True], ids=["capi_structures", "own_structures"])
def test_seed_001_client_walks_all_29_functions(arch, modules, own):
    """A client written as the design document shows: ctypes structures around the handles the library returns
    (the package's, or the client's own plain ctypes ones, whose handle fields are c_void_p), C's arities (num_args
    and arrays), the documented keywords, the documented return shapes. Each of the 29 functions is called; where
    1.7.4 cannot do a thing on an arch, the answer is the typed error the library's own refusal becomes."""
    import ctypes

    from taichi_aot import capi as structures

    s = own_structures if own else structures
    names = (b"x", b"y", b"a") if own else ("x", b"y", "a")  # c_char_p takes bytes; the package's take str too

    called = set()

    def call(name, *args, **kwargs):
        called.add(name)
        return getattr(capi, name)(*args, **kwargs)

    gfx = arch == Arch.VULKAN
    assert call("get_version") == 1007000
    values, archs = call("get_available_archs")
    assert arch in archs
    rt = call("create_runtime", arch, 0)
    try:
        call("set_last_error", Error.INVALID_ARGUMENT, "client")
        assert call("get_last_error") == "client"
        capi.clear_last_error()
        caps = call("get_runtime_capabilities", rt)  # a list of the package's s.TiCapabilityLevelInfo
        assert all(isinstance(c, structures.TiCapabilityLevelInfo) for c in caps)
        if gfx:
            call("set_runtime_capabilities_ext", rt,
                 [s.TiCapabilityLevelInfo(capability=Capability.SPIRV_VERSION, level=0x10300)])
            assert [(c.capability, c.level) for c in capi.get_runtime_capabilities(rt)] == [(1, 0x10300)]
        else:
            call("set_runtime_capabilities_ext", rt, [])

        n = 16
        info = s.TiMemoryAllocateInfo(size=4 * n, host_write=1, host_read=1, export_sharing=0, usage=1)
        x, y = call("allocate_memory", rt, info), call("allocate_memory", rt, info)
        for mem, values in ((x, np.zeros(n, np.float32)), (y, np.arange(n, dtype=np.float32))):
            address = call("map_memory", rt, mem)
            ctypes.memmove(address, values.ctypes.data, values.nbytes)
            call("unmap_memory", rt, mem)

        def ndarray(mem):
            shape = s.TiNdShape(dim_count=1, dims=(ctypes.c_uint32 * 16)(n))
            value = s.TiArgumentValue(ndarray=s.TiNdArray(memory=mem, shape=shape, elem_shape=s.TiNdShape(dim_count=0),
                                                      elem_type=DataType.F32))
            return s.TiArgument(type=ArgumentType.NDARRAY, value=value)

        f32 = s.TiArgument(type=ArgumentType.F32, value=s.TiArgumentValue(f32=2.0))
        module = call("load_aot_module", rt, filepath=modules.path(arch))
        kernel = call("get_aot_module_kernel", module, "add")
        args = [ndarray(x), ndarray(y), f32]
        call("launch_kernel", rt, kernel, len(args), (s.TiArgument * len(args))(*args))
        call("flush", rt)
        call("wait", rt)
        np.testing.assert_array_equal(read(rt, x, np.float32, n), 2.0 * np.arange(n))
        graph = call("get_aot_module_compute_graph", module, "add_twice")
        named = [s.TiNamedArgument(name=name, argument=arg) for name, arg in zip(names, (ndarray(x), ndarray(y), f32))]
        call("launch_compute_graph", rt, graph, len(named), (s.TiNamedArgument * len(named))(*named))
        call("wait", rt)
        np.testing.assert_array_equal(read(rt, x, np.float32, n), 6.0 * np.arange(n))

        half = 4 * n // 2
        if gfx:  # copies on the device: the documented keywords mean what they say
            call("copy_memory_device_to_device", rt, src=s.TiMemorySlice(memory=y, offset=0, size=half),
                 dst=s.TiMemorySlice(memory=x, offset=half, size=half))
            call("wait", rt)
            np.testing.assert_array_equal(read(rt, x, np.float32, n)[n // 2:], np.arange(n // 2))
        else:
            with pytest.raises(errors.NotSupportedError):
                call("copy_memory_device_to_device", rt, src=s.TiMemorySlice(memory=y, offset=0, size=half),
                     dst=s.TiMemorySlice(memory=x, offset=half, size=half))

        data = Path(modules.path(arch, tcm=True)).read_bytes()
        buffer = ctypes.create_string_buffer(data, len(data))
        if gfx:
            second = call("create_aot_module", rt, ctypes.cast(buffer, ctypes.c_void_p), len(data))
            assert call("get_aot_module_kernel", second, "add") is not None
            call("destroy_aot_module", second)
        else:
            with pytest.raises(errors.NotSupportedError):
                call("create_aot_module", rt, ctypes.cast(buffer, ctypes.c_void_p), len(data))
        call("destroy_aot_module", module)

        extent = s.TiImageExtent(width=8, height=8, depth=1, array_layer_count=1)
        image_info = s.TiImageAllocateInfo(dimension=ImageDimension.DIM_2D, extent=extent, mip_level_count=1,
                                         format=Format.R32F, export_sharing=0, usage=ImageUsage.STORAGE)
        if gfx:
            a, b = call("allocate_image", rt, image_info), call("allocate_image", rt, image_info)
            call("transition_image", rt, a, ImageLayout.TRANSFER_SRC)
            call("track_image_ext", rt, a, ImageLayout.TRANSFER_SRC)
            whole = {"offset": s.TiImageOffset(), "extent": extent, "mip_level": 0}
            call("copy_image_device_to_device", rt, src=s.TiImageSlice(image=a, **whole),
                 dst=s.TiImageSlice(image=b, **whole))
            call("wait", rt)
            call("free_image", rt, a)
            call("free_image", rt, b)
        else:
            with pytest.raises(errors.TaichiError):
                call("allocate_image", rt, image_info)
            for name in ("free_image", "transition_image", "track_image_ext", "copy_image_device_to_device"):
                called.add(name)  # nothing to pass them on the CPU: checked on Vulkan
        with pytest.raises(errors.NotSupportedError):  # no backend of 1.7.4 makes samplers
            call("create_sampler", rt, s.TiSamplerCreateInfo(mag_filter=0, min_filter=0, address_mode=0,
                                                           max_anisotropy=1.0))
        called.add("destroy_sampler")
        with pytest.raises(errors.TaichiError):
            call("destroy_sampler", rt, ffi.NULL)
        with contextlib.suppress(errors.NotSupportedError):  # x64 cannot free
            call("free_memory", rt, y)
    finally:
        call("destroy_runtime", rt)
    assert len(called) == 29, sorted(called)


def test_seed_001_forms_refuse_bad_input(flat_rt, arch, modules):
    """The C arities and document keywords the flat API takes are checked: each mistake is a typed error."""
    rt = flat_rt
    import ctypes

    from taichi_aot.capi import TiArgument, TiArgumentValue, TiCapabilityLevelInfo, TiMemorySlice

    module = capi.load_aot_module(rt, filepath=modules.path(arch))
    kernel = capi.get_aot_module_kernel(module, "add")
    graph = capi.get_aot_module_compute_graph(module, "add_twice")
    one = (TiArgument * 1)(TiArgument(type=ArgumentType.F32, value=TiArgumentValue(f32=1.0)))
    for count in (2, -1):  # more than given, negative
        with pytest.raises(errors.InvalidArgumentError, match="count"):
            capi.launch_kernel(rt, kernel, count, one)
    for count in (True, 1.0, "1"):
        with pytest.raises(errors.ArgumentTypeError, match="count"):
            capi.launch_kernel(rt, kernel, count, one)
    with pytest.raises(errors.ArgumentTypeError):
        capi.launch_kernel(rt, kernel, 1, 5)  # a count for something that is no array
    with pytest.raises(errors.InvalidArgumentError, match="agree"):
        capi.launch_compute_graph(rt, graph, 1, {"x": 1.0, "a": 1.0})  # a mapping is taken whole
    with pytest.raises(errors.ArgumentTypeError, match="once"):
        capi.load_aot_module(rt, modules.path(arch), module_path=modules.path(arch))
    with pytest.raises(errors.ArgumentTypeError, match="once"):
        capi.load_aot_module(rt)
    data = b"PK" + b"\0" * 30
    with pytest.raises(errors.InvalidArgumentError, match="size"):
        capi.create_aot_module(rt, data, len(data) + 1)
    with pytest.raises(errors.InvalidArgumentError, match="size"):
        capi.create_aot_module(rt, data, -1)
    with pytest.raises(errors.ArgumentTypeError, match="size"):
        capi.create_aot_module(rt, ctypes.c_void_p(1), None)  # a pointer needs its size
    with pytest.raises(errors.InvalidArgumentError, match="NULL"):
        capi.create_aot_module(rt, ctypes.c_void_p(None), 16)
    with pytest.raises(errors.ArgumentTypeError, match="bytes-like"):
        capi.create_aot_module(rt, 12345, 16)  # a bare int is no pointer it takes
    mem = capi.allocate_memory(rt, size=16, usage=1, host_read=True, host_write=True)
    whole = TiMemorySlice(memory=mem, offset=0, size=16)
    with pytest.raises(errors.ArgumentTypeError, match="twice"):
        capi.copy_memory_device_to_device(rt, whole, whole, dst=whole)
    with pytest.raises(errors.ArgumentTypeError, match="destination and a source"):
        capi.copy_memory_device_to_device(rt, src=whole)

    class Other(ctypes.Union):
        _fields_ = [("x", ctypes.c_uint32)]

    with pytest.raises(errors.ArgumentTypeError):
        capi.set_runtime_capabilities_ext(rt, [Other()])
    with pytest.raises(errors.TaichiError):
        capi.set_runtime_capabilities_ext(rt, [TiCapabilityLevelInfo(capability=9999, level=1)])


def test_handles_are_ints_that_keep_their_type(flat_rt, arch):
    """A handle of the flat API is an int (its value: what a c_void_p field takes) and stays typed: flat functions
    take it back as its cffi pointer, refuse it where another handle type, a kernel argument or a size is due, and
    refuse a bare int where a handle is due."""
    import pickle

    import seed_client

    rt = flat_rt
    mem = capi.allocate_memory(rt, size=16, usage=1, host_read=True, host_write=True)
    assert isinstance(mem, capi.Handle) and isinstance(mem, int) and isinstance(rt, capi.Handle)
    assert mem.ctype == "TiMemory" and rt.ctype == "TiRuntime" and repr(mem) == f"<TiMemory handle {int(mem):#x}>"
    assert int(mem) == int(ffi.cast("uintptr_t", mem.cdata)) and ffi.typeof(mem.cdata) is ffi.typeof("TiMemory")
    assert seed_client.TiMemorySlice(memory=mem, offset=0, size=16).memory == int(mem)
    assert capi.handles.is_live("memory", rt, mem) and capi.handles.is_live("memory", rt.cdata, mem.cdata)
    with pytest.raises(errors.ArgumentTypeError, match="expected a TiRuntime handle, got cdata 'struct TiMemory_t"):
        capi.map_memory(mem, mem)
    with pytest.raises(errors.ArgumentTypeError, match="expected a TiMemory handle"):
        capi.map_memory(rt, int(mem))  # a bare int is no handle
    with pytest.raises(errors.ArgumentTypeError, match="not a kernel argument"):
        capi.pack_arguments([mem])
    with pytest.raises(errors.ArgumentTypeError, match="bad TiMemoryAllocateInfo"):
        capi.allocate_memory(rt, size=mem, usage=1)
    with pytest.raises(TypeError, match="cannot pickle a TiMemory handle"):
        pickle.dumps(mem)
    nd = {"memory": mem, "shape": {"dim_count": 1, "dims": [4]}, "elem_shape": {"dim_count": 0},
          "elem_type": DataType.F32}
    packed = capi.pack_arguments([{"type": ArgumentType.NDARRAY, "value": {"ndarray": nd}}])  # dicts take them
    assert packed[0].value.ndarray.memory == mem.cdata
    ctypes_slice = seed_client.TiMemorySlice(memory=mem, offset=0, size=8)
    other = capi.allocate_memory(rt, size=16, usage=1, host_read=True, host_write=True)
    if arch == Arch.VULKAN:  # a copy on the device between slices of the client's own structures
        capi.copy_memory_device_to_device(rt, dst=seed_client.TiMemorySlice(memory=other, offset=8, size=8),
                                          src=ctypes_slice)
        capi.wait(rt)
