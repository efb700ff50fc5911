"""Reverse-mode kernels (autodiff): ``build`` exports each differentiable kernel's reverse kernel beside it, and
``kernel.grad(...)`` runs it on x64 (taichi_aot's own launch of its IR: libtaichi_c_api cannot hand it gradients),
giving Taichi's own JIT's gradients (tests/autodiff_kernels.py computes them)."""

from __future__ import annotations

import os

import numpy as np
import pytest

from autodiff_cases import CASES, INDEX, SEED, N, X
from conftest import HERE, IN_CI, build_beside_taichi, require_arch, require_extra
from taichi_aot import (
    Arch,
    ArgumentTypeError,
    InvalidArgumentError,
    NotSupportedError,
    OutOfMemoryError,
    ReadOnlyArrayError,
    Runtime,
)

SOURCE = os.path.join(HERE, "autodiff_kernels.py")


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple[str, dict]:
    """The kernels built for x64 and Vulkan, and Taichi's own gradients of them (and, under ``"build"``, what the
    build printed)."""
    require_arch(Arch.X64)
    require_extra("llvmlite.binding", "ptx")
    root = tmp_path_factory.mktemp("autodiff")
    out, expect = str(root / "autodiff.tcm"), str(root / "expect.npz")
    archs = ["x64", "vulkan"] if IN_CI or _has(Arch.VULKAN) else ["x64"]
    expected, printed = build_beside_taichi(SOURCE, archs, out, expect)
    return out, {**expected, "build": printed}


def _has(arch: Arch) -> bool:
    from taichi_aot import capi

    return capi.arch_status()[arch].available


def test_a_0d_loss_and_a_gather_through_indices_build_and_give_taichis_gradients(built):
    """A 0-D ``needs_grad`` loss (``loss[None] += ...``) and a kernel mixing ``needs_grad`` arrays with a plain i32
    index array build with their reverse kernels, which give Taichi's own gradients; a kernel Taichi cannot
    differentiate (a while loop) is built without its reverse kernel, said by the build, and the others with it."""
    path, expect = built
    with Runtime(Arch.X64) as rt:
        mod = rt.load_module(path)
        loss, x_grad = np.zeros((), np.float32), np.zeros(N, np.float32)
        mod.kernels["loss0"](X, loss)
        np.testing.assert_array_equal(loss, expect["loss0_loss"])
        mod.kernels["loss0"].grad(X, loss, grads=(x_grad, np.ones((), np.float32)))
        np.testing.assert_allclose(x_grad, expect["loss0_xgrad"], rtol=1e-6)
        y, x_grad = np.zeros(N, np.float32), np.zeros(N, np.float32)
        gather = mod.kernels["gather"]
        gather(X, INDEX, y, 1.5)
        np.testing.assert_array_equal(y, expect["gather_y"])
        gather.grad(X, INDEX, y, 1.5, grads={"x": x_grad, "y": SEED.copy()})  # idx needs none
        np.testing.assert_allclose(x_grad, expect["gather_xgrad"], rtol=1e-6)
        assert x_grad[INDEX[3]] != 0 and (x_grad[np.setdiff1d(np.arange(N), INDEX)] == 0).all()
        with pytest.raises(InvalidArgumentError, match=r"'gather_grad' argument 1 \('idx'\): expected i32"):
            gather.grad(X, INDEX.astype(np.float32), y, 1.5, grads=(x_grad, SEED.copy()))  # as a kernel call says
        assert "warning: kernel loopy (x64) built without its reverse-mode kernel" in expect["build"]
        y = np.zeros(N, np.float32)
        mod.kernels["loopy"](X, y)
        assert (y >= 10).all()
        with pytest.raises(NotSupportedError, match="no reverse-mode kernel"):
            mod.kernels["loopy"].grad(X, y, grads=(x_grad, SEED.copy()))


