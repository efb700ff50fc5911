"""The package is a house of layers: every import points down, and there is no circle. The bench
(taichi_aot_bench, beside the package) is a room of its own on its top floor, under ``__main__`` alone.

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
#: The packages of the house: taichi_aot, and the bench built on it.
PACKAGES = ("taichi_aot", "taichi_aot_bench")

#: The rooms from the ground up. A room may import from its own layer's rooms (no circle) and from
#: any layer below it, never from one above. A new module must be given a place here.
LAYERS: list[set[str]] = [
    {"_native", "_call", "_cdef", "_trust", "_version", "_pyinstaller", "_built"},  # the extensions (the C-API
    # bindings, the C call), what another local user could have written (paths told by owner and mode), the version,
    # PyInstaller's hooks, whether the extensions were built (they import nothing of the package)
    {"_bundle", "_cache", "_home", "_child"},  # the build's helpers, the cache folder, the HOME the loaded libraries
    # read, the package's child processes (they import only the trust room)
    {"enums"},  # the C enums and the tables about them
    {"errors"},  # the exception tree and the error funnel
    {"waits"},  # how a runtime waits for its device: the policies (read by the runtime and placement's devices)
    {"_library", "_nvtx"},  # finds and loads libtaichi_c_api, hides its output; the NVTX library and the ranges
    # around launches
    {"_hostpages"},  # the caller's arrays whose pages a device keeps pinned (both drivers' one policy)
    {"_probe", "_firstload", "drivers", "_dlpack", "metadata", "_cpus", "ptx"},  # beside the flat API: arch probing,
    # a module's first load in a child, the drivers (the CUDA driver, host transfers, the own CUDA runtime's device:
    # every room may import them), DLPack capsules, module metadata, the CPU cores and a CPU runtime's threads, PTX for
    # CUDA modules
    {"capi", "_cudart"},  # the flat, checked API; which CUDA runtime a runtime gets, and what is refused where
    {"_lifetime", "_archs", "_dtypes"},  # what every runtime-owned object shares; which arch a runtime is made on;
    # Taichi's types in numpy's terms (dtypes, shapes, an ndarray's TiArgument, signatures)
    {"profile"},  # the profiles of a runtime's launches (their device times), asking it as its children do (Parent)
    {"placement"},  # where a runtime's memory lives and how bytes move (host, CUDA, Vulkan's policy, staging)
    {"memory", "image"},
    {"ndarray"},
    {"_arrays"},  # other libraries' arrays as they describe themselves (views, interfaces, prints, layouts)
    {"_staged"},  # host arrays a kernel takes as copies: each launch's, spares, those in flight
    {"_seen"},  # arrays seen before: the records the packers and the C call find them by, the cache's entries
    {"_foreign"},  # the foreign-array policy of a runtime (ForeignArgs): sharing, the cache, access, held CUDA arrays
    {"_arguments"},  # values -> kernel arguments
    {"backends"},  # the launch backends (libtaichi's, the own CUDA launcher, the own x64 launch of reverse-mode
    # kernels) and the one place that decides which launches a kernel
    {"_callplan"},  # one thread's calls of a kernel: its packed buffer, slots, launch record and kept copies
    {"launch"},  # kernels, graphs, bound launches
    {"replay"},  # recorded launches replayed from C
    {"module"},  # AotModule
    {"runtime"},  # Runtime and its factories
    {"_ops"},  # kernels and graphs as framework ops: inputs, outputs and their checks
    {"_plans", "_torchop"},  # launch plans of ops and the runtime cells they run in (XLA's handler); a torch
    # op's kernel for torch's dispatcher in C, launching its plan
    {"config"},  # what this installation is and sees (versions, archs, devices, caches, variables, fast reads)
    {"taichi_aot"},  # the package's face (__init__)
    {"pool", "torch", "jax"},  # worker processes (or Ray actors); kernels as PyTorch and JAX ops
    {"cli"},  # the command line and the demo, built on the face
    {"taichi_aot_bench"},  # the bench: a room of its own, built on the command line (its compile cache, the sweep)
    {"__main__"},  # the command line with the bench's command
]
#: The compiled extensions: modules of ours with no .py file.
EXTENSIONS = ("._native", "._call", "._steps")
RANK = {room: i for i, layer in enumerate(LAYERS) for room in layer}


def _modules() -> dict[str, str]:
    """Dotted module name -> file, for every .py file of the packages."""
    out = {}
    for folder, _, files in (w for package in PACKAGES for w in os.walk(os.path.join(ROOT, package))):
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


def _tree(path: str) -> ast.AST:
    with open(path, encoding="utf-8") as f:
        return ast.parse(f.read(), path)


def _imports(module: str, path: str, known: dict[str, str], tree: ast.AST | None = None) -> set[str]:
    """The package modules ``module`` (its file, or ``tree`` of it) imports at run time."""
    tree = tree or _tree(path)
    is_package = path.endswith("__init__.py")
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in PACKAGES:
                    found.add(alias.name)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = module.split(".")
                base = parts if is_package else parts[:-1]
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] in PACKAGES:
                for alias in node.names:
                    sub = f"{target}.{alias.name}"
                    found.add(sub if sub in known else target)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    # a name that is no module of ours (but a compiled extension) counts as its nearest module
    return {m if m in known or m.endswith(EXTENSIONS) else m.rsplit(".", 1)[0] for m in found} - {module}


def _room(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == "taichi_aot" else parts[0]


def graph() -> dict[str, set[str]]:
    """Module -> the package modules it imports at run time."""
    known = _modules()
    return {m: _imports(m, p, known) for m, p in sorted(known.items())}


def test_every_module_has_a_place():
    rooms = {_room(m) for m in graph()}
    assert not rooms - set(RANK), f"give these modules a layer in LAYERS: {sorted(rooms - set(RANK))}"


def test_no_import_circle():
    assert _circles(graph()) == []


def test_every_import_points_down():
    upward = [
        f"{m} (layer {RANK.get(_room(m))}) imports {t} (layer {RANK.get(_room(t))})"
        for m, targets in graph().items()
        for t in sorted(targets)
        if RANK.get(_room(t), -1) > RANK.get(_room(m), -1)
    ]
    assert upward == []


def _annotation_imports(module: str, path: str, known: dict[str, str]) -> set[str]:
    """The package modules ``module`` imports under ``if TYPE_CHECKING:`` only."""
    found: set[str] = set()
    for node in ast.walk(_tree(path)):
        if isinstance(node, ast.If) and _is_type_checking(node):
            for child in node.body:
                found |= _imports(module, path, known, ast.Module(body=[child], type_ignores=[]))
    return found


def _circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected parts of ``edges`` with more than one module (Tarjan's): each a circle a reader walks."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            part = stack[stack.index(v):]
            del stack[stack.index(v):]
            if len(part) > 1:
                found.append(sorted(part))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def test_annotations_ask_their_runtime_by_protocol():
    """No room imports a room above it, even for annotations: what a room needs of one above it is a protocol below it
    (``_lifetime.Parent``, what a child may ask of its runtime, also the public type of ``Child.runtime`` and
    ``NdArray.runtime``; ``launch.Module``, the public type of ``Kernel.module``)."""
    known = _modules()
    up = {(m, t) for m, p in sorted(known.items()) for t in _annotation_imports(m, p, known)
          if RANK.get(_room(t), -1) > RANK.get(_room(m), -1)}
    assert up == set(), sorted(up)


def test_no_circle_of_more_than_six_files_with_annotations():
    """Imports for annotations counted too (a circle of types is still one a reader walks), no circle among the
    package's modules has more than six files (house8's bound; the centre's was 16)."""
    known = _modules()
    edges = {m: _imports(m, p, known) | _annotation_imports(m, p, known) for m, p in known.items()}
    big = [c for c in _circles(edges) if len(c) > 6]
    assert big == [], big


