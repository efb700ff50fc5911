/* The number of threads an x64 runtime starts.

   libtaichi_c_api 1.7.4 sizes each CPU runtime's thread pool by std::thread::hardware_concurrency(),
   which asks glibc's get_nprocs(): every online core of the machine, whatever this process's affinity
   or container quota allows, and no setting of the C-API changes it. So after loading the library we
   point its own reference to get_nprocs (its GOT slot: the library calls get_nprocs through it, and
   nothing else does) at taichi_aot_nprocs, which answers the count Python asks for while it creates a
   runtime, and glibc's answer otherwise. Only the library's slot changes: the rest of the process,
   Python and other libraries included, still reaches glibc. */
#include <sys/sysinfo.h>

#include "taichi_aot.h"

static volatile int taichi_aot_threads_wanted = 0;

static int taichi_aot_nprocs(void) {
    int wanted = taichi_aot_threads_wanted;
    return wanted > 0 ? wanted : get_nprocs();
}

void taichi_aot_set_cpu_threads(int count) {
    taichi_aot_threads_wanted = count > 0 ? count : 0;
}

int taichi_aot_get_cpu_threads(void) {
    return taichi_aot_nprocs();
}

/* Patch the library's get_nprocs slots (got.c); the number of slots patched (0: the library does not call
   get_nprocs), or -1 where this cannot be done. */
int taichi_aot_hook_cpu_threads(void) {
    return taichi_aot_patch_library_calls("get_nprocs", (void *)&taichi_aot_nprocs);
}
