"""Find out, without risking this process, which archs can really create a runtime.

libtaichi_c_api 1.7.4's own ``ti_get_available_archs`` segfaults when libcuda is
absent, creating an OpenGL runtime without a display segfaults, and a CUDA
runtime without a driver silently falls back to x64. So each GPU arch is tried
in a child process (running :func:`_child`) that creates and
destroys a runtime and prints one line; a crash there only fails that arch.

The Vulkan loader is asked for every physical device (name and type), so that a
software rasterizer (Mesa's lavapipe, a "CPU" device) is told from a GPU.

The answer is kept in taichi_aot's cache folder (``_cache``: this user's alone) under a key made of everything that
can change it: the library, the Vulkan drivers, the CUDA driver and the environment variables that choose among them;
an entry not written for that key, or not this user's, is not read. A warm cache answers without starting any child
process.
"""

from __future__ import annotations

import json
import os
import platform
import sys
import threading
import time
from typing import TYPE_CHECKING, Any, NamedTuple

from ._cache import cache_home, read_entry, write_entry
from ._child import NoChildError, app_identity, run_child, started
from .enums import ARCHS_COMMAND, CPU_ARCHS, Arch, Error

if TYPE_CHECKING:  # pragma: no cover
    import subprocess

_MARK = "taichi_aot-probe:"

#: VkPhysicalDeviceType names, by value.
VULKAN_DEVICE_TYPES = {0: "other", 1: "integrated GPU", 2: "discrete GPU", 3: "virtual GPU", 4: "CPU"}


class VulkanDevice(NamedTuple):
    """A Vulkan physical device, as the loader reports it."""

    name: str
    type: str  # one of VULKAN_DEVICE_TYPES' names
    api_version: str
    max_image: tuple[int, int, int] = (0, 0, 0)  # the largest side of a 1-D, 2-D and 3-D image (0: unknown)
    max_allocation: int = 0  # the largest single allocation in bytes (maxMemoryAllocationSize; 0: unknown)

    @property
    def software(self) -> bool:
        """Whether it runs on the CPU (a software rasterizer such as lavapipe)."""
        return self.type == "CPU"


class ArchStatus(NamedTuple):
    """What the probe found for one arch."""

    arch: Arch
    available: bool
    device_count: int | None  # None where the C-API gives no way to count
    reason: str  # why not, when not available
    devices: tuple[VulkanDevice, ...] = ()  # Vulkan: every physical device the loader reports

    @property
    def software(self) -> bool:
        """True for a Vulkan backend whose only devices are software rasterizers (no GPU)."""
        return bool(self.devices) and all(d.software for d in self.devices)


def _vulkan_loader() -> tuple[Any, Any]:
    """(cffi, the Vulkan loader) with the few entry points used here; OSError where there is no loader."""
    import cffi

    c = cffi.FFI()
    c.cdef("""
        typedef struct { int sType; const void *pNext; uint32_t flags; const void *pApplicationInfo;
                         uint32_t enabledLayerCount; const char *const *ppEnabledLayerNames;
                         uint32_t enabledExtensionCount; const char *const *ppEnabledExtensionNames; } VkInfo;
        int vkCreateInstance(const VkInfo *info, const void *allocator, void **instance);
        void vkDestroyInstance(void *instance, const void *allocator);
        int vkEnumeratePhysicalDevices(void *instance, uint32_t *count, void **devices);
        void vkGetPhysicalDeviceProperties(void *device, void *properties);
        void vkGetPhysicalDeviceProperties2(void *device, void *properties);
        void vkGetPhysicalDeviceMemoryProperties(void *device, void *properties);
    """)
    return c, c.dlopen("libvulkan.so.1")


#: The loader as devices.vulkan reads a runtime's own physical device with it.
vulkan_loader = _vulkan_loader


#: The VkInstance that keeps the process's Vulkan driver loaded (None: none made yet; False: none can be).
_kept_instance: Any = None


