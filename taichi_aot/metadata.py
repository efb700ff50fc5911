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
import struct
import zipfile
from zlib import error as zlib_error
from dataclasses import dataclass, field
from typing import Any

from .enums import Arch, DataType, Format
from .errors import CorruptedDataError

MAX_DEPTH = 200
MAX_METADATA_BYTES = 256 << 20

#: ParameterType codes in the metadata (``ptype``).
PTYPE_KINDS = {0: "scalar", 1: "ndarray", 2: "texture", 3: "rw_texture"}
#: ArgKind codes of compute-graph arguments (``tag``).
GRAPH_KINDS = {0: "scalar", 1: "tensor", 2: "ndarray", 3: "texture", 4: "rw_texture"}
#: Backends that load a gfx (SPIR-V) module.
GFX_ARCHS = (Arch.VULKAN, Arch.METAL, Arch.OPENGL, Arch.GLES)
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
    format: Format | None = None  # texel format a storage texture is declared with (gfx, from SPIR-V)

    def describe(self) -> str:
        dt = self.dtype.name.lower() if self.dtype is not None else "?"
        if self.kind == "ndarray":
            elem = f", element shape {self.elem_shape}" if self.elem_shape else ""
            return f"{dt} ndarray with ndim {self.ndim}{elem}"
        if self.kind == "tensor":
            return f"{dt} vector/matrix" + (f" of {self.length} elements" if self.length else "")
        if self.kind in ("texture", "rw_texture"):
            fmt = f" of format {self.format.name.lower()}" if self.format else ""
            return f"{self.ndim}-D {self.kind.replace('_', '-')}{fmt}"
        return f"{dt} scalar"

    def to_dict(self) -> dict:
        """A JSON-ready description (names of enums, lists for tuples)."""
        return {
            "index": self.index, "name": self.name, "kind": self.kind,
            "dtype": self.dtype.name.lower() if self.dtype is not None else None,
            "ndim": self.ndim, "element_shape": list(self.elem_shape), "length": self.length,
            "format": self.format.name.lower() if self.format is not None else None,
        }


@dataclass
class KernelInfo:
    name: str
    args: list[ArgInfo] = field(default_factory=list)


@dataclass
class GraphInfo:
    """A compute graph: its named arguments (in order of first use) and the kernels it dispatches."""

    name: str
    args: list[ArgInfo] = field(default_factory=list)
    dispatches: list[str] = field(default_factory=list)


@dataclass
class ModuleInfo:
    """What a module's metadata says."""

    format: str  # "gfx" or "llvm"
    version: tuple[int, ...] | None
    kernels: dict[str, KernelInfo] = field(default_factory=dict)
    graph_names: list[str] = field(default_factory=list)
    required_caps: dict[str, int] = field(default_factory=dict)
    graphs: dict[str, GraphInfo] = field(default_factory=dict)
    arch: Arch | None = None  # the one arch the code was generated for (LLVM); None for gfx
    archs: tuple[Arch, ...] = ()  # the archs that can load the module
    internal: list[str] = field(default_factory=list)  # kernels compiled for graphs, not exported by name
    content: tuple[list[str], list[str]] | None = None  # (kernels, graphs) the module lists, when it does

    def exported_kernels(self) -> list[KernelInfo]:
        """The kernels the module exports by name (graph-internal copies left out)."""
        return [k for k in self.kernels.values() if k.name not in self.internal]

    def to_dict(self) -> dict:
        """A JSON-ready description of the module."""
        return {
            "format": self.format,
            "arch": self.arch.name.lower() if self.arch is not None else None,
            "archs": [a.name.lower() for a in self.archs],
            "taichi_version": ".".join(map(str, self.version)) if self.version else None,
            "required_caps": dict(self.required_caps),
            "kernels": {k.name: [a.to_dict() for a in k.args] for k in self.exported_kernels()},
            "internal_kernels": list(self.internal),
            "graphs": {g.name: {"args": [a.to_dict() for a in g.args], "dispatches": list(g.dispatches)}
                       for g in self.graphs.values()},
        }


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


