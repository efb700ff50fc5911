"""What this installation is and sees: :func:`devices` as data, :func:`show_config` as text.

Versions (taichi_aot, the C-API library and where it was found, Python, numpy, cffi), every arch with its
devices (name, type, software or not) or why it is unavailable, which of the C call's fast reads are active and
why not, the caches and the environment variables that steer taichi_aot and the library.
"""

from __future__ import annotations

import os
import platform
import stat
import sys
from typing import IO, Any

from . import _library, _nvtx, capi
from ._cache import cache_home
from ._library import FENCES_VARIABLE
from .enums import ARCH_PREFERENCE, CPU_ARCHS, Arch

#: The environment variables taichi_aot or libtaichi_c_api read (prefixes end in ``_``).
VARIABLES = ("TAICHI_AOT_", "TAICHI_C_API_INSTALL_DIR", "TI_LIB_DIR", "TI_LOG_LEVEL", "XDG_CACHE_HOME",
             "CUDA_VISIBLE_DEVICES", "VK_ICD_FILENAMES", "VK_DRIVER_FILES")


def compile_cache() -> str:
    """Where modules compiled on first use (the demo's with ``--compile``, the bench's) are kept: taichi_aot's
    one cache folder (``TAICHI_AOT_CACHE``, else ``$XDG_CACHE_HOME/taichi_aot``, else ``~/.cache/taichi_aot``)."""
    return cache_home()


#: What taichi_aot keeps in its cache folder, by kind (file name patterns); ``cache clear`` removes these only.
CACHE_ENTRIES = {"probe answers": ("probe-*.json",), "module verdicts": ("modules/*",), "PTX made at load": ("ptx/*",),
                 "compiled modules": ("demo-*", "bench-*"), "libraries fetched by builds": ("c_api",)}


def cache_entries() -> dict[str, list[str]]:
    """The paths of what taichi_aot keeps in its cache folder, by kind."""
    import glob

    root = cache_home()
    return {kind: sorted(p for pattern in patterns for p in glob.glob(os.path.join(root, pattern)))
            for kind, patterns in CACHE_ENTRIES.items()}


def clear_cache() -> int:
    """Remove what taichi_aot keeps in its cache folder (nothing else there); returns how many entries."""
    import shutil

    removed = 0
    for paths in cache_entries().values():
        for path in paths:
            try:
                st = os.lstat(path)
            except OSError:
                continue
            if st.st_uid != os.getuid():  # not made by this user's taichi_aot: left alone
                continue
            if stat.S_ISDIR(st.st_mode):
                shutil.rmtree(path, ignore_errors=True)  # links inside are removed, never followed
            else:
                try:
                    os.remove(path)
                except OSError:
                    continue
            removed += 1
    for patterns in CACHE_ENTRIES.values():  # the folders that hold entries (module verdicts, PTX), once empty
        for folder in {os.path.dirname(p) for p in patterns if os.sep in p or "/" in p}:
            try:
                os.rmdir(os.path.join(cache_home(), folder))
            except OSError:  # not there, or another user's entry stays in it
                pass
    return removed


def devices() -> list[dict[str, Any]]:
    """Every arch the library knows, in order of preference: ``arch``, ``available``, ``reason`` (why not),
    ``device_count`` and ``devices`` (Vulkan: ``name``, ``type``, ``software``, ``api_version`` of each)."""
    status = capi.arch_status(named=True)  # every arch named: an "unavailable" kept from before is asked again
    out = []
    order = list(ARCH_PREFERENCE)
    for arch in sorted(status, key=lambda a: (a not in order, order.index(a) if a in order else 0, a.name)):
        s = status[arch]
        out.append({
            "arch": arch.name.lower(), "available": s.available, "reason": "" if s.available else s.reason,
            "device_count": s.device_count, "software": s.software,
            "devices": [{"name": d.name, "type": d.type, "software": d.software, "api_version": d.api_version}
                        for d in s.devices],
        })
    return out


def config() -> dict[str, Any]:
    """What :func:`show_config` prints, as data."""
    import cffi
    import numpy

    from ._version import __version__

    info = _library.info
    return {
        "taichi_aot": __version__,
        "library": {"path": info.path, "source": info.source, "c_api_version": info.version,
                    "taichi": _library.TAICHI_RELEASE},
        "python": f"{platform.python_implementation()} {platform.python_version()} ({sys.executable})",
        "numpy": numpy.__version__, "cffi": cffi.__version__,
        "archs": devices(),
        "cuda_launcher": _cuda_launcher(),
        "spirv_validator": _spirv_validator(),
        "vulkan_fences": vulkan_fences(),
        "nvtx": nvtx(),
        "fast_reads": fast_reads(),
        "cache": {"folder": cache_home(), **{kind: len(paths) for kind, paths in cache_entries().items()}},
        "environment": {k: v for k, v in sorted(os.environ.items()) if k.startswith(VARIABLES)},
    }


