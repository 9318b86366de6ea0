// SPDX-License-Identifier: GPL-2.0
/*
 * gdrsim: "mlx5_0", a second NIC registered with the running kernel's REAL ib_core (beside
 * efa_sim0, nic_ibdev.c), shaped like a Mellanox/NVIDIA ConnectX so that rdma-core's STOCK
 * libmlx5 (providers/mlx5 at v44.0, Debian bookworm) binds to it by driver id and drives it:
 * ibv_open_device, ibv_alloc_pd, ibv_reg_mr / ibv_reg_dmabuf_mr, ibv_create_cq[_ex],
 * ibv_create_qp (RC), ibv_create_srq, ibv_create_wq, mlx5dv_open_device(DEVX) and
 * mlx5dv_devx_umem_reg[_ex] / _dereg.  There is no firmware: queue numbers, keys and UMEM ids
 * are counters, nothing is ever transferred, libmlx5's WQEs and doorbells land in user
 * memory and in zeroed UAR pages nobody reads.  This file: the device, user contexts and
 * their UAR pages, PDs, MRs, doorbell records, DEVX UMEMs; the queues are in
 * nic_mlx5_queues.c, the shared structures in nic_mlx5.h.
 *
 * What each piece mirrors: torvalds/linux drivers/infiniband/hw/mlx5 at v6.1 and v6.12, read
 * in Debian's linux-source-6.1 (6.1.192) and linux-source-6.12 (6.12.118) (line numbers
 * below are 6.1 / 6.12; doorbell.c is the same in both), and MLNX_OFED's mlx5_ib
 * (Mellanox mlnx-ofa_kernel, DOCA-OFED 25.10.1.7.1.1; the same calls in OFED 5.9, 23.10,
 * 24.10).  The user ABI is uapi rdma/mlx5-abi.h and rdma/mlx5_user_ioctl_cmds.h of the
 * headers this is built against.
 *
 * The pins are mlx5's, call for call:
 *   create_cq_user   ring ib_umem_get(dev, buf_addr, entries * cqe_size, LOCAL_WRITE), then
 *                    mlx5_ib_db_map_user(context, db_addr)            (cq.c:747 / 754)
 *   _create_user_qp  ring ib_umem_get(dev, buf_addr, (rq_wqe_count << rq_wqe_shift) +
 *                    (sq_wqe_count << 6), 0), then the doorbell       (qp.c:969 / 1015)
 *   create_srq_user  ring ib_umem_get(pd->device, buf_addr, buf_size, 0) + doorbell (srq.c:78)
 *   create_user_rq   (WQ) ring ib_umem_get(dev, buf_addr, wqe_count << wqe_shift, 0)
 *                    + doorbell                                        (qp.c:855 / 901)
 *   mlx5_ib_db_map_user  ib_umem_get(dev, virt & PAGE_MASK, PAGE_SIZE, 0), once per page and
 *                    user context, refcounted: the queues whose doorbell records share a
 *                    page share its umem (libmlx5 packs 64 records in a page)
 *   devx_umem_get    ib_umem_dmabuf_get_pinned(dev, addr, size, fd, access) with a dma-buf fd,
 *                    else ib_umem_get(dev, addr, size, access)         (devx.c:2224 / 2222)
 *   mlx5_ib_reg_user_mr  ib_umem_get(dev, start, length, access)       (mr.c:1440 / 1551)
 * With module parameter mlx5_ofed=1 (writable at run time) each of them is MLNX_OFED's
 * instead: ib_umem_get_peer(dev, addr, size, access, 0) (cq.c:757, qp.c:1039/1151, srq.c:78,
 * doorbell.c:70, devx.c:2270 of DOCA-OFED 25.10.1.7.1.1), and for MRs
 * ib_umem_get_peer(..., IB_PEER_MEM_INVAL_SUPP) (mr.c:1670): the simulated ib_core of
 * ib_peer_mem.c, whose peer clients (nvidia-peermem) take GPU memory, which mainline cannot
 * pin (-EFAULT).  Every umem goes back through the real ib_umem_release (and
 * ib_peer_umem_release for a peer umem), at destroy, dereg or the process's exit.
 *
 * Differences from mlx5, on purpose: legacy static UARs only (alloc_ucontext answers
 * tot_bfregs and ignores MLX5_LIB_CAP_DYN_UAR, as kernels before dynamic UARs did; the UAR
 * pages are zeroed host pages mapped with the vma's own protection, not the BAR with
 * write-combining); dma-buf MRs are pinned (ib_umem_dmabuf_get_pinned; mlx5 uses the movable
 * ib_umem_dmabuf_get); no kernel (udata-less) CQs/QPs/SRQs; RC QPs only; node type and port
 * as efa_sim0 (no IB/RoCE protocol, so no MAD QPs); no DEVX objects besides UMEMs (libmlx5's
 * QUERY_HCA_CAP at open gets EPROTONOSUPPORT and carries on).
 */
