/* A profile's CUDA events around the own CUDA launcher's launches. While a profile is open on the runtime, each launch
   is recorded between two events on the runtime's stream; the pair is handed to the profile (profile.c's later
   times) and read when its records are taken: its start as the time since the context's reference event (recorded
   and waited for once, at the context's first profiled launch, beside the host's clock then), its end as the start
   plus the pair's own elapsed time (cuEventElapsedTime's float keeps a short span exact). On a stream being captured
   into a CUDA graph nothing is recorded (the launcher, which asks the stream anyway, does not open a pair there). */
#include <pthread.h>
#include <stdlib.h>

#include "taichi_aot.h"
#include "backends/cudaprofile.h"
#include "profile.h"

#define REFERENCES 16 /* contexts with a reference event */
#define SPARE_EVENTS 1024 /* events kept for the next launches, with their contexts */

/* The driver's calls a profile makes, as a table of typed functions, taken (a copy each pair: 64 bytes) from the
   addresses TaichiAotCudaDriver hands over as `void *` (cu_events): no call below casts. */
typedef struct {
    int (*event_create)(void **event, unsigned flags);
    int (*event_record)(void *event, void *stream);
    int (*event_query)(void *event);
    int (*event_sync)(void *event);
    int (*event_elapsed)(float *ms, void *start, void *end);
    int (*event_destroy)(void *event);
    int (*push)(void *context);
    int (*pop)(void **context);
} CuEvents;

static CuEvents cu_events(const TaichiAotCudaDriver *cu) {
    CuEvents e;
    e.event_create = (int (*)(void **, unsigned))cu->event_create;
    e.event_record = (int (*)(void *, void *))cu->event_record;
    e.event_query = (int (*)(void *))cu->event_query;
    e.event_sync = (int (*)(void *))cu->event_sync;
    e.event_elapsed = (int (*)(float *, void *, void *))cu->event_elapsed;
    e.event_destroy = (int (*)(void *))cu->event_destroy;
    e.push = (int (*)(void *))cu->push;
    e.pop = (int (*)(void **))cu->pop;
    return e;
}

typedef struct {
    CuEvents cu;
    void *context, *stream, *start, *end, *reference;
    int64_t reference_host, token, parent;
} Stamp;

static struct {
    void *context, *event;
    int64_t host;
} references[REFERENCES];
static pthread_mutex_t references_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
    void *context, *event;
} spares[SPARE_EVENTS];
static uint32_t spare_count = 0;

/* Two events of the current context `context` (a pair's): spare ones of it, else new ones; 0 or the driver's error
   (none taken then). */
static int events_take(const CuEvents *cu, void *context, void **start, void **end) {
    void **want[2] = {start, end};
    uint32_t i, got = 0;
    int code = 0;
    pthread_mutex_lock(&references_lock);
    for (i = spare_count; i-- > 0 && got < 2;) {
        if (spares[i].context == context) {
            *want[got++] = spares[i].event;
            spares[i] = spares[--spare_count];
        }
    }
    pthread_mutex_unlock(&references_lock);
    while (got < 2 && code == 0) {
        code = cu->event_create(want[got], 0);
        got += code == 0;
    }
    if (code != 0 && got == 1) {
        cu->event_destroy(*start);
        *start = NULL;
    }
    return code;
}

/* An event done with: kept for another launch where there is room, else destroyed. */
static void event_give(const CuEvents *cu, void *context, void *event) {
    pthread_mutex_lock(&references_lock);
    if (spare_count < SPARE_EVENTS) {
        spares[spare_count].context = context;
        spares[spare_count].event = event;
        ++spare_count;
        event = NULL;
    }
    pthread_mutex_unlock(&references_lock);
    if (event != NULL) {
        cu->event_destroy(event);
    }
}

/* The context's reference event and the host's time it stands for (made at its first use: recorded, waited for);
   NULL where none can be made. */