def test_the_checker_sees_a_circle_and_an_upward_import():
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set()}) == [["a", "b", "c"]]
    edges = graph()
    assert "taichi_aot.capi" in edges["taichi_aot.runtime"]  # imports are found...
    assert "taichi_aot.runtime" not in edges["taichi_aot.memory"]  # ...and TYPE_CHECKING ones left out
    assert RANK["memory"] < RANK["runtime"]


# -- the whiteboard's nevers -----------------------------------------------------------------------------
#
# The target structure (REVIEW.md §14.4) draws parts of the house and arrows between them, and names arrows that must
# never be drawn. The layers above keep most of them (an import upward fails); these are the ones the layers alone
# would let through, or that hold for annotations too, each checked on every import of the parts' rooms: at run time
# or under TYPE_CHECKING, at a module's top or in a function.

#: The parts the nevers name, by their rooms.
PARTS: dict[str, set[str]] = {
    "Drivers": {"drivers"},  # the CUDA driver, host transfers, the own CUDA runtime's device: every room's to import
    "Arrays": {"_lifetime", "_dtypes", "memory", "image", "ndarray"},  # what a runtime's memory and arrays are
    "Device": {"placement", "_cudart"},  # where memory lives and how bytes move; which CUDA runtime a runtime gets
    "Backends": {"backends"},  # the launch backends
    "Runtime": {"runtime"},  # Runtime and its factories
}
#: The arrows never drawn, each with its reason.
NEVERS: dict[tuple[str, str], str] = {
    ("Backends", "Device"): "a backend takes launch state (the runtime it is handed, its device's launch_state), never "
                            "placement: the drivers it calls are a part of their own, below both",
    ("Arrays", "Runtime"): "arrays ask the device, not the runtime: they know their runtime as _lifetime.Parent",
}


