"""Kernels and ops captured into CUDA graphs, where a GPU with its driver is present (skipped elsewhere, as
tests/test_cuda.py is): the kernel called directly and the torch op under ``torch.cuda.graph`` (torch's default
capture stream, ``stream=``, torch's documented warm-up pattern), ``torch.cuda.make_graphed_callables`` and
``torch.compile(mode="reduce-overhead")``, a backward made from a reverse-mode kernel under ``reduce-overhead``,
and the JAX op inside XLA's command buffers; each replayed 100 times with new inputs copied into the static ones.
A kernel on libtaichi's path inside a capture is a typed error."""

from __future__ import annotations

import gc
import os
import subprocess
import sys

import numpy as np
import pytest
from test_autodiff_cuda import cuda_built  # noqa: F401  (the fixture: tests/autodiff_kernels.py built for CUDA)
from test_cuda import cuda_module  # noqa: F401  (the fixture: the test kernels compiled for CUDA, PTX added)

from taichi_aot import Arch, NotSupportedError, Runtime

REPLAYS, N = 100, 4096


def _torch():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA here")
    return torch


def _replay(torch, graph, static_in, static_out, want):
    """Replay ``graph`` REPLAYS times, new values copied into ``static_in`` each time; ``static_out`` as ``want``."""
    for i in range(REPLAYS):
        new = torch.rand(static_in.shape, device="cuda") + i
        static_in.copy_(new)
        graph.replay()
        torch.testing.assert_close(static_out, want(new), msg=lambda m, i=i: f"replay {i}: {m}")


def test_a_kernel_called_directly_in_cuda_graphs(cuda_module):  # noqa: F811
    torch = _torch()
    with Runtime(Arch.CUDA) as rt:
        mod = rt.load_module(cuda_module["cuda"])
        add = mod.kernels["add"]
        assert add.launcher == "cuda"
        x, y = torch.zeros(N, device="cuda"), torch.rand(N, device="cuda")
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):  # torch's default capture stream, new to the runtime
            rt.set_cuda_stream(torch.cuda.current_stream())
            x.zero_()
            add(x, y, 2.0)
        rt.set_cuda_stream(None)
        _replay(torch, g, y, x, lambda v: 2 * v)
        s = torch.cuda.Stream()  # warmed on its stream first, then captured there
        rt.set_cuda_stream(s)
        with torch.cuda.stream(s):
            add(x, y, 3.0)
        small = rt.ndarray((16,), np.float32)
        g2 = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g2, stream=s):
            x.zero_()
            add(x, y, 3.0)
            with pytest.raises(NotSupportedError, match="captured into a CUDA graph"):  # a read waits: refused,
                small.to_numpy()  # the capture left as it was
        rt.set_cuda_stream(None)
        _replay(torch, g2, y, x, lambda v: 3 * v)
        _replay(torch, g, y, x, lambda v: 2 * v)  # the first graph still right after the second
        mod.kernels["add"](x, y, 1.0)  # and launches outside graphs
        rt.wait()

        taichi = rt.load_module(cuda_module["cuda"], cuda_launcher="taichi").kernels["add"]
        g3 = torch.cuda.CUDAGraph()
        with pytest.raises(NotSupportedError, match="captured into a CUDA graph"), torch.cuda.graph(g3):
            rt.set_cuda_stream(torch.cuda.current_stream())
            taichi(x, y, 1.0)
        rt.set_cuda_stream(None)
        _replay(torch, g, y, x, lambda v: 2 * v)


def test_a_torch_op_in_cuda_graphs(cuda_module):  # noqa: F811
    torch = _torch()
    import taichi_aot.torch as tt

    with Runtime(Arch.CUDA) as rt:
        mod = rt.load_module(cuda_module["cuda"])
        add = tt.op(mod.kernels["add"], {0: 1})

        def f(y):
            return add(torch.sin(y) + 1, 3.0) * 2 - 1

        def want(y):
            return (3 * (torch.sin(y) + 1)) * 2 - 1

        static = torch.rand(N, device="cuda")
        s = torch.cuda.Stream()  # torch's documented pattern: warm-up on a side stream, then capture
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                f(static)
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            out = f(static)
        _replay(torch, g, static, out, want)
        g2 = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g2, stream=s):
            out2 = f(static)
        _replay(torch, g2, static, out2, want)

        graphed = torch.cuda.make_graphed_callables(f, (torch.rand(N, device="cuda"),))
        for i in range(REPLAYS):
            y = torch.rand(N, device="cuda") + i
            torch.testing.assert_close(graphed(y), want(y))

        for fullgraph in (False, True):
            torch._dynamo.reset()
            compiled = torch.compile(lambda y: f(y) + 0, mode="reduce-overhead", fullgraph=fullgraph)
            for i in range(REPLAYS):
                y = torch.rand(N, device="cuda") + i
                torch.testing.assert_close(compiled(y).clone(), want(y) + 0, msg=lambda m, i=i: f"call {i}: {m}")
        assert not rt.foreign.held  # the op held none of its tensors


