"""taichi_aot.torch.op: kernels and graphs as PyTorch operators, on x64 with torch's CPU build (eager,
torch.compile(fullgraph=True), opcheck, autograd, the errors)."""

from __future__ import annotations

import numpy as np
import pytest
from test_multi import built  # noqa: F401  (the fixture: a module with x64 and Vulkan parts)

from conftest import require_arch, require_extra
from taichi_aot import Arch, ArgumentTypeError, ClosedError, NotSupportedError, Runtime

torch = require_extra("torch", "interop")
tt = pytest.importorskip("taichi_aot.torch")


@pytest.fixture(scope="module")
def x64(modules):
    require_arch(Arch.X64)
    with Runtime(Arch.X64) as rt:
        yield rt, rt.load_module(modules.path(Arch.X64))


def test_kernel_op_eager_values_and_keywords(x64):
    _rt, mod = x64
    add = tt.op(mod.kernels["add"], {0: 1})  # x (written) shaped like y: x = 0 + a*y
    y = torch.arange(16, dtype=torch.float32)
    assert torch.equal(add(y, 2.0), 2 * y)
    assert torch.equal(add(arg1=y, arg2=0.5), 0.5 * y)  # unnamed (ti.aot.Module) arguments: arg<i>
    assert not torch.equal(add(y, 1.0), torch.zeros(16))  # a new zero-filled output each call
    assert torch.equal(add(y[:5], 1.0), y[:5])


def test_graph_op_inout_and_shapes(x64):
    _rt, mod = x64
    twice = tt.op(mod.graphs["add_twice"], {"x": "y"})
    y = torch.ones(8)
    assert torch.equal(twice(y=y, a=1.5), torch.full((8,), 3.0))
    acc = tt.op(mod.kernels["accumulate"], {0: 0, 2: 2})  # total and v read and written: taken in and out
    total, v = torch.tensor(1.0), torch.tensor([1.0, 2.0, 3.0])
    t2, v2 = acc(total, torch.arange(4, dtype=torch.float32), v)
    assert float(t2) == 7.0 and v2.tolist() == [2.0, 4.0, 6.0] and float(total) == 1.0 and v.tolist() == [1, 2, 3]
    fill = tt.op(mod.kernels["fill_i32"], {0: ((3, 4), np.int32)})
    assert torch.equal(fill(7), 7 + 100 * torch.arange(3)[:, None] + torch.arange(4)[None, :].int())


def test_opcheck_and_compile_fullgraph(x64):
    _rt, mod = x64
    add = tt.op(mod.kernels["add"], {0: 1})
    y = torch.linspace(0, 1, 32)
    torch.library.opcheck(add.custom_op, (y, 2.0))

    def step(y):
        return add(torch.sin(y) + 1, 3.0) * 2 - 1

    compiled = torch.compile(step, fullgraph=True)
    for i in range(20):
        yi = y + i
        assert torch.allclose(compiled(yi), step(yi)), i
        assert torch.allclose(compiled(yi), (3 * (torch.sin(yi) + 1)) * 2 - 1)


def test_wrong_inputs_are_typed_errors_naming_the_argument(x64):
    _rt, mod = x64
    add = tt.op(mod.kernels["add"], {0: 1})
    with pytest.raises(ArgumentTypeError, match=r"kernel 'add' argument 1: expected f32 ndarray with ndim 1, got "
                                                r"torch.int32"):
        add(torch.zeros(4, dtype=torch.int32), 1.0)
    with pytest.raises(ArgumentTypeError, match=r"argument 1: expected f32 ndarray with ndim 1, got .* shape"):
        add(torch.zeros(2, 2), 1.0)
    with pytest.raises(ArgumentTypeError, match="takes 2 argument"):
        add(torch.zeros(2), 1.0, 3)
    with pytest.raises(ArgumentTypeError, match="missing input"):
        add(torch.zeros(2))
    with pytest.raises(ArgumentTypeError, match="no input 'z'"):
        add(torch.zeros(2), z=1.0)
    with pytest.raises(ArgumentTypeError, match="a tensor on meta, and the kernel's runtime is X64"):
        add(torch.zeros(4, device="meta"), 1.0)  # eagerly, as under torch.compile: another device is refused
    with pytest.raises(ArgumentTypeError, match="has no argument 'q'"):
        tt.op(mod.kernels["add"], {"q": 1})
    with pytest.raises(ArgumentTypeError, match=r"argument 0 \(its output shape\): expected i32 ndarray with ndim 2"):
        tt.op(mod.kernels["fill_i32"], {0: ((3,), np.int32)})
    compiled = torch.compile(lambda y: add(y, 1.0), fullgraph=True)
    with pytest.raises(Exception) as info:  # torch reports it as its own error, ours its cause
        compiled(torch.zeros(4, dtype=torch.int32))
    assert isinstance(info.value.__cause__, ArgumentTypeError) and "argument 1" in str(info.value.__cause__)


