"""Vulkan's placement policy: where an ndarray lives by default, decided from the runtime's own physical device.

On libtaichi_c_api 1.7.4 memory allocated with ``host_read`` or ``host_write`` is host memory on a GPU with memory of
its own (a discrete GPU): every kernel reads it across the bus (on an H100, 71.5 GB/s against 1,649 GB/s for device
memory). So where the host and the GPU do not share memory, ndarrays live in device memory by default and the host's
bytes move through staging buffers (``staging.py``); where they share it (an integrated GPU, a CPU device such as
lavapipe, or every memory heap of the device its own), host-visible memory costs the kernels nothing, and ndarrays
stay host-visible, so ``map()`` views cost nothing either.

The decision reads the device's type and memory heaps (``vkGetPhysicalDeviceProperties``,
``vkGetPhysicalDeviceMemoryProperties`` of the runtime's ``VkPhysicalDevice``), never its name.
``TAICHI_AOT_VULKAN_MEMORY`` overrides it: ``device`` (the discrete GPU's policy, on any device: the test suite runs
it on lavapipe), ``host`` (host-visible by default), ``auto`` or unset (decided from the device).
"""

from __future__ import annotations

import functools
import io
import json
import os
import zipfile
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Callable, NamedTuple

import numpy as np

from .. import _library, _probe, capi
from .._call import came_back
from .._native import ffi, lib
from ..capi.handles import mark_enqueued, mark_pending, pending_of
from ..enums import Arch
from ..errors import (
    ArgumentOutOfRangeError,
    InvalidArgumentError,
    InvalidStateError,
    NotSupportedError,
    TaichiError,
    check,
)
from ..metadata.gfx import MODULE_GRID, widened_total
from ..waits import POLICIES
from .base import Device, LaunchState, Native, library_native
from .parts import Filler, Transfers

if TYPE_CHECKING:  # pragma: no cover
    from .._lifetime import Parent
    from .staging import Read

__all__ = ["GRID", "GRID_VARIABLE", "MEMORY_VARIABLE", "MODULE_GRID", "DeviceMemoryVulkan", "SharedMemoryVulkan",
           "VulkanFacts", "best_device", "create_runtime", "facts", "grid_threads", "vulkan_device", "widened"]

#: The variable that overrides the policy: ``device``, ``host`` or ``auto``.
MEMORY_VARIABLE = "TAICHI_AOT_VULKAN_MEMORY"

_HEAP_DEVICE_LOCAL = 1  # VK_MEMORY_HEAP_DEVICE_LOCAL_BIT
# VkPhysicalDeviceMemoryProperties: memoryTypeCount, memoryTypes[32] (8 bytes each), memoryHeapCount, then
# memoryHeaps[16] (VkDeviceSize size, VkMemoryHeapFlags flags: 16 bytes each, 8-aligned)
_HEAP_COUNT_OFFSET = 4 + 32 * 8
_HEAPS_OFFSET = _HEAP_COUNT_OFFSET + 4  # 264: 8-aligned


class VulkanFacts(NamedTuple):
    """What the policy reads of a runtime's physical device."""

    name: str
    type: str  # one of _probe.VULKAN_DEVICE_TYPES' names
    heaps: tuple[tuple[int, bool], ...]  # (bytes, device-local) of each memory heap

    @property
    def shared(self) -> bool:
        """Whether the host and the device share memory: an integrated GPU, a CPU device, or a device whose every
        memory heap is device-local (no heap of the host's apart)."""
        return self.type in ("integrated GPU", "CPU") or all(local for _, local in self.heaps)


@functools.lru_cache(maxsize=1)
def _loader() -> tuple[Any, Any]:
    """The Vulkan loader's entry points, opened once for the process (the driver stays loaded anyway)."""
    return _probe.vulkan_loader()


