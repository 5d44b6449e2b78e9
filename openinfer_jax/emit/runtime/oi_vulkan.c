/* OpenInfer-JAX emitted Vulkan host runtime (see oi_vulkan.h).
 *
 * Batching: oi_vk_run records into one command buffer and puts a compute->compute memory
 * barrier between consecutive dispatches (a later kernel may read what an earlier one wrote,
 * or overwrite what it read: arena space is shared by lifetime). oi_vk_sync ends the buffer
 * with a compute->host barrier, submits it and waits, so the host then sees every result in
 * the coherent arena. Host writes made before a submission are visible to it (vkQueueSubmit's
 * implicit host-write ordering on coherent memory), so nothing is needed in that direction. */
#include "oi_vulkan.h"

#include <stdlib.h>
#include <string.h>
#include <vulkan/vulkan.h>

typedef struct {
    int pipeline;
    VkDescriptorSet set;
    uint32_t push[OI_VK_MAX_PUSH];
    uint32_t push_words;
    uint32_t grid[3];
} oi_vk_disp;

static VkInstance vk_instance;
static VkPhysicalDevice vk_phys;
static VkDevice vk_device;
static VkQueue vk_queue;
static uint32_t vk_family;
static VkBuffer vk_buffer;
static VkDeviceMemory vk_memory;
static VkDescriptorSetLayout vk_set_layouts[OI_VK_MAX_BINDINGS + 1];
static VkPipelineLayout vk_layouts[OI_VK_MAX_BINDINGS + 1];
static VkDescriptorPool vk_pool;
static VkCommandPool vk_cmd_pool;
static VkCommandBuffer vk_cmd;
static VkFence vk_fence;
static VkPipeline *vk_pipelines;
static int *vk_pipeline_bindings;
static int vk_n_pipelines;
static oi_vk_disp *vk_disps;
static int vk_n_disps;
static VkPhysicalDeviceLimits vk_limits;
static int vk_recording, vk_recorded;
static uint64_t vk_submits, vk_dispatches, vk_fallbacks;
static char vk_name[VK_MAX_PHYSICAL_DEVICE_NAME_SIZE];

static int fail(const char *what, VkResult r) {
    oi_set_error("Vulkan: %s failed (VkResult %d)", what, (int)r);
    return OI_ERR_STATE;
}

const char *oi_vk_device_name(void) { return vk_name; }
uint64_t oi_vk_submits(void) { return vk_submits; }
uint64_t oi_vk_dispatches(void) { return vk_dispatches; }
uint64_t oi_vk_fallbacks(void) { return vk_fallbacks; }
void oi_vk_fallback(void) { vk_fallbacks++; }

int oi_vk_pick(const oi_tensor *const *ts, int n, const int64_t *table, int row, int variants) {
    int v, k, d;
    for (v = 0; v < variants; v++) {
        const int64_t *r = table + (size_t)v * (size_t)row;
        int ok = 1;
        for (k = 0; ok && k < n; k++) {
            const oi_tensor *t = ts[k];
            if (t->ndim != (int)*r++) { ok = 0; break; }
            for (d = 0; d < t->ndim; d++)
                if (t->dims[d] != *r++) { ok = 0; break; }
        }
        if (ok) return v;
    }
    return -1;
}

/* OI_VK_DEVICE=<index> if set; else the first discrete GPU; else the first device. */
static VkPhysicalDevice pick_device(const VkPhysicalDevice *devs, uint32_t n) {
    const char *env = getenv("OI_VK_DEVICE");
    uint32_t i;
    VkPhysicalDeviceProperties p;
    if (env && *env) {
        long k = strtol(env, NULL, 10);
        return (k >= 0 && (uint32_t)k < n) ? devs[k] : VK_NULL_HANDLE;
    }
    for (i = 0; i < n; i++) {
        vkGetPhysicalDeviceProperties(devs[i], &p);
        if (p.deviceType == VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU) return devs[i];
    }
    return devs[0];
}

