"""Every C file of the package compiles by itself: what it uses, it includes (the system's headers, taichi_aot.h,
the private headers of what crosses files), though the builds compile each extension as one translation unit
(build_ffi.py's C_FILES after the C-API's trampolines; setup.py's call_module.c, which includes the C call's files).
What crosses files is declared in private headers (loader.h, backends/plan.h, call_common.h and those of the C
call's files), never in taichi_aot.h, which cffi reads. A file that still leans on what an earlier file of its unit
defined is listed with the reason."""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sysconfig

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CSRC = os.path.join(ROOT, "taichi_aot", "_csrc")

#: Files that compile only inside their unit, and why (each owed its own includes and a private header).
NOT_ALONE: dict[str, str] = {}


def _c_files(suffix: str = ".c") -> list[str]:
    found = []
    for where, _, files in os.walk(CSRC):
        found += [os.path.relpath(os.path.join(where, f), CSRC).replace(os.sep, "/")
                  for f in files if f.endswith(suffix)]
    return sorted(found)


def _listed(script: str, name: str) -> list[str]:
    """The tuple of file names ``name`` is assigned in the build script ``script`` (read, not run)."""
    with open(os.path.join(ROOT, script), encoding="utf-8") as f:
        tree = ast.parse(f.read())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == name for t in node.targets):
            return list(ast.literal_eval(node.value))
    raise AssertionError(f"{script} assigns no {name}")


def test_the_builds_compile_every_c_file():
    listed = {*_listed("build_ffi.py", "C_FILES"), *_listed("setup.py", "CALL_FILES")}  # arrays.c is in both
    assert sorted(listed) == _c_files()


def test_the_builds_depend_on_every_header():
    """A change to any header rebuilds what includes it: each is the cdef's (build_ffi.py's HEADER), or a private one
    of an extension (build_ffi.py's PRIVATE_HEADERS, setup.py's CALL_HEADERS)."""
    listed = {"taichi_aot.h", *_listed("build_ffi.py", "PRIVATE_HEADERS"), *_listed("setup.py", "CALL_HEADERS")}
    assert sorted(listed) == _c_files(".h")


def _compile_alone(name: str) -> subprocess.CompletedProcess:
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    assert cc, "a C compiler builds the package"
    flags = ["-fsyntax-only", "-std=gnu11", "-Werror=implicit-function-declaration", "-Werror=int-conversion",
             "-I", os.path.join(ROOT, "include"), "-I", CSRC, "-I", sysconfig.get_paths()["include"],
             "-DPy_LIMITED_API=0x03090000"]
    return subprocess.run([cc, *flags, os.path.join(CSRC, name)], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("name", _c_files())
def test_a_c_file_compiles_by_itself(name):
    proc = _compile_alone(name)
    if name in NOT_ALONE:
        assert proc.returncode != 0, f"{name} compiles alone now: take it off NOT_ALONE"
        return
    assert proc.returncode == 0, proc.stderr[-3000:]


def _without_comments(text: str) -> str:
    return re.sub(r"/\*.*?\*/|//[^\n]*", "", text, flags=re.S)


#: A function's definition (``static`` or not; the package writes its return type on the name's line), and a
#: variable's at file scope (a type's spec, a table; each name of a declaration of several), by name.
_FUNCTION = re.compile(r"^(?:static\s+|inline\s+)*[A-Za-z_][\w \t*]*?\b(\w+)\([^;{]*\)\s*\{", re.M)
_VARIABLE = re.compile(r"^(?!extern\b|typedef\b|enum\b|union\b|struct\s+\w+\s*\{)(?:static\s+|const\s+)*"
                       r"[A-Za-z_][\w \t*]*?\b(\w+)\s*(?:\[[^\]]*\])*\s*(?:=|;|,)", re.M)
_DECLARATION = re.compile(r"^(?!extern\b|typedef\b|enum\b|union\b|struct\s+\w+\s*\{|return\b)[A-Za-z_][^;(){}#]*;",
                          re.M)


def _names_defined(text: str) -> set[str]:
    """The functions and file-scope variables ``text`` (a C file, comments removed) defines."""
    names = {m.group(1) for pattern in (_FUNCTION, _VARIABLE) for m in pattern.finditer(text)}
    for m in _DECLARATION.finditer(text):  # each name of `static T *a, *b;`
        for part in m.group(0).rstrip(";").split(","):
            found = re.findall(r"\w+", part.split("=")[0].split("[")[0])
            if found:
                names.add(found[-1])
    return names


def c_calls() -> dict[str, set[str]]:
    """Which C file uses a function or file-scope variable another defines, for every C file of the package: the
    edges of its graph, by file. Each build compiles its files as one translation unit (build_ffi.py's C_FILES,
    setup.py's CALL_FILES), so a ``static`` function is seen across the files of its unit, and only there: names are
    found within each unit (arrays.c is in both)."""
    texts = {}
    for name in _c_files():
        with open(os.path.join(CSRC, name), encoding="utf-8") as f:
            texts[name] = _without_comments(f.read())
    edges: dict[str, set[str]] = {name: set() for name in texts}
    for unit in (_listed("build_ffi.py", "C_FILES"), _listed("setup.py", "CALL_FILES")):
        defined: dict[str, set[str]] = {}
        for name in unit:
            for fn in _names_defined(texts[name]):
                defined.setdefault(fn, set()).add(name)
        twice = {fn: sorted(where) for fn, where in defined.items() if len(where) > 1}
        assert twice == {}, f"defined in two files of one unit: {twice}"
        for name in unit:
            edges[name] |= {where for fn, (where,) in defined.items()
                            if where != name and re.search(rf"\b{fn}\b", texts[name])}
    return edges


_INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)

