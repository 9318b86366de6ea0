// SPDX-License-Identifier: GPL-2.0
/*
 * gdrsim: a NIC registered with the running kernel's REAL ib_core, so that libibverbs opens it
 * and GPU memory registrations go through ibv_reg_mr / ibv_reg_dmabuf_mr like on a GPU node.
 *
 * The device ("efa_sim0") is allocated, set up and registered exactly as a hardware RDMA
 * driver does it (ib_alloc_device, ib_set_device_ops, ib_register_device with the module's
 * platform device, 64-bit DMA mask, as dma_device): it appears under /sys/class/infiniband,
 * ib_uverbs gives it /dev/infiniband/uverbsN, `rdma res show mr` lists its MRs.
 *
 * What each piece imitates:
 *   - The user ABI is the one of Amazon's EFA driver (drivers/infiniband/hw/efa/efa_verbs.c,
 *     uapi rdma/efa-abi.h): driver_id RDMA_DRIVER_EFA, uverbs ABI version 1, the
 *     alloc_ucontext / alloc_pd udata responses.  So rdma-core's stock libefa provider
 *     (providers/efa, rdma-core v44 in Debian bookworm) binds to it by driver id, and its
 *     reg_mr / reg_dmabuf_mr pass straight to the generic ibv_cmd_reg_mr /
 *     ibv_cmd_reg_dmabuf_mr.  EFA's node type and port look (RDMA_NODE_UNSPECIFIED, link layer
 *     unspecified, one port, one GID, one P_Key) are kept.
 *   - reg_user_mr is MLNX_OFED's mlx5_ib_reg_user_mr (drivers/infiniband/hw/mlx5/mr.c in
 *     MLNX_OFED 5.x/24.x): ib_umem_get_peer(dev, start, length, access,
 *     IB_PEER_MEM_ALLOW | IB_PEER_MEM_INVAL_SUPP), the simulated peer-memory ib_core of
 *     ib_peer_mem.c.  Host memory pins; GPU memory (a mmap of /dev/nvidia0) fails to pin and
 *     goes to nvidia-peermem's clients.  The flags are the module parameter
 *     efa_peer_mem_flags (default ALLOW | INVAL_SUPP, run-time writable: ALLOW alone is a
 *     NIC without invalidation support, for which ib_core skips the legacy nv_mem client).
 *   - reg_user_mr_dmabuf is EFA's efa_reg_user_mr_dmabuf: the running kernel's REAL
 *     ib_umem_dmabuf_get_pinned(dev, offset, length, fd, access).
 *   - dereg_mr releases like GDRSIM_IOC_RELEASE: the REAL ib_umem_release, then
 *     [ib_peer_umem_release] (MLNX_OFED's order).
 *   - The driver keeps its MRs by key, as a real one keeps its mkeys: GDRSIM_IOC_MR_INFO
 *     (gdrsim_nic_mr_info) tells a test what each umem is (host, peer and its client,
 *     invalidated, dma-buf), which ib_uverbs does not return to userspace.
 *   - CQs, UD/SRD QPs and AHs as EFA's, in nic_queues.c: libefa posts work requests into
 *     host pages nobody reads.
 * There is no hardware: lkey/rkey are counters, nothing is ever transferred or completed.
 */
#include <linux/module.h>
#include <linux/moduleparam.h>
#include <linux/slab.h>
#include <linux/xarray.h>
#include <linux/version.h>
#include <rdma/ib_verbs.h>
#include <rdma/ib_umem.h>
#include <rdma/efa-abi.h>

#include "gdrsim.h"

struct gdrsim_nic_dev {
	struct ib_device ibdev;
	atomic_t next_key;
	atomic_t next_pdn;
};

struct gdrsim_nic_ucontext {
	struct ib_ucontext ibucontext;
};

struct gdrsim_nic_pd {
	struct ib_pd ibpd;
	u16 pdn;
};

struct gdrsim_nic_mr {
	struct ib_mr ibmr;
	enum gdrsim_reg_kind kind;
	struct ib_umem *umem;
};

static struct gdrsim_nic_dev *gdrsim_nic;

/*
 * The peer_mem_flags reg_user_mr passes to ib_umem_get_peer: MLNX_OFED mlx5's
 * IB_PEER_MEM_ALLOW | IB_PEER_MEM_INVAL_SUPP unless a test says otherwise (read at each
 * registration; gdrsim-workload --flags sets it around one).  Only those two bits.
 */
static unsigned int efa_peer_mem_flags = IB_PEER_MEM_ALLOW | IB_PEER_MEM_INVAL_SUPP;

