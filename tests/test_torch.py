"""PyTorch's CPU tensors (the interop extra, which CI installs): kernel and graph arguments, ndarray_from and DLPack
export, shared on x64 (the same memory) and copied in and back out on Vulkan, and torch's own refusals turned into
typed errors."""

from __future__ import annotations

import gc

import numpy as np
import pytest

from conftest import require_extra
from taichi_aot import Arch, ArgumentTypeError, InvalidArgumentError, InvalidStateError


@pytest.fixture(scope="module")
def torch():
    return require_extra("torch", "interop")


def test_tensors_as_kernel_and_graph_arguments(torch, rt, arch, modules):
    mod = rt.load_module(modules.path(arch))
    add, graph = mod.kernels["add"], mod.graphs["add_twice"]
    x, y = torch.zeros(8), torch.arange(8, dtype=torch.float32)
    add(x, y, 2.0)  # written in place, as Taichi's own kernels write torch arguments
    rt.wait()
    assert torch.equal(x, 2 * y)
    graph(x=x, y=y, a=0.5)
    rt.wait()
    assert torch.equal(x, 3 * y)
    strided = torch.zeros(16)
    add(strided[::2], y, 1.0)  # a strided view: copied in and back out, on every backend
    rt.wait()
    assert torch.equal(strided[::2], y) and not strided[1::2].any()
    vec = torch.ones(4, 3)
    mod.kernels["scale_vec3"](vec, (1.0, 2.0, 3.0))  # element shape from the trailing dimension
    rt.wait()
    assert vec.tolist() == [[k, 2.0 * k, 3.0 * k] for k in (1.0, 2.0, 3.0, 4.0)]
    with pytest.raises(InvalidArgumentError, match="expected f32 ndarray"):
        add(torch.zeros(8, dtype=torch.float64), y, 1.0)
    with pytest.raises(ArgumentTypeError, match="require gradient"):
        add(torch.zeros(8, requires_grad=True), y, 1.0)  # torch's own reason, as a typed error
    if arch == Arch.X64:  # shared: the launch uses the tensor's memory, and a bound launch may hold it
        bound = add.bind(x, y, 1.0)
        bound()
        rt.wait()
        assert torch.equal(x, 4 * y)
    else:
        rt.allow_array_copies = False
        with pytest.raises(InvalidArgumentError, match="allow_array_copies"):
            add(x, y, 1.0)
        assert torch.equal(x, 3 * y)  # untouched


def test_a_wrong_tensor_is_named_a_torch_tensor(torch, rt, arch, modules):
    """An argument error describes the tensor passed (not the ndarray made over it): its dtype, shape and library."""
    mod = rt.load_module(modules.path(arch))
    x, y = rt.ndarray((8,), np.float32), torch.zeros(8, dtype=torch.float64)
    for _ in range(2):  # the first call, and one whose tensor the runtime has seen
        with pytest.raises(ArgumentTypeError, match=r"kernel 'add' argument 1.*: expected f32 ndarray with ndim 1, "
                                                    r"got float64 torch tensor of shape \(8,\): convert it with "
                                                    r"\.to\(torch\.float32\)$"):
            mod.kernels["add"](x, y, 1.0)
    with pytest.raises(ArgumentTypeError, match=r"got float32 torch tensor of shape \(4, 2\): pass an array of "
                                                r"shape \(n, 3\)"):
        mod.kernels["scale_vec3"](torch.zeros(4, 2), (1.0, 2.0, 3.0))


def test_tensors_whose_memory_does_not_hold_their_values(torch, rt, arch, modules):
    add = rt.load_module(modules.path(arch)).kernels["add"]
    x = torch.zeros(4)
    negated = torch.complex(torch.arange(4.0), torch.arange(4.0)).conj().imag  # -0, -1, -2, -3, negated lazily
    assert negated.is_neg()
    with pytest.raises(ArgumentTypeError, match="resolve_neg"):
        add(x, negated, 1.0)
    with pytest.raises(ArgumentTypeError, match="resolve_neg"):
        rt.ndarray_from(negated)
    add(x, negated.resolve_neg(), 1.0)
    rt.wait()
    assert x.tolist() == [0.0, -1.0, -2.0, -3.0]
    with pytest.raises(InvalidArgumentError, match="share memory"):  # one element seen eight times
        add(torch.zeros(1).expand(8), torch.ones(8), 1.0)
    same = torch.ones(8)
    add(same, same.view(8), 1.0)  # two views of one tensor: one copy on Vulkan, so no write is lost
    rt.wait()
    assert same.tolist() == [2.0] * 8


