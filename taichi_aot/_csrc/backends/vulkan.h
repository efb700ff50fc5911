/* The own Vulkan launch (backends/vulkan.c), the entries of its kinds in kinds.c's table (the state's hold of
   the runtime's calls is vkqueue.c's). A private header: never handed to cffi. */
#ifndef TAICHI_AOT_BACKENDS_VULKAN_H
#define TAICHI_AOT_BACKENDS_VULKAN_H

#include "taichi_aot.h"

__attribute__((visibility("hidden"))) int aot_vk_kernel_launch(const TaichiAotLaunch *l);
__attribute__((visibility("hidden"))) int aot_vk_graph_launch(const TaichiAotLaunch *l);
__attribute__((visibility("hidden"))) int aot_vk_kernel_quick(const TaichiAotLaunch *l, int hold, void **held);
__attribute__((visibility("hidden"))) int aot_vk_graph_quick(const TaichiAotLaunch *l, int hold, void **held);

#endif
