"""taichi_aot.torch.op and taichi_aot.jax.op on CUDA, where a GPU with its driver is present (skipped elsewhere, as
tests/test_cuda.py is): values under torch.compile(fullgraph=True) and jax.jit with framework ops before and after,
on torch's current stream and XLA's, through taichi_aot's own launcher (the module's PTX) and through libtaichi."""

from __future__ import annotations

import gc
import os
import re
import threading

import numpy as np
import pytest
from test_cuda import cuda_module  # noqa: F401  (the fixture: the test kernels compiled for CUDA, PTX added)

from conftest import with_ptx_copies
from taichi_aot import Arch, ArgumentTypeError, InvalidStateError, NotSupportedError, Runtime, capi


def test_torch_op_on_cuda_streams_and_compile(cuda_module, launcher):  # noqa: F811
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA here")
    import taichi_aot.torch as tt

    with Runtime(Arch.CUDA) as rt:
        mod = rt.load_module(cuda_module["cuda"], launcher=launcher)
        add = tt.op(mod.kernels["add"], {0: 1})
        y = torch.linspace(0, 1, 4096, device="cuda")
        torch.library.opcheck(add.custom_op, (y, 2.0))

        def step(y):
            return add(torch.sin(y) + 1, 3.0) * 2 - 1

        compiled = torch.compile(step, fullgraph=True)
        streams = [torch.cuda.current_stream()]
        if launcher == "auto":  # libtaichi needs a blocking stream; the own launcher takes torch's
            streams.append(torch.cuda.Stream())
        for stream in streams:
            with torch.cuda.stream(stream):
                for i in range(50):
                    yi = y + i
                    want = (3 * (torch.sin(yi) + 1)) * 2 - 1
                    torch.testing.assert_close(compiled(yi), want)
                    torch.testing.assert_close(step(yi), want)
        twice = tt.op(mod.graphs["add_twice"], {"x": "y"})
        torch.testing.assert_close(twice(y=y, a=1.0), 2 * y)
        with pytest.raises(ArgumentTypeError, match="a tensor on cpu, and the kernel's runtime is CUDA"):
            add(y.cpu(), 2.0)  # eagerly, as the fake refuses it under torch.compile