def facts(runtime_handle: Any) -> VulkanFacts:
    """The facts of a Vulkan runtime's physical device, read through the Vulkan loader."""
    info = capi.export_vulkan_runtime(runtime_handle)
    c, vk = _loader()
    device = c.cast("void *", int(ffi.cast("uintptr_t", info.physical_device)))
    props = c.new("char[]", 4096)  # VkPhysicalDeviceProperties is under 1 KiB
    vk.vkGetPhysicalDeviceProperties(device, props)
    words = c.cast("uint32_t *", props)  # apiVersion, driverVersion, vendorID, deviceID, deviceType
    name = c.string(c.cast("char *", props) + 20, 256).decode("utf-8", "replace")
    memory = c.new("char[]", 1024)  # VkPhysicalDeviceMemoryProperties: 520 bytes
    vk.vkGetPhysicalDeviceMemoryProperties(device, memory)
    count = min(int(c.cast("uint32_t *", memory + _HEAP_COUNT_OFFSET)[0]), 16)
    heaps = []
    for i in range(count):
        size = int(c.cast("uint64_t *", memory + _HEAPS_OFFSET + 16 * i)[0])
        flags = int(c.cast("uint32_t *", memory + _HEAPS_OFFSET + 16 * i + 8)[0])
        heaps.append((size, bool(flags & _HEAP_DEVICE_LOCAL)))
    return VulkanFacts(name, _probe.VULKAN_DEVICE_TYPES.get(int(words[4]), "other"), tuple(heaps))


class VulkanTransfers(Transfers):
    """A Vulkan device's: copies between two memories recorded on the own Vulkan state's queue where it is open, in
    one submission with the launches around them (libtaichi's copy otherwise)."""

    _device: SharedMemoryVulkan

    def copy(self, dst: Any, dst_offset: int, src: Any, src_offset: int, size: int) -> None:
        """Recorded on the own Vulkan state's queue where it is open (libtaichi's copy otherwise)."""
        if self._device.vulkan_id:
            code = self._queued(lib.taichi_aot_vk_copy, dst.handle, dst_offset, src.handle, src_offset, size)
            if code != 1:
                _raise_for(code, "copy_memory_device_to_device")
                return
        super().copy(dst, dst_offset, src, src_offset, size)

    def _queued(self, call: Callable[..., int], *args: Any) -> int:
        """``call(runtime, *args)``, one of the own Vulkan state's copies: the runtime marked as having work queued
        first, Python's lock this thread's again after it (it may have waited for another thread's call)."""
        return self._queued_here(call)(*args)

    def _queued_here(self, call: Callable[..., int]) -> Callable[..., int]:
        """:meth:`_queued`'s call of ``call`` with the runtime's handle and pending count found once, not at each call
        (a small value's Python path: 2.6-4 µs on an H200's host): for a memory's reader or writer, called only while
        the memory is open, so while its runtime is."""
        handle = self._runtime.handle
        pending = pending_of(handle)

        def queued(*args: Any) -> int:
            mark_pending(pending)
            try:
                return call(handle, *args)
            finally:
                came_back()  # Python's lock this thread's again (it may have waited for another thread's call)

        return queued


