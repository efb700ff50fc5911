"""Reverse-mode kernels on CUDA, where a GPU with its driver is present (skipped elsewhere, as tests/test_cuda.py
is): ``build`` compiles tests/autodiff_kernels.py for CUDA with its PTX, and the reverse kernels run on taichi_aot's
own launcher (libtaichi cannot hand them their gradients), with NdArrays and torch's CUDA tensors, giving Taichi's
own JIT's gradients; a torch op's backward is its reverse kernel; an autodiff stack overflow is an error."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import numpy as np
import pytest

from autodiff_cases import CASES, INDEX, SEED, N, X
from conftest import HERE
from taichi_aot import Arch, InvalidArgumentError, OutOfMemoryError, Runtime, capi

SOURCE = os.path.join(HERE, "autodiff_kernels.py")


@pytest.fixture(scope="module")
def cuda_built(tmp_path_factory) -> tuple[str, dict]:
    status = capi.arch_status()[Arch.CUDA]
    if not status.available:
        pytest.skip(f"no CUDA here: {status.reason}")
    if importlib.util.find_spec("llvmlite") is None or importlib.util.find_spec("taichi") is None:
        pytest.skip("building a CUDA module with its PTX needs Taichi and llvmlite here")
    root = tmp_path_factory.mktemp("autodiff-cuda")
    out, expect = str(root / "autodiff"), str(root / "expect.npz")
    for command in ([sys.executable, "-m", "taichi_aot", "build", SOURCE, "--arch", "cuda", "-o", out],
                    [sys.executable, SOURCE, expect]):
        proc = subprocess.run(command, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    with np.load(expect) as f:
        return out, dict(f)


def test_a_0d_loss_and_a_gather_through_indices_on_the_own_launcher(cuda_built):
    """The 0-D ``needs_grad`` loss and the gather through a plain i32 index array, built with their reverse kernels
    for CUDA: Taichi's own gradients, on NdArrays."""
    path, expect = cuda_built
    with Runtime(Arch.CUDA) as rt:
        mod = rt.load_module(path)
        assert mod.launchers()["loss0_grad"] == "cuda" and mod.launchers()["gather_grad"] == "cuda"
        x, loss = rt.ndarray_from_numpy(X), rt.ndarray_from_numpy(np.zeros((), np.float32))
        mod.kernels["loss0"](x, loss)
        x_grad = rt.ndarray((N,), np.float32)
        mod.kernels["loss0"].grad(x, loss, grads=(x_grad, rt.ndarray_from_numpy(np.ones((), np.float32))))
        rt.wait()
        np.testing.assert_allclose(loss.to_numpy(), expect["loss0_loss"], rtol=1e-5)
        np.testing.assert_allclose(x_grad.to_numpy(), expect["loss0_xgrad"], rtol=1e-5, atol=1e-6)
        idx, y, x_grad = rt.ndarray_from_numpy(INDEX), rt.ndarray((N,), np.float32), rt.ndarray((N,), np.float32)
        mod.kernels["gather"](x, idx, y, 1.5)
        mod.kernels["gather"].grad(x, idx, y, 1.5, grads=(x_grad, rt.ndarray_from_numpy(SEED.copy())))
        rt.wait()
        np.testing.assert_allclose(y.to_numpy(), expect["gather_y"], rtol=1e-5, atol=1e-6)  # CUDA's sin
        np.testing.assert_allclose(x_grad.to_numpy(), expect["gather_xgrad"], rtol=1e-5, atol=1e-6)


