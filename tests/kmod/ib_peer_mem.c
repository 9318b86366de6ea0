// SPDX-License-Identifier: GPL-2.0
/*
 * gdrsim: imitation of MLNX_OFED / DOCA-OFED ib_core's peer-memory support
 * (drivers/infiniband/core/peer_mem.c and the peer parts of umem.c), which
 * mainline Linux does not have.
 *
 *   ib_umem_get_peer(device, addr, size, access, peer_mem_flags)
 *     pins the pages like mainline __ib_umem_get (pin_user_pages_fast,
 *     sg_alloc_append_table_from_pages, ib_dma_map_sgtable_attrs); when pinning
 *     fails (GPU memory is VM_IO|VM_PFNMAP: -EFAULT) it calls (peer_mem_flags |
 *     IB_PEER_MEM_ALLOW: ib_umem_get_peer always allows the peers, as in MLNX_OFED)
 *   ib_peer_umem_get(old_umem, old_ret, peer_mem_flags)
 *     -> ib_get_peer_client: each registered client's acquire(addr, size,
 *        NULL, NULL, &ctx) until one returns 1 (clients that need invalidation
 *        are skipped without IB_PEER_MEM_INVAL_SUPP)
 *     -> get_pages(addr, size, 1, !writable, NULL, ctx, xa_id): write is
 *        always 1, force is !writable, no sg table (the client fills it in
 *        dma_map); xa_id is the invalidation ticket (PEER_NO_INVALIDATION_ID =
 *        U32_MAX for clients without invalidation)
 *     -> dma_map(&umem->sgt_append.sgt, ctx, ibdev->dma_device, 0, &nmap)
 *     -> get_page_size(ctx)
 *   ib_peer_umem_release(umem): dma_unmap + put_pages (unless invalidated),
 *     release(ctx).  On MLNX_OFED it runs inside ib_umem_release(umem)
 *     (umem.c: "if (umem->is_peer) return ib_peer_umem_release(umem);").
 *   ib_invalidate_peer_memory(reg_handle, core_context): a client's free
 *     callback says the memory is gone.
 *
 * The umem is the running kernel's own struct ib_umem (first member of
 * struct ib_umem_peer), so address/length/iova/writable/owning_mm are where a
 * tracer using the kernel's BTF expects them (also at ib_umem_release entry).
 * Host umems count in pinned_vm (VmPin), peer umems do not.
 *
 * Read from Mellanox/nic-kernel drivers/infiniband/core/peer_mem.c and umem.c
 * (MLNX_OFED / DOCA-OFED 5.x-24.x layout; not in mainline).  All functions here
 * are global in MLNX_OFED's ib_core (exported there, not here: one module),
 * except ib_get_peer_client and ib_invalidate_peer_memory (static there and
 * here); GDRSIM_HOOK keeps each a kprobe-able symbol.
 *
 * Release order, as on MLNX_OFED: the REAL (mainline) ib_umem_release(umem) is
 * entered first, then ib_peer_umem_release.  Mainline's ib_umem_release cannot
 * call into this module and frees the umem, so gdrsim_peer_umem_detach moves
 * the peer state to its own allocation first and ib_peer_umem_release runs on
 * it right after the real ib_umem_release returns (not nested inside it).
 */
#include <linux/module.h>
#include <linux/slab.h>
#include <linux/mm.h>
#include <linux/sched/mm.h>
#include <linux/sched/signal.h>
#include <linux/rwsem.h>
#include <linux/dma-mapping.h>

#include "gdrsim.h"

enum ib_peer_mapped_state {
	UMEM_PEER_UNMAPPED,
	UMEM_PEER_MAPPED,
	UMEM_PEER_INVALIDATED,
};

#define PEER_NO_INVALIDATION_ID U32_MAX

