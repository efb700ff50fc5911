"""Pure-Python reader of AOT module metadata: kernel signatures from both formats Taichi 1.7.4 writes.

* gfx backends (Vulkan, Metal, OpenGL): ``metadata.json`` and ``graphs.json`` are JSON;
* LLVM backends (x64, CUDA): ``metadata.json`` is Taichi's *text serializer* output, which is
  JSON-like but not JSON (``{1, 7, 4}`` tuples, ``ptr {...}`` tagged values, missing commas).
  :func:`parse_text` reads it with a small tokenizer and a depth-limited parser.

No Taichi import, no ``eval``; hostile or truncated input raises CorruptedDataError.
"""

from __future__ import annotations

import io
import json
import os
import re
import zipfile
from dataclasses import dataclass, field
from typing import Any

from .enums import DataType
from .errors import CorruptedDataError

MAX_DEPTH = 200
MAX_METADATA_BYTES = 256 << 20

#: ParameterType codes in the metadata (``ptype``).
PTYPE_KINDS = {0: "scalar", 1: "ndarray", 2: "texture", 3: "rw_texture"}
_UNKNOWN_DTYPE = 13  # a compound (vector/matrix) scalar argument in gfx metadata


@dataclass(frozen=True)
class ArgInfo:
    """One kernel argument as the module records it."""

    index: int
    name: str | None  # None where the format records no name (LLVM)
    kind: str  # "scalar", "ndarray", "texture", "rw_texture", "tensor"
    dtype: DataType | None  # element type; None when not recorded (gfx vector scalars)
    ndim: int = 0  # ndarray dimensions (textures: their dimension count)
    elem_shape: tuple[int, ...] = ()
    length: int | None = None  # tensor (vector/matrix by value) element count, when recorded

    def describe(self) -> str:
        dt = self.dtype.name.lower() if self.dtype is not None else "?"
        if self.kind == "ndarray":
            elem = f", element shape {self.elem_shape}" if self.elem_shape else ""
            return f"{dt} ndarray with ndim {self.ndim}{elem}"
        if self.kind == "tensor":
            return f"{dt} vector/matrix" + (f" of {self.length} elements" if self.length else "")
        if self.kind in ("texture", "rw_texture"):
            return f"{self.ndim}-D {self.kind.replace('_', '-')}"
        return f"{dt} scalar"


@dataclass
class KernelInfo:
    name: str
    args: list[ArgInfo] = field(default_factory=list)


@dataclass
class ModuleInfo:
    """What a module's metadata says."""

    format: str  # "gfx" or "llvm"
    version: tuple[int, ...] | None
    kernels: dict[str, KernelInfo] = field(default_factory=dict)
    graph_names: list[str] = field(default_factory=list)
    required_caps: dict[str, int] = field(default_factory=dict)


# ---------------------------------------------------------------------------
# Taichi's text serializer

_TOKEN = re.compile(
    r'\s*(?:(?P<str>"(?:[^"\\]|\\.)*")|(?P<num>-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)|(?P<punct>[{}\[\],:])'
    r"|(?P<ident>[A-Za-z_]\w*))"
)


def _tokens(text: str) -> list[tuple[str, Any]]:
    out = []
    pos = 0
    end = len(text)
    while pos < end:
        m = _TOKEN.match(text, pos)
        if m is None or m.end() == pos:
            if text[pos:].strip() == "":
                break
            raise CorruptedDataError(f"metadata: unexpected character {text[pos]!r} at offset {pos}", -2)
        pos = m.end()
        if m.group("str") is not None:
            try:
                out.append(("v", json.loads(m.group("str"))))
            except ValueError:
                raise CorruptedDataError(f"metadata: bad string at offset {m.start()}", -2) from None
        elif m.group("num") is not None:
            s = m.group("num")
            out.append(("v", float(s) if any(c in s for c in ".eE") else int(s)))
        elif m.group("punct") is not None:
            out.append(("p", m.group("punct")))
        elif m.group("ident") is not None:
            out.append(("i", m.group("ident")))
    return out


