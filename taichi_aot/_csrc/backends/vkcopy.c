/* Copies on the own Vulkan state's queue (backends/vulkan.c says what that state is).

   Between two memories of the runtime (taichi_aot_vk_copy): recorded into the batch being recorded, as a launch is,
   so that a host array's staging copies, the kernel that reads it and the copy back of what it writes go in one
   submission, waited for once (through libtaichi, each was a submission and a fence of its own, and the first
   launch after them flushed libtaichi's queue first).

   A host array's few bytes into a memory (taichi_aot_vk_update): written by the command buffer itself, recorded as a
   copy is; the bytes are taken into the command buffer as it is recorded (a kept copy's fill: _staged.Again).

   A memory's few bytes read back (taichi_aot_vk_read): copied into the batch's segment of the runtime's host-visible
   reads buffer, recorded after what is recorded (the launches that write them), the batch submitted and waited for
   by this thread alone with the runtime's calls let go (aot_vk_wait_one: other threads record and submit meanwhile),
   and the bytes copied out before the segment is given up: a value costs a copy, a submit and the wait, no staging
   buffer and no wait for the whole runtime.

   Between host memory and a memory (taichi_aot_vk_host_copy): the host's own pages imported as a VkBuffer
   (VK_EXT_external_memory_host, which vkfence.c adds to the device libtaichi makes, where the driver has it) and
   copied by the GPU, at the link's speed, with no pass through a staging buffer; waited for before it returns (the
   pages are the caller's array's). The pages imported are those the array's bytes lie in, from the page its first
   byte is in to the one its last is in: the copy touches the array's bytes alone. Where the device cannot import
   (no extension, an alignment above the page's, a driver that refuses the pages), it returns 1 and the caller copies
   through staging buffers. */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "interop.h"
#include "taichi_aot.h"
#include "taichi/taichi_vulkan.h"
#include "backends/vk.h"
#include "backends/vkstate.h"
#include "backends/vkqueue.h"
#include "backends/vkbatch.h"
#include "backends/vkorder.h"

/* The batch being recorded, ready for a transfer: the dispatch before it (its barrier owed) done first; NULL with
   `code` where no batch can be begun. */
static VkBatch *vk_transfer_batch(VkRt *rt, AotVkResult *code) {
    VkBatch *b;
    aot_vk_library_first(rt);
    b = aot_vk_begin(rt, code);
    if (b != NULL && b->owed) { /* the dispatch before it (its barrier owed) before it reads or writes */
        aot_vk_barrier(rt, b->cb, AOT_VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, AOT_VK_ACCESS_SHADER_WRITE_BIT,
                       AOT_VK_PIPELINE_STAGE_TRANSFER_BIT,
                       AOT_VK_ACCESS_TRANSFER_READ_BIT | AOT_VK_ACCESS_TRANSFER_WRITE_BIT);
    }
    return b;
}

/* A transfer recorded into `b`, counted as a copy, its writes ordered before what follows by a barrier recorded after
   it (vk_transfer_done: Taichi's barrier), or by the batch's end (vk_read). Without vk_transfer_done only where the
   batch is submitted right after, nothing recorded between: its closing barrier is then the transfer's. */
static void vk_transfer_counted(VkBatch *b, VkRt *rt) {
    b->owed = 0;
    ++b->dispatches;
    ++rt->counts[VK_COUNT_COPIES];
}

static void vk_transfer_done(VkRt *rt, VkBatch *b) {
    aot_vk_barrier(rt, b->cb, VK_STAGES, VK_ACCESS, VK_STAGES, VK_ACCESS);
    vk_transfer_counted(b, rt);
}

/* Where a memory gave no buffer (aot_vk_buffer_of): the library's error, else 1 (none said: the caller's other path,
   libtaichi's copy or the staged one, says what is wrong). */
static int vk_no_buffer(void) {
    int error = (int)ti_get_last_error(NULL, NULL);
    return error != 0 ? error : 1;
}

