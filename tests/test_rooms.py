"""What each room of the house may do, beyond where its imports point (tests/test_layers.py): the launch backends
take addresses and read no other library's arrays, and open no file; the foreign-array policy is imported by its
maker and one path alone; the LLVM IR's text is read by its reader alone."""

from __future__ import annotations

import ast
import os

import test_layers
from test_layers import ROOT, _annotation_imports, _imports, _modules, _tree

#: What reads another library's arrays (their protocols, their modules, the rooms that read them for a launch):
#: the argument path's, above the backends (``_arrays``, ``_foreign``, ``_arguments``).
_ARRAY_READERS = {"__cuda_array_interface__", "__array_interface__", "__dlpack__", "__array__", "detach", "numpy"}
_ARRAY_ROOMS = {"taichi_aot._arrays", "taichi_aot._foreign", "taichi_aot._dlpack", "taichi_aot._seen",
                "taichi_aot._staged"}
_FRAMEWORKS = {"torch", "jax", "jaxlib", "cupy"}


def array_reads_in_backends() -> list[str]:
    """Where a file of ``taichi_aot/backends/`` reads another library's arrays itself: an import of a framework or
    of a room that reads arrays, one of their protocols, or a framework looked up in ``sys.modules``."""
    known, found = _modules(), []
    for module, path in sorted(known.items()):
        if not module.startswith("taichi_aot.backends"):
            continue
        tree = _tree(path)
        for room in sorted(_imports(module, path, known, tree) & _ARRAY_ROOMS):
            found.append(f"{module} imports {room}")
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
                found += [f"{module}:{node.lineno} imports {n}" for n in names if n.split(".")[0] in _FRAMEWORKS]
            elif isinstance(node, ast.Attribute) and node.attr in _ARRAY_READERS:
                found.append(f"{module}:{node.lineno} reads .{node.attr}")
            elif isinstance(node, ast.Constant) and node.value in _FRAMEWORKS | _ARRAY_READERS:
                found.append(f"{module}:{node.lineno} names {node.value!r}")
    return found


def test_the_backends_take_addresses_and_read_no_other_librarys_arrays():
    """One argument path: every launch, a reverse kernel's too (its gradients in the slots after its arguments,
    ``_arguments.gradient_signature``), packs through the same packers and foreign-array policy, so a backend gets
    TiArguments (memories, tagged pointers, scalars) and never reads a torch, numpy, CuPy or JAX array itself."""
    assert not array_reads_in_backends(), array_reads_in_backends()


def test_the_array_read_check_sees_a_reader(tmp_path, monkeypatch):
    """The check above finds what it looks for: a backend file that reads a tensor's interface, or asks for torch."""
    folder = tmp_path / "taichi_aot" / "backends"
    folder.mkdir(parents=True)
    (folder / "reader.py").write_text("import sys\n\ndef f(v):\n    t = sys.modules.get('torch')\n"
                                      "    return v.__cuda_array_interface__, t\n")
    monkeypatch.setattr(test_layers, "ROOT", str(tmp_path))
    found = array_reads_in_backends()
    assert any("reads .__cuda_array_interface__" in f for f in found) and any("'torch'" in f for f in found), found


def test_the_foreign_array_policy_is_imported_by_its_maker_and_the_elsewhere_path_alone():
    """The foreign-array policy's room (``_foreign``) is imported by the runtime, which makes it, and by the packers'
    path for launches made elsewhere: the launch room names what it asks of it by a Protocol of its own, so data
    flows from the policy to the launch and no helper calls the policy back (§13.10's first change). Each form of
    import statement counts (``from . import _foreign``, one inside a function, one for annotations only); the package's
    imports by name (``importlib``) are of its registered and lazily read rooms and its extension, never this one."""
    known = _modules()
    importers = {module for module, path in known.items()
                 if "taichi_aot._foreign" in _imports(module, path, known) | _annotation_imports(module, path, known)}
    assert importers <= {"taichi_aot.runtime", "taichi_aot._arguments"}, importers


#: The modules whose functions open, list, map or test paths, and what of ``os`` does (its environment does not).
_FILE_READERS = {"io", "pathlib", "zipfile", "tarfile", "shutil", "glob", "tempfile", "mmap"}
_OS_FILES = {"path", "listdir", "scandir", "stat", "lstat", "access", "walk", "open", "fdopen", "remove", "unlink",
             "rename", "replace", "makedirs", "mkdir", "rmdir"}
