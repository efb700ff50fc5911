"""A gfx module's metadata agreeing with itself, checked after its shape (:mod:`.schema`) and before C reads it.

Well-typed metadata can still disagree with itself, and libtaichi_c_api trusts it: an argument layout with no
elements crashed the process at launch, a layout whose entries are not named as its arguments ran on the wrong
bytes, a shape with fewer dimensions than the array hung it, a graph dispatch binding fewer arguments than its
kernel takes ran on whatever lay there. Each of these is a :class:`CorruptedDataError` naming the kernel or graph:

* a kernel's arguments are numbered 0, 1, ... once each and named each once, and its argument layout
  (``args_type_``) lists one entry for each, named ``arg_<index>`` in that order, at increasing offsets inside
  ``args_bytes_``; an ndarray's entry is a struct holding ``shape`` (one integer per field dimension, one for
  none; a texture's: three) and a pointer ``data_ptr`` (an ndarray's: to its dtype); a scalar's is a primitive of
  its dtype, a vector's or matrix's a struct of its elements (as many as its shape holds, where Taichi records
  one); two kernels running one task (an exported kernel and the copy Taichi writes for its graphs, named
  ``<kernel>_c<n>_<m>``) take the same arguments, and such a copy runs the same tasks;
* a task's buffers have the root their type takes (an ndarray's: its argument; the fields' root buffer: SNode tree 0,
  the only one libtaichi 1.7.4 binds; Taichi's other buffers: none, [-1]); a task
  is a serial one (no range, one thread) or a range-for (its range, and where both ends are constants,
  as many threads as the range holds, else at least one thread to stride over it);
* each field (``Module.add_field``) lies inside the root buffer, named once, its dtype's name its dtype's; kernels
  bind a root buffer only where the module has one;
* a graph dispatches kernels of the module, binding every argument of each with the kind, dtype and dimensions
  the kernel takes.
"""

from __future__ import annotations

import math
import re
from typing import Any

from ..enums import DATA_TYPE_SIZE
from ..errors import CorruptedDataError
from .model import (
    GFX_COMPOUND_DTYPE,
    GFX_EXT_ARR,
    GFX_ROOT,
    PTYPE_NDARRAY,
    PTYPE_SCALAR,
    PTYPE_TEXTURES,
    TYPE_POINTER,
    TYPE_PRIMITIVE,
    TYPE_STRUCT,
    _data_type,
)

_SERIAL, _RANGE_FOR = 0, 1
#: Graph argument tags for each argument ptype (a scalar's: a scalar or a vector/matrix).
_TAGS = {0: (0, 1), 1: (2,), 2: (3,), 3: (4,)}


def check(meta: dict, graphs: list | None) -> None:
    """Raise CorruptedDataError where ``metadata.json`` (``meta``) or ``graphs.json`` (``graphs``) disagree."""
    kernels: dict[str, list[dict]] = {}
    runs: dict[str, str] = {}  # task -> the first kernel that runs it
    for k in meta["kernels"]:
        what = f"metadata.json: kernel {k['name']!r}"
        args = _arguments(k["ctx_attribs"], what)
        for task in k["tasks_attribs"]:
            _task(task, f"{what}, task {task['name']!r}")
            other = runs.setdefault(task["name"], k["name"])
            if other != k["name"] and _layout(kernels.get(other)) != _layout(args):  # an exported kernel's twin
                raise CorruptedDataError(f"{what}: runs task {task['name']!r} as kernel {other!r} does, with other "
                                         "arguments")
        kernels[k["name"]] = args
    _fields(meta)
    tasks = {k["name"]: [t["name"] for t in k["tasks_attribs"]] for k in meta["kernels"]}
    for name in tasks:
        twin = re.match(r"(.+)_c\d+_\d+$", name)  # Taichi's copy of an exported kernel for its graphs
        if twin and twin.group(1) in tasks and tasks[twin.group(1)] != tasks[name]:
            raise CorruptedDataError(f"metadata.json: kernel {twin.group(1)!r} runs tasks {tasks[twin.group(1)]}, its "
                                     f"copy {name!r} {tasks[name]}")
    for g in graphs or []:
        for d in g["value"]["dispatches"]:
            _dispatch(d, kernels, f"graphs.json: graph {g['key']!r}, dispatch of {d['kernel_name']!r}")


def _layout(args: list[dict] | None) -> list[tuple] | None:
    """What of each argument its kernel's code depends on (not its name)."""
    return None if args is None else [(a["ptype"], a["dtype"], a["field_dim"], a["element_shape"], a["is_array"])
                                      for a in args]