def _part(module: str) -> str | None:
    room = _room(module)
    return next((part for part, rooms in PARTS.items() if room in rooms), None)


def broken_nevers() -> list[str]:
    """Every import (annotations too) from one part to another that :data:`NEVERS` forbids."""
    known = _modules()
    return sorted(f"{m} imports {t} ({a} -> {b}: {NEVERS[(a, b)]})"
                  for m, p in sorted(known.items()) for t in _imports(m, p, known) | _annotation_imports(m, p, known)
                  for a, b in [(_part(m), _part(t))] if (a, b) in NEVERS)


def test_the_whiteboards_nevers_hold():
    """No backend imports placement or the CUDA runtime room (it imports the drivers), and no array room imports
    the runtime, even for annotations."""
    assert broken_nevers() == []


def test_the_nevers_checker_sees_the_parts():
    """The parts are the rooms they say (a room on none would make its never pass unseen), and the backends reach the
    CUDA driver through the drivers part: the never holds by the part, not by the driver going unused."""
    rooms = {room for part in PARTS.values() for room in part}
    assert rooms <= set(RANK), sorted(rooms - set(RANK))
    assert {part for pair in NEVERS for part in pair} <= set(PARTS)
    assert _part("taichi_aot.placement.cuda") == _part("taichi_aot._cudart") == "Device"
    assert _part("taichi_aot.backends.cuda") == "Backends" and _part("taichi_aot.drivers.cuda") == "Drivers"
    assert "taichi_aot.drivers.cuda" in graph()["taichi_aot.backends.cuda"]


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
    cycles, upward = _circles(edges), [
        (m, t) for m, ts in edges.items() for t in ts if RANK.get(_room(t), -1) > RANK.get(_room(m), -1)
    ]
    lines.append(f"{len(edges)} modules, {sum(map(len, edges.values()))} imports, "
                 f"{len(cycles)} circles, {len(upward)} upward imports")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.stdout.write(render() + "\n")


#: A file's size limit, in lines and in characters at the package's density (about 48 a line, indentation included):
#: a file that fits in lines only because its lines got long is as long as the characters say.
LINES, DENSITY = 700, 48
#: Files over the limit, each with why it is one room all the same (or what is owed); the rule asks for a reason,
#: not a trim: no file is squeezed under the line to pass.
LONG_FILES = {
    "taichi_aot/torch.py": "one framework's adapter (the op's eager, compiled and C call paths, its autograd, op_of),"
                           " as jax.py is JAX's; a package of its own when it grows again",
    "taichi_aot/jax.py": "one framework's adapter (the op, its plans on every GPU, gradients under every transform)",
    "tests/test_ptx.py": "the tests of one room, taichi_aot.ptx: making PTX, reading it, launching it",
    "taichi_aot/metadata/llvm_ir.py": "the one reader of Taichi's LLVM IR text: every pattern of that text, the reads "
                                      "its consumers take and the edits the PTX step writes, so that another Taichi "
                                      "or LLVM changes one file (tests/test_rooms.py holds the patterns here)",
    "taichi_aot/runtime.py": "Runtime, the object a user holds: its making (arch, device, threads, waits), its "
                             "factories and its work; owed: its copy checks to the device's parts (its stream's moved)",
    "taichi_aot/_csrc/taichi_aot.h": "the one header cffi reads (build_ffi.HEADER): what Python calls of every C "
                                     "file, each file's part under a comment saying what its functions do",
}