static void *reference_of(const TaichiAotCudaRuntime *rt, const CuEvents *cu, int64_t *host) {
    void *event = NULL;
    int i, free_at = -1;
    pthread_mutex_lock(&references_lock);
    for (i = 0; i < REFERENCES; ++i) {
        if (references[i].context == rt->context) {
            *host = references[i].host;
            pthread_mutex_unlock(&references_lock);
            return references[i].event;
        }
        if (references[i].context == NULL && free_at < 0) {
            free_at = i;
        }
    }
    if (free_at >= 0 && cu->event_create(&event, 0) == 0) {
        if (cu->event_record(event, rt->stream) == 0 && cu->event_sync(event) == 0) {
            references[free_at].context = rt->context;
            references[free_at].event = event;
            references[free_at].host = *host = aot_profile_now();
        } else {
            cu->event_destroy(event);
            event = NULL;
        }
    }
    pthread_mutex_unlock(&references_lock);
    return event;
}

static void stamp_free(Stamp *s) {
    if (s->start != NULL) {
        event_give(&s->cu, s->context, s->start);
    }
    if (s->end != NULL) {
        event_give(&s->cu, s->context, s->end);
    }
    free(s);
}

/* A pair the driver refused: its events destroyed, never kept (their context may be gone). */
static void stamp_drop(Stamp *s) {
    if (s->start != NULL) {
        s->cu.event_destroy(s->start);
    }
    if (s->end != NULL) {
        s->cu.event_destroy(s->end);
    }
    free(s);
}

void *aot_cuda_stamp_open(const TaichiAotCudaRuntime *rt, int64_t token, int64_t parent) {
    Stamp *s;
    if (token < 0 || rt->driver->event_create == NULL) {
        return NULL;
    }
    s = calloc(1, sizeof(*s));
    if (s == NULL) {
        return NULL;
    }
    s->cu = cu_events(rt->driver);
    s->context = rt->context;
    s->stream = rt->stream;
    s->token = token;
    s->parent = parent;
    s->reference = reference_of(rt, &s->cu, &s->reference_host);
    if (s->reference == NULL || events_take(&s->cu, rt->context, &s->start, &s->end) != 0 ||
        s->cu.event_record(s->start, rt->stream) != 0) {
        stamp_drop(s);
        return NULL;
    }
    aot_profile_will_time();
    return s;
}

/* The pair's times (profile.c's later times): 1 and the times, 0 not yet (`wait` 0), -1 none; the pair freed where
   it answers. */
static int stamp_resolve(void *item, int wait, int64_t *start, int64_t *end) {
    Stamp *s = (Stamp *)item;
    const CuEvents cu = s->cu; /* a copy: the pair is freed before the context is popped */
    void *popped = NULL;
    float since = 0.0f, took = 0.0f;
    int code, got = -1;
    if (cu.push(s->context) != 0) {
        free(s); /* its context is gone, and its events with it */
        return -1;
    }
    code = wait ? cu.event_sync(s->end) : cu.event_query(s->end);
    if (code == 600 && !wait) { /* CUDA_ERROR_NOT_READY */
        cu.pop(&popped);
        return 0;
    }
    if (code == 0 && cu.event_elapsed(&since, s->reference, s->start) == 0 &&
        cu.event_elapsed(&took, s->start, s->end) == 0) {
        *start = s->reference_host + (int64_t)((double)since * 1e6);
        *end = *start + (int64_t)((double)took * 1e6);
        got = 1;
    }
    stamp_free(s);
    cu.pop(&popped);
    return got;
}

int aot_cuda_stamp_close(void *stamp) {
    Stamp *s = (Stamp *)stamp;
    if (s->cu.event_record(s->end, s->stream) != 0) {
        aot_profile_untimed(s->token, s->parent);
        stamp_drop(s);
        return 0;
    }
    aot_profile_later(s->token, s->parent, stamp_resolve, s);
    return 1;
}