/* One copy of `count` regions recorded into the batch being recorded, with Taichi's barrier after it. */
static AotVkResult vk_record_copy(VkRt *rt, AotVkHandle dst, AotVkHandle src, uint32_t count,
                                  const AotVkBufferCopy *region) {
    AotVkResult code = AOT_VK_SUCCESS;
    VkBatch *b = vk_transfer_batch(rt, &code);
    if (b == NULL) {
        return code;
    }
    rt->f.CmdCopyBuffer(b->cb, src, dst, count, region);
    vk_transfer_done(rt, b);
    return AOT_VK_SUCCESS;
}

/* A copy between two memories, with the runtime's calls held (taichi_aot_vk_copy). */
static int vk_copy(VkRt *rt, TiMemory dst, uint64_t dst_offset, TiMemory src, uint64_t src_offset, uint64_t size) {
    AotVkBufferCopy region;
    AotVkHandle to, from;
    AotVkResult code;
    to = aot_vk_buffer_of(rt, dst, dst_offset, size);
    from = to != 0 ? aot_vk_buffer_of(rt, src, src_offset, size) : 0;
    if (to == 0 || from == 0) {
        return vk_no_buffer();
    }
    region.srcOffset = src_offset;
    region.dstOffset = dst_offset;
    region.size = size;
    code = vk_record_copy(rt, to, from, 1, &region);
    return code == AOT_VK_SUCCESS ? 0 : TAICHI_AOT_VK_ERROR - code;
}

/* The runtime's calls held for a brief call (a copy recorded, a value's copy and submit: VkRt.brief), as
   aot_vk_hold. */
static VkRt *vk_hold_brief(TiRuntime runtime) {
    VkRt *rt = aot_vk_hold(runtime);
    if (rt != NULL) {
        aot_vk_brief(rt);
    }
    return rt;
}

int taichi_aot_vk_copy(TiRuntime runtime, TiMemory dst, uint64_t dst_offset, TiMemory src, uint64_t src_offset,
                       uint64_t size) {
    VkRt *rt = vk_hold_brief(runtime);
    int code = rt == NULL ? 1 : vk_copy(rt, dst, dst_offset, src, src_offset, size); /* 1: libtaichi's copy */
    aot_vk_let_go(rt);
    taichi_aot_coming_back(); /* it may have waited for another thread's call (the caller unmarks it) */
    return code;
}

/* `size` bytes of `host` written into `dst` at `dst_offset` by the batch being recorded, with the runtime's calls held
   (taichi_aot_vk_update). */
static int vk_update(VkRt *rt, TiMemory dst, uint64_t dst_offset, const void *host, uint64_t size) {
    AotVkResult code = AOT_VK_SUCCESS;
    AotVkHandle to = aot_vk_buffer_of(rt, dst, dst_offset, size);
    VkBatch *b;
    if (to == 0) {
        return vk_no_buffer();
    }
    b = vk_transfer_batch(rt, &code);
    if (b == NULL) {
        return TAICHI_AOT_VK_ERROR - code;
    }
    rt->f.CmdUpdateBuffer(b->cb, to, dst_offset, size, host); /* the bytes copied into the command buffer now */
    vk_transfer_done(rt, b);
    return 0;
}

/* `size` bytes of `src` from `offset` read into `host` (taichi_aot_vk_read), with the runtime's calls held; `*held`
   set to 0 where the wait let them go. */
static int vk_read(VkRt *rt, TiMemory src, uint64_t offset, void *host, uint64_t size, int *held) {
    AotVkResult code = AOT_VK_SUCCESS;
    AotVkHandle from = aot_vk_buffer_of(rt, src, offset, size);
    AotVkBufferCopy region;
    VkBatch *b;
    if (from == 0) {
        return vk_no_buffer();
    }
    b = vk_transfer_batch(rt, &code);
    if (b == NULL) {
        return TAICHI_AOT_VK_ERROR - code;
    }
    region.srcOffset = offset; /* the batch's segment from its start: a read submits its batch, so it is the one */
    region.dstOffset = (uint64_t)(b - rt->batches) * VK_READ_SEGMENT;
    region.size = size;
    rt->f.CmdCopyBuffer(b->cb, from, rt->reads_buffer, 1, &region);
    vk_transfer_counted(b, rt); /* no barrier of its own: the batch's end's, recorded next, orders it */
    if ((code = aot_vk_submit(rt)) != AOT_VK_SUCCESS) { /* its end's barrier makes the copy the host's to read */
        return TAICHI_AOT_VK_ERROR - code;
    }
    aot_vk_begin_ahead(rt);
    *held = !aot_vk_wait_one(rt, b, &code);
    if (code == AOT_VK_SUCCESS) {
        memcpy(host, rt->reads_host + region.dstOffset, size);
    }
    if (!*held) {
        aot_vk_wait_one_done(rt, b); /* read: its segment another batch's again */
    }
    return code == AOT_VK_SUCCESS ? 0 : TAICHI_AOT_VK_ERROR - code;
}

