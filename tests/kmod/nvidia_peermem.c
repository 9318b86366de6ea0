// SPDX-License-Identifier: GPL-2.0
/*
 * gdrsim: imitation of nvidia-peermem (NVIDIA/open-gpu-kernel-modules,
 * kernel-open/nvidia-peermem/nvidia-peermem.c), the peer-memory client that
 * lets MLNX_OFED's ib_core register GPU memory.  The flow depends on the driver
 * branch (module parameter driver_branch; the file read at each release tag of
 * gdr-trace's driver matrix, docs/drivers.md):
 *
 *   535.288.01, 550.163.01 (no persistent_api_support parameter): two clients
 *     always, "nv_mem" then "nv_mem_nc", both .acquire = nv_mem_acquire.
 *   560.28.03 ... 575.64.05: persistent_api_support (default 1): one client
 *     "nv_mem" = nv_mem_client_nc; 0 = both clients as above.  Both use
 *     nv_mem_acquire.
 *   580.65.06 ... 595.45.04 (580.142, 590.48.01, 595.45.04 the same file):
 *     nv_mem_client_nc's .acquire is nv_mem_acquire_nc; the legacy client
 *     "nv_mem" keeps nv_mem_acquire.
 *
 *   nv_mem_acquire: trial pin nvidia_p2p_get_pages(0, 0, va, len, &pt,
 *     nv_mem_dummy_callback, ctx) + nvidia_p2p_put_pages(0, 0, va, pt).
 *   nv_mem_acquire_nc: trial pin nvidia_p2p_get_pages_persistent(va, len, &pt, 0)
 *     + nvidia_p2p_put_pages_persistent(va, pt, 0).
 *   Both return 1 (mine) or 0.
 *   "nv_mem" (legacy): get_pages nv_mem_get_pages -> nvidia_p2p_get_pages(..,
 *     nv_get_p2p_free_callback, ctx); put_pages nv_mem_put_pages ->
 *     nvidia_p2p_put_pages.  Registered with an invalidate callback: ib_core only
 *     offers it registrations made with IB_PEER_MEM_INVAL_SUPP (mlx5 always).
 *   nv_mem_client_nc ("nv_mem" by default, "nv_mem_nc" in legacy mode):
 *     get_pages nv_mem_get_pages_nc -> nvidia_p2p_get_pages_persistent; put_pages
 *     nv_mem_put_pages_nc -> nvidia_p2p_put_pages_persistent.
 *   shared: nv_dma_map -> nvidia_p2p_dma_map_pages, nv_dma_unmap ->
 *     nvidia_p2p_dma_unmap_pages, nv_mem_get_page_size, nv_mem_release.
 *   invalidation: GPU memory freed (munmap of /dev/nvidia0) under a live legacy
 *     registration -> nv_get_p2p_free_callback(ctx) -> ib_core's invalidate
 *     (ib_invalidate_peer_memory) -> nvidia_p2p_free_dma_mapping +
 *     nvidia_p2p_free_page_table (both no-ops in nvidia.ko, which frees the
 *     table itself when the callback returns).
 *
 * Every function is static in the real module and static here; GDRSIM_HOOK
 * (noinline, noipa) keeps each one a symbol a kprobe finds, as the real build
 * does for these callbacks (their addresses are taken).
 *
 * Differences: driver_branch and persistent_api_support can be changed at run
 * time through /sys/module/gdrsim/parameters/ (the clients are re-registered;
 * EBUSY while peer registrations are live); the real module reads its
 * parameter at load and its branch is its build.  Before 560 the real module
 * has no persistent_api_support: here it reads 0 then (the same two clients a
 * tracer infers from its absence) and 1 is refused.
 */
#include <linux/module.h>
#include <linux/moduleparam.h>
#include <linux/slab.h>
#include <linux/pci.h>
#include <linux/scatterlist.h>
#include <linux/sched.h>

#include "gdrsim.h"

#define DRV_NAME    "nv_mem"
#define DRV_VERSION gdrsim_driver_version()

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

