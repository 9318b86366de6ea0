// SPDX-License-Identifier: GPL-2.0
/*
 * gdrsim: the queues of "efa_sim0" (nic_ibdev.c), so that a process posts work requests on its
 * GPU memory registrations through rdma-core's stock libefa, as an EFA user does.
 *
 * What each piece imitates. Kernel side: Amazon's EFA driver, drivers/infiniband/hw/efa/
 * efa_verbs.c (read at torvalds/linux 031616c4, older than 6.1; the names below are the same in
 * 6.1 and 6.12), and the uapi rdma/efa-abi.h of the Debian 6.1.0-57 and 6.12.118 headers this is
 * built against. User side: rdma-core v44.0 providers/efa/verbs.c and efa.c (read at that tag,
 * Debian bookworm's libefa).
 *   - efa_create_cq: the udata request (cq_entry_size, num_sub_cqs) and response (q_mmap_key,
 *     q_mmap_size, cq_idx); EFA's CQ buffer is host memory of PAGE_ALIGN(entry size * entries *
 *     sub CQs), handed out as an rdma_user_mmap_entry, and so is this one. libefa
 *     (create_cq) maps it read-only and polls it. It stays zero: a CQE's phase bit never
 *     matches, so ibv_poll_cq finds nothing (no completions: nothing is transferred).
 *   - efa_create_qp (UD or SRD; qp_mmap_entries_setup): four mmap entries, the rq ring
 *     (rq_ring_size), the rq and sq doorbells (a page each) and the LLQ descriptor ring
 *     (sq_ring_size). On EFA only the rq ring is host memory (EFA_MMAP_DMA_PAGE); the doorbells
 *     and the LLQ ring are the device's BAR (EFA_MMAP_IO_NC / EFA_MMAP_IO_WC). Here all four are
 *     host pages: libefa (efa_rq_initialize, efa_sq_initialize) maps them the same way, writes
 *     WQEs and rings doorbells into them, and nobody reads them.
 *   - efa_modify_qp accepts every transition (no device to tell); efa_create_ah answers an
 *     address handle number, which libefa's efa_create_ah requires in the udata response.
 *   - __efa_mmap: rdma_user_mmap_entry_get, then the entry's pages mapped; rdma_user_mmap_io of
 *     the whole range here (EFA inserts a DMA page entry page by page). Unlike EFA, which frees
 *     the rq ring at destroy_qp, the pages here go in mmap_free, once the last mapping is gone.
 * A send posted on such a QP goes nowhere: the SQ fills after its depth of work requests.
 */
#include <linux/module.h>
#include <linux/slab.h>
#include <linux/mm.h>
#include <linux/version.h>
#include <rdma/ib_verbs.h>
#include <rdma/uverbs_ioctl.h>
#include <rdma/efa-abi.h>

#include "gdrsim.h"

struct gdrsim_nic_mmap {
	struct rdma_user_mmap_entry entry;
	void *buf;
	size_t size;
};

struct gdrsim_nic_cq {
	struct ib_cq ibcq;
	struct gdrsim_nic_mmap *q;
};

enum { QP_RQ, QP_RQ_DB, QP_SQ_DB, QP_LLQ, QP_BUFS };

struct gdrsim_nic_qp {
	struct ib_qp ibqp;
	struct gdrsim_nic_mmap *buf[QP_BUFS];
};

struct gdrsim_nic_ah {
	struct ib_ah ibah;
};

static atomic_t next_cqn = ATOMIC_INIT(0);
static atomic_t next_qpn = ATOMIC_INIT(1);
static atomic_t next_ah = ATOMIC_INIT(0);

/* zeroed host pages behind an mmap key of the process's ucontext */
static struct gdrsim_nic_mmap *nic_mmap_new(struct ib_ucontext *uctx, size_t len, u64 *key)
{
	struct gdrsim_nic_mmap *m = kzalloc(sizeof(*m), GFP_KERNEL);

	if (!m)
		return ERR_PTR(-ENOMEM);
	m->size = PAGE_ALIGN(max_t(size_t, len, 1));
	m->buf = alloc_pages_exact(m->size, GFP_KERNEL | __GFP_ZERO);
	if (!m->buf) {
		kfree(m);
		return ERR_PTR(-ENOMEM);
	}
	if (rdma_user_mmap_entry_insert(uctx, &m->entry, m->size)) {
		free_pages_exact(m->buf, m->size);
		kfree(m);
		return ERR_PTR(-ENOMEM);
	}
	*key = rdma_user_mmap_get_offset(&m->entry);
	return m;
}

