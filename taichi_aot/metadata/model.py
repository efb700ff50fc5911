"""What a module's metadata says, whichever format it came from: ArgInfo, KernelInfo, GraphInfo, ModuleInfo.

Also the codes both formats share (parameter and graph-argument kinds, data types, vectors passed by
value as structs of scalars) and how a graph's dispatches become its argument list.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

from ..enums import NUMPY_DTYPES, Access, Arch, DataType, Format
from ..errors import CorruptedDataError
from .llvm_ir import IrKernel
from .retarget import on_threads
from .source import ModuleFiles

#: ParameterType codes in the metadata (``ptype``).
PTYPE_KINDS = {0: "scalar", 1: "ndarray", 2: "texture", 3: "rw_texture"}
PTYPE_SCALAR, PTYPE_NDARRAY, PTYPE_TEXTURES = 0, 1, (2, 3)
#: Taichi's TypeKind codes, of the types both formats' argument layouts are made of (``type_kind``).
TYPE_PRIMITIVE, TYPE_POINTER, TYPE_TENSOR, TYPE_STRUCT, TYPE_ARGPACK = 0, 1, 2, 3, 4
#: A gfx scalar argument's dtype code when it is a vector or matrix (a struct of its elements).
GFX_COMPOUND_DTYPE = 13
#: The gfx buffer types of the fields' root buffer (root_id [its SNode tree]) and of an ndarray argument (root_id
#: [its index]).
GFX_ROOT, GFX_EXT_ARR = 0, 5
#: ArgKind codes of compute-graph arguments (``tag``).
GRAPH_KINDS = {0: "scalar", 1: "tensor", 2: "ndarray", 3: "texture", 4: "rw_texture"}


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
    access: Access | None = None  # how the kernel uses an ndarray (gfx metadata, taichi_aot.json); None: unknown
    needs_grad: bool = False  # an LLVM ndarray laid out with a gradient pointer (autodiff)
    #: Whether the kernel may write the argument (it does, or nothing records that it does not).
    may_write: bool = field(init=False, repr=False, compare=False)
    #: Whether the kernel may read the argument (it does, or nothing records that it does not).
    reads: bool = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:  # flag operations on an Access cost a microsecond: done once
        bits = 3 if self.access is None else int(self.access)
        object.__setattr__(self, "may_write", bool(bits & 2))
        object.__setattr__(self, "reads", bool(bits & 1))

    def access_word(self) -> str | None:
        """The recorded access in words ("read", "write", "read_write", "none"), None where unknown."""
        return str(self.access).lower() if self.access is not None else None

    def describe(self) -> str:
        """What the argument expects, in words, as launch errors quote it ("f32 ndarray with ndim 1")."""
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
            "access": self.access_word() if self.kind == "ndarray" else None,
        }


@dataclass
class KernelInfo:
    """A kernel: its name and its arguments in order."""

    name: str
    args: list[ArgInfo] = field(default_factory=list)
    #: why drivers cannot run it though the module is well formed (looking it up is refused), or ""
    unsupported: str = ""
    #: why software rasterizers (Mesa's lavapipe) cannot run it though GPUs' drivers can, or ""
    software: str = ""
    #: a reverse-mode (autodiff) kernel: it runs on taichi_aot's own launches only (x64: its primal's ``grad``;
    #: CUDA: the own launcher, by name too)
    reverse: bool = False
    #: it returns values (``-> ti.f32``): only taichi_aot's own launches give them (libtaichi's C-API gives none)
    returns: bool = False


@dataclass
class GraphInfo:
    """A compute graph: its named arguments (in order of first use) and the kernels it dispatches."""

    name: str
    args: list[ArgInfo] = field(default_factory=list)
    dispatches: list[str] = field(default_factory=list)
    #: each dispatch's argument names, by the dispatched kernel's argument positions
    calls: list[tuple[str | None, ...]] = field(default_factory=list)


class FieldLayout(NamedTuple):
    """The global fields (Taichi's SNode tree) a module's kernels share, as libtaichi_c_api lays them out in the
    runtime: a runtime holds one such tree, whichever module loaded it."""

    size: int  # bytes of the root buffer (LLVM: of every tree)
    fields: str  # the fields' description as the metadata gives it (names, dtypes, shapes, offsets)
    bound: bool  # whether a kernel reads or writes them

    def describe(self) -> str:
        return f"{self.size} bytes of fields" if self.size else "no fields"


@dataclass
class GfxCode:
    """A gfx module's kernels as its metadata records them and each task's SPIR-V, as the checks read them (once):
    what a launch backend makes its pipelines of, without opening a file."""

    kernels: dict[str, dict] = field(default_factory=dict)  # metadata.json's entry of each kernel, by name
    spirv: dict[str, bytes] = field(default_factory=dict)  # each task's SPIR-V, by task name

    def cas_loops(self) -> bool:
        """Whether a task has an OpAtomicCompareExchange (Taichi's loop for a float atomic the build's capabilities
        do not cover)."""
        for code in self.spirv.values():
            words = memoryview(code[: len(code) // 4 * 4]).cast("I")
            i = 5
            while i < len(words):
                if words[i] & 0xFFFF == _OP_ATOMIC_COMPARE_EXCHANGE:
                    return True
                i += max(words[i] >> 16, 1)
        return False


_OP_ATOMIC_COMPARE_EXCHANGE = 230


@dataclass
class LlvmCode:
    """An LLVM module's kernels as its metadata records them and each kernel's IR as the checks read it (once): what
    the own x64 and CUDA launches lay out, check and compile, and what the libtaichi load writes a private copy of,
    without opening a file."""

    kernels: dict[str, dict] = field(default_factory=dict)  # metadata.json's entry of each kernel, by name
    ir: dict[str, bytes] = field(default_factory=dict)  # each kernel's NAME.ll, where the module has one
    layouts: dict[str, str] = field(default_factory=dict)  # each kernel's argument buffer as an LLVM type (checked)
    cap: int | None = None  # the most threads its parallel loops may use (build --max-cpu-threads); None: no cap
    parsed: dict[str, IrKernel] = field(default_factory=dict)  # each kernel's IR read once (llvm_ir), by name
    metadata: bytes = b""  # metadata.json's bytes, as read
    sidecar: bytes | None = None  # taichi_aot.json's bytes, as read (None: the module has none)
    _threads: dict[tuple[str, int], IrKernel] = field(default_factory=dict, repr=False)

    def kernel(self, name: str, threads: int | None = None) -> IrKernel | None:
        """Kernel ``name``'s IR, read (None: the module has none for it); with ``threads``, a CPU module's parallel
        loops on as many chunks as a runtime of that many threads runs them on (:func:`.retarget.on_threads`)."""
        ir = self.parsed.get(name)
        if ir is None:
            raw = self.ir.get(name)
            if raw is None:
                return None
            ir = self.parsed[name] = IrKernel(raw.decode("utf-8", "replace"))
        if threads is None:
            return ir
        key = (name, threads)
        if key not in self._threads:
            text = on_threads(ir, threads, self.cap)
            self._threads[key] = ir if text is ir.text else IrKernel(text)
        return self._threads[key]

    def files(self) -> dict[str, bytes]:
        """The module's files this record holds, as metadata/ read them, by name: each kernel's IR, metadata.json and
        taichi_aot.json (what a private copy of the module is written from)."""
        out = {f"{name}.ll": raw for name, raw in self.ir.items()}
        if self.metadata:
            out["metadata.json"] = self.metadata
        if self.sidecar is not None:
            out["taichi_aot.json"] = self.sidecar
        return out

    def text(self, name: str, threads: int | None = None) -> str | None:
        """Kernel ``name``'s IR text (None: the module has none for it); ``threads`` as :meth:`kernel`'s."""
        ir = self.kernel(name, threads)
        return ir.text if ir is not None else None


@dataclass
class ModuleInfo:
    """What a module's metadata says."""

    format: str  # "gfx" or "llvm"
    version: tuple[int, ...] | None
    kernels: dict[str, KernelInfo] = field(default_factory=dict)
    graph_names: list[str] = field(default_factory=list)
    required_caps: dict[str, Any] = field(default_factory=dict)  # as recorded (ints in 1.7.4 modules)
    graphs: dict[str, GraphInfo] = field(default_factory=dict)
    arch: Arch | None = None  # the one arch the code was generated for (LLVM); None for gfx
    archs: tuple[Arch, ...] = ()  # the archs that can load the module
    internal: list[str] = field(default_factory=list)  # kernels compiled for graphs, not exported by name
    content: tuple[list[str], list[str]] | None = None  # (kernels, graphs) the module lists, when it does
    parts: tuple[str, ...] = ()  # a multi-arch module's parts (arch names); this info describes one of them
    fields: FieldLayout | None = None  # its global fields (None: an LLVM module of none)
    gfx: GfxCode | None = None  # a gfx module's kernel entries and SPIR-V (None: an LLVM module)
    llvm: LlvmCode | None = None  # an LLVM module's kernel entries and IR (None: a gfx module)
    portable: bool = False  # its taichi_aot.json says it was built portable on purpose (build --portable)
    # a module folder's files' digests as they were read (open_module(files=True)); None: not asked for, an archive
    files: ModuleFiles | None = field(default=None, repr=False, compare=False)
    sealed: bool = False  # its sidecar records the seal of the files read (files.seal): as taichi_aot build wrote them

    def exported_kernels(self) -> list[KernelInfo]:
        """The kernels the module exports by name (graph-internal copies left out)."""
        return [k for k in self.kernels.values() if k.name not in self.internal]

    def refused(self, software: bool = False) -> dict[tuple[str, str], str]:
        """{(kind, name): why} of the kernels and graphs drivers cannot run, though the module is well formed
        (``software``: those a software rasterizer's cannot, too): looking one up is refused, the others run."""

        def why_not(k: KernelInfo) -> str:
            return k.unsupported or (f"on a software rasterizer: {k.software}" if software and k.software else "")

        out = {("kernel", k.name): why_not(k) for k in self.exported_kernels() if why_not(k)}
        for g in self.graphs.values():
            why = next((why_not(self.kernels[d]) for d in g.dispatches
                        if d in self.kernels and why_not(self.kernels[d])), "")
            if why:
                out[("graph", g.name)] = why
        return out

    def to_dict(self) -> dict:
        """A JSON-ready description of the module."""
        return {
            "format": self.format,
            "arch": self.arch.name.lower() if self.arch is not None else None,
            "archs": [a.name.lower() for a in self.archs],
            "parts": list(self.parts),
            "taichi_version": ".".join(map(str, self.version)) if self.version else None,
            "required_caps": dict(self.required_caps),
            "kernels": {k.name: [a.to_dict() for a in k.args] for k in self.exported_kernels()},
            "internal_kernels": list(self.internal),
            "unsupported": {f"{kind} {name}": why for (kind, name), why in self.refused().items()},
            "graphs": {g.name: {"args": [a.to_dict() for a in g.args], "dispatches": list(g.dispatches)}
                       for g in self.graphs.values()},
        }


# ---------------------------------------------------------------------------
# Codes both formats share

# the storable data types by code; GEN and UNKNOWN are not element types
_DATA_TYPE_CODES = {int(t): t for t in NUMPY_DTYPES}


def _data_type(code: Any) -> DataType | None:
    return _DATA_TYPE_CODES.get(code) if isinstance(code, int) else None


def _struct_scalars(t: Any) -> tuple[int | None, DataType | None]:
    """(element count, dtype) of a vector/matrix passed by value: a struct of scalars."""
    if not isinstance(t, dict) or t.get("type_kind") != TYPE_STRUCT:
        return None, None
    elements = (t.get("content") or {}).get("elements_") or []
    types = set()
    for e in elements:
        et = e.get("type") if isinstance(e, dict) else None
        if not isinstance(et, dict) or et.get("type_kind") != TYPE_PRIMITIVE:
            return None, None
        types.add((et.get("content") or {}).get("type"))
    return len(elements), (_data_type(types.pop()) if len(types) == 1 else None)


# ---------------------------------------------------------------------------
# Compute graphs (graphs.json and graphs.tcb record the same fields)


def _graph_arg(index: int, name: Any, tag: Any, dtype_id: Any, field_dim: Any, elem_shape: Any,
               num_channels: Any) -> ArgInfo:
    if not isinstance(name, str) or not isinstance(tag, int) or not isinstance(field_dim, int):
        raise CorruptedDataError("graph metadata: malformed argument")
    kind = GRAPH_KINDS.get(tag, "unknown")
    shape = tuple(int(d) for d in elem_shape or ())
    if kind in ("texture", "rw_texture"):
        # Taichi 1.7.4 records a texture argument's dimensions as element_shape [2] * ndim (num_channels
        # holds its channel count, 4 for a sampled texture); the texel format is checked per kernel
        return ArgInfo(index, name, kind, None, len(shape) if 0 < len(shape) <= 3 else 0)
    length = None
    if kind == "tensor":
        length = 1
        for d in shape:
            length *= d
    return ArgInfo(index, name, kind, _data_type(dtype_id), field_dim, shape if kind == "ndarray" else (), length)


def _graph(name: str, dispatches: list[tuple[str, list[ArgInfo]]]) -> GraphInfo:
    g = GraphInfo(name)
    seen: dict[str | None, ArgInfo] = {}
    for kernel, args in dispatches:
        g.dispatches.append(kernel)
        g.calls.append(tuple(a.name for a in args))
        for a in args:
            if a.name not in seen:
                seen[a.name] = replace(a, index=len(seen))
    g.args = list(seen.values())
    return g


def graph_access(info: ModuleInfo) -> None:
    """Give each graph's ndarray arguments the union of what its dispatched kernels do with them, where every
    such kernel records it (an access already given, by ``taichi_aot.json``, is kept)."""
    for g in info.graphs.values():
        found: dict[str | None, Access | None] = {}
        for kernel_name, names in zip(g.dispatches, g.calls):
            kernel = info.kernels.get(kernel_name)
            for i, name in enumerate(names):
                access = kernel.args[i].access if kernel is not None and i < len(kernel.args) else None
                if name in found and found[name] is None:
                    continue
                found[name] = None if access is None else Access((found.get(name) or Access.NONE) | access)
        g.args = [a if a.kind != "ndarray" or a.access is not None else replace(a, access=found.get(a.name))
                  for a in g.args]
