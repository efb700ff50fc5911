"""Build the cffi extension ``taichi_aot._native`` (API mode, out of line).

The extension is compiled against the vendored headers in ``include/taichi`` and
does not link libtaichi_c_api: each C-API function is a small compiled
trampoline calling through a pointer that ``taichi_aot_load()`` fills with
``dlopen``/``dlsym`` at import time. So building needs no Taichi install and no
environment variable, and the library can be chosen at run time
(``TAICHI_C_API_INSTALL_DIR`` or the ``taichi`` wheel).
"""

from __future__ import annotations

import importlib.util
import os

from cffi import FFI

HERE = os.path.dirname(os.path.abspath(__file__))
INCLUDE_DIR = os.path.join(HERE, "include")


def _load_cdef_module():
    # Load taichi_aot/_cdef.py by path: importing the package would need the
    # extension this script is about to build.
    spec = importlib.util.spec_from_file_location("_taichi_aot_cdef", os.path.join(HERE, "taichi_aot", "_cdef.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_cdef = _load_cdef_module()

# One prepared launch: a kernel (kind 0) or a compute graph (kind 1) with packed arguments. `seen`
# is the close epoch at which Python last found every object it uses open, `thread` the thread that
# owns the runtime, `pending` the runtime's "work may be running" flag, set by every launch. Declared
# once, for the cdef and the C source alike.
LAUNCH_STRUCT = """
typedef struct {
    TiRuntime runtime;
    uint32_t kind;
    void *handle;
    uint32_t arg_count;
    const void *args;
    int64_t seen;
    unsigned long thread;
    int32_t *pending;
} TaichiAotLaunch;
"""

# Functions of our own, compiled into the extension next to the trampolines.
EXTRA_CDEF = LAUNCH_STRUCT + """
int taichi_aot_load(const char *path, char *error, size_t error_size);
void taichi_aot_unload(void);
int taichi_aot_is_loaded(void);
int taichi_aot_has_symbol(const char *name);

int64_t taichi_aot_epoch;
#define TAICHI_AOT_STALE ...
int taichi_aot_launch(const TaichiAotLaunch *launch);
int taichi_aot_replay(const TaichiAotLaunch *launches, uint32_t count, uint64_t repeat, uint64_t *done);
"""

EXTRA_SOURCE = LAUNCH_STRUCT + r"""
static void *taichi_aot_handle = NULL;

int taichi_aot_load(const char *path, char *error, size_t error_size) {
    void *handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    size_t i, missing = 0;
    if (handle == NULL) {
        const char *why = dlerror();
        snprintf(error, error_size, "%s", why ? why : "dlopen failed");
        return -1;
    }
    if (taichi_aot_handle != NULL && taichi_aot_handle != handle) {
        dlclose(taichi_aot_handle);
    }
    taichi_aot_handle = handle;
    for (i = 0; i < sizeof(taichi_aot_symbols) / sizeof(taichi_aot_symbols[0]); ++i) {
        *taichi_aot_symbols[i].slot = dlsym(handle, taichi_aot_symbols[i].name);
        if (*taichi_aot_symbols[i].slot == NULL) {
            ++missing;
        }
    }
    return (int)missing;
}

void taichi_aot_unload(void) {
    size_t i;
    for (i = 0; i < sizeof(taichi_aot_symbols) / sizeof(taichi_aot_symbols[0]); ++i) {
        *taichi_aot_symbols[i].slot = NULL;
    }
    if (taichi_aot_handle != NULL) {
        dlclose(taichi_aot_handle);
        taichi_aot_handle = NULL;
    }
}

int taichi_aot_is_loaded(void) {
    return taichi_aot_handle != NULL;
}


/* Bumped by Python whenever a native object is closed. */
int64_t taichi_aot_epoch = 0;
#define TAICHI_AOT_STALE (-100)

/* A launch and its error check in one call from Python. Returns the TiError code (0: success),
   or TAICHI_AOT_STALE without launching when something was closed since `seen` or the caller is
   not the runtime's thread: Python then re-checks (and raises) before launching again. The
   error message stays in the library's thread-local slot for the error funnel to take. */
int taichi_aot_launch(const TaichiAotLaunch *l) {
    if (l->seen != taichi_aot_epoch || (unsigned long)pthread_self() != l->thread) {
        return TAICHI_AOT_STALE;
    }
    *l->pending = 1;
    if (l->kind == 0) {
        ti_launch_kernel(l->runtime, (TiKernel)l->handle, l->arg_count, (const TiArgument *)l->args);
    } else {
        ti_launch_compute_graph(l->runtime, (TiComputeGraph)l->handle, l->arg_count,
                                (const TiNamedArgument *)l->args);
    }
    return (int)ti_get_last_error(NULL, NULL);
}

/* Replay recorded launches `repeat` times with no Python in between. The first pass checks the
   error slot after every launch and stops at the first failure (`*done` counts the launches made
   before it); later passes repeat the same launches with the same arguments, so they are checked
   once, at the end (the sticky error slot keeps any failure until then). */
int taichi_aot_replay(const TaichiAotLaunch *launches, uint32_t count, uint64_t repeat, uint64_t *done) {
    uint64_t r;
    uint32_t i;
    int error;
    *done = 0;
    if (count > 0 && repeat > 0) {
        *launches[0].pending = 1;
    }
    for (r = 0; r < repeat; ++r) {
        for (i = 0; i < count; ++i) {
            const TaichiAotLaunch *l = &launches[i];
            if (l->kind == 0) {
                ti_launch_kernel(l->runtime, (TiKernel)l->handle, l->arg_count, (const TiArgument *)l->args);
            } else {
                ti_launch_compute_graph(l->runtime, (TiComputeGraph)l->handle, l->arg_count,
                                        (const TiNamedArgument *)l->args);
            }
            if (r == 0) {
                error = (int)ti_get_last_error(NULL, NULL);
                if (error != 0) {
                    return error;
                }
            }
            ++*done;
        }
    }
    return (int)ti_get_last_error(NULL, NULL);
}

int taichi_aot_has_symbol(const char *name) {
    size_t i;
    for (i = 0; i < sizeof(taichi_aot_symbols) / sizeof(taichi_aot_symbols[0]); ++i) {
        if (strcmp(taichi_aot_symbols[i].name, name) == 0) {
            return *taichi_aot_symbols[i].slot != NULL;
        }
    }
    return 0;
}
"""


def trampolines(functions) -> str:
    """C source: one pointer and one forwarding definition per C-API function.

    A function the loaded library lacks reports TI_ERROR_NOT_SUPPORTED through
    the library's own last-error slot instead of jumping to NULL.
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
    missing = (
        "static void taichi_aot_missing(const char *name);\n"
        + "\n".join(out)
        + "\nstatic struct { const char *name; void **slot; } taichi_aot_symbols[] = {\n"
        + "\n".join(table)
        + "\n};\n"
        + "static void taichi_aot_missing(const char *name) {\n"
        "    char message[160];\n"
        "    if (taichi_aot_fn_ti_set_last_error == NULL) return;\n"
        '    snprintf(message, sizeof(message), "%s is not exported by the loaded libtaichi_c_api", name);\n'
        "    taichi_aot_fn_ti_set_last_error(TI_ERROR_NOT_SUPPORTED, message);\n"
        "}\n"
    )
    return missing


def make_ffibuilder() -> FFI:
    cdef = _cdef.build_cdef(INCLUDE_DIR)
    functions = _cdef.functions(cdef)
    includes = "\n".join(f'#include "taichi/{name}"' for name in _cdef.HEADERS)
    source = (
        "#include <dlfcn.h>\n#include <pthread.h>\n#include <stdbool.h>\n#include <stddef.h>\n#include <stdint.h>\n"
        "#include <stdio.h>\n#include <string.h>\n"
        + _cdef.INTEROP_PRELUDE
        + '#include "taichi/taichi.h"\n'
        + includes
        + "\n"
        + trampolines(functions)
        + EXTRA_SOURCE
    )
    builder = FFI()
    builder.cdef(cdef + EXTRA_CDEF)
    builder.set_source(
        "taichi_aot._native",
        source,
        include_dirs=[INCLUDE_DIR],
        libraries=["dl", "pthread"],
    )
    return builder


ffibuilder = make_ffibuilder()

if __name__ == "__main__":
    ffibuilder.compile(verbose=True)