def test_a_compiled_torch_op_launches_from_c_on_torchs_stream(cuda_module):  # noqa: F811
    """A compiled call needing no gradient launches from the C kernel of the op's ``_nograd`` operator
    (``_csrc/torchop.c``): on torch's current stream (a side stream too), inside a CUDA graph under
    ``reduce-overhead``, and its faults are torch's errors that leave the op working."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA here")
    import taichi_aot.torch as tt

    with Runtime(Arch.CUDA) as rt:
        mod = rt.load_module(cuda_module["cuda"])
        add = tt.op(mod.kernels["add"], {0: 1})
        assert add.boxed
        y = torch.linspace(0, 1, 4096, device="cuda")
        step = torch.compile(lambda v: add(torch.sin(v) + 1, 3.0) * 2, fullgraph=True)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # the kernel runs on it, after sin, before the product
            for i in range(20):
                torch.testing.assert_close(step(y + i), 6 * (torch.sin(y + i) + 1))
        torch.cuda.current_stream().wait_stream(side)
        graphed = torch.compile(lambda v: add(v * 2, 0.5) + 1, mode="reduce-overhead", fullgraph=True)
        for i in range(6):  # recorded into a CUDA graph, then replayed
            torch.testing.assert_close(graphed(y + i), (y + i) + 1)
        with pytest.raises(RuntimeError, match=r"expected torch\.float32"):
            add._nograd_op(y.double(), 1.0)
        with pytest.raises(ArgumentTypeError, match="a tensor on cpu"):
            add._nograd_op(y.cpu(), 1.0)
        torch.testing.assert_close(add._nograd_op(y, 2.0), 2 * y)


def test_jax_op_on_cuda_between_xla_ops(cuda_module, launcher):  # noqa: F811
    jax = pytest.importorskip("jax")
    if not any(d.platform == "gpu" for d in jax.devices()):
        pytest.skip("jax has no GPU here")
    import jax.numpy as jnp

    import taichi_aot.jax as tj

    with Runtime(Arch.CUDA) as rt:
        mod = rt.load_module(cuda_module["cuda"], launcher=launcher)
        add = tj.op(mod.kernels["add"], {0: 1})
        twice = tj.op(mod.graphs["add_twice"], {"x": "y"})

        @jax.jit
        def step(y, k):
            z = add(jnp.sin(y) + k, 3.0) * 2 - 1
            return twice(y=z, a=0.5) + 1

        y0 = np.linspace(0, 1, 4096, dtype=np.float32)
        for i in range(100):
            out = step(jnp.asarray(y0 + i), jnp.float32(i))
            want = (3 * (np.sin(y0 + i) + i)) * 2 - 1
            np.testing.assert_allclose(np.asarray(out), want + 1, rtol=1e-4, atol=1e-3)
        np.testing.assert_allclose(np.asarray(add(jnp.asarray(y0), 2.0)), 2 * y0, rtol=1e-6)
        with pytest.raises(NotSupportedError, match="on CUDA a scalar is passed as a Python number"):
            add(jnp.asarray(y0), jnp.float32(2.0))


def test_one_libtaichi_cuda_runtime_for_ops(cuda_module):  # noqa: F811
    with Runtime(Arch.CUDA, cuda_runtime="taichi"), pytest.raises(InvalidStateError):
        Runtime(Arch.CUDA, cuda_runtime="taichi")  # libtaichi's alone: one at a time (the own runtimes: test_cudart)


def test_a_jax_op_on_another_gpu_runs_there_or_says_why(cuda_module):  # noqa: F811
    """The JAX op given arrays on GPU 1 while its runtime drives GPU 0 runs on GPU 1 (its twin there: the module
    loaded on a runtime of GPU 1); where the kernel cannot run there (libtaichi's launcher, device 0 only), XLA's
    handler fails naming both GPUs and what to do (it said "code -1400" and nothing more). One GPU here: skipped."""
    jax = pytest.importorskip("jax")
    gpus = [d for d in jax.devices() if d.platform == "gpu"]
    if len(gpus) < 2:
        pytest.skip("one GPU here")
    import jax.numpy as jnp

    import taichi_aot.jax as tj

    with Runtime(Arch.CUDA) as rt:
        add = tj.op(rt.load_module(cuda_module["cuda"]).kernels["add"], {0: 1})
        y = jax.device_put(jnp.ones(16, jnp.float32), gpus[1])
        np.testing.assert_array_equal(np.asarray(jax.jit(lambda v: add(v, 2.0))(y)), np.full(16, 2.0, np.float32))
        assert set(add._twins) == {1}  # made on its first run there
        on_libtaichi = tj.op(rt.load_module(cuda_module["cuda"], launcher="taichi").kernels["add"], {0: 1})
        traced = jax.jit(lambda v: on_libtaichi(v, 2.0))
        with pytest.raises(Exception, match=r"XLA runs it on GPU 1, and its runtime drives GPU 0; it cannot run on "
                                            r"GPU 1 as well: NotSupportedError: .*launcher='taichi'"):
            jax.block_until_ready(traced(y))
        np.testing.assert_array_equal(np.asarray(add(jax.device_put(jnp.ones(16, jnp.float32), gpus[0]), 2.0)),
                                      np.full(16, 2.0, np.float32))  # and on GPU 0, as before


def test_a_jax_ops_twin_is_made_when_xlas_handler_asks(cuda_module, cuda_modules, tmp_path_factory):  # noqa: F811
    """XLA's handler, running an op on a GPU its runtime does not drive, has the op's twin there made then, once:
    from C, on XLA's thread, through Python (which takes the GIL). Here, with one GPU, the handler's own entry is
    asked for twins on GPU 0 (the module loaded on a runtime of their own there): made once, right, and made on
    another thread inside a CUDA graph capture of torch's without breaking it (XLA may be capturing its stream into
    a command buffer), a kernel with random states too; what cannot be made comes back as the reason XLA's error
    then says."""
    jax = pytest.importorskip("jax")
    if not any(d.platform == "gpu" for d in jax.devices()):
        pytest.skip("jax has no GPU here")
    import jax.numpy as jnp

    import taichi_aot.jax as tj
    from taichi_aot._native import ffi, lib

    why = ffi.new("char[]", 512)
    noise_module = with_ptx_copies(os.path.join(cuda_modules, "corpus"), ["one_rand"], tmp_path_factory)["one_rand"]
    with Runtime(Arch.CUDA) as rt:
        add = tj.op(rt.load_module(cuda_module["cuda"]).kernels["add"], {0: 1})
        noise = tj.op(rt.load_module(noise_module).kernels["noise"], {0: jax.ShapeDtypeStruct((4096,), jnp.float32)})
        y = jnp.arange(16, dtype=jnp.float32)
        np.testing.assert_array_equal(np.asarray(add(y, 2.0)), 2 * np.arange(16, dtype=np.float32))
        drawn = np.asarray(noise())
        plans = [next(iter(op._plans.values())) for op in (add, noise)]
        assert all(p.devices[0] == ffi.NULL for p in plans) and not add._twins  # its own GPU: no twin made
        got = []

        def make() -> None:  # as XLA's thread would: another thread than the one that made the op
            got.extend(lib.taichi_aot_xla_make_twin(p.c, 0, why, len(why)) for p in plans)

        torch = _cuda_torch()
        if torch is not None:  # made while torch captures a graph on that thread (the driver's global mode)
            x = torch.zeros(16, device="cuda")
            graph = torch.cuda.CUDAGraph()

            def captured() -> None:
                with torch.cuda.graph(graph):
                    x.add_(1)
                    make()
                    x.add_(1)

            _on_a_thread(captured)
            graph.replay()
            torch.cuda.synchronize()
            assert x.tolist() == [2.0] * 16  # the capture held
        else:
            _on_a_thread(make)
        assert got == [0, 0], ffi.string(why)
        assert gc.isenabled()  # held off while the twins were made, on again
        twin = add._twins[0]
        assert plans[0].devices[0] == twin._plan(plans[0].attrs).c and twin.spec.entry.module.runtime is not rt
        assert lib.taichi_aot_xla_make_twin(plans[0].c, 0, why, len(why)) == 0 and add._twins[0] is twin  # once
        np.testing.assert_array_equal(np.asarray(twin(y, 3.0)), 3 * np.arange(16, dtype=np.float32))
        np.testing.assert_array_equal(np.asarray(noise._twins[0]()), drawn)  # Taichi's seed on each GPU
        beyond = len(plans[0].devices)
        assert lib.taichi_aot_xla_make_twin(plans[0].c, beyond, why, len(why)) == 1
        assert ffi.string(why).decode() == f"JAX had no GPU {beyond} when the op was traced"
        assert lib.taichi_aot_xla_make_twin(twin._plan(plans[0].attrs).c, 0, why, len(why)) == 1
        assert ffi.string(why).decode() == "an op's twin runs on its own GPU only"
        gone = tj.op(add.spec.entry, {0: 1})
        untraced = gone._plan(plans[0].attrs)  # a plan a compiled XLA call may still name after its op is let go
        del gone
        gc.collect()
        assert lib.taichi_aot_xla_make_twin(untraced.c, 0, why, len(why)) == 1
        assert re.fullmatch(r"ClosedError: .*: its op was let go", ffi.string(why).decode())


def _on_a_thread(work) -> None:
    """``work()`` on a thread of its own, waited for; what it raised, raised here."""
    raised = []

    def run() -> None:
        try:
            work()
        except BaseException as e:  # raised again on the caller's thread
            raised.append(e)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    if raised:
        raise raised[0]


def _cuda_torch():
    """torch where it has CUDA here, else None."""
    try:
        import torch
    except ImportError:
        return None
    return torch if torch.cuda.is_available() else None


_OVER_DEVICES = """
import sys
import numpy as np
import torch
import taichi_aot.torch as tt
from taichi_aot import InvalidArgumentError
path = sys.argv[1]
saxpy = tt.op_of(path, "saxpy", {"y": "y"})
try:
    assert set(saxpy.devices) == {"cuda", "cpu"}, saxpy.devices
    x, y = torch.arange(4, dtype=torch.float32), torch.ones(4)
    on_cpu, on_gpu = saxpy(x, y, 2.0), saxpy(x.cuda(), y.cuda(), 2.0)
    assert not on_cpu.is_cuda and on_gpu.is_cuda and set(saxpy.parts) == {"cpu", "cuda"}
    assert torch.equal(on_cpu, 2 * x + 1) and torch.equal(on_gpu.cpu(), 2 * x + 1)
    step = torch.compile(lambda u, v: saxpy(u, v, 3.0) * 2, fullgraph=True)
    assert torch.equal(step(x, y), 2 * (3 * x + 1)) and torch.equal(step(x.cuda(), y.cuda()).cpu(), 2 * (3 * x + 1))
    assert saxpy.load("cuda:0") is saxpy.parts["cuda"]  # GPU 0 by name: the "cuda" part
    if torch.cuda.device_count() == 1:  # no GPU 1: refused, typed, and nothing kept
        try:
            saxpy.load("cuda:1")
        except InvalidArgumentError as e:
            assert "CUDA device 1: this process sees 1" in str(e), e
        else:
            raise AssertionError("a part on a GPU this machine lacks")
        assert set(saxpy.parts) == {"cpu", "cuda"}
