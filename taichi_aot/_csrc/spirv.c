/* SPIRV-Tools' validator, opened at run time (libSPIRV-Tools-shared, bundled beside libtaichi_c_api).

   The few functions and types of its stable C API (spirv-tools/libspirv.h) used here are declared here. A
   context is made once for each target environment and kept; a mutex serialises the calls (a load validates
   its tasks one after another, with the GIL released by cffi). */
#include <pthread.h>
#include <stdio.h>

#include "taichi_aot.h"

typedef struct { size_t line, column, index; char *error; } taichi_aot_spv_diagnostic; /* then a bool: unread */
typedef struct { const uint32_t *code; size_t word_count; } taichi_aot_spv_binary;
#define TAICHI_AOT_SPV_ENVS 64 /* target environments (spv_target_env) a context is kept for */

static struct {
    void *handle;
    void *(*context_create)(int env);
    int (*validate)(void *context, const taichi_aot_spv_binary *binary, taichi_aot_spv_diagnostic **diagnostic);
    void (*diagnostic_destroy)(taichi_aot_spv_diagnostic *diagnostic);
    int (*parse_env)(const char *name, int *env);
    const char *(*version)(void);
    void *contexts[TAICHI_AOT_SPV_ENVS];
    pthread_mutex_t lock;
} spirv_tools = {.lock = PTHREAD_MUTEX_INITIALIZER};

int taichi_aot_spirv_load(const char *path, char *error, size_t error_size) {
    static const char *const names[] = {"spvContextCreate", "spvValidate", "spvDiagnosticDestroy",
                                        "spvParseTargetEnv", "spvSoftwareVersionString"};
    void *found[5];
    int result = 0;
    pthread_mutex_lock(&spirv_tools.lock);
    if (spirv_tools.handle == NULL) {
        void *handle = taichi_aot_open_functions(path, names, found, 5, error, error_size);
        if (handle == NULL) {
            result = -1;
        } else {
            *(void **)&spirv_tools.context_create = found[0];
            *(void **)&spirv_tools.validate = found[1];
            *(void **)&spirv_tools.diagnostic_destroy = found[2];
            *(void **)&spirv_tools.parse_env = found[3];
            *(void **)&spirv_tools.version = found[4];
            spirv_tools.handle = handle;
        }
    }
    pthread_mutex_unlock(&spirv_tools.lock);
    return result;
}

const char *taichi_aot_spirv_version(void) { return spirv_tools.handle ? spirv_tools.version() : ""; }

int taichi_aot_spirv_env(const char *name) {
    int env = -1;
    if (spirv_tools.handle == NULL || !spirv_tools.parse_env(name, &env) || env < 0 || env >= TAICHI_AOT_SPV_ENVS)
        return -1;
    return env;
}

int taichi_aot_spirv_validate(int env, const uint32_t *words, size_t count, char *message, size_t message_size) {
    taichi_aot_spv_binary binary = {words, count};
    taichi_aot_spv_diagnostic *diagnostic = NULL;
    int result = TAICHI_AOT_SPIRV_UNAVAILABLE;
    snprintf(message, message_size, "SPIRV-Tools is not loaded, or made no context for target environment %d", env);
    if (spirv_tools.handle == NULL || env < 0 || env >= TAICHI_AOT_SPV_ENVS)
        return result;
    pthread_mutex_lock(&spirv_tools.lock);
    if (spirv_tools.contexts[env] == NULL)
        spirv_tools.contexts[env] = spirv_tools.context_create(env);
    if (spirv_tools.contexts[env] != NULL) {
        message[0] = '\0';
        result = spirv_tools.validate(spirv_tools.contexts[env], &binary, &diagnostic);
        if (diagnostic != NULL) {
            if (diagnostic->error != NULL)
                snprintf(message, message_size, "%s", diagnostic->error);
            spirv_tools.diagnostic_destroy(diagnostic);
        }
    }
    pthread_mutex_unlock(&spirv_tools.lock);
    return result;
}
