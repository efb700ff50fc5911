"""taichi_aot as a user installs it: a wheel of this checkout in fresh venvs of CPython 3.9 and 3.13 (and 3.14,
3.15 where the machine has them), with no Taichi: the bundled library, the demo from its shipped module, a
multi-arch module built here loaded on x64 and Vulkan with keyword arguments, Runtime.for_module."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import zipfile

import pytest

from conftest import Venv, find_python, require_arch
from taichi_aot import Arch, capi

PHYSICS = '''
import taichi as ti


@ti.aot.export
@ti.kernel
def step(x: ti.types.ndarray(dtype=ti.f32, ndim=1), dt: ti.f32):
    for i in x:
        x[i] = x[i] + dt * i
'''

USE = textwrap.dedent('''
    import importlib.util, json, sys
    import numpy as np
    import taichi_aot
    from taichi_aot import IncompatibleModuleError, Runtime, capi

    out = {"taichi": importlib.util.find_spec("taichi") is not None, "library": capi.library.source,
           "python": sys.version_info[:2], "results": {}}
    for arch in ("x64", "vulkan"):
        with Runtime(arch) as rt:
            mod = rt.load_module("physics.tcm")
            x = rt.ndarray((4,), np.float32)
            mod.kernels["step"](x=x, dt=0.5)
            rt.wait()
            out["results"][arch] = x.to_numpy().tolist()
            out["names"] = [a.name for a in mod.kernels["step"].signature]
    with Runtime.for_module("physics.tcm") as rt:
        out["for_module"] = rt.arch.name
    with Runtime("vulkan") as rt:
        try:
            rt.load_module("x64_only")
        except IncompatibleModuleError as e:
            out["incompatible"] = str(e)
    print(json.dumps(out))
''')


@pytest.fixture(scope="module")
def physics(tmp_path_factory) -> str:
    """physics.tcm (x64 and Vulkan parts) and x64_only (a folder), built with this checkout's Taichi."""
    folder = tmp_path_factory.mktemp("physics")
    (folder / "physics.py").write_text(PHYSICS)
    for archs, out in ((["x64", "vulkan"], "physics.tcm"), (["x64"], "x64_only")):
        proc = subprocess.run([sys.executable, "-m", "taichi_aot", "build", "physics.py", "--arch", *archs, "-o", out],
                              cwd=folder, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    return str(folder)


@pytest.mark.parametrize("version", ["3.9", "3.13", "3.14", "3.15"])
def test_the_wheel_runs_without_taichi(version, wheel, physics, tmp_path):
    # 3.9 and 3.13 are on every machine of this project (pyenv); newer ones where they were built (/opt/cpython)
    require_arch(Arch.X64)
    require_arch(Arch.VULKAN)
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
    assert "taichi_aot/_lib/lib/libtaichi_c_api.so" in names and "taichi_aot/_lib/LICENSE" in names
    assert "taichi_aot/cli/demo.tcm" in names
    # the bench ships beside the package, its raw C loops built into an extension of its own (not into _native)
    assert {"taichi_aot_bench/_steps.abi3.so", "taichi_aot_bench/_csrc/driver.c"} <= set(names)
    venv = Venv(str(tmp_path / "venv"), find_python(version, required=version in ("3.9", "3.13")), wheel)
    proc = venv.run(["-m", "taichi_aot", "demo", "--arch", "x64", "--size", "32", "--steps", "16", "--out", "d.png"],
                    cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "compile" not in proc.stdout and (tmp_path / "d.png").stat().st_size > 0  # the shipped module ran
    proc = venv.run(["-c", "import taichi_aot_bench.steps"], cwd=str(tmp_path))  # binds _native's functions
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (tmp_path / "use.py").write_text(USE)
    proc = venv.run([str(tmp_path / "use.py")], cwd=physics)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = json.loads(proc.stdout.splitlines()[-1])
    assert out["python"] == [int(p) for p in version.split(".")]  # (Taichi has no wheel for 3.14 or 3.15)
    assert out["taichi"] is False and out["library"] == "bundled"
    assert out["results"] == {"x64": [0.0, 0.5, 1.0, 1.5], "vulkan": [0.0, 0.5, 1.0, 1.5]}
    assert out["names"] == ["x", "dt"]  # recorded by build on x64 too, where Taichi's metadata has none
    software = capi.arch_status()[Arch.VULKAN].software  # a software rasterizer: the CPU is faster
    assert out["for_module"] == ("X64" if software else "VULKAN")
    message = out["incompatible"]
    assert "x64" in message and "Runtime.for_module" in message and "--arch x64 vulkan" in message, message
    # building needs Taichi, which this venv lacks: one line saying how to get it
    proc = venv.run(["-m", "taichi_aot", "build", "physics.py", "--arch", "x64", "-o", str(tmp_path / "m")],
                    cwd=physics)
    assert proc.returncode == 2 and "taichi_aot[build]" in proc.stderr, proc.stderr


def _readme_install_lines() -> list[str]:
    """The commands of the README's install block (its first shell block), comments left out."""
    import os

    from conftest import ROOT

    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        text = f.read()
    block = text.split("## Install", 1)[1].split("```sh\n", 1)[1].split("```", 1)[0]
    return [line.split("#")[0].strip() for line in block.splitlines() if line.split("#")[0].strip()]


def test_the_readme_install_route_runs_in_a_fresh_clone_and_leaves_it_clean(tmp_path):
    """The README's route from a fresh clone: its wheel command writes our wheel alone into dist/, the tree's
    ``git status`` stays clean (what the build writes there is git-ignored), and the wheel its next line installs
    loads its bundled library; the last line pins the build extra's Taichi."""
    import glob
    import os

    from conftest import ROOT

    if not os.path.exists(os.path.join(ROOT, ".git")):  # a worktree's .git is a file
        pytest.skip("not a git checkout (an unpacked sdist)")
    build, install, extra = _readme_install_lines()
    assert build == "python -m pip wheel --no-deps -w dist ." and install == "pip install dist/taichi_aot-*.whl"
    assert extra == "pip install taichi==1.7.4"
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", ROOT, str(clone)], check=True, capture_output=True, timeout=300)
    proc = subprocess.run([sys.executable, *build.split()[1:]], cwd=clone, capture_output=True, text=True,
                          timeout=900)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    [wheel] = glob.glob(str(clone / "dist" / "*"))
    assert os.path.basename(wheel).startswith("taichi_aot-") and wheel.endswith("-cp39-abi3-linux_x86_64.whl")
    status = subprocess.run(["git", "status", "--porcelain"], cwd=clone, capture_output=True, text=True, check=True)
    assert status.stdout == ""
    site = tmp_path / "site"  # the wheel alone (its numpy and cffi are this Python's)
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site), wheel],
                   check=True, capture_output=True, timeout=300)
    code = "import taichi_aot; from taichi_aot import capi; print(taichi_aot.__file__, capi.library.source)"
    ran = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(site), "PYTHONSAFEPATH": "1"})
    assert ran.returncode == 0, ran.stderr[-2000:]
    assert ran.stdout.split() == [str(site / "taichi_aot" / "__init__.py"), "bundled"]