struct ib_peer_memory_client {
	struct list_head core_peer_list;
	const struct peer_memory_client *peer_mem;
	u32 flags;                  /* peer_memory_client_ex flags */
	bool invalidation_required; /* registered with an invalidate callback */
	struct kref ref;            /* registration + one per umem */
	struct mutex lock;          /* umems, xa_cyclic_next */
	struct list_head umems;     /* umems that can be invalidated: ib_core's umem_xa */
	u32 xa_cyclic_next;
	atomic64_t num_alloc_mrs;
	atomic64_t num_dealloc_mrs;
	atomic64_t num_free_callbacks;
};

struct ib_umem_peer {
	struct ib_umem umem;        /* must be first: the real ib_umem_release() kfree()s it */
	bool is_peer;
	struct mutex mapping_lock;
	struct ib_peer_memory_client *ib_peer_client;
	void *peer_client_context;
	u32 xa_id;
	enum ib_peer_mapped_state mapped_state;
	unsigned long page_size;
	struct list_head client_node;
};

static LIST_HEAD(peer_memory_list);
static DECLARE_RWSEM(peer_memory_sem);
static atomic_t gdrsim_live_peer_umems = ATOMIC_INIT(0);

int gdrsim_peer_live_umems(void)
{
	return atomic_read(&gdrsim_live_peer_umems);
}

static void ib_peer_client_free(struct kref *ref)
{
	kfree(container_of(ref, struct ib_peer_memory_client, ref));
}

static GDRSIM_HOOK int ib_invalidate_peer_memory(void *reg_handle, u64 core_context);

/* Mellanox/nic-kernel drivers/infiniband/core/peer_mem.c ib_register_peer_memory_client (exported) */
GDRSIM_HOOK void *ib_register_peer_memory_client(const struct peer_memory_client *peer_client,
						 invalidate_peer_memory *invalidate_callback)
{
	struct ib_peer_memory_client *c;

	c = kzalloc(sizeof(*c), GFP_KERNEL);
	if (!c)
		return NULL;
	c->peer_mem = peer_client;
	kref_init(&c->ref);
	mutex_init(&c->lock);
	INIT_LIST_HEAD(&c->umems);
	/* the last version byte set to 1 marks a struct peer_memory_client_ex */
	if (peer_client->version[IB_PEER_MEMORY_VER_MAX - 1] == 1) {
		const struct peer_memory_client_ex *ex =
			container_of(peer_client, struct peer_memory_client_ex, client);

		if (ex->ex_size >= offsetofend(struct peer_memory_client_ex, flags))
			c->flags = ex->flags;
	}
	if (invalidate_callback) {
		*invalidate_callback = ib_invalidate_peer_memory;
		c->invalidation_required = true;
	}
	down_write(&peer_memory_sem);
	list_add_tail(&c->core_peer_list, &peer_memory_list);
	up_write(&peer_memory_sem);
	return c;
}

/* Mellanox/nic-kernel drivers/infiniband/core/peer_mem.c ib_unregister_peer_memory_client (exported) */
GDRSIM_HOOK void ib_unregister_peer_memory_client(void *reg_handle)
{
	struct ib_peer_memory_client *c = reg_handle;

	down_write(&peer_memory_sem);
	list_del(&c->core_peer_list);
	up_write(&peer_memory_sem);
	kref_put(&c->ref, ib_peer_client_free);
}

/* Mellanox/nic-kernel drivers/infiniband/core/peer_mem.c ib_get_peer_client (static): each client's acquire, in registration order */
static GDRSIM_HOOK struct ib_peer_memory_client *
ib_get_peer_client(unsigned long addr, size_t size, unsigned long peer_mem_flags,
		   void **peer_client_context)
{
	struct ib_peer_memory_client *c, *found = NULL;

	down_read(&peer_memory_sem);
	list_for_each_entry(c, &peer_memory_list, core_peer_list) {
		if (c->invalidation_required && !(peer_mem_flags & IB_PEER_MEM_INVAL_SUPP))
			continue;
		if (c->peer_mem->acquire(addr, size, NULL, NULL, peer_client_context) > 0) {
			kref_get(&c->ref);
			found = c;
			break;
		}
	}
	up_read(&peer_memory_sem);
	return found;
}

