"""Turn the vendored Taichi C-API headers into cffi ``cdef`` text, and into the C trampolines.

Used by ``build_ffi.py`` (at build time, loaded by path so the package is not
imported) and by the test suite (so that a header update shows up as a diff).
Pure standard library on purpose.
"""

from __future__ import annotations

import os
import re
from typing import NamedTuple

#: The headers bound, in dependency order (relative to ``include/taichi``).
HEADERS = (
    "taichi_core.h",
    "taichi_cpu.h",
    "taichi_cuda.h",
    "taichi_opengl.h",
    "taichi_vulkan.h",
)

#: The C-API version the vendored headers describe.
HEADER_VERSION_RE = re.compile(r"#define\s+TI_C_API_VERSION\s+(\d+)")

#: Python functions the extension's C calls (cffi's ``extern "Python"``: each takes the GIL), declared to C in the
#: C file that calls it: taichi_aot.jax's maker of a JAX op's plan on another GPU (``_csrc/xla.c``).
PYTHON_CALLBACKS = 'extern "Python" int32_t taichi_aot_xla_twin(void *, int32_t, void **, char *, size_t);\n'
_BLOCK_COMMENT = re.compile(r"/\*.*?\*/", re.S)
_LINE_COMMENT = re.compile(r"//[^\n]*")
_INT_DEFINE = re.compile(r"^\s*#\s*define\s+(\w+)\s+(-?(?:0x[0-9a-fA-F]+|\d+))\s*$")
_DECORATORS = re.compile(r"\b(?:TI_DLL_EXPORT|TI_API_CALL)\b")
_VALUED_DEFINE = re.compile(r"^\s*#\s*define\s+(\w+)\s+\S")
_FUNCTION = re.compile(r"^(?P<restype>[^;()\n]*?[\w*])\s*\b(?P<name>ti_\w+)\s*\((?P<params>[^;]*)\)\s*;$", re.M)


def _kept_lines(text: str) -> list[str]:
    """A header's lines without comments, blank lines, C++-only blocks and preprocessor lines, but its integer
    ``#define``s (written ``#define NAME VALUE``)."""
    text = _BLOCK_COMMENT.sub("", text)
    text = _LINE_COMMENT.sub("", text)
    lines = []
    skip_cplusplus = 0
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("#"):
            if re.match(r"#\s*ifdef\s+__cplusplus", stripped):
                skip_cplusplus = 1
                continue
            if skip_cplusplus and re.match(r"#\s*endif", stripped):
                skip_cplusplus = 0
                continue
            match = _INT_DEFINE.match(stripped)
            if match and not skip_cplusplus:
                lines.append(f"#define {match.group(1)} {match.group(2)}")
            continue
        if skip_cplusplus or not stripped:
            continue
        lines.append(stripped)
    return lines


def _read_text(path: str) -> str:
    with open(path, encoding="utf-8") as f:
        return f.read()


#: The Vulkan and OpenGL types the interop headers name (``_csrc/interop.h``, which the extension's source includes
#: first), as cdef text.
INTEROP_PRELUDE = "".join(line + "\n" for line in _kept_lines(_read_text(os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "_csrc", "interop.h"))))


def clean_header(text: str) -> str:
    """Return the declarations of one header as cdef text.

    Comments, include guards, ``#include``s, ``extern "C"`` wrappers and the
    export decorators are dropped; integer ``#define``s are kept (cffi accepts
    them); every declaration ends up on one line.
    """
    lines = _kept_lines(text)
    body = " ".join(line for line in lines if not line.startswith("#"))
    body = _DECORATORS.sub("", body)
    body = re.sub(r"\s+", " ", body)
    # one statement per line: split after ';' and around braces of type bodies
    body = re.sub(r";\s*", ";\n", body)
    out = [line for line in lines if line.startswith("#define")]
    for stmt in body.splitlines():
        stmt = stmt.strip()
        if stmt:
            stmt = re.sub(r"\(\s+", "(", stmt)
            stmt = re.sub(r"\s+\)", ")", stmt)
            stmt = re.sub(r"\s*,\s*", ", ", stmt)
            out.append(stmt)
    return "\n".join(out) + "\n"


