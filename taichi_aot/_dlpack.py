"""DLPack capsules that numpy cannot make or read: CUDA memory, exported and imported without a copy.

numpy makes and reads DLPack capsules of host memory, which is what x64 ndarrays and CPU tensors
need. Device memory has no numpy array over it, so CUDA ndarrays are exported here
(``DLManagedTensorVersioned`` in a ``"dltensor_versioned"`` capsule for consumers that ask for
DLPack 1.0 or later, the older ``DLManagedTensor`` in a ``"dltensor"`` capsule otherwise) and
other libraries' CUDA capsules (a JAX array's, for one) are read here. The structures are those of
``dlpack.h`` (v1.0), declared with ctypes.

Lifetimes, as the standard sets them: a capsule nobody consumed calls its tensor's deleter when it
is collected; a consumer renames the capsule ``"used_..."`` and calls the deleter when it is done.
An exported tensor holds what it was made from (and a pin on its memory) until its deleter runs.
"""

from __future__ import annotations

import ctypes
import operator
import threading
from typing import Any, Callable

import numpy as np

from .errors import ArgumentTypeError

#: DLPack device types (``DLDeviceType``)
CPU, CUDA, CUDA_HOST, VULKAN, CUDA_MANAGED = 1, 2, 3, 7, 13
#: DLPack 1.0's flag of a tensor its consumer must not write.
FLAG_READ_ONLY = 1
VERSION = (1, 0)

_CODES = {"i": 0, "u": 1, "f": 2, "b": 6}  # numpy kind -> DLDataTypeCode (kDLInt, kDLUInt, kDLFloat, kDLBool)
_KINDS = {v: k for k, v in _CODES.items()}


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int32), ("dtype", DLDataType),
                ("shape", ctypes.POINTER(ctypes.c_int64)), ("strides", ctypes.POINTER(ctypes.c_int64)),
                ("byte_offset", ctypes.c_uint64)]


_Deleter = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", _Deleter)]


class DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [("version", DLPackVersion), ("manager_ctx", ctypes.c_void_p), ("deleter", _Deleter),
                ("flags", ctypes.c_uint64), ("dl_tensor", DLTensor)]


# Capsule names: PyCapsule keeps the pointer, not a copy, so they live as long as this module.
_NAME, _NAME_V = b"dltensor", b"dltensor_versioned"
_USED, _USED_V = b"used_dltensor", b"used_dltensor_versioned"

# the interpreter's capsule functions, declared on a handle of our own (ctypes.pythonapi is shared)
_py = ctypes.PyDLL(None)
_py.PyCapsule_New.restype = ctypes.py_object
_py.PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
_py.PyCapsule_IsValid.restype = ctypes.c_int
_py.PyCapsule_IsValid.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
_py.PyCapsule_GetPointer.restype = ctypes.c_void_p
_py.PyCapsule_GetPointer.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
_py.PyCapsule_SetName.restype = ctypes.c_int
_py.PyCapsule_SetName.argtypes = [ctypes.py_object, ctypes.c_char_p]

# exported tensors still alive, by address: (the structure, its shape array, the owner, the release)
_live: dict[int, tuple[Any, Any, object, Callable[[], None] | None]] = {}
_live_lock = threading.Lock()
# set once the interpreter exits (shutting_down): from then on a consumer letting go of a tensor (JAX and torch
# free theirs as their modules are torn down, after ours) releases nothing; the process is ending
_state = {"exiting": False}


def shutting_down() -> None:
    """Called as the interpreter exits, before runtimes close: deleters called from then on do nothing."""
    _state["exiting"] = True


# The callbacks take what they use as default arguments: at exit the interpreter clears this module's names
# while consumers may still call them.
def _delete(address: int | None, _live: dict = _live, _lock: Any = _live_lock, _state: dict = _state) -> None:
    """The deleter of every tensor exported here: drop what it held."""
    if address is None or _state["exiting"]:
        return
    with _lock:
        entry = _live.pop(address, None)
    if entry is not None and entry[3] is not None:
        entry[3]()


def _capsule_gone(capsule: int | None, _py: Any = _py, _names: tuple = (_NAME_V, _NAME), _delete: Any = _delete,
                  _state: dict = _state) -> None:
    """A capsule of ours collected: unless a consumer took the tensor (and renamed it), delete it."""
    if _state["exiting"]:
        return
    for name in _names:
        if capsule and _py.PyCapsule_IsValid(capsule, name):
            _delete(_py.PyCapsule_GetPointer(capsule, name))
            return


_DELETER = _Deleter(_delete)
_DESTRUCTOR = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(_capsule_gone)
_DESTRUCTOR_ADDRESS = ctypes.cast(_DESTRUCTOR, ctypes.c_void_p).value
# consumers hold these function pointers until they let go, which may be after this module is torn down at exit:
# the callbacks are never freed
_py.Py_IncRef.argtypes = [ctypes.py_object]
for _callback in (_DELETER, _DESTRUCTOR):
    _py.Py_IncRef(_callback)