static int create_device(uint32_t needs) {
    VkQueueFamilyProperties fams[32];
    uint32_t n_fam = 0, f;
    VkDeviceQueueCreateInfo qci;
    VkDeviceCreateInfo dci;
    VkPhysicalDeviceFeatures have, want;
    float prio = 1.0f;
    VkResult r;

    vkGetPhysicalDeviceFeatures(vk_phys, &have);
    memset(&want, 0, sizeof want);
    if (needs & OI_VK_NEED_INT64) {
        if (!have.shaderInt64) {
            oi_set_error("Vulkan: device %s lacks shaderInt64, which this program's 64-bit integer kernels need; "
                         "synthesize with features.shader_int64=false", vk_name);
            return OI_ERR_STATE;
        }
        want.shaderInt64 = VK_TRUE;
    }
    if (needs & OI_VK_NEED_FLOAT64) {
        if (!have.shaderFloat64) {
            oi_set_error("Vulkan: device %s lacks shaderFloat64, which this program's f64 kernels need; "
                         "synthesize with features.shader_float64=false", vk_name);
            return OI_ERR_STATE;
        }
        want.shaderFloat64 = VK_TRUE;
    }
    vkGetPhysicalDeviceQueueFamilyProperties(vk_phys, &n_fam, NULL);
    if (n_fam > 32) n_fam = 32;
    vkGetPhysicalDeviceQueueFamilyProperties(vk_phys, &n_fam, fams);
    for (f = 0; f < n_fam; f++)
        if (fams[f].queueFlags & VK_QUEUE_COMPUTE_BIT) break;
    if (f == n_fam) { oi_set_error("Vulkan: device %s has no compute queue", vk_name); return OI_ERR_STATE; }
    vk_family = f;
    memset(&qci, 0, sizeof qci);
    qci.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO;
    qci.queueFamilyIndex = vk_family;
    qci.queueCount = 1;
    qci.pQueuePriorities = &prio;
    memset(&dci, 0, sizeof dci);
    dci.sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO;
    dci.queueCreateInfoCount = 1;
    dci.pQueueCreateInfos = &qci;
    dci.pEnabledFeatures = &want;
    if ((r = vkCreateDevice(vk_phys, &dci, NULL, &vk_device)) != VK_SUCCESS) return fail("vkCreateDevice", r);
    vkGetDeviceQueue(vk_device, vk_family, 0, &vk_queue);
    return OI_OK;
}

/* The memory type of the arena: host-visible and coherent; with OI_VK_MEMORY=device one that is
 * also device-local where the driver offers it (resizable BAR: kernels read at device speed,
 * host nodes read slowly), else a host-cached one (host nodes read it at memory speed). */
static uint32_t pick_memory(uint32_t allowed, const VkPhysicalDeviceMemoryProperties *mp, int device) {
    const VkMemoryPropertyFlags want = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
    const VkMemoryPropertyFlags extra = device ? VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT : VK_MEMORY_PROPERTY_HOST_CACHED_BIT;
    uint32_t t, pick = UINT32_MAX;
    for (t = 0; t < mp->memoryTypeCount; t++) {
        VkMemoryPropertyFlags fl = mp->memoryTypes[t].propertyFlags;
        if (!(allowed & (1u << t)) || (fl & want) != want) continue;
        if (pick == UINT32_MAX) pick = t;
        if (fl & extra) return t;
    }
    return pick;
}