def _cuda_launcher() -> dict[str, Any]:
    """Which launcher CUDA kernels with PTX take (TAICHI_AOT_CUDA_LAUNCHER), the PTX target, and whether PTX can be
    made here (llvmlite)."""
    import importlib.util

    from .ptx.compile import TARGET

    choice = os.environ.get("TAICHI_AOT_CUDA_LAUNCHER", "auto")
    runtime = os.environ.get("TAICHI_AOT_CUDA_RUNTIME", "").strip().lower() or "own"
    return {"launcher": choice, "runtime": "taichi" if runtime == "taichi" else "own", "ptx_target": TARGET,
            "llvmlite": importlib.util.find_spec("llvmlite") is not None}


def _available(archs: Any) -> tuple[list[str], str]:
    """The names of ``archs`` available here, and why none is (the first's reason)."""
    status = capi.arch_status(archs=archs)  # named: an "unavailable" kept from before is asked again
    found = [a for a in archs if a in status]
    return ([a.name.lower() for a in found if status[a].available],
            next((f"{a.name.lower()}: {status[a].reason}" for a in found if not status[a].available), "none known"))


def _read(name: str, active: bool, reason: str) -> dict[str, Any]:
    return {"name": name, "active": active, "reason": reason}


def _numpy_reads() -> list[dict[str, Any]]:
    """numpy arrays shared on a CPU backend: passed again (NumpyHit) and new each call (fresh.c), both reading numpy's
    array object in place where ARRAY_KEYS found it laid out as the extension reads it."""
    from ._seen import ARRAY_KEYS

    cpu, no_cpu = _available(sorted(CPU_ARCHS))
    if not cpu:
        why = f"no CPU backend here ({no_cpu}); elsewhere host arrays travel as copies"
        return [_read("numpy arrays passed again", False, why), _read("new numpy arrays each call", False, why)]
    if not ARRAY_KEYS:
        why = "numpy's array objects are not laid out as the extension reads them (checked on probe arrays)"
        return [_read("numpy arrays passed again", False, why), _read("new numpy arrays each call", False, why)]
    on = ", ".join(cpu)
    return [_read("numpy arrays passed again", True, f"on {on}, numpy's array objects read in place (checked on "
                  "probe arrays)"),
            _read("new numpy arrays each call", True, f"on {on}, imported into the runtime's pool of memory")]


def _torch_reads() -> dict[str, Any]:
    """Plain torch tensors read by torch's C functions (torch.c), torch imported here where it is installed."""
    import importlib.util

    from ._arrays import torch_layout_status

    if importlib.util.find_spec("torch") is None:
        return _read("torch tensors by torch's C functions", False, "torch is not installed")
    import torch  # noqa: F401  (what torch_layout_status asks about)

    active, why = torch_layout_status()
    if not active:
        why += "; a tensor passed again is found again by its getters, a new one each call takes the Python path"
    return _read("torch tensors by torch's C functions", active, why)


def fast_reads() -> list[dict[str, Any]]:
    """The C call's fast reads (``_csrc/call.c``, ``fresh.c``, ``reads.c``, ``torch.c``), each ``name``, ``active``
    and ``reason``: why it is on, or why not (then those calls take the Python path, which checks the same). A
    torch installed is imported here: whether torch's C functions read its tensors is checked against its own
    getters on probe tensors, as the first call given a tensor checks it."""
    cuda, no_cuda = _available([Arch.CUDA])
    return [
        _read("C call", True, "kernels, graphs and bound launches called from the runtime's thread, outside a "
              "recording, with arguments it vouches for; call_counts says which calls it made"),
        *_numpy_reads(),
        _torch_reads(),
        _read("CUDA arrays (torch, CuPy, __cuda_array_interface__)", bool(cuda),
              "passed again, found by their print; new each call, read by CuPy's attributes or their interface"
              if cuda else f"no CUDA here ({no_cuda})"),
    ]


def vulkan_fences() -> dict[str, Any]:
    """Whether libtaichi's Vulkan fences are kept and reused (``_csrc/vkfence.c``): ``on``, ``reason`` (why not),
    ``hooked`` (a Vulkan runtime of this process reaches Vulkan through the pool), and the counts of fences
    ``made``, ``reused`` (taken from a pool) and ``kept`` (put back)."""
    from ._native import ffi, lib

    counts = ffi.new("uint64_t[3]")
    lib.taichi_aot_vulkan_fence_counts(counts)
    return {"on": _library.fences, "reason": _library.fences_why_not or "libtaichi's dlsym hands out ours",
            "hooked": bool(lib.taichi_aot_vulkan_fences_hooked()), "made": int(counts[0]),
            "reused": int(counts[1]), "kept": int(counts[2])}


def set_nvtx(on: bool) -> bool:
    """Name every launch from now on in Nsight Systems (``on``), or stop: each kernel or graph launch (calls, bound
    launches, replays, ops, the flat API's launches) is made inside an NVTX range ``taichi_aot:<name>``, on every
    arch. The same as ``TAICHI_AOT_NVTX=1`` (read when the first kernel or graph is made), and it wins over the
    variable. Off, a launch costs one branch more; on, a push and a pop of a range (NVIDIA's library, which records
    nothing while no tool is attached).

    Turning ranges on opens NVIDIA's NVTX library (``libnvToolsExt.so.1``) the first time: from the system's search
    path, the ``nvidia-nvtx-cu12`` wheel (PyTorch's CUDA wheels install it) or the CUDA toolkit. Where none is found,
    one RuntimeWarning says where it looked, and they stay off.

    Returns:
        Whether the ranges are on now.
    """
    return _nvtx.set_nvtx(bool(on))


