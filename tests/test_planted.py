"""What another local user can plant, planted as another uid: no planted code runs in the package's process or its
children, no planted answer is believed, nothing outside the user's cache is written or deleted, nothing crashes.

Each case is set up by root for an attacker's uid (files given to it with chown) in a folder shaped like ``/tmp``
(root's, sticky, writable by all), and the victim is the test's own process or, where the case needs a user without
a home or one who cannot write a module's folder, a child process of another uid (a Python other users may run, with
the package and its dependencies on PYTHONPATH).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile

import numpy as np
import pytest

from conftest import ROOT, require_arch
from taichi_aot import Arch, Runtime, _cache, _firstload, _home, _library, _probe, config

IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0
#: The attacker's uid, and a victim's with no passwd entry (a service's uid in a container).
ATTACKER, VICTIM = 54322, 54321

pytestmark = pytest.mark.skipif(not IS_ROOT, reason="planting as another uid needs root")
#: Where the folders shaped like /tmp are made: /tmp itself (the test command's own temporary folder is private to
#: the user running it, so another uid could not reach into it).
SHARED_ROOT = "/tmp" if os.path.isdir("/tmp") else tempfile.gettempdir()

_EVIL_C = r"""
#include <fcntl.h>
#include <unistd.h>
__attribute__((constructor)) static void planted(void) {
    int fd = open("%s", O_CREAT | O_WRONLY, 0666);
    if (fd >= 0) close(fd);
}
"""


@pytest.fixture
def shared():
    """A folder as /tmp is: root's, sticky, writable by all, reachable by every uid; removed after the test."""
    folder = tempfile.mkdtemp(prefix="taichi_aot-planted-", dir=SHARED_ROOT)
    os.chmod(folder, 0o1777)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def _give(path: str, uid: int = ATTACKER) -> None:
    """``path`` and everything under it made ``uid``'s (links themselves, not what they point at)."""
    for top, dirs, files in os.walk(path):
        for name in dirs + files:
            os.lchown(os.path.join(top, name), uid, uid)
    os.lchown(path, uid, uid)


def _evil(folder: str, name: str, marker: str) -> str:
    """A shared library at ``folder/name`` that, when loaded, creates ``marker``: planted code that ran."""
    os.makedirs(folder, exist_ok=True)
    source = os.path.join(folder, name + ".c")
    with open(source, "w", encoding="utf-8") as f:
        f.write(_EVIL_C % marker)
    path = os.path.join(folder, name)
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", path, source], check=True, capture_output=True)
    os.remove(source)
    return path


def _write(path: str, text: str) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def _plant_home(home: str, marker: str) -> None:
    """What the Vulkan loader and Python's site read under a HOME: an implicit layer, a driver and a .pth file,
    each running code of the attacker's when loaded."""
    library = _evil(os.path.join(home, "lib"), "libplanted.so", marker)
    layer = {"file_format_version": "1.0.0", "layer": {
        "name": "VK_LAYER_planted", "type": "GLOBAL", "library_path": library, "api_version": "1.3.0",
        "implementation_version": "1", "description": "planted", "disable_environment": {"PLANTED_OFF": "1"}}}
    _write(os.path.join(home, ".local/share/vulkan/implicit_layer.d/planted.json"), json.dumps(layer))
    driver = {"file_format_version": "1.0.0", "ICD": {"library_path": library, "api_version": "1.3.0"}}
    _write(os.path.join(home, ".config/vulkan/icd.d/planted.json"), json.dumps(driver))
    _write(os.path.join(home, ".local/share/vulkan/icd.d/planted.json"), json.dumps(driver))
    version = f"python{sys.version_info[0]}.{sys.version_info[1]}"
    _write(os.path.join(home, ".local/lib", version, "site-packages/planted.pth"),
           f"import os; open({marker!r}, 'w').close()\n")
    for top in ("lib", ".local", ".config"):
        _give(os.path.join(home, top))