class _Source:
    """The files of a module folder, ``.tcm`` path or ``.tcm`` bytes, read on demand with a size limit."""

    def __init__(self, source: str | bytes | os.PathLike):
        self._zip: zipfile.ZipFile | None = None
        self._dir: str | None = None
        if isinstance(source, (bytes, bytearray, memoryview)):
            self._open_zip(io.BytesIO(bytes(source)))
            return
        path = os.fsdecode(os.fspath(source))
        if os.path.isdir(path):
            self._dir = path
        elif os.path.exists(path):
            self._open_zip(path)
        else:
            raise CorruptedDataError(f"no module at {path!r}", -2)

    def _open_zip(self, what) -> None:
        try:
            self._zip = zipfile.ZipFile(what)
            self._members = {i.filename: i for i in self._zip.infolist()}
        except (zipfile.BadZipFile, OSError, ValueError, EOFError, RuntimeError) as e:
            raise CorruptedDataError(f"not a readable .tcm archive: {e}", -2) from None

    def names(self) -> list[str]:
        if self._zip is not None:
            return sorted(self._members)
        return sorted(n for n in os.listdir(self._dir) if os.path.isfile(os.path.join(self._dir, n)))

    def read(self, name: str, limit: int = MAX_METADATA_BYTES) -> bytes | None:
        """The file's bytes (at most ``limit``; more is an error unless ``limit`` is a prefix read)."""
        try:
            if self._zip is not None:
                info = self._members.get(name)
                if info is None:
                    return None
                if info.file_size > MAX_METADATA_BYTES:
                    raise CorruptedDataError(f"{name} is too large to be metadata", -2)
                with self._zip.open(info) as f:
                    return f.read(limit)
            p = os.path.join(self._dir, name)
            if not os.path.isfile(p):
                return None
            if os.path.getsize(p) > MAX_METADATA_BYTES:
                raise CorruptedDataError(f"{p} is too large to be metadata", -2)
            with open(p, "rb") as f:
                return f.read(limit)
        except (zipfile.BadZipFile, OSError, ValueError, EOFError, RuntimeError, zlib_error) as e:
            raise CorruptedDataError(f"module file {name} cannot be read: {e}", -2) from None

    def close(self) -> None:
        if self._zip is not None:
            self._zip.close()


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


def _gfx(meta: dict, formats: dict[tuple[str, int], Format]) -> ModuleInfo:
    """Kernels of gfx metadata; ``formats`` gives storage-texture formats by (kernel, argument index)."""
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
                                    length, formats.get((k["name"], index))))
            except (KeyError, TypeError, ValueError, IndexError):
                raise CorruptedDataError(f"metadata: malformed argument of kernel {k['name']!r}", -2) from None
        info.kernels[k["name"]] = KernelInfo(k["name"], sorted(args, key=lambda a: a.index))
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


# ---------------------------------------------------------------------------
# Compute graphs


def _graph_arg(index: int, name: Any, tag: Any, dtype_id: Any, field_dim: Any, elem_shape: Any,
               num_channels: Any) -> ArgInfo:
    if not isinstance(name, str) or not isinstance(tag, int) or not isinstance(field_dim, int):
        raise CorruptedDataError("graph metadata: malformed argument", -2)
    kind = GRAPH_KINDS.get(tag, "unknown")
    shape = tuple(int(d) for d in elem_shape or ())
    if kind in ("texture", "rw_texture"):
        # num_channels holds the texture's dimension count; Taichi leaves it unset for other kinds
        return ArgInfo(index, name, kind, None, int(num_channels) if 0 < int(num_channels) <= 3 else 0)
    length = None
    if kind == "tensor":
        length = 1
        for d in shape:
            length *= d
    return ArgInfo(index, name, kind, _data_type(dtype_id), field_dim, shape if kind == "ndarray" else (), length)


