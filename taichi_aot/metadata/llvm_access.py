"""Which ndarray arguments an LLVM kernel's code may write, read from its IR (``NAME.ll``), for modules whose
metadata records no access (Taichi's own ``ti.aot.Module``; ``taichi_aot build`` learns it from a gfx build and
records it in ``taichi_aot.json``, which wins). A host array that a kernel only reads is then not copied back after
a launch, and a read-only array may be passed to it.

The answer must never be "not written" for an argument the code writes (its copy back would be skipped: the caller's
array would keep its old bytes), so the reading follows every value derived from an argument's data pointer and
gives up (None: every ndarray written, as before) at anything it does not follow. In each function:

* the kernel's ``RuntimeContext`` (every value of its type: parameters, loads) leads to the argument buffer through
  its first field (a ``getelementptr`` of it, or a cast of the context, loaded as the layout's pointer or as
  ``i8*`` and cast to it); the context is passed on only to the module's own functions (read in their turn) and the
  runtime's helpers Taichi calls with it (:data:`_CONTEXT_CALLS`);
* from the layout's pointer, argument k's struct (``getelementptr LAYOUT, p, 0, k``), its shape (field 0, read),
  its data pointer's slot (field 1), loaded as the data pointer, and its gradient's (field 2: a reverse kernel's
  gradients are arguments of their own, always taken as read and written);
* a data pointer's derived values (address arithmetic, casts, ``phi``, ``select``...) carry it; a ``store`` through
  one, an atomic on one, or a call given one writes the argument; a data pointer stored, returned, or any other use
  of the layout's pointer, an argument's struct or a slot, ends the reading (None).
"""

from __future__ import annotations

import hashlib
import re
from typing import Callable, ClassVar

from .llvm_ir import CONTEXT

__all__ = ["written", "written_in"]

#: The runtime's functions Taichi's code calls with the context (none of them writes an ndarray).
_CONTEXT_CALLS = re.compile(r"RuntimeContext_get_(?:runtime|result_buffer)|[gc]pu_parallel_range_for|parallel_for"
                            r"|rand_\w+|linear_thread_idx|StructMeta_set_context")
_VALUE = re.compile(r"%[-\w.$]+|%\"[^\"]*\"")
_RESULT = re.compile(r"^\s*(%[-\w.$]+) = (?:(?:tail|musttail|notail) )?(\w+)")
_OPCODE = re.compile(r"^\s*(\w+)")
_CALLEE = re.compile(r"@([-\w.$]+)\(")
_POINTED = re.compile(r"@([-\w.$]+)(?![-\w.$(])")
_DECLARED = re.compile(r"^declare [^@\n]*@([-\w.$]+)\(", re.M)
_CONTEXT_TYPE = re.compile(rf"^{CONTEXT}\*$")
_PARAMS = re.compile(r"@[-\w.$]+\((.*)\)")
_GEP = re.compile(r"getelementptr(?: inbounds)? (.+?), \1\* (%[-\w.$]+)((?:, i(?:32|64) -?\d+)+)$")
_LOAD = re.compile(r"load (.+?), \1\* (%[-\w.$]+)")
_CAST = re.compile(r"bitcast (.+?) (%[-\w.$]+) to (.+)$")
#: Instructions whose result carries nothing of their operands' pointers.
_NO_POINTER = {"icmp", "fcmp", "load"}

_GIVE_UP = object()


