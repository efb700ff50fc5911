"""taichi_aot's own CUDA runtime (taichi_aot._cudart): a runtime on any GPU, several at once, without libtaichi's.

The choice of runtime is checked everywhere (no GPU needed to refuse a bad one); the rest runs where a GPU is, as
tests/test_cuda.py does, and the tests of two GPUs where the machine has two (skipped on one).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from test_cuda import (
    cuda_module,  # noqa: F401  (the fixture: the test kernels compiled for CUDA, PTX added)
    kernels_graphs_and_copies,
)

from taichi_aot import (
    Arch,
    ArgumentTypeError,
    InvalidArgumentError,
    InvalidStateError,
    NotSupportedError,
    Runtime,
    capi,
)


def _gpus() -> int:
    if not capi.arch_status()[Arch.CUDA].available:
        return 0
    from taichi_aot.drivers import cudart as _cudart

    return _cudart.device_count()


def test_the_runtime_asked_for_is_checked_before_anything_is_made(monkeypatch):
    with pytest.raises(InvalidArgumentError, match="cuda_runtime must be one of 'auto', 'own' or 'taichi'"):
        Runtime("cuda", cuda_runtime="mine")
    with pytest.raises(ArgumentTypeError, match="cuda_runtime must be"):
        Runtime("cuda", cuda_runtime=1)
    for index in ("1", True, 1.0):  # checked before any driver is asked
        with pytest.raises(ArgumentTypeError, match="device_index must be an int"):
            Runtime("cuda", device_index=index, cuda_runtime="own")
    with pytest.raises(NotSupportedError, match="makes its CUDA runtime on device 0 only"):
        Runtime("cuda", device_index=1, cuda_runtime="taichi")
    monkeypatch.setenv("TAICHI_AOT_CUDA_RUNTIME", "nope")
    with pytest.raises(InvalidArgumentError, match="TAICHI_AOT_CUDA_RUNTIME must be one of"):
        Runtime("cuda", device_index=1)
    monkeypatch.setenv("TAICHI_AOT_CUDA_RUNTIME", "own")
    gpus = _gpus()
    if gpus == 0:  # no driver, or no device: a typed error, never a crash
        with pytest.raises((NotSupportedError, InvalidArgumentError), match="CUDA"):
            Runtime("cuda")
    with pytest.raises(InvalidArgumentError if gpus else (NotSupportedError, InvalidArgumentError), match="CUDA"):
        Runtime("cuda", device_index=max(gpus, 1))


def test_a_cuda_runtime_refused_here_names_the_archs_that_work():
    if _gpus():
        pytest.skip("CUDA works here: nothing is refused")
    works = ", ".join(a.name.lower() for a, s in capi.arch_status().items() if s.available)
    for runtime in ("own", "taichi"):  # refused by the own runtime's driver, and by the flat API's probe
        with pytest.raises(NotSupportedError, match="CUDA") as info:
            Runtime("cuda", cuda_runtime=runtime)
        assert "; use one that works here: " in str(info.value) and "python -m taichi_aot archs" in str(info.value)
        assert set(str(info.value).split("works here: ")[1].split(" (")[0].split(", ")) == set(works.split(", "))


@pytest.fixture
def own(cuda_module):  # noqa: F811
    with Runtime(Arch.CUDA, cuda_runtime="own") as rt:
        yield rt


def test_own_runtime_runs_kernels_graphs_replays_and_copies(own, cuda_module):  # noqa: F811
    assert own.device.cuda is not None and own.device.cuda.ordinal == 0
    assert "taichi_aot's own" in repr(own) and own.capabilities == {} and not own.handle
    for source in (cuda_module["cuda"], cuda_module["cuda.tcm"]):
        kernels_graphs_and_copies(own, source)
    assert not own.handle  # every kernel on the own launcher: no libtaichi runtime was made
    with pytest.raises(NotSupportedError, match="CUDA has no images"):
        own.allocate_image("2d", (4, 4), "rgba8")
    with pytest.raises(NotSupportedError, match="CUDA has no images"):
        own.create_sampler()
    with pytest.raises(NotSupportedError, match="no capability levels"):
        own.set_capabilities(spirv_version=0x10300)
    with Runtime(Arch.CUDA) as default:
        assert default.device.cuda is not None  # the default, "auto", is the own runtime


def test_host_arrays_a_kernel_writes_come_back_whole(own, cuda_module):  # noqa: F811
    """Read back straight into the caller's array, page-locked once it moves again."""
    from test_vulkan_launch import host_arrays_come_back_whole

    host_arrays_come_back_whole(own.load_module(cuda_module["cuda"]).kernels["add"])


