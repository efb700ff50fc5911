"""GfxRuntime140: the metadata of a gfx module as structured records that write back the same JSON.

Fields this version does not know are kept (``extra``) so that ``to_metadata_json()`` and
``to_graphs_json()`` give back documents equal to the ones read, edits to the known fields included.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any

from ..errors import CorruptedDataError
from .source import _Source

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
        """From one ``{"key": [...], "value": {...}}`` entry."""
        v = dict(j["value"])
        known = {k: v.pop(k) for k in _ARG_FIELDS}
        return cls(key=list(j["key"]), extra=v, **known)

    def to_json(self) -> dict:
        """The entry as read, with the known fields' current values."""
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
        """From one entry of ``metadata.json``'s ``kernels``."""
        j = dict(j)
        ctx = dict(j.pop("ctx_attribs"))
        args = [GfxArgument.from_json(a) for a in ctx.pop("arg_attribs_vec_")]
        return cls(j.pop("name"), args, ctx, j.pop("tasks_attribs"), j)

    def to_json(self) -> dict:
        """The kernel entry as read, arguments first in its context attributes."""
        ctx = {"arg_attribs_vec_": [a.to_json() for a in self.args], **self.ctx_attribs}
        return {"name": self.name, "ctx_attribs": ctx, "tasks_attribs": self.tasks_attribs, **self.extra}


@dataclass
class GfxGraphArg:
    """One symbolic argument of a graph dispatch, as ``graphs.json`` records it."""

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
        """From one entry of ``graphs.json``."""
        dispatches = [(d["kernel_name"], [GfxGraphArg(**{k: a[k] for k in _GRAPH_ARG_FIELDS})
                                          for a in d["symbolic_args"]]) for d in j["value"]["dispatches"]]
        return cls(j["key"], dispatches)

    def to_json(self) -> dict:
        """The ``graphs.json`` entry."""
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
            raise CorruptedDataError(f"gfx metadata does not follow the 1.7 layout: {e!r}") from None

    @staticmethod
    def from_module(source: str | bytes | os.PathLike) -> GfxRuntime140:
        """Read ``metadata.json`` and ``graphs.json`` from a folder, a ``.tcm`` path or ``.tcm`` bytes.

        Raises:
            CorruptedDataError: no ``metadata.json``, a document that is not JSON, or not the 1.7 layout.
        """
        src = _Source(source)
        try:
            docs = []
            for name in ("metadata.json", "graphs.json"):
                raw = src.read(name)
                if raw is None and name == "metadata.json":
                    raise src.no_metadata()
                try:
                    docs.append(json.loads(raw) if raw is not None else [])
                except (ValueError, RecursionError):
                    raise CorruptedDataError(f"{name} is not JSON (an LLVM module?)") from None
        finally:
            src.close()
        return GfxRuntime140(*docs)

    def to_metadata_json(self) -> dict:
        """The ``metadata.json`` document."""
        caps = [{"key": k, "value": v} for k, v in self.required_caps.items()]
        return {"kernels": [k.to_json() for k in self.kernels], "required_caps": caps, **self.extra}

    def to_graphs_json(self) -> list:
        """The ``graphs.json`` document (a list of graphs)."""
        return [g.to_json() for g in self.graphs]
