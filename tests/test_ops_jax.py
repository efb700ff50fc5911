"""taichi_aot.jax.op: kernels and graphs as XLA FFI custom calls, on x64 with JAX's CPU build (eager, jax.jit with
XLA ops around, vmap, grad, the errors, closing), and the FFI structures xla.c declares against jaxlib's header."""

from __future__ import annotations

import os
import shutil
import subprocess
import threading

import numpy as np
import pytest
from test_multi import built  # noqa: F401  (the fixture: a module with x64 and Vulkan parts)

from conftest import IN_CI, require_arch, require_extra
from taichi_aot import Arch, ArgumentTypeError, ClosedError, NotSupportedError, Runtime

jax = require_extra("jax", "jax")
jnp = require_extra("jax.numpy", "jax")
tj = pytest.importorskip("taichi_aot.jax")
CSRC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "taichi_aot", "_csrc")

# Each pair: our declaration (xla_ffi.h), XLA's (c_api.h), and the fields both name (ours first).
_LAYOUT = [
    ("tao_ffi_ext", "XLA_FFI_Extension_Base", [("struct_size",) * 2, ("type",) * 2, ("next",) * 2]),
    ("tao_ffi_version", "XLA_FFI_Api_Version", [("major_version",) * 2, ("minor_version",) * 2]),
    ("tao_ffi_error_args", "XLA_FFI_Error_Create_Args", [("message",) * 2, ("errc",) * 2]),
    ("tao_ffi_buffer", "XLA_FFI_Buffer", [("dtype",) * 2, ("data",) * 2, ("rank",) * 2, ("dims",) * 2]),
    ("tao_ffi_list", "XLA_FFI_Args", [("size",) * 2, ("types",) * 2, ("items", "args")]),
    ("tao_ffi_list", "XLA_FFI_Rets", [("size",) * 2, ("types",) * 2, ("items", "rets")]),
    ("tao_ffi_span", "XLA_FFI_ByteSpan", [("ptr",) * 2, ("len",) * 2]),
    ("tao_ffi_scalar", "XLA_FFI_Scalar", [("dtype",) * 2, ("value",) * 2]),
    ("tao_ffi_array", "XLA_FFI_Array", [("dtype",) * 2, ("size",) * 2, ("data",) * 2]),
    ("tao_ffi_attrs", "XLA_FFI_Attrs", [("size",) * 2, ("types",) * 2, ("names",) * 2, ("attrs",) * 2]),
    ("tao_ffi_frame", "XLA_FFI_CallFrame", [("api",) * 2, ("ctx",) * 2, ("stage",) * 2, ("args",) * 2,
                                            ("rets",) * 2, ("attrs",) * 2, ("future",) * 2]),
    ("tao_ffi_stream_args", "XLA_FFI_Stream_Get_Args", [("ctx",) * 2, ("stream",) * 2]),
    ("struct tao_ffi_api", "XLA_FFI_Api", [("api_version",) * 2, ("error_create", "XLA_FFI_Error_Create"),
                                           ("stream_get", "XLA_FFI_Stream_Get")]),
    ("tao_ffi_metadata", "XLA_FFI_Metadata", [("api_version",) * 2, ("traits",) * 2]),
    ("tao_ffi_metadata_ext", "XLA_FFI_Metadata_Extension", [("extension_base",) * 2, ("metadata",) * 2]),
]
_WHOLE = {"tao_ffi_span", "tao_ffi_scalar", "tao_ffi_array", "tao_ffi_version", "tao_ffi_buffer", "tao_ffi_list",
          "tao_ffi_attrs", "tao_ffi_stream_args", "tao_ffi_error_args", "tao_ffi_ext", "tao_ffi_metadata_ext"}


