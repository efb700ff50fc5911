"""Vulkan kernels launched by taichi_aot itself (``_csrc/backends/vulkan.c``), on the device and queue of the runtime's
libtaichi: each task a pipeline made once from the module's SPIR-V, descriptor sets kept for arrays passed again,
arguments written into a ring of slots, dispatches recorded into command buffers submitted in batches, and a loop
over an ndarray's run-time length dispatched for the elements it has (libtaichi_c_api 1.7.4 makes argument buffers
and descriptor sets anew for every dispatch, and dispatches such a loop with 131,072 threads whatever its length).
Kernels that return values give them (a wait each: libtaichi's C-API gives none).

What it takes of a module: kernels whose tasks are serial or range-for loops over the arguments, the temporaries and
the results (no fields, textures, argument packs), and graphs of such kernels; the rest stays libtaichi's, and
``AotModule.launchers()`` says why.
"""

from __future__ import annotations

import json
import warnings
from typing import TYPE_CHECKING, Any, Callable

from .._native import ffi, lib
from ..errors import InvalidArgumentError, InvalidStateError, NotSupportedError
from ..metadata.gfx import plan_entry, widened_total
from .choice import Choice

if TYPE_CHECKING:  # pragma: no cover
    from ..metadata import ArgInfo
    from ..metadata.model import GfxCode, GraphInfo, KernelInfo, ModuleInfo

__all__ = ["NAME", "VulkanBackend", "VulkanState", "launch_error", "load"]

#: The backend's name, as ``Kernel.launcher`` and ``AotModule.launchers()`` say it.
NAME = "vulkan"
KERNEL, GRAPH = lib.TAICHI_AOT_KIND_VULKAN_KERNEL, lib.TAICHI_AOT_KIND_VULKAN_GRAPH

#: Taichi's buffer kinds (``TaichiAotVkBind``'s, by ``BufferType``): Root 0, GlobalTmps 1, Args 2, Rets 3, ListGen 4,
#: ExtArr 5, ArgPack 6; the own launch binds all but the fields (Root), the struct-for lists and argument packs.
_BINDS = {1: lib.TAICHI_AOT_VK_BIND_TEMPS, 2: lib.TAICHI_AOT_VK_BIND_ARGS, 3: lib.TAICHI_AOT_VK_BIND_RETS,
          5: lib.TAICHI_AOT_VK_BIND_ARRAY}
_UNBOUND = {0: "it reads or writes the module's fields", 4: "it loops over a field (a struct-for's list)",
            6: "it takes an argument pack"}
#: Taichi's task types the own launch dispatches: serial (0) and range-for (1).
_SERIAL, _RANGE_FOR = 0, 1


class VulkanState:
    """What the own Vulkan launch keeps per runtime (``backends.RuntimeBackends``' state under its name): the C
    state of the runtime its device opened (its ``launch_state()``: ``placement.vulkan``), closed with the
    runtime."""

    def __init__(self, runtime: Any):
        device = self._device = runtime.device
        self.caps: set[str] | None = None  # the device's capabilities that are on, read at the first module's load
        opened = device.launch_state()
        self.id = int(opened.id)
        self.why = opened.why or ("" if self.id else "the runtime's device opened none")

    def select(self, stream: int | None) -> None:
        pass  # no streams on Vulkan

    def xla_record(self) -> Any:
        return None

    def keep_for_graphs(self) -> None:
        pass

    def counts(self) -> dict[str, int]:
        """The own Vulkan state's counts on this runtime (its device's: ``placement.vulkan``)."""
        return self._device.counts()


class _Made:
    """A kernel made by the own launch: its C handle and id, and the reader of its values where it returns any."""

    def __init__(self, handle: Any, kernel_id: int, arg_count: int, results: Any):
        self.handle = handle
        self.id = kernel_id
        self.arg_count = arg_count
        self.results = results


