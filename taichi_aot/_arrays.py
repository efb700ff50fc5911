"""Other libraries' arrays as they describe themselves: numpy views over host arrays, the CUDA array interface and
DLPack exports of CUDA arrays, the cheap prints that recognise a torch, CuPy or JAX array again, and the layout
questions the staged copies ask (contiguity, overlap). The policy that uses them is :mod:`taichi_aot._foreign`'s.
"""

from __future__ import annotations

import struct
import sys
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol, Union

import numpy as np

from . import _dlpack
from ._call import Launcher, _bind
from ._native import ffi, lib
from .drivers import cuda as _cuda
from .enums import DATA_TYPES, Arch
from .errors import ArgumentTypeError, InvalidArgumentError, TaichiError

if TYPE_CHECKING:  # pragma: no cover
    from .ndarray import NdArray

class SupportsDLPack(Protocol):
    """An array with DLPack's protocol (torch, JAX, CuPy, numpy)."""

    def __dlpack__(self) -> Any: ...

    def __dlpack_device__(self) -> Any: ...


class SupportsArrayInterface(Protocol):
    """An array with numpy's ``__array_interface__``."""

    @property
    def __array_interface__(self) -> Any: ...


class SupportsCudaArrayInterface(Protocol):
    """A CUDA array with the ``__cuda_array_interface__`` (CuPy, torch, Numba, JAX)."""

    @property
    def __cuda_array_interface__(self) -> Any: ...


#: What a kernel's ndarray argument takes, for type checkers (the generated stubs use it): an NdArray, a numpy
#: array, or another library's array with DLPack or an array interface.
ArrayArgument = Union["NdArray", np.ndarray, SupportsDLPack, SupportsArrayInterface, SupportsCudaArrayInterface]

__all__ = ["ArrayArgument", "ArrayView", "CudaArray", "Launcher", "SupportsArrayInterface",
           "SupportsCudaArrayInterface", "SupportsDLPack", "array_like", "bound_hold", "byte_span", "cuda_interface",
           "describe", "describe_array", "forget_print", "host_array", "is_jax", "on_cuda", "overlaps_itself",
           "print_hit_accepts", "print_of", "producer_error", "read_print", "refuse_lazy", "same_layout", "share",
           "storage_guards", "torch_layout_status", "why_copy"]

_SCALARS = (bool, int, float, complex, str, bytes, np.generic, type(None))
_MISSING: Any = object()


def array_like(value: Any) -> bool:
    """Whether ``value`` is an array of another library: numpy, anything with an array protocol, or the buffer
    protocol (``array.array``, a ``memoryview``, a ``bytearray``; not bytes or str, which are no arrays)."""
    if isinstance(value, np.ndarray) or hasattr(value, "__array_interface__") or hasattr(value, "__dlpack__") or (
            hasattr(value, "__cuda_array_interface__")):
        return True
    if isinstance(value, _SCALARS):
        return False
    try:
        memoryview(value).release()
    except TypeError:
        return False
    return True


def detached(value: Any) -> Any:
    """``value``, or where it is a torch tensor autograd records (``requires_grad``), the same memory detached from
    autograd (which refuses to export it): a reverse-mode kernel's arrays, read as autograd's own backward reads
    them."""
    if getattr(value, "requires_grad", False) is True and type(value).__module__.startswith("torch"):
        return value.detach()
    return value


#: What messages call an array of each library, by the first part of its type's module (no library imported).
_NOUNS = {"numpy": "numpy array", "torch": "torch tensor", "cupy": "CuPy array", "jax": "JAX array",
          "jaxlib": "JAX array"}


def describe_array(value: Any) -> str:
    """An array of another library as messages describe it, from what it says of itself (nothing converted, its
    library not imported): ``float64 torch tensor of shape (8,)``, ``int32 JAX array of shape (4, 4)``."""
    cls = type(value)
    library = (cls.__module__ or "").partition(".")[0]
    noun = _NOUNS.get(library) or (cls.__name__ if library in ("builtins", "") else f"{library}.{cls.__name__}")
    try:
        dtype = getattr(value, "dtype", None)
        kind = f"{str(dtype).rpartition('.')[2]} " if dtype is not None else ""  # torch's prints as torch.float64
        shape = getattr(value, "shape", None)
        dims = f" of shape {tuple(int(n) for n in shape)}" if shape is not None else ""
    except Exception:  # an array whose attributes raise (a deleted JAX array, a lazy tensor): its noun alone
        return noun
    return f"{kind}{noun}{dims}"