def extension_cdef(text: str) -> str:
    """The cdef text of our own header (``_csrc/taichi_aot.h``), which the cdef parser cannot read as is.

    Comments and preprocessor lines (include guard, ``#include``) are dropped; a
    ``#define`` with a value becomes ``#define NAME ...``, so that the compiler
    supplies the value and ``lib.NAME`` has it.
    """
    text = _BLOCK_COMMENT.sub("", text)
    text = _LINE_COMMENT.sub("", text)
    out = []
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("#"):
            match = _VALUED_DEFINE.match(stripped)
            if match:
                out.append(f"#define {match.group(1)} ...")
        elif stripped:
            out.append(line.rstrip())
    return "\n".join(out) + "\n"


def read_headers(include_dir: str) -> dict[str, str]:
    """Read the bound headers from ``include_dir`` (the folder holding ``taichi/``)."""
    result = {}
    for name in HEADERS:
        with open(os.path.join(include_dir, "taichi", name), encoding="utf-8") as f:
            result[name] = f.read()
    return result


def build_cdef(include_dir: str) -> str:
    """The whole cdef: interop prelude, then every bound header cleaned."""
    parts = [INTEROP_PRELUDE]
    for name, text in read_headers(include_dir).items():
        parts.append(f"/* {name} */\n" + clean_header(text))
    return "\n".join(parts)


def header_version(include_dir: str) -> int:
    """``TI_C_API_VERSION`` as written in the vendored ``taichi_core.h``."""
    with open(os.path.join(include_dir, "taichi", "taichi_core.h"), encoding="utf-8") as f:
        match = HEADER_VERSION_RE.search(f.read())
    if not match:
        raise ValueError("taichi_core.h does not define TI_C_API_VERSION")
    return int(match.group(1))


class Function(NamedTuple):
    """One C function declaration found in the cdef."""

    restype: str
    name: str
    params: str  # the parameter list as written, "void" when empty
    arg_names: tuple[str, ...]


def functions(cdef: str) -> list[Function]:
    """Every ``ti_*`` function declared in ``cdef``, in order."""
    result = []
    for match in _FUNCTION.finditer(cdef):
        params = match.group("params").strip()
        names: list[str] = []
        if params and params != "void":
            for param in params.split(","):
                ident = re.findall(r"\w+", param)
                if not ident:
                    raise ValueError(f"cannot parse parameter {param!r} of {match.group('name')}")
                names.append(ident[-1])
        result.append(Function(match.group("restype").strip(), match.group("name"), params or "void", tuple(names)))
    return result


def trampolines(functions: list[Function]) -> str:
    """C source: one pointer and one forwarding definition per C-API function, and their table.

    The table ``taichi_aot_symbols`` (name and pointer slot of each function, ``_csrc/loader.h``'s
    TaichiAotSymbol) is what ``_csrc/loader.c`` fills with ``dlsym``. A function the loaded library
    lacks reports TI_ERROR_NOT_SUPPORTED through the library's own last-error
    slot instead of jumping to NULL.
    """
    out = []
    table = []
    for fn in functions:
        ptr = f"taichi_aot_fn_{fn.name}"
        out.append(f"static __typeof__(&{fn.name}) {ptr} = NULL;")
        args = ", ".join(fn.arg_names)
        if fn.restype == "void":
            on_missing = "return;"
            call = f"{ptr}({args});"
        else:
            on_missing = f"return ({fn.restype})0;"
            call = f"return {ptr}({args});"
        out.append(
            f"{fn.restype} {fn.name}({fn.params}) {{\n"
            f"    if ({ptr} == NULL) {{ taichi_aot_missing(\"{fn.name}\"); {on_missing} }}\n"
            f"    {call}\n}}"
        )
        table.append(f'    {{"{fn.name}", (void **)&{ptr}}},')
    return (
        "static void taichi_aot_missing(const char *name);\n"
        + "\n".join(out)
        + "\nTaichiAotSymbol taichi_aot_symbols[] = {\n"
        + "\n".join(table)
        + "\n};\n"
        + "const size_t taichi_aot_symbol_count = sizeof(taichi_aot_symbols) / sizeof(taichi_aot_symbols[0]);\n"
        + "static void taichi_aot_missing(const char *name) {\n"
        "    char message[160];\n"
        "    if (taichi_aot_fn_ti_set_last_error == NULL) return;\n"
        '    snprintf(message, sizeof(message), "%s is not exported by the loaded libtaichi_c_api", name);\n'
        "    taichi_aot_fn_ti_set_last_error(TI_ERROR_NOT_SUPPORTED, message);\n"
        "}\n"
    )