def test_reverse_kernels_give_taichis_own_gradients(built):
    path, expect = built
    with Runtime(Arch.X64) as rt:
        mod = rt.load_module(path)
        for name, (n, scalars) in CASES.items():
            kernel = mod.kernels[name]
            y = np.zeros(n, np.float32)
            kernel(X, y, *scalars)  # the primal, through libtaichi
            rt.wait()
            np.testing.assert_allclose(y, expect[f"{name}_y"], rtol=1e-6)
            x_grad, y_grad = np.zeros(N, np.float32), SEED[:n].copy()
            kernel.grad(X, y, *scalars, grads=(x_grad, y_grad))
            np.testing.assert_allclose(x_grad, expect[f"{name}_xgrad"], rtol=1e-6, atol=1e-7)
            np.testing.assert_array_equal(y_grad, expect[f"{name}_ygrad"])  # an output's gradient read, then cleared
            again = np.zeros(N, np.float32)
            kernel.grad(X, y, *scalars, grads={0: again, 1: SEED[:n].copy()})  # by index; accumulated into
            output = "s" if name == "total" else "y"
            kernel.grad(X, y, *scalars, grads={"x": again, output: SEED[:n].copy()})  # by name, as build records
            np.testing.assert_allclose(again, 2 * expect[f"{name}_xgrad"], rtol=1e-5, atol=1e-7)


def test_torch_cpu_tensors_as_arrays_and_gradients(built):
    torch = require_extra("torch", "interop")
    path, expect = built
    with Runtime(Arch.X64) as rt:
        sq = rt.load_module(path).kernels["sq"]
        x = torch.tensor(X, requires_grad=True)
        x_grad, y_grad = torch.zeros(N), torch.tensor(SEED)
        sq.grad(x, torch.zeros(N), grads=(x_grad, y_grad))
        np.testing.assert_allclose(x_grad.numpy(), expect["sq_xgrad"], rtol=1e-6)


def test_what_cannot_be_differentiated_is_refused_typed(built, tmp_path):
    path, _ = built
    with Runtime(Arch.X64) as rt:
        mod = rt.load_module(path)
        by_name = mod.kernels["sq_grad"]  # libtaichi would crash on it: the own x64 launch takes it, as on CUDA
        assert by_name.launcher == "x64" and [a.name for a in by_name.signature] == ["x", "y", "x_grad", "y_grad"]
        x_grad = np.zeros(N, np.float32)
        by_name(X, np.zeros(N, np.float32), x_grad, np.ones(N, np.float32))
        np.testing.assert_allclose(x_grad, 2 * X, rtol=1e-6)  # d(x*x)/dx, seeded with ones
        with pytest.raises(NotSupportedError, match="has no reverse-mode kernel"):
            mod.kernels["plain"].grad(np.zeros(4, np.float32), grads=())
        with pytest.raises(NotSupportedError, match="has no reverse-mode kernel"):
            mod.kernels["plain"].prepare_grad()
        mod.kernels["sq"].prepare_grad()  # compiled now: the first grad finds it ready
        sq, x, y = mod.kernels["sq"], X.copy(), np.zeros(N, np.float32)
        good = (np.zeros(N, np.float32), np.ones(N, np.float32))
        for grads, error, message in [
            ((good[0],), ArgumentTypeError, "1 given, the kernel takes one for each of arguments"),
            ({"z": good[0]}, ArgumentTypeError, "'z' is no argument with a gradient"),
            ({0: good[0]}, ArgumentTypeError, r"no gradient for argument\(s\) \[1\]"),
            ("x", ArgumentTypeError, "a sequence or a dict"),
            # the gradients are arguments as any kernel's: the same packers, the same foreign-array policy
            ((good[0].astype(np.float64), good[1]), InvalidArgumentError, r"argument 2 \('x_grad'\): expected f32"),
            ((np.zeros(N - 1, np.float32), good[1]), InvalidArgumentError, "its array's is"),
            ((_read_only(good[0]), good[1]), ReadOnlyArrayError, "'x_grad'.* read-only"),
        ]:
            with pytest.raises(error, match=message):
                sq.grad(x, y, grads=grads)
        strided = np.zeros(2 * N, np.float32)[::-2]  # a staged copy, copied back: the gradient lands in the view
        sq.grad(x, y, grads=(strided, np.ones(N, np.float32)))
        np.testing.assert_allclose(strided, 2 * X, rtol=1e-6)
        with pytest.raises(ArgumentTypeError, match="expected f32 ndarray with ndim 1, got list"):
            sq.grad([1.0] * N, y, grads=good)
        with pytest.raises(ArgumentTypeError, match="a masked array"):  # host arrays read as a kernel call reads them
            sq.grad(np.ma.masked_array(x), y, grads=good)
        with pytest.raises(ArgumentTypeError, match=r"takes 3 argument\(s\)"):
            mod.kernels["poly"].grad(x, y, grads=good)
        with pytest.raises(ArgumentTypeError, match="expected f32 scalar, got str"):
            mod.kernels["poly"].grad(x, y, "k", grads=good)