#: numpy's functions that read or write a file (an array's ``tofile`` too).
_NUMPY_FILES = {"fromfile", "load", "loadtxt", "genfromtxt", "memmap", "save", "savez", "savez_compressed", "savetxt",
                "tofile"}


def _imported_file_functions(node: ast.Import | ast.ImportFrom) -> list[str]:
    """What of an import statement opens files: a module of ``_FILE_READERS`` or ``os.path``, or ``os``'s and
    numpy's file functions imported by name."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names if a.name.split(".")[0] in _FILE_READERS or a.name == "os.path"]
    module = node.module or ""
    if module.split(".")[0] in _FILE_READERS or module == "os.path":
        return [module]
    named = _OS_FILES if module == "os" else _NUMPY_FILES if module == "numpy" else set()
    return [f"{module}.{a.name}" for a in node.names if a.name in named]


def file_reads(folder: str) -> list[str]:
    """Where a Python file of ``folder`` opens a file itself, or imports what would."""
    found = []
    for name in sorted(os.listdir(folder)):
        if not name.endswith(".py"):
            continue
        with open(os.path.join(folder, name), encoding="utf-8") as f:
            tree = ast.parse(f.read())
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "open":
                found.append(f"{name}:{node.lineno}: open()")
            elif isinstance(node, ast.Attribute) and (
                    node.attr == "tofile" or (isinstance(node.value, ast.Name) and (
                        (node.value.id == "os" and node.attr in _OS_FILES)
                        or (node.value.id in ("np", "numpy") and node.attr in _NUMPY_FILES)))):
                found.append(f"{name}:{node.lineno}: .{node.attr}")
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                found += [f"{name}:{node.lineno}: imports {n}" for n in _imported_file_functions(node)]
    return found


def test_the_backends_open_no_file():
    """A launch backend consumes what metadata/ read and checked once (``ModuleInfo``: a gfx module's SPIR-V, an LLVM
    module's IR and records) and what the PTX room reads of its own files: it opens none itself, nor imports what
    would (§13.10's fourth change)."""
    found = file_reads(os.path.join(ROOT, "taichi_aot", "backends"))
    assert found == [], found


def test_the_file_check_sees_a_reader(tmp_path):
    """The check above finds each form it looks for."""
    (tmp_path / "reader.py").write_text(
        "import os\nimport os.path as osp\nimport numpy as np\nfrom pathlib import Path\nfrom os import listdir\n"
        "from numpy import fromfile\nimport zipfile\n\ndef f(p, a):\n"
        "    return Path(p), np.save(p, a), a.tofile(p), open(p), os.stat(p), osp.isfile(p)\n")
    found = sorted(f.split(": ", 1)[1] for f in file_reads(str(tmp_path)))
    assert found == [".save", ".stat", ".tofile", "imports numpy.fromfile", "imports os.listdir", "imports os.path",
                     "imports pathlib", "imports zipfile", "open()"], found


#: The rooms that read a module's LLVM IR: its reader (``metadata/llvm_ir.py``, the one that may hold patterns of its
#: text) and what consumes what it reads (the metadata checks, access inference, retargeting; the PTX step; the
#: launch backends).
_IR_READER = os.path.join("taichi_aot", "metadata", "llvm_ir.py")
_IR_ROOMS = (os.path.join("taichi_aot", "metadata"), os.path.join("taichi_aot", "ptx"),
             os.path.join("taichi_aot", "backends"))
#: What only a pattern over LLVM IR holds: its instructions, types, attributes, names and metadata as LLVM writes
#: them (a pattern's literal text, its escapes taken off, is searched for each).
_IR_WORDS = ("define ", "declare ", "getelementptr", "bitcast", "alloca", "store ", "load ", "call ", "noundef",
             "%struct", "struct.", "i8*", "i32 ", "i64 ", "atomicrmw", "cmpxchg", "attributes #", "!nvvm", "!llvm",
             "llvm.", "target triple", "datalayout", "fadd", "fdiv", "syncscope", "seq_cst", "monotonic", "@",
             "%[", "= type", "!{", "!(", "void (", "nvvm_reflect", "RuntimeContext", "LLVMRuntime", "parallel_for",
             "smax")
#: The pattern pieces the reader gives (a type's or a name's pattern): a pattern made with one reads IR.
_IR_PIECES = {"NAME", "RUNTIME", "CONTEXT", "GLOBAL", "struct"}
_RE_CALLS = {"compile", "search", "match", "fullmatch", "findall", "finditer", "sub", "subn", "split"}


def _pattern_text(node: ast.AST, constants: dict[str, str]) -> tuple[str, set[str]]:
    """A pattern argument's literal text (its constant parts, and module constants it names) and the names it is made
    with."""
    if isinstance(node, ast.Constant) and isinstance(node.value, (str, bytes)):
        value = node.value
        return (value.decode("latin-1") if isinstance(value, bytes) else value), set()
    if isinstance(node, ast.Name):
        return constants.get(node.id, ""), {node.id}
    text, names = "", set()
    for child in ast.iter_child_nodes(node):
        part, used = _pattern_text(child, constants)
        text, names = text + part, names | used
    if isinstance(node, ast.Attribute):
        names.add(node.attr)
    return text, names


def ir_patterns(root: str) -> list[str]:
    """Where a Python file of the rooms that read the IR, but its reader, makes or applies a regular expression over
    LLVM IR: a call of ``re``'s functions (``re.compile``, ``re.sub``..., or imported by name) whose pattern's text
    holds what only LLVM IR holds (:data:`_IR_WORDS`) or is made with the reader's pieces (:data:`_IR_PIECES`), and
    each import of those pieces."""
    found = []
    for room in _IR_ROOMS:
        folder = os.path.join(root, room)
        for name in sorted(os.listdir(folder)) if os.path.isdir(folder) else ():
            path = os.path.join(room, name)
            if not name.endswith(".py") or path == _IR_READER:
                continue
            with open(os.path.join(root, path), encoding="utf-8") as f:
                tree = ast.parse(f.read())
            constants = {t.id: n.value.value for n in tree.body if isinstance(n, ast.Assign)
                         and isinstance(n.value, ast.Constant) and isinstance(n.value.value, str)
                         for t in n.targets if isinstance(t, ast.Name)}
            by_name = {a.asname or a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module == "re"
                       for a in n.names if a.name in _RE_CALLS}
            for node in ast.walk(tree):
                if isinstance(node, ast.ImportFrom) and (node.module or "").endswith("llvm_ir"):
                    found += [f"{path}:{node.lineno}: imports {a.name}" for a in node.names if a.name in _IR_PIECES]
                if not isinstance(node, ast.Call) or not node.args:
                    continue
                f_ = node.func
                if not ((isinstance(f_, ast.Attribute) and isinstance(f_.value, ast.Name) and f_.value.id == "re"
                         and f_.attr in _RE_CALLS) or (isinstance(f_, ast.Name) and f_.id in by_name)):
                    continue
                text, names = _pattern_text(node.args[0], constants)
                plain = text.replace("\\", "")
                words = [w for w in _IR_WORDS if w in plain] + sorted(names & _IR_PIECES)
                if words:
                    found.append(f"{path}:{node.lineno}: a pattern over LLVM IR ({', '.join(words[:3])})")
    return found


def test_the_llvm_ir_is_read_by_one_room():
    """Taichi's LLVM IR text is read by ``metadata/llvm_ir.py`` alone (REVIEW §14.10, the fourth redesign): the rooms
    that consume it (metadata's checks, access inference and retargeting, the PTX step, the launch backends) take
    what it read (``llvm_ir.IrKernel``) and write their edits of the text through it, and hold no pattern of that
    text, so that a Taichi or an LLVM that writes it otherwise changes one room."""
    assert ir_patterns(ROOT) == [], ir_patterns(ROOT)


def test_the_ir_pattern_check_sees_a_pattern(tmp_path):
    """The check above finds each form it looks for, and lets a pattern that is not over IR be."""
    folder = tmp_path / "taichi_aot" / "ptx"
    folder.mkdir(parents=True)
    (folder / "reader.py").write_text(
        "import re\nfrom re import sub as replace\nfrom ..metadata.llvm_ir import CONTEXT\n\n"
        "_GEP = re.compile(r\"getelementptr inbounds (%[\\w.]+)\")\n_STORE = r\"^\\s*store i32 \"\n"
        "_NAME = re.compile(r\"[A-Za-z_]\\w*\")\n\n"
        "def f(text):\n"
        "    return (re.search(rf\"{CONTEXT}\\* %x\", text), replace(r\"define void @f\\(\", '', text),\n"
        "            re.findall(_STORE, text), re.match(r\"\\d+\", text))\n")
    found = sorted(f.split(": ", 1)[1] for f in ir_patterns(str(tmp_path)))
    assert found == ["a pattern over LLVM IR (CONTEXT)", "a pattern over LLVM IR (define , @)",
                     "a pattern over LLVM IR (getelementptr, %[)", "a pattern over LLVM IR (store , i32 )",
                     "imports CONTEXT"], found