def parse_text(text: str) -> Any:
    """Parse Taichi text-serializer output into dicts, lists and scalars."""
    tokens = _tokens(text)
    pos = 0

    def peek(k=0):
        return tokens[pos + k] if pos + k < len(tokens) else ("eof", None)

    def take():
        nonlocal pos
        if pos >= len(tokens):
            raise CorruptedDataError("metadata: truncated", -2)
        pos += 1
        return tokens[pos - 1]

    def value(depth: int) -> Any:
        if depth > MAX_DEPTH:
            raise CorruptedDataError(f"metadata: nested deeper than {MAX_DEPTH}", -2)
        kind, v = take()
        if kind == "v":
            return v
        if kind == "i":
            if v == "true":
                return True
            if v == "false":
                return False
            if v == "null":
                return None
            return value(depth + 1)  # a tag such as ``ptr`` before the value
        if kind == "p" and v == "[":
            items = []
            while peek() != ("p", "]"):
                items.append(value(depth + 1))
                if peek() == ("p", ","):
                    take()
                elif peek() != ("p", "]"):
                    raise CorruptedDataError(f"metadata: expected ',' or ']' near token {pos}", -2)
            take()
            return items
        if kind == "p" and v == "{":
            if peek() == ("p", "}"):
                take()
                return {}
            if peek()[0] == "v" and isinstance(peek()[1], str) and peek(1) == ("p", ":"):
                obj = {}
                while peek() != ("p", "}"):
                    k_kind, key = take()
                    if k_kind != "v" or not isinstance(key, str) or take() != ("p", ":"):
                        raise CorruptedDataError(f"metadata: expected '\"key\":' near token {pos}", -2)
                    obj[key] = value(depth + 1)
                    if peek() == ("p", ","):
                        take()
                take()
                return obj
            items = []  # a brace list such as {1, 7, 4}
            while peek() != ("p", "}"):
                items.append(value(depth + 1))
                if peek() == ("p", ","):
                    take()
            take()
            return items
        raise CorruptedDataError(f"metadata: unexpected {v!r} near token {pos}", -2)

    result = value(0)
    if pos != len(tokens):
        raise CorruptedDataError("metadata: trailing data after the document", -2)
    return result


# ---------------------------------------------------------------------------
# Reading modules


def _files(source: str | bytes | os.PathLike) -> dict[str, bytes]:
    """The metadata files of a module folder, .tcm path or .tcm bytes."""
    wanted = ("metadata.json", "graphs.json", "__content__", "__version__")
    if isinstance(source, (bytes, bytearray, memoryview)):
        return _zip_files(bytes(source), wanted)
    path = os.fsdecode(os.fspath(source))
    if os.path.isdir(path):
        out = {}
        for name in wanted:
            p = os.path.join(path, name)
            if os.path.isfile(p):
                if os.path.getsize(p) > MAX_METADATA_BYTES:
                    raise CorruptedDataError(f"{p} is too large to be metadata", -2)
                with open(p, "rb") as f:
                    out[name] = f.read()
        return out
    if not os.path.exists(path):
        raise CorruptedDataError(f"no module at {path!r}", -2)
    with open(path, "rb") as f:
        return _zip_files(f.read(), wanted)


def _zip_files(data: bytes, wanted) -> dict[str, bytes]:
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as zf:
            out = {}
            for info in zf.infolist():
                if info.filename in wanted:
                    if info.file_size > MAX_METADATA_BYTES:
                        raise CorruptedDataError(f"{info.filename} is too large to be metadata", -2)
                    out[info.filename] = zf.read(info)
            return out
    except (zipfile.BadZipFile, OSError, ValueError, EOFError, RuntimeError) as e:
        raise CorruptedDataError(f"not a readable .tcm archive: {e}", -2) from None


def _data_type(code: Any) -> DataType | None:
    return DataType(code) if isinstance(code, int) and code in DataType._value2member_map_ and code < 12 else None


def _struct_scalars(t: Any) -> tuple[int | None, DataType | None]:
    """(element count, dtype) of a vector/matrix passed by value: a struct of scalars."""
    if not isinstance(t, dict) or t.get("type_kind") != 3:
        return None, None
    elements = (t.get("content") or {}).get("elements_") or []
    types = set()
    for e in elements:
        et = e.get("type") if isinstance(e, dict) else None
        if not isinstance(et, dict) or et.get("type_kind") != 0:
            return None, None
        types.add((et.get("content") or {}).get("type"))
    return len(elements), (_data_type(types.pop()) if len(types) == 1 else None)


def _gfx(meta: dict, graphs: Any) -> ModuleInfo:
    info = ModuleInfo("gfx", None)
    for cap in meta.get("required_caps") or []:
        if isinstance(cap, dict) and isinstance(cap.get("key"), str):
            info.required_caps[cap["key"]] = cap.get("value")
    for k in meta.get("kernels") or []:
        if not isinstance(k, dict) or not isinstance(k.get("name"), str):
            raise CorruptedDataError("metadata: a kernel without a name", -2)
        args = []
        ctx = k.get("ctx_attribs") or {}
        arg_types = {}
        for e in ((ctx.get("args_type_") or {}).get("content") or {}).get("elements_") or []:
            if isinstance(e, dict) and isinstance(e.get("name"), str):
                arg_types[e["name"]] = e.get("type")
        for entry in ctx.get("arg_attribs_vec_") or []:
            try:
                index = int(entry["key"][0])
                a = entry["value"]
                kind = PTYPE_KINDS.get(int(a.get("ptype", 0)), "unknown")
                dtype_code = a.get("dtype")
                if kind == "scalar" and dtype_code == _UNKNOWN_DTYPE:
                    kind = "tensor"
                name = a.get("name")
                if isinstance(name, str) and name.startswith("_") and kind != "scalar":
                    name = name[1:]  # Taichi prefixes array and texture argument names with '_'
                dtype, length = _data_type(dtype_code), None
                if kind == "tensor":
                    length, dtype = _struct_scalars(arg_types.get(f"arg_{index}"))
                args.append(ArgInfo(index, name if isinstance(name, str) else None, kind, dtype,
                                    int(a.get("field_dim") or 0), tuple(int(d) for d in a.get("element_shape") or ()),
                                    length))
            except (KeyError, TypeError, ValueError, IndexError):
                raise CorruptedDataError(f"metadata: malformed argument of kernel {k['name']!r}", -2) from None
        info.kernels[k["name"]] = KernelInfo(k["name"], sorted(args, key=lambda a: a.index))
    if isinstance(graphs, list):
        info.graph_names = [g["key"] for g in graphs if isinstance(g, dict) and isinstance(g.get("key"), str)]
    return info


