/* OpenInfer-JAX emitted Vulkan host runtime: one device, one host-visible coherent storage
 * buffer that IS the program's arena, one compute pipeline per kernel, one descriptor set per
 * prepared dispatch (each binding a (buffer, offset, range) slice of the arena), and batched
 * submission: consecutive dispatches are recorded into one command buffer with compute->compute
 * barriers and submitted only when the host must touch memory (oi_vk_sync).
 * C99 + libvulkan. Copied verbatim into every program emitted for the Vulkan target. */
#ifndef OI_VULKAN_H
#define OI_VULKAN_H

#include <stddef.h>
#include <stdint.h>

#include "oi_runtime.h"

/* Device features a program's shaders need (the `needs` mask of oi_vk_init). */
#define OI_VK_NEED_INT64 1u
#define OI_VK_NEED_FLOAT64 2u
/* Most storage buffers one kernel binds, and most push-constant words of one dispatch. */
#define OI_VK_MAX_BINDINGS 8
#define OI_VK_MAX_PUSH 32

/* Create instance, device (OI_VK_DEVICE=<index> picks one; else the first discrete GPU, else
 * the first device), queue and an arena of `arena_bytes` mapped at *mapped. Every binding offset
 * is a multiple of `align`; the device's minStorageBufferOffsetAlignment must divide it. */
int oi_vk_init(size_t arena_bytes, uint32_t align, unsigned char **mapped, int n_pipelines,
               int n_dispatches, uint32_t needs);
/* Create pipeline `id` from SPIR-V words for a kernel with `n_bindings` storage buffers. */
int oi_vk_pipeline(int id, const uint32_t *spirv, size_t spirv_bytes, int n_bindings);
/* Prepare dispatch `d`: pipeline, arena slices bound to bindings 0..n-1, push constants, grid. */
int oi_vk_prepare(int d, int pipeline, int n_bindings, const size_t *offsets, const size_t *ranges,
                  const uint32_t *push, uint32_t push_words, uint32_t gx, uint32_t gy, uint32_t gz);
/* Prepare dispatch `d` as a shape variant of dispatch `like`: its descriptor set (the same arena
 * slices), another pipeline, push constants and grid. */
int oi_vk_variant(int d, int like, int pipeline, const uint32_t *push, uint32_t push_words, uint32_t gx,
                  uint32_t gy, uint32_t gz);
/* The first of `variants` rows of `table` (each `row` int64: ndim then dims, per tensor) that
 * matches the shapes of ts[0..n-1]; -1 when none does. */
int oi_vk_pick(const oi_tensor *const *ts, int n, const int64_t *table, int row, int variants);
/* Record dispatch `d` into the open command buffer (after a barrier on the previous one). */
int oi_vk_run(int d);
/* Submit what was recorded and wait for it; a no-op when nothing is pending. */
int oi_vk_sync(void);
/* Drop what was recorded and not submitted (a failed step). */
void oi_vk_discard(void);
/* Counters since oi_vk_init: queue submissions, dispatches, and GPU nodes that ran their C
 * kernel because no prepared shape matched (oi_vk_fallback counts one). */
uint64_t oi_vk_submits(void);
uint64_t oi_vk_dispatches(void);
uint64_t oi_vk_fallbacks(void);
void oi_vk_fallback(void);
/* The device's name (after oi_vk_init). */
const char *oi_vk_device_name(void);
void oi_vk_free(void);

#endif