static void ib_put_peer_client(struct ib_peer_memory_client *c, void *peer_client_context)
{
	c->peer_mem->release(peer_client_context);
	kref_put(&c->ref, ib_peer_client_free);
}

static void ib_unmap_peer_client(struct ib_umem_peer *umem_p)
{
	const struct peer_memory_client *ops = umem_p->ib_peer_client->peer_mem;

	ops->dma_unmap(&umem_p->umem.sgt_append.sgt, umem_p->peer_client_context,
		       umem_p->umem.ibdev->dma_device);
	ops->put_pages(&umem_p->umem.sgt_append.sgt, umem_p->peer_client_context);
}

/* Mellanox/nic-kernel drivers/infiniband/core/peer_mem.c ib_invalidate_peer_memory (static; the invalidate callback handed to clients) */
static GDRSIM_HOOK int ib_invalidate_peer_memory(void *reg_handle, u64 core_context)
{
	struct ib_peer_memory_client *c = reg_handle;
	struct ib_umem_peer *umem_p, *found = NULL;

	mutex_lock(&c->lock);
	list_for_each_entry(umem_p, &c->umems, client_node) {
		if (umem_p->xa_id == core_context) {
			found = umem_p;
			break;
		}
	}
	if (found) {
		mutex_lock(&found->mapping_lock);
		if (found->mapped_state == UMEM_PEER_MAPPED) {
			/* a NIC driver would fence its mkey here */
			if (!(c->flags & PEER_MEM_INVALIDATE_UNMAPS))
				ib_unmap_peer_client(found);
			found->mapped_state = UMEM_PEER_INVALIDATED;
			atomic64_inc(&c->num_free_callbacks);
		}
		mutex_unlock(&found->mapping_lock);
	}
	mutex_unlock(&c->lock);
	return 0;
}

/* Mellanox/nic-kernel drivers/infiniband/core/peer_mem.c ib_peer_umem_get (global) */
GDRSIM_HOOK struct ib_umem *ib_peer_umem_get(struct ib_umem *old_umem, int old_ret,
					     unsigned long peer_mem_flags)
{
	struct ib_peer_memory_client *c;
	struct ib_umem_peer *umem_p;
	void *peer_client_context = NULL;
	int nmap = 0, ret;

	c = ib_get_peer_client(old_umem->address, old_umem->length, peer_mem_flags,
			       &peer_client_context);
	if (!c)
		return ERR_PTR(old_ret);

	umem_p = kzalloc(sizeof(*umem_p), GFP_KERNEL);
	if (!umem_p) {
		ret = -ENOMEM;
		goto err_client;
	}
	umem_p->umem = *old_umem;
	memset(&umem_p->umem.sgt_append, 0, sizeof(umem_p->umem.sgt_append));
	umem_p->is_peer = true;
	umem_p->ib_peer_client = c;
	umem_p->peer_client_context = peer_client_context;
	mutex_init(&umem_p->mapping_lock);
	INIT_LIST_HEAD(&umem_p->client_node);
	umem_p->xa_id = PEER_NO_INVALIDATION_ID;
	if (c->invalidation_required) {
		/* xa_alloc_cyclic(&umem_xa, &xa_id, .., XA_LIMIT(0, PEER_NO_INVALIDATION_ID - 1), ..) */
		mutex_lock(&c->lock);
		umem_p->xa_id = c->xa_cyclic_next;
		c->xa_cyclic_next = c->xa_cyclic_next + 1 == PEER_NO_INVALIDATION_ID ?
			0 : c->xa_cyclic_next + 1;
		list_add_tail(&umem_p->client_node, &c->umems);
		mutex_unlock(&c->lock);
	}

	/*
	 * As MLNX_OFED: write permission always (breaks CoW), "force" for
	 * read-only MRs, and no sg table (dma_map fills umem's).
	 */
	mutex_lock(&umem_p->mapping_lock);
	ret = c->peer_mem->get_pages(umem_p->umem.address, umem_p->umem.length, 1,
				     !umem_p->umem.writable, NULL,
				     umem_p->peer_client_context, umem_p->xa_id);
	if (ret)
		goto err_xa;
	ret = c->peer_mem->dma_map(&umem_p->umem.sgt_append.sgt, umem_p->peer_client_context,
				   umem_p->umem.ibdev ? umem_p->umem.ibdev->dma_device : NULL,
				   0, &nmap);
	if (ret)
		goto err_pages;
	umem_p->umem.sgt_append.sgt.nents = nmap;
	umem_p->page_size = c->peer_mem->get_page_size(umem_p->peer_client_context);
	umem_p->mapped_state = UMEM_PEER_MAPPED;
	mutex_unlock(&umem_p->mapping_lock);

	atomic64_inc(&c->num_alloc_mrs);
	atomic_inc(&gdrsim_live_peer_umems);
	return &umem_p->umem;

err_pages:
	c->peer_mem->put_pages(&umem_p->umem.sgt_append.sgt, umem_p->peer_client_context);
err_xa:
	mutex_unlock(&umem_p->mapping_lock);
	if (c->invalidation_required) {
		mutex_lock(&c->lock);
		list_del(&umem_p->client_node);
		mutex_unlock(&c->lock);
	}
	kfree(umem_p);
err_client:
	ib_put_peer_client(c, peer_client_context);
	return ERR_PTR(ret);
}

