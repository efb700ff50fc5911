"""What drivers cannot run though it is valid or what Taichi 1.7.4 writes: the kernel is refused at look-up.

SPIRV-Tools' validator (:mod:`.spirv`) says whether a task's SPIR-V is well formed; each rule here was found on a
driver (NVIDIA's on an H100, or Mesa's lavapipe):

* an atomic on an 8- or 16-bit integer (Taichi's for 8- and 16-bit arrays, and f16 atomic add): NVIDIA's
  compiler crashed making the pipeline;
* GLSL's FMin, FMax, NMin or NMax on operands of another type than its result (Taichi's f16 and f64 atomic
  min and max): NVIDIA's driver crashed running it, lavapipe's making the f16 pipeline;
* a loop nothing leaves (a block from which no path returns): lavapipe hung, NVIDIA's driver lost the device;
* more than 48 KiB of shared memory: NVIDIA's driver made the pipeline and failed its launch;
* a loop whose continue target heads another construct, or a merge block reached though its header is not
  (Taichi writes neither): NVIDIA's compiler crashed.

One rule holds on software rasterizers only (:func:`software`), so such a kernel is refused on them alone:

* a float atomic add (OpAtomicFAddEXT) on 64-bit floats, which Taichi 1.7.4 writes for f64 atomic add where the
  module asks ``spirv_has_atomic_float64_add``: lavapipe (Mesa 22.3, LLVM 15) aborted the process compiling it
  with 256-bit vectors (an AVX2 machine's); without that capability Taichi writes a compare-and-swap loop it runs.

Only the instructions these rules need are read; damage past them is the validator's to find.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

Insts = list[tuple[int, tuple[int, ...]]]  # (opcode, operand words) of each instruction

_TYPE_INT, _TYPE_FLOAT = 21, 22
_TYPES = frozenset(range(19, 40))  # OpTypeVoid ... OpTypeForwardPointer: their result is their first operand
_CONSTANTS_AND_VARIABLES = frozenset((*range(41, 53), 59))  # OpConstantTrue ... OpSpecConstantOp, OpVariable
_FUNCTION, _FUNCTION_END, _LABEL, _EXT_INST, _IMPORT = 54, 56, 248, 12, 11
#: The atomics with a result type (its first operand): OpAtomicLoad, OpAtomicExchange ... OpAtomicXor, the EXT
#: float atomics. OpAtomicStore (228) stores its fourth operand.
ATOMICS = frozenset((227, *range(229, 243), 5614, 5615, 6035))
_ATOMIC_STORE = 228
_GLSL_EXTREMA = frozenset((37, 40, 79, 80))  # FMin, FMax, NMin, NMax of GLSL.std.450
_EXITS = frozenset((252, 253, 254, 255, 4416))  # OpKill, OpReturn, OpReturnValue, OpUnreachable, OpTerminate...
_BRANCHES = frozenset((249, 250, 251))  # OpBranch, OpBranchConditional, OpSwitch
_LOOP_MERGE, _SELECTION_MERGE = 246, 247

NARROW_ATOMIC = ("an atomic on an integer of {bits} bits, which Vulkan does not have (Taichi 1.7.4 writes it for "
                 "atomics on 8- and 16-bit arrays and for f16 atomic add; NVIDIA's compiler crashed making its "
                 "pipeline)")
ODD_EXTREMA = ("GLSL's min or max on operands of another width than its result: Taichi 1.7.4 writes this for "
               "atomic min and max of f16 and f64 on Vulkan, on which drivers crash (NVIDIA's when it runs, "
               "lavapipe's for f16 when the pipeline is made)")
NEVER_ENDS = "a loop that nothing leaves: once launched, it never ends"
F64_ATOMIC_ADD = ("instruction {at}: a float atomic add on 64-bit floats (Taichi 1.7.4 writes it for f64 atomic add "
                  "where the module asks spirv_has_atomic_float64_add), which Mesa's lavapipe aborts the process "
                  "compiling; compiled without that capability, Taichi writes a compare-and-swap loop that runs here")
_ATOMIC_FADD = 6035  # OpAtomicFAddEXT


def glsl_sets(insts: Insts) -> set[int]:
    """The ids of the module's GLSL.std.450 imports."""
    return {w[0] for op, w in insts if op == _IMPORT and w and _string(w[1:]) == "GLSL.std.450"}


def _string(words: Iterable[int]) -> str:
    data = b"".join(x.to_bytes(4, "little") for x in words)
    return data.split(b"\0", 1)[0].decode("utf-8", "replace")


