"""The arrays users already have: numpy's protocol on NdArray, and ndarrays made over numpy arrays (zero-copy where
the backend can address them)."""

from __future__ import annotations

import os

import numpy as np
import pytest

from conftest import require_arch, require_extra
from taichi_aot import (
    Arch,
    ArgumentTypeError,
    ExportError,
    InvalidArgumentError,
    InvalidStateError,
    ReadOnlyArrayError,
    Runtime,
)
from taichi_aot._arrays import describe_array
from taichi_aot.enums import DataType
from taichi_aot.metadata import ArgInfo


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


def test_an_argument_array_is_described_then_decided(rt, arch, modules):
    """A host array for an ndarray argument goes one way: described once (_arrays.describe), decided from that
    alone (_foreign.decide: share, stage with the reason, or refuse), then carried out by the launch."""
    from taichi_aot._arrays import describe
    from taichi_aot._foreign import SHARE, STAGE, decide

    add = rt.load_module(modules.path(arch)).kernels["add"].declare_access({1: "read"})
    written, read = add.signature[0], add.signature[1]  # add(x, y, a): x += a * y
    shares = rt.device.traits.imports_host_memory
    plain = describe(np.ones(8, np.float32), "x", False)
    assert plain.host is not None and not plain.cuda and not plain.read_only
    decision = decide(plain, written, arch, shares, True, "x")
    assert decision.how == (SHARE if arch == Arch.X64 else STAGE) and decision.error is None
    assert arch == Arch.X64 or "cannot address host memory" in decision.reason
    strided = decide(describe(np.ones(16, np.float32)[::2], "x", False), written, arch, shares, True, "x")
    assert strided.how == STAGE and strided.reason  # x64: not C-contiguous; elsewhere: host memory not addressed
    frozen = np.ones(8, np.float32)
    frozen.flags.writeable = False
    refused = decide(describe(frozen, "x", False), written, arch, shares, True, "x")
    assert isinstance(refused.error, ReadOnlyArrayError) and "read-only" in str(refused.error)
    assert decide(describe(frozen, "y", False), read, arch, shares, True, "y").error is None  # only read
    empty = decide(describe(np.ones(0, np.float32), "x", False), written, arch, shares, True, "x")
    assert isinstance(empty.error, InvalidArgumentError) and "empty" in str(empty.error)
    no_copies = decide(describe(np.ones(16, np.float32)[::2], "x", False), written, arch, shares, False, "x")
    assert isinstance(no_copies.error, InvalidArgumentError) and "allow_array_copies is False" in str(no_copies.error)
    with pytest.raises(ArgumentTypeError, match="not an array"):
        describe(3.0, "x", False)
    x, y = np.zeros(8, np.float32), np.ones(8, np.float32)  # carried out: the kernel's values in the caller's array
    add(x, y, 2.0)
    rt.wait()
    assert x.tolist() == [2.0] * 8


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


def test_numpy_arrays_as_kernel_and_graph_arguments(rt, arch, modules):
    mod = rt.load_module(modules.path(arch))
    add, graph = mod.kernels["add"], mod.graphs["add_twice"]
    x, y = np.zeros(8, np.float32), np.arange(8, dtype=np.float32)
    add(x, y, 2.0)  # numpy in place of ndarrays: x is written, as Taichi's own JIT kernels do
    rt.wait()
    assert np.array_equal(x, 2 * y)
    graph(x=x, y=rt.ndarray_from(y), a=1.0)
    rt.wait()
    assert np.array_equal(x, 4 * y)
    nd = rt.ndarray_from_numpy(np.ones(8, np.float32))
    add(nd, y, 1.0)  # mixed
    rt.wait()
    assert np.array_equal(nd.to_numpy(), 1 + y)
    with pytest.raises(InvalidArgumentError, match="expected f32 ndarray"):
        add(np.zeros(8, np.float64), y, 1.0)  # validated like an NdArray
    with pytest.raises(InvalidArgumentError):
        add(np.zeros((2, 4), np.float32), y, 1.0)
    vec = np.zeros((4, 3), np.float32)
    mod.kernels["scale_vec3"](vec + 1, (1.0, 2.0, 3.0))  # element shape from the trailing dimensions
    if arch == Arch.X64:  # shared, not copied: a bound launch holds the array's ndarray
        bound = add.bind(x, y, 1.0)
        bound()
        rt.wait()
        assert np.array_equal(x, 5 * y)
    else:
        with pytest.raises(InvalidArgumentError, match="bound launch would copy"):
            add.bind(x, y, 1.0)
        rt.allow_array_copies = False
        with pytest.raises(InvalidArgumentError, match="allow_array_copies"):
            add(x, y, 1.0)
        assert np.array_equal(x, 4 * y)  # untouched