/* the pages go when the last mapping of them goes too (gdrsim_nic_mmap_free) */
static void nic_mmap_remove(struct gdrsim_nic_mmap *m)
{
	if (m)
		rdma_user_mmap_entry_remove(&m->entry);
}

static void gdrsim_nic_mmap_free(struct rdma_user_mmap_entry *entry)
{
	struct gdrsim_nic_mmap *m = container_of(entry, struct gdrsim_nic_mmap, entry);

	free_pages_exact(m->buf, m->size);
	kfree(m);
}

static int gdrsim_nic_mmap(struct ib_ucontext *uctx, struct vm_area_struct *vma)
{
	struct rdma_user_mmap_entry *entry = rdma_user_mmap_entry_get(uctx, vma);
	struct gdrsim_nic_mmap *m;
	int ret;

	if (!entry)
		return -EINVAL;
	m = container_of(entry, struct gdrsim_nic_mmap, entry);
	ret = rdma_user_mmap_io(uctx, vma, PHYS_PFN(virt_to_phys(m->buf)), m->size,
				vma->vm_page_prot, entry);
	rdma_user_mmap_entry_put(entry);
	return ret;
}

static int nic_create_cq(struct ib_cq *ibcq, const struct ib_cq_init_attr *attr,
			 struct ib_udata *udata)
{
	struct gdrsim_nic_cq *cq = container_of(ibcq, struct gdrsim_nic_cq, ibcq);
	struct efa_ibv_create_cq_resp resp = {};
	struct efa_ibv_create_cq cmd = {};
	struct ib_ucontext *uctx;
	int ret;

	if (!udata || !udata->inlen)
		return -EOPNOTSUPP; /* EFA has no kernel CQs */
	ret = ib_copy_from_udata(&cmd, udata, min(sizeof(cmd), udata->inlen));
	if (ret)
		return ret;
	if (!cmd.cq_entry_size || !cmd.num_sub_cqs || attr->cqe > 4096)
		return -EINVAL;
	uctx = rdma_udata_to_uverbs_attr_bundle(udata)->context;
	cq->q = nic_mmap_new(uctx, (size_t)cmd.cq_entry_size * attr->cqe * cmd.num_sub_cqs,
			     &resp.q_mmap_key);
	if (IS_ERR(cq->q)) {
		ret = PTR_ERR(cq->q);
		cq->q = NULL;
		return ret;
	}
	ibcq->cqe = attr->cqe;
	resp.q_mmap_size = cq->q->size;
	resp.cq_idx = (u16)atomic_inc_return(&next_cqn);
	ret = ib_copy_to_udata(udata, &resp, min(sizeof(resp), udata->outlen));
	if (ret) {
		nic_mmap_remove(cq->q);
		cq->q = NULL;
	}
	return ret;
}

/* the last argument: udata on 6.1, the attribute bundle on 6.12 (changed in 6.10) */
#if LINUX_VERSION_CODE >= KERNEL_VERSION(6, 10, 0)
static int gdrsim_nic_create_cq(struct ib_cq *ibcq, const struct ib_cq_init_attr *attr,
				struct uverbs_attr_bundle *attrs)
{
	return nic_create_cq(ibcq, attr, attrs ? &attrs->driver_udata : NULL);
}
#else
static int gdrsim_nic_create_cq(struct ib_cq *ibcq, const struct ib_cq_init_attr *attr,
				struct ib_udata *udata)
{
	return nic_create_cq(ibcq, attr, udata);
}
#endif

static int gdrsim_nic_destroy_cq(struct ib_cq *ibcq, struct ib_udata *udata)
{
	nic_mmap_remove(container_of(ibcq, struct gdrsim_nic_cq, ibcq)->q);
	return 0;
}

static int gdrsim_nic_poll_cq(struct ib_cq *cq, int n, struct ib_wc *wc)
{
	return 0;
}

static int gdrsim_nic_req_notify_cq(struct ib_cq *cq, enum ib_cq_notify_flags flags)
{
	return -EOPNOTSUPP;
}

static void nic_qp_free(struct gdrsim_nic_qp *qp)
{
	int i;

	for (i = 0; i < QP_BUFS; i++) {
		nic_mmap_remove(qp->buf[i]);
		qp->buf[i] = NULL;
	}
}

static int gdrsim_nic_create_qp(struct ib_qp *ibqp, struct ib_qp_init_attr *attr,
				struct ib_udata *udata)
{
	struct gdrsim_nic_qp *qp = container_of(ibqp, struct gdrsim_nic_qp, ibqp);
	struct efa_ibv_create_qp_resp resp = {};
	struct efa_ibv_create_qp cmd = {};
	struct ib_ucontext *uctx;
	size_t len[QP_BUFS];
	u64 *key[QP_BUFS] = { &resp.rq_mmap_key, &resp.rq_db_mmap_key, &resp.sq_db_mmap_key,
			      &resp.llq_desc_mmap_key };
	int i, ret;