def _victim_python(uid: int) -> tuple[str, dict[str, str]]:
    """A Python ``uid`` may run with this package and its dependencies importable, and the environment for it;
    skipped where none can be had (a checkout or a virtual environment other users cannot read)."""
    paths = [ROOT, sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]]
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": os.pathsep.join(dict.fromkeys(paths)),
           "PYTHONDONTWRITEBYTECODE": "1", "LANG": "C.UTF-8"}
    for var in ("VK_DRIVER_FILES", "VK_ICD_FILENAMES", "TAICHI_AOT_SPIRV_TOOLS_LIB"):
        if var in os.environ:
            env[var] = os.environ[var]
    version = f"{sys.version_info[0]}.{sys.version_info[1]}"
    for python in dict.fromkeys([os.path.realpath(sys.executable), f"/usr/bin/python{version}",
                                 f"/usr/local/bin/python{version}"]):
        if not os.path.isfile(python):
            continue
        try:
            probe = subprocess.run([python, "-c", "import taichi_aot, numpy"], user=uid, group=uid, env=env,
                                   capture_output=True, text=True, timeout=120, cwd="/")
        except PermissionError:  # in a folder other users may not enter
            continue
        if probe.returncode == 0:
            return python, env
    pytest.skip(f"no Python {version} here that uid {uid} may run with this checkout and its virtual environment "
                "importable (both must be readable by other users)")


def _as(uid: int, code: str, env: dict[str, str], python: str, cwd: str = "/") -> subprocess.CompletedProcess:
    return subprocess.run([python, "-c", code], user=uid, group=uid, env=env, capture_output=True, text=True,
                          timeout=300, cwd=cwd)


_USES_BOTH = """
import os, numpy as np
import taichi_aot as ta
print("HOME", os.environ.get("HOME"))
for arch in ("vulkan", "x64"):
    with ta.Runtime(arch) as rt:
        x = rt.ndarray((4,), np.float32)
        x.from_numpy(np.arange(4, dtype=np.float32))
        assert (x.to_numpy() == np.arange(4)).all()
print("ran")
"""


def test_a_user_without_a_home_runs_no_code_planted_in_the_temporary_folder(shared):
    """A uid with no passwd entry and HOME unset (a service's): the package gives libtaichi's initialisers and
    everything else in the process a private HOME, not the temporary folder, where another user planted a Vulkan
    layer, a Vulkan driver and a .pth file of Python's user site (which the package's child processes would run)."""
    require_arch(Arch.VULKAN)
    marker = os.path.join(shared, "planted-code-ran")
    _plant_home(shared, marker)
    python, env = _victim_python(VICTIM)
    env = {**env, "TMPDIR": shared}  # the temporary folder as the library sees it; HOME unset
    proc = _as(VICTIM, _USES_BOTH, env, python)
    assert proc.returncode == 0 and "ran" in proc.stdout, proc.stderr[-3000:]
    home = proc.stdout.split("HOME ", 1)[1].split()[0]
    assert home != shared and os.path.dirname(home) == shared and not os.path.exists(home)  # removed at its exit
    assert not os.path.exists(marker)


