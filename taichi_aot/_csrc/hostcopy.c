/* A large copy between host memory split over threads (taichi_aot_copy_bytes): what staging buffers and a host array
   exchange (placement/staging.py). One thread copies a new numpy array's bytes at the speed the kernel hands it
   pages, a fault and a page zeroed every 4 KiB (an H100 host: 64 MiB into a new array at 4 GB/s); threads, each
   its own part, fault and copy side by side. */
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "taichi_aot.h"

#define HOSTCOPY_MAX_THREADS 16

typedef struct {
    unsigned char *dst;
    const unsigned char *src;
    uint64_t size;
} taichi_aot_hostcopy_part;

static void *taichi_aot_hostcopy_run(void *arg) {
    const taichi_aot_hostcopy_part *part = (const taichi_aot_hostcopy_part *)arg;
    memcpy(part->dst, part->src, part->size);
    return NULL;
}

void taichi_aot_copy_bytes(void *dst, const void *src, uint64_t size, uint32_t threads) {
    taichi_aot_hostcopy_part parts[HOSTCOPY_MAX_THREADS];
    pthread_t started[HOSTCOPY_MAX_THREADS];
    int running[HOSTCOPY_MAX_THREADS];
    uint64_t each, at = 0;
    uint32_t i, n = threads < 1 ? 1 : threads > HOSTCOPY_MAX_THREADS ? HOSTCOPY_MAX_THREADS : threads;
    each = ((size + n - 1) / n + 4095) & ~(uint64_t)4095; /* whole pages a part, where the array's are */
    for (i = 0; i < n; ++i) {
        uint64_t len = at >= size ? 0 : (size - at < each ? size - at : each);
        parts[i].dst = (unsigned char *)dst + at;
        parts[i].src = (const unsigned char *)src + at;
        parts[i].size = len;
        at += len;
    }
    for (i = 1; i < n; ++i) { /* a thread that cannot start leaves its part to this one */
        running[i] = parts[i].size > 0 && pthread_create(&started[i], NULL, taichi_aot_hostcopy_run, &parts[i]) == 0;
    }
    taichi_aot_hostcopy_run(&parts[0]);
    for (i = 1; i < n; ++i) {
        if (running[i]) {
            pthread_join(started[i], NULL);
        } else {
            taichi_aot_hostcopy_run(&parts[i]);
        }
    }
}
