"""An LLVM module's ``metadata.tcb``: what libtaichi_c_api reads, checked against ``metadata.json`` before it does.

Taichi writes one record twice: ``metadata.json`` through its text serializer and ``metadata.tcb`` through its
binary serializer, field for field in the same order. The C library reads only the ``.tcb``, and trusts it:
a damaged one kills the process (an unknown type kind aborts, a count past the file reads past it). taichi_aot
reads and checks the ``.json``; :func:`verify` makes sure the library will read the same thing. It writes the
checked record the way the binary serializer does (:func:`encode`: little-endian fields of their C++ widths,
``size_t`` counts before vectors, maps and strings, a type as its kind and then its content, the file's length
first) and compares the bytes. Any byte that differs is a :class:`CorruptedDataError` naming its offset and
the field it belongs to.

Writing the record also checks that each value fits its C++ field (an ``int`` field holds no ``2**40``, a
``bool`` no ``2``) and that each type is of a kind the library can read.

``graphs.tcb`` has no text twin: :func:`decode` reads it by its schema (:data:`GRAPHS`), the same field kinds.
"""

from __future__ import annotations

import bisect
import hashlib
import re
import struct
from typing import Any

from ..errors import CorruptedDataError
from .model import TYPE_ARGPACK, TYPE_POINTER, TYPE_PRIMITIVE, TYPE_STRUCT, TYPE_TENSOR

MAX_DEPTH = 64

# C++ field kinds: a struct format character, or one of these
_STR, _TYPE = "str", "type"

#: struct.pack code, lowest and highest value of each integer field kind
_INTS = {
    "H": (0, (1 << 16) - 1),
    "i": (-(1 << 31), (1 << 31) - 1),
    "I": (0, (1 << 32) - 1),
    "Q": (0, (1 << 64) - 1),
    "q": (-(1 << 63), (1 << 63) - 1),
}


def _vec(item: Any) -> tuple:
    return ("vec", item)


def _pair(first: Any, second: Any) -> tuple:
    return ("pair", first, second)


def _map(key: Any, value: Any) -> tuple:
    return ("map", key, value)


def _struct(*fields: tuple[str, Any]) -> tuple:
    return ("struct", fields)


_MEMBER = _struct(("type", _TYPE), ("name", _STR), ("offset", "Q"))
_DICTIONARY = _struct(("elements_", _vec(_MEMBER)), ("layout_", _STR))
#: The content of each type kind an LLVM module's arguments and layouts are made of (Taichi's ``TypeKind``:
#: Primitive, Pointer, Tensor, Struct, ArgPack); the quantized kinds after them (fields' bit packing) are refused.
_TYPE_CONTENT = {
    TYPE_PRIMITIVE: _struct(("type", "i")),
    TYPE_POINTER: _struct(("pointee_", _TYPE), ("addr_space_", "i"), ("is_bit_pointer_", "?")),
    TYPE_TENSOR: _struct(("shape_", _vec("i")), ("element_", _TYPE)),
    TYPE_STRUCT: _DICTIONARY,
    TYPE_ARGPACK: _DICTIONARY,
}
_DATA_TYPE = _struct(("ptr_", _TYPE))
_PARAMETER = _struct(
    ("is_array", "?"), ("is_argpack", "?"), ("total_dim", "Q"), ("format", "I"), ("dt_", _DATA_TYPE),
    ("needs_grad", "?"), ("element_shape", _vec("i")), ("ptype", "i"),
)
_TASK = _struct(("name", _STR), ("block_dim", "i"), ("grid_dim", "i"), ("dynamic_shared_array_bytes", "i"))
_KERNEL = _struct(
    ("kernel_key", _STR),
    ("args", _vec(_pair(_vec("i"), _PARAMETER))),
    ("compiled_data", _struct(("tasks", _vec(_TASK)))),
    ("size", "Q"), ("created_at", "q"), ("last_used_at", "q"),
    ("rets", _vec(_struct(("dt", _DATA_TYPE)))),
    ("ret_type", _TYPE), ("ret_size", "Q"), ("args_type", _TYPE), ("args_size", "Q"),
)
_SNODE = _struct(("id", "i"), ("type", "i"), ("cell_size_bytes", "Q"), ("chunk_size", "Q"))
_FIELD = _struct(("tree_id", "i"), ("root_id", "i"), ("root_size", "Q"), ("snode_metas", _vec(_SNODE)))
#: ``LlvmOfflineCache`` of Taichi 1.7.4: its version is a ``uint16[3]``, written without a count.
CACHE = _struct(
    ("version", ("array", "H", 3)), ("size", "Q"), ("fields", _map("i", _FIELD)), ("kernels", _map(_STR, _KERNEL)),
)
_GRAPH_ARG = _struct(("name", _STR), ("dtype_id", "i"), ("field_dim", "Q"), ("tag", "i"), ("element_shape", _vec("i")),
                     ("num_channels", "Q"))