def _graph(name: str, dispatches: list[tuple[str, list[ArgInfo]]]) -> GraphInfo:
    g = GraphInfo(name)
    seen: dict[str, ArgInfo] = {}
    for kernel, args in dispatches:
        g.dispatches.append(kernel)
        for a in args:
            if a.name not in seen:
                seen[a.name] = ArgInfo(len(seen), a.name, a.kind, a.dtype, a.ndim, a.elem_shape, a.length)
    g.args = list(seen.values())
    return g


def _gfx_graphs(doc: Any) -> dict[str, GraphInfo]:
    if not isinstance(doc, list):
        raise CorruptedDataError("graphs.json: expected a list of graphs", -2)
    out = {}
    try:
        for entry in doc:
            dispatches = []
            for d in entry["value"]["dispatches"]:
                args = [_graph_arg(0, a.get("name"), a.get("tag"), a.get("dtype_id"), a.get("field_dim"),
                                   a.get("element_shape"), a.get("num_channels") or 0)
                        for a in d.get("symbolic_args") or []]
                dispatches.append((str(d["kernel_name"]), args))
            name = entry["key"]
            if not isinstance(name, str):
                raise TypeError
            out[name] = _graph(name, dispatches)
    except (KeyError, TypeError, ValueError, AttributeError):
        raise CorruptedDataError("graphs.json: malformed graph", -2) from None
    return out


class _Binary:
    """Reader of Taichi's binary serializer: little-endian, size_t counts, length-prefixed strings."""

    def __init__(self, data: bytes):
        self.data = data
        self.pos = 0

    def _take(self, fmt: str) -> int:
        size = struct.calcsize(fmt)
        if self.pos + size > len(self.data):
            raise CorruptedDataError("graphs.tcb: truncated", -2)
        (v,) = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += size
        return v

    def u64(self) -> int:
        return self._take("<Q")

    def i32(self) -> int:
        return self._take("<i")

    def count(self, item_size: int) -> int:
        n = self.u64()
        if n * item_size > len(self.data) - self.pos:
            raise CorruptedDataError("graphs.tcb: a count larger than the file", -2)
        return n

    def str(self) -> str:
        n = self.count(1)
        raw = self.data[self.pos:self.pos + n]
        self.pos += n
        return raw.decode("utf-8", "replace")


def _llvm_graphs(data: bytes) -> dict[str, GraphInfo]:
    r = _Binary(data)
    total = r.u64()
    if total != len(data):
        raise CorruptedDataError(f"graphs.tcb: header says {total} bytes, file has {len(data)}", -2)
    out = {}
    for _ in range(r.count(9)):
        name = r.str()
        dispatches = []
        for _ in range(r.count(16)):
            kernel = r.str()
            args = []
            for _ in range(r.count(40)):
                arg_name, dtype_id, field_dim, tag = r.str(), r.i32(), r.u64(), r.i32()
                shape = [r.i32() for _ in range(r.count(4))]
                args.append(_graph_arg(0, arg_name, tag, dtype_id, field_dim, shape, r.u64()))
            dispatches.append((kernel, args))
        out[name] = _graph(name, dispatches)
    if r.pos != len(data):
        raise CorruptedDataError("graphs.tcb: trailing data", -2)
    return out


# ---------------------------------------------------------------------------
# Storage-texture formats, from the SPIR-V of the tasks that bind them

_SPIRV_FORMATS = (
    None, "RGBA32F", "RGBA16F", "R32F", "RGBA8", None, "RG32F", "RG16F", None, "R16F", "RGBA16", None, "RG16",
    "RG8", "R16", "R8", None, None, None, None, None, "RGBA32I", "RGBA16I", "RGBA8I", "R32I", "RG32I", "RG16I",
    "RG8I", "R16I", "R8I", "RGBA32U", "RGBA16U", "RGBA8U", "R32U", None, "RG32U", "RG16U", "RG8U", "R16U", "R8U",
)  # SPIR-V ImageFormat codes (the spec's order) -> TiFormat names


