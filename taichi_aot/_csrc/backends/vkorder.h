/* backends/vkorder.c's functions, for the layers above it (backends/vkstate.h says which): libtaichi's calls
   ordered with the batches. A private header. */
#ifndef TAICHI_AOT_BACKENDS_VKORDER_H
#define TAICHI_AOT_BACKENDS_VKORDER_H

#include "backends/vkstate.h"

/* Its wrappers put in place, once; what it holds unsubmitted submitted first. */
__attribute__((visibility("hidden"))) void aot_vk_hook_library(void);
__attribute__((visibility("hidden"))) void aot_vk_library_first(VkRt *rt);

#endif
