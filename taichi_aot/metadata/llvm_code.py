"""An LLVM module's metadata agreeing with itself and with its kernels' code, checked before C reads it.

libtaichi_c_api trusts an LLVM module's metadata: it writes each argument at the offset the kernel's argument
layout (``args_type``) gives, of the kind its argument list (``args``) gives, into a buffer the kernel's code
reads as the struct type its LLVM IR was compiled with. Where these three disagree (the metadata of two kernels
swapped, an offset moved, an argument's type changed) a launch runs on the wrong bytes or kills the process.
Where a task's function is missing from the kernel's ``.ll`` file, the library deletes the module's files.
Each of these is a :class:`CorruptedDataError` naming the kernel:

* arguments are numbered 0, 1, ... once each; the layout is a struct of one element for each, named
  ``arg_<index>``, of the type the argument records (offsets aside); an ndarray's is a struct of its shape (one
  32-bit integer per array dimension, one for none) and a pointer to its dtype (and one to its gradient, where it
  ``needs_grad``); a scalar's is a primitive;
* the layout's offsets are those of a C struct of its elements, and ``args_size`` (``ret_size``: the results'
  layout) is that struct's size;
* the kernel's ``<kernel>.ll`` (where there is one: without it, the library refuses looking the kernel up)
  defines every task it runs, and where its code reads the argument buffer it reads it as the struct type of
  the layout;
* a CPU kernel's parallel loops are built for a thread count from 1 to ``llvm_ir.MOST_THREADS`` (libtaichi aborts
  the process at a launch on 0 threads, and one on 2**31 - 1 runs for minutes);
* a graph dispatches kernels of the module, binding every argument of each with the kind, dtype and
  dimensions the kernel takes.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Any

from ..enums import DATA_TYPE_SIZE, NUMPY_DTYPES, DataType
from ..errors import CorruptedDataError
from . import llvm_ir
from .model import (
    PTYPE_NDARRAY,
    PTYPE_SCALAR,
    TYPE_ARGPACK,
    TYPE_POINTER,
    TYPE_PRIMITIVE,
    TYPE_STRUCT,
    TYPE_TENSOR,
)

if TYPE_CHECKING:
    from .model import ArgInfo, GraphInfo, KernelInfo, LlvmCode
    from .source import _Source


def _llvm_name(t: DataType) -> str:
    d = NUMPY_DTYPES[t]
    return {2: "half", 4: "float", 8: "double"}[d.itemsize] if d.kind == "f" else "i1" if d.kind == "b" \
        else f"i{8 * d.itemsize}"


#: Taichi's primitive type ids (DataType's codes): their LLVM type and size in bytes (``gen`` and ``unknown``, no
#: element types, have none).
_PRIMITIVES = {int(t): (_llvm_name(t), DATA_TYPE_SIZE[t]) for t in NUMPY_DTYPES}
_I32 = int(DataType.I32)
_POINTER_BYTES = 8  # x86-64, arm64 and nvptx64

#: At most this many elements in a tensor, and dimensions of an ndarray (Taichi's indices are far fewer).
_MOST_ELEMENTS, _MOST_DIMS = 1 << 31, 16


def check(cache: dict, src: _Source, code: LlvmCode) -> dict[str, str]:
    """Raise CorruptedDataError where an LLVM module's ``cache`` record (its ``metadata.json``, whose shape
    :mod:`.tcb` checked) disagrees with itself or with its kernels' ``.ll`` files in ``src`` (each kernel's file and
    argument layout kept in ``code``: its ``ir``, ``parsed`` and ``layouts``). Returns {kernel: why it cannot run} of
    the kernels that read global fields where the module records none (Taichi compiled it without ``Module.add_field``):
    libtaichi_c_api allocates no memory for them, and such a kernel crashed."""
    unusable = {}
    for name, k in cache["kernels"].items():
        what = f"metadata.json: kernel {name!r}"
        if k["kernel_key"] != name:
            raise CorruptedDataError(f"{what}: recorded as kernel {k['kernel_key']!r}")
        layout = code.layouts[name] = _arguments(k, what)
        if k["ret_type"]["type_kind"] != -1 and _size(k["ret_type"], f"{what}: results' layout") != k["ret_size"]:
            raise CorruptedDataError(f"{what}: results' layout of {k['ret_size']} bytes, not its struct's size")
        if _code(name, k["compiled_data"]["tasks"], layout, src, what, code) and not cache["fields"]:
            unusable[name] = NO_FIELDS
    return unusable


NO_FIELDS = ("it reads global fields, and the module records none (Taichi compiled it without Module.add_field, "
             "which `taichi_aot build` calls): libtaichi_c_api gives them no memory, and the kernel would crash")


def _arguments(k: dict, what: str) -> str:
    """Check a kernel's arguments against its layout; return the layout as an LLVM type."""
    args = sorted(k["args"], key=lambda e: e[0])
    if [key for key, _ in args] != [[i] for i in range(len(args))]:
        raise CorruptedDataError(f"{what}: arguments numbered {[key for key, _ in args]}, not 0, 1, ... once each")
    layout = k["args_type"]
    elements = layout["content"]["elements_"] if layout["type_kind"] == TYPE_STRUCT else None
    if elements is None or [e["name"] for e in elements] != [f"arg_{i}" for i in range(len(args))]:
        names = None if elements is None else [e["name"] for e in elements]
        raise CorruptedDataError(f"{what}: an argument layout of {names}, not arg_0 ... arg_{len(args) - 1}")
    if _size(layout, f"{what}: argument layout") != k["args_size"]:
        raise CorruptedDataError(f"{what}: an argument layout of {k['args_size']} bytes, not its struct's size")
    for (key, param), element in zip(args, elements):
        _argument(param, element["type"], f"{what}, argument {key[0]}")
    return _ir(layout)