finally:
    saxpy.close()
from taichi_aot import ArgumentTypeError, Runtime
with Runtime("cuda") as rt0:  # a runtime given by its GPU's name is the "cuda" part's; another GPU's name is refused
    given = tt.op_of(path, "saxpy", {"y": "y"}, runtimes={"cuda:0": rt0})
    assert torch.equal(given(x.cuda(), y.cuda(), 2.0).cpu(), 2 * x + 1) and set(given.parts) == {"cuda"}
    given.close()
    assert not rt0.closed
    try:
        tt.op_of(path, "saxpy", {"y": "y"}, runtimes={"cuda:1": rt0})
    except ArgumentTypeError as e:
        assert "drives GPU 0" in str(e), e
    else:
        raise AssertionError("GPU 0's runtime taken for GPU 1")
    for twice in ({"cuda": rt0, "cuda:0": rt0}, {"cuda:0": rt0, "cuda:00": rt0}):
        try:
            tt.op_of(path, "saxpy", {"y": "y"}, runtimes=twice)
        except ArgumentTypeError as e:
            assert "both GPU 0" in str(e) or "two runtimes for cuda:0" in str(e), e
        else:
            raise AssertionError("two runtimes taken for GPU 0")
    leading = tt.op_of(path, "saxpy", {"y": "y"}, runtimes={"cuda:00": rt0})  # GPU 0 however written: the "cuda" part
    assert torch.equal(leading(x.cuda(), y.cuda(), 2.0).cpu(), 2 * x + 1) and set(leading.parts) == {"cuda"}
    assert leading.load(torch.device("cuda", 0)) is leading.parts["cuda"]
    leading.close()
    assert not rt0.closed