	if (!udata || !udata->inlen)
		return -EOPNOTSUPP;
	if (attr->qp_type != IB_QPT_UD && attr->qp_type != IB_QPT_DRIVER)
		return -EOPNOTSUPP;
	ret = ib_copy_from_udata(&cmd, udata, min(sizeof(cmd), udata->inlen));
	if (ret)
		return ret;
	if (cmd.rq_ring_size > (1 << 20) || cmd.sq_ring_size > (1 << 20))
		return -EINVAL;
	len[QP_RQ] = cmd.rq_ring_size;
	len[QP_RQ_DB] = PAGE_SIZE;
	len[QP_SQ_DB] = PAGE_SIZE;
	len[QP_LLQ] = cmd.sq_ring_size;
	uctx = rdma_udata_to_uverbs_attr_bundle(udata)->context;
	for (i = 0; i < QP_BUFS; i++) {
		qp->buf[i] = nic_mmap_new(uctx, len[i], key[i]);
		if (IS_ERR(qp->buf[i])) {
			ret = PTR_ERR(qp->buf[i]);
			qp->buf[i] = NULL;
			nic_qp_free(qp);
			return ret;
		}
	}
	resp.rq_mmap_size = qp->buf[QP_RQ]->size;
	ibqp->qp_num = (u32)atomic_inc_return(&next_qpn) & 0xffffff;
	ret = ib_copy_to_udata(udata, &resp, min(sizeof(resp), udata->outlen));
	if (ret)
		nic_qp_free(qp);
	return ret;
}

static int gdrsim_nic_modify_qp(struct ib_qp *qp, struct ib_qp_attr *attr, int mask,
				struct ib_udata *udata)
{
	return 0;
}

static int gdrsim_nic_destroy_qp(struct ib_qp *ibqp, struct ib_udata *udata)
{
	nic_qp_free(container_of(ibqp, struct gdrsim_nic_qp, ibqp));
	return 0;
}

/* kernel consumers only (ib_post_send); libefa writes its WQEs itself */
static int gdrsim_nic_post_send(struct ib_qp *qp, const struct ib_send_wr *wr,
				const struct ib_send_wr **bad)
{
	*bad = wr;
	return -EOPNOTSUPP;
}

static int gdrsim_nic_post_recv(struct ib_qp *qp, const struct ib_recv_wr *wr,
				const struct ib_recv_wr **bad)
{
	*bad = wr;
	return -EOPNOTSUPP;
}

/* efa_create_ah: libefa needs the address handle number in the udata response */
static int gdrsim_nic_create_ah(struct ib_ah *ah, struct rdma_ah_init_attr *attr,
				struct ib_udata *udata)
{
	struct efa_ibv_create_ah_resp resp = {};

	if (!udata)
		return -EOPNOTSUPP;
	resp.efa_address_handle = (u16)atomic_inc_return(&next_ah);
	return ib_copy_to_udata(udata, &resp, min(sizeof(resp), udata->outlen));
}

static int gdrsim_nic_destroy_ah(struct ib_ah *ah, u32 flags)
{
	return 0;
}

const struct ib_device_ops gdrsim_nic_queue_ops = {
	.mmap = gdrsim_nic_mmap,
	.mmap_free = gdrsim_nic_mmap_free,
	.create_cq = gdrsim_nic_create_cq,
	.destroy_cq = gdrsim_nic_destroy_cq,
	.poll_cq = gdrsim_nic_poll_cq,
	.req_notify_cq = gdrsim_nic_req_notify_cq,
	.create_qp = gdrsim_nic_create_qp,
	.modify_qp = gdrsim_nic_modify_qp,
	.destroy_qp = gdrsim_nic_destroy_qp,
	.post_send = gdrsim_nic_post_send,
	.post_recv = gdrsim_nic_post_recv,
	.create_ah = gdrsim_nic_create_ah,
	.create_user_ah = gdrsim_nic_create_ah,
	.destroy_ah = gdrsim_nic_destroy_ah,

	INIT_RDMA_OBJ_SIZE(ib_ah, gdrsim_nic_ah, ibah),
	INIT_RDMA_OBJ_SIZE(ib_cq, gdrsim_nic_cq, ibcq),
	INIT_RDMA_OBJ_SIZE(ib_qp, gdrsim_nic_qp, ibqp),
};