def test_several_own_runtimes_beside_libtaichis(cuda_module):  # noqa: F811
    # libtaichi allows one CUDA runtime a process; the own runtimes any number, beside it, closed in any order
    runtimes = [Runtime(Arch.CUDA, cuda_runtime="own") for _ in range(3)]
    with Runtime(Arch.CUDA, cuda_runtime="taichi") as libtaichis:
        assert not libtaichis.device.traits.own_runtime
        for rt in (*runtimes, libtaichis):
            kernels_graphs_and_copies(rt, cuda_module["cuda"])
        runtimes[1].close()
        kernels_graphs_and_copies(runtimes[2], cuda_module["cuda"])
    runtimes[0].close()
    kernels_graphs_and_copies(runtimes[2], cuda_module["cuda"])
    runtimes[2].close()


def test_libtaichi_beside_the_own_runtime_on_device_0(own, cuda_module):  # noqa: F811
    # a module whose kernels libtaichi launches (here all, launcher="taichi"): libtaichi's runtime is made beside the
    # own one, and its launches get the own runtime's ndarrays (and a torch tensor) as its imports
    kernels_graphs_and_copies(own, cuda_module["cuda"], launcher="taichi")
    assert own.handle and own.device.cuda is not None
    kernels_graphs_and_copies(own, cuda_module["cuda"])  # the own launches beside them
    with Runtime(Arch.CUDA) as other:  # libtaichi allows one CUDA runtime a process: a second is refused, typed
        with pytest.raises(InvalidStateError, match="already exists"):
            other.load_module(cuda_module["cuda"], launcher="taichi")
        kernels_graphs_and_copies(other, cuda_module["cuda"])  # and the own launches go on
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        mod = own.load_module(cuda_module["cuda"], launcher="taichi")
        x, y = torch.zeros(256, device="cuda"), torch.arange(256, dtype=torch.float32, device="cuda")
        mod.kernels["add"](x, y, 2.0)
        own.wait()
        torch.testing.assert_close(x, 2 * y)


def test_torch_tensors_and_ops_on_the_own_runtime(own, cuda_module):  # noqa: F811
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA here")
    import taichi_aot.torch as tt

    mod = own.load_module(cuda_module["cuda"])
    add = tt.op(mod.kernels["add"], {0: 1})
    y = torch.linspace(0, 1, 4096, device="cuda")
    torch.testing.assert_close(add(y, 2.0), 2 * y)
    compiled = torch.compile(lambda v: add(torch.sin(v) + 1, 3.0) * 2, fullgraph=True)
    torch.testing.assert_close(compiled(y), 3 * (torch.sin(y) + 1) * 2)
    x = torch.zeros(4096, device="cuda")
    mod.kernels["add"](x, y, 0.5)  # torch's memory passed to the kernel as it is
    torch.testing.assert_close(x, 0.5 * y)
    nd = own.ndarray_from(x)  # an ndarray over it
    mod.kernels["add"](nd, y, 1.0)
    torch.testing.assert_close(x, 1.5 * y)
    stream = torch.cuda.Stream()  # a non-blocking stream set: the runtime's wait waits for it too
    own.set_cuda_stream(stream)
    big = own.ndarray((1 << 24,), np.float32)
    ones = own.ndarray_from_numpy(np.ones(1 << 24, np.float32))
    small, one = own.ndarray((1024,), np.float32), own.ndarray_from_numpy(np.ones(1024, np.float32))
    for _ in range(50):
        mod.kernels["add"](big, ones, 1.0)
        mod.kernels["add"](small, one, 1.0)
    # a small read waits for the stream set (a non-blocking one: the copy alone would not), behind the large launches
    assert float(small.to_numpy()[-1]) == 50.0
    own.wait()
    assert stream.query()  # nothing left on it
    own.set_cuda_stream(None)
    assert float(big.to_numpy()[-1]) == 50.0
    back = torch.as_tensor(own.ndarray_from_numpy(np.arange(4, dtype=np.float32)), device="cuda")
    torch.testing.assert_close(back, torch.arange(4, dtype=torch.float32, device="cuda"))