def _arguments(ctx: dict, what: str) -> list[dict]:
    """The kernel's arguments by index, each checked against its entry in the argument layout."""
    args = sorted(ctx["arg_attribs_vec_"], key=lambda e: e["key"])
    if [e["key"] for e in args] != [[i] for i in range(len(args))]:
        raise CorruptedDataError(f"{what}: arguments numbered {[e['key'] for e in args]}, not 0, 1, ... once each")
    elements = _layout_entries(ctx, len(args), what)
    for entry, element in zip(args, elements):
        _argument(entry["value"], element["type"], f"{what}, argument {entry['key'][0]}")
    names = [e["value"]["name"].lstrip("_") for e in args if e["value"]["name"].lstrip("_")]
    if len(names) != len(set(names)):
        raise CorruptedDataError(f"{what}: arguments named {names}, a name twice")
    return [e["value"] for e in args]


def _layout_entries(ctx: dict, count: int, what: str) -> list[dict]:
    """The argument layout's entries: one for each of the ``count`` arguments, named ``arg_<index>`` in that order,
    at increasing offsets inside ``args_bytes_``."""
    layout = ctx["args_type_"]
    elements = layout["content"].get("elements_") if layout["type_kind"] == TYPE_STRUCT else None
    if elements is None or [e["name"] for e in elements][:count] != [f"arg_{i}" for i in range(count)]:
        names = None if elements is None else [e["name"] for e in elements]
        raise CorruptedDataError(f"{what}: an argument layout of {names}, not arg_0 ... arg_{count - 1}")
    offsets = [e["offset"] for e in elements]
    if offsets != sorted(set(offsets)) or (offsets and offsets[-1] >= ctx["args_bytes_"]):
        raise CorruptedDataError(f"{what}: argument offsets {offsets} in {ctx['args_bytes_']} bytes")
    return elements


def _argument(arg: dict, layout: dict, what: str) -> None:
    """An argument's entry in the layout, as its kind lays it out (an ndarray or texture, a scalar, a vector)."""
    if arg["ptype"] in (PTYPE_NDARRAY, *PTYPE_TEXTURES):
        _array_layout(arg, layout, what)
    elif arg["ptype"] == PTYPE_SCALAR and arg["dtype"] != GFX_COMPOUND_DTYPE:
        if layout["type_kind"] != TYPE_PRIMITIVE or layout["content"].get("type") != arg["dtype"]:
            raise CorruptedDataError(f"{what}: a scalar of dtype {arg['dtype']} laid out as another type")
    elif arg["ptype"] == PTYPE_SCALAR:  # a vector or matrix: its elements
        elements = layout["content"].get("elements_", []) if layout["type_kind"] == TYPE_STRUCT else []
        if not elements or (arg["element_shape"] and math.prod(arg["element_shape"]) != len(elements)):
            raise CorruptedDataError(f"{what}: a vector or matrix of shape {arg['element_shape']} laid out as "
                                     f"{len(elements)} elements")


def _array_layout(arg: dict, layout: dict, what: str) -> None:
    """An ndarray's or texture's entry: a struct of its shape integers (a texture's extent: 3 always) and a data
    pointer (an ndarray's: to its dtype)."""
    dims, data = _array_members(layout)
    want = 3 if arg["ptype"] in PTYPE_TEXTURES else max(arg["field_dim"], 1)
    if dims is None or len(dims) != want or not data or data["type_kind"] != TYPE_POINTER \
            or any(d["type"]["type_kind"] != TYPE_PRIMITIVE for d in dims):
        raise CorruptedDataError(f"{what}: an array of {arg['field_dim']} dimensions whose layout is no struct "
                                 f"of {want} shape integers and a data pointer")
    pointee = data["content"].get("pointee_") or {}
    if arg["ptype"] == PTYPE_NDARRAY and (pointee.get("type_kind") != TYPE_PRIMITIVE
                                     or pointee["content"].get("type") != arg["dtype"]):
        raise CorruptedDataError(f"{what}: an ndarray of dtype {arg['dtype']} whose data pointer points to "
                                 "another type")


def _array_members(layout: dict) -> tuple[list | None, dict | None]:
    """An array's layout entry's shape integers and data pointer, each None where the entry has none."""
    members = {e["name"]: e["type"] for e in layout["content"].get("elements_", [])} \
        if layout["type_kind"] == TYPE_STRUCT else {}
    shape, data = members.get("shape"), members.get("data_ptr")
    return shape["content"].get("elements_") if shape and shape["type_kind"] == TYPE_STRUCT else None, data


