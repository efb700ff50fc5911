"""The gfx format (Vulkan, Metal, OpenGL): ``metadata.json`` and ``graphs.json`` are JSON.

Storage-texture formats are not in the JSON; they are read from the SPIR-V of the tasks that bind
them, and every task's SPIR-V is checked on the way, since a damaged shader crashes drivers at launch.
"""

from __future__ import annotations

import hashlib
import re
import struct
from dataclasses import replace
from typing import TYPE_CHECKING, Any, NamedTuple

from ..enums import Access, Format
from ..errors import CorruptedDataError
from . import spirv, spirv_rules
from .model import (
    GFX_COMPOUND_DTYPE,
    GFX_EXT_ARR,
    PTYPE_KINDS,
    ArgInfo,
    GfxCode,
    GraphInfo,
    KernelInfo,
    ModuleInfo,
    _data_type,
    _graph,
    _graph_arg,
    _struct_scalars,
)

if TYPE_CHECKING:
    from .source import _Source

_TEXTURES = ("texture", "rw_texture")  # the argument kinds a texture binding names
_MAX_ID_BOUND = 1 << 22  # SPIR-V's own limit on ids (the spec's universal limit)
_TASK_FILE = re.compile(r"(.+)_c\d+_\d+_\d+_t\d+\.spv$")  # a task's file: <kernel>_c<n>_<m>_<i>_t<j>.spv
_KEEP_SHADERS = 1024  # how many shaders that passed are kept (by digest, a small record each); more start afresh


#: What Taichi 1.7.4 records as the threads of a loop over a range known only at launch (its
#: kMaxNumThreadsGridStrideLoop): the loop strides over the threads dispatched, so any count of at least one gives the
#: same result.
MODULE_GRID = 131072
#: The most workgroups of one dispatch every Vulkan device takes (maxComputeWorkGroupCount's least).
MAX_GROUPS = 65535


def widened_total(task: dict, threads: int) -> int | None:
    """The one rule of a loop's grid, for every launch path: the threads a task dispatches where the device wants
    ``threads`` for a loop over a range known only at launch (a range-for whose end is not constant, recorded with
    MODULE_GRID threads as Taichi writes it), within the workgroups every device takes; None where the task is no
    such loop (its threads stay as recorded)."""
    loop = task.get("range_for_attribs")
    group = task.get("advisory_num_threads_per_group")
    if (task.get("task_type") == 1 and isinstance(loop, dict) and not loop.get("const_end", True)
            and task.get("advisory_total_num_threads") == MODULE_GRID and type(group) is int and group > 0):
        return min(threads, MAX_GROUPS * group)
    return None


def plan_entry(kernel: dict) -> dict:
    """A gfx kernel's argument and result layout (its metadata.json entry's) as the plan's reader
    (:func:`.layout.arguments`) reads an LLVM kernel's."""
    ctx = kernel["ctx_attribs"]
    return {"args": [[a["key"], a["value"]] for a in ctx.get("arg_attribs_vec_") or []],
            "args_type": ctx.get("args_type_"), "args_size": ctx.get("args_bytes_", 0),
            "ret_type": ctx.get("rets_type_"), "ret_size": ctx.get("rets_bytes_", 0),
            "rets": ctx.get("ret_attribs_vec_") or []}


def _gfx(meta: dict, tasks: _Tasks) -> ModuleInfo:
    """Kernels of gfx metadata; ``tasks`` what their tasks' SPIR-V says (storage-texture formats, kernels
    drivers cannot run)."""
    info = ModuleInfo("gfx", None)
    for cap in meta.get("required_caps") or []:
        if isinstance(cap, dict) and isinstance(cap.get("key"), str):
            info.required_caps[cap["key"]] = cap.get("value")
    for k in meta.get("kernels") or []:
        if not isinstance(k, dict) or not isinstance(k.get("name"), str):
            raise CorruptedDataError("metadata: a kernel without a name")
        info.kernels[k["name"]] = _gfx_kernel(k, tasks)
    info.gfx = GfxCode({k["name"]: k for k in meta["kernels"]}, tasks.spirv)
    return info