def test_autograd_needs_a_backward(x64):
    _rt, mod = x64
    y = torch.arange(4.0, requires_grad=True)
    with pytest.raises(NotSupportedError, match="no backward was given"):
        tt.op(mod.kernels["add"], {0: 1})(y, 2.0).sum().backward()
    add = tt.op(mod.kernels["add"], {0: 1}, backward=lambda inputs, outputs, grads: (grads[0] * inputs[1], None))
    add(y, 3.0).sum().backward()
    assert y.grad.tolist() == [3.0] * 4
    plain = tt.op(mod.kernels["add"], {0: 1})
    with torch.no_grad():  # no gradient asked for: the op runs, its output needs none
        assert not plain(y, 2.0).requires_grad
    assert not plain(y.detach(), 2.0).requires_grad


def test_op_names(x64):
    """``name=`` is one operator for the process's life; a name torch cannot take is an ArgumentTypeError too."""
    _rt, mod = x64
    first = tt.op(mod.kernels["add"], {0: 1}, name="taichi_aot_test::named_once")
    assert first.qualname == "taichi_aot_test::named_once" and first(torch.ones(2), 1.0).tolist() == [1.0, 1.0]
    for name in ("taichi_aot_test::named_once", "a.b::c", "::c", "ns::", "no_namespace"):
        with pytest.raises(ArgumentTypeError, match=r"taichi_aot\.torch\.op"):
            tt.op(mod.kernels["add"], {0: 1}, name=name)


def test_autograd_under_torch_compile(x64):
    """A compiled step through the op: the given backward runs, and an op without one still raises at backward."""
    _rt, mod = x64
    add = tt.op(mod.kernels["add"], {0: 1}, backward=lambda inputs, outputs, grads: (grads[0] * inputs[1], None))
    compiled = torch.compile(lambda y, a: (add(torch.sin(y), a) ** 2).sum(), fullgraph=True)
    for a in (2.0, 3.0):
        y = torch.linspace(0, 1, 8, requires_grad=True)
        compiled(y, a).backward()
        assert torch.allclose(y.grad, 2 * (a * torch.sin(y.detach())) * a * torch.cos(y.detach()))
    plain = tt.op(mod.kernels["add"], {0: 1})
    # torch.compile traces the backward when it compiles: the error comes then, wrapped by torch
    with pytest.raises((NotSupportedError, torch._dynamo.exc.BackendCompilerFailed), match="no backward was given"):
        torch.compile(lambda y: plain(y, 2.0).sum(), fullgraph=True)(torch.ones(4, requires_grad=True)).backward()


def test_closed_runtime_is_a_typed_error(modules):
    require_arch(Arch.X64)
    rt = Runtime(Arch.X64)
    add = tt.op(rt.load_module(modules.path(Arch.X64)).kernels["add"], {0: 1})
    rt.close()
    with pytest.raises(ClosedError):
        add(torch.zeros(2), 1.0)


def test_eager_calls_skip_the_dispatcher_only_where_it_would_hand_them_on(x64):
    """A plain eager call goes straight to the op's implementation; traced calls, dispatch modes (fake tensors),
    functorch transforms and inputs that need a gradient go through torch's dispatcher, as before."""
    from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode

    _rt, mod = x64
    add = tt.op(mod.kernels["add"], {0: 1})
    y = torch.arange(8, dtype=torch.float32)
    assert add._direct((y, 2.0)) and torch.equal(add(y, 2.0), 2 * y)
    assert not add._direct((y.requires_grad_(), 2.0))
    y = y.detach()
    with FakeTensorMode() as mode:
        fake = mode.from_tensor(y)
        assert not add._direct((fake, 2.0))
        out = add(fake, 2.0)  # the fake implementation: no launch
        assert isinstance(out, FakeTensor) and out.shape == (8,)
    batched = torch.vmap(lambda v: add(v, 2.0))(y.reshape(2, 4))  # each row through the dispatcher's fallback
    assert torch.equal(batched, 2 * y.reshape(2, 4))
    assert not add._direct((torch.zeros(8, device="meta"), 2.0))