#define UVERBS_MODULE_NAME mlx5_ib
#include <linux/module.h>
#include <linux/slab.h>
#include <linux/mm.h>
#include <linux/sched/mm.h>
#include <linux/idr.h>
#include <linux/overflow.h>
#include <linux/version.h>
#include <rdma/ib_verbs.h>
#include <rdma/ib_umem.h>
#include <rdma/uverbs_ioctl.h>
#include <rdma/uverbs_named_ioctl.h>
#include <rdma/uverbs_std_types.h>
#include <rdma/mlx5-abi.h>
#include <rdma/mlx5_user_ioctl_cmds.h>

#include "gdrsim.h"
#include "nic_mlx5.h"

static bool mlx5_ofed;
module_param(mlx5_ofed, bool, 0644);
MODULE_PARM_DESC(mlx5_ofed, "mlx5_0 pins queues, doorbells, UMEMs and MRs as MLNX_OFED "
		 "(ib_umem_get_peer: GPU memory goes to nvidia-peermem) instead of mainline ib_umem_get");

static struct mlx5_ib_dev *gdrsim_mlx5;

/*
 * A ring's or doorbell page's pin: mainline's ib_umem_get, or with mlx5_ofed=1 MLNX_OFED's
 * ib_umem_get_peer(dev, addr, size, access, 0) at the same call site.
 */
struct ib_umem *mlx5_sim_umem_get(struct ib_device *dev, unsigned long addr, size_t size,
				  int access, enum gdrsim_reg_kind *kind)
{
	if (READ_ONCE(mlx5_ofed)) {
		*kind = GDRSIM_REG_UMEM_GET_PEER;
		return ib_umem_get_peer(dev, addr, size, access, 0);
	}
	*kind = GDRSIM_REG_UMEM_GET;
	return ib_umem_get(dev, addr, size, access);
}

/* the real ib_umem_release (then ib_peer_umem_release for a peer umem) */
void mlx5_sim_ubuf_release(struct mlx5_sim_ubuf *b)
{
	if (b->umem)
		gdrsim_umem_release(b->kind, b->umem);
	b->umem = NULL;
}

/* ---- doorbell.c (v6.1 = v6.12; MLNX_OFED the same with ib_umem_get_peer) ---- */

/* doorbell.c mlx5_ib_db_map_user: one pin of the record's page per page and user context */
GDRSIM_HOOK int mlx5_ib_db_map_user(struct mlx5_ib_ucontext *context, unsigned long virt,
				    struct mlx5_db *db)
{
	struct mlx5_ib_user_db_page *page;
	int err = 0;

	mutex_lock(&context->db_page_mutex);
	list_for_each_entry(page, &context->db_page_list, list)
		if (current->mm == page->mm && page->user_virt == (virt & PAGE_MASK))
			goto found;

	page = kmalloc(sizeof(*page), GFP_KERNEL);
	if (!page) {
		err = -ENOMEM;
		goto out;
	}
	page->user_virt = virt & PAGE_MASK;
	page->refcnt = 0;
	page->umem = mlx5_sim_umem_get(context->ibucontext.device, virt & PAGE_MASK, PAGE_SIZE, 0,
				       &page->kind);
	if (IS_ERR(page->umem)) {
		err = PTR_ERR(page->umem);
		kfree(page);
		goto out;
	}
	mmgrab(current->mm);
	page->mm = current->mm;
	list_add(&page->list, &context->db_page_list);

found:
	db->dma = (page->umem->sgt_append.sgt.sgl ?
		   sg_dma_address(page->umem->sgt_append.sgt.sgl) : 0) + (virt & ~PAGE_MASK);
	db->user_page = page;
	++page->refcnt;
out:
	mutex_unlock(&context->db_page_mutex);
	return err;
}