def keep_vulkan_loaded() -> bool:
    """Hold one bare VkInstance (no device) for the rest of the process, made once; whether one is held.

    libtaichi_c_api makes a VkInstance for each Vulkan runtime. When the last instance of the process goes, the
    Vulkan loader unloads the driver, and the next runtime loads it again. Measured on an H100 (NVIDIA's driver
    580.159.04): the 20th to 30th such reload segfaults, with taichi_aot or with bare ti_create_runtime and
    ti_destroy_runtime; with an instance of the process's own kept, 400 runtimes came and went. Called (with the
    library's lock held) before each Vulkan runtime is made."""
    global _kept_instance
    if _kept_instance is None:
        _kept_instance = False
        try:
            c, vk = _vulkan_loader()
            instance = c.new("void **")
            if vk.vkCreateInstance(c.new("VkInfo *", {"sType": 1}), c.NULL, instance) == 0:
                # never destroyed: the process's exit lets it go
                _kept_instance = (c, vk, instance[0], os.getpid())
        except (OSError, AttributeError):  # no loader: the runtime will say so
            pass
    return bool(_kept_instance)


def vulkan_kept_by_parent() -> bool:
    """Whether this process is a forked child of one that kept its Vulkan driver loaded (keep_vulkan_loaded): a
    GPU's Vulkan driver does not survive fork (NVIDIA's hangs the child's first runtime; Mesa's CPU driver,
    lavapipe, works on)."""
    return bool(_kept_instance) and _kept_instance[3] != os.getpid()


def vulkan_devices() -> tuple[list[VulkanDevice], str]:
    """Every Vulkan physical device the loader reports, or ([], why not). Safe to call in any process."""
    try:
        c, vk = _vulkan_loader()
    except OSError as e:
        return [], f"no Vulkan loader ({e})"
    app = c.new("char[]", 64)  # VkApplicationInfo: sType 0, ..., apiVersion (at 44) 1.1, for the limits of 1.1
    c.cast("uint32_t *", app + 44)[0] = (1 << 22) | (1 << 12)
    info = c.new("VkInfo *", {"sType": 1, "pApplicationInfo": app})  # VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO
    instance = c.new("void **")
    code = vk.vkCreateInstance(info, c.NULL, instance)
    if code != 0:
        return [], f"vkCreateInstance failed ({code})"
    try:
        count = c.new("uint32_t *")
        vk.vkEnumeratePhysicalDevices(instance[0], count, c.NULL)
        handles = c.new("void *[]", max(int(count[0]), 1))
        vk.vkEnumeratePhysicalDevices(instance[0], count, handles)
        found = []
        for i in range(int(count[0])):
            props = c.new("char[]", 4096)  # VkPhysicalDeviceProperties is under 1 KiB
            vk.vkGetPhysicalDeviceProperties(handles[i], props)
            words = c.cast("uint32_t *", props)  # apiVersion, driverVersion, vendorID, deviceID, deviceType
            api = int(words[0])
            name = c.string(c.cast("char *", props) + 20, 256).decode("utf-8", "replace")
            limits = words + _LIMITS_OFFSET // 4  # VkPhysicalDeviceLimits: maxImageDimension1D, 2D, 3D first
            found.append(VulkanDevice(name, VULKAN_DEVICE_TYPES.get(int(words[4]), "other"),
                                      f"{api >> 22 & 0x7F}.{api >> 12 & 0x3FF}.{api & 0xFFF}",
                                      (int(limits[0]), int(limits[1]), int(limits[2])),
                                      _max_allocation(c, vk, handles[i], api)))
    finally:
        vk.vkDestroyInstance(instance[0], c.NULL)
    return found, "" if found else "no Vulkan device"


#: What the cached answer holds; a new one asks again (format 2: Vulkan devices' image and allocation limits;
#: 3: reasons a user can act on).
_FORMAT = "probe format 4"

# VkPhysicalDeviceProperties: 5 uint32, deviceName[256], pipelineCacheUUID[16], then the limits (8-aligned)
_LIMITS_OFFSET = 296


