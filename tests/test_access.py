"""How kernels use their ndarray arguments (read, write, both), and what that decides for other libraries' arrays:
an immutable array is never written, a write is never dropped, staged copies go in only where read and back only
where written. Modules are compiled by Taichi (tests/kernels.py): gfx modules record access, LLVM ones do not."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import require_arch, require_extra
from taichi_aot import (
    Access,
    Arch,
    ArgumentTypeError,
    InvalidArgumentError,
    ReadOnlyArrayError,
    Runtime,
    TaichiError,
)
from taichi_aot.metadata import read_module


def _read_only(a: np.ndarray) -> np.ndarray:
    a.flags.writeable = False
    return a


def test_gfx_modules_record_access_and_graphs_take_the_union(modules, vulkan):
    info = read_module(modules.path(Arch.VULKAN))
    add = {a.name: a.access for a in info.kernels["add"].args}
    assert add == {"x": Access.READ_WRITE, "y": Access.READ, "a": None}
    accumulate = {a.name: a.access for a in info.kernels["accumulate"].args}
    assert accumulate == {"total": Access.READ_WRITE, "x": Access.READ, "v": Access.READ_WRITE}
    assert info.kernels["iota_u8"].args[0].access == Access.WRITE
    graph = {a.name: a.access for a in info.graphs["add_twice"].args}
    assert graph == {"x": Access.READ_WRITE, "y": Access.READ, "a": None}
    assert info.to_dict()["kernels"]["add"][1]["access"] == "read"
    llvm = read_module(modules.path(Arch.X64))  # Taichi's own LLVM module: nothing recorded
    assert all(a.access is None for a in llvm.kernels["add"].args)


def test_an_immutable_array_is_never_written(rt, arch, modules):
    mod = rt.load_module(modules.path(arch))
    add, graph = mod.kernels["add"], mod.graphs["add_twice"]
    x = _read_only(np.ones(8, np.float32))
    y = np.full(8, 2, np.float32)
    for launch in (lambda: add(x, y, 1.0), lambda: graph(x=x, y=y, a=1.0)):
        with pytest.raises(ReadOnlyArrayError, match="read-only") as e:
            launch()
        assert "'x'" in str(e.value) or "argument 0" in str(e.value)
        assert "np.array(a)" in str(e.value)  # the way out
    assert x.tolist() == [1.0] * 8 and not rt.foreign.staged
    broadcast = np.broadcast_to(np.float32(3), (8,))  # numpy makes broadcasts read-only
    with pytest.raises(ReadOnlyArrayError):
        add(broadcast, y, 1.0)


def test_an_immutable_array_for_an_argument_only_read(rt, arch, modules):
    """Vulkan's module records that y is only read; x64's records nothing, so y must be declared."""
    mod = rt.load_module(modules.path(arch))
    add, graph = mod.kernels["add"], mod.graphs["add_twice"]
    x = np.ones(8, np.float32)
    y = _read_only(np.arange(8, dtype=np.float32))
    if arch == Arch.X64:
        with pytest.raises(ReadOnlyArrayError, match=r"records no access.*declare_access\(\{1: 'read'\}\)"):
            add(x, y, 1.0)
        with pytest.raises(ReadOnlyArrayError, match=r"declare_access\(y='read'\)"):
            graph(x=x, y=y, a=1.0)
        assert add.declare_access({1: "read"}) is add
        graph.declare_access(y=Access.READ)
    add(x, y, 2.0)
    graph(x=x, y=y, a=1.0)
    rt.wait()
    assert x.tolist() == [1.0 + 4.0 * i for i in range(8)]
    assert y.tolist() == list(range(8))


def test_a_read_only_array_is_shared_where_the_backend_addresses_it(modules):
    require_arch(Arch.X64)
    with Runtime(Arch.X64) as rt:
        add = rt.load_module(modules.path(Arch.X64)).kernels["add"].declare_access({1: "read"})
        base = np.arange(8, dtype=np.float32)
        y = _read_only(base.view())
        x = np.zeros(8, np.float32)
        add(x, y, 1.0)
        assert id(y) in rt.foreign.hits and not rt.foreign.staged  # shared, not a copy
        base[:] = 100
        add(x, y, 1.0)
        assert x.tolist() == [i + 100.0 for i in range(8)]


def test_declarations_are_checked(rt, arch, modules):
    mod = rt.load_module(modules.path(arch))
    add, graph = mod.kernels["add"], mod.graphs["add_twice"]
    with pytest.raises(ArgumentTypeError, match="no argument 'nope'"):
        add.declare_access(nope="read")
    with pytest.raises(ArgumentTypeError, match="no argument 7"):
        add.declare_access({7: "read"})
    with pytest.raises(InvalidArgumentError, match="scalar argument has no access"):
        add.declare_access({2: "read"})
    with pytest.raises(InvalidArgumentError, match="no access"):
        add.declare_access({0: "sometimes"})
    with pytest.raises(ArgumentTypeError, match="no argument 0"):
        graph.declare_access({0: "read"})  # graph arguments have names only
    if arch == Arch.VULKAN:  # recorded: a declaration may add, never take away
        with pytest.raises(InvalidArgumentError, match="records that the kernel uses it as read_write"):
            add.declare_access({0: "read"})
        add.declare_access({1: "read_write"})
        assert add.signature[1].access == Access.READ_WRITE
    assert add.signature[0].access in (None, Access.READ_WRITE)


def test_staged_copies_follow_access(vulkan, modules):
    """On Vulkan a host array is a copy: a write-only argument's starts zero-filled (what the kernel leaves
    unwritten comes back as 0, as with Taichi's own numpy arguments), unless declared read_write; a read-only
    argument is never copied back, so overlapping arrays no longer clash when one of them is only read."""
    with Runtime(Arch.VULKAN) as rt:
        mod = rt.load_module(modules.path(Arch.VULKAN))
        typed = mod.kernels["typed_scalars"]  # writes out[0..3] only
        assert typed.signature[0].access == Access.WRITE
        out = np.full(6, 9.0)
        typed(out, 1, 2, 3.0, 4)
        rt.wait()
        assert out.tolist() == [1, 2, 3, 4, 0, 0]  # not copied in
        typed.declare_access(out="read_write")
        out = np.full(6, 9.0)
        typed(out, 1, 2, 3.0, 4)
        rt.wait()
        assert out.tolist() == [1, 2, 3, 4, 9, 9]
        # the copy's ndarray is kept for the next launch: reused, a write-only argument's starts zeroed again
        again = rt.load_module(modules.path(Arch.VULKAN)).kernels["typed_scalars"]
        out = np.full(6, 7.0)
        again(out, 5, 6, 7.0, 8)
        rt.wait()
        assert out.tolist() == [5, 6, 7, 8, 0, 0]
        add = mod.kernels["add"]
        c = np.arange(12, dtype=np.float32)
        add(c[:8], c[2:10], 1.0)  # y only read: its copy is a snapshot, never written back
        rt.wait()
        assert c.tolist() == [i + (i + 2) for i in range(8)] + [8, 9, 10, 11]
        with pytest.raises(InvalidArgumentError, match="shares memory"):  # both written back: refused
            add.declare_access(y="read_write")(c[:8], c[2:10], 1.0)


def test_producer_errors_are_typed(rt, arch, modules):
    torch = require_extra("torch", "interop")
    add = rt.load_module(modules.path(arch)).kernels["add"]
    y = np.ones(8, np.float32)
    grad = torch.ones(8, requires_grad=True)
    meta = torch.empty(8, device="meta")
    for bad in (grad, meta):
        with pytest.raises(ArgumentTypeError, match=r"refused|not an array") as e:
            add(bad, y, 1.0)
        assert isinstance(e.value, TaichiError)
    with pytest.raises(ArgumentTypeError):
        rt.ndarray_from(grad)


def test_a_read_only_export_is_read_only(rt, arch, modules):
    """An object whose only door is DLPack (or the array interface) and that exports read-only memory."""
    add = rt.load_module(modules.path(arch)).kernels["add"]

    class Export:
        def __init__(self, a):
            self.a = a

        def __dlpack__(self, **kwargs):
            return self.a.__dlpack__(**kwargs)

        def __dlpack_device__(self):
            return self.a.__dlpack_device__()

    class Interface:
        def __init__(self, a):
            self.__array_interface__ = a.__array_interface__
            self.keep = a

    for wrap in (Export, Interface):
        frozen = _read_only(np.ones(8, np.float32))
        with pytest.raises(ReadOnlyArrayError):
            add(wrap(frozen), np.ones(8, np.float32), 1.0)
        assert frozen.tolist() == [1.0] * 8


def test_ndarray_from_a_read_only_array(rt):
    frozen = _read_only(np.arange(4, dtype=np.float32))
    nd = rt.ndarray_from(frozen)  # a copy: an ndarray is written by kernels
    assert nd.to_numpy().tolist() == [0, 1, 2, 3]
    if rt.arch == Arch.X64:
        with pytest.raises(ReadOnlyArrayError, match="copy=False"):
            rt.ndarray_from(frozen, copy=False)


def test_a_cached_array_changed_in_place(rt, arch, modules):
    """The packer's fast path finds an array shared before in one C call, which compares everything a kernel sees:
    memory, dtype, shape, strides, the writable flag."""
    mod = rt.load_module(modules.path(arch))
    fill, add = mod.kernels["fill_i32"], mod.kernels["add"]
    x = np.zeros((4, 4), np.int32)
    fill(x, 1)
    x.shape = (2, 8)  # in place: the same object, the same memory
    fill(x, 5)
    rt.wait()
    assert x.tolist() == [[5 + i * 100 + j for j in range(8)] for i in range(2)]
    x.dtype = np.float32  # the same bytes, another dtype: refused, typed
    with pytest.raises(InvalidArgumentError, match="i32 ndarray"):
        fill(x, 1)
    y = np.ones(8, np.float32)
    add(y, y, 1.0)
    y.shape = (2, 4)
    with pytest.raises(InvalidArgumentError, match="ndim 1"):
        add(y, y, 1.0)
    y.shape = (8,)
    add(y, y, 1.0)
    rt.wait()
    assert y.tolist() == [4.0] * 8


KERNELS = '''
import taichi as ti

vec = ti.types.ndarray(dtype=ti.f32, ndim=1)


@ti.aot.export
@ti.kernel
def k3(a: vec, b: vec, c: vec):
    for i in a:
        b[i] += a[i]
        c[i] += 100.0


@ti.aot.export
@ti.kernel
def mark(x: ti.types.ndarray(dtype=ti.u1, ndim=1), y: vec):
    for i in y:
        x[i] = y[i] > 0
'''


@pytest.fixture(scope="module")
def k3_module(tmp_path_factory):
    from taichi_aot.cli.build import build

    require_arch(Arch.X64)
    require_arch(Arch.VULKAN)
    root = tmp_path_factory.mktemp("k3")
    (root / "k3.py").write_text(KERNELS)
    return build(str(root / "k3.py"), ["x64", "vulkan"], str(root / "k3.tcm"))["out"]


def test_a_launch_that_fails_copies_nothing_back(rt, arch, modules):
    """A launch refused while its arguments are packed (or by C) never ran: its staged copies are dropped, not
    copied back (a write-only argument's copy is zeros)."""
    mod = rt.load_module(modules.path(arch))
    typed, graph = mod.kernels["typed_scalars"], mod.graphs["add_twice"]
    base = np.full(12, 7.0)
    out = base[::2] if arch == Arch.X64 else base  # a copy on either backend
    with pytest.raises(ArgumentTypeError):
        typed(out, 1, 2, 3.0, "not an int")
    x = np.full(16, 5.0, np.float32)[::2]
    with pytest.raises(ArgumentTypeError):
        graph(x=x, y=np.ones(8, np.float32), a="not a float")
    mod.close()
    with pytest.raises(TaichiError):
        typed(out, 1, 2, 3.0, 4)
    assert base.tolist() == [7.0] * 12 and x.tolist() == [5.0] * 8 and not rt.foreign.staged


def test_copies_written_back_never_overlap(rt, arch, k3_module):
    """Whichever order the arguments come in: an array written (c) that is the same as one only read (a), and
    another written view of it (b), would undo each other's writes as copies: refused, the array untouched."""
    k3 = rt.load_module(k3_module).kernels["k3"]
    a = np.arange(8, dtype=np.float32)[::2] if arch == Arch.X64 else np.arange(4, dtype=np.float32)  # copies
    with pytest.raises(InvalidArgumentError, match="shares memory"):
        k3(a, a[::-1], a)
    with pytest.raises(InvalidArgumentError, match="shares memory"):
        k3(np.zeros(4, np.float32), a[::-1], a)
    assert a.tolist() == ([0.0, 2.0, 4.0, 6.0] if arch == Arch.X64 else [0.0, 1.0, 2.0, 3.0])


def test_bool_write_only_copies_are_reused(k3_module):
    """On x64, where a strided array travels as a copy. (On Vulkan u1 ndarrays are refused: next test.)"""
    with Runtime(Arch.X64) as rt:
        mark = rt.load_module(k3_module).kernels["mark"]
        assert mark.signature[0].access == Access.WRITE
        y = np.array([1, -1, 2, -2], np.float32)
        for _ in range(3):  # the second and third reuse the first one's copy, zeroed again
            x = np.ones(8, bool)[::2]
            mark(x, y)
            rt.wait()
            assert x.tolist() == [True, False, True, False]


def test_declared_access_must_be_an_access(modules):
    require_arch(Arch.X64)
    with Runtime(Arch.X64) as rt:
        add = rt.load_module(modules.path(Arch.X64)).kernels["add"]
        for bad in (Access(5), Access(4), 7, True, None):
            with pytest.raises(InvalidArgumentError, match="no access"):
                add.declare_access({0: bad})


def test_buffer_protocol_arrays_are_arguments(modules):
    import array

    require_arch(Arch.X64)
    with Runtime(Arch.X64) as rt:
        add = rt.load_module(modules.path(Arch.X64)).kernels["add"]
        x = array.array("f", [1.0] * 4)
        y = memoryview(bytearray(np.full(4, 2.0, np.float32).tobytes())).cast("f")
        add(x, y, 3.0)
        rt.wait()
        assert list(x) == [7.0] * 4
        with pytest.raises(ArgumentTypeError):
            add(x, b"\0" * 16, 1.0)  # bytes are no array


def test_u1_ndarrays_are_refused_on_vulkan(vulkan, k3_module):
    """Taichi 1.7.4's SPIR-V for u1 ndarrays stores nothing the host sees on lavapipe, and on an NVIDIA GPU a
    launch of it corrupted the process (a later runtime's creation crashed): refused before C is called."""
    from taichi_aot import NotSupportedError

    with Runtime(Arch.VULKAN) as rt:
        mark = rt.load_module(k3_module).kernels["mark"]
        y = np.ones(4, np.float32)
        for x in (np.zeros(4, bool), rt.ndarray((4,), np.bool_)):
            with pytest.raises(NotSupportedError, match="u1"):
                mark(x, y)
        assert not rt.foreign.staged