class _Reader:
    """One function's reading (see the module docstring): each value's state, and the arguments written."""

    def __init__(self, layout: str, arrays: set[int], defined: set[str], indirect: bool):
        self.layout, self.arrays, self.defined, self.indirect = layout, arrays, defined, indirect
        self.state: dict[str, tuple] = {}
        self.written: set[int] = set()
        self.changed = False

    def _result_state(self, op: str, body: str, found: list[tuple]) -> tuple | object | None:
        """The state of an instruction's result from its tainted operands ``found`` (None: nothing of them)."""
        if {f[0] for f in found} == {"data"}:
            return None if op in _NO_POINTER else ("data", frozenset().union(*(f[1] for f in found)))
        if len(found) != 1:
            return _GIVE_UP
        return self._FROM[found[0][0]](self, op, body, found[0])

    def _from_context(self, op: str, body: str, _: tuple) -> tuple | object | None:
        if op == "bitcast":
            return self._from_args_slot(op, body, _)
        indices = _indices(body) if op == "getelementptr" else None
        if indices is None or len(indices) < 2 or indices[0] != 0:
            return _GIVE_UP
        if indices[1] != 0:
            return None  # another field: the runtime, the result buffer...
        return ("args_slot",) if len(indices) == 2 else _GIVE_UP

    def _from_args_slot(self, op: str, body: str, _: tuple) -> tuple | object:
        if op == "bitcast":
            cast = _CAST.search(body)
            return ("args_slot",) if cast and cast.group(3) in ("i8**", self.layout + "**") else _GIVE_UP
        load = _LOAD.search(body) if op == "load" else None
        loaded = load.group(1) if load else ""
        return ("base",) if loaded == self.layout + "*" else ("raw",) if loaded == "i8*" else _GIVE_UP

    def _from_raw(self, op: str, body: str, _: tuple) -> tuple | object:
        cast = _CAST.search(body) if op == "bitcast" else None
        return ("base",) if cast and cast.group(3) == self.layout + "*" else _GIVE_UP

    def _from_base(self, op: str, body: str, _: tuple) -> tuple | object | None:
        gep = _GEP.search(body) if op == "getelementptr" else None
        indices = _indices(body) if gep is not None and gep.group(1) == self.layout else None
        if indices is None or len(indices) < 2 or indices[0] != 0:
            return _GIVE_UP
        k, rest = indices[1], indices[2:]
        if k not in self.arrays:
            return None  # a scalar's or a tensor's bytes: read
        return ("arg", k) if not rest else self._from_arg(op, body, ("arg", k), [0, *rest])

    def _from_arg(self, op: str, body: str, kind: tuple, indices: list[int] | None = None) -> tuple | object | None:
        indices = indices if indices is not None else _indices(body) if op == "getelementptr" else None
        if indices is None or len(indices) < 2 or indices[0] != 0:
            return _GIVE_UP
        if indices[1] in (0, 2):  # its shape (read); its gradient's pointer (a reverse kernel's gradients are arguments
            return None  # of their own, always read and written: _arguments.gradient_signature)
        return ("slot", kind[1]) if indices[1:] == [1] else _GIVE_UP

    def _from_slot(self, op: str, body: str, kind: tuple) -> tuple | object:
        return ("data", frozenset({kind[1]})) if op == "load" else kind if op == "bitcast" else _GIVE_UP

    _FROM: ClassVar[dict[str, Callable[..., tuple | object | None]]] = {
        "context": _from_context, "args_slot": _from_args_slot, "raw": _from_raw, "base": _from_base,
        "arg": _from_arg, "slot": _from_slot}

    def _store(self, body: str, values: list[str], found: list[tuple[str, tuple]], _: bool) -> bool:
        pointer = values[-1]
        if any(s[0] != "context" for v, s in found if v != pointer):
            return False  # a tracked pointer into memory: not followed there (a context is known by its type)
        kind = self.state.get(pointer, ("none",))
        if kind[0] == "data":
            self.written |= kind[1]
        return kind[0] in ("none", "data")

    def _atomic(self, body: str, values: list[str], found: list[tuple[str, tuple]], _: bool) -> bool:
        if any(s[0] != "data" for _, s in found):
            return False
        self.written |= frozenset().union(*(s[1] for _, s in found))
        return True

    def _call(self, body: str, values: list[str], found: list[tuple[str, tuple]], returns: bool) -> bool:
        """A call given a data pointer writes its argument; the context goes to the runtime's helpers and to the
        module's own functions that return nothing (each read in its turn)."""
        callee = _CALLEE.search(body)
        name = callee.group(1) if callee else None
        helper = name is not None and bool(_CONTEXT_CALLS.fullmatch(name))
        own = (self.indirect if name is None else name in self.defined) and not returns
        for _, s in found:
            if s[0] == "data":
                self.written |= s[1]  # given to a function: taken as written
            elif s[0] != "context" or not (helper or own):
                return False
        return True

    _EFFECTS: ClassVar[dict[str, Callable[..., bool]]] = {"store": _store, "atomicrmw": _atomic, "cmpxchg": _atomic,
                                                "call": _call}

    def _effect(self, op: str, body: str, values: list[str], returns: bool) -> bool:
        """What an instruction does to the arguments (stores, atomics, calls, returns); False: the reading ends."""
        found = [(v, self.state[v]) for v in values if v in self.state]
        if not found:
            return True
        effect = self._EFFECTS.get(op)
        if effect is None:
            return op in ("br", "switch")  # a return or anything else with one: not followed
        return effect(self, body, values, found, returns)

    def step(self, line: str) -> bool:
        """Read one instruction; False where the reading ends."""
        result = _RESULT.match(line)
        if result is None:
            opcode = _OPCODE.match(line)
            values = list(dict.fromkeys(_VALUE.findall(line)))
            return opcode is None or self._effect(opcode.group(1), line, values, False)
        name, op = result.group(1), result.group(2)
        body = line[result.end(2):].strip()
        values = list(dict.fromkeys(_VALUE.findall(body)))
        if op in self._EFFECTS:  # its result is an element's value, or what a function returns: not followed
            return self._effect(op, body, values, True)
        load = _LOAD.search(line) if op == "load" else None
        if load is not None and _CONTEXT_TYPE.match(load.group(1)):
            self.state[name] = ("context",)
            return True
        found = [self.state[v] for v in values if v in self.state]
        new = self._result_state(op, line, found) if found else None
        if new is _GIVE_UP:
            return False
        if new is not None and self.state.get(name) != new:
            self.state[name] = new  # type: ignore[assignment]
            self.changed = True
        return True


