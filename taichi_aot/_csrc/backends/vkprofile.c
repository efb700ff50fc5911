/* A profile's timestamps in the own Vulkan launch's batches (profile.c keeps the records). While a profile is open
   on the runtime, a launch is recorded between two timestamps written into its batch's query pool, at the compute
   stage: the first once the work before it has run, the second once its own dispatches have (a graph's dispatches
   each between their own, each a record of its own, the graph's record spanning them). A launch recorded right after
   another's end timestamp, nothing between them in the batch, takes that timestamp as its start: the GPU would write
   the same time twice, and each timestamp costs it a pause (on an H200 about 1.3 us). The pool is taken at a batch's
   first timestamp and its queries reset in the batch; once the batch's fence is waited for (vkbatch.c's retire), the
   pairs are read, turned from ticks into nanoseconds (the device's timestampPeriod, masked to the queue's valid
   bits) and given to their records. A queue that writes no timestamps leaves the records without device times.

   What a batch holds for this (VkStamps: the pool and the spans) is taken at the first launch a profile times into
   it, from the runtime's spares (made where there are none), and given back once the batch is done and read: a
   batch no profile times holds none. The runtime's (VkStamping: whether its queue writes timestamps, their period and
   bits, the spares) is made at the first such launch and destroyed with the runtime's state (vkqueue.c's teardown). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "taichi_aot.h"
#include "backends/vk.h"
#include "backends/vkstate.h"
#include "backends/vkprofile.h"
#include "profile.h"

#define VK_STAMPS (2u * TAICHI_AOT_VK_BATCH_DISPATCHES) /* timestamps a batch holds: at most two a launch */

/* A batch's timestamps: the query pool, how many were written; the timed launches (spans): each one's record, its
   start and end queries (a launch recorded right after another's end shares it as its start); `mark`, the batch's
   `dispatches` when the last span was closed. */
struct VkStamps {
    AotVkHandle pool;
    uint32_t count, spans, mark;
    int64_t records[VK_STAMPS / 2];
    int64_t parents[VK_STAMPS / 2]; /* the record a span is given to besides its own (-1: none) */
    uint32_t from[VK_STAMPS / 2], to[VK_STAMPS / 2];
    VkStamps *next; /* among the runtime's spares */
};

/* A runtime's: whether its queue writes timestamps, nanoseconds a tick, the bits that count; its batches' spares. */
struct VkStamping {
    int writes;
    double period;
    uint32_t bits;
    VkStamps *spare;
};

/* Whether the runtime's queue writes timestamps: asked once (its family's valid bits, the device's period). */
static int vk_stamps_here(VkRt *rt) {
    if (rt->stamping == NULL) {
        unsigned char props[AOT_VK_PROPERTIES_SIZE];
        AotVkQueueFamilyProperties families[32];
        uint32_t count = 32;
        float period = 0.0f;
        VkStamping *on = (VkStamping *)calloc(1, sizeof(VkStamping));
        if (on == NULL) {
            return 0;
        }
        memset(props, 0, sizeof(props));
        memset(families, 0, sizeof(families));
        rt->f.GetPhysicalDeviceProperties(rt->physical, props);
        memcpy(&period, props + AOT_VK_LIMIT_TIMESTAMP_PERIOD, sizeof(period));
        if (rt->f.GetPhysicalDeviceQueueFamilyProperties != NULL) {
            rt->f.GetPhysicalDeviceQueueFamilyProperties(rt->physical, &count, families);
        }
        on->bits = rt->family < count ? families[rt->family].timestampValidBits : 0;
        on->period = (double)period;
        on->writes = on->bits > 0 && period > 0.0f;
        rt->stamping = on;
    }
    return rt->stamping->writes;
}

/* Batch `b`'s timestamps, taken where it holds none: a spare, or made (NULL: its pool could not be). */
static VkStamps *vk_stamps_take(VkRt *rt, VkBatch *b) {
    VkStamps *s = b->stamps;
    if (s == NULL && (s = rt->stamping->spare) != NULL) {
        rt->stamping->spare = s->next;
    } else if (s == NULL) {
        AotVkQueryPoolCreateInfo info = {AOT_VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO, NULL, 0,
                                         AOT_VK_QUERY_TYPE_TIMESTAMP, VK_STAMPS, 0};
        if ((s = (VkStamps *)calloc(1, sizeof(VkStamps))) == NULL) {
            return NULL;
        }
        if (rt->f.CreateQueryPool(rt->device, &info, NULL, &s->pool) != AOT_VK_SUCCESS) {
            free(s);
            return NULL;
        }
    }
    b->stamps = s;
    return s;
}

