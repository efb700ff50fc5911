"""The command line, run as a user runs it."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

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


def test_demo_bad_input(tmp_path):
    assert run_cli("demo", "--size", "4").returncode == 2
    out = run_cli("demo", "--arch", "quantum", "--out", str(tmp_path / "x.png"))
    assert out.returncode == 1 and "unknown arch" in out.stderr and "Traceback" not in out.stderr
    assert run_cli("nonsense").returncode == 2