def test_reverse_kernels_on_the_own_launcher_give_taichis_gradients(cuda_built):
    path, expect = cuda_built
    with Runtime(Arch.CUDA) as rt:
        mod = rt.load_module(path)
        launchers = mod.launchers()
        assert all(launchers[f"{name}_grad"] == "cuda" for name in CASES), launchers
        for name, (n, scalars) in CASES.items():
            kernel = mod.kernels[name]
            x, y = rt.ndarray_from_numpy(X), rt.ndarray((n,), np.float32)
            kernel(x, y, *scalars)
            x_grad, y_grad = rt.ndarray((N,), np.float32), rt.ndarray_from_numpy(SEED[:n].copy())
            kernel.grad(x, y, *scalars, grads=(x_grad, y_grad))
            rt.wait()
            np.testing.assert_allclose(y.to_numpy(), expect[f"{name}_y"], rtol=1e-5, atol=1e-6)
            np.testing.assert_allclose(x_grad.to_numpy(), expect[f"{name}_xgrad"], rtol=1e-5, atol=1e-6)
            np.testing.assert_array_equal(y_grad.to_numpy(), expect[f"{name}_ygrad"])  # read, then cleared
        # the reverse kernel itself: its arguments, then the gradients of those that have one
        sq_grad = mod.kernels["sq_grad"]
        assert [a.name for a in sq_grad.signature] == ["x", "y", "x_grad", "y_grad"]
        x_grad, y_grad = rt.ndarray((N,), np.float32), rt.ndarray_from_numpy(SEED.copy())
        sq_grad(rt.ndarray_from_numpy(X), rt.ndarray((N,), np.float32), x_grad, y_grad)
        np.testing.assert_allclose(x_grad.to_numpy(), expect["sq_xgrad"], rtol=1e-5)


def test_an_autodiff_stack_overflow_on_cuda_is_an_error(cuda_built):
    path, expect = cuda_built
    with Runtime(Arch.CUDA) as rt:
        mod = rt.load_module(path)
        x = rt.ndarray_from_numpy(X)
        for _ in range(2):
            with pytest.raises(OutOfMemoryError, match=r"overflowed its autodiff stacks.*AD_STACK_SIZE"):
                mod.kernels["long"].grad(x, rt.ndarray((N,), np.float32),
                                         grads=(rt.ndarray((N,), np.float32), rt.ndarray_from_numpy(SEED.copy())))
        spin = mod.kernels["spin"]  # a loop count known at launch only: an empty stack's top stays inside it
        with pytest.raises(OutOfMemoryError, match="overflowed its autodiff stacks"):
            spin.grad(x, rt.ndarray((N,), np.float32), 200,
                      grads=(rt.ndarray((N,), np.float32), rt.ndarray_from_numpy(SEED.copy())))
        with pytest.raises(InvalidArgumentError, match="not of the kind"):  # a gradient of another shape, in C
            mod.kernels["sq_grad"](x, rt.ndarray((N,), np.float32), rt.ndarray((N - 1,), np.float32),
                                   rt.ndarray((N,), np.float32))
        x_grad = rt.ndarray((N,), np.float32)  # the runtime goes on
        mod.kernels["sq"].grad(x, rt.ndarray((N,), np.float32), grads=(x_grad, rt.ndarray_from_numpy(SEED.copy())))
        rt.wait()
        np.testing.assert_allclose(x_grad.to_numpy(), expect["sq_xgrad"], rtol=1e-5)


def test_a_torch_ops_backward_on_cuda_is_its_reverse_kernel(cuda_built):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA here")
    import taichi_aot.torch as tt

    path, expect = cuda_built
    with Runtime(Arch.CUDA) as rt:
        mod = rt.load_module(path)
        sq = tt.op(mod.kernels["sq"], {"y": "x"})
        seed = torch.tensor(SEED, device="cuda")
        for stream in (torch.cuda.current_stream(), torch.cuda.Stream()):
            with torch.cuda.stream(stream):
                x = torch.tensor(X, device="cuda", requires_grad=True)
                (sq(x) * seed).sum().backward()
                np.testing.assert_allclose(x.grad.cpu().numpy(), expect["sq_xgrad"], rtol=1e-5)
        wave = tt.op(mod.kernels["wave"], {"y": "x"})
        x64 = torch.linspace(-1.0, 1.0, 9, dtype=torch.float64, device="cuda", requires_grad=True)
        assert torch.autograd.gradcheck(lambda t: wave(t, 1.5), (x64,))
        total = tt.op(mod.kernels["total"], {"s": ((1,), np.float32)})
        x = torch.tensor(X, device="cuda", requires_grad=True)
        total(x).sum().backward()
        np.testing.assert_allclose(x.grad.cpu().numpy(), np.cos(X), rtol=1e-5)
        squash = tt.op(mod.kernels["squash"], {"x": "x"})
        x = torch.tensor(X, device="cuda", requires_grad=True)
        (squash(x, 0.5) * seed).sum().backward()
        np.testing.assert_allclose(x.grad.cpu().numpy(), X * SEED, rtol=1e-5)


