// SPDX-License-Identifier: GPL-2.0
/*
 * gdrsim: imitation of nvidia-peermem (NVIDIA/open-gpu-kernel-modules,
 * kernel-open/nvidia-peermem/nvidia-peermem.c), the peer-memory client that
 * lets MLNX_OFED's ib_core register GPU memory.
 *
 * Same clients, callbacks, names and calls as the real module (read from
 * open-gpu-kernel-modules 560.28.03+, where persistent_api_support appeared,
 * and 535.x/550.x, where both clients are always registered):
 *   both clients: acquire nv_mem_acquire, which makes a trial pin to learn
 *     whether the range is GPU memory: nvidia_p2p_get_pages(0, 0, va, len, &pt,
 *     nv_mem_dummy_callback, ctx) then nvidia_p2p_put_pages(0, 0, va, pt);
 *     returns 1 (mine) or 0.  There is no nv_mem_acquire_nc in any version.
 *   persistent_api_support=1 (default since 560.28.03): one client "nv_mem"
 *     get_pages nv_mem_get_pages_nc -> nvidia_p2p_get_pages_persistent
 *     put_pages nv_mem_put_pages_nc -> nvidia_p2p_put_pages_persistent
 *   persistent_api_support=0 (legacy; older versions always): clients "nv_mem"
 *     then "nv_mem_nc"
 *     "nv_mem": get_pages nv_mem_get_pages -> nvidia_p2p_get_pages(..,
 *               nv_get_p2p_free_callback, ctx); put_pages nv_mem_put_pages ->
 *               nvidia_p2p_put_pages.  Needs invalidation support: ib_core only
 *               offers it to registrations made with IB_PEER_MEM_INVAL_SUPP
 *               (mlx5 always passes it).
 *     "nv_mem_nc": the persistent client above under another name (before
 *               the persistent API, nv_mem_get_pages_nc called
 *               nvidia_p2p_get_pages with a NULL callback).
 *   shared: nv_dma_map -> nvidia_p2p_dma_map_pages, nv_dma_unmap ->
 *           nvidia_p2p_dma_unmap_pages, nv_mem_get_page_size, nv_mem_release.
 *   invalidation: GPU memory freed (munmap of /dev/nvidia0) under a live legacy
 *     registration -> nv_get_p2p_free_callback(ctx) -> ib_core's invalidate
 *     (ib_invalidate_peer_memory) -> nvidia_p2p_free_dma_mapping +
 *     nvidia_p2p_free_page_table.
 *
 * persistent_api_support can be changed at run time through
 * /sys/module/gdrsim/parameters/persistent_api_support (the clients are
 * re-registered; refused with EBUSY while peer registrations are live).  The
 * real module only reads it at load time.
 */
#include <linux/module.h>
#include <linux/moduleparam.h>
#include <linux/slab.h>
#include <linux/pci.h>
#include <linux/scatterlist.h>
#include <linux/sched.h>

#include "gdrsim.h"

#define DRV_NAME    "nv_mem"
#define DRV_VERSION NV_VERSION_STRING