#: ``graphs.tcb``: each compute graph by name, its dispatches (kernel and bound arguments) in order.
GRAPHS = _map(_STR, _struct(("dispatches", _vec(_struct(("kernel_name", _STR), ("symbolic_args", _vec(_GRAPH_ARG)))))))


def _least(kind: Any) -> int:
    """The fewest bytes a value of ``kind`` takes (a count says how many values the rest of the file must hold)."""
    if kind in (_STR, _TYPE):
        return 8 if kind == _STR else 4
    if isinstance(kind, str):
        return 1 if kind == "?" else struct.calcsize("<" + kind)
    if kind[0] == "struct":
        return sum(_least(field) for _, field in kind[1])
    return 8  # a vector's or map's count


class _Reader:
    """Values of the kinds :data:`GRAPHS` is made of (structs, vectors, maps with string keys, integers,
    strings) from the binary serializer's bytes, every count checked against what the file holds."""

    def __init__(self, data: bytes, file: str):
        self.data, self.file, self.pos = data, file, 0

    def _take(self, size: int) -> bytes:
        if self.pos + size > len(self.data):
            raise CorruptedDataError(f"{self.file}: truncated")
        self.pos += size
        return self.data[self.pos - size:self.pos]

    def _count(self, item: Any) -> int:
        (n,) = struct.unpack("<Q", self._take(8))
        if n * _least(item) > len(self.data) - self.pos:
            raise CorruptedDataError(f"{self.file}: a count larger than the file")
        return n

    def value(self, kind: Any) -> Any:
        if kind == _STR:
            return self._take(self._count("B")).decode("utf-8", "replace")
        if isinstance(kind, str):
            return struct.unpack("<" + kind, self._take(struct.calcsize("<" + kind)))[0]
        if kind[0] == "struct":
            return {name: self.value(field) for name, field in kind[1]}
        if kind[0] == "vec":
            return [self.value(kind[1]) for _ in range(self._count(kind[1]))]
        if kind[0] == "map" and kind[1] == _STR:
            least = _struct(("key", _STR), ("value", kind[2]))
            return dict(self.value(least).values() for _ in range(self._count(least)))
        raise TypeError(f"no reader for {kind!r}")


def decode(kind: Any, data: bytes, file: str) -> Any:
    """A file the binary serializer wrote (its length first) as dicts and lists: ``kind`` is its schema
    (:data:`GRAPHS`).

    Raises:
        CorruptedDataError: a length other than the file's, a count past the file's end, trailing bytes.
    """
    r = _Reader(data, file)
    (total,) = struct.unpack("<Q", r._take(8))
    if total != len(data):
        raise CorruptedDataError(f"{file}: header says {total} bytes, file has {len(data)}")
    out = r.value(kind)
    if r.pos != len(data):
        raise CorruptedDataError(f"{file}: trailing data")
    return out