/* The arena: one storage buffer in host-visible coherent memory (see pick_memory). */
static int create_arena(size_t size, unsigned char **mapped) {
    VkBufferCreateInfo bci;
    VkMemoryRequirements req;
    VkPhysicalDeviceMemoryProperties mp;
    VkMemoryAllocateInfo mai;
    const char *env = getenv("OI_VK_MEMORY");
    int device = env && strcmp(env, "device") == 0;
    uint32_t pick;
    void *ptr;
    VkResult r;
    memset(&bci, 0, sizeof bci);
    bci.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO;
    bci.size = size;
    bci.usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT;
    bci.sharingMode = VK_SHARING_MODE_EXCLUSIVE;
    if ((r = vkCreateBuffer(vk_device, &bci, NULL, &vk_buffer)) != VK_SUCCESS) return fail("vkCreateBuffer", r);
    vkGetBufferMemoryRequirements(vk_device, vk_buffer, &req);
    vkGetPhysicalDeviceMemoryProperties(vk_phys, &mp);
    pick = pick_memory(req.memoryTypeBits, &mp, device);
    if (pick == UINT32_MAX) { oi_set_error("Vulkan: no host-visible coherent memory"); return OI_ERR_STATE; }
    memset(&mai, 0, sizeof mai);
    mai.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO;
    mai.allocationSize = req.size;
    mai.memoryTypeIndex = pick;
    r = vkAllocateMemory(vk_device, &mai, NULL, &vk_memory);
    if (r != VK_SUCCESS && device) { /* the device-local window may be too small: host memory */
        mai.memoryTypeIndex = pick_memory(req.memoryTypeBits, &mp, 0);
        r = vkAllocateMemory(vk_device, &mai, NULL, &vk_memory);
    }
    if (r != VK_SUCCESS) return fail("vkAllocateMemory", r);
    if ((r = vkBindBufferMemory(vk_device, vk_buffer, vk_memory, 0)) != VK_SUCCESS) return fail("vkBindBufferMemory", r);
    if ((r = vkMapMemory(vk_device, vk_memory, 0, VK_WHOLE_SIZE, 0, &ptr)) != VK_SUCCESS) return fail("vkMapMemory", r);
    memset(ptr, 0, size);
    *mapped = (unsigned char *)ptr;
    return OI_OK;
}

/* One descriptor set layout + pipeline layout per binding count (bindings 0..n-1). */
static int create_layouts(void) {
    VkDescriptorSetLayoutBinding binds[OI_VK_MAX_BINDINGS];
    VkDescriptorSetLayoutCreateInfo dslci;
    VkPushConstantRange push;
    VkPipelineLayoutCreateInfo plci;
    VkResult r;
    int n, b;
    for (b = 0; b < OI_VK_MAX_BINDINGS; b++) {
        memset(&binds[b], 0, sizeof binds[b]);
        binds[b].binding = (uint32_t)b;
        binds[b].descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
        binds[b].descriptorCount = 1;
        binds[b].stageFlags = VK_SHADER_STAGE_COMPUTE_BIT;
    }
    memset(&push, 0, sizeof push);
    push.stageFlags = VK_SHADER_STAGE_COMPUTE_BIT;
    push.size = 4 * OI_VK_MAX_PUSH;
    if (push.size > vk_limits.maxPushConstantsSize) push.size = vk_limits.maxPushConstantsSize;
    for (n = 1; n <= OI_VK_MAX_BINDINGS; n++) {
        memset(&dslci, 0, sizeof dslci);
        dslci.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO;
        dslci.bindingCount = (uint32_t)n;
        dslci.pBindings = binds;
        if ((r = vkCreateDescriptorSetLayout(vk_device, &dslci, NULL, &vk_set_layouts[n])) != VK_SUCCESS)
            return fail("vkCreateDescriptorSetLayout", r);
        memset(&plci, 0, sizeof plci);
        plci.sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO;
        plci.setLayoutCount = 1;
        plci.pSetLayouts = &vk_set_layouts[n];
        plci.pushConstantRangeCount = 1;
        plci.pPushConstantRanges = &push;
        if ((r = vkCreatePipelineLayout(vk_device, &plci, NULL, &vk_layouts[n])) != VK_SUCCESS)
            return fail("vkCreatePipelineLayout", r);
    }
    return OI_OK;
}

