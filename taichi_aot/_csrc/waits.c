/* A wait for the device by a runtime's policy (waits.h says what each policy does). Below every backend's waits:
   it calls nothing of theirs but the two functions a wait hands it. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* sched_getaffinity */
#endif
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <time.h>

#include "taichi_aot.h"
#include "waits.h"

#define WAIT_CAP_NS 1000000ull /* auto's default cap: a millisecond */
#define WAIT_FLOOR_NS 50000ull /* auto polls at least this long (where it polls at all) */

static uint32_t wait_spinners; /* the process's threads polling now (atomic) */
static uint32_t wait_cores;    /* the cores the process may use (set once) */
static pthread_once_t wait_cores_once = PTHREAD_ONCE_INIT;

static void wait_count_cores(void) {
    cpu_set_t set;
    int n = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : 1;
    __atomic_store_n(&wait_cores, (uint32_t)(n > 0 ? n : 1), __ATOMIC_RELEASE);
}

uint32_t aot_wait_cores(void) {
    pthread_once(&wait_cores_once, wait_count_cores);
    return __atomic_load_n(&wait_cores, __ATOMIC_ACQUIRE);
}

static uint64_t wait_now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

void aot_wait_set(AotWaitPolicy *p, int policy, uint64_t cap_ns) {
    if (policy != TAICHI_AOT_WAIT_SPIN && policy != TAICHI_AOT_WAIT_YIELD && policy != TAICHI_AOT_WAIT_BLOCK) {
        policy = TAICHI_AOT_WAIT_AUTO;
    }
    __atomic_store_n(&p->cap_ns, cap_ns, __ATOMIC_RELAXED);
    __atomic_store_n(&p->policy, policy, __ATOMIC_RELAXED);
}

/* How long auto polls: twice the waits' learned length (the floor at least), within the cap; the floor alone where
   they take far past the cap (a long kernel's wait, where waking late costs nothing that shows). */
static uint64_t wait_budget(const AotWaitPolicy *p) {
    uint64_t cap = __atomic_load_n(&p->cap_ns, __ATOMIC_RELAXED), learned = __atomic_load_n(&p->learned_ns,
                                                                                          __ATOMIC_RELAXED);
    uint64_t budget;
    if (cap == 0) {
        cap = WAIT_CAP_NS;
    }
    if (learned > 4 * cap) {
        return cap < WAIT_FLOOR_NS ? cap : WAIT_FLOOR_NS;
    }
    budget = 2 * learned;
    budget = budget < WAIT_FLOOR_NS ? WAIT_FLOOR_NS : budget;
    return budget > cap ? cap : budget;
}

int aot_wait(AotWaitPolicy *p, int (*poll)(void *), int (*block)(void *), void *ctx, int others, int *how) {
    int policy = __atomic_load_n(&p->policy, __ATOMIC_RELAXED), code, counted = 0;
    uint64_t start, budget = UINT64_MAX, took;
    *how = AOT_WAITED_BLOCKED;
    if (policy == TAICHI_AOT_WAIT_BLOCK || (policy == TAICHI_AOT_WAIT_AUTO && others)) {
        return block(ctx);
    }
    if (policy == TAICHI_AOT_WAIT_AUTO) {
        /* a core each for the threads that poll: where the process's cores are taken, block (CUDA's auto) */
        if (__atomic_add_fetch(&wait_spinners, 1, __ATOMIC_ACQ_REL) > aot_wait_cores()) {
            __atomic_sub_fetch(&wait_spinners, 1, __ATOMIC_ACQ_REL);
            return block(ctx);
        }
        counted = 1;
        budget = wait_budget(p);
    }
    start = wait_now_ns();
    *how = AOT_WAITED_POLLED;
    for (;;) {
        code = poll(ctx);
        if (code != 1) {
            break;
        }
        if (budget != UINT64_MAX && wait_now_ns() - start > budget) {
            if (counted) {
                __atomic_sub_fetch(&wait_spinners, 1, __ATOMIC_ACQ_REL);
                counted = 0;
            }
            *how = AOT_WAITED_BLOCKED_AFTER_POLLING;
            code = block(ctx);
            break;
        }
        if (policy == TAICHI_AOT_WAIT_YIELD) {
            sched_yield();
        } else {
            aot_relax();
        }
    }
    if (counted) {
        __atomic_sub_fetch(&wait_spinners, 1, __ATOMIC_ACQ_REL);
    }
    if (code == 0 && policy == TAICHI_AOT_WAIT_AUTO) { /* learned: an average that weighs the last a quarter */
        uint64_t learned = __atomic_load_n(&p->learned_ns, __ATOMIC_RELAXED);
        took = wait_now_ns() - start;
        __atomic_store_n(&p->learned_ns, learned == 0 ? took : (3 * learned + took) / 4, __ATOMIC_RELAXED);
    }
    return code;
}