def _max_allocation(c: Any, vk: Any, device: Any, api: int) -> int:
    """VkPhysicalDeviceMaintenance3Properties.maxMemoryAllocationSize (Vulkan 1.1), 0 where not reported."""
    if (api >> 22 & 0x7F, api >> 12 & 0x3FF) < (1, 1):
        return 0
    maintenance3 = c.new("char[]", 64)  # sType, pNext, maxPerSetDescriptors, maxMemoryAllocationSize (at 24)
    c.cast("int *", maintenance3)[0] = 1000168000  # VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_3_PROPERTIES
    props2 = c.new("char[]", 4096)  # sType, pNext, then VkPhysicalDeviceProperties at 16
    c.cast("int *", props2)[0] = 1000059001  # VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2
    c.cast("void **", props2 + 8)[0] = maintenance3
    try:
        vk.vkGetPhysicalDeviceProperties2(device, props2)
    except AttributeError:  # a loader without it
        return 0
    return int(c.cast("uint64_t *", maintenance3 + 24)[0])


def cuda_gpu_count() -> tuple[int, str]:
    """Devices libcuda reports, or (0, why not)."""
    import ctypes.util

    name = ctypes.util.find_library("cuda") or "libcuda.so.1"
    try:
        cuda = ctypes.CDLL(name)
    except OSError as e:
        return 0, f"libcuda not found: no NVIDIA driver is installed here ({e})"
    try:
        if cuda.cuInit(0) != 0:
            return 0, "cuInit failed (no usable NVIDIA driver)"
        count = ctypes.c_int(0)
        if cuda.cuDeviceGetCount(ctypes.byref(count)) != 0:
            return 0, "cuDeviceGetCount failed"
    except AttributeError as e:
        return 0, f"libcuda lacks {e}"
    return count.value, "" if count.value else "no CUDA device"


def host_cpu_arch() -> Arch | None:
    machine = platform.machine().lower()
    if machine in ("x86_64", "amd64"):
        return Arch.X64
    if machine in ("aarch64", "arm64"):
        return Arch.ARM64
    return None


#: False once this process answered a question without a child that ran the package's code (a frozen app that
#: serves none): such answers are not kept in the cache folder.
_conclusive = [True]
#: Why a frozen app's archs are not probed in children.
_UNSERVED = ("not probed in a child process: this frozen app serves none (PyInstaller: the package's hook; other "
             "freezers: call taichi_aot.freeze_support() first thing)")


def _probe_in_child(arch: Arch, timeout: float) -> tuple[bool, str]:
    import subprocess

    try:
        proc = run_child(f"import sys; from taichi_aot._probe import _child; sys.exit(_child({int(arch)}))",
                          timeout=timeout)
    except subprocess.TimeoutExpired:
        return False, f"probe timed out after {timeout:.0f} s"
    except NoChildError:
        _conclusive[0] = False
        return _probe_here(arch)
    for line in proc.stdout.splitlines():
        if line.startswith(_MARK):
            status, _, why = line[len(_MARK) :].partition(" ")
            return status == "ok", why
    if not started(proc):
        _conclusive[0] = False
        return False, f"the probe's child process did not run taichi_aot (exit code {proc.returncode})"
    return False, _died(arch, proc)


#: What to use where a backend does not work, as the reasons say it.
_OTHERS = f"{ARCHS_COMMAND} lists those that work here"


def _died(arch: Arch, proc: subprocess.CompletedProcess[str]) -> str:
    """Why an arch is unavailable where its probe's child process ended without an answer, said so a user can act."""
    import signal

    tail = (proc.stderr or "").strip().splitlines()[-1:] or [""]
    if proc.returncode >= 0:
        return f"the probe's child process ended with exit status {proc.returncode} {tail[0]}".strip()
    try:
        sig = signal.Signals(-proc.returncode).name
    except ValueError:
        sig = f"signal {-proc.returncode}"
    died = f"crashed creating a runtime ({sig}, in a child process)"
    if arch in (Arch.OPENGL, Arch.GLES) and not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
        return f"no display: neither DISPLAY nor WAYLAND_DISPLAY is set, and libtaichi's OpenGL backends need one " \
               f"(without it, creating a runtime crashed a child process: {sig}); run under X or Wayland, or use " \
               f"another arch ({_OTHERS})"
    return f"{died}: its driver is missing or broken here; use another arch ({_OTHERS})"