#: Headers whose includers are no edge to the file they are named for, and why (each owed a split).
INCLUDED_ACROSS: dict[str, str] = {}


def _included(path: str) -> list[str]:
    """The package's files ``path`` includes (``"..."``, found beside it or from ``_csrc``, as the builds' ``-I``),
    relative to ``_csrc``; the vendored C-API's headers are none of them."""
    with open(os.path.join(CSRC, path), encoding="utf-8") as f:
        names = _INCLUDE.findall(_without_comments(f.read()))
    found = []
    for name in names:
        for where in (os.path.dirname(path), ""):
            candidate = os.path.normpath(os.path.join(where, name)).replace(os.sep, "/")
            if os.path.isfile(os.path.join(CSRC, candidate)):
                found.append(candidate)
                break
    return found


def include_edges() -> dict[str, set[str]]:
    """Which C file includes another's header (or the file itself), for every C file of the package: a header counts
    as the file it is named for (``X.h`` as ``X.c`` where there is one), so ``#include "X.h"`` in a file, or in its
    own header, is an edge to ``X.c``. A header named for no C file (``taichi_aot.h``, ``backends/vkstate.h``: types
    every layer shares) is part of whichever file includes it: its own includes are that file's."""
    def named_for(header: str) -> str | None:
        source = header[:-2] + ".c"
        return source if header.endswith(".h") and os.path.isfile(os.path.join(CSRC, source)) else None

    edges: dict[str, set[str]] = {}
    for name in _c_files():
        own = name[:-2] + ".h"
        todo = _included(name) + (_included(own) if os.path.isfile(os.path.join(CSRC, own)) else [])
        seen: set[str] = set()
        edges[name] = set()
        while todo:
            header = todo.pop()
            if header in seen:
                continue
            seen.add(header)
            target = header if header.endswith(".c") else named_for(header)
            if target is None:
                todo += _included(header)
            elif target != name and header not in INCLUDED_ACROSS:
                edges[name].add(target)
    return edges


def test_no_circle_among_the_c_files():
    """The C files are layers too: a file calls only those below it (the Vulkan launch's, backends/vkstate.h says
    which), and a function that would call up is given to it instead, or lives below. Its includes count too: a
    header is the file it is named for, so a layer includes only the headers of those below it (a header every layer
    includes is named for none: backends/vkstate.h, the Vulkan launch's types)."""
    from test_layers import _circles

    edges = c_calls()
    assert "backends/vkbatch.c" in edges["backends/vulkan.c"]  # the checker sees a call across files,
    assert "pyhelp.c" in edges["call.c"]  # a static function's within a unit,
    assert "call.c" in edges["call_module.c"]  # and a variable's (the launcher's type spec)
    included = include_edges()
    assert "profile.c" in included["launch.c"]  # an include of a file's header,
    assert "waits.c" in included["backends/vkprofile.c"]  # one through a header named for no file (vkstate.h),
    assert "call.c" in included["call_module.c"]  # and a C file's own include
    for name, targets in included.items():
        edges[name] |= targets
    assert _circles(edges) == []


def test_a_header_that_includes_across_says_why():
    """A header on INCLUDED_ACROSS would close a circle were its includes counted; one that no longer would is taken
    off."""
    from test_layers import _circles

    calls = c_calls()
    for header in INCLUDED_ACROSS:
        edges = {name: set(targets) for name, targets in calls.items()}
        for name in _c_files():
            if header in _included(name):
                edges[name].add(header[:-2] + ".c")
        assert _circles(edges) != [], f"{header} closes no circle now: take it off INCLUDED_ACROSS"


def test_the_c_calls_files_call_only_those_included_before_them():
    """call_module.c #includes the C call's files lowest first (setup.py's CALL_FILES, in its order): each calls only
    files before it, and call_module.c, the module's init, any of them."""
    order = _listed("setup.py", "CALL_FILES")[1:]
    edges = c_calls()
    up = [(name, above) for i, name in enumerate(order) for above in sorted(edges[name])
          if (above in order and order.index(above) > i) or above == "call_module.c"]
    assert up == []
    with open(os.path.join(CSRC, "call_module.c"), encoding="utf-8") as f:
        assert re.findall(r'^#include "(\w+\.c)"', f.read(), re.M) == order
