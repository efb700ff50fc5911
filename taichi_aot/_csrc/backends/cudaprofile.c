/* A profile's CUDA events around the own CUDA launcher's launches. While a profile is open on the runtime, each launch
   is recorded between two events on the runtime's stream; the pair is handed to the profile (profile.c's later
   times) and read when its records are taken, outside the profile's lock: its start as a reference event's host time
   plus the time since that event, its end as the start plus the pair's own elapsed time, both CLOCK_MONOTONIC
   nanoseconds (aot_profile_now). cuEventElapsedTime's float of milliseconds keeps a short span exact (its step at
   one second is about 60 ns, at 1,000 s about 60 us), so a reference is the profile's and the context's, and young:
   at the profile's first launch on the context one is recorded on the stream and waited for, beside the host's clock
   then; once it is a second old (host time), the next launch records a new one without waiting, whose host time is
   the previous one's plus the time between the two events, computed at the first read that needs it and kept. A
   stamp holds its reference, and a reference renewed from another holds that one until its time is known: one that
   the table no longer keeps is destroyed when the last lets it go. The references, their holds and their times are
   shared by launching threads and reading ones, under references_lock, which no call that waits on the device is
   made under. On a stream being captured into a CUDA graph nothing is recorded (the launcher, which asks the stream
   anyway, does not open a pair there). */
#include <pthread.h>
#include <stdlib.h>

#include "taichi_aot.h"
#include "backends/cudaprofile.h"
#include "profile.h"

#define REFERENCES 64 /* references kept, each a profile's on a context (the one recorded longest ago replaced) */
#define RENEW_NS 1000000000 /* a reference's age from which a launch records a new one */
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

/* A reference event of profile `profile` (aot_profile_of) on `context`, recorded on the host's time `recorded`; the
   host's time it stands for (`host`), where `known`, else `previous`'s plus the time between the two events (a
   renewed one, holding the one it was renewed from until then). Held by the table and by each stamp reading it:
   destroyed when the last lets it go. `host`, `known`, `previous` and `holds` are read and written under
   references_lock; the rest is set before it is shared. */
typedef struct Reference {
    void *context, *event;
    uint64_t profile;
    int64_t recorded, host;
    int known;
    uint32_t holds;
    struct Reference *previous;
} Reference;

typedef struct {
    CuEvents cu;
    void *context, *stream, *start, *end;
    Reference *reference;
    int64_t token, parent;
} Stamp;

static Reference *references[REFERENCES]; /* NULL: a free entry */
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

/* The table's entry for profile `profile` on `context` (under the lock; -1: none). */
static int reference_find(void *context, uint64_t profile) {
    int i;
    for (i = 0; i < REFERENCES; ++i) {
        if (references[i] != NULL && references[i]->context == context && references[i]->profile == profile) {
            return i;
        }
    }
    return -1;
}

/* The table's entry for a reference of a new profile or context (under the lock): a free one, else the one recorded
   longest ago (a closed profile's, as a rule; an open one's would record a new one at its next launch). */
static int reference_room(void) {
    int i, oldest = 0;
    for (i = 0; i < REFERENCES; ++i) {
        if (references[i] == NULL) {
            return i;
        }
        if (references[i]->recorded < references[oldest]->recorded) {
            oldest = i;
        }
    }
    return oldest;
}

/* One hold of `r` let go (under the lock): where it was its last, `r` lets go its previous reference's hold in turn.
   Answers the references no longer held, linked by `previous`, for references_destroy after the lock (NULL: none). */
static Reference *reference_let_go(Reference *r) {
    Reference *gone = r, *last = NULL;
    while (r != NULL && --r->holds == 0) {
        last = r;
        r = r->previous;
    }
    if (last == NULL) {
        return NULL;
    }
    last->previous = NULL;
    return gone;
}

/* References no longer held (reference_let_go's list) destroyed, with their context current; `cu` NULL where their
   context is gone, and their events with it. */
static void references_destroy(const CuEvents *cu, Reference *gone) {
    while (gone != NULL) {
        Reference *next = gone->previous;
        if (cu != NULL) {
            cu->event_destroy(gone->event);
        }
        free(gone);
        gone = next;
    }
}

static void reference_release(const CuEvents *cu, Reference *r) {
    Reference *gone;
    pthread_mutex_lock(&references_lock);
    gone = reference_let_go(r);
    pthread_mutex_unlock(&references_lock);
    references_destroy(cu, gone);
}

/* The reference a stamp of profile `profile` on the runtime's context reads, held for it (the context current): the
   table's, or where it has none (the profile's first launch on the context) one recorded on the stream and waited
   for, or where the table's is a second old one recorded on the stream after it without waiting (renewed from it);
   where a new one cannot be made the table's, if any (NULL: none). The driver's calls are made outside the lock. */
