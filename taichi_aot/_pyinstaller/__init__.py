"""taichi_aot's PyInstaller hooks, found through the ``pyinstaller40`` entry point: an app that imports
taichi_aot is frozen with its bundled library (``_lib``: libtaichi_c_api, its runtime bitcode, SPIRV-Tools) and
the modules it ships, and with a run-time hook that makes the app serve taichi_aot's child processes (its probes and
a module's first check) instead of running its own script again (``taichi_aot._probe``, ``taichi_aot._firstload``)."""

from __future__ import annotations

import os


def get_hook_dirs() -> list[str]:
    """The folders of taichi_aot's hooks (PyInstaller's entry point)."""
    return [os.path.dirname(os.path.abspath(__file__))]