def _size(path: str) -> tuple[int, int]:
    with open(path, encoding="utf-8") as f:
        text = f.read()
    return text.count("\n"), len(text) // DENSITY


def test_a_file_over_the_size_limit_says_why():
    """The house's size rule (ruff holds the other, McCabe 12): a file over 700 lines, in lines or at the package's
    density, holds more than one room unless :data:`LONG_FILES` says why it is one; a file listed there and no
    longer long is taken off."""
    long, listed_short = [], []
    for folder in (*PACKAGES, "tests", "benchmarks", "examples"):
        for where, _, files in os.walk(os.path.join(ROOT, folder)):
            for name in files:
                if name.endswith((".py", ".c", ".h")) and "_lib" not in where:
                    path = os.path.join(where, name)
                    relative = os.path.relpath(path, ROOT)
                    lines, at_density = _size(path)
                    over = max(lines, at_density) > LINES
                    if over and relative not in LONG_FILES:
                        long.append(f"{relative}: {lines} lines, {at_density} at the package's density")
                    elif not over and relative in LONG_FILES:
                        listed_short.append(relative)
    assert not long, f"split these, or say in LONG_FILES why each is one room: {long}"
    assert not listed_short, f"no longer long: take them off LONG_FILES: {listed_short}"


#: Decisions made by an arch or a backend's name outside the rooms that own them (``backends/``, ``placement/``, the
#: drivers ``drivers/`` and the CUDA runtime room ``_cudart.py``, the arch choice ``_archs.py``), by file: how many,
#: and why each file may. Every spelling counts: a comparison with an arch (``Arch.CUDA``...) or a backend's name
#: ("cuda", "x64", "taichi"; ``CUDA``, ``X64``, ``LIBTAICHI``), membership in a tuple of archs or of launch kinds
#: (``CPU_ARCHS``, ``GFX_ARCHS``, ``LLVM_ARCHS``, ``*_KINDS``), and every read of ``cuda_device`` (the own CUDA
#: runtime's GPU: the device's, ``device.traits.own_runtime`` and ``device.cuda``). A new one fails
#: :func:`test_arch_decisions_live_in_the_backend_and_device_rooms`: ask the kernel's ``Choice`` (what it can do), its
#: backend, or the runtime's ``device`` (where its memory is, what it serves) instead.
ARCH_DECISIONS = {
    "taichi_aot/_probe.py": (11, "probing: which archs work here, each by its own probe (CUDA's driver, Vulkan's "
                                 "devices, the archs libtaichi 1.7.4 was not built with), and why not in the words of "
                                 "each (the variables that choose Vulkan's drivers)"),
    "taichi_aot/capi/core.py": (6, "the flat API is libtaichi's: it keeps one CUDA runtime a process, a Vulkan driver "
                                   "a forked child inherits crashes it, CPU memory is the host's (mapped as it is) "
                                   "and x64 cannot free what it allocated; each refused or said before the call"),
    "taichi_aot/capi/handles.py": (1, "libtaichi keeps every command buffer a gfx backend submits until a wait: the "
                                      "flat API bounds that queue"),
    "taichi_aot/capi/modules.py": (5, "kernels lavapipe miscompiles are refused on a software Vulkan device; an LLVM "
                                      "module (CPU, CUDA) holds fields and is loaded from a folder libtaichi may not "
                                      "write into (the flat API copies it)"),
    "taichi_aot/ptx/__init__.py": (2, "the PTX room is CUDA's: a module of another arch has none"),
    "taichi_aot/metadata/__init__.py": (4, "a module's format (LLVM or SPIR-V) says which archs load it, a gfx part "
                                           "loads on the gfx archs in preference order, and a CPU module runs on the "
                                           "CPU it was built for"),
    "taichi_aot/metadata/llvm.py": (1, "a module's LLVM IR is read where it is a CPU module's"),
    "taichi_aot/module.py": (2, "an LLVM module's .tcm is unpacked by libtaichi itself, the others' files by the "
                                "package; a CPU module's loops are split for its runtime's threads at load"),
    "taichi_aot/cli/__init__.py": (2, "the command line says what a module holds (its CUDA part)"),
    "taichi_aot/cli/build.py": (10, "Taichi's compiler is run for CUDA with one GPU visible, CUDA parts get PTX, "
                                    "Vulkan parts the device's capabilities, and a build names the gfx archs"),
    "taichi_aot/config.py": (2, "show_config says which launcher and CUDA runtime the environment asks for"),
    "taichi_aot/pool/_plan.py": (5, "workers are placed on GPUs by CUDA_VISIBLE_DEVICES, CUDA's alone, and on "
                                    "Vulkan's hardware devices"),
    "taichi_aot/pool/__init__.py": (2, "a Ray actor asks Ray for a GPU where its runtime is CUDA's"),
    "taichi_aot/ndarray.py": (1, "__cuda_array_interface__ is CUDA's protocol"),
    "taichi_aot/_ops.py": (3, "torch's and JAX's device type is named 'cuda'"),
    "taichi_aot/_torchop.py": (2, "torch's C kernel binds libtorch_cuda for a CUDA runtime's ops on torch's CUDA "
                                  "dispatch key (its stream, its graph captures), x64's on its CPU key"),
    "taichi_aot/torch.py": (2, "torch's device 'cuda:<k>' and its CUDA stream are CUDA's"),
    "taichi_aot/jax.py": (3, "XLA shares buffers with x64 and CUDA runtimes, its CUDA platform and GPU twins are "
                             "CUDA's, and a twin loads its module with the launcher the kernel's was loaded with"),
    "taichi_aot/_cpus.py": (1, "thread counts are the CPU backends'"),
    "taichi_aot/_arguments.py": (1, "a u1 ndarray is laid out as 32-bit booleans in a gfx backend's SPIR-V "
                                    "(libtaichi 1.7.4): its slot is packed in Python"),
    "taichi_aot/_callplan.py": (1, "the same u1 ndarray slot (what the C call checks of it)"),
    "taichi_aot/replay.py": (1, "a CPU runtime's launches run as they are made: its replay drains no queue"),
}


