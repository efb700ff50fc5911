"""One reader of the LLVM IR text Taichi 1.7.4 writes for a kernel (``NAME.ll``), for the metadata checks
(:mod:`.llvm_code`) and the own CUDA launcher's gate and PTX step (:mod:`taichi_aot.ptx`).

Two habits of LLVM's text decide how names are read:

* a global's name is bare (``@add_c80_0_kernel_0_range_for``) where it is made of letters, digits, ``$._-``, and
  quoted with ``\\XX`` escapes for its other bytes otherwise (``@"\\D1\\8F\\D0\\B4..."``: a kernel named in
  Cyrillic);
* Taichi links each kernel's IR from several LLVM modules, and LLVM renames the struct types that clash:
  ``%struct.LLVMRuntime.6``, ``%struct.RuntimeContext.7``, ``%struct.RandState.5`` (a one-kernel module's IR holds
  only such names).
"""

from __future__ import annotations

import re

_ESCAPE = re.compile(rb"\\([0-9A-Fa-f]{2})")
#: A global's name after ``@``: bare (group 1) or quoted (group 2).
NAME = r'(?:([-\w.$]+)|"((?:[^"\\\n]|\\[0-9A-Fa-f]{2})*)")'
_DEFINE = re.compile(rf"^define [^@\n]*@{NAME}\(", re.M)
_DECLARE = re.compile(rf"^declare [^@\n]*@{NAME}\(", re.M)
_BARE = re.compile(r"[-\w.$]+", re.ASCII)


def struct(base: str) -> str:
    """A regex of the struct type ``%struct.<base>`` under any suffix LLVM gave it."""
    return rf"%struct\.{re.escape(base)}(?:\.\d+)?"


RUNTIME, CONTEXT = struct("LLVMRuntime"), struct("RuntimeContext")
#: A task: a function taking its RuntimeContext by value (group 3: the context's type name).
_TASK = re.compile(rf"^define (?:dso_local )?void @{NAME}\(({CONTEXT})\* byval", re.M)
_RUNTIME_GEP = re.compile(rf"getelementptr(?: inbounds)? ({RUNTIME}), \1\* %[\w.]+, i(?:32|64) 0, i32 (\d+)")
_CONTEXT_GEP = re.compile(rf"getelementptr(?: inbounds)? ({CONTEXT}), \1\* %[\w.]+, i(?:32|64) 0, i32 (\d+)")
_RUNTIME_CAST = re.compile(rf"bitcast {RUNTIME}\* ")
#: LLVMRuntime's field holding the roots of the fields' SNode trees (Taichi 1.7.4's layout), and its getter.
ROOTS = 7
_ROOTS_GETTER = re.compile(r"@LLVMRuntime_get_roots\(")


def unquoted(match: re.Match, group: int = 1) -> str:
    """The name a :data:`NAME` match at ``group`` (bare) and ``group + 1`` (quoted) stands for."""
    bare = match.group(group)
    if bare is not None:
        return bare
    raw = match.group(group + 1).encode("utf-8", "surrogateescape")
    return _ESCAPE.sub(lambda m: bytes([int(m.group(1), 16)]), raw).decode("utf-8", "replace")


def ref(name: str) -> str:
    """``@name`` as LLVM writes it: bare, or quoted with the bytes it cannot hold bare escaped."""
    if _BARE.fullmatch(name):
        return "@" + name
    return '@"' + "".join(chr(b) if 32 <= b < 127 and b not in (34, 92) else f"\\{b:02X}"
                         for b in name.encode()) + '"'


def defines(text: str) -> list[tuple[int, str]]:
    """(offset, name) of each function the IR defines, in order."""
    return [(m.start(), unquoted(m)) for m in _DEFINE.finditer(text)]


def declares(text: str) -> set[str]:
    """The names of the functions the IR declares (defined elsewhere)."""
    return {unquoted(m) for m in _DECLARE.finditer(text)}


def tasks(text: str) -> dict[str, str]:
    """{task: the name of its RuntimeContext type} of the functions that take a RuntimeContext by value."""
    return {unquoted(m): m.group(3) for m in _TASK.finditer(text)}


def runtime_fields(text: str) -> set[int]:
    """The LLVMRuntime fields the code takes the address of."""
    return {int(m.group(2)) for m in _RUNTIME_GEP.finditer(text)}


def context_fields(text: str) -> set[int]:
    """The RuntimeContext fields the code takes the address of."""
    return {int(m.group(2)) for m in _CONTEXT_GEP.finditer(text)}


def casts_runtime(text: str) -> bool:
    """Whether the code reads LLVMRuntime through a pointer cast to another type."""
    return _RUNTIME_CAST.search(text) is not None


def reads_roots(text: str) -> bool:
    """Whether the code reads the roots of the fields' SNode trees, directly (optimised code) or through the
    runtime's getter (CUDA's)."""
    return ROOTS in runtime_fields(text) or _ROOTS_GETTER.search(text) is not None


def field_type(text: str, name: str, index: int) -> str | None:
    """The type of field ``index`` of the struct ``name`` (``%struct.X.6``) as the IR defines it, or None."""
    m = re.search(rf"^{re.escape(name)} = type \{{ (.*) \}}$", text, re.M)
    if m is None:
        return None
    fields, depth, start = [], 0, 0
    body = m.group(1)
    for i, c in enumerate(body):
        depth += c in "{[(<"
        depth -= c in "}])>"
        if c == "," and depth == 0:
            fields.append(body[start:i].strip())
            start = i + 1
    fields.append(body[start:].strip())
    return fields[index] if 0 <= index < len(fields) else None


def runtime_struct(text: str) -> str | None:
    """The LLVMRuntime type (``%struct.LLVMRuntime.6``) the kernel's tasks reach through their RuntimeContext (its
    field 1), under whatever suffix LLVM gave it; None where the IR defines none."""
    for context in dict.fromkeys(tasks(text).values()):
        pointer = field_type(text, context, 1)
        if pointer and pointer.endswith("*") and re.fullmatch(RUNTIME, pointer[:-1]):
            return pointer[:-1]
    names = re.findall(rf"^({RUNTIME}) = type ", text, re.M)
    return min(names, key=len) if names else None