def test_a_source_tree_never_built_says_it_hides_the_installed_package(tmp_path):
    """``import taichi_aot`` and ``python -m taichi_aot`` run inside a clone whose compiled parts were never built
    (after the README's install, from the clone's folder) say that the source tree hides the installed package and
    what to do; before, they failed with "No module named 'taichi_aot._native'". Here this checkout stands for the
    installed package, and ``-S`` keeps the editable install's finder of this venv out (a wheel has none)."""
    import os
    import shutil
    import sysconfig

    from conftest import ROOT

    clone = tmp_path / "clone"
    shutil.copytree(os.path.join(ROOT, "taichi_aot"), clone / "taichi_aot",
                    ignore=shutil.ignore_patterns("*.so", "_lib", "__pycache__"))
    assert not list((clone / "taichi_aot").glob("_native*.so"))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([sysconfig.get_paths()["purelib"], ROOT])}
    env.pop("PYTHONSAFEPATH", None)
    installed = os.path.join(ROOT, "taichi_aot")
    for args in (["-c", "import taichi_aot"], ["-m", "taichi_aot", "archs"]):
        ran = subprocess.run([sys.executable, "-S", *args], cwd=clone, capture_output=True, text=True, timeout=120,
                             env=env)
        assert ran.returncode == 1, ran.stderr
        text = " ".join(ran.stderr.split())
        assert "No module named" not in text, text
        assert (f"ImportError: taichi_aot was imported from {clone / 'taichi_aot'}, a source tree whose compiled parts "
                f"(taichi_aot/_native) were never built: Python finds it before the taichi_aot installed in this "
                f"Python ({installed}), because {clone} is the current folder or on sys.path. Run Python from another "
                f"folder to use the installed package, or build this tree in place: pip install -e . (or bash "
                f"scripts/setup.sh) in {clone}") in text, text
    elsewhere = tmp_path / "elsewhere"  # what it says to do: from another folder, the installed package imports
    elsewhere.mkdir()
    ran = subprocess.run([sys.executable, "-S", "-c", "import taichi_aot; print(taichi_aot.__file__)"], cwd=elsewhere,
                         capture_output=True, text=True, timeout=120, env=env)
    assert ran.returncode == 0 and ran.stdout.strip() == os.path.join(installed, "__init__.py"), ran.stderr