def _gfx_kernel(k: dict, tasks: _Tasks) -> KernelInfo:
    """One kernel of gfx metadata (``k``, named), its arguments in index order."""
    args = []
    ctx = k.get("ctx_attribs") or {}
    arg_types = {}  # the argument layout's entries: arg_<index> -> its type
    for e in ((ctx.get("args_type_") or {}).get("content") or {}).get("elements_") or []:
        if isinstance(e, dict) and isinstance(e.get("name"), str):
            arg_types[e["name"]] = e.get("type")
    access = _arr_access(ctx.get("arr_access"), k["name"])
    for entry in ctx.get("arg_attribs_vec_") or []:
        try:
            args.append(_gfx_arg(k["name"], entry, arg_types, access, tasks.formats))
        except (KeyError, TypeError, ValueError, IndexError):
            raise CorruptedDataError(f"metadata: malformed argument of kernel {k['name']!r}") from None
    returns = bool(ctx.get("rets_bytes_") or ctx.get("ret_attribs_vec_"))
    return KernelInfo(k["name"], sorted(args, key=lambda a: a.index), tasks.unsupported.get(k["name"], ""),
                      software=tasks.software.get(k["name"], ""), returns=returns)


def _gfx_arg(kernel: str, entry: dict, arg_types: dict, access: dict[int, Access],
             formats: dict[tuple[str, int], Format]) -> ArgInfo:
    """One argument of ``kernel`` from its ``arg_attribs_vec_`` entry (a vector's or matrix's length from its
    layout, a storage texture's format from the SPIR-V, an ndarray's access from ``arr_access``)."""
    index = int(entry["key"][0])
    a = entry["value"]
    kind = PTYPE_KINDS.get(int(a.get("ptype", 0)), "unknown")
    dtype_code = a.get("dtype")
    if kind == "scalar" and dtype_code == GFX_COMPOUND_DTYPE:
        kind = "tensor"
    name = a.get("name")
    if isinstance(name, str) and name.startswith("_") and kind != "scalar":
        name = name[1:]  # Taichi prefixes array and texture argument names with '_'
    dtype, length = _data_type(dtype_code), None
    if kind == "tensor":
        length, dtype = _struct_scalars(arg_types.get(f"arg_{index}"))
    return ArgInfo(index, name if isinstance(name, str) else None, kind, dtype, int(a.get("field_dim") or 0),
                   tuple(int(d) for d in a.get("element_shape") or ()), length, formats.get((kernel, index)),
                   access.get(index) if kind == "ndarray" else None)


def _arr_access(entries: Any, kernel: str) -> dict[int, Access]:
    """{argument index: access} of a kernel's ``arr_access`` list (Taichi's ExternalPtrAccess bits)."""
    out = {}
    for e in entries or []:
        try:
            key, value = e["key"], e["value"]
            index = key[0] if isinstance(key, list) else key
            if not isinstance(index, int) or not isinstance(value, int) or not 0 <= value <= 3:
                raise TypeError
        except (KeyError, TypeError, IndexError):
            raise CorruptedDataError(f"metadata: malformed arr_access of kernel {kernel!r}") from None
        out[index] = Access(value)
    return out


def _gfx_graphs(doc: Any, kernels: dict[str, KernelInfo] | None = None) -> dict[str, GraphInfo]:
    """The graphs of ``graphs.json``; a storage texture's format comes from the dispatched kernel's SPIR-V."""
    kernels = kernels or {}
    if not isinstance(doc, list):
        raise CorruptedDataError("graphs.json: expected a list of graphs")
    out = {}
    try:
        for entry in doc:
            dispatches = []
            for d in entry["value"]["dispatches"]:
                args = [_graph_arg(0, a.get("name"), a.get("tag"), a.get("dtype_id"), a.get("field_dim"),
                                   a.get("element_shape"), a.get("num_channels") or 0)
                        for a in d.get("symbolic_args") or []]
                kernel = kernels.get(str(d["kernel_name"]))
                if kernel is not None and len(kernel.args) == len(args):
                    args = [replace(a, format=k.format) if a.kind == "rw_texture" else a
                            for a, k in zip(args, kernel.args)]
                dispatches.append((str(d["kernel_name"]), args))
            name = entry["key"]
            if not isinstance(name, str):
                raise TypeError
            out[name] = _graph(name, dispatches)
    except (KeyError, TypeError, ValueError, AttributeError):
        raise CorruptedDataError("graphs.json: malformed graph") from None
    return out


# ---------------------------------------------------------------------------
# Storage-texture formats, from the SPIR-V of the tasks that bind them

_SPIRV_FORMATS = (
    None, "RGBA32F", "RGBA16F", "R32F", "RGBA8", None, "RG32F", "RG16F", None, "R16F", "RGBA16", None, "RG16",
    "RG8", "R16", "R8", None, None, None, None, None, "RGBA32I", "RGBA16I", "RGBA8I", "R32I", "RG32I", "RG16I",
    "RG8I", "R16I", "R8I", "RGBA32U", "RGBA16U", "RGBA8U", "R32U", None, "RG32U", "RG16U", "RG8U", "R16U", "R8U",
)  # SPIR-V ImageFormat codes (the spec's order) -> TiFormat names


