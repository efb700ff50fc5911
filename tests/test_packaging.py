"""The distributions as PyPI and a user get them: scripts/package.sh builds, repairs, audits and installs them."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest

from conftest import module_at

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE_SH = os.path.join(ROOT, "scripts", "package.sh")
#: The newest glibc the wheel's extensions may need (package.sh compiles them with zig cc for it): RHEL 8's
EXTENSIONS_GLIBC = (2, 28)
#: The newest glibc the wheel may need: what libtaichi_c_api 1.7.4 as Taichi ships it needs (its pthread_create,
#: dlopen, ... of GLIBC_2.34), and so the wheel's tag, manylinux_2_34
LIBRARY_GLIBC = (2, 34)


def _glibc_needed(path: str) -> tuple[int, int]:
    """The newest GLIBC_x.y among the symbol versions ``objdump -T`` lists for a shared object."""
    dump = subprocess.run(["objdump", "-T", path], capture_output=True, text=True, check=True).stdout
    return max([(int(a), int(b)) for a, b in re.findall(r"\bGLIBC_(\d+)\.(\d+)", dump)] or [(0, 0)])


def test_wheel_and_sdist(packaged, tmp_path):
    out, proc = Path(packaged.out), packaged.proc
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    wheels = [p.name for p in out.glob("*.whl")]
    assert len(wheels) == 1 and "-cp39-abi3-manylinux_" in wheels[0], wheels  # one wheel for CPython >= 3.9
    # The tag is the newest glibc any object in the wheel needs (auditwheel's, checked here with objdump): the
    # bundled libtaichi_c_api's 2.34, never more; the extensions, compiled for glibc 2.28, need nothing newer
    [tag] = [tuple(map(int, m)) for m in re.findall(r"-manylinux_(\d+)_(\d+)_x86_64\.whl$", wheels[0])]
    with zipfile.ZipFile(out / wheels[0]) as z:
        objects = [n for n in z.namelist() if n.endswith(".so")]
        z.extractall(tmp_path, objects)
    needed = {n: _glibc_needed(str(tmp_path / n)) for n in objects}
    extensions = {n: v for n, v in needed.items() if n.endswith(".abi3.so")}
    assert set(extensions) == {"taichi_aot/_native.abi3.so", "taichi_aot/_call.abi3.so",
                               "taichi_aot_bench/_steps.abi3.so"}, needed
    assert all(v <= EXTENSIONS_GLIBC for v in extensions.values()), needed
    assert tag == max(needed.values()) <= LIBRARY_GLIBC, (tag, needed)
    assert needed["taichi_aot/_lib/lib/libtaichi_c_api.so"] == tag, needed  # the library alone sets it
    # the library rides along unchanged: the repair touched neither it nor its name, and the wheel stays small
    library = "taichi_aot/_lib/lib/libtaichi_c_api.so"
    digests = []
    for path in (out / wheels[0], *(out / "raw").glob("*.whl")):
        with zipfile.ZipFile(path) as z:
            digests.append(hashlib.sha256(z.read(library)).hexdigest())
            assert "taichi_aot/_lib/LICENSE" in z.namelist() and not any(".libs/" in n for n in z.namelist())
    assert len(digests) == 2 and digests[0] == digests[1]
    assert (out / wheels[0]).stat().st_size < 30 << 20
    audit = json.loads((out / "logs" / "abi3audit.json").read_text().strip().splitlines()[-1])
    [(_, spec)] = audit["specs"].items()
    assert all(obj["result"]["is_abi3"] and not obj["result"]["non_abi3_symbols"] for obj in spec["wheel"])
    # every extension is audited: the C-API bindings, the C call (pinned to the limited API of 3.9), the bench's loops
    audited = {os.path.basename(obj["name"]) for obj in spec["wheel"]}
    assert {"_native.abi3.so", "_call.abi3.so", "_steps.abi3.so"} <= audited, audited
    assert (out / "demo.png").stat().st_size > 0  # the demo ran from the installed wheel
    assert not [n for n in ("venv-wheel", "venv-sdist", "src") if (out / n).exists()]  # the checks' venvs: gone
    # a short summary: the wheel, its tag and the glibc its objects need, abi3audit's verdict, the demo, the sdist's
    # tests; auditwheel's and abi3audit's full texts are in the logs
    lines = proc.stdout.splitlines()
    assert len(lines) <= 10 and all(line.startswith("package: ") for line in lines), proc.stdout
    assert f"package: wheel {wheels[0]} " in proc.stdout and "the extensions need at most 2." in proc.stdout
    assert "abi3audit: " in proc.stdout and "all abi3" in proc.stdout and '"specs"' not in proc.stdout
    shown = " ".join((out / "logs" / "auditwheel-show.txt").read_text().split())  # auditwheel wraps its lines
    assert f'consistent with the following platform tag: "manylinux_{tag[0]}_{tag[1]}_x86_64"' in shown, shown
    [tests] = [line for line in lines if line.startswith("package: the sdist's own tests: ")]
    assert " passed" in tests and "failed" not in tests and "error" not in tests, tests
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


def test_package_sh_removes_only_what_it_made(tmp_path):
    """package.sh's folder holds what an earlier run listed as its own (removed when it runs again) and whatever
    else was put there (kept): an entry it would write whose name is taken by something it did not make stops it
    before it builds anything, with that entry as it was."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "raw").mkdir()
    (out / "raw" / "old.whl").write_text("an earlier run's")
    (out / "taichi_aot-0-cp39-abi3-manylinux_2_34_x86_64.whl").write_text("an earlier run's")
    (out / ".package-made").write_text("raw\ntaichi_aot-0-cp39-abi3-manylinux_2_34_x86_64.whl\n../escape\n")
    (tmp_path / "escape").write_text("outside")
    (out / "mine.whl").write_text("the user's")
    (out / "logs").write_text("the user's, where package.sh writes its logs")
    proc = subprocess.run(["bash", PACKAGE_SH, str(out)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "logs exists and scripts/package.sh did not make it" in proc.stderr, proc.stderr
    assert sorted(p.name for p in out.iterdir()) == ["logs", "mine.whl"]
    assert (out / "logs").read_text().startswith("the user's") and (tmp_path / "escape").exists()


def _pytest_total():
    return module_at(os.path.join(ROOT, "scripts", "pytest_total.py"), "pytest_total")


@pytest.mark.parametrize(("logs", "expected"), [
    (["....\n824 passed, 59 skipped in 512.30s (0:08:32)\n", "=== 3 failed, 10 passed, 1 error in 2.01s ===\n",
      "12 passed, 400 deselected, 2 warnings in 30.5s\n"],
     "total: 846 passed, 3 failed, 59 skipped, 1 error"),
    # the last summary line of a run counts (a failure's captured output may hold a child pytest's), ANSI colours
    # are left out, xfailed and xpassed are named where there are any, and "no tests ran" counts nothing
    (["captured: 5 passed in 1.00s\nmore\n\x1b[32m2 passed\x1b[0m, \x1b[33m1 xfailed\x1b[0m in 0.10s\n",
      "no tests ran in 0.01s\n"],
     "total: 2 passed, 0 failed, 0 skipped, 0 errors, 1 xfailed"),
    # a run that printed no summary (killed) counts as an error
    (["....F..\n", "1 passed in 1s\n"], "total: 1 passed, 0 failed, 0 skipped, 1 error"),
])
def test_the_test_commands_total(logs, expected):
    """scripts/test.sh's last line adds up the runs' summary lines (scripts/pytest_total.py)."""
    line, missing = _pytest_total().total(logs)
    assert line == expected
    assert missing == [i for i, log in enumerate(logs) if " in " not in log]


def test_the_test_commands_total_from_its_logs(tmp_path):
    (tmp_path / "1.log").write_text("3 passed, 1 skipped in 4.00s\n")
    (tmp_path / "2.log").write_text("Traceback ...\n")
    proc = subprocess.run([shutil.which("python3") or "python3", os.path.join(ROOT, "scripts", "pytest_total.py"),
                           str(tmp_path / "1.log"), str(tmp_path / "2.log"), str(tmp_path / "none.log")],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout == "total: 3 passed, 0 failed, 1 skipped, 2 errors\n", proc
    assert "2.log: no pytest summary line" in proc.stderr and "none.log" in proc.stderr
