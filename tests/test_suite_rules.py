"""The suite's own rules, which tests/conftest.py holds every test module to, run on a small suite of their own in a
child pytest: a module that leaves a process-wide setting behind (JAX's default device, a variable, sys.path) fails,
the setting is put back for the next module, and a skip's long reason is one short line of the summary."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

from conftest import HERE, ROOT, SKIP_REASON_CHARS, require_extra

LEAKS = """
import os, sys
import jax

sys.path.insert(0, "/nonexistent/left-behind")


def test_sets_them():
    jax.config.update("jax_default_device", jax.devices("cpu")[0])
    os.environ["TAICHI_AOT_LEFT_BEHIND"] = "1"
"""

AFTER = """
import os
import jax
import pytest


def test_the_next_module_finds_them_as_they_were():
    assert jax.config.jax_default_device is None and "TAICHI_AOT_LEFT_BEHIND" not in os.environ


def test_scoped_changes_leave_nothing(monkeypatch):
    monkeypatch.setenv("TAICHI_AOT_SCOPED", "1")
    with jax.default_device(jax.devices("cpu")[0]):
        pass


def test_a_long_reason():
    pytest.skip("no such device here: its probe said " + "much more, " * 40 + "(and where it keeps that) [etc.]")
"""


def test_a_module_leaving_a_setting_behind_fails_and_the_next_runs_as_before(tmp_path):
    require_extra("jax", "jax")
    shutil.copy(os.path.join(HERE, "conftest.py"), tmp_path)
    (tmp_path / "test_a_leaks.py").write_text(LEAKS)
    (tmp_path / "test_b_after.py").write_text(AFTER)
    env = {**os.environ, "PYTHONPATH": ROOT}  # this checkout's package, as the suite's
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-ra", "-p", "no:cacheprovider", "."],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env)
    out = proc.stdout
    assert proc.returncode == 1 and "3 passed, 1 skipped, 1 error" in out, out[-3000:] + proc.stderr[-2000:]
    assert "ERROR at teardown of test_sets_them" in out and "test_a_leaks.py left process-wide changes behind" in out
    assert "JAX's config['jax_default_device']: None -> CpuDevice(id=0)" in out, out[-3000:]
    assert "os.environ['TAICHI_AOT_LEFT_BEHIND']: '(unset)' -> '1'" in out, out[-3000:]
    assert "when imported: sys.path" in out and "/nonexistent/left-behind" in out, out[-3000:]
    assert "test_b_after.py left" not in out
    [skipped] = [line for line in out.splitlines() if line.startswith("SKIPPED")]
    reason = skipped.split("test_b_after.py:", 1)[1].split(": ", 1)[1]
    assert len(reason) <= SKIP_REASON_CHARS and reason.startswith("no such device here: its probe said much more,")
    assert reason.endswith("...") and "[etc.]" not in reason, skipped