class DeviceVulkanTransfers(VulkanTransfers):
    """A Vulkan device with memory of its own: a few bytes carried by the command buffer itself, a large host array
    that moves again through its imported pages (``placement.vkhost``), the rest through staging buffers."""

    _imports: Any = None  # the host pages it keeps imported (placement.vkhost.Imports), made at the first

    def read_later(self, memory: Any, into: np.ndarray | None = None) -> Read | None:
        if into is not None and self._imports_it(into):  # read after the wait through its pages: no staged pass
            return None
        return super().read_later(memory, into)

    def _imports_it(self, array: np.ndarray) -> bool:
        """Whether ``array`` is one the GPU may copy through its imported pages (large, contiguous, not a staging
        buffer's own, on a device that imports)."""
        return bool(self._device.vulkan_id) and array.nbytes >= HOST_IMPORT_BYTES and array.flags.c_contiguous and \
            not self.staging.holds(array)

    def reader(self, memory: Any) -> Any:
        staged = super().reader(memory)
        if memory.host_read or not self._device.vulkan_id:
            return staged
        if memory.size <= lib.TAICHI_AOT_VK_UPDATE_BYTES:  # a few bytes: read back by this thread's own wait
            return self._read_back(staged)
        return functools.partial(self._imported, staged, False)

    def writer(self, memory: Any) -> Any:
        staged = super().writer(memory)
        if memory.host_write or not self._device.vulkan_id:
            return staged
        if self._updates(memory):  # a few bytes: carried by the command buffer
            return self._update(staged)
        return functools.partial(self._imported, staged, True)

    def filler(self, memory: Any) -> Filler | None:
        """The writer's own write of a few bytes (:meth:`_update`), with no ndarray's checks around it."""
        return functools.partial(self.writer(memory), memory) if self._updates(memory) else None

    def _updates(self, memory: Any) -> bool:
        """Whether host arrays reach ``memory`` through the command buffer (:meth:`_update`): memory of the GPU's
        alone (a host-readable one is written and waited for, so that a view shows the bytes), of a few bytes."""
        return bool(self._device.vulkan_id) and not (memory.host_write or memory.host_read) and (
            memory.size <= lib.TAICHI_AOT_VK_UPDATE_BYTES)

    def _update(self, staged: Any) -> Callable[[Any, np.ndarray], None]:
        """What writes an array's bytes into a memory by the command buffer itself, recorded as a copy is, in order
        with the launches around it (``taichi_aot_vk_update``: the bytes are taken when it returns; no staging
        buffer in flight); through ``staged`` where they cannot be (a size of no whole words, an array of no one
        buffer)."""
        update, from_buffer = self._queued_here(lib.taichi_aot_vk_update), ffi.from_buffer

        def write(memory: Any, array: np.ndarray) -> None:
            try:
                host = from_buffer(array)
            except (TypeError, ValueError):  # not C-contiguous: the staged copy's pass packs it
                staged(memory, array)
                return
            code = update(memory.handle, 0, host, array.nbytes)
            if code == 1:
                staged(memory, array)
            elif code:
                _raise_for(code, "copy to device memory")

        return write

    def _read_back(self, staged: Any) -> Callable[[Any, np.ndarray], None]:
        """What reads a memory's first bytes into an array (contiguous) after the launches recorded before, waited
        for by this thread alone with the runtime let go meanwhile (``taichi_aot_vk_read``: a copy, a submit, the wait,
        no staging buffer); through ``staged`` where it cannot be."""
        read, from_buffer = self._queued_here(lib.taichi_aot_vk_read), ffi.from_buffer

        def read_back(memory: Any, array: np.ndarray) -> None:
            code = read(memory.handle, 0, from_buffer(array), array.nbytes)
            if code == 1:
                staged(memory, array)
            elif code:
                _raise_for(code, "copy from device memory")

        return read_back

    def _imported(self, staged: Any, to_device: bool, memory: Any, array: np.ndarray) -> None:
        """``array``'s bytes moved by the GPU through its imported pages, where it is large, moves again and they can
        be; through ``staged`` (the staging buffers) otherwise."""
        if self._imports_it(array):
            imports = self._imports
            if imports is None:
                from .vkhost import Imports  # the room's own file, imported where first needed

                imports = self._imports = Imports(self._runtime.handle)
            mark_enqueued(self._runtime.handle)
            code = imports.copy(memory, array, to_device)
            if code != 1:
                _raise_for(code, "a host array's copy")
                return
        staged(memory, array)

    def new_host_array(self, dims: tuple[int, ...], dtype: Any) -> Any:
        return self.staging.host_array(dims, dtype)


class SharedMemoryVulkan(Device):
    """A Vulkan device whose memory the host shares: host-visible ndarrays by default, mapped and copied directly.

    Each Vulkan device opens the runtime's own Vulkan state (``_csrc/backends/vkqueue.c``: its command buffers on
    libtaichi's queue, which the own Vulkan launch records into): :attr:`vulkan_id` (0 where it could not be opened,
    :attr:`vulkan_why` says why). Copies between two memories are recorded there, in one submission with the
    launches around them."""

    policy = "vulkan-shared"
    transfers_type: type[Transfers] = VulkanTransfers

    def __init__(self, runtime: Parent, found: VulkanFacts | None, why: str):
        super().__init__(runtime)
        self.facts = found
        self._why = why
        error = ffi.new("char[]", 512)
        self.vulkan_id = int(lib.taichi_aot_vk_open(runtime.handle, error, len(error)))
        self.vulkan_why = "" if self.vulkan_id else ffi.string(error).decode("utf-8", "replace")
        # with the own state open, every call on the runtime is made one at a time (backends/vulkan.c): any thread
        own = bool(self.vulkan_id)
        self.traits = self.traits._replace(any_thread=own, library_any_thread=own)

    def launch_state(self) -> LaunchState:
        return LaunchState(self.vulkan_id, self.vulkan_why)

    def counts(self) -> dict[str, int]:
        """What the own Vulkan state did on this runtime: dispatches recorded, batches submitted, descriptor sets made
        and found kept, fences waited for, workgroups dispatched, copies recorded, host arrays copied through their
        imported pages, fence waits polled and blocked, launches that let Python's lock go: behind another thread's
        call (one longer than a quick launch waits for), or behind the GPU (the next batch slot still running), and
        fence waits made while threads shared the runtime (:data:`COUNTS`)."""
        out = ffi.new("uint64_t[]", lib.TAICHI_AOT_VK_COUNTS)
        lib.taichi_aot_vk_counts(self.vulkan_id, out)
        return dict(zip(COUNTS, (int(v) for v in out)))

    def set_wait(self, policy: str) -> None:
        """The own Vulkan state's fence waits by ``policy`` (:mod:`taichi_aot.waits`); "auto" blocks on a CPU device
        (lavapipe), whose work runs on the host's cores that a poll would take (a waited launch on 2 cores: 35 us
        blocking, 44 us polling)."""
        if self.vulkan_id:
            cpu = self.facts is not None and self.facts.type == "CPU"
            code = POLICIES.index("block" if policy == "auto" and cpu else policy)
            lib.taichi_aot_vk_set_wait(self.vulkan_id, code, 0)

    def why_default(self) -> str:
        return self._why

    def device_name(self) -> str | None:
        return self.facts.name if self.facts is not None else None


