"""The C-API's structures as ctypes classes, for callers written as the flat API's design document shows.

Such a caller builds ``TiMemorySlice(memory=mem, offset=0, size=n)``, ``TiArgument(...)`` arrays or
``TiCapabilityLevelInfo`` lists around the handles this package returns, and hands them back. The flat API's
handles are ints (:class:`~taichi_aot.capi.coerce.Handle`), which a caller's own plain ctypes structures take too;
these classes take besides the object layer's cffi pointers (``rt.handle``), ints and None, wherever the C type
holds a handle or another pointer. Each class is made from the
compiled extension's own layout (``ffi.typeof``), so sizes and offsets are the header's, and every flat
function that takes a structure takes these as it takes cffi structures and dicts. A ``char *`` field
(``TiNamedArgument.name``) takes ``bytes`` or ``str`` and keeps it alive with the structure.
"""

from __future__ import annotations

import ctypes
from typing import Any

from .._native import ffi

_PRIMITIVES = {
    "int8_t": ctypes.c_int8, "uint8_t": ctypes.c_uint8, "int16_t": ctypes.c_int16, "uint16_t": ctypes.c_uint16,
    "int32_t": ctypes.c_int32, "uint32_t": ctypes.c_uint32, "int64_t": ctypes.c_int64, "uint64_t": ctypes.c_uint64,
    "float": ctypes.c_float, "double": ctypes.c_double, "char": ctypes.c_char,
}


def _address(value: Any) -> Any:
    """A handle or pointer as ctypes takes it: a cffi pointer becomes its address; ints, None and the rest
    pass (ctypes judges them)."""
    if isinstance(value, ffi.CData) and ffi.typeof(value).kind == "pointer":
        return int(ffi.cast("uintptr_t", value))
    return value


class _Fields:
    """What the generated classes share: handles and strings accepted where ctypes wants addresses."""

    _pointers: frozenset[str] = frozenset()
    _strings: frozenset[str] = frozenset()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        names = [name for name, *_ in self._fields_]  # type: ignore[attr-defined]
        kwargs.update(zip(names, args))
        super().__init__()
        for name, value in kwargs.items():
            setattr(self, name, value)

    def __setattr__(self, name: str, value: Any) -> None:
        if name in self._strings:
            if isinstance(value, str):
                value = value.encode("utf-8")
            if isinstance(value, bytes):  # kept alive with the structure, as ctypes' own c_char_p is not
                object.__setattr__(self, "_kept_" + name, ctypes.create_string_buffer(value))
                value = ctypes.addressof(getattr(self, "_kept_" + name))
        elif name in self._pointers:
            value = _address(value)
        super().__setattr__(name, value)


def _ctype(t: Any, made: dict[str, Any]) -> Any:
    if t.kind == "primitive":
        return _PRIMITIVES[t.cname]
    if t.kind == "enum":
        return ctypes.c_int32 if ffi.sizeof(t) == 4 else ctypes.c_int64
    if t.kind == "pointer":
        return ctypes.c_void_p
    if t.kind == "array":
        return _ctype(t.item, made) * t.length
    return _make(t, made)


def _make(t: Any, made: dict[str, Any]) -> Any:
    name = t.cname.split()[-1]
    if name in made:
        return made[name]
    base = ctypes.Union if t.kind == "union" else ctypes.Structure
    fields = [(field, _ctype(ft.type, made)) for field, ft in t.fields]
    pointers = frozenset(f for f, ft in t.fields if ft.type.kind == "pointer" and ft.type.item.cname != "char")
    strings = frozenset(f for f, ft in t.fields if ft.type.kind == "pointer" and ft.type.item.cname == "char")
    cls = type(name, (_Fields, base), {"_fields_": fields, "_pointers": pointers, "_strings": strings,
                                       "__module__": __name__,
                                       "__doc__": f"``{name}`` with the C layout ({ffi.sizeof(t)} bytes)."})
    if ctypes.sizeof(cls) != ffi.sizeof(t):  # a layout ctypes cannot copy: refuse at import, not at a call
        raise ImportError(f"taichi_aot.capi.structs: {name} is {ctypes.sizeof(cls)} bytes in ctypes, "
                          f"{ffi.sizeof(t)} in C")
    made[name] = cls
    return cls


_made: dict[str, Any] = {}


def _struct(name: str) -> Any:
    """The ctypes class of the C structure ``name`` (and of the structures inside it)."""
    return _make(ffi.typeof(name), _made)


