"""CUDA's devices: libtaichi's CUDA runtime (device 0), and taichi_aot's own CUDA runtime (any GPU).

Both keep memory in the GPU's memory by default: host-visible memory is managed memory there, slow for kernels and
copies. libtaichi_c_api 1.7.4 has no host copies nor device copies for CUDA memory, so the CUDA driver copies
(:mod:`taichi_aot.drivers`: page-locked arrays at the bus's speed, pageable ones through its staging buffers).
"""

from __future__ import annotations

import functools
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from .. import _cudart, capi
from .._call import came_back
from .._native import ffi, lib
from ..drivers import cuda as _cuda
from ..drivers import cuda_host as _cuda_host
from ..drivers.cudart import CudaDevice, check_stream, device_name, library_context, stream_handle, tagged
from ..enums import Arch
from ..errors import NotSupportedError, check
from .base import Block, Device, Native, library_native
from .parts import Filler, Library, Mover, Stream, Transfers, read_direct, write_direct

if TYPE_CHECKING:  # pragma: no cover
    from .._lifetime import Parent

__all__ = ["CudaLibrary", "CudaStream", "CudaTransfers", "LibraryCudaDevice", "OwnCudaDevice", "OwnCudaLibrary",
           "OwnCudaStream", "OwnCudaTransfers"]


def _read_cuda(memory: Any, out: np.ndarray) -> None:
    _cuda_host.dtoh(out, memory.cuda_pointer(), memory.cuda_context())


def _write_cuda(memory: Any, data: np.ndarray) -> None:  # contiguous: the ndarray's checked input, or a fill's
    memory.refuse_mapped_copy()
    _cuda_host.htod(memory.cuda_pointer(), data, memory.cuda_context())


def _fill_cuda(memory: Any, pointer: int, context: int, wait: Callable[[], None], array: np.ndarray) -> None:
    """A small fill (``Transfers.fill``): refused while a view that is a copy lives (it would undo the fill when it
    ends), then one call into the extension after ``wait``."""
    memory.refuse_mapped_copy()
    _cuda_host.htod_small(pointer, context, wait, array)