int taichi_aot_vk_read(TiRuntime runtime, TiMemory src, uint64_t offset, void *host, uint64_t size) {
    VkRt *rt;
    int code, held = 1;
    if (size == 0 || size > VK_READ_SEGMENT) {
        return 1; /* more than a batch's segment: the caller stages it */
    }
    rt = vk_hold_brief(runtime);
    code = rt == NULL ? 1 : vk_read(rt, src, offset, host, size, &held);
    if (held) {
        aot_vk_let_go(rt);
    }
    taichi_aot_coming_back(); /* it may have waited for another thread's call (the caller unmarks it) */
    return code;
}

int taichi_aot_vk_update(TiRuntime runtime, TiMemory dst, uint64_t dst_offset, const void *host, uint64_t size) {
    VkRt *rt;
    int code;
    if (size == 0 || size > TAICHI_AOT_VK_UPDATE_BYTES || size % 4 != 0 || dst_offset % 4 != 0) {
        return 1; /* not a command buffer's write: the caller stages it */
    }
    rt = vk_hold_brief(runtime);
    code = rt == NULL ? 1 : vk_update(rt, dst, dst_offset, host, size);
    aot_vk_let_go(rt);
    taichi_aot_coming_back(); /* it may have waited for another thread's call (the caller unmarks it) */
    return code;
}

/* The pages `size` bytes from `host` lie in (from the page of its first byte to that of its last) imported as a buffer
   into `pages` (its start, length, buffer and memory); 1 where they cannot be. */
