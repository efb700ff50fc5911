"""The distributions as PyPI and a user get them: scripts/package.sh builds, repairs, audits and installs them."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import zipfile
from pathlib import Path

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_wheel_and_sdist(packaged):
    out, proc = Path(packaged.out), packaged.proc
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    wheels = [p.name for p in out.glob("*.whl")]
    assert len(wheels) == 1 and "-cp39-abi3-manylinux_" in wheels[0], wheels  # one wheel for CPython >= 3.9
    # the library rides along unchanged: the repair touched neither it nor its name, and the wheel stays small
    library = "taichi_aot/_lib/lib/libtaichi_c_api.so"
    digests = []
    for path in (out / wheels[0], *(out / "raw").glob("*.whl")):
        with zipfile.ZipFile(path) as z:
            digests.append(hashlib.sha256(z.read(library)).hexdigest())
            assert "taichi_aot/_lib/LICENSE" in z.namelist() and not any(".libs/" in n for n in z.namelist())
    assert len(digests) == 2 and digests[0] == digests[1]
    assert (out / wheels[0]).stat().st_size < 30 << 20
    audit = json.loads((out / "abi3audit.txt").read_text().strip().splitlines()[-1])
    [(_, spec)] = audit["specs"].items()
    assert all(obj["result"]["is_abi3"] and not obj["result"]["non_abi3_symbols"] for obj in spec["wheel"])
    # every extension is audited: the C-API bindings, the C call (pinned to the limited API of 3.9), the bench's loops
    audited = {os.path.basename(obj["name"]) for obj in spec["wheel"]}
    assert {"_native.abi3.so", "_call.abi3.so", "_steps.abi3.so"} <= audited, audited
    assert (out / "demo.png").stat().st_size > 0  # the demo ran from the installed wheel
    assert not [n for n in ("venv-wheel", "venv-sdist", "src") if (out / n).exists()]  # the checks' venvs: gone
    assert "passed" in proc.stdout and "failed" not in proc.stdout.split("package:")[0].splitlines()[-2]
    sdists = list(out.glob("*.tar.gz"))
    assert len(sdists) == 1
    listing = subprocess.run(["tar", "-tzf", str(sdists[0])], capture_output=True, text=True, check=True).stdout
    assert "taichi_aot/_lib/" not in listing  # an sdist fetches its own library when it is built
    for needed in ("LICENSE", "NOTICE", "taichi_aot/cli/demo.tcm", "taichi_aot/_bundle.py", "setup.py",
                   "tests/conftest.py", "tests/kernels.py", "tests/export_sample.py",
                   "tests/data/cdef.txt", "include/taichi/taichi_core.h", "taichi_aot/_csrc/launch.c",
                   "taichi_aot_bench/_csrc/driver.c", "taichi_aot_bench/_csrc/steps.c",
                   "taichi_aot_bench/_csrc/steps.h", "taichi_aot_bench/_steps.pyi", "taichi_aot/py.typed",
                   "taichi_aot/_native.pyi",
                   "taichi_aot/_call.pyi", "taichi_aot/_csrc/call_module.c", "taichi_aot/_csrc/table.c"):
        assert needed in listing, needed
