"""``taichi-aot stubs`` writes a .pyi that mypy --strict and pyright accept, used as the README says.

A user script casts ``rt.load_module(...)`` to the stub's ``Module`` and launches a kernel and a
graph; both checkers must find no error in it or in the stub, and must catch a wrong argument
(proof that they read the stub rather than falling back to ``Any``).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

from conftest import check_tool, require_extra
from taichi_aot import Arch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

USER_SCRIPT = '''\
"""A user's script, typed through the generated stubs."""

from __future__ import annotations

import typing

import sys

import numpy as np

from taichi_aot import Arch, Runtime

if typing.TYPE_CHECKING:  # the stub has no module to import at run time
    from aot_kernels import Module


def main(path: str) -> float:
    with Runtime(Arch.{arch}) as rt:
        mod = typing.cast("Module", rt.load_module(path))
        x = rt.ndarray((8,), np.float32)
        y = rt.ndarray((8,), np.float32)
        mod.kernels["add"](x, y, 2.0)
        mod.kernels["add"].launch(x, y, np.float32(0.5))
        mod.graphs["add_twice"](x=x, y=y, a=1.0)
        mod.kernels["add"](np.zeros(8, np.float32), y, 1.0)  # the caller's arrays go where ndarrays go
        names = sorted(mod.kernels) + list(mod.graphs)
        rt.wait()
        return float(x.to_numpy()[0]) + len(names)


if __name__ == "__main__":
    print(main(sys.argv[1]))
'''

# a wrong argument on the marked line: the checkers must say so
WRONG_SCRIPT = '''\
from __future__ import annotations

from taichi_aot import NdArray
from aot_kernels import Module


def main(mod: Module, x: NdArray) -> None:
    mod.kernels["add"](x, x, "two")  # WRONG
'''

def _errors(lines: list[str]) -> list[tuple[str, int, str]]:
    """(file name, line, message) of each error line of mypy or pyright output."""
    found = []
    for line in lines:
        m = re.match(r"\s*(?P<file>\S+?):(?P<line>\d+):(?:\d+ -)? error: (?P<msg>.*)", line)
        if m:
            found.append((os.path.basename(m["file"]), int(m["line"]), m["msg"]))
    return found


def _check(tmp_path, files: list[str]) -> dict[str, list[tuple[str, int, str]]]:
    """Run mypy --strict and pyright on ``files`` (in tmp_path); their errors by checker."""
    mypy = subprocess.run(
        [check_tool("mypy"), "--strict", "--follow-imports=silent", "--no-incremental", "--config-file", os.devnull,
         *files], capture_output=True, text=True, cwd=tmp_path, timeout=600,
        env={**os.environ, "MYPYPATH": ROOT},  # taichi_aot from this checkout (an editable install hides it)
    )
    assert mypy.returncode in (0, 1), mypy.stdout + mypy.stderr  # 2: mypy itself failed
    config = {"extraPaths": [ROOT], "typeCheckingMode": "standard", "include": files,
              "reportMissingModuleSource": False}  # a stub without a .py is the point here
    (tmp_path / "pyrightconfig.json").write_text(json.dumps(config))
    pyright = subprocess.run([check_tool("pyright"), "--project", str(tmp_path)], capture_output=True, text=True,
                             cwd=tmp_path, timeout=600)
    assert pyright.returncode in (0, 1), pyright.stdout + pyright.stderr  # 2, 3: pyright itself failed
    return {"mypy": _errors(mypy.stdout.splitlines()), "pyright": _errors(pyright.stdout.splitlines())}


def test_stubs_type_check_where_a_user_uses_them(arch: Arch, modules, tmp_path):
    stub = tmp_path / "aot_kernels.pyi"
    proc = subprocess.run([sys.executable, "-m", "taichi_aot", "stubs", modules.path(arch, tcm=True), "-o", str(stub)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    (tmp_path / "user_script.py").write_text(USER_SCRIPT.format(arch=arch.name))
    (tmp_path / "wrong_script.py").write_text(WRONG_SCRIPT)
    wrong_line = next(i for i, s in enumerate(WRONG_SCRIPT.splitlines(), 1) if s.endswith("# WRONG"))
    results = _check(tmp_path, ["aot_kernels.pyi", "user_script.py", "wrong_script.py"])
    ran = subprocess.run([sys.executable, str(tmp_path / "user_script.py"), modules.path(arch, tcm=True)],
                         capture_output=True, text=True, timeout=300, cwd=str(tmp_path))
    assert ran.returncode == 0, ran.stderr[-2000:]  # the documented form runs, too
    for checker, errors in results.items():
        unexpected = [e for e in errors if e[0] != "wrong_script.py"]
        assert not unexpected, (checker, unexpected)
        assert not [e for e in errors if e[0] == "user_script.py"], checker
        assert [e for e in errors if e[0] == "wrong_script.py"], (checker, "the wrong argument went unnoticed")
        assert all(e[1] == wrong_line and re.search(r"str|'two'", e[2]) for e in errors
                   if e[0] == "wrong_script.py"), (checker, errors)


TORCH_SCRIPT = '''\
from __future__ import annotations