static AotVkResult vk_import(VkRt *rt, const void *host, uint64_t size, VkImport *pages) {
    AotVkMemoryHostPointerPropertiesEXT props;
    AotVkExternalMemoryBufferCreateInfo external;
    AotVkImportMemoryHostPointerInfoEXT import;
    AotVkBufferCreateInfo info;
    AotVkMemoryAllocateInfo alloc;
    AotVkMemoryRequirements req;
    uint32_t bits;
    int type;
    uintptr_t start = (uintptr_t)host & ~(uintptr_t)(rt->host_align - 1);
    uint64_t length = (((uintptr_t)host + size + rt->host_align - 1) & ~(uintptr_t)(rt->host_align - 1)) - start;
    AotVkHandle *buffer = &pages->buffer, *memory = &pages->memory;
    memset(&props, 0, sizeof(props));
    props.sType = AOT_VK_STRUCTURE_TYPE_MEMORY_HOST_POINTER_PROPERTIES_EXT;
    if (rt->f.GetMemoryHostPointerPropertiesEXT(rt->device, AOT_VK_EXTERNAL_MEMORY_HANDLE_TYPE_HOST_ALLOCATION_BIT_EXT,
                                                (const void *)start, &props) != AOT_VK_SUCCESS) {
        return 1;
    }
    memset(&external, 0, sizeof(external));
    external.sType = AOT_VK_STRUCTURE_TYPE_EXTERNAL_MEMORY_BUFFER_CREATE_INFO;
    external.handleTypes = AOT_VK_EXTERNAL_MEMORY_HANDLE_TYPE_HOST_ALLOCATION_BIT_EXT;
    memset(&info, 0, sizeof(info));
    info.sType = AOT_VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO;
    info.pNext = &external;
    info.size = length;
    info.usage = AOT_VK_BUFFER_USAGE_TRANSFER_SRC_BIT | AOT_VK_BUFFER_USAGE_TRANSFER_DST_BIT;
    if (rt->f.CreateBuffer(rt->device, &info, NULL, buffer) != AOT_VK_SUCCESS) {
        return 1;
    }
    rt->f.GetBufferMemoryRequirements(rt->device, *buffer, &req);
    bits = props.memoryTypeBits & req.memoryTypeBits;
    /* coherent, and cached where the driver has it: the GPU's writes then snoop the caches the CPU reads through */
    type = aot_vk_memory_type(rt, bits, AOT_VK_MEMORY_PROPERTY_HOST_COHERENT_BIT, AOT_VK_MEMORY_PROPERTY_HOST_CACHED_BIT);
    if (type < 0 || req.size > length) {
        rt->f.DestroyBuffer(rt->device, *buffer, NULL);
        return 1;
    }
    memset(&import, 0, sizeof(import));
    import.sType = AOT_VK_STRUCTURE_TYPE_IMPORT_MEMORY_HOST_POINTER_INFO_EXT;
    import.handleType = AOT_VK_EXTERNAL_MEMORY_HANDLE_TYPE_HOST_ALLOCATION_BIT_EXT;
    import.pHostPointer = (void *)start;
    memset(&alloc, 0, sizeof(alloc));
    alloc.sType = AOT_VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO;
    alloc.pNext = &import;
    alloc.allocationSize = length;
    alloc.memoryTypeIndex = (uint32_t)type;
    if (rt->f.AllocateMemory(rt->device, &alloc, NULL, memory) != AOT_VK_SUCCESS) {
        rt->f.DestroyBuffer(rt->device, *buffer, NULL);
        return 1;
    }
    if (rt->f.BindBufferMemory(rt->device, *buffer, *memory, 0) != AOT_VK_SUCCESS) {
        rt->f.DestroyBuffer(rt->device, *buffer, NULL);
        rt->f.FreeMemory(rt->device, *memory, NULL);
        return 1;
    }
    pages->start = start;
    pages->length = length;
    return AOT_VK_SUCCESS;
}

/* An import kept (taichi_aot_vk_import), found by its id in the runtime's list; NULL where it is not there. */
static VkImport *vk_kept_import(VkRt *rt, uint64_t id) {
    VkImport *i;
    for (i = rt->imports; i != NULL && i->id != id; i = i->next) {
    }
    return i;
}

/* The pages of `host`, `size` bytes, imported and kept until taichi_aot_vk_import_free (or the runtime's close):
   its id, or 0 where they cannot be imported. */
static uint64_t vk_keep_import(VkRt *rt, void *host, uint64_t size) {
    VkImport *made;
    if (rt == NULL || rt->host_align == 0 || size == 0) {
        return 0;
    }
    made = (VkImport *)calloc(1, sizeof(VkImport));
    if (made == NULL) {
        return 0;
    }
    if (vk_import(rt, host, size, made) != AOT_VK_SUCCESS) {
        free(made);
        return 0;
    }
    pthread_mutex_lock(&aot_vk_lock);
    made->id = aot_vk_next_id();
    made->next = rt->imports;
    rt->imports = made;
    pthread_mutex_unlock(&aot_vk_lock);
    return made->id;
}

uint64_t taichi_aot_vk_import(TiRuntime runtime, void *host, uint64_t size) {
    VkRt *rt = aot_vk_hold(runtime);
    uint64_t id = vk_keep_import(rt, host, size);
    aot_vk_let_go(rt);
    return id;
}

/* An import let go (any thread: a numpy array's collection), where its runtime is still open (else it went with
   it). No copy uses it then: copies through it are waited for before they return. */