def test_a_plain_eager_call_is_made_in_c(x64):
    """A plain eager call of a kernel's op is made in C (``_csrc/eager.c``), with no Python call of the op's own;
    other calls (by keyword, an input needing a gradient, an op whose output has a shape of its own) go to its
    Python call. A call C made that fails carries the op's own message, and the C half refuses a setup of the
    wrong form."""
    _rt, mod = x64
    add = tt.op(mod.kernels["add"], {0: 1})
    seen = []

    def count(op):  # the op's Python call, counted
        python_call = op._python_call

        def counted(*args, **kwargs):
            seen.append(args)
            return python_call(*args, **kwargs)

        op._python_call = counted

    count(add)
    y = torch.arange(8, dtype=torch.float32)
    for a in (2.0, 3.0, 0.5):
        assert torch.equal(add(y, a), a * y)
    assert seen == []
    with pytest.raises(ArgumentTypeError, match=r"argument 1: expected f32 ndarray with ndim 1, got torch.int32"):
        add(torch.zeros(4, dtype=torch.int32), 1.0)  # made in C, failed in the launch: the op's message
    assert seen == []
    assert torch.equal(add(arg1=y, arg2=0.5), 0.5 * y) and len(seen) == 1  # by keyword
    assert torch.equal(add(y.clone().requires_grad_(), 2.0), 2 * y) and len(seen) == 2  # autograd's way
    shaped = tt.op(mod.kernels["fill_i32"], {0: ((3, 4), np.int32)})  # an output of its own shape: Python's call
    count(shaped)
    assert shaped(7).shape == (3, 4) and len(seen) == 3
    form = dict(count=2, truthy=(), nones=(), tensor=torch.Tensor, tensors=(0,), device="is_cpu",
                makers=((0, torch.clone),), order=(0, 1), kernel=print, wait=None, held=None, stream=None,
                runtime=None)
    with pytest.raises(TypeError, match="_eager_setup"):
        add._eager_setup(**{**form, "tensor": 3})
    for bad in ({"tensors": (2,)}, {"order": (0, 3)}, {"makers": ((5, torch.clone),)}, {"makers": ((0, 1),)}):
        with pytest.raises(ValueError, match="_eager_setup"):
            add._eager_setup(**{**form, **bad})
    for bad in ({"wait": 5}, {"truthy": (1,)}, {"stream": print}):  # not callable; a stream getter, no runtime
        with pytest.raises(TypeError, match="_eager_setup"):
            add._eager_setup(**{**form, **bad})
    assert torch.equal(add(y, 2.0), 2 * y) and len(seen) == 3  # a refused setup leaves the op as it was


def test_the_dispatchers_call_is_made_in_c_too(x64):
    """The op's implementation that torch's dispatcher calls (a call through ``custom_op``, a compiled graph's) is
    made in C as its eager call is, and values are the same; a subclass that gives its own ``_launch`` keeps it."""
    _rt, mod = x64
    add = tt.op(mod.kernels["add"], {0: 1})
    launched = []
    launch = add._launch
    add._launch = lambda inputs: (launched.append(inputs), launch(inputs))[1]
    y = torch.arange(8, dtype=torch.float32)
    assert torch.equal(add.custom_op(y, 2.0), 2 * y)
    assert torch.equal(torch.compile(lambda v: add(v, 3.0), fullgraph=True)(y), 3 * y)
    assert launched == []

    class Doubled(tt.Op):
        def _launch(self, inputs):
            return 2 * super()._launch(inputs)

    doubled = Doubled(mod.kernels["add"], {0: 1})
    assert torch.equal(doubled.custom_op(y, 2.0), 4 * y)  # its own _launch, through the dispatcher