def _spirv_image_formats(code: bytes, name: str = "a task's SPIR-V") -> dict[int, Format]:
    """{binding: format} of the storage images a SPIR-V module declares.

    Also checks the module's structure, since a damaged shader crashes drivers at launch: the magic
    number, every instruction within the stream, result ids below the header's bound, at least one
    entry point, and functions that all end (the stream ending with OpFunctionEnd).
    """
    if len(code) < 20 or len(code) % 4 or struct.unpack_from("<I", code)[0] != 0x07230203:
        raise CorruptedDataError(f"{name} is not a SPIR-V module", -2)
    words = struct.unpack(f"<{len(code) // 4}I", code)
    bound = words[3]
    bindings, images, pointers, variables = {}, {}, {}, {}
    entry_points = functions = function_ends = 0
    last_op = None
    i = 5
    while i < len(words):
        count, op = words[i] >> 16, words[i] & 0xFFFF
        if count == 0 or i + count > len(words):
            raise CorruptedDataError(f"{name} is truncated or damaged (instruction at word {i})", -2)
        w = words[i + 1:i + count]
        if op == 71 and len(w) >= 3 and w[1] == 33:  # OpDecorate ... Binding
            bindings[w[0]] = w[2]
        elif op == 25 and len(w) >= 8:  # OpTypeImage
            images[w[0]] = w[7]
        elif op == 32 and len(w) >= 3:  # OpTypePointer
            pointers[w[0]] = w[2]
        elif op == 59 and len(w) >= 2:  # OpVariable
            variables[w[1]] = w[0]
        elif op == 15:  # OpEntryPoint
            entry_points += 1
        elif op == 54:  # OpFunction
            functions += 1
            if len(w) < 2 or w[1] >= bound:
                raise CorruptedDataError(f"{name}: a result id beyond the module's bound", -2)
        elif op == 56:  # OpFunctionEnd
            function_ends += 1
        last_op = op
        i += count
    if not entry_points or functions == 0 or functions != function_ends or last_op != 56:
        raise CorruptedDataError(f"{name} is incomplete (entry points {entry_points}, functions {functions}, "
                                 f"ends {function_ends})", -2)
    out = {}
    for var, binding in bindings.items():
        image_format = images.get(pointers.get(variables.get(var, -1), -1))
        fmt = _SPIRV_FORMATS[image_format] if image_format is not None and image_format < len(_SPIRV_FORMATS) else None
        if fmt is not None:
            out[binding] = Format[fmt]
    return out


def _texture_formats(meta: dict, source: _Source) -> dict[tuple[str, int], Format]:
    """{(kernel, argument index): format} for storage textures; every task's SPIR-V is checked."""
    out = {}
    for k in meta.get("kernels") or []:
        for task in (k.get("tasks_attribs") or []) if isinstance(k, dict) else []:
            if not isinstance(task, dict) or not isinstance(task.get("name"), str):
                raise CorruptedDataError(f"metadata: a task of kernel {k.get('name')!r} has no name", -2)
            file = task["name"] + ".spv"
            code = source.read(file)
            if code is None:
                raise CorruptedDataError(f"module file {file} (kernel {k.get('name')!r}) is missing", -2)
            formats = _spirv_image_formats(code, file)
            for b in task.get("texture_binds") or []:
                if not isinstance(b, dict) or not b.get("is_storage"):
                    continue
                arg_id = b.get("arg_id")
                index = arg_id[0] if isinstance(arg_id, list) and arg_id else arg_id
                if isinstance(index, int) and b.get("binding") in formats:
                    out[(k["name"], index)] = formats[b["binding"]]
    return out


# ---------------------------------------------------------------------------
# Which arch

_TRIPLE = re.compile(rb'target triple = "([^"]+)"')
_TRIPLE_ARCHS = (("x86_64", Arch.X64), ("aarch64", Arch.ARM64), ("arm64", Arch.ARM64), ("nvptx", Arch.CUDA))


