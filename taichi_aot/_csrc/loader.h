/* What loader.c shares with the other C files of taichi_aot._native: a private header, never handed to cffi. */
#ifndef TAICHI_AOT_LOADER_H
#define TAICHI_AOT_LOADER_H

#include <stddef.h>

/* A C-API function's name and the slot of its trampoline's pointer (_cdef.trampolines() writes the table, before
   the C files in the one translation unit build_ffi.py makes; loader.c fills and empties it). */
typedef struct {
    const char *name;
    void **slot;
} TaichiAotSymbol;

/* Hidden, as the functions below: read directly, never through the GOT (nothing looks them up by name). */
extern __attribute__((visibility("hidden"))) TaichiAotSymbol taichi_aot_symbols[];
extern __attribute__((visibility("hidden"))) const size_t taichi_aot_symbol_count;

/* The trampoline slot of C-API function `name` (its pointer, NULL before the library is loaded), or NULL where the
   table has no such function (backends/vkorder.c points slots at its wrappers). */
__attribute__((visibility("hidden"))) void **taichi_aot_symbol_slot(const char *name);

/* The loaded libtaichi_c_api's dlopen handle, or NULL (got.c reads its link map). */
__attribute__((visibility("hidden"))) void *taichi_aot_library_handle(void);

#endif