def test_the_eager_call_in_c_under_hostile_callables(x64):
    """What the C call runs may set the op up anew (it works on references of its own), a check that raises (a
    KeyboardInterrupt in torch's compile check) stops the call as the Python path would, and a failed call keeps
    the launch's error as the context of the op's own."""
    _rt, mod = x64
    add = tt.op(mod.kernels["add"], {0: 1})
    y = torch.arange(4, dtype=torch.float32)
    form = dict(count=2, truthy=(), nones=(), tensor=torch.Tensor, tensors=(0,), device="is_cpu",
                makers=((0, torch.zeros_like),), order=(1, 0, 1), kernel=add.spec.entry, wait=_rt.wait, held=None,
                stream=None, runtime=None)

    def resetting(x):  # a maker that sets the op up anew in the middle of the call
        add._eager_setup(**{**form, "makers": ((0, torch.zeros_like),), "order": (2, 0, 1)})
        return torch.zeros_like(x)

    add._eager_setup(**{**form, "makers": ((0, resetting), (0, torch.zeros_like)), "order": (2, 0, 1)})
    out = add(y, 2.0)  # the call goes on with what it began with
    assert torch.equal(out[0], 2 * y) and torch.equal(add(y, 3.0), 3 * y)

    def interrupted():
        raise KeyboardInterrupt

    add._eager_setup(**{**form, "truthy": (interrupted,), "order": (2, 0, 1)})
    with pytest.raises(KeyboardInterrupt):
        add(y, 2.0)
    fresh = tt.op(mod.kernels["add"], {0: 1})
    with pytest.raises(ArgumentTypeError) as info:
        fresh(torch.zeros(4, dtype=torch.int32), 1.0)
    assert info.value.__context__ is not None  # the launch's own error, under the op's message


def test_a_profiler_trace_names_the_op(x64):
    """Under ``torch.profiler`` an eager call goes by torch's dispatcher, so the trace names the op as it names
    torch's own (``<namespace>::<name>``); its values are the same, and outside the profiler the call skips the
    dispatcher again."""
    from torch.profiler import ProfilerActivity, profile

    _rt, mod = x64
    add = tt.op(mod.kernels["add"], {0: 1}, name="taichi_aot_test::profiled_add")
    y = torch.arange(8, dtype=torch.float32)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        out = add(y, 2.0)
    torch.testing.assert_close(out, 2 * y)
    names = {e.key for e in prof.key_averages()}
    assert "taichi_aot_test::profiled_add" in names, sorted(names)
    assert add._direct((y, 2.0))  # no profiler: the dispatcher is skipped again


def test_one_op_over_a_modules_parts(built):  # noqa: F811
    """``op_of``: a kernel of a module with several parts as one op, its part for the tensors' device loaded at the
    first call on a runtime of its own (x64 here; CUDA where a GPU is, tests/test_ops_cuda.py), eagerly and compiled;
    a device without a part names what the module holds; runtimes may be given; the op closes the ones it made."""
    import os

    from taichi_aot import ClosedError

    path = os.path.join(built, "multi.tcm")  # x64 and Vulkan parts
    saxpy = tt.op_of(path, "saxpy", {"y": "y"}, op_name="taichi_aot_test::multi_saxpy")
    assert saxpy.devices == ("cpu",) and saxpy.parts == {}  # nothing loaded yet
    x, y = torch.arange(4, dtype=torch.float32), torch.ones(4)
    assert torch.equal(saxpy(x, y, 2.0), 2 * x + 1) and list(saxpy.parts) == ["cpu"]
    assert saxpy.parts["cpu"].qualname == "taichi_aot_test::multi_saxpy_cpu"
    assert torch.equal(saxpy(x=x, y=y, a=0.5), 0.5 * x + 1)  # keywords
    compiled = torch.compile(lambda u, v: saxpy(u, v, 3.0) * 2, fullgraph=True)
    assert torch.equal(compiled(x, y), 2 * (3 * x + 1))
    with pytest.raises(ArgumentTypeError, match=r"meta, and module .* holds parts for vulkan, x64: the op runs on cpu"):
        saxpy(torch.zeros(4, device="meta"), torch.zeros(4, device="meta"), 1.0)
    saxpy.close()
    with pytest.raises(ClosedError):
        saxpy(x, y, 2.0)
    unloaded = tt.op_of(path, "saxpy", {"y": "y"})
    late = torch.compile(lambda u, v: unloaded(u, v, 1.0))  # not loaded yet: loaded outside the trace
    assert torch.equal(late(x, y), x + 1) and list(unloaded.parts) == ["cpu"]
    unloaded.close()
    closed = tt.op_of(path, "saxpy", {"y": "y"})
    closed.close()
    with pytest.raises(ClosedError):  # no part is loaded after close
        closed(x, y, 2.0)
    missing = tt.op_of(path, "no_such_kernel", {0: 0})
    for _ in range(2):  # each try loads anew, keeping no runtime of a part that cannot load
        with pytest.raises(Exception, match="no_such_kernel"):
            missing(x)
    with Runtime(Arch.X64) as rt:  # a runtime of the program's own: used, and not closed by the op
        given = tt.op_of(path, "saxpy", {"y": "y"}, runtimes={"cpu": rt})
        assert torch.equal(given(x, y, 1.0), x + 1)
        given.close()
        assert not rt.closed
    with pytest.raises(ArgumentTypeError, match="runtimes for cuda"):
        tt.op_of(path, "saxpy", {"y": "y"}, runtimes={"cuda": object()})
    with pytest.raises(ArgumentTypeError, match=r"runtimes\['cpu'\] must be an X64 Runtime"):
        tt.op_of(path, "saxpy", {"y": "y"}, runtimes={"cpu": "a string"})
    for device in ("cuda:1", "cuda:01", "cpu:0", "cuda:x", "cuda:\u00b2", 1):  # a part the module lacks; no device
        with pytest.raises(ArgumentTypeError, match=f"runtimes for {device}, and the module has parts for the devices"):
            tt.op_of(path, "saxpy", {"y": "y"}, runtimes={device: rt})
    lacking = tt.op_of(path, "saxpy", {"y": "y"})
    for device in ("cuda:1", "cuda", 0, "cuda:\u00b2"):
        with pytest.raises(ArgumentTypeError, match=f"arrays on {device}, and module .* holds parts for vulkan, x64"):
            lacking.load(device)
    with pytest.raises(ArgumentTypeError, match="arrays on cuda:1, and module"):
        lacking.load(torch.device("cuda", 1))  # a torch device as its name
    assert lacking.parts == {}
    lacking.close()
    vulkan_only = os.path.join(built, "vulkan.tcm")
    with pytest.raises(NotSupportedError, match="none for x64 or cuda"):
        tt.op_of(vulkan_only, "saxpy", {"y": "y"})