def test_a_repeated_foreign_argument_is_looked_up_not_imported_again():
    require_arch(Arch.X64)  # CPU backends share host arrays; elsewhere each call copies (tested above)
    with Runtime(Arch.X64) as rt:
        a = np.zeros(4, np.float32)
        spec = ArgInfo(0, "x", "ndarray", DataType.F32, 1)
        first = rt.foreign.argument(a, spec, "test")
        assert rt.foreign.argument(a, spec, "test") is first
        assert rt.foreign.argument(a[:2], spec, "test") is not first  # another view: another ndarray


def test_arguments_that_share_memory(rt, arch, modules):
    """The same array twice travels once; staged copies whose write-backs would undo each other, or a shared
    argument's writes, are refused before the launch (the arrays untouched), as are arrays whose elements
    overlap."""
    mod = rt.load_module(modules.path(arch))
    add, graph = mod.kernels["add"], mod.graphs["add_twice"]
    x = np.ones(8, np.float32)
    add(x, x, 1.0)
    rt.wait()
    assert x.tolist() == [2.0] * 8  # on Vulkan: one copy in and out, not two
    graph(x=x, y=x, a=1.0)
    rt.wait()
    assert x.tolist() == [8.0] * 8
    b = np.zeros(16, np.float32)
    add(b[::2], np.ones(8, np.float32), 1.0)
    add(b[1::2], b[::2], 2.0)  # interleaved views share no element: both write back
    rt.wait()
    assert b.tolist() == [1.0, 2.0] * 8
    c = np.arange(12, dtype=np.float32)
    if arch != Arch.X64:  # Vulkan records that y is only read, and a read copy is never written back: declared
        add.declare_access(y="read_write")  # written, both are copied back, which clash
    clashes = [(c[::-1][:8], c[:8])]  # staged and staged (x64: staged and shared)
    if arch != Arch.X64:
        clashes.append((c[:8], c[4:]))  # each a copy on Vulkan (on x64 both are the array itself)
    for first, second in clashes:
        with pytest.raises(InvalidArgumentError, match="shares memory"):
            add(first, second, 1.0)
        assert c.tolist() == list(range(12))
    if arch == Arch.X64:  # an ndarray over the array, and a staged view of it
        with pytest.raises(InvalidArgumentError, match="shares memory"):
            add(rt.ndarray_from(c), c[::-1], 1.0)
    broadcast = np.lib.stride_tricks.as_strided(np.zeros(1, np.float32), (8,), (0,))  # writable, one element
    with pytest.raises(InvalidArgumentError, match="share memory"):
        add(broadcast, np.ones(8, np.float32), 1.0)
    read_only = np.broadcast_to(np.float32(2), (8,))  # an input: copied in, never back
    if arch == Arch.X64:  # an LLVM module of Taichi's own records no access: y may be written
        with pytest.raises(ReadOnlyArrayError, match=r"declare_access\(\{1: 'read'\}\)"):
            add(x, read_only, 1.0)
    add.declare_access({1: "read"})
    add(x, read_only, 1.0)
    rt.wait()
    assert x.tolist() == [10.0] * 8 and c.tolist() == list(range(12))


def test_the_cache_of_arguments_keeps_no_array_alive(rt, arch, modules):
    import gc
    import weakref

    add = rt.load_module(modules.path(arch)).kernels["add"]
    y = np.ones(1 << 16, np.float32)
    refs = []
    for _ in range(4):
        temporary = np.zeros(1 << 16, np.float32)
        add(temporary, y, 1.0)
        refs.append(weakref.ref(temporary))
        del temporary
    rt.wait()
    gc.collect()
    assert all(ref() is None for ref in refs)
    fresh = np.zeros(1 << 16, np.float32)  # ids are reused: nothing of the dead arrays is found for it
    add(fresh, y, 3.0)
    rt.wait()
    assert fresh[0] == 3.0 and fresh[-1] == 3.0
    if arch == Arch.X64:  # a bound launch holds its arrays, however many others pass through the cache
        kept = np.zeros(8, np.float32)
        bound = add.bind(kept, np.ones(8, np.float32), 1.0)
        ref = weakref.ref(kept)
        del kept
        for _ in range(40):
            add(np.zeros(8, np.float32), np.ones(8, np.float32), 1.0)
        gc.collect()
        bound()
        rt.wait()
        assert ref() is not None and ref().tolist() == [1.0] * 8