def test_pool_workers_on_their_gpus_by_index_and_holding_several(cuda_module):  # noqa: F811
    """Workers that see every GPU (cuda_visible=False) take theirs by index; a worker may hold several GPUs, a
    runtime each (every GPU of the host in one worker)."""
    import pool_tasks as tasks

    from taichi_aot.pool import Pool

    gpus = _gpus()
    if gpus == 0:
        pytest.skip("no CUDA here")
    with Pool(cuda_module["cuda"], arch=Arch.CUDA, devices=list(range(gpus)), cuda_visible=False) as pool:
        seen = pool.map(tasks.whoami, range(4 * gpus))
        assert all(s["cuda_visible"] == os.environ.get("CUDA_VISIBLE_DEVICES") for s in seen)
        for values, _pid in pool.map(tasks.axpy, [1.5] * (2 * gpus)):
            np.testing.assert_array_equal(values, 1.5 * np.arange(8, dtype=np.float32))
    held = [list(range(gpus))]
    for visible in (True, False):
        with Pool(cuda_module["cuda"], arch=Arch.CUDA, devices=held, cuda_visible=visible) as pool:
            assert [(w["device"], w["devices"]) for w in pool.workers] == [(0, list(range(gpus)))]
            (each,) = pool.map(tasks.axpy_on_each, [2.0])
            assert [device for _, device in each] == list(range(gpus))  # seen as 0.. either way (all GPUs here)
            for values, _ in each:
                np.testing.assert_array_equal(values, 2.0 * np.arange(8, dtype=np.float32))
    with pytest.raises(InvalidArgumentError, match="lists of them"):
        Pool(cuda_module["cuda"], arch=Arch.CUDA, devices=[[0, 0]])


TWO_GPUS = """
import numpy as np, sys
from taichi_aot import Runtime
module = sys.argv[1]
rts = [Runtime("cuda", device_index=k) for k in (0, 1)]
assert [rt.device.cuda.ordinal for rt in rts] == [0, 1]   # the own runtime on each
libtaichis = Runtime("cuda", device_index=0, cuda_runtime="taichi")
for rt in (*rts, libtaichis):
    mod = rt.load_module(module)
    x = rt.ndarray_from_numpy(np.zeros(1024, np.float32))
    y = rt.ndarray_from_numpy(np.arange(1024, dtype=np.float32) + rt.device_index)
    mod.kernels["add"](x, y, 0.5)
    mod.graphs["add_twice"](x=x, y=y, a=1.0)
    np.testing.assert_allclose(x.to_numpy(), (np.arange(1024) + rt.device_index) * 2.5)
import torch, taichi_aot.torch as tt
ops = {k: tt.op(rt.load_module(module).kernels["add"], {0: 1}) for k, rt in ((0, rts[0]), (1, rts[1]))}
for k in (1, 0, 1):
    y = torch.arange(4096, dtype=torch.float32, device=f"cuda:{k}")
    out = ops[k](y, 2.0)
    assert out.device == torch.device("cuda", k), out.device
    torch.testing.assert_close(out, 2 * y)
over = tt.op_of(module, "add", {0: 1})  # one op over the module: each call on its tensors' GPU
for k in (1, 0, 1):
    y = torch.arange(4096, dtype=torch.float32, device=f"cuda:{k}")
    out = over(y, 2.0)
    assert out.device == torch.device("cuda", k), out.device
    torch.testing.assert_close(out, 2 * y)
assert set(over.parts) == {"cuda", "cuda:1"} and over.parts["cuda:1"].qualname.endswith("_cuda1"), over.parts
assert over.load("cuda:0") is over.parts["cuda"]
over.close()
homed = tt.op_of(module, "add", {0: 1}, runtimes={"cuda": rts[1]})  # "cuda" is GPU 1's runtime here
for k in (1, 0):
    y = torch.ones(64, device=f"cuda:{k}")
    torch.testing.assert_close(homed(y, 3.0), 3 * y)
assert set(homed.parts) == {"cuda", "cuda:0"}, homed.parts
homed.close()
assert not rts[1].closed
try:
    rts[0].set_cuda_stream(torch.cuda.current_stream(1))
except Exception as e:
    assert "the stream is GPU 1's, and this runtime drives GPU 0" in str(e), e
else:
    raise AssertionError("a stream of GPU 1 was set on a runtime of GPU 0")
try:
    ops[1](torch.ones(4, device="cuda:0"), 2.0)
except Exception as e:
    assert "device 0" in str(e) and "device 1" in str(e), e
else:
    raise AssertionError("a tensor on another GPU than the op's runtime was taken")
import jax, jax.numpy as jnp, taichi_aot.jax as tj
gpus = [d for d in jax.devices() if d.platform == "gpu"][:2]
jop = tj.op(rts[0].load_module(module).kernels["add"], {0: 1})  # a kernel of GPU 0's runtime, run on both GPUs
y = jnp.arange(2 * 4096, dtype=jnp.float32).reshape(2, 4096)
np.testing.assert_allclose(np.asarray(jax.pmap(lambda v: jop(v, 2.0), devices=gpus)(y)), 2 * np.asarray(y))
from jax.sharding import Mesh, PartitionSpec
shard_map = getattr(jax, "shard_map", None)
if shard_map is None:
    from jax.experimental.shard_map import shard_map
mesh = Mesh(np.array(gpus), ("g",))
sharded = jax.jit(shard_map(lambda v: jop(v.reshape(-1), 3.0).reshape(v.shape), mesh=mesh,
                            in_specs=PartitionSpec("g"), out_specs=PartitionSpec("g")))
np.testing.assert_allclose(np.asarray(sharded(y)), 3 * np.asarray(y))
try:
    rts[1].load_module(module, launcher="taichi")
except Exception as e:
    assert "device 1" in str(e) and "no libtaichi runtime" in str(e), e
else:
    raise AssertionError("libtaichi's launches on device 1")
print("two GPUs ok")
"""


