"""taichi_aot where apps ship and services run: a program frozen by PyInstaller (no options: the package's hook),
another freezer's program that calls ``taichi_aot.freeze_support()``, one that does neither, HOME unset, a cache
folder that cannot be written. In each, the package's child processes (its probes, a module's first check) run the
package's code, never the program's own script, and what was not found by such a child is not kept."""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
import textwrap

import pytest

from conftest import ROOT, require_arch, require_extra
from taichi_aot import Arch

MODULE = os.path.join(ROOT, "examples", "physics.tcm")  # step(x, dt) and step4, x64 and Vulkan parts
#: The app: one line in APP_LOG each time its script runs (a child that ran it again would add one), the best arch
#: here (every arch probed), then the kernel and the graph on each arch named; with APP_POOL set, a pool instead.
APP = textwrap.dedent('''
    import os
    import sys

    {before}
    import numpy as np

    from taichi_aot import Runtime, best_arch

    with open(os.environ["APP_LOG"], "a") as log:
        log.write(f"{{os.getpid()}}\\n")
    if os.environ.get("APP_POOL"):  # a pool, and no multiprocessing.freeze_support() first
        from taichi_aot.pool import Pool

        with Pool(arch="x64", workers=2) as pool:
            print("pool", pool.map(abs, [-1]), flush=True)
        sys.exit(0)
    print("best", best_arch().name, flush=True)  # every arch probed
    for arch in sys.argv[2:]:
        with Runtime(arch) as rt:
            mod = rt.load_module(sys.argv[1])
            x = rt.ndarray((4,), np.float32)
            mod.kernels["step"](x, 0.5)
            mod.graphs["step4"](x=x, dt=0.5)
            rt.wait()
            print(arch, x.to_numpy().tolist(), flush=True)
''')
RIGHT = [0.0, 2.5, 5.0, 7.5]  # step then step4 at dt 0.5: x[i] = 5 * 0.5 * i


def _ran(proc: subprocess.CompletedProcess, log: str, archs: list[str]) -> None:
    """The app ran right on each arch, its script once."""
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    for arch in archs:
        assert f"{arch} {RIGHT}" in proc.stdout, proc.stdout
    with open(log) as f:
        assert len(f.read().split()) == 1, "the app's script ran again in a child process"


def _cached(cache: str) -> tuple[list[str], list[str]]:
    """The probe answers and module verdicts kept in the cache folder ``cache``."""
    return glob.glob(os.path.join(cache, "probe-*.json")), glob.glob(os.path.join(cache, "modules", "*.txt"))