def test_a_cached_argument_whose_memory_changed(rt, arch, modules):
    mod = rt.load_module(modules.path(arch))
    add, accumulate, scale = mod.kernels["add"], mod.kernels["accumulate"], mod.kernels["scale_vec3"]
    y = np.ones(1 << 12, np.float32)
    z = np.zeros(1 << 12, np.float32)
    add(z, y, 1.0)
    z.__setstate__((1, z.shape, z.dtype, False, np.zeros_like(z).tobytes()))  # new memory, same array
    others = [np.full(1 << 12, 7, np.float32) for _ in range(4)]  # may take the freed memory
    add(z, y, 1.0)
    rt.wait()
    assert z[0] == 1.0 and z[-1] == 1.0 and all((o == 7).all() for o in others)
    z.flags.writeable = False  # read-only now: never written
    with pytest.raises(ReadOnlyArrayError, match="read-only"):
        add(z, y, 1.0)
    rt.wait()
    assert z[0] == 1.0
    rows = np.ones((8, 3), np.float32)[::2]  # staged; one of its rows, by value, is no clash
    scale(rows, rows[1])
    rt.wait()
    assert rows.tolist() == [[float(k)] * 3 for k in (1, 2, 3, 4)]
    total = np.zeros((), np.float32)
    a = np.arange(6, dtype=np.float32)[::2] if arch == Arch.X64 else np.arange(3, dtype=np.float32)  # staged
    if arch == Arch.X64:  # nothing recorded: both arguments may be written, and their copies would clash
        with pytest.raises(InvalidArgumentError, match="shares memory"):  # one array as two kinds of argument
            accumulate(total, a, a)
        assert a.tolist() == [0.0, 2.0, 4.0]
    else:  # x is only read: a snapshot, and v, written, is copied back
        accumulate(total, a, a)
        rt.wait()
        assert a.tolist() == [0.0, 2.0, 4.0] and float(total) == 3.0


def test_bad_foreign_input_is_typed(rt, arch, modules):
    add = rt.load_module(modules.path(arch)).kernels["add"]
    y = np.ones(8, np.float32)

    class Broken:
        def __dlpack__(self, **kwargs):
            raise KeyError("broken producer")

        def __dlpack_device__(self):
            return (1, 0)

    masked = np.ma.masked_array(np.ones(8, np.float32), mask=[0, 1] * 4)
    for bad, match in ((5, "not an array"), (np.float32(1), "not an array"), (masked, "mask"),
                       (Broken(), "broken producer")):
        with pytest.raises(ArgumentTypeError, match=match):
            rt.ndarray_from(bad)
    with pytest.raises(ArgumentTypeError, match="mask"):
        add(masked, y, 1.0)
    for kwargs in ({"elem_ndim": 1.0}, {"elem_ndim": True}, {"copy": "yes"}):
        with pytest.raises(ArgumentTypeError):
            rt.ndarray_from(np.ones((2, 3), np.float32), **kwargs)
    with pytest.raises(ArgumentTypeError, match="allow_array_copies"):
        rt.allow_array_copies = "no"
    assert rt.allow_array_copies is True
    nd = rt.ndarray((4,), np.float32, host_access="readwrite")
    for kwargs in ({"max_version": "x"}, {"dl_device": (1,)}, {"copy": 1}):
        with pytest.raises(ArgumentTypeError):
            nd.__dlpack__(**kwargs)
    read_only = rt.ndarray((4,), np.float32, host_access="read")
    with pytest.raises(BufferError, match="older DLPack capsule"):  # an ExportError, as DLPack's protocol says
        read_only.__dlpack__()
    assert np.from_dlpack(read_only).tolist() == [0.0] * 4  # DLPack 1.0 says read-only
    if arch != Arch.X64:
        with pytest.raises(ValueError, match="write-only"):  # an ExportError, as numpy's copy=False says
            np.asarray(rt.ndarray((4,), np.float32, host_access="write"), copy=False)
        with pytest.raises(ExportError, match="to_numpy"):
            rt.ndarray((4,), np.float32, host_access="none").__dlpack__()


