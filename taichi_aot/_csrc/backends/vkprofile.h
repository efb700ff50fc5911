/* backends/vkprofile.c's functions, for the layers above it (backends/vkstate.h says which): a profile's timestamps
   in a batch. A private header. */
#ifndef TAICHI_AOT_BACKENDS_VKPROFILE_H
#define TAICHI_AOT_BACKENDS_VKPROFILE_H

#include <stdint.h>
#include "backends/vkstate.h"

/* Around a launch recorded into batch `b` for the profile's record `token` (and `parent`'s, -1: none: a graph's, whose
   record spans its dispatches) (open: the first, its query, VK_NO_STAMP where none was written; close: the second);
   a batch's read once it is done and given to the records. */
__attribute__((visibility("hidden"))) uint32_t aot_vk_stamp_open(VkRt *rt, VkBatch *b, int64_t token, int64_t parent);
__attribute__((visibility("hidden"))) void aot_vk_stamp_close(VkRt *rt, VkBatch *b, uint32_t query);
__attribute__((visibility("hidden"))) void aot_vk_stamps_read(VkRt *rt, VkBatch *b);

#endif