def test_a_bound_launch_keeps_the_storage_it_was_given(torch, rt, arch, modules):
    add = rt.load_module(modules.path(arch)).kernels["add"]
    t = torch.zeros(1 << 12)
    if arch != Arch.X64:  # bound launches share tensors on CPU backends only; elsewhere they would copy once
        with pytest.raises(InvalidArgumentError, match="bound launch would copy"):
            add.bind(t, torch.ones(1 << 12), 1.0)
        return
    bound = add.bind(t, torch.ones(1 << 12), 1.0)
    t.data = torch.zeros(1 << 12)  # other memory for the tensor; its old storage is still the bound launch's
    others = [torch.full((1 << 12,), 7.0) for _ in range(8)]
    bound()
    rt.wait()
    assert all(bool((o == 7).all()) for o in others) and float(t[0]) == 0.0
    u = torch.zeros(1 << 12)
    bound = add.bind(u, torch.ones(1 << 12), 1.0)
    with rt.record() as seq:
        add(u, torch.ones(1 << 12), 1.0)
    bound()
    seq.replay(2)
    u.resize_(1 << 16)  # its storage reallocated: the memory the launch was bound to is freed
    with pytest.raises(InvalidStateError, match="resize_"):
        bound()
    with pytest.raises(InvalidStateError, match="resize_"):
        seq.replay(1)
    v = torch.zeros(1 << 12)
    bound = add.bind(v, torch.ones(1 << 12), 1.0)
    v.untyped_storage().resize_(0)
    with pytest.raises(InvalidStateError, match="bind again"):
        bound()
    rt.wait()
    assert u[:1 << 12].tolist() == [3.0] * (1 << 12)  # resize_ kept the values


def test_host_tensors_found_again_by_the_c_call(torch, modules):
    """On x64 a CPU tensor passed again is recognised in the C call by its print, as a CUDA tensor is: a change in
    place between calls (memory, shape, dtype, strides, requires_grad) is seen and checked, and the launch uses the
    tensor's memory as it is."""
    from conftest import require_arch
    from taichi_aot import Runtime

    require_arch(Arch.X64)
    with Runtime(Arch.X64) as rt:
        add = rt.load_module(modules.path(Arch.X64)).kernels["add"]
        x, y = torch.zeros(16), torch.ones(16)
        for _ in range(4):  # the last three made in C
            add(x, y, 1.0)
        assert x.tolist() == [4.0] * 16
        x.resize_(8)  # the same memory, another shape
        for _ in range(2):
            add(x, y, 1.0)
        assert x.tolist() == [6.0] * 8
        x.data = torch.zeros(16)  # other memory
        for _ in range(3):
            add(x, y, 2.0)
        assert x.tolist() == [6.0] * 16
        x.requires_grad_()
        with pytest.raises(ArgumentTypeError, match="require"):
            add(x, y, 1.0)
        x = torch.zeros(16)
        for _ in range(3):
            add(x, y, 1.0)
        x.data = x.view(torch.int32)  # the same memory and shape, another dtype
        with pytest.raises(InvalidArgumentError):
            add(x, y, 1.0)
        w = torch.zeros(32)
        x.data = w[:16]
        for _ in range(3):
            add(x, y, 1.0)
        x.as_strided_((16,), (2,))  # the same memory and shape, other strides: copied in and back out
        add(x, y, 1.0)
        assert w.tolist() == [(3.0 if i < 16 else 0.0) + (i % 2 == 0) for i in range(32)]
        z = torch.complex(torch.zeros(1), torch.ones(1))
        imag = z.imag  # one element: contiguous, so shared, and found again by its print
        for _ in range(3):
            add(imag, y[:1], 1.0)
        imag.data = z.conj().imag  # the same memory and layout, negated lazily
        with pytest.raises(ArgumentTypeError, match="lazy neg"):
            add(imag, y[:1], 1.0)
        assert z.imag.tolist() == [4.0]
        with pytest.raises(ArgumentTypeError, match="lazily zero"):  # its export is a temporary copy
            add(torch._efficientzerotensor(16), y, 1.0)
        seen = torch.zeros(16)
        add(seen, y, 1.0)
        del seen  # collected: a new tensor at the same address is not taken for it
        again = torch.zeros(8)
        add(again, y[:8], 1.0)
        assert again.tolist() == [1.0] * 8