def test_vector_gradients_and_the_arrays_a_reverse_kernel_writes(built):
    """An array of vectors with gradients takes them as any argument of its kind: an NdArray's or numpy's, mixed
    (an NdArray's shape leaves the element out, numpy's has it); the arrays with gradients are only read by the
    reverse kernel (read-only ones serve), a plain array its primal writes is written again (a read-only one is
    refused, naming it)."""
    path, _ = built
    with Runtime(Arch.X64) as rt:
        mod = rt.load_module(path)
        v = np.linspace(-1, 1, 3 * N, dtype=np.float32).reshape(N, 3)
        seed = np.arange(1, N + 1, dtype=np.float32)
        nd = rt.ndarray((N,), np.float32, elem_shape=(3,))
        nd.from_numpy(v)
        v_grad = np.zeros((N, 3), np.float32)
        mod.kernels["vnorm"].grad(nd, np.zeros(N, np.float32), grads=(v_grad, seed.copy()))  # NdArray, numpy's
        np.testing.assert_allclose(v_grad, 2 * v * seed[:, None], rtol=1e-6)
        g = rt.ndarray((N,), np.float32, elem_shape=(3,))
        g.from_numpy(np.zeros((N, 3), np.float32))
        mod.kernels["vnorm"].grad(v, np.zeros(N, np.float32), grads=(g, seed.copy()))  # numpy's, an NdArray
        np.testing.assert_allclose(g.to_numpy(), 2 * v * seed[:, None], rtol=1e-6)
        with pytest.raises(InvalidArgumentError, match=r"the gradient of kernel 'vnorm' argument 0 .*: shape \(5,\)"):
            mod.kernels["vnorm"].grad(nd, np.zeros(N, np.float32), grads=(np.zeros((5, 3), np.float32), seed))

        side = mod.kernels["side"]
        x, y, z = _read_only(X.copy()), _read_only(np.zeros(N, np.float32)), np.zeros(N, np.float32)
        x_grad = np.zeros(N, np.float32)
        side.grad(x, y, z, grads=(x_grad, np.ones(N, np.float32)))
        np.testing.assert_allclose(x_grad, 2 * X, rtol=1e-6)
        np.testing.assert_allclose(z, X + 100.0, rtol=1e-6)  # written again
        with pytest.raises(ReadOnlyArrayError, match=r"'side_grad' argument 2 \('z'\).*read-only"):
            side.grad(X, np.zeros(N, np.float32), _read_only(np.zeros(N, np.float32)),
                      grads=(np.zeros(N, np.float32), np.ones(N, np.float32)))


def test_a_reverse_kernel_the_x64_launch_cannot_take_is_refused_saying_why(built, tmp_path):
    """Its IR missing, a reverse kernel is refused by ``grad`` and by ``launchers()`` with the reason, once; its
    primal still runs on libtaichi."""
    from taichi_aot.metadata import extract_archive

    path, _ = built
    folder = tmp_path / "x64"
    extract_archive(path, str(tmp_path / "parts"))
    part = tmp_path / "parts" / "x64.tcm"  # a multi-arch module's x64 part (built with Vulkan), else the module
    if part.exists():
        extract_archive(str(part), str(folder))
    else:
        (tmp_path / "parts").rename(folder)
    (folder / "sq_grad.ll").unlink()
    with Runtime(Arch.X64) as rt:
        mod = rt.load_module(str(folder))
        said = mod.launchers()["sq_grad"]
        assert said.startswith("refused: a reverse-mode") and said.endswith("the module has no IR for it (sq_grad.ll)")
        with pytest.raises(NotSupportedError, match=r"^kernel 'sq': its reverse-mode kernel 'sq_grad' cannot run on "
                                                    r"taichi_aot's x64 launch: the module has no IR for it"):
            mod.kernels["sq"].grad(X, np.zeros(N, np.float32), grads=(np.zeros(N, np.float32), SEED.copy()))
        y = np.zeros(N, np.float32)
        mod.kernels["sq"](X, y)
        rt.wait()
        np.testing.assert_allclose(y, X * X, rtol=1e-6)


