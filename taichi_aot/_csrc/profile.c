/* Each launch's times while a profile is open on its runtime (taichi_aot.h says what a record holds). launch.c opens a
   record around every launch of a profiled runtime (aot_profile_begin, aot_profile_end) and makes it this thread's
   current one while the launch is made, so that its backend can say how the device times it (aot_profile_current,
   aot_profile_device: backends/vkprofile.c's timestamps). Off (no runtime profiled), launch.c reads one switch. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "taichi_aot.h"
#include "profile.h"

#define PROFILE_SLOTS 64 /* runtimes profiled at once */

typedef struct {
    int64_t token, parent;
    AotProfileResolve resolve;
    void *item;
    int64_t start, end; /* its answer (`got`: resolve's), once asked outside the lock (ask_later) */
    int got;
} Later;

typedef struct {
    TiRuntime runtime;
    int32_t *pending;
    int host_times;
    TaichiAotProfileRecord *records; /* records[0] is record number `base` */
    uint64_t base, count, cap, lost;
    uint64_t serial; /* told apart from the slot's earlier profiles: a late device time for one is dropped */
    Later *later;    /* device times a backend gives when asked (aot_profile_later) */
    uint32_t later_count, later_cap;
    uint32_t asked; /* items a take or close has taken out of `later` to ask (ask_later): room is kept for them */
    int resolving;  /* a thread asks the slot's later items, outside the lock: another waits for it (profile_asked) */
    int closing;    /* its profile closes: no runtime finds it, no profile opens on it, no later item is added */
} ProfileSlot;

int taichi_aot_profiling = 0;
static pthread_mutex_t profile_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t profile_asked = PTHREAD_COND_INITIALIZER; /* a slot's later items asked: `resolving` cleared */
static ProfileSlot slots[PROFILE_SLOTS];
static uint64_t serials = 0;
static __thread int64_t current = -1;
static __thread int current_timed = 0; /* the current launch's backend times it on the device (aot_profile_will_time) */

int64_t aot_profile_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

/* The slot of a runtime (by its counts, or its TiRuntime where a launch has none), under the lock; -1: none (or
   closing). */
static int slot_of(TiRuntime runtime, const int32_t *pending) {
    int i;
    for (i = 0; i < PROFILE_SLOTS; ++i) {
        if (slots[i].serial != 0 && !slots[i].closing &&
            ((pending != NULL && slots[i].pending == pending) || (runtime != NULL && slots[i].runtime == runtime))) {
            return i;
        }
    }
    return -1;
}

/* A record's token: its slot, the slot's profile and its number, in one integer (-1: none). */
static int64_t token(int slot, uint64_t number) {
    return (int64_t)(((slots[slot].serial & 0xFFFF) << 40) | ((uint64_t)slot << 34) | (number & 0x3FFFFFFFFull));
}

uint64_t aot_profile_of(int64_t t) {
    return (uint64_t)t >> 34; /* the token's serial and slot bits */
}

/* The record a token names, under the lock; NULL where it was taken or its profile closed. */
static TaichiAotProfileRecord *record_of(int64_t t) {
    uint64_t u = (uint64_t)t, number;
    int slot = (int)((u >> 34) & 0x3F);
    ProfileSlot *s = &slots[slot];
    if (t < 0 || s->serial == 0 || (s->serial & 0xFFFF) != (u >> 40)) {
        return NULL;
    }
    number = (s->base & ~0x3FFFFFFFFull) | (u & 0x3FFFFFFFFull);
    if (number < s->base) {
        number += 0x400000000ull;
    }
    return number - s->base < s->count ? &s->records[number - s->base] : NULL;
}

/* Record `t` closed now: its call's end; `timed`: its device times come later (a batch's timestamps, a pair of
   events); a CPU runtime's device times are its call's. */
static void close_record(int64_t t, int timed) {
    int64_t now = aot_profile_now();
    TaichiAotProfileRecord *r;
    pthread_mutex_lock(&profile_lock);
    r = record_of(t);
    if (r != NULL) {
        r->host_end = now;
        if (timed && r->state == AOT_PROFILE_ENQUEUE) {
            r->state = AOT_PROFILE_WAITING;
        }
        if (r->state == AOT_PROFILE_CALL) {
            r->device_start = r->host_start;
            r->device_end = now;
        }
    }
    pthread_mutex_unlock(&profile_lock);
}

