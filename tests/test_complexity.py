"""The package's code stays readable by measure, and every C file it has is built.

* Python (the package and the bench): no function's cyclomatic complexity above 15, as radon counts it (ruff's
  C901 at 12 counts fewer branches: radon adds boolean operators and comprehensions);
* C (the extensions and the bench's): no function above 20, as lizard counts it (a function that long has phases:
  split it there);
* every ``.c`` file in ``taichi_aot/_csrc`` is compiled into one of the extensions (build_ffi.py's ``C_FILES``,
  setup.py's ``CALL_FILES``): a backend's C put beside the others and not listed would not be built at all.

radon and lizard come with the ``check`` extra (the test command installs it)."""

from __future__ import annotations

import glob
import os

from conftest import module_at, require_extra

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PY_LIMIT, C_LIMIT = 15, 20
PACKAGES = ("taichi_aot", "taichi_aot_bench")


def _files(pattern: str) -> list[str]:
    return sorted(f for p in PACKAGES for f in glob.glob(os.path.join(ROOT, p, pattern), recursive=True))


#: Functions over the limit, by ``file:name``, each with why it reads best whole (none today): the rule asks for a
#: reason, not a trim (a function bent under the line by helpers that split one decision reads worse).
COMPLEX: dict[str, str] = {}


def test_no_python_function_is_over_the_limit_without_a_reason():
    require_extra("radon", "check")
    from radon.complexity import cc_visit

    over, seen = [], set()
    for path in _files("**/*.py"):
        with open(path, encoding="utf-8") as f:
            blocks = cc_visit(f.read())
        for block in blocks:
            for b in [block, *getattr(block, "methods", []), *getattr(block, "closures", [])]:
                key = f"{os.path.relpath(path, ROOT)}:{b.name}"
                if b.complexity > PY_LIMIT:
                    seen.add(key)
                    if key not in COMPLEX:
                        over.append(f"{key} line {b.lineno} ({b.complexity})")
    assert not over, f"over radon's {PY_LIMIT}: split them, or say in COMPLEX why each reads best whole: {over}"
    assert not set(COMPLEX) - seen, f"no longer over the limit: take them off COMPLEX: {sorted(set(COMPLEX) - seen)}"


def test_no_c_function_is_over_the_limit():
    require_extra("lizard", "check")
    import lizard

    over = []
    for path in _files("**/*.c"):
        for fn in lizard.analyze_file(path).function_list:
            if fn.cyclomatic_complexity > C_LIMIT:
                over.append(f"{os.path.relpath(path, ROOT)}:{fn.start_line} {fn.name} ({fn.cyclomatic_complexity})")
    assert not over, f"C functions over lizard's {C_LIMIT}: {over}"


def test_every_c_file_of_the_package_is_built():
    csrc = os.path.join(ROOT, "taichi_aot", "_csrc")
    have = {os.path.relpath(f, csrc) for f in glob.glob(os.path.join(csrc, "**", "*.c"), recursive=True)}
    native = set(module_at(os.path.join(ROOT, "build_ffi.py"), "_build_ffi_for_test").C_FILES)
    with open(os.path.join(ROOT, "setup.py"), encoding="utf-8") as f:
        setup = f.read()
    call = {name for name in have if f'"{name}"' in setup.split("CALL_FILES = ", 1)[1].split(")", 1)[0]}
    assert native <= have, f"build_ffi.py lists C files that are not there: {sorted(native - have)}"
    assert have == native | call, f"C files built into no extension: {sorted(have - native - call)}"
    assert {"backends/cuda.c", "backends/x64.c"} <= native  # each own backend's C beside the others
