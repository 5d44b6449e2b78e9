/* OpenInfer-JAX emitted Vulkan host runtime (see oi_vulkan.h). Synchronous by design: each
 * dispatch waits for the queue, so host-side nodes (caches, branches, loops) see its results
 * in the coherent arena right away, and node order is kept exactly. */
#include "oi_vulkan.h"

#include <stdlib.h>
#include <string.h>
#include <vulkan/vulkan.h>

#define OI_VK_PUSH_BYTES 128

uint32_t oi_vk_groups(int64_t n) {
    int64_t g = (n + 63) / 64;
    return (uint32_t)(g > 65535 ? 65535 : g);
}

int oi_vk_suffix(const oi_tensor *in, const oi_tensor *out) {
    int lead = 0, d;
    while (lead < in->ndim && in->dims[lead] == 1) lead++;
    if (in->ndim - lead > out->ndim) return 0;
    for (d = lead; d < in->ndim; d++)
        if (in->dims[d] != out->dims[out->ndim - (in->ndim - d)]) return 0;
    return 1;
}

static VkInstance vk_instance;
static VkPhysicalDevice vk_phys;
static VkDevice vk_device;
static VkQueue vk_queue;
static uint32_t vk_family;
static VkBuffer vk_buffer;
static VkDeviceMemory vk_memory;
static VkDescriptorSetLayout vk_set_layout;
static VkPipelineLayout vk_layout;
static VkDescriptorPool vk_pool;
static VkDescriptorSet vk_set;
static VkCommandPool vk_cmd_pool;
static VkCommandBuffer vk_cmd;
static VkFence vk_fence;
static VkPipeline *vk_pipelines;
static int vk_n_pipelines;
static char vk_name[VK_MAX_PHYSICAL_DEVICE_NAME_SIZE];

static int fail(const char *what, VkResult r) {
    oi_set_error("Vulkan: %s failed (VkResult %d)", what, (int)r);
    return OI_ERR_STATE;
}

const char *oi_vk_device_name(void) { return vk_name; }