/* A new record of slot `slot`, zeroed (under the lock; NULL where the store is full: counted lost). */
static TaichiAotProfileRecord *new_record(int slot) {
    ProfileSlot *s = &slots[slot];
    TaichiAotProfileRecord *r;
    if (s->count == s->cap) {
        uint64_t cap = s->cap ? s->cap * 2 : 1024;
        TaichiAotProfileRecord *grown = cap <= TAICHI_AOT_PROFILE_MAX ? realloc(s->records, cap * sizeof(*grown)) : NULL;
        if (grown == NULL) {
            ++s->lost;
            return NULL;
        }
        s->records = grown;
        s->cap = cap;
    }
    r = &s->records[s->count++];
    memset(r, 0, sizeof(*r));
    r->thread = (uint64_t)pthread_self();
    r->state = s->host_times ? AOT_PROFILE_CALL : AOT_PROFILE_ENQUEUE;
    r->device_start = r->device_end = -1;
    return r;
}

int64_t aot_profile_begin(const TaichiAotLaunch *l) {
    TaichiAotProfileRecord *r;
    int slot;
    const char *name = l->name != NULL ? l->name : "";
    const char *colon = strchr(name, ':');
    pthread_mutex_lock(&profile_lock);
    slot = slot_of(l->runtime, l->pending);
    r = slot >= 0 ? new_record(slot) : NULL;
    if (r == NULL) {
        pthread_mutex_unlock(&profile_lock);
        return -1;
    }
    strncpy(r->name, colon != NULL ? colon + 1 : name, TAICHI_AOT_PROFILE_NAME - 1);
    r->kind = l->kind;
    current = token(slot, slots[slot].base + slots[slot].count - 1);
    current_timed = 0;
    r->host_start = aot_profile_now();
    pthread_mutex_unlock(&profile_lock);
    return current;
}

/* A record of its own for a part of the launch whose record is `parent` (a graph's dispatch), named `name`, on the
   parent's runtime and thread, opened now (-1: none). */
static int64_t profile_part(int64_t parent, const char *name) {
    TaichiAotProfileRecord *r;
    int slot = (int)(((uint64_t)parent >> 34) & 0x3F);
    uint32_t kind;
    int64_t made = -1;
    pthread_mutex_lock(&profile_lock);
    r = record_of(parent);
    if (r != NULL) {
        kind = r->kind; /* read first: a new record may move the store */
        r = new_record(slot);
        if (r != NULL) {
            strncpy(r->name, name != NULL ? name : "", TAICHI_AOT_PROFILE_NAME - 1);
            r->kind = kind;
            r->host_start = aot_profile_now();
            made = token(slot, slots[slot].base + slots[slot].count - 1);
        }
    }
    pthread_mutex_unlock(&profile_lock);
    return made;
}

int aot_profile_dispatch(int64_t graph, const char *name, AotProfileLaunch launch, void *ctx) {
    int64_t part = graph >= 0 && name != NULL ? profile_part(graph, name) : -1;
    int timed = 0;
    int code = launch(ctx, part >= 0 ? part : graph, part >= 0 ? graph : -1, &timed);
    if (part >= 0) {
        close_record(part, timed); /* its device times to come, where its backend timed it */
    }
    return code;
}

void aot_profile_end(int64_t t) {
    int timed = current_timed;
    current = -1;
    current_timed = 0;
    close_record(t, timed);
}

int64_t aot_profile_current(void) {
    return current;
}

void aot_profile_will_time(void) {
    current_timed = 1; /* the launch being made here: its record says so when it closes */
}

/* A span of device time given to record `t` (under the lock): the record spans all it is given. */
static void device_span(int64_t t, int64_t start, int64_t end) {
    TaichiAotProfileRecord *r = record_of(t);
    /* a record still open (its launch not returned yet) may get its times first: a batch another thread waited for */
    int first = r != NULL &&
                (r->state == AOT_PROFILE_WAITING || (r->state == AOT_PROFILE_ENQUEUE && r->host_end == 0));
    if (r != NULL && (first || r->state == AOT_PROFILE_DEVICE)) {
        if (first || start < r->device_start) {
            r->device_start = start;
        }
        if (first || end > r->device_end) {
            r->device_end = end;
        }
        r->state = AOT_PROFILE_DEVICE;
    }
}

