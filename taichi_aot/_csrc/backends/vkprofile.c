/* A profile's timestamps in the own Vulkan launch's batches (profile.c keeps the records). While a profile is open
   on the runtime, a launch is recorded between two timestamps written into its batch's query pool, at the compute
   stage: the first once the work before it has run, the second once its own dispatches have (a graph's dispatches
   each between their own, each a record of its own, the graph's record spanning them). A launch recorded right after
   another's end timestamp, nothing between them in the batch, takes that timestamp as its start: the GPU would write
   the same time twice, and each timestamp costs it a pause (on an H200 about 1.3 us). The pool is made at a batch's
   first timestamp and its queries reset in the batch; once the batch's fence is waited for (vkbatch.c's retire), the
   pairs are read, turned from ticks into nanoseconds (the device's timestampPeriod, masked to the queue's valid
   bits) and given to their records. A queue that writes no timestamps leaves the records without device times. */
#include <stdint.h>
#include <string.h>

#include "taichi_aot.h"
#include "backends/vk.h"
#include "backends/vkstate.h"
#include "backends/vkprofile.h"
#include "profile.h"

/* Whether the runtime's queue writes timestamps: asked once (its family's valid bits, the device's period). */
static int vk_stamps_here(VkRt *rt) {
    if (rt->stamp_state == 0) {
        unsigned char props[AOT_VK_PROPERTIES_SIZE];
        AotVkQueueFamilyProperties families[32];
        uint32_t count = 32;
        float period = 0.0f;
        memset(props, 0, sizeof(props));
        memset(families, 0, sizeof(families));
        rt->f.GetPhysicalDeviceProperties(rt->physical, props);
        memcpy(&period, props + AOT_VK_LIMIT_TIMESTAMP_PERIOD, sizeof(period));
        if (rt->f.GetPhysicalDeviceQueueFamilyProperties != NULL) {
            rt->f.GetPhysicalDeviceQueueFamilyProperties(rt->physical, &count, families);
        }
        rt->stamp_bits = rt->family < count ? families[rt->family].timestampValidBits : 0;
        rt->stamp_period = (double)period;
        rt->stamp_state = rt->stamp_bits > 0 && period > 0.0f ? 1 : -1;
    }
    return rt->stamp_state > 0;
}

uint32_t aot_vk_stamp_open(VkRt *rt, VkBatch *b, int64_t token, int64_t parent) {
    uint32_t q = b->stamp_count, span = b->stamp_spans;
    if (!vk_stamps_here(rt) || q + 2 > VK_STAMPS || span >= VK_STAMPS / 2) {
        return VK_NO_STAMP;
    }
    if (b->stamps == 0) {
        AotVkQueryPoolCreateInfo info = {AOT_VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO, NULL, 0,
                                         AOT_VK_QUERY_TYPE_TIMESTAMP, VK_STAMPS, 0};
        if (rt->f.CreateQueryPool(rt->device, &info, NULL, &b->stamps) != AOT_VK_SUCCESS) {
            b->stamps = 0;
            return VK_NO_STAMP;
        }
    }
    if (q == 0) {
        rt->f.CmdResetQueryPool(b->cb, b->stamps, 0, VK_STAMPS);
    }
    aot_profile_will_time();
    if (span > 0 && b->stamp_mark == b->dispatches) { /* nothing recorded since the last span's end: its start */
        b->stamp_from[span] = b->stamp_to[span - 1];
    } else {
        rt->f.CmdWriteTimestamp(b->cb, AOT_VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, b->stamps, q);
        b->stamp_from[span] = q++;
    }
    b->stamp_records[span] = token;
    b->stamp_parents[span] = parent;
    b->stamp_count = q;
    b->stamp_spans = span + 1;
    return span;
}

void aot_vk_stamp_close(VkRt *rt, VkBatch *b, uint32_t span) {
    uint32_t q = b->stamp_count++;
    rt->f.CmdWriteTimestamp(b->cb, AOT_VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, b->stamps, q);
    b->stamp_to[span] = q;
    b->stamp_mark = b->dispatches;
}

void aot_vk_stamps_read(VkRt *rt, VkBatch *b) {
    uint64_t ticks[VK_STAMPS];
    uint64_t mask = rt->stamp_bits >= 64 ? UINT64_MAX : (1ull << rt->stamp_bits) - 1;
    uint32_t i, n = b->stamp_count, spans = b->stamp_spans;
    int read;
    if (n == 0) {
        return;
    }
    b->stamp_count = b->stamp_spans = 0;
    read = rt->f.GetQueryPoolResults(rt->device, b->stamps, 0, n, sizeof(ticks), ticks, sizeof(uint64_t),
                                     AOT_VK_QUERY_RESULT_64_BIT | AOT_VK_QUERY_RESULT_WAIT_BIT) == AOT_VK_SUCCESS;
    for (i = 0; i < spans; ++i) {
        int64_t token = b->stamp_records[i], parent = b->stamp_parents[i];
        if (read) {
            uint64_t start = ticks[b->stamp_from[i]] & mask, end = ticks[b->stamp_to[i]] & mask;
            end = end >= start ? end : start; /* the counter wrapped: a span of nothing, never a negative one */
            aot_profile_device(token, parent, (int64_t)((double)start * rt->stamp_period),
                               (int64_t)((double)end * rt->stamp_period));
        } else {
            aot_profile_untimed(token, parent);
        }
    }
}