def _traced_targets(fn, *args):
    """The operators Dynamo's graph of ``fn(*args)`` calls, and the result of running that graph."""
    graphs = []

    def backend(gm, inputs):
        graphs.append({str(n.target) for n in gm.graph.nodes if n.op == "call_function"})
        return gm.forward

    torch._dynamo.reset()
    out = torch.compile(fn, backend=backend, fullgraph=True)(*args)
    return graphs[-1], out


def test_a_compiled_call_needing_no_gradient_is_made_in_c(x64):
    """A traced call whose inputs need no gradient takes the op's ``<name>_nograd`` operator, whose kernel on the
    op's device is made in C (``_csrc/torchop.c``: no Python between torch's dispatcher and the launch); a call
    with an input that needs one takes the op itself (its autograd kernel)."""
    _rt, mod = x64
    add = tt.op(mod.kernels["add"], {0: 1})
    assert add.boxed
    y = torch.arange(8, dtype=torch.float32)
    nograd = str(add._nograd_op)
    assert nograd.startswith("taichi_aot_nograd.")  # a namespace of its own: no name of a user's is taken
    targets, out = _traced_targets(lambda v: add(v, 3.0), y)
    assert nograd in targets and torch.equal(out, 3 * y)
    targets, _ = _traced_targets(lambda v: add(v, 3.0), y.clone().requires_grad_())
    assert str(add.custom_op) in targets
    with torch.no_grad():  # grad mode off: no gradient, whatever the inputs say
        targets, _ = _traced_targets(lambda v: add(v, 3.0), y.clone().requires_grad_())
    assert nograd in targets
    class Step(torch.nn.Module):
        def forward(self, v):
            return add(v, 3.0)

    exported = torch.export.export(Step(), (y,))  # run again later unguarded, with gradients maybe: the op itself
    assert "taichi_aot_nograd" not in exported.graph_module.code
    assert torch.equal(exported.module()(y), 3 * y)
    torch._dynamo.reset()
    compiled = torch.compile(lambda v: add(torch.cos(v), 0.5) + 1, fullgraph=True)  # inductor
    for i in range(5):
        assert torch.allclose(compiled(y + i), 0.5 * torch.cos(y + i) + 1), i
    with pytest.raises(RuntimeError):  # under a functorch transform the op itself: no gradient of zeros made up
        torch.compile(torch.func.grad(lambda v: add(v, 3.0).sum()))(y)
    strided = torch.compile(lambda v: add(v[::2], 3.0) + add(v.view(4, 2).t()[1], 1.0), fullgraph=True)
    assert torch.equal(strided(y), 3 * y[::2] + y.view(4, 2).t()[1])  # views copied to contiguous first
    fill = tt.op(mod.kernels["fill_i32"], {0: 0})  # x read and written (a clone), an int scalar
    assert fill.boxed
    z = torch.zeros(3, 4, dtype=torch.int32)
    expect = 7 + 100 * torch.arange(3)[:, None] + torch.arange(4)[None, :].int()
    assert torch.equal(torch.compile(lambda x: fill(x, 7), fullgraph=True)(z), expect) and not z.any()
    shaped = tt.op(mod.kernels["fill_i32"], {0: ((3, 4), np.int32)})  # an output of a shape of its own
    twice = tt.op(mod.graphs["add_twice"], {"x": "y"})  # a compute graph
    assert shaped.boxed and twice.boxed
    assert torch.equal(torch.compile(lambda: shaped(7), fullgraph=True)(), expect)
    assert torch.equal(torch.compile(lambda v: twice(y=v, a=1.5), fullgraph=True)(y), 3 * y)
    acc = tt.op(mod.kernels["accumulate"], {0: 0, 2: 2})  # a 0-d tensor and two outputs, through C
    total, v = torch.tensor(1.0), torch.tensor([1.0, 2.0, 3.0])
    t2, v2 = torch.compile(lambda t, u, w: acc(t, u, w), fullgraph=True)(total, torch.arange(4.0), v)
    assert float(t2) == 7.0 and v2.tolist() == [2.0, 4.0, 6.0] and float(total) == 1.0