class _Shader(NamedTuple):
    """What a task's SPIR-V declares that its metadata must agree with."""

    formats: dict[int, Format]  # {binding: format} of its storage images
    bindings: frozenset[int]  # every binding it decorates
    local_size: tuple[int, ...] | None  # its work group (WorkgroupSize, else LocalSize)
    unsupported: str  # why drivers cannot run it though it is well formed, or ""
    software: str  # why software rasterizers (lavapipe) cannot run it though GPUs' drivers can, or ""


_SHADERS: dict[bytes, _Shader] = {}  # SPIR-V that passed (by digest): what it declares


def _spirv_shader(code: bytes, name: str = "a task's SPIR-V") -> _Shader:
    """The bindings, storage-image formats and work-group size a SPIR-V module declares.

    Also checks the module, since a damaged shader crashes drivers at launch: the magic number, every
    instruction within the stream, then SPIRV-Tools' validator and the drivers' rules (:func:`.spirv.check`).
    What a module that passed declares is kept by its digest, so loading it again reads it no more.
    """
    digest = hashlib.blake2b(code, digest_size=16).digest()
    shader = _SHADERS.get(digest)
    if shader is None:
        shader = _read_shader(code, name)
        if len(_SHADERS) >= _KEEP_SHADERS:
            _SHADERS.clear()
        _SHADERS[digest] = shader
    return shader


def forget_shaders() -> None:
    """Forget which SPIR-V passed the checks, so that the next load of it checks it again (the bench measures a
    load with validation so)."""
    _SHADERS.clear()


def _read_shader(code: bytes, name: str) -> _Shader:
    words = _spirv_words(code, name)
    insts = spirv.instructions(words, name)
    found: dict[str, dict[int, Any]] = {"bindings": {}, "images": {}, "pointers": {}, "variables": {}}
    for op, w in insts:
        _note(op, w, found)
    unsupported = spirv.check(words, insts, name)
    bindings = found["bindings"]
    return _Shader(_image_formats(bindings, found["images"], found["pointers"], found["variables"]),
                   frozenset(bindings.values()), spirv_rules.work_group(insts), unsupported,
                   spirv_rules.software(insts))


def _note(op: int, w: tuple[int, ...], found: dict[str, dict[int, Any]]) -> None:
    """Keep what one instruction declares that the checks need: bindings, and the image types, pointers
    and variables that lead from a binding to an image format."""
    if op == 71 and len(w) >= 3 and w[1] == 33:  # OpDecorate ... Binding
        found["bindings"][w[0]] = w[2]
    elif op == 25 and len(w) >= 8:  # OpTypeImage
        found["images"][w[0]] = w[7]
    elif op == 32 and len(w) >= 3:  # OpTypePointer
        found["pointers"][w[0]] = w[2]
    elif op == 59 and len(w) >= 2:  # OpVariable
        found["variables"][w[1]] = w[0]


def _image_formats(bindings: dict[int, int], images: dict[int, int], pointers: dict[int, int],
                   variables: dict[int, int]) -> dict[int, Format]:
    """{binding: format} of the storage images among a shader's bound variables."""
    out = {}
    for var, binding in bindings.items():
        image_format = images.get(pointers.get(variables.get(var, -1), -1))
        fmt = _SPIRV_FORMATS[image_format] if image_format is not None and image_format < len(_SPIRV_FORMATS) else None
        if fmt is not None:
            out[binding] = Format[fmt]
    return out


def _spirv_words(code: bytes, name: str) -> tuple[int, ...]:
    """The module's words, after its header's checks: the magic number, whole words, an id bound SPIR-V allows."""
    if len(code) < 20 or len(code) % 4 or struct.unpack_from("<I", code)[0] != 0x07230203:
        raise CorruptedDataError(f"{name} is not a SPIR-V module")
    words = struct.unpack(f"<{len(code) // 4}I", code)
    if not 0 < words[3] <= _MAX_ID_BOUND:
        raise CorruptedDataError(f"{name}: an id bound of {words[3]}")
    return words


def _arg_kinds(kernel: dict) -> dict[int, str]:
    """{argument index: kind} of a kernel's arguments (PTYPE_KINDS' names), as its metadata lists them."""
    return {e["key"][0]: PTYPE_KINDS[e["value"]["ptype"]] for e in kernel["ctx_attribs"]["arg_attribs_vec_"]}