def test_a_home_others_may_write_is_not_handed_to_the_libraries(shared):
    """HOME set to the temporary folder (as some services' users have it): the process gets a private HOME in its
    place before the first library loads; the planted layer, driver and .pth run nowhere, also not in the package's
    children (its probe of the archs, in a fresh cache)."""
    require_arch(Arch.VULKAN)
    marker = os.path.join(shared, "planted-code-ran")
    _plant_home(shared, marker)
    env = {**os.environ, "HOME": shared, "TAICHI_AOT_CACHE": os.path.join(tempfile.mkdtemp(), "cache")}
    env.pop(_home.PRIVATE, None)
    proc = subprocess.run([sys.executable, "-c", _USES_BOTH], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and "ran" in proc.stdout, proc.stderr[-3000:]
    assert not proc.stdout.split("HOME ", 1)[1].startswith(shared + "\n")
    assert not os.path.exists(marker)


def test_nvtx_is_never_loaded_from_the_working_folder(shared):
    """``TAICHI_AOT_NVTX=1`` in a working folder others may write: an NVTX library planted there
    (``nvidia/nvtx/lib``, as the nvidia-nvtx wheel lays it out) is not loaded, by ``python -c`` nor ``-m``."""
    marker = os.path.join(shared, "planted-code-ran")
    for folder in ("nvtx", "cu13"):
        _evil(os.path.join(shared, "nvidia", folder, "lib"), "libnvToolsExt.so.1", marker)
    _give(os.path.join(shared, "nvidia"))
    code = "from taichi_aot import _nvtx; _nvtx.set_nvtx(True); print(_nvtx.status()['library'])"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONSAFEPATH"}
    env.update(TAICHI_AOT_NVTX="1", PYTHONPATH=ROOT)
    # sys.path as python -c makes it (""), and as python -m and a script do (the folder itself)
    for first in ("", "import os, sys; sys.path.insert(0, os.getcwd()); "):
        proc = subprocess.run([sys.executable, "-c", first + code], cwd=shared, env=env, capture_output=True,
                              text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert shared not in proc.stdout
    assert not os.path.exists(marker)


def test_a_cache_path_through_another_users_link_is_not_followed(shared, tmp_path, monkeypatch):
    """``TAICHI_AOT_CACHE`` that is, or passes through, a link another user made (pointing at a folder of the
    victim's own), and a relative ``XDG_CACHE_HOME`` in a shared working folder: ignored with a warning; nothing is
    written there and ``cache clear`` deletes nothing there. A link the user made is followed."""
    decoy = tmp_path / "decoy"
    (decoy / "etc").mkdir(parents=True)
    (decoy / "etc" / "passwd").write_text("the victim's")
    (decoy / "probe-keep.json").write_text("the victim's")
    decoy.chmod(0o700)
    for made in ("link", "through"):
        os.symlink(decoy if made == "link" else tmp_path, os.path.join(shared, made))
        os.lchown(os.path.join(shared, made), ATTACKER, ATTACKER)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    for given in (os.path.join(shared, "link"), os.path.join(shared, "through", "decoy")):
        monkeypatch.setenv("TAICHI_AOT_CACHE", given)
        with pytest.warns(RuntimeWarning, match=f"is a link made by uid {ATTACKER}"):
            folder = _cache.cache_home()
        assert not folder.startswith(str(decoy))
        proc = subprocess.run([sys.executable, "-m", "taichi_aot", "cache", "clear"], capture_output=True, text=True,
                              timeout=300, env={**os.environ, "TAICHI_AOT_CACHE": given})
        assert proc.returncode == 0, proc.stderr[-2000:]
    assert sorted(os.listdir(decoy)) == ["etc", "probe-keep.json"] and (decoy / "etc" / "passwd").exists()
    monkeypatch.delenv("TAICHI_AOT_CACHE")
    os.makedirs(os.path.join(shared, "cache"))
    os.symlink(decoy, os.path.join(shared, "cache", "taichi_aot"))
    _give(os.path.join(shared, "cache"))
    monkeypatch.chdir(shared)
    monkeypatch.setenv("XDG_CACHE_HOME", "cache")
    assert not _cache.cache_home().startswith((shared, str(decoy)))
    mine = tmp_path / "mine"
    os.symlink(tmp_path / "real", mine)  # the user's own link
    monkeypatch.setenv("TAICHI_AOT_CACHE", str(mine))
    assert _cache.cache_home() == str(tmp_path / "real")
    assert sorted(os.listdir(decoy)) == ["etc", "probe-keep.json"]


def _built(tmp: str) -> str:
    """physics.py's x64 part, built (and sealed) by ``taichi_aot build``."""
    out = os.path.join(tmp, "physics")
    proc = subprocess.run([sys.executable, "-m", "taichi_aot", "build", os.path.join(ROOT, "examples", "physics.py"),
                           "--arch", "x64", "-o", out], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert _firstload.sealed(out)
    return out


_LOADS = """
import sys, numpy as np
import taichi_aot as ta
with ta.Runtime("x64") as rt:
    mod = rt.load_module(sys.argv[1])
    x = rt.ndarray((8,), np.float32)
    mod.kernels["step"](x, 0.5)
    rt.wait()
    print(x.to_numpy().tolist())
"""


def test_an_llvm_module_the_user_cannot_write_loads(shared, modules):
    """A module installed by root (a folder an ordinary user can read, not write), sealed by ``build`` or not:
    libtaichi_c_api would segfault making its lock file there (the sealed one loaded in the process) or be judged
    damaged (the other); the package loads a private copy, and the module runs."""
    require_arch(Arch.X64)
    python, env = _victim_python(VICTIM)
    sealed = _built(shared)
    unsealed = os.path.join(shared, "unsealed")
    shutil.copytree(sealed, unsealed)
    os.remove(os.path.join(unsealed, "taichi_aot.json"))
    for folder in (sealed, unsealed):
        os.chmod(folder, 0o755)
        code = _LOADS.replace("sys.argv[1]", repr(folder))
        proc = _as(VICTIM, code, {**env, "TAICHI_AOT_CACHE": os.path.join(shared, f"cache-{VICTIM}")}, python)
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert proc.stdout.split("\n")[-2] == str([0.5 * i for i in range(8)])
        assert not os.path.exists(os.path.join(folder, "metadata.lock"))


def test_a_planted_lock_file_neither_crashes_nor_condemns_a_module(shared, tmp_path, monkeypatch):
    """A ``metadata.lock`` another user planted beside a module in a folder others may write: the module is loaded
    from a private copy (no crash, sealed or not), and no verdict kept from it refuses the user's own copy."""
    require_arch(Arch.X64)
    monkeypatch.setenv("TAICHI_AOT_CACHE", str(tmp_path / "cache"))
    sealed = _built(str(tmp_path))
    for name, keep_seal in (("sealed", True), ("unsealed", False)):
        planted = os.path.join(shared, name)
        shutil.copytree(sealed, planted)
        if not keep_seal:
            os.remove(os.path.join(planted, "taichi_aot.json"))
        _write(os.path.join(planted, "metadata.lock"), "")
        _give(os.path.join(planted, "metadata.lock"))
        os.chmod(planted, 0o777)
        own = str(tmp_path / f"own-{name}")
        shutil.copytree(planted, own, ignore=shutil.ignore_patterns("*.lock"))
        for folder in (planted, own):
            proc = subprocess.run([sys.executable, "-c", _LOADS, folder], capture_output=True, text=True, timeout=300,
                                  env=os.environ.copy())
            assert proc.returncode == 0, proc.stderr[-3000:]
            assert proc.stdout.split("\n")[-2] == str([0.5 * i for i in range(8)])


def test_libraries_others_may_write_are_refused(shared, tmp_path):
    """``TAICHI_C_API_INSTALL_DIR`` and ``TAICHI_AOT_SPIRV_TOOLS_LIB`` naming what another user may change (their
    folder, or their link to the real library) are refused, saying why; ``TI_LIB_DIR`` there is ignored with a
    warning. The same named through the user's own folder works."""
    real = os.path.dirname(os.path.dirname(_library.info.path))  # the install folder: lib/, runtime/
    theirs = os.path.join(shared, "c_api")
    os.makedirs(os.path.join(theirs, "lib"))
    os.symlink(_library.info.path, os.path.join(theirs, "lib", os.path.basename(_library.info.path)))
    os.symlink(os.path.join(real, "runtime"), os.path.join(theirs, "runtime"))
    _give(theirs)
    code = "import taichi_aot; print(taichi_aot.capi.library.path)"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "TAICHI_C_API_INSTALL_DIR": theirs})
    assert proc.returncode != 0 and "another user could plant code" in proc.stderr, proc.stderr[-2000:]
    assert f"belongs to uid {ATTACKER}" in proc.stderr
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "TAICHI_C_API_INSTALL_DIR": real, "TI_LIB_DIR": theirs})
    assert proc.returncode == 0 and "TI_LIB_DIR" in proc.stderr and "is ignored" in proc.stderr, proc.stderr[-2000:]
    from taichi_aot.metadata import spirv

    validator = spirv.validator().path
    planted = os.path.join(shared, "libSPIRV-Tools-shared.so")
    os.symlink(validator, planted)
    os.lchown(planted, ATTACKER, ATTACKER)
    code = "from taichi_aot.metadata import spirv; print(spirv.validator().path)"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "TAICHI_AOT_SPIRV_TOOLS_LIB": planted})
    assert proc.returncode != 0 and "another user could plant code" in proc.stderr, proc.stderr[-2000:]
    mine = tmp_path / "libSPIRV-Tools-shared.so"
    os.symlink(validator, mine)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "TAICHI_AOT_SPIRV_TOOLS_LIB": str(mine)})
    assert proc.returncode == 0 and proc.stdout.strip() == str(mine), proc.stderr[-2000:]


