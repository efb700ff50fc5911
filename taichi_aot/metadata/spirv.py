"""A structural check of a task's SPIR-V, made before the driver sees it.

libtaichi_c_api hands a Vulkan module's SPIR-V to the driver as it is, and drivers trust it: an instruction whose
operand names the wrong id (a type where a value is due, a value of another type, an id nothing defines, a label)
crashes them when the kernel is compiled or launched, taking the process with it. This reads the module once
and checks what the SPIR-V specification (and Vulkan's environment for it) requires of every valid module,
relaxed where Taichi 1.7.4 itself departs from it (:mod:`.spirv_rules` says where), so a module Taichi wrote
passes:

* every instruction is one a compute shader can hold (:mod:`.spirv_ops`), with the operands its form lists;
* every result id is below the header's bound and defined once; every id operand names an id the module
  defines, of the kind the operand takes (a type, a value, a label, a function, a constant scope);
* inside a function, a value is defined in that function before its use (a phi's inputs excepted);
* functions are made of blocks that open with a label and end with one terminator, variables first, phis at a
  block's head, merge instructions just before the branch; a branch names a label of its function other than
  its entry, and a phi's parents branch to its block;
* the operands' types agree as each instruction requires: loads and stores through pointers to their value's
  type, access chains that walk their base's type, arithmetic and comparisons on numbers of the result's
  shape, boolean conditions, atomics on their pointer's type, calls and returns of the function's types, ...

Integer signedness is never compared (SPIR-V lets an operation take either), so nothing valid is refused.

The control flow's structure is checked by :mod:`.spirv_cfg`, the operands' types by :mod:`.spirv_rules`.
"""

from __future__ import annotations

from typing import Any

from ..errors import CorruptedDataError
from .spirv_cfg import check_function
from .spirv_header import check_header
from .spirv_ops import ANYWHERE, CONSTANTS, OPS, OUTSIDE, TERMINATORS, TYPES
from .spirv_rules import RULES, SpirvError, string_end
from .spirv_types import TYPE_RULES

_RULES = {**RULES, **TYPE_RULES}
_LABEL, _FUNCTION, _FUNCTION_END, _PARAMETER, _VARIABLE, _PHI = 248, 54, 56, 55, 59, 245
_LOOP_MERGE, _SELECTION_MERGE, _POINTER, _STRUCT, _CONSTANT = 246, 247, 32, 30, 43
_LINES = frozenset((8, 317, 0))  # OpLine, OpNoLine, OpNop: allowed between a block's phis or variables
_SCOPES = range(1, 7)  # the Scope values Vulkan allows: Device 1 ... QueueFamily 5, ShaderCallKHR 6
_GLSL = "GLSL.std.450"
_KINDS = {_LABEL: "l", _FUNCTION: "f", 11: "x"}  # what the ids of these instructions are; else by their form
#: The kind of id an operand's role takes ("a": any; "c", "e": constants, checked apart).
_ROLES = {"T": "t", "t": "t", "v": "v", "l": "l", "f": "f", "x": "x", "c": "-", "e": "-"}


def instructions(words: tuple[int, ...], name: str) -> list[tuple[int, tuple[int, ...]]]:
    """The module's instructions as (opcode, operand words), each checked to lie within the stream."""
    out = []
    i, end = 5, len(words)
    while i < end:
        count = words[i] >> 16
        if count == 0 or i + count > end:
            raise CorruptedDataError(f"{name} is truncated or damaged (instruction at word {i})")
        out.append((words[i] & 0xFFFF, words[i + 1:i + count]))
        i += count
    return out


