"""Which ndarray arguments an LLVM kernel's code may write, read from its IR (``NAME.ll``), for modules whose
metadata records no access (Taichi's own ``ti.aot.Module``; ``taichi_aot build`` learns it from a gfx build and
records it in ``taichi_aot.json``, which wins). A host array that a kernel only reads is then not copied back after
a launch, and a read-only array may be passed to it.

The answer must never be "not written" for an argument the code writes (its copy back would be skipped: the caller's
array would keep its old bytes), so the reading follows every value that leads to an argument's data, and gives up
(None: every ndarray written, as before) at anything it does not follow. In each function:

* the kernel's ``RuntimeContext`` (a parameter of its type, or a load of its type) leads to the argument buffer
  through its first field (a ``getelementptr`` of it, or a cast of the context), loaded as the layout's pointer (or as
  ``i8*`` and cast to it); it may be kept in a stack slot of its own type (an ``alloca``: loads and stores of the
  context alone), and is given only to the module's own functions (read in their turn), to the runtime's helpers
  Taichi calls with it (:func:`.llvm_ir.context_call`), and, inside the parallel-for helpers the module defines
  (:func:`.llvm_ir.loop_helper`), to the task functions each call of them names (every function they are given is
  the module's own);
* from the layout's pointer, argument k's struct (``getelementptr LAYOUT, p, 0, k``) and its data pointer's slot
  (field 1), loaded as the data pointer. What else is reached there (an argument's shape, a scalar argument, a
  gradient's pointer, the context's other fields) is only read: a load of it, or a ``getelementptr`` inside it;
  a gradient's pointer is its own argument's (a reverse kernel's gradients are arguments of their own, always taken
  as read and written);
* a data pointer's derived values (address arithmetic, casts, ``phi``, ``select``...) carry it; a ``store`` through
  one, an atomic on one, or a call given one writes the argument; a data pointer stored, returned, or any other use
  of what leads to one, ends the reading (None). So does a line it cannot read that names a value it follows.
"""

from __future__ import annotations

import hashlib
from typing import Callable, ClassVar

from . import llvm_ir
from .llvm_ir import Instruction, IrKernel

__all__ = ["written", "written_in"]

_GIVE_UP = object()


def _indices(body: str) -> list[int] | None:
    """A ``getelementptr``'s constant indices (None: not all constant, or not one)."""
    gep = llvm_ir.gep(body)
    return gep[1] if gep else None


def _inside(indices: list[int] | None) -> bool:
    """Whether a ``getelementptr``'s indices stay inside the object it starts from (first 0, the rest not negative)."""
    return indices is not None and len(indices) >= 1 and indices[0] == 0 and min(indices) >= 0