def typed_values(insts: Insts) -> tuple[dict[int, tuple[int, ...]], dict[int, int]]:
    """({type id: (opcode, operands...)}, {value id: its type id}) of the module's types, constants, variables
    and the results inside its functions."""
    types: dict[int, tuple[int, ...]] = {}
    values: dict[int, int] = {}
    inside = False
    for op, w in insts:
        if op in _TYPES and w:
            types[w[0]] = (op, *w[1:])
        elif op == _FUNCTION:
            inside = True
        elif op == _FUNCTION_END:
            inside = False
        if (inside or op in _CONSTANTS_AND_VARIABLES) and op not in _TYPES and len(w) >= 2 and w[0] in types:
            values[w[1]] = w[0]
    return types, values


def unsupported(insts: Insts) -> str:
    """Why drivers cannot run this valid task (the rules above), or "": the module's types and functions are
    read once for all the rules."""
    types, values = typed_values(insts)
    functions = _functions(insts)
    return (taichi_atomics(insts, types, values) or never_ends(functions) or odd_constructs(functions)
            or shared_memory(insts, types))


def software(insts: Insts) -> str:
    """Why a software rasterizer (Mesa's lavapipe) cannot run this valid task though GPUs' drivers can (the rule
    of the module's docstring held on software rasterizers only), or ""."""
    types, _ = typed_values(insts)
    for at, (op, w) in enumerate(insts):
        if op == _ATOMIC_FADD and w and types.get(w[0], ())[:2] == (_TYPE_FLOAT, 64):
            return F64_ATOMIC_ADD.format(at=at)
    return ""


def taichi_atomics(insts: Insts, types: dict[int, tuple[int, ...]], values: dict[int, int]) -> str:
    """Why drivers cannot run this task's atomics, written as Taichi 1.7.4 writes them (the first two rules
    above), or "" (``types`` and ``values``: :func:`typed_values`'). SPIRV-Tools' validator refuses some of
    them too."""
    glsl = glsl_sets(insts)
    for at, (op, w) in enumerate(insts):
        typed = w[0] if op in ATOMICS and w else values.get(w[3], -1) if op == _ATOMIC_STORE and len(w) > 3 else -1
        kind = types.get(typed, ())
        if kind[:1] == (_TYPE_INT,) and len(kind) > 1 and kind[1] < 32:
            return f"instruction {at}: " + NARROW_ATOMIC.format(bits=kind[1])
        if op == _EXT_INST and len(w) > 4 and w[2] in glsl and w[3] in _GLSL_EXTREMA \
                and any(values.get(x, -1) != w[0] for x in w[4:]):
            return f"instruction {at} (OpExtInst): " + ODD_EXTREMA
    return ""


def never_ends(functions: list[_Function]) -> str:
    """Why a valid task would run for ever once launched (the third rule above), or ""."""
    return NEVER_ENDS if any(_never_ends(f.blocks) for f in functions) else ""


class _Function(NamedTuple):
    blocks: dict[int, list[int]]  # {label: the labels its terminator may go to, or [-1] where it leaves}
    headers: dict[int, tuple[int, int]]  # {header label: (merge block, continue target or 0)}


def _functions(insts: Insts) -> list[_Function]:
    """Each function's blocks and the headers of its constructs."""
    out: list[_Function] = []
    f = _Function({}, {})
    label = 0
    for op, w in insts:
        if op == _FUNCTION:
            f = _Function({}, {})
            out.append(f)
        elif op == _LABEL and w:
            label = w[0]
            f.blocks[label] = []
        elif op in _BRANCHES:
            f.blocks[label] = list(w[1:] if op == 250 else w)  # a condition's labels follow its value
        elif op in _EXITS:
            f.blocks[label] = [-1]
        elif op in (_LOOP_MERGE, _SELECTION_MERGE) and w:
            f.headers[label] = (w[0], w[1] if op == _LOOP_MERGE and len(w) > 1 else 0)
    return out


def _reached(blocks: dict[int, list[int]]) -> set[int]:
    """The blocks a path from the function's entry (its first block) reaches."""
    entry = next(iter(blocks))
    reached, todo = {entry}, [entry]
    while todo:
        for t in blocks[todo.pop()]:
            if t in blocks and t not in reached:
                reached.add(t)
                todo.append(t)
    return reached


def odd_constructs(functions: list[_Function]) -> str:
    """Why NVIDIA's compiler crashes on this valid task's control flow (an H100, at look-up), or "": a loop whose
    continue target is another construct's header, or the merge block of a header nothing reaches, itself
    reached. Taichi writes neither."""
    for f in functions:
        reached = _reached(f.blocks) if f.blocks else set()
        for header, (merge, continue_target) in f.headers.items():
            if continue_target and continue_target != header and continue_target in f.headers:
                return (f"loop %{header}'s continue target %{continue_target} heads a construct of its own, on which "
                        "NVIDIA's compiler crashed")
            if header not in reached and (merge in reached or continue_target in reached):
                return (f"the merge block %{merge} of header %{header}, which nothing reaches, is reached, on which "
                        "NVIDIA's compiler crashed")
    return ""