def nvtx() -> dict[str, Any]:
    """Whether launches are named in NVTX ranges (:func:`set_nvtx`): ``on``, ``library`` (the NVTX library opened, or
    None), ``asked`` (``TAICHI_AOT_NVTX`` asks for them) and ``looked`` (where the library was looked for in vain)."""
    return _nvtx.status()


def _spirv_validator() -> dict[str, Any]:
    """SPIRV-Tools, which validates every task of a Vulkan module at load: its path and version, or why it is
    missing (then Vulkan modules cannot be loaded)."""
    from .errors import TaichiError
    from .metadata import spirv

    try:
        found = spirv.validator()
    except TaichiError as e:
        return {"path": None, "version": None, "error": str(e)}
    return {"path": found.path, "version": found.version, "error": None}


def show_config(file: IO[str] | None = None) -> None:
    """Print versions, the library in use, every arch and device, the C call's fast reads (active, or why not),
    caches and the variables in effect."""
    c = config()
    out = file or sys.stdout
    lib = c["library"]
    lines = [f"taichi_aot {c['taichi_aot']}",
             f"  libtaichi_c_api: {lib['path']} (C-API {lib['c_api_version']}, Taichi {lib['taichi']}; "
             f"{lib['source']})",
             f"  python: {c['python']}", f"  numpy {c['numpy']}, cffi {c['cffi']}", "archs:"]
    lines += _arch_lines(c["archs"])
    lines += _path_lines(c)
    lines.append("fast reads of the C call (off: those calls take the Python path):")
    lines += [f"  {r['name']}: {'active' if r['active'] else 'not active'}: {r['reason']}" for r in c["fast_reads"]]
    lines.append(f"cache: {c['cache']['folder']} (python -m taichi_aot cache clear empties it)")
    lines += [f"  {k}: {v}" for k, v in c["cache"].items() if k != "folder"]
    lines.append("environment:" + ("" if c["environment"] else " (none of its variables set)"))
    lines += [f"  {k}={v}" for k, v in c["environment"].items()]
    print("\n".join(lines), file=out)


def _arch_lines(archs: list[dict[str, Any]]) -> list[str]:
    """``show_config``'s lines of each arch: available or why not, its devices."""
    lines = []
    for a in archs:
        if not a["available"]:
            lines.append(f"  {a['arch']:8} unavailable: {a['reason']}")
            continue
        count = "?" if a["device_count"] is None else a["device_count"]
        lines.append(f"  {a['arch']:8} available, {count} device(s)" + (" (software only)" if a["software"] else ""))
        for i, d in enumerate(a["devices"]):
            kind = d["type"] + (", software rasterizer" if d["software"] else "")
            lines.append(f"    {i}: {d['name']} ({kind}, Vulkan {d['api_version']})")
    return lines


def _path_lines(c: dict[str, Any]) -> list[str]:
    """``show_config``'s lines of the paths a launch or a load takes: CUDA's launcher, the SPIR-V validator, the
    Vulkan fences."""
    cuda = c["cuda_launcher"]
    path = "libtaichi" if cuda["launcher"] == "taichi" else "taichi_aot's own launcher"
    spv = c["spirv_validator"]
    fences = c["vulkan_fences"]
    runtime = "taichi_aot's own (any GPU, several at once)" if cuda["runtime"] == "own" else "libtaichi's (device 0)"
    return [f"CUDA runtime: {runtime} (TAICHI_AOT_CUDA_RUNTIME={cuda['runtime']})",
            f"CUDA kernels with PTX: {path} (TAICHI_AOT_CUDA_LAUNCHER={cuda['launcher']}); PTX made for "
            f"{cuda['ptx_target']}, "
            f"{'here (llvmlite installed)' if cuda['llvmlite'] else 'not here (pip install taichi_aot[ptx])'}",
            f"SPIR-V validator: SPIRV-Tools {spv['version']} ({spv['path']})" if spv["path"] else
            f"SPIR-V validator: missing, so Vulkan modules cannot be loaded: {spv['error']}",
            f"Vulkan fences: {'reused' if fences['on'] else 'made for each submit'} ({fences['reason']}; "
            f"{FENCES_VARIABLE}=0 turns this off); made {fences['made']}, reused {fences['reused']}",
            _nvtx_line(c["nvtx"])]


def _nvtx_line(n: dict[str, Any]) -> str:
    """``show_config``'s line of the NVTX ranges around launches."""
    if n["on"]:
        return f"NVTX ranges: on, every launch named taichi_aot:<kernel> ({n['library']})"
    if n["looked"]:
        return "NVTX ranges: asked for, but off: no NVTX library found; looked in: " + "; ".join(n["looked"])
    return (f"NVTX ranges: off ({_nvtx.VARIABLE}=1 or taichi_aot.config.set_nvtx(True) names every launch in "
            "Nsight Systems)")