def test_a_wrong_array_is_named_by_its_library(rt, arch, modules):
    """An argument error describes what the caller passed (a numpy array, not the ndarray made over it), named by
    its library's name as the type's module gives it."""
    mod = rt.load_module(modules.path(arch))
    x, y = rt.ndarray((8,), np.float32), np.zeros(8)
    for _ in range(2):  # the first call, and one whose array the runtime has seen
        with pytest.raises(ArgumentTypeError, match=r"expected f32 ndarray with ndim 1, got float64 numpy array "
                                                    r"of shape \(8,\): convert it with \.astype\(np\.float32\)$"):
            mod.kernels["add"](x, y, 1.0)
    with pytest.raises(ArgumentTypeError, match=r"element shape \(3,\), got float32 numpy array of shape \(4, 2\): "
                                                r"pass an array of shape \(n, 3\)"):
        mod.kernels["scale_vec3"](np.zeros((4, 2), np.float32), (1.0, 2.0, 3.0))
    with pytest.raises(ArgumentTypeError, match=r"got int32 ndarray of shape .*: make it a float32 ndarray"):  # own
        mod.kernels["add"](x, rt.ndarray((8,), np.int32), 1.0)

    class CupyLike:  # what the description reads of an array of CuPy's: its type's module, its dtype and shape
        dtype, shape = np.dtype(np.float16), (2, 3)

    CupyLike.__module__ = "cupy._core.core"
    assert describe_array(CupyLike()) == "float16 CuPy array of shape (2, 3)"


def test_an_empty_array_is_refused_as_empty(rt, arch, modules):
    """A host array with a zero dimension (1-D, 2-D, of vectors) is refused for what it is, on every backend and
    placement, not for the strides an empty array happens to have."""
    mod = rt.load_module(modules.path(arch))
    cases = [(mod.kernels["add"], (np.zeros(0, np.float32), rt.ndarray((4,), np.float32), 1.0)),
             (mod.kernels["fill_i32"], (np.zeros((0, 3), np.int32), 1)),
             (mod.kernels["fill_i32"], (np.zeros((3, 0), np.int32), 1)),
             (mod.kernels["scale_vec3"], (np.zeros((0, 3), np.float32), (1.0, 2.0, 3.0)))]
    for kernel, args in cases:
        with pytest.raises(InvalidArgumentError, match=r"argument 0.*: the array is empty \(shape \("):
            kernel(*args)


def test_a_wrong_jax_array_is_named_a_jax_array(rt, arch, modules):
    jnp = require_extra("jax.numpy", "jax")
    add = rt.load_module(modules.path(arch)).kernels["add"].declare_access({1: "read"})  # JAX arrays are read-only
    import jax

    wrong = jax.device_put(jnp.zeros(8, jnp.int32), jax.devices("cpu")[0])  # host memory, where a GPU is too
    with pytest.raises(ArgumentTypeError, match=r"got int32 JAX array of shape \(8,\): convert it with "
                                                r"\.astype\(jnp\.float32\)$"):
        add(rt.ndarray((8,), np.float32), wrong, 1.0)


def test_arrays_of_the_other_byte_order(rt, arch, modules):
    big = np.arange(8, dtype=">f4")
    assert rt.ndarray_from(big).to_numpy().tolist() == list(range(8))  # converted on the way in
    if arch == Arch.X64:
        with pytest.raises(InvalidArgumentError, match="byte order"):
            rt.ndarray_from(big, copy=False)
    rt.load_module(modules.path(arch)).kernels["add"](big, np.ones(8, np.float32), 1.0)
    rt.wait()
    assert big.dtype == ">f4" and big.tolist() == list(range(1, 9))  # and back out in its own order


def test_dlpack_export(rt):
    x = rt.ndarray_from_numpy(np.arange(12, dtype=np.float32).reshape(3, 4), host_access="readwrite")
    if rt.arch == Arch.X64:  # host memory: shared, the consumer's array keeps it alive
        assert x.__dlpack_device__() == (1, 0)
        a = np.from_dlpack(x)
        assert a.shape == (3, 4) and a.dtype == np.float32 and a[2, 3] == 11
        a[0, 0] = 100
        assert x.to_numpy()[0, 0] == 100  # the same memory
        del x
        import gc

        gc.collect()
        assert a[0, 0] == 100 and a.sum() == 100 + sum(range(1, 12))  # still valid after its ndarray went away
        legacy = rt.ndarray_from_numpy(np.ones(2, np.int32)).__dlpack__()  # the older, unversioned capsule
        assert "dltensor" in repr(legacy)
    else:  # device-only memory says how to get the data instead
        device_only = rt.ndarray((4,), np.float32, host_access="none")
        assert device_only.__dlpack_device__() == (7, 0)
        with pytest.raises(InvalidStateError, match="to_numpy"):
            np.from_dlpack(device_only)
        assert np.from_dlpack(x).tolist() == x.to_numpy().tolist()  # host-readable: shared through its mapping
        copy = device_only.__dlpack__(copy=True, max_version=(1, 0))
        assert "dltensor" in repr(copy)