int oi_vk_init(size_t arena_bytes, uint32_t align, unsigned char **mapped, int n_pipelines,
               int n_dispatches, uint32_t needs) {
    VkApplicationInfo app;
    VkInstanceCreateInfo ici;
    VkPhysicalDevice devs[16];
    uint32_t n_devs = 16;
    VkPhysicalDeviceProperties props;
    VkDescriptorPoolSize ps;
    VkDescriptorPoolCreateInfo dpci;
    VkCommandPoolCreateInfo cpci;
    VkCommandBufferAllocateInfo cbai;
    VkFenceCreateInfo fci;
    VkResult r;
    int rc;
    size_t size = arena_bytes ? arena_bytes : 256;

    vk_submits = vk_dispatches = vk_fallbacks = 0;
    vk_recording = vk_recorded = 0;
    memset(&app, 0, sizeof app);
    app.sType = VK_STRUCTURE_TYPE_APPLICATION_INFO;
    app.pApplicationName = "openinfer-emitted";
    app.apiVersion = VK_API_VERSION_1_1; /* the shaders are SPIR-V 1.3 (glslc --target-env=vulkan1.1) */
    memset(&ici, 0, sizeof ici);
    ici.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO;
    ici.pApplicationInfo = &app;
    if ((r = vkCreateInstance(&ici, NULL, &vk_instance)) != VK_SUCCESS) return fail("vkCreateInstance", r);
    if ((r = vkEnumeratePhysicalDevices(vk_instance, &n_devs, devs)) != VK_SUCCESS && r != VK_INCOMPLETE)
        return fail("vkEnumeratePhysicalDevices", r);
    if (n_devs == 0) { oi_set_error("Vulkan: no physical device"); return OI_ERR_STATE; }
    vk_phys = pick_device(devs, n_devs);
    if (vk_phys == VK_NULL_HANDLE) {
        oi_set_error("Vulkan: OI_VK_DEVICE=%s is not a device index (0..%u)", getenv("OI_VK_DEVICE"), n_devs - 1);
        return OI_ERR_ARGUMENT;
    }
    vkGetPhysicalDeviceProperties(vk_phys, &props);
    memcpy(vk_name, props.deviceName, sizeof vk_name);
    vk_limits = props.limits;
    if (props.apiVersion < VK_API_VERSION_1_1) {
        oi_set_error("Vulkan: device %s supports Vulkan 1.0 only; the shaders need 1.1", vk_name);
        return OI_ERR_STATE;
    }
    if (align == 0 || vk_limits.minStorageBufferOffsetAlignment == 0 ||
        align % vk_limits.minStorageBufferOffsetAlignment != 0) {
        oi_set_error("Vulkan: device %s needs storage buffer offsets aligned to %llu bytes; the program was "
                     "synthesized with %u", vk_name, (unsigned long long)vk_limits.minStorageBufferOffsetAlignment, align);
        return OI_ERR_STATE;
    }
    if ((rc = create_device(needs)) != OI_OK) return rc;
    if ((rc = create_arena(size, mapped)) != OI_OK) return rc;
    if ((rc = create_layouts()) != OI_OK) return rc;

    ps.type = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
    ps.descriptorCount = (uint32_t)(n_dispatches > 0 ? n_dispatches : 1) * OI_VK_MAX_BINDINGS;
    memset(&dpci, 0, sizeof dpci);
    dpci.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO;
    dpci.maxSets = (uint32_t)(n_dispatches > 0 ? n_dispatches : 1);
    dpci.poolSizeCount = 1;
    dpci.pPoolSizes = &ps;
    if ((r = vkCreateDescriptorPool(vk_device, &dpci, NULL, &vk_pool)) != VK_SUCCESS) return fail("vkCreateDescriptorPool", r);
    memset(&cpci, 0, sizeof cpci);
    cpci.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO;
    cpci.flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT;
    cpci.queueFamilyIndex = vk_family;
    if ((r = vkCreateCommandPool(vk_device, &cpci, NULL, &vk_cmd_pool)) != VK_SUCCESS) return fail("vkCreateCommandPool", r);
    memset(&cbai, 0, sizeof cbai);
    cbai.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO;
    cbai.commandPool = vk_cmd_pool;
    cbai.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
    cbai.commandBufferCount = 1;
    if ((r = vkAllocateCommandBuffers(vk_device, &cbai, &vk_cmd)) != VK_SUCCESS) return fail("vkAllocateCommandBuffers", r);
    memset(&fci, 0, sizeof fci);
    fci.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO;
    if ((r = vkCreateFence(vk_device, &fci, NULL, &vk_fence)) != VK_SUCCESS) return fail("vkCreateFence", r);
    vk_pipelines = (VkPipeline *)calloc(n_pipelines > 0 ? (size_t)n_pipelines : 1, sizeof *vk_pipelines);
    vk_pipeline_bindings = (int *)calloc(n_pipelines > 0 ? (size_t)n_pipelines : 1, sizeof *vk_pipeline_bindings);
    vk_disps = (oi_vk_disp *)calloc(n_dispatches > 0 ? (size_t)n_dispatches : 1, sizeof *vk_disps);
    if (!vk_pipelines || !vk_pipeline_bindings || !vk_disps) { oi_set_error("out of memory"); return OI_ERR_NOMEM; }
    vk_n_pipelines = n_pipelines;
    vk_n_disps = n_dispatches;
    return OI_OK;
}