def _never_ends(blocks: dict[int, list[int]]) -> bool:
    """Whether a block reached from the function's entry reaches no exit (its successors are read loosely: any
    operand naming a label of the function counts, which can only find more ways out)."""
    if not blocks:
        return False
    succ = {b: [t for t in targets if t in blocks or t == -1] for b, targets in blocks.items()}
    reached = _reached(blocks)
    pred: dict[int, list[int]] = {b: [] for b in blocks}
    for b, targets in succ.items():
        for t in targets:
            if t != -1:
                pred[t].append(b)
    leaves = [b for b, targets in succ.items() if -1 in targets]
    ends, todo = set(leaves), list(leaves)
    while todo:
        for p in pred[todo.pop()]:
            if p not in ends:
                ends.add(p)
                todo.append(p)
    return not reached <= ends


_ENTRY_POINT, _LOCAL_SIZE_MODE, _EXECUTION_MODE, _DECORATE, _CONSTANT, _COMPOSITE = 15, 17, 16, 71, 43, 44
_SPEC_CONSTANT = 50
_GL_COMPUTE, _BUILT_IN, _DESCRIPTOR_SET, _WORKGROUP_SIZE, _INPUT, _OUTPUT = 5, 11, 34, 25, 1, 3
MAX_GROUP = 1024  # invocations in a work group: Vulkan devices allow at most 1024 (many exactly that)
#: Its size along x, y and z: NVIDIA's maxComputeWorkGroupSize (a z of 128 lost the H100's device).
MAX_GROUP_SIZE = (1024, 1024, 64)


def work_group(insts: Insts) -> tuple[int, ...] | None:
    """The task's work-group size: its WorkgroupSize built-in constant where it has one (which overrides the
    execution mode), else its LocalSize execution mode; None where it declares neither."""
    built_in = _work_group_built_in(insts)
    if built_in is not None:
        return built_in
    return next((w[2:5] for op, w in insts if op == _EXECUTION_MODE and len(w) == 5 and w[1] == _LOCAL_SIZE_MODE),
                None)


def _work_group_built_in(insts: Insts) -> tuple[int, ...] | None:
    """The WorkgroupSize built-in's constant (``(0,)`` where it is no composite of three), or None without one."""
    constants = {w[1]: w[2] for op, w in insts if op == _CONSTANT and len(w) == 3}
    composites = {w[1]: w[2:] for op, w in insts if op == _COMPOSITE and len(w) >= 2}
    for op, w in insts:
        if op == _DECORATE and len(w) >= 3 and w[1:3] == (_BUILT_IN, _WORKGROUP_SIZE):
            parts = composites.get(w[0], ())
            return tuple(constants.get(x, 0) for x in parts) if len(parts) == 3 else (0,)
    return None


def interface(insts: Insts) -> str:
    """What libtaichi_c_api's pipelines take for granted of a task's interface, which the validator cannot know
    (each broke lavapipe when it was not so): a GLCompute entry point named main; descriptor sets from 0 without
    a gap; Input variables that are built-ins, and no Output variables; a work group of 1 to 1024 invocations,
    at most 64 along z.
    Damage found, or ""."""
    for rule in _INTERFACE:
        damage = rule(insts)
        if damage:
            return damage
    return ""


def _entry_point(insts: Insts) -> str:
    if not any(op == _ENTRY_POINT and len(w) >= 3 and w[0] == _GL_COMPUTE and _string(w[2:]) == "main"
               for op, w in insts):
        return "no GLCompute entry point named main (the one libtaichi_c_api's pipelines call)"
    return ""


def _descriptor_sets(insts: Insts) -> str:
    sets = {w[2] for op, w in insts if op == _DECORATE and len(w) >= 3 and w[1] == _DESCRIPTOR_SET}
    if sets != set(range(len(sets))):
        return f"descriptor sets {sorted(sets)}, which libtaichi_c_api's pipeline layout numbers from 0 without a gap"
    return ""


def _variables(insts: Insts) -> str:
    built_in = {w[0] for op, w in insts if op == _DECORATE and len(w) >= 2 and w[1] == _BUILT_IN}
    for at, (op, w) in enumerate(insts):
        if op == 59 and len(w) >= 3 and (w[2] == _OUTPUT or (w[2] == _INPUT and w[1] not in built_in)):
            return f"instruction {at} (OpVariable): an Input variable that is no built-in, or an Output variable"
    return ""


