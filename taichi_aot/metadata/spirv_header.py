"""What a compute shader's module-level instructions may say, as :mod:`.spirv` checks them.

libtaichi_c_api hands a task's SPIR-V to the driver to make a compute pipeline from its entry point ``main``; a
driver that refuses the pipeline leaves the library holding none, and the process crashes at the launch, and some
drivers crash on what they do not expect instead of refusing it. So the module's header is held to what a Vulkan
compute shader holds (a module any other way is refused with CorruptedDataError, naming the instruction):

* the instructions come in the order of SPIR-V's logical layout (capabilities, extensions, instruction set
  imports, the memory model, entry points, execution modes, debug instructions, annotations, then types,
  constants and global variables, then functions);
* one memory model, of logical or physical-storage-buffer addressing;
* the capabilities, extensions and instruction sets are ones a compute shader uses;
* an entry point ``main`` of the GLCompute model, with its work-group size;
* execution modes, decorations and built-ins are ones of a compute shader, with as many literals as each takes;
  descriptor sets are numbered from 0 without a gap (the library's pipeline layout takes them so);
* built-in variables have the type their built-in takes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .spirv_ops import CONSTANTS, TYPES
from .spirv_rules import SpirvError, string_end

if TYPE_CHECKING:
    from .spirv import _Module

_FUNCTION, _VARIABLE, _DECORATE, _MEMBER_DECORATE, _EXECUTION_MODE, _EXECUTION_MODE_ID = 54, 59, 71, 72, 16, 331
_LAYOUT = (
    ((17,), "capabilities"), ((10,), "extensions"), ((11,), "instruction set imports"), ((14,), "the memory model"),
    ((15,), "entry points"), ((16, 331), "execution modes"), ((2, 3, 4, 7), "debug sources and strings"),
    ((5, 6), "debug names"), ((330,), "processing records"), ((71, 72, 73, 74, 75, 332, 5632, 5633), "annotations"),
    ((*TYPES, *CONSTANTS, _VARIABLE, 1, 39), "types, constants and global variables"),
)
#: The section of the logical layout each module-level instruction belongs to (functions come last).
_SECTION = {op: (i, name) for i, (ops, name) in enumerate(_LAYOUT) for op in ops}
_FUNCTIONS = (len(_LAYOUT), "functions")
_ANYWHERE = frozenset((0, 8, 317))  # OpNop, OpLine, OpNoLine

#: Capabilities a Vulkan compute shader may declare (whether the device has them is the runtime's business).
_CAPABILITIES = frozenset((
    0, 1, 9, 10, 11, 12, 18, 22, 25, 27, 28, 29, 30, 31, 34, 39, 41, 42, 43, 44, 45, 46, 47, 48, 49, 50, 55, 56,
    *range(61, 69), 4423, 4428, 4429, 4430, 4431, 4433, 4434, 4435, 4437, 4441, 4442, 4448, 4449, 4450,
    *range(4464, 4469), 5008, 5016, 5055, *range(5301, 5313), 5345, 5346, 5347, 5612, 5613, 5616, 6033, 6034, 6095,
))
_EXTENSIONS = frozenset((
    "SPV_KHR_storage_buffer_storage_class", "SPV_KHR_variable_pointers", "SPV_KHR_16bit_storage",
    "SPV_KHR_8bit_storage", "SPV_KHR_physical_storage_buffer", "SPV_EXT_physical_storage_buffer",
    "SPV_KHR_non_semantic_info", "SPV_KHR_shader_ballot", "SPV_KHR_subgroup_vote", "SPV_KHR_float_controls",
    "SPV_KHR_vulkan_memory_model", "SPV_KHR_no_integer_wrap_decoration",
    "SPV_KHR_shader_draw_parameters", "SPV_KHR_device_group",
    "SPV_KHR_workgroup_memory_explicit_layout", "SPV_KHR_subgroup_uniform_control_flow",
    "SPV_EXT_shader_atomic_float_add", "SPV_EXT_shader_atomic_float_min_max", "SPV_EXT_shader_atomic_float16_add",
    "SPV_EXT_descriptor_indexing", "SPV_EXT_shader_image_int64", "SPV_GOOGLE_user_type",
    "SPV_GOOGLE_hlsl_functionality1", "SPV_GOOGLE_decorate_string", "SPV_AMD_gpu_shader_half_float_fetch",
))
#: {execution mode: its literal operands} of a compute shader's OpExecutionMode; LocalSizeId (OpExecutionModeId).
_MODES = {17: 3, 4421: 0, 4459: 1, 4460: 1, 4461: 1, 4462: 1, 4463: 1}
_MODE_IDS = {38: 3}
#: {decoration: its literal operands} a compute shader's OpDecorate and OpMemberDecorate may carry.
_DECORATIONS = {0: 0, 1: 1, 2: 0, 3: 0, 4: 0, 5: 0, 6: 1, 7: 1, 11: 1, 19: 0, 20: 0, 21: 0, 23: 0, 24: 0, 25: 0,
                26: 0, 33: 1, 34: 1, 35: 1, 39: 1, 40: 1, 42: 0, 4469: 0, 4470: 0, 5300: 0, 5355: 0, 5356: 0}
_DECORATION_IDS = {27: 1, 46: 1, 47: 1, 5634: 1}  # OpDecorateId
_DECORATION_STRINGS = (5635, 5636)  # OpDecorateString, OpMemberDecorateString
_BUILTIN, _DESCRIPTOR_SET = 11, 34
#: A compute shader's built-ins and the type of their Input variables: a vector of 3 or 4 32-bit integers, or one.
_BUILTINS = {24: 3, 26: 3, 27: 3, 28: 3, 29: 1, 36: 1, 38: 1, 40: 1, 41: 1, 4416: 4, 4417: 4, 4418: 4,
             4419: 4, 4420: 4, 4438: 1}
_WORKGROUP_SIZE = 25  # decorates a 3-vector constant
_INPUT, _OUTPUT = 1, 3
_COMPOSITE, _SPEC_COMPOSITE, _SPEC_CONSTANT = 44, 51, 50


def check_header(m: _Module) -> None:
    """The module-level instructions of ``m`` (see the module's docstring)."""
    section = (-1, "")
    counts = {14: 0, 15: 0}
    sets: set[int] = set()
    sized = False
    inputs, builtins = [], set()
    for k, (op, w) in enumerate(m.insts):
        m.at = k
        if op in _ANYWHERE:
            continue
        here = _FUNCTIONS if m.fn[k] != -1 else _SECTION.get(op)
        if here is None:
            continue  # a function's instruction outside one: check_layout says so
        if here[0] < section[0]:
            raise SpirvError(f"one of the {here[1]} after the {section[1]} (SPIR-V's logical layout)")
        section = here
        if here is _FUNCTIONS:
            continue
        if op in counts:
            counts[op] += 1
        if op == _VARIABLE and w[2] in (_INPUT, _OUTPUT):
            inputs.append(k)
        elif op == _DECORATE and w[1] == _BUILTIN:
            builtins.add(w[0])
        sized = _module_level(m, op, w, sets) or sized
    m.at = 0
    if counts[14] != 1 or not counts[15] or not sized:
        raise SpirvError(f"{counts[14]} memory model(s) (one is due), {counts[15]} entry point(s), "
                         f"{'a' if sized else 'no'} work-group size (LocalSize, LocalSizeId or WorkgroupSize)")
    if sets != set(range(len(sets))):
        raise SpirvError(f"descriptor sets {sorted(sets)}: the library numbers them from 0 without a gap")
    _interface(m, inputs, builtins)


def _interface(m: _Module, variables: list[int], builtins: set[int]) -> None:
    """A compute shader's inputs (``variables``: the instructions of its Input and Output variables) are its
    built-ins, and it has no outputs."""
    if any(op in (73, 74) for op, _ in m.insts):
        return  # built-ins may be decorated through a decoration group: not followed here
    for k in variables:
        m.at = k
        if m.insts[k][1][2] == _OUTPUT or m.insts[k][1][1] not in builtins:
            raise SpirvError("an Input variable that is no built-in, or an Output variable")


def _module_level(m: _Module, op: int, w: tuple[int, ...], sets: set[int]) -> bool:
    """One module-level instruction; whether it gives the work-group size."""
    if op == 17 and w[0] not in _CAPABILITIES:
        raise SpirvError(f"capability {w[0]}, none a compute shader declares")
    if op == 10 and _string(w, 0) not in _EXTENSIONS:
        raise SpirvError(f"extension {_string(w, 0)!r}, none a compute shader uses")
    if op == 11 and _string(w, 1) != "GLSL.std.450" and not _string(w, 1).startswith("NonSemantic."):
        raise SpirvError(f"instruction set {_string(w, 1)!r}, none a compute shader uses")
    if op == 14 and not (w[0] in (0, 5348) and w[1] in (1, 3)):
        raise SpirvError(f"memory model {w[0]} {w[1]} (Logical or PhysicalStorageBuffer64 with GLSL450 or Vulkan)")
    if op == 15 and _string(w, 2) != "main":
        raise SpirvError(f"entry point {_string(w, 2)!r}: the library makes its pipeline from 'main'")
    if op in (_EXECUTION_MODE, _EXECUTION_MODE_ID):
        return _mode(op, w)
    if op in (_DECORATE, _MEMBER_DECORATE, 332, 5632, 5633):
        return _decoration(m, op, w, sets)
    return False


def _mode(op: int, w: tuple[int, ...]) -> bool:
    table = _MODES if op == _EXECUTION_MODE else _MODE_IDS
    mode = w[1]
    if mode not in table or len(w) - 2 != table[mode]:
        raise SpirvError(f"execution mode {mode} with {len(w) - 2} operand(s), none a compute shader takes so")
    if mode == 17 and not (all(1 <= size <= 1024 for size in w[2:]) and w[2] * w[3] * w[4] <= 1024):
        raise SpirvError(f"a work group of {w[2:]} (at most 1024 invocations)")
    return mode in (17, 38)


def _decoration(m: _Module, op: int, w: tuple[int, ...], sets: set[int]) -> bool:
    at = 2 if op in (_MEMBER_DECORATE, 5633) else 1  # the decoration's word
    decoration, extra = w[at], len(w) - at - 1
    if op in (5632, 5633):
        ok = decoration in _DECORATION_STRINGS and string_end(w, at + 1) == len(w)
    else:
        table = _DECORATION_IDS if op == 332 else _DECORATIONS
        ok = table.get(decoration, -1) == extra
    if not ok:
        raise SpirvError(f"decoration {decoration} with {extra} operand word(s), none a compute shader carries so")
    if op == _DECORATE and decoration == _DESCRIPTOR_SET:
        sets.add(w[2])
    if op == _DECORATE and decoration == _BUILTIN:
        return _builtin(m, w[0], w[2])
    return False


def _builtin(m: _Module, target: int, builtin: int) -> bool:
    """A built-in decoration of ``target``: one of a compute shader's, on a variable or constant of its type."""
    if builtin == _WORKGROUP_SIZE:
        shape = m.shape(m.type_of(target)) if m.op_of(target) in (_COMPOSITE, _SPEC_COMPOSITE) else None
        sizes = [_value(m, x) for x in m.insts[m.defs[target]][1][2:]] if shape == ("i", 32, 3) else []
        if len(sizes) != 3 or not all(1 <= x <= 1024 for x in sizes) or sizes[0] * sizes[1] * sizes[2] > 1024:
            raise SpirvError(f"WorkgroupSize decorates {m.describe(target)}, no constant of 3 32-bit integers "
                             "making a work group of at most 1024")
        return True
    count = _BUILTINS.get(builtin)
    if count is None:
        raise SpirvError(f"built-in {builtin}, none a compute shader has")
    if m.op_of(target) != _VARIABLE:
        raise SpirvError(f"built-in {builtin} decorates {m.describe(target)}, no variable")
    storage, pointee = m.pointee(target)
    element = pointee[1] if pointee[0] == 23 and pointee[2] == count else pointee if count == 1 else None
    if storage != _INPUT or element != ("i", 32):
        raise SpirvError(f"built-in {builtin} decorates {m.describe(target)}, not an Input of {count} 32-bit "
                         "integer(s)")
    return False


def _value(m: _Module, x: int) -> int:
    """The value of a 32-bit integer constant or spec constant (its default), or -1."""
    op, w = m.insts[m.defs[x]]
    return w[2] if op in (43, _SPEC_CONSTANT) and len(w) == 3 else -1


def _string(w: tuple[int, ...], j: int) -> str:
    data = b"".join(x.to_bytes(4, "little") for x in w[j:string_end(w, j)])
    return data.split(b"\0", 1)[0].decode("utf-8", "replace")