static int efa_peer_mem_flags_set(const char *val, const struct kernel_param *kp)
{
	unsigned int v;
	int ret = kstrtouint(val, 0, &v);

	if (ret)
		return ret;
	if (v & ~(unsigned int)(IB_PEER_MEM_ALLOW | IB_PEER_MEM_INVAL_SUPP))
		return -EINVAL;
	WRITE_ONCE(efa_peer_mem_flags, v);
	return 0;
}

static const struct kernel_param_ops efa_peer_mem_flags_ops = {
	.set = efa_peer_mem_flags_set,
	.get = param_get_uint,
};
module_param_cb(efa_peer_mem_flags, &efa_peer_mem_flags_ops, &efa_peer_mem_flags, 0644);
MODULE_PARM_DESC(efa_peer_mem_flags,
		 "peer_mem_flags of efa_sim0's reg_user_mr: 1 ALLOW, 2 INVAL_SUPP (default 3)");

/* the device's MRs by key index (lkey >> 8); the lock keeps one alive while it is described */
static DEFINE_XARRAY(gdrsim_nic_mrs);
static DEFINE_MUTEX(gdrsim_nic_mrs_lock);

static struct gdrsim_nic_dev *to_nic(struct ib_device *ibdev)
{
	return container_of(ibdev, struct gdrsim_nic_dev, ibdev);
}

static int gdrsim_nic_query_device(struct ib_device *ibdev, struct ib_device_attr *props,
				   struct ib_udata *udata)
{
	memset(props, 0, sizeof(*props));
	props->vendor_id = 0x1d0f; /* Amazon, as EFA reports */
	props->vendor_part_id = 0xefa1;
	props->fw_ver = 1;
	props->sys_image_guid = ibdev->node_guid;
	props->max_mr_size = 64ULL << 30;
	props->page_size_cap = PAGE_SIZE | (64 << 10) | (2 << 20);
	props->max_qp = 256;
	props->max_cq = 256;
	props->max_pd = 1 << 16;
	props->max_mr = 1 << 16;
	props->max_ah = 1024;
	props->max_cqe = 4096;
	props->max_qp_wr = 1024;
	props->max_send_sge = 2;
	props->max_recv_sge = 1;
	props->max_sge_rd = 1;
	/* efa_query_device: libefa's queue limits (efa_check_qp_limits) come from this udata */
	if (udata && udata->outlen) {
		struct efa_ibv_ex_query_device_resp resp = {
			.max_sq_wr = 1024,
			.max_rq_wr = 1024,
			.max_sq_sge = 2,
			.max_rq_sge = 1,
			.max_rdma_size = 1 << 30,
		};

		return ib_copy_to_udata(udata, &resp, min(sizeof(resp), udata->outlen));
	}
	return 0;
}

static int gdrsim_nic_query_port(struct ib_device *ibdev, u32 port, struct ib_port_attr *props)
{
	props->lmc = 1;
	props->state = IB_PORT_ACTIVE;
	props->phys_state = IB_PORT_PHYS_STATE_LINK_UP;
	props->gid_tbl_len = 1;
	props->pkey_tbl_len = 1;
	props->active_speed = IB_SPEED_EDR;
	props->active_width = IB_WIDTH_4X;
	props->max_mtu = IB_MTU_4096;
	props->active_mtu = IB_MTU_4096;
	props->max_msg_sz = 1 << 30;
	props->max_vl_num = 1;
	return 0;
}

static int gdrsim_nic_query_gid(struct ib_device *ibdev, u32 port, int index, union ib_gid *gid)
{
	memset(gid, 0, sizeof(*gid));
	gid->global.interface_id = ibdev->node_guid;
	return 0;
}

static int gdrsim_nic_query_pkey(struct ib_device *ibdev, u32 port, u16 index, u16 *pkey)
{
	if (index > 0)
		return -EINVAL;
	*pkey = 0xffff;
	return 0;
}

static int gdrsim_nic_get_port_immutable(struct ib_device *ibdev, u32 port,
					 struct ib_port_immutable *immutable)
{
	/* as gdrsim_nic_query_port says; core_cap_flags 0: no IB/RoCE/iWARP protocol (EFA) */
	immutable->pkey_tbl_len = 1;
	immutable->gid_tbl_len = 1;
	return 0;
}

static enum rdma_link_layer gdrsim_nic_link_layer(struct ib_device *ibdev, u32 port)
{
	return IB_LINK_LAYER_UNSPECIFIED;
}

/* efa_alloc_ucontext: libefa refuses a kernel without AH udata support; with the query_device
 * udata it learns its queue limits */
