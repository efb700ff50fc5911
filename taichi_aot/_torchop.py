"""A torch op's kernel for torch's dispatcher in C (``_csrc/torchop.c``): what a compiled graph calls for an op
whose inputs need no gradient (the op's operator below autograd, taichi_aot.torch's Op._define_nograd), with no
Python between torch's dispatcher and the launch.

It launches the op's plan (:class:`~taichi_aot._plans.Plan`, as a JAX op's) on torch's current CUDA stream of the
op's GPU, or on x64 and waits. Made where the C side takes the op: its scalars of a 32- or 64-bit float or an
integer type, its arrays and values of a dtype torch has, on an x64 runtime or a CUDA one that launches it with its
own launcher and never waits (a launch that may be captured into a CUDA graph), torch's C functions found; else the
operator keeps its Python kernel.
"""

from __future__ import annotations

import os
import weakref
from typing import Any

import numpy as np

from ._native import ffi, lib
from ._ops import OpSpec
from ._plans import Plan, cell
from .enums import DATA_TYPES, Arch

__all__ = ["boxed_kernel"]

#: c10::DeviceType's codes of the two devices (stable: torch's C functions take them)
_CPU, _CUDA = 0, 1
_SCALARS = {np.dtype(t) for t in (np.float32, np.float64, np.int8, np.int16, np.int32, np.int64, np.uint8,
                                  np.uint16, np.uint32, np.uint64)}
_bound: dict[bool, bool] = {}


def _bind(cuda: bool) -> bool:
    """Whether torch's C functions are found (asked once a process for CPU ops, and once for CUDA ops: those need
    libtorch_cuda's too)."""
    found = _bound.get(cuda)
    if found is None:
        found = _bound[cuda] = bool(lib.taichi_aot_torch_op_bind(b"libtorch_cpu.so", b"libc10.so",
                                                                 b"libtorch_cuda.so" if cuda else ffi.NULL))
    return found


def _takes(spec: OpSpec, cuda: bool) -> bool:
    """Whether the C kernel takes the op (``cuda``: for torch's CUDA dispatch key; else its CPU's: see the module's
    docstring), torch's functions bound (its dtype codes)."""
    if cuda and not spec.entry._choice.graphable:  # torch may capture the CUDA key's calls into a CUDA graph, and this
        return False  # launch waits (libtaichi's for torch's stream): the Python kernel says so in torch's words
    if len(spec.args) > lib.TAICHI_AOT_OP_MAX_ARGS or len(spec.outputs) + len(spec.returned) > (
            lib.TAICHI_AOT_OP_MAX_ARGS):
        return False
    if any(len(shape or ()) > 16 for _, shape in spec.returned):
        return False
    if not all(spec.args[i].kind == "ndarray" or spec.dtype(i) in _SCALARS for i in spec.inputs):
        return False
    arrays = [spec.dtype(i) for i in [*spec.inputs, *spec.outputs] if spec.args[i].kind == "ndarray"]
    return all(_code(dtype) >= 0 for dtype in [*arrays, *(dtype for dtype, _ in spec.returned)])


def _code(dtype: np.dtype) -> int:
    """torch's dtype code of a numpy dtype (-1: none)."""
    return int(lib.taichi_aot_torch_code(DATA_TYPES[dtype]))


def _outputs(spec: OpSpec, makers: list[tuple[str, Any, Any]]) -> Any:
    """The outputs as the C side makes them (TaichiAotTorchOutput[]): see taichi_aot.h."""
    outs = ffi.new("TaichiAotTorchOutput[]", max(len(spec.outputs) + len(spec.returned), 1))
    for k, (i, (how, at, what)) in enumerate(zip(spec.outputs, makers)):
        o, a = outs[k], spec.args[i]
        o.dtype, o.arg, o.source = _code(spec.dtype(i)), i, -1
        if how == "clone":  # read and written: its input's every dim, its bytes copied in
            o.source, o.copy, o.lead = at, 1, a.ndim + len(a.elem_shape)
            o.rank = o.lead
        elif how == "like":  # the input's array dims, then its own element dims
            o.source, o.lead, dims = at, what[0], tuple(what[1])
            o.rank = o.lead + len(dims)
            o.dims[o.lead:o.rank] = dims
        else:  # a shape of its own
            o.rank = len(at)
            o.dims[0:o.rank] = tuple(at)
    for k, (dtype, shape) in enumerate(spec.returned, len(spec.outputs)):  # the values the kernel returns
        o = outs[k]
        o.dtype, o.arg, o.source, o.rank = _code(dtype), -1, -1, len(shape or ())
        o.dims[0:o.rank] = tuple(shape or ())
    return outs