/*
 * nvidia-peermem.c nv_get_p2p_free_callback (static; 535.288.01 ... 595.45.04):
 * nvidia.ko calls it when GPU memory under a legacy (nv_mem) pin is freed.
 */
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

/*
 * nvidia-peermem.c nv_mem_dummy_callback (static; 535.288.01 ... 595.45.04): free
 * callback of nv_mem_acquire's trial pin; no ib_core ticket exists yet.
 */
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

/*
 * nvidia-peermem.c nv_mem_acquire (static; 535.288.01 ... 595.45.04): .acquire of
 * both clients up to 575.64.05, of the legacy "nv_mem" only from 580.65.06.
 * Trial pin with the legacy API.  Returns 1 (mine) or 0.
 */
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

/*
 * nvidia-peermem.c nv_mem_acquire_nc (static; 580.65.06, 580.142, 590.48.01,
 * 595.45.04; absent up to 575.64.05): .acquire of nv_mem_client_nc, the
 * persistent client.  Trial pin with the persistent API
 * (NVIDIA_P2P_CAP_GET_PAGES_PERSISTENT_API is defined in nv-p2p.h).  Returns 1
 * (mine) or 0.
 */
static GDRSIM_HOOK int nv_mem_acquire_nc(unsigned long addr, size_t size,
					 void *peer_mem_private_data, char *peer_mem_name,
					 void **client_context)
{
	struct nv_mem_context *nv_mem_context;
	int ret;

	nv_mem_context = nv_mem_context_new(addr, size);
	if (!nv_mem_context)
		return 0;
	ret = nvidia_p2p_get_pages_persistent(nv_mem_context->page_virt_start,
					      nv_mem_context->mapped_size,
					      &nv_mem_context->page_table, 0);
	if (ret < 0)
		goto err;
	ret = nvidia_p2p_put_pages_persistent(nv_mem_context->page_virt_start,
					      nv_mem_context->page_table, 0);
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

/* nvidia-peermem.c nv_dma_map (static; 535.288.01 ... 595.45.04) */
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

/* nvidia-peermem.c nv_dma_unmap (static; 535.288.01 ... 595.45.04) */
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

/* nvidia-peermem.c nv_mem_put_pages_common (static; 535.288.01 ... 595.45.04) */
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

/* nvidia-peermem.c nv_mem_put_pages (static; 535.288.01 ... 595.45.04) */
static GDRSIM_HOOK void nv_mem_put_pages(struct sg_table *sg_head, void *context)
{
	nv_mem_put_pages_common(0, sg_head, context);
}

/* nvidia-peermem.c nv_mem_put_pages_nc (static; 535.288.01 ... 595.45.04) */
static GDRSIM_HOOK void nv_mem_put_pages_nc(struct sg_table *sg_head, void *context)
{
	nv_mem_put_pages_common(1, sg_head, context);
}

/* nvidia-peermem.c nv_mem_release (static; 535.288.01 ... 595.45.04) */
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

/*
 * nvidia-peermem.c nv_mem_get_pages (static; 535.288.01 ... 595.45.04): get_pages
 * of the legacy client; ib_core passes (addr, len, 1, !writable, NULL, ctx, id).
 */
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

/* nvidia-peermem.c nv_mem_get_pages_nc (static; 535.288.01 ... 595.45.04) */
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

/* nvidia-peermem.c nv_mem_get_page_size (static; 535.288.01 ... 595.45.04) */
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

/* .acquire is set per branch by nv_mem_nc_client_init (a static initializer in the real file) */
static struct peer_memory_client nv_mem_client_nc = {
	.acquire = nv_mem_acquire_nc,
	.get_pages = nv_mem_get_pages_nc,
	.dma_map = nv_dma_map,
	.dma_unmap = nv_dma_unmap,
	.put_pages = nv_mem_put_pages_nc,
	.get_page_size = nv_mem_get_page_size,
	.release = nv_mem_release,
};

/* nvidia-peermem.c nv_mem_legacy_client_init (560.28.03+; inline in nv_mem_client_init before) */
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

/* nvidia-peermem.c nv_mem_nc_client_init (560.28.03+; inline in nv_mem_client_init before) */
static int nv_mem_nc_client_init(void)
{
	nv_mem_client_nc.acquire = GDRSIM_BRANCH_HAS_ACQUIRE_NC(gdrsim_driver_branch) ?
		nv_mem_acquire_nc : nv_mem_acquire;
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

/* the branches of gdr-trace's driver matrix and the release tag each was read at */
static const struct {
	int branch;
	const char *tag;
} gdrsim_branches[] = {
	{ 535, "535.288.01" }, { 550, "550.163.01" }, { 560, "560.28.03" },
	{ 565, "565.77" },     { 570, "570.211.01" }, { 575, "575.64.05" },
	{ 580, "580.65.06" },  { 590, "590.48.01" },  { 595, "595.45.04" },
};

int gdrsim_driver_branch = 580;

const char *gdrsim_driver_version(void)
{
	size_t i;

	for (i = 0; i < ARRAY_SIZE(gdrsim_branches); i++)
		if (gdrsim_branches[i].branch == gdrsim_driver_branch)
			return gdrsim_branches[i].tag;
	return "unknown";
}

/*
 * Sets the branch and the mode together, re-registering the clients when they
 * are registered (refused while peer registrations are live).  Before 560 the
 * real module has no persistent_api_support and always registers both clients.
 */
static int gdrsim_peermem_reconfigure(int branch, int pas)
{
	int rc = 0;

	if (!GDRSIM_BRANCH_HAS_PERSISTENT_API_SUPPORT(branch)) {
		if (pas == NV_MEM_PERSISTENT_API_SUPPORT_DEFAULT && branch != gdrsim_driver_branch)
			pas = NV_MEM_PERSISTENT_API_SUPPORT_LEGACY;
		else if (pas == NV_MEM_PERSISTENT_API_SUPPORT_DEFAULT)
			return -EINVAL; /* no such parameter before 560.28.03 */
	}
	mutex_lock(&nv_mem_reg_lock);
	if (reg_handle_nc && gdrsim_peer_live_umems()) {
		mutex_unlock(&nv_mem_reg_lock);
		return -EBUSY;
	}
	if (reg_handle_nc) {
		nv_mem_clients_unregister();
		gdrsim_driver_branch = branch;
		persistent_api_support = pas;
		rc = nv_mem_clients_register();
	} else {
		/* module load: gdrsim_peermem_init registers the clients */
		gdrsim_driver_branch = branch;
		persistent_api_support = pas;
	}
	mutex_unlock(&nv_mem_reg_lock);
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
	return gdrsim_peermem_reconfigure(gdrsim_driver_branch, v);
}

static const struct kernel_param_ops persistent_api_support_ops = {
	.set = persistent_api_support_set,
	.get = param_get_int,
};
module_param_cb(persistent_api_support, &persistent_api_support_ops,
		&persistent_api_support, 0644);
MODULE_PARM_DESC(persistent_api_support,
		 "Set level of support for persistent APIs, 0 [legacy] or 1 [default]");

static int driver_branch_set(const char *val, const struct kernel_param *kp)
{
	int v, rc;
	size_t i;

	rc = kstrtoint(val, 10, &v);
	if (rc)
		return rc;
	for (i = 0; i < ARRAY_SIZE(gdrsim_branches); i++)
		if (gdrsim_branches[i].branch == v)
			break;
	if (i == ARRAY_SIZE(gdrsim_branches))
		return -EINVAL;
	return gdrsim_peermem_reconfigure(v, persistent_api_support);
}

static const struct kernel_param_ops driver_branch_ops = {
	.set = driver_branch_set,
	.get = param_get_int,
};
module_param_cb(driver_branch, &driver_branch_ops, &gdrsim_driver_branch, 0644);
MODULE_PARM_DESC(driver_branch,
		 "NVIDIA driver branch simulated: 535 550 560 565 570 575 580 [default] 590 595");

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