def _probe_here(arch: Arch) -> tuple[bool, str]:
    """The answer of a frozen app that serves no child, without risking the process: the CPU arch by a runtime
    made and destroyed here; CUDA by its driver's devices (a CUDA runtime made here would be the process's second);
    Vulkan by its loader's devices; no other."""
    if arch in CPU_ARCHS:
        status = _child_status(arch)
        return status == "ok", status.partition(" ")[2]
    if arch == Arch.CUDA:
        count, why = cuda_gpu_count()
        return bool(count), _UNSERVED if count else why
    if arch == Arch.VULKAN:
        devices, why = vulkan_devices()
        return bool(devices), _UNSERVED if devices else why
    return False, _UNSERVED


#: The archs probed in child processes besides the machine's CPU, in the order they are started.
_DEVICE_ARCHS = (Arch.VULKAN, Arch.CUDA, Arch.OPENGL, Arch.GLES, Arch.METAL)


def probe(timeout: float = 60.0, only: frozenset[Arch] | None = None) -> dict[Arch, ArchStatus]:
    """Probe every arch the C-API knows (``only``: these alone); GPU archs in child processes, in parallel (no
    cache)."""
    wanted = frozenset(Arch) if only is None else only
    cpu = host_cpu_arch()
    results = {a: ArchStatus(a, False, None, f"this machine is {platform.machine()}")
               for a in sorted(CPU_ARCHS & wanted) if a != cpu}
    cuda_count, cuda_why = cuda_gpu_count() if Arch.CUDA in wanted else (0, "")
    found: dict[Arch, tuple[bool, str]] = {}
    archs = [a for a in (cpu, *_DEVICE_ARCHS) if a in wanted]
    for arch, thread in _start_probes(archs, cuda_count, cuda_why, timeout, results, found).items():
        thread.join()
        results[arch] = _status(arch, found.get(arch, (False, "probe did not report")), cuda_count)
    vulkan = results.get(Arch.VULKAN)
    if vulkan is not None and vulkan.available:
        devices, _ = _vulkan_devices_in_child(timeout)
        results[Arch.VULKAN] = vulkan._replace(devices=tuple(devices), device_count=len(devices) or None)
    return {a: results[a] for a in Arch if a in results}


def _status(arch: Arch, answer: tuple[bool, str], cuda_count: int) -> ArchStatus:
    """An arch's status from its child's answer: the device count of CUDA (the driver's) and of a CPU arch (one)."""
    ok, why = answer
    if arch == Arch.VULKAN and not ok:
        why += _loader_choice()
    count = cuda_count if arch == Arch.CUDA else (1 if ok else 0)
    return ArchStatus(arch, ok, count if arch == Arch.CUDA or arch in CPU_ARCHS else None, why)


def _start_probes(archs: list[Arch], cuda_count: int | None, cuda_why: str, timeout: float,
                  results: dict[Arch, ArchStatus], found: dict[Arch, tuple[bool, str]]) -> dict[Arch, threading.Thread]:
    """A thread for each of ``archs`` worth probing here, each probing its arch in a child process into ``found``;
    the archs known unavailable without one (CUDA without a device, Metal off macOS) go into ``results``."""
    children: dict[Arch, threading.Thread] = {}

    def run(a: Arch) -> None:
        found[a] = _probe_in_child(a, timeout)

    for arch in archs:
        if arch == Arch.CUDA and cuda_count == 0:
            results[arch] = ArchStatus(arch, False, 0, cuda_why)
            continue
        if arch == Arch.METAL and sys.platform != "darwin":
            results[arch] = ArchStatus(arch, False, None, "Metal needs macOS")
            continue
        children[arch] = threading.Thread(target=run, args=(arch,), daemon=True)
        children[arch].start()
    return children


