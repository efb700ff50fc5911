"""Arrays seen before: the records by which a runtime's foreign-array policy (:mod:`taichi_aot._foreign`) and the C
call find an array shared before with one lookup instead of its library's slow export: a numpy array by the
extension's key of its object (:func:`numpy_hit`), a torch, CuPy or JAX array by its print (:func:`print_hit`), and
the cache's entries and keys, dropped in the array's weak-reference callback before its memory goes back
(:func:`forget`).
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any

import numpy as np

from ._arrays import read_print
from ._call import NumpyHit, PrintHit  # the C call's records (_csrc/records.c)
from ._native import ffi, lib

if TYPE_CHECKING:  # pragma: no cover
    from .ndarray import NdArray

__all__ = ["ARRAY_KEYS", "Entry", "forget", "layout_key", "numpy_hit", "print_hit"]


def array_keys_work() -> bool:
    """Whether the extension reads numpy's array objects right here (CPython's id() is the object's address, and
    numpy's object starts as the extension expects): checked against numpy's own attributes, once."""
    try:
        base = np.arange(24, dtype=np.float32).reshape(4, 6)
        probes = [base, base[::2, 1::3], base.T, np.zeros((), np.int64), np.ones(3, np.uint8)[::-1]]
        frozen = base.view()
        frozen.flags.writeable = False
        probes.append(frozen)
        key = ffi.new("TaichiAotArrayKey *")
        for a in probes:
            if not lib.taichi_aot_array_key(id(a), key):
                return False
            data = int(ffi.cast("uintptr_t", key.data))
            if (data != a.__array_interface__["data"][0] or key.nd != a.ndim
                    or bool(key.writable) != a.flags.writeable or tuple(key.dims[0:a.ndim]) != a.shape
                    or tuple(key.strides[0:a.ndim]) != a.strides or not lib.taichi_aot_array_same(id(a), key, 0)):
                return False
        other = probes[1]
        return not lib.taichi_aot_array_same(id(frozen), key, 1) and not lib.taichi_aot_array_same(id(other), key, 0)
    except Exception:  # pragma: no cover - an interpreter whose objects are not laid out as CPython's
        return False


#: Whether numpy arrays shared before are recognised in C (else each call takes ForeignArgs.argument).
ARRAY_KEYS = array_keys_work()


def numpy_hit(key: Any, ref: weakref.ref[Any], nd: NdArray) -> NumpyHit:
    """The record of a numpy array shared without a copy (``_call.NumpyHit``, a C type the C call reads by field), found
    again by one lookup and one C call (the argument packer's fast path, ``taichi_aot_array_pack(id(array), hit.key,
    writes, slot)``): its shape, strides and dtype can be reassigned in place, ``__setstate__`` replaces its memory
    and its writable flag can be cleared, so all are compared on every use. ``key`` gets the ndarray's argument."""
    ffi.memmove(ffi.addressof(key, "argument"), nd._arg_bytes, len(nd._arg_bytes))  # what a launch gets
    return NumpyHit(key=key, address=int(ffi.cast("uintptr_t", key)), ref=ref,
                    owned=nd.owned,  # whether the ndarray was closed
                    sig=nd._sig)  # what the packer checks: (data type, dims, element shape)


def print_hit(value: Any, ref: weakref.ref[Any], reads: tuple, nd: NdArray, read_only: bool,
              held: dict[int, Any] | None) -> PrintHit:
    """The record of a torch, CuPy or JAX array shared before (``_call.PrintHit``; on CUDA, or a host array on a CPU
    backend), found again by the argument packer with one lookup and its print (``read_print`` of its class's reads,
    ``print_of``) instead of the library's slow ``__cuda_array_interface__`` or host export: the argument of the
    ndarray it travels in, and whether the array is immutable. The packer holds the array in ``held`` (the runtime's
    arrays that queued kernels may read, until it is waited for; None for a host array, read when the launch
    returns). The C call of kernels (``_csrc/remember.c``) reads the same fields and makes the same check, its reads
    going straight to the class's C getters and methods."""
    return PrintHit(cls=value.__class__, ref=ref, reads=reads, print=read_print(value, reads),
                    nd=nd,  # kept: the hit's argument is its memory's
                    owned=nd.owned, sig=nd._sig,  # what the packer checks: (data type, dims, element shape)
                    arg_bytes=nd._arg_bytes,  # the TiArgument the packer writes
                    read_only=read_only, held=held)


class Entry:
    """A cached ndarray, and the weak reference to its array (or the array itself, where it has none)."""

    __slots__ = ("held", "nd", "ref")

    def __init__(self, nd: NdArray, ref: weakref.ref[Any] | None, held: Any):
        self.nd = nd
        self.ref = ref
        self.held = held


def layout_key(value: Any, iface: dict | None, elem_ndim: int, writes: bool) -> tuple[Any, ...]:
    """The cache key of a CUDA array: its id and everything its interface says that an ndarray over it fixes (memory,
    shape, dtype, strides; its shape can be set in place). Without an interface (DLPack only) a key never found
    again: its export is read anew each time."""
    try:
        return (id(value), int(iface["data"][0]), tuple(iface["shape"]), str(iface["typestr"]),
                tuple(iface.get("strides") or ()), elem_ndim, writes) if iface else (id(value), object())
    except Exception:  # a malformed interface: ForeignArgs._cuda says what is wrong with it
        return (id(value), object())


def forget(entries: dict[Any, Entry], hits: dict[int, Any], key: Any, ref: weakref.ref[Any]) -> None:
    """The weak-reference callback of a cached array: it is being collected, its memory not yet freed."""
    entry = entries.get(key)
    if entry is not None and entry.ref is ref:
        entries.pop(key, None)
    hit = hits.get(key[0])
    if hit is not None and hit.ref is ref:
        hits.pop(key[0], None)
