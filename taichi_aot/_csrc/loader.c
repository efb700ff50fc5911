/* Open libtaichi_c_api at run time and point the trampolines at its functions.

   Compiled in one translation unit after the trampolines that _cdef.trampolines() generates, whose
   table `taichi_aot_symbols` ({name, slot} per C-API function, loader.h) this file fills and empties. */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "taichi_aot.h"
#include "loader.h"

static void *taichi_aot_handle = NULL;

void *taichi_aot_library_handle(void) {
    return taichi_aot_handle;
}

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
    for (i = 0; i < taichi_aot_symbol_count; ++i) {
        *taichi_aot_symbols[i].slot = dlsym(handle, taichi_aot_symbols[i].name);
        if (*taichi_aot_symbols[i].slot == NULL) {
            ++missing;
        }
    }
    return (int)missing;
}

void *taichi_aot_open_functions(const char *path, const char *const *names, void **functions, size_t count,
                                char *error, size_t error_size) {
    size_t i;
    void *handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (handle == NULL) {
        const char *why = dlerror();
        snprintf(error, error_size, "%s", why ? why : "dlopen failed");
        return NULL;
    }
    for (i = 0; i < count; ++i) {
        functions[i] = dlsym(handle, names[i]);
        if (functions[i] == NULL) {
            snprintf(error, error_size, "%s lacks %s", path, names[i]);
            dlclose(handle);
            return NULL;
        }
    }
    return handle;
}

void taichi_aot_unload(void) {
    size_t i;
    for (i = 0; i < taichi_aot_symbol_count; ++i) {
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

void **taichi_aot_symbol_slot(const char *name) {
    size_t i;
    for (i = 0; i < taichi_aot_symbol_count; ++i) {
        if (strcmp(taichi_aot_symbols[i].name, name) == 0) {
            return taichi_aot_symbols[i].slot;
        }
    }
    return NULL;
}

int taichi_aot_has_symbol(const char *name) {
    void **slot = taichi_aot_symbol_slot(name);
    return slot != NULL && *slot != NULL;
}
