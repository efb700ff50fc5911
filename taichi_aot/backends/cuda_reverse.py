"""Reverse-mode (autodiff) kernels on taichi_aot's own CUDA launcher: a module's ``<kernel>_grad`` takes its
arguments, then the gradient of each that has one (:func:`gradient_signature`), and runs as its primal's
``Kernel.grad`` (:class:`GradCall`), on the runtime's thread as any kernel, or from torch's autograd thread with
CUDA arrays (libtaichi is not called there). The x64 counterpart is :mod:`.cpu`.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Callable, cast

from .._arguments import ARG_SIZE, Packing, gradient_map, pack_one
from .._arrays import CudaArray, cuda_interface, refuse_lazy
from .._dtypes import ndarray_argument
from .._native import ffi, lib
from ..enums import NUMPY_DTYPES, DataType
from ..errors import ArgumentTypeError, ClosedError, InvalidArgumentError

if TYPE_CHECKING:  # pragma: no cover
    from .._lifetime import Parent
    from ..metadata import ArgInfo


def gradient_signature(args: list[ArgInfo]) -> list[ArgInfo]:
    """A reverse-mode kernel's signature on taichi_aot's CUDA launcher: its arguments, then the gradient of each
    ndarray that needs one (same dtype and shape, named ``<name>_grad`` where that name is free)."""
    names = {a.name for a in args}
    grads = [a for a in args if a.kind == "ndarray" and a.needs_grad]
    return [*args, *(replace(a, index=len(args) + k, access=None, needs_grad=False,
                             name=f"{a.name}_grad" if a.name and f"{a.name}_grad" not in names else None)
                     for k, a in enumerate(grads))]


class GradCall:
    """A reverse-mode kernel on taichi_aot's CUDA launcher, run as its primal's ``grad``: the primal's arguments,
    then the gradient arrays of ``needing`` (argument positions), each of its array's shape. ``launch``: the
    reverse kernel's own call (on the runtime's thread), ``packing`` its arguments' record, ``runtime`` and
    ``closed`` its module's; ``elsewhere(args, count, stream)``: its launch from another thread than the runtime's
    (``cuda.Kernels.launch_elsewhere``)."""

    def __init__(self, launch: Callable[..., Any], packing: Packing, runtime: Parent, closed: Callable[[], bool],
                 needing: list[int], elsewhere: Callable[[Any, int, int | None], None]):
        self.launch, self.packing, self.runtime, self.closed = launch, packing, runtime, closed
        self.needing, self.elsewhere = needing, elsewhere

    def call(self, values: list[Any], grads: Any, names: list[str | None], what: list[str], kernel: str,
             before: Callable[[], object]) -> None:
        """As ``cpu.CpuKernel.call``; ``before`` is not needed: the launch is ordered on the runtime's
        stream. Where the kernel's autodiff stacks are bounded (its PTX made by this version), the launch waits for
        it, to raise OutOfMemoryError where one overflowed (``_csrc/backends/cuda.c``). From another thread than the
        runtime's (torch's autograd runs CUDA backward on a thread of its own while the runtime's waits), the arrays
        must be CUDA arrays (``__cuda_array_interface__``: torch, CuPy), launched on that thread's torch stream."""
        order = gradient_map(grads, self.needing, names, f"{kernel}: grads")
        for i in self.needing:
            shape, got = getattr(values[i], "shape", None), getattr(order[i], "shape", None)
            if shape is not None and got is not None and tuple(shape) != tuple(got):
                raise InvalidArgumentError(f"{kernel}: the gradient of {what[i]}: shape {tuple(got)}, its array's is "
                                           f"{tuple(shape)}")
        given = [*values, *(order[i] for i in self.needing)]
        rt = self.runtime
        if rt.on_its_thread():
            self.launch(*given)
        else:
            if self.closed():  # closed objects are refused on any thread
                raise ClosedError(f"{kernel}: its module or runtime is closed")
            stream = _current_torch_stream(rt.device_index)
            self.elsewhere(self._pack(given, kernel, stream), len(given), stream)

    def _pack(self, given: list[Any], kernel: str, stream: int | None) -> Any:
        """The TiArguments of a launch from another thread on ``stream``: each array a CUDA array's device pointer
        (checked: dtype, dimensions, element shape, device, C-contiguous), each scalar packed by its packer."""
        p = self.packing
        args = ffi.new("TiArgument[]", max(len(given), 1))
        for i, (spec, value) in enumerate(zip(p.signature, given)):
            if spec.kind == "ndarray":
                pointer, shape = _cuda_array(value, spec, f"{kernel}: {p.what[i]}", stream, self.runtime.device_index)
                arg = bytes(ffi.buffer(ndarray_argument(
                    ffi.cast("TiMemory", pointer | lib.TAICHI_AOT_POINTER_TAG), shape[:spec.ndim],
                    tuple(spec.elem_shape), cast(DataType, spec.dtype))))
            else:
                arg = pack_one(p.packers[i], spec, value, self.runtime)
            ffi.memmove(ffi.addressof(args, i), arg, ARG_SIZE)
        return args


def _current_torch_stream(device: int) -> int | None:
    """torch's current CUDA stream of GPU ``device`` on this thread (autograd sets the forward's), or None: the
    legacy default. The device is the runtime's, not the thread's current one (autograd's thread of another GPU)."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_available():
        return None
    return int(torch.cuda.current_stream(device).cuda_stream) or None


def _cuda_array(value: Any, spec: ArgInfo, what: str, stream: int | None, device: int) -> tuple[int, tuple[int, ...]]:
    """A CUDA array's device pointer and shape (``_arrays.CudaArray``: its producer's stream ordered before
    ``stream``), checked against an ndarray argument: its dtype, dimensions and element shape, on the runtime's
    ``device``, contiguous."""
    face = cuda_interface(value, what)
    if face is None:
        raise ArgumentTypeError(f"{what}: from another thread than the runtime's, a CUDA array (torch, CuPy) is "
                                f"needed, got {type(value).__name__}")
    refuse_lazy(value, what)
    array = CudaArray.from_interface(value, face, what, weak=True, consumer=stream)
    array.check(len(spec.elem_shape), what, device)
    shape = array.shape
    if array.dtype != NUMPY_DTYPES[cast(DataType, spec.dtype)] or len(shape) != spec.ndim + len(spec.elem_shape) \
            or shape[spec.ndim:] != tuple(spec.elem_shape):
        raise ArgumentTypeError(f"{what}: expected {spec.describe()}, got {array.dtype} of shape {shape}")
    return array.ptr, shape
