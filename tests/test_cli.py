"""The command line, run as a user runs it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from conftest import interruptible
from taichi_aot import Arch


def run_cli(*args, env=None, timeout=300):
    full = {**os.environ, **(env or {})}
    return subprocess.run([sys.executable, "-m", "taichi_aot", *args], capture_output=True, text=True,
                          timeout=timeout, env=full)


def test_archs_lists_every_backend():
    out = run_cli("archs")
    assert out.returncode == 0, out.stderr
    assert "x64      available" in out.stdout
    for name in ("vulkan", "cuda", "metal", "opengl", "arm64"):
        assert name in out.stdout
    assert "C-API 1007000" in out.stdout


@pytest.mark.parametrize("arch_name", ["x64", "vulkan"])
def test_demo_writes_a_picture(arch_name, tmp_path):
    from conftest import require_arch

    require_arch(Arch[arch_name.upper()])
    png = tmp_path / "demo.png"
    out = run_cli("demo", "--arch", arch_name, "--size", "48", "--steps", "64", "--out", str(png),
                  env={"TAICHI_AOT_CACHE": str(tmp_path / "cache")})
    assert out.returncode == 0, out.stderr
    assert f"on {arch_name}" in out.stdout and "steps/s" in out.stdout
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and b"IHDR" in data and len(data) > 200
    # width and height from the IHDR chunk
    assert int.from_bytes(data[16:20], "big") == 48 and int.from_bytes(data[20:24], "big") == 48
    # second run uses the cached module
    again = run_cli("demo", "--arch", arch_name, "--size", "32", "--steps", "16", "--out", str(png),
                    env={"TAICHI_AOT_CACHE": str(tmp_path / "cache")})
    assert again.returncode == 0, again.stderr
    # the same picture every run (its first state made by a fixed seed, not drawn in a parallel loop)
    third = run_cli("demo", "--arch", arch_name, "--size", "48", "--steps", "64", "--out", str(tmp_path / "3.png"),
                    env={"TAICHI_AOT_CACHE": str(tmp_path / "cache")})
    assert third.returncode == 0 and (tmp_path / "3.png").read_bytes() == data, third.stderr


def test_version_names_the_package_and_the_library():
    from taichi_aot import __version__, capi

    out = run_cli("--version")
    assert out.returncode == 0 and out.stdout.strip() == (
        f"taichi_aot {__version__}, libtaichi_c_api C-API 1007000 ({capi.library.source}: {capi.library.path})")


def test_demo_bad_input(tmp_path):
    assert run_cli("demo", "--size", "4").returncode == 2
    out = run_cli("demo", "--arch", "quantum", "--out", str(tmp_path / "x.png"))
    assert out.returncode == 2 and "unknown arch" in out.stderr and "Traceback" not in out.stderr
    out = run_cli("demo", "--arch", "vulkn", "--out", str(tmp_path / "x.png"))
    assert out.returncode == 2 and "did you mean 'vulkan'?" in out.stderr and "Traceback" not in out.stderr
    assert run_cli("nonsense").returncode == 2


HERE = os.path.dirname(os.path.abspath(__file__))


def test_each_command_checks_its_own_options(capsys):
    from taichi_aot.cli import main

    with pytest.raises(SystemExit) as exit_:
        main(["demo", "--steps", "8"])
    assert exit_.value.code == 2 and "--size must be at least 32 and --steps at least 16" in capsys.readouterr().err
    assert main(["stubs", os.path.join(HERE, "no-such-module"), "-o", "-"]) == 2  # demo's limits are not its own


def test_the_pictures_help_names_the_file_written_by_default(capsys):
    """``demo --help`` and ``sweep --help`` say which PNG ``--out`` writes when it is not given."""
    from taichi_aot.cli import main

    for command in ("demo", "sweep"):
        with pytest.raises(SystemExit) as exit_:
            main([command, "--help"])
        assert exit_.value.code == 0
        text = " ".join(capsys.readouterr().out.split())
        assert f"--out OUT PNG to write (default taichi_aot_{command}.png)" in text, text


def test_console_script_and_module_run_the_same_main():
    script = os.path.join(os.path.dirname(sys.executable), "taichi-aot")
    if not os.path.exists(script):
        pytest.skip("no taichi-aot console script next to this Python (not installed with pip)")
    out = subprocess.run([script, "archs"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout == run_cli("archs").stdout, out.stderr


@pytest.mark.parametrize("arch", [Arch.X64, Arch.VULKAN], ids=["x64", "vulkan"])
def test_info_describes_a_module(arch, modules):
    import json

    for source in (modules.path(arch), modules.path(arch, tcm=True)):
        out = run_cli("info", source)
        assert out.returncode == 0, out.stderr
        assert "format " + ("llvm" if arch == Arch.X64 else "gfx") + " (Taichi 1.7.4)" in out.stdout
        assert "add_twice (2 dispatches)" in out.stdout
        assert "f32 ndarray with ndim 1, element shape (3,)" in out.stdout  # scale_vec3
        doc = json.loads(run_cli("info", source, "--json").stdout)
        assert doc["arch"] == ("x64" if arch == Arch.X64 else None)
        assert set(doc["kernels"]) >= {"add", "fill_i32", "typed_scalars"}
        assert [a["dtype"] for a in doc["kernels"]["typed_scalars"]] == ["f64", "i16", "u16", "f16", "i32"]
        assert [a["name"] for a in doc["graphs"]["add_twice"]["args"]] == ["x", "y", "a"]
        if arch == Arch.VULKAN:
            assert "0  tex            2-D rw-texture of format r32f" in out.stdout
            assert doc["kernels"]["add"][2]["name"] == "a"


def test_info_and_stubs_bad_input(tmp_path):
    (tmp_path / "junk.tcm").write_bytes(b"not a zip")
    for cmd in (["info"], ["stubs", "-o", str(tmp_path / "s.pyi")]):
        missing = run_cli(*cmd[:1], str(tmp_path / "nope"), *cmd[1:])
        assert missing.returncode == 2 and "no module at" in missing.stderr and "Traceback" not in missing.stderr
        junk = run_cli(*cmd[:1], str(tmp_path / "junk.tcm"), *cmd[1:])
        assert junk.returncode == 2 and "CorruptedDataError" in junk.stderr and "Traceback" not in junk.stderr


def test_build_then_run_through_taichi_aot(tmp_path):
    import numpy as np

    from taichi_aot import Runtime

    sample = os.path.join(HERE, "export_sample.py")
    for arch_name, out in (("x64", tmp_path / "deep" / "x64_module"), ("vulkan", tmp_path / "more" / "v.tcm")):
        proc = run_cli("build", sample, "--arch", arch_name, "-o", str(out))
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "kernels saxpy, scale_f64; graphs saxpy_twice" in proc.stdout
        with Runtime(getattr(Arch, arch_name.upper())) as rt:
            mod = rt.load_module(str(out))
            assert sorted(mod.kernel_names()) == ["saxpy", "scale_f64"]
            x = rt.ndarray_from_numpy(np.arange(8, dtype=np.float32))
            y = rt.ndarray_from_numpy(np.ones(8, np.float32))
            mod.kernels["saxpy"](x, y, 2.0)
            mod.graphs["saxpy_twice"](x=x, y=y, a=1.0)
            m = rt.ndarray_from_numpy(np.full((2, 3), 1.5))
            mod.kernels["scale_f64"](m, 4.0)
            rt.wait()
            assert np.array_equal(y.to_numpy(), 1 + 4 * np.arange(8, dtype=np.float32))
            assert np.array_equal(m.to_numpy(), np.full((2, 3), 6.0))


def test_build_bad_input(tmp_path):
    empty = tmp_path / "nothing.py"
    empty.write_text("import taichi as ti\n")
    broken = tmp_path / "broken.py"
    broken.write_text("raise RuntimeError('boom')\n")
    cases = [
        (["build", str(tmp_path / "missing.py"), "--arch", "x64", "-o", str(tmp_path / "o")], "no such file"),
        (["build", str(empty), "--arch", "x64", "-o", str(tmp_path / "o")], "exports nothing"),
        (["build", str(broken), "--arch", "x64", "-o", str(tmp_path / "o")], "RuntimeError: boom"),
        (["build", os.path.join(HERE, "export_sample.py"), "--arch", "riscv", "-o", str(tmp_path / "o")],
         "unknown arch"),
        (["build", os.path.join(HERE, "export_sample.py"), "--arch", "vulkn", "-o", str(tmp_path / "o")],
         "unknown arch 'vulkn': did you mean 'vulkan'?"),
        (["build", os.path.join(HERE, "export_sample.py"), "--arch", "gpu", "-o", str(tmp_path / "o")],
         "taichi_aot names backends, not device kinds: for a GPU use 'cuda' (NVIDIA) or 'vulkan'"),
        (["build", os.path.join(HERE, "export_sample.py"), "-o", str(tmp_path / "o")],
         "no arch given: name the backends to compile for with --arch, e.g. --arch x64 vulkan"),
        (["info", os.path.join(HERE, "export_sample.py")], "is Python source, not a module compiled from it"),
        (["info", os.path.join(HERE, "export_sample.py")], "python -m taichi_aot build"),
    ]
    for args, text in cases:
        proc = run_cli(*args)
        assert proc.returncode == 2 and text in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    deep = tmp_path / "new" / "folders" / "m.tcm"  # a failed build leaves no folder it made for its output
    proc = run_cli("build", str(broken), "--arch", "x64", "-o", str(deep))
    assert proc.returncode == 2 and not (tmp_path / "new").exists(), proc.stderr


def test_build_never_replaces_an_input_or_a_file_of_the_users(tmp_path):
    """-o naming the source (itself, by another spelling, through a link), a module given with --with, a file that is
    no module or a folder of other files: refused (exit 2, the path named), every byte left as it was; -o naming a
    module built before replaces it; an output nobody can write says so of the path given."""
    source = tmp_path / "physics.py"
    shutil.copyfile(os.path.join(HERE, "export_sample.py"), source)
    before = source.read_bytes()
    (tmp_path / "link.tcm").symlink_to(source)
    notes = tmp_path / "notes.txt"
    notes.write_text("mine\n")
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "a.txt").write_text("mine\n")
    built = tmp_path / "v.tcm"
    first = run_cli("build", str(source), "--arch", "vulkan", "-o", str(built))
    assert first.returncode == 0, first.stderr
    cases = [
        (["--arch", "x64", "vulkan", "-o", str(source)], "is one of the build's inputs"),
        (["--arch", "x64", "-o", str(source)], "is one of the build's inputs"),
        (["--arch", "x64", "-o", str(tmp_path / "." / "physics.py")], "is one of the build's inputs"),
        (["--arch", "x64", "-o", str(tmp_path / "link.tcm")], "is one of the build's inputs"),
        (["--arch", "x64", "--with", f"vulkan={built}", "-o", str(built)], "is one of the build's inputs"),
        (["--arch", "x64", "-o", str(notes)], "is a file that is not a taichi_aot module"),
        (["--arch", "vulkan", "-o", str(folder)], "is a folder of other files"),
        (["--arch", "x64", "vulkan", "-o", str(tmp_path)], "is a folder; a module for several archs is one file"),
        (["--arch", "x64", "-o", "/proc/p.tcm"], "-o /proc/p.tcm: cannot write there"),
    ]
    for args, text in cases:
        proc = run_cli("build", str(source), *args)
        assert proc.returncode == 2 and text in proc.stderr and "Traceback" not in proc.stderr, (args, proc.stderr)
        assert ".taichi_aot_build_" not in proc.stderr
    assert source.read_bytes() == before and notes.read_text() == "mine\n"
    assert sorted(os.listdir(folder)) == ["a.txt"] and os.path.islink(tmp_path / "link.tcm")
    again = run_cli("build", str(source), "--arch", "x64", "vulkan", "-o", str(built))  # a module: replaced
    assert again.returncode == 0 and "multi-arch" in again.stdout, again.stderr
    from taichi_aot.metadata import read_module

    assert read_module(str(built)).parts


def test_cache_says_what_each_action_does_and_counts_each_entry(tmp_path):
    """``cache --help`` explains list and clear; ``cache`` counts each module verdict and PTX entry, not their
    folders; ``cache clear`` removes them and their folders."""
    helped = run_cli("cache", "--help")
    assert helped.returncode == 0 and "list (the default)" in helped.stdout and "clear: remove" in helped.stdout
    root = tmp_path / "cache"
    for name in ("modules/a.txt", "modules/b.txt", "ptx/m1/k.ptx", "probe-1.json"):
        (root / name).parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        (root / name).write_text("")
    os.chmod(root, 0o700)
    env = {"TAICHI_AOT_CACHE": str(root)}
    listed = run_cli("cache", env=env)
    assert listed.returncode == 0 and "module verdicts: 2" in listed.stdout and "PTX made at load: 1" in listed.stdout
    cleared = run_cli("cache", "clear", env=env)
    assert cleared.returncode == 0 and "removed 4 entries" in cleared.stdout, cleared.stdout + cleared.stderr
    assert not (root / "modules").exists() and not (root / "ptx").exists()


def test_bench_check_of_a_backend_not_here_fails():
    from taichi_aot import capi

    missing = next((a for a in ("cuda", "vulkan") if not capi.arch_status()[Arch[a.upper()]].available), None)
    if missing is None:
        pytest.skip("CUDA and Vulkan are both here")
    proc = run_cli("bench", "--quick", "--arch", missing, "--sections", "launch", "--check")
    assert proc.returncode == 1 and f"{missing} not available here" in proc.stderr, proc.stdout + proc.stderr


@pytest.mark.parametrize("arch", [Arch.X64, Arch.VULKAN], ids=["x64", "vulkan"])
def test_stubs_are_valid_typed_python(arch, modules, tmp_path):
    import inspect

    out = tmp_path / "stubs" / "mod.pyi"
    out.parent.mkdir()  # stubs makes no folder: a missing one is a mistake in the path
    proc = run_cli("stubs", modules.path(arch, tcm=True), "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    text = out.read_text()
    namespace: dict = {}
    exec(compile(text, str(out), "exec"), namespace)  # valid Python whose annotations resolve
    add = inspect.signature(namespace["Kernel_add"].__call__)
    graph = inspect.signature(namespace["Graph_add_twice"].__call__)
    assert [p.kind for p in graph.parameters.values()][1:] == [inspect.Parameter.KEYWORD_ONLY] * 3
    assert list(graph.parameters)[1:] == ["x", "y", "a"]
    if arch == Arch.VULKAN:
        assert list(add.parameters) == ["self", "x", "y", "a"]
        assert "def __call__(self, tex: Image | Texture, v: float | np.floating, w: int | np.integer" in text
    else:
        assert [p.kind for p in add.parameters.values()][1:] == [inspect.Parameter.POSITIONAL_ONLY] * 3
    assert "add_c80_0" not in text  # graph-internal kernels are not part of the module's surface
    assert "def __getitem__(self, name: Literal['add']) -> Kernel_add" in text


def test_every_user_mistake_is_one_line_and_exit_2(tmp_path, modules):
    readme = os.path.join(os.path.dirname(HERE), "README.md")
    (tmp_path / "folder").mkdir()
    module = modules.path(Arch.X64)
    cases = [
        ["build", readme, "--arch", "x64", "-o", str(tmp_path / "o")],  # not Python: was an AttributeError traceback
        ["demo", "--out", "/nonexistent/x.png"],  # refused before the run, not after it
        ["demo", "--out", str(tmp_path / "folder")],
        ["stubs", module, "-o", str(tmp_path / "folder")],
        ["stubs", module, "-o", str(tmp_path / "missing" / "dir" / "x.pyi")],  # no folder is made for it
        ["bench", "--quick", "--json", "/nonexistent/r.json"],
        ["info", str(tmp_path / "folder")],  # a folder that is no module
        ["archs", "--bogus"],
    ]
    for args in cases:
        proc = run_cli(*args)
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 2, (args, proc.stderr)
        assert "Traceback" not in proc.stderr and lines and lines[-1].startswith(("taichi-aot: error", "usage")), (
            args, proc.stderr)
        assert proc.stdout == "" or "demo:" not in proc.stdout, (args, proc.stdout)  # no work was started
    assert not (tmp_path / "missing").exists()


def test_info_into_a_closed_pipe_ends_quietly(modules):
    cmd = f"{sys.executable} -m taichi_aot info --json {modules.path(Arch.VULKAN)} | head -c 10"
    proc = subprocess.run(["bash", "-c", f"set -o pipefail; {cmd}"], capture_output=True, text=True, timeout=120)
    assert len(proc.stdout) == 10 and "Traceback" not in proc.stderr and "BrokenPipe" not in proc.stderr, proc.stderr


def test_no_progress_frames_in_a_log(tmp_path):
    out = run_cli("demo", "--arch", "x64", "--size", "32", "--steps", "16", "--out", str(tmp_path / "d.png"))
    assert out.returncode == 0, out.stderr
    assert "\r" not in out.stderr and "\r" not in out.stdout  # stderr is a pipe here, not a terminal


def test_ctrl_c_is_one_line_and_exit_130(tmp_path):
    import signal

    with interruptible():
        proc = subprocess.Popen([sys.executable, "-m", "taichi_aot", "demo", "--arch", "x64", "--size", "64",
                                 "--steps", "10000000", "--out", str(tmp_path / "d.png")],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().startswith("demo:")  # it is running
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 130 and err.strip().splitlines()[-1] == "taichi-aot: interrupted", err
    assert "Traceback" not in err


def test_ctrl_c_says_one_line_though_it_left_an_object_half_made():
    """Ctrl-C inside a ZipFile's __init__ (a module being read) leaves one whose finalizer fails as the process ends:
    the user still reads one line, the last."""
    script = (
        "import sys, zipfile\n"
        "from taichi_aot.cli import add_command, main\n"
        "def stop(args):\n"
        "    global half\n"
        "    half = zipfile.ZipFile.__new__(zipfile.ZipFile)\n"
        "    half.fp = open(sys.executable, 'rb')  # as far as __init__ got: no _writing yet\n"
        "    raise KeyboardInterrupt\n"
        "sys.exit(main(['stop'], extra=[lambda sub: add_command(sub, 'stop', stop, 'interrupted')]))\n")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 130 and proc.stderr.strip().splitlines() == ["taichi-aot: interrupted"], proc.stderr
    # what is not a finalizer's still says itself: an atexit callback that fails
    failing = script.replace("    raise KeyboardInterrupt\n", "    import atexit\n    atexit.register(lambda: 1 / 0)\n"
                                                                "    raise KeyboardInterrupt\n")
    proc = subprocess.run([sys.executable, "-c", failing], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 130 and "ZeroDivisionError" in proc.stderr and "_writing" not in proc.stderr, proc.stderr


def test_archs_gives_reasons_a_user_can_act_on(tmp_path):
    """Every unavailable arch says why in words a user can act on: no bare word from the library, no exit code; a
    backend the library was built without says so; an OpenGL backend that crashes without a display names it."""
    import json

    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY")}
    proc = subprocess.run([sys.executable, "-m", "taichi_aot", "archs", "--json"], capture_output=True, text=True,
                          timeout=300, env={**env, "TAICHI_AOT_CACHE": str(tmp_path)})
    assert proc.returncode == 0, proc.stderr[-2000:]
    for arch in json.loads(proc.stdout):
        if arch["available"]:
            continue
        reason = arch["reason"]
        assert len(reason.split()) >= 3 and "exit code" not in reason, arch
        if "crashed" in reason and arch["arch"] in ("opengl", "gles"):
            assert reason.startswith("no display: neither DISPLAY") and "another arch" in reason, arch
        if "not supported" in reason:
            assert "built without this backend" in reason, arch
    listed = subprocess.run([sys.executable, "-m", "taichi_aot", "archs"], capture_output=True, text=True,
                            timeout=300, env={**env, "TAICHI_AOT_CACHE": str(tmp_path)})
    assert listed.returncode == 0 and "archs lists those" not in listed.stdout, listed.stdout  # not itself
    hidden = subprocess.run([sys.executable, "-m", "taichi_aot", "archs"], capture_output=True, text=True, timeout=300,
                            env={**env, "TAICHI_AOT_CACHE": str(tmp_path / "hidden"), "VK_LOADER_DRIVERS_DISABLE": "*"})
    vulkan = next(line for line in hidden.stdout.splitlines() if line.split()[:1] == ["vulkan"])
    assert "unavailable" in vulkan and "VK_LOADER_DRIVERS_DISABLE='*'" in vulkan and "unset it" in vulkan, vulkan