def _device(row: Any) -> VulkanDevice:
    """A VulkanDevice from its JSON row (older rows have no limits)."""
    name, kind, api, *rest = row
    max_image = tuple(int(v) for v in rest[0]) if rest else (0, 0, 0)
    return VulkanDevice(str(name), str(kind), str(api), max_image,  # type: ignore[arg-type]
                        int(rest[1]) if len(rest) > 1 else 0)


def _vulkan_devices_in_child(timeout: float) -> tuple[list[VulkanDevice], str]:
    # the loader's drivers run in a child too: a broken driver must not take this process with it
    import subprocess

    try:
        proc = run_child("import json; from taichi_aot._probe import vulkan_devices; "
                          "d, why = vulkan_devices(); print(json.dumps([[*x] for x in d]))", timeout=timeout)
        rows = json.loads(proc.stdout.strip().splitlines()[-1])
        return [_device(r) for r in rows], ""
    except NoChildError:
        return vulkan_devices()
    except (subprocess.TimeoutExpired, ValueError, IndexError, TypeError) as e:
        return [], f"the Vulkan device list could not be read ({type(e).__name__})"


# ---------------------------------------------------------------------------
# The answer, cached on disk


_LIBRARY_DIRS = ("/lib", "/lib64", "/usr/lib", "/usr/lib64", f"/usr/lib/{platform.machine()}-linux-gnu",
                 "/usr/local/lib", "/usr/local/nvidia/lib64", "/usr/local/cuda/lib64")


def _shared_libraries(*names: str) -> list[str]:
    """Files of these shared libraries in the usual folders and LD_LIBRARY_PATH (a cheap look: no ldconfig)."""
    import glob

    folders = [*os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep), *_LIBRARY_DIRS]
    return sorted({f for d in folders if d for n in names for f in glob.glob(os.path.join(d, f"lib{n}.so*"))})


def library_identity(library: str) -> str:
    """What tells the library at ``library`` from another, wherever it lies (a one-file app unpacks it into a new
    folder at every start): its ELF build id, else its size and the digest of its first MiB."""
    import hashlib

    found = _identities.get(library)
    if found is not None:
        return found
    try:
        with open(library, "rb") as f:
            head = f.read(1 << 20)
            size = os.fstat(f.fileno()).st_size
    except OSError:
        return f"{library}:-"
    at = head.find(_BUILD_ID_NOTE, 0, 1 << 16)
    if at >= 0:
        found = "build-id:" + head[at + len(_BUILD_ID_NOTE):at + len(_BUILD_ID_NOTE) + 20].hex()
    else:
        found = f"{size}:{hashlib.sha256(head).hexdigest()[:32]}"
    _identities[library] = found
    return found


#: A GNU build id note's header: 4 bytes of name, 20 of id, type 3 (NT_GNU_BUILD_ID), "GNU\0".
_BUILD_ID_NOTE = b"\x04\x00\x00\x00\x14\x00\x00\x00\x03\x00\x00\x00GNU\x00"
_identities: dict[str, str] = {}
_OWN_LIB_DIR = "(the library's own)"


def _cache_key(library: str) -> str:
    """A digest of what the probe's answer depends on (the library by its identity and a frozen app by its own
    executable: a one-file app's unpack folder, where Nuitka's sys.executable lies, is new at every start)."""
    import hashlib

    parts: list[str] = [_FORMAT, build_identity(), app_identity() or sys.executable, platform.machine(),
                        library_identity(library)]
    icds = _vulkan_driver_files()
    files = [*icds, *_icd_libraries(icds), "/proc/driver/nvidia/version",
             *_shared_libraries("cuda", "vulkan", "GLX", "GLdispatch", "EGL", "OpenGL", "GL", "GLX_nvidia")]
    for name in files:
        try:
            st = os.stat(name)
            parts.append(f"{name}:{st.st_size}:{st.st_mtime_ns}")
        except OSError:
            parts.append(f"{name}:-")
    own = os.path.join(os.path.dirname(os.path.dirname(library)), "runtime")  # TI_LIB_DIR as the package sets it
    for var in ("CUDA_VISIBLE_DEVICES", "DISPLAY", "WAYLAND_DISPLAY", "TI_LIB_DIR", "__EGL_VENDOR_LIBRARY_FILENAMES",
                *_LOADER_VARIABLES):
        value = os.environ.get(var, "")
        parts.append(f"{var}={_OWN_LIB_DIR if var == 'TI_LIB_DIR' and value == own else value}")
    if sys.platform.startswith("linux"):
        try:
            with open("/proc/driver/nvidia/version", "rb") as version:
                parts.append(version.read().decode("ascii", "replace"))
        except OSError:
            pass
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


