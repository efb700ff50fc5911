"""The README runs as written: its kernel file, its build command and its quickstart, in that order."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys

from conftest import require_arch
from taichi_aot import Arch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _readme() -> str:
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        return f.read()


def test_quickstart_runs_as_written(tmp_path):
    require_arch(Arch.VULKAN)
    text = _readme()
    kernel_file = re.search(r"say in `(\w+\.py)`:\n\n```python\n(.*?)```", text, re.S)
    assert kernel_file, "the README's kernel file block"
    (tmp_path / kernel_file.group(1)).write_text(kernel_file.group(2))
    build = re.search(r"```\n(python -m taichi_aot build [^\n]+)\n```", text)
    assert build, "the README's build command"
    argv = shlex.split(build.group(1))
    proc = subprocess.run([sys.executable, *argv[1:]], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    blocks = [b for b in re.findall(r"```python\n(.*?)```", text, re.S) if "from taichi_aot import" in b]
    quickstart = blocks[0]
    proc = subprocess.run([sys.executable, "-c", quickstart], cwd=tmp_path, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    printed = re.search(r"print\(.*\)\s+# (\[.*\])", quickstart)
    assert printed, "the quickstart says what it prints"
    assert proc.stdout.split() == printed.group(1).split(), proc.stdout