def producer_error(obj: Any, what: str, how: str, e: BaseException) -> ArgumentTypeError:
    return ArgumentTypeError(f"{what}: this {type(obj).__name__} refused {how} ({type(e).__name__}: {e})")


def cuda_interface(obj: Any, what: str) -> dict | None:
    """``obj.__cuda_array_interface__``, or None where it has none; what a producer raises (torch, for a tensor
    that requires grad) is an ArgumentTypeError."""
    try:
        return getattr(obj, "__cuda_array_interface__", None)
    except TaichiError:
        raise
    except Exception as e:
        raise producer_error(obj, what, "its __cuda_array_interface__", e) from None


def on_cuda(obj: Any, what: str = "") -> bool:
    """Whether ``obj`` is another library's array in CUDA memory (its CUDA array interface, or DLPack's device)."""
    if cuda_interface(obj, what) is not None:
        return True
    device = getattr(obj, "__dlpack_device__", None)
    if device is None or isinstance(obj, np.ndarray):
        return False
    try:
        return int(device()[0]) in (_dlpack.CUDA, _dlpack.CUDA_MANAGED)
    except Exception:  # a broken producer (or a meta tensor): no CUDA array of ours to take
        return False


def refuse_lazy(obj: Any, what: str) -> None:
    """Refuse torch's lazily negated or conjugated tensors (``x.conj().imag``, ``x._neg_view()``): their memory
    holds the values before the operation, and DLPack does not say so."""
    for bit in ("neg", "conj"):
        test = getattr(obj, "is_" + bit, None)
        if test is None:
            continue
        try:
            pending = test() is True
        except Exception:  # not torch's method: nothing pending
            continue
        if pending:
            raise ArgumentTypeError(f"{what}: this {type(obj).__name__} is a lazy {bit} view (its memory holds "
                                    f"the values before the {bit}): call .resolve_{bit}() first")


def host_array(obj: Any, what: str) -> np.ndarray:
    """A numpy array over ``obj``'s memory, without a copy where ``obj`` is an array (a list is converted)."""
    if isinstance(obj, np.ndarray):
        if obj.__class__ is not np.ndarray and isinstance(obj, np.ma.MaskedArray):
            raise ArgumentTypeError(f"{what}: a masked array (its mask would be ignored): pass a.filled(value) "
                                    "or a.data")
        return obj
    if isinstance(obj, _SCALARS):
        raise ArgumentTypeError(f"{what}: a {type(obj).__name__} is not an array (pass np.array(value))")
    refuse_lazy(obj, what)
    if hasattr(obj, "__dlpack__") and not hasattr(obj, "__array_interface__"):
        try:
            a = np.from_dlpack(obj)  # CPU tensors of torch, JAX, CuPy's host arrays: zero-copy
            # torch exports a lazily zero tensor (torch._efficientzerotensor, its data_ptr() 0) as a temporary
            # copy: memory that is gone when the export is
            copied = a.size and type(obj).__module__.startswith("torch") and obj.data_ptr() != a.ctypes.data
        except TaichiError:
            raise
        except Exception as e:  # whatever the producer raises (torch: a tensor that requires grad, a meta tensor)
            raise producer_error(obj, what, "numpy's DLPack import", e) from None
        if copied:
            raise ArgumentTypeError(f"{what}: this {type(obj).__name__}'s export is a copy, not its memory (a lazily "
                                    "zero tensor): pass t.clone()")
        return a
    try:
        return np.asarray(obj)  # __array_interface__, the buffer protocol: a view, not a copy
    except TaichiError:
        raise
    except Exception as e:
        raise ArgumentTypeError(f"{what}: {type(obj).__name__} is not an array ({e!r})") from None


