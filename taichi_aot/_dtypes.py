"""Taichi's type vocabulary in numpy's terms, for the ndarray and every room that packs one: a dtype (numpy's, a
DataType, a name, Taichi's own type objects) to a DataType and element shape, checked shapes and byte counts, a
value converted to a dtype with its range checked, the TiArgument of an ndarray, and the signature a kernel's
ndarray argument checks. Nothing here holds memory or knows a runtime."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, NamedTuple, Union

import numpy as np

from ._native import ffi
from .capi import MAX_ND_DIMS
from .enums import DATA_TYPES, NUMPY_DTYPES, ArgumentType, DataType
from .errors import ArgumentTypeError, InvalidArgumentError

if TYPE_CHECKING:  # pragma: no cover
    from collections.abc import Iterable

__all__ = ["MAX_NBYTES", "DTypeLike", "Layout", "check_copy", "checked_nbytes", "convert_checked", "data_type",
           "element_type", "layout_of", "ndarray_argument", "scalar_for", "shape_arg", "signature", "taichi_type"]

#: What ``dtype`` parameters take: a numpy dtype (or anything ``np.dtype()`` takes), a DataType, a name, or
#: one of Taichi's types (``ti.f32``, ``ti.math.vec3``, ``ti.types.matrix(2, 2, ti.f32)``).
DTypeLike = Union[DataType, "np.dtype[Any]", type, str, object]
#: The largest size of an ndarray in bytes.
MAX_NBYTES = 2**63 - 1


def taichi_type(dtype: Any) -> tuple[DataType, tuple[int, ...]] | None:
    """``(data type, element shape)`` of one of Taichi's own type objects (``ti.f32``, ``ti.math.vec3``,
    ``ti.types.matrix(2, 2, ti.f32)``), read from the object itself (taichi is never imported here)."""
    if not type(dtype).__module__.startswith("taichi."):
        return None
    inner = getattr(dtype, "dtype", None)
    n, m, ndim = (getattr(dtype, a, None) for a in ("n", "m", "ndim"))
    if inner is not None and isinstance(n, int) and ndim in (1, 2):
        scalar = taichi_type(inner)
        if scalar is None or scalar[1]:
            return None
        return scalar[0], ((n,) if ndim == 1 else (n, int(m or 1)))
    to_string = getattr(dtype, "to_string", None)
    name = to_string() if callable(to_string) else None
    if isinstance(name, str) and name.upper() in DataType.__members__:
        return DataType[name.upper()], ()
    return None


def data_type(dtype: Any) -> DataType:
    """The :class:`DataType` for a numpy dtype, a DataType, a name such as ``"f32"``/``"float32"``, or
    Taichi's own scalar type (``ti.f32``).

    Raises:
        ArgumentTypeError: it names no data type, one Taichi cannot store, or a vector/matrix type
            (those are ndarray dtypes: ``rt.ndarray(shape, ti.math.vec3)``).
    """
    if isinstance(dtype, DataType):
        return dtype
    taichi = taichi_type(dtype)
    if taichi is not None:
        if taichi[1]:
            raise ArgumentTypeError(f"{dtype} is a vector/matrix type, not a scalar data type")
        return taichi[0]
    if isinstance(dtype, str) and dtype.upper() in DataType.__members__:
        return DataType[dtype.upper()]
    try:
        np_dtype = np.dtype(dtype)
    except TypeError:
        raise ArgumentTypeError(f"{dtype!r} is not a data type") from None
    if np_dtype not in DATA_TYPES:
        raise ArgumentTypeError(f"numpy dtype {np_dtype} has no Taichi data type")
    return DATA_TYPES[np_dtype]


def shape_arg(shape: Any, what: str, allow_empty: bool) -> tuple[int, ...]:
    if isinstance(shape, (int, np.integer)) and not isinstance(shape, bool):
        shape = (int(shape),)
    try:
        dims = tuple(shape)
    except TypeError:
        raise ArgumentTypeError(f"{what} must be a tuple of ints, got {shape!r}") from None
    for d in dims:
        if isinstance(d, bool) or not isinstance(d, (int, np.integer)):
            raise ArgumentTypeError(f"{what} must be a tuple of ints, got {shape!r}")
        if not 0 < int(d) < 2**31:
            raise InvalidArgumentError(f"{what} {dims}: every dimension must be between 1 and 2**31-1")
    if not dims and not allow_empty:
        raise InvalidArgumentError(f"{what} must have at least one dimension")
    if len(dims) > MAX_ND_DIMS:
        raise InvalidArgumentError(f"{what} {dims} has more than {MAX_ND_DIMS} dimensions")
    return tuple(int(d) for d in dims)


def convert_checked(a: np.ndarray, target: np.dtype, what: str) -> np.ndarray:
    """``a`` as ``target``, refusing values the conversion would wrap or overflow to infinity.

    Raises:
        InvalidArgumentError: an integer out of ``target``'s range, or a finite value that would become infinite.
    """
    if a.dtype == target:
        return a
    if target.kind in "iu" and a.dtype.kind in "iub":
        info = np.iinfo(target)
        if a.size and (a.min() < info.min or a.max() > info.max):
            raise InvalidArgumentError(f"{what}: values out of range for {target} ({a.min()}..{a.max()})")
        return a.astype(target)
    with np.errstate(over="ignore", invalid="ignore"):
        out = a.astype(target)
    if target.kind == "f" and not np.array_equal(np.isfinite(out), np.isfinite(a)):
        raise InvalidArgumentError(f"{what}: values out of range for {target} (largest {np.finfo(target).max:g})")
    return out


def scalar_for(value: Any, dtype: np.dtype, what: str) -> Any:
    """``value`` as a ``dtype`` scalar; refuses other kinds (float into int, bool into numbers) and overflow."""
    try:
        a = np.asarray(value)
    except (ValueError, TypeError, OverflowError):
        a = np.asarray(None)
    if a.ndim or a.dtype.kind not in "biuf":
        raise ArgumentTypeError(f"{what}: expected a number, got {value!r}"[:300])
    if (a.dtype.kind == "b") != (dtype.kind == "b"):
        raise ArgumentTypeError(f"{what}: cannot store {value!r} in a {dtype} ndarray")
    if dtype.kind in "iu" and a.dtype.kind == "f":
        raise ArgumentTypeError(f"{what}: cannot store float {value!r} in a {dtype} ndarray")
    if dtype.kind in "iu" and not np.iinfo(dtype).min <= int(a) <= np.iinfo(dtype).max:
        raise InvalidArgumentError(f"{what}: {value!r} is out of range for {dtype}")
    return convert_checked(a, dtype, what)


class Layout(NamedTuple):
    """What an ndarray's shape, dtype and element shape come to, checked."""

    dims: tuple[int, ...]
    elem_dims: tuple[int, ...]
    data_type: DataType
    np_dtype: np.dtype
    nbytes: int


