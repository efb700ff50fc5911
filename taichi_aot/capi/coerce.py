"""Python values as C values, or a typed error whose message names the argument.

Handles (:func:`handle_arg`), enums by member, int or name (:func:`enum_arg`),
structs from cffi, dicts or keywords (:func:`struct_arg`), pointers and sizes,
and kernel arguments (:func:`pack_arguments`, :func:`pack_named_arguments`).
Nothing here reads the handle registry.
"""

from __future__ import annotations

import ctypes
import enum
import functools
from collections.abc import Mapping, Sequence
from typing import Any, Callable, TypeVar, cast

from .._native import ffi
from ..enums import ArgumentType
from ..errors import ArgumentNullError, ArgumentTypeError, InvalidArgumentError, TaichiError

NULL = ffi.NULL

E = TypeVar("E", bound=enum.Enum)
F = TypeVar("F", bound=Callable[..., Any])


def describe(value: Any) -> str:
    """A short description of a value for messages: its cdata type, or its type and repr."""
    if isinstance(value, ffi.CData):
        return f"cdata '{ffi.typeof(value).cname}'"
    if value.__class__ is Handle:
        return repr(value)
    return f"{type(value).__name__} {value!r}"[:120]


#: The C handle types (their cffi types: names): what a flat function returns of these is a :class:`Handle`.
HANDLE_TYPES = {ffi.typeof(t): t for t in ("TiRuntime", "TiMemory", "TiImage", "TiSampler", "TiAotModule", "TiKernel",
                                           "TiComputeGraph")}


class Handle(int):
    """A handle the flat API returned: an int, the handle's value, so that a ctypes structure of the C layout takes it
    in its ``c_void_p`` field (a caller's own ``TiMemorySlice(memory=mem, ...)``), which refuses cffi pointers. It
    keeps its C type: every flat function takes it back as the cffi pointer it stands for (``cdata``) and checks that
    type as it checks a cffi handle's; a kernel argument, a size or a pointer it is not. ``cdata`` is what cffi
    structures and ``lib`` take."""

    cdata: Any

    def __new__(cls, cdata: Any) -> Handle:
        self = super().__new__(cls, int(ffi.cast("uintptr_t", cdata)))
        self.cdata = cdata
        return self

    @property
    def ctype(self) -> str:
        """Its C type's name: ``"TiMemory"``, ``"TiRuntime"``, ..."""
        return HANDLE_TYPES[ffi.typeof(self.cdata)]

    def __repr__(self) -> str:
        return f"<{self.ctype} handle {int(self):#x}>"

    def __reduce_ex__(self, protocol: Any) -> Any:
        raise TypeError(f"cannot pickle a {self.ctype} handle: it is an address in this process")


def plain(value: Any) -> Any:
    """``value`` with every :class:`Handle` in it (at its top, or in the dicts, lists and tuples of a struct
    initializer) replaced by its cffi pointer."""
    cls = value.__class__
    if cls is Handle:
        return value.cdata
    if cls is dict:
        return {k: plain(v) for k, v in value.items()}
    if cls is list or cls is tuple:
        return cls(plain(v) for v in value)
    return value


def flat(fn: F) -> F:
    """``fn`` as the flat API exports it: a :class:`Handle` given to it (by position or keyword) reaches it as its
    cffi pointer, and a handle it returns is a :class:`Handle`. The object layer keeps cffi pointers (``cdata``)."""

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        for a in args:  # a loop, not any(): the object layer's calls pay for this too
            if a.__class__ is handle:
                args = tuple(a.cdata if a.__class__ is handle else a for a in args)
                break
        if kwargs:
            kwargs = {k: v.cdata if v.__class__ is handle else v for k, v in kwargs.items()}
        result = fn(*args, **kwargs)
        if result is not None and isinstance(result, cdata) and typeof(result) in types:
            return handle(result)
        return result

    handle, cdata, typeof, types = Handle, ffi.CData, ffi.typeof, HANDLE_TYPES

    return cast(F, call)


def handle_arg(value: Any, ctype: str, what: str) -> Any:
    """``value`` if it is a non-NULL cffi handle of type ``ctype`` (a :class:`Handle`: its cffi pointer);
    ArgumentTypeError / ArgumentNullError otherwise."""
    if value.__class__ is Handle:
        value = value.cdata
    if not isinstance(value, ffi.CData) or ffi.typeof(value) != ffi.typeof(ctype):
        raise ArgumentTypeError(f"{what}: expected a {ctype} handle, got {describe(value)}")
    if value == NULL:
        raise ArgumentNullError(f"{what}: the {ctype} handle is NULL")
    return value