/* doorbell.c mlx5_ib_db_unmap_user: the page's umem goes with its last queue */
GDRSIM_HOOK void mlx5_ib_db_unmap_user(struct mlx5_ib_ucontext *context, struct mlx5_db *db)
{
	struct mlx5_ib_user_db_page *page = db->user_page;

	mutex_lock(&context->db_page_mutex);
	if (!--page->refcnt) {
		list_del(&page->list);
		mmdrop(page->mm);
		gdrsim_umem_release(page->kind, page->umem);
		kfree(page);
	}
	mutex_unlock(&context->db_page_mutex);
}

/* ---- device, port, ucontext and UARs (main.c) ---- */

static int mlx5_ib_query_device(struct ib_device *ibdev, struct ib_device_attr *props,
				struct ib_udata *uhw)
{
	/* alloc_ucontext says cmds_supp_uhw = 0: libmlx5 sends no mlx5_ib_query_device udata */
	memset(props, 0, sizeof(*props));
	props->vendor_id = 0x02c9; /* Mellanox */
	props->vendor_part_id = 4129; /* ConnectX-7 */
	props->fw_ver = 28ULL << 32 | 39ULL << 16 | 1002; /* 28.39.1002 */
	props->sys_image_guid = ibdev->node_guid;
	props->max_mr_size = ~0ULL;
	props->page_size_cap = ~(u64)(PAGE_SIZE - 1);
	props->max_qp = 1 << 18;
	props->max_qp_wr = 1 << MLX5_SIM_LOG_MAX_QP_SZ;
	props->max_send_sge = 30;
	props->max_recv_sge = 32;
	props->max_sge_rd = 30;
	props->max_cq = 1 << 24;
	props->max_cqe = (1 << 22) - 1;
	props->max_mr = 1 << 24;
	props->max_pd = 1 << 24;
	props->max_srq = 1 << 23;
	props->max_srq_wr = (1 << MLX5_SIM_LOG_MAX_QP_SZ) - 1;
	props->max_srq_sge = 31;
	props->max_wq_type_rq = 1 << 18;
	return 0;
}

/* as efa_sim0: one active port, no IB/RoCE protocol (no MAD agents, no netdev) */
static int mlx5_ib_query_port(struct ib_device *ibdev, u32 port, struct ib_port_attr *props)
{
	props->lmc = 0;
	props->state = IB_PORT_ACTIVE;
	props->phys_state = IB_PORT_PHYS_STATE_LINK_UP;
	props->gid_tbl_len = 1;
	props->pkey_tbl_len = 1;
	props->active_speed = IB_SPEED_NDR;
	props->active_width = IB_WIDTH_4X;
	props->max_mtu = IB_MTU_4096;
	props->active_mtu = IB_MTU_4096;
	props->max_msg_sz = 1 << 30;
	props->max_vl_num = 1;
	return 0;
}

static int mlx5_ib_query_gid(struct ib_device *ibdev, u32 port, int index, union ib_gid *gid)
{
	memset(gid, 0, sizeof(*gid));
	gid->global.interface_id = ibdev->node_guid;
	return 0;
}

static int mlx5_ib_query_pkey(struct ib_device *ibdev, u32 port, u16 index, u16 *pkey)
{
	if (index > 0)
		return -EINVAL;
	*pkey = 0xffff;
	return 0;
}

static int mlx5_port_immutable(struct ib_device *ibdev, u32 port, struct ib_port_immutable *imm)
{
	imm->pkey_tbl_len = 1;
	imm->gid_tbl_len = 1;
	return 0;
}

static enum rdma_link_layer mlx5_ib_port_link_layer(struct ib_device *ibdev, u32 port)
{
	return IB_LINK_LAYER_UNSPECIFIED;
}

/*
 * main.c mlx5_ib_alloc_ucontext (1853 / 2032) + calc_total_bfregs + set_ucontext_resp, in the
 * legacy static-UAR mode: the request's total_num_bfregs (16 from libmlx5) become
 * total/2 UAR pages that libmlx5 mmaps at open; MLX5_IB_ALLOC_UCTX_DEVX gets a made-up
 * DEVX uid (firmware CREATE_UCTX in mlx5_ib_devx_create).
 */
