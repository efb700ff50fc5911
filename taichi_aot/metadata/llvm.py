"""The LLVM format (x64, arm64, CUDA): Taichi's text serializer, LLVM arguments, graphs.tcb, target triple.

``metadata.json`` is the *text serializer*'s output, which is JSON-like but not JSON (``{1, 7, 4}``
tuples, ``ptr {...}`` tagged values, missing commas): :func:`parse_text` reads it with a small
tokenizer and a depth-limited parser. ``graphs.tcb`` is the binary serializer's output. Which arch
the code was generated for is read from the target triple of the module's LLVM IR.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any

from ..enums import Arch
from ..errors import CorruptedDataError
from . import llvm_ir
from .model import (
    PTYPE_KINDS,
    TYPE_PRIMITIVE,
    TYPE_STRUCT,
    ArgInfo,
    FieldLayout,
    GraphInfo,
    KernelInfo,
    ModuleInfo,
    _data_type,
    _graph,
    _graph_arg,
    _struct_scalars,
)
from .tcb import GRAPHS, decode

if TYPE_CHECKING:
    from .source import _Source

MAX_DEPTH = 200

# ---------------------------------------------------------------------------
# Taichi's text serializer

_TOKEN = re.compile(
    r'\s*(?:(?P<str>"(?:[^"\\]|\\.)*")|(?P<num>-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)|(?P<punct>[{}\[\],:])'
    r"|(?P<ident>[A-Za-z_]\w*))"
)
_WORDS = {"true": True, "false": False, "null": None}


def _tokens(text: str) -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    pos = 0
    end = len(text)
    while pos < end:
        m = _TOKEN.match(text, pos)
        if m is None or m.end() == pos:
            if text[pos:].strip() == "":
                break
            raise CorruptedDataError(f"metadata: unexpected character {text[pos]!r} at offset {pos}")
        pos = m.end()
        if m.group("str") is not None:
            try:
                out.append(("v", json.loads(m.group("str"))))
            except ValueError:
                raise CorruptedDataError(f"metadata: bad string at offset {m.start()}") from None
        elif m.group("num") is not None:
            s = m.group("num")
            out.append(("v", float(s) if any(c in s for c in ".eE") else int(s)))
        elif m.group("punct") is not None:
            out.append(("p", m.group("punct")))
        elif m.group("ident") is not None:
            out.append(("i", m.group("ident")))
    return out


class _TextParser:
    """Recursive descent over the tokens of one document; ``pos`` is the next token."""

    def __init__(self, tokens: list[tuple[str, Any]]):
        self.tokens = tokens
        self.pos = 0

    def peek(self, k: int = 0) -> tuple[str, Any]:
        return self.tokens[self.pos + k] if self.pos + k < len(self.tokens) else ("eof", None)

    def take(self) -> tuple[str, Any]:
        if self.pos >= len(self.tokens):
            raise CorruptedDataError("metadata: truncated")
        self.pos += 1
        return self.tokens[self.pos - 1]

    def value(self, depth: int) -> Any:
        if depth > MAX_DEPTH:
            raise CorruptedDataError(f"metadata: nested deeper than {MAX_DEPTH}")
        kind, v = self.take()
        if kind == "v":
            return v
        if kind == "i":
            if v in _WORDS:
                return _WORDS[v]
            return self.value(depth + 1)  # a tag such as ``ptr`` before the value
        if kind == "p" and v == "[":
            return self._list(depth)
        if kind == "p" and v == "{":
            return self._brace(depth)
        raise CorruptedDataError(f"metadata: unexpected {v!r} near token {self.pos}")

    def _list(self, depth: int) -> list:
        items = []
        while self.peek() != ("p", "]"):
            items.append(self.value(depth + 1))
            if self.peek() == ("p", ","):
                self.take()
            elif self.peek() != ("p", "]"):
                raise CorruptedDataError(f"metadata: expected ',' or ']' near token {self.pos}")
        self.take()
        return items

    def _brace(self, depth: int) -> dict | list:
        """After ``{``: an object of ``"key": value`` pairs, or a brace list such as ``{1, 7, 4}``."""
        if self.peek() == ("p", "}"):
            self.take()
            return {}
        first = self.peek()
        if first[0] == "v" and isinstance(first[1], str) and self.peek(1) == ("p", ":"):
            obj = {}
            while self.peek() != ("p", "}"):
                k_kind, key = self.take()
                if k_kind != "v" or not isinstance(key, str) or self.take() != ("p", ":"):
                    raise CorruptedDataError(f"metadata: expected '\"key\":' near token {self.pos}")
                obj[key] = self.value(depth + 1)
                if self.peek() == ("p", ","):
                    self.take()
            self.take()
            return obj
        items = []
        while self.peek() != ("p", "}"):
            items.append(self.value(depth + 1))
            if self.peek() == ("p", ","):
                self.take()
        self.take()
        return items


def parse_text(text: str) -> Any:
    """Parse Taichi text-serializer output into dicts, lists and scalars.

    Raises:
        CorruptedDataError: the text is not a well-formed document, or nests deeper than MAX_DEPTH.
    """
    parser = _TextParser(_tokens(text))
    result = parser.value(0)
    if parser.pos != len(parser.tokens):
        raise CorruptedDataError("metadata: trailing data after the document")
    return result


# ---------------------------------------------------------------------------
# Kernels and their arguments


def _llvm_type(t: Any, depth: int = 0) -> dict:
    if depth > 50 or not isinstance(t, dict):
        raise CorruptedDataError("metadata: malformed type")
    return t


def _llvm_arg(index: int, a: dict) -> ArgInfo:
    ptr = _llvm_type((a.get("dt_") or {}).get("ptr_"))
    kind_code = ptr.get("type_kind")
    content = ptr.get("content") or {}
    ptype = PTYPE_KINDS.get(int(a.get("ptype", 0)), "unknown")
    elem_shape = tuple(int(d) for d in a.get("element_shape") or ())
    if ptype == "ndarray" and kind_code == TYPE_STRUCT:
        return _llvm_ndarray(index, a, content, elem_shape)
    if ptype == "scalar" and kind_code == TYPE_PRIMITIVE:
        return ArgInfo(index, None, "scalar", _data_type(content.get("type")))
    if ptype == "scalar" and kind_code == TYPE_STRUCT:  # a vector/matrix by value: a struct of scalars
        length, dtype = _struct_scalars(ptr)
        return ArgInfo(index, None, "tensor", dtype, 0, (), length)
    return ArgInfo(index, None, ptype, None, int(a.get("total_dim") or 0), elem_shape)


def _llvm_ndarray(index: int, a: dict, content: dict, elem_shape: tuple[int, ...]) -> ArgInfo:
    """An ndarray argument, from its entry ``a`` and its struct's ``content`` (shape, data pointer, gradient)."""
    members = {e.get("name"): e.get("type") for e in content.get("elements_") or [] if isinstance(e, dict)}
    if "total_dim" in a:  # array dims + element dims (the shape struct has a dim_0 even for a 0-D array)
        ndim = int(a["total_dim"]) - len(elem_shape)
    else:
        shape = _llvm_type(members.get("shape"))
        ndim = len((shape.get("content") or {}).get("elements_") or [])
    pointee = _llvm_type(((_llvm_type(members.get("data_ptr")).get("content")) or {}).get("pointee_"))
    primitive = pointee.get("type_kind") == TYPE_PRIMITIVE
    dtype = _data_type((pointee.get("content") or {}).get("type")) if primitive else None
    return ArgInfo(index, None, "ndarray", dtype, ndim, elem_shape, needs_grad="grad_ptr" in members)


def is_reverse(entry: dict) -> bool:
    """Whether a kernel's metadata entry is a reverse-mode (autodiff) kernel's: Taichi names its tasks so."""
    return any("_reverse_grad_" in str(t.get("name")) for t in entry["compiled_data"]["tasks"])


#: Why a reverse-mode kernel is not launched through libtaichi_c_api.
REVERSE = ("a reverse-mode (autodiff) kernel: libtaichi_c_api cannot hand it its gradient arrays (the C-API's "
           "TiNdArray has no gradient field; a launch crashed); taichi_aot's own x64 and CUDA launches run it, its "
           "gradients after its arguments, and as its primal's grad(...)")


def _llvm_kernel(name: str, k: Any) -> KernelInfo:
    """One kernel's record of an LLVM module's metadata: its arguments in order, reverse-mode or not, returning."""
    args = []
    try:
        for entry in k.get("args") or []:
            index = int(entry[0][0])
            args.append(_llvm_arg(index, entry[1]))
        reverse = is_reverse(k)
        returns = bool(k.get("ret_size") or k.get("rets"))
    except (KeyError, TypeError, ValueError, IndexError, AttributeError, OverflowError):
        raise CorruptedDataError(f"metadata: malformed arguments of kernel {name!r}") from None
    return KernelInfo(name, sorted(args, key=lambda a: a.index), REVERSE if reverse else "", reverse=reverse,
                      returns=returns)


def _llvm(doc: Any) -> ModuleInfo:
    cache = doc.get("cache") if isinstance(doc, dict) else None
    if not isinstance(cache, dict):
        raise CorruptedDataError("metadata: no 'cache' section (not an LLVM module)")
    version = cache.get("version")
    info = ModuleInfo("llvm", tuple(version) if isinstance(version, list) else None)
    kernels = cache.get("kernels") or {}
    if not isinstance(kernels, dict):
        raise CorruptedDataError("metadata: 'kernels' is not a mapping")
    for name, k in kernels.items():
        info.kernels[name] = _llvm_kernel(name, k)
    fields = cache.get("fields")
    if isinstance(fields, dict) and fields:  # {tree: its root size and SNodes}: allocated on each load
        try:
            size = sum(int(tree["root_size"]) for tree in fields.values())
        except (KeyError, TypeError, ValueError):
            raise CorruptedDataError("metadata: malformed fields") from None
        info.fields = FieldLayout(size, repr(sorted(fields.items())), True)
    return info


# ---------------------------------------------------------------------------
# graphs.tcb: Taichi's binary serializer (read by tcb.decode)


def _llvm_graphs(data: bytes) -> dict[str, GraphInfo]:
    out = {}
    for name, g in decode(GRAPHS, data, "graphs.tcb").items():
        out[name] = _graph(name, [(d["kernel_name"], [_graph_arg(0, a["name"], a["tag"], a["dtype_id"], a["field_dim"],
                                                                  a["element_shape"], a["num_channels"])
                                                       for a in d["symbolic_args"]]) for d in g["dispatches"]])
    return out


# ---------------------------------------------------------------------------
# Which arch

_TRIPLE_ARCHS = (("x86_64", Arch.X64), ("aarch64", Arch.ARM64), ("arm64", Arch.ARM64), ("nvptx", Arch.CUDA))


def _llvm_arch(source: _Source) -> Arch | None:
    """The arch of an LLVM module, from the target triple of its LLVM IR."""
    for name in source.names():
        if name.endswith(".ll"):
            triple = llvm_ir.triple(source.read(name, 64 << 10) or b"")
            if triple is not None:
                for prefix, arch in _TRIPLE_ARCHS:
                    if triple.startswith(prefix):
                        return arch
            return None
    return None


# A CPU module's parallel loops hand their body to the runtime's thread pool as
# ``parallel_for(pool, splits, threads, context, task)``, both counts constants of the compiled code: Taichi
# fixes them when it compiles (``cpu_max_num_threads``, which defaults to the building machine's core count
# and is clamped by it), and nothing at run time changes them.
def _cpu_threads(source: _Source) -> int | None:
    """How many threads the kernels of a CPU module run on at most (1 when none has a parallel loop); None
    when the module is no CPU module."""
    if _llvm_arch(source) not in (Arch.X64, Arch.ARM64):
        return None
    threads = 1
    for name in source.names():
        if name.endswith(".ll"):
            threads = max(threads, *llvm_ir.built_threads(source.read(name) or b""), 1)
    return threads