class _Writer:
    """The binary serializer's bytes for a checked record, and where each field's bytes start."""

    def __init__(self) -> None:
        self.out = bytearray(8)  # the length, filled in at the end
        self.starts: list[int] = []
        self.paths: list[str] = []

    def _mark(self, path: str) -> None:
        self.starts.append(len(self.out))
        self.paths.append(path)

    def value(self, kind: Any, v: Any, path: str, depth: int) -> None:
        if depth > MAX_DEPTH:
            raise CorruptedDataError(f"metadata.json: {path}: nested deeper than {MAX_DEPTH}")
        if kind == _TYPE:
            self._type(v, path, depth)
        elif isinstance(kind, str):
            self._leaf(kind, v, path)
        elif kind[0] == "struct":
            if not isinstance(v, dict):
                raise CorruptedDataError(f"metadata.json: {path}: expected an object, got {_short(v)}")
            for name, field in kind[1]:
                if name not in v:
                    raise CorruptedDataError(f"metadata.json: {path}: no {name!r}")
                self.value(field, v[name], f"{path}.{name}" if path else name, depth + 1)
        elif kind[0] == "array":
            if not isinstance(v, list) or len(v) != kind[2]:
                raise CorruptedDataError(f"metadata.json: {path}: expected {kind[2]} values, got {_short(v)}")
            for i, item in enumerate(v):
                self.value(kind[1], item, f"{path}[{i}]", depth + 1)
        else:
            self._container(kind, v, path, depth)

    def _container(self, kind: tuple, v: Any, path: str, depth: int) -> None:
        if kind[0] == "pair":
            if not isinstance(v, list) or len(v) != 2:
                raise CorruptedDataError(f"metadata.json: {path}: expected a pair, got {_short(v)}")
            self.value(kind[1], v[0], f"{path}[0]", depth + 1)
            self.value(kind[2], v[1], f"{path}[1]", depth + 1)
            return
        want = dict if kind[0] == "map" else list
        if not isinstance(v, want):
            raise CorruptedDataError(f"metadata.json: {path}: expected {'an object' if want is dict else 'a list'}, "
                                     f"got {_short(v)}")
        self._leaf("Q", len(v), f"{path} (count)")
        if isinstance(v, list):
            for i, item in enumerate(v):
                self.value(kind[1], item, f"{path}[{i}]", depth + 1)
            return
        for key, item in v.items():
            if kind[1] != _STR:  # the text serializer quotes a number key ("fields": {"0": ...})
                if not isinstance(key, str) or not re.fullmatch(r"-?\d{1,20}", key):
                    raise CorruptedDataError(f"metadata.json: {path}: a key {_short(key)} that is no integer")
                key = int(key)
            self.value(kind[1], key, f"{path} (key)", depth + 1)
            self.value(kind[2], item, f"{path}[{key!r}]", depth + 1)

    def _leaf(self, kind: str, v: Any, path: str) -> None:
        self._mark(path)
        if kind == _STR:
            if not isinstance(v, str):
                raise CorruptedDataError(f"metadata.json: {path}: expected a string, got {_short(v)}")
            raw = v.encode("utf-8", "surrogatepass")
            self.out += struct.pack("<Q", len(raw)) + raw
        elif kind == "?":
            if not isinstance(v, bool):
                raise CorruptedDataError(f"metadata.json: {path}: expected true or false, got {_short(v)}")
            self.out.append(int(v))
        else:
            low, high = _INTS[kind]
            if not isinstance(v, int) or isinstance(v, bool) or not low <= v <= high:
                raise CorruptedDataError(f"metadata.json: {path}: expected an integer {low}..{high}, got {_short(v)}")
            self.out += struct.pack("<" + kind, v)

    def _type(self, v: Any, path: str, depth: int) -> None:
        if not isinstance(v, dict) or not isinstance(v.get("type_kind"), int):
            raise CorruptedDataError(f"metadata.json: {path}: expected a type, got {_short(v)}")
        kind = v["type_kind"]
        self._leaf("i", kind, f"{path}.type_kind")
        if kind == -1:  # no type (a null pointer)
            return
        content = _TYPE_CONTENT.get(kind)
        if content is None:
            raise CorruptedDataError(f"metadata.json: {path}.type_kind: {kind} is no type kind an LLVM module's "
                                     "arguments take")
        self.value(content, v.get("content"), f"{path}.content", depth + 1)


def _short(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 40 else text[:37] + "..."


class Encoded:
    """A checked ``metadata.json`` record as the binary serializer writes it (:attr:`data`)."""

    def __init__(self, cache: Any):
        w = _Writer()
        w.value(CACHE, cache, "", 0)
        w.out[:8] = struct.pack("<Q", len(w.out))
        self.data = bytes(w.out)
        self._starts = w.starts
        self._paths = w.paths

    def field_at(self, offset: int) -> str:
        """The path of the field whose bytes hold ``offset`` ("the length" for the file's first 8 bytes)."""
        i = bisect.bisect_right(self._starts, offset) - 1
        return "the file's length" if i < 0 else self._paths[i]

    def verify(self, tcb: bytes) -> None:
        """Raise CorruptedDataError unless ``tcb`` is exactly these bytes."""
        if tcb == self.data:
            return
        n = min(len(tcb), len(self.data))
        low, high = 0, n  # the first byte that differs: the longest equal prefix, by halves (memcmp, not a loop)
        while low < high:
            mid = (low + high + 1) // 2
            if tcb[:mid] == self.data[:mid]:
                low = mid
            else:
                high = mid - 1
        first = low
        if first == n:
            raise CorruptedDataError(f"metadata.tcb: {len(tcb)} bytes where metadata.json makes {len(self.data)} "
                                     f"(the two disagree from byte {first})")
        raise CorruptedDataError(f"metadata.tcb disagrees with metadata.json at byte {first}, in "
                                 f"{self.field_at(first)}: damaged, or the two files are not of one module")


#: (metadata.json's text, metadata.tcb) pairs, by their SHA-256 digests, already found to agree in this process.
_agreed: set[bytes] = set()


def check(json_text: str, cache: Any, tcb: bytes) -> None:
    """Raise CorruptedDataError unless ``tcb`` is ``metadata.json`` (``json_text``, parsed: ``cache``) written by
    Taichi's binary serializer (:func:`encode`, :meth:`Encoded.verify`); a pair already checked is not again."""
    key = hashlib.sha256(json_text.encode("utf-8", "surrogatepass")).digest() + hashlib.sha256(tcb).digest()
    if key not in _agreed:
        encode(cache).verify(tcb)
        if len(_agreed) > 4096:
            _agreed.clear()
        _agreed.add(key)


def encode(cache: Any) -> Encoded:
    """``metadata.json``'s ``cache`` record written as Taichi's binary serializer writes ``metadata.tcb``.

    Raises:
        CorruptedDataError: a field of the wrong JSON type, a value its C++ field cannot hold, or a type of a kind
            libtaichi_c_api cannot read.
    """
    return Encoded(cache)