def _group_size(insts: Insts) -> str:
    size = work_group(insts)
    if size is None or len(size) != 3 or not all(1 <= x <= most for x, most in zip(size, MAX_GROUP_SIZE)) \
            or size[0] * size[1] * size[2] > MAX_GROUP:
        return f"a work group of {size} (1 to {MAX_GROUP} invocations, at most {MAX_GROUP_SIZE} each way)"
    return ""


#: What :func:`interface` checks, in order: the entry point, the descriptor sets, the Input and Output variables,
#: the work group's size. Each rule returns the damage it finds, or "".
_INTERFACE = (_entry_point, _descriptor_sets, _variables, _group_size)


#: Workgroup (shared) memory a task may declare: NVIDIA's drivers allow 48 KiB (maxComputeSharedMemorySize).
MAX_SHARED = 48 * 1024
_WORKGROUP = 4  # the storage class


def _size(types: dict[int, tuple[int, ...]], constants: dict[int, int], t: int, memo: dict[int, int | None],
          depth: int = 0) -> int | None:
    """The bytes a value of type ``t`` takes at least (no padding counted); None where the size is not known
    (an array whose length is not a constant, a type nested past 16)."""
    if t in memo:
        return memo[t]
    kind = types.get(t, ())
    size = kind[1] // 8 if kind[:1] in ((_TYPE_INT,), (_TYPE_FLOAT,)) and len(kind) > 1 else None
    parts = _parts(kind, constants)
    if parts and depth <= 16:
        sizes = [_size(types, constants, member, memo, depth + 1) for _, member in parts]
        size = None if None in sizes else sum(n * (x or 0) for (n, _), x in zip(parts, sizes))
    memo[t] = size
    return size


def _parts(kind: tuple[int, ...], constants: dict[int, int]) -> list[tuple[int, int]]:
    """(count, type) of what a composite type (its declaration's words, ``kind``) is made of; [] for others."""
    if kind[:1] in ((23,), (24,)) and len(kind) > 2:  # OpTypeVector, OpTypeMatrix: (component type, count)
        return [(kind[2], kind[1])]
    if kind[:1] == (28,) and len(kind) > 2 and kind[2] in constants:  # OpTypeArray: (element, length)
        return [(constants[kind[2]], kind[1])]
    if kind[:1] == (30,):  # OpTypeStruct: its members
        return [(1, m) for m in kind[1:]]
    return []


def shared_memory(insts: Insts, types: dict[int, tuple[int, ...]]) -> str:
    """Why a valid task's shared memory is more than drivers give a work group, or not known, or "": NVIDIA's
    driver made such a pipeline (an H100, 64 KiB and 1 GiB), and the submit that launched it failed, which
    libtaichi_c_api 1.7.4 answers by aborting the process."""
    constants = {w[1]: w[2] | (w[3] << 32 if len(w) == 4 else 0)  # 32- and 64-bit constants, spec defaults
                 for op, w in insts if op in (_CONSTANT, _SPEC_CONSTANT) and len(w) in (3, 4)}
    total: int | None = 0
    memo: dict[int, int | None] = {}
    for op, w in insts:
        if op == 59 and len(w) >= 3 and w[2] == _WORKGROUP and total is not None:
            pointer = types.get(w[0], ())
            size = _size(types, constants, pointer[2], memo) if len(pointer) > 2 else None
            total = None if size is None else total + size
    if total is None or total > MAX_SHARED:
        how = "shared memory of a size this check cannot tell" if total is None else f"{total} bytes of shared memory"
        return (f"{how}, more than the {MAX_SHARED} drivers give a work group (NVIDIA's took such a pipeline and "
                "failed the launch, which aborts the process)")
    return ""


def too_nested(insts: Insts) -> str:
    """Why a task's types are beyond what validation can take in time, or "": a struct whose members, expanded
    through nested structs, number more than 65,536 (SPIRV-Tools' validator ran past a minute on 8 members nested
    10 deep; Taichi's types hold tens)."""
    structs = {w[0]: w[1:] for op, w in insts if op == 30 and w}
    elements = {w[0]: w[1] for op, w in insts if op in (28, 29) and len(w) > 1}  # arrays: their element
    memo: dict[int, int] = {}

    def count(t: int, depth: int) -> int:
        if t not in memo:
            memo[t] = 1 << 17 if depth > 32 else (
                sum(count(m, depth + 1) for m in structs[t]) if t in structs
                else count(elements[t], depth + 1) if t in elements else 1)
        return memo[t]

    worst = max((count(t, 0) for t in structs), default=0)
    return f"types of {worst} members nested in one struct (at most 65536)" if worst > 1 << 16 else ""