/* Mellanox/nic-kernel drivers/infiniband/core/peer_mem.c ib_peer_umem_release (global), called by umem.c ib_umem_release for is_peer umems */
GDRSIM_HOOK void ib_peer_umem_release(struct ib_umem *umem)
{
	struct ib_umem_peer *umem_p = container_of(umem, struct ib_umem_peer, umem);
	struct ib_peer_memory_client *c = umem_p->ib_peer_client;

	if (c->invalidation_required) {
		mutex_lock(&c->lock);
		list_del_init(&umem_p->client_node);
		mutex_unlock(&c->lock);
	}
	mutex_lock(&umem_p->mapping_lock);
	if (umem_p->mapped_state == UMEM_PEER_MAPPED)
		ib_unmap_peer_client(umem_p);
	umem_p->mapped_state = UMEM_PEER_UNMAPPED;
	mutex_unlock(&umem_p->mapping_lock);
	atomic64_inc(&c->num_dealloc_mrs);
	ib_put_peer_client(c, umem_p->peer_client_context);
	umem_p->ib_peer_client = NULL;
	umem_p->peer_client_context = NULL;
	atomic_dec(&gdrsim_live_peer_umems);
	/* MLNX_OFED: kref_put(&umem_p->kref, ib_peer_umem_kref_release) */
	kfree(umem_p);
}

/*
 * Before the real ib_umem_release(umem) frees @umem: the peer state moves to
 * its own allocation (returned, for ib_peer_umem_release), and @umem keeps
 * nothing the real release would touch (an empty sg table; the client's
 * release frees its own).  Peer memory is not accounted in pinned_vm (VmPin),
 * as in MLNX_OFED; the real release subtracts the umem's pages, so they are
 * added back here, just before it runs.
 */
struct ib_umem *gdrsim_peer_umem_detach(struct ib_umem *umem)
{
	struct ib_umem_peer *umem_p = container_of(umem, struct ib_umem_peer, umem);
	struct ib_peer_memory_client *c = umem_p->ib_peer_client;
	struct ib_umem_peer *moved = kmemdup(umem_p, sizeof(*umem_p), GFP_KERNEL | __GFP_NOFAIL);

	mutex_init(&moved->mapping_lock);
	INIT_LIST_HEAD(&moved->client_node);
	if (c->invalidation_required) {
		/* under c->lock no invalidation holds umem_p->mapping_lock */
		mutex_lock(&c->lock);
		list_replace_init(&umem_p->client_node, &moved->client_node);
		mutex_unlock(&c->lock);
	}
	memset(&umem->sgt_append, 0, sizeof(umem->sgt_append));
	atomic64_add(ib_umem_num_pages(umem), &umem->owning_mm->pinned_vm);
	return &moved->umem;
}

