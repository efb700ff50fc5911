"""CUDA, where a GPU with its driver is present (the NVIDIA machine); skipped elsewhere, CI included.

The C-API of Taichi 1.7.4 has no device-to-device or host copies for CUDA memory; the object layer
copies with the CUDA driver, and these tests check that real data makes the round trip.
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from conftest import KERNELS
from taichi_aot import (
    Arch,
    ClosedError,
    IncompatibleModuleError,
    InvalidArgumentError,
    InvalidStateError,
    Runtime,
    capi,
    metadata,
)


@pytest.fixture(scope="module")
def cuda_module(tmp_path_factory):
    status = capi.arch_status()[Arch.CUDA]
    if not status.available:
        pytest.skip(f"no CUDA here: {status.reason}")
    root = tmp_path_factory.mktemp("cuda")
    out = {}
    for name in ("cuda", "cuda.tcm"):
        path = str(root / name)
        proc = subprocess.run([sys.executable, KERNELS, "--arch", "cuda", "--out", path], capture_output=True,
                              text=True, timeout=600)
        assert proc.returncode == 0, proc.stderr[-3000:]
        out[name] = path
    return out


def test_cuda_module_metadata(cuda_module):
    info = metadata.read_module(cuda_module["cuda"])
    assert info.format == "llvm" and info.arch == Arch.CUDA
    assert [a.name for a in info.graphs["add_twice"].args] == ["x", "y", "a"]


def test_cuda_kernels_graphs_and_copies(cuda_module):
    for source in (cuda_module["cuda"], cuda_module["cuda.tcm"]):
        with Runtime(Arch.CUDA) as rt:
            mod = rt.load_module(source)
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
            assert not z.to_numpy().any()  # zero-filled through the driver
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
            out64 = rt.ndarray((4,), np.float64)
            mod.kernels["typed_scalars"](out64, np.int16(-3), np.uint16(65000), np.float16(0.5), 9)
            np.testing.assert_allclose(out64.to_numpy(), [-3, 65000, 0.5, 9])
            with pytest.raises(TypeError, match="expected f32 ndarray"):
                mod.kernels["add"](1.0, y, 1.0)
            host = rt.ndarray((8,), np.float32, host_access="readwrite")
            with host.map() as view:
                view[:] = 1.5
            del view  # the runtime lives on while a view does, and the next loop creates another
            np.testing.assert_allclose(host.to_numpy(), 1.5)
            y.close()
            with pytest.raises(ClosedError):
                bound()


def test_one_cuda_runtime_at_a_time(cuda_module):
    # two live CUDA runtimes abort the process when both are destroyed (libtaichi_c_api 1.7.4)
    with Runtime(Arch.CUDA) as rt:
        with pytest.raises(InvalidStateError, match="already exists"):
            Runtime(Arch.CUDA)
        x = rt.ndarray((4,), np.float32, host_access="readwrite")
        view = x.map().view()
    with pytest.raises(InvalidStateError, match="already exists"):
        Runtime(Arch.CUDA)  # the closed runtime lives on through the view
    del view
    with Runtime(Arch.CUDA) as again:
        assert again.arch == Arch.CUDA


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
        assert shared.memory._cuda_ptr() == x.data_ptr()
        c = cupy.ones(1024, dtype=cupy.float32)
        add(c, y, 1.0)
        rt.wait()
        assert cupy.allclose(c, 1 + cupy.asarray(y))
        nd = rt.ndarray_from_numpy(np.arange(8, dtype=np.float32))
        t = torch.as_tensor(nd, device="cuda")
        assert t.data_ptr() == nd.memory._cuda_ptr() and t.tolist() == list(range(8))
        cp = cupy.asarray(nd)
        assert cp.data.ptr == nd.memory._cuda_ptr() and float(cp.sum()) == 28.0
        with pytest.raises(InvalidArgumentError, match="strided"):
            rt.ndarray_from(torch.zeros((4, 4), device="cuda").t())
