"""Shared fixtures: real modules compiled by Taichi 1.7.4, and the archs to run on.

A backend the machine lacks skips its tests locally but fails them under CI
(``CI=true``): CI must run x64 and Vulkan for real. So does a promised extra (ray, interop).
"""

from __future__ import annotations

import importlib
import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

from taichi_aot import Arch, capi

HERE = os.path.dirname(os.path.abspath(__file__))
KERNELS = os.path.join(HERE, "kernels.py")
ARCHS = {"x64": Arch.X64, "vulkan": Arch.VULKAN}
IN_CI = os.environ.get("CI", "").lower() not in ("", "0", "false", "no")


def require_extra(module: str, extra: str):
    """Import ``module`` of a promised extra: skip (locally) or fail (under CI) where it is not installed."""
    try:
        return importlib.import_module(module)
    except ImportError:
        message = f"{module} is not installed (the {extra} extra: pip install -e '.[{extra}]')"
        if IN_CI:
            pytest.fail(message)
        pytest.skip(message)


def require_arch(arch: Arch) -> None:
    """Skip (locally) or fail (under CI) when ``arch`` cannot create a runtime here."""
    status = capi.arch_status()[arch]
    if not status.available:
        message = f"backend {arch.name} is not available here: {status.reason}"
        if IN_CI:
            pytest.fail(message + " (CI requires x64 and Vulkan)")
        pytest.skip(message)


def check_tool(name: str) -> str:
    """The path of a checker of the check extra (mypy, pyright) beside this Python; skip or fail without it."""
    path = os.path.join(os.path.dirname(sys.executable), name)
    found = path if os.path.exists(path) else shutil.which(name)
    if not found:
        if IN_CI:
            pytest.fail(f"{name} is not installed (the check extra: pip install -e '.[check]')")
        pytest.skip(f"{name} is not installed (pip install -e '.[check]')")
    return found


class Modules:
    """Paths of the compiled test modules: ``modules.path(arch, tcm=False)``."""

    def __init__(self, root: str):
        self.root = root
        self._built: dict[tuple[str, bool], str] = {}
        self._errors: dict[tuple[str, bool], str] = {}

    def build_all(self) -> None:
        jobs = [(name, tcm) for name in ARCHS for tcm in (False, True)]
        with ThreadPoolExecutor(max_workers=2) as pool:
            list(pool.map(lambda job: self._build(*job), jobs))

    def _build(self, name: str, tcm: bool) -> None:
        out = os.path.join(self.root, name + (".tcm" if tcm else ""))
        proc = subprocess.run(
            [sys.executable, KERNELS, "--arch", name, "--out", out], capture_output=True, text=True, timeout=300
        )
        if proc.returncode == 0 and os.path.exists(out):
            self._built[(name, tcm)] = out
        else:
            self._errors[(name, tcm)] = (proc.stdout + proc.stderr)[-3000:]

    def path(self, arch: Arch, tcm: bool = False) -> str:
        name = arch.name.lower()
        key = (name, tcm)
        if key not in self._built:
            pytest.fail(f"Taichi could not compile the {name} test module:\n{self._errors.get(key, 'not built')}")
        return self._built[key]


@pytest.fixture(scope="session")
def modules(tmp_path_factory) -> Modules:
    mods = Modules(str(tmp_path_factory.mktemp("modules")))
    mods.build_all()
    return mods


@pytest.fixture(params=list(ARCHS.values()), ids=list(ARCHS))
def arch(request) -> Arch:
    require_arch(request.param)
    return request.param


@pytest.fixture(scope="session")
def vulkan() -> Arch:
    require_arch(Arch.VULKAN)
    return Arch.VULKAN