def layout_of(shape: Iterable[int] | int, dtype: DTypeLike, elem_shape: Iterable[int]) -> Layout:
    dims = shape_arg(shape, "ndarray shape", allow_empty=True)  # () is a 0-D ndarray: one element
    dt, elem_dims = element_type(dtype, shape_arg(elem_shape, "ndarray elem_shape", allow_empty=True))
    np_dtype = NUMPY_DTYPES[dt]
    return Layout(dims, elem_dims, dt, np_dtype, checked_nbytes(dims, elem_dims, np_dtype))


def element_type(dtype: DTypeLike, elem_dims: tuple[int, ...]) -> tuple[DataType, tuple[int, ...]]:
    """The data type an ndarray of ``dtype`` stores, and its element shape (``ti.math.vec3`` and friends carry
    theirs)."""
    taichi = taichi_type(dtype)
    if taichi is not None and taichi[1]:
        if elem_dims:
            raise InvalidArgumentError(f"ndarray dtype {dtype} has its element shape {taichi[1]}; "
                                       f"elem_shape {elem_dims} cannot be added to it")
        dtype, elem_dims = taichi
    dt = data_type(dtype)
    if dt not in NUMPY_DTYPES:
        raise ArgumentTypeError(f"ndarray dtype {dt.name} cannot be stored")
    return dt, elem_dims


def checked_nbytes(dims: tuple[int, ...], elem_dims: tuple[int, ...], np_dtype: np.dtype) -> int:
    nbytes = math.prod(dims + elem_dims) * np_dtype.itemsize  # Python ints: no wrap-around
    if nbytes > MAX_NBYTES:
        raise InvalidArgumentError(
            f"ndarray of shape {dims} + element {elem_dims} of {np_dtype} needs {nbytes} bytes "
            f"(more than {MAX_NBYTES})"
        )
    return nbytes


def ndarray_argument(handle: Any, dims: tuple[int, ...], elem_dims: tuple[int, ...], dt: DataType) -> Any:
    """The ``TiArgument`` a kernel gets for an ndarray over ``handle`` (a ``TiMemory``; NULL: a launch writes it)."""
    arg = ffi.new("TiArgument *")
    arg.type = ArgumentType.NDARRAY
    nd = arg.value.ndarray
    nd.memory = handle
    nd.shape.dim_count = len(dims)
    nd.shape.dims[0 : len(dims)] = list(dims)
    nd.elem_shape.dim_count = len(elem_dims)
    if elem_dims:
        nd.elem_shape.dims[0 : len(elem_dims)] = list(elem_dims)
    nd.elem_type = dt
    return arg


_SIGNATURES: dict[tuple[DataType | None, int, tuple[int, ...]], tuple[DataType | None, int, tuple[int, ...]]] = {}


def signature(dtype: DataType | None, ndim: int, elem_shape: tuple[int, ...]) -> tuple[DataType | None, int,
                                                                                       tuple[int, ...]]:
    """What a kernel's ndarray argument checks of an ndarray: (data type, dims, element shape), one tuple object per
    value (so that packers compare them by identity first)."""
    sig = (dtype, ndim, elem_shape)
    return _SIGNATURES.setdefault(sig, sig)


def check_copy(copy: Any, what: str) -> None:
    """numpy 2's ``copy`` argument: None, True or False, nothing else (typed error)."""
    if copy is not None and copy is not True and copy is not False:
        raise ArgumentTypeError(f"{what}: copy must be None, True or False, got {copy!r}")