ANOTHER_CONTEXT = """
import ctypes, sys
import numpy as np
from taichi_aot import InvalidStateError, Runtime
module = sys.argv[1]
cu = ctypes.CDLL("libcuda.so.1")
cu.cuInit(0)
device, count = ctypes.c_int(), ctypes.c_int()
assert cu.cuDeviceGetCount(ctypes.byref(count)) == 0
assert cu.cuDeviceGet(ctypes.byref(device), count.value - 1) == 0  # the last GPU's (two GPUs: another GPU's)
Runtime("cuda", cuda_runtime="taichi").close()  # libtaichi's CUDA context made: later runtimes take it as it is
mine = ctypes.c_void_p()
assert cu.cuCtxCreate_v2(ctypes.byref(mine), 0, device) == 0  # another library's: current on this thread now


def current():
    ctx = ctypes.c_void_p()
    assert cu.cuCtxGetCurrent(ctypes.byref(ctx)) == 0
    return ctx.value


for how in ("taichi", "own"):  # libtaichi's runtime alone, and made beside the own for a module on libtaichi
    with Runtime("cuda", cuda_runtime=how) as rt:
        assert current() == mine.value, how  # libtaichi made it current (and would allocate in it) before
        mod = rt.load_module(module, launcher="taichi")
        x = rt.ndarray_from_numpy(np.zeros(4096, np.float32))
        y = rt.ndarray_from_numpy(np.arange(4096, dtype=np.float32))
        assert current() == mine.value, how  # the other library's context current again after each call
        mod.kernels["add"](x, y, 0.5)
        mod.graphs["add_twice"](x=x, y=y, a=1.0)
        assert cu.cuCtxSetCurrent(mine) == 0  # libtaichi's launches leave device 0's current: the library's again
        np.testing.assert_allclose(x.to_numpy(), np.arange(4096) * 2.5)
        z = rt.ndarray((4096,), np.float32)
        z.copy_from(x)  # a device-to-device copy (the driver's, in the memory's context)
        np.testing.assert_allclose(z.to_numpy(), np.arange(4096) * 2.5)
        assert current() == mine.value, how
        # memory the host maps: libtaichi maps, copies and unmaps it (managed memory), in device 0's context too
        h = rt.ndarray((4096,), np.float32, host_access="readwrite")
        h.from_numpy(np.arange(4096, dtype=np.float32))
        with h.map() as view:
            np.testing.assert_array_equal(view, np.arange(4096))
            if how == "taichi":  # libtaichi's mapping is a copy: copies refused while a view of it lives
                try:
                    h.to_numpy()
                except InvalidStateError as e:
                    assert "a mapping is a copy" in str(e), e
                else:
                    raise AssertionError("to_numpy through libtaichi's CUDA mapping, a copy")
        del view
        mod.kernels["add"](h, y, 1.0)
        assert cu.cuCtxSetCurrent(mine) == 0
        np.testing.assert_allclose(h.to_numpy(), np.arange(4096) * 2.0, err_msg=how)
        h.close()
        assert current() == mine.value, how
print("another context ok")
"""