TiMemoryAllocateInfo: Any = _struct("TiMemoryAllocateInfo")
TiMemorySlice: Any = _struct("TiMemorySlice")
TiNdShape: Any = _struct("TiNdShape")
TiNdArray: Any = _struct("TiNdArray")
TiImageOffset: Any = _struct("TiImageOffset")
TiImageExtent: Any = _struct("TiImageExtent")
TiImageAllocateInfo: Any = _struct("TiImageAllocateInfo")
TiImageSlice: Any = _struct("TiImageSlice")
TiSamplerCreateInfo: Any = _struct("TiSamplerCreateInfo")
TiTexture: Any = _struct("TiTexture")
TiScalarValue: Any = _struct("TiScalarValue")
TiScalar: Any = _struct("TiScalar")
TiTensorValue: Any = _struct("TiTensorValue")
TiTensorValueWithLength: Any = _struct("TiTensorValueWithLength")
TiTensor: Any = _struct("TiTensor")
TiArgumentValue: Any = _struct("TiArgumentValue")
TiArgument: Any = _struct("TiArgument")
TiNamedArgument: Any = _struct("TiNamedArgument")
TiCapabilityLevelInfo: Any = _struct("TiCapabilityLevelInfo")


class CapabilityList(list):
    """What ``get_runtime_capabilities`` returns: a list of ``TiCapabilityLevelInfo`` (``.capability``,
    ``.level``), as the design document gives it, that also answers as the mapping ``{Capability: level}``:
    ``caps[Capability.SPIRV_VERSION]``, ``caps.get(...)``, ``Capability.X in caps``, ``items()``, ``keys()``,
    ``values()``, ``as_dict()``, and ``==`` with a dict. An int index is a list index."""

    def as_dict(self) -> dict[Any, int]:
        """``{capability: level}`` (a Capability member where the value is one, else the int)."""
        from ..enums import Capability

        def name(value: int) -> Any:
            try:
                return Capability(value)
            except ValueError:
                return value

        return {name(int(c.capability)): int(c.level) for c in self}

    def __getitem__(self, key: Any) -> Any:
        from ..enums import Capability

        if isinstance(key, Capability):
            return self.as_dict()[key]
        return super().__getitem__(key)

    def __contains__(self, key: object) -> bool:
        from ..enums import Capability

        if isinstance(key, Capability):
            return key in self.as_dict()
        return super().__contains__(key)

    def get(self, key: Any, default: Any = None) -> Any:
        return self.as_dict().get(key, default)

    def items(self) -> Any:
        return self.as_dict().items()

    def keys(self) -> Any:
        return self.as_dict().keys()

    def values(self) -> Any:
        return self.as_dict().values()

    def __eq__(self, other: object) -> bool:
        if isinstance(other, dict):
            return self.as_dict() == other
        return super().__eq__(other)

    __hash__ = None  # a list's


def first(count: Any, items: Any, what: str) -> Any:
    """The arguments of a launch given as ``(items)`` or in C's arity ``(count, items)``: with ``items`` None, the
    first value is the items themselves (``()`` when None too); else the first ``count`` of ``items``.
    InvalidArgumentError where the count is not an int from 0 to ``len(items)``."""
    from ..errors import ArgumentTypeError, InvalidArgumentError

    if items is None:  # (runtime, kernel, args): the count's place holds the items
        return () if count is None else count
    if count is None:
        return items
    if isinstance(count, bool) or not isinstance(count, int):
        raise ArgumentTypeError(f"{what}: the count must be an int, got {type(count).__name__}")
    try:
        length = len(items)
    except TypeError:
        raise ArgumentTypeError(f"{what}: expected a sequence or an array, got {type(items).__name__}") from None
    if not 0 <= count <= length:
        raise InvalidArgumentError(f"{what}: a count of {count} for {length} item(s)")
    if count == length:
        return items
    if hasattr(items, "items") and callable(items.items):
        raise InvalidArgumentError(f"{what}: a count of {count} for a mapping of {length}: they must agree")
    return [items[i] for i in range(count)]


def module_bytes(data: Any, size: Any, what: str) -> bytes:
    """A module's bytes from ``data`` (bytes-like, or a ctypes pointer or array as C takes it) and ``size``
    (the byte count, as C takes it; None: all of a bytes-like ``data``)."""
    from ..errors import ArgumentTypeError, InvalidArgumentError

    if size is not None and (isinstance(size, bool) or not isinstance(size, int) or size < 0):
        raise InvalidArgumentError(f"{what}: size must be an int >= 0, got {size!r}")
    if isinstance(data, (ctypes.c_void_p, ctypes.c_char_p)):
        if size is None:
            raise ArgumentTypeError(f"{what}: a pointer needs its size (create_aot_module(runtime, data, size))")
        if not data.value:
            raise InvalidArgumentError(f"{what}: NULL data")
        return ctypes.string_at(data.value, size)
    if isinstance(data, ctypes.Array):
        data = memoryview(data).cast("B")
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise ArgumentTypeError(f"{what}: data must be bytes-like or a ctypes pointer, got {type(data).__name__}")
    raw = bytes(data)
    if size is None:
        return raw
    if size > len(raw):
        raise InvalidArgumentError(f"{what}: size {size} is more than the {len(raw)} bytes given")
    return raw[:size]