static int mlx5_ib_alloc_ucontext(struct ib_ucontext *uctx, struct ib_udata *udata)
{
	struct mlx5_ib_dev *dev = to_mdev(uctx->device);
	struct mlx5_ib_ucontext *context = to_mucontext(uctx);
	struct mlx5_ib_alloc_ucontext_req_v2 req = {};
	struct mlx5_ib_alloc_ucontext_resp resp = {};
	size_t min_req_v2 = offsetof(struct mlx5_ib_alloc_ucontext_req_v2, max_cqe_version);
	int err, uid;

	if (udata->inlen != sizeof(struct mlx5_ib_alloc_ucontext_req) && udata->inlen < min_req_v2)
		return -EINVAL;
	err = ib_copy_from_udata(&req, udata, min(udata->inlen, sizeof(req)));
	if (err)
		return err;
	if (req.flags & ~MLX5_IB_ALLOC_UCTX_DEVX)
		return -EOPNOTSUPP;
	if (req.comp_mask || req.reserved0 || req.reserved1 || req.reserved2)
		return -EOPNOTSUPP;
	req.total_num_bfregs = ALIGN(req.total_num_bfregs, MLX5_NON_FP_BFREGS_PER_UAR);
	if (req.total_num_bfregs == 0)
		return -EINVAL;
	if (req.total_num_bfregs > MLX5_MAX_BFREGS)
		return -ENOMEM;
	if (req.num_low_latency_bfregs > req.total_num_bfregs - 1)
		return -EINVAL;

	context->total_num_bfregs = req.total_num_bfregs;
	context->num_low_latency_bfregs = req.num_low_latency_bfregs;
	context->num_static_sys_pages = req.total_num_bfregs / MLX5_NON_FP_BFREGS_PER_UAR;
	context->bfreg_count = kcalloc(context->total_num_bfregs, sizeof(u32), GFP_KERNEL);
	context->uar_pages = alloc_pages_exact(context->num_static_sys_pages * PAGE_SIZE,
					       GFP_KERNEL | __GFP_ZERO);
	if (!context->bfreg_count || !context->uar_pages) {
		err = -ENOMEM;
		goto err_free;
	}
	if (req.flags & MLX5_IB_ALLOC_UCTX_DEVX) {
		uid = ida_alloc_range(&dev->devx_uids, 1, 0xffff, GFP_KERNEL);
		if (uid < 0) {
			err = uid;
			goto err_free;
		}
		context->devx_uid = uid;
	}
	mutex_init(&context->bfreg_lock);
	INIT_LIST_HEAD(&context->db_page_list);
	mutex_init(&context->db_page_mutex);

	resp.qp_tab_size = 1 << 18;
	resp.bf_reg_size = 512;
	resp.cache_line_size = cache_line_size();
	resp.max_sq_desc_sz = MLX5_SIM_MAX_WQE_SZ;
	resp.max_rq_desc_sz = MLX5_SIM_MAX_WQE_SZ;
	resp.max_send_wqebb = 1 << MLX5_SIM_LOG_MAX_QP_SZ;
	resp.max_recv_wr = 1 << MLX5_SIM_LOG_MAX_QP_SZ;
	resp.max_srq_recv_wr = 1 << MLX5_SIM_LOG_MAX_QP_SZ;
	resp.cqe_version = min_t(__u8, 1, req.max_cqe_version);
	resp.log_uar_size = MLX5_ADAPTER_PAGE_SHIFT;
	resp.num_uars_per_page = 1;
	resp.tot_bfregs = context->total_num_bfregs;
	resp.num_ports = 1;
	resp.response_length = min(udata->outlen, sizeof(resp));
	err = ib_copy_to_udata(udata, &resp, resp.response_length);
	if (err)
		goto err_uid;
	return 0;

err_uid:
	if (context->devx_uid)
		ida_free(&dev->devx_uids, context->devx_uid);
err_free:
	if (context->uar_pages)
		free_pages_exact(context->uar_pages, context->num_static_sys_pages * PAGE_SIZE);
	kfree(context->bfreg_count);
	return err;
}

static void mlx5_ib_dealloc_ucontext(struct ib_ucontext *ibcontext)
{
	struct mlx5_ib_ucontext *context = to_mucontext(ibcontext);

	WARN_ON(!list_empty(&context->db_page_list));
	if (context->devx_uid)
		ida_free(&to_mdev(ibcontext->device)->devx_uids, context->devx_uid);
	/* the mappings of these pages hold the uverbs file: none is left by now */
	free_pages_exact(context->uar_pages, context->num_static_sys_pages * PAGE_SIZE);
	kfree(context->bfreg_count);
}