/* __ib_umem_release(device, umem, 0) of mainline, for the failed-pin path */
static void gdrsim_umem_unpin(struct ib_umem *umem)
{
	struct scatterlist *sg;
	unsigned int i;

	for_each_sgtable_sg(&umem->sgt_append.sgt, sg, i)
		unpin_user_page_range_dirty_lock(sg_page(sg), DIV_ROUND_UP(sg->length, PAGE_SIZE),
						 false);
	sg_free_append_table(&umem->sgt_append);
}

/*
 * Mellanox/nic-kernel drivers/infiniband/core/umem.c ib_umem_get_peer (exported):
 * __ib_umem_get(device, addr, size, access, IB_PEER_MEM_ALLOW | peer_mem_flags) (DOCA-OFED
 * 25.10.1.7.1.1 umem.c:315, the same in OFED 5.9 ... 24.10): the peers are always asked, so
 * mlx5's queue pins pass 0 ("allowed, no invalidation") and its MRs IB_PEER_MEM_INVAL_SUPP.
 */
GDRSIM_HOOK struct ib_umem *ib_umem_get_peer(struct ib_device *device, unsigned long addr,
					     size_t size, int access,
					     unsigned long peer_mem_flags)
{
	struct ib_umem_peer *umem_p;
	struct ib_umem *umem;
	struct mm_struct *mm;
	struct page **page_list;
	unsigned long lock_limit, new_pinned, cur_base, npages, dma_attr = 0;
	unsigned int gup_flags = FOLL_LONGTERM;
	int pinned, ret;

	if (!device || !device->dma_device)
		return ERR_PTR(-EINVAL); /* no virt-dma (rxe-like) devices here */
	if (access & IB_ACCESS_ON_DEMAND)
		return ERR_PTR(-EOPNOTSUPP); /* ODP is not simulated */
	peer_mem_flags |= IB_PEER_MEM_ALLOW;
	if ((addr + size) < addr || PAGE_ALIGN(addr + size) < (addr + size))
		return ERR_PTR(-EINVAL);
	if (!can_do_mlock())
		return ERR_PTR(-EPERM);

	umem_p = kzalloc(sizeof(*umem_p), GFP_KERNEL);
	if (!umem_p)
		return ERR_PTR(-ENOMEM);
	umem = &umem_p->umem;
	umem->ibdev = device;
	umem->length = size;
	umem->address = addr;
	umem->iova = addr;
	umem->writable = ib_access_writable(access);
	umem->owning_mm = mm = current->mm;
	mmgrab(mm);

	page_list = (struct page **)__get_free_page(GFP_KERNEL);
	if (!page_list) {
		ret = -ENOMEM;
		goto umem_kfree;
	}
	npages = ib_umem_num_pages(umem);
	if (npages == 0 || npages > UINT_MAX) {
		ret = -EINVAL;
		goto out;
	}
	lock_limit = rlimit(RLIMIT_MEMLOCK) >> PAGE_SHIFT;
	new_pinned = atomic64_add_return(npages, &mm->pinned_vm);
	if (new_pinned > lock_limit && !capable(CAP_IPC_LOCK)) {
		atomic64_sub(npages, &mm->pinned_vm);
		ret = -ENOMEM;
		goto out;
	}
	cur_base = addr & PAGE_MASK;
	if (umem->writable)
		gup_flags |= FOLL_WRITE;
	while (npages) {
		cond_resched();
		pinned = pin_user_pages_fast(cur_base,
					     min_t(unsigned long, npages,
						   PAGE_SIZE / sizeof(struct page *)),
					     gup_flags, page_list);
		if (pinned < 0) {
			ret = pinned;
			goto umem_release;
		}
		cur_base += pinned * PAGE_SIZE;
		npages -= pinned;
		ret = sg_alloc_append_table_from_pages(&umem->sgt_append, page_list, pinned, 0,
						       pinned << PAGE_SHIFT,
						       ib_dma_max_seg_size(device), npages,
						       GFP_KERNEL);
		if (ret) {
			unpin_user_pages_dirty_lock(page_list, pinned, 0);
			goto umem_release;
		}
	}
	if (access & IB_ACCESS_RELAXED_ORDERING)
		dma_attr |= DMA_ATTR_WEAK_ORDERING;
	ret = ib_dma_map_sgtable_attrs(device, &umem->sgt_append.sgt, DMA_BIDIRECTIONAL, dma_attr);
	if (ret)
		goto umem_release;
	goto out;

umem_release:
	gdrsim_umem_unpin(umem);
	atomic64_sub(ib_umem_num_pages(umem), &mm->pinned_vm);
	/*
	 * If the address belongs to a peer memory client the pin fails; try the
	 * peers (MLNX_OFED umem.c does this at the same point).
	 */
	if (ret < 0 && (peer_mem_flags & IB_PEER_MEM_ALLOW)) {
		struct ib_umem *new_umem = ib_peer_umem_get(umem, ret, peer_mem_flags);

		if (!IS_ERR(new_umem)) {
			/* the new umem took over the mm reference */
			free_page((unsigned long)page_list);
			kfree(umem_p);
			return new_umem;
		}
		ret = PTR_ERR(new_umem);
	}
out:
	free_page((unsigned long)page_list);
umem_kfree:
	if (ret) {
		mmdrop(mm);
		kfree(umem_p);
		return ERR_PTR(ret);
	}
	return umem;
}

