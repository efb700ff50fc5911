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
}
#: The extra each example needs beyond the package (installed by the test command).
NEEDS = {"ops_torch.py": ("torch", "interop"), "ops_jax.py": ("jax", "jax")}


def test_every_example_is_run_here():
    assert sorted(EXPECTED) == sorted(f for f in os.listdir(EXAMPLES) if f.endswith(".py") and f != "physics.py")


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_example_runs(name):
    require_arch(Arch.X64)
    if name in NEEDS:
        require_extra(*NEEDS[name])
    env = {k: v for k, v in os.environ.items() if k != "TAICHI_AOT_ARCH"}
    proc = subprocess.run([sys.executable, os.path.join(EXAMPLES, name)], capture_output=True, text=True,
                          timeout=300, cwd=ROOT, env=env)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    for line in EXPECTED[name]:
        assert line in proc.stdout, (line, proc.stdout)


def test_the_examples_module_is_built_from_its_source():
    with zipfile.ZipFile(os.path.join(EXAMPLES, "physics.tcm")) as z:
        manifest = json.loads(z.read("taichi_aot.json"))
    with open(os.path.join(EXAMPLES, "physics.py"), "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    assert manifest["source"] == "physics.py" and manifest["source_sha256"] == digest, (
        "rebuild it: python -m taichi_aot build examples/physics.py --arch x64 vulkan --cpu-threads 1 "
        "-o examples/physics.tcm")
