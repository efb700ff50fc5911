"""CUDA driver calls for what the C-API of Taichi 1.7.4 lacks on CUDA memory.

Its ``ti_copy_memory_device_to_device`` reports NOT_SUPPORTED on LLVM backends (CUDA included),
so device memory could neither be filled nor read back. The object layer copies with the driver
instead: ``ti_export_cuda_memory`` gives the device pointer, and each call runs in the context
that owns the pointer (pushed, then popped) or, for pointers that name none, in the runtime's
context, current on the runtime's thread.
"""

from __future__ import annotations

import ctypes
import threading

from .errors import InvalidStateError

_lock = threading.Lock()
_driver = None
_POINTER_ATTRIBUTE_CONTEXT = 1


def _cuda() -> ctypes.CDLL:
    global _driver
    with _lock:
        if _driver is None:
            lib = ctypes.CDLL("libcuda.so.1")
            ptr, size, vp = ctypes.c_uint64, ctypes.c_size_t, ctypes.c_void_p
            for name, args in (("cuMemcpyHtoD_v2", (ptr, vp, size)), ("cuMemcpyDtoH_v2", (vp, ptr, size)),
                               ("cuMemcpyDtoD_v2", (ptr, ptr, size)), ("cuMemsetD8_v2", (ptr, ctypes.c_ubyte, size)),
                               ("cuPointerGetAttribute", (ctypes.POINTER(ctypes.c_uint64), ctypes.c_int, ptr)),
                               ("cuCtxPushCurrent_v2", (vp,)), ("cuCtxPopCurrent_v2", (ctypes.POINTER(vp),))):
                fn = getattr(lib, name)
                fn.argtypes = args
                fn.restype = ctypes.c_int
            _driver = lib
        return _driver


def _ok(code: int, what: str) -> None:
    if code != 0:
        raise InvalidStateError(f"{what}: the CUDA driver returned error {code}")


def _in_context(device_ptr: int, what: str, call) -> None:
    cu = _cuda()
    ctx = ctypes.c_uint64(0)  # a CUcontext, read as a pointer-sized integer
    _ok(cu.cuPointerGetAttribute(ctypes.byref(ctx), _POINTER_ATTRIBUTE_CONTEXT, device_ptr), what)
    if not ctx.value:
        # Taichi maps its memory with the virtual memory API: such pointers name no context, and
        # the runtime's own context is current on its thread (the only thread that may use it)
        _ok(call(cu), what)
        return
    _ok(cu.cuCtxPushCurrent_v2(ctypes.c_void_p(ctx.value)), what)
    try:
        _ok(call(cu), what)
    finally:
        cu.cuCtxPopCurrent_v2(ctypes.byref(ctypes.c_void_p()))


def htod(dst: int, src: int, nbytes: int) -> None:
    """Copy ``nbytes`` from host address ``src`` to device pointer ``dst``."""
    _in_context(dst, "copy to CUDA memory", lambda cu: cu.cuMemcpyHtoD_v2(dst, src, nbytes))


def dtoh(dst: int, src: int, nbytes: int) -> None:
    """Copy ``nbytes`` from device pointer ``src`` to host address ``dst``."""
    _in_context(src, "copy from CUDA memory", lambda cu: cu.cuMemcpyDtoH_v2(dst, src, nbytes))


def dtod(dst: int, src: int, nbytes: int) -> None:
    """Copy ``nbytes`` between device pointers."""
    _in_context(src, "copy within CUDA memory", lambda cu: cu.cuMemcpyDtoD_v2(dst, src, nbytes))
