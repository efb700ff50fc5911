"""``taichi-aot stubs``: typed Python signatures (a ``.pyi``) for a module's kernels and graphs."""

from __future__ import annotations

import keyword
import re

from ..metadata import ArgInfo, ModuleInfo

_INT_TYPES = {"I8", "I16", "I32", "I64", "U8", "U16", "U32", "U64"}


def _identifier(name: str) -> str:
    ident = re.sub(r"\W", "_", name)
    if not ident or ident[0].isdigit() or keyword.iskeyword(ident) or not ident.isidentifier():
        ident = "_" + re.sub(r"[^A-Za-z0-9_]", "_", ident)
    return ident


def _text(name: str) -> str:
    """A name from the module as docstring text: printable ASCII, backslashes and quotes escaped (names are
    data: none can end the docstring or reach a terminal as a control sequence)."""
    return name.encode("unicode_escape").decode("ascii").replace('"', '\\"')


def _annotation(a: ArgInfo) -> str:
    if a.kind == "ndarray":
        return "ArrayArgument"
    if a.kind in ("texture", "rw_texture"):
        return "Image | Texture"
    if a.kind == "tensor":
        return "Sequence[float] | np.ndarray"
    if a.dtype is not None and a.dtype.name in _INT_TYPES:
        return "int | np.integer"
    return "float | np.floating"


def _doc(a: ArgInfo, name: str) -> str:
    return f"{name}: {a.describe()}"


def _signature(args: list[ArgInfo], keyword_only: bool) -> tuple[str, list[str]]:
    params, docs, seen = [], [], {"self"}
    for a in args:
        name = _identifier(a.name) if a.name else f"arg{a.index}"
        while name in seen:  # two names that become one identifier
            name += "_"
        seen.add(name)
        params.append(f"{name}: {_annotation(a)}")
        docs.append(_doc(a, _text(a.name) if a.name else name))
    if keyword_only:
        head = ["self", "*"] if params else ["self"]
    else:
        named = all(a.name for a in args)
        head = ["self"]
        if params and not named:
            params.append("/")
    return ", ".join(head + params), docs


def generate(info: ModuleInfo, source: str) -> str:
    """The text of a ``.pyi`` for the module described by ``info``."""
    out = [
        f'"""Typed signatures of the AOT module {_text(source)} (taichi-aot stubs; format {info.format}).',
        "",
        "Use with a cast, importing ``Module`` for the type checker only (this file has no module to import at run",
        "time): ``if typing.TYPE_CHECKING: from NAME import Module``, then",
        "``mod = typing.cast(\"Module\", rt.load_module(path))``.",
        '"""',
        "",
        "from collections.abc import Iterator, Mapping, Sequence",
        "from typing import Literal, overload",
        "",
        "import numpy as np",
        "",
        "from taichi_aot import AotModule, ArrayArgument, ComputeGraph, Image, Kernel, Texture",
        "",
    ]
    kernel_classes, graph_classes = {}, {}
    taken: set[str] = set()

    def unique(cls: str) -> str:  # two names that become one identifier get two classes
        while cls in taken:
            cls += "_"
        taken.add(cls)
        return cls

    for k in info.exported_kernels():
        cls = unique(f"Kernel_{_identifier(k.name)}")
        kernel_classes[k.name] = cls
        params, docs = _signature(k.args, keyword_only=False)
        out += ["", f"class {cls}(Kernel):", f"    def __call__({params}) -> None:",
                f'        """Launch {_text(k.name)}.', *(f"        {d}" for d in docs), '        """', "",
                f"    def launch({params}) -> None: ...", ""]
    for g in info.graphs.values():
        cls = unique(f"Graph_{_identifier(g.name)}")
        graph_classes[g.name] = cls
        params, docs = _signature(g.args, keyword_only=True)
        # a graph takes exactly its own arguments: narrower than ComputeGraph.__call__(**args), on purpose
        out += ["", f"class {cls}(ComputeGraph):", f"    def __call__({params}) -> None:",
                f'        """Launch graph {_text(g.name)}.', *(f"        {d}" for d in docs), '        """', ""]
    for what, classes in (("Kernels", kernel_classes), ("Graphs", graph_classes)):
        base = "Kernel" if what == "Kernels" else "ComputeGraph"
        out += ["", f"class {what}(Mapping[str, {base}]):",
                "    def __iter__(self) -> Iterator[str]: ...", "    def __len__(self) -> int: ..."]
        for name, cls in classes.items():
            out += ["    @overload", f"    def __getitem__(self, name: Literal[{name!r}]) -> {cls}: ..."]
        out += (["    @overload"] if classes else []) + [f"    def __getitem__(self, name: str) -> {base}: ...", ""]
    out += ["", "class Module(AotModule):", "    @property", "    def kernels(self) -> Kernels: ...",
            "    @property", "    def graphs(self) -> Graphs: ...", ""]
    return "\n".join(out) + "\n"