class _Boxed:
    """The C side's record of one op (TaichiAotTorchOp) and what it points to, kept while the op lives."""

    def __init__(self, spec: OpSpec, makers: list[tuple[str, Any, Any]], runtime: Any, cuda: bool):
        self.plan = Plan(spec, spec.entry._choice, cell(runtime), spec.pack, [False] * len(spec.inputs))
        n = max(len(spec.inputs), 1)
        kinds, dtypes = ffi.new("uint32_t[]", n), ffi.new("int32_t[]", n)
        for k, i in enumerate(spec.inputs):
            a, dtype = spec.args[i], spec.dtype(i)
            if a.kind == "ndarray":
                kinds[k], dtypes[k] = lib.TAICHI_AOT_TORCH_TENSOR, _code(dtype)
            else:
                kinds[k] = lib.TAICHI_AOT_TORCH_FLOAT if dtype.kind == "f" else lib.TAICHI_AOT_TORCH_INT
        self.arrays = [kinds, dtypes, ffi.new("uint32_t[]", list(spec.inputs) or [0]), _outputs(spec, makers)]
        self.device = ffi.new("char[]", f"{'cuda:' + str(runtime.device_index) if cuda else 'cpu'}".encode())
        c = self.c = ffi.new("TaichiAotTorchOp *")
        c.plan, c.input_count = self.plan.c, len(spec.inputs)
        c.output_count = len(spec.outputs) + len(spec.returned)
        c.input_kinds, c.input_dtypes, c.input_args, c.outputs = self.arrays
        c.device_type, c.cpu_type, c.device_index = _CUDA if cuda else _CPU, _CPU, runtime.device_index if cuda else 0
        c.device, c.what, c.slot = self.device, self.plan.what, -1
        # the runtime's: calls from elsewhere are refused, but where its device serves any thread (0)
        c.thread, c.pid = 0 if runtime.device.traits.any_thread else runtime.gate.thread, os.getpid()


def _release(boxed: _Boxed, owned: Any) -> None:
    lib.taichi_aot_torch_op_release(boxed.c)
    lib.taichi_aot_op_release(boxed.plan.c)
    owned.unpin()


def boxed_kernel(owner: object, spec: OpSpec, makers: list[tuple[str, int, Any]], qualname: str) -> bool:
    """Register the C kernel of operator ``qualname`` (``namespace::name``) at its device's dispatch key, kept while
    ``owner`` (the op) lives: whether it was (else the operator keeps its Python kernel). ``makers``: how each
    output is made (taichi_aot.torch's Op._plan_outputs)."""
    runtime = spec.entry.module.runtime
    cuda = runtime.arch == Arch.CUDA
    if runtime.arch not in (Arch.X64, Arch.CUDA) or not _bind(cuda) or not _takes(spec, cuda):
        return False
    boxed = _Boxed(spec, makers, runtime, cuda)
    namespace, _, name = qualname.partition("::")
    if lib.taichi_aot_torch_op_register(boxed.c, namespace.encode(), name.encode(), b"CUDA" if cuda else b"CPU") < 0:
        lib.taichi_aot_op_release(boxed.plan.c)
        return False
    owned = spec.entry.module.owned
    owned.pin()  # the kernel's handle stays valid while the op lives (a runtime closed first closes the cell)
    weakref.finalize(owner, _release, boxed, owned)
    return True