def test_a_probe_made_without_a_working_driver_is_not_kept_against_it(tmp_path):
    """``VK_LOADER_DRIVERS_DISABLE='*' python -m taichi_aot archs`` once (Vulkan unavailable), then a working
    loader in the same cache: ``Runtime("vulkan")`` works."""
    require_arch(Arch.VULKAN)
    env = {**os.environ, "TAICHI_AOT_CACHE": str(tmp_path / "cache")}
    proc = subprocess.run([sys.executable, "-m", "taichi_aot", "archs"], capture_output=True, text=True, timeout=300,
                          env={**env, "VK_LOADER_DRIVERS_DISABLE": "*"})
    assert proc.returncode == 0 and "vulkan   unavailable" in proc.stdout, proc.stdout + proc.stderr[-2000:]
    code = "from taichi_aot import Runtime; Runtime('vulkan').close(); print('made')"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0 and "made" in proc.stdout, proc.stderr[-2000:]


def test_another_builds_verdicts_are_not_this_builds(modules, tmp_path, monkeypatch):
    """A module verdict another build of taichi_aot kept in the same cache (older or newer, another checkout) is not
    read by this one: a good module it condemned loads."""
    require_arch(Arch.X64)
    monkeypatch.setenv("TAICHI_AOT_CACHE", str(tmp_path / "cache"))
    good = str(tmp_path / "good")
    shutil.copytree(modules.path(Arch.X64), good)
    library = _library.info.path
    monkeypatch.setattr(_probe, "_build", "taichi_aot 0.0.1 another build")
    digest = _firstload._module_digest(good, Arch.X64, _probe.library_identity(library))
    path = os.path.join(_cache.cache_home(), "modules", f"{digest[:32]}.txt")
    assert _cache.write_entry(path, f"module {digest}", "crashed loading it (signal 11, in a child process)")
    monkeypatch.setattr(_probe, "_build", None)
    assert _firstload.module_crash(good, Arch.X64, ["add"], [], library) == ""
    with Runtime(Arch.X64) as rt:
        mod = rt.load_module(good)
        x, y = (rt.ndarray((4,), np.float32) for _ in range(2))
        x.from_numpy(np.arange(4, dtype=np.float32))
        y.from_numpy(np.ones(4, np.float32))
        mod.kernels["add"](x, y, 1.0)
        rt.wait()
        assert x.to_numpy().tolist() == [1, 2, 3, 4]


def test_cache_clear_removes_what_the_package_kept_alone(tmp_path, monkeypatch):
    """``cache clear`` removes probe answers, module verdicts, PTX made at load, compiled modules and fetched
    libraries, this user's alone; another user's entry of the same name and the user's own files stay."""
    monkeypatch.setenv("TAICHI_AOT_CACHE", str(tmp_path / "cache"))
    root = _cache.cache_home()
    for name in ("probe-1.json", "modules/a.txt", "ptx/b/c.ptx", "demo-x", "mine.txt", "probe-2.json"):
        _write(os.path.join(root, name), "")
    os.lchown(os.path.join(root, "probe-2.json"), ATTACKER, ATTACKER)
    assert config.clear_cache() == 4
    assert sorted(os.listdir(root)) == ["mine.txt", "probe-2.json"]

