"""The README runs as written, in a fresh venv holding only the wheel of this checkout (no Taichi).

Every fenced block, in order, in one folder: the Python file it introduces with "say in `NAME.py`" is
written there; each ``python -m taichi_aot`` line of a shell block runs (``build`` with this checkout's
Taichi, the rest in the fresh venv, and ``pip install`` lines are what the venv was made with); every other
Python block runs as a program in the fresh venv, and where a line ends in ``# [..]`` or ``# <values>``
after a ``print``, the program prints exactly that. A block whose first line is ``# needs: ...`` runs where
those are: ``torch`` (the one the interop extra installed here, with what it requires, linked into the venv),
``llvmlite`` (the ptx extra's, linked likewise), ``cuda``, ``jax``.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shlex
import subprocess
import sys

import pytest

from conftest import ROOT, require_arch
from taichi_aot import Arch, capi

_BLOCK = re.compile(r"```(\w*)\n(.*?)```", re.S)
_FILE = re.compile(r"say in `(\w+\.py)`:\s*$")


def _blocks() -> list[tuple[str, str, str | None]]:
    """(language, code, file name it is introduced as, if any) of every fenced block."""
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        text = f.read()
    out = []
    for m in _BLOCK.finditer(text):
        before = text[: m.start()].rstrip().splitlines()[-1] if text[: m.start()].strip() else ""
        named = _FILE.search(before)
        out.append((m.group(1), m.group(2), named.group(1) if named else None))
    return out


def _needs(code: str) -> list[str]:
    first = code.splitlines()[0] if code.strip() else ""
    return first.split(":", 1)[1].split() if first.startswith("# needs:") else []


def _expected(code: str) -> list[str] | None:
    """What the block says its prints print, word by word (brackets apart), or None."""
    said = re.findall(r"print\(.*\)\s+# (.+)$", code, re.M)
    return " ".join(said).replace("[", " [ ").replace("]", " ] ").split() if said else None


def _run_commands(code: str, cuda: bool, fresh_venv, tmp_path) -> int:
    """Run a shell block's ``python -m taichi_aot`` lines (the rest may only install); how many."""
    ran = 0
    for line in code.splitlines():
        line = line.split("#")[0].strip()
        if not line.startswith("python -m taichi_aot"):
            assert not line or line.startswith(("pip install", "python -m pip")), line
            continue
        argv = shlex.split(line)[1:]
        if argv[2] == "build" and cuda and "--arch" in argv:
            argv.insert(argv.index("--arch") + 1, "cuda")  # as the README says to where a GPU is
        if argv[2] == "build":  # compiling needs Taichi: this checkout's
            proc = subprocess.run([sys.executable, *argv], cwd=tmp_path, capture_output=True, text=True, timeout=600)
        else:
            proc = fresh_venv.run(argv, cwd=str(tmp_path))
        assert proc.returncode == 0, (line, proc.stdout + proc.stderr)
        ran += 1
    return ran


def test_every_block_runs_as_written(fresh_venv, tmp_path):
    require_arch(Arch.X64)
    require_arch(Arch.VULKAN)
    cuda = capi.arch_status()[Arch.CUDA].available
    available = {"cuda": cuda, "torch": importlib.util.find_spec("torch") is not None,
                 "jax": cuda and importlib.util.find_spec("jax") is not None,
                 "llvmlite": importlib.util.find_spec("llvmlite") is not None}
    linked: set[str] = set()
    ran, skipped = [], []
    for number, (lang, code, name) in enumerate(_blocks()):
        if name:
            (tmp_path / name).write_text(code)
            continue
        if lang == "sh":
            ran += [number] * _run_commands(code, cuda, fresh_venv, tmp_path)
            continue
        if lang != "python":
            continue
        missing = [n for n in _needs(code) if not available.get(n, False)]
        if missing:
            skipped.append((number, missing))
            continue
        for extra in ("torch", "llvmlite"):
            if extra in _needs(code) and extra not in linked:
                fresh_venv.link(extra)  # what is installed here (and what it requires), linked, not copied
                linked.add(extra)
        script = tmp_path / f"block{number}.py"
        script.write_text(code)
        proc = fresh_venv.run([str(script)], cwd=str(tmp_path))
        assert proc.returncode == 0, (code, proc.stdout + proc.stderr)
        expected = _expected(code)
        if expected is not None:
            got = proc.stdout.replace("[", " [ ").replace("]", " ] ").split()
            assert got == expected, (code, proc.stdout)
        ran.append(number)
    assert len(ran) >= 6, ran  # the build, quickstart, fast paths, pool, numpy (and torch where installed)
    if not cuda:
        assert len(skipped) == 1 and "cuda" in skipped[0][1], skipped  # only the CUDA block waits for a GPU


def test_no_block_is_left_unchecked():
    """Every Python block is a file, a program, or marked with what it needs; no other languages hide code."""
    for lang, code, name in _blocks():
        assert lang in ("python", "sh", "text"), (lang, code[:80])
        if lang == "python" and not name:
            compile(code, "<README block>", "exec")
    with pytest.raises(StopIteration):  # the quickstart's program is the first one, before any fragment
        next(c for lang, c, n in _blocks() if lang == "python" and not n and "Runtime" not in c and "Pool" not in c)