class _Exporter:
    """A DLPack producer over a numpy array through taichi_aot's own capsules (the code CUDA ndarrays export
    with), so that numpy, a real consumer, reads them here; ``released`` counts deleter calls."""

    def __init__(self, a, versioned_only=False):
        self.a, self.released, self.versioned_only = a, 0, versioned_only

    def __dlpack_device__(self):
        return (1, 0)

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        from taichi_aot import _dlpack

        versioned = max_version is not None and tuple(max_version) >= (1, 0)
        return _dlpack.export(self.a.ctypes.data, self.a.shape, self.a.dtype, (1, 0), self.a, versioned=versioned,
                              release=self._release)

    def _release(self):
        self.released += 1


def test_dlpack_capsules_of_our_own_are_read_by_numpy():
    import gc

    for dtype in (np.float32, np.int64, np.uint8, np.bool_, np.float16):
        a = np.arange(6).reshape(2, 3).astype(dtype)
        producer = _Exporter(a)
        b = np.from_dlpack(producer)  # numpy 2 asks for the versioned capsule
        assert b.dtype == a.dtype and b.shape == (2, 3) and b.ctypes.data == a.ctypes.data
        np.testing.assert_array_equal(b, a)
        assert producer.released == 0  # numpy holds the tensor while b lives
        del b
        gc.collect()
        assert producer.released == 1  # numpy called the deleter
    for versioned in (True, False):  # a capsule nobody consumed deletes its tensor when collected
        producer = _Exporter(np.zeros(3, np.float32))
        capsule = producer.__dlpack__(max_version=(1, 0) if versioned else None)
        assert ("dltensor_versioned" in repr(capsule)) == versioned
        del capsule
        gc.collect()
        assert producer.released == 1


def test_dlpack_capsules_of_others_are_consumed_once():
    import gc

    from taichi_aot import _dlpack

    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    imported = _dlpack.consume(a, stream=None)  # numpy's own capsule
    assert imported.data == a.ctypes.data and imported.shape == (3, 4) and imported.dtype == np.float32
    assert imported.device == (1, 0) and imported.compact() and imported.source is a
    strided = _dlpack.consume(a[:, ::2], stream=None)
    assert not strided.compact() and strided.strides == (4, 2)
    producer = _Exporter(np.ones(4, np.int32))
    taken = _dlpack.consume(producer, stream=None)
    assert taken.dtype == np.int32 and producer.released == 0
    taken.release()
    taken.release()  # once only
    assert producer.released == 1
    producer = _Exporter(np.ones(4, np.int32))
    taken = _dlpack.consume(producer, stream=None)
    del taken
    gc.collect()
    assert producer.released == 1  # collected: released


def test_host_array_and_cuda_streams_elsewhere(rt):
    from taichi_aot import NotSupportedError

    h = rt.host_array((4, 3), np.int16)
    assert h.shape == (4, 3) and h.dtype == np.int16 and not h.any()
    assert rt.host_array(5).dtype == np.float32
    for bad in ((2, -1), "x", (1.5,)):
        with pytest.raises(ArgumentTypeError):
            rt.host_array(bad)
    with pytest.raises(ArgumentTypeError):
        rt.host_array(3, "not a dtype")
    assert rt.cuda_stream is None
    with pytest.raises(NotSupportedError, match="CUDA stream"):
        rt.set_cuda_stream(None)


def test_the_register_limit_is_read_from_the_environment(monkeypatch):
    from taichi_aot import _hostpages

    for text, value in (("0", 0), ("4G", 4 << 30), ("512m", 512 << 20), (" 1.5 GiB", 3 << 29), ("65536", 1 << 16)):
        monkeypatch.setattr(_hostpages, "REGISTER_LIMIT", None)
        monkeypatch.setenv("TAICHI_AOT_REGISTER_LIMIT", text)
        assert _hostpages.register_limit() == value
    for text in ("lots", "-1", "inf", "nan", "1e400", "G", "4X"):
        monkeypatch.setattr(_hostpages, "REGISTER_LIMIT", None)
        monkeypatch.setenv("TAICHI_AOT_REGISTER_LIMIT", text)
        with pytest.raises(InvalidArgumentError, match=rf"TAICHI_AOT_REGISTER_LIMIT.*{text!r}"):
            _hostpages.register_limit()
    monkeypatch.setattr(_hostpages, "REGISTER_LIMIT", None)
    monkeypatch.delenv("TAICHI_AOT_REGISTER_LIMIT")
    physical = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    assert 0 < _hostpages.register_limit() <= physical // 4  # a quarter of the memory the process may use