def test_the_c_kernels_faults_are_torchs_errors_and_leave_the_process_whole(modules):
    """Bad input handed to the ``_nograd`` operator itself (the traced call's checks never let it reach there):
    torch's error naming what is wrong, nothing launched, and the op and its runtime still work; after the runtime
    closes, the error says so."""
    require_arch(Arch.X64)
    rt = Runtime(Arch.X64)
    mod = rt.load_module(modules.path(Arch.X64))
    add, fill = tt.op(mod.kernels["add"], {0: 1}), tt.op(mod.kernels["fill_i32"], {0: 0})
    nograd = add._nograd_op
    y = torch.arange(8, dtype=torch.float32)
    for bad, match in ((torch.zeros(4, dtype=torch.float64), r"input 0: a tensor of torch.float64 with 1 dims, "
                                                               r"expected torch.float32 with 1"),
                       (torch.zeros(2, 2), "expected torch.float32 with 1"),
                       (torch.zeros(8)[::2], "not contiguous"),
                       (torch.zeros(0), "an empty array cannot be passed")):
        with pytest.raises(RuntimeError, match=match):
            nograd(bad, 1.0)
    with pytest.raises(ArgumentTypeError, match="a tensor on meta"):  # its fake's check, as the op's
        nograd(torch.zeros(4, device="meta"), 1.0)
    with pytest.raises(RuntimeError, match=r"input 1: 1099511627776 does not fit the kernel's type"):
        fill._nograd_op(torch.zeros(3, 4, dtype=torch.int32), 2 ** 40)
    with pytest.raises(RuntimeError, match=r"input 1: 1e\+300 is out of range for f32"):
        nograd(y, 1e300)
    with pytest.raises(Exception, match="out of range for f32"):  # the packer's checks at trace time, as eagerly
        torch.compile(lambda v: add(v, 1e300), fullgraph=True)(y)
    import threading

    caught: list[BaseException] = []
    got: list[torch.Tensor] = []
    compiled = torch.compile(lambda v: add(v, 2.0), fullgraph=True)
    compiled(y)

    def elsewhere():
        try:
            got.append(compiled(y))
        except RuntimeError as e:
            caught.append(e)

    worker = threading.Thread(target=elsewhere)
    worker.start()
    worker.join()
    # any thread may launch on a CPU runtime: the C kernel serves the worker as it serves the runtime's thread
    assert not caught and torch.equal(got[0], 2 * y), caught
    assert torch.equal(nograd(y, 2.0), 2 * y) and torch.equal(add(y, 2.0), 2 * y)
    rt.close()
    with pytest.raises(RuntimeError, match=r"ClosedError: .*its runtime is closed"):
        nograd(y, 2.0)
    with pytest.raises(ClosedError):
        add(y, 1.0)