/*
 * main.c mlx5_ib_mmap -> uar_mmap (2147 / 2326): vm_pgoff = (command << 8) | index, one page,
 * index < the static UAR pages, rdma_user_mmap_io(..., NULL entry).  mlx5 maps the BAR page
 * write-combined (REGULAR, WC) or uncached (NC); these are RAM pages: the vma's own
 * protection (a second memtype for RAM would conflict in x86 PAT).  The mapping is
 * VM_IO | VM_PFNMAP, like the real one.
 */
static int mlx5_ib_mmap(struct ib_ucontext *ibcontext, struct vm_area_struct *vma)
{
	struct mlx5_ib_ucontext *context = to_mucontext(ibcontext);
	unsigned long command = (vma->vm_pgoff >> 8) & 0xff, idx = vma->vm_pgoff & 0xff;
	void *page;

	if (command != MLX5_IB_MMAP_REGULAR_PAGE && command != MLX5_IB_MMAP_WC_PAGE &&
	    command != MLX5_IB_MMAP_NC_PAGE)
		return -EINVAL; /* core clock, clock info, device memory: not offered */
	if (vma->vm_end - vma->vm_start != PAGE_SIZE || idx >= context->num_static_sys_pages)
		return -EINVAL;
	page = context->uar_pages + idx * PAGE_SIZE;
	return rdma_user_mmap_io(ibcontext, vma, PHYS_PFN(virt_to_phys(page)), PAGE_SIZE,
				 vma->vm_page_prot, NULL);
}

/* main.c mlx5_ib_alloc_pd (2356 / 2535): the PD number in mlx5_ib_alloc_pd_resp */
static int mlx5_ib_alloc_pd(struct ib_pd *ibpd, struct ib_udata *udata)
{
	struct mlx5_ib_pd *pd = container_of(ibpd, struct mlx5_ib_pd, ibpd);
	struct mlx5_ib_ucontext *context = udata_to_mctx(udata);
	struct mlx5_ib_alloc_pd_resp resp = {};

	pd->pdn = (u32)atomic_inc_return(&to_mdev(ibpd->device)->next_pdn);
	pd->uid = context ? context->devx_uid : 0;
	if (udata) {
		resp.pdn = pd->pdn;
		if (ib_copy_to_udata(udata, &resp, sizeof(resp)))
			return -EFAULT;
	}
	return 0;
}

static int mlx5_ib_dealloc_pd(struct ib_pd *pd, struct ib_udata *udata)
{
	return 0;
}

/* ---- MRs (mr.c) ---- */

static struct ib_mr *mlx5_sim_new_mr(struct ib_pd *pd, struct ib_umem *umem,
				     enum gdrsim_reg_kind kind, u64 length, u64 iova)
{
	struct mlx5_ib_mr *mr = kzalloc(sizeof(*mr), GFP_KERNEL);
	u32 key;

	if (!mr) {
		gdrsim_umem_release(kind, umem);
		return ERR_PTR(-ENOMEM);
	}
	mr->umem = umem;
	mr->kind = kind;
	key = (u32)atomic_inc_return(&to_mdev(pd->device)->next_key) << 8;
	mr->ibmr.lkey = key;
	mr->ibmr.rkey = key;
	mr->ibmr.length = length;
	mr->ibmr.iova = iova;
	return &mr->ibmr;
}

/*
 * mr.c mlx5_ib_reg_user_mr (1424 / 1530): ib_umem_get(&dev->ib_dev, start, length, access);
 * MLNX_OFED (mlx5_ofed=1): ib_umem_get_peer(..., IB_PEER_MEM_INVAL_SUPP) (mr.c:1670).
 */
static struct ib_mr *mlx5_ib_reg_user_mr(struct ib_pd *pd, u64 start, u64 length, u64 iova,
					 int access_flags, struct ib_udata *udata)
{
	enum gdrsim_reg_kind kind = GDRSIM_REG_UMEM_GET;
	struct ib_umem *umem;

	if (access_flags & IB_ACCESS_ON_DEMAND)
		return ERR_PTR(-EOPNOTSUPP); /* ODP: not simulated */
	if (READ_ONCE(mlx5_ofed)) {
		kind = GDRSIM_REG_UMEM_GET_PEER;
		umem = ib_umem_get_peer(pd->device, start, length, access_flags,
					IB_PEER_MEM_INVAL_SUPP);
	} else {
		umem = ib_umem_get(pd->device, start, length, access_flags);
	}
	if (IS_ERR(umem))
		return ERR_CAST(umem);
	return mlx5_sim_new_mr(pd, umem, kind, length, iova);
}