print("torch: cpu and cuda")
try:
    import jax
except ImportError:
    sys.exit(0)
import jax.numpy as jnp
import taichi_aot.jax as tj
jsaxpy = tj.op_of(path, "saxpy", {"y": "y"}, runtimes={})  # the part of the platform XLA lowers it for
want = 2 * np.arange(4, dtype=np.float32) + 1
step = jax.jit(lambda u, v: jsaxpy(u, v, 2.0))
for device in (jax.devices("cpu")[0], next(d for d in jax.devices() if d.platform == "gpu")):
    u, v = (jax.device_put(a, device) for a in (jnp.arange(4, dtype=jnp.float32), jnp.ones(4, jnp.float32)))
    got = step(u, v)
    assert next(iter(got.devices())).platform == device.platform, got.devices()
    np.testing.assert_array_equal(np.asarray(got), want)
assert set(jsaxpy.parts) == {"cpu", "cuda"}
print("jax: cpu and gpu")
"""


def test_one_op_over_cpu_and_cuda_tensors(tmp_path):
    """``op_of`` over a module built for x64 and CUDA: torch's CPU tensors run its x64 part and CUDA tensors its CUDA
    part, each on a runtime of its own made at its first call, eagerly and compiled; JAX's jitted function runs the
    part of the platform XLA lowers it for, arrays on the CPU and on the GPU. In a process of its own: its CUDA
    runtimes are made by the ops, as one process holds one at a time."""
    if not capi.arch_status()[Arch.CUDA].available:
        pytest.skip("no CUDA here")
    import subprocess
    import sys

    from conftest import taichi_env

    here = os.path.dirname(os.path.abspath(__file__))
    path = str(tmp_path / "multi.tcm")
    proc = subprocess.run([sys.executable, "-m", "taichi_aot", "build", os.path.join(here, "export_sample.py"),
                           "--arch", "x64", "cuda", "-o", path], capture_output=True, text=True, timeout=600,
                          env=taichi_env())
    assert proc.returncode == 0, proc.stdout + proc.stderr
    proc = subprocess.run([sys.executable, "-c", _OVER_DEVICES, path], capture_output=True, text=True, timeout=600,
                          env=taichi_env())
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    assert "torch: cpu and cuda" in proc.stdout
