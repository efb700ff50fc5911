"""The shape of a gfx module's ``metadata.json`` and ``graphs.json``, checked before anything reads them.

libtaichi_c_api reads these files itself, with a deserializer that trusts each field's JSON type and range: a
number where a list goes, ``Infinity`` where an integer goes or a type kind it does not know killed or hung the
process, and our own readers raised bare Python errors. So every field either is what Taichi 1.7.4 writes, of
the JSON type and within the range this schema gives it, or the load raises :class:`CorruptedDataError` naming
the file and the field's path::

    metadata.json: kernels[0].ctx_attribs.arg_attribs_vec_[1].value.field_dim: expected an integer 0..16,
    got Infinity

The schema is data (:data:`METADATA`, :data:`GRAPHS`): each node checks one JSON value. Keys Taichi writes are
required; other keys are left alone (nothing reads them). Ranges are what a module can mean, not what a test
module happens to hold: a thread count fits in 32 bits, an argument list in 1,024 entries, a type nests 16 deep.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple, NoReturn

from ..errors import CorruptedDataError

_DEPTH = 16  # how deep argument types may nest (a struct of structs ...)


class Int(NamedTuple):
    low: int
    high: int

    def check(self, value: Any, path: str) -> None:
        if isinstance(value, bool) or not isinstance(value, int) or not self.low <= value <= self.high:
            _wrong(path, f"an integer {self.low}..{self.high}", value)


class Bool(NamedTuple):
    def check(self, value: Any, path: str) -> None:
        if not isinstance(value, bool):
            _wrong(path, "true or false", value)


class Str(NamedTuple):
    most: int = 256
    least: int = 0

    def check(self, value: Any, path: str) -> None:
        if not isinstance(value, str) or not self.least <= len(value) <= self.most:
            _wrong(path, f"a string of {self.least} to {self.most} characters", value)


class List(NamedTuple):
    item: Any
    most: int = 1024
    least: int = 0

    def check(self, value: Any, path: str) -> None:
        if not isinstance(value, list) or not self.least <= len(value) <= self.most:
            _wrong(path, f"a list of {self.least} to {self.most} entries", value)
        for i, entry in enumerate(value):
            self.item.check(entry, f"{path}[{i}]")


class Obj(NamedTuple):
    fields: dict[str, Any]

    def check(self, value: Any, path: str) -> None:
        if not isinstance(value, dict):
            _wrong(path, "an object", value)
        for key, node in self.fields.items():
            if key not in value:
                raise CorruptedDataError(f"{path or 'the top level'}: no {key!r}")
            node.check(value[key], f"{path}.{key}" if path else key)


class Either(NamedTuple):
    """One of ``nodes``: the first whose check passes (a path's error names the last)."""

    nodes: tuple[Any, ...]

    def check(self, value: Any, path: str) -> None:
        for node in self.nodes[:-1]:
            try:
                node.check(value, path)
                return
            except CorruptedDataError:
                continue
        self.nodes[-1].check(value, path)


class Null(NamedTuple):
    def check(self, value: Any, path: str) -> None:
        if value is not None:
            _wrong(path, "null", value)


class Type(NamedTuple):
    """An argument type (Taichi's serialized ``Type``): a primitive (kind 0), a pointer (1), a tensor (2: a vector
    or matrix return value) or a struct (3), nested at most 16 deep; the quantized kinds are refused."""

    depth: int = 0

    def check(self, value: Any, path: str) -> None:
        if self.depth > _DEPTH:
            raise CorruptedDataError(f"{path}: types nested more than {_DEPTH} deep")
        Obj({"type_kind": Int(0, 3), "content": _ANY_OBJECT}).check(value, path)
        inner = Type(self.depth + 1)
        content = {0: Obj({"type": Int(0, 13)}),
                   1: Obj({"addr_space_": Int(0, 8), "is_bit_pointer_": Bool(), "pointee_": inner}),
                   2: Obj({"element_": inner, "shape_": List(Int(1, 1 << 16), 8, 1)}),  # a vector or matrix
                   3: Obj({"elements_": List(Obj({"name": Str(), "offset": Int(0, 1 << 16), "type": inner}), 1024),
                           "layout_": Str(64)})}.get(value["type_kind"])
        if content is None:
            _wrong(f"{path}.type_kind", "0 (a primitive), 1 (a pointer), 2 (a tensor) or 3 (a struct)",
                   value["type_kind"])
        content.check(value["content"], f"{path}.content")


class _AnyObject(NamedTuple):
    def check(self, value: Any, path: str) -> None:
        if not isinstance(value, dict):
            _wrong(path, "an object", value)


_ANY_OBJECT = _AnyObject()
_U31, _I32, _ANY64 = Int(0, 2**31 - 1), Int(-(2**31), 2**31 - 1), Int(-(2**63), 2**64 - 1)
_INDEX = List(Int(0, 1023), 8, 1)  # an argument's index: [i] (argument packs would add levels)
ARGUMENT = Obj({
    "dtype": Int(0, 13), "element_shape": List(Int(1, 1 << 16), 8), "field_dim": Int(0, 16), "format": Int(0, 255),
    "indices": _INDEX, "is_argpack": Bool(), "is_array": Bool(), "name": Str(), "offset_in_mem": Int(0, 1 << 16),
    "ptype": Int(0, 3), "stride": Int(0, 1 << 16)})
RETURN = Obj({
    "dtype": Int(0, 13), "element_shape": List(Int(1, 1 << 16), 8), "field_dim": Int(0, 16), "format": Int(0, 255),
    "index": Int(-1, 1023), "is_array": Bool(), "name": Str(), "offset_in_mem": Int(0, 1 << 16), "ptype": Int(0, 7),
    "stride": Int(0, 1 << 16)})
TASK = Obj({
    "advisory_num_threads_per_group": Int(1, 1024), "advisory_total_num_threads": _U31,  # 0: range(0)
    "buffer_binds": List(Obj({"binding": Int(0, 4095), "buffer": Obj({"root_id": List(Int(-1, 1023), 8),
                                                                      "type": Int(0, 6)})}), 64),
    "name": Str(256, 1),
    "range_for_attribs": Either((Null(), Obj({"begin": _I32, "const_begin": Bool(), "const_end": Bool(),
                                               "end": _I32}))),
    "task_type": Int(0, 1),  # serial, range-for: the only ones of gfx modules of ndarrays
    "texture_binds": List(Obj({"arg_id": Either((Int(0, 1023), _INDEX)), "binding": Int(0, 4095),
                               "is_storage": Bool()}), 64)})
KERNEL = Obj({
    "name": Str(256, 1), "is_jit_evaluator": Bool(),
    "ctx_attribs": Obj({
        "arg_attribs_vec_": List(Obj({"key": _INDEX, "value": ARGUMENT}), 1024),
        "argpack_types_": List(_ANY_OBJECT, 0),  # argument packs: taichi_aot refuses their kernels
        "args_bytes_": Int(0, 1 << 16), "args_type_": Type(),
        "arr_access": List(Obj({"key": Either((Int(0, 1023), _INDEX)), "value": Int(0, 3)}), 1024),
        "ret_attribs_vec_": List(RETURN, 64),
        "rets_bytes_": Int(0, 1 << 16), "rets_type_": Type()}),
    "tasks_attribs": List(TASK, 1024)})  # none: a kernel whose body is empty
#: A global field the module exports (``Module.add_field``): where it lies in the root buffer, which holds every
#: field of the module's one SNode tree.
FIELD = Obj({
    "field_name": Str(256, 1), "dtype": Int(0, 11), "dtype_name": Str(16, 1), "mem_offset_in_parent": _U31,
    "shape": List(Int(1, 2**31 - 1), 8), "is_scalar": Bool(), "element_shape": List(Int(1, 1 << 16), 8)})
#: ``metadata.json`` of a gfx module.
METADATA = Obj({
    "kernels": List(KERNEL, 4096), "required_caps": List(Obj({"key": Str(64, 1), "value": _U31}), 64),
    "root_buffer_size": _U31, "fields": List(FIELD, 1024)})
#: ``graphs.json``.
GRAPHS = List(Obj({"key": Str(256, 1), "value": Obj({"dispatches": List(Obj({
    "kernel_name": Str(256, 1),
    "symbolic_args": List(Obj({"dtype_id": Int(0, 13), "element_shape": List(Int(0, 1 << 16), 8),
                               # Taichi 1.7.4 leaves field_dim (a texture's) and num_channels (all but a
                               # texture's) uninitialized: any 64-bit value; what a kind reads is checked apart
                               "field_dim": _ANY64, "name": Str(), "num_channels": _ANY64,
                               "tag": Int(0, 4)}), 1024)}), 4096, 1)})}), 4096)


def _wrong(path: str, expected: str, value: Any) -> NoReturn:
    raise CorruptedDataError(f"{path or 'the top level'}: expected {expected}, got {_show(value)}")


def _show(value: Any) -> str:
    if isinstance(value, float) and not math.isfinite(value):
        return "Infinity" if value > 0 else "-Infinity" if value < 0 else "NaN"
    if isinstance(value, (dict, list)):
        return f"{'an object' if isinstance(value, dict) else 'a list'} of {len(value)}"
    text = "null" if value is None else str(value).lower() if isinstance(value, bool) else repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def check(doc: Any, schema: Any, file: str) -> None:
    """``doc`` (``file``'s JSON) against ``schema``: CorruptedDataError naming the file and the field's path."""
    try:
        schema.check(doc, "")
    except CorruptedDataError as e:
        raise CorruptedDataError(f"{file}: {e}") from None
    except RecursionError:
        raise CorruptedDataError(f"{file}: nested too deeply") from None
