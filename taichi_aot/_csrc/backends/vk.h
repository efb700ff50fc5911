/* The part of Vulkan the own Vulkan launch (backends/vulkan.c) uses, declared by layout as Vulkan 1.0 defines it
   for 64-bit targets: dispatchable handles are pointers, the others 64-bit integers, enums and flags 32-bit. No
   Vulkan header is needed to build; tests/test_vulkan_launch.py compiles this beside Vulkan's own headers, where
   they are installed, and checks every size and offset. Names carry the prefix AotVk so that both can meet in one
   unit. */
#ifndef TAICHI_AOT_BACKENDS_VK_H
#define TAICHI_AOT_BACKENDS_VK_H

#include <stddef.h>
#include <stdint.h>

typedef int32_t AotVkResult;
typedef uint64_t AotVkHandle; /* VkBuffer, VkDeviceMemory, VkFence, VkPipeline, ...: non-dispatchable */
typedef void *AotVkDispatch;  /* VkInstance, VkPhysicalDevice, VkDevice, VkQueue, VkCommandBuffer */
typedef void (*AotVkVoidFunction)(void);
typedef AotVkVoidFunction (*AotVkGetProcAddr)(AotVkDispatch, const char *);

#define AOT_VK_SUCCESS 0
#define AOT_VK_NOT_READY 1
#define AOT_VK_TIMEOUT 2
#define AOT_VK_ERROR_OUT_OF_POOL_MEMORY (-1000069000)
#define AOT_VK_ERROR_FRAGMENTED_POOL (-12)

#define AOT_VK_STRUCTURE_TYPE_SUBMIT_INFO 4
#define AOT_VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO 5
#define AOT_VK_STRUCTURE_TYPE_FENCE_CREATE_INFO 8
#define AOT_VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO 12
#define AOT_VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO 16
#define AOT_VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO 18
#define AOT_VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO 29
#define AOT_VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO 30
#define AOT_VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO 32
#define AOT_VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO 33
#define AOT_VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO 34
#define AOT_VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET 35
#define AOT_VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO 39
#define AOT_VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO 40
#define AOT_VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO 42
#define AOT_VK_STRUCTURE_TYPE_MEMORY_BARRIER 46
#define AOT_VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2 1000059001
#define AOT_VK_STRUCTURE_TYPE_EXTERNAL_MEMORY_BUFFER_CREATE_INFO 1000072000
#define AOT_VK_STRUCTURE_TYPE_IMPORT_MEMORY_HOST_POINTER_INFO_EXT 1000178000
#define AOT_VK_STRUCTURE_TYPE_MEMORY_HOST_POINTER_PROPERTIES_EXT 1000178001
#define AOT_VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_EXTERNAL_MEMORY_HOST_PROPERTIES_EXT 1000178002
#define AOT_VK_EXTERNAL_MEMORY_HANDLE_TYPE_HOST_ALLOCATION_BIT_EXT 0x80u
#define AOT_VK_BUFFER_USAGE_TRANSFER_SRC_BIT 0x1u