static Reference *reference_hold(const TaichiAotCudaRuntime *rt, const CuEvents *cu, uint64_t profile) {
    int64_t now = aot_profile_now();
    Reference *old, *made, *gone = NULL;
    int i;
    pthread_mutex_lock(&references_lock);
    i = reference_find(rt->context, profile);
    old = i >= 0 ? references[i] : NULL;
    if (old != NULL) {
        ++old->holds; /* the stamp's, or where it is renewed the new one's */
        if (now - old->recorded < RENEW_NS) {
            pthread_mutex_unlock(&references_lock);
            return old;
        }
    }
    pthread_mutex_unlock(&references_lock);
    made = calloc(1, sizeof(*made));
    if (made == NULL || cu->event_create(&made->event, 0) != 0) {
        free(made);
        return old;
    }
    if (cu->event_record(made->event, rt->stream) != 0 || (old == NULL && cu->event_sync(made->event) != 0)) {
        cu->event_destroy(made->event);
        free(made);
        return old;
    }
    made->context = rt->context;
    made->profile = profile;
    made->recorded = now;
    made->known = old == NULL;
    made->host = old == NULL ? aot_profile_now() : 0; /* the first: the host's time once the device reached it */
    made->previous = old;
    made->holds = 2; /* the table's and the stamp's */
    pthread_mutex_lock(&references_lock);
    i = reference_find(rt->context, profile); /* another launch may have renewed it meanwhile: this one replaces it */
    if (i < 0) {
        i = reference_room();
    }
    if (references[i] != NULL) {
        gone = reference_let_go(references[i]);
    }
    references[i] = made;
    pthread_mutex_unlock(&references_lock);
    references_destroy(cu, gone);
    return made;
}

/* The host's time held reference `r` stands for (1), computed where it is not known yet: each of the references it
   was renewed from that is not known, oldest first, from the one before it (the driver's time between the two
   events; where the later one is not done yet, as may be on another stream, after waiting for it), and kept; 0 where
   the driver cannot tell. Called with the context current, outside the lock (it may wait). */
static int reference_host(const CuEvents *cu, Reference *r, int64_t *host) {
    for (;;) {
        Reference *next = r, *before, *gone[2];
        int64_t before_host;
        float ms = 0.0f;
        int code;
        pthread_mutex_lock(&references_lock);
        if (r->known) {
            *host = r->host;
            pthread_mutex_unlock(&references_lock);
            return 1;
        }
        while (!next->previous->known) { /* one not known has a previous one; the first of a chain is known */
            next = next->previous;
        }
        before = next->previous;
        before_host = before->host;
        ++next->holds; /* both kept while the lock is let go */
        ++before->holds;
        pthread_mutex_unlock(&references_lock);
        code = cu->event_elapsed(&ms, before->event, next->event);
        if (code == 600 && cu->event_sync(before->event) == 0 && cu->event_sync(next->event) == 0) {
            code = cu->event_elapsed(&ms, before->event, next->event); /* CUDA_ERROR_NOT_READY before: waited for */
        }
        pthread_mutex_lock(&references_lock);
        if (code == 0 && !next->known) {
            next->host = before_host + (int64_t)((double)ms * 1e6);
            next->known = 1;
            next->previous = NULL;
            --before->holds; /* next's: this call's keeps it */
        }
        gone[0] = reference_let_go(before);
        gone[1] = reference_let_go(next);
        pthread_mutex_unlock(&references_lock);
        references_destroy(cu, gone[0]);
        references_destroy(cu, gone[1]);
        if (code != 0) {
            return 0;
        }
    }
}

static void stamp_free(Stamp *s) {
    if (s->start != NULL) {
        event_give(&s->cu, s->context, s->start);
    }
    if (s->end != NULL) {
        event_give(&s->cu, s->context, s->end);
    }
    reference_release(&s->cu, s->reference);
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
    if (s->reference != NULL) {
        reference_release(&s->cu, s->reference);
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
    s->reference = reference_hold(rt, &s->cu, aot_profile_of(token));
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
    int64_t host = 0;
    int code, got = -1;
    if (cu.push(s->context) != 0) {
        reference_release(NULL, s->reference); /* its context is gone, and its events with it */
        free(s);
        return -1;
    }
    code = wait ? cu.event_sync(s->end) : cu.event_query(s->end);
    if (code == 600 && !wait) { /* CUDA_ERROR_NOT_READY */
        cu.pop(&popped);
        return 0;
    }
    if (code == 0 && reference_host(&cu, s->reference, &host) &&
        cu.event_elapsed(&since, s->reference->event, s->start) == 0 &&
        cu.event_elapsed(&took, s->start, s->end) == 0) {
        *start = host + (int64_t)((double)since * 1e6);
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