def check(insts: list[tuple[int, tuple[int, ...]]], bound: int, name: str) -> str:
    """Check a SPIR-V module's instructions (see the module's docstring); CorruptedDataError names ``name``, the
    instruction and what is wrong. Returns why drivers cannot run the module though it is well formed (what
    Taichi 1.7.4 writes for f16 and f64 atomic min and max), or ""."""
    module = _Module(insts, bound)
    try:
        module.read()
        module.check_references()
        check_header(module)
        module.check_layout()
        trees = {}
        for entry, function in module.entries.items():
            module.at = function  # where a control flow error is reported
            trees[function], never_ends = check_function(entry, module.succ, module.merges, module.switches)
            if never_ends:  # well formed, but the kernel would run for ever: refused where it is looked up
                module.unsupported = module.unsupported or never_ends
        module.check_uses(trees)
        module.check_types()
        return module.unsupported
    except RecursionError:
        raise CorruptedDataError(f"{name}: types nested too deeply") from None
    except (SpirvError, IndexError, KeyError) as e:
        # IndexError, KeyError: what a module damaged past the checks' expectations may still trip over
        at = module.at
        if not insts:
            raise CorruptedDataError(f"{name}: no instructions") from None
        what = f"Op{OPS[insts[at][0]][0]}" if insts[at][0] in OPS else f"opcode {insts[at][0]}"
        why = e if isinstance(e, SpirvError) else "malformed operands"
        raise CorruptedDataError(f"{name}: instruction {at} ({what}): {why}") from None


_MEMORY_BITS = ((0x2, "n"), (0x8, "c"), (0x10, "c"))  # Aligned: a literal; MakePointerAvailable/Visible: a scope
_IMAGE_BITS = ((0x1, "v"), (0x2, "v"), (0x4, "vv"), (0x8, "v"), (0x10, "v"), (0x20, "v"), (0x40, "v"), (0x80, "v"),
               (0x100, "c"), (0x200, "c"), (0x10000, "v"))  # Bias, Lod, Grad, ConstOffset, ... MakeTexel*, Offsets
_MEMORY_KNOWN, _IMAGE_KNOWN = 0x3F, 0x17FFF


def _masked(w: tuple[int, ...], j: int, refs: list, bits: tuple, known: int) -> int:
    """Operands after a mask word (memory access, image operands): the ids its bits add, in the bits' order. A
    mask with a bit this does not know leaves the rest unread (its operands cannot be told apart)."""
    while j < len(w):
        mask = w[j]
        j += 1
        if mask & ~known:
            return len(w)
        for bit, roles in bits:
            if mask & bit:
                for role in roles:
                    if j >= len(w):
                        raise SpirvError("an operand its mask announces is missing")
                    if role != "n":
                        refs.append((role, w[j]))
                    j += 1
    return j


def _rest(ch: str, w: tuple[int, ...], j: int, refs: list) -> int:
    """The rest of an instruction's operands, as ``ch`` (a rest letter of the forms) reads them."""
    if ch in "VAY":
        refs.extend(({"V": "v", "A": "a", "Y": "t"}[ch], x) for x in w[j:])
    elif ch in "PQ":
        if (len(w) - j) % 2:
            raise SpirvError("an operand pair is incomplete")
        first, second = ("v", "l") if ch == "P" else ("a", "")
        for k in range(j, len(w), 2):
            refs.append((first, w[k]))
            if second:
                refs.append((second, w[k + 1]))
    elif ch == "M":
        return _masked(w, j, refs, _MEMORY_BITS, _MEMORY_KNOWN)
    elif ch == "I":
        return _masked(w, j, refs, _IMAGE_BITS, _IMAGE_KNOWN)
    return len(w)  # N, W: literals (a switch's targets are read with its selector's width)


_Fast = tuple[int, int, tuple[tuple[int, str], ...], str]


def _fast(form: str) -> _Fast | None:
    """How :func:`_read_fast` reads a form: (the words of its fixed head, its result's position or -1, ((position,
    role), ...) of the head's ids, its tail: "" or one of "NVAYMIs" or "v?"); None where it cannot."""
    head = form.rstrip("NVAYMIs?")
    tail = form[len(head):]
    if tail == "?":  # "v?"
        head, tail = head[:-1], "v?"
    if any(ch in "?sVAYPQNWMI" for ch in head) or len(tail) > 2 or (len(tail) == 2 and tail != "v?"):
        return None
    return len(head), head.find("R"), tuple((i, ch) for i, ch in enumerate(head) if ch not in "Rn"), tail


_FAST = {op: _fast(form) for op, (_, form, _) in OPS.items()}
_RESULTS = frozenset(op for op, (_, form, _) in OPS.items() if "R" in form)  # the instructions defining an id