def int_pair(value: Any, what: str) -> tuple[int, int]:
    """``value`` as DLPack's pair of ints (``__dlpack__``'s ``max_version`` or ``dl_device``, named ``what``)."""
    try:
        first, second = value
        return (operator.index(first), operator.index(second))
    except (TypeError, ValueError):
        raise ArgumentTypeError(f"__dlpack__: {what} must be a pair of ints, got {value!r}") from None


def dl_dtype(dtype: np.dtype) -> DLDataType:
    code = _CODES.get(dtype.kind)
    if code is None:
        raise ArgumentTypeError(f"DLPack: {dtype} has no DLPack type")
    return DLDataType(code, dtype.itemsize * 8, 1)


def export(data: int, shape: tuple[int, ...], dtype: np.dtype, device: tuple[int, int], owner: object, *,
           versioned: bool, release: Callable[[], None] | None = None) -> Any:
    """A DLPack capsule over ``data`` (compact, row-major); ``owner`` is held, and ``release`` called once, when
    the tensor's deleter runs."""
    ndim = len(shape)
    dims = (ctypes.c_int64 * max(ndim, 1))(*shape)
    tensor = DLTensor(data, DLDevice(*device), ndim, dl_dtype(dtype), ctypes.cast(dims, ctypes.POINTER(ctypes.c_int64)),
                      None, 0)
    managed: Any
    if versioned:
        managed = DLManagedTensorVersioned(DLPackVersion(*VERSION), None, _DELETER, 0, tensor)
    else:
        managed = DLManagedTensor(tensor, None, _DELETER)
    address = ctypes.addressof(managed)
    with _live_lock:
        _live[address] = (managed, dims, owner, release)
    return _py.PyCapsule_New(address, _NAME_V if versioned else _NAME, _DESTRUCTOR_ADDRESS)


class Imported:
    """A consumed DLPack tensor of another library's: its description, and its deleter, called once by
    :meth:`release` or when this object is collected (so the memory lives as long as this object)."""

    def __init__(self, source: object, capsule: Any):
        self.source = source  # the array the capsule came from, kept alive too
        read_only = False
        if _py.PyCapsule_IsValid(id(capsule), _NAME_V):
            address = _py.PyCapsule_GetPointer(id(capsule), _NAME_V)
            managed: Any = DLManagedTensorVersioned.from_address(address)
            used = _USED_V
            read_only = bool(managed.flags & FLAG_READ_ONLY)
        elif _py.PyCapsule_IsValid(id(capsule), _NAME):
            address = _py.PyCapsule_GetPointer(id(capsule), _NAME)
            managed = DLManagedTensor.from_address(address)
            used = _USED
        else:
            raise ArgumentTypeError(f"{type(source).__name__}.__dlpack__() gave no DLPack capsule (or a used one)")
        _py.PyCapsule_SetName(capsule, used)  # ours now: the producer's capsule destructor leaves it alone
        self._address: int | None = address
        self._deleter = managed.deleter
        t = managed.dl_tensor
        self.data = (t.data or 0) + t.byte_offset
        self.device = (int(t.device.device_type), int(t.device.device_id))
        self.read_only = read_only  # the producer forbids writes (DLPack 1.0's read-only flag)
        self.shape = tuple(int(t.shape[i]) for i in range(t.ndim))
        self.strides = tuple(int(t.strides[i]) for i in range(t.ndim)) if t.strides else None
        kind = _KINDS.get(t.dtype.code)
        whole = kind is not None and t.dtype.lanes == 1 and t.dtype.bits % 8 == 0
        self.dtype = np.dtype(f"{kind}{t.dtype.bits // 8}") if whole else None  # b1 is bool

    def compact(self) -> bool:
        """Row-major without gaps (the only layout a Taichi ndarray has)."""
        return self.strides is None or self.strides == row_major(self.shape)

    def release(self) -> None:
        address, self._address = self._address, None
        if address is not None and self._deleter and not _state["exiting"]:  # at exit the producer may be gone
            self._deleter(address)

    def __del__(self) -> None:
        self.release()


def row_major(shape: tuple[int, ...]) -> tuple[int, ...]:
    """The strides, in elements, of ``shape`` laid out row-major without gaps (the only layout a Taichi
    ndarray has)."""
    strides, step = [], 1
    for n in reversed(shape):
        strides.append(step)
        step *= n
    return tuple(reversed(strides))


def consume(source: Any, stream: int | None) -> Imported:
    """``source.__dlpack__(...)`` (DLPack 1.0 asked for, the older form accepted), consumed."""
    try:
        capsule = source.__dlpack__(stream=stream, max_version=VERSION)
    except TypeError:  # a producer from before DLPack 1.0: no max_version
        capsule = source.__dlpack__(stream=stream)
    return Imported(source, capsule)
