"""Closing under other threads' Vulkan launches: arrays, images, the module or the runtime closed on the owner thread
while four threads launch kernels, graphs, bound launches, replays, numpy arguments and textures through it, under
the own Vulkan launch and libtaichi's, 50 rounds of each; every launch comes wholly before its objects' close or raises
a typed error, no signal, no hang (``tests/close_stress.py``, run in a child: a signal is a failed test here)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from conftest import HERE

STRESS = os.path.join(HERE, "close_stress.py")


@pytest.mark.parametrize("policy,rounds", [("auto", 50), ("device", 10)])
def test_closes_under_other_threads_launches_never_crash(vulkan, modules, policy, rounds):
    env = {**os.environ, "TAICHI_AOT_VULKAN_MEMORY": policy, "PYTHONFAULTHANDLER": "1"}
    proc = subprocess.run([sys.executable, STRESS, modules.path(vulkan), "--rounds", str(rounds)], env=env,
                          capture_output=True, text=True, timeout=600)
    died = f" (killed by {signal.Signals(-proc.returncode).name})" if proc.returncode < 0 else ""
    assert proc.returncode == 0, f"exit {proc.returncode}{died}:\n{proc.stdout}{proc.stderr[-4000:]}"
    assert f"{rounds * 8} rounds" in proc.stdout, proc.stdout
