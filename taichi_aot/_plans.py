"""Launch plans made from a kernel's op (opplan.c's TaichiAotOpPlan) and the runtime cells they run in: what XLA's
handler (taichi_aot.jax, ``_csrc/xla.c``) and torch's boxed kernel (taichi_aot.torch, ``_csrc/torchop.c``) launch with
no Python, both through ``_csrc/opplan.c``.

A runtime's cell (opplan.c) is its lock, its pool of imported buffers and, on CUDA, the own launcher's record to launch
on another library's stream; it is closed, first, when the runtime closes. A plan says where each kernel argument
comes from (an operand, a result, a scalar operand or attribute). Cells and plans stay for the process's life (a few
hundred bytes each): compiled XLA calls and torch graphs may name them.
"""

from __future__ import annotations

import ctypes
import weakref
from collections.abc import Sequence
from typing import Any, Callable

import numpy as np

from ._arguments import ARG_SIZE
from ._dtypes import ndarray_argument
from ._native import ffi, lib
from ._ops import OpSpec
from .enums import DATA_TYPES, DataType

__all__ = ["XLA_TYPES", "Plan", "cell"]

_VALUE = ffi.offsetof("TiArgument", "value")
_SCALAR_VALUE = _VALUE + ffi.offsetof("TiScalar", "value")
#: XLA's FFI data type of each numpy dtype a kernel takes (xla/ffi/api/c_api.h's XLA_FFI_DataType).
XLA_TYPES = {np.dtype(np.bool_): 1, np.dtype(np.int8): 2, np.dtype(np.int16): 3, np.dtype(np.int32): 4,
             np.dtype(np.int64): 5, np.dtype(np.uint8): 6, np.dtype(np.uint16): 7, np.dtype(np.uint32): 8,
             np.dtype(np.uint64): 9, np.dtype(np.float16): 10, np.dtype(np.float32): 11, np.dtype(np.float64): 12}
_cells: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()
_without_own: weakref.WeakSet[Any] = weakref.WeakSet()  # CUDA runtimes whose cell has no own launcher's record yet
_kept: list[Any] = []


def cell(rt: Any) -> Any:
    """The runtime's C cell (opplan.c): its lock and pool of imports, closed with the runtime, first."""
    cell = _cells.get(rt)
    if cell is not None:  # what the runtime made since the cell was: the own launcher's record (a module with PTX
        # loaded since), libtaichi's runtime (the own CUDA runtime makes one beside it for a module that needs it)
        own = rt.backends.xla_record() if rt in _without_own else ffi.NULL
        if own != ffi.NULL:
            _kept.append(own)
            _without_own.discard(rt)
        lib.taichi_aot_op_cell_update(cell, rt.handle, own)
        return cell
    cuda = rt.device.traits.addresses_cuda_arrays  # the runtime's memory is CUDA's: the driver fills and copies
    own, table, cu_device = ffi.NULL, ffi.NULL, 0
    if cuda:
        from .drivers import cuda as _cuda

        cu = _cuda.driver()
        table = _cuda.table()
        ordinal = rt.device_index
        handle = ctypes.c_int(ordinal)  # the runtime's GPU as cuCtxGetDevice gives it (a CUdevice)
        cu_device = handle.value if cu.cuDeviceGet(ctypes.byref(handle), ordinal) == 0 else ordinal
        own = rt.backends.xla_record()  # the own CUDA launcher's, with a stand-in of XLA's: not the runtime's stream
        _kept.append(own)
        if own == ffi.NULL:  # no module with PTX loaded yet: the record is given to the cell once one is
            _without_own.add(rt)
    cell = lib.taichi_aot_op_cell(rt.handle, int(cuda), own, table, cu_device)
    if cell == ffi.NULL:
        raise MemoryError("taichi_aot: no memory for a runtime's cell")
    lib.taichi_aot_op_cell_counts(cell, rt.gate.pending)  # a profile of rt records the op's launches
    _cells[rt] = cell
    rt.foreign.unmaps[id(cell)] = lambda: lib.taichi_aot_op_cell_close(cell)  # called first when the runtime closes
    return cell


def _positions(inputs: Sequence[int], chosen: Sequence[bool]) -> dict[int, int]:
    """Argument position -> its place among the ``chosen`` inputs (the operands, or the attributes)."""
    return {i: k for k, i in enumerate(i for i, c in zip(inputs, chosen) if c)}


