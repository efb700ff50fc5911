"""The README and the user guide run as written, in a fresh venv holding only the wheel of this checkout (no Taichi).

Each page (README.md, then every page under docs/) runs in a folder of its own: every fenced block, in order. The
Python file a page introduces with "say in `NAME.py`" is written there; each ``python -m taichi_aot`` line of a
shell block runs (``build`` with this checkout's Taichi, the rest in the fresh venv, and ``pip install`` lines are
what the venv was made with); every other Python block runs as a program in the fresh venv, and where a line ends
in ``# [..]`` or ``# <values>`` after a ``print``, the program prints exactly that. A block whose first line is
``# needs: ...`` runs where those are: ``torch``, ``jax``, ``llvmlite`` (the ones installed here, with what they
require, linked into the venv), ``cuda``. The guide's pages use the quickstart's module: their folders start with
the README's files and what its ``build`` made; a ``build`` of the same file with the same arguments is made once a
session, and a program that ran for one page (the same text, on the same module) is not run again for another.
"""

from __future__ import annotations

import glob
import hashlib
import importlib.util
import os
import re
import shlex
import shutil
import subprocess
import sys

import pytest

from conftest import ROOT, require_arch
from taichi_aot import Arch, capi

_BLOCK = re.compile(r"```(\w*)\n(.*?)```", re.S)
_FILE = re.compile(r"say in `(\w+\.py)`:\s*$")

#: README.md first (its build makes the module the guide's pages use), then every page of the site.
_SITE = sorted(os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, "docs", "**", "*.md"), recursive=True))
PAGES = ["README.md", *_SITE]
#: Pages whose first program is the quickstart's (tests/test_typing.py checks the README's with mypy and pyright).
QUICKSTART_PAGES = ("README.md", os.path.join("docs", "index.md"))

#: What a ``build`` line made this session: (its arguments, its source's digest) -> the output's path.
_BUILT: dict[tuple[tuple[str, ...], str], str] = {}
#: The programs that ran (and printed what they say) this session: a page's copy of one runs once.
_RAN: set[str] = set()
#: The packages linked into the fresh venv so far.
_LINKED: set[tuple[str, str]] = set()


def _blocks(page: str = "README.md") -> list[tuple[str, str, str | None]]:
    """(language, code, file name it is introduced as, if any) of every fenced block of ``page``."""
    with open(os.path.join(ROOT, page), encoding="utf-8") as f:
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


def _build(argv: list[str], cwd: str) -> None:
    """``python -m taichi_aot build ...`` with this checkout's Taichi, or a copy of what the same build made."""
    out = argv[argv.index("-o") + 1]
    with open(os.path.join(cwd, argv[3]), "rb") as f:
        key = (tuple(argv), hashlib.sha256(f.read()).hexdigest())
    made = _BUILT.get(key)
    if made is not None and os.path.exists(made):
        target = os.path.join(cwd, out)
        if os.path.isdir(target):
            shutil.rmtree(target)
        (shutil.copytree if os.path.isdir(made) else shutil.copy2)(made, target)
        return
    proc = subprocess.run([sys.executable, *argv], cwd=cwd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, (argv, proc.stdout + proc.stderr)
    _BUILT[key] = os.path.join(cwd, out)


def _run_commands(code: str, cuda: bool, fresh_venv, folder) -> int:
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
            _build(argv, str(folder))
        else:
            proc = fresh_venv.run(argv, cwd=str(folder))
            assert proc.returncode == 0, (line, proc.stdout + proc.stderr)
        ran += 1
    return ran


def _cuda() -> bool:
    return capi.arch_status()[Arch.CUDA].available


def _run_page(page: str, folder, fresh_venv) -> tuple[list[int], list[tuple[int, list[str]]]]:
    """Every block of ``page`` in order in ``folder``: (numbers of the blocks run, (number, what it lacks) skipped)."""
    cuda = _cuda()
    available = {"cuda": cuda, "torch": importlib.util.find_spec("torch") is not None,
                 "jax": importlib.util.find_spec("jax") is not None,
                 "llvmlite": importlib.util.find_spec("llvmlite") is not None}
    ran: list[int] = []
    skipped: list[tuple[int, list[str]]] = []
    for number, (lang, code, name) in enumerate(_blocks(page)):
        if name:
            (folder / name).write_text(code)
            continue
        if lang == "sh":
            ran += [number] * _run_commands(code, cuda, fresh_venv, folder)
            continue
        if lang != "python":
            continue
        missing = [n for n in _needs(code) if not available.get(n, False)]
        if missing:
            skipped.append((number, missing))
            continue
        if code in _RAN:  # the same program on the same module ran for another page (the README's, say)
            ran.append(number)
            continue
        for extra in ("torch", "jax", "llvmlite"):
            if extra in _needs(code) and (fresh_venv.root, extra) not in _LINKED:
                fresh_venv.link(extra)  # what is installed here (and what it requires), linked, not copied
                _LINKED.add((fresh_venv.root, extra))
        script = folder / f"block{number}.py"
        script.write_text(code)
        proc = fresh_venv.run([str(script)], cwd=str(folder))
        assert proc.returncode == 0, (page, code, proc.stdout + proc.stderr)
        expected = _expected(code)
        if expected is not None:
            got = proc.stdout.replace("[", " [ ").replace("]", " ] ").split()
            assert got == expected, (page, code, proc.stdout)
        _RAN.add(code)
        ran.append(number)
    return ran, skipped


@pytest.fixture(scope="session")
def quickstart(tmp_path_factory, fresh_venv):
    """A folder holding the README's files and what its ``build`` lines made (the module the guide uses)."""
    folder = tmp_path_factory.mktemp("quickstart")
    cuda = _cuda()
    for lang, code, name in _blocks("README.md"):
        if name:
            (folder / name).write_text(code)
        elif lang == "sh" and "taichi_aot build" in code:
            _run_commands(code, cuda, fresh_venv, folder)
    return folder


@pytest.mark.parametrize("page", PAGES)
def test_every_block_runs_as_written(page, fresh_venv, tmp_path, request):
    if not any(lang in ("python", "sh") for lang, _, _ in _blocks(page)):
        return  # a reference page: mkdocstrings' blocks, no code
    require_arch(Arch.X64)
    require_arch(Arch.VULKAN)
    if page != "README.md":
        for entry in request.getfixturevalue("quickstart").iterdir():
            (shutil.copytree if entry.is_dir() else shutil.copy2)(entry, tmp_path / entry.name)
    ran, skipped = _run_page(page, tmp_path, fresh_venv)
    if page == "README.md":
        assert len(ran) >= 5, ran  # the build, the quickstart, torch's arrays and op, JAX's op
    assert ran or all("cuda" in m for _, m in skipped), (page, skipped)
    if not _cuda():
        assert all("cuda" in m for _, m in skipped), skipped  # only the CUDA blocks wait for a GPU


@pytest.mark.parametrize("page", PAGES)
def test_no_block_is_left_unchecked(page):
    """Every Python block is a file, a program, or marked with what it needs; no other languages hide code."""
    blocks = _blocks(page)
    for lang, code, name in blocks:
        assert lang in ("python", "sh", "text"), (page, lang, code[:80])
        if lang == "python" and not name:
            compile(code, f"<{page} block>", "exec")
    if page in QUICKSTART_PAGES:  # the quickstart's program is the first one, before any fragment
        with pytest.raises(StopIteration):
            next(c for lang, c, n in blocks if lang == "python" and not n and "Runtime" not in c and "Pool" not in c)
