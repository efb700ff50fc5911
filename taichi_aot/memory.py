"""Device memory, memory slices and ndarrays, with zero-copy numpy views.

Views. ``with mem.map() as view`` (and ``NdArray.map()``) gives a numpy array
over the mapped memory itself. The memory stays mapped, and it and its runtime
stay alive, for as long as any such view (or an array derived from it) is
alive; the mapping ends when the last one is garbage collected. A view can
therefore never dangle, even after ``close()``: closing only stops new use.
Views of memory without ``host_write`` are read-only.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from . import _cuda, capi
from ._native import ffi, lib
from .enums import Arch, ArgumentType, DataType, MemoryUsage
from .errors import ArgumentTypeError, InvalidArgumentError, InvalidStateError, check
from .runtime import Child, Owned, Runtime

#: numpy dtype of every Taichi data type that can be stored.
NUMPY_DTYPES: dict[DataType, np.dtype] = {
    DataType.F16: np.dtype(np.float16),
    DataType.F32: np.dtype(np.float32),
    DataType.F64: np.dtype(np.float64),
    DataType.I8: np.dtype(np.int8),
    DataType.I16: np.dtype(np.int16),
    DataType.I32: np.dtype(np.int32),
    DataType.I64: np.dtype(np.int64),
    DataType.U1: np.dtype(np.bool_),
    DataType.U8: np.dtype(np.uint8),
    DataType.U16: np.dtype(np.uint16),
    DataType.U32: np.dtype(np.uint32),
    DataType.U64: np.dtype(np.uint64),
}
DATA_TYPES: dict[np.dtype, DataType] = {v: k for k, v in NUMPY_DTYPES.items()}

_HOST_ACCESS = {
    "none": (False, False),
    "read": (True, False),
    "write": (False, True),
    "readwrite": (True, True),
    True: (True, True),
    False: (False, False),
}


def data_type(dtype: Any) -> DataType:
    """The :class:`DataType` for a numpy dtype, a DataType, or a name such as ``"f32"``/``"float32"``."""
    if isinstance(dtype, DataType):
        return dtype
    if isinstance(dtype, str) and dtype.upper() in DataType.__members__:
        return DataType[dtype.upper()]
    try:
        np_dtype = np.dtype(dtype)
    except TypeError:
        raise ArgumentTypeError(f"{dtype!r} is not a data type") from None
    if np_dtype not in DATA_TYPES:
        raise ArgumentTypeError(f"numpy dtype {np_dtype} has no Taichi data type")
    return DATA_TYPES[np_dtype]


def _size_arg(size: Any, what: str) -> int:
    if isinstance(size, bool) or not isinstance(size, (int, np.integer)):
        raise ArgumentTypeError(f"{what}: size must be an int, got {type(size).__name__}")
    size = int(size)
    if size <= 0:
        raise InvalidArgumentError(f"{what}: size must be positive, got {size}")
    if size >= 2**63:
        raise InvalidArgumentError(f"{what}: size {size} is too large")
    return size


def _release_memory(handle: tuple) -> None:
    runtime, memory, pool, key = handle
    if ("memory", runtime, memory) not in capi._live:
        return
    if pool is not None:  # CPU backends cannot free: keep it for the next allocation of this kind
        pool.setdefault(key, []).append(memory)
        return
    capi.free_memory(runtime, memory)


class _Mapping:
    """One ti_map_memory of a Memory, shared by every view until the last is gone."""

    __slots__ = ("_owned", "_runtime", "_handle", "_refs", "_memory_ref", "ptr", "_lock")

    def __init__(self, memory: Memory):
        self._owned = memory._owned
        self._runtime = memory._runtime._handle
        self._handle = memory._handle
        self.ptr = capi.map_memory(self._runtime, self._handle)
        self._owned.pin()
        self._refs = 0
        self._memory_ref = memory
        self._lock = threading.Lock()

    def acquire(self) -> None:
        with self._lock:
            self._refs += 1

    def release(self, _cdata: Any = None) -> None:
        with self._lock:
            self._refs -= 1
            last = self._refs == 0
        if last:
            memory, self._memory_ref = self._memory_ref, None
            if memory is not None:
                memory._mapping = None
            try:
                capi.unmap_memory(self._runtime, self._handle)
            except Exception:
                pass
            self._owned.unpin()

    def view(self, nbytes: int, offset: int = 0) -> np.ndarray:
        """A uint8 numpy array over ``[offset, offset + nbytes)``; keeps the mapping alive."""
        self.acquire()
        try:
            base = ffi.gc(ffi.cast("uint8_t *", self.ptr) + offset, self.release)
            return np.frombuffer(ffi.buffer(base, nbytes), dtype=np.uint8)
        except BaseException:
            self.release()
            raise


class _MapContext:
    """What ``map()`` returns: use as ``with x.map() as view``, or call ``.view()``."""

    __slots__ = ("_make", "_view")

    def __init__(self, make):
        self._make = make
        self._view = None

    def view(self) -> np.ndarray:
        return self._make()

    def __enter__(self) -> np.ndarray:
        self._view = self._make()
        return self._view

    def __exit__(self, *exc) -> None:
        self._view = None  # the mapping ends when the caller's references go too


class Memory(Child):
    """A block of device memory of one runtime. Create with :meth:`Runtime.allocate_memory`.

    Attributes: ``size`` (bytes), ``host_read``, ``host_write``, ``export_sharing``, ``usage``, ``runtime``.
    ``mem[a:b]`` is a :class:`MemorySlice`. Closing frees the memory (on x64, where 1.7.4
    cannot free, it is kept for the runtime's next allocation of the same size and flags).
    """

    def __init__(self):
        raise TypeError("use Runtime.allocate_memory() to create Memory")

    @classmethod
    def _allocate(cls, runtime: Runtime, size, host_read, host_write, export_sharing, usage) -> Memory:
        size = _size_arg(size, "allocate_memory")
        usage = MemoryUsage(capi.enum_arg(MemoryUsage, usage, "allocate_memory: usage"))
        flags = (bool(host_read), bool(host_write), bool(export_sharing), int(usage))
        key = (size, *flags)
        pool = runtime._free_pool if runtime._arch in capi.CPU_ARCHS else None
        reused = pool.get(key) if pool else None
        if reused:
            handle = reused.pop()
            ptr = capi.map_memory(runtime._handle, handle)
            try:
                _zero(ptr, size)
            finally:
                capi.unmap_memory(runtime._handle, handle)
        else:
            handle = capi.allocate_memory(
                runtime._handle, size=size, host_read=flags[0], host_write=flags[1], export_sharing=flags[2],
                usage=flags[3],
            )
        self = object.__new__(cls)
        self._handle = handle
        self._size = size
        self._flags = flags
        self._mapping: _Mapping | None = None
        self._attach(runtime, Owned((runtime._handle, handle, pool, key), _release_memory, runtime._owned))
        return self

    _kind = "memory"

    @property
    def size(self) -> int:
        """Size in bytes."""
        return self._size

    @property
    def host_read(self) -> bool:
        return self._flags[0]

    @property
    def host_write(self) -> bool:
        return self._flags[1]

    @property
    def export_sharing(self) -> bool:
        return self._flags[2]

    @property
    def usage(self) -> MemoryUsage:
        return MemoryUsage(self._flags[3])

    # -- mapping ------------------------------------------------------------------

    def _view(self, nbytes: int | None = None, offset: int = 0) -> np.ndarray:
        # internal: a uint8 view whatever the host flags (used for staging and on CPU backends)
        mapping = self._mapping
        if mapping is None:
            mapping = self._mapping = _Mapping(self)
        return mapping.view(self._size - offset if nbytes is None else nbytes, offset)

    def _cuda_ptr(self) -> int:
        """The CUDA device pointer of this memory (CUDA runtimes)."""
        ptr = getattr(self, "_cuda_address", None)
        if ptr is None:
            info = capi.export_cuda_memory(self._runtime._handle, self._handle)
            ptr = self._cuda_address = int(ffi.cast("uintptr_t", info.ptr))
        return ptr

    def _copy_host(self, data: Any, nbytes: int, to_device: bool) -> None:
        """memcpy between ``data`` (a contiguous buffer) and this memory, mapped for just this copy.

        Hot path of to_numpy/from_numpy: a live view's mapping is used as it is; otherwise
        :func:`capi.memcpy_host` maps, copies and unmaps in one call.
        """
        mapping = self._mapping
        if mapping is not None:  # a live view holds a mapping: use it
            ptr = mapping.ptr
            if to_device:
                ffi.memmove(ptr, data, nbytes)
            else:
                ffi.memmove(data, ptr, nbytes)
            return
        capi.memcpy_host(self._runtime._handle, self._handle, data, nbytes, to_device)

    def _require_host_access(self, what: str) -> None:
        if not (self.host_read or self.host_write):
            raise InvalidStateError(
                f"{what}: this memory was allocated without host_read/host_write, so it cannot be mapped; "
                "allocate it with host access, or use NdArray.to_numpy()/from_numpy() which stage the copy"
            )

    def map(self) -> _MapContext:
        """``with mem.map() as view``: a uint8 numpy view of the whole memory (zero-copy).

        Writable only if the memory has ``host_write``. The memory stays mapped while a view lives.
        """
        self._check()
        self._require_host_access("Memory.map")

        def make():
            self._check()
            self._runtime._sync()
            view = self._view()
            if not self.host_write:
                view.flags.writeable = False
            return view

        return _MapContext(make)

    # -- slices and copies ----------------------------------------------------------

    def __getitem__(self, index: slice) -> MemorySlice:
        if not isinstance(index, slice):
            raise ArgumentTypeError(f"Memory can only be sliced (mem[a:b]), not indexed with {index!r}")
        start, stop, step = index.indices(self._size)
        if step != 1:
            raise InvalidArgumentError("Memory slices must be contiguous (step 1)")
        if stop <= start:
            raise InvalidArgumentError(f"empty memory slice [{start}:{stop}]")
        return MemorySlice(self, start, stop - start)

    def slice(self, offset: int = 0, size: int | None = None) -> MemorySlice:
        """A :class:`MemorySlice` of ``size`` bytes from ``offset`` (bounds checked)."""
        size = self._size - offset if size is None else size
        return MemorySlice(self, offset, size)

    def copy_to(self, dst: Memory | MemorySlice) -> None:
        """Copy the whole memory into ``dst`` (a Memory or MemorySlice of the same size)."""
        self.slice().copy_to(dst)

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        return f"<Memory {self._size} bytes on {self._runtime.arch.name} ({state})>"


def _scalar_for(value: Any, dtype: np.dtype, what: str) -> Any:
    """``value`` as a ``dtype`` scalar; refuses other kinds (float into int, bool into numbers) and overflow."""
    a = np.asarray(value)
    if a.ndim or a.dtype.kind not in "biuf":
        raise ArgumentTypeError(f"{what}: expected a number, got {value!r}")
    if (a.dtype.kind == "b") != (dtype.kind == "b"):
        raise ArgumentTypeError(f"{what}: cannot store {value!r} in a {dtype} ndarray")
    if dtype.kind in "iu":
        if a.dtype.kind == "f":
            raise ArgumentTypeError(f"{what}: cannot store float {value!r} in a {dtype} ndarray")
        info = np.iinfo(dtype)
        if not info.min <= int(a) <= info.max:
            raise InvalidArgumentError(f"{what}: {value!r} is out of range for {dtype}")
    return a.astype(dtype)


def _zero(ptr, size: int) -> None:
    np.frombuffer(ffi.buffer(ptr, size), np.uint8)[:] = 0


class MemorySlice:
    """``size`` bytes of a :class:`Memory` from ``offset`` (``mem[a:b]`` or ``mem.slice(offset, size)``)."""

    __slots__ = ("memory", "offset", "size")

    def __init__(self, memory: Memory, offset: int, size: int):
        if not isinstance(memory, Memory):
            raise ArgumentTypeError(f"MemorySlice needs a Memory, got {type(memory).__name__}")
        for name, v in (("offset", offset), ("size", size)):
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
                raise ArgumentTypeError(f"MemorySlice {name} must be an int, got {v!r}")
        if offset < 0 or size <= 0 or offset + size > memory.size:
            raise InvalidArgumentError(
                f"memory slice [{offset}, {offset + size}) is outside the memory's {memory.size} bytes"
            )
        self.memory = memory
        self.offset = int(offset)
        self.size = int(size)

    def copy_to(self, dst: Memory | MemorySlice) -> None:
        """Copy these bytes into ``dst`` (same size, same runtime). Works on every backend."""
        if isinstance(dst, Memory):
            dst = dst.slice()
        if not isinstance(dst, MemorySlice):
            raise ArgumentTypeError(f"copy_to: dst must be a Memory or MemorySlice, got {type(dst).__name__}")
        src_mem, dst_mem = self.memory, dst.memory
        src_mem._check()
        dst_mem._check()
        if src_mem._runtime is not dst_mem._runtime:
            raise InvalidArgumentError("copy_to: source and destination belong to different runtimes")
        if dst.size != self.size:
            raise InvalidArgumentError(f"copy_to: sizes differ (source {self.size} bytes, destination {dst.size})")
        rt = src_mem._runtime
        if rt.arch in capi.CPU_ARCHS:
            # 1.7.4 has no device-to-device copy on CPU backends; their memory is host memory.
            rt.wait()
            src = src_mem._view(self.size, self.offset)
            dst_view = dst_mem._view(dst.size, dst.offset)
            np.copyto(dst_view, src)
            del src, dst_view
            return
        if rt.arch == Arch.CUDA:  # 1.7.4 reports NOT_SUPPORTED for device copies on CUDA: the driver copies
            rt._sync()
            _cuda.dtod(dst_mem._cuda_ptr() + dst.offset, src_mem._cuda_ptr() + self.offset, self.size)
            return
        capi.copy_memory_device_to_device(
            rt._handle,
            {"memory": dst_mem._handle, "offset": dst.offset, "size": dst.size},
            {"memory": src_mem._handle, "offset": self.offset, "size": self.size},
        )

    def __repr__(self) -> str:
        return f"<MemorySlice [{self.offset}, {self.offset + self.size}) of {self.memory!r}>"


def _shape_arg(shape: Any, what: str, allow_empty: bool) -> tuple[int, ...]:
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
    if len(dims) > capi.MAX_ND_DIMS:
        raise InvalidArgumentError(f"{what} {dims} has more than {capi.MAX_ND_DIMS} dimensions")
    return tuple(int(d) for d in dims)


class NdArray:
    """An n-dimensional array of ``dtype`` elements of ``elem_shape`` in device memory.

    Create with :meth:`Runtime.ndarray` or :meth:`Runtime.ndarray_from_numpy`.
    Attributes: ``shape``, ``elem_shape``, ``dtype`` (numpy), ``data_type``, ``nbytes``, ``memory``.
    """

    def __init__(self):
        raise TypeError("use Runtime.ndarray() to create an NdArray")

    @classmethod
    def _allocate(cls, runtime: Runtime, shape, dtype, elem_shape, host_access) -> NdArray:
        shape = _shape_arg(shape, "ndarray shape", allow_empty=False)
        elem_shape = _shape_arg(elem_shape, "ndarray elem_shape", allow_empty=True)
        dt = data_type(dtype)
        if dt not in NUMPY_DTYPES:
            raise ArgumentTypeError(f"ndarray dtype {dt.name} cannot be stored")
        if host_access is None:
            host_access = "none" if runtime._arch == Arch.CUDA else "readwrite"
        if host_access not in _HOST_ACCESS:
            raise InvalidArgumentError(
                f"host_access must be 'none', 'read', 'write', 'readwrite' or a bool, got {host_access!r}"
            )
        host_read, host_write = _HOST_ACCESS[host_access]
        np_dtype = NUMPY_DTYPES[dt]
        nbytes = int(np.prod(shape + elem_shape, dtype=np.int64)) * np_dtype.itemsize
        memory = Memory._allocate(runtime, nbytes, host_read, host_write, False, MemoryUsage.STORAGE)
        self = object.__new__(cls)
        self._memory = memory
        self._runtime = runtime
        self._shape = shape
        self._elem_shape = elem_shape
        self._dtype = np_dtype
        self._data_type = dt
        arg = ffi.new("TiArgument *")
        arg.type = ArgumentType.NDARRAY
        nd = arg.value.ndarray
        nd.memory = memory._handle
        nd.shape.dim_count = len(shape)
        nd.shape.dims[0 : len(shape)] = list(shape)
        nd.elem_shape.dim_count = len(elem_shape)
        if elem_shape:
            nd.elem_shape.dims[0 : len(elem_shape)] = list(elem_shape)
        nd.elem_type = dt
        self._arg = arg
        self._arg_bytes = bytes(ffi.buffer(arg))  # packed into launches with one byte copy
        self._sig = (dt, len(shape), elem_shape)
        self._full_shape = shape + elem_shape
        cpu = runtime._arch in capi.CPU_ARCHS
        self._direct_read, self._direct_write = cpu or host_read, cpu or host_write
        if runtime._arch not in capi.CPU_ARCHS:
            self.fill(0)  # CPU memory is zeroed on allocation; device memory is not
        return self

    # -- state --------------------------------------------------------------------

    def _check(self) -> None:
        self._memory._check()

    @property
    def shape(self) -> tuple[int, ...]:
        return self._shape

    @property
    def elem_shape(self) -> tuple[int, ...]:
        return self._elem_shape

    @property
    def ndim(self) -> int:
        return len(self._shape)

    @property
    def dtype(self) -> np.dtype:
        return self._dtype

    @property
    def data_type(self) -> DataType:
        return self._data_type

    @property
    def nbytes(self) -> int:
        return self._memory.size

    @property
    def memory(self) -> Memory:
        return self._memory

    @property
    def runtime(self) -> Runtime:
        return self._runtime

    @property
    def closed(self) -> bool:
        return self._memory.closed

    @property
    def full_shape(self) -> tuple[int, ...]:
        """``shape + elem_shape``: the shape of ``to_numpy()``."""
        return self._full_shape

    # -- numpy ------------------------------------------------------------------------

    def _typed(self, view: np.ndarray) -> np.ndarray:
        return view.view(self._dtype).reshape(self.full_shape)

    def map(self) -> _MapContext:
        """``with x.map() as view``: a zero-copy view of shape ``shape + elem_shape`` and this dtype.

        Needs host access; read-only unless the ndarray is host-writable.
        """
        self._check()
        self._memory._require_host_access("NdArray.map")

        def make():
            self._check()
            self._runtime._sync()
            view = self._typed(self._memory._view())
            if not self._memory.host_write:
                view.flags.writeable = False
            return view

        return _MapContext(make)

    def _staging(self) -> Memory:
        return Memory._allocate(self._runtime, self.nbytes, True, True, False, MemoryUsage.STORAGE)

    def to_numpy(self, out: np.ndarray | None = None) -> np.ndarray:
        """A copy of the data as a numpy array (staged through host memory if needed).

        ``out``: an existing C-contiguous, writeable array of shape ``shape + elem_shape`` and the
        same dtype to copy into (no allocation); it is returned.
        """
        self._check()
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
        self._runtime._sync()
        if self._direct_read:
            self._memory._copy_host(out, self._memory._size, to_device=False)
            return out
        if self._runtime._arch == Arch.CUDA:  # 1.7.4 has no device-to-host path there: the driver copies
            _cuda.dtoh(out.__array_interface__["data"][0], self._memory._cuda_ptr(), self._memory._size)
            return out
        staging = self._staging()
        try:
            self._memory.copy_to(staging)
            self._runtime._sync()
            np.copyto(out.reshape(-1).view(np.uint8), staging._view())
        finally:
            staging.close()
        return out

    def _checked_input(self, array: Any) -> np.ndarray:
        if array.__class__ is np.ndarray and array.dtype == self._dtype and array.shape == self._full_shape and (
            array.flags.c_contiguous
        ):
            return array  # the common case, checked without conversions
        a = np.asarray(array)
        if a.shape != self.full_shape:
            raise InvalidArgumentError(
                f"from_numpy: expected shape {self.full_shape} (shape {self._shape} + element {self._elem_shape}), "
                f"got {a.shape}"
            )
        if a.dtype != self._dtype:
            if not np.can_cast(a.dtype, self._dtype, casting="same_kind"):
                raise ArgumentTypeError(f"from_numpy: cannot store {a.dtype} values in a {self._dtype} ndarray")
            a = a.astype(self._dtype)
        return np.ascontiguousarray(a)

    def from_numpy(self, array: Any) -> None:
        """Copy ``array`` (shape ``shape + elem_shape``; same-kind dtypes are converted) into the ndarray."""
        self._check()
        self._write_bytes(self._checked_input(array))

    def _write_bytes(self, data: np.ndarray) -> None:
        self._runtime._sync()
        if self._direct_write:
            self._memory._copy_host(data, self._memory._size, to_device=True)
            return
        if self._runtime._arch == Arch.CUDA:  # 1.7.4 has no host-to-device path there: the driver copies
            data = np.ascontiguousarray(data)
            _cuda.htod(self._memory._cuda_ptr(), data.__array_interface__["data"][0], self._memory._size)
            return
        staging = self._staging()
        try:
            np.copyto(staging._view(), data.reshape(-1).view(np.uint8))
            staging.copy_to(self._memory)
            self._runtime._sync()
        finally:
            staging.close()

    def fill(self, value: Any) -> None:
        """Set every element (every component of every element) to ``value``."""
        self._check()
        scalar = _scalar_for(value, self._dtype, "fill")
        self._write_bytes(np.full(self.full_shape, scalar, self._dtype).reshape(-1).view(np.uint8))

    def copy_from(self, other: NdArray) -> None:
        """Copy another ndarray of the same runtime, dtype and total shape into this one."""
        self._check()
        if not isinstance(other, NdArray):
            raise ArgumentTypeError(f"copy_from: expected an NdArray, got {type(other).__name__}")
        other._check()
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
        self._check()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        elem = f", elem_shape={self._elem_shape}" if self._elem_shape else ""
        return f"<NdArray shape={self._shape}{elem} dtype={self._dtype} on {self._runtime.arch.name} ({state})>"