int oi_vk_pipeline(int id, const uint32_t *spirv, size_t spirv_bytes, int n_bindings) {
    VkShaderModuleCreateInfo smci;
    VkShaderModule module;
    VkComputePipelineCreateInfo cpi;
    VkResult r;
    if (id < 0 || id >= vk_n_pipelines) { oi_set_error("Vulkan: pipeline id %d out of range", id); return OI_ERR_ARGUMENT; }
    if (n_bindings < 1 || n_bindings > OI_VK_MAX_BINDINGS) {
        oi_set_error("Vulkan: pipeline %d binds %d buffers (1..%d)", id, n_bindings, OI_VK_MAX_BINDINGS);
        return OI_ERR_ARGUMENT;
    }
    memset(&smci, 0, sizeof smci);
    smci.sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO;
    smci.codeSize = spirv_bytes;
    smci.pCode = spirv;
    if ((r = vkCreateShaderModule(vk_device, &smci, NULL, &module)) != VK_SUCCESS) return fail("vkCreateShaderModule", r);
    memset(&cpi, 0, sizeof cpi);
    cpi.sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO;
    cpi.stage.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO;
    cpi.stage.stage = VK_SHADER_STAGE_COMPUTE_BIT;
    cpi.stage.module = module;
    cpi.stage.pName = "main";
    cpi.layout = vk_layouts[n_bindings];
    r = vkCreateComputePipelines(vk_device, VK_NULL_HANDLE, 1, &cpi, NULL, &vk_pipelines[id]);
    vkDestroyShaderModule(vk_device, module, NULL);
    if (r != VK_SUCCESS) return fail("vkCreateComputePipelines", r);
    vk_pipeline_bindings[id] = n_bindings;
    return OI_OK;
}

/* OI_OK when dispatch d's grid fits the device, else the error naming both. */
static int check_grid(int d, uint32_t gx, uint32_t gy, uint32_t gz) {
    if (gx > vk_limits.maxComputeWorkGroupCount[0] || gy > vk_limits.maxComputeWorkGroupCount[1] ||
        gz > vk_limits.maxComputeWorkGroupCount[2]) {
        oi_set_error("Vulkan: dispatch %d: grid %ux%ux%u exceeds the device's maxComputeWorkGroupCount", d, gx, gy, gz);
        return OI_ERR_ARGUMENT;
    }
    return OI_OK;
}

/* Store dispatch d's pipeline, push words and grid (checked by the caller). */
static int set_launch(int d, int pipeline, const uint32_t *push, uint32_t push_words, uint32_t gx, uint32_t gy,
                      uint32_t gz) {
    oi_vk_disp *x = &vk_disps[d];
    x->pipeline = pipeline;
    memcpy(x->push, push, 4 * (size_t)push_words);
    x->push_words = push_words;
    x->grid[0] = gx;
    x->grid[1] = gy;
    x->grid[2] = gz;
    return OI_OK;
}