def test_ffi_declarations_match_jaxlibs_header(tmp_path):
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        (pytest.fail if IN_CI else pytest.skip)("no C compiler")
    lines = ['#include "xla/ffi/api/c_api.h"', '#include "xla_ffi.h"']
    with open(os.path.join(jax.ffi.include_dir(), "xla", "ffi", "api", "c_api.h")) as f:
        header = f.read()
    # jaxlib 0.11 renamed the extension chain's node (the same three fields)
    base = "XLA_FFI_InternalExtension" if "struct XLA_FFI_InternalExtension {" in header else "XLA_FFI_Extension_Base"
    for ours, name, fields in _LAYOUT:
        name = base if name == "XLA_FFI_Extension_Base" else name
        theirs = f"struct {name}"  # by tag: jaxlib's header typedefs some of its structures, and not in every release
        for mine, xla in fields:
            lines.append(f"_Static_assert(offsetof({ours}, {mine}) == offsetof({theirs}, {xla}), "
                         f'"{name}.{xla}");')
            lines.append(f"_Static_assert(sizeof((({ours} *)0)->{mine}) == sizeof((({theirs} *)0)->{xla}), "
                         f'"{name}.{xla} size");')
        if ours in _WHOLE:
            lines.append(f'_Static_assert(sizeof({ours}) == sizeof({theirs}), "sizeof {name}");')
    for ours, last, theirs in (("tao_ffi_error_args", "errc", "Error_Create_Args"),
                               ("tao_ffi_stream_args", "stream", "Stream_Get_Args")):
        lines.append(f'_Static_assert(TAO_FFI_SIZE({ours}, {last}) == XLA_FFI_{theirs}_STRUCT_SIZE, "{theirs}");')
    source = tmp_path / "layout.c"
    source.write_text("\n".join(lines) + "\n")
    proc = subprocess.run([cc, "-std=c11", "-fsyntax-only", "-I", jax.ffi.include_dir(), "-I", CSRC, str(source)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]


@pytest.fixture(autouse=True)
def on_the_cpu():
    """x64 ops take JAX's CPU arrays (on a machine with JAX's CUDA build, its default device is a GPU)."""
    with jax.default_device(jax.devices("cpu")[0]):
        yield


@pytest.fixture(scope="module")
def x64(modules):
    require_arch(Arch.X64)
    with Runtime(Arch.X64) as rt:
        yield rt.load_module(modules.path(Arch.X64))


def test_eager_values_scalars_both_ways_and_graphs(x64):
    add = tj.op(x64.kernels["add"], {0: 1})  # x (written) shaped like y, starting zeroed: x = a*y
    y = jnp.arange(16, dtype=jnp.float32)
    np.testing.assert_array_equal(add(y, 2.0), 2 * np.arange(16))  # a: an attribute
    np.testing.assert_array_equal(add(arg1=y, arg2=jnp.float32(0.5)), 0.5 * np.arange(16))  # a: an operand
    np.testing.assert_array_equal(add(np.ones(3, np.float32), 1.0), np.ones(3))
    twice = tj.op(x64.graphs["add_twice"], {"x": "y"})
    np.testing.assert_array_equal(twice(y=y, a=1.5), 3 * np.arange(16))
    acc = tj.op(x64.kernels["accumulate"], {0: 0, 2: 2})  # read and written: aliased, not zeroed
    total, v = acc(jnp.float32(1.0), jnp.arange(4, dtype=jnp.float32), jnp.array([1.0, 2.0, 3.0], jnp.float32))
    assert float(total) == 7.0 and v.tolist() == [2.0, 4.0, 6.0]
    fill = tj.op(x64.kernels["fill_i32"], {0: jax.ShapeDtypeStruct((3, 4), jnp.int32)})
    np.testing.assert_array_equal(fill(7), 7 + 100 * np.arange(3)[:, None] + np.arange(4)[None, :])


def test_f16_scalars_as_operands(x64):
    """An f16 scalar as a 0-d operand (read by the handler each call, an IEEE half widened to the f32 the C-API
    carries): normal, subnormal, negative and infinite values under jit, as numpy's f16 product gives them."""
    half_scale = tj.op(x64.kernels["half_scale"], {0: 0})  # x[i] *= s, x and s f16
    x = np.array([0.0, 1.0, 3.0, 0.5], np.float16)
    step = jax.jit(lambda x, s: half_scale(x, s))
    for s in (2.0, -0.375, 6.0e-8, 1.0e-5, 65504.0, float("inf")):
        s16 = np.float16(s)
        with np.errstate(all="ignore"):
            want = x * s16
        np.testing.assert_array_equal(np.asarray(step(jnp.asarray(x), jnp.asarray(s16))), want, err_msg=str(s))
    np.testing.assert_array_equal(np.asarray(half_scale(jnp.asarray(x), 2.0)), x * np.float16(2))  # an attribute
    for wrong in (jnp.float32(2.0), jnp.ones(2, jnp.float16)):  # another dtype, not 0-d: typed, at trace time
        with pytest.raises(ArgumentTypeError, match="argument 1: expected a Python number or a 0-d float16 array"):
            step(jnp.asarray(x), wrong)


def test_jit_between_xla_ops_many_times(x64):
    add = tj.op(x64.kernels["add"], {0: 1})
    acc = tj.op(x64.kernels["accumulate"], {0: 0, 2: 2})

    @jax.jit
    def step(y, a):
        z = add(jnp.sin(y) + 1, a) * 2 - 1
        total, v = acc(jnp.float32(0), z, jnp.stack([a, a, a]))
        return z + total, v

    y0 = np.linspace(0, 1, 64, dtype=np.float32)
    for i in range(200):
        z, v = step(jnp.asarray(y0 + i), jnp.float32(i % 7))
        want = (np.sin(y0 + i) + 1) * (i % 7) * 2 - 1
        np.testing.assert_allclose(z, want + want.sum(dtype=np.float32), rtol=2e-5, atol=1e-3)
        assert v.tolist() == [2.0 * (i % 7)] * 3
    # one import an address of XLA's buffers (5 buffers a step here), never one a call; addresses come back
    assert 0 < add.imports <= 5 * 200


def test_vmap_sequential_and_grad(x64):
    add = tj.op(x64.kernels["add"], {0: 1})
    ys = jnp.arange(12, dtype=jnp.float32).reshape(3, 4)
    np.testing.assert_array_equal(jax.vmap(lambda y: add(y, 2.0))(ys), 2 * np.asarray(ys))
    with pytest.raises(NotSupportedError, match="no backward was given"):
        jax.grad(lambda y: add(y, 2.0).sum())(ys[0])
    add_g = tj.op(x64.kernels["add"], {0: 1}, backward=lambda inputs, outputs, ct: (ct[0] * 2.0,))
    np.testing.assert_array_equal(jax.jit(jax.grad(lambda y: add_g(y, 2.0).sum()))(ys[0]), [2.0] * 4)
    no_vmap = tj.op(x64.kernels["add"], {0: 1}, vmap_method=None)
    with pytest.raises(Exception, match="vmap"):
        jax.vmap(lambda y: no_vmap(y, 2.0))(ys)


def test_wrong_inputs_are_typed_errors_at_trace_time(x64):
    add = tj.op(x64.kernels["add"], {0: 1})
    traced = jax.jit(lambda y, a: add(y, a))
    with pytest.raises(ArgumentTypeError, match=r"kernel 'add' argument 1: expected f32 ndarray with ndim 1, got "
                                                r"int32 array of shape \(4,\)"):
        traced(jnp.zeros(4, jnp.int32), 1.0)
    with pytest.raises(ArgumentTypeError, match=r"argument 1: expected f32 ndarray with ndim 1, got float32 array "
                                                r"of shape \(2, 2\)"):
        add(jnp.zeros((2, 2), jnp.float32), 1.0)
    with pytest.raises(ArgumentTypeError, match=r"argument 2: expected a Python number or a 0-d float32 array"):
        traced(jnp.zeros(4, jnp.float32), jnp.zeros(2, jnp.float32))
    with pytest.raises(ArgumentTypeError, match="takes 2 argument"):
        add(jnp.zeros(2, jnp.float32), 1.0, 2.0)
    with pytest.raises(ArgumentTypeError, match="missing input"):
        add(jnp.zeros(2, jnp.float32))
    with pytest.raises(ArgumentTypeError, match=r"argument 0 \(its output shape\): expected i32 ndarray with ndim 2"):
        tj.op(x64.kernels["fill_i32"], {0: jax.ShapeDtypeStruct((3,), jnp.int32)})


def test_closed_runtime_and_other_threads(modules):
    require_arch(Arch.X64)
    rt = Runtime(Arch.X64)
    add = tj.op(rt.load_module(modules.path(Arch.X64)).kernels["add"], {0: 1})
    compiled = jax.jit(lambda y: add(y, 3.0))
    y = jax.device_put(jnp.ones(8, jnp.float32), jax.devices("cpu")[0])  # committed: the thread has no default
    results = []
    worker = threading.Thread(target=lambda: results.append(np.asarray(compiled(y))))  # XLA on another thread
    worker.start()
    worker.join()
    np.testing.assert_array_equal(results[0], [3.0] * 8)
    np.testing.assert_array_equal(compiled(y), [3.0] * 8)  # compiled in this thread too (its own cache entry)
    rt.close()
    with pytest.raises(ClosedError):
        add(y, 1.0)
    with pytest.raises(Exception, match="ClosedError: op of kernel 'add': its runtime is closed"):
        np.asarray(compiled(y))  # compiled before: XLA reports the handler's error, no launch


def test_vmap_as_one_launch_equals_the_loop(x64):
    """``vmap_method="batch"``: ``jax.vmap`` of the op is one launch over the batch joined to the arrays' leading
    axis (one FFI call in the program, no loop), its values the sequential loop's, under ``jax.jit`` too; an
    unbatched array is broadcast over the batch; a kernel that cannot be batched so is refused when the op is
    made, and a batched scalar when it is traced."""
    add_loop = tj.op(x64.kernels["add"], {0: 1})
    add = tj.op(x64.kernels["add"], {0: 1}, vmap_method="batch")
    ys = jnp.arange(24, dtype=jnp.float32).reshape(6, 4) - 7.5
    want = jax.vmap(lambda y: add_loop(y, 1.5))(ys)
    got = jax.vmap(lambda y: add(y, 1.5))(ys)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    np.testing.assert_array_equal(np.asarray(jax.jit(jax.vmap(lambda y: add(y, 1.5)))(ys)), np.asarray(want))
    text = str(jax.make_jaxpr(jax.vmap(lambda y: add(y, 1.5)))(ys))
    loop = str(jax.make_jaxpr(jax.vmap(lambda y: add_loop(y, 1.5)))(ys))
    assert text.count("ffi_call") == 1 and "while" not in text and "scan" not in text, text
    assert "f32[24]" in text  # the batch joined to the leading axis: one launch of 24 elements
    assert "while" in loop or "scan" in loop  # the default: a launch per batch element
    nested = jax.vmap(jax.vmap(lambda y: add(y, 1.5)))(ys.reshape(2, 3, 4))  # the inner vmap: one launch
    np.testing.assert_array_equal(np.asarray(nested).reshape(6, 4), np.asarray(want))
    with pytest.raises(NotSupportedError, match="one scalar for the whole batch"):
        jax.vmap(lambda y, a: add(y, a))(ys, jnp.arange(6, dtype=jnp.float32))
    with pytest.raises(NotSupportedError, match="has a shape of its own"):  # refused when the op is made
        tj.op(x64.kernels["add"], {0: ((4,), jnp.float32)}, vmap_method="batch")


def test_one_function_over_a_modules_parts(built):  # noqa: F811
    """``op_of``: a kernel of a module with several parts as one JAX function, the part of the platform XLA runs it
    on (the CPU here; the CPU and a GPU where one is, jax.lax.platform_dependent), eagerly and jitted."""
    path = os.path.join(built, "multi.tcm")  # x64 and Vulkan parts
    saxpy = tj.op_of(path, "saxpy", {"y": "y"})
    assert saxpy.devices == ("cpu",) and saxpy.parts == {}
    with jax.default_device(jax.devices("cpu")[0]):
        x, y = jnp.arange(4, dtype=jnp.float32), jnp.ones(4, jnp.float32)
        np.testing.assert_array_equal(np.asarray(saxpy(x, y, 2.0)), 2 * np.arange(4) + 1)
        assert list(saxpy.parts) == ["cpu"]
        step = jax.jit(lambda u, v: saxpy(u, v, 3.0) * 2)
        np.testing.assert_array_equal(np.asarray(step(x, y)), 2 * (3 * np.arange(4) + 1))
    saxpy.close()
    with pytest.raises(NotSupportedError, match="none for x64 or cuda"):
        tj.op_of(os.path.join(built, "vulkan.tcm"), "saxpy", {"y": "y"})