def bound_hold(value: Any) -> Any:
    """What keeps a bound argument's memory alive: the value, and a torch tensor's storage too (``t.data = u``
    gives the tensor other memory and frees its old storage, which the bound launch goes on using)."""
    storage = getattr(value, "untyped_storage", None) if type(value).__module__.startswith("torch") else None
    try:
        return value if storage is None else (value, storage())
    except Exception:  # not torch's method
        return value


def storage_guards(held: list[Any]) -> tuple[tuple[Any, int, int], ...]:
    """Where the torch storages a bound launch holds (``bound_hold``) kept their memory when bound: (storage, data
    pointer, bytes). ``t.resize_(...)`` or ``t.untyped_storage().resize_(...)`` reallocates a storage in place and
    frees the memory the launch was bound to."""
    return tuple((h[1], h[1].data_ptr(), h[1].nbytes()) for h in held if isinstance(h, tuple))


def is_jax(obj: Any) -> bool:
    """Whether ``obj`` is a JAX array (immutable, whatever its exports say)."""
    jax = sys.modules.get("jax")
    if jax is None:
        return False
    try:
        return isinstance(obj, jax.Array)
    except Exception:
        return False


class ArrayView(NamedTuple):
    """A kernel argument's array as it describes itself, read once (:func:`describe`): the caller's object
    (``owner``: what keeps the memory alive), and either ``host``, a numpy array over its memory, or, ``cuda``, its
    CUDA array interface (``iface``; None where only its DLPack export says it is CUDA memory, read as it is taken);
    ``read_only``: its owner made it immutable (a read-only numpy array or export, a JAX array)."""

    owner: Any
    host: np.ndarray | None
    cuda: bool
    iface: dict | None
    read_only: bool


def describe(value: Any, what: str, cuda_memory: bool) -> ArrayView:
    """``value`` as an :class:`ArrayView`: a CUDA array where the runtime addresses CUDA memory (``cuda_memory``)
    and ``value`` is one, else a host array (a list is converted; what is no array is an ArgumentTypeError)."""
    if cuda_memory:
        # torch builds its __cuda_array_interface__ anew on each access (a few us): read once
        iface = cuda_interface(value, what)
        if iface is not None or on_cuda(value, what):
            data = iface.get("data") if isinstance(iface, dict) else None  # checked as it is taken (from_interface)
            flagged = isinstance(data, (tuple, list)) and len(data) > 1 and bool(data[1])
            return ArrayView(value, None, True, iface, is_jax(value) or flagged)
    a = host_array(value, what)
    return ArrayView(value, a, False, None, not a.flags.writeable or is_jax(value))


def why_copy(a: np.ndarray, arch: Arch, shares: bool) -> str:
    """Why ``a`` cannot be shared with a runtime on ``arch`` whose device imports host memory where ``shares`` (its
    ``imports_host_memory``) (empty: it can)."""
    if not shares:
        return f"{arch.name} cannot address host memory (libtaichi_c_api 1.7.4 imports it on CPU backends only)"
    if not a.flags.c_contiguous:
        return "the array is not C-contiguous (a strided or reversed view)"
    if not a.dtype.isnative:
        return f"the array's byte order ({a.dtype.str}) is not this machine's"
    return ""


def overlaps_itself(a: np.ndarray) -> bool:
    """Whether two elements of ``a`` may share memory (a broadcast or stride-0 view, ``as_strided``)."""
    axes = sorted((abs(s), n) for s, n in zip(a.strides, a.shape) if n > 1)
    reach = a.itemsize
    for stride, n in axes:
        if stride < reach:
            return True
        reach = stride * n
    return False


def byte_span(a: np.ndarray) -> tuple[int, int]:
    """The first and one past the last byte ``a`` can reach."""
    start = end = a.__array_interface__["data"][0]
    for stride, n in zip(a.strides, a.shape):
        if stride < 0:
            start += stride * (n - 1)
        else:
            end += stride * (n - 1)
    return start, end + a.itemsize


def same_layout(a: np.ndarray, b: np.ndarray) -> bool:
    return (a.shape == b.shape and a.strides == b.strides and a.dtype == b.dtype
            and a.__array_interface__["data"][0] == b.__array_interface__["data"][0])