def test_a_torch_ops_backward_on_every_gpu(cuda_built):
    """A torch op of a runtime of each GPU torch has, and one op over the module (``op_of``: a part a GPU), give
    Taichi's gradient on tensors of that GPU: autograd runs the reverse kernel on its thread of that GPU, on that GPU's
    stream (one GPU here: GPU 0; two: both, GPU 1 first)."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA here")
    import taichi_aot.torch as tt

    path, expect = cuda_built
    gpus = list(range(torch.cuda.device_count()))[::-1]
    runtimes = [Runtime(Arch.CUDA, device_index=k) for k in gpus]
    over = tt.op_of(path, "sq", {"y": "x"})
    try:
        for k, rt in zip(gpus, runtimes):
            for op in (tt.op(rt.load_module(path).kernels["sq"], {"y": "x"}), over):
                x = torch.tensor(X, device=f"cuda:{k}", requires_grad=True)
                (op(x) * torch.tensor(SEED, device=f"cuda:{k}")).sum().backward()
                assert x.grad.device == torch.device("cuda", k)
                np.testing.assert_allclose(x.grad.cpu().numpy(), expect["sq_xgrad"], rtol=1e-5)
    finally:
        over.close()
        for rt in runtimes:
            rt.close()


def test_a_jax_ops_vjp_on_cuda_is_its_reverse_kernel(cuda_built):
    """On CUDA a JAX op's VJP is an op of the reverse kernel on XLA's stream (the own launcher): jax.grad equals
    Taichi's own eagerly and under jax.jit, check_grads passes, an overflow is XLA's error saying so."""
    jax = pytest.importorskip("jax")
    gpus = [d for d in jax.devices() if d.platform == "gpu"]
    if not gpus:
        pytest.skip("jax has no GPU here")
    import jax.numpy as jnp
    from jax.test_util import check_grads

    import taichi_aot.jax as tj

    path, expect = cuda_built
    with Runtime(Arch.CUDA) as rt, jax.default_device(gpus[0]):
        mod = rt.load_module(path)
        seed, x = jnp.asarray(SEED), jnp.asarray(X)
        sq = tj.op(mod.kernels["sq"], {"y": "x"})

        def loss(x):
            return jnp.sum(sq(x) * seed)

        for grad in (jax.grad(loss), jax.jit(jax.grad(loss))):
            np.testing.assert_allclose(np.asarray(grad(x)), expect["sq_xgrad"], rtol=1e-5)
        poly = tj.op(mod.kernels["poly"], {"y": "x"})
        got = jax.jit(jax.grad(lambda x: jnp.sum(poly(x, 0.75) * seed)))(x)
        np.testing.assert_allclose(np.asarray(got), expect["poly_xgrad"], rtol=1e-5, atol=1e-6)
        total = tj.op(mod.kernels["total"], {"s": jax.ShapeDtypeStruct((1,), jnp.float32)})
        np.testing.assert_allclose(np.asarray(jax.grad(lambda x: total(x)[0])(x)), np.cos(X), rtol=1e-5)
        with jax.enable_x64(True):
            wave = tj.op(mod.kernels["wave"], {"y": "x"})
            check_grads(lambda t: wave(t, 1.5), (jnp.linspace(-1.0, 1.0, 9, dtype=jnp.float64),), order=1,
                        modes=["rev"])
        squash = tj.op(mod.kernels["squash"], {"x": "x"})  # read and written: aliased
        got = jax.jit(jax.grad(lambda x: jnp.sum(squash(x, 0.5) * seed)))(x)
        np.testing.assert_allclose(np.asarray(got), X * SEED, rtol=1e-5)
        long = tj.op(mod.kernels["long"], {"y": "x"})
        with pytest.raises(Exception, match="overflowed its autodiff stacks"):
            jax.block_until_ready(jax.grad(lambda x: jnp.sum(long(x)))(x))


def test_a_jax_ops_gradient_under_pmap_on_every_gpu(cuda_built):
    """jax.grad through a JAX op under jax.pmap over every GPU JAX has: on each, the op's twin and its reverse op (the
    module loaded on a runtime of that GPU) give Taichi's gradient (one GPU here: pmap over it; two: both)."""
    jax = pytest.importorskip("jax")
    gpus = [d for d in jax.devices() if d.platform == "gpu"]
    if not gpus:
        pytest.skip("jax has no GPU here")
    import jax.numpy as jnp

    import taichi_aot.jax as tj

    path, expect = cuda_built
    with Runtime(Arch.CUDA) as rt:
        sq = tj.op(rt.load_module(path).kernels["sq"], {"y": "x"})
        seed = jnp.asarray(SEED)

        def grad(x):
            return jax.grad(lambda v: jnp.sum(sq(v) * seed))(x)

        xs = jnp.stack([jnp.asarray(X)] * len(gpus))
        got = np.asarray(jax.pmap(grad, devices=gpus)(xs))
        for row in got:
            np.testing.assert_allclose(row, expect["sq_xgrad"], rtol=1e-5)