def _llvm_type(t: Any, depth: int = 0) -> dict:
    if depth > 50 or not isinstance(t, dict):
        raise CorruptedDataError("metadata: malformed type", -2)
    return t


def _llvm_arg(index: int, a: dict) -> ArgInfo:
    ptr = _llvm_type((a.get("dt_") or {}).get("ptr_"))
    kind_code = ptr.get("type_kind")
    content = ptr.get("content") or {}
    ptype = PTYPE_KINDS.get(int(a.get("ptype", 0)), "unknown")
    elem_shape = tuple(int(d) for d in a.get("element_shape") or ())
    if ptype == "ndarray" and kind_code == 3:
        members = {e.get("name"): e.get("type") for e in content.get("elements_") or [] if isinstance(e, dict)}
        shape = _llvm_type(members.get("shape"))
        ndim = len((shape.get("content") or {}).get("elements_") or [])
        pointee = _llvm_type(((_llvm_type(members.get("data_ptr")).get("content")) or {}).get("pointee_"))
        dtype = _data_type((pointee.get("content") or {}).get("type")) if pointee.get("type_kind") == 0 else None
        return ArgInfo(index, None, "ndarray", dtype, ndim, elem_shape)
    if ptype == "scalar" and kind_code == 0:
        return ArgInfo(index, None, "scalar", _data_type(content.get("type")))
    if ptype == "scalar" and kind_code == 3:  # a vector/matrix by value: a struct of scalars
        length, dtype = _struct_scalars(ptr)
        return ArgInfo(index, None, "tensor", dtype, 0, (), length)
    return ArgInfo(index, None, ptype, None, int(a.get("total_dim") or 0), elem_shape)


def _llvm(doc: Any) -> ModuleInfo:
    cache = doc.get("cache") if isinstance(doc, dict) else None
    if not isinstance(cache, dict):
        raise CorruptedDataError("metadata: no 'cache' section (not an LLVM module)", -2)
    version = cache.get("version")
    info = ModuleInfo("llvm", tuple(version) if isinstance(version, list) else None)
    kernels = cache.get("kernels") or {}
    if not isinstance(kernels, dict):
        raise CorruptedDataError("metadata: 'kernels' is not a mapping", -2)
    for name, k in kernels.items():
        args = []
        try:
            for entry in k.get("args") or []:
                index = int(entry[0][0])
                args.append(_llvm_arg(index, entry[1]))
        except (KeyError, TypeError, ValueError, IndexError, AttributeError):
            raise CorruptedDataError(f"metadata: malformed arguments of kernel {name!r}", -2) from None
        info.kernels[name] = KernelInfo(name, sorted(args, key=lambda a: a.index))
    return info


def read_module(source: str | bytes | os.PathLike) -> ModuleInfo:
    """Read a module's metadata from a folder, a ``.tcm`` path or ``.tcm`` bytes."""
    files = _files(source)
    raw = files.get("metadata.json")
    if raw is None:
        raise CorruptedDataError("module has no metadata.json", -2)
    text = raw.decode("utf-8", "replace")
    version = None
    if "__version__" in files:
        parts = re.findall(r"\d+", files["__version__"].decode("ascii", "replace"))
        version = tuple(int(p) for p in parts[:3]) or None
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError):
        doc = None
    if isinstance(doc, dict) and isinstance(doc.get("kernels"), list):
        graphs = None
        if "graphs.json" in files:
            try:
                graphs = json.loads(files["graphs.json"].decode("utf-8", "replace"))
            except (ValueError, RecursionError):
                raise CorruptedDataError("graphs.json is not valid JSON", -2) from None
        info = _gfx(doc, graphs)
    else:
        info = _llvm(parse_text(text))
    if version is not None:
        info.version = version
    if "__content__" in files and not info.graph_names:
        info.graph_names = [line[7:] for line in files["__content__"].decode("utf-8", "replace").splitlines()
                            if line.startswith("cgraph:")]
    return info