class _Reader:
    """One function's reading (see the module docstring): each value's state, and the arguments written."""

    def __init__(self, layout: str, arrays: set[int], defined: set[str], loop: bool):
        self.layout, self.arrays, self.defined, self.loop = layout, arrays, defined, loop
        self.state: dict[str, tuple] = {}
        self.written: set[int] = set()
        self.changed = False

    def _set(self, name: str, state: tuple) -> None:
        if self.state.get(name) != state:
            self.state[name] = state
            self.changed = True

    # -- what a value's state gives an instruction's result ----------------------------------------------------------

    def _result_state(self, op: str, body: str, found: list[tuple]) -> tuple | object | None:
        """The state of an instruction's result from its followed operands ``found`` (None: nothing of them)."""
        if op in ("icmp", "fcmp"):
            return None
        if {f[0] for f in found} == {"data"}:
            return None if op == "load" else ("data", frozenset().union(*(f[1] for f in found)))
        if len(found) != 1:
            return _GIVE_UP
        return self._FROM[found[0][0]](self, op, body, found[0])

    def _cast_to(self, body: str, *types: str) -> bool:
        return llvm_ir.cast_to(body) in types

    def _from_context(self, op: str, body: str, _: tuple) -> tuple | object | None:
        if op == "bitcast":  # the first field at the struct's start
            return ("args_slot",) if self._cast_to(body, "i8**", self.layout + "**") else _GIVE_UP
        indices = _indices(body) if op == "getelementptr" else None
        if not _inside(indices) or indices is None or len(indices) < 2:
            return _GIVE_UP
        if indices[1] != 0:
            return ("field",)  # the runtime, the result buffer...: read
        return ("args_slot",) if len(indices) == 2 else _GIVE_UP

    def _from_context_slot(self, op: str, body: str, _: tuple) -> tuple | object | None:
        loaded = llvm_ir.loaded(body) if op == "load" else None
        return ("context",) if loaded is not None and llvm_ir.is_context_pointer(loaded) else _GIVE_UP

    def _from_args_slot(self, op: str, body: str, _: tuple) -> tuple | object:
        if op == "bitcast":
            return ("args_slot",) if self._cast_to(body, "i8**", self.layout + "**") else _GIVE_UP
        loaded = (llvm_ir.loaded(body) if op == "load" else None) or ""
        return ("base",) if loaded == self.layout + "*" else ("raw",) if loaded == "i8*" else _GIVE_UP

    def _from_raw(self, op: str, body: str, _: tuple) -> tuple | object:
        return ("base",) if op == "bitcast" and self._cast_to(body, self.layout + "*") else _GIVE_UP

    def _from_base(self, op: str, body: str, _: tuple) -> tuple | object | None:
        gep = llvm_ir.gep(body) if op == "getelementptr" else None
        indices = gep[1] if gep is not None and gep[0] == self.layout else None
        if not _inside(indices) or indices is None or len(indices) < 2:
            return _GIVE_UP
        k, rest = indices[1], indices[2:]
        if k not in self.arrays:
            return ("field",)  # a scalar's or a tensor's bytes: read
        return ("arg", k) if not rest else self._from_arg(op, body, ("arg", k), [0, *rest])

    def _from_arg(self, op: str, body: str, kind: tuple, indices: list[int] | None = None) -> tuple | object | None:
        indices = indices if indices is not None else _indices(body) if op == "getelementptr" else None
        if not _inside(indices) or indices is None or len(indices) < 2:
            return _GIVE_UP
        if indices[1:] == [1]:
            return ("slot", kind[1])
        return ("field",) if indices[1] in (0, 2) else _GIVE_UP  # its shape; its gradient's pointer (its own)

    def _from_slot(self, op: str, body: str, kind: tuple) -> tuple | object:
        return ("data", frozenset({kind[1]})) if op == "load" else kind if op == "bitcast" else _GIVE_UP

    def _from_field(self, op: str, body: str, kind: tuple) -> tuple | object | None:
        if op == "load":
            return None
        return kind if op == "getelementptr" and _inside(_indices(body)) else _GIVE_UP

    _FROM: ClassVar[dict[str, Callable[..., tuple | object | None]]] = {
        "context": _from_context, "context_slot": _from_context_slot, "args_slot": _from_args_slot, "raw": _from_raw,
        "base": _from_base, "arg": _from_arg, "slot": _from_slot, "field": _from_field}

    # -- what an instruction does to the arguments -------------------------------------------------------------------

    def _store(self, body: str, values: list[str], found: list[tuple[str, tuple]], _: bool) -> bool:
        pointer = values[-1]
        kind = self.state.get(pointer, ("none",))
        stored = [s[0] for v, s in found if v != pointer]
        if kind[0] == "context_slot":  # the context kept in its own slot (a typed store: nothing else fits)
            return stored in ([], ["context"])
        if stored:
            return False  # a followed value put into memory: not followed there
        if kind[0] == "data":
            self.written |= kind[1]
        return kind[0] in ("none", "data")

    def _atomic(self, body: str, values: list[str], found: list[tuple[str, tuple]], _: bool) -> bool:
        if any(s[0] != "data" for _, s in found):
            return False
        self.written |= frozenset().union(*(s[1] for _, s in found))
        return True

    def _call(self, body: str, values: list[str], found: list[tuple[str, tuple]], returns: bool) -> bool:
        """A call given a data pointer writes its argument; the context goes to the runtime's helpers, to the module's
        own functions that return nothing (each read in its turn), and inside a parallel-for helper to the task it
        was given (see :func:`written`)."""
        name, cast = llvm_ir.callee(body)
        if cast:  # through a cast: only the runtime's helpers, whose parameters keep their meaning
            allowed = llvm_ir.context_call(name or "")
        elif name is None:
            allowed = self.loop and not returns  # through a pointer: a parallel-for helper's task
        else:
            allowed = llvm_ir.context_call(name) or (name in self.defined and not returns)
        for _, s in found:
            if s[0] == "data":
                self.written |= s[1]  # given to a function: taken as written
            elif s[0] != "context" or not allowed:
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

    def step(self, ins: Instruction) -> bool:
        """Read one instruction; False where the reading ends."""
        values = list(ins.values)
        if ins.result is None:
            if ins.opcode is None:  # not read: fine only where it names nothing followed
                return not any(v in self.state for v in values)
            return self._effect(ins.opcode, ins.line, values, False)
        values.remove(ins.result)
        if ins.opcode in self._EFFECTS:  # its result is an element's value, or what a function returns: not followed
            return self._effect(ins.opcode, ins.body, values, True)
        return self._result(ins.result, ins.opcode or "", ins.line, values)

    def _result(self, name: str, op: str, line: str, values: list[str]) -> bool:
        """An instruction that makes value ``name`` (not a call, store or atomic): its state."""
        found = [self.state[v] for v in values if v in self.state]
        if op == "alloca" and llvm_ir.allocates_context_slot(line):
            self._set(name, ("context_slot",))
            return True
        loaded = llvm_ir.loaded(line) if op == "load" else None
        if loaded is not None and llvm_ir.is_context_pointer(loaded) and all(f[0] == "context_slot" for f in found):
            self._set(name, ("context",))  # from its slot, or from memory not followed: a context
            return True
        new = self._result_state(op, line, found) if found else None
        if new is _GIVE_UP:
            return False
        if new is not None:
            self._set(name, new)  # type: ignore[arg-type]
        return True


