"""The package is typed for its users: the README's quickstart passes mypy --strict and pyright.

Both checkers see taichi_aot as a user does (py.typed, the written-out enums, real constructors).
"""

from __future__ import annotations

import os
import re
import subprocess

import pytest

from conftest import check_tool

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def quickstart() -> str:
    """The README's first Python block that uses taichi_aot."""
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        blocks = re.findall(r"```python\n(.*?)```", f.read(), re.S)
    found = [b for b in blocks if "from taichi_aot import" in b]
    assert found, "the README has no python block using taichi_aot"
    return found[0]


def check_typed(script: str, tmp_path) -> None:
    """Run mypy --strict and pyright on ``script`` as a user's file; assert no error."""
    path = tmp_path / "user_script.py"
    path.write_text(script)
    env = {**os.environ, "MYPYPATH": ROOT}
    mypy = subprocess.run(
        [check_tool("mypy"), "--strict", "--follow-imports=silent", "--no-incremental", "--config-file", os.devnull,
         str(path)], capture_output=True, text=True, cwd=ROOT, env=env, timeout=600,
    )
    assert mypy.returncode == 0, mypy.stdout + mypy.stderr
    (tmp_path / "pyrightconfig.json").write_text(f'{{"extraPaths": ["{ROOT}"], "typeCheckingMode": "standard"}}')
    pyright = subprocess.run(
        [check_tool("pyright"), "--project", str(tmp_path), str(path)], capture_output=True, text=True, cwd=tmp_path,
        timeout=600,
    )
    assert pyright.returncode == 0 and "0 errors" in pyright.stdout, pyright.stdout + pyright.stderr


def test_readme_quickstart_type_checks(tmp_path):
    check_typed(quickstart(), tmp_path)


def test_a_type_error_is_reported(tmp_path):
    # the check is real: a wrong use of the API is caught by both checkers
    with pytest.raises(AssertionError, match=r"Runtime|arch|ndarray"):
        check_typed("from taichi_aot import Runtime\nRuntime(arch=[1, 2]).ndarray(shape='x', dtype=3.5)\n", tmp_path)