class Plan:
    """One plan (opplan.c's TaichiAotOpPlan) of an op, for one way of passing its scalars (attribute or operand):
    ``choice`` is its kernel's launch backend's, ``cell`` its runtime's (:func:`cell`), ``pack(i, value)`` packs
    scalar argument ``i``."""

    def __init__(self, spec: OpSpec, choice: Any, cell: Any, pack: Callable[[int, Any], bytes],
                 attrs: Sequence[bool]):
        n = len(spec.args)
        self.args = ffi.new("TaichiAotOpArg[]", max(n, 1))
        self.templates = ffi.new("TiArgument[]", max(n, 1))
        operand, attr = _positions(spec.inputs, [not a for a in attrs]), _positions(spec.inputs, attrs)
        aliased = {i: k for k, i in enumerate(spec.outputs)}
        #: each output read and written: the operand its input is, for input_output_aliases
        self.aliases = {operand[i]: k for k, i in enumerate(spec.outputs) if i in spec.inout} or None
        for i, a in enumerate(spec.args):
            c = self.args[i]
            if a.kind == "ndarray":
                self._array(spec, i, aliased, operand)
            elif i in attr:
                c.kind, c.index = lib.TAICHI_AOT_OP_SCALAR_ATTR, attr[i]
            else:
                c.kind, c.index, c.dtype = lib.TAICHI_AOT_OP_SCALAR_OPERAND, operand[i], XLA_TYPES[spec.dtype(i)]
                c.value_offset, c.value_size = self._template(spec, pack, i)
        self.names = [ffi.new("char[]", (a.name or "").encode()) for a in spec.args]
        self.name_array = ffi.new("char *[]", self.names or [ffi.NULL])
        self.what = ffi.new("char[]", str(spec).encode())
        p = self.c = ffi.new("TaichiAotOpPlan *")
        # launched from XLA's handler as its own launches are (a graph of the own launcher: every dispatch with the
        # handler's record, taichi_aot_cuda_graph_elsewhere)
        p.runtime, p.kind, p.flags, p.handle = cell, choice.kind, choice.flags, choice.handle
        p.name = spec.entry._range  # its NVTX range (the kernel or graph keeps the string)
        p.arg_count, p.args, p.templates, p.names, p.what = n, self.args, self.templates, self.name_array, self.what
        if spec.returned:  # copied from its results' host memory into the result buffers after the outputs'
            layout = choice.results.layout_bytes()
            self.value_offsets = ffi.new("uint32_t[]", [o for o, _ in layout])
            self.value_sizes = ffi.new("uint32_t[]", [size for _, size in layout])
            p.value_count, p.value_first = len(layout), len(spec.outputs)
            p.value_offsets, p.value_sizes, p.values = self.value_offsets, self.value_sizes, choice.results.host
        self.address = np.int64(int(ffi.cast("intptr_t", p)))
        _kept.append(self)

    def _array(self, spec: OpSpec, i: int, aliased: dict[int, int], operand: dict[int, int]) -> None:
        """Plan ndarray argument ``i``: its template, XLA type and dims, and the buffer it is (a result, the input's
        buffer itself where aliased, or an operand)."""
        a, c, dtype = spec.args[i], self.args[i], spec.dtype(i)
        t = ndarray_argument(ffi.NULL, (0,) * a.ndim, tuple(a.elem_shape), DATA_TYPES[dtype])
        ffi.memmove(ffi.addressof(self.templates, i), t, ARG_SIZE)
        c.dtype, c.itemsize = XLA_TYPES[dtype], dtype.itemsize
        c.ndim, c.elem_ndim = a.ndim, len(a.elem_shape)
        if i in aliased:
            c.kind, c.index, c.zero = lib.TAICHI_AOT_OP_RESULT, aliased[i], int(i not in spec.inout)
        else:
            c.kind, c.index = lib.TAICHI_AOT_OP_OPERAND, operand[i]

    def _template(self, spec: OpSpec, pack: Callable[[int, Any], bytes], i: int) -> tuple[int, int]:
        """Prefill scalar argument ``i``'s TiArgument (type, data type) with a zero packed by its packer; where its
        value's bytes go, and how many."""
        a = spec.args[i]
        buf = pack(i, 0)
        ffi.memmove(ffi.addressof(self.templates, i), buf, ARG_SIZE)
        at = _VALUE if a.dtype in (DataType.F32, DataType.I32) else _SCALAR_VALUE
        return at, spec.dtype(i).itemsize
