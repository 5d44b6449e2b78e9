/* OpenInfer-JAX emitted Vulkan host runtime: one device, one host-visible storage buffer that
 * IS the program's arena, one compute pipeline per kernel, dispatches submitted in node order.
 * C99 + libvulkan. Copied verbatim into every program emitted for the Vulkan target. */
#ifndef OI_VULKAN_H
#define OI_VULKAN_H

#include <stddef.h>
#include <stdint.h>

#include "oi_runtime.h"

/* Create the instance/device/queue, an arena buffer of `arena_bytes` mapped at *mapped. */
int oi_vk_init(size_t arena_bytes, unsigned char **mapped, int n_pipelines);
/* Create pipeline `id` from SPIR-V words; every pipeline takes up to 128 bytes of push constants. */
int oi_vk_pipeline(int id, const uint32_t *spirv, size_t spirv_bytes);
/* Record, submit and wait for one dispatch of pipeline `id` (`groups` workgroups along x). */
int oi_vk_dispatch(int id, const void *push, uint32_t push_bytes, uint32_t groups);
/* The device's name (after oi_vk_init). */
const char *oi_vk_device_name(void);
void oi_vk_free(void);
/* Workgroups (of 64) for n elements, capped at 65535: shaders loop with a grid stride. */
uint32_t oi_vk_groups(int64_t n);
/* True when `in`'s shape (leading 1s dropped) equals the trailing dims of `out`. */
int oi_vk_suffix(const oi_tensor *in, const oi_tensor *out);

#endif