def _llvm_arch(source: _Source) -> Arch | None:
    """The arch of an LLVM module, from the target triple of its LLVM IR."""
    for name in source.names():
        if name.endswith(".ll"):
            head = source.read(name, 64 << 10) or b""
            m = _TRIPLE.search(head)
            if m:
                triple = m.group(1).decode("ascii", "replace")
                for prefix, arch in _TRIPLE_ARCHS:
                    if triple.startswith(prefix):
                        return arch
            return None
    return None


def _content(text: str) -> tuple[list[str], list[str]]:
    """(kernel names, graph names) of a module's ``__content__`` listing."""
    kernels, graphs = [], []
    for line in text.splitlines():
        kind, _, name = line.strip().partition(":")
        if kind == "kernel" and name:
            kernels.append(name)
        elif kind == "cgraph" and name:
            graphs.append(name)
    return kernels, graphs


def read_module(source: str | bytes | os.PathLike) -> ModuleInfo:
    """Read a module's metadata from a folder, a ``.tcm`` path or ``.tcm`` bytes.

    Raises CorruptedDataError for anything that is not a well-formed Taichi 1.7 module.
    """
    src = _Source(source)
    try:
        return _read(src)
    finally:
        src.close()


def _read(src: _Source) -> ModuleInfo:
    raw = src.read("metadata.json")
    if raw is None:
        raise CorruptedDataError("module has no metadata.json", -2)
    text = raw.decode("utf-8", "replace")
    version = None
    raw_version = src.read("__version__", 64)
    if raw_version is not None:
        parts = re.findall(r"\d+", raw_version.decode("ascii", "replace"))
        version = tuple(int(p) for p in parts[:3]) or None
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError):
        doc = None
    if isinstance(doc, dict) and isinstance(doc.get("kernels"), list):
        info = _gfx(doc, _texture_formats(doc, src))
        graphs = src.read("graphs.json")
        if graphs is not None:
            try:
                info.graphs = _gfx_graphs(json.loads(graphs.decode("utf-8", "replace")))
            except (ValueError, RecursionError):
                raise CorruptedDataError("graphs.json is not valid JSON", -2) from None
        info.archs = GFX_ARCHS
    else:
        info = _llvm(parse_text(text))
        graphs = src.read("graphs.tcb")
        if graphs is not None:
            info.graphs = _llvm_graphs(graphs)
        info.arch = _llvm_arch(src)
        info.archs = (info.arch,) if info.arch is not None else ()
    if version is not None:
        info.version = version
    info.graph_names = list(info.graphs)
    content = src.read("__content__")
    if content is not None:
        listed, listed_graphs = info.content = _content(content.decode("utf-8", "replace"))
        if not info.graph_names:
            info.graph_names = list(listed_graphs)
        info.internal = [k for k in info.kernels if k not in listed]
        order = {name: i for i, name in enumerate(listed)}
        info.kernels = dict(sorted(info.kernels.items(), key=lambda kv: order.get(kv[0], len(order))))
    return info


# ---------------------------------------------------------------------------
# Structured gfx metadata that writes back the same JSON (the GfxRuntime140 convention)

_ARG_FIELDS = ("dtype", "element_shape", "field_dim", "format", "indices", "is_argpack", "is_array", "name",
               "offset_in_mem", "ptype", "stride")
_GRAPH_ARG_FIELDS = ("name", "tag", "dtype_id", "field_dim", "element_shape", "num_channels")


@dataclass
class GfxArgument:
    """One entry of a kernel's ``arg_attribs_vec_``; ``extra`` keeps fields this version does not know."""

    key: list
    name: str
    ptype: int
    dtype: int
    field_dim: int
    element_shape: list
    format: int
    is_array: bool
    is_argpack: bool
    indices: list
    offset_in_mem: int
    stride: int
    extra: dict = field(default_factory=dict)

    @classmethod
    def from_json(cls, j: dict) -> GfxArgument:
        v = dict(j["value"])
        known = {k: v.pop(k) for k in _ARG_FIELDS}
        return cls(key=list(j["key"]), extra=v, **known)

    def to_json(self) -> dict:
        value = {k: getattr(self, k) for k in _ARG_FIELDS}
        value.update(self.extra)
        return {"key": list(self.key), "value": value}