/*
 * mr.c mlx5_ib_reg_user_mr_dmabuf (1465 / 1693): mlx5 imports the dma-buf movable
 * (ib_umem_dmabuf_get with move_notify, mapped through UMR); here pinned, with the real
 * ib_umem_dmabuf_get_pinned, as EFA.  The last argument: udata on 6.1, the bundle on 6.12.
 */
#if LINUX_VERSION_CODE >= KERNEL_VERSION(6, 12, 0)
static struct ib_mr *mlx5_ib_reg_user_mr_dmabuf(struct ib_pd *pd, u64 offset, u64 length,
						u64 virt_addr, int fd, int access_flags,
						struct uverbs_attr_bundle *attrs)
#else
static struct ib_mr *mlx5_ib_reg_user_mr_dmabuf(struct ib_pd *pd, u64 offset, u64 length,
						u64 virt_addr, int fd, int access_flags,
						struct ib_udata *udata)
#endif
{
	struct ib_umem_dmabuf *umem_dmabuf;

	umem_dmabuf = ib_umem_dmabuf_get_pinned(pd->device, offset, length, fd, access_flags);
	if (IS_ERR(umem_dmabuf))
		return ERR_CAST(umem_dmabuf);
	return mlx5_sim_new_mr(pd, &umem_dmabuf->umem, GDRSIM_REG_DMABUF, length, virt_addr);
}

static int mlx5_ib_dereg_mr(struct ib_mr *ibmr, struct ib_udata *udata)
{
	struct mlx5_ib_mr *mr = container_of(ibmr, struct mlx5_ib_mr, ibmr);

	gdrsim_umem_release(mr->kind, mr->umem);
	kfree(mr);
	return 0;
}

static struct ib_mr *mlx5_ib_get_dma_mr(struct ib_pd *pd, int acc)
{
	return ERR_PTR(-EOPNOTSUPP);
}

/* ---- DEVX UMEM (devx.c), with UVERBS_MODULE_NAME mlx5_ib as in mlx5 ---- */

/*
 * devx.c devx_umem_get (2199 / 2197): the dma-buf fd attribute (6.1+) makes it the real
 * ib_umem_dmabuf_get_pinned(dev, addr = offset, size, fd, access), else ib_umem_get(dev,
 * addr, size, access) (MLNX_OFED: ib_umem_get_peer(..., 0), devx.c:2270).
 */
static int devx_umem_get(struct mlx5_ib_dev *dev, struct ib_ucontext *ucontext,
			 struct uverbs_attr_bundle *attrs, struct devx_umem *obj, u32 access_flags)
{
	struct ib_umem_dmabuf *umem_dmabuf;
	int err, dmabuf_fd;
	size_t size;
	u64 addr;

	if (uverbs_copy_from(&addr, attrs, MLX5_IB_ATTR_DEVX_UMEM_REG_ADDR) ||
	    uverbs_copy_from(&size, attrs, MLX5_IB_ATTR_DEVX_UMEM_REG_LEN))
		return -EFAULT;
	err = ib_check_mr_access(&dev->ib_dev, access_flags);
	if (err)
		return err;
	if (uverbs_attr_is_valid(attrs, MLX5_IB_ATTR_DEVX_UMEM_REG_DMABUF_FD)) {
		if (uverbs_get_raw_fd(&dmabuf_fd, attrs, MLX5_IB_ATTR_DEVX_UMEM_REG_DMABUF_FD))
			return -EFAULT;
		umem_dmabuf = ib_umem_dmabuf_get_pinned(&dev->ib_dev, addr, size, dmabuf_fd,
							access_flags);
		if (IS_ERR(umem_dmabuf))
			return PTR_ERR(umem_dmabuf);
		obj->umem = &umem_dmabuf->umem;
		obj->kind = GDRSIM_REG_DMABUF;
		return 0;
	}
	obj->umem = mlx5_sim_umem_get(&dev->ib_dev, addr, size, access_flags, &obj->kind);
	return PTR_ERR_OR_ZERO(obj->umem);
}

/*
 * devx.c UVERBS_HANDLER(MLX5_IB_METHOD_DEVX_UMEM_REG) (2331 / 2329), the symbol
 * mlx5_ib_handler_MLX5_IB_METHOD_DEVX_UMEM_REG: a DEVX context only, the access flags, the
 * pin; the firmware's CREATE_UMEM (MTT list, page size from PGSZ_BITMAP) is left out, the
 * UMEM id is a counter.
 */