def test_an_autodiff_stack_overflow_is_an_error_not_a_crash(built):
    """A reverse kernel whose loop carries more values than Taichi sized its autodiff stacks for wrote past them
    (a bus error in Taichi's own JIT): taichi_aot's x64 launch checks each stack access, and raises."""
    path, expect = built
    with Runtime(Arch.X64) as rt:
        mod = rt.load_module(path)
        x_grad, y_grad = np.zeros(N, np.float32), np.ones(N, np.float32)
        for _ in range(2):  # the flag is cleared: the same error again
            with pytest.raises(OutOfMemoryError, match=r"overflowed its autodiff stacks.*AD_STACK_SIZE"):
                mod.kernels["long"].grad(X, np.zeros(N, np.float32), grads=(x_grad, y_grad))
        spin = mod.kernels["spin"]  # a loop count known at launch only
        with pytest.raises(OutOfMemoryError, match="overflowed its autodiff stacks"):
            spin.grad(X, np.zeros(N, np.float32), 200, grads=(x_grad, y_grad))
        x_grad, y_grad = np.zeros(N, np.float32), np.ones(N, np.float32)
        spin.grad(X, np.zeros(N, np.float32), 1, grads=(x_grad, y_grad))
        np.testing.assert_allclose(x_grad, np.cos(X) + 0.5, rtol=1e-5)  # d(sin x + x/2)/dx
        x_grad, y_grad = np.zeros(N, np.float32), SEED.copy()
        mod.kernels["sq"].grad(X, np.zeros(N, np.float32), grads=(x_grad, y_grad))  # the process goes on
        np.testing.assert_allclose(x_grad, expect["sq_xgrad"], rtol=1e-6)


def test_vulkan_takes_the_primal_only(built, vulkan):
    """Taichi 1.7.4's reverse kernel on Vulkan binds no gradient buffers: the Vulkan part holds none."""
    path, expect = built
    with Runtime(vulkan) as rt:
        sq = rt.load_module(path).kernels["sq"]
        y = np.zeros(N, np.float32)
        sq(X, y)
        rt.wait()
        np.testing.assert_allclose(y, expect["sq_y"], rtol=1e-6)
        with pytest.raises(NotSupportedError, match="has no reverse-mode kernel"):
            sq.grad(X, y, grads=(np.zeros(N, np.float32), np.ones(N, np.float32)))


def _read_only(a: np.ndarray) -> np.ndarray:
    a = a.copy()
    a.flags.writeable = False
    return a


def test_modules_hold_the_pairs(built):
    path, _ = built
    with Runtime(Arch.X64) as rt:
        mod = rt.load_module(path)
        kernels = mod.kernels
        assert {"sq", "sq_grad", "poly_grad", "total_grad"} <= set(kernels) and "plain_grad" not in kernels
        reverse, primal = mod.kernel_info("poly_grad"), mod.kernel_info("poly")
        assert reverse is not None and primal is not None and reverse.reverse and not primal.reverse
        assert [a.needs_grad for a in reverse.args] == [True, True, False]  # x, y; the scalar k
        assert mod.kernel_info("no_such_kernel") is None


