"""A module's files are read once: ``metadata/`` reads each file of a module folder when ``load_module`` checks it,
and whatever comes after (the module's digest, the first load's check of a module of no seal, a device that changes
the module, a CPU module's private copy retargeted to the runtime's threads) takes the bytes it read, never the
folder's files again. The child process below counts Python's opens of each file (``sys.addaudithook``); libtaichi's
own reads, in C, are the library's. A planted reader (the metadata read again after the load's) is seen."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from conftest import require_arch
from taichi_aot import Arch

CHILD = r"""
import collections, json, os, sys
from taichi_aot import Arch, Runtime
from taichi_aot import metadata

folder, arch, threads, plant = sys.argv[1], Arch[sys.argv[2]], int(sys.argv[3]), sys.argv[4] == "1"
opens = collections.Counter()

def hook(event, args):
    if event == "open" and isinstance(args[0], (str, bytes, os.PathLike)):
        path = os.path.abspath(os.fsdecode(args[0]))
        if os.path.dirname(path) == folder:
            opens[os.path.basename(path)] += 1

if plant:  # a reader planted after the load's own: the metadata read again
    real = metadata.open_module
    def open_module(*args, **kwargs):
        got = real(*args, **kwargs)
        with open(os.path.join(folder, "metadata.json"), "rb") as f:
            f.read()
        return got
    metadata.open_module = open_module

with Runtime(arch, **({"cpu_threads": threads} if threads else {})) as rt:
    sys.addaudithook(hook)
    module = rt.load_module(folder)
    for kernel in module.kernels.values():
        pass
print(json.dumps({"opens": dict(opens), "files": sorted(os.listdir(folder))}))
"""


def _opens(folder: str, arch: Arch, threads: int = 0, plant: bool = False, **env: str) -> dict[str, int]:
    """How many times the child opened each file of ``folder`` from the start of its ``load_module``."""
    folder = os.path.abspath(folder)
    proc = subprocess.run([sys.executable, "-c", CHILD, folder, arch.name, str(threads), "1" if plant else "0"],
                          capture_output=True, text=True, timeout=300, env={**os.environ, **env})
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["opens"], "the module's files were not read at all: the count sees nothing"
    return got["opens"]


def _read_again(opens: dict[str, int]) -> dict[str, int]:
    return {name: n for name, n in opens.items() if n > 1}


@pytest.mark.parametrize("arch", [Arch.X64, Arch.VULKAN], ids=["x64", "vulkan"])
def test_a_module_folders_files_are_read_once_by_its_load(modules, arch):
    require_arch(arch)
    opens = _opens(modules.path(arch), arch)
    assert "metadata.json" in opens and not _read_again(opens), opens


def test_a_module_changed_by_its_load_is_changed_from_the_files_read(modules, vulkan):
    """The discrete GPU's placement widens a Vulkan module's runtime-sized loops (its metadata rewritten into .tcm
    bytes) and a CPU runtime of fewer threads retargets an x64 module's loops in a private copy: both from the bytes
    the load's checks read."""
    from taichi_aot.placement import vulkan as vk

    opens = _opens(modules.path(Arch.VULKAN), Arch.VULKAN, **{vk.MEMORY_VARIABLE: "device", vk.GRID_VARIABLE: "1024"})
    assert not _read_again(opens), opens
    require_arch(Arch.X64)
    opens = _opens(modules.path(Arch.X64), Arch.X64, threads=1)
    assert not _read_again(opens), opens


def test_the_count_sees_a_planted_reader(modules):
    require_arch(Arch.X64)
    assert _read_again(_opens(modules.path(Arch.X64), Arch.X64, plant=True)) == {"metadata.json": 2}