static GDRSIM_HOOK int UVERBS_HANDLER(MLX5_IB_METHOD_DEVX_UMEM_REG)(
	struct uverbs_attr_bundle *attrs)
{
	struct ib_uobject *uobj = uverbs_attr_get_uobject(attrs, MLX5_IB_ATTR_DEVX_UMEM_REG_HANDLE);
	struct mlx5_ib_ucontext *c = udata_to_mctx(&attrs->driver_udata);
	struct mlx5_ib_dev *dev = to_mdev(c->ibucontext.device);
	struct devx_umem *obj;
	u64 pgsz_bitmap;
	int access_flags;
	int err;

	if (!c->devx_uid)
		return -EINVAL;
	err = uverbs_get_flags32(&access_flags, attrs, MLX5_IB_ATTR_DEVX_UMEM_REG_ACCESS,
				 IB_ACCESS_LOCAL_WRITE | IB_ACCESS_REMOTE_WRITE |
				 IB_ACCESS_REMOTE_READ | IB_ACCESS_RELAXED_ORDERING);
	if (err)
		return err;
	/* devx_umem_reg_cmd_alloc: the page sizes the caller allows (4 KiB at least) */
	err = uverbs_get_const_default(&pgsz_bitmap, attrs, MLX5_IB_ATTR_DEVX_UMEM_REG_PGSZ_BITMAP,
				       GENMASK_ULL(63, MLX5_ADAPTER_PAGE_SHIFT));
	if (err)
		return err;
	if (!(pgsz_bitmap & GENMASK_ULL(63, MLX5_ADAPTER_PAGE_SHIFT)))
		return -EINVAL;
	obj = kzalloc(sizeof(*obj), GFP_KERNEL);
	if (!obj)
		return -ENOMEM;
	err = devx_umem_get(dev, &c->ibucontext, attrs, obj, access_flags);
	if (err) {
		kfree(obj);
		return err;
	}
	obj->id = (u32)atomic_inc_return(&dev->next_umem_id);
	uobj->object = obj;
	uverbs_finalize_uobj_create(attrs, MLX5_IB_ATTR_DEVX_UMEM_REG_HANDLE);
	return uverbs_copy_to(attrs, MLX5_IB_ATTR_DEVX_UMEM_REG_OUT_ID, &obj->id, sizeof(obj->id));
}

/* devx.c devx_umem_cleanup: (firmware DESTROY_UMEM and) the real ib_umem_release */
static int devx_umem_cleanup(struct ib_uobject *uobject, enum rdma_remove_reason why,
			     struct uverbs_attr_bundle *attrs)
{
	struct devx_umem *obj = uobject->object;

	gdrsim_umem_release(obj->kind, obj->umem);
	kfree(obj);
	return 0;
}

/* devx.c: the method and object declarations of MLX5_IB_OBJECT_DEVX_UMEM, as in v6.1/v6.12 */
DECLARE_UVERBS_NAMED_METHOD(
	MLX5_IB_METHOD_DEVX_UMEM_REG,
	UVERBS_ATTR_IDR(MLX5_IB_ATTR_DEVX_UMEM_REG_HANDLE, MLX5_IB_OBJECT_DEVX_UMEM,
			UVERBS_ACCESS_NEW, UA_MANDATORY),
	UVERBS_ATTR_PTR_IN(MLX5_IB_ATTR_DEVX_UMEM_REG_ADDR, UVERBS_ATTR_TYPE(u64), UA_MANDATORY),
	UVERBS_ATTR_PTR_IN(MLX5_IB_ATTR_DEVX_UMEM_REG_LEN, UVERBS_ATTR_TYPE(u64), UA_MANDATORY),
	UVERBS_ATTR_RAW_FD(MLX5_IB_ATTR_DEVX_UMEM_REG_DMABUF_FD, UA_OPTIONAL),
	UVERBS_ATTR_FLAGS_IN(MLX5_IB_ATTR_DEVX_UMEM_REG_ACCESS, enum ib_access_flags),
	UVERBS_ATTR_CONST_IN(MLX5_IB_ATTR_DEVX_UMEM_REG_PGSZ_BITMAP, u64),
	UVERBS_ATTR_PTR_OUT(MLX5_IB_ATTR_DEVX_UMEM_REG_OUT_ID, UVERBS_ATTR_TYPE(u32),
			    UA_MANDATORY));