class CudaTransfers(Transfers):
    """CUDA memory, copied by the driver (libtaichi_c_api 1.7.4 has no host copies nor device copies for it):
    page-locked arrays at the bus's speed, pageable ones through the driver's staging buffers; no staging of ours."""

    def reader(self, memory: Any) -> Mover:
        return read_direct if memory.host_read else _read_cuda

    def writer(self, memory: Any) -> Mover:
        return write_direct if memory.host_write else _write_cuda

    def filler(self, memory: Any) -> Filler | None:
        """A small array (below ``drivers.cuda_host.REGISTER_MIN``) copied by the driver in one call into the
        extension, after the runtime's wait, as :meth:`writer`'s copy is."""
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

    def new_host_array(self, dims: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        return _cuda_host.pinned_array(dims, dtype)


class OwnCudaTransfers(CudaTransfers):
    """The own runtime's: a small read of device memory (below ``drivers.cuda_host.REGISTER_MIN``) is the runtime's
    wait and the copy in one call into the extension, with Python's lock let go (``taichi_aot_cuda_read``): a value
    waits once, as the copy itself waits, not through the driver's Python binding first."""

    def _reads_itself(self, memory: Any) -> bool:
        return not memory.host_read and memory.size < _cuda_host.REGISTER_MIN

    def reader(self, memory: Any) -> Mover:
        return self._read_own if self._reads_itself(memory) else super().reader(memory)

    def read_waits(self, memory: Any) -> bool:
        return not self._reads_itself(memory) and super().read_waits(memory)

    def _read_own(self, memory: Any, out: np.ndarray) -> None:
        """``memory``'s bytes into ``out`` after the runtime's work (the stream set, or the legacy default stream),
        which is the runtime's whole wait: what its queued kernels held is let go after it, as ``Runtime.wait`` lets
        it go. NotSupportedError while the stream set is being captured into a CUDA graph (nothing may wait on it;
        the capture is left as it was)."""
        runtime, stream = self._runtime, self._device.stream.handle
        pointer, context = memory.cuda_pointer(), memory.cuda_context()  # found once, kept by the memory
        host = ffi.from_buffer(out, require_writable=True)
        copies = runtime.foreign.copies
        flight = copies.in_flight()  # before the wait: what its work reads (no staging buffers on CUDA)
        try:
            code = lib.taichi_aot_cuda_read(_cuda.table(), context, stream or 0, runtime.gate.pending, host, pointer,
                                            out.nbytes)
        finally:
            came_back()  # Python's lock this thread's again (_csrc/launch.c: taichi_aot_coming)
        if code == lib.TAICHI_AOT_CUDA_CAPTURING:  # nothing waited for: what the work reads is still in flight
            copies.unwaited(flight)
            raise NotSupportedError("to_numpy: the runtime's CUDA stream is being captured into a CUDA graph, and a "
                                    "read waits for it, which no capture may hold; read the ndarray after the capture "
                                    "ends")
        _cuda.check(code, "copy from CUDA memory")
        runtime.foreign.release(flight)


class CudaLibrary(Library):
    """libtaichi's CUDA runtime: its calls in device 0's primary context, whatever another library left current."""

    calls: Callable[[], AbstractContextManager[None]] | None = staticmethod(library_context)

    def context(self) -> AbstractContextManager[None]:  # the own runtime's libtaichi runtime's too
        return library_context()


class CudaStream(Stream):
    """The caller's CUDA stream (``Runtime.set_cuda_stream``): the runtime's kernels, libtaichi's launches too where
    it has a runtime, run on it."""

    def select(self, stream: Any) -> None:
        """``Runtime.set_cuda_stream``'s work: ``stream`` checked (a handle, or a torch or CuPy stream object, of the
        runtime's GPU), the runtime's work waited for first (not while either stream captures: nothing may wait
        then), the launch backends' stand-in made for it, libtaichi's launches moved to it where the runtime has
        libtaichi's, and libtaichi's launches refused while it is a non-blocking one."""
        runtime = self._runtime
        given, handle = stream, stream_handle(stream)
        check_stream(given, handle, runtime.device_index)
        capturing = _cuda.capturing(handle)  # nothing else is asked of a stream while it captures
        blocking = not handle or (not capturing and _cuda.stream_is_blocking(handle))
        if not (capturing or self.capturing()):
            runtime.wait()  # while a stream is captured into a CUDA graph nothing may wait (torch ordered the streams)
        runtime.backends.select_stream(handle or None)  # its stand-in made first: it may fail (out of memory)
        self._move(handle or None)
        runtime.gate.pending[1] = 0 if blocking else 1  # libtaichi's launches refused on a non-blocking stream

    def _move(self, handle: int | None) -> None:
        """Kernels run on ``handle`` from now on; libtaichi's launches too, where it has a runtime (NULL where none
        was made: its setting is the process's, not the runtime's)."""
        if self._runtime.handle:
            capi.set_cuda_stream(handle)
        self.handle = handle

    def synchronize(self) -> None:
        if self.handle:
            _cuda.stream_synchronize(self.handle)

    def capturing(self) -> bool:
        return _cuda.capturing(self.handle)

    def close(self) -> None:
        if self.handle:
            self._move(None)


class LibraryCudaDevice(Device):
    """libtaichi's CUDA memory, copied by the driver."""

    policy = "cuda"
    # waits not counted: the driver's copies (cuMemcpyDtoD) are no libtaichi work; no staging: the driver copies
    traits = Device.traits._replace(kernel_copies_on_device=True, dlpack_type=2, addresses_cuda_arrays=True,
                                    waits_counted=False, stages=False, mapping_is_copy=True, cuda_streams=True)
    transfers_type = CudaTransfers
    library_type: type[Library] = CudaLibrary
    stream_type: type[Stream] = CudaStream
    _name: str | None = None  # the GPU's name, once asked

    def default_access(self) -> tuple[bool, bool]:
        return False, False

    def why_default(self) -> str:
        return "GPU memory: host-visible memory is managed memory on CUDA, slow for kernels and copies"

    def device_name(self) -> str | None:
        """The GPU's name, asked of the driver once (None where it cannot say)."""
        if self._name is None:
            try:
                self._name = device_name(self.device_index)
            except Exception:  # the driver refuses (a context gone bad): the repr goes on without the name
                return None
        return self._name

    def _import(self, handle: Any, address: int, nbytes: int) -> Any:
        """libtaichi's import of another library's CUDA memory."""
        memory = lib.ti_import_cuda_memory(handle, ffi.cast("void *", address), nbytes)
        check("import_cuda_memory")
        return memory


class OwnCudaLibrary(CudaLibrary):
    """The own CUDA runtime's: its memory is the driver's (libtaichi neither maps, copies nor frees it); libtaichi's
    runtime is made beside it on device 0 for a module whose kernels need it, on the thread that made the own one."""

    calls = None
    _device: OwnCudaDevice

    def __init__(self, device: Device, runtime: Parent):
        super().__init__(device, runtime)
        self._made = self._device.made_beside  # the native's list: released with it

    def beside(self) -> bool:
        return self._device.device_index == 0  # libtaichi_c_api 1.7.4 makes its CUDA runtime on device 0 only

    def why_not(self) -> str | None:
        return None if self.beside() else _cudart.library_absent(self._device.device_index)

    def runtime(self, handle: Any, on_its_thread: bool, thread: int) -> Any:
        if not self.beside() or not on_its_thread:
            raise _cudart.no_library(self._device.device_index, thread)
        if not self._made:
            with library_context():  # device 0's context, whatever another library left current
                self._made.append(capi.create_runtime(Arch.CUDA, 0).cdata)
            stream = self._device.stream.handle
            if stream:  # libtaichi's launches on the stream set
                capi.set_cuda_stream(stream)
        return self._made[0]


class OwnCudaStream(CudaStream):
    """The own CUDA runtime's: the work of the legacy default stream of its GPU's primary context waited for too (its
    own stream where none is set)."""

    _device: OwnCudaDevice

    def synchronize(self) -> None:
        self._device.cuda.synchronize()
        super().synchronize()


class OwnCudaDevice(LibraryCudaDevice):
    """The own CUDA runtime's memory (:mod:`taichi_aot._cudart`): the driver's, zero-filled; device memory, or managed
    memory where the host maps it. Its TiMemory is the tagged pointer, which the own launches take as it is."""

    # managed memory, addressed as it is (no mapping copies it); the driver's calls are any thread's (libtaichi's
    # launches beside it are not)
    traits = LibraryCudaDevice.traits._replace(
        zeroed=True, pointer_handles=True, mapping_is_copy=False, any_thread=True, own_runtime=True,
        library_native=False, no_images="CUDA has no images (Vulkan, OpenGL and Metal have)",
        runtime_words=" (taichi_aot's own)")
    transfers_type = OwnCudaTransfers
    library_type = OwnCudaLibrary
    stream_type = OwnCudaStream

    def __init__(self, runtime: Parent, cuda: CudaDevice, library: list[Any]):
        #: the GPU the runtime runs on, through the driver (``drivers.cudart.CudaDevice``)
        self.cuda = cuda
        #: libtaichi's runtime made beside it, once a module needs one (its handle, or empty: the native's list,
        #: released with it; :class:`OwnCudaLibrary` makes it)
        self.made_beside = library
        super().__init__(runtime)

    def pooled(self, address: int, nbytes: int) -> Any:
        """The pointer itself, tagged: the own launches take it as it is, and nothing is imported."""
        entry = self.imports.get(address)
        if entry is not None and entry[0] >= nbytes:  # the C call's
            return ffi.cast("TiMemory", entry[1])
        return tagged(address)

    def allocate(self, size: int, flags: tuple[bool, bool, bool, int]) -> Block:
        device = self.cuda
        pointer = device.alloc(size, managed=flags[0] or flags[1])
        try:
            device.memset(pointer, size)
        except BaseException:
            device.free(pointer)
            raise
        return Block(tagged(pointer), functools.partial(device.free, pointer), None, pointer, device.context)


def open_native(arch: Arch, device_index: int | None, cpu_threads: int | None, cuda_runtime: str | None) -> Native:
    """A CUDA runtime (this room's registration): taichi_aot's own (``cuda_runtime`` "own", on any GPU:
    :mod:`taichi_aot._cudart`), or libtaichi's, in device 0's primary context whatever another library left
    current."""
    index = 0 if device_index is None else device_index
    if _cudart.chosen(cuda_runtime, index) == _cudart.OWN:
        cuda, library = _cudart.open_device(index), []  # type: ignore[var-annotated]
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
