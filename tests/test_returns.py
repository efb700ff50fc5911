"""Kernels libtaichi_c_api 1.7.4 cannot give all they need, on x64: those that return values (``value =
kernel(x)``) and those that take f64, i64, u64 and u8 scalars run on taichi_aot's own x64 launch (the module's IR
compiled with llvmlite) and give what Taichi's own JIT gives (tests/returns_kernels.py computes it); where no
backend gives a kernel's values (Vulkan; x64 without llvmlite) its look-up is refused, typed, and
``launchers()`` says why: never a call that returns None in silence."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from conftest import HERE, build_beside_taichi, require_arch, require_extra
from taichi_aot import (
    Arch,
    ArgumentTypeError,
    ClosedError,
    InvalidArgumentError,
    NotSupportedError,
    ReturningKernel,
    Runtime,
)

SOURCE = os.path.join(HERE, "returns_kernels.py")


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple[str, dict]:
    """The kernels built for x64 and Vulkan, and what Taichi's own JIT returns and writes."""
    require_arch(Arch.X64)
    require_extra("llvmlite.binding", "ptx")
    root = tmp_path_factory.mktemp("returns")
    out, expect = str(root / "returns.tcm"), str(root / "expect.npz")
    return out, build_beside_taichi(SOURCE, ["x64", "vulkan"], out, expect)[0]


def test_returned_values_and_wide_scalars_on_x64_are_taichis(built):
    from returns_kernels import CALLS, X32, X64

    path, expect = built
    with Runtime(Arch.X64) as rt:
        mod = rt.load_module(path)
        assert mod.launchers() == {"total": "x64", "stats": "x64", "count_and_mean": "x64", "wide": "x64",
                                   "plain": "taichi", "many": "taichi"}
        total = mod.kernels["total"]
        assert isinstance(total, ReturningKernel) and total.launcher == "x64"
        value = total(X32)
        assert type(value) is float and value == expect["total"]
        assert total(rt.ndarray_from_numpy(X32)) == value  # an NdArray
        assert total(X32[::-1].copy()) == value and total(np.zeros(5, np.float32)) == 0.0  # new arrays each call
        stats = mod.kernels["stats"](X64, *CALLS["stats"])  # an f64 scalar in, an f64 vector out
        assert isinstance(stats, np.ndarray) and stats.dtype == np.float64 and stats.shape == (3,)
        np.testing.assert_array_equal(stats, expect["stats"])
        n, mean = mod.kernels["count_and_mean"](X32, *CALLS["count_and_mean"])  # several values: a tuple
        assert (type(n), type(mean)) == (int, float) and (n, mean) == (expect["count"], expect["mean"])
        x = X64.copy()
        assert mod.kernels["wide"](x, *CALLS["wide"]) is None  # f64, i64, u64 and u8 scalars
        np.testing.assert_array_equal(x, expect["wide"])
        y = X64.copy()
        mod.kernels["wide"](y, a=0.5, k=CALLS["wide"][1], n=CALLS["wide"][2], b=200)  # by keyword
        np.testing.assert_array_equal(y, expect["wide"])