def test_libtaichi_works_in_device_0s_context_whatever_is_current(cuda_module):  # noqa: F811
    """Another library's context current on the thread (XLA leaves the one of the GPU it ran on; torch's
    set_device; here a context of its own on GPU 0): libtaichi's runtime, module loads, memory and copies happen in
    device 0's primary context, the one Taichi uses, and the other library's context is current again after each
    (libtaichi made device 0's current for good when it made a runtime, and would allocate in whichever context was
    current; its launches still leave device 0's current, as Taichi makes them)."""
    env = {k: v for k, v in os.environ.items() if k != "TAICHI_AOT_CUDA_RUNTIME"}
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(ANOTHER_CONTEXT), cuda_module["cuda"]],
                          capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0 and "another context ok" in proc.stdout, proc.stdout + proc.stderr[-4000:]


def test_jax_op_under_pmap_on_the_own_runtime(own, cuda_module):  # noqa: F811
    """pmap and jit over the one GPU here (two GPUs: the next test runs it on both, each GPU's twin of the op)."""
    jax = pytest.importorskip("jax")
    gpus = [d for d in jax.devices() if d.platform == "gpu"]
    if not gpus:
        pytest.skip("jax has no GPU here")
    import jax.numpy as jnp

    import taichi_aot.jax as tj

    op = tj.op(own.load_module(cuda_module["cuda"]).kernels["add"], {0: 1})
    y = jnp.arange(4096, dtype=jnp.float32).reshape(1, 4096)
    np.testing.assert_allclose(np.asarray(jax.pmap(lambda v: op(v, 2.0), devices=gpus[:1])(y)), 2 * np.asarray(y))
    np.testing.assert_allclose(np.asarray(jax.jit(lambda v: op(v, 0.5))(y[0])), 0.5 * np.asarray(y[0]))


def test_runtimes_and_torch_ops_on_two_gpus(cuda_module):  # noqa: F811
    if _gpus() < 2:
        pytest.skip("fewer than two GPUs here")
    pytest.importorskip("torch")
    pytest.importorskip("jax")
    env = {k: v for k, v in os.environ.items() if k != "TAICHI_AOT_CUDA_RUNTIME"}
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(TWO_GPUS), cuda_module["cuda"]],
                          capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0 and "two GPUs ok" in proc.stdout, proc.stdout + proc.stderr[-4000:]