class DeviceMemoryVulkan(SharedMemoryVulkan):
    """A Vulkan device with memory of its own (a discrete GPU): device memory by default, the host's bytes through
    staging buffers (the host's pass over threads where large), host arrays passed to kernels copied into device
    memory. A host array of :data:`HOST_IMPORT_BYTES` or more that moves a second time has its pages imported and
    kept where the driver can (VK_EXT_external_memory_host), and the GPU copies from and to them: no pass through a
    staging buffer (``placement.vkhost``)."""

    policy = "vulkan-device"
    traits = SharedMemoryVulkan.traits._replace(kernel_copies_on_device=True)
    transfers_type = DeviceVulkanTransfers

    def default_access(self) -> tuple[bool, bool]:
        return False, False

    def module_source(self, data: bytes | None, path: str,
                      files: Mapping[str, bytes] | None = None) -> tuple[bytes | None, str]:
        """A module's kernels dispatched wide enough for this GPU (:func:`grid_threads`): loops over a range known
        only at launch run on 131,072 threads as Taichi compiles them, under half of what a large GPU keeps busy."""
        threads = grid_threads()
        patched = widened(data, path, threads, files) if threads != MODULE_GRID else None
        return (patched, path) if patched is not None else (data, path)

    def loop_threads(self) -> int | None:
        """As wide as :meth:`module_source` makes them (:func:`grid_threads`)."""
        return grid_threads()


#: The counts of the own Vulkan state (``SharedMemoryVulkan.counts``), by name, as the C names them.
COUNTS = tuple(ffi.string(lib.taichi_aot_vk_count_name(i)).decode() for i in range(lib.TAICHI_AOT_VK_COUNTS))
#: The smallest host array the GPU copies through its imported pages (smaller ones go through staging buffers, whose
#: copies cost less than importing the pages).
HOST_IMPORT_BYTES = 1 << 20


def _raise_for(code: int, what: str) -> None:
    """Nothing for 0; the library's error (its last) or Vulkan's for a copy's code."""
    if code == 0:
        return
    if code <= lib.TAICHI_AOT_VK_ERROR:
        raise InvalidStateError(f"{what}: Vulkan failed (VkResult {lib.TAICHI_AOT_VK_ERROR - code})")
    check(what)


def memory_choice() -> str:
    """``TAICHI_AOT_VULKAN_MEMORY``'s word (empty where unset).

    Raises:
        InvalidArgumentError: another word than ``device``, ``host`` or ``auto``.
    """
    chosen = os.environ.get(MEMORY_VARIABLE, "").strip().lower()
    if chosen not in ("", "auto", "device", "host"):
        raise InvalidArgumentError(f"{MEMORY_VARIABLE}={chosen!r}: expected 'device', 'host' or 'auto'")
    return chosen