def _task(task: dict, what: str) -> None:
    """A task's buffers bound with the roots their types take, and its kind with the range and threads it takes."""
    for b in task["buffer_binds"]:
        root, buffer_type = b["buffer"]["root_id"], b["buffer"]["type"]
        if buffer_type == GFX_EXT_ARR:
            right = len(root) == 1 and root[0] >= 0  # an ndarray's: [its argument]
        elif buffer_type == GFX_ROOT:
            right = root == [0]  # the fields' SNode tree: libtaichi 1.7.4's gfx modules bind tree 0 alone
        else:
            right = root == [-1]  # Taichi's other buffers have no root
        if not right:
            raise CorruptedDataError(f"{what}: a buffer of type {buffer_type} at binding {b['binding']} with root "
                                     f"{root}")
    _task_threads(task, what)


def _task_threads(task: dict, what: str) -> None:
    """A serial task: no range, one thread; a range-for: its range, and as many threads as a constant range holds
    (at least one to stride over a range known at launch)."""
    kind, ranged, total = task["task_type"], task["range_for_attribs"], task["advisory_total_num_threads"]
    if kind == _SERIAL and (ranged is not None or total != 1):
        raise CorruptedDataError(f"{what}: a serial task with a range or {total} threads")
    if kind == _RANGE_FOR:
        if ranged is None:
            raise CorruptedDataError(f"{what}: a range-for task without its range")
        if ranged["const_begin"] and ranged["const_end"] and ranged["end"] - ranged["begin"] != total:
            raise CorruptedDataError(f"{what}: the range {ranged['begin']}..{ranged['end']} in {total} threads")
        if not (ranged["const_begin"] and ranged["const_end"]) and total == 0:  # a range known at launch: its
            raise CorruptedDataError(f"{what}: a range known at launch, in 0 threads")  # threads stride over it
    elif kind != _SERIAL:
        raise CorruptedDataError(f"{what}: task type {kind}, which Taichi 1.7.4's gfx modules do not hold")


def _fields(meta: dict) -> None:
    """The fields lie inside the root buffer, each named once with its dtype's name; a kernel that binds the root
    buffer has one to bind (libtaichi makes a 4-byte buffer for a module of none)."""
    size, names = meta["root_buffer_size"], set()
    for f in meta["fields"]:
        what = f"metadata.json: field {f['field_name']!r}"
        dtype = _data_type(f["dtype"])
        if dtype is None or f["dtype_name"] != dtype.name.lower():
            raise CorruptedDataError(f"{what}: dtype {f['dtype']} named {f['dtype_name']!r}")
        if f["field_name"] in names:
            raise CorruptedDataError(f"{what} is listed twice")
        names.add(f["field_name"])
        end = f["mem_offset_in_parent"] + math.prod(f["shape"]) * math.prod(f["element_shape"]) \
            * DATA_TYPE_SIZE[dtype]
        if end > size:
            raise CorruptedDataError(f"{what}: ends at byte {end} of a root buffer of {size}")
    if size == 0 and binds_root(meta):
        raise CorruptedDataError("metadata.json: kernels bind the fields' root buffer, of 0 bytes")


def binds_root(meta: dict) -> bool:
    """Whether a task of the module binds the fields' root buffer (its kernels use global fields)."""
    return any(b["buffer"]["type"] == GFX_ROOT for k in meta["kernels"] for t in k["tasks_attribs"]
               for b in t["buffer_binds"])


def _dispatch(d: dict, kernels: dict[str, list[dict]], what: str) -> None:
    args = kernels.get(d["kernel_name"])
    if args is None:
        raise CorruptedDataError(f"{what}: no such kernel in metadata.json")
    bound = d["symbolic_args"]
    if len(bound) != len(args):
        raise CorruptedDataError(f"{what}: binds {len(bound)} arguments, the kernel takes {len(args)}")
    for i, (b, a) in enumerate(zip(bound, args)):
        if b["tag"] not in _TAGS.get(a["ptype"], ()) or _mismatch(b, a):
            raise CorruptedDataError(f"{what}: argument {i} ({b['name']!r}) bound as another kind, dtype or "
                                     "dimension than the kernel takes")


def _mismatch(b: dict, a: dict) -> Any:
    """Whether a graph argument differs from the kernel's in what its kind reads (dtype; an ndarray's dims)."""
    if a["ptype"] == PTYPE_NDARRAY:
        return b["dtype_id"] != a["dtype"] or b["field_dim"] != a["field_dim"] \
            or list(b["element_shape"]) != list(a["element_shape"])
    return a["ptype"] == PTYPE_SCALAR and a["dtype"] != GFX_COMPOUND_DTYPE and b["dtype_id"] != a["dtype"]