def written(ir: IrKernel | str, layout: str, arrays: set[int]) -> set[int] | None:
    """The ndarray arguments (their indices, among ``arrays``) a kernel's IR (read, or its text) may write, its
    argument buffer laid out as the LLVM type ``layout``; None where the reading cannot tell (the module docstring)."""
    ir = IrKernel.of(ir)
    functions = ir.functions
    defined = {f.name for f in functions if f.name is not None}
    # every call of a parallel-for helper names, among its arguments, only the module's own functions (the tasks the
    # helper calls through a pointer with the context)
    tasks_known = all(n in defined for named in ir.loop_arguments for n in named)
    out: set[int] = set()
    for function in functions:
        loop = tasks_known and llvm_ir.loop_helper(function.name)
        reader = _Reader(layout, arrays, defined, loop)
        for name in function.context_params:  # the context's parameters (a task takes it by value)
            reader.state[name] = ("context",)
        for _ in range(16):  # values used before the line that makes them (phi): read again until nothing changes
            reader.changed = False
            if not all(reader.step(ins) for ins in function.instructions):
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


def written_in(raw: bytes, layout: str, arrays: set[int], ir: IrKernel | None = None) -> frozenset[int] | None:
    """:func:`written` of a kernel's IR as its file's bytes (``ir``: those bytes read, where they were), remembered by
    content."""
    key = (hashlib.sha256(raw).digest(), layout, frozenset(arrays))
    if key not in _read:
        if len(_read) > 4096:
            _read.clear()
        found = written(ir if ir is not None else raw.decode("utf-8", "replace"), layout, arrays)
        _read[key] = frozenset(found) if found is not None else None
    return _read[key]