def _check_binds(task: dict, shader: _Shader, args: dict[int, str], what: str) -> None:
    """A task's buffer and texture bindings (of the shape :mod:`.schema` checked): each once, each naming an
    argument of the right kind where it names one, and exactly the bindings its SPIR-V declares (a buffer bound
    to a slot the shader never reads, or a slot left empty, computes on the wrong memory)."""
    seen: set[int] = set()
    for b in task["buffer_binds"]:
        root = b["buffer"]["root_id"]
        if b["buffer"]["type"] == GFX_EXT_ARR and (not root or args.get(root[0]) != "ndarray"):
            raise CorruptedDataError(f"{what}: binding {b['binding']} names no ndarray argument ({root})")
        _bind_once(seen, b["binding"], what)
    for b in task["texture_binds"]:
        arg_id = b["arg_id"]
        if args.get(arg_id[0] if isinstance(arg_id, list) else arg_id) not in _TEXTURES:
            raise CorruptedDataError(f"{what}: a texture binding that names no texture argument")
        _bind_once(seen, b["binding"], what)
    if seen != shader.bindings:
        raise CorruptedDataError(f"{what}: its metadata binds {sorted(seen)}, its SPIR-V declares "
                                 f"{sorted(shader.bindings)}")


def _bind_once(seen: set[int], binding: int, what: str) -> None:
    if binding in seen:
        raise CorruptedDataError(f"{what}: binding {binding} is bound twice")
    seen.add(binding)


def _check_task(task: dict, kernel: dict, names: set[str], source: _Source) -> tuple[_Shader, bytes]:
    """One task of a kernel (of the shape :mod:`.schema` checked) against its metadata's invariants and its
    SPIR-V; the shader it declares, and its SPIR-V."""
    what = f"metadata: task {task['name']!r} of kernel {kernel['name']!r}"
    if task["name"] in names:
        raise CorruptedDataError(f"{what} is listed twice")
    names.add(task["name"])
    group = task["advisory_num_threads_per_group"]
    file = task["name"] + ".spv"
    code = source.read(file)
    if code is None:
        raise CorruptedDataError(f"module file {file} (kernel {kernel['name']!r}) is missing")
    shader = _spirv_shader(code, f"{file} (kernel {kernel['name']!r}, task {task['name']!r})")
    size = shader.local_size
    if size is not None and size[0] * size[1] * size[2] != group:
        raise CorruptedDataError(f"{what}: {group} threads per group, its SPIR-V's work group is {size}")
    _check_binds(task, shader, _arg_kinds(kernel), what)
    return shader, code


class _Tasks(NamedTuple):
    """What a module's tasks' SPIR-V says about their kernels, and the SPIR-V itself."""

    formats: dict[tuple[str, int], Format]  # {(kernel, argument index): format} of storage textures
    unsupported: dict[str, str]  # {kernel: why drivers cannot run it}
    software: dict[str, str]  # {kernel: why software rasterizers cannot run it}
    spirv: dict[str, bytes]  # {task: its SPIR-V}


def _check_tasks(meta: dict, source: _Source) -> _Tasks:
    """Every task checked (its metadata's invariants, its SPIR-V's structure, the two against each other), and
    what their SPIR-V says about their kernels. ``meta`` has the shape :mod:`.schema` checked."""
    out: dict[tuple[str, int], Format] = {}
    unsupported: dict[str, str] = {}
    software: dict[str, str] = {}
    spirv: dict[str, bytes] = {}
    _check_no_orphans(meta, source)
    for k in meta["kernels"]:
        names: set[str] = set()
        for task in k["tasks_attribs"]:
            shader, spirv[task["name"]] = _check_task(task, k, names, source)
            if shader.unsupported:
                unsupported.setdefault(k["name"], f"task {task['name']!r}: {shader.unsupported}")
            if shader.software:
                software.setdefault(k["name"], f"task {task['name']!r}: {shader.software}")
            for b in task["texture_binds"]:
                index = b["arg_id"][0] if isinstance(b["arg_id"], list) else b["arg_id"]
                if b["is_storage"] and b["binding"] in shader.formats:
                    out[(k["name"], index)] = shader.formats[b["binding"]]
    return _Tasks(out, unsupported, software, spirv)


def _check_no_orphans(meta: dict, source: _Source) -> None:
    """Every task file of a described kernel is a task the metadata lists: a described kernel whose tasks were
    taken out of the metadata would run nothing (damage)."""
    named = {t["name"] for k in meta["kernels"] for t in k["tasks_attribs"]}
    described = {k["name"] for k in meta["kernels"]}
    orphans = sorted(n for n in source.names() if n.endswith(".spv") and n[:-4] not in named
                     and (m := _TASK_FILE.match(n)) and m.group(1) in described)
    if orphans:
        raise CorruptedDataError(f"metadata: no task runs {', '.join(orphans[:3])}")
