"""The examples (examples/*.py) run as a user runs them, ``python examples/NAME.py``, and say what they should;
their module is the one their Taichi source compiles to."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import zipfile

import pytest

from conftest import require_arch, require_extra
from taichi_aot import Arch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLES = os.path.join(ROOT, "examples")
EXPECTED = {
    "quickstart.py": ["x[:4] = [0.  0.5 1.  1.5]", "after map and another step: [1.   1.25 1.5  1.75]"],
    "graph.py": ["after step4 and drift8: [1. 2. 3.]", "x[1] = 4.0"],
    "arrays.py": ["advance: x (read_write), v (read)", "refused: this numpy array is read-only", "energy of v = 70.0"],
    # the threads each worker gets are the cores this process may use, halved: the machine's to say
    "sweep.py": ["8 simulations on 2 workers, ", " CPU thread(s) each", "dt=0.008: x[1] = 0.800"],
    "ops_torch.py": ["advance: [0.0, 0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5]", "compiled: x[7] = 1.75 energy = 280.0"],
    "ops_jax.py": ["advance: [0.0, 0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5]", "jitted: x[7] = 4.871 energy + 1 = 71.0"],
    # a parameter fitted through the kernel's reverse-mode kernel: the projectiles land on their targets
    "fit_torch.py": ["converged: True", "lands at: [[1.0, 0.0], [2.0, 0.5], [0.5, 1.0], [3.0, -0.5]]"],
    "fit_jax.py": ["converged: True", "lands at: [[1.0, 0.0], [2.0, 0.5], [0.5, 1.0], [3.0, -0.5]]"],
}
#: The examples' Taichi sources, each compiled into the module of the same name (.tcm) beside it.
SOURCES = {"physics.py": ["--arch", "x64", "vulkan", "--cpu-threads", "1"],
           "shoot.py": ["--arch", "x64", "vulkan", "--cpu-threads", "1"]}
#: The extra each example needs beyond the package (installed by the test command).
NEEDS = {"ops_torch.py": [("torch", "interop")], "ops_jax.py": [("jax", "jax")],
         "fit_torch.py": [("torch", "interop"), ("llvmlite.binding", "ptx")],
         "fit_jax.py": [("jax", "jax"), ("optax", "test"), ("llvmlite.binding", "ptx")]}


def test_every_example_is_run_here():
    assert sorted(EXPECTED) == sorted(f for f in os.listdir(EXAMPLES) if f.endswith(".py") and f not in SOURCES)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_example_runs(name):
    require_arch(Arch.X64)
    for need in NEEDS.get(name, []):
        require_extra(*need)
    env = {k: v for k, v in os.environ.items() if k != "TAICHI_AOT_ARCH"}
    proc = subprocess.run([sys.executable, os.path.join(EXAMPLES, name)], capture_output=True, text=True,
                          timeout=300, cwd=ROOT, env=env)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    for line in EXPECTED[name]:
        assert line in proc.stdout, (line, proc.stdout)


@pytest.mark.parametrize("source", sorted(SOURCES))
def test_the_examples_modules_are_built_from_their_sources(source):
    module = source[:-3] + ".tcm"
    with zipfile.ZipFile(os.path.join(EXAMPLES, module)) as z:
        manifest = json.loads(z.read("taichi_aot.json"))
    with open(os.path.join(EXAMPLES, source), "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    assert manifest["source"] == source and manifest["source_sha256"] == digest, (
        f"rebuild it: python -m taichi_aot build examples/{source} {' '.join(SOURCES[source])} -o examples/{module}")