int oi_vk_init(size_t arena_bytes, unsigned char **mapped, int n_pipelines) {
    VkApplicationInfo app;
    VkInstanceCreateInfo ici;
    VkPhysicalDevice devs[16];
    uint32_t n_devs = 16, n_fam = 0, f, t;
    VkQueueFamilyProperties fams[32];
    VkDeviceQueueCreateInfo qci;
    VkDeviceCreateInfo dci;
    VkBufferCreateInfo bci;
    VkMemoryRequirements req;
    VkPhysicalDeviceMemoryProperties mp;
    VkMemoryAllocateInfo mai;
    VkDescriptorSetLayoutBinding bind;
    VkDescriptorSetLayoutCreateInfo dslci;
    VkPushConstantRange push;
    VkPipelineLayoutCreateInfo plci;
    VkDescriptorPoolSize ps;
    VkDescriptorPoolCreateInfo dpci;
    VkDescriptorSetAllocateInfo dsai;
    VkDescriptorBufferInfo dbi;
    VkWriteDescriptorSet wds;
    VkCommandPoolCreateInfo cpci;
    VkCommandBufferAllocateInfo cbai;
    VkFenceCreateInfo fci;
    VkPhysicalDeviceProperties props;
    float prio = 1.0f;
    void *ptr;
    VkResult r;
    size_t size = arena_bytes ? arena_bytes : 64;

    memset(&app, 0, sizeof app);
    app.sType = VK_STRUCTURE_TYPE_APPLICATION_INFO;
    app.pApplicationName = "openinfer-emitted";
    app.apiVersion = VK_API_VERSION_1_0;
    memset(&ici, 0, sizeof ici);
    ici.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO;
    ici.pApplicationInfo = &app;
    if ((r = vkCreateInstance(&ici, NULL, &vk_instance)) != VK_SUCCESS) return fail("vkCreateInstance", r);
    if ((r = vkEnumeratePhysicalDevices(vk_instance, &n_devs, devs)) != VK_SUCCESS && r != VK_INCOMPLETE)
        return fail("vkEnumeratePhysicalDevices", r);
    if (n_devs == 0) { oi_set_error("Vulkan: no physical device"); return OI_ERR_STATE; }
    vk_phys = devs[0];
    vkGetPhysicalDeviceProperties(vk_phys, &props);
    memcpy(vk_name, props.deviceName, sizeof vk_name);
    vkGetPhysicalDeviceQueueFamilyProperties(vk_phys, &n_fam, NULL);
    if (n_fam > 32) n_fam = 32;
    vkGetPhysicalDeviceQueueFamilyProperties(vk_phys, &n_fam, fams);
    for (f = 0; f < n_fam; f++)
        if (fams[f].queueFlags & VK_QUEUE_COMPUTE_BIT) break;
    if (f == n_fam) { oi_set_error("Vulkan: no compute queue"); return OI_ERR_STATE; }
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
    if ((r = vkCreateDevice(vk_phys, &dci, NULL, &vk_device)) != VK_SUCCESS) return fail("vkCreateDevice", r);
    vkGetDeviceQueue(vk_device, vk_family, 0, &vk_queue);

    /* the arena: one storage buffer in host-visible, coherent memory */
    memset(&bci, 0, sizeof bci);
    bci.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO;
    bci.size = size;
    bci.usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT;
    bci.sharingMode = VK_SHARING_MODE_EXCLUSIVE;
    if ((r = vkCreateBuffer(vk_device, &bci, NULL, &vk_buffer)) != VK_SUCCESS) return fail("vkCreateBuffer", r);
    vkGetBufferMemoryRequirements(vk_device, vk_buffer, &req);
    vkGetPhysicalDeviceMemoryProperties(vk_phys, &mp);
    for (t = 0; t < mp.memoryTypeCount; t++) {
        VkMemoryPropertyFlags want = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
        if ((req.memoryTypeBits & (1u << t)) && (mp.memoryTypes[t].propertyFlags & want) == want) break;
    }
    if (t == mp.memoryTypeCount) { oi_set_error("Vulkan: no host-visible coherent memory"); return OI_ERR_STATE; }
    memset(&mai, 0, sizeof mai);
    mai.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO;
    mai.allocationSize = req.size;
    mai.memoryTypeIndex = t;
    if ((r = vkAllocateMemory(vk_device, &mai, NULL, &vk_memory)) != VK_SUCCESS) return fail("vkAllocateMemory", r);
    if ((r = vkBindBufferMemory(vk_device, vk_buffer, vk_memory, 0)) != VK_SUCCESS) return fail("vkBindBufferMemory", r);
    if ((r = vkMapMemory(vk_device, vk_memory, 0, VK_WHOLE_SIZE, 0, &ptr)) != VK_SUCCESS) return fail("vkMapMemory", r);
    memset(ptr, 0, size);
    *mapped = (unsigned char *)ptr;

    /* one descriptor set (binding 0 = the whole arena) shared by every pipeline */
    memset(&bind, 0, sizeof bind);
    bind.binding = 0;
    bind.descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
    bind.descriptorCount = 1;
    bind.stageFlags = VK_SHADER_STAGE_COMPUTE_BIT;
    memset(&dslci, 0, sizeof dslci);
    dslci.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO;
    dslci.bindingCount = 1;
    dslci.pBindings = &bind;
    if ((r = vkCreateDescriptorSetLayout(vk_device, &dslci, NULL, &vk_set_layout)) != VK_SUCCESS)
        return fail("vkCreateDescriptorSetLayout", r);
    memset(&push, 0, sizeof push);
    push.stageFlags = VK_SHADER_STAGE_COMPUTE_BIT;
    push.size = OI_VK_PUSH_BYTES;
    memset(&plci, 0, sizeof plci);
    plci.sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO;
    plci.setLayoutCount = 1;
    plci.pSetLayouts = &vk_set_layout;
    plci.pushConstantRangeCount = 1;
    plci.pPushConstantRanges = &push;
    if ((r = vkCreatePipelineLayout(vk_device, &plci, NULL, &vk_layout)) != VK_SUCCESS) return fail("vkCreatePipelineLayout", r);
    ps.type = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
    ps.descriptorCount = 1;
    memset(&dpci, 0, sizeof dpci);
    dpci.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO;
    dpci.maxSets = 1;
    dpci.poolSizeCount = 1;
    dpci.pPoolSizes = &ps;
    if ((r = vkCreateDescriptorPool(vk_device, &dpci, NULL, &vk_pool)) != VK_SUCCESS) return fail("vkCreateDescriptorPool", r);
    memset(&dsai, 0, sizeof dsai);
    dsai.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO;
    dsai.descriptorPool = vk_pool;
    dsai.descriptorSetCount = 1;
    dsai.pSetLayouts = &vk_set_layout;
    if ((r = vkAllocateDescriptorSets(vk_device, &dsai, &vk_set)) != VK_SUCCESS) return fail("vkAllocateDescriptorSets", r);
    dbi.buffer = vk_buffer;
    dbi.offset = 0;
    dbi.range = VK_WHOLE_SIZE;
    memset(&wds, 0, sizeof wds);
    wds.sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET;
    wds.dstSet = vk_set;
    wds.dstBinding = 0;
    wds.descriptorCount = 1;
    wds.descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
    wds.pBufferInfo = &dbi;
    vkUpdateDescriptorSets(vk_device, 1, &wds, 0, NULL);

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
    if (!vk_pipelines) { oi_set_error("out of memory"); return OI_ERR_NOMEM; }
    vk_n_pipelines = n_pipelines;
    return OI_OK;
}