def _argument(param: dict, laid: dict, what: str) -> None:
    dt = param["dt_"]["ptr_"]
    if _shape(dt) != _shape(laid):
        raise CorruptedDataError(f"{what}: recorded as {_ir(dt)}, laid out as {_ir(laid)}")
    if param["ptype"] == PTYPE_NDARRAY:
        if not _ndarray_laid_out(param, laid):
            raise CorruptedDataError(f"{what}: an ndarray of {param['total_dim']} dimensions (element shape "
                                     f"{param['element_shape']}) laid out as {_ir(laid)}")
    elif param["ptype"] == PTYPE_SCALAR:
        if laid["type_kind"] not in (TYPE_PRIMITIVE, TYPE_STRUCT, TYPE_TENSOR) or _holds_pointer(laid):
            raise CorruptedDataError(f"{what}: a scalar laid out as {_ir(laid)}")
    else:
        raise CorruptedDataError(f"{what}: an argument of kind {param['ptype']}, which LLVM modules do not take")


def _ndarray_laid_out(param: dict, laid: dict) -> bool:
    """Whether an ndarray argument's layout is Taichi's: a struct of its shape (one i32 a dimension, one for none),
    its data pointer and, where it needs a gradient, a gradient pointer of the data pointer's type."""
    ndim = param["total_dim"] - len(param["element_shape"])
    members = laid["content"]["elements_"] if laid["type_kind"] == TYPE_STRUCT else []
    names = ["shape", "data_ptr", "grad_ptr"] if param["needs_grad"] else ["shape", "data_ptr"]
    dims = members[0]["type"] if len(members) == len(names) else {}
    shape = dims["content"]["elements_"] if dims.get("type_kind") == TYPE_STRUCT else []
    return not (not 0 <= ndim <= _MOST_DIMS or [m["name"] for m in members] != names
                or len(shape) != max(ndim, 1) or any(_shape(d["type"]) != (TYPE_PRIMITIVE, _I32) for d in shape)
                or members[1]["type"]["type_kind"] != TYPE_POINTER
                or any(_ir(m["type"]) != _ir(members[1]["type"]) for m in members[2:]))


def _holds_pointer(t: dict) -> bool:
    """Whether a type is or holds a pointer (a scalar's, a vector's or a matrix's value holds none)."""
    kind, c = t["type_kind"], t.get("content") or {}
    if kind == TYPE_POINTER:
        return True
    if kind == TYPE_TENSOR:
        return _holds_pointer(c["element_"])
    return kind != TYPE_PRIMITIVE and any(_holds_pointer(e["type"]) for e in c.get("elements_", ()))


def _elements(shape: list[int]) -> int | None:
    """A tensor's element count, or None past _MOST_ELEMENTS (or for a negative dimension)."""
    n = 1
    for d in shape:
        n *= d
        if not 0 <= n <= _MOST_ELEMENTS:
            return None
    return n


def _shape(t: dict) -> Any:
    """A type as nested tuples, without its offsets and data layout."""
    kind, c = t["type_kind"], t.get("content") or {}
    if kind == TYPE_PRIMITIVE:
        return kind, c["type"]
    if kind == TYPE_POINTER:
        return kind, _shape(c["pointee_"])
    if kind == TYPE_TENSOR:
        return kind, tuple(c["shape_"]), _shape(c["element_"])
    if kind == -1:
        return (kind,)
    return (kind, *((e["name"], _shape(e["type"])) for e in c["elements_"]))


def _ir(t: dict) -> str:
    """A type as LLVM IR writes it."""
    kind, c = t["type_kind"], t.get("content") or {}
    if kind == TYPE_PRIMITIVE:
        return _PRIMITIVES[c["type"]][0] if c["type"] in _PRIMITIVES else f"<type {c['type']}>"
    if kind == TYPE_POINTER:
        return _ir(c["pointee_"]) + "*"
    if kind == TYPE_TENSOR:
        n = _elements(c["shape_"])
        return f"[{'?' if n is None else n} x {_ir(c['element_'])}]"
    if kind == -1:
        return "<none>"
    return "{ " + ", ".join(_ir(e["type"]) for e in c["elements_"]) + " }" if c["elements_"] else "{}"


