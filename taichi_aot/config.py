"""What this installation is and sees: :func:`devices` as data, :func:`show_config` as text.

Versions (taichi_aot, the C-API library and where it was found, Python, numpy, cffi), every arch with its
devices (name, type, software or not) or why it is unavailable, the caches and the environment variables
that steer taichi_aot and the library.
"""

from __future__ import annotations

import os
import platform
import sys
from typing import IO, Any

from . import _library, capi
from ._bundle import cache_home
from .enums import ARCH_PREFERENCE

#: The environment variables taichi_aot or libtaichi_c_api read (prefixes end in ``_``).
VARIABLES = ("TAICHI_AOT_", "TAICHI_C_API_INSTALL_DIR", "TI_LIB_DIR", "TI_LOG_LEVEL", "XDG_CACHE_HOME",
             "CUDA_VISIBLE_DEVICES", "VK_ICD_FILENAMES", "VK_DRIVER_FILES")


def compile_cache() -> str:
    """Where modules compiled on first use (the demo's with ``--compile``, the bench's) are kept: taichi_aot's
    one cache folder (``TAICHI_AOT_CACHE``, else ``$XDG_CACHE_HOME/taichi_aot``, else ``~/.cache/taichi_aot``)."""
    return cache_home()


#: What taichi_aot keeps in its cache folder, by kind (file name patterns); ``cache clear`` removes these only.
CACHE_ENTRIES = {"probe answers": ("probe-*.json",), "compiled modules": ("demo-*", "bench-*"),
                 "libraries fetched by builds": ("c_api",)}


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
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path, ignore_errors=True)
            else:
                try:
                    os.remove(path)
                except OSError:
                    continue
            removed += 1
    return removed


def devices() -> list[dict[str, Any]]:
    """Every arch the library knows, in order of preference: ``arch``, ``available``, ``reason`` (why not),
    ``device_count`` and ``devices`` (Vulkan: ``name``, ``type``, ``software``, ``api_version`` of each)."""
    status = capi.arch_status()
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
        "cache": {"folder": cache_home(), **{kind: len(paths) for kind, paths in cache_entries().items()}},
        "environment": {k: v for k, v in sorted(os.environ.items()) if k.startswith(VARIABLES)},
    }


def _cuda_launcher() -> dict[str, Any]:
    """Which launcher CUDA kernels with PTX take (TAICHI_AOT_CUDA_LAUNCHER), the PTX target, and whether PTX can be
    made here (llvmlite)."""
    import importlib.util

    from .ptx.compile import TARGET

    choice = os.environ.get("TAICHI_AOT_CUDA_LAUNCHER", "own")
    return {"launcher": choice, "ptx_target": TARGET, "llvmlite": importlib.util.find_spec("llvmlite") is not None}


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
    """Print versions, the library in use, every arch and device, caches and the variables in effect."""
    c = config()
    out = file or sys.stdout
    lib = c["library"]
    lines = [f"taichi_aot {c['taichi_aot']}",
             f"  libtaichi_c_api: {lib['path']} (C-API {lib['c_api_version']}, Taichi {lib['taichi']}; "
             f"{lib['source']})",
             f"  python: {c['python']}", f"  numpy {c['numpy']}, cffi {c['cffi']}", "archs:"]
    for a in c["archs"]:
        if not a["available"]:
            lines.append(f"  {a['arch']:8} unavailable: {a['reason']}")
            continue
        count = "?" if a["device_count"] is None else a["device_count"]
        lines.append(f"  {a['arch']:8} available, {count} device(s)" + (" (software only)" if a["software"] else ""))
        for i, d in enumerate(a["devices"]):
            kind = d["type"] + (", software rasterizer" if d["software"] else "")
            lines.append(f"    {i}: {d['name']} ({kind}, Vulkan {d['api_version']})")
    cuda = c["cuda_launcher"]
    path = "taichi_aot's own launcher" if cuda["launcher"] == "own" else "libtaichi"
    lines.append(f"CUDA kernels with PTX: {path} (TAICHI_AOT_CUDA_LAUNCHER={cuda['launcher']}); PTX made for "
                 f"{cuda['ptx_target']}, "
                 f"{'here (llvmlite installed)' if cuda['llvmlite'] else 'not here (pip install taichi_aot[ptx])'}")
    spv = c["spirv_validator"]
    lines.append(f"SPIR-V validator: SPIRV-Tools {spv['version']} ({spv['path']})" if spv["path"] else
                 f"SPIR-V validator: missing, so Vulkan modules cannot be loaded: {spv['error']}")
    lines.append(f"cache: {c['cache']['folder']} (python -m taichi_aot cache clear empties it)")
    lines += [f"  {k}: {v}" for k, v in c["cache"].items() if k != "folder"]
    lines.append("environment:" + ("" if c["environment"] else " (none of its variables set)"))
    lines += [f"  {k}={v}" for k, v in c["environment"].items()]
    print("\n".join(lines), file=out)