#define AOT_VK_DESCRIPTOR_TYPE_STORAGE_BUFFER 7
#define AOT_VK_DESCRIPTOR_TYPE_UNIFORM_BUFFER_DYNAMIC 8
#define AOT_VK_SHADER_STAGE_COMPUTE_BIT 0x20u
#define AOT_VK_PIPELINE_BIND_POINT_COMPUTE 1
#define AOT_VK_COMMAND_BUFFER_LEVEL_PRIMARY 0
#define AOT_VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT 0x2u
#define AOT_VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT 0x1u
#define AOT_VK_DESCRIPTOR_POOL_CREATE_FREE_DESCRIPTOR_SET_BIT 0x1u
#define AOT_VK_BUFFER_USAGE_TRANSFER_DST_BIT 0x2u
#define AOT_VK_BUFFER_USAGE_UNIFORM_BUFFER_BIT 0x10u
#define AOT_VK_BUFFER_USAGE_STORAGE_BUFFER_BIT 0x20u
#define AOT_VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT 0x1u
#define AOT_VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT 0x2u
#define AOT_VK_MEMORY_PROPERTY_HOST_COHERENT_BIT 0x4u
#define AOT_VK_MEMORY_PROPERTY_HOST_CACHED_BIT 0x8u
#define AOT_VK_PIPELINE_STAGE_ALL_COMMANDS_BIT 0x10000u
#define AOT_VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT 0x800u
#define AOT_VK_PIPELINE_STAGE_TRANSFER_BIT 0x1000u
#define AOT_VK_PIPELINE_STAGE_HOST_BIT 0x4000u
#define AOT_VK_ACCESS_SHADER_READ_BIT 0x20u
#define AOT_VK_ACCESS_SHADER_WRITE_BIT 0x40u
#define AOT_VK_ACCESS_TRANSFER_READ_BIT 0x800u
#define AOT_VK_ACCESS_TRANSFER_WRITE_BIT 0x1000u
#define AOT_VK_ACCESS_HOST_READ_BIT 0x2000u
#define AOT_VK_ACCESS_HOST_WRITE_BIT 0x4000u
#define AOT_VK_ACCESS_MEMORY_READ_BIT 0x8000u
#define AOT_VK_ACCESS_MEMORY_WRITE_BIT 0x10000u
#define AOT_VK_WHOLE_SIZE (~0ULL)

/* VkPhysicalDeviceProperties is read as bytes: its limits start at byte 296, and of them these few are read. */
#define AOT_VK_PROPERTIES_SIZE 824
#define AOT_VK_PROPERTIES_DEVICE_TYPE 16 /* deviceType (a VkPhysicalDeviceType) */
#define AOT_VK_PHYSICAL_DEVICE_TYPE_CPU 4
#define AOT_VK_LIMIT_MAX_UNIFORM_BUFFER_RANGE (296 + 24)
#define AOT_VK_LIMIT_MAX_COMPUTE_WORK_GROUP_COUNT (296 + 220)
#define AOT_VK_LIMIT_MIN_UNIFORM_BUFFER_OFFSET_ALIGNMENT (296 + 320)
#define AOT_VK_LIMIT_TIMESTAMP_PERIOD (296 + 424)
#define AOT_VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO 11
#define AOT_VK_QUERY_TYPE_TIMESTAMP 2
#define AOT_VK_QUERY_RESULT_64_BIT 0x1u
#define AOT_VK_QUERY_RESULT_WAIT_BIT 0x2u

typedef struct {
    int32_t sType;
    const void *pNext;
    uint32_t flags;
    uint32_t queueFamilyIndex;
} AotVkCommandPoolCreateInfo;

typedef struct {
    int32_t sType;
    const void *pNext;
    AotVkHandle commandPool;
    uint32_t level;
    uint32_t commandBufferCount;
} AotVkCommandBufferAllocateInfo;

typedef struct {
    int32_t sType;
    const void *pNext;
    uint32_t flags;
    const void *pInheritanceInfo;
} AotVkCommandBufferBeginInfo;

typedef struct {
    int32_t sType;
    const void *pNext;
    uint32_t waitSemaphoreCount;
    const AotVkHandle *pWaitSemaphores;
    const uint32_t *pWaitDstStageMask;
    uint32_t commandBufferCount;
    const AotVkDispatch *pCommandBuffers;
    uint32_t signalSemaphoreCount;
    const AotVkHandle *pSignalSemaphores;
} AotVkSubmitInfo;

typedef struct {
    int32_t sType;
    const void *pNext;
    uint32_t flags;
} AotVkFenceCreateInfo;

typedef struct {
    int32_t sType;
    const void *pNext;
    uint32_t flags;
    size_t codeSize;
    const uint32_t *pCode;
} AotVkShaderModuleCreateInfo;

typedef struct {
    uint32_t binding;
    int32_t descriptorType;
    uint32_t descriptorCount;
    uint32_t stageFlags;
    const AotVkHandle *pImmutableSamplers;
} AotVkDescriptorSetLayoutBinding;