def _groups(task: dict, threads: int | None) -> tuple[int, int, int]:
    """A task's threads per workgroup, workgroups, and whether they are trimmed to the largest array at each launch
    (a range-for whose end is known at launch only, read from an ndarray's shape: no serial task leaves it in the
    temporaries), those at most ``threads`` threads (None: as the module says); ValueError where the metadata says
    something else."""
    group = task["advisory_num_threads_per_group"]
    total = task["advisory_total_num_threads"]
    if type(group) is not int or type(total) is not int or not 1 <= group <= 1024 or not 1 <= total <= 1 << 31:
        raise ValueError("a task's threads are out of range")
    loop = task.get("range_for_attribs")
    runtime_sized = task["task_type"] == _RANGE_FOR and isinstance(loop, dict) and not loop.get("const_end", True)
    widened = widened_total(task, threads) if threads is not None else None  # the grid's one rule (metadata.gfx)
    total = widened if widened is not None else total
    temps = any(b["buffer"]["type"] == 1 for b in task["buffer_binds"])
    return group, -(-total // group), int(runtime_sized and not temps)


def _binds(task: dict, arrays: set[int]) -> list[tuple[int, int, int]]:
    """A task's bindings as (binding, kind, argument); NotSupportedError where it binds what the own launch does
    not, or an array argument that is not an ndarray of the plan (``arrays``)."""
    out = []
    for bind in task["buffer_binds"]:
        buffer = bind["buffer"]
        kind = buffer["type"]
        if kind in _UNBOUND:
            raise NotSupportedError(_UNBOUND[kind])
        if kind not in _BINDS:
            raise NotSupportedError(f"it binds a buffer of unknown kind {kind!r}")
        arg = 0
        if kind == 5:
            ids = buffer.get("root_id")
            if not isinstance(ids, list) or len(ids) != 1 or ids[0] not in arrays:
                raise NotSupportedError("it binds an array that is not one of its ndarray arguments")
            arg = ids[0]
        out.append((bind["binding"], _BINDS[kind], arg))
    if len(out) > lib.TAICHI_AOT_VK_MAX_BINDS or len({b for b, _, _ in out}) != len(out):
        raise NotSupportedError("its bindings are more than the own Vulkan launch takes, or repeat")
    return out


def returns_refused(why: str | None) -> str:
    """The end of "kernel 'k' returns values, which ..." on Vulkan where no backend gives them."""
    return ("only taichi_aot's own Vulkan launch gives (libtaichi_c_api 1.7.4 gives no kernel result), "
            + (f"and it does not take it: {why}" if why else "which was not asked for (launcher='taichi')"))


def reverse_refused(name: str) -> str:
    """Why kernel ``name``'s reverse-mode kernel does not run on Vulkan."""
    return (f"kernel {name!r}: reverse-mode kernels run on taichi_aot's own x64 and CUDA launches only (the own Vulkan "
            "launch does not run them, and libtaichi cannot hand them their gradients); this is a VULKAN runtime")


class VulkanBackend:
    """The own Vulkan launch as a module's backend (``choice.Backend``): the kernels whose tasks it can dispatch,
    made at their first look-up, and the graphs of such kernels; the others are libtaichi's."""

    name = NAME

    def __init__(self, state: VulkanState, code: GfxCode, threads: int | None):
        self._state = state
        self._threads = threads  # the threads of a loop over a range known at launch, as the device wants them
        self._spirv = code.spirv
        self._entries = code.kernels
        self._made: dict[str, _Made] = {}
        self._refused: dict[str, str] = {}
        self._keep: list[Any] = []

    def _kernel(self, name: str) -> _Made | None:
        """Kernel ``name`` made (once), or None with the reason noted."""
        made = self._made.get(name)
        if made is not None or name in self._refused:
            return made
        entry = self._entries.get(name)
        if entry is None:
            self._refused[name] = "the module's metadata has no such kernel"
            return None
        try:
            made = self._made[name] = self._make(name, entry)
        except NotSupportedError as e:
            self._refused[name] = str(e)
        return made

    def _make(self, name: str, entry: dict) -> _Made:
        from ..metadata.layout import PlanError, arguments
        from .plan import Results, c_args

        try:
            plan = arguments(plan_entry(entry), f"kernel {name!r}")
        except (PlanError, KeyError, TypeError, ValueError) as e:
            raise NotSupportedError(f"its arguments cannot be laid out here: {e}") from None
        if entry.get("tasks_attribs") and any(t.get("texture_binds") for t in entry["tasks_attribs"]):
            raise NotSupportedError("it takes textures")
        arrays = {i for i, a in enumerate(plan["args"]) if a["kind"] == "ndarray"}
        tasks, _keep = self._tasks(entry, arrays)  # _keep: what the records point to, alive through the call
        results = Results(plan["results"], plan["result_size"]) if "results" in plan else None
        args, _ = c_args(plan["args"], False)
        handle, error = ffi.new("void **"), ffi.new("char[]", 512)
        kernel_id = int(lib.taichi_aot_vk_kernel(
            self._state.id, tasks, len(entry["tasks_attribs"]), args, len(plan["args"]), plan["args_size"],
            plan.get("result_size", 0) if results is not None else 0,
            results.host if results is not None else ffi.NULL, handle, error, len(error)))
        if not kernel_id:
            raise NotSupportedError(ffi.string(error).decode("utf-8", "replace"))
        return _Made(handle[0], kernel_id, len(plan["args"]), results)

    def _tasks(self, entry: dict, arrays: set[int]) -> tuple[Any, list[Any]]:
        """The C records of a kernel's tasks, and what they point to (kept while the kernel is made)."""
        listed = entry.get("tasks_attribs") or []
        if not listed:
            raise NotSupportedError("it has no tasks")
        tasks = ffi.new("TaichiAotVkTask[]", len(listed))
        keep: list[Any] = []
        for c, task in zip(tasks, listed):
            if task.get("task_type") not in (_SERIAL, _RANGE_FOR):
                raise NotSupportedError(f"a task of type {task.get('task_type')!r} (a struct-for or mesh-for)")
            try:
                group, groups, trim = _groups(task, self._threads)
                binds = _binds(task, arrays)
            except (KeyError, TypeError, ValueError) as e:
                raise NotSupportedError(f"its task {task.get('name')!r} is not as expected ({e})") from None
            code = self._spirv.get(task.get("name"))  # read and checked once, by metadata/
            if code is None:
                raise NotSupportedError(f"its task {task.get('name')!r} has no SPIR-V")
            words = ffi.new("uint32_t[]", max(len(code) // 4, 1))
            ffi.memmove(words, code, len(code) // 4 * 4)
            c_binds = ffi.new("TaichiAotVkBind[]", [{"binding": b, "kind": k, "arg": a} for b, k, a in binds] or 1)
            c.code, c.words, c.group_size, c.groups, c.trim = words, len(code) // 4, group, groups, trim
            c.bind_count, c.binds = len(binds), c_binds
            keep += [words, c_binds]
        return tasks, keep

    def kernel(self, name: str, info: KernelInfo, library: Callable[[], Any]) -> tuple[Choice, list[ArgInfo]] | None:
        made = self._kernel(name)
        if made is None:
            return None
        return Choice(NAME, KERNEL, made.handle, None if info.returns else library(), widens=True,
                      results=made.results, codes=True), info.args

    def graph(self, info: GraphInfo, library: Any) -> Choice | None:
        from .plan import dispatch_maps, dispatch_names

        made = [self._kernel(k) for k in info.dispatches]
        kernels = [m for m in made if m is not None and m.results is None]
        maps = dispatch_maps(info, [m.arg_count for m in kernels]) if len(kernels) == len(made) else None
        if maps is None:
            return None
        c = ffi.new("TaichiAotVkGraph *")
        listed = ffi.new("void *[]", [m.handle for m in kernels])
        mapped = ffi.new("uint32_t[]", maps or [0])
        named, names = dispatch_names(info)
        c.dispatch_count, c.kernels, c.maps, c.names = len(kernels), listed, mapped, named
        self._keep += [c, listed, mapped, named, *names]
        return Choice(NAME, GRAPH, c, library, widens=True, codes=True)

    def takes(self, name: str, info: KernelInfo | None) -> bool:
        return self._kernel(name) is not None

    def why_not(self, name: str) -> str | None:
        return self._refused.get(name)

    def reverse(self, module: Any, name: str, grad: KernelInfo, threads: int | None) -> Any:
        return None  # Taichi's Vulkan modules have no reverse-mode kernels

    def unload(self) -> None:
        """The module is being released: its kernels let go (freed once no batch runs them)."""
        made, self._made = self._made, {}
        for m in made.values():
            lib.taichi_aot_vk_kernel_free(self._state.id, m.id)


#: The capabilities whose absence has Taichi write float atomics as compare-and-swap loops (several times slower).
FLOAT_ATOMIC_CAPS = ("spirv_has_atomic_float_add", "spirv_has_atomic_float64_add", "spirv_has_atomic_float",
                     "spirv_has_atomic_float64")
#: The modules warned of already (by their metadata's bytes).
_warned: set[int] = set()


def _caps_warning(runtime: Any, state: VulkanState, what: str, meta: ModuleInfo) -> None:
    """Warn once of a module built without a float-atomic capability its device has, where its tasks have
    compare-and-swap loops Taichi wrote in their place, saying which build line makes it use the device's."""
    built = {k for k, v in meta.required_caps.items() if v}
    if state.caps is None:
        state.caps = {str(getattr(c, "name", c)).lower() for c, v in runtime.capabilities.items() if v}
    missing = [c for c in FLOAT_ATOMIC_CAPS if c in state.caps and c not in built]
    key = hash((what, json.dumps(meta.required_caps, sort_keys=True), tuple(missing)))
    if not missing or key in _warned or meta.gfx is None or not meta.gfx.cas_loops():
        return
    _warned.add(key)
    device = runtime.device.device_name() or "this Vulkan device"
    warnings.warn(f"taichi_aot: module {what} was built without {', '.join(missing)}, which {device} has: its float "
                  "atomics run as compare-and-swap loops, several times slower than the device's own; rebuild it "
                  "here with `python -m taichi_aot build FILE.py --arch vulkan` (this machine's capabilities), or "
                  f"--caps {' '.join(missing)}", RuntimeWarning, stacklevel=6)


def load(runtime: Any, state: Any, what: str, folder: str | None, choice: str, meta: ModuleInfo
         ) -> VulkanBackend | None:
    """The own Vulkan launch as a backend of a module just loaded in ``runtime`` (its registration's ``load``), made
    of what ``meta`` holds (its kernels' entries and SPIR-V, read and checked once by metadata/: no file is opened
    here); None where it has none (it then stays libtaichi's). Where the runtime's own state cannot be made, every
    kernel is libtaichi's, ``launchers()`` saying why."""
    if meta.gfx is None:
        return None
    own = state.get(NAME)
    if own is None:
        own = state[NAME] = VulkanState(runtime)
    if not meta.portable:
        _caps_warning(runtime, own, what, meta)
    backend = VulkanBackend(own, meta.gfx, runtime.device.loop_threads())
    if not own.id:
        why = f"the own Vulkan launch is not open on this runtime: {own.why}"
        backend._refused = dict.fromkeys(meta.gfx.kernels, why)
    return backend


def launch_error(code: int, what: str) -> Exception:
    """The exception for an error code of the own Vulkan launch; the library's own (an ndarray's memory unknown to
    it) are libtaichi's to read."""
    if code == lib.TAICHI_AOT_PLAN_BAD_ARGS:
        return InvalidArgumentError(f"{what}: an argument is not of the kind the Vulkan kernel's argument plan lays "
                                    "out")
    if code == lib.TAICHI_AOT_REFUSED:
        return InvalidStateError(f"{what}: a Vulkan runtime's kernels launch from the runtime's own thread")
    if code <= lib.TAICHI_AOT_VK_ERROR:
        return InvalidStateError(f"{what}: Vulkan failed (VkResult {lib.TAICHI_AOT_VK_ERROR - code})")
    from .libtaichi import launch_error as library_error

    return library_error(code, what)
