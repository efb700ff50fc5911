"""The argument plan both own launches share, in C's terms: a kernel's argument layout
(:mod:`taichi_aot.metadata.layout`) as the ``TaichiAotArgPlan`` records ``_csrc/backends/plan.c`` lays values by, and
the reader of what a kernel that returns values left in its plan's host memory (:class:`Results`), and a compute
graph's dispatches mapped onto the graph's arguments (:func:`dispatch_maps`) and named for a profile's rows
(:func:`dispatch_names`).
"""

from __future__ import annotations

import re
from typing import Any, Callable

import numpy as np

from .._native import ffi, lib
from ..metadata.layout import SCALAR_SIZES

__all__ = ["Results", "c_args", "dispatch_maps", "dispatch_names", "gradients_match"]

_KINDS = {"ndarray": lib.TAICHI_AOT_PLAN_NDARRAY, "scalar": lib.TAICHI_AOT_PLAN_SCALAR,
          "tensor": lib.TAICHI_AOT_PLAN_TENSOR}


def c_args(plan_args: list[dict], reverse: bool) -> tuple[Any, int]:
    """The C arguments of a plan's ``args``, and how many gradients a reverse kernel takes after them."""
    args, grads = ffi.new("TaichiAotArgPlan[]", max(len(plan_args), 1)), 0
    for a, arg in zip(args, plan_args):
        a.kind, a.offset = _KINDS[arg["kind"]], arg["offset"]
        if arg["kind"] == "ndarray":
            a.size, a.count, a.data = arg["dims"], 1, arg["data"]
            if reverse and "grad" in arg:
                a.grad, grads = arg["grad"], grads + 1
        else:
            a.size, a.count = arg["size"], arg.get("count", 1)
    return args, grads


def gradients_match(plan_args: list[dict], entry: dict) -> bool:
    """Whether a reverse kernel's laid-out gradient pointers are its arguments the metadata says need gradients."""
    laid = [i for i, arg in enumerate(plan_args) if "grad" in arg]
    needing = sorted(int(key[0]) for key, a in entry.get("args") or [] if a.get("needs_grad"))
    return laid == needing


#: Taichi's copy of a kernel compiled for a graph, ``<kernel>_c<n>_<m>`` (what a graph's dispatches name)
_GRAPH_COPY = re.compile(r"(.+)_c\d+_\d+$")


def dispatch_names(info: Any) -> tuple[Any, list[Any]]:
    """Each dispatch's row in a profile, ``<graph>/<kernel>`` by the kernel's own name (not the name of Taichi's copy
    of it for the graph, ``<kernel>_c<n>_<m>``), numbered ``#1``, ``#2``... where the graph dispatches a kernel more
    than once, as a graph's C record takes them: the ``char *[]`` (its ``names``) and what it holds (both kept with
    the record)."""
    kernels = [_GRAPH_COPY.sub(r"\1", k) for k in info.dispatches]
    repeated = {k for k in kernels if kernels.count(k) > 1}
    seen: dict[str, int] = {}
    names = []
    for k in kernels:
        seen[k] = seen.get(k, 0) + 1
        name = f"{info.name}/{k}" + (f"#{seen[k]}" if k in repeated else "")
        names.append(ffi.new("char[]", name.encode("utf-8", "replace")))
    return ffi.new("char *[]", names), names


def dispatch_maps(info: Any, arg_counts: list[int]) -> list[int] | None:
    """Each dispatch's arguments of compute graph ``info`` (a GraphInfo) as indices of the graph's arguments, flat in
    dispatch order (the ``maps`` of both own launches' graph records); None where the graph dispatches nothing, a
    dispatch passes other than its kernel's ``arg_counts``, or names an argument the graph does not have."""
    names = [a.name for a in info.args]
    if not arg_counts or len(info.calls) != len(arg_counts):
        return None
    maps: list[int] = []
    for count, call in zip(arg_counts, info.calls):
        if len(call) != count or any(n not in names for n in call):
            return None
        maps += [names.index(n) for n in call]
    return maps


class Results:
    """A returning kernel's results as its last launch left them in the plan's host memory (``host``): one value
    (a Python int or float; a vector or matrix as a numpy array, a vector 1-D), or a tuple of several."""

    def __init__(self, rets: list[dict], size: int):
        self.host = ffi.new("unsigned char[]", size)
        self._buffer = ffi.buffer(self.host)
        self._size = size
        #: where the calling thread reads its last launch's values, where its backend keeps them per thread (the own
        #: x64 launch: taichi_aot_cpu_values); None: :attr:`host`
        self.source: Callable[[], Any] | None = None
        self._rets = [(np.dtype(_RESULT_DTYPES[r["type"]]), r["offset"], _shape(r.get("shape"))) for r in rets]

    def layout(self) -> list[tuple[np.dtype, tuple[int, ...] | None]]:
        """Each returned value's dtype and shape (None: a scalar), in order."""
        return [(dtype, shape) for dtype, _, shape in self._rets]

    def layout_bytes(self) -> list[tuple[int, int]]:
        """Each returned value's offset in :attr:`host` and its size in bytes, in order."""
        return [(offset, dtype.itemsize * int(np.prod(shape or ()))) for dtype, offset, shape in self._rets]

    def read(self) -> Any:
        """The values the last launch returned (copies: the next launch overwrites the buffer); this thread's last
        launch's where the backend keeps them per thread."""
        values = []
        buffer = self._buffer if self.source is None else ffi.buffer(self.source(), self._size)
        for dtype, offset, shape in self._rets:
            if shape is None:
                values.append(np.frombuffer(buffer, dtype, 1, offset)[0].item())
            else:
                values.append(np.frombuffer(buffer, dtype, int(np.prod(shape)), offset).reshape(shape).copy())
        return values[0] if len(values) == 1 else tuple(values)


#: numpy's dtype of each scalar type code (SCALAR_SIZES's): f16 f32 f64 i8 i16 i32 i64 u1 u8 u16 u32 u64.
_RESULT_DTYPES = dict(zip(SCALAR_SIZES, ("f2", "f4", "f8", "i1", "i2", "i4", "i8", "?", "u1", "u2", "u4", "u8")))


def _shape(shape: list[int] | None) -> tuple[int, ...] | None:
    """A returned tensor's shape as numpy's: a vector (Taichi records ``[n, 1]``) 1-D."""
    if shape is None:
        return None
    return (shape[0],) if len(shape) == 2 and shape[1] == 1 else tuple(shape)