def test_ndarray_from_a_tensor(torch, rt, arch):
    t = torch.arange(6, dtype=torch.int32).reshape(2, 3)
    nd = rt.ndarray_from(t)
    assert nd.shape == (2, 3) and nd.dtype == np.int32 and nd.to_numpy().tolist() == t.tolist()
    if arch == Arch.X64:  # the same memory, kept alive by the ndarray
        assert np.asarray(nd).ctypes.data == t.data_ptr()
        t[0, 0] = 42
        assert nd.to_numpy()[0, 0] == 42
        with pytest.raises(InvalidArgumentError, match="not C-contiguous"):
            rt.ndarray_from(t.t(), copy=False)
        kept = rt.ndarray_from(torch.full((1 << 12,), 7, dtype=torch.int64))  # only the ndarray holds the tensor
        gc.collect()
        assert int(kept.to_numpy().sum()) == 7 << 12
    else:
        with pytest.raises(InvalidArgumentError, match="cannot address host memory"):
            rt.ndarray_from(t, copy=False)
    copied = rt.ndarray_from(t, copy=True)
    t[1, 2] = -1
    assert copied.to_numpy()[1, 2] == 5  # a copy: independent of the tensor
    assert rt.ndarray_from(t.t()).to_numpy().tolist() == t.t().tolist()  # copy=None copies a transposed view
    assert rt.ndarray_from(torch.zeros(5, 3), elem_ndim=1).elem_shape == (3,)
    for bad, match in ((torch.zeros(4, dtype=torch.bfloat16), "DLPack"), (torch.zeros(4, dtype=torch.complex64),
                       "complex64"), (torch.zeros(4, requires_grad=True), "require gradient"),
                       (torch.zeros(4, device="meta"), "meta")):
        with pytest.raises(ArgumentTypeError, match=match):
            rt.ndarray_from(bad)


def test_ndarrays_to_torch_through_dlpack(torch, rt, arch):
    nd = rt.ndarray_from_numpy(np.arange(12, dtype=np.float32).reshape(3, 4), host_access="readwrite")
    t = torch.from_dlpack(nd)
    assert t.shape == (3, 4) and t.dtype == torch.float32 and t.device.type == "cpu"
    assert t.tolist() == nd.to_numpy().tolist()
    if arch == Arch.X64:  # the ndarray's memory itself, alive as long as the tensor
        t[0, 0] = 100
        assert nd.to_numpy()[0, 0] == 100
        del nd
        gc.collect()
        assert float(t.sum()) == 100 + sum(range(1, 12))
    else:  # Vulkan memory without host access cannot be shared: the error names the way to get the data
        hidden = rt.ndarray((4,), np.float32, host_access="none")
        with pytest.raises(InvalidStateError, match="to_numpy"):
            torch.from_dlpack(hidden)


def test_the_print_that_finds_a_tensor_again(torch):
    """A CUDA tensor found again is checked by its print, made in C from the reads its class names (the C call of
    kernels makes the same reads): each change in place that a launch depends on shows in it, changes of the values
    do not. A plain tensor's layout is read through torch's own C functions (checked against torch's getters when
    first used); a subclass's through the getters. The reads are the same for CPU tensors, which let this run
    anywhere."""
    from taichi_aot._arrays import _PRINTS, Launcher, print_of, read_print

    t = torch.zeros(16)
    assert read_print(t, _PRINTS["torch"]) == (t.data_ptr(), t.shape, True, torch.float32, False, False)
    assert print_of(torch.nn.Parameter) == _PRINTS["torch"]
    for reads in {print_of(torch.Tensor), _PRINTS["torch"]}:
        first = read_print(t, reads)
        t += 1
        assert read_print(t, reads) == first
        changes = [lambda u: u.resize_(4, 4), lambda u: u.as_strided_((8,), (2,)),
                   lambda u: u.as_strided_((8,), (1,), 1),
                   lambda u: setattr(u, "data", u.view(torch.int32)), lambda u: setattr(u, "data", u.view(2, 8)),
                   lambda u: setattr(u, "data", torch.zeros(16)), lambda u: u.set_(torch.zeros(16).untyped_storage()),
                   lambda u: torch.utils.swap_tensors(u, torch.zeros(16)), lambda u: u.requires_grad_(),
                   lambda u: setattr(u, "data", u._neg_view()),
                   lambda u: u.resize_([1] * 17)]
        for change in changes:
            u = torch.zeros(16)
            before = read_print(u, reads)
            change(u)
            assert not _found_again(u, reads, before)
        square = torch.zeros(4, 4)
        before = read_print(square, reads)
        square.transpose_(0, 1)  # the same memory and shape, other strides
        assert read_print(square, reads) != before
    for bad in (None, [("x",)], ((None, "data_ptr", True),) * 9, ((1, "data_ptr", True),), ((None, "data_ptr", 3),)):
        with pytest.raises(TypeError, match="reads"):
            Launcher.read_print(t, bad)
    with pytest.raises(AttributeError):
        read_print(t, ((None, "no_such_read", False),))


class _Open:
    closed = False