int oi_vk_prepare(int d, int pipeline, int n_bindings, const size_t *offsets, const size_t *ranges,
                  const uint32_t *push, uint32_t push_words, uint32_t gx, uint32_t gy, uint32_t gz) {
    VkDescriptorSetAllocateInfo dsai;
    VkDescriptorBufferInfo dbi[OI_VK_MAX_BINDINGS];
    VkWriteDescriptorSet wds[OI_VK_MAX_BINDINGS];
    oi_vk_disp *x;
    VkResult r;
    int b;
    if (d < 0 || d >= vk_n_disps || pipeline < 0 || pipeline >= vk_n_pipelines ||
        vk_pipeline_bindings[pipeline] != n_bindings || push_words > OI_VK_MAX_PUSH ||
        4 * push_words > vk_limits.maxPushConstantsSize) {
        oi_set_error("Vulkan: dispatch %d: bad pipeline %d, binding count %d or %u push words", d, pipeline,
                     n_bindings, push_words);
        return OI_ERR_ARGUMENT;
    }
    if (check_grid(d, gx, gy, gz) != OI_OK) return OI_ERR_ARGUMENT;
    x = &vk_disps[d];
    memset(&dsai, 0, sizeof dsai);
    dsai.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO;
    dsai.descriptorPool = vk_pool;
    dsai.descriptorSetCount = 1;
    dsai.pSetLayouts = &vk_set_layouts[n_bindings];
    if ((r = vkAllocateDescriptorSets(vk_device, &dsai, &x->set)) != VK_SUCCESS) return fail("vkAllocateDescriptorSets", r);
    for (b = 0; b < n_bindings; b++) {
        if (ranges[b] > vk_limits.maxStorageBufferRange) {
            oi_set_error("Vulkan: dispatch %d binds %llu bytes; the device's maxStorageBufferRange is %u", d,
                         (unsigned long long)ranges[b], vk_limits.maxStorageBufferRange);
            return OI_ERR_ARGUMENT;
        }
        dbi[b].buffer = vk_buffer;
        dbi[b].offset = offsets[b];
        dbi[b].range = ranges[b];
        memset(&wds[b], 0, sizeof wds[b]);
        wds[b].sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET;
        wds[b].dstSet = x->set;
        wds[b].dstBinding = (uint32_t)b;
        wds[b].descriptorCount = 1;
        wds[b].descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
        wds[b].pBufferInfo = &dbi[b];
    }
    vkUpdateDescriptorSets(vk_device, (uint32_t)n_bindings, wds, 0, NULL);
    return set_launch(d, pipeline, push, push_words, gx, gy, gz);
}

int oi_vk_variant(int d, int like, int pipeline, const uint32_t *push, uint32_t push_words, uint32_t gx,
                  uint32_t gy, uint32_t gz) {
    if (d < 0 || d >= vk_n_disps || like < 0 || like >= vk_n_disps || !vk_disps[like].set ||
        pipeline < 0 || pipeline >= vk_n_pipelines ||
        vk_pipeline_bindings[pipeline] != vk_pipeline_bindings[vk_disps[like].pipeline] ||
        push_words > OI_VK_MAX_PUSH || 4 * push_words > vk_limits.maxPushConstantsSize) {
        oi_set_error("Vulkan: variant %d of dispatch %d: bad pipeline %d or %u push words", d, like, pipeline, push_words);
        return OI_ERR_ARGUMENT;
    }
    if (check_grid(d, gx, gy, gz) != OI_OK) return OI_ERR_ARGUMENT;
    vk_disps[d].set = vk_disps[like].set;
    return set_launch(d, pipeline, push, push_words, gx, gy, gz);
}

static void barrier(VkPipelineStageFlags dst_stage, VkAccessFlags dst_access) {
    VkMemoryBarrier mb;
    memset(&mb, 0, sizeof mb);
    mb.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER;
    mb.srcAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT;
    mb.dstAccessMask = dst_access;
    vkCmdPipelineBarrier(vk_cmd, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, dst_stage, 0, 1, &mb, 0, NULL, 0, NULL);
}

int oi_vk_run(int d) {
    VkCommandBufferBeginInfo begin;
    oi_vk_disp *x;
    VkResult r;
    if (d < 0 || d >= vk_n_disps || !vk_disps[d].set) { oi_set_error("Vulkan: dispatch %d not prepared", d); return OI_ERR_STATE; }
    x = &vk_disps[d];
    if (!vk_recording) {
        memset(&begin, 0, sizeof begin);
        begin.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO;
        begin.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
        if ((r = vkResetCommandBuffer(vk_cmd, 0)) != VK_SUCCESS) return fail("vkResetCommandBuffer", r);
        if ((r = vkBeginCommandBuffer(vk_cmd, &begin)) != VK_SUCCESS) return fail("vkBeginCommandBuffer", r);
        vk_recording = 1;
        vk_recorded = 0;
    } else if (vk_recorded) {
        barrier(VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT);
    }
    vkCmdBindPipeline(vk_cmd, VK_PIPELINE_BIND_POINT_COMPUTE, vk_pipelines[x->pipeline]);
    vkCmdBindDescriptorSets(vk_cmd, VK_PIPELINE_BIND_POINT_COMPUTE, vk_layouts[vk_pipeline_bindings[x->pipeline]], 0, 1,
                            &x->set, 0, NULL);
    if (x->push_words)
        vkCmdPushConstants(vk_cmd, vk_layouts[vk_pipeline_bindings[x->pipeline]], VK_SHADER_STAGE_COMPUTE_BIT, 0,
                           4 * x->push_words, x->push);
    vkCmdDispatch(vk_cmd, x->grid[0], x->grid[1], x->grid[2]);
    vk_recorded++;
    vk_dispatches++;
    return OI_OK;
}

