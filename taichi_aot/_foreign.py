"""Other libraries' arrays (numpy, torch, CuPy, JAX) on their way into kernels: read without a copy, the
reasons one must be copied, and the cache of the ndarrays made for kernel arguments.

The cache holds arrays weakly. An entry is dropped in the array's weak-reference callback, which runs
before the array's memory goes back, so an id found in the cache is that array's and its memory is still
there; a temporary passed to a kernel is not kept alive by the cache. CUDA kernels run after the launch
returns, so on CUDA an entry also holds its array until the runtime is waited for (:meth:`ForeignCache.
release`): the memory a kernel reads stays its array's until then.
"""

from __future__ import annotations

import collections
import functools
import weakref
from typing import TYPE_CHECKING, Any

import numpy as np

from . import _dlpack
from .enums import CPU_ARCHS, Arch
from .errors import ArgumentTypeError, InvalidArgumentError, TaichiError
from .ndarray import NdArray

if TYPE_CHECKING:  # pragma: no cover
    from collections.abc import Sequence

__all__ = ["CACHE_SIZE", "ForeignCache", "byte_span", "check_others", "check_staged", "host_array", "on_cuda",
           "overlaps_itself", "refuse_lazy", "same_layout", "why_copy"]

#: How many ndarrays made for foreign kernel arguments a runtime keeps.
CACHE_SIZE = 16

_SCALARS = (bool, int, float, complex, str, bytes, np.generic, type(None))


def on_cuda(obj: Any) -> bool:
    """Whether ``obj`` is another library's array in CUDA memory (its CUDA array interface, or DLPack's device)."""
    if hasattr(obj, "__cuda_array_interface__"):
        return True
    device = getattr(obj, "__dlpack_device__", None)
    if device is None or isinstance(obj, np.ndarray):
        return False
    try:
        return int(device()[0]) in (_dlpack.CUDA, _dlpack.CUDA_MANAGED)
    except Exception:  # a broken producer: it is then no CUDA array of ours to take
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
            return np.from_dlpack(obj)  # CPU tensors of torch, JAX, CuPy's host arrays: zero-copy
        except TaichiError:
            raise
        except Exception as e:  # whatever the producer raises
            name = type(obj).__name__
            raise ArgumentTypeError(f"{what}: numpy cannot take this {name} through DLPack ({e!r})") from None
    try:
        return np.asarray(obj)  # __array_interface__, the buffer protocol: a view, not a copy
    except TaichiError:
        raise
    except Exception as e:
        raise ArgumentTypeError(f"{what}: {type(obj).__name__} is not an array ({e!r})") from None


def why_copy(a: np.ndarray, arch: Arch) -> str:
    """Why ``a`` cannot be shared with a runtime on ``arch`` (empty: it can)."""
    if arch not in CPU_ARCHS:
        return f"{arch.name} cannot address host memory (libtaichi_c_api 1.7.4 imports it on CPU backends only)"
    if not a.flags.c_contiguous:
        return "the array is not C-contiguous (a strided or reversed view)"
    if not a.dtype.isnative:
        return f"the array's byte order ({a.dtype.str}) is not this machine's"
    if not a.flags.writeable:
        return "the array is read-only, and kernels may write their arguments"
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
    return (a.__array_interface__["data"][0] == b.__array_interface__["data"][0] and a.shape == b.shape
            and a.strides == b.strides and a.dtype == b.dtype)


def _forget(entries: dict[Any, list[Any]], numpy_args: dict[int, tuple[Any, ...]], key: Any,
            ref: weakref.ref[Any]) -> None:
    """The weak-reference callback of a cached array: it is being collected, its memory not yet freed."""
    entry = entries.get(key)
    if entry is not None and entry[1] is ref:
        entries.pop(key, None)
    hit = numpy_args.get(key[0])
    if hit is not None and hit[0] is ref:
        numpy_args.pop(key[0], None)