def test_returned_values_come_back_through_torch_and_jax_ops(built):
    """A torch or JAX op of a kernel that returns values returns them after its outputs, a tensor or array each
    (0-D for a scalar), eagerly and compiled (``torch.compile``, ``jax.jit``); no gradient flows through them."""
    from returns_kernels import CALLS, X32, X64

    torch = require_extra("torch", "interop")
    import taichi_aot.torch as tt

    path, expect = built
    with Runtime(Arch.X64) as rt:
        mod = rt.load_module(path)
        total = tt.op(mod.kernels["total"], {})  # no output array: the returned value is the op's result
        got = total(torch.from_numpy(X32))
        assert isinstance(got, torch.Tensor) and got.dim() == 0 and got.dtype == torch.float32
        assert got.item() == expect["total"]
        stats = tt.op(mod.kernels["stats"], {})(torch.from_numpy(X64), *CALLS["stats"])
        assert stats.dtype == torch.float64 and stats.shape == (3,)
        np.testing.assert_array_equal(stats.numpy(), expect["stats"])
        n, mean = tt.op(mod.kernels["count_and_mean"], {})(torch.from_numpy(X32), *CALLS["count_and_mean"])
        assert (n.dtype, mean.dtype) == (torch.int32, torch.float32) and (n.item(), mean.item()) == (
            expect["count"], expect["mean"])
        compiled = torch.compile(lambda x: total(x) * 2, fullgraph=True)  # the fake gives the value's shape
        assert compiled(torch.from_numpy(X32)).item() == 2 * expect["total"]
        assert total.boxed  # compiled, the values come back through the op's kernel in C (_csrc/torchop.c)
        stats_op = tt.op(mod.kernels["stats"], {})
        np.testing.assert_array_equal(torch.compile(lambda x: stats_op(x, *CALLS["stats"]), fullgraph=True)(
            torch.from_numpy(X64)).numpy(), expect["stats"])
        x = torch.from_numpy(X32).requires_grad_()
        value = total(x)  # an input that needs a gradient, and no backward: the value is right, backward refused
        assert value.item() == expect["total"]
        with pytest.raises(NotSupportedError, match="no backward"):
            value.backward()
        jax = require_extra("jax", "jax")
        import jax.numpy as jnp

        import taichi_aot.jax as tj

        with jax.default_device(jax.devices("cpu")[0]):  # an x64 op: its arrays on the CPU (a GPU host's default
            # is a GPU)
            jtotal = tj.op(mod.kernels["total"], {})  # the same through XLA's handler: the values after the outputs
            got = jtotal(jnp.asarray(X32))
            assert got.shape == () and got.dtype == jnp.float32 and float(got) == expect["total"]
            assert float(jax.jit(lambda x: jtotal(x) * 2)(jnp.asarray(X32))) == 2 * expect["total"]
            n, mean = tj.op(mod.kernels["count_and_mean"], {})(jnp.asarray(X32), *CALLS["count_and_mean"])
            assert (n.dtype, mean.dtype) == (jnp.int32, jnp.float32) and (int(n), float(mean)) == (
                expect["count"], expect["mean"])
        with pytest.raises(NotSupportedError, match="one for the whole launch"):  # not per batch element
            tj.op(mod.kernels["total"], {}, vmap_method="batch")


def test_a_returning_kernel_bound_and_replayed_keeps_its_last_value(built):
    path, _ = built
    with Runtime(Arch.X64) as rt:
        total = rt.load_module(path).kernels["total"]
        x = rt.ndarray_from_numpy(np.ones(64, np.float32))
        bound = total.bind(x)
        assert bound() is None and total.last_value() == 64.0
        with x.map() as view:
            view[:] = 2
        with rt.record() as seq:
            assert total(x) is None  # recorded, not run
        seq.replay(3)
        assert total.last_value() == 128.0


def test_bad_input_to_the_own_x64_launch_is_typed_and_harmless(built):
    path, _ = built
    with Runtime(Arch.X64) as rt:
        mod = rt.load_module(path)
        total, wide = mod.kernels["total"], mod.kernels["wide"]
        x = np.zeros(4)
        with pytest.raises(InvalidArgumentError, match="expected f32 ndarray"):
            total(np.zeros(4, np.float64))  # an f64 array for an f32 one
        with pytest.raises(ArgumentTypeError):
            total()
        with pytest.raises(InvalidArgumentError, match="out of range"):
            wide(x, 1.0, 2**63, 0, 0)  # past i64
        with pytest.raises(InvalidArgumentError, match="out of range"):
            wide(x, 1.0, 0, -1, 0)  # a negative u64
        with pytest.raises(InvalidArgumentError, match="out of range"):
            wide(x, 1.0, 0, 0, 256)  # past u8
        with pytest.raises(ArgumentTypeError):
            wide(x, "1.0", 0, 0, 0)
        with pytest.raises(ArgumentTypeError):
            wide(x, 1.0, 0.5, 0, 0)  # a float for an i64
        assert total(np.full(3, 2, np.float32)) == 6.0  # the kernels still right after the refusals
    with pytest.raises(ClosedError):
        total(np.ones(3, np.float32))


def test_twenty_numpy_arrays_a_call_are_remembered_and_taken_in_c(built, slow_calls):
    """A call of 20 numpy arrays, more than the 16 a runtime remembered before it sized its records by its
    kernels: each call after the first finds every array again, in C."""
    path, _ = built
    with Runtime(Arch.X64) as rt:
        many = rt.load_module(path).kernels["many"]
        arrays = [np.full(8, i, np.float32) for i in range(20)]
        for _ in range(3):
            many(*arrays)
        assert slow_calls[0] == 1 and (arrays[0] == sum(range(1, 20))).all()
        assert rt.foreign.size >= 40