uint32_t aot_vk_stamp_open(VkRt *rt, VkBatch *b, int64_t token, int64_t parent) {
    VkStamps *s;
    uint32_t q, span;
    if (!vk_stamps_here(rt) || (s = vk_stamps_take(rt, b)) == NULL) {
        return VK_NO_STAMP;
    }
    q = s->count;
    span = s->spans;
    if (q + 2 > VK_STAMPS || span >= VK_STAMPS / 2) {
        return VK_NO_STAMP;
    }
    if (q == 0) {
        rt->f.CmdResetQueryPool(b->cb, s->pool, 0, VK_STAMPS);
    }
    aot_profile_will_time();
    if (span > 0 && s->mark == b->dispatches) { /* nothing recorded since the last span's end: its start */
        s->from[span] = s->to[span - 1];
    } else {
        rt->f.CmdWriteTimestamp(b->cb, AOT_VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, s->pool, q);
        s->from[span] = q++;
    }
    s->records[span] = token;
    s->parents[span] = parent;
    s->count = q;
    s->spans = span + 1;
    return span;
}

void aot_vk_stamp_close(VkRt *rt, VkBatch *b, uint32_t span) {
    VkStamps *s = b->stamps;
    uint32_t q = s->count++;
    rt->f.CmdWriteTimestamp(b->cb, AOT_VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, s->pool, q);
    s->to[span] = q;
    s->mark = b->dispatches;
}

void aot_vk_stamps_drop(VkRt *rt, VkBatch *b) {
    VkStamps *s = b->stamps;
    if (s != NULL) {
        b->stamps = NULL;
        s->count = s->spans = 0;
        s->next = rt->stamping->spare;
        rt->stamping->spare = s;
    }
}

void aot_vk_stamps_read(VkRt *rt, VkBatch *b) {
    uint64_t ticks[VK_STAMPS];
    const VkStamps *s = b->stamps;
    uint64_t mask;
    uint32_t i;
    int read;
    if (s == NULL || s->count == 0) {
        aot_vk_stamps_drop(rt, b);
        return;
    }
    mask = rt->stamping->bits >= 64 ? UINT64_MAX : (1ull << rt->stamping->bits) - 1;
    read = rt->f.GetQueryPoolResults(rt->device, s->pool, 0, s->count, sizeof(ticks), ticks, sizeof(uint64_t),
                                     AOT_VK_QUERY_RESULT_64_BIT | AOT_VK_QUERY_RESULT_WAIT_BIT) == AOT_VK_SUCCESS;
    for (i = 0; i < s->spans; ++i) {
        if (read) {
            uint64_t start = ticks[s->from[i]] & mask, end = ticks[s->to[i]] & mask;
            end = end >= start ? end : start; /* the counter wrapped: a span of nothing, never a negative one */
            aot_profile_device(s->records[i], s->parents[i], (int64_t)((double)start * rt->stamping->period),
                               (int64_t)((double)end * rt->stamping->period));
        } else {
            aot_profile_untimed(s->records[i], s->parents[i]);
        }
    }
    aot_vk_stamps_drop(rt, b);
}

static void vk_stamps_destroy(VkRt *rt, VkStamps *s) {
    rt->f.DestroyQueryPool(rt->device, s->pool, NULL);
    free(s);
}

void aot_vk_stamps_free(VkRt *rt) {
    uint32_t i;
    for (i = 0; i < TAICHI_AOT_VK_BATCHES; ++i) {
        if (rt->batches[i].stamps != NULL) {
            vk_stamps_destroy(rt, rt->batches[i].stamps);
            rt->batches[i].stamps = NULL;
        }
    }
    if (rt->stamping != NULL) {
        while (rt->stamping->spare != NULL) {
            VkStamps *s = rt->stamping->spare;
            rt->stamping->spare = s->next;
            vk_stamps_destroy(rt, s);
        }
        free(rt->stamping);
        rt->stamping = NULL;
    }
}
