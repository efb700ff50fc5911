"""CUDA's devices: libtaichi's CUDA runtime (device 0), and taichi_aot's own CUDA runtime (any GPU).

Both keep memory in the GPU's memory by default: host-visible memory is managed memory there, slow for kernels and
copies. libtaichi_c_api 1.7.4 has no host copies nor device copies for CUDA memory, so the CUDA driver copies
(``_cuda``: page-locked arrays at the bus's speed, pageable ones through its staging buffers).
"""

from __future__ import annotations

import functools
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from .. import _cuda, _cuda_host, _cudart, capi
from .._native import ffi, lib
from ..enums import Arch
from ..errors import check
from .base import Block, Device, Mover, Native, _read_direct, _write_direct, library_native

if TYPE_CHECKING:  # pragma: no cover
    from .._lifetime import Parent

__all__ = ["LibraryCudaDevice", "OwnCudaDevice"]


def _read_cuda(memory: Any, out: np.ndarray) -> None:
    _cuda_host.dtoh(out, memory.cuda_pointer(), memory.cuda_context())


def _write_cuda(memory: Any, data: np.ndarray) -> None:  # contiguous: the ndarray's checked input, or a fill's
    memory.refuse_mapped_copy()
    _cuda_host.htod(memory.cuda_pointer(), data, memory.cuda_context())


def _fill_cuda(memory: Any, pointer: int, context: int, wait: Callable[[], None], array: np.ndarray) -> None:
    """A small fill (``Device.fill_writer``): refused while a view that is a copy lives (it would undo the fill when
    it ends), then one call into the extension after ``wait``."""
    memory.refuse_mapped_copy()
    _cuda_host.htod_small(pointer, context, wait, array)


