"""The API reference: ``mkdocs build --strict`` (mkdocs.yml, docs/) renders the docstrings without a warning.

The docs extra (mkdocs, mkdocstrings' Python handler) is promised by the test command: without it the test
skips locally and fails under CI. ``bash scripts/docs.sh`` makes the same build into site/.
"""

from __future__ import annotations

import os
import subprocess
import sys

from conftest import ROOT, require_extra

#: Page of the built reference -> objects it must document (the heading ids mkdocstrings gives them).
PAGES = {
    "reference/runtime/index.html": ["taichi_aot.Runtime", "taichi_aot.Runtime.load_module", "taichi_aot.best_arch"],
    "reference/memory/index.html": ["taichi_aot.NdArray", "taichi_aot.Memory", "taichi_aot.Image"],
    "reference/launch/index.html": ["taichi_aot.AotModule", "taichi_aot.Kernel", "taichi_aot.ComputeGraph"],
    "reference/enums/index.html": ["taichi_aot.enums.Arch", "taichi_aot.enums.Access"],
    "reference/errors/index.html": ["taichi_aot.errors.TaichiError", "taichi_aot.errors.ClosedError"],
    "reference/config/index.html": ["taichi_aot.config.show_config", "taichi_aot.config.devices"],
    "reference/capi/index.html": ["taichi_aot.capi.create_runtime", "taichi_aot.capi.launch_kernel"],
    "reference/metadata/index.html": ["taichi_aot.metadata.read_module", "taichi_aot.metadata.ModuleInfo"],
    "reference/pool/index.html": ["taichi_aot.pool.Pool", "taichi_aot.pool.Pool.map", "taichi_aot.pool.Worker",
                                  "taichi_aot.pool.Pool.lost_workers", "taichi_aot.pool.WorkerLost"],
    "reference/ops/index.html": ["taichi_aot.torch.op", "taichi_aot.torch.Op", "taichi_aot.jax.op",
                                 "taichi_aot.jax.Op"],
}


def test_reference_builds_strict(tmp_path):
    require_extra("mkdocs", "docs")
    require_extra("mkdocstrings_handlers.python", "docs")
    site = tmp_path / "site"
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", os.path.join(ROOT, "mkdocs.yml"),
         "--site-dir", str(site)],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    for page, names in PAGES.items():
        html = (site / page).read_text(encoding="utf-8")
        assert ":::" not in html, f"{page}: a mkdocstrings block was left unrendered"
        missing = [name for name in names if f'id="{name}"' not in html]
        assert not missing, f"{page} does not document {missing}"
