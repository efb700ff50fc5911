"""CUDA, where a GPU with its driver is present (the NVIDIA machine); skipped elsewhere, CI included.

The C-API of Taichi 1.7.4 has no device-to-device or host copies for CUDA memory; the object layer
copies with the CUDA driver, and these tests check that real data makes the round trip.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import numpy as np
import pytest

from conftest import KERNELS, taichi_cuda_abort, taichi_env
from taichi_aot import (
    Arch,
    ArgumentTypeError,
    ClosedError,
    IncompatibleModuleError,
    InvalidArgumentError,
    InvalidStateError,
    NotSupportedError,
    ReadOnlyArrayError,
    Runtime,
    TaichiError,
    capi,
    metadata,
)
from taichi_aot.drivers import cuda as _cuda
from taichi_aot.drivers import cuda_host as _cuda_host
from taichi_aot.ptx import add_ptx


@pytest.fixture(scope="module")
def cuda_module(tmp_path_factory):
    status = capi.arch_status()[Arch.CUDA]
    if not status.available:
        pytest.skip(f"no CUDA here: {status.reason}")
    root = tmp_path_factory.mktemp("cuda")
    out = {}
    for name in ("cuda", "cuda.tcm"):
        path = str(root / name)
        for _ in range(2):  # Taichi 1.7.4's CUDA compiler at times aborts freeing memory (CUDA_ERROR_INVALID_CONTEXT
            # in cuMemFreeAsync), on a multi-GPU host most: once more then (build does the same)
            proc = subprocess.run([sys.executable, KERNELS, "--arch", "cuda", "--out", path], capture_output=True,
                                  text=True, timeout=600, env=taichi_env())
            if not taichi_cuda_abort(proc):
                break
        assert proc.returncode == 0, proc.stderr[-3000:]
        if importlib.util.find_spec("llvmlite") is not None:  # kernels on the own launcher (TAICHI_AOT_CUDA_LAUNCHER)
            add_ptx(path)
        out[name] = path
    return out


def test_cuda_module_metadata(cuda_module):
    info = metadata.read_module(cuda_module["cuda"])
    assert info.format == "llvm" and info.arch == Arch.CUDA
    assert [a.name for a in info.graphs["add_twice"].args] == ["x", "y", "a"]


def test_cuda_kernels_graphs_and_copies(cuda_module):
    for source in (cuda_module["cuda"], cuda_module["cuda.tcm"]):
        with Runtime(Arch.CUDA) as rt:
            kernels_graphs_and_copies(rt, source)


def kernels_graphs_and_copies(rt: Runtime, source: str, launcher: str = "auto") -> None:
    """The test kernels and graph of ``source`` on ``rt`` (``launcher="taichi"``: every one through libtaichi), called,
    bound, replayed, and their ndarrays copied, filled and mapped (also test_cudart's, on the own runtime)."""
    mod = rt.load_module(source, launcher=launcher)
    if launcher == "taichi":
        assert all(v.startswith(("taichi", "refused: ")) for v in mod.launchers().values()), mod.launchers()
    x = rt.ndarray_from_numpy(np.zeros(1024, np.float32))
    y = rt.ndarray_from_numpy(np.arange(1024, dtype=np.float32))
    assert not x.memory.host_read  # device memory by default on CUDA
    mod.kernels["add"](x, y, 0.5)
    mod.graphs["add_twice"](x=x, y=y, a=1.0)
    bound = mod.kernels["add"].bind(x, y, 2.0)
    bound()
    with rt.record() as seq:
        mod.kernels["add"](x, y, 0.5)
    seq.replay(2)
    expected = np.arange(1024, dtype=np.float32) * np.float32(0.5 + 2 + 2 + 1)
    np.testing.assert_allclose(x.to_numpy(), expected)
    out = np.empty(1024, np.float32)
    assert x.to_numpy(out=out) is out
    z = rt.ndarray((1024,), np.float32)
    assert not z.to_numpy().any()  # zero-filled
    z.copy_from(x)
    np.testing.assert_allclose(z.to_numpy(), expected)
    z.fill(3.0)
    assert (z.to_numpy() == 3.0).all()
    i2 = rt.ndarray((4, 5), np.int32)
    mod.kernels["fill_i32"](i2, 7)
    assert i2.to_numpy()[3, 4] == 7 + 300 + 4
    vec = rt.ndarray((3,), np.float32, (3,))
    mod.kernels["scale_vec3"](vec, (1.0, 2.0, 3.0))
    np.testing.assert_allclose(vec.to_numpy()[2], [3.0, 6.0, 9.0])
    if launcher == "auto":  # scalars of widths the C-API does not carry: the own launcher's
        out64 = rt.ndarray((4,), np.float64)
        mod.kernels["typed_scalars"](out64, np.int16(-3), np.uint16(65000), np.float16(0.5), 9)
        np.testing.assert_allclose(out64.to_numpy(), [-3, 65000, 0.5, 9])
    with pytest.raises(TypeError, match="expected f32 ndarray"):
        mod.kernels["add"](1.0, y, 1.0)
    host = rt.ndarray((8,), np.float32, host_access="readwrite")
    with host.map() as view:
        view[:] = 1.5
    del view  # the runtime lives on while a view does
    mod.kernels["add"](host, rt.ndarray_from_numpy(np.ones(8, np.float32)), 2.0)
    np.testing.assert_allclose(host.to_numpy(), 3.5)
    with host.map() as view:
        np.testing.assert_allclose(view, 3.5)
    del view
    y.close()
    with pytest.raises(ClosedError):
        bound()


def test_one_libtaichi_cuda_runtime_at_a_time(cuda_module):
    # two live CUDA runtimes of libtaichi's abort the process when both are destroyed (libtaichi_c_api 1.7.4); the own
    # runtimes (the default) may be many (test_cudart)
    taichi = {"cuda_runtime": "taichi"}
    with Runtime(Arch.CUDA, **taichi) as rt:
        with pytest.raises(InvalidStateError, match="already exists"):
            Runtime(Arch.CUDA, **taichi)
        x = rt.ndarray((4,), np.float32, host_access="readwrite")
        view = x.map().view()
    with pytest.raises(InvalidStateError, match="already exists"):
        Runtime(Arch.CUDA, **taichi)  # the closed runtime lives on through the view
    del view
    with Runtime(Arch.CUDA, **taichi) as again:
        assert again.arch == Arch.CUDA and not again.device.traits.own_runtime


def test_cuda_and_x64_modules_do_not_mix(cuda_module, modules):
    with Runtime(Arch.CUDA) as rt, pytest.raises(IncompatibleModuleError, match="X64"):
        rt.load_module(modules.path(Arch.X64))
    with Runtime(Arch.X64) as rt, pytest.raises(IncompatibleModuleError, match="CUDA"):
        rt.load_module(cuda_module["cuda"])


def test_torch_and_cupy_cuda_arrays_without_a_copy(cuda_module):
    # another library's CUDA arrays as kernel arguments (the same memory: pointer equality), and CUDA ndarrays
    # read by them through __cuda_array_interface__
    torch = pytest.importorskip("torch")
    cupy = pytest.importorskip("cupy")
    with Runtime(Arch.CUDA) as rt:
        add = rt.load_module(cuda_module["cuda"]).kernels["add"]
        x = torch.zeros(1024, device="cuda")
        y = torch.arange(1024, dtype=torch.float32, device="cuda")
        add(x, y, 2.0)
        rt.wait()
        assert torch.equal(x, 2 * y)
        shared = rt.ndarray_from(x)
        assert shared.memory.cuda_pointer() == x.data_ptr()
        c = cupy.ones(1024, dtype=cupy.float32)
        add(c, y, 1.0)
        rt.wait()
        assert cupy.allclose(c, 1 + cupy.asarray(y))
        nd = rt.ndarray_from_numpy(np.arange(8, dtype=np.float32))
        t = torch.as_tensor(nd, device="cuda")
        assert t.data_ptr() == nd.memory.cuda_pointer() and t.tolist() == list(range(8))
        cp = cupy.asarray(nd)
        assert cp.data.ptr == nd.memory.cuda_pointer() and float(cp.sum()) == 28.0
        with pytest.raises(InvalidArgumentError, match="strided"):
            rt.ndarray_from(torch.zeros((4, 4), device="cuda").t())


def test_foreign_cuda_arguments_are_held_until_the_runtime_waits(cuda_module):
    # kernels run after the launch returns: a temporary stays alive until then, and no longer
    import gc
    import weakref

    torch = pytest.importorskip("torch")
    with Runtime(Arch.CUDA) as rt:
        add = rt.load_module(cuda_module["cuda"]).kernels["add"]
        y = torch.ones(1 << 20, device="cuda")
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
        refs = []
        for _ in range(4):
            temporary = torch.zeros(1 << 20, device="cuda")
            add(temporary, y, 1.0)
            refs.append(weakref.ref(temporary))
            del temporary
        gc.collect()
        assert all(ref() is not None for ref in refs)  # the kernels may still be reading them
        assert refs[-1]().sum().item() == 1 << 20
        rt.wait()
        gc.collect()
        assert all(ref() is None for ref in refs) and torch.cuda.memory_allocated() == before
        x = torch.zeros(1 << 20, device="cuda")
        for _ in range(3):  # found again, and held again until the next wait
            add(x, y, 1.0)
        rt.wait()
        assert x.min().item() == 3.0
        negated = torch.complex(torch.arange(4.0), torch.arange(4.0)).cuda().conj().imag
        with pytest.raises(ArgumentTypeError, match="resolve_neg"):
            add(torch.zeros(4, device="cuda"), negated, 1.0)


def test_a_pool_of_cuda_workers_one_gpu_each(cuda_module):
    # one worker per GPU, each seeing only its own (CUDA_VISIBLE_DEVICES), results right on every one
    import pool_tasks as tasks

    from taichi_aot.pool import Pool
    from taichi_aot.pool._plan import _visible

    count = capi.arch_status()[Arch.CUDA].device_count or 1
    devices = list(range(count))
    items = [float(i) for i in range(4 * count)]
    with Pool(cuda_module["cuda"], arch=Arch.CUDA, devices=devices) as pool:
        assert pool.size == count
        results = pool.map(tasks.axpy, items)
        for a, (values, _pid) in zip(items, results):
            np.testing.assert_array_equal(values, a * np.arange(8, dtype=np.float32))
        seen = {s["slot"]: s for s in pool.map(tasks.whoami, range(8 * count))}
        visible = sorted(s["cuda_visible"] for s in seen.values())
        # each device as this process's CUDA_VISIBLE_DEVICES names it ("2", a UUID), or its index where it is unset
        assert visible == sorted(_visible(d) for d in devices)[: len(visible)]
        assert len({s["pid"] for s in seen.values()}) == len(seen)


def test_dlpack_both_ways_with_torch_cupy_and_jax(cuda_module, monkeypatch):
    # CUDA ndarrays exported through DLPack without a copy (pointer equality), alive after close() while a
    # consumer holds them; JAX arrays (DLPack or their CUDA array interface) as kernel arguments and sources
    import gc
    import os

    if "XLA_PYTHON_CLIENT_PREALLOCATE" not in os.environ:  # JAX would take 75 % of the GPU
        monkeypatch.setenv("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    torch = pytest.importorskip("torch")
    cupy = pytest.importorskip("cupy")
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp

    from taichi_aot import _dlpack

    with Runtime(Arch.CUDA) as rt:
        add = rt.load_module(cuda_module["cuda"]).kernels["add"]
        nd = rt.ndarray_from_numpy(np.arange(12, dtype=np.float32).reshape(3, 4))
        ptr = nd.memory.cuda_pointer()
        assert nd.__dlpack_device__() == (2, 0)
        t = torch.from_dlpack(nd)
        assert t.device.type == "cuda" and t.data_ptr() == ptr and t.shape == (3, 4) and t[2, 3].item() == 11
        c = cupy.from_dlpack(nd)
        assert c.data.ptr == ptr and float(c.sum()) == 66.0
        j = jax.dlpack.from_dlpack(nd)
        assert float(jnp.sum(j)) == 66.0
        t += 1  # the same memory
        assert nd.to_numpy()[0, 0] == 1.0
        nd.close()
        gc.collect()
        assert float(t.sum()) == 78.0  # the consumer keeps the memory alive past close()
        del t, c, j
        gc.collect()
        # copies on request: to the CPU, and on the device
        nd = rt.ndarray_from_numpy(np.ones(4, np.float32))
        on_host = torch.from_dlpack(nd.__dlpack__(dl_device=(1, 0), copy=True))
        assert on_host.device.type == "cpu" and on_host.tolist() == [1.0] * 4
        moved = torch.from_dlpack(nd.__dlpack__(max_version=(1, 0), copy=True))
        assert moved.data_ptr() != nd.memory.cuda_pointer() and moved.tolist() == [1.0] * 4
        with pytest.raises(InvalidStateError, match="copy=False"):
            nd.__dlpack__(dl_device=(1, 0), copy=False)

        # JAX arrays in: a kernel argument only read, without a copy; an ndarray (which kernels write) a copy
        y = jnp.arange(1024, dtype=jnp.float32)
        x = torch.zeros(1024, device="cuda")
        add.declare_access({1: "read"})  # Taichi's own LLVM module records no access
        add(x, y, 3.0)
        rt.wait()
        np.testing.assert_array_equal(x.cpu().numpy(), np.asarray(y) * 3)
        copied = rt.ndarray_from(y)
        assert copied.memory.cuda_pointer() != y.unsafe_buffer_pointer() and copied.to_numpy()[7] == 7
        imported = _dlpack.consume(jnp.ones(8, jnp.int32), stream=1)  # JAX's own capsule, read by ours
        assert imported.device == (2, 0) and imported.dtype == np.int32 and imported.shape == (8,)
        imported.release()


def test_foreign_cuda_arrays_read_only_copies_and_bad_cases(cuda_module):
    torch = pytest.importorskip("torch")

    class ReadOnly:  # a CUDA array interface that says read-only, over a real tensor's memory
        def __init__(self, t):
            self.t = t
            self.__cuda_array_interface__ = {**t.__cuda_array_interface__, "data": (t.data_ptr(), True)}

    with Runtime(Arch.CUDA) as rt:
        add = rt.load_module(cuda_module["cuda"]).kernels["add"]
        src = torch.arange(16, dtype=torch.float32, device="cuda")
        ro = ReadOnly(src)  # an ndarray is written by kernels: a copy on the device, never the memory itself
        with pytest.raises(ReadOnlyArrayError, match="copy=False"):
            rt.ndarray_from(ro, copy=False)
        copied = rt.ndarray_from(ro)
        assert copied.memory.cuda_pointer() != src.data_ptr() and copied.to_numpy()[5] == 5
        twice = rt.ndarray_from(src, copy=True)
        assert twice.memory.cuda_pointer() != src.data_ptr() and twice.to_numpy()[3] == 3
        x = torch.zeros(16, device="cuda")
        add(x, ro, 1.0)  # Taichi's own LLVM module records no access; its IR says y is only read: shared
        add.declare_access({1: "read"})  # the same, said by the caller
        add(x, ro, 1.0)
        rt.wait()
        assert x.tolist() == [2.0 * v for v in range(16)]
        with pytest.raises(ReadOnlyArrayError, match="read-only"):
            add(ro, x, 1.0)
        grad = torch.ones(16, device="cuda", requires_grad=True)
        with pytest.raises(ArgumentTypeError, match="refused"):
            add(x, grad, 1.0)
        with pytest.raises(TaichiError):
            add(x, torch.empty(16, device="meta"), 1.0)
        with pytest.raises(ArgumentTypeError):
            rt.ndarray_from(torch.zeros(4, dtype=torch.complex64, device="cuda"))
        if torch.cuda.device_count() > 1:  # another GPU than the runtime's
            with pytest.raises(InvalidArgumentError, match="device 1"):
                rt.ndarray_from(torch.zeros(4, device="cuda:1"))


def test_immutable_and_changed_cuda_arrays(cuda_module):
    """A JAX array is never written; torch and CuPy arrays found again (by their pointer, shape, strides, dtype and
    requires_grad, not by torch's slow __cuda_array_interface__) are seen as they are now."""
    torch = pytest.importorskip("torch")
    cupy = pytest.importorskip("cupy")
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp

    gpus = [d for d in jax.devices() if d.platform == "gpu"]
    if not gpus:
        pytest.skip("JAX sees no GPU here")
    with Runtime(Arch.CUDA) as rt:
        add = rt.load_module(cuda_module["cuda"]).kernels["add"]
        j = jax.device_put(jnp.arange(16, dtype=jnp.float32), gpus[0])
        x = torch.zeros(16, device="cuda")
        for _ in range(2):
            with pytest.raises(ReadOnlyArrayError, match="JAX"):
                add(j, x, 1.0)
        with pytest.raises(ReadOnlyArrayError, match="JAX"):
            rt.ndarray_from(j, copy=False)
        add.declare_access({1: "read"})
        for _ in range(3):  # the second and third find it again
            add(x, j, 1.0)
        rt.wait()
        assert x.tolist() == [3.0 * i for i in range(16)]
        with pytest.raises(ReadOnlyArrayError, match="JAX"):  # found again, and still immutable
            add(j, x, 1.0)
        assert np.asarray(j).tolist() == list(range(16))
        t = torch.zeros(16, device="cuda")
        add(t, x, 1.0)
        t.resize_(8)  # the same memory, another shape
        add(t, x[:8], 1.0)
        t.data = torch.ones(32, device="cuda")  # other memory
        add(t, torch.ones(32, device="cuda"), 1.0)
        rt.wait()
        assert t.tolist() == [2.0] * 32
        t.requires_grad_()
        with pytest.raises(ArgumentTypeError, match="refused"):
            add(t, torch.ones(32, device="cuda"), 1.0)
        c = cupy.zeros(16, cupy.float32)
        add(c, x, 1.0)
        c.shape = (2, 8)
        with pytest.raises(InvalidArgumentError, match="ndim 1"):
            add(c, x, 1.0)
        c.shape = (16,)
        add(c, x, 1.0)
        rt.wait()
        assert cupy.asnumpy(c).tolist() == [6.0 * i for i in range(16)]


def test_cuda_arrays_found_again_by_the_c_call(cuda_module):
    """Calls with the torch, CuPy and JAX arrays of the last launch are made in C (_csrc/call.c), which checks each
    array's print as the Python packer does: a change in place between calls is seen (and checked) there."""
    torch = pytest.importorskip("torch")
    cupy = pytest.importorskip("cupy")
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp

    with Runtime(Arch.CUDA) as rt:
        add = rt.load_module(cuda_module["cuda"]).kernels["add"]
        x, y = torch.zeros(16, device="cuda"), torch.ones(16, device="cuda")
        for _ in range(4):  # the last three made in C
            add(x, y, 1.0)
        x.resize_(8)  # the same memory, another shape
        for _ in range(2):
            add(x, y, 1.0)
        rt.wait()
        assert x.tolist() == [6.0] * 8
        x.data = torch.zeros(16, device="cuda")  # other memory
        for _ in range(3):
            add(x, y, 2.0)
        rt.wait()
        assert x.tolist() == [6.0] * 16
        x.requires_grad_()
        with pytest.raises(ArgumentTypeError, match="refused"):
            add(x, y, 1.0)
        x = torch.zeros(16, device="cuda")
        for _ in range(3):
            add(x, y, 1.0)
        x.data = x.view(torch.int32)  # the same memory and shape, another dtype
        with pytest.raises(InvalidArgumentError):
            add(x, y, 1.0)
        w = torch.zeros(32, device="cuda")
        x.data = w[:16]
        for _ in range(3):
            add(x, y, 1.0)
        x.as_strided_((16,), (2,))  # the same memory and shape, other strides
        with pytest.raises(TaichiError):
            add(x, y, 1.0)
        rt.wait()
        assert w.tolist() == [3.0] * 16 + [0.0] * 16
        c, d = cupy.zeros(16, cupy.float32), cupy.ones(16, cupy.float32)
        for _ in range(3):
            add(c, d, 1.0)
        c.shape = (2, 8)
        with pytest.raises(InvalidArgumentError, match="ndim 1"):
            add(c, d, 1.0)
        c.shape = (16,)
        add(c, d, 1.0)
        add(c, d, 1.0)
        rt.wait()
        assert cupy.asnumpy(c).tolist() == [5.0] * 16
        gpus = [dev for dev in jax.devices() if dev.platform == "gpu"]
        if gpus:
            add.declare_access({1: "read"})
            j = jax.device_put(jnp.arange(16, dtype=jnp.float32), gpus[0])
            for _ in range(3):
                add(c, j, 1.0)
            rt.wait()
            assert cupy.asnumpy(c).tolist() == [5.0 + 3 * i for i in range(16)]
            j.delete()  # its memory goes back to JAX: the print says so
            with pytest.raises(TaichiError):
                add(c, j, 1.0)
            with pytest.raises(ReadOnlyArrayError, match="JAX"):  # x = JAX output: refused in C's stead too
                add(jax.device_put(jnp.zeros(16, dtype=jnp.float32), gpus[0]), d, 1.0)


def test_streams_and_fast_transfers(cuda_module):
    with Runtime(Arch.CUDA) as rt:
        module = rt.load_module(cuda_module["cuda"])
        add = module.kernels["add"]
        # transfers: pageable arrays staged (odd sizes, several chunks), page-locked arrays directly
        for count in (1000, (3 << 20) // 4 + 3, (_cuda_host.CHUNK * 2 + (5 << 20)) // 4 + 1):
            data = np.random.default_rng(count).random(count, dtype=np.float32)
            nd = rt.ndarray((count,), np.float32)
            nd.from_numpy(data)
            np.testing.assert_array_equal(nd.to_numpy(), data)
            pinned = rt.host_array((count,), np.float32)
            assert _cuda.is_pinned(pinned.ctypes.data) and not _cuda.is_pinned(data.ctypes.data)
            nd.to_numpy(out=pinned)
            np.testing.assert_array_equal(pinned, data)
            pinned *= 2
            nd.from_numpy(pinned)
            np.testing.assert_array_equal(nd.to_numpy(), data * 2)
            nd.close()
        kept = rt.host_array((4,), np.int32)
        # streams: a blocking CuPy stream is taken by both launchers; a non-blocking torch stream by the own one
        cupy = pytest.importorskip("cupy")
        torch = pytest.importorskip("torch")
        stream = cupy.cuda.Stream()
        x = cupy.zeros(1 << 20, dtype=cupy.float32)
        y = cupy.ones(1 << 20, dtype=cupy.float32)
        rt.set_cuda_stream(stream)
        assert rt.cuda_stream == stream.ptr
        with stream:
            y *= 2  # queued on the stream, then the kernel after it on the same stream
            add(x, y, 1.5)
            x += 1
        rt.wait()
        assert float(x[-1]) == 4.0
        side = torch.cuda.Stream()  # non-blocking
        rt.set_cuda_stream(side)
        xt, yt = torch.zeros(1 << 20, device="cuda"), torch.ones(1 << 20, device="cuda")
        torch.cuda.synchronize()
        graph = module.graphs["add_twice"]  # on the own launcher where its kernel is
        assert graph.launcher == add.launcher == module.launchers()["add"]
        with torch.cuda.stream(side):
            yt.mul_(3)  # queued on the stream, the kernels after it, then torch again: ordered with no sync
            if add.launcher == "cuda":
                add(xt, yt, 0.5)
                graph(x=xt, y=yt, a=1.0)
                xt.add_(1)
                expected = 0.5 * 3 + 2 * 3 + 1
            else:
                with pytest.raises(NotSupportedError, match="non-blocking"):
                    add(xt, yt, 0.5)
                with pytest.raises(NotSupportedError, match="non-blocking"):
                    graph(x=xt, y=yt, a=1.0)
                expected = 0.0
        rt.wait()
        assert float(xt[-1]) == expected and float(xt[0]) == expected
        with pytest.raises(ArgumentTypeError):
            rt.set_cuda_stream("stream")
        rt.set_cuda_stream(None)
        assert rt.cuda_stream is None
    kept[:] = 7  # page-locked memory outlives the runtime
    assert kept.sum() == 28


def test_arrays_that_move_again_are_page_locked_until_collected(cuda_module, monkeypatch):
    import gc

    from taichi_aot import _hostpages

    count = (3 << 20) // 4 + 5  # 3 MiB and a bit: at least REGISTER_MIN, not page-aligned at its end
    rng = np.random.default_rng(7)
    with Runtime(Arch.CUDA) as rt:
        nd = rt.ndarray((count,), np.float32)
        base = _cuda_host.registered_bytes()
        data = rng.random(count, dtype=np.float32)
        nd.from_numpy(data)  # the first transfer of an array leaves it as it is
        assert not _cuda.is_pinned(data.ctypes.data)
        data[:] = rng.random(count, dtype=np.float32)
        nd.from_numpy(data)  # the second page-locks it (the whole allocation) and copies directly
        assert _cuda.is_pinned(data.ctypes.data) and _cuda_host.registered_bytes() == base + data.nbytes
        out = np.full(count, -1, np.float32)
        for _ in range(3):  # to_numpy(out=) registers its target the same way
            nd.to_numpy(out=out)
            np.testing.assert_array_equal(out, data)
        assert _cuda.is_pinned(out.ctypes.data)
        # a view of another array registers the array it is a view of; writes through numpy arrive
        grid = np.zeros((4, count), np.float32)
        for k in range(1, 4):
            grid[2] = data * k
            nd.from_numpy(grid[2])
            np.testing.assert_array_equal(nd.to_numpy(), data * k)
        assert _cuda.is_pinned(grid[0].ctypes.data) and _cuda_host.registered_bytes() == base + 6 * data.nbytes
        # temporaries (a new array each time) are never registered
        for k in range(3):
            nd.from_numpy(data + k)
        assert _cuda_host.registered_bytes() == base + 6 * data.nbytes
        # a registered array stays an ordinary array in a forked child (copy-on-write, no shared pages)
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            same = bool((grid[2] == data * 3).all())
            data[0] = -5.0
            forgotten = _cuda_host.registered_bytes() == 0  # the parent's registrations are not the child's
            os._exit(0 if same and forgotten and data[0] == -5.0 else 1)
        assert os.waitpid(pid, 0)[1] == 0 and data[0] != -5.0
        # numpy refuses to resize a registered array in place (its memory would move under the registration)
        with pytest.raises(ValueError, match="resize"):
            data.resize(2 * count, refcheck=False)
        # __setstate__ replaces its memory (numpy frees the old): the registration goes as the array comes by
        # again, and an array over memory numpy does not own (here the pickled bytes) is never registered
        old, moved = data.ctypes.data, rng.random(count, dtype=np.float32)
        data.__setstate__(moved.__reduce__()[2])
        for _ in range(2):
            nd.from_numpy(data)
            np.testing.assert_array_equal(nd.to_numpy(), moved)
        assert not _cuda.is_pinned(old) and not _cuda.is_pinned(data.ctypes.data)
        assert _cuda_host.registered_bytes() == base + 5 * data.nbytes
        # collected arrays are unregistered before numpy frees their memory
        del data, out, grid
        gc.collect()
        assert _cuda_host.registered_bytes() == base
        # memory that moved without coming by is unpinned when the next array is registered
        data = rng.random(count, dtype=np.float32)
        for _ in range(2):
            nd.from_numpy(data)
        old = data.ctypes.data
        data.__setstate__(moved.__reduce__()[2])
        for _ in range(2):
            nd.from_numpy(moved)
        assert not _cuda.is_pinned(old) and _cuda.is_pinned(moved.ctypes.data)
        assert _cuda_host.registered_bytes() == base + moved.nbytes
        del data, moved
        gc.collect()
        assert _cuda_host.registered_bytes() == base
        # the budget: past it, the least recently used array is unregistered; 0 registers nothing
        arrays = [rng.random(count, dtype=np.float32) for _ in range(3)]
        monkeypatch.setattr(_hostpages, "REGISTER_LIMIT", base + 2 * arrays[0].nbytes)
        for a in arrays:
            nd.from_numpy(a)
            nd.from_numpy(a)
            np.testing.assert_array_equal(nd.to_numpy(), a)
        assert [_cuda.is_pinned(a.ctypes.data) for a in arrays] == [False, True, True]
        monkeypatch.setattr(_hostpages, "REGISTER_LIMIT", 0)
        extra = rng.random(count, dtype=np.float32)
        for _ in range(3):
            nd.from_numpy(extra)
        assert not _cuda.is_pinned(extra.ctypes.data)
        del arrays, a
        gc.collect()
        assert _cuda_host.registered_bytes() == base


def test_new_cuda_arrays_each_call_are_taken_in_c(cuda_module, slow_calls):
    # a new output, new inputs, slices and memory handed again at another size: right values, found in C (a call
    # through Python only where HELD_LIMIT arrays wait to be let go)
    from taichi_aot._foreign import CACHE_SIZE, HELD_LIMIT

    torch = pytest.importorskip("torch")
    calls = slow_calls
    n = 4096
    with Runtime(Arch.CUDA) as rt:
        add = rt.load_module(cuda_module["cuda"]).kernels["add"]
        y = torch.arange(n, dtype=torch.float32, device="cuda")
        add(torch.zeros(n, device="cuda"), y, 1.0)
        calls[0] = 0
        kept = []
        for i in range(300):
            out = torch.full((n,), float(i), device="cuda")
            add(out, y, 2.0)
            if i % 37 == 0:
                kept.append((i, out))
        rt.wait()
        assert all(torch.equal(out, i + 2 * y) for i, out in kept)
        assert calls[0] <= 300 // (HELD_LIMIT - CACHE_SIZE) + 1  # each wait keeps the newest CACHE_SIZE held
        big = torch.zeros(4 * n, device="cuda")
        for k in range(8):
            add(big[(k % 4) * n:(k % 4 + 1) * n], y, 1.0)
        add(big[:2 * n], torch.ones(2 * n, device="cuda"), 1.0)  # the first slice's address, twice the size
        rt.wait()
        assert torch.equal(big[:n], 2 * y + 1) and torch.equal(big[n:2 * n], 2 * y + 1)
        assert torch.equal(big[2 * n:], torch.cat([2 * y, 2 * y]))
        with pytest.raises((ArgumentTypeError, InvalidArgumentError)):
            add(big[:n].view(torch.int32), y, 1.0)  # the same memory as another dtype
    try:
        import cupy
    except ImportError:
        return
    with Runtime(Arch.CUDA) as rt:
        add = rt.load_module(cuda_module["cuda"]).kernels["add"]
        c = cupy.arange(n, dtype=cupy.float32)
        add(cupy.zeros(n, cupy.float32), c, 1.0)  # the first CuPy array: its class is learnt
        calls[0] = 0
        outs = []
        for i in range(40):
            outs.append(cupy.full(n, i, dtype=cupy.float32))
            add(outs[-1], c, 1.0)
        rt.wait()
        assert calls[0] == 0
        assert all(bool(cupy.array_equal(o, i + c)) for i, o in enumerate(outs))
        with pytest.raises(InvalidArgumentError, match="strided"):
            add(cupy.zeros(2 * n, cupy.float32)[::2], c, 1.0)


def test_kill_9_during_a_cuda_map(cuda_module):
    """Issues 46 and 69's fault run: two CUDA workers, on two GPUs where the host has them (else both on GPU 0);
    the one on the last GPU is killed (SIGKILL) in the middle of a map. Every item comes back once, in order and
    right, the lost task ran again on the other worker, ``pool.workers`` says the place is starting, then that
    its new worker runs on the same GPU, and a map after it runs on every GPU of the pool."""
    import signal
    import threading
    import time

    import pool_tasks as tasks

    from taichi_aot.pool import Pool

    devices = [0, 1] if (capi.arch_status()[Arch.CUDA].device_count or 1) >= 2 else [0]
    items = [float(i) for i in range(12)]
    with Pool(cuda_module["cuda"], arch=Arch.CUDA, devices=devices, workers=2) as pool:
        victim = pool.workers[-1]
        assert victim["state"] == "running" and victim["device"] == devices[-1]
        killer = threading.Timer(0.5, os.kill, (victim["pid"], signal.SIGKILL))
        killer.start()
        results = pool.map(tasks.slow_axpy, items)
        killer.join()
        assert len(results) == len(items)
        for a, (values, _pid) in zip(items, results):
            np.testing.assert_array_equal(values, a * np.arange(8, dtype=np.float32))
        [lost] = pool.lost_workers
        assert lost.pid == victim["pid"] and lost.retried and results[lost.index][1] != victim["pid"]
        [place] = [w for w in pool.workers if w["slot"] == victim["slot"]]
        assert place["state"] in ("starting", "running") and place["device"] == victim["device"]
        assert place["pid"] != victim["pid"] and len(pool.workers) == 2
        deadline = time.monotonic() + 120  # the worker started in its place (a CUDA runtime takes seconds)
        while pool.workers[victim["slot"]]["state"] == "starting" and time.monotonic() < deadline:
            time.sleep(0.1)
        again = pool.workers[victim["slot"]]
        assert again["state"] == "running" and again["pid"] not in (None, victim["pid"])
        assert again["device"] == victim["device"] == devices[-1]  # on its GPU
        seen = pool.map(tasks.slow_whoami, range(8))
        assert {(s["device"], s["cuda_visible"]) for s in seen} == {(d, str(d)) for d in devices}
        assert victim["pid"] not in {s["pid"] for s in seen}



def test_host_arrays_passed_again_on_cuda(cuda_module):
    """numpy arrays and torch CPU tensors passed to a CUDA kernel again (a loop's step) go through the copies the last
    call kept, filled by one call into the driver (``transfers.fill``), with the arrays' values as they are now."""
    with Runtime(Arch.CUDA) as rt:
        add = rt.load_module(cuda_module["cuda"]).kernels["add"]  # x += a * y
        assert rt.device.transfers.fill(rt.ndarray((8,), np.float32).memory) is not None
        x, y = np.zeros(256, np.float32), np.arange(256, dtype=np.float32)
        for step in range(4):
            y[:] = step
            add(x, y, 0.5)
            assert np.array_equal(x, np.full(256, 0.25 * step * (step + 1), np.float32))
        assert add._callplan.kept is not None
        torch = pytest.importorskip("torch")
        xt, yt = torch.zeros(256), torch.arange(256, dtype=torch.float32)
        for _ in range(3):
            add(xt, yt, 1.0)
        assert add._callplan.kept is not None and torch.equal(xt, 3 * yt)
        yt.data = torch.ones(256)  # new memory under the same tensor: read there
        add(xt, yt, 1.0)
        assert torch.equal(xt, 3 * torch.arange(256, dtype=torch.float32) + 1)