def vulkan_device(runtime: Parent) -> Device:
    """The policy of a new Vulkan runtime: the variable's where it is set, else the device's facts'.

    Raises:
        InvalidArgumentError: the variable holds another word than ``device``, ``host`` or ``auto``.
    """
    chosen = memory_choice()
    try:
        found: VulkanFacts | None = facts(runtime.handle)
    except (OSError, AttributeError, TaichiError):  # no loader here, or one without the entry points
        found = None
    if chosen in ("device", "host"):
        why = f"{MEMORY_VARIABLE}={chosen}"
        policy = DeviceMemoryVulkan if chosen == "device" else SharedMemoryVulkan
        return policy(runtime, found, why)
    if found is None:
        return SharedMemoryVulkan(runtime, None, "the device's memory could not be read: libtaichi's default kept")
    if found.shared:
        return SharedMemoryVulkan(runtime, found, f"{found.name} ({found.type}) shares memory with the host: "
                                                  "host-visible memory costs its kernels nothing")
    return DeviceMemoryVulkan(runtime, found, f"{found.name} ({found.type}) has memory of its own: kernels read "
                                              "host-visible memory across the bus")


def _score(device: _probe.VulkanDevice) -> int:
    """How libtaichi ranks a device when it picks one (a discrete GPU first, then an integrated one, then the newer
    Vulkan), as ``VulkanDeviceCreator`` scores them."""
    kind = {"discrete GPU": 1000, "integrated GPU": 500}.get(device.type, 0)
    minor = int(device.api_version.split(".")[1]) if device.api_version.count(".") == 2 else 0
    return kind + 100 * minor


def best_device(devices: Sequence[_probe.VulkanDevice]) -> int:
    """The index of the device libtaichi picks by itself: ``TI_VISIBLE_DEVICE``'s, else the best ranked (a discrete GPU,
    then an integrated one, then the newer Vulkan; the first of equals)."""
    visible = os.environ.get("TI_VISIBLE_DEVICE", "").strip()
    if visible.isdigit() and int(visible) < len(devices):
        return int(visible)
    return max(range(len(devices)), key=lambda i: (_score(devices[i]), -i)) if devices else 0


def create_runtime(device_index: int | None, cpu_threads: int | None = None) -> tuple[Any, int]:
    """libtaichi's Vulkan runtime on device ``device_index`` as ``archs`` lists them (the Vulkan loader's order; None:
    the one libtaichi picks by itself), and that index. The device is shown to libtaichi alone while it makes the
    runtime (``_csrc/vkfence.c``): libtaichi_c_api 1.7.4 refuses a device index and picks one itself. ``cpu_threads``
    is refused there, as for any GPU runtime.

    Raises:
        InvalidArgumentError: no such device here.
        NotSupportedError: another device than libtaichi's own pick, where libtaichi's Vulkan is not reached through
            taichi_aot's hook (``TAICHI_AOT_VULKAN_FENCES=0``).
    """
    if device_index is not None and (isinstance(device_index, bool) or not isinstance(device_index, int)
                                     or device_index < 0):
        raise InvalidArgumentError(f"Runtime('vulkan'): device_index must be a non-negative int, got {device_index!r}")
    memory_choice()  # a bad word refused before a runtime is made
    devices = capi.arch_status(archs=(Arch.VULKAN,))[Arch.VULKAN].devices  # the probe's list, as archs shows it
    best = best_device(devices)
    index = best if device_index is None else device_index
    if devices and index >= len(devices):
        listed = ", ".join(f"{k}: {d.name}" for k, d in enumerate(devices))
        raise ArgumentOutOfRangeError(f"Runtime('vulkan', device_index={index}): this process sees {len(devices)} "
                                      f"Vulkan device{'s' if len(devices) != 1 else ''} ({listed})")
    if not devices or (index == best and not _library.fences):  # libtaichi's own pick, as it makes it
        return capi.create_runtime(Arch.VULKAN, 0, cpu_threads=cpu_threads).cdata, index
    if not _library.fences:
        raise NotSupportedError(f"Runtime('vulkan', device_index={index}): libtaichi_c_api 1.7.4 picks its Vulkan "
                                "device itself, and taichi_aot cannot show it another here "
                                f"({_library.fences_why_not}); set TI_VISIBLE_DEVICE={index} before the process's "
                                "first Vulkan runtime instead")
    return _made_on(index, devices[index].name, cpu_threads), index