typedef struct {
    int32_t sType;
    const void *pNext;
    uint32_t flags;
    uint32_t bindingCount;
    const AotVkDescriptorSetLayoutBinding *pBindings;
} AotVkDescriptorSetLayoutCreateInfo;

typedef struct {
    int32_t sType;
    const void *pNext;
    uint32_t flags;
    uint32_t setLayoutCount;
    const AotVkHandle *pSetLayouts;
    uint32_t pushConstantRangeCount;
    const void *pPushConstantRanges;
} AotVkPipelineLayoutCreateInfo;

typedef struct {
    int32_t sType;
    const void *pNext;
    uint32_t flags;
    uint32_t stage;
    AotVkHandle module;
    const char *pName;
    const void *pSpecializationInfo;
} AotVkPipelineShaderStageCreateInfo;

typedef struct {
    int32_t sType;
    const void *pNext;
    uint32_t flags;
    AotVkPipelineShaderStageCreateInfo stage;
    AotVkHandle layout;
    AotVkHandle basePipelineHandle;
    int32_t basePipelineIndex;
} AotVkComputePipelineCreateInfo;

typedef struct {
    int32_t type;
    uint32_t descriptorCount;
} AotVkDescriptorPoolSize;

typedef struct {
    int32_t sType;
    const void *pNext;
    uint32_t flags;
    uint32_t maxSets;
    uint32_t poolSizeCount;
    const AotVkDescriptorPoolSize *pPoolSizes;
} AotVkDescriptorPoolCreateInfo;

typedef struct {
    int32_t sType;
    const void *pNext;
    AotVkHandle descriptorPool;
    uint32_t descriptorSetCount;
    const AotVkHandle *pSetLayouts;
} AotVkDescriptorSetAllocateInfo;

typedef struct {
    AotVkHandle buffer;
    uint64_t offset;
    uint64_t range;
} AotVkDescriptorBufferInfo;

typedef struct {
    int32_t sType;
    const void *pNext;
    AotVkHandle dstSet;
    uint32_t dstBinding;
    uint32_t dstArrayElement;
    uint32_t descriptorCount;
    int32_t descriptorType;
    const void *pImageInfo;
    const AotVkDescriptorBufferInfo *pBufferInfo;
    const AotVkHandle *pTexelBufferView;
} AotVkWriteDescriptorSet;

typedef struct {
    int32_t sType;
    const void *pNext;
    uint32_t srcAccessMask;
    uint32_t dstAccessMask;
} AotVkMemoryBarrier;

typedef struct {
    int32_t sType;
    const void *pNext;
    uint32_t flags;
    uint64_t size;
    uint32_t usage;
    int32_t sharingMode;
    uint32_t queueFamilyIndexCount;
    const uint32_t *pQueueFamilyIndices;
} AotVkBufferCreateInfo;

typedef struct {
    uint64_t size;
    uint64_t alignment;
    uint32_t memoryTypeBits;
} AotVkMemoryRequirements;

typedef struct {
    int32_t sType;
    const void *pNext;
    uint64_t allocationSize;
    uint32_t memoryTypeIndex;
} AotVkMemoryAllocateInfo;

typedef struct {
    uint32_t propertyFlags;
    uint32_t heapIndex;
} AotVkMemoryType;

typedef struct {
    uint64_t size;
    uint32_t flags;
} AotVkMemoryHeap;

typedef struct {
    uint32_t memoryTypeCount;
    AotVkMemoryType memoryTypes[32];
    uint32_t memoryHeapCount;
    AotVkMemoryHeap memoryHeaps[16];
} AotVkPhysicalDeviceMemoryProperties;

typedef struct {
    uint64_t srcOffset;
    uint64_t dstOffset;
    uint64_t size;
} AotVkBufferCopy;

typedef struct {
    int32_t sType;
    void *pNext;
    uint32_t handleTypes;
} AotVkExternalMemoryBufferCreateInfo;