def _read_fast(fast: _Fast, w: tuple[int, ...]) -> tuple[int, list[tuple[str, int]]] | None:
    """(result id or 0, [(role, id)]) of the common instructions, read without walking their form; None where
    :func:`_decode` must read it (or say what is wrong)."""
    count, result, ids, tail = fast
    extra = len(w) - count
    if extra < 0 or (extra and tail in ("", "M", "I")) or (tail == "s" and not extra) or (tail == "v?" and extra > 1):
        return None
    refs = [(role, w[i]) for i, role in ids]
    if tail in ("V", "A", "Y"):
        role = tail.lower() if tail != "Y" else "t"
        refs.extend((role, x) for x in w[count:])
    elif tail == "v?" and extra:
        refs.append(("v", w[count]))
    elif tail == "s" and string_end(w, count) != len(w):
        return None
    return (w[result] if result >= 0 else 0), refs


def _decode(form: str, w: tuple[int, ...]) -> tuple[int, list[tuple[str, int]]]:
    """(result id or 0, [(role, id)]) of an instruction's operands as its form lists them."""
    refs: list[tuple[str, int]] = []
    result, j, n = 0, 0, len(w)
    for i, ch in enumerate(form):
        if ch == "?":
            continue
        if j >= n and ch not in "VAYPQNWMI":
            if form[i + 1:i + 2] == "?":
                continue
            raise SpirvError("too few operands")
        if ch == "R":
            result = w[j]
        elif ch == "s":
            j = string_end(w, j) - 1
        elif ch in "VAYPQNWMI":
            j = _rest(ch, w, j, refs) - 1
        elif ch != "n":
            refs.append((ch, w[j]))
        j += 1
    if j < n:
        raise SpirvError(f"{n - j} operand word(s) more than its form takes")
    return result, refs


