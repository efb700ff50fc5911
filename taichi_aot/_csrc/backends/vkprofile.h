/* backends/vkprofile.c's functions, for the layers above it (backends/vkstate.h says which): a profile's timestamps
   in a batch, the lowest layer (the runtime's teardown in vkqueue.c destroys them). A private header. */
#ifndef TAICHI_AOT_BACKENDS_VKPROFILE_H
#define TAICHI_AOT_BACKENDS_VKPROFILE_H

#include <stdint.h>

#include "backends/vkstate.h"

#define VK_NO_STAMP UINT32_MAX /* aot_vk_stamp_open: no timestamp written */

/* Around a launch recorded into batch `b` for the profile's record `token` (and `parent`'s, -1: none: a graph's, whose
   record spans its dispatches) (open: the first, its span, VK_NO_STAMP where none was written; close: the second);
   a batch's read once it is done and given to the records, its VkStamps given back to the runtime's spares; a batch's
   never read (one begun again after its submission failed) given back unread; the runtime's all destroyed (its
   teardown, the device idle). */
__attribute__((visibility("hidden"))) uint32_t aot_vk_stamp_open(VkRt *rt, VkBatch *b, int64_t token, int64_t parent);
__attribute__((visibility("hidden"))) void aot_vk_stamp_close(VkRt *rt, VkBatch *b, uint32_t span);
__attribute__((visibility("hidden"))) void aot_vk_stamps_read(VkRt *rt, VkBatch *b);
__attribute__((visibility("hidden"))) void aot_vk_stamps_drop(VkRt *rt, VkBatch *b);
__attribute__((visibility("hidden"))) void aot_vk_stamps_free(VkRt *rt);

#endif