import torch

from aot_kernels import Module


def main(mod: Module) -> None:
    mod.kernels["add"](torch.zeros(8), torch.ones(8), 1.0)
'''


def test_stub_array_parameters_take_torch_tensors(modules, tmp_path):
    """torch tensors go where the stub's ArrayArgument is (mypy --strict; pyright would read all of torch)."""
    torch = require_extra("torch", "interop")
    assert torch is not None
    subprocess.run([sys.executable, "-m", "taichi_aot", "stubs", modules.path(Arch.X64), "-o",
                    str(tmp_path / "aot_kernels.pyi")], check=True, capture_output=True, timeout=300)
    (tmp_path / "torch_script.py").write_text(TORCH_SCRIPT)
    mypy = subprocess.run(
        [check_tool("mypy"), "--strict", "--follow-imports=silent", "--no-incremental", "--config-file", os.devnull,
         "aot_kernels.pyi", "torch_script.py"], capture_output=True, text=True, cwd=tmp_path, timeout=600,
        env={**os.environ, "MYPYPATH": ROOT})
    assert mypy.returncode == 0, mypy.stdout + mypy.stderr


def test_hostile_names_are_data(modules, tmp_path):
    """Names from a module reach a .pyi and a terminal as data: a name that would close a docstring and run
    code, or move the cursor, is escaped; names that become one identifier stay apart."""
    import ast
    import zipfile

    from conftest import require_arch

    require_arch(Arch.VULKAN)
    hostile = 'x"""\nimport os; os.system("touch PWNED")\n"""'
    source = modules.path(Arch.VULKAN, tcm=True)
    target = tmp_path / "hostile.tcm"
    with zipfile.ZipFile(source) as zin, zipfile.ZipFile(target, "w") as zout:
        for info in zin.infolist():
            data = zin.read(info)
            if info.filename == "metadata.json":
                doc = json.loads(data)
                for k in doc["kernels"]:
                    if k["name"] == "add":
                        k["name"] = 'add"""\x1b[2J'
                        attribs = k["ctx_attribs"]["arg_attribs_vec_"]
                        attribs[0]["value"]["name"] = "_" + hostile  # Taichi prefixes array names with '_'
                        attribs[1]["value"]["name"] = "_x-"  # becomes x_ ... and so may another
                        attribs[2]["value"]["name"] = "x_"
                data = json.dumps(doc).encode()
            if info.filename == "__content__":
                data = data.replace(b"kernel:add\n", b'kernel:add"""\x1b[2J\n')
            zout.writestr(info.filename, data)
    out = tmp_path / "h.pyi"
    proc = subprocess.run([sys.executable, "-m", "taichi_aot", "stubs", str(target), "-o", str(out)],
                          capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    text = out.read_text()
    tree = ast.parse(text)  # valid Python ...
    top = {type(n).__name__ for n in tree.body}
    assert top <= {"Expr", "ImportFrom", "Import", "ClassDef"}, top  # ... with nothing at top level that runs
    assert not any(isinstance(n, ast.Import) and any(a.name == "os" for a in n.names) for n in tree.body)
    assert "\x1b" not in text
    namespace: dict = {}
    exec(compile(text, str(out), "exec"), namespace)
    assert not (tmp_path / "PWNED").exists()
    proc = subprocess.run([sys.executable, "-m", "taichi_aot", "info", str(target)], capture_output=True, text=True)
    assert proc.returncode == 0 and "\x1b" not in proc.stdout and "\\x1b" in proc.stdout, proc.stdout