class _Module:
    """A module's instructions, its definitions, and the checks over them."""

    def __init__(self, insts: list[tuple[int, tuple[int, ...]]], bound: int):
        self.insts, self.bound = insts, bound
        self.at = 0  # the instruction being checked, for the error message
        self.defs: dict[int, int] = {}  # id -> index of its defining instruction
        self.kinds: dict[int, str] = {}  # id -> what it is: "t" a type, "v" a value, "l" a label, "f" a function, ...
        self.refs: list[list[tuple[str, int]]] = []
        self.fn: list[int] = []  # each instruction's function (its OpFunction's index), -1 outside them
        self.keys: dict[int, Any] = {}
        self.block_of: dict[int, int] = {}  # an instruction's index -> its block's label id
        self.succ: dict[int, list[int]] = {}  # a block's label -> the labels it branches to
        self.entries: dict[int, int] = {}  # the label of each function's first block -> its OpFunction's index
        self.merges: dict[int, tuple[int, int]] = {}  # a header's label -> (merge block, continue target or 0)
        self.merge_blocks: set[int] = set()  # the merge blocks of the headers above
        self.switches: set[int] = set()  # the headers whose block ends in OpSwitch
        self.entry_functions: set[int] = set()  # the functions entry points name
        self.laid_out: set[int] = set()  # structs with an Offset on a member
        self.blocks: set[int] = set()  # structs decorated Block or BufferBlock
        self.buffer_blocks = False  # whether a struct is decorated BufferBlock (a Uniform one may be written)
        self.forward: set[int] = set()  # pointer types declared ahead (OpTypeForwardPointer)
        self.glsl: set[int] = set()  # ids of the GLSL.std.450 instruction set
        self.unsupported = ""  # why drivers cannot run it, though it is well formed
        self.odd_width: set[int] = set()  # results of GLSL extrema narrower than their operands (see spirv_rules)

    # ---- reading ----------------------------------------------------------------------------------------

    def read(self) -> None:
        fn = -1
        for k, (op, w) in enumerate(self.insts):
            self.at = k
            if op not in OPS:
                raise SpirvError(f"opcode {op} is no instruction of a compute shader")
            fast = _FAST[op]
            read = _read_fast(fast, w) if fast is not None else None
            result, refs = read if read is not None else _decode(OPS[op][1], w)
            if op == _FUNCTION:
                fn = k
            self.fn.append(fn)
            self.refs.append(refs)
            if op == _FUNCTION_END:
                fn = -1
            if op in _RESULTS:
                self._define(result, k, op)
            if op == 11 and _literal(w[1:]) == _GLSL:
                self.glsl.add(result)
            elif op == 72 and w[2] == 35:  # OpMemberDecorate ... Offset
                self.laid_out.add(w[0])
            elif op == 71 and w[1] in (2, 3):  # OpDecorate ... Block or BufferBlock
                self.blocks.add(w[0])
                self.buffer_blocks = self.buffer_blocks or w[1] == 3
            elif op == 39:
                self.forward.add(w[0])
            elif op == 15:
                self.entry_functions.add(w[1])

    def _define(self, result: int, k: int, op: int) -> None:
        if not 0 < result < self.bound:
            raise SpirvError(f"result id {result} is not between 0 and the module's id bound {self.bound}")
        if result in self.defs:
            raise SpirvError(f"id {result} is defined twice (first by instruction {self.defs[result]})")
        self.defs[result] = k
        self.kinds[result] = _KINDS.get(op) or ("t" if op in TYPES else "v" if OPS[op][1][0] == "T" else "o")

    # ---- what an id is ----------------------------------------------------------------------------------

    def op_of(self, x: int) -> int:
        return self.insts[self.defs[x]][0]

    def is_value(self, x: int) -> bool:
        return self.kinds.get(x) == "v"

    def type_of(self, x: int) -> int:
        """The type id of value ``x``."""
        return self.insts[self.defs[x]][1][0]

    def describe(self, x: int) -> str:
        k = self.defs.get(x)
        return f"%{x} (Op{OPS[self.insts[k][0]][0]})" if k is not None else f"%{x} (not defined)"

    # ---- references -------------------------------------------------------------------------------------

    def check_references(self) -> None:
        kinds, fn, defs = self.kinds, self.fn, self.defs
        for k, refs in enumerate(self.refs):
            for role, x in refs:
                kind = kinds.get(x)
                if (kind is not None and kind == _ROLES.get(role, kind) and (defs[x] < k or role in "afl")
                        and (role in "Tta" or fn[defs[x]] == -1)):
                    continue  # the common case: a type, or a value or label outside functions, defined before
                self.at = k
                if kind is None:
                    raise SpirvError(f"operand %{x} names no id the module defines")
                self._role(role, x, kind)
                if role in "vcel":
                    self._reach(k, defs[x], x, role)
                if role in "Ttvce" and fn[defs[x]] == -1 and defs[x] > k and x not in self.forward:
                    raise SpirvError(f"operand {self.describe(x)} is used before its definition")

    def _role(self, role: str, x: int, kind: str) -> None:
        if role in "ce":
            op = self.op_of(x)
            shape = self.shape(self.type_of(x)) if op in CONSTANTS else ("", 0, 0)
            ok = shape[0] == "i" and shape[2] == 1
            if ok and role == "c" and op == _CONSTANT and self.insts[self.defs[x]][1][2] not in _SCOPES:
                raise SpirvError(f"scope operand {self.describe(x)} is no scope Vulkan allows")
        else:
            ok = kind == _ROLES.get(role, kind)
        if not ok:
            want = {"T": "a type", "t": "a type", "v": "a value", "c": "an integer constant (a scope)",
                    "e": "an integer constant", "l": "a label", "f": "a function", "x": "an instruction set"}[role]
            raise SpirvError(f"operand {self.describe(x)} is not {want}")

    def _reach(self, k: int, d: int, x: int, role: str) -> None:
        """A value or label used at ``k`` is defined where ``k`` can see it: outside functions, or earlier in
        the same function (a phi's inputs and branch targets may come later)."""
        home, here = self.fn[d], self.fn[k]
        if home == -1:
            return
        if home != here:
            raise SpirvError(f"operand {self.describe(x)} belongs to another function")
        if d > k and role != "l" and self.insts[k][0] != _PHI:
            raise SpirvError(f"operand {self.describe(x)} is used before its definition")

    def check_uses(self, trees: dict[int, Any]) -> None:
        """Every use of a value a function defines, in a block that can be reached, is in a block its definition's
        block dominates (a phi's input: the block it comes from); a block that cannot be reached dominates none."""
        block_of, defs, fn, kinds = self.block_of, self.defs, self.fn, self.kinds
        for k, (op, w) in enumerate(self.insts):
            tree = trees.get(fn[k])
            if tree is None or block_of.get(k) not in tree.first:
                continue
            if op == _PHI:
                uses = [(w[i], w[i + 1]) for i in range(2, len(w) - 1, 2)]
            else:
                uses = [(x, block_of[k]) for _, x in self.refs[k] if kinds.get(x) == "v"]
            for x, at in uses:
                d = defs.get(x)
                home = block_of.get(d) if d is not None and fn[d] == fn[k] else None
                if home == at and d is not None and d >= k and op != _PHI:
                    self.at = k
                    raise SpirvError(f"operand {self.describe(x)} is used before its definition")
                if home is not None and home != at and at in tree.first and \
                        (home not in tree.first or not tree.dominates(home, at)):
                    self.at = k
                    raise SpirvError(f"{self.describe(x)} is defined in block %{home}, which does not dominate its "
                                     f"use in block %{at}")

    # ---- layout -----------------------------------------------------------------------------------------

    def check_layout(self) -> None:
        state, label = "out", 0
        for k, (op, w) in enumerate(self.insts):
            self.at = k
            if state == "out":
                state = self._outside(op)
            elif state in ("head", "between"):
                state, label = self._between(op, w, state == "head", label)
            else:
                state = self._in_block(k, op, label)
            if label:
                self.block_of[k] = label
        if state != "out":
            raise SpirvError("the last function does not end")

    def _outside(self, op: int) -> str:
        if op == _FUNCTION:
            return "head"
        if op not in OUTSIDE and op not in ANYWHERE:
            raise SpirvError("an instruction of a function body outside any function")
        if op == _VARIABLE and self.insts[self.at][1][2] == 7:
            raise SpirvError("a Function variable outside any function")
        return "out"

    def _between(self, op: int, w: tuple[int, ...], head: bool, label: int) -> tuple[str, int]:
        if op == _LABEL:
            if head:
                self.entries[w[0]] = self.fn[self.at]
            self.succ[w[0]] = []
            return ("first" if head else "block"), w[0]
        if op == _FUNCTION_END:
            return "out", 0
        if head and op == _PARAMETER:
            return "head", 0
        raise SpirvError("an instruction outside any block (blocks open with OpLabel)")

    def _in_block(self, k: int, op: int, label: int) -> str:
        if op in TERMINATORS:
            targets = self.succ[label] = [x for role, x in self.refs[k] if role == "l"] + self._switch_targets(k)
            if any(target in self.entries for target in targets):
                raise SpirvError("a branch to its function's entry block")
            return "between"
        if op in (_LABEL, _FUNCTION_END):
            raise SpirvError("a block without its terminator")
        if op in OUTSIDE or op in (_FUNCTION, _PARAMETER):
            raise SpirvError("an instruction of the module's header inside a function")
        previous = self.insts[k - 1][0]
        if op == _PHI and previous not in (_PHI, _LABEL, *_LINES):
            raise SpirvError("OpPhi after other instructions of its block")
        if op == _VARIABLE:
            self._local_variable(k, label, previous)
        if op in (_LOOP_MERGE, _SELECTION_MERGE):
            after = self.insts[k + 1][0] if k + 1 < len(self.insts) else None
            if after not in ((249, 250) if op == _LOOP_MERGE else (250, 251)):
                raise SpirvError("a merge instruction not followed by its block's branch")
            self._merge(label, op, self.insts[k][1])
            if after == 251:
                self.switches.add(label)
        return "first" if label in self.entries else "block"

    def _merge(self, header: int, op: int, w: tuple[int, ...]) -> None:
        if w[0] in self.merge_blocks:
            raise SpirvError(f"%{w[0]} is already the merge block of another header")
        if op == _LOOP_MERGE and w[0] == w[1]:
            raise SpirvError("its merge block is its continue target")
        self.merge_blocks.add(w[0])
        self.merges[header] = (w[0], w[1] if op == _LOOP_MERGE else 0)

    def _local_variable(self, k: int, label: int, previous: int) -> None:
        if label not in self.entries or previous not in (_VARIABLE, _LABEL, *_LINES):
            raise SpirvError("OpVariable after the first instructions of its function's first block")
        if self.insts[k][1][2] != 7:
            raise SpirvError(f"a variable of storage class {self.insts[k][1][2]} inside a function")

    def _switch_targets(self, k: int) -> list[int]:
        op, w = self.insts[k]
        if op != 251:
            return []
        step = 3 if self.shape(self.type_of(w[0]))[1] == 64 else 2
        targets = list(w[2 + step - 1::step])
        if (len(w) - 2) % step:
            raise SpirvError("a switch's (literal, label) pairs are incomplete")
        for x in targets:
            if x not in self.defs or self.op_of(x) != _LABEL or self.fn[self.defs[x]] != self.fn[k]:
                raise SpirvError(f"switch target {self.describe(x)} is no label of this function")
        return targets

    # ---- types ------------------------------------------------------------------------------------------

    def key(self, t: int) -> Any:
        """A type's structure, for comparing types (signedness left out; two declarations of one struct layout
        compare equal)."""
        found = self.keys.get(t)
        if found is None:
            self.keys[t] = ("pending", t)  # a pointer cycle through a forward pointer ends here
            found = self.keys[t] = self._key(t)
        return found

    def _key(self, t: int) -> Any:
        op, w = self.insts[self.defs[t]]
        if op == 21:
            return ("i", w[1])
        if op == 22:
            return ("f", w[1])
        if op in (23, 24, 27, 29):
            return (op, self.key(w[1]), *w[2:])
        if op == 28:
            return (op, self.key(w[1]), self.constant(w[2]))
        if op in (_STRUCT, 33):
            return (op, *(self.key(m) for m in w[1:]))
        if op == _POINTER:
            return (op, w[1], self.key(w[2]))
        if op == 25:
            return (op, self.key(w[1]), *w[2:])
        return (op,) if op in (19, 20, 26) else (op, t)

    def constant(self, x: int) -> Any:
        op, w = self.insts[self.defs[x]]
        return w[2:] if op == _CONSTANT else ("spec", x)

    def shape(self, t: int) -> tuple[str, int, int]:
        """(kind, width, components) of a scalar or vector type: kind "i", "f" or "b"; ("", 0, 0) for the
        others."""
        key = self.key(t)
        count = 1
        if key[0] == 23:
            key, count = key[1], key[2]
        if key[0] in ("i", "f"):
            return key[0], key[1], count
        return ("b", 1, count) if key == (20,) else ("", 0, 0)

    def stored(self, key: Any) -> Any:
        """A type's key as memory sees it: a number's width and count, not its kind (Taichi's atomics load a
        float's bits through its pointer as an unsigned integer of its width, against the rule)."""
        if key[0] == 23 and key[1][0] in ("i", "f"):
            return "n", key[1][1], key[2]
        return ("n", key[1], 1) if key[0] in ("i", "f") else key

    def pointee(self, x: int) -> tuple[int, Any]:
        """(storage class, pointee key) of the pointer value ``x``."""
        key = self.key(self.type_of(x))
        if key[0] != _POINTER:
            raise SpirvError(f"operand {self.describe(x)} is not a pointer")
        return key[1], key[2]

    def check_types(self) -> None:
        returns = -1
        for k, (op, w) in enumerate(self.insts):
            self.at = k
            if op == _FUNCTION:
                returns = w[0]
            rule = OPS[op][2]
            if rule:
                _RULES[rule](self, op, w, returns)


def _literal(w: tuple[int, ...]) -> str:
    data = b"".join(x.to_bytes(4, "little") for x in w)
    return data.split(b"\0", 1)[0].decode("utf-8", "replace")