bool gdrsim_umem_is_peer(struct ib_umem *umem)
{
	return container_of(umem, struct ib_umem_peer, umem)->is_peer;
}

void gdrsim_umem_peer_info(struct ib_umem *umem, char *client, size_t len,
			   u64 *page_size, u32 *nmap)
{
	struct ib_umem_peer *umem_p = container_of(umem, struct ib_umem_peer, umem);

	if (umem_p->is_peer) {
		strscpy(client, umem_p->ib_peer_client->peer_mem->name, len);
		*page_size = umem_p->page_size;
	} else {
		client[0] = 0;
		*page_size = PAGE_SIZE;
	}
	*nmap = umem->sgt_append.sgt.nents;
}

/*
 * GDRSIM_IOC_MR_INFO's answer about a NIC's umem made as @kind (the caller keeps it alive):
 * peer (or invalidated, under its mapping lock: ib_invalidate_peer_memory may run), host, or
 * dma-buf.
 */
void gdrsim_umem_info(enum gdrsim_reg_kind kind, struct ib_umem *umem, struct gdrsim_mr_info *info)
{
	info->addr = umem->address;
	info->length = umem->length;
	info->client[0] = 0;
	if (kind == GDRSIM_REG_DMABUF) {
		info->kind = GDRSIM_MR_KIND_DMABUF;
		info->is_peer = 0;
		info->page_size = 0;
		info->nmap = umem->sgt_append.sgt.nents;
		return;
	}
	if (kind == GDRSIM_REG_UMEM_GET_PEER && gdrsim_umem_is_peer(umem)) {
		struct ib_umem_peer *umem_p = container_of(umem, struct ib_umem_peer, umem);

		mutex_lock(&umem_p->mapping_lock);
		info->kind = umem_p->mapped_state == UMEM_PEER_INVALIDATED ?
			GDRSIM_MR_KIND_PEER_INVALIDATED : GDRSIM_MR_KIND_PEER;
		info->is_peer = 1;
		strscpy(info->client, umem_p->ib_peer_client->peer_mem->name, sizeof(info->client));
		info->page_size = umem_p->page_size;
		info->nmap = umem->sgt_append.sgt.nents;
		mutex_unlock(&umem_p->mapping_lock);
		return;
	}
	info->kind = GDRSIM_MR_KIND_HOST;
	info->is_peer = 0;
	info->page_size = PAGE_SIZE;
	info->nmap = umem->sgt_append.sgt.nents;
}