@dataclass
class GfxKernel:
    """A kernel: name, arguments, and the rest of its attributes (tasks, argument layout) as recorded."""

    name: str
    args: list[GfxArgument]
    ctx_attribs: dict  # context attributes other than the arguments
    tasks_attribs: list
    extra: dict = field(default_factory=dict)

    @classmethod
    def from_json(cls, j: dict) -> GfxKernel:
        j = dict(j)
        ctx = dict(j.pop("ctx_attribs"))
        args = [GfxArgument.from_json(a) for a in ctx.pop("arg_attribs_vec_")]
        return cls(j.pop("name"), args, ctx, j.pop("tasks_attribs"), j)

    def to_json(self) -> dict:
        ctx = {"arg_attribs_vec_": [a.to_json() for a in self.args], **self.ctx_attribs}
        return {"name": self.name, "ctx_attribs": ctx, "tasks_attribs": self.tasks_attribs, **self.extra}


@dataclass
class GfxGraphArg:
    name: str
    tag: int
    dtype_id: int
    field_dim: int
    element_shape: list
    num_channels: int


@dataclass
class GfxGraph:
    """A compute graph: ``dispatches`` is a list of (kernel name, [GfxGraphArg])."""

    name: str
    dispatches: list[tuple[str, list[GfxGraphArg]]]

    @classmethod
    def from_json(cls, j: dict) -> GfxGraph:
        dispatches = [(d["kernel_name"], [GfxGraphArg(**{k: a[k] for k in _GRAPH_ARG_FIELDS})
                                          for a in d["symbolic_args"]]) for d in j["value"]["dispatches"]]
        return cls(j["key"], dispatches)

    def to_json(self) -> dict:
        dispatches = [{"kernel_name": k, "symbolic_args": [dict(vars(a)) for a in args]}
                      for k, args in self.dispatches]
        return {"key": self.name, "value": {"dispatches": dispatches}}


class GfxRuntime140:
    """The metadata of a gfx (Vulkan/Metal/OpenGL) module, structured, and written back as the same JSON.

    ``GfxRuntime140.from_module(path_or_bytes)`` reads ``metadata.json`` and ``graphs.json`` from a folder,
    a ``.tcm`` path or ``.tcm`` bytes; ``to_metadata_json()`` / ``to_graphs_json()`` give back documents
    equal to the ones read, including edits made to the structured fields.
    """

    def __init__(self, metadata_json: Any, graphs_json: Any):
        try:
            m = dict(metadata_json)
            self.kernels: list[GfxKernel] = [GfxKernel.from_json(k) for k in m.pop("kernels")]
            self.required_caps: dict[str, Any] = {c["key"]: c["value"] for c in m.pop("required_caps", [])}
            self.extra: dict = m  # fields, root_buffer_size, ...
            self.graphs: list[GfxGraph] = [GfxGraph.from_json(g) for g in graphs_json or []]
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise CorruptedDataError(f"gfx metadata does not follow the 1.7 layout: {e!r}", -2) from None

    @staticmethod
    def from_module(source: str | bytes | os.PathLike) -> GfxRuntime140:
        src = _Source(source)
        try:
            docs = []
            for name in ("metadata.json", "graphs.json"):
                raw = src.read(name)
                if raw is None and name == "metadata.json":
                    raise CorruptedDataError("module has no metadata.json", -2)
                try:
                    docs.append(json.loads(raw) if raw is not None else [])
                except (ValueError, RecursionError):
                    raise CorruptedDataError(f"{name} is not JSON (an LLVM module?)", -2) from None
        finally:
            src.close()
        return GfxRuntime140(*docs)

    def to_metadata_json(self) -> dict:
        caps = [{"key": k, "value": v} for k, v in self.required_caps.items()]
        return {"kernels": [k.to_json() for k in self.kernels], "required_caps": caps, **self.extra}

    def to_graphs_json(self) -> list:
        return [g.to_json() for g in self.graphs]