int oi_vk_pipeline(int id, const uint32_t *spirv, size_t spirv_bytes) {
    VkShaderModuleCreateInfo smci;
    VkShaderModule module;
    VkComputePipelineCreateInfo cpi;
    VkResult r;
    if (id < 0 || id >= vk_n_pipelines) { oi_set_error("Vulkan: pipeline id %d out of range", id); return OI_ERR_ARGUMENT; }
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
    cpi.layout = vk_layout;
    r = vkCreateComputePipelines(vk_device, VK_NULL_HANDLE, 1, &cpi, NULL, &vk_pipelines[id]);
    vkDestroyShaderModule(vk_device, module, NULL);
    if (r != VK_SUCCESS) return fail("vkCreateComputePipelines", r);
    return OI_OK;
}

int oi_vk_dispatch(int id, const void *push, uint32_t push_bytes, uint32_t groups) {
    VkCommandBufferBeginInfo begin;
    VkSubmitInfo submit;
    VkResult r;
    if (groups == 0) return OI_OK;
    memset(&begin, 0, sizeof begin);
    begin.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO;
    begin.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
    if ((r = vkResetCommandBuffer(vk_cmd, 0)) != VK_SUCCESS) return fail("vkResetCommandBuffer", r);
    if ((r = vkBeginCommandBuffer(vk_cmd, &begin)) != VK_SUCCESS) return fail("vkBeginCommandBuffer", r);
    vkCmdBindPipeline(vk_cmd, VK_PIPELINE_BIND_POINT_COMPUTE, vk_pipelines[id]);
    vkCmdBindDescriptorSets(vk_cmd, VK_PIPELINE_BIND_POINT_COMPUTE, vk_layout, 0, 1, &vk_set, 0, NULL);
    vkCmdPushConstants(vk_cmd, vk_layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, push_bytes, push);
    vkCmdDispatch(vk_cmd, groups, 1, 1);
    if ((r = vkEndCommandBuffer(vk_cmd)) != VK_SUCCESS) return fail("vkEndCommandBuffer", r);
    memset(&submit, 0, sizeof submit);
    submit.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO;
    submit.commandBufferCount = 1;
    submit.pCommandBuffers = &vk_cmd;
    if ((r = vkResetFences(vk_device, 1, &vk_fence)) != VK_SUCCESS) return fail("vkResetFences", r);
    if ((r = vkQueueSubmit(vk_queue, 1, &submit, vk_fence)) != VK_SUCCESS) return fail("vkQueueSubmit", r);
    if ((r = vkWaitForFences(vk_device, 1, &vk_fence, VK_TRUE, UINT64_MAX)) != VK_SUCCESS) return fail("vkWaitForFences", r);
    return OI_OK;
}

void oi_vk_free(void) {
    int i;
    if (!vk_device) return;
    vkDeviceWaitIdle(vk_device);
    for (i = 0; i < vk_n_pipelines; i++)
        if (vk_pipelines[i]) vkDestroyPipeline(vk_device, vk_pipelines[i], NULL);
    free(vk_pipelines);
    vk_pipelines = NULL;
    vk_n_pipelines = 0;
    vkDestroyFence(vk_device, vk_fence, NULL);
    vkDestroyCommandPool(vk_device, vk_cmd_pool, NULL);
    vkDestroyDescriptorPool(vk_device, vk_pool, NULL);
    vkDestroyPipelineLayout(vk_device, vk_layout, NULL);
    vkDestroyDescriptorSetLayout(vk_device, vk_set_layout, NULL);
    vkUnmapMemory(vk_device, vk_memory);
    vkFreeMemory(vk_device, vk_memory, NULL);
    vkDestroyBuffer(vk_device, vk_buffer, NULL);
    vkDestroyDevice(vk_device, NULL);
    vkDestroyInstance(vk_instance, NULL);
    vk_device = VK_NULL_HANDLE;
    vk_instance = VK_NULL_HANDLE;
}