typedef struct {
    int32_t sType;
    const void *pNext;
    uint32_t handleType;
    void *pHostPointer;
} AotVkImportMemoryHostPointerInfoEXT;

typedef struct {
    int32_t sType;
    void *pNext;
    uint32_t memoryTypeBits;
} AotVkMemoryHostPointerPropertiesEXT;

typedef struct {
    int32_t sType;
    void *pNext;
    uint64_t minImportedHostPointerAlignment;
} AotVkPhysicalDeviceExternalMemoryHostPropertiesEXT;

typedef struct {
    int32_t sType;
    const void *pNext;
    uint32_t flags;
    int32_t queryType;
    uint32_t queryCount;
    uint32_t pipelineStatistics;
} AotVkQueryPoolCreateInfo;

typedef struct {
    uint32_t width;
    uint32_t height;
    uint32_t depth;
} AotVkExtent3D;

typedef struct {
    uint32_t queueFlags;
    uint32_t queueCount;
    uint32_t timestampValidBits;
    AotVkExtent3D minImageTransferGranularity;
} AotVkQueueFamilyProperties;

/* The entry points, looked up once a device (vkGetDeviceProcAddr; the instance's two through the runtime's
   vkGetInstanceProcAddr). */
typedef struct {
    void (*GetPhysicalDeviceProperties)(AotVkDispatch, void *);
    void (*GetPhysicalDeviceMemoryProperties)(AotVkDispatch, AotVkPhysicalDeviceMemoryProperties *);
    AotVkResult (*CreateCommandPool)(AotVkDispatch, const AotVkCommandPoolCreateInfo *, const void *, AotVkHandle *);
    void (*DestroyCommandPool)(AotVkDispatch, AotVkHandle, const void *);
    AotVkResult (*AllocateCommandBuffers)(AotVkDispatch, const AotVkCommandBufferAllocateInfo *, AotVkDispatch *);
    AotVkResult (*BeginCommandBuffer)(AotVkDispatch, const AotVkCommandBufferBeginInfo *);
    AotVkResult (*EndCommandBuffer)(AotVkDispatch);
    AotVkResult (*ResetCommandBuffer)(AotVkDispatch, uint32_t);
    AotVkResult (*QueueSubmit)(AotVkDispatch, uint32_t, const AotVkSubmitInfo *, AotVkHandle);
    AotVkResult (*QueueWaitIdle)(AotVkDispatch);
    AotVkResult (*DeviceWaitIdle)(AotVkDispatch);
    AotVkResult (*CreateFence)(AotVkDispatch, const AotVkFenceCreateInfo *, const void *, AotVkHandle *);
    void (*DestroyFence)(AotVkDispatch, AotVkHandle, const void *);
    AotVkResult (*WaitForFences)(AotVkDispatch, uint32_t, const AotVkHandle *, uint32_t, uint64_t);
    AotVkResult (*ResetFences)(AotVkDispatch, uint32_t, const AotVkHandle *);
    AotVkResult (*GetFenceStatus)(AotVkDispatch, AotVkHandle);
    AotVkResult (*CreateShaderModule)(AotVkDispatch, const AotVkShaderModuleCreateInfo *, const void *, AotVkHandle *);
    void (*DestroyShaderModule)(AotVkDispatch, AotVkHandle, const void *);
    AotVkResult (*CreateDescriptorSetLayout)(AotVkDispatch, const AotVkDescriptorSetLayoutCreateInfo *, const void *,
                                             AotVkHandle *);
    void (*DestroyDescriptorSetLayout)(AotVkDispatch, AotVkHandle, const void *);
    AotVkResult (*CreatePipelineLayout)(AotVkDispatch, const AotVkPipelineLayoutCreateInfo *, const void *,
                                        AotVkHandle *);
    void (*DestroyPipelineLayout)(AotVkDispatch, AotVkHandle, const void *);
    AotVkResult (*CreateComputePipelines)(AotVkDispatch, AotVkHandle, uint32_t, const AotVkComputePipelineCreateInfo *,
                                          const void *, AotVkHandle *);
    void (*DestroyPipeline)(AotVkDispatch, AotVkHandle, const void *);
    AotVkResult (*CreateDescriptorPool)(AotVkDispatch, const AotVkDescriptorPoolCreateInfo *, const void *,
                                        AotVkHandle *);
    void (*DestroyDescriptorPool)(AotVkDispatch, AotVkHandle, const void *);
    AotVkResult (*AllocateDescriptorSets)(AotVkDispatch, const AotVkDescriptorSetAllocateInfo *, AotVkHandle *);
    AotVkResult (*FreeDescriptorSets)(AotVkDispatch, AotVkHandle, uint32_t, const AotVkHandle *);
    void (*UpdateDescriptorSets)(AotVkDispatch, uint32_t, const AotVkWriteDescriptorSet *, uint32_t, const void *);
    AotVkResult (*CreateBuffer)(AotVkDispatch, const AotVkBufferCreateInfo *, const void *, AotVkHandle *);
    void (*DestroyBuffer)(AotVkDispatch, AotVkHandle, const void *);
    void (*GetBufferMemoryRequirements)(AotVkDispatch, AotVkHandle, AotVkMemoryRequirements *);
    AotVkResult (*AllocateMemory)(AotVkDispatch, const AotVkMemoryAllocateInfo *, const void *, AotVkHandle *);
    void (*FreeMemory)(AotVkDispatch, AotVkHandle, const void *);
    AotVkResult (*BindBufferMemory)(AotVkDispatch, AotVkHandle, AotVkHandle, uint64_t);
    AotVkResult (*MapMemory)(AotVkDispatch, AotVkHandle, uint64_t, uint64_t, uint32_t, void **);
    void (*CmdBindPipeline)(AotVkDispatch, int32_t, AotVkHandle);
    void (*CmdBindDescriptorSets)(AotVkDispatch, int32_t, AotVkHandle, uint32_t, uint32_t, const AotVkHandle *,
                                  uint32_t, const uint32_t *);
    void (*CmdDispatch)(AotVkDispatch, uint32_t, uint32_t, uint32_t);
    void (*CmdPipelineBarrier)(AotVkDispatch, uint32_t, uint32_t, uint32_t, uint32_t, const AotVkMemoryBarrier *,
                               uint32_t, const void *, uint32_t, const void *);
    void (*CmdFillBuffer)(AotVkDispatch, AotVkHandle, uint64_t, uint64_t, uint32_t);
    void (*CmdCopyBuffer)(AotVkDispatch, AotVkHandle, AotVkHandle, uint32_t, const AotVkBufferCopy *);
    void (*CmdUpdateBuffer)(AotVkDispatch, AotVkHandle, uint64_t, uint64_t, const void *);
    /* where the device was made with VK_EXT_external_memory_host (else NULL), and Vulkan 1.1's properties query */
    AotVkResult (*GetMemoryHostPointerPropertiesEXT)(AotVkDispatch, uint32_t, const void *,
                                                     AotVkMemoryHostPointerPropertiesEXT *);
    void (*GetPhysicalDeviceProperties2)(AotVkDispatch, void *);
    /* timestamps (backends/vkprofile.c) */
    void (*GetPhysicalDeviceQueueFamilyProperties)(AotVkDispatch, uint32_t *, AotVkQueueFamilyProperties *);
    AotVkResult (*CreateQueryPool)(AotVkDispatch, const AotVkQueryPoolCreateInfo *, const void *, AotVkHandle *);
    void (*DestroyQueryPool)(AotVkDispatch, AotVkHandle, const void *);
    void (*CmdResetQueryPool)(AotVkDispatch, AotVkHandle, uint32_t, uint32_t);
    void (*CmdWriteTimestamp)(AotVkDispatch, uint32_t, AotVkHandle, uint32_t);
    AotVkResult (*GetQueryPoolResults)(AotVkDispatch, AotVkHandle, uint32_t, uint32_t, size_t, void *, uint64_t,
                                       uint32_t);
} AotVkFunctions;

#endif