def _arch_decisions() -> dict[str, int]:
    """How many decisions by an arch or a backend's name each package file outside the owning rooms makes (every
    spelling :data:`ARCH_DECISIONS` names)."""
    def decides(n: ast.AST) -> bool:
        if isinstance(n, (ast.Tuple, ast.List, ast.Set)):
            return any(map(decides, n.elts))
        named = n.id if isinstance(n, ast.Name) else n.attr if isinstance(n, ast.Attribute) else ""
        return ((isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "Arch")
                or (isinstance(n, ast.Constant) and n.value in ("cuda", "x64", "taichi"))
                or (isinstance(n, ast.Name) and n.id in ("CUDA", "X64", "LIBTAICHI"))
                or named.endswith(("_ARCHS", "_KINDS")))

    def counted(node: ast.AST) -> bool:
        if isinstance(node, ast.Attribute) and node.attr in ("cuda_device", "own_runtime"):  # the device's traits
            return True
        return isinstance(node, ast.Compare) and any(map(decides, [node.left, *node.comparators]))

    found: dict[str, int] = {}
    rooms = ("taichi_aot/backends/", "taichi_aot/placement/", "taichi_aot/drivers/", "taichi_aot/_cudart.py",
             "taichi_aot/_archs.py")
    for where, _, files in os.walk(os.path.join(ROOT, "taichi_aot")):
        for name in files:
            relative = os.path.relpath(os.path.join(where, name), ROOT).replace(os.sep, "/")
            if not name.endswith(".py") or relative.startswith(rooms) or "/_lib/" in relative:
                continue
            count = sum(1 for node in ast.walk(_tree(os.path.join(where, name))) if counted(node))
            if count:
                found[relative] = count
    return found


def test_arch_decisions_live_in_the_backend_and_device_rooms():
    """No room outside backends/, placement/ and the CUDA and arch rooms decides by an arch or a backend's name but
    those listed in :data:`ARCH_DECISIONS`, each file with its count and reason (a file with fewer: lower it)."""
    found = _arch_decisions()
    listed = {path: count for path, (count, _) in ARCH_DECISIONS.items()}
    assert found == listed, {p: (found.get(p, 0), listed.get(p, 0)) for p in set(found) | set(listed)
                             if found.get(p, 0) != listed.get(p, 0)}
