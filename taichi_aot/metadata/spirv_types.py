"""The rules of a SPIR-V module's type and constant declarations, as :mod:`.spirv` checks them (one rule an
instruction form, as :mod:`.spirv_rules`'s): numbers of the widths SPIR-V has, vectors and matrices of them,
arrays and structs of what can be stored, pointers of a storage class, images a Vulkan image can be."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .spirv_rules import _PHYSICAL, _POINTER, _STORAGE_CLASSES, Rule, SpirvError, _show

if TYPE_CHECKING:
    from .spirv import _Module


def _bool(m: _Module, op: int, w: tuple, _: int) -> None:
    if m.shape(w[0]) != ("b", 1, 1):
        raise SpirvError("a boolean constant of another type")


def _constant(m: _Module, op: int, w: tuple, _: int) -> None:
    shape = m.shape(w[0])
    if not (shape[0] in ("i", "f") and shape[2] == 1):
        raise SpirvError(f"a constant of type {_show(shape)}")
    if len(w) - 2 != (shape[1] + 31) // 32:
        raise SpirvError(f"{len(w) - 2} words for a {shape[1]}-bit constant")


def _type_int(m: _Module, op: int, w: tuple, _: int) -> None:
    if not (w[1] in (8, 16, 32, 64) and w[2] in (0, 1)):
        raise SpirvError(f"an integer type of width {w[1]}, signedness {w[2]}")


def _type_float(m: _Module, op: int, w: tuple, _: int) -> None:
    if w[1] not in (16, 32, 64):
        raise SpirvError(f"a float type of width {w[1]}")


def _type_vector(m: _Module, op: int, w: tuple, _: int) -> None:
    if not (bool(m.shape(w[1])[0]) and m.key(w[1])[0] != 23 and w[2] in (2, 3, 4, 8, 16)):
        raise SpirvError(f"a vector of {w[2]} x {m.describe(w[1])}")


def _type_matrix(m: _Module, op: int, w: tuple, _: int) -> None:
    column = m.shape(w[1])
    if not (m.key(w[1])[0] == 23 and column[0] == "f" and w[2] >= 2):
        raise SpirvError(f"a matrix of {w[2]} x {m.describe(w[1])}")


def _type_element(m: _Module, op: int, w: tuple, _: int) -> None:
    if m.key(w[1])[0] in (19, 33):
        raise SpirvError(f"element type {m.describe(w[1])}")


def _type_array(m: _Module, op: int, w: tuple, _: int) -> None:
    _type_element(m, op, w, _)
    length = m.constant(w[2])
    if length[0] != "spec" and length[0] < 1:
        raise SpirvError("an array of no elements")


def _type_struct(m: _Module, op: int, w: tuple, _: int) -> None:
    for x in w[1:]:
        key = m.key(x)
        if key[0] == _POINTER and key[1] != _PHYSICAL and w[0] in m.laid_out:
            raise SpirvError(f"member type {m.describe(x)}: a logical pointer in a struct laid out in memory")
        if key[0] in (19, 33):
            raise SpirvError(f"member type {m.describe(x)}")


def _type_pointer(m: _Module, op: int, w: tuple, _: int) -> None:
    if w[1] not in _STORAGE_CLASSES:
        raise SpirvError(f"a pointer of storage class {w[1]}")


def _type_function(m: _Module, op: int, w: tuple, _: int) -> None:
    for x in w[2:]:
        if m.key(x)[0] == 19:
            raise SpirvError(f"parameter type {m.describe(x)}")


def _type_image(m: _Module, op: int, w: tuple, _: int) -> None:
    sampled = m.key(w[1])
    if not (sampled == (19,) or sampled[0] in ("i", "f")):
        raise SpirvError(f"an image of {m.describe(w[1])}")
    dim, depth, arrayed, multisampled, use, image_format = w[2:8]
    access = w[8:]
    if not (dim in (0, 1, 2, 3, 5) and depth <= 2 and arrayed <= 1 and multisampled <= 1 and use in (1, 2)
            and image_format <= 41 and len(access) <= 1 and all(a <= 2 for a in access)):
        raise SpirvError(f"an image of operands {w[2:]}, which no Vulkan image has")


def _type_sampled(m: _Module, op: int, w: tuple, _: int) -> None:
    if m.key(w[1])[0] != 25:
        raise SpirvError(f"a sampled image of {m.describe(w[1])}")


TYPE_RULES: dict[str, Rule] = {
    "bool": _bool, "constant": _constant, "tint": _type_int, "tfloat": _type_float, "tvector": _type_vector,
    "tmatrix": _type_matrix, "telement": _type_element, "tarray": _type_array, "tstruct": _type_struct,
    "tpointer": _type_pointer, "tfunction": _type_function, "timage": _type_image, "tsampled": _type_sampled,
}