def _indices(body: str) -> list[int] | None:
    """A ``getelementptr``'s constant indices (None: not all constant, or not one)."""
    gep = _GEP.search(body)
    return [int(i) for i in re.findall(r"i(?:32|64) (-?\d+)", gep.group(3))] if gep else None


def _params(header: str) -> list[str]:
    """A function's parameters, each as written (type, attributes, name), split at the commas between them."""
    found = _PARAMS.search(header)
    out, depth, start = [], 0, 0
    text = found.group(1) if found else ""
    for i, ch in enumerate(text):
        depth += ch in "({[<"
        depth -= ch in ")}]>"
        if ch == "," and depth == 0:
            out.append(text[start:i])
            start = i + 1
    return [*out, text[start:]] if text else out


def _functions(text: str) -> list[tuple[str, list[str]]]:
    """Each defined function's header line and its instruction lines."""
    out: list[tuple[str, list[str]]] = []
    lines: list[str] | None = None
    for line in text.splitlines():
        if line.startswith("define "):
            lines = []
            out.append((line, lines))
        elif line.startswith("}"):
            lines = None
        elif lines is not None:
            stripped = line.split(";", 1)[0].rstrip() if ";" in line and '"' not in line else line.rstrip()
            if stripped and not stripped.endswith(":") and stripped.strip():
                lines.append(stripped)
    return out


def written(text: str, layout: str, arrays: set[int]) -> set[int] | None:
    """The ndarray arguments (their indices, among ``arrays``) a kernel's IR ``text`` may write, its argument buffer
    laid out as the LLVM type ``layout``; None where the reading cannot tell (the module docstring)."""
    functions = _functions(text)
    defined = {m.group(1) for header, _ in functions if (m := _CALLEE.search(header)) is not None}
    # a call through a pointer reaches a function the module names as a value: one it defines (read here), or a
    # function of the runtime's that is given the context
    pointed = set(_POINTED.findall(text))
    indirect = all(n in defined or _CONTEXT_CALLS.fullmatch(n) for n in pointed & set(_DECLARED.findall(text)))
    out: set[int] = set()
    for header, lines in functions:
        reader = _Reader(layout, arrays, defined, indirect)
        for param in _params(header):  # the context's parameters (a task takes it by value)
            names = _VALUE.findall(param)
            if names and re.match(rf"{CONTEXT}\*", param.strip()):
                reader.state[names[-1]] = ("context",)
        for _ in range(16):  # values used before the line that makes them (phi): read again until nothing changes
            reader.changed = False
            if not all(reader.step(line) for line in lines):
                return None
            if not reader.changed:
                break
        else:
            return None
        out |= reader.written
    return out & arrays


#: Readings made in this process: (the IR's SHA-256, the layout, the arrays) -> the answer. A module loaded again
#: (shared by content) is not read through again.
_read: dict[tuple[bytes, str, frozenset[int]], frozenset[int] | None] = {}


def written_in(raw: bytes, layout: str, arrays: set[int]) -> frozenset[int] | None:
    """:func:`written` of a kernel's IR as its file's bytes, remembered by content."""
    key = (hashlib.sha256(raw).digest(), layout, frozenset(arrays))
    if key not in _read:
        if len(_read) > 4096:
            _read.clear()
        found = written(raw.decode("utf-8", "replace"), layout, arrays)
        _read[key] = frozenset(found) if found is not None else None
    return _read[key]
