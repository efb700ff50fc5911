"""NdArray: an n-dimensional array in device memory, and its exports.

Where its memory lives by default and how its bytes reach the host is the runtime's device's to say, once, when
the ndarray is made (:mod:`taichi_aot.placement`): directly through a mapping where the host sees the memory, with
the CUDA driver on CUDA, through the device's staging buffers for device memory of the gfx backends.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Literal, Union

import numpy as np

from . import _dlpack
from ._dtypes import (  # Taichi's types in numpy's terms (the public ones in __all__ stay importable from here)
    DTypeLike,
    Layout,
    check_copy,
    convert_checked,
    data_type,
    layout_of,
    ndarray_argument,
    scalar_for,
    signature,
)
from ._lifetime import Parent, unpicklable
from ._native import ffi
from .enums import Arch, DataType
from .errors import ArgumentTypeError, ExportError, InvalidArgumentError, InvalidStateError
from .memory import Memory, _MapContext

if TYPE_CHECKING:  # pragma: no cover
    from collections.abc import Iterable

    from ._lifetime import Owned
    from .placement import Transfers

__all__ = [
    "Casting", "DTypeLike", "HostAccess", "NdArray", "check_copy", "convert_checked",
    "data_type", "signature",
]

# DLPack device types (dlpack.h: kDLCPU, kDLCUDA, kDLVulkan)
_DL_CPU, _DL_CUDA = _dlpack.CPU, _dlpack.CUDA  # DLPack's device types

#: What ``host_access`` parameters take.
HostAccess = Union[Literal["none", "read", "write", "readwrite"], bool]
#: How ``from_numpy`` converts another dtype: ``"checked"`` (same kind, values must fit), or numpy's
#: own ``"same_kind"`` / ``"unsafe"`` casting (values that do not fit wrap or overflow, as in numpy).
Casting = Literal["checked", "same_kind", "unsafe"]

_HOST_ACCESS: dict[object, tuple[bool, bool]] = {
    "none": (False, False),
    "read": (True, False),
    "write": (False, True),
    "readwrite": (True, True),
    True: (True, True),
    False: (False, False),
}


def _host_access(runtime: Parent, host_access: HostAccess | None) -> tuple[bool, bool]:
    """Whether the host may read and write an ndarray's memory (``None``: the runtime's default)."""
    if host_access is None:
        return runtime.device.default_access()
    if not isinstance(host_access, (str, bool, np.bool_)) or host_access not in _HOST_ACCESS:
        raise InvalidArgumentError(
            f"host_access must be 'none', 'read', 'write', 'readwrite' or a bool, got {host_access!r}"
        )
    return _HOST_ACCESS[host_access]


class NdArray:
    """An n-dimensional array of ``dtype`` elements of ``elem_shape`` in device memory.

    ``NdArray(rt, shape, dtype, elem_shape)``, or :meth:`Runtime.ndarray` /
    :meth:`Runtime.ndarray_from_numpy`. Zero-filled on creation.
    Attributes: ``shape``, ``elem_shape``, ``dtype`` (numpy), ``data_type``, ``nbytes``, ``memory``.

    ``host_access`` (``"none"``, ``"read"``, ``"write"``, ``"readwrite"``): whether ``map()`` views are
    possible. Default: the runtime's device's (``rt.device``): ``"none"`` where the GPU has memory of its own (CUDA,
    Vulkan on a discrete GPU: host-visible memory is managed or host memory there, slow for kernels), else
    ``"readwrite"`` (CPU backends, Vulkan on an integrated GPU or lavapipe); to_numpy/from_numpy work either way.

    Raises:
        ArgumentTypeError: a shape that is not a tuple of ints, or a dtype Taichi cannot store.
        InvalidArgumentError: a dimension out of range, too many dimensions, a bad ``host_access``.
    """

    __reduce_ex__ = unpicklable("send nd.to_numpy() and make an ndarray of it there (rt.ndarray_from_numpy)")

    def __init__(
        self,
        runtime: Parent,
        shape: Iterable[int] | int,
        dtype: DTypeLike = np.float32,
        elem_shape: Iterable[int] = (),
        *,
        host_access: HostAccess | None = None,
    ):
        runtime.ensure_open()
        layout = layout_of(shape, dtype, elem_shape)
        host_read, host_write = _host_access(runtime, host_access)
        self._bind(runtime, Memory(runtime, layout.nbytes, host_read=host_read, host_write=host_write), layout)
        if not runtime.device.traits.zeroed:  # libtaichi's GPU memory is not zeroed on allocation
            self._moves.write(np.zeros(self._full_shape, self._dtype), new=True)

    @classmethod
    def _unfilled(cls, runtime: Parent, shape: tuple[int, ...], dtype: np.dtype, elem_shape: tuple[int, ...]
                  ) -> NdArray:
        """An ndarray of host-visible memory whose bytes are not written yet (a staged copy, which its caller fills
        at once: on Vulkan, writing it would wait for the device)."""
        runtime.ensure_open()
        layout = layout_of(shape, dtype, elem_shape)
        self = cls.__new__(cls)
        self._bind(runtime, Memory(runtime, layout.nbytes, host_read=True, host_write=True), layout)
        return self

    @classmethod
    def over_host(cls, runtime: Parent, a: np.ndarray, shape: tuple[int, ...], dtype: np.dtype,
                  elem_shape: tuple[int, ...], owner: object, pooled: bool = False) -> NdArray:
        """An ndarray over the caller's C-contiguous host array ``a`` (CPU backends), without a copy; ``owner`` (what
        keeps ``a``'s memory alive) is held as long as the ndarray (None: the caller sees to it); ``pooled``: over the
        runtime's import of that address (a kernel argument's, never mapped)."""
        address = a.__array_interface__["data"][0]
        return cls._over(runtime, shape, dtype, elem_shape,
                         lambda nbytes: Memory._imported_host(runtime, nbytes, address, owner, pooled))

    @classmethod
    def over_cuda(cls, runtime: Parent, pointer: int, shape: tuple[int, ...], dtype: np.dtype,
                  elem_shape: tuple[int, ...], owner: object, pooled: bool = False) -> NdArray:
        """An ndarray over another library's CUDA memory at ``pointer`` (CUDA runtimes), without a copy; ``owner``
        and ``pooled`` as :meth:`over_host` takes them."""
        return cls._over(runtime, shape, dtype, elem_shape,
                         lambda nbytes: Memory._imported_cuda(runtime, nbytes, pointer, owner, pooled))

    @classmethod
    def _over(cls, runtime: Parent, shape: tuple[int, ...], dtype: np.dtype, elem_shape: tuple[int, ...],
              memory: Callable[[int], Memory]) -> NdArray:
        """An ndarray over memory imported by ``memory(nbytes)``."""
        runtime.ensure_open()
        layout = layout_of(shape, dtype, elem_shape)
        self = cls.__new__(cls)
        self._bind(runtime, memory(layout.nbytes), layout)
        return self

    def _bind(self, runtime: Parent, memory: Memory, layout: Layout) -> None:
        """Every route's one list of attributes: the memory, the layout, the launch argument, how bytes move."""
        self._memory = memory
        self._runtime = runtime
        self._shape = layout.dims
        self._elem_shape = layout.elem_dims
        self._dtype = layout.np_dtype
        self._data_type = layout.data_type
        self._arg: Any = ndarray_argument(memory.handle, layout.dims, layout.elem_dims, layout.data_type)
        self._arg_bytes = bytes(ffi.buffer(self._arg))  # packed into launches with one byte copy
        self._sig = signature(layout.data_type, len(layout.dims), layout.elem_dims)
        self._full_shape = layout.dims + layout.elem_dims
        # how bytes move: the runtime's device's (taichi_aot.placement), which pins the memory and waits as it must,
        # its choices for this memory made once
        self._transfers: Transfers = runtime.device.transfers
        self._moves = self._transfers.moves(memory)

    @property
    def owned(self) -> Owned:
        """The record of the memory's lifetime (for the package: ``owned.closed`` is the cheapest test)."""
        return self._memory.owned

    def host_span(self) -> tuple[int, int] | None:
        """The host's addresses of the memory, first and one past the last (CPU backends, or while mapped)."""
        return self._memory.host_span()

    # -- state --------------------------------------------------------------------

    def ensure_open(self) -> None:
        self._memory.ensure_open()

    @property
    def shape(self) -> tuple[int, ...]:
        """The array's shape (without the element shape)."""
        return self._shape

    @property
    def elem_shape(self) -> tuple[int, ...]:
        """The shape of each element: ``()`` for scalars, ``(3,)`` for a vec3, ``(2, 2)`` for a 2x2 matrix."""
        return self._elem_shape

    @property
    def ndim(self) -> int:
        """The number of array dimensions (``len(shape)``)."""
        return len(self._shape)

    @property
    def dtype(self) -> np.dtype:
        """The numpy dtype of the components."""
        return self._dtype

    @property
    def data_type(self) -> DataType:
        """The Taichi data type of the components."""
        return self._data_type

    @property
    def nbytes(self) -> int:
        """Size in bytes."""
        return self._memory.size

    @property
    def memory(self) -> Memory:
        """The memory holding the data."""
        return self._memory

    @property
    def runtime(self) -> Parent:
        """The runtime this ndarray belongs to (a :class:`~taichi_aot.runtime.Runtime`, typed by the protocol its
        children know it by)."""
        return self._runtime

    @property
    def closed(self) -> bool:
        """True once its memory is closed."""
        return self._memory.closed

    @property
    def full_shape(self) -> tuple[int, ...]:
        """``shape + elem_shape``: the shape of ``to_numpy()``."""
        return self._full_shape

    # -- numpy ------------------------------------------------------------------------

    def map(self) -> _MapContext:
        """``with x.map() as view``: a zero-copy view of shape ``shape + elem_shape`` and this dtype.

        Needs host access; read-only unless the ndarray is host-writable.

        Raises:
            InvalidStateError: the ndarray was made without host access.
        """
        self.ensure_open()
        if not (self._memory.host_read or self._memory.host_write):
            raise InvalidStateError(
                f"NdArray.map: this {self._runtime.arch.name} ndarray lives in memory the host cannot map "
                f"({self._runtime.device.why_default()}); read and write it with to_numpy()/from_numpy(), which "
                "stage the copy, or make it with host_access='readwrite' to map it")

        def make() -> np.ndarray:
            self.ensure_open()
            self._runtime.sync()
            return self._memory.host_view(writable=self._memory.host_write).view(self._dtype).reshape(self._full_shape)

        return _MapContext(make)

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        """numpy's protocol (``np.asarray(x)``, ``np.sum(x)``): a zero-copy view where the host can address
        the memory (CPU backends, host-readable memory), else a copy. ``copy=True`` always copies;
        ``copy=False`` raises where only a copy is possible.

        Raises:
            ExportError: ``copy=False`` for memory the host cannot address (use ``to_numpy()``), or another dtype.
            ArgumentTypeError: ``copy`` is not None or a bool, ``dtype`` is not a dtype.
        """
        self.ensure_open()
        check_copy(copy, "__array__")
        try:
            target = np.dtype(dtype) if dtype is not None else self._dtype
        except TypeError as e:
            raise ArgumentTypeError(f"__array__: dtype {dtype!r} is not a numpy dtype ({e})") from None
        host_visible = self._runtime.device.host_visible(self._memory)
        if copy is False and (not host_visible or target != self._dtype):
            why = self._not_host_visible() if not host_visible else f"it holds {self._dtype}, not {target}"
            raise ExportError(f"np.asarray(copy=False) of this ndarray needs a copy: {why}; use to_numpy()")
        if copy or not host_visible:
            a = self.to_numpy()
        else:
            self._runtime.sync()
            a = self._memory.host_view(writable=self._memory.host_write).view(self._dtype).reshape(self._full_shape)
        return a.astype(target, copy=False) if target != self._dtype else a

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        """The CUDA Array Interface (version 3) of a CUDA ndarray: ``torch.as_tensor(x, device="cuda")``,
        ``cupy.asarray(x)`` share its memory. Work enqueued on the runtime is finished first. Other backends
        have no such attribute."""
        if self._runtime.arch != Arch.CUDA:
            raise AttributeError("__cuda_array_interface__: only CUDA ndarrays have one")
        self.ensure_open()
        self._runtime.sync()
        return {"shape": self._full_shape, "typestr": self._dtype.str, "data": (self._memory.cuda_pointer(), False),
                "strides": None, "version": 3}

    def __dlpack_device__(self) -> tuple[int, int]:
        """DLPack's ``(device type, device id)``: the CPU where the host can address the memory (x64, host-visible
        memory), else the device (CUDA 2, Vulkan 7)."""
        device = self._runtime.device
        if device.host_visible(self._memory):
            return (_DL_CPU, 0)
        return (device.traits.dlpack_type, self._runtime.device_index)

    def __dlpack__(self, *, stream: Any = None, max_version: tuple[int, int] | None = None,
                   dl_device: tuple[int, int] | None = None, copy: bool | None = None) -> Any:
        """Export as a DLPack capsule (``np.from_dlpack(x)``, ``torch.from_dlpack(x)``, ``jax.dlpack.from_dlpack``),
        without a copy where the consumer's device can address the memory: host memory (x64, host-visible
        memory) to the CPU, CUDA memory to CUDA. The consumer's array keeps this ndarray's memory alive (and
        mapped), even after ``close()``. ``max_version`` (1, 0) or later gives the versioned capsule, else the
        older one; ``copy`` and ``dl_device`` as in the standard (a CUDA ndarray can be copied to the CPU).
        On CUDA, ``stream`` is the consumer's: the runtime's work is waited for unless it is -1.

        Raises:
            ExportError: memory the consumer cannot address without a copy and ``copy`` is not True
                (Vulkan device memory: use ``to_numpy()``, or allocate with ``host_access`` and ``map()``),
                ``copy=False`` for another ``dl_device``, or read-only memory asked for in the older capsule
                (which cannot say read-only).
            ArgumentTypeError: ``max_version`` or ``dl_device`` is not a pair of ints, ``copy`` not a bool.
        """
        self.ensure_open()
        check_copy(copy, "__dlpack__")
        own = self.__dlpack_device__()
        target = own if dl_device is None else _dlpack.int_pair(dl_device, "dl_device")
        versioned = max_version is not None and _dlpack.int_pair(max_version, "max_version") >= _dlpack.VERSION
        if target != own and copy is False:
            raise ExportError(f"__dlpack__: the ndarray is on device {own}, not {target}, and copy=False")
        if target[0] == _DL_CUDA and own[0] == _DL_CUDA:  # device memory numpy cannot describe
            return self._cuda_capsule(own, stream, versioned, copy)
        if target[0] != _DL_CPU and target != own:
            raise ExportError(f"__dlpack__: no export to DLPack device {target}")
        return self._host_capsule(own, versioned, copy)

    def _cuda_capsule(self, own: tuple[int, int], stream: Any, versioned: bool, copy: bool | None) -> Any:
        """The capsule of this CUDA ndarray's memory (a copy's, with ``copy``), pinned while the consumer holds it."""
        source = self
        if copy:
            source = NdArray(self._runtime, self._shape, self._dtype, self._elem_shape)
            source.copy_from(self)
        if stream != -1:  # -1: the consumer asks for no synchronization
            self._runtime.sync()
        owned = source.owned
        owned.pin()  # the memory outlives close() while the consumer holds it
        return _dlpack.export(source._memory.cuda_pointer(), self._full_shape, self._dtype, own, source,
                              versioned=versioned, release=owned.unpin)

    def _host_capsule(self, own: tuple[int, int], versioned: bool, copy: bool | None) -> Any:
        """The capsule numpy makes of this ndarray's host view (a copy's, with ``copy``)."""
        if own[0] != _DL_CPU and not copy:
            raise ExportError(
                f"__dlpack__: this {self._runtime.arch.name} ndarray cannot be shared without a copy: "
                f"{self._not_host_visible()}; use to_numpy(), or allocate it with host_access='readwrite' and "
                "map() it"
            )
        view = self.to_numpy() if copy else self.__array__()
        if versioned:
            return view.__dlpack__(max_version=_dlpack.VERSION, copy=False)
        if not view.flags.writeable:
            raise ExportError(
                "__dlpack__: the ndarray is read-only for the host (host_access), and the older DLPack capsule "
                "this consumer asks for cannot say so: use a consumer of DLPack 1.0 (np.from_dlpack, "
                "torch.from_dlpack with torch 2.4 or later), copy=True, or to_numpy()"
            )
        return view.__dlpack__()

    def _not_host_visible(self) -> str:
        if self._memory.host_write:
            return "its memory is write-only for the host (host_access='write'; 'readwrite' makes it readable)"
        return "its memory is not host-visible (allocate it with host_access='readwrite')"

    def to_numpy(self, out: np.ndarray | None = None) -> np.ndarray:
        """A copy of the data as a numpy array (staged through host memory if needed).

        ``out``: an existing C-contiguous, writeable array of shape ``shape + elem_shape`` and the
        same dtype to copy into (no allocation); it is returned.

        Raises:
            ArgumentTypeError: ``out`` is not a numpy array.
            InvalidArgumentError: ``out`` has another shape or dtype, or is not C-contiguous and writeable.
        """
        self.ensure_open()
        if out is None:
            out = np.empty(self._full_shape, self._dtype)
        elif not isinstance(out, np.ndarray):
            raise ArgumentTypeError(f"to_numpy: out must be a numpy array, got {type(out).__name__}")
        elif out.shape != self._full_shape or out.dtype != self._dtype:
            raise InvalidArgumentError(f"to_numpy: out must be {self._dtype} of shape {self._full_shape}, got "
                                       f"{out.dtype} of shape {out.shape}")
        else:
            flags = out.flags
            if not (flags.c_contiguous and flags.writeable):
                raise InvalidArgumentError("to_numpy: out must be C-contiguous and writeable")
        self._moves.read(out)
        return out

    def _read_later(self, into: np.ndarray | None = None) -> tuple[Callable[[], np.ndarray], Callable[[], None]] | None:
        """For the package's copies back: the read enqueued now, after the queued kernel that writes this ndarray:
        what returns its data once the runtime has waited, and what gives it up unread; None: :meth:`to_numpy` it
        after the wait (``into``: the array it will be read into, which the device may take as it is)."""
        later = self._transfers.read_later(self._memory, into)
        if later is None:
            return None

        def read() -> np.ndarray:
            out = np.empty(self._full_shape, self._dtype)
            later(out)
            return out

        return read, later.drop

    def _checked_input(self, array: Any, casting: Casting) -> np.ndarray:
        if array.__class__ is np.ndarray and array.dtype == self._dtype and array.shape == self._full_shape and (
            array.flags.c_contiguous
        ):
            return array  # the common case, checked without conversions
        try:
            a = np.asarray(array)
        except (ValueError, TypeError, OverflowError) as e:  # ragged lists, objects numpy cannot read
            raise ArgumentTypeError(f"from_numpy: {type(array).__name__} is not an array ({e})") from None
        if a.shape != self.full_shape:
            raise InvalidArgumentError(
                f"from_numpy: expected shape {self.full_shape} (shape {self._shape} + element {self._elem_shape}), "
                f"got {a.shape}"
            )
        if a.dtype != self._dtype:
            if casting not in ("checked", "same_kind", "unsafe"):
                raise InvalidArgumentError(f"from_numpy: casting must be 'checked', 'same_kind' or 'unsafe', "
                                           f"got {casting!r}")
            integers = a.dtype.kind in "iu" and self._dtype.kind in "iu"  # checked: signed <-> unsigned too
            if casting != "unsafe" and not (np.can_cast(a.dtype, self._dtype, casting="same_kind") or (
                integers and casting == "checked"
            )):
                raise ArgumentTypeError(f"from_numpy: cannot store {a.dtype} values in a {self._dtype} ndarray "
                                        "(casting='unsafe' converts as numpy does)")
            if casting == "checked":
                a = convert_checked(a, self._dtype, "from_numpy")
            else:
                with np.errstate(all="ignore"):
                    a = a.astype(self._dtype)
        return np.ascontiguousarray(a)

    def from_numpy(self, array: Any, *, casting: Casting = "checked") -> None:
        """Copy ``array`` (shape ``shape + elem_shape``) into the ndarray.

        ``casting``: ``"checked"`` (the default) converts another dtype of the same kind only when every
        value fits (no wrap-around, no overflow to infinity); ``"same_kind"`` and ``"unsafe"`` convert as
        numpy's ``astype`` does.

        Raises:
            InvalidArgumentError: another shape, or values that do not fit the dtype (``"checked"``).
            ArgumentTypeError: a dtype of another kind (a float into an int ndarray) unless ``"unsafe"``.
        """
        self.ensure_open()
        self._moves.write(self._checked_input(array, casting))

    def fill(self, value: Any) -> None:
        """Set every element (every component of every element) to ``value``.

        Raises:
            ArgumentTypeError: not a number, or a kind the dtype cannot hold (a float into ints).
            InvalidArgumentError: out of the dtype's range.
        """
        self.ensure_open()
        scalar = scalar_for(value, self._dtype, "fill")
        self._moves.write(np.full(self._full_shape, scalar, self._dtype))

    def copy_from(self, other: NdArray) -> None:
        """Copy another ndarray of the same runtime, dtype and total shape into this one.

        Raises:
            ArgumentTypeError: ``other`` is not an NdArray.
            InvalidArgumentError: another dtype or shape, or another runtime.
        """
        self.ensure_open()
        if not isinstance(other, NdArray):
            raise ArgumentTypeError(f"copy_from: expected an NdArray, got {type(other).__name__}")
        other.ensure_open()
        if other._dtype != self._dtype or other.full_shape != self.full_shape:
            raise InvalidArgumentError(
                f"copy_from: {other._dtype} {other.full_shape} does not match {self._dtype} {self.full_shape}"
            )
        other._memory.copy_to(self._memory)

    # -- closing ------------------------------------------------------------------------

    def close(self) -> None:
        """Free the ndarray's memory (deferred while views are alive). Safe to call twice."""
        self._memory.close()

    def __enter__(self) -> NdArray:
        self.ensure_open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        elem = f", elem_shape={self._elem_shape}" if self._elem_shape else ""
        return f"<NdArray shape={self._shape}{elem} dtype={self._dtype} on {self._runtime.arch.name} ({state})>"