def _found_again(value, reads, print_, *, sig=None, writes=False, read_only=False, owned=None) -> bool:
    """Whether the rule the C call and the Python packer share (Launcher.print_hit_accepts) takes ``value`` as the
    array a PrintHit of ``print_`` remembers."""
    from taichi_aot._arrays import print_hit_accepts
    from taichi_aot._call import PrintHit

    hit = PrintHit(arg_bytes=bytes(64), cls=type(value), held=None, nd=None, owned=owned or _Open(), print=print_,
                   read_only=read_only, reads=reads, ref=None, sig=None)
    return print_hit_accepts(hit, value, sig, writes)


def test_one_rule_takes_an_array_passed_again(torch):
    """The rule for a torch, CuPy or JAX array passed again, one C function for the C call and the Python packer:
    the class, the kernel's signature, writable where the kernel writes, its memory open, and its print."""
    from taichi_aot._arrays import print_of, read_print

    t = torch.zeros(16)
    reads = print_of(torch.Tensor)
    now = read_print(t, reads)
    assert _found_again(t, reads, now)
    assert not _found_again(t, reads, now, sig=object())  # remembered for another signature
    assert not _found_again(t, reads, now, writes=True, read_only=True)  # shared read-only, now written
    assert _found_again(t, reads, now, read_only=True)
    gone = _Open()
    gone.closed = True
    assert not _found_again(t, reads, now, owned=gone)  # its memory closed since
    assert not _found_again(torch.nn.Parameter(t), reads, now)  # another class
    from taichi_aot._arrays import print_hit_accepts

    assert not print_hit_accepts(object(), t, None, False)  # no PrintHit


def test_a_plain_tensors_layout_is_read_by_torchs_c_functions(torch, monkeypatch):
    """From torch 2.10 on (setup.sh installs 2.13), a plain tensor's print is its layout, read by the C functions
    torch exports for compiled models from the at::Tensor inside its Python object, and requires_grad: no getter
    runs, so nothing a program sets (a class attribute, a TorchFunctionMode, a default device) is read as an
    address; the layout is read after the getter a mode may answer; a tensor torch cannot read so is never found
    again; the storage's size is in it."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.overrides import TorchFunctionMode

    from taichi_aot import _arrays
    from taichi_aot._arrays import _PRINTS, _TORCH_LAYOUT, Launcher, _reads, print_of, read_print

    version = tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2])
    _arrays._PRINT_OF.pop(torch.Tensor, None)
    with FakeTensorMode():  # its probes would be fake tensors: the question waits for a later use
        assert print_of(torch.Tensor) == _PRINTS["torch"] and torch.Tensor not in _arrays._PRINT_OF
    with torch.device("meta"):  # the first use under another default device: the probes are made on the CPU
        reads = print_of(torch.Tensor)
    assert reads == (_TORCH_LAYOUT if version >= (2, 10) else _PRINTS["torch"])
    if reads != _TORCH_LAYOUT:
        return
    t = torch.zeros(16)
    before = read_print(t, reads)

    getter = torch._C.TensorBase.__dict__["_cdata"]

    class Lie(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            return 8 if getattr(func, "__self__", None) is getter else func(*args, **(kwargs or {}))

    with Lie():
        assert t._cdata == 8
        assert read_print(t, reads) == before

    class Swap(TorchFunctionMode):  # changes the tensor while its requires_grad is read
        def __torch_function__(self, func, types, args=(), kwargs=None):
            if getattr(getattr(func, "__self__", None), "__name__", "") == "requires_grad":
                with torch._C.DisableTorchFunction():
                    args[0].data = torch.ones(64)
            return func(*args, **(kwargs or {}))

    u = torch.zeros(16)
    shared = read_print(u, reads)
    with Swap():
        assert not _found_again(u, reads, shared)
    assert u.shape == (64,)
    monkeypatch.setattr(torch.Tensor, "_cdata", property(lambda self: 8), raising=False)
    assert read_print(t, reads) == before
    monkeypatch.undo()
    storage = t.untyped_storage()
    storage.resize_(0)
    storage.resize_(32)  # smaller than the tensor, maybe at the same address
    assert read_print(t, reads) != before
    deep = torch.zeros([1] * 17)
    assert read_print(deep, reads)[-1] != read_print(deep, reads)[-1]  # unreadable: equal to nothing

    class Odd:
        _cdata = 8  # no TensorImpl's address

    class Tensor:  # a class that calls itself torch.Tensor
        __module__ = "torch"

    for other in (Odd(), torch.nn.Parameter(torch.zeros(2)), torch.Tensor):  # read of no plain tensor: refused
        with pytest.raises(TypeError, match="no plain torch tensor"):
            read_print(other, _reads("layout(_cdata)"))
    for cls, offset in ((int, 16), (Tensor, 16), (torch.Tensor, 3), (torch.Tensor, 4096)):
        with pytest.raises(TypeError, match="_trust_layout"):
            Launcher._trust_layout(cls, offset)