class LibraryCudaDevice(Device):
    """libtaichi's CUDA memory, copied by the driver."""

    policy = "cuda"
    # waits not counted: the driver's copies (cuMemcpyDtoD) are no libtaichi work; no staging: the driver copies
    traits = Device.traits._replace(kernel_copies_on_device=True, dlpack_type=2, addresses_cuda_arrays=True,
                                    waits_counted=False, stages=False, mapping_is_copy=True, cuda_streams=True)
    library_calls: Callable[[], AbstractContextManager[None]] | None = staticmethod(_cudart.library_context)
    _name: str | None = None  # the GPU's name, once asked

    def default_access(self) -> tuple[bool, bool]:
        return False, False

    def libtaichi_context(self) -> AbstractContextManager[None]:  # the own runtime's libtaichi runtime's too
        return _cudart.library_context()

    def why_default(self) -> str:
        return "GPU memory: host-visible memory is managed memory on CUDA, slow for kernels and copies"

    def device_name(self) -> str | None:
        """The GPU's name, asked of the driver once (None where it cannot say)."""
        if self._name is None:
            try:
                self._name = _cudart.device_name(self.device_index)
            except Exception:  # the driver refuses (a context gone bad): the repr goes on without the name
                return None
        return self._name

    def reader(self, memory: Any) -> Mover:
        return _read_direct if memory.host_read else _read_cuda

    def writer(self, memory: Any) -> Mover:
        return _write_direct if memory.host_write else _write_cuda

    def _fill(self, memory: Any) -> Callable[[np.ndarray], None] | None:
        """A small array (below ``_cuda_host.REGISTER_MIN``) copied by the driver in one call into the extension,
        after the runtime's wait, as :meth:`writer`'s copy is."""
        if memory.host_write or memory.size >= _cuda_host.REGISTER_MIN:
            return None
        pointer, context = memory.cuda_pointer(), memory.cuda_context()
        return functools.partial(_fill_cuda, memory, pointer, _cuda.context_of(pointer) if context is None else context,
                                 self._runtime.sync)

    def copy(self, dst: Any, dst_offset: int, src: Any, src_offset: int, size: int) -> None:
        # 1.7.4 reports NOT_SUPPORTED for device copies on CUDA: the driver copies
        dst.refuse_mapped_copy()  # the driver would write under a mapping (a copy) that undoes it when it ends
        self._runtime.sync()
        _cuda.dtod(dst.cuda_pointer() + dst_offset, src.cuda_pointer() + src_offset, size)

    def _host_array(self, dims: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        return _cuda_host.pinned_array(dims, dtype)

    def _import(self, handle: Any, address: int, nbytes: int) -> Any:
        """libtaichi's import of another library's CUDA memory."""
        memory = lib.ti_import_cuda_memory(handle, ffi.cast("void *", address), nbytes)
        check("import_cuda_memory")
        return memory


class OwnCudaDevice(LibraryCudaDevice):
    """The own CUDA runtime's memory (:mod:`taichi_aot._cudart`): the driver's, zero-filled; device memory, or managed
    memory where the host maps it. Its TiMemory is the tagged pointer, which the own launches take as it is."""

    # managed memory, addressed as it is (no mapping copies it); the driver's calls are any thread's (libtaichi's
    # launches beside it are not)
    traits = LibraryCudaDevice.traits._replace(
        zeroed=True, pointer_handles=True, mapping_is_copy=False, any_thread=True, own_runtime=True,
        library_native=False, no_images="CUDA has no images (Vulkan, OpenGL and Metal have)",
        runtime_words=" (taichi_aot's own)")
    library_calls = None  # its memory is the driver's: libtaichi neither maps, copies nor frees it

    def __init__(self, runtime: Parent, cuda: _cudart.CudaDevice, library: list[Any]):
        super().__init__(runtime)
        #: the GPU the runtime runs on, through the driver (``_cudart.CudaDevice``)
        self.cuda = cuda
        self._library = library  # libtaichi's runtime beside it, once a module needs one (released by the native's)

    def synchronize(self) -> None:
        self.cuda.synchronize()

    def pooled(self, address: int, nbytes: int) -> Any:
        """The pointer itself, tagged: the own launches take it as it is, and nothing is imported."""
        entry = self.imports.get(address)
        if entry is not None and entry[0] >= nbytes:  # the C call's
            return ffi.cast("TiMemory", entry[1])
        return _cudart.tagged(address)

    def library_beside(self) -> bool:
        return self.device_index == 0  # libtaichi_c_api 1.7.4 makes its CUDA runtime on device 0 only

    def library_why_not(self) -> str | None:
        return None if self.library_beside() else _cudart.library_absent(self.device_index)

    def library_runtime(self, handle: Any, on_its_thread: bool, thread: int) -> Any:
        if not self.library_beside() or not on_its_thread:
            raise _cudart.no_library(self.device_index, thread)
        if not self._library:
            with _cudart.library_context():  # device 0's context, whatever another library left current
                self._library.append(capi.create_runtime(Arch.CUDA, 0).cdata)
            if self.stream:  # libtaichi's launches on the stream set
                capi.set_cuda_stream(self.stream)
        return self._library[0]

    def allocate(self, size: int, flags: tuple[bool, bool, bool, int]) -> Block:
        device = self.cuda
        pointer = device.alloc(size, managed=flags[0] or flags[1])
        try:
            device.memset(pointer, size)
        except BaseException:
            device.free(pointer)
            raise
        return Block(_cudart.tagged(pointer), functools.partial(device.free, pointer), None, pointer, device.context)


def open_native(arch: Arch, device_index: int | None, cpu_threads: int | None, cuda_runtime: str | None) -> Native:
    """A CUDA runtime (this room's registration): taichi_aot's own (``cuda_runtime`` "own", on any GPU:
    :mod:`taichi_aot._cudart`), or libtaichi's, in device 0's primary context whatever another library left
    current."""
    index = 0 if device_index is None else device_index
    if _cudart.chosen(cuda_runtime, index) == _cudart.OWN:
        cuda, library = _cudart.CudaDevice(index), []  # type: ignore[var-annotated]
        # its memory and modules are given back before it, then libtaichi's runtime where one was made
        release = functools.partial(_cudart.release, cuda, library)
        return Native(ffi.cast("TiRuntime", 0), ffi.new("int32_t[3]"), release, index, cuda, library)
    with _cudart.library_calls(True):
        handle = capi.create_runtime(arch, index, cpu_threads=cpu_threads).cdata
    _cuda.driver()  # its frees run in the driver's relaxed capture mode (_cuda.relaxed_capture)
    return library_native(handle, index, _cudart.destroy_library_runtime)


def device(runtime: Any, native: Native) -> Device:
    """The device of a CUDA runtime (this room's registration): the own runtime's, or libtaichi's."""
    if native.cuda is None:
        return LibraryCudaDevice(runtime)
    return OwnCudaDevice(runtime, native.cuda, native.library)
