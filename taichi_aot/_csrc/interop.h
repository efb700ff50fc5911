/* The Vulkan and OpenGL types the C-API's interop headers (taichi_vulkan.h, taichi_opengl.h) name, declared here by
   what they are (pointers, 32-bit enums and flags), so that neither Vulkan's nor OpenGL's headers are needed to build:
   the C files that use the interop functions include this first, and _cdef.py hands the same lines to cffi. */
#ifndef TAICHI_AOT_INTEROP_H
#define TAICHI_AOT_INTEROP_H

#include <stddef.h>
#include <stdint.h>

typedef struct VkInstance_T *VkInstance;
typedef struct VkPhysicalDevice_T *VkPhysicalDevice;
typedef struct VkDevice_T *VkDevice;
typedef struct VkQueue_T *VkQueue;
typedef struct VkBuffer_T *VkBuffer;
typedef struct VkDeviceMemory_T *VkDeviceMemory;
typedef struct VkImage_T *VkImage;
typedef uint32_t VkFlags;
typedef VkFlags VkBufferUsageFlags;
typedef VkFlags VkImageUsageFlags;
typedef int32_t VkImageType;
typedef int32_t VkFormat;
typedef int32_t VkSampleCountFlagBits;
typedef int32_t VkImageTiling;
typedef int32_t VkImageViewType;
typedef int32_t VkImageLayout;
typedef struct VkExtent3D { uint32_t width; uint32_t height; uint32_t depth; } VkExtent3D;
typedef void (*PFN_vkVoidFunction)(void);
typedef PFN_vkVoidFunction (*PFN_vkGetInstanceProcAddr)(VkInstance instance, const char *pName);
typedef unsigned int GLuint;
typedef unsigned int GLenum;
typedef int GLsizei;
typedef ptrdiff_t GLsizeiptr;

#endif
