"""The flat API's arguments and memory as the flat API's tests write them: ndarray arguments as dicts, mapped
memory read and written through numpy."""

from __future__ import annotations

import numpy as np

from taichi_aot import ArgumentType, DataType, capi
from taichi_aot._native import ffi

F32 = DataType.F32


def nd(memory, shape, dtype=F32, elem_shape=()):
    """A TiArgument dict for an ndarray."""
    return {
        "type": ArgumentType.NDARRAY,
        "value": {
            "ndarray": {
                "memory": memory,
                "shape": {"dim_count": len(shape), "dims": list(shape)},
                "elem_shape": {"dim_count": len(elem_shape), "dims": list(elem_shape)},
                "elem_type": dtype,
            }
        },
    }


def write(rt, mem, array):
    ptr = ffi.cast("char *", capi.map_memory(rt, mem))
    try:
        np.frombuffer(ffi.buffer(ptr, array.nbytes), array.dtype)[:] = array.ravel()
    finally:
        capi.unmap_memory(rt, mem)


def read(rt, mem, dtype, count):
    ptr = ffi.cast("char *", capi.map_memory(rt, mem))
    try:
        return np.frombuffer(ffi.buffer(ptr, np.dtype(dtype).itemsize * count), dtype).copy()
    finally:
        capi.unmap_memory(rt, mem)


def host_memory(rt, nbytes):
    return capi.allocate_memory(rt, size=nbytes, host_read=True, host_write=True, usage=1)