#: What the Vulkan loader reads of the environment to choose its drivers and layers (a one-file app's
#: LD_LIBRARY_PATH, new at every start, is not among them: the libraries it finds are, by _shared_libraries).
_LOADER_VARIABLES = ("VK_DRIVER_FILES", "VK_ICD_FILENAMES", "VK_ADD_DRIVER_FILES", "VK_LOADER_DRIVERS_SELECT",
                     "VK_LOADER_DRIVERS_DISABLE", "VK_LOADER_LAYERS_ENABLE", "VK_LOADER_LAYERS_DISABLE",
                     "VK_INSTANCE_LAYERS", "VK_LAYER_PATH", "VK_ADD_LAYER_PATH", "XDG_CONFIG_HOME", "XDG_DATA_HOME",
                     "XDG_CONFIG_DIRS", "XDG_DATA_DIRS")


def _loader_choice() -> str:
    """Where variables of the environment choose the Vulkan loader's drivers: which, as a reason's last words."""
    chosen = [f"{v}={os.environ[v]!r}" for v in ("VK_LOADER_DRIVERS_DISABLE", "VK_LOADER_DRIVERS_SELECT",
                                                  "VK_DRIVER_FILES", "VK_ICD_FILENAMES") if os.environ.get(v)]
    if not chosen:
        return ""
    return (f" (the Vulkan loader's drivers are chosen here by {', '.join(chosen)}, which may leave it none: unset "
            f"{'it' if len(chosen) == 1 else 'them'} to let it find this machine's)")


def _vulkan_driver_files() -> list[str]:
    """The Vulkan loader's driver manifests (ICD files), where it looks for them: the variables that name them,
    the system's and the user's folders."""
    import glob

    named = [f for var in ("VK_DRIVER_FILES", "VK_ICD_FILENAMES", "VK_ADD_DRIVER_FILES")
             for f in os.environ.get(var, "").split(os.pathsep) if f]
    homes = [os.environ.get("XDG_CONFIG_HOME") or os.path.expanduser("~/.config"),
             os.environ.get("XDG_DATA_HOME") or os.path.expanduser("~/.local/share")]
    roots = [*os.environ.get("XDG_CONFIG_DIRS", "/etc/xdg").split(os.pathsep), "/etc", *homes,
             *os.environ.get("XDG_DATA_DIRS", "/usr/local/share:/usr/share").split(os.pathsep)]
    found = [f for root in dict.fromkeys(r for r in roots if os.path.isabs(r))
             for f in sorted(glob.glob(os.path.join(root, "vulkan", "icd.d", "*.json")))]
    return [*named, *found]


def _icd_libraries(manifests: list[str]) -> list[str]:
    """The driver library each manifest names (``ICD.library_path``), where it names a file by its path."""
    out = []
    for manifest in manifests:
        try:
            with open(manifest, encoding="utf-8") as f:
                path = json.load(f)["ICD"]["library_path"]
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if isinstance(path, str) and os.sep in path:
            out.append(path if os.path.isabs(path) else os.path.join(os.path.dirname(manifest), path))
    return out


def build_identity() -> str:
    """What tells this build of taichi_aot from another (its version, and its compiled extension by build id):
    entries it keeps in the cache folder name it, so that another build (older or newer, a second checkout) never
    takes them for its own."""
    global _build
    if _build is None:
        import importlib

        from ._version import __version__

        native = importlib.import_module("._native", __package__)  # its file: the compiled extension of this build
        _build = f"taichi_aot {__version__} {library_identity(getattr(native, '__file__', '') or '-')}"
    return _build


_build: str | None = None