def test_returned_values_and_wide_scalars_on_vulkan_are_taichis(built, vulkan):
    """The own Vulkan launch gives a kernel's returned values (libtaichi's C-API gives none) and passes f64, i64, u64
    and u8 scalars, as Taichi's own JIT computes them: the same values on the device the module's Vulkan part runs
    on (reductions whose sums are exact in f32 and f64)."""
    from returns_kernels import CALLS, X32, X64

    path, expect = built
    with Runtime(vulkan) as rt:
        mod = rt.load_module(path)
        assert set(mod.launchers().values()) == {"vulkan"}
        total = mod.kernels["total"]
        assert isinstance(total, ReturningKernel) and total.launcher == "vulkan"
        value = total(X32)
        assert type(value) is float and value == expect["total"]
        assert total(rt.ndarray_from_numpy(X32)) == value and total(np.zeros(5, np.float32)) == 0.0
        stats = mod.kernels["stats"](X64, *CALLS["stats"])
        assert isinstance(stats, np.ndarray) and stats.dtype == np.float64 and stats.shape == (3,)
        np.testing.assert_array_equal(stats, expect["stats"])
        n, mean = mod.kernels["count_and_mean"](X32, *CALLS["count_and_mean"])
        assert (type(n), type(mean)) == (int, float) and (n, mean) == (expect["count"], expect["mean"])
        x = X64.copy()
        assert mod.kernels["wide"](x, *CALLS["wide"]) is None
        rt.wait()
        np.testing.assert_array_equal(x, expect["wide"])


def test_vulkan_through_libtaichi_refuses_a_returning_kernel_at_look_up(built, vulkan):
    path, _ = built
    with Runtime(vulkan) as rt:
        mod = rt.load_module(path, launcher="taichi")
        said = mod.launchers()
        assert said["total"].startswith("refused: returns values") and "launcher='taichi'" in said["total"]
        assert said["plain"] == "taichi"
        with pytest.raises(NotSupportedError, match="returns values"):
            mod.kernels["total"]
        with pytest.raises(NotSupportedError, match="cannot pass a f64 scalar"):
            mod.kernels["wide"](np.zeros(4), 1.0, 0, 0, 0)
        x = np.zeros(4, np.float32)
        mod.kernels["plain"](x, 1.5)  # the module's other kernels as ever
        rt.wait()
        assert (x == 1.5).all()


NO_LLVMLITE = """
import sys
sys.modules["llvmlite"] = None  # as where the ptx extra is not installed
import numpy as np
from taichi_aot import NotSupportedError, Runtime
with Runtime("x64") as rt:
    mod = rt.load_module(sys.argv[1])
    said = mod.launchers()
    try:
        mod.kernels["total"]
    except NotSupportedError as e:
        print("look-up:", e)
    try:
        mod.kernels["wide"](np.zeros(4), 1.0, 0, 0, 0)
    except NotSupportedError as e:
        print("call:", e)
    print("total:", said["total"])
    print("wide:", said["wide"])
"""


def test_without_llvmlite_x64_refuses_them_saying_why(built):
    path, _ = built
    out = subprocess.run([sys.executable, "-c", NO_LLVMLITE, path], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    lines = dict(line.split(": ", 1) for line in out.stdout.splitlines())
    assert "returns values" in lines["look-up"] and "llvmlite" in lines["look-up"]
    assert "cannot pass a f64 scalar" in lines["call"]
    assert lines["total"].startswith("refused: returns values") and "llvmlite" in lines["total"]
    assert lines["wide"].startswith("taichi: ") and "llvmlite" in lines["wide"]


def test_a_value_is_its_own_calls_with_an_op_of_the_kernel_on_another_thread(built):
    """A CPU runtime serves any thread: a Python call of a returning kernel on this thread and a JAX op of the same
    kernel (launched by XLA's handler) on another, at once over many rounds, each get the value of their own launch,
    never the other's (a kernel's values are one buffer for all its launches)."""
    jax = require_extra("jax", "jax")
    import threading

    import jax.numpy as jnp

    import taichi_aot.jax as tj

    path, _ = built
    small, large = np.ones(64, np.float32), np.full(4096, 2.0, np.float32)  # totals 64 and 8192
    with Runtime(Arch.X64) as rt:
        total = rt.load_module(path).kernels["total"]
        with jax.default_device(jax.devices("cpu")[0]):
            jtotal = jax.jit(tj.op(total, {}))
            jlarge = jnp.asarray(large)
            assert float(jtotal(jlarge)) == 8192.0
            wrong: list[float] = []
            failed: list[BaseException] = []
            stop = threading.Event()

            def op_calls() -> None:
                try:
                    with jax.default_device(jax.devices("cpu")[0]):  # JAX's default device is the thread's own
                        while not stop.is_set():
                            got = float(jtotal(jlarge))
                            if got != 8192.0:
                                wrong.append(got)
                except BaseException as e:  # the thread's failure fails the test, not a warning
                    failed.append(e)

            other = threading.Thread(target=op_calls)
            other.start()
            try:
                for _ in range(2000):
                    got = total(small)
                    if got != 64.0:
                        wrong.append(got)
            finally:
                stop.set()
                other.join()
    assert failed == [] and wrong == []