#define peer_err(FMT, ARGS...) \
	printk(KERN_ERR "nvidia-peermem %s:%d ERROR " FMT, __func__, __LINE__, ##ARGS)

enum {
	NV_MEM_PEERDIRECT_SUPPORT_DEFAULT = 0,
	NV_MEM_PEERDIRECT_SUPPORT_LEGACY = 1,
};
static int peerdirect_support = NV_MEM_PEERDIRECT_SUPPORT_DEFAULT;
module_param(peerdirect_support, int, 0444);
MODULE_PARM_DESC(peerdirect_support,
		 "Set level of support for Peer-direct, 0 [default] or 1 [legacy, for example MLNX_OFED 4.9 LTS]");

enum {
	NV_MEM_PERSISTENT_API_SUPPORT_LEGACY = 0,
	NV_MEM_PERSISTENT_API_SUPPORT_DEFAULT = 1,
};
static int persistent_api_support = NV_MEM_PERSISTENT_API_SUPPORT_DEFAULT;

static invalidate_peer_memory mem_invalidate_callback;
static void *reg_handle;
static void *reg_handle_nc;
static DEFINE_MUTEX(nv_mem_reg_lock);

#define NV_MEM_CONTEXT_MAGIC ((u64)0xF1F4F1D0FEF0DAD0ULL)

struct nv_mem_context {
	u64 pad1;
	struct nvidia_p2p_page_table *page_table;
	struct nvidia_p2p_dma_mapping *dma_mapping;
	u64 core_context;
	u64 page_virt_start;
	u64 page_virt_end;
	size_t mapped_size;
	unsigned long npages;
	unsigned long page_size;
	struct task_struct *callback_task;
	int sg_allocated;
	struct sg_table sg_head;
	u64 pad2;
};

static bool nv_mem_context_ok(struct nv_mem_context *mc)
{
	return mc && READ_ONCE(mc->pad1) == NV_MEM_CONTEXT_MAGIC &&
	       READ_ONCE(mc->pad2) == NV_MEM_CONTEXT_MAGIC;
}

/* nvidia.ko calls this when GPU memory under a legacy mapping is freed */
static GDRSIM_HOOK void nv_get_p2p_free_callback(void *data)
{
	struct nv_mem_context *nv_mem_context = data;
	struct nvidia_p2p_page_table *page_table;
	struct nvidia_p2p_dma_mapping *dma_mapping;
	int ret;

	__module_get(THIS_MODULE);
	if (!nv_mem_context_ok(nv_mem_context)) {
		peer_err("detected invalid context, skipping further processing\n");
		goto out;
	}
	page_table = nv_mem_context->page_table;
	if (!page_table) {
		peer_err("nv_get_p2p_free_callback -- invalid page_table\n");
		goto out;
	}
	dma_mapping = nv_mem_context->dma_mapping;
	if (!dma_mapping) {
		peer_err("nv_get_p2p_free_callback -- invalid dma_mapping\n");
		goto out;
	}

	nv_mem_context->callback_task = current;
	(*mem_invalidate_callback)(reg_handle, nv_mem_context->core_context);
	nv_mem_context->callback_task = NULL;

	ret = nvidia_p2p_free_dma_mapping(dma_mapping);
	if (ret)
		peer_err("error %d while calling nvidia_p2p_free_dma_mapping()\n", ret);
	ret = nvidia_p2p_free_page_table(page_table);
	if (ret)
		peer_err("error %d while calling nvidia_p2p_free_page_table()\n", ret);
out:
	module_put(THIS_MODULE);
}

/* free callback of the trial mapping made by nv_mem_acquire: no ib_core ticket yet */
static GDRSIM_HOOK void nv_mem_dummy_callback(void *data)
{
	struct nv_mem_context *nv_mem_context = data;
	int ret;

	__module_get(THIS_MODULE);
	ret = nvidia_p2p_free_page_table(nv_mem_context->page_table);
	if (ret)
		peer_err("nv_mem_dummy_callback -- error %d while calling nvidia_p2p_free_page_table()\n",
			 ret);
	module_put(THIS_MODULE);
}

static struct nv_mem_context *nv_mem_context_new(unsigned long addr, size_t size)
{
	struct nv_mem_context *c = kzalloc(sizeof(*c), GFP_KERNEL);

	if (!c)
		return NULL;
	c->pad1 = NV_MEM_CONTEXT_MAGIC;
	c->page_virt_start = addr & GPU_PAGE_MASK;
	c->page_virt_end = (addr + size + GPU_PAGE_SIZE - 1) & GPU_PAGE_MASK;
	c->mapped_size = c->page_virt_end - c->page_virt_start;
	c->pad2 = NV_MEM_CONTEXT_MAGIC;
	return c;
}

/* acquire return code: 1 mine, 0 not mine */
static GDRSIM_HOOK int nv_mem_acquire(unsigned long addr, size_t size, void *peer_mem_private_data,
				      char *peer_mem_name, void **client_context)
{
	struct nv_mem_context *nv_mem_context;
	int ret;

	nv_mem_context = nv_mem_context_new(addr, size);
	if (!nv_mem_context)
		return 0;
	ret = nvidia_p2p_get_pages(0, 0, nv_mem_context->page_virt_start,
				   nv_mem_context->mapped_size, &nv_mem_context->page_table,
				   nv_mem_dummy_callback, nv_mem_context);
	if (ret < 0)
		goto err;
	ret = nvidia_p2p_put_pages(0, 0, nv_mem_context->page_virt_start,
				   nv_mem_context->page_table);
	if (ret < 0) {
		peer_err("nv_mem_acquire -- error %d while calling nvidia_p2p_put_pages()\n", ret);
		goto err;
	}
	*client_context = nv_mem_context;
	__module_get(THIS_MODULE);
	return 1;
err:
	memset(nv_mem_context, 0, sizeof(*nv_mem_context));
	kfree(nv_mem_context);
	return 0;
}

static GDRSIM_HOOK int nv_dma_map(struct sg_table *sg_head, void *context,
				  struct device *dma_device, int dmasync, int *nmap)
{
	struct nv_mem_context *nv_mem_context = context;
	struct nvidia_p2p_page_table *page_table = nv_mem_context->page_table;
	struct nvidia_p2p_dma_mapping *dma_mapping;
	/* the simulated NIC is a platform device: this pointer is only passed on */
	struct pci_dev *pdev = dma_device ? to_pci_dev(dma_device) : NULL;
	struct scatterlist *sg;
	int i, ret;

	if (page_table->page_size != NVIDIA_P2P_PAGE_SIZE_64KB) {
		peer_err("nv_dma_map -- assumption of 64KB pages failed size_id=%u\n",
			 page_table->page_size);
		return -EINVAL;
	}
	if (!pdev) {
		peer_err("nv_dma_map -- invalid pci_dev\n");
		return -EINVAL;
	}
	ret = nvidia_p2p_dma_map_pages(pdev, page_table, &dma_mapping);
	if (ret) {
		peer_err("nv_dma_map -- error %d while calling nvidia_p2p_dma_map_pages()\n", ret);
		return ret;
	}
	nv_mem_context->npages = dma_mapping->entries;
	ret = sg_alloc_table(sg_head, dma_mapping->entries, GFP_KERNEL);
	if (ret) {
		nvidia_p2p_dma_unmap_pages(pdev, page_table, dma_mapping);
		return ret;
	}
	nv_mem_context->dma_mapping = dma_mapping;
	nv_mem_context->sg_allocated = 1;
	for_each_sg(sg_head->sgl, sg, nv_mem_context->npages, i) {
		sg_set_page(sg, NULL, nv_mem_context->page_size, 0);
		sg_dma_address(sg) = dma_mapping->dma_addresses[i];
		sg_dma_len(sg) = nv_mem_context->page_size;
	}
	nv_mem_context->sg_head = *sg_head;
	*nmap = nv_mem_context->npages;
	return 0;
}

static GDRSIM_HOOK int nv_dma_unmap(struct sg_table *sg_head, void *context,
				    struct device *dma_device)
{
	struct nv_mem_context *nv_mem_context = context;
	struct pci_dev *pdev = dma_device ? to_pci_dev(dma_device) : NULL;

	if (!nv_mem_context) {
		peer_err("nv_dma_unmap -- invalid nv_mem_context\n");
		return -EINVAL;
	}
	if (WARN_ON(memcmp(sg_head, &nv_mem_context->sg_head, sizeof(*sg_head))))
		return -EINVAL;
	if (nv_mem_context->callback_task == current)
		return 0;
	if (nv_mem_context->dma_mapping)
		nvidia_p2p_dma_unmap_pages(pdev, nv_mem_context->page_table,
					   nv_mem_context->dma_mapping);
	return 0;
}

static void nv_mem_put_pages_common(int nc, struct sg_table *sg_head, void *context)
{
	struct nv_mem_context *nv_mem_context = context;

	if (!nv_mem_context) {
		peer_err("nv_mem_put_pages -- invalid nv_mem_context\n");
		return;
	}
	if (WARN_ON(memcmp(sg_head, &nv_mem_context->sg_head, sizeof(*sg_head))))
		return;
	if (nv_mem_context->callback_task == current)
		return;
	if (nc)
		nvidia_p2p_put_pages_persistent(nv_mem_context->page_virt_start,
						nv_mem_context->page_table, 0);
	else
		nvidia_p2p_put_pages(0, 0, nv_mem_context->page_virt_start,
				     nv_mem_context->page_table);
}

static GDRSIM_HOOK void nv_mem_put_pages(struct sg_table *sg_head, void *context)
{
	nv_mem_put_pages_common(0, sg_head, context);
}

static GDRSIM_HOOK void nv_mem_put_pages_nc(struct sg_table *sg_head, void *context)
{
	nv_mem_put_pages_common(1, sg_head, context);
}

static GDRSIM_HOOK void nv_mem_release(void *context)
{
	struct nv_mem_context *nv_mem_context = context;

	if (nv_mem_context->sg_allocated) {
		sg_free_table(&nv_mem_context->sg_head);
		nv_mem_context->sg_allocated = 0;
	}
	memset(nv_mem_context, 0, sizeof(*nv_mem_context));
	kfree(nv_mem_context);
	module_put(THIS_MODULE);
}

static GDRSIM_HOOK int nv_mem_get_pages(unsigned long addr, size_t size, int write, int force,
					struct sg_table *sg_head, void *client_context,
					u64 core_context)
{
	struct nv_mem_context *nv_mem_context = client_context;
	int ret;

	if (!nv_mem_context)
		return -EINVAL;
	nv_mem_context->core_context = core_context;
	nv_mem_context->page_size = GPU_PAGE_SIZE;
	ret = nvidia_p2p_get_pages(0, 0, nv_mem_context->page_virt_start,
				   nv_mem_context->mapped_size, &nv_mem_context->page_table,
				   nv_get_p2p_free_callback, nv_mem_context);
	if (ret < 0) {
		peer_err("error %d while calling nvidia_p2p_get_pages()\n", ret);
		return ret;
	}
	return 0;
}

static GDRSIM_HOOK int nv_mem_get_pages_nc(unsigned long addr, size_t size, int write, int force,
					   struct sg_table *sg_head, void *client_context,
					   u64 core_context)
{
	struct nv_mem_context *nv_mem_context = client_context;
	int ret;

	if (!nv_mem_context)
		return -EINVAL;
	nv_mem_context->core_context = core_context;
	nv_mem_context->page_size = GPU_PAGE_SIZE;
	ret = nvidia_p2p_get_pages_persistent(nv_mem_context->page_virt_start,
					      nv_mem_context->mapped_size,
					      &nv_mem_context->page_table, 0);
	if (ret < 0) {
		peer_err("error %d while calling nvidia_p2p_get_pages() with NULL callback\n", ret);
		return ret;
	}
	return 0;
}

static GDRSIM_HOOK unsigned long nv_mem_get_page_size(void *context)
{
	struct nv_mem_context *nv_mem_context = context;

	return nv_mem_context->page_size;
}

static struct peer_memory_client_ex nv_mem_client_ex = { .client = {
	.acquire = nv_mem_acquire,
	.get_pages = nv_mem_get_pages,
	.dma_map = nv_dma_map,
	.dma_unmap = nv_dma_unmap,
	.put_pages = nv_mem_put_pages,
	.get_page_size = nv_mem_get_page_size,
	.release = nv_mem_release,
}};

static struct peer_memory_client nv_mem_client_nc = {
	.acquire = nv_mem_acquire,
	.get_pages = nv_mem_get_pages_nc,
	.dma_map = nv_dma_map,
	.dma_unmap = nv_dma_unmap,
	.put_pages = nv_mem_put_pages_nc,
	.get_page_size = nv_mem_get_page_size,
	.release = nv_mem_release,
};

static int nv_mem_legacy_client_init(void)
{
	strscpy(nv_mem_client_ex.client.name, DRV_NAME, IB_PEER_MEMORY_NAME_MAX);
	memset(nv_mem_client_ex.client.version, 0, IB_PEER_MEMORY_VER_MAX);
	strscpy(nv_mem_client_ex.client.version, DRV_VERSION, IB_PEER_MEMORY_VER_MAX - 1);
	/* last byte flags the extended client type */
	nv_mem_client_ex.client.version[IB_PEER_MEMORY_VER_MAX - 1] = 1;
	if (peerdirect_support != NV_MEM_PEERDIRECT_SUPPORT_LEGACY) {
		nv_mem_client_ex.ex_size = sizeof(struct peer_memory_client_ex);
		nv_mem_client_ex.flags = PEER_MEM_INVALIDATE_UNMAPS;
	} else {
		nv_mem_client_ex.ex_size = 0;
		nv_mem_client_ex.flags = 0;
	}
	reg_handle = ib_register_peer_memory_client(&nv_mem_client_ex.client,
						    &mem_invalidate_callback);
	if (!reg_handle) {
		peer_err("nv_mem_client_init -- error while registering traditional client\n");
		return -EINVAL;
	}
	return 0;
}

static int nv_mem_nc_client_init(void)
{
	if (persistent_api_support == NV_MEM_PERSISTENT_API_SUPPORT_LEGACY)
		strscpy(nv_mem_client_nc.name, DRV_NAME "_nc", IB_PEER_MEMORY_NAME_MAX);
	else
		strscpy(nv_mem_client_nc.name, DRV_NAME, IB_PEER_MEMORY_NAME_MAX);
	strscpy(nv_mem_client_nc.version, DRV_VERSION, IB_PEER_MEMORY_VER_MAX);
	reg_handle_nc = ib_register_peer_memory_client(&nv_mem_client_nc, NULL);
	if (!reg_handle_nc) {
		peer_err("nv_mem_client_init -- error while registering nc client\n");
		return -EINVAL;
	}
	return 0;
}

static void nv_mem_clients_unregister(void)
{
	if (reg_handle) {
		ib_unregister_peer_memory_client(reg_handle);
		reg_handle = NULL;
	}
	if (reg_handle_nc) {
		ib_unregister_peer_memory_client(reg_handle_nc);
		reg_handle_nc = NULL;
	}
}

static int nv_mem_clients_register(void)
{
	int rc = 0;

	if (persistent_api_support == NV_MEM_PERSISTENT_API_SUPPORT_LEGACY)
		rc = nv_mem_legacy_client_init();
	if (!rc)
		rc = nv_mem_nc_client_init();
	if (rc)
		nv_mem_clients_unregister();
	return rc;
}

static int persistent_api_support_set(const char *val, const struct kernel_param *kp)
{
	int v, rc;

	rc = kstrtoint(val, 0, &v);
	if (rc)
		return rc;
	if (v != NV_MEM_PERSISTENT_API_SUPPORT_LEGACY && v != NV_MEM_PERSISTENT_API_SUPPORT_DEFAULT)
		return -EINVAL;
	mutex_lock(&nv_mem_reg_lock);
	if (!reg_handle_nc) {
		/* module load: gdrsim_peermem_init registers the clients */
		persistent_api_support = v;
		mutex_unlock(&nv_mem_reg_lock);
		return 0;
	}
	if (gdrsim_peer_live_umems()) {
		mutex_unlock(&nv_mem_reg_lock);
		return -EBUSY;
	}
	nv_mem_clients_unregister();
	persistent_api_support = v;
	rc = nv_mem_clients_register();
	mutex_unlock(&nv_mem_reg_lock);
	return rc;
}

static const struct kernel_param_ops persistent_api_support_ops = {
	.set = persistent_api_support_set,
	.get = param_get_int,
};
module_param_cb(persistent_api_support, &persistent_api_support_ops,
		&persistent_api_support, 0644);
MODULE_PARM_DESC(persistent_api_support,
		 "Set level of support for persistent APIs, 0 [legacy] or 1 [default]");

int gdrsim_peermem_init(void)
{
	int rc;

	if (peerdirect_support != NV_MEM_PEERDIRECT_SUPPORT_DEFAULT &&
	    peerdirect_support != NV_MEM_PEERDIRECT_SUPPORT_LEGACY) {
		peer_err("invalid peerdirect_support param value %d\n", peerdirect_support);
		return -EINVAL;
	}
	mutex_lock(&nv_mem_reg_lock);
	rc = nv_mem_clients_register();
	mutex_unlock(&nv_mem_reg_lock);
	return rc;
}

void gdrsim_peermem_exit(void)
{
	mutex_lock(&nv_mem_reg_lock);
	nv_mem_clients_unregister();
	mutex_unlock(&nv_mem_reg_lock);
}