def cache_folder() -> str:
    """Where the probe's answer is kept: taichi_aot's cache folder (``_cache.cache_home``)."""
    return cache_home()


def _to_json(status: dict[Arch, ArchStatus]) -> dict[str, Any]:
    rows = [[s.arch.name, s.available, s.device_count, s.reason, [[*d] for d in s.devices]] for s in status.values()]
    return {"time": time.time(), "rows": rows}


def _from_json(rows: Any) -> dict[Arch, ArchStatus]:
    out = {}
    for name, available, count, reason, devices in rows:
        arch = Arch[name]
        out[arch] = ArchStatus(arch, bool(available), count, str(reason), tuple(_device(d) for d in devices))
    return out


#: How long an arch's "unavailable" read from the cache is believed where the arch is not named (seconds): a driver
#: installed or mended since is found at the latest then.
NEGATIVE_LIFE = 600.0


def cached_probe(library: str, refresh: bool = False, only: frozenset[Arch] | None = None,
                 named: frozenset[Arch] = frozenset()) -> dict[Arch, ArchStatus]:
    """:func:`probe`'s answer (``only``: for these archs alone), from the cache folder when it still holds for this
    machine (an entry of this user's alone, written for this key: ``_cache.read_entry``); else probed and kept. The
    answer for every arch answers for a few too; a few are kept each on its own. An arch found unavailable is asked
    again where the caller names it (``named``, and ``only``), or where that answer is older than
    :data:`NEGATIVE_LIFE`: what made it unavailable may be gone (a driver installed, a variable unset). An
    "unavailable" read from the cache says so."""
    key = _cache_key(library)
    named = named | (only or frozenset())
    wanted = _probed_archs() if only is None else set(only)
    whole = _kept(f"probe-{key}", refresh, named)
    status, kept = _kept_parts(key, whole, only, refresh, named)
    asked = wanted - set(status)
    if asked:
        _conclusive[0] = True
        found = probe(only=frozenset(asked) if only is not None or whole is not None else None)
        if _conclusive[0]:  # a frozen app's answer without children is not kept: asked again next time
            whole_entry = whole is not None or only is None
            _keep(key, {**status, **found} if whole_entry else found, whole=whole_entry)
        status.update(found)
        kept = {a: w for a, w in kept.items() if a not in found}
    return {a: _said(status[a], kept.get(a)) for a in Arch if a in status and a in wanted}


class Answers:
    """The probe's answers a process holds: for every arch, probed once (:func:`cached_probe`), or for a few named
    alone until then; an arch asked for by name that was found unavailable is asked again."""

    def __init__(self) -> None:
        self._all: dict[Arch, ArchStatus] | None = None
        self._some: dict[Arch, ArchStatus] = {}
        self._lock = threading.Lock()

    def status(self, library: str, refresh: bool, archs: Any, named: bool) -> dict[Arch, ArchStatus]:
        """``capi.arch_status``'s answer (its docstring)."""
        with self._lock:
            fresh = refresh or (self._all is None and archs is None)
            if fresh:
                self._all = cached_probe(library, refresh, named=frozenset(Arch) if named else frozenset())
            known = self._all if self._all is not None else self._some
            wanted = frozenset(known if archs is None else archs)
            if not fresh and (archs is not None or named):
                _ask_again(library, known, wanted)
            return {a: s for a, s in known.items() if a in wanted}


def _ask_again(library: str, known: dict[Arch, ArchStatus], wanted: frozenset[Arch]) -> None:
    """Each of the ``wanted`` archs ``known`` has no answer for, or one that says unavailable, probed (again)."""
    ask = frozenset(a for a in wanted if a not in known or not known[a].available)
    if ask:
        known.update(cached_probe(library, False, ask))