def test_0d_arrays_of_torch_and_cupy_on_cuda(cuda_module, launcher):  # noqa: F811
    """A kernel's 0-D ndarray (a total, a loss) given a 0-D torch tensor or CuPy array, on each launcher, as on x64:
    shared, not copied; ``ndarray_from`` over one; a torch op's 0-D output, eagerly and under torch.compile."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA here")
    import taichi_aot.torch as tt

    with Runtime(Arch.CUDA) as rt:
        mod = rt.load_module(cuda_module["cuda"], launcher=launcher)
        accumulate = mod.kernels["accumulate"]
        total, v = torch.tensor(1.0, device="cuda"), torch.tensor([1.0, 2.0, 3.0], device="cuda")
        accumulate(total, torch.arange(4, dtype=torch.float32, device="cuda"), v)
        rt.wait()
        assert float(total) == 7.0 and v.tolist() == [2.0, 4.0, 6.0]
        shared = rt.ndarray_from(total)
        assert shared.shape == () and shared.memory.cuda_pointer() == total.data_ptr()
        np.testing.assert_array_equal(shared.to_numpy(), np.float32(7.0))
        acc = tt.op(accumulate, {0: 0, 2: 2})  # a 0-d output (and a 0-d vector one), new each call
        t2, v2 = acc(torch.tensor(1.0, device="cuda"), torch.arange(4.0, device="cuda"), v)
        assert t2.shape == () and float(t2) == 7.0 and v2.tolist() == [4.0, 8.0, 12.0]
        compiled = torch.compile(lambda t, u, w: acc(t, u, w)[0] * 2, fullgraph=True)
        assert float(compiled(torch.tensor(0.5, device="cuda"), torch.ones(8, device="cuda"), v)) == 17.0
        try:
            import cupy
        except ImportError:
            return
        c = cupy.asarray(np.float32(2.0))
        accumulate(c, cupy.ones(5, dtype=cupy.float32), cupy.zeros(3, dtype=cupy.float32))
        rt.wait()
        assert float(c) == 7.0


def _threads(work, count: int, here=None) -> list:
    """``work(k)`` on ``count`` threads at once (k = 0..count-1), and ``here()`` meanwhile on this one, joined: what
    each thread returned or raised, in order, then what ``here`` returned (where given)."""
    import threading

    out: list = [None] * count

    def run(k: int) -> None:
        try:
            out[k] = work(k)
        except BaseException as e:  # raised again by the test, on its thread
            out[k] = e

    threads = [threading.Thread(target=run, args=(k,)) for k in range(count)]
    for t in threads:
        t.start()
    try:
        mine = [here()] if here is not None else []
    finally:
        for t in threads:
            t.join()
    return out + mine


def _drive(rt: Runtime, mod, n: int, scale: float, rounds: int = 100) -> np.ndarray:
    """Kernels (called, bound, replayed), a graph, copies and waits on ``rt`` from the calling thread: the values."""
    add = mod.kernels["add"]
    x = rt.ndarray_from_numpy(np.zeros(n, np.float32))
    y = rt.ndarray_from_numpy(np.arange(n, dtype=np.float32) * np.float32(scale))
    for _ in range(rounds):
        add(x, y, 1.0)
    mod.graphs["add_twice"](x=x, y=y, a=1.0)
    add.bind(x, y, 0.5)()
    seq = rt.sequence()
    seq.append(add.bind(x, y, 0.5))
    seq.replay(2)
    rt.wait()
    z = rt.ndarray((n,), np.float32)
    z.copy_from(x)
    return z.to_numpy()


def test_any_thread_drives_the_own_runtime(cuda_module):  # noqa: F811
    """Runtimes made on the main thread, each driven by a thread of its own (two GPUs: one a GPU; one GPU: two of GPU
    0), and one runtime driven by two threads at once through the same kernel (the C call's shared buffer is the
    runtime thread's, another thread packs its own): kernels, bound launches, replays, a graph, copies and waits give
    the right values. libtaichi's runtime keeps to its thread, and says so."""
    from taichi_aot import WrongThreadError

    devices = [0, 1] if _gpus() >= 2 else [0, 0]
    runtimes = [Runtime(Arch.CUDA, device_index=d) for d in devices]
    try:
        mods = [rt.load_module(cuda_module["cuda"]) for rt in runtimes]
        if mods[0].graphs["add_twice"].launcher != "cuda":  # libtaichi's launches keep to the runtime's thread
            pytest.skip(f"the module has no PTX here (llvmlite): {mods[0].launchers()}")
        n, rounds = 1 << 16, 100
        got = _threads(lambda k: _drive(runtimes[k], mods[k], n, float(k + 1), rounds), 2)
        for k, values in enumerate(got):
            assert isinstance(values, np.ndarray), values
            np.testing.assert_allclose(values, np.arange(n) * (k + 1) * (rounds + 2 + 0.5 + 1.0), rtol=1e-4)
        # one runtime, two threads at once (the main thread too), the same kernel object, arrays of three sizes (a
        # kernel's tasks share their stand-in's loop bound: queued apart, one would run over another's size)
        sizes = (n, n - 4096, n - 8192)
        got = _threads(lambda k: _drive(runtimes[0], mods[0], sizes[k], float(k + 1), 300), 2,
                       lambda: _drive(runtimes[0], mods[0], sizes[2], 3.0, 300))
        for k, values in enumerate(got):
            assert isinstance(values, np.ndarray), values
            np.testing.assert_allclose(values, np.arange(sizes[k]) * (k + 1) * (300 + 2 + 0.5 + 1.0), rtol=1e-4)
        def load_and_close(k: int):  # a module loaded on another thread, an array made and closed there
            runtimes[1].ndarray((8,), np.float32).close()
            return runtimes[1].load_module(cuda_module["cuda"])

        loaded = _threads(load_and_close, 1)[0]
        assert not isinstance(loaded, BaseException), loaded
        np.testing.assert_allclose(_drive(runtimes[1], loaded, 64, 1.0, 1), np.arange(64) * 4.5)
    finally:
        for rt in runtimes:
            rt.close()
    with Runtime(Arch.CUDA, cuda_runtime="taichi") as libtaichis:
        x = libtaichis.ndarray((4,), np.float32)
        (error,) = _threads(lambda k: x.to_numpy(), 1)
        assert isinstance(error, WrongThreadError) and "taichi_aot's own CUDA runtime" in str(error), error
    with Runtime(Arch.CUDA) as own:  # libtaichi's launches beside the own runtime keep to its thread too
        mod = own.load_module(cuda_module["cuda"], launcher="taichi")
        x = own.ndarray((4,), np.float32)
        (error,) = _threads(lambda k: mod.kernels["add"](x, x, 1.0), 1)
        assert isinstance(error, WrongThreadError) and "launched through libtaichi" in str(error), error