int oi_vk_sync(void) {
    VkSubmitInfo submit;
    VkResult r;
    if (!vk_recording) return OI_OK;
    vk_recording = 0;
    barrier(VK_PIPELINE_STAGE_HOST_BIT, VK_ACCESS_HOST_READ_BIT | VK_ACCESS_HOST_WRITE_BIT);
    if ((r = vkEndCommandBuffer(vk_cmd)) != VK_SUCCESS) return fail("vkEndCommandBuffer", r);
    memset(&submit, 0, sizeof submit);
    submit.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO;
    submit.commandBufferCount = 1;
    submit.pCommandBuffers = &vk_cmd;
    if ((r = vkResetFences(vk_device, 1, &vk_fence)) != VK_SUCCESS) return fail("vkResetFences", r);
    if ((r = vkQueueSubmit(vk_queue, 1, &submit, vk_fence)) != VK_SUCCESS) return fail("vkQueueSubmit", r);
    vk_submits++;
    if ((r = vkWaitForFences(vk_device, 1, &vk_fence, VK_TRUE, UINT64_MAX)) != VK_SUCCESS) return fail("vkWaitForFences", r);
    return OI_OK;
}

void oi_vk_discard(void) {
    if (!vk_recording) return;
    vk_recording = 0;
    vkEndCommandBuffer(vk_cmd);
    vkResetCommandBuffer(vk_cmd, 0);
}

void oi_vk_free(void) {
    int i;
    if (vk_device) {
        vkDeviceWaitIdle(vk_device);
        for (i = 0; i < vk_n_pipelines; i++)
            if (vk_pipelines && vk_pipelines[i]) vkDestroyPipeline(vk_device, vk_pipelines[i], NULL);
        if (vk_fence) vkDestroyFence(vk_device, vk_fence, NULL);
        if (vk_cmd_pool) vkDestroyCommandPool(vk_device, vk_cmd_pool, NULL);
        if (vk_pool) vkDestroyDescriptorPool(vk_device, vk_pool, NULL);
        for (i = 1; i <= OI_VK_MAX_BINDINGS; i++) {
            if (vk_layouts[i]) vkDestroyPipelineLayout(vk_device, vk_layouts[i], NULL);
            if (vk_set_layouts[i]) vkDestroyDescriptorSetLayout(vk_device, vk_set_layouts[i], NULL);
            vk_layouts[i] = VK_NULL_HANDLE;
            vk_set_layouts[i] = VK_NULL_HANDLE;
        }
        if (vk_memory) {
            vkUnmapMemory(vk_device, vk_memory);
            vkFreeMemory(vk_device, vk_memory, NULL);
        }
        if (vk_buffer) vkDestroyBuffer(vk_device, vk_buffer, NULL);
        vkDestroyDevice(vk_device, NULL);
    }
    if (vk_instance) vkDestroyInstance(vk_instance, NULL);
    free(vk_pipelines);
    free(vk_pipeline_bindings);
    free(vk_disps);
    vk_pipelines = NULL;
    vk_pipeline_bindings = NULL;
    vk_disps = NULL;
    vk_n_pipelines = vk_n_disps = 0;
    vk_fence = VK_NULL_HANDLE;
    vk_cmd_pool = VK_NULL_HANDLE;
    vk_pool = VK_NULL_HANDLE;
    vk_memory = VK_NULL_HANDLE;
    vk_buffer = VK_NULL_HANDLE;
    vk_device = VK_NULL_HANDLE;
    vk_instance = VK_NULL_HANDLE;
    vk_recording = vk_recorded = 0;
}