def enum_arg(cls: type[E], value: Any, what: str) -> E:
    """``value`` (a member, its int or its name) as a member of the enum ``cls``; typed errors otherwise."""
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, str):
            try:
                return cls[value.upper()]
            except KeyError:
                pass
        raise ArgumentTypeError(f"{what}: expected a {cls.__name__} ({', '.join(cls.__members__)}), got {value!r}")
    if issubclass(cls, enum.IntFlag):
        all_bits = 0
        for member in cls:
            all_bits |= int(member)
        if value < 0 or value & ~all_bits:
            raise InvalidArgumentError(f"{what}: {value:#x} has bits that are not {cls.__name__} flags")
    try:
        return cls(value)
    except ValueError:
        raise InvalidArgumentError(f"{what}: {value} is not a {cls.__name__}") from None


def struct_arg(ctype: str, value: Any, fields: Mapping[str, Any], what: str) -> Any:
    """A ``ctype *`` built from a cffi struct/pointer, a dict, and/or keywords."""
    try:
        if isinstance(value, (ctypes.Structure, ctypes.Union)):
            value = from_ctypes(ctype, value, what)
        if isinstance(value, ffi.CData):
            t = ffi.typeof(value)
            if t is ffi.typeof(ctype):
                ptr = ffi.new(ctype + " *", value)
            elif t is ffi.typeof(ctype + " *"):
                if value == NULL:
                    raise ArgumentNullError(f"{what}: NULL {ctype} pointer")
                ptr = ffi.new(ctype + " *", value[0])
            else:
                raise ArgumentTypeError(f"{what}: expected {ctype}, got {describe(value)}")
            for k, v in fields.items():
                setattr(ptr, k, plain(v))
            return ptr
        if value is None:
            init = plain(dict(fields))
        elif isinstance(value, Mapping):
            init = plain({**value, **fields})
        else:
            raise ArgumentTypeError(f"{what}: expected {ctype}, a dict or keywords, got {describe(value)}")
        return ffi.new(ctype + " *", init)
    except TaichiError:
        raise
    except (TypeError, KeyError, AttributeError) as e:
        raise ArgumentTypeError(f"{what}: bad {ctype}: {e}") from None
    except (OverflowError, ValueError) as e:
        raise InvalidArgumentError(f"{what}: bad {ctype}: {e}") from None


def from_ctypes(ctype: str, value: Any, what: str, count: int | None = None) -> Any:
    """A cffi ``ctype`` (or ``ctype[count]``) holding a copy of a ctypes structure (or array) of the C layout.

    Raises:
        ArgumentTypeError: its size is not the C type's (another layout).
    """
    want = ffi.sizeof(ctype) * (count if count is not None else 1)
    if ctypes.sizeof(value) != want:
        raise ArgumentTypeError(f"{what}: a ctypes {type(value).__name__} of {ctypes.sizeof(value)} bytes is not a "
                                f"{ctype}{'' if count is None else f'[{count}]'} ({want} bytes)")
    out = ffi.new(f"{ctype}[{count}]" if count is not None else f"{ctype} *")
    ffi.memmove(out, bytes(memoryview(value).cast("B")), want)
    return out if count is not None else out[0]


def pointer_arg(value: Any, what: str, allow_null: bool = False) -> Any:
    """A ``void *`` from a cffi pointer or an int address."""
    if isinstance(value, ffi.CData) and ffi.typeof(value).kind == "pointer":
        p = ffi.cast("void *", value)
    elif isinstance(value, int) and not isinstance(value, bool):
        if not 0 <= value < 2**64:
            raise InvalidArgumentError(f"{what}: address {value} out of range")
        p = ffi.cast("void *", value)
    else:
        raise ArgumentTypeError(f"{what}: expected a pointer or an int address, got {describe(value)}")
    if p == NULL and not allow_null:
        raise ArgumentNullError(f"{what}: NULL pointer")
    return p


def size_arg(value: Any, what: str) -> int:
    """A byte size: an int from 1 to 2**63 - 1."""
    if isinstance(value, (bool, Handle)) or not isinstance(value, int):
        raise ArgumentTypeError(f"{what}: expected an int, got {describe(value)}")
    if not 0 < value < 2**63:
        raise InvalidArgumentError(f"{what}: {value} is not a valid size")
    return value


# ---------------------------------------------------------------------------
# Kernel arguments


def argument_init(value: Any, what: str) -> Any:
    """A TiArgument initializer (or cdata) from one Python argument."""
    if isinstance(value, (ctypes.Structure, ctypes.Union)):
        value = from_ctypes("TiArgument", value, what)
    if isinstance(value, ffi.CData):
        t = ffi.typeof(value)
        if t is ffi.typeof("TiArgument"):
            return value
        if t is ffi.typeof("TiArgument *"):
            if value == NULL:
                raise ArgumentNullError(f"{what}: NULL TiArgument pointer")
            return value[0]
        raise ArgumentTypeError(f"{what}: expected a TiArgument, got {describe(value)}")
    if isinstance(value, (bool, Handle)):
        raise ArgumentTypeError(f"{what}: {describe(value)} is not a kernel argument (pass int or float)")
    if isinstance(value, int):
        if not -(2**31) <= value < 2**31:
            raise InvalidArgumentError(f"{what}: int {value} does not fit in i32")
        return {"type": ArgumentType.I32, "value": {"i32": value}}
    if isinstance(value, float):
        return {"type": ArgumentType.F32, "value": {"f32": value}}
    if isinstance(value, Mapping):
        return plain(dict(value))
    raise ArgumentTypeError(f"{what}: expected TiArgument, dict, int or float, got {describe(value)}")