def test_a_torch_ops_backward_is_its_reverse_kernel(built):
    """An op of a kernel whose module holds its reverse kernel gets its backward from it (x64): gradients through
    autograd equal Taichi's own, and torch.autograd.gradcheck passes (an f64 kernel)."""
    torch = require_extra("torch", "interop")
    import taichi_aot.torch as tt

    path, expect = built
    with Runtime(Arch.X64) as rt:
        mod = rt.load_module(path)
        sq = tt.op(mod.kernels["sq"], {"y": "x"})
        x = torch.tensor(X, requires_grad=True)
        y = sq(x)
        (y * torch.tensor(SEED)).sum().backward()
        np.testing.assert_allclose(y.detach().numpy(), expect["sq_y"], rtol=1e-6)
        np.testing.assert_allclose(x.grad.numpy(), expect["sq_xgrad"], rtol=1e-6)
        wave = tt.op(mod.kernels["wave"], {"y": "x"})
        x64 = torch.linspace(-1.0, 1.0, 9, dtype=torch.float64, requires_grad=True)
        assert torch.autograd.gradcheck(lambda t: wave(t, 1.5), (x64,))
        total = tt.op(mod.kernels["total"], {"s": ((1,), np.float32)})
        x = torch.tensor(X, requires_grad=True)
        total(x).sum().backward()
        np.testing.assert_allclose(x.grad.numpy(), np.cos(X), rtol=1e-5)
        plain = tt.op(mod.kernels["plain"], {"x": "x"})  # no reverse kernel: as before, no backward
        with pytest.raises(NotSupportedError, match="no backward was given"):
            plain(torch.ones(4, requires_grad=True)).sum().backward()
        x = torch.tensor(X, requires_grad=True)
        with pytest.raises(NotSupportedError, match="a second derivative"):
            torch.autograd.grad(sq(x).sum(), x, create_graph=True)
        poly = tt.op(mod.kernels["poly"], {"y": "x"})  # under torch.compile: the backward is an operator too
        step = torch.compile(lambda x: (poly(sq(x), 0.75) * torch.tensor(SEED)).sum(), fullgraph=True)
        x, eager = torch.tensor(X, requires_grad=True), torch.tensor(X, requires_grad=True)
        step(x).backward()
        (poly(sq(eager), 0.75) * torch.tensor(SEED)).sum().backward()
        torch.testing.assert_close(x.grad, eager.grad)
        squash = tt.op(mod.kernels["squash"], {"x": "x"})  # x read and written: taken in, returned anew
        x = torch.tensor(X, requires_grad=True)
        (squash(x, 0.5) * torch.tensor(SEED)).sum().backward()
        np.testing.assert_allclose(x.grad.numpy(), X * SEED, rtol=1e-6)  # d(0.5 x^2)/dx = x, as Taichi's


def test_a_jax_ops_backward_is_its_reverse_kernel(built):
    """A JAX op of a kernel whose module holds its reverse kernel gets its VJP from it (x64): jax.grad equals
    Taichi's own gradients eagerly and under jax.jit, and jax.test_util.check_grads passes (an f64 kernel)."""
    jax = require_extra("jax", "jax")
    import jax.numpy as jnp
    from jax.test_util import check_grads

    import taichi_aot.jax as tj

    path, expect = built
    with Runtime(Arch.X64) as rt, jax.default_device(jax.devices("cpu")[0]):
        mod = rt.load_module(path)
        sq = tj.op(mod.kernels["sq"], {"y": "x"})
        seed = jnp.asarray(SEED)

        def loss(x):
            return jnp.sum(sq(x) * seed)

        np.testing.assert_allclose(jax.grad(loss)(jnp.asarray(X)), expect["sq_xgrad"], rtol=1e-6)
        np.testing.assert_allclose(jax.jit(jax.grad(loss))(jnp.asarray(X)), expect["sq_xgrad"], rtol=1e-6)
        poly = tj.op(mod.kernels["poly"], {"y": "x"})
        for k in (0.75, jnp.float32(0.75)):  # a number (an attribute) and a 0-d array (an operand, no cotangent)
            g = jax.grad(lambda x, k=k: jnp.sum(poly(x, k) * seed))(jnp.asarray(X))
            np.testing.assert_allclose(g, expect["poly_xgrad"], rtol=1e-5, atol=1e-6)
        total = tj.op(mod.kernels["total"], {"s": jax.ShapeDtypeStruct((1,), jnp.float32)})
        np.testing.assert_allclose(jax.grad(lambda x: total(x)[0])(jnp.asarray(X)), np.cos(X), rtol=1e-5)
        with jax.enable_x64(True):
            wave = tj.op(mod.kernels["wave"], {"y": "x"})
            check_grads(lambda t: wave(t, 1.5), (jnp.linspace(-1.0, 1.0, 9, dtype=jnp.float64),), order=1,
                        modes=["rev"])
        plain = tj.op(mod.kernels["plain"], {"x": "x"})  # no reverse kernel: as before, no backward
        with pytest.raises(NotSupportedError, match="no backward was given"):
            jax.grad(lambda x: jnp.sum(plain(x)))(jnp.ones(4, jnp.float32))
        with pytest.raises(NotSupportedError, match="a second derivative"):
            jax.grad(lambda x: jnp.sum(jax.grad(loss)(x)))(jnp.asarray(X))
        squash = tj.op(mod.kernels["squash"], {"x": "x"})  # read and written: aliased
        g = jax.jit(jax.grad(lambda x: jnp.sum(squash(x, 0.5) * seed)))(jnp.asarray(X))
        np.testing.assert_allclose(g, X * SEED, rtol=1e-6)