DECLARE_UVERBS_NAMED_METHOD_DESTROY(
	MLX5_IB_METHOD_DEVX_UMEM_DEREG,
	UVERBS_ATTR_IDR(MLX5_IB_ATTR_DEVX_UMEM_DEREG_HANDLE, MLX5_IB_OBJECT_DEVX_UMEM,
			UVERBS_ACCESS_DESTROY, UA_MANDATORY));

DECLARE_UVERBS_NAMED_OBJECT(MLX5_IB_OBJECT_DEVX_UMEM,
			    UVERBS_TYPE_ALLOC_IDR(devx_umem_cleanup),
			    &UVERBS_METHOD(MLX5_IB_METHOD_DEVX_UMEM_REG),
			    &UVERBS_METHOD(MLX5_IB_METHOD_DEVX_UMEM_DEREG));

/* devx.c mlx5_ib_devx_defs, the UMEM object only (ib_device.driver_def) */
static const struct uapi_definition mlx5_sim_uapi_defs[] = {
	UAPI_DEF_CHAIN_OBJ_TREE_NAMED(MLX5_IB_OBJECT_DEVX_UMEM),
	{},
};

static const struct ib_device_ops mlx5_sim_ops = {
	.owner = THIS_MODULE,
	.driver_id = RDMA_DRIVER_MLX5,
	.uverbs_abi_ver = MLX5_IB_UVERBS_ABI_VERSION,

	.query_device = mlx5_ib_query_device,
	.query_port = mlx5_ib_query_port,
	.query_gid = mlx5_ib_query_gid,
	.query_pkey = mlx5_ib_query_pkey,
	.get_port_immutable = mlx5_port_immutable,
	.get_link_layer = mlx5_ib_port_link_layer,
	.alloc_ucontext = mlx5_ib_alloc_ucontext,
	.dealloc_ucontext = mlx5_ib_dealloc_ucontext,
	.mmap = mlx5_ib_mmap,
	.alloc_pd = mlx5_ib_alloc_pd,
	.dealloc_pd = mlx5_ib_dealloc_pd,
	.reg_user_mr = mlx5_ib_reg_user_mr,
	.reg_user_mr_dmabuf = mlx5_ib_reg_user_mr_dmabuf,
	.dereg_mr = mlx5_ib_dereg_mr,
	.get_dma_mr = mlx5_ib_get_dma_mr,

	INIT_RDMA_OBJ_SIZE(ib_ucontext, mlx5_ib_ucontext, ibucontext),
	INIT_RDMA_OBJ_SIZE(ib_pd, mlx5_ib_pd, ibpd),
};

/* registered like a hardware driver (main.c mlx5_ib_stage_ib_reg_init), uapi tree included */
int gdrsim_mlx5_init(struct device *dma_device)
{
	struct mlx5_ib_dev *dev;
	int ret;

	dev = ib_alloc_device(mlx5_ib_dev, ib_dev);
	if (!dev)
		return -ENOMEM;
	ida_init(&dev->devx_uids);
	atomic_set(&dev->next_qpn, 0x100); /* QPNs 0 and 1 are special */
	dev->ib_dev.node_type = RDMA_NODE_UNSPECIFIED;
	dev->ib_dev.phys_port_cnt = 1;
	dev->ib_dev.num_comp_vectors = 1;
	dev->ib_dev.node_guid = cpu_to_be64(0xb8cef603005a0001ULL);
	strscpy(dev->ib_dev.node_desc, "gdrsim simulated mlx5 NIC", sizeof(dev->ib_dev.node_desc));
	dev->ib_dev.driver_def = mlx5_sim_uapi_defs;
	ib_set_device_ops(&dev->ib_dev, &mlx5_sim_ops);
	ib_set_device_ops(&dev->ib_dev, &mlx5_sim_queue_ops);
	ret = ib_register_device(&dev->ib_dev, GDRSIM_MLX5_IBDEV_NAME, dma_device);
	if (ret) {
		ida_destroy(&dev->devx_uids);
		ib_dealloc_device(&dev->ib_dev);
		return ret;
	}
	gdrsim_mlx5 = dev;
	return 0;
}

void gdrsim_mlx5_exit(void)
{
	if (!gdrsim_mlx5)
		return;
	ib_unregister_device(&gdrsim_mlx5->ib_dev);
	ida_destroy(&gdrsim_mlx5->devx_uids);
	ib_dealloc_device(&gdrsim_mlx5->ib_dev);
	gdrsim_mlx5 = NULL;
}