void aot_profile_device(int64_t t, int64_t parent, int64_t start, int64_t end) {
    pthread_mutex_lock(&profile_lock);
    device_span(t, start, end);
    device_span(parent, start, end);
    pthread_mutex_unlock(&profile_lock);
}

/* A record given no device time (under the lock). */
static void no_span(int64_t t) {
    TaichiAotProfileRecord *r = record_of(t);
    if (r != NULL && r->state == AOT_PROFILE_WAITING) {
        r->state = AOT_PROFILE_ENQUEUE;
    }
}

void aot_profile_later(int64_t t, int64_t parent, AotProfileResolve resolve, void *item) {
    uint64_t u = (uint64_t)t;
    ProfileSlot *s = &slots[(u >> 34) & 0x3F];
    int64_t start, end;
    uint32_t need;
    pthread_mutex_lock(&profile_lock);
    need = s->later_count + 1 + s->asked; /* room for the items out being asked too: they come back in front */
    if (record_of(t) != NULL && !s->closing && s->later_cap < need) {
        uint32_t cap = s->later_cap ? s->later_cap * 2 : 256;
        Later *grown;
        while (cap < need) {
            cap *= 2;
        }
        grown = realloc(s->later, cap * sizeof(*grown));
        if (grown != NULL) {
            s->later = grown;
            s->later_cap = cap;
        }
    }
    if (record_of(t) == NULL || s->closing || s->later_cap < need) { /* its profile closed, or no room: none */
        no_span(t);
        no_span(parent);
        pthread_mutex_unlock(&profile_lock);
        resolve(item, 1, &start, &end); /* frees it */
        return;
    }
    s->later[s->later_count].token = t;
    s->later[s->later_count].parent = parent;
    s->later[s->later_count].resolve = resolve;
    s->later[s->later_count].item = item;
    ++s->later_count;
    pthread_mutex_unlock(&profile_lock);
}

/* The slot's later device times asked for, in order, as far as the first not known yet (all, waiting for each, where
   `wait`), by the one thread that finds the slot not being asked (`resolving`: the caller waits for it first). Called
   and returning under the lock, it lets the lock go while the backends answer, so that a wait on the device holds
   no other thread's launch: the slot's items are taken out (its array, whole: an item added meanwhile goes into a
   new one, which keeps room for those taken), asked, their spans given under the lock again, and those not answered
   put back in front of any added meanwhile, as an item is asked only once those before it are known. */
static void ask_later(ProfileSlot *s, int wait) {
    Later *asked = s->later;
    uint32_t count = s->later_count, cap = s->later_cap, n = 0, i;
    if (count == 0) {
        return;
    }
    s->later = NULL;
    s->later_count = s->later_cap = 0;
    s->asked = count;
    s->resolving = 1;
    pthread_mutex_unlock(&profile_lock);
    while (n < count) {
        Later *l = &asked[n];
        l->start = l->end = 0;
        l->got = l->resolve(l->item, wait, &l->start, &l->end); /* nonzero: the item is freed */
        if (l->got == 0) {
            break;
        }
        ++n;
    }
    pthread_mutex_lock(&profile_lock);
    for (i = 0; i < n; ++i) { /* records gone meanwhile (taken, their profile closed) are passed over */
        if (asked[i].got > 0) {
            device_span(asked[i].token, asked[i].start, asked[i].end);
            device_span(asked[i].parent, asked[i].start, asked[i].end);
        } else {
            no_span(asked[i].token);
            no_span(asked[i].parent);
        }
    }
    count -= n;
    if (s->later == NULL) { /* none added meanwhile: the array is the slot's again */
        memmove(asked, asked + n, count * sizeof(*asked));
        s->later = asked;
        s->later_cap = cap;
        s->later_count = count;
    } else { /* room for them kept by aot_profile_later */
        memmove(s->later + count, s->later, s->later_count * sizeof(*asked));
        memcpy(s->later, asked + n, count * sizeof(*asked));
        s->later_count += count;
        free(asked);
    }
    s->asked = 0;
    s->resolving = 0;
    pthread_cond_broadcast(&profile_asked);
}

void aot_profile_untimed(int64_t t, int64_t parent) {
    if ((t >= 0 && t == current) || (parent >= 0 && parent == current)) {
        current_timed = 0; /* the launch being made here gets no device times after all: closed as untimed */
    }
    pthread_mutex_lock(&profile_lock);
    no_span(t);
    no_span(parent);
    pthread_mutex_unlock(&profile_lock);
}

