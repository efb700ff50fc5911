"""The site: ``mkdocs build --strict`` (mkdocs.yml, docs/) renders the guide and the docstrings without a warning.

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
    "reference/extending/index.html": ["taichi_aot.backends.register", "taichi_aot.backends.Choice",
                                       "taichi_aot.placement.Device", "taichi_aot.placement.open_native"],
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


def _guide_pages() -> list[str]:
    """The guide's pages and the contributors' (docs/, the reference apart), relative to docs/."""
    docs = os.path.join(ROOT, "docs")
    return sorted(os.path.relpath(os.path.join(folder, name), docs)
                  for folder, _, names in os.walk(docs) if not folder.startswith(os.path.join(docs, "reference"))
                  for name in names if name.endswith(".md"))


def test_every_page_is_in_the_nav_and_linked_from_the_readme():
    """The README is the front page: every page of the guide is reachable from the site's nav and from it."""
    with open(os.path.join(ROOT, "mkdocs.yml"), encoding="utf-8") as f:
        nav = f.read().split("\nnav:", 1)[1].split("\n\n", 1)[0]
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    pages = _guide_pages()
    assert "guide/pool.md" in pages and "index.md" in pages, pages
    for page in pages:
        assert f": {page}\n" in nav + "\n", f"{page} is not in mkdocs.yml's nav"
        if page not in ("index.md", "contributing.md"):
            assert f"](docs/{page})" in readme or f"](docs/{page}#" in readme, f"the README does not link {page}"
    assert "](docs/index.md)" in readme


def test_the_environment_table_names_every_variable():
    """Every TAICHI_AOT_ variable the package or the bench reads, and every one config.VARIABLES names, is a row of
    the guide's table (docs/guide/config.md); every row names one that something reads."""
    import re

    from taichi_aot import config

    with open(os.path.join(ROOT, "docs", "guide", "config.md"), encoding="utf-8") as f:
        table = f.read().split("## Environment variables", 1)[1]
    rows = {name for line in table.splitlines() if line.startswith("| `")
            for name in re.findall(r"`([A-Z][A-Z0-9_]+)`", line.split("|")[1])}
    read = set()
    for folder in ("taichi_aot", "taichi_aot_bench"):
        for path, _, names in os.walk(os.path.join(ROOT, folder)):
            for name in names:
                if name.endswith(".py"):
                    with open(os.path.join(path, name), encoding="utf-8") as f:
                        read |= set(re.findall(r"[\"'](TAICHI_AOT_[A-Z0-9_]+)[\"']", f.read()))
    for name in ("setup.py", "build_ffi.py"):
        with open(os.path.join(ROOT, name), encoding="utf-8") as f:
            read |= set(re.findall(r"[\"'](TAICHI_AOT_[A-Z0-9_]+)[\"']", f.read()))
    named = {v for v in config.VARIABLES if not v.endswith("_")}
    assert read - rows == set(), f"read but not in the table: {sorted(read - rows)}"
    assert named - rows == set(), f"in config.VARIABLES but not in the table: {sorted(named - rows)}"
    with open(os.path.join(ROOT, "scripts", "setup.sh"), encoding="utf-8") as f:
        scripts = f.read()
    unread = {v for v in rows - read - named if v.startswith("TAICHI_AOT_") and v not in scripts}
    assert not unread, f"in the table but read by nothing: {sorted(unread)}"


def test_the_logging_example_logs_what_it_says(tmp_path):
    """The guide's logging example (docs/guide/config.md) puts the library's lines on stderr through Python's
    logging, as its text says (before, its program logged nothing at all), run on the examples' physics.tcm."""
    import re
    import shutil

    from conftest import require_arch
    from taichi_aot import Arch

    require_arch(Arch.X64)
    with open(os.path.join(ROOT, "docs", "guide", "config.md"), encoding="utf-8") as f:
        section = f.read().split("## The library's log", 1)[1].split("\n## ", 1)[0]
    code = re.findall(r"```python\n(.*?)```", section, re.S)[0]
    shutil.copy(os.path.join(ROOT, "examples", "physics.tcm"), tmp_path / "physics.tcm")
    (tmp_path / "example.py").write_text(code)
    env = {**os.environ, "PYTHONPATH": ROOT}
    env.pop("TI_LOG_LEVEL", None)
    env.pop("TAICHI_AOT_VERBOSE", None)
    proc = subprocess.run([sys.executable, "example.py"], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          env=env)
    assert proc.returncode == 0, proc.stderr
    assert re.search(r"^ERROR:taichi_aot:libtaichi_c_api: \[E .*Failed to load kernel=stepp$", proc.stderr, re.M), \
        proc.stderr
    assert re.search(r"^DEBUG:taichi_aot:libtaichi_c_api: .*C-API error", proc.stderr, re.M), proc.stderr


def test_the_layout_names_every_file_of_the_package_and_the_bench():
    """docs/layout.md is the map: every source file of taichi_aot and taichi_aot_bench (Python, C, headers) is named
    there, by its file name or, in a folder whose entry lists its modules by name, by its stem as a word."""
    import re

    with open(os.path.join(ROOT, "docs", "layout.md"), encoding="utf-8") as f:
        layout = f.read()
    missing = []
    for folder in ("taichi_aot", "taichi_aot_bench"):
        for path, dirs, names in os.walk(os.path.join(ROOT, folder)):
            dirs[:] = [d for d in dirs if d not in ("__pycache__", "_lib")]
            for name in names:
                if not name.endswith((".py", ".c", ".h")) or name == "__init__.py":
                    continue
                stem = name.rsplit(".", 1)[0]
                if name not in layout and not re.search(rf"(?<![\w.]){re.escape(stem)}(?!\w)", layout):
                    missing.append(os.path.relpath(os.path.join(path, name), ROOT))
    assert "backends/vulkan.c" in layout and "placement/" in layout
    assert not missing, f"files docs/layout.md does not name: {sorted(missing)}"