def test_a_reverse_kernel_backward_under_reduce_overhead(cuda_built):  # noqa: F811
    torch = _torch()
    import taichi_aot.torch as tt

    path, _expect = cuda_built
    with Runtime(Arch.CUDA) as rt:
        mod = rt.load_module(path)
        sq = tt.op(mod.kernels["sq"], {"y": "x"})

        torch._dynamo.reset()
        loss = torch.compile(lambda x: (sq(x * 1.5) * 2).sum(), mode="reduce-overhead")
        for i in range(REPLAYS):  # forward and backward graphs captured by torch's CUDA graph trees, replayed
            x = (torch.rand(N, device="cuda") + i).requires_grad_()
            loss(x).backward()
            torch.testing.assert_close(x.grad, 2 * 2 * 1.5 * 1.5 * x.detach(), msg=lambda m, i=i: f"call {i}: {m}")

        long = mod.kernels["long"]  # its autodiff stacks are checked after each launch: not in a graph
        x = torch.rand(N, device="cuda")
        g = torch.cuda.CUDAGraph()
        gc.collect()  # torch's graph trees of the compiled step are not collected inside the capture below
        with pytest.raises(NotSupportedError, match="no CUDA graph capture"), torch.cuda.graph(g):
            rt.set_cuda_stream(torch.cuda.current_stream())
            long.grad(x, torch.zeros(N, device="cuda"),
                      grads=(torch.zeros(N, device="cuda"), torch.ones(N, device="cuda")))
        rt.set_cuda_stream(None)


_JAX = """
import os, sys
os.environ["XLA_FLAGS"] = "--xla_gpu_enable_command_buffer=FUSION,CUSTOM_CALL --xla_gpu_graph_min_graph_size=1"
import jax, jax.numpy as jnp, numpy as np
from taichi_aot import Arch, Runtime
import taichi_aot.jax as tj
with Runtime(Arch.CUDA) as rt:
    mod = rt.load_module(sys.argv[1])
    add = tj.op(mod.kernels["add"], {0: 1})
    step = jax.jit(lambda y, k: add(jnp.sin(y) + k, 3.0) * 2 - 1)
    y0 = np.linspace(0, 1, 4096, dtype=np.float32)
    print("FLAGS", os.environ["XLA_FLAGS"])
    for i in range(100):
        out = np.asarray(step(jnp.asarray(y0 + i), jnp.float32(i)))
        np.testing.assert_allclose(out, (3 * (np.sin(y0 + i) + i)) * 2 - 1, rtol=1e-4, atol=1e-3)
    print("VALUES OK")
    print("CAPTURED", add.captured)
"""


def test_a_jax_op_in_xlas_command_buffers(cuda_module):  # noqa: F811
    jax = pytest.importorskip("jax")
    if not any(d.platform == "gpu" for d in jax.devices()):
        pytest.skip("jax has no GPU here")
    env = {**os.environ, "PYTHONSAFEPATH": "1"}
    proc = subprocess.run([sys.executable, "-c", _JAX, cuda_module["cuda"]], capture_output=True, text=True,
                          timeout=300, env=env)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    assert "VALUES OK" in proc.stdout and "CAPTURED 0" not in proc.stdout, proc.stdout


def test_a_cupy_arrays_stream_is_ordered_before_the_launch_with_no_host_wait(cuda_module):  # noqa: F811
    """A CuPy array whose interface names the stream still writing it: the kernel, on another stream, reads what
    that work wrote, and the launch returns before it is done (an event waited for on the device, not the host)."""
    torch = _torch()
    cupy = pytest.importorskip("cupy")
    with Runtime(Arch.CUDA) as rt:
        add = rt.load_module(cuda_module["cuda"]).kernels["add"]
        side = torch.cuda.Stream()
        rt.set_cuda_stream(side)
        producer = torch.cuda.Stream()
        x = torch.zeros(N, device="cuda")
        cupy.full(N, 2.0, cupy.float32)  # CuPy's kernel compiled before the clock runs
        add(x, torch.zeros(N, device="cuda"), 0.0)
        with torch.cuda.stream(producer):
            torch.cuda._sleep(1 << 31)  # the producer's stream busy for about a second (a spinning kernel)
        stream = cupy.cuda.ExternalStream(producer.cuda_stream)
        with stream:
            y = cupy.full(N, 2.0, cupy.float32)  # written after the spin; its interface names the stream
            assert not stream.done
            add(x, y, 1.5)
            assert not stream.done  # the launch did not wait on the host
        side.synchronize()
        torch.testing.assert_close(x, torch.full((N,), 3.0, device="cuda"))
        rt.set_cuda_stream(None)


def test_objects_given_back_inside_another_librarys_capture_break_no_graph(cuda_module):  # noqa: F811
    """An NdArray closed or collected, a pinned array's memory, a module closed while torch captures a CUDA graph
    (in the driver's global mode): the frees run in the relaxed capture mode, so the capture stays valid and its
    replay right (a ``cuMemFree`` inside it made torch raise "operation failed due to a previous error during
    capture")."""
    import numpy as np

    torch = _torch()
    with Runtime(Arch.CUDA) as rt:
        x = torch.zeros(N, device="cuda")
        held = [rt.ndarray((1 << 20,), np.float32), rt.ndarray((1 << 20,), np.float32)]
        pinned = [rt.host_array((1 << 16,), np.float32)]  # page-locked: cuMemFreeHost when collected
        mod = rt.load_module(cuda_module["cuda"])
        for name, give_back in (("close", held[0].close), ("collected", held.clear), ("pinned", pinned.clear),
                                ("module", mod.close)):  # the last reference dropped: collected at once
            g = torch.cuda.CUDAGraph()
            gc.collect()  # earlier tests' garbage (torch's own graphs among it) collected outside the capture
            torch.cuda.synchronize()
            with torch.cuda.graph(g):
                y = x + 1
                give_back()
            for _ in range(3):
                g.replay()
            torch.cuda.synchronize()
            assert float(y.sum()) == N, name
        z = rt.ndarray((N,), np.float32)  # the runtime goes on
        z.from_numpy(np.ones(N, np.float32))
        assert float(z.to_numpy().sum()) == N