static int gdrsim_nic_alloc_ucontext(struct ib_ucontext *uctx, struct ib_udata *udata)
{
	struct efa_ibv_alloc_ucontext_resp resp = {
		.cmds_supp_udata_mask = EFA_USER_CMDS_SUPP_UDATA_QUERY_DEVICE |
					EFA_USER_CMDS_SUPP_UDATA_CREATE_AH,
		.sub_cqs_per_cq = 1,
		.inline_buf_size = 32,
		.max_llq_size = 1 << 16,
		.max_tx_batch = 0,
		.min_sq_wr = 1,
	};

	if (udata->outlen)
		return ib_copy_to_udata(udata, &resp, min(sizeof(resp), udata->outlen));
	return 0;
}

static void gdrsim_nic_dealloc_ucontext(struct ib_ucontext *uctx)
{
}

static int gdrsim_nic_alloc_pd(struct ib_pd *ibpd, struct ib_udata *udata)
{
	struct gdrsim_nic_pd *pd = container_of(ibpd, struct gdrsim_nic_pd, ibpd);
	struct efa_ibv_alloc_pd_resp resp = {};

	pd->pdn = (u16)atomic_inc_return(&to_nic(ibpd->device)->next_pdn);
	resp.pdn = pd->pdn;
	if (udata && udata->outlen)
		return ib_copy_to_udata(udata, &resp, min(sizeof(resp), udata->outlen));
	return 0;
}

static int gdrsim_nic_dealloc_pd(struct ib_pd *ibpd, struct ib_udata *udata)
{
	return 0;
}

/*
 * The MR as the core lists it (rdma res show mr): ib_uverbs sets length and iova after
 * reg_user_mr, but not after reg_user_mr_dmabuf, where the driver does (as EFA's does).
 */
static struct ib_mr *gdrsim_nic_new_mr(struct ib_pd *pd, enum gdrsim_reg_kind kind,
				       struct ib_umem *umem, u64 length, u64 iova)
{
	struct gdrsim_nic_mr *mr = kzalloc(sizeof(*mr), GFP_KERNEL);
	u32 key;
	int ret;

	if (!mr) {
		gdrsim_umem_release(kind, umem);
		return ERR_PTR(-ENOMEM);
	}
	mr->kind = kind;
	mr->umem = umem;
	key = (u32)atomic_inc_return(&to_nic(pd->device)->next_key) << 8;
	mr->ibmr.lkey = key;
	mr->ibmr.rkey = key;
	mr->ibmr.length = length;
	mr->ibmr.iova = iova;
	ret = xa_insert(&gdrsim_nic_mrs, key >> 8, mr, GFP_KERNEL);
	if (ret) {
		gdrsim_umem_release(kind, umem);
		kfree(mr);
		return ERR_PTR(ret);
	}
	return &mr->ibmr;
}

int gdrsim_nic_mr_info(struct gdrsim_mr_info *info)
{
	struct gdrsim_nic_mr *mr;
	int ret = -ENOENT;

	if (info->lkey & 0xff)
		return -ENOENT;
	mutex_lock(&gdrsim_nic_mrs_lock);
	mr = xa_load(&gdrsim_nic_mrs, info->lkey >> 8);
	if (mr && mr->ibmr.lkey == info->lkey) {
		gdrsim_umem_info(mr->kind, mr->umem, info);
		info->handle = mr->ibmr.lkey;
		ret = 0;
	}
	mutex_unlock(&gdrsim_nic_mrs_lock);
	return ret;
}

/* MLNX_OFED mlx5_ib_reg_user_mr: ib_umem_get_peer with ALLOW | INVAL_SUPP (efa_peer_mem_flags) */
static struct ib_mr *gdrsim_nic_reg_user_mr(struct ib_pd *pd, u64 start, u64 length,
					    u64 virt_addr, int access, struct ib_udata *udata)
{
	struct ib_umem *umem;

	umem = ib_umem_get_peer(pd->device, start, length, access, READ_ONCE(efa_peer_mem_flags));
	if (IS_ERR(umem))
		return ERR_CAST(umem);
	return gdrsim_nic_new_mr(pd, GDRSIM_REG_UMEM_GET_PEER, umem, length, virt_addr);
}

/* EFA efa_reg_user_mr_dmabuf: the kernel's real ib_umem_dmabuf_get_pinned */
static struct ib_mr *gdrsim_nic_reg_dmabuf(struct ib_pd *pd, u64 offset, u64 length,
					   u64 virt_addr, int fd, int access)
{
	struct ib_umem_dmabuf *umem_dmabuf;

	umem_dmabuf = ib_umem_dmabuf_get_pinned(pd->device, offset, length, fd, access);
	if (IS_ERR(umem_dmabuf))
		return ERR_CAST(umem_dmabuf);
	return gdrsim_nic_new_mr(pd, GDRSIM_REG_DMABUF, &umem_dmabuf->umem, length, virt_addr);
}

