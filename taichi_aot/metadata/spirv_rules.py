"""The operand type rules of SPIR-V instructions, as :mod:`.spirv` checks them (one rule an instruction form).

Each rule takes the module (its definitions and types), the instruction's opcode and operand words, and the
return type of the function it is in; it raises SpirvError where the instruction's operands do not have the
types the SPIR-V specification requires. Where Taichi 1.7.4 itself breaks a rule that drivers take (its
emulated atomics load float bits as integers), the rule is relaxed so that its modules pass; where drivers crash
on what it writes (its f16 and f64 atomic min and max), the module is marked (``unsupported``) and the kernel
is refused where it is looked up.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .spirv_ops import CONSTANTS, GLSL_ARITY, GLSL_FLOAT_SAME, GLSL_INT_SAME, OPS

if TYPE_CHECKING:
    from .spirv import _Module

_POINTER, _STRUCT, _VARIABLE, _CONSTANT, _PARAMETER = 32, 30, 59, 43, 55
_PHYSICAL = 5349  # the PhysicalStorageBuffer storage class
_STORAGE_CLASSES = frozenset((*range(13), _PHYSICAL))  # UniformConstant ... StorageBuffer, PhysicalStorageBuffer
_BLOCKS = (2, 9, 12)  # the storage classes of buffers: Uniform, PushConstant, StorageBuffer
_NO_ATOMICS = (0, 1, 3, 9)  # the storage classes atomics never work on: UniformConstant, Input, Output, PushConstant


class SpirvError(Exception):
    """What is wrong, raised inside the check; :func:`.spirv.check` reports it as CorruptedDataError."""


def string_end(w: tuple[int, ...], j: int) -> int:
    """The word after a literal string starting at ``w[j]`` (its last word holds its terminating zero, and zeros
    after it)."""
    while j < len(w):
        word = w[j]
        j += 1
        for shift in (0, 8, 16, 24):
            if not (word >> shift) & 0xFF:
                if word >> shift:
                    raise SpirvError("a literal string padded with other bytes than zeros")
                return j
    raise SpirvError("a literal string without its terminating zero")


def _show(shape: tuple[str, int, int]) -> str:
    kind, width, count = shape
    if not kind:
        return "no number"
    name = f"{kind}{width}" if kind != "b" else "bool"
    return name if count == 1 else f"{count} x {name}"


def _same_key(m: _Module, x: int, key: Any, what: str) -> None:
    if m.key(m.type_of(x)) != key:
        raise SpirvError(f"{what} {m.describe(x)} is not of the type it must have")


def _integer(m: _Module, x: int, what: str) -> None:
    shape = m.shape(m.type_of(x))
    if not (shape[0] == "i" and shape[2] == 1):
        raise SpirvError(f"{what} {m.describe(x)} is no integer")


# ---- rules: (module, opcode, operand words, the function's return type) ------------------------------------

Rule = Callable[["_Module", int, tuple, int], None]


def _operands(m: _Module, result: tuple[str, int, int], operands: tuple, same_width: bool) -> None:
    """Each operand is a number of the result's kind and component count, and of its width where
    ``same_width`` (an integer's signedness is free)."""
    for x in operands:
        shape = m.shape(m.type_of(x))
        ok = shape == result if same_width else shape[0] == result[0] and shape[2] == result[2]
        if not ok:
            raise SpirvError(f"operand {m.describe(x)} is {_show(shape)}, the result {_show(result)}")


def _numbers(kind: str, same_width: bool) -> Rule:
    """Arithmetic: a result of numbers of ``kind``, operands of its shape (see :func:`_operands`)."""
    def rule(m: _Module, op: int, w: tuple, _: int) -> None:
        result = m.shape(w[0])
        if result[0] != kind:
            raise SpirvError(f"its result type is {_show(result)}")
        _operands(m, result, w[2:], same_width)
    return rule


def _shift(m: _Module, op: int, w: tuple, _: int) -> None:
    result = m.shape(w[0])
    if result[0] != "i":
        raise SpirvError(f"its result type is {_show(result)}")
    _operands(m, result, w[2:3], True)
    _operands(m, result, w[3:4], False)  # the shift may have another width


def _compare(kind: str) -> Rule:
    """Comparisons: a boolean result of as many components as the two operands, which have one shape."""
    def rule(m: _Module, op: int, w: tuple, _: int) -> None:
        result = m.shape(w[0])
        a, b = (m.shape(m.type_of(x)) for x in w[2:4])
        if result[0] != "b":
            raise SpirvError(f"its result type is {_show(result)}, not bool")
        ok = a[0] == kind and a == b and a[2] == result[2]
        if not ok:
            raise SpirvError(f"it compares {_show(a)} with {_show(b)} into {_show(result)}")
    return rule


def _logic(m: _Module, op: int, w: tuple, _: int) -> None:
    result = m.shape(w[0])
    if result[0] != "b":
        raise SpirvError(f"its result type is {_show(result)}, not bool")
    for x in w[2:]:
        _same_key(m, x, m.key(w[0]), "operand")


def _unary(kind: str, result_kind: str) -> Rule:
    """Conversions and tests: an operand of ``kind`` into a result of ``result_kind``, as many components."""
    def rule(m: _Module, op: int, w: tuple, _: int) -> None:
        result, operand = m.shape(w[0]), m.shape(m.type_of(w[2]))
        ok = result[0] == result_kind and operand[0] == kind and result[2] == operand[2]
        if not ok:
            raise SpirvError(f"it turns {_show(operand)} into {_show(result)}")
    return rule


def _reduce(m: _Module, op: int, w: tuple, _: int) -> None:
    result, operand = m.shape(w[0]), m.shape(m.type_of(w[2]))
    if not (result == ("b", 1, 1) and operand[0] == "b"):
        raise SpirvError("it needs a boolean vector")


def _bitcast(m: _Module, op: int, w: tuple, _: int) -> None:
    """Numbers into numbers of as many bits, or pointers into pointers (a physical one into an integer too, or
    back)."""
    result, operand = m.key(w[0]), m.key(m.type_of(w[2]))
    a, b = m.shape(w[0]), m.shape(m.type_of(w[2]))
    if _POINTER in (result[0], operand[0]):
        logical = any(k[0] == _POINTER and k[1] != _PHYSICAL for k in (result, operand))
        ok = all(k[0] == _POINTER or s[0] == "i" for k, s in ((result, a), (operand, b)))
        if not ok or (logical and result[0] != operand[0]):
            raise SpirvError("it reinterprets a pointer as no pointer or integer")
        return
    ok = a[0] in ("i", "f") and b[0] in ("i", "f")
    if ok and w[2] in m.odd_width:
        return  # the cast Taichi 1.7.4 writes after such an extremum, of a kernel already refused (see _ext)
    if not ok or a[1] * a[2] != b[1] * b[2]:
        raise SpirvError(f"it reinterprets {_show(b)} as {_show(a)}")


def _same(m: _Module, op: int, w: tuple, _: int) -> None:
    _same_key(m, w[2], m.key(w[0]), "operand")


def _select(m: _Module, op: int, w: tuple, _: int) -> None:
    condition, result = m.shape(m.type_of(w[2])), m.shape(w[0])
    ok = condition[0] == "b" and condition[2] in (1, result[2])
    if not ok:
        raise SpirvError(f"its condition {m.describe(w[2])} is {_show(condition)}")
    for x in w[3:5]:
        _same_key(m, x, m.key(w[0]), "operand")


def _through(m: _Module, pointer: int, key: Any, what: str) -> None:
    """``pointer`` points to memory of type ``key``, as memory sees types (:meth:`_Module.stored`)."""
    if m.stored(m.pointee(pointer)[1]) != m.stored(key):
        raise SpirvError(f"{what} through {m.describe(pointer)}, a pointer to another type")


def _load(m: _Module, op: int, w: tuple, _: int) -> None:
    _through(m, w[2], m.key(w[0]), "it loads")


def _writable(m: _Module, pointer: int) -> None:
    """Memory a shader may write: not a constant, an input or a push constant, nor a Uniform block (a Uniform
    BufferBlock, older SPIR-V's storage buffer, is)."""
    storage = m.pointee(pointer)[0]
    if storage in (0, 1, 9) or (storage == 2 and not m.buffer_blocks):
        raise SpirvError(f"it writes through {m.describe(pointer)}, to read-only memory (storage class {storage})")


def _store(m: _Module, op: int, w: tuple, _: int) -> None:
    _through(m, w[0], m.key(m.type_of(w[1])), f"it stores {m.describe(w[1])}")
    _writable(m, w[0])


def _copy(m: _Module, op: int, w: tuple, _: int) -> None:
    _through(m, w[0], m.pointee(w[1])[1], "it copies")


def _walk(key: Any, index: int | None, what: str, strict: bool) -> Any:
    """The type one index into a composite of type ``key`` reaches; ``index`` None: not known (a variable).
    A struct's member index must be in range; a vector's or matrix's only where ``strict`` (literal indices)."""
    if key[0] == _STRUCT:
        if index is None or index >= len(key) - 1:
            raise SpirvError(f"{what} indexes a struct's member out of range")
        return key[1 + (index or 0)]
    if key[0] in (23, 24, 28):
        if strict and key[0] != 28 and (index or 0) >= key[2]:
            raise SpirvError(f"{what} indexes beyond a vector or matrix")
        return key[1]
    if key[0] != 29:
        raise SpirvError(f"{what} indexes into a scalar")
    return key[1]


def _chain(m: _Module, op: int, w: tuple, _: int) -> None:
    storage, key = m.pointee(w[2])
    indices = w[4:] if op in (67, 70) else w[3:]
    for x in w[3:]:
        _integer(m, x, "index")
    for x in indices:
        index = m.insts[m.defs[x]][1][2] if m.op_of(x) == _CONSTANT else None
        key = _walk(key, index, f"index {m.describe(x)}", False)
    result = m.key(w[0])
    if result != (_POINTER, storage, key):
        raise SpirvError("its result type is not a pointer to the type its indices reach")


def _length(m: _Module, op: int, w: tuple, _: int) -> None:
    key = m.pointee(w[2])[1]
    ok = key[0] == _STRUCT and w[3] == len(key) - 2 and key[-1][0] == 29 and m.shape(w[0]) == ("i", 32, 1)
    if not ok:
        raise SpirvError("it asks the length of no run-time array")


def _atomic(m: _Module, op: int, w: tuple, _: int) -> None:
    result = m.shape(w[0])
    if not (result[0] in ("i", "f") and result[2] == 1):
        raise SpirvError(f"its result type is {_show(result)}")
    _through(m, w[2], m.key(w[0]), "it works")
    if m.pointee(w[2])[0] in _NO_ATOMICS:
        raise SpirvError(f"an atomic operation on memory of storage class {m.pointee(w[2])[0]}")
    _writable(m, w[2])
    _narrow(m, result)
    form = OPS[op][1]
    for i in range(3, len(form)):
        if form[i] == "v" and m.stored(m.key(m.type_of(w[i]))) != m.stored(m.key(w[0])):
            raise SpirvError(f"operand {m.describe(w[i])} is not of its result's width")


def _atomic_store(m: _Module, op: int, w: tuple, _: int) -> None:
    _through(m, w[0], m.key(m.type_of(w[3])), f"it stores {m.describe(w[3])}")
    _writable(m, w[0])
    _narrow(m, m.shape(m.type_of(w[3])))


def _narrow(m: _Module, shape: tuple[str, int, int]) -> None:
    """An atomic on an integer narrower than 32 bits, which Vulkan does not have: Taichi 1.7.4 writes one for an
    atomic on an 8- or 16-bit array. Well formed, so only its kernel is refused, where it is looked up."""
    if shape[0] == "i" and shape[1] < 32:
        m.unsupported = m.unsupported or (
            f"instruction {m.at}: an atomic on an integer of {shape[1]} bits, which Vulkan does not have (Taichi 1.7.4 "
            "writes it for atomics on 8- and 16-bit arrays; NVIDIA's compiler crashed making its pipeline)")


def _phi(m: _Module, op: int, w: tuple, _: int) -> None:
    if m.key(w[0]) == (19,):
        raise SpirvError("its result type is void")
    block = m.block_of.get(m.at)
    for i in range(2, len(w), 2):
        _same_key(m, w[i], m.key(w[0]), "incoming value")
        if block not in m.succ.get(w[i + 1], ()):
            raise SpirvError(f"parent {m.describe(w[i + 1])} does not branch to its block")


def _condition(m: _Module, op: int, w: tuple, _: int) -> None:
    if m.shape(m.type_of(w[0])) != ("b", 1, 1):
        raise SpirvError(f"condition {m.describe(w[0])} is no boolean")


def _switch(m: _Module, op: int, w: tuple, _: int) -> None:
    _integer(m, w[0], "selector")


def _return(m: _Module, op: int, w: tuple, returns: int) -> None:
    key = m.key(returns)
    if op == 253:
        if key != (19,):
            raise SpirvError("OpReturn in a function that returns a value")
    else:
        _same_key(m, w[0], key, "returned value")


def _composite(key: Any, indices: tuple) -> Any:
    if not indices:
        raise SpirvError("it names no index")
    for index in indices:
        key = _walk(key, index, "it", True)
    return key


def _extract(m: _Module, op: int, w: tuple, _: int) -> None:
    key = _composite(m.key(m.type_of(w[2])), w[3:])
    if key != m.key(w[0]):
        raise SpirvError("its result type is not the type its indices reach")


def _insert(m: _Module, op: int, w: tuple, _: int) -> None:
    _same_key(m, w[3], m.key(w[0]), "composite")
    _same_key(m, w[2], _composite(m.key(w[0]), w[4:]), "object")


def _construct(m: _Module, op: int, w: tuple, _: int) -> None:
    key, parts = m.key(w[0]), w[2:]
    if key[0] not in (23, 24, 28, _STRUCT):
        raise SpirvError(f"its result type {m.describe(w[0])} is no composite")
    if op in (44, 51):
        for x in parts:
            if m.op_of(x) not in CONSTANTS and m.op_of(x) != 1:  # or OpUndef
                raise SpirvError(f"constituent {m.describe(x)} is no constant")
    if key[0] == 23:
        count = 0
        for x in parts:
            part = m.key(m.type_of(x))
            if not (part == key[1] or (part[0] == 23 and part[1] == key[1])):
                raise SpirvError(f"constituent {m.describe(x)} differs")
            count += part[2] if part[0] == 23 else 1
        if count != key[2]:
            raise SpirvError(f"{count} components for a vector of {key[2]}")
        return
    if key[0] in (_STRUCT, 24, 28):
        members = key[1:] if key[0] == _STRUCT else [key[1]] * len(parts)
        if not (len(members) == len(parts) and (key[0] != 24 or len(parts) == key[2])):
            raise SpirvError(f"{len(parts)} constituents for its type")
        for x, member in zip(parts, members):
            _same_key(m, x, member, "constituent")


def _shuffle(m: _Module, op: int, w: tuple, _: int) -> None:
    key, a, b = m.key(w[0]), m.key(m.type_of(w[2])), m.key(m.type_of(w[3]))
    ok = key[0] == 23 and a[0] == 23 and b[0] == 23 and a[1] == b[1] == key[1] and len(w) - 4 == key[2]
    if not ok:
        raise SpirvError("it shuffles vectors of other components, or into another count")
    if any(c >= a[2] + b[2] and c != 0xFFFFFFFF for c in w[4:]):
        raise SpirvError("a component beyond its vectors")


def _vector_extract(m: _Module, op: int, w: tuple, _: int) -> None:
    vector = m.key(m.type_of(w[2]))
    if not (vector[0] == 23 and vector[1] == m.key(w[0])):
        raise SpirvError(f"{m.describe(w[2])} is no vector of the result's type")
    _integer(m, w[3], "index")


def _vector_insert(m: _Module, op: int, w: tuple, _: int) -> None:
    key = m.key(w[0])
    if key[0] != 23:
        raise SpirvError("its result type is no vector")
    _same_key(m, w[2], key, "vector")
    _same_key(m, w[3], key[1], "component")
    _integer(m, w[4], "index")


def _ext(m: _Module, op: int, w: tuple, _: int) -> None:
    if w[2] not in m.glsl:
        return  # another set's operands (a debug printf's format string, ...) are not values only
    for x in w[4:]:
        if not m.is_value(x):
            raise SpirvError(f"operand {m.describe(x)} is not a value")
    if GLSL_ARITY.get(w[3]) != len(w) - 4:
        raise SpirvError(f"GLSL.std.450 instruction {w[3]} with {len(w) - 4} operand(s), none a compute shader has")
    kind = "f" if w[3] in GLSL_FLOAT_SAME else "i" if w[3] in GLSL_INT_SAME else ""
    if kind:
        result = m.shape(w[0])
        if result[0] != kind:
            raise SpirvError(f"its result type is {_show(result)}")
        _operands(m, result, w[4:], False)
        if any(m.shape(m.type_of(x)) != result for x in w[4:]):
            # what Taichi 1.7.4 writes for atomic min and max of f16 and f64 on Vulkan: the kernel is refused when
            # it is looked up, the module's other kernels run
            m.odd_width.add(w[1])
            m.unsupported = m.unsupported or (
                f"instruction {m.at} (OpExtInst) takes operands of another width than its result "
                f"({_show(result)}): Taichi 1.7.4 writes this for atomic min and max of f16 and f64 on Vulkan, on "
                "which drivers crash (NVIDIA's when it runs, lavapipe's for f16 when the pipeline is made)")


def _function(m: _Module, op: int, w: tuple, _: int) -> None:
    signature = m.key(w[3])
    if not (signature[0] == 33 and signature[1] == m.key(w[0])):
        raise SpirvError("its function type returns another type")
    k = m.at + 1
    params = []
    while k < len(m.insts) and m.insts[k][0] == _PARAMETER:
        params.append(m.key(m.insts[k][1][0]))
        k += 1
    if tuple(params) != signature[2:]:
        raise SpirvError("its parameters differ from its function type's")


def _call(m: _Module, op: int, w: tuple, _: int) -> None:
    callee = m.insts[m.defs[w[2]]][1]
    signature = m.key(callee[3])
    if m.key(callee[0]) != m.key(w[0]):
        raise SpirvError("its result type is not its callee's")
    if len(w) - 3 != len(signature) - 2:
        raise SpirvError(f"{len(w) - 3} arguments for {len(signature) - 2} parameters")
    for x, param in zip(w[3:], signature[2:]):
        _same_key(m, x, param, "argument")


def _variable(m: _Module, op: int, w: tuple, _: int) -> None:
    key = m.key(w[0])
    if not (key[0] == _POINTER and key[1] == w[2]):
        raise SpirvError("its type is not a pointer of its storage class")
    if len(w) > 3:
        _same_key(m, w[3], key[2], "initializer")
    if w[2] in _BLOCKS:  # a buffer: a Block struct (or an array of them), as Vulkan requires
        pointee = m.insts[m.defs[w[0]]][1][2]
        while m.op_of(pointee) in (28, 29):
            pointee = m.insts[m.defs[pointee]][1][1]
        if pointee not in m.blocks:
            raise SpirvError(f"a buffer variable of storage class {w[2]} holds no Block struct")


def _image_kind(m: _Module, x: int, op: int, what: str) -> Any:
    key = m.key(m.type_of(x))
    if key[0] != op:
        raise SpirvError(f"{what} {m.describe(x)} is no {'sampled image' if op == 27 else 'image'}")
    return key


_DIMS = (1, 2, 3, 3, 2, 1, 2)  # the coordinates of an image of Dim 1D, 2D, 3D, Cube, Rect, Buffer, SubpassData


def _coordinate(m: _Module, x: int, kinds: str, image: Any) -> None:
    """A coordinate of ``kinds`` into an image (key), with as many components as it has dimensions (at least)."""
    shape = m.shape(m.type_of(x))
    if image[0] == 27:
        image = image[1]
    dims = _DIMS[image[2]] + (image[4] == 1) if image[2] < len(_DIMS) else 1  # Dim, Arrayed
    if not (bool(shape[0]) and shape[0] in kinds and shape[2] >= dims):
        raise SpirvError(f"coordinate {m.describe(x)} is {_show(shape)}")


def _lod(m: _Module, w: tuple, mask: int) -> None:
    """An image operand Lod given alone (as Taichi's fetches and samples give it) is a scalar."""
    if len(w) == mask + 2 and w[mask] == 0x2:
        lod = m.shape(m.type_of(w[mask + 1]))
        if lod[2] != 1:
            raise SpirvError(f"its Lod is {_show(lod)}")


def _sample(m: _Module, op: int, w: tuple, _: int) -> None:
    _coordinate(m, w[3], "if", _image_kind(m, w[2], 27, "image"))
    _lod(m, w, len(OPS[op][1]) - 1)


def _fetch(m: _Module, op: int, w: tuple, _: int) -> None:
    _coordinate(m, w[3], "i", _image_kind(m, w[2], 25, "image"))
    _lod(m, w, 4)


def _read(m: _Module, op: int, w: tuple, _: int) -> None:
    _coordinate(m, w[3], "if", _image_kind(m, w[2], 25, "image"))


def _write(m: _Module, op: int, w: tuple, _: int) -> None:
    _coordinate(m, w[1], "if", _image_kind(m, w[0], 25, "image"))
    shape = m.shape(m.type_of(w[2]))
    if shape[0] not in ("i", "f"):
        raise SpirvError(f"texel {m.describe(w[2])} is {_show(shape)}")


def _image(m: _Module, op: int, w: tuple, _: int) -> None:
    sampled = _image_kind(m, w[2], 27, "operand")
    if m.key(w[0]) != sampled[1]:
        raise SpirvError("its result type is not the sampled image's image")


def _sampled_image(m: _Module, op: int, w: tuple, _: int) -> None:
    image = _image_kind(m, w[2], 25, "operand")
    if m.key(m.type_of(w[3])) != (26,):
        raise SpirvError(f"sampler {m.describe(w[3])} is no sampler")
    if m.key(w[0]) != (27, image):
        raise SpirvError("its result type is not a sampled image of its image")


def _query(m: _Module, op: int, w: tuple, _: int) -> None:
    _image_kind(m, w[2], 25, "operand")


def _texel(m: _Module, op: int, w: tuple, _: int) -> None:
    if m.pointee(w[2])[1][0] != 25:
        raise SpirvError(f"{m.describe(w[2])} is no pointer to an image")


def _group(m: _Module, op: int, w: tuple, _: int) -> None:
    value = OPS[op][1].index("v")
    _same_key(m, w[value], m.key(w[0]), "operand")


#: What some decorations apply to: Binding and DescriptorSet a variable, Block and BufferBlock a struct type,
#: ArrayStride an array or pointer type, BuiltIn a variable or a constant (WorkgroupSize), SpecId a spec constant.
_DECORATED = {33: ("Binding", "v"), 34: ("DescriptorSet", "v"), 2: ("Block", "s"), 3: ("BufferBlock", "s"),
              6: ("ArrayStride", "a"), 11: ("BuiltIn", "b"), 1: ("SpecId", "c")}


def _decorate(m: _Module, op: int, w: tuple, _: int) -> None:
    name, want = _DECORATED.get(w[1], ("", ""))
    if not want:
        return
    target = m.op_of(w[0])
    ok = {"v": target == _VARIABLE, "s": target == _STRUCT, "a": target in (28, 29, _POINTER),
          "b": target == _VARIABLE or target in CONSTANTS, "c": target in (48, 49, 50)}[want]
    if not ok:
        raise SpirvError(f"{name} decorates {m.describe(w[0])}, which it does not apply to")


def _member(m: _Module, op: int, w: tuple, _: int) -> None:
    key = m.key(w[0])
    if not (key[0] == _STRUCT and w[1] < len(key) - 1):
        raise SpirvError(f"member {w[1]} of {m.describe(w[0])}, no struct of as many")


def _entry(m: _Module, op: int, w: tuple, _: int) -> None:
    if w[0] != 5:
        raise SpirvError(f"an entry point of execution model {w[0]}, not a compute shader's")
    end = string_end(w, 2)
    for x in w[end:]:
        if m.op_of(x) != _VARIABLE or m.fn[m.defs[x]] != -1:
            raise SpirvError(f"interface {m.describe(x)} is no global variable")


def _mode(m: _Module, op: int, w: tuple, _: int) -> None:
    if w[0] not in m.entry_functions:
        raise SpirvError(f"{m.describe(w[0])} is no entry point")


#: Loop controls: {bit: the literals it takes}: Unroll, DontUnroll, DependencyInfinite, DependencyLength,
#: MinIterations, MaxIterations, IterationMultiple, PeelCount, PartialCount.
_LOOP_CONTROLS = {0x1: 0, 0x2: 0, 0x4: 0, 0x8: 1, 0x10: 1, 0x20: 1, 0x40: 1, 0x80: 1, 0x100: 1}


def _loop_merge(m: _Module, op: int, w: tuple, _: int) -> None:
    control = w[2]
    if control & ~0x1FF or (control & 3) == 3 or len(w) - 3 != sum(n for bit, n in _LOOP_CONTROLS.items()
                                                                if control & bit):
        raise SpirvError(f"loop control {control:#x} with {len(w) - 3} literal(s)")


def _selection_merge(m: _Module, op: int, w: tuple, _: int) -> None:
    if w[1] not in (0, 1, 2):
        raise SpirvError(f"selection control {w[1]:#x}")


def _dot(m: _Module, op: int, w: tuple, _: int) -> None:
    result = m.shape(w[0])
    if result[0] != "f" or result[2] != 1:
        raise SpirvError(f"its result type is {_show(result)}")
    for x in w[2:]:
        shape = m.shape(m.type_of(x))
        if not (shape[0] == "f" and shape[1] == result[1] and shape[2] > 1):
            raise SpirvError(f"operand {m.describe(x)} is no vector of the result's type")
    _same_key(m, w[3], m.key(m.type_of(w[2])), "operand")


def _matrix(key: Any) -> tuple[Any, int, int]:
    """(component, rows, columns) of a matrix type's key, or (None, 0, 0)."""
    if key[0] == 24 and key[1][0] == 23:
        return key[1][1], key[1][2], key[2]
    return None, 0, 0


def _vector(key: Any) -> tuple[Any, int]:
    """(component, count) of a vector type's key, a scalar's (itself, 1)."""
    return (key[1], key[2]) if key[0] == 23 else (key, 1)


def _linear(m: _Module, op: int, w: tuple, _: int) -> None:
    """Transpose and the products of vectors and matrices: the operands' shapes make the result's."""
    result, a = m.key(w[0]), m.key(m.type_of(w[2]))
    b = m.key(m.type_of(w[3])) if len(w) > 3 else None
    (rc, rr, rk), (ac, ar, ak) = _matrix(result), _matrix(a)
    if op == 84:  # Transpose
        ok = rc is not None and (ac, ar, ak) == (rc, rk, rr)
    elif op in (142, 143):  # VectorTimesScalar, MatrixTimesScalar
        ok = a == result and (rc if op == 143 else _vector(result)[0]) == b and b is not None and b[0] == "f"
    elif op == 144:  # VectorTimesMatrix: vector(c, R) x matrix(R rows, C columns) = vector(c, C)
        bc, br, bk = _matrix(b)
        ok = bc is not None and _vector(a) == (bc, br) and _vector(result) == (bc, bk) and result[0] == 23
    elif op == 145:  # MatrixTimesVector: matrix(R, C) x vector(c, C) = vector(c, R)
        ok = ac is not None and _vector(b) == (ac, ak) and _vector(result) == (ac, ar) and result[0] == 23
    elif op == 146:  # MatrixTimesMatrix: (R, N) x (N, C) = (R, C)
        bc, br, bk = _matrix(b)
        ok = rc is not None and (ac, ar) == (rc, rr) and (bc, bk) == (rc, rk) and ak == br
    else:  # OuterProduct: vector(c, R) x vector(c, C) = matrix(R, C)
        ok = rc is not None and _vector(a) == (rc, rr) and _vector(b) == (rc, rk) and a[0] == 23
    if not ok or (rc if rc is not None else _vector(result)[0])[0] != "f":
        raise SpirvError("its operands' shapes do not make its result's")


def _bits(m: _Module, op: int, w: tuple, _: int) -> None:
    """BitFieldInsert, BitField[SU]Extract, BitCount: integers of the result's shape, offsets and counts."""
    result = m.shape(w[0])
    if result[0] != "i":
        raise SpirvError(f"its result type is {_show(result)}")
    if op == 205:  # BitCount: as many components
        _operands(m, result, w[2:], False)
        return
    lead = 2 if op == 201 else 1  # base (and insert) of the result's type, then offset and count
    for x in w[2:2 + lead]:
        _same_key(m, x, m.key(w[0]), "operand")
    for x in w[2 + lead:]:
        _integer(m, x, "offset or count")


_BALLOT = ("i", 32, 4)  # a ballot: a vector of 4 32-bit integers
#: Group operations with no rule of their own: (result's shape, each operand's) ("" any, "b" a boolean scalar).
_GROUP_FORMS = {261: ("b", "b"), 262: ("b", "b"), 333: ("b",), 334: ("b", "b"), 335: ("b", "b"), 336: ("b", ""),
                339: (_BALLOT, "b"), 340: ("b", _BALLOT), 341: ("b", _BALLOT, "i"), 342: ("i", _BALLOT),
                343: ("i", _BALLOT), 344: ("i", _BALLOT)}


def _group_form(m: _Module, op: int, w: tuple, _: int) -> None:
    want = _GROUP_FORMS[op]
    values = [x for x in w[3:] if m.is_value(x)] if op != 342 else [w[4]]
    for shape, need in zip([m.shape(w[0])] + [m.shape(m.type_of(x)) for x in values], want):
        fits = {"b": shape == ("b", 1, 1), "i": shape[0] == "i" and shape[2] == 1, "": True}
        if not (fits[need] if isinstance(need, str) else shape == need):
            raise SpirvError(f"a result or operand of shape {_show(shape)}, not what the operation takes")


def _pointer_int(m: _Module, op: int, w: tuple, _: int) -> None:
    """ConvertPtrToU and ConvertUToPtr: a physical pointer and an integer, either way."""
    pointer, number = (m.key(m.type_of(w[2])), m.shape(w[0])) if op == 117 else (m.key(w[0]),
                                                                                 m.shape(m.type_of(w[2])))
    if pointer[0] != _POINTER or pointer[1] != _PHYSICAL or number[0] != "i" or number[2] != 1:
        raise SpirvError("no physical pointer and integer")


def _not_compute(m: _Module, op: int, w: tuple, _: int) -> None:
    raise SpirvError(f"Op{OPS[op][0]}, which a compute shader cannot use")


def _extended(m: _Module, op: int, w: tuple, _: int) -> None:
    """IAddCarry, ISubBorrow, UMulExtended, SMulExtended: a struct of two members of the operands' type."""
    operand = m.key(m.type_of(w[2]))
    if m.shape(m.type_of(w[2]))[0] != "i" or m.key(w[0]) != (_STRUCT, operand, operand):
        raise SpirvError("its result type is no struct of two integers of its operands' type")
    _same_key(m, w[3], operand, "operand")


RULES: dict[str, Rule] = {
    "int": _numbers("i", True), "float": _numbers("f", True), "shift": _shift, "icmp": _compare("i"),
    "fcmp": _compare("f"), "logic": _logic, "f2i": _unary("f", "i"), "i2f": _unary("i", "f"), "i2i": _unary("i", "i"),
    "f2f": _unary("f", "f"), "ftest": _unary("f", "b"), "reduce": _reduce, "bitcast": _bitcast, "same": _same,
    "select": _select, "load": _load, "store": _store, "copy": _copy, "chain": _chain, "length": _length,
    "atomic": _atomic, "atomicstore": _atomic_store, "phi": _phi, "condition": _condition, "switch": _switch,
    "return": _return, "extract": _extract, "insert": _insert, "construct": _construct, "shuffle": _shuffle,
    "vextract": _vector_extract, "vinsert": _vector_insert, "ext": _ext, "function": _function, "call": _call,
    "variable": _variable, "sample": _sample, "fetch": _fetch, "read": _read, "write": _write, "image": _image,
    "sampledimage": _sampled_image, "query": _query, "texel": _texel, "group": _group, "member": _member,
    "decorate": _decorate, "entry": _entry, "mode": _mode, "loopmerge": _loop_merge,
    "selectionmerge": _selection_merge, "dot": _dot, "extended": _extended, "linear": _linear, "bits": _bits,
    "groupform": _group_form, "pointerint": _pointer_int, "notcompute": _not_compute,
}