def test_home_unset_imports_and_runs(tmp_path):
    """libtaichi_c_api's static initialisers abort where HOME is unset (env -i, systemd units): the package gives
    it the user's home first."""
    require_arch(Arch.X64)
    log = tmp_path / "log"
    proc = subprocess.run(["env", "-i", "PATH=/usr/bin:/bin", f"APP_LOG={log}", f"TAICHI_AOT_CACHE={tmp_path}/c",
                           sys.executable, "-c", APP.format(before=""), MODULE, "x64"],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    _ran(proc, str(log), ["x64"])


def test_an_unwritable_cache_falls_back_to_a_private_temporary_one(tmp_path):
    code = ("import json, taichi_aot; from taichi_aot._cache import cache_home; from taichi_aot import capi; "
            "capi.arch_status(); print(json.dumps(cache_home()))")
    env = {**os.environ, "TAICHI_AOT_CACHE": "/proc/taichi_aot-cache"}  # not even root writes there
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    folder = json.loads(proc.stdout.splitlines()[-1])
    assert folder.startswith(os.path.realpath(os.environ.get("TMPDIR", "/tmp"))) and f"-{os.getuid()}" in folder
    assert os.stat(folder).st_mode & 0o777 == 0o700 and _cached(folder)[0]


def test_a_frozen_app_that_serves_no_child_answers_in_process_and_keeps_nothing(vulkan, tmp_path):
    """A freezer's app that calls no freeze_support(): no child runs its script; the CPU and Vulkan archs are
    answered in the process; nothing is cached (it asks again next start)."""
    require_arch(Arch.X64)
    cache, log = tmp_path / "cache", tmp_path / "log"
    script = tmp_path / "app.py"
    script.write_text(APP.format(before="sys.frozen = True  # as a freezer marks its programs"))
    archs = ["x64", "vulkan"]
    env = {**os.environ, "APP_LOG": str(log), "TAICHI_AOT_CACHE": str(cache)}
    proc = subprocess.run([sys.executable, str(script), MODULE, *archs], capture_output=True, text=True, timeout=300,
                          env=env)
    _ran(proc, str(log), archs)
    assert _cached(str(cache)) == ([], [])


def test_freeze_support_serves_the_packages_children(tmp_path):
    """Another freezer's app (its executable is the app: a launcher script here) that calls
    taichi_aot.freeze_support() first: the package's children run in it, its script runs once, and their answers
    are kept."""
    require_arch(Arch.X64)
    cache, log = tmp_path / "cache", tmp_path / "log"
    script, launcher = tmp_path / "app.py", tmp_path / "app"
    script.write_text(APP.format(before=f"sys.frozen, sys.executable = True, {str(launcher)!r}\n"
                                 "import taichi_aot\ntaichi_aot.freeze_support()"))
    launcher.write_text(f"#!/bin/sh\nexec {sys.executable} {script} \"$@\"\n")
    launcher.chmod(0o755)
    env = {**os.environ, "APP_LOG": str(log), "TAICHI_AOT_CACHE": str(cache)}
    proc = subprocess.run([str(launcher), MODULE, "x64"], capture_output=True, text=True, timeout=300, env=env)
    _ran(proc, str(log), ["x64"])
    probes, verdicts = _cached(str(cache))
    assert len(probes) == 1 and len(verdicts) == 1
    _ignores_child_variable_from_outside([str(launcher), MODULE, "x64"], env, tmp_path)
    _a_pool_without_freeze_support_stops_once([str(launcher)], env, tmp_path)
    with open(probes[0]) as f:  # an entry: its digest's line, then the answer
        assert any(row[0] == "X64" and row[1] for row in json.loads(f.read().partition("\n")[2])["rows"])
    with open(verdicts[0]) as f:
        assert f.read().partition("\n")[2] == ""  # the module is sound, as its child found


@pytest.mark.parametrize("form", ["onedir", "onefile"])
def test_a_pyinstaller_app_runs_with_no_options(form, fresh_venv, vulkan, tmp_path):
    """An app frozen by PyInstaller with no options (the wheel's hook collects the library and serves the
    package's children), one folder or one file, run from another folder with HOME unset and with it set: its
    kernels right on x64 and Vulkan, its script run once a start, the probe kept once (a one-file app unpacks into a
    new folder each start: the cache's keys name the library by its build id)."""
    require_arch(Arch.X64)
    fresh_venv.link("pyinstaller")
    build = tmp_path / "build"
    build.mkdir()
    (build / "app.py").write_text(APP.format(before=""))
    proc = fresh_venv.run(["-m", "PyInstaller", "--noconfirm", f"--{form}", "--log-level", "ERROR", "app.py"],
                          cwd=str(build), timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    app = str(build / "dist" / "app" / "app") if form == "onedir" else str(build / "dist" / "app")
    collected = _collected(str(build))
    assert {"taichi_aot", "taichi_aot._probe", "taichi_aot.backends.cuda"} <= collected
    assert not [m for m in collected if m.startswith(("taichi_aot.cli", "taichi_aot.__main__", "taichi_aot_bench"))]
    if form == "onedir":
        _lean_beside_taichi_and_jax(fresh_venv, build, tmp_path)
    archs = ["x64", "vulkan"]
    elsewhere, cache = tmp_path / "elsewhere", tmp_path / "cache"
    elsewhere.mkdir()
    for i, home in enumerate((None, str(tmp_path))):
        log = tmp_path / f"log{i}"
        env = ["env", "-i", "PATH=/usr/bin:/bin", f"APP_LOG={log}", f"TAICHI_AOT_CACHE={cache}",
               *([f"HOME={home}"] if home else [])]
        ran = subprocess.run([*env, app, MODULE, *archs], capture_output=True, text=True, timeout=300,
                             cwd=str(elsewhere))
        _ran(ran, str(log), archs)
    probes, verdicts = _cached(str(cache))
    assert len(probes) == 1 and len(verdicts) == 1  # one probe for both starts; the x64 part checked once
    _ignores_child_variable_from_outside([app, MODULE, "x64"], {**os.environ, "TAICHI_AOT_CACHE": str(cache)},
                                         tmp_path)
    _a_pool_without_freeze_support_stops_once([app], {**os.environ, "TAICHI_AOT_CACHE": str(cache)}, tmp_path)


def _a_pool_without_freeze_support_stops_once(command: list[str], env: dict[str, str], tmp_path) -> None:
    """A frozen app that makes a pool without calling multiprocessing.freeze_support() first: its workers run the
    app's script, make no pool of their own and exit; the app stops with one error naming the fix. The script ran in
    the app, its two workers and multiprocessing's resource tracker at most, not again and again."""
    log = tmp_path / "pool-log"
    ran = subprocess.run(command, capture_output=True, text=True, timeout=300,
                         env={**env, "APP_LOG": str(log), "APP_POOL": "1"})
    assert ran.returncode != 0 and "pool [" not in ran.stdout
    assert ran.stderr.count("WorkerStartError: ") == 1, ran.stderr[-3000:]
    assert ran.stderr.count("call multiprocessing.freeze_support() first thing") == 1, ran.stderr[-3000:]
    with open(log) as f:
        assert 1 < len(f.read().split()) <= 4


#: What TAICHI_AOT_CHILD set from outside may hold: code, as the variable once held, and the form the package uses
#: (an inherited pipe and its token) where no such pipe was handed down.
PLANTED = ["import sys; print('planted', flush=True); sys.exit(7)", f"3:{'0' * 32}", f"9:{'0' * 32}"]


def _ignores_child_variable_from_outside(command: list[str], env: dict[str, str], tmp_path) -> None:
    """A frozen app started with TAICHI_AOT_CHILD set by someone other than taichi_aot runs as the app, nothing
    else: its script once, its results right."""
    for i, planted in enumerate(PLANTED):
        log = tmp_path / f"planted{i}"
        ran = subprocess.run(command, capture_output=True, text=True, timeout=300,
                             env={**env, "APP_LOG": str(log), "TAICHI_AOT_CHILD": planted})
        assert "planted" not in ran.stdout
        _ran(ran, str(log), command[2:])


def test_a_child_is_one_the_package_handed_its_code_with_its_token():
    """The code comes from an inherited pipe whose content begins with the variable's token: another token, a file
    that is no pipe, a standard stream or a variable without a pipe is no child of the package."""
    from taichi_aot._child import child_code

    def pipe(content: bytes) -> int:
        read, write = os.pipe()
        os.write(write, content)
        os.close(write)
        return read

    token, other, code = "ab" * 16, "cd" * 16, b"\nprint(1)"
    assert child_code(f"{pipe(token.encode() + code)}:{token}") == "print(1)"
    assert child_code(f"{pipe(other.encode() + code)}:{token}") is None
    assert child_code(f"{pipe(token.encode())}:{other}") is None
    with open(__file__, "rb") as f:
        assert child_code(f"{f.fileno()}:{token}") is None
    read, write = os.pipe()  # the right content, but its writer still there: not the package's pipe, not waited on
    os.write(write, token.encode() + code)
    assert child_code(f"{read}:{token}") is None
    os.close(write)
    short = pipe(b"x")
    for handed in (None, "", "print(1)", f"0:{token}", f"{short}:short", f"999:{token}"):
        assert child_code(handed) is None
    os.close(short)


def test_the_pyinstaller_hook_collects_what_the_package_runs_with_alone():
    """The hook collects the package's modules but the command line (``__main__``, ``cli``: Taichi's compiler for
    ``build``, the bench), PyInstaller's hooks and the interop modules (torch, jax at their top); keeps Taichi, torch,
    jax and the bench out of what the package's own modules import (an app that imports one itself gets it as
    usual); and its data is the bundled library alone."""
    require_extra("PyInstaller", "package")
    import runpy

    hook = runpy.run_path(os.path.join(ROOT, "taichi_aot", "_pyinstaller", "hook-taichi_aot.py"))
    hidden = set(hook["hiddenimports"])
    assert {"_cffi_backend", "taichi_aot._probe", "taichi_aot._child", "taichi_aot._cache", "taichi_aot.backends.cuda",
            "taichi_aot.ptx.compile", "taichi_aot.pool._worker", "taichi_aot.metadata.spirv"} <= hidden
    left_out = ("taichi_aot.cli", "taichi_aot.__main__", "taichi_aot.torch", "taichi_aot.jax",
                "taichi_aot._pyinstaller")
    assert not [m for m in hidden if m.startswith(left_out)]
    assert {"taichi", "torch", "jax", "taichi_aot_bench", *left_out} <= set(hook["excludedimports"])
    assert hook["datas"] and all(dest.startswith(os.path.join("taichi_aot", "_lib")) for _, dest in hook["datas"])
    assert any(src.endswith("libtaichi_c_api.so") for src, _ in hook["binaries"] + hook["datas"])


@pytest.mark.parametrize("kept", ["no _lib", "_lib without its shared libraries"])
def test_a_frozen_app_without_the_library_says_what_its_freezer_left_out(kept, tmp_path):
    """A freezer that left out taichi_aot/_lib (or, as Nuitka's package data does, its shared libraries): the
    ImportError names what is missing and how each freezer puts it in, not a build made without the library."""
    import shutil

    import _cffi_backend
    import cffi
    import numpy

    import taichi_aot

    app = tmp_path / "app"  # the package and what it imports, as a freezer lays them out: no taichi wheel beside
    shutil.copytree(os.path.dirname(taichi_aot.__file__), app / "taichi_aot", ignore=shutil.ignore_patterns("_lib"))
    if kept != "no _lib":
        (app / "taichi_aot" / "_lib" / "runtime").mkdir(parents=True)
    for module in (numpy, cffi):
        os.symlink(os.path.dirname(module.__file__), app / module.__name__)
    os.symlink(_cffi_backend.__file__, app / os.path.basename(_cffi_backend.__file__))
    code = f"import sys; sys.path.insert(0, {str(app)!r}); sys.frozen = True\nimport taichi_aot"
    proc = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True, timeout=120,
                          env={k: v for k, v in os.environ.items() if k != "TAICHI_C_API_INSTALL_DIR"})
    assert proc.returncode != 0 and "ImportError" in proc.stderr
    said = proc.stderr[proc.stderr.index("ImportError"):]
    assert "TAICHI_AOT_BUNDLE=0" not in said
    assert ("left out taichi_aot/_lib" if kept == "no _lib" else "left out the bundled library's shared") in said
    assert "--include-package-data=taichi_aot" in said and "include_files" in said


#: A PyInstaller spec that analyses the app alone (no build) and writes what it would collect, and its size.
ANALYSIS = textwrap.dedent('''
    import json, os
    a = Analysis(["app.py"])
    toc = [*a.pure, *a.binaries, *a.datas]
    json.dump({"modules": sorted(n for n, _, _ in a.pure),
               "bytes": sum(os.path.getsize(p) for _, p, _ in toc if p and os.path.isfile(p))}, open(OUT, "w"))
''')


def _analysed(fresh_venv, build, name: str, pythonpath: str = "") -> dict:
    """What PyInstaller would collect for the app in ``build`` (its analysis alone), with ``pythonpath`` on sys.path."""
    (build / f"{name}.spec").write_text(f"OUT = {str(build / (name + '.json'))!r}\n" + ANALYSIS)
    env = {k: v for k, v in os.environ.items() if k != "TAICHI_C_API_INSTALL_DIR"}
    proc = subprocess.run([fresh_venv.python, "-m", "PyInstaller", "--noconfirm", "--log-level", "ERROR",
                           "--workpath", str(build / f"work-{name}"), f"{name}.spec"], cwd=str(build),
                          capture_output=True, text=True, timeout=600,
                          env={**env, "PYTHONPATH": pythonpath, "PYTHONSAFEPATH": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    with open(build / f"{name}.json") as f:
        return json.load(f)


def _lean_beside_taichi_and_jax(fresh_venv, build, tmp_path) -> None:
    """The same app analysed where Taichi (the build extra) and JAX are installed too: the hook keeps them out, so
    it collects none of their modules and stays within 1.1x the size of the app without them."""
    alone = _analysed(fresh_venv, build, "alone")
    beside = tmp_path / "beside"
    for name in ("taichi", "jax"):
        fresh_venv.link(name, into=str(beside))
    both = _analysed(fresh_venv, build, "beside", str(beside))
    assert not [m for m in both["modules"] if m.split(".")[0] in ("taichi", "jax", "jaxlib", "torch")]
    assert both["bytes"] <= 1.1 * alone["bytes"], (alone["bytes"], both["bytes"])


def _collected(build: str) -> set[str]:
    """The modules a PyInstaller build put in its app's archive (its PYZ table in the build folder)."""
    import ast

    [toc] = glob.glob(os.path.join(build, "build", "app", "PYZ-*.toc"))
    with open(toc) as f:
        return {entry[0] for entry in ast.literal_eval(f.read())[-1]}


def test_a_module_shipped_as_package_data_loads_from_a_zipped_package(modules, tmp_path, monkeypatch):
    """A library ships its modules as package data, read through importlib.resources: here from a package imported
    out of a zip archive (its resources are no files on disk), a multi-arch file and a module folder."""
    import importlib
    import importlib.resources
    import zipfile

    import numpy as np

    from taichi_aot import MissingFileError, Runtime

    require_arch(Arch.X64)
    archive = tmp_path / "shipped.zip"
    folder = modules.path(Arch.X64)
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("shipped_kernels/__init__.py", "")
        z.write(MODULE, "shipped_kernels/physics.tcm")
        for name in sorted(os.listdir(folder)):
            z.write(os.path.join(folder, name), f"shipped_kernels/x64/{name}")
    monkeypatch.syspath_prepend(str(archive))
    importlib.invalidate_caches()
    files = importlib.resources.files("shipped_kernels")
    assert not isinstance(files, os.PathLike)  # a zip's resource: no path to hand the library
    with Runtime.for_module(files / "physics.tcm") as rt:
        x = rt.ndarray((4,), np.float32)
        rt.load_module(files / "physics.tcm").kernels["step"](x, 0.5)
        rt.wait()
        assert x.to_numpy().tolist() == [0.0, 0.5, 1.0, 1.5]
    with Runtime(Arch.X64) as rt:
        mod = rt.load_module(files / "x64")
        assert "add" in mod.kernels
        with pytest.raises(MissingFileError):
            rt.load_module(files / "nothing.tcm")


def test_a_module_as_build_wrote_it_loads_with_no_child(tmp_path):
    """build seals each LLVM part it makes (the digest of its files in its taichi_aot.json): such a module's first
    load needs no child process (nothing kept in the cache's module verdicts); a changed file breaks the seal, and the
    child checks it as any module."""
    require_arch(Arch.X64)
    source = tmp_path / "k.py"
    source.write_text("import taichi as ti\n\n\n@ti.aot.export\n@ti.kernel\n"
                      "def step(x: ti.types.ndarray(dtype=ti.f32, ndim=1)):\n    for i in x:\n        x[i] += 1.0\n")
    out = tmp_path / "k"
    proc = subprocess.run([sys.executable, "-m", "taichi_aot", "build", str(source), "--arch", "x64", "-o", str(out),
                           "--no-access"], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    with open(out / "taichi_aot.json") as f:
        assert len(json.load(f)["files_sha256"]) == 64
    code = ("import sys, numpy as np; from taichi_aot import Runtime\n"
            "with Runtime('x64') as rt:\n    x = np.zeros(3, np.float32)\n"
            "    rt.load_module(sys.argv[1]).kernels['step'](x)\n    print(x.tolist())")
    for changed, verdicts in ((False, 0), (True, 1)):
        if changed:
            with open(out / "step.ll", "a") as f:
                f.write("\n; changed\n")
        cache = tmp_path / f"cache-{changed}"
        ran = subprocess.run([sys.executable, "-c", code, str(out)], capture_output=True, text=True, timeout=300,
                             env={**os.environ, "TAICHI_AOT_CACHE": str(cache)})
        assert ran.returncode == 0 and ran.stdout.strip() == "[1.0, 1.0, 1.0]", ran.stderr[-2000:]
        assert len(_cached(str(cache))[1]) == verdicts