class ForeignCache:
    """The ndarrays made for a runtime's foreign kernel arguments, most recent last.

    ``entries``: key (the array's id first) -> [ndarray, weak reference, or None and the array itself where
    it cannot be referenced weakly (held so its id is not reused while cached)].
    ``numpy_args``: id -> (weak reference, shape, strides, dtype, element dims, ndarray, address) of numpy
    arrays passed zero-copy, found by one lookup; shape, strides and dtype can be reassigned in place and
    ``__setstate__`` replaces the memory, so they are compared.
    ``held``: id -> array, the CUDA arrays passed since the runtime was last waited for (see the module).
    The weak-reference callbacks may run in any thread: the cache's own changes tolerate theirs.
    """

    __slots__ = ("entries", "held", "numpy_args")

    def __init__(self) -> None:
        self.entries: collections.OrderedDict[Any, list[Any]] = collections.OrderedDict()
        self.numpy_args: dict[int, tuple[Any, ...]] = {}
        self.held: dict[int, Any] = {}

    def get(self, key: Any) -> NdArray | None:
        """The ndarray made for the array under ``key``."""
        entry = self.entries.get(key)
        if entry is None or entry[0].closed:
            return None
        try:
            self.entries.move_to_end(key)
        except KeyError:  # its array was collected meanwhile (another thread)
            pass
        nd: NdArray = entry[0]
        return nd

    def put(self, key: Any, value: Any, nd: NdArray) -> weakref.ref[Any] | None:
        """Keep ``nd``, made for ``value``; the weak reference to ``value`` (None: it is held strongly)."""
        try:
            ref: weakref.ref[Any] | None = weakref.ref(
                value, functools.partial(_forget, self.entries, self.numpy_args, key))
        except TypeError:  # no weak references to it: held, so its id is not reused while cached
            ref = None
        self.entries[key] = [nd, ref] if ref is not None else [nd, None, value]
        while len(self.entries) > CACHE_SIZE:
            try:
                self.entries.popitem(last=False)
            except KeyError:
                break
        return ref

    def put_numpy(self, value: np.ndarray, ref: weakref.ref[Any], elem_ndim: int, nd: NdArray, address: Any) -> None:
        self.numpy_args[id(value)] = (ref, value.shape, value.strides, value.dtype, elem_ndim, nd, address)
        while len(self.numpy_args) > CACHE_SIZE:
            try:
                self.numpy_args.pop(next(iter(self.numpy_args)), None)
            except (RuntimeError, StopIteration):  # a callback changed it meanwhile: look again
                continue

    def release(self, keep: int = 0) -> None:
        """The runtime's work is done: let go of the CUDA arrays held for it (but the ``keep`` newest)."""
        kept = list(self.held.items())[-keep:] if keep else []
        self.held.clear()  # an array collected now leaves ``entries`` in its callback
        self.held.update(kept)


def check_staged(a: np.ndarray, elem_ndim: int, what: str,
                 staged: list[tuple[NdArray, np.ndarray, str]]) -> NdArray | None:
    """Before ``a`` (writable, of argument ``what``, ``elem_ndim`` element dims) is staged: the staged copy of
    the same array made for another argument of this launch, if any; raises where the copies' write-backs
    would clash."""
    if overlaps_itself(a):
        raise InvalidArgumentError(
            f"{what}: elements of this array share memory (a broadcast or stride-0 view), so what a kernel "
            "writes to it cannot be copied back: pass a contiguous copy, or a read-only view of an input"
        )
    for nd, b, other in staged:
        if same_layout(a, b) and len(nd.elem_shape) == elem_ndim:
            return nd
        if _share(a, b):
            raise InvalidArgumentError(_clash(what, other))
    return None


def _share(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether ``a`` and ``b`` share an element (where that is too hard to tell: whether their spans meet)."""
    try:
        # numpy takes any bound on the work; its stubs name only the two special values
        return bool(np.shares_memory(a, b, max_work=10_000))  # type: ignore[arg-type]
    except Exception:  # numpy's TooHardError
        return bool(np.may_share_memory(a, b))


def _clash(what: str, other: str) -> str:
    return (f"{what} shares memory with {other}; the backend takes each as its own copy, and copying them "
            "back would undo one's writes: pass one array, or NdArrays")


def check_others(values: Sequence[Any], staged: list[tuple[NdArray, np.ndarray, str]], span_of: Any) -> None:
    """After packing a launch with staged copies: raise if another argument's memory (an array shared without
    a copy, an ndarray's host memory) overlaps a staged array, whose write-back would undo the kernel's writes
    there. ``span_of(value)``: a numpy array over the memory the value lends the kernel, its (start, end), or
    None (nothing of the host's, or a copy)."""
    spans = [(byte_span(b), b, what) for _, b, what in staged]
    for value in values:
        span = span_of(value)
        if span is None:
            continue
        shared = span if isinstance(span, np.ndarray) else None
        start, end = byte_span(shared) if shared is not None else span
        for (first, last), b, what in spans:
            if start < last and first < end and (shared is None or _share(shared, b)):
                raise InvalidArgumentError(_clash(what, "another argument of this launch"))