def _kept_parts(key: str, whole: tuple[dict[Arch, ArchStatus], str] | None, only: frozenset[Arch] | None,
                refresh: bool, named: frozenset[Arch]) -> tuple[dict[Arch, ArchStatus], dict[Arch, str]]:
    """What the cache holds for :func:`cached_probe`: the answer for every arch (``whole``), else each of ``only``'s
    kept on its own; and, for each, where and since when it was kept."""
    if whole is not None:
        return dict(whole[0]), dict.fromkeys(whole[0], whole[1])
    status: dict[Arch, ArchStatus] = {}
    kept: dict[Arch, str] = {}
    for arch in only or ():
        one = _kept(f"probe-{key}-{arch.name.lower()}", refresh, named)
        if one is not None:
            status.update(one[0])
            kept.update(dict.fromkeys(one[0], one[1]))
    return status, kept


def _said(status: ArchStatus, kept: str | None) -> ArchStatus:
    """``status``, where it is an "unavailable" read from the cache (``kept``: where and since when), saying so."""
    if status.available or kept is None or _never_here(status.arch):
        return status
    return status._replace(reason=f"{status.reason} [an answer kept in the cache ({kept}); naming the arch "
                                  "(Runtime(arch), python -m taichi_aot archs) asks again]")


def _probed_archs() -> set[Arch]:
    """The archs :func:`probe` answers for when asked for all."""
    return {*CPU_ARCHS, *_DEVICE_ARCHS}


def _keep(key: str, status: dict[Arch, ArchStatus], whole: bool) -> None:
    """Keep the probe's answer in the cache folder: for every arch as one entry (``whole``), else each arch's alone."""
    parts = [(f"probe-{key}", status)] if whole else [(f"probe-{key}-{a.name.lower()}", {a: s})
                                                       for a, s in status.items()]
    for name, part in parts:
        write_entry(os.path.join(cache_folder(), f"{name}.json"), name, json.dumps(_to_json(part)))


def _kept(name: str, refresh: bool, named: frozenset[Arch]) -> tuple[dict[Arch, ArchStatus], str] | None:
    """The probe's answer kept as ``name`` in the cache folder and where and since when it was kept, or None; without
    the negative answers to be asked again (an arch ``named``, or an answer older than :data:`NEGATIVE_LIFE`)."""
    path = os.path.join(cache_folder(), f"{name}.json")
    kept = None if refresh else read_entry(path, name)
    try:
        if kept is None:
            return None
        loaded = json.loads(kept)
        status = _from_json(loaded["rows"])
        since = float(loaded["time"])
    except (ValueError, KeyError, TypeError):
        return None
    old = time.time() - since > NEGATIVE_LIFE
    where = f"{path}, since {time.strftime('%Y-%m-%d %H:%M', time.localtime(since))}"
    return {a: s for a, s in status.items() if s.available or _never_here(a) or not (a in named or old)}, where


def _never_here(arch: Arch) -> bool:
    """Whether ``arch`` cannot be had on this machine whatever is installed (another CPU, Metal off macOS): its
    negative answer needs no asking again."""
    return arch not in {host_cpu_arch(), *_POSSIBLE}


#: The archs a driver or library installed later may bring (Metal on macOS alone), besides the machine's CPU.
_POSSIBLE = frozenset({Arch.VULKAN, Arch.CUDA, Arch.OPENGL, Arch.GLES, *([Arch.METAL] if sys.platform == "darwin"
                                                                          else [])})


def _child(arch_value: int) -> int:
    # Runs in the child: load the library, create and destroy one runtime.
    print(f"{_MARK}{_child_status(Arch(arch_value))}", flush=True)
    return 0


def _child_status(arch: Arch) -> str:
    """"ok", or "no " and why: whether a runtime of ``arch`` is made and destroyed without an error."""
    from . import errors
    from ._library import Quiet
    from ._native import ffi, lib

    with Quiet():
        runtime = lib.ti_create_runtime(arch, 0)
    code, message = errors.take_last_error()
    if code == Error.NOT_SUPPORTED:
        return (f"no this libtaichi_c_api was built without this backend (it said: not supported: {message}); "
                f"use another arch ({_OTHERS})")
    if code != 0 or runtime == ffi.NULL:
        return f"no {message or 'runtime creation failed'}"
    with Quiet():
        lib.ti_destroy_runtime(runtime)
    code, message = errors.take_last_error()
    return "ok" if code == 0 else f"no destroy failed: {message}"