void taichi_aot_vk_import_free(TiRuntime runtime, uint64_t id) {
    VkRt *rt = aot_vk_hold(runtime); /* after a copy through it on another thread */
    VkImport **at, *found = NULL;
    pthread_mutex_lock(&aot_vk_lock);
    for (at = rt != NULL ? &rt->imports : NULL; at != NULL && *at != NULL; at = &(*at)->next) {
        if ((*at)->id == id) {
            found = *at;
            *at = found->next;
            break;
        }
    }
    pthread_mutex_unlock(&aot_vk_lock);
    if (found != NULL) {
        aot_vk_release_import(rt, found);
        free(found);
    }
    aot_vk_let_go(rt);
}

/* The regions of a copy of `size` bytes between host memory at `host` (in pages imported from `start`) and a
   memory's bytes from `offset`: one; two where `host` is off VK_HOST_ALIGN, its head alone and the rest from the host's
   next aligned byte on. A copy engine writes (and reads) host memory at the link's speed only where the host's side
   is aligned (an H100: 38 GB/s to a host array 16 bytes past alignment, as malloc's large blocks and so numpy's
   arrays lie, 50 GB/s with the device's side off alignment instead: benchmarks/vk_copy.c). Returns the count. */
static uint32_t vk_host_regions(uintptr_t host, uintptr_t start, uint64_t offset, uint64_t size, int to_device,
                                AotVkBufferCopy *regions) {
    uint64_t head = (VK_HOST_ALIGN - (host & (VK_HOST_ALIGN - 1))) & (VK_HOST_ALIGN - 1);
    uint64_t at[2] = {host - start, offset}; /* the host's and the memory's first byte */
    uint32_t i, count = head != 0 && size > head ? 2 : 1;
    uint64_t sizes[2] = {count == 2 ? head : size, size - head};
    for (i = 0; i < count; ++i) {
        regions[i].srcOffset = to_device ? at[0] : at[1];
        regions[i].dstOffset = to_device ? at[1] : at[0];
        regions[i].size = sizes[i];
        at[0] += sizes[i];
        at[1] += sizes[i];
    }
    return count;
}

/* A host array's copy through its pages, with the runtime's calls held (taichi_aot_vk_host_copy). */
static int vk_host_copy(VkRt *rt, TiMemory memory, uint64_t offset, void *host, uint64_t size, int to_device,
                        uint64_t import_id) {
    VkImport once, *through = NULL;
    AotVkHandle device_buffer;
    AotVkBufferCopy regions[2];
    AotVkResult code;
    device_buffer = aot_vk_buffer_of(rt, memory, offset, size);
    if (device_buffer == 0) {
        return vk_no_buffer();
    }
    if (import_id != 0) {
        pthread_mutex_lock(&aot_vk_lock);
        through = vk_kept_import(rt, import_id);
        pthread_mutex_unlock(&aot_vk_lock);
        if (through == NULL || (uintptr_t)host < through->start || (uintptr_t)host + size > through->start + through->length) {
            return 1;
        }
    } else if (vk_import(rt, host, size, &once) != AOT_VK_SUCCESS) {
        return 1;
    }
    {
        const VkImport *pages = through != NULL ? through : &once;
        uint32_t count = vk_host_regions((uintptr_t)host, pages->start, offset, size, to_device, regions);
        code = vk_record_copy(rt, to_device ? device_buffer : pages->buffer, to_device ? pages->buffer : device_buffer,
                              count, regions);
    }
    if (code == AOT_VK_SUCCESS) {
        code = aot_vk_finish(rt); /* the pages are the caller's: done before they are let go */
    } else {
        aot_vk_finish(rt);
    }
    if (through == NULL) {
        aot_vk_release_import(rt, &once);
    }
    rt->counts[VK_COUNT_HOST_COPIES] += code == AOT_VK_SUCCESS;
    return code == AOT_VK_SUCCESS ? 0 : TAICHI_AOT_VK_ERROR - code;
}

int taichi_aot_vk_host_copy(TiRuntime runtime, TiMemory memory, uint64_t offset, void *host, uint64_t size,
                            int to_device, uint64_t import_id) {
    VkRt *rt = aot_vk_hold(runtime);
    int code = rt == NULL || rt->host_align == 0 || size == 0
                   ? 1
                   : vk_host_copy(rt, memory, offset, host, size, to_device, import_id);
    aot_vk_let_go(rt);
    return code;
}