def pack_arguments(args: Sequence[Any] | Any) -> Any:
    """A cffi ``TiArgument[]`` from TiArguments (cffi or ctypes), dicts, ints (i32) and floats (f32),
    or a ctypes array of the C layout."""
    if isinstance(args, ctypes.Array):
        return from_ctypes("TiArgument", args, "launch_kernel: args", len(args))
    if isinstance(args, ffi.CData):
        if ffi.typeof(args).kind == "array" and ffi.typeof(args).item is ffi.typeof("TiArgument"):
            return args
        raise ArgumentTypeError(f"launch_kernel: args must be a TiArgument[] or a sequence, got {describe(args)}")
    if not isinstance(args, Sequence) or isinstance(args, (str, bytes)):
        raise ArgumentTypeError(f"launch_kernel: args must be a sequence, got {describe(args)}")
    inits = [argument_init(a, f"argument {i}") for i, a in enumerate(args)]
    try:
        return ffi.new("TiArgument[]", inits) if inits else ffi.new("TiArgument[]", 0)
    except (TypeError, KeyError) as e:
        raise ArgumentTypeError(f"launch_kernel: bad argument: {e}") from None
    except (OverflowError, ValueError) as e:
        raise InvalidArgumentError(f"launch_kernel: bad argument: {e}") from None


def _named_item(i: int, item: Any) -> tuple[str | None, Any]:
    """One item of a sequence of named arguments: ``(name, argument)``, or ``(None, a whole TiNamedArgument)``."""
    if isinstance(item, (ctypes.Structure, ctypes.Union)):  # a TiNamedArgument of the C layout
        return None, from_ctypes("TiNamedArgument", item, f"launch_compute_graph: item {i}")
    if isinstance(item, ffi.CData) and ffi.typeof(item) is ffi.typeof("TiNamedArgument"):
        return None, item
    if isinstance(item, Mapping) and "name" in item:
        name = item["name"]
        return (name.decode() if isinstance(name, bytes) else name), item.get("argument")
    if isinstance(item, tuple) and len(item) == 2:
        return item
    raise ArgumentTypeError(f"launch_compute_graph: item {i} must be (name, argument), a dict or a TiNamedArgument")


def _named_init(name: str | None, value: Any, keep: list[Any]) -> Any:
    """The initializer of one TiNamedArgument: a whole one as it is (``name`` None: its name the caller's, checked
    by the launch), else its name (a C string appended to ``keep``) and its argument."""
    if name is None:
        return value
    if not isinstance(name, str) or not name or "\0" in name:
        raise ArgumentTypeError(f"launch_compute_graph: argument name must be a non-empty str, got {name!r}")
    cname = ffi.new("char[]", name.encode())
    keep.append(cname)
    return {"name": cname, "argument": argument_init(value, f"argument {name!r}")}


def pack_named_arguments(args: Mapping[str, Any] | Sequence[Any] | Any) -> tuple[Any, list]:
    """A cffi ``TiNamedArgument[]`` (and the name buffers it points to) from a mapping or a sequence."""
    if isinstance(args, ctypes.Array):
        return from_ctypes("TiNamedArgument", args, "launch_compute_graph: args", len(args)), []
    if isinstance(args, ffi.CData):
        if ffi.typeof(args).kind == "array" and ffi.typeof(args).item is ffi.typeof("TiNamedArgument"):
            return args, []
        raise ArgumentTypeError(f"launch_compute_graph: bad args {describe(args)}")
    if isinstance(args, Mapping):
        items = list(args.items())
    elif isinstance(args, Sequence) and not isinstance(args, (str, bytes)):
        items = [_named_item(i, item) for i, item in enumerate(args)]
    else:
        raise ArgumentTypeError(f"launch_compute_graph: args must be a mapping or a sequence, got {describe(args)}")
    keep: list[Any] = []
    inits = [_named_init(name, value, keep) for name, value in items]
    try:
        return ffi.new("TiNamedArgument[]", inits) if inits else ffi.new("TiNamedArgument[]", 0), keep
    except (TypeError, KeyError) as e:
        raise ArgumentTypeError(f"launch_compute_graph: bad argument: {e}") from None
    except (OverflowError, ValueError) as e:
        raise InvalidArgumentError(f"launch_compute_graph: bad argument: {e}") from None