def test_a_jax_ops_gradient_under_shard_map_on_every_gpu(cuda_built):
    """jax.grad through a JAX op inside ``shard_map`` over every GPU JAX has (one GPU: a mesh of one, whose values are
    typed varying all the same; two: both, each GPU's twin and its reverse op), and of a function calling
    ``shard_map``, under jax.jit: Taichi's gradient on each shard."""
    jax = pytest.importorskip("jax")
    gpus = [d for d in jax.devices() if d.platform == "gpu"]
    if not gpus:
        pytest.skip("jax has no GPU here")
    import jax.numpy as jnp
    from jax.sharding import Mesh, PartitionSpec
    from test_autodiff import shard_mapped

    import taichi_aot.jax as tj

    path, expect = cuda_built
    mesh, spec = Mesh(np.array(gpus), ("g",)), PartitionSpec("g")
    with Runtime(Arch.CUDA) as rt:
        sq = tj.op(rt.load_module(path).kernels["sq"], {"y": "x"})
        xs, seeds = np.tile(X, len(gpus)), np.tile(SEED, len(gpus))
        inner = jax.jit(shard_mapped(jax)(jax.grad(lambda x, s: jnp.sum(sq(x) * s)), mesh=mesh, in_specs=(spec, spec),
                                          out_specs=spec))
        got = np.asarray(inner(jnp.asarray(xs), jnp.asarray(seeds)))
        np.testing.assert_allclose(got, np.tile(expect["sq_xgrad"], len(gpus)), rtol=1e-5)
        outer = jax.jit(jax.grad(lambda x: jnp.sum(shard_mapped(jax)(sq, mesh=mesh, in_specs=spec, out_specs=spec)(x)
                                                   * jnp.asarray(seeds))))
        np.testing.assert_allclose(np.asarray(outer(jnp.asarray(xs))), np.tile(expect["sq_xgrad"], len(gpus)),
                                   rtol=1e-5)


def test_gradients_on_another_thread_than_the_runtimes(cuda_built):
    """The own CUDA runtime made on the main thread, its kernels and their gradients run on another (any thread may use
    it): kernel.grad on its ndarrays, and a torch op made on the main thread, forward and backward, give Taichi's
    gradients."""
    import threading

    path, expect = cuda_built
    torch = None
    try:
        import torch
    except ImportError:
        pass
    with Runtime(Arch.CUDA) as rt:
        mod = rt.load_module(path)
        op = None
        if torch is not None and torch.cuda.is_available():
            import taichi_aot.torch as tt

            op = tt.op(mod.kernels["sq"], {"y": "x"})
        got: list = []

        def work() -> None:
            try:
                x, y = rt.ndarray_from_numpy(X), rt.ndarray((N,), np.float32)
                mod.kernels["sq"](x, y)
                x_grad = rt.ndarray((N,), np.float32)
                mod.kernels["sq"].grad(x, y, grads=(x_grad, rt.ndarray_from_numpy(SEED.copy())))
                rt.wait()
                got.append(x_grad.to_numpy())
                if op is not None:
                    t = torch.tensor(X, device="cuda", requires_grad=True)
                    (op(t) * torch.tensor(SEED, device="cuda")).sum().backward()
                    got.append(t.grad.cpu().numpy())
            except BaseException as e:  # raised again on the test's thread
                got.append(e)

        thread = threading.Thread(target=work)
        thread.start()
        thread.join()
        assert got and not any(isinstance(g, BaseException) for g in got), got
        for values in got:
            np.testing.assert_allclose(values, expect["sq_xgrad"], rtol=1e-5)
