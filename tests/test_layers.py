"""The package is a house of layers: every import points down, and there is no circle.

Imports are read from the source (``ast``), wherever they stand (functions too); imports under
``if TYPE_CHECKING:`` are for annotations only and do not count. ``python tests/test_layers.py``
draws the graph, room by room, lowest first.
"""

from __future__ import annotations

import ast
import os
import sys
from collections import defaultdict

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = os.path.join(ROOT, "taichi_aot")

#: The rooms from the ground up. A room may import from its own layer's rooms (no circle) and from
#: any layer below it, never from one above. A new module must be given a place here.
LAYERS: list[set[str]] = [
    {"_native", "_cdef", "_bundle", "_version"},  # the extension, the build's helpers, the version
    {"enums"},  # the C enums and the tables about them
    {"errors"},  # the exception tree and the error funnel
    {"_library"},  # finds and loads libtaichi_c_api, hides its output
    {"_probe", "_cuda", "_dlpack", "metadata"},  # beside the flat API: arch probing, CUDA driver copies, DLPack
    # capsules, module metadata
    {"capi"},  # the flat, checked API
    {"config"},  # what this installation is and sees (versions, archs, devices, caches, variables)
    {"_lifetime"},  # what every runtime-owned object shares
    {"memory", "image"},
    {"ndarray"},
    {"_arrays"},  # other libraries' arrays as they describe themselves (views, interfaces, prints, layouts)
    {"_foreign"},  # the foreign-array policy of a runtime (ForeignArgs): sharing, copies, the cache, access
    {"_arguments"},  # values -> kernel arguments
    {"launch"},  # kernels, graphs, bound launches, sequences
    {"module"},  # AotModule
    {"runtime"},  # Runtime and its factories
    {"taichi_aot"},  # the package's face (__init__)
    {"pool"},  # worker processes (or Ray actors), each with a runtime on one device
    {"cli"},  # the command line, benchmark harness and demo, built on the face
    {"__main__"},
]
RANK = {room: i for i, layer in enumerate(LAYERS) for room in layer}


def _modules() -> dict[str, str]:
    """Dotted module name -> file, for every .py file of the package."""
    out = {}
    for folder, _, files in os.walk(PACKAGE):
        for name in files:
            if not name.endswith(".py"):
                continue
            rel = os.path.relpath(os.path.join(folder, name), ROOT)[:-3].replace(os.sep, ".")
            out[rel[: -len(".__init__")] if rel.endswith(".__init__") else rel] = os.path.join(folder, name)
    return out


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(module: str, path: str, known: dict[str, str]) -> set[str]:
    """The package modules ``module`` imports at run time."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    is_package = path.endswith("__init__.py")
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "taichi_aot":
                    found.add(alias.name)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = module.split(".")
                base = parts if is_package else parts[:-1]
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] == "taichi_aot":
                for alias in node.names:
                    sub = f"{target}.{alias.name}"
                    found.add(sub if sub in known else target)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    # a name that is no module of ours (the compiled extension) counts as its nearest module
    return {m if m in known or m.endswith("._native") else m.rsplit(".", 1)[0] for m in found} - {module}


def _room(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def graph() -> dict[str, set[str]]:
    """Module -> the package modules it imports at run time."""
    known = _modules()
    return {m: _imports(m, p, known) for m, p in sorted(known.items())}


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    cycles, state, stack = [], {}, []

    def walk(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                cycles.append([*stack[stack.index(nxt):], nxt])
            elif nxt not in state:
                walk(nxt)
        stack.pop()
        state[node] = 2

    for node in sorted(edges):
        if node not in state:
            walk(node)
    return cycles


def test_every_module_has_a_place():
    rooms = {_room(m) for m in graph()}
    assert not rooms - set(RANK), f"give these modules a layer in LAYERS: {sorted(rooms - set(RANK))}"


def test_no_import_circle():
    assert _cycles(graph()) == []


def test_every_import_points_down():
    upward = [
        f"{m} (layer {RANK.get(_room(m))}) imports {t} (layer {RANK.get(_room(t))})"
        for m, targets in graph().items()
        for t in sorted(targets)
        if RANK.get(_room(t), -1) > RANK.get(_room(m), -1)
    ]
    assert upward == []


def test_the_checker_sees_a_circle_and_an_upward_import():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == [["a", "b", "c", "a"]]
    edges = graph()
    assert "taichi_aot.capi" in edges["taichi_aot.runtime"]  # imports are found...
    assert "taichi_aot.runtime" not in edges["taichi_aot.memory"]  # ...and TYPE_CHECKING ones left out
    assert RANK["memory"] < RANK["runtime"]


def render() -> str:
    """The import graph as text, lowest layer first: each module and the modules it imports."""
    edges = graph()
    by_layer = defaultdict(list)
    for m in edges:
        by_layer[RANK.get(_room(m), -1)].append(m)
    lines = []
    for rank in sorted(by_layer):
        lines.append(f"layer {rank}: {', '.join(sorted(LAYERS[rank])) if rank >= 0 else '?'}")
        for m in sorted(by_layer[rank]):
            targets = ", ".join(t.replace("taichi_aot.", "") for t in sorted(edges[m])) or "-"
            lines.append(f"  {m.replace('taichi_aot.', '') or m:<22} -> {targets}")
    cycles, upward = _cycles(edges), [
        (m, t) for m, ts in edges.items() for t in ts if RANK.get(_room(t), -1) > RANK.get(_room(m), -1)
    ]
    lines.append(f"{len(edges)} modules, {sum(map(len, edges.values()))} imports, "
                 f"{len(cycles)} circles, {len(upward)} upward imports")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.stdout.write(render() + "\n")