def _size(t: dict, what: str) -> int:
    """The size of a C object of type ``t``, checking that each struct's offsets are a C struct's."""
    return _size_align(t, what)[0]


def _size_align(t: dict, what: str) -> tuple[int, int]:
    kind, c = t["type_kind"], t.get("content") or {}
    if kind == TYPE_PRIMITIVE:
        if c["type"] not in _PRIMITIVES:
            raise CorruptedDataError(f"{what}: a value of type id {c['type']}, which has no size")
        size = _PRIMITIVES[c["type"]][1]
        return size, size
    if kind == TYPE_POINTER:
        return _POINTER_BYTES, _POINTER_BYTES
    if kind == TYPE_TENSOR:
        size, align = _size_align(c["element_"], what)
        n = _elements(c["shape_"])
        if n is None:
            raise CorruptedDataError(f"{what}: a tensor of {len(c['shape_'])} dimensions, some negative or more than "
                                     f"{_MOST_ELEMENTS} elements in all")
        return size * n, align
    if kind not in (TYPE_STRUCT, TYPE_ARGPACK):
        raise CorruptedDataError(f"{what}: a value of type kind {kind}")
    end, align = 0, 1
    for e in c["elements_"]:
        size, a = _size_align(e["type"], what)
        at = -(-end // a) * a
        if e["offset"] != at:
            raise CorruptedDataError(f"{what}: {e['name']!r} at offset {e['offset']}, where a C struct has it at {at}")
        end, align = at + size, max(align, a)
    return -(-end // align) * align, align


#: Code already found to agree with its metadata in this process: (its bytes' SHA-256, the layout, the tasks). A
#: module loaded again (shared by content) is not read through again.
_agreed: dict[tuple[bytes, str, tuple[str, ...]], bool] = {}  # -> whether it reads the fields' memory


def _code(name: str, tasks: list[dict], layout: str, src: _Source, what: str, code: LlvmCode) -> bool:
    """Check the kernel's code against its metadata (read into ``code``: its bytes and the IR read once,
    :class:`.llvm_ir.IrKernel`); whether it reads the global fields' memory."""
    raw = src.read(f"{name}.ll")
    if raw is None:  # the library refuses looking the kernel up, and only that
        return False
    code.ir[name] = raw
    ir = code.parsed[name] = llvm_ir.IrKernel(raw.decode("utf-8", "replace"))
    key = (hashlib.sha256(raw).digest(), layout, tuple(t["name"] for t in tasks))
    if key in _agreed:
        return _agreed[key]
    for task in tasks:
        if task["name"] not in ir.defined:
            raise CorruptedDataError(f"{what}: runs task {task['name']!r}, which {name}.ll does not define")
    count = ir.bad_thread_count()
    if count is not None:
        raise CorruptedDataError(f"{what}: {name}.ll runs its parallel loops on {count!r} threads, not a number from 1 "
                                 f"to {llvm_ir.MOST_THREADS} (Taichi writes the thread count of the machine that built "
                                 "the module): build the module again, or restore the file")
    for fn, read_as in ir.argument_types():
        if read_as != layout:
            raise CorruptedDataError(f"{what}: {name}.ll's {fn} reads its arguments as {read_as}, the "
                                     f"metadata lays them out as {layout}")
    roots = ir.reads_roots
    if len(_agreed) > 4096:
        _agreed.clear()
    _agreed[key] = roots
    return roots


def check_graphs(kernels: dict[str, KernelInfo], graphs: dict[str, GraphInfo]) -> None:
    """Raise CorruptedDataError where a graph of an LLVM module (its ``graphs.tcb``) dispatches a kernel the module
    lacks or binds its arguments as other kinds, dtypes or dimensions than the kernel takes."""
    for g in graphs.values():
        by_name = {a.name: a for a in g.args}
        for kernel_name, names in zip(g.dispatches, g.calls):
            what = f"graphs.tcb: graph {g.name!r}, dispatch of {kernel_name!r}"
            kernel = kernels.get(kernel_name)
            if kernel is None:
                raise CorruptedDataError(f"{what}: no such kernel in metadata.json")
            if len(names) != len(kernel.args):
                raise CorruptedDataError(f"{what}: binds {len(names)} arguments, the kernel takes {len(kernel.args)}")
            for i, (arg_name, a) in enumerate(zip(names, kernel.args)):
                if _reads(by_name[arg_name], a.kind == "ndarray") != _reads(a, a.kind == "ndarray"):
                    raise CorruptedDataError(f"{what}: argument {i} ({arg_name!r}) bound as another kind, dtype or "
                                             "dimension than the kernel takes")


def _reads(a: ArgInfo, ndarray: bool) -> tuple:
    """What of an argument a kernel's code depends on: its kind and dtype, and an ndarray's dimensions."""
    return (a.kind, a.dtype, a.ndim, a.elem_shape) if ndarray else (a.kind, a.dtype)