def shard_mapped(jax):
    """``jax.shard_map`` (``jax.experimental.shard_map`` before JAX 0.7)."""
    found = getattr(jax, "shard_map", None)
    if found is None:
        from jax.experimental.shard_map import shard_map as found
    return found


def test_a_jax_ops_gradient_under_shard_map(built):
    """jax.grad of a function calling the op inside ``shard_map`` (and of one calling ``shard_map``): the VJP's
    cotangents vary over the mesh axes their inputs vary over (a mesh of one CPU device: its values are typed varying
    all the same), eagerly and under jax.jit."""
    jax = require_extra("jax", "jax")
    import jax.numpy as jnp
    from jax.sharding import Mesh, PartitionSpec

    import taichi_aot.jax as tj

    path, expect = built
    shard_map = shard_mapped(jax)
    mesh = Mesh(np.array(jax.devices("cpu")[:1]), ("d",))
    with Runtime(Arch.X64) as rt, jax.default_device(jax.devices("cpu")[0]):
        sq = tj.op(rt.load_module(path).kernels["sq"], {"y": "x"})
        seed = jnp.asarray(SEED)
        inner = shard_map(jax.grad(lambda x, s: jnp.sum(sq(x) * s)), mesh=mesh, in_specs=(PartitionSpec("d"),) * 2,
                          out_specs=PartitionSpec("d"))
        outer = jax.grad(lambda x: jnp.sum(shard_map(sq, mesh=mesh, in_specs=PartitionSpec("d"),
                                                     out_specs=PartitionSpec("d"))(x) * seed))
        for grad in (inner, jax.jit(inner)):
            np.testing.assert_allclose(grad(jnp.asarray(X), seed), expect["sq_xgrad"], rtol=1e-6)
        # the op's results vary over the mesh as its operands do: typed invariant, what uses them would make them
        # varying again, whose transpose sums every device's cotangent over the mesh (a mesh of two: twice the
        # gradient); on a mesh of one that sum is there all the same, a psum over one device
        assert "psum" not in str(jax.make_jaxpr(inner)(jnp.asarray(X), seed))
        # an operand the same on every device (replicated) beside one that varies: its gradient is the sum of each
        # device's (a psum, the transpose of making it varying before the op), typed as it was, under jit too
        gat = tj.op(rt.load_module(path).kernels["gather"], {"y": "idx"})
        replicated = shard_map(jax.grad(lambda x, i, s: jnp.sum(gat(x, i, 1.5) * s)), mesh=mesh,
                               in_specs=(PartitionSpec(), PartitionSpec("d"), PartitionSpec("d")),
                               out_specs=PartitionSpec())
        index = jnp.asarray(INDEX)
        for grad in (replicated, jax.jit(replicated)):
            np.testing.assert_allclose(grad(jnp.asarray(X), index, seed), expect["gather_xgrad"], rtol=1e-6)
        assert "psum" in str(jax.make_jaxpr(replicated)(jnp.asarray(X), index, seed))
        for grad in (outer, jax.jit(outer)):
            np.testing.assert_allclose(grad(jnp.asarray(X)), expect["sq_xgrad"], rtol=1e-6)