def share(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether ``a`` and ``b`` share an element (where that is too hard to tell: whether their spans meet)."""
    try:
        # numpy takes any bound on the work; its stubs name only the two special values
        return bool(np.shares_memory(a, b, max_work=10_000))  # type: ignore[arg-type]
    except Exception:  # numpy's TooHardError
        return bool(np.may_share_memory(a, b))


def _reads(*spec: str) -> tuple[tuple[str | None, str, int], ...]:
    """The reads of a print as ``Launcher.read_print`` and the C call take them: ``"a.b"`` reads the attribute ``b``
    of the attribute ``a``, ``"f()"`` calls the method ``f`` with no argument, ``"layout(_cdata)"`` reads a torch
    tensor's layout through torch's C functions (``_csrc/torch.c``) from its ``_cdata``."""
    out = []
    for read in spec:
        first, _, name = read.rpartition(".")
        kind = _LAYOUT if name.startswith("layout(") else _METHOD if name.endswith("()") else _ATTRIBUTE
        name = name[7:-1] if kind == _LAYOUT else name[:-2] if kind == _METHOD else name
        out.append((sys.intern(first) if first else None, sys.intern(name), kind))
    return tuple(out)


_ATTRIBUTE, _METHOD, _LAYOUT = 0, 1, 2  # the kinds of read (READ_* in _csrc/call.c)


#: What identifies a CUDA array of each library, read cheaply on every use, in C (torch builds its
#: ``__cuda_array_interface__`` anew on each access, a few µs): its memory, shape, strides and dtype, what else
#: its exports depend on (torch's requires_grad and negative bit), or, for JAX's immutable arrays, whether it was
#: deleted. Torch's is_contiguous() and CuPy's _c_contiguous (a bool it keeps with its strides) stand for the
#: strides: an array found again was contiguous, and of one shape the row-major strides are one (both ignore those
#: of size-1 dimensions, which address nothing else). CuPy's strides getter builds a tuple on each read. A plain
#: torch tensor is read through torch's C functions instead where they agree with these getters (``_TORCH_LAYOUT``
#: below).
_PRINTS = {"torch": _reads("data_ptr()", "shape", "is_contiguous()", "dtype", "requires_grad", "is_neg()"),
           "cupy": _reads("data.ptr", "shape", "_c_contiguous", "dtype"),
           "jaxlib": _reads("is_deleted()"), "jax": _reads("is_deleted()")}
# The C call's type (_csrc/call.c: the base of launch.py's Kernel, ComputeGraph and BoundLaunch), made by the init
# of its own extension, which is handed the cffi module's table of what it uses once, here; its static read_print
# makes the prints below.
_bind(int(ffi.cast("uintptr_t", lib.taichi_aot_call_table())))

read_print = Launcher.read_print  # (value, reads): the print of a CUDA array, made in C


#: (hit, value, sig, writes): whether ``value`` is the CUDA array its PrintHit ``hit`` remembers, passed where a
#: kernel of signature ``sig`` takes it (writing it where ``writes``): the rule the C call keeps too (_csrc/reads.c)
print_hit_accepts = Launcher.print_hit_accepts

#: The reads of each array class seen (None: none known; such arrays take the slow path every time).
_PRINT_OF: dict[type, Any] = {}


def forget_print(cls: type) -> None:
    """Recognise arrays of ``cls`` no more (its arrays lack what the print reads)."""
    _PRINT_OF[cls] = None


def print_of(cls: type) -> Any:
    """The reads that identify arrays of class ``cls`` (a torch, CuPy or JAX array; ``read_print`` makes its print),
    or None."""
    found = _PRINT_OF.get(cls, _MISSING)
    if found is _MISSING:
        found = _PRINTS.get(cls.__module__.partition(".")[0])
        agrees = _torch_layout_agrees(cls) if found is _PRINTS["torch"] else False
        if agrees:
            found = _TORCH_LAYOUT
        if agrees is not None:  # None: not known yet (asked again next time)
            _PRINT_OF[cls] = found
    return found


#: A plain torch tensor's print where torch's C functions can read it (``_torch_layout_agrees``): requires_grad
#: and is_neg() (a negated view of the same memory and layout given in place: ``t.data = z.conj().imag``), then
#: its layout (memory, storage size, dtype, device, sizes, strides) in one read, with no getter run
#: (``_csrc/reads.c``, ``_csrc/torch.c``): after the read that may run Python code (a getter a
#: TorchFunctionMode answers), as the C call makes every slot's layout read after all other reads.
_TORCH_LAYOUT = _reads("requires_grad", "is_neg()", "layout(_cdata)")


def _torch_version(torch: Any) -> tuple[int, ...]:
    """torch's (major, minor); () where its version is of another form."""
    try:
        return tuple(int(part) for part in str(torch.__version__).split("+")[0].split(".")[:2])
    except ValueError:
        return ()


def _torch_unusable(torch: Any) -> str:
    """Why torch's C functions cannot read tensors' layouts at all (torch not imported, before 2.10, the functions
    missing); empty where they may (the probes decide)."""
    if torch is None:
        return "torch is not imported"
    version = ".".join(map(str, _torch_version(torch))) or str(torch.__version__)
    if _torch_version(torch) < (2, 10):
        return f"torch {version}: before 2.10 a tensor's object holds its at::Tensor otherwise"
    if not lib.taichi_aot_torch_bind(b"libtorch_cpu.so"):
        return f"torch {version}: its C functions (aoti_torch_get_*) are not in the libtorch_cpu it loaded"
    return ""


def torch_layout_status() -> tuple[bool, str]:
    """Whether plain torch tensors are read by torch's C functions (``_torch_layout_agrees``, asked as a call asks
    it), and why, or why not: for ``show_config``. Without them a tensor passed again is still found again in C,
    by its getters; a new one each call goes through Python."""
    torch: Any = sys.modules.get("torch")
    why_not = _torch_unusable(torch)
    if why_not:
        return False, why_not
    version = ".".join(map(str, _torch_version(torch))) or str(torch.__version__)
    if print_of(torch.Tensor) is not _TORCH_LAYOUT:
        return False, (f"torch {version}: its C functions read probe tensors otherwise than its getters (or a "
                       "torch mode made the probes: asked again at the next call)")
    return True, f"torch {version}: plain tensors' layouts read by aoti_torch_get_*, as its getters read them"


def _torch_layout_agrees(cls: type) -> bool | None:
    """Whether torch's C functions can read the layouts of tensors of class ``cls`` as torch's getters do: only
    plain tensors (a subclass may answer its own way) of torch 2.10 on, whose Python object holds its at::Tensor
    right after the object's header (before, a MaybeOwned of one, borrowed or owned), with the functions found in
    the libtorch_cpu that torch loaded. Checked on probe tensors: the word there is the tensor's ``_cdata``, and
    the layout read agrees with the getters (two dtypes, a transposed view, an offset slice, a 0-d tensor). Else
    the getters' reads serve. None where a mode of torch's made the probes of another class (FakeTensorMode):
    not known yet."""
    torch = sys.modules.get("torch")
    if torch is None or cls is not getattr(torch, "Tensor", None) or _torch_unusable(torch):
        return False
    offset = object.__basicsize__  # the object's header
    try:
        with torch._C.DisableTorchFunction():  # no mode or default device answers for torch here
            base = torch.zeros((3, 4), dtype=torch.float32, device="cpu")
            probes = (base, base.t(), base[1:, 2:], torch.zeros(5, dtype=torch.int32, device="cpu"),
                      torch.zeros((), dtype=torch.int64, device="cpu"))
            if any(type(t) is not cls for t in probes):  # a dispatch mode's tensors: ask again outside it
                return None
            if any(ffi.cast("uintptr_t *", id(t) + offset)[0] != t._cdata for t in probes):
                return False
            if not Launcher._trust_layout(cls, offset):
                return False
            dtypes = set()
            for t in probes:
                got = read_print(t, _TORCH_LAYOUT)[-1]
                data, storage, dtype, kind, index, _, dim, *rest = struct.unpack("@Pqiiiiq16q16q", got)
                sizes, strides = tuple(rest[:dim]), tuple(rest[16:16 + dim])
                if (data, storage, kind, index, dim, sizes, strides) != (
                        t.data_ptr(), t.untyped_storage().nbytes(), 0, t.get_device(), t.dim(), tuple(t.shape),
                        t.stride()) or any(rest[dim:16]) or any(rest[16 + dim:]):
                    return False
                dtypes.add((dtype, t.dtype))
        return len(dtypes) == len({d for d, _ in dtypes}) == 3  # one code a dtype, each its own
    except Exception:  # no such function, or a layout of another form: the getters serve
        return False


class CudaArray:
    """What another library's CUDA array says of itself (its ``__cuda_array_interface__`` or DLPack export)."""

    __slots__ = ("contiguous", "device", "dtype", "owner", "ptr", "read_only", "shape")

    def __init__(self, shape: tuple[int, ...], dtype: np.dtype, ptr: int, contiguous: bool, device: int,
                 read_only: bool, owner: Any):
        self.shape, self.dtype, self.ptr, self.contiguous = shape, dtype, ptr, contiguous
        self.device, self.read_only, self.owner = device, read_only, owner

    @classmethod
    def from_interface(cls, obj: Any, iface: dict, what: str, weak: bool, consumer: int | None) -> CudaArray:
        """From ``iface``; the stream its producer names is ordered before ``consumer`` (the stream the kernels
        that read it run on: None, the legacy default stream) with an event, as the interface asks. ``weak``: hold
        nothing of ``obj`` (the caller keeps it alive)."""
        try:
            shape, dtype = tuple(iface["shape"]), np.dtype(iface["typestr"])
            strides = iface.get("strides")
            ptr, read_only = int(iface["data"][0]), bool(iface["data"][1])
        except Exception as e:
            raise producer_error(obj, what, "a readable __cuda_array_interface__", e) from None
        row_major = tuple(s * dtype.itemsize for s in _dlpack.row_major(shape))
        device = _cuda.device_of(ptr) if ptr else _cuda.RUNTIME_DEVICE
        stream = iface.get("stream")
        if stream is not None:  # the producer's work must be done before kernels read it
            _cuda.order_after(int(stream), consumer, device)
        return cls(shape, dtype, ptr, strides is None or tuple(strides) == row_major, device,
                   read_only or is_jax(obj), None if weak else obj)

    @classmethod
    def from_dlpack(cls, obj: Any, what: str, stream: int | None) -> CudaArray:
        """From ``obj.__dlpack__``, consumed on ``stream`` (None: the legacy default stream); the consumed tensor
        (which holds the memory) is the owner."""
        try:
            owner = _dlpack.consume(obj, stream=stream or 1)
        except TaichiError:
            raise
        except Exception as e:
            raise producer_error(obj, what, "its DLPack export", e) from None
        if owner.device[0] not in (_dlpack.CUDA, _dlpack.CUDA_MANAGED):
            raise ArgumentTypeError(f"{what}: a {type(obj).__name__} on DLPack device {owner.device}, not CUDA")
        if owner.dtype is None:
            raise ArgumentTypeError(f"{what}: {type(obj).__name__} of a dtype Taichi cannot store")
        return cls(owner.shape, owner.dtype, owner.data, owner.compact(), owner.device[1],
                   owner.read_only or is_jax(obj), owner)

    def check(self, elem_ndim: int, what: str, device: int) -> None:
        """Raise unless an ndarray of ``elem_ndim`` element dims can be made over it on a runtime of CUDA ``device``."""
        shape = self.shape
        if self.dtype not in DATA_TYPES:
            raise ArgumentTypeError(f"{what}: {self.dtype} has no Taichi data type")
        if 0 in shape:  # () is a 0-D array: one element
            raise InvalidArgumentError(f"{what}: the array is empty (shape {shape}); a kernel takes at least one "
                                       "element")
        if not 0 <= elem_ndim <= len(shape):
            raise InvalidArgumentError(f"{what}: a CUDA array of shape {shape} with elem_ndim {elem_ndim}")
        if self.device != device:
            raise ArgumentTypeError(f"{what}: the array is on CUDA device {self.device}; this runtime drives "
                                    f"device {device} (a runtime on the array's device takes it: "
                                    f"Runtime('cuda', device_index={self.device}))")
        if not self.contiguous:
            raise InvalidArgumentError(f"{what}: a strided CUDA array: make it contiguous with its own library")
