/* What launch.c and the launch backends call of profile.c (taichi_aot.h declares what Python calls): a private header,
   never handed to cffi. A record's token names it until it is taken (-1: none). */
#ifndef TAICHI_AOT_PROFILE_H
#define TAICHI_AOT_PROFILE_H

#include <stdint.h>

#include "taichi_aot.h"

/* A record's states (TaichiAotProfileRecord.state), each with its value and the name Python gives it
   (taichi_aot_profile_state: profile.py's STATES). C writes the first four; the host's own events, negative, are
   Python's (Profile.note_wait, note_copy), listed here so that one list names them all. */
#define AOT_PROFILE_STATES(X)                                                                                     \
    X(WAITING, 0, "waiting")  /* device times to come (a batch's timestamps, a pair of events) */                \
    X(DEVICE, 1, "device")    /* device times given */                                                           \
    X(CALL, 2, "call")        /* the call's times are the device's (a CPU runtime's) */                         \
    X(ENQUEUE, 3, "enqueue")  /* no device times: the launch backend times nothing, the call only enqueues */    \
    X(WAIT, -1, "wait")       /* a host wait on the runtime */                                                   \
    X(COPY, -2, "copy")       /* a launch's host arrays copied in and back */
enum {
#define AOT_PROFILE_STATE(id, value, name) AOT_PROFILE_##id = value,
    AOT_PROFILE_STATES(AOT_PROFILE_STATE)
#undef AOT_PROFILE_STATE
};

/* CLOCK_MONOTONIC nanoseconds. */
__attribute__((visibility("hidden"))) int64_t aot_profile_now(void);
/* A record opened for launch `l` where its runtime is profiled (its token, made this thread's current one), and
   closed after the launch (the call's end; on a CPU runtime its device times). */
__attribute__((visibility("hidden"))) int64_t aot_profile_begin(const TaichiAotLaunch *l);
__attribute__((visibility("hidden"))) void aot_profile_end(int64_t token);
/* The record of the launch this thread is making (-1: none). A backend that will time it on the device says so while
   making it (aot_profile_will_time), then gives each of its spans (aot_profile_device: the record spans them all), or
   says it could not (aot_profile_untimed); each to `parent` too (a graph's record, `token` its dispatch's; -1:
   none). */
__attribute__((visibility("hidden"))) int64_t aot_profile_current(void);
__attribute__((visibility("hidden"))) void aot_profile_will_time(void);
__attribute__((visibility("hidden"))) void aot_profile_device(int64_t token, int64_t parent, int64_t start,
                                                              int64_t end);
__attribute__((visibility("hidden"))) void aot_profile_untimed(int64_t token, int64_t parent);

/* A graph's dispatch, launched by `launch(ctx, profiled, parent, &timed)` (the backend's launch of it, its code
   returned): in a profile (the graph's record `graph`; -1: none), a record of its own named `name` (NULL: none, the
   graph's record alone) on the graph's runtime and thread, opened now as `profiled` and closed once the launch is made
   (`timed`, set by the launch: its device times come later, aot_profile_device); the backend gives its spans to
   `parent`, the graph's record, too. Both own launches' graphs (vulkan.c, cuda.c) go through it. */
typedef int (*AotProfileLaunch)(void *ctx, int64_t profiled, int64_t parent, int *timed);
__attribute__((visibility("hidden"))) int aot_profile_dispatch(int64_t graph, const char *name, AotProfileLaunch launch,
                                                               void *ctx);

/* Device times known later (CUDA's events): `resolve(item, wait, &start, &end)` answers 1 with the times, 0 where
   they are not known yet (wait 0 only), -1 where they never will be; it frees the item where it answers nonzero.
   Asked when the record's runtime's records are taken (profile.c's take: waiting where it takes all) and when its
   profile closes (waiting), in the order they were given, outside the profile's lock: a profile's items by one
   thread at a time, but items of different profiles (and an item let go at once, its profile closing or no room) on
   several threads at once, so that what `resolve` shares with the backend's launches is its own to guard. Where the
   item cannot be kept it is resolved at once (waiting) and its record given no device times. The span is given to
   `parent` too (a graph's record, its dispatch's `token`; -1: none). */
typedef int (*AotProfileResolve)(void *item, int wait, int64_t *start, int64_t *end);
__attribute__((visibility("hidden"))) void aot_profile_later(int64_t token, int64_t parent, AotProfileResolve resolve,
                                                             void *item);
/* The profile record `token` belongs to (its slot and the slot's profile, from the token's bits): the same for each
   record of one profile, another for the slot's next profiles (one again 65,536 profiles of the slot later). */
__attribute__((visibility("hidden"))) uint64_t aot_profile_of(int64_t token);

#endif