/* the last argument: udata on 6.1, the attribute bundle on 6.12 (changed in 6.12) */
#if LINUX_VERSION_CODE >= KERNEL_VERSION(6, 12, 0)
static struct ib_mr *gdrsim_nic_reg_user_mr_dmabuf(struct ib_pd *pd, u64 offset, u64 length,
						   u64 virt_addr, int fd, int access,
						   struct uverbs_attr_bundle *attrs)
#else
static struct ib_mr *gdrsim_nic_reg_user_mr_dmabuf(struct ib_pd *pd, u64 offset, u64 length,
						   u64 virt_addr, int fd, int access,
						   struct ib_udata *udata)
#endif
{
	return gdrsim_nic_reg_dmabuf(pd, offset, length, virt_addr, fd, access);
}

static int gdrsim_nic_dereg_mr(struct ib_mr *ibmr, struct ib_udata *udata)
{
	struct gdrsim_nic_mr *mr = container_of(ibmr, struct gdrsim_nic_mr, ibmr);

	mutex_lock(&gdrsim_nic_mrs_lock);
	xa_erase(&gdrsim_nic_mrs, ibmr->lkey >> 8);
	mutex_unlock(&gdrsim_nic_mrs_lock);
	gdrsim_umem_release(mr->kind, mr->umem);
	kfree(mr);
	return 0;
}

/* ---- verbs a NIC must have to register, not simulated here ---- */

static struct ib_mr *gdrsim_nic_get_dma_mr(struct ib_pd *pd, int access)
{
	return ERR_PTR(-EOPNOTSUPP);
}

static const struct ib_device_ops gdrsim_nic_ops = {
	.owner = THIS_MODULE,
	.driver_id = RDMA_DRIVER_EFA,
	.uverbs_abi_ver = EFA_UVERBS_ABI_VERSION,

	.query_device = gdrsim_nic_query_device,
	.query_port = gdrsim_nic_query_port,
	.query_gid = gdrsim_nic_query_gid,
	.query_pkey = gdrsim_nic_query_pkey,
	.get_port_immutable = gdrsim_nic_get_port_immutable,
	.get_link_layer = gdrsim_nic_link_layer,
	.alloc_ucontext = gdrsim_nic_alloc_ucontext,
	.dealloc_ucontext = gdrsim_nic_dealloc_ucontext,
	.alloc_pd = gdrsim_nic_alloc_pd,
	.dealloc_pd = gdrsim_nic_dealloc_pd,
	.reg_user_mr = gdrsim_nic_reg_user_mr,
	.reg_user_mr_dmabuf = gdrsim_nic_reg_user_mr_dmabuf,
	.dereg_mr = gdrsim_nic_dereg_mr,
	.get_dma_mr = gdrsim_nic_get_dma_mr,

	INIT_RDMA_OBJ_SIZE(ib_pd, gdrsim_nic_pd, ibpd),
	INIT_RDMA_OBJ_SIZE(ib_ucontext, gdrsim_nic_ucontext, ibucontext),
};

int gdrsim_nic_init(struct device *dma_device)
{
	struct gdrsim_nic_dev *nic;
	int ret;

	nic = ib_alloc_device(gdrsim_nic_dev, ibdev);
	if (!nic)
		return -ENOMEM;
	nic->ibdev.node_type = RDMA_NODE_UNSPECIFIED;
	nic->ibdev.phys_port_cnt = 1;
	nic->ibdev.num_comp_vectors = 1;
	nic->ibdev.node_guid = cpu_to_be64(0x0d1fefa0aa000001ULL);
	strscpy(nic->ibdev.node_desc, "gdrsim simulated NIC", sizeof(nic->ibdev.node_desc));
	ib_set_device_ops(&nic->ibdev, &gdrsim_nic_ops);
	ib_set_device_ops(&nic->ibdev, &gdrsim_nic_queue_ops);
	ret = ib_register_device(&nic->ibdev, GDRSIM_IBDEV_NAME, dma_device);
	if (ret) {
		ib_dealloc_device(&nic->ibdev);
		return ret;
	}
	gdrsim_nic = nic;
	return 0;
}

void gdrsim_nic_exit(void)
{
	if (!gdrsim_nic)
		return;
	ib_unregister_device(&gdrsim_nic->ibdev); /* deregisters every MR left */
	ib_dealloc_device(&gdrsim_nic->ibdev);
	gdrsim_nic = NULL;
	xa_destroy(&gdrsim_nic_mrs);
}