int taichi_aot_profile_open(TiRuntime runtime, int32_t *pending, int host_times) {
    int i, found = -1;
    pthread_mutex_lock(&profile_lock);
    if (slot_of(runtime, pending) >= 0) {
        pthread_mutex_unlock(&profile_lock);
        return 1; /* open already */
    }
    for (i = 0; i < PROFILE_SLOTS && found < 0; ++i) {
        if (slots[i].serial == 0) {
            found = i;
        }
    }
    if (found < 0) {
        pthread_mutex_unlock(&profile_lock);
        return -1;
    }
    memset(&slots[found], 0, sizeof(slots[found]));
    slots[found].runtime = runtime;
    slots[found].pending = pending;
    slots[found].host_times = host_times;
    slots[found].serial = ++serials ? serials : ++serials;
    __atomic_add_fetch(&taichi_aot_profiling, 1, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&profile_lock);
    return 0;
}

/* A slot being closed keeps its serial and is marked `closing` until it is freed: no launch finds it for a new record,
   no profile opens on it and no later item is added to it (aot_profile_later lets it go at once), so that once a take
   asking its items is done, the close's own ask, waiting for each, leaves nothing a backend holds. */
int taichi_aot_profile_close(TiRuntime runtime, int32_t *pending) {
    ProfileSlot *s;
    int slot;
    pthread_mutex_lock(&profile_lock);
    slot = slot_of(runtime, pending);
    if (slot < 0) {
        pthread_mutex_unlock(&profile_lock);
        return -1;
    }
    s = &slots[slot];
    s->closing = 1;
    while (s->resolving) {
        pthread_cond_wait(&profile_asked, &profile_lock);
    }
    ask_later(s, 1); /* what the backends hold, let go */
    free(s->later);
    free(s->records);
    memset(s, 0, sizeof(*s));
    __atomic_sub_fetch(&taichi_aot_profiling, 1, __ATOMIC_RELEASE);
    pthread_cond_broadcast(&profile_asked); /* a take waiting for the slot finds it gone */
    pthread_mutex_unlock(&profile_lock);
    return 0;
}

uint32_t taichi_aot_profile_take(TiRuntime runtime, int32_t *pending, TaichiAotProfileRecord *out, uint32_t cap,
                                 int all, uint64_t *lost) {
    uint64_t n = 0;
    uint64_t serial;
    ProfileSlot *s;
    int slot;
    pthread_mutex_lock(&profile_lock);
    slot = slot_of(runtime, pending);
    if (slot < 0) {
        pthread_mutex_unlock(&profile_lock);
        return 0;
    }
    s = &slots[slot];
    serial = s->serial;
    while (s->resolving) { /* another thread asks its items: what it leaves is asked here after it */
        pthread_cond_wait(&profile_asked, &profile_lock);
        if (s->serial != serial || s->closing) {
            pthread_mutex_unlock(&profile_lock);
            return 0;
        }
    }
    ask_later(s, all);
    while (n < s->count && n < cap &&
           (all || (s->records[n].host_end != 0 && s->records[n].state != AOT_PROFILE_WAITING))) {
        ++n;
    }
    memcpy(out, s->records, n * sizeof(*out));
    memmove(s->records, s->records + n, (s->count - n) * sizeof(*out));
    s->count -= n;
    s->base += n;
    *lost = s->lost;
    pthread_mutex_unlock(&profile_lock);
    return (uint32_t)n;
}

static const struct {
    int32_t value;
    const char *name;
} PROFILE_STATES[] = {
#define AOT_PROFILE_STATE(id, value, name) {value, name},
    AOT_PROFILE_STATES(AOT_PROFILE_STATE)
#undef AOT_PROFILE_STATE
};
_Static_assert(sizeof(PROFILE_STATES) / sizeof(PROFILE_STATES[0]) == TAICHI_AOT_PROFILE_STATES,
               "taichi_aot.h's TAICHI_AOT_PROFILE_STATES is the states' number");

const char *taichi_aot_profile_state(uint32_t index, int32_t *state) {
    if (index >= TAICHI_AOT_PROFILE_STATES) {
        return NULL;
    }
    *state = PROFILE_STATES[index].value;
    return PROFILE_STATES[index].name;
}