def _made_on(index: int, name: str, cpu_threads: int | None) -> Any:
    """libtaichi's runtime made while the loader's device ``index`` (``name``, as probed) is the only one shown.

    Raises:
        InvalidStateError: it came up on another device (the devices changed since they were probed).
    """
    with _library.busy:
        before = lib.taichi_aot_vulkan_select_device(index)
        try:
            handle = capi.create_runtime(Arch.VULKAN, 0, cpu_threads=cpu_threads).cdata
        finally:
            lib.taichi_aot_vulkan_select_device(before)
    try:
        made = facts(handle).name
    except (OSError, AttributeError, TaichiError):  # no loader to read it with: as shown
        return handle
    if made != name:  # the devices changed since they were probed (DRI_PRIME, a driver's variables)
        capi.destroy_runtime(handle)
        raise InvalidStateError(f"Runtime('vulkan', device_index={index}): the runtime came up on {made!r}, not on "
                                f"{name!r} as probed: the Vulkan devices changed since; ask again with "
                                "taichi_aot.capi.arch_status(refresh=True)")
    return handle


#: The variable that sets the threads a kernel's loop over a range known only at launch (an ndarray's shape) is
#: dispatched with, on a Vulkan device with memory of its own: a number, or ``module`` (the module's own).
GRID_VARIABLE = "TAICHI_AOT_VULKAN_GRID"
#: The default on a GPU with memory of its own (MODULE_GRID: what Taichi records for such a loop; the grid's rule is
#: metadata.gfx's, for both launch paths).
GRID = 4 * MODULE_GRID


def grid_threads() -> int:
    """The threads of a runtime-sized loop on a GPU with memory of its own (``GRID_VARIABLE``, else ``GRID``).

    Raises:
        InvalidArgumentError: the variable holds neither ``module`` nor a count from 1 to 2**26.
    """
    raw = os.environ.get(GRID_VARIABLE, "").strip().lower()
    if not raw:
        return GRID
    if raw == "module":
        return MODULE_GRID
    if not (raw.isascii() and raw.isdigit()) or not 1 <= int(raw) <= 1 << 26:
        raise InvalidArgumentError(f"{GRID_VARIABLE}={raw!r}: expected 'module' or a thread count from 1 to 2**26")
    return int(raw)


def _module_files(data: bytes | None, path: str) -> dict[str, bytes]:
    """Every file of a module: the ``.tcm`` bytes ``data``, else the ``.tcm`` or folder at ``path``."""
    files: dict[str, bytes] = {}
    if data is not None or os.path.isfile(path):
        with zipfile.ZipFile(io.BytesIO(data) if data is not None else path) as zf:
            for info in zf.infolist():
                if not info.is_dir():
                    files[info.filename] = zf.read(info)
        return files
    with os.scandir(path) as entries:
        for entry in entries:
            if entry.is_file():  # a link as the module's checks take it: its target's bytes
                with open(entry.path, "rb") as f:
                    files[entry.name] = f.read()
    return files


def _widen(meta: dict, threads: int) -> bool:
    """Set the threads of every runtime-sized loop task of a module's metadata to ``threads`` (as the grid's rule,
    ``metadata.gfx.widened_total``, says); whether any was."""
    changed = False
    for kernel in meta.get("kernels", []):
        for task in kernel.get("tasks_attribs", []):
            total = widened_total(task, threads) if isinstance(task, dict) else None
            if total is not None:
                task["advisory_total_num_threads"] = total
                changed = True
    return changed


def widened(data: bytes | None, path: str, threads: int, read: Mapping[str, bytes] | None = None) -> bytes | None:
    """The module (``data``, the bytes of a ``.tcm``; else the folder or ``.tcm`` at ``path``, whose files ``read``
    holds where the folder's were read) as ``.tcm`` bytes whose runtime-sized loops are dispatched with ``threads``
    threads; None where it has no such loop or already has that count. Its files were read and checked before (the
    object layer's load)."""
    if threads == MODULE_GRID:
        return None
    files = dict(read) if read is not None and data is None else _module_files(data, path)
    names = [n for n in files if n.rsplit("/", 1)[-1] == "metadata.json"]
    if len(names) != 1:
        return None
    meta = json.loads(files[names[0]])
    if not _widen(meta, threads):
        return None
    files[names[0]] = json.dumps(meta).encode()
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as zf:
        for name, content in files.items():
            zf.writestr(name, content)
    return out.getvalue()


def open_native(arch: Arch, device_index: int | None, cpu_threads: int | None, cuda_runtime: str | None) -> Native:
    """libtaichi's Vulkan runtime on the device asked for (:func:`create_runtime`; this room's registration)."""
    handle, index = create_runtime(device_index, cpu_threads)
    return library_native(handle, index)


def device(runtime: Parent, native: Native) -> Device:
    """The device of a Vulkan runtime (this room's registration): :func:`vulkan_device`'s policy."""
    return vulkan_device(runtime)
