// SPDX-License-Identifier: GPL-2.0
/*
 * gdrsim: the queues of "mlx5_0" (nic_mlx5.c): CQs, RC QPs, SRQs and WQs with mlx5's udata
 * (uapi rdma/mlx5-abi.h: struct mlx5_ib_create_cq / _qp / _srq / _wq and their responses)
 * and mlx5's pins.  As on mlx5, every ring and doorbell record is USER memory that libmlx5
 * allocated (or a parent domain's allocator gave it: GPU memory for a GPU-resident queue);
 * the kernel pins it: the ring with one umem, the doorbell record's page through
 * mlx5_ib_db_map_user (shared by the queues whose records are on it).
 *
 * Mirrors torvalds/linux drivers/infiniband/hw/mlx5/{cq.c,qp.c,srq.c} at v6.1 and v6.12
 * (Debian linux-source 6.1.192 / 6.12.118; line numbers 6.1 / 6.12), with the firmware
 * commands (CREATE_CQ/QP/SRQ/RQ mailboxes, EQs, UAR indexes, PAS lists) left out: queue
 * numbers are counters, every QP/WQ state transition is accepted, nothing is polled.  With
 * mlx5_ofed=1 the pins are MLNX_OFED's ib_umem_get_peer(..., 0) (mlx5_sim_umem_get).
 */
#include <linux/module.h>
#include <linux/slab.h>
#include <linux/log2.h>
#include <linux/overflow.h>
#include <linux/version.h>
#include <rdma/ib_verbs.h>
#include <rdma/ib_umem.h>
#include <rdma/uverbs_ioctl.h>
#include <rdma/mlx5-abi.h>

#include "gdrsim.h"
#include "nic_mlx5.h"

/* ---- CQ (cq.c) ---- */

/*
 * cq.c create_cq_user (713 / 719; 8 arguments on 6.1, + attrs on 6.12; the firmware outputs
 * cqb/index/inlen left out): the CQ buffer, entries * cqe_size bytes, LOCAL_WRITE, then the
 * doorbell record.
 */
static GDRSIM_HOOK int create_cq_user(struct mlx5_ib_dev *dev, struct ib_udata *udata,
				      struct mlx5_ib_cq *cq, int entries, int *cqe_size)
{
	struct mlx5_ib_ucontext *context = udata_to_mctx(udata);
	struct mlx5_ib_create_cq ucmd = {};
	size_t ucmdlen = min(udata->inlen, sizeof(ucmd));
	int err;

	if (ucmdlen < offsetof(struct mlx5_ib_create_cq, flags))
		return -EINVAL;
	if (ib_copy_from_udata(&ucmd, udata, ucmdlen))
		return -EFAULT;
	if (ucmd.flags & ~(MLX5_IB_CREATE_CQ_FLAGS_CQE_128B_PAD |
			   MLX5_IB_CREATE_CQ_FLAGS_UAR_PAGE_INDEX |
			   MLX5_IB_CREATE_CQ_FLAGS_REAL_TIME_TS))
		return -EINVAL;
	if ((ucmd.cqe_size != 64 && ucmd.cqe_size != 128) || ucmd.reserved0 || ucmd.reserved1)
		return -EINVAL;
	if (ucmd.cqe_comp_en)
		return -EOPNOTSUPP; /* no cqe_compression capability */
	*cqe_size = ucmd.cqe_size;
	cq->buf.umem = mlx5_sim_umem_get(&dev->ib_dev, ucmd.buf_addr, entries * ucmd.cqe_size,
					 IB_ACCESS_LOCAL_WRITE, &cq->buf.kind);
	if (IS_ERR(cq->buf.umem)) {
		err = PTR_ERR(cq->buf.umem);
		cq->buf.umem = NULL;
		return err;
	}
	err = mlx5_ib_db_map_user(context, ucmd.db_addr, &cq->db);
	if (err) {
		mlx5_sim_ubuf_release(&cq->buf);
		return err;
	}
	cq->ctx = context;
	return 0;
}

/* cq.c destroy_cq_user: doorbell, then the CQ buffer */
static void destroy_cq_user(struct mlx5_ib_cq *cq)
{
	mlx5_ib_db_unmap_user(cq->ctx, &cq->db);
	mlx5_sim_ubuf_release(&cq->buf);
}

/* cq.c mlx5_ib_create_cq (942 / 953): entries = roundup_pow_of_two(cqe + 1); {cqn} back */
static int mlx5_sim_create_cq(struct ib_cq *ibcq, const struct ib_cq_init_attr *attr,
			      struct ib_udata *udata)
{
	struct mlx5_ib_cq *cq = container_of(ibcq, struct mlx5_ib_cq, ibcq);
	struct mlx5_ib_dev *dev = to_mdev(ibcq->device);
	int entries = attr->cqe, cqe_size, err;

	if (!udata)
		return -EOPNOTSUPP; /* kernel CQs (create_cq_kernel): not simulated */
	if (entries < 0 || entries > (1 << 22))
		return -EINVAL;
	if (attr->flags & ~(IB_UVERBS_CQ_FLAGS_TIMESTAMP_COMPLETION |
			    IB_UVERBS_CQ_FLAGS_IGNORE_OVERRUN))
		return -EOPNOTSUPP; /* check_cq_create_flags */
	entries = roundup_pow_of_two(entries + 1);
	if (entries > (1 << 22))
		return -EINVAL;
	ibcq->cqe = entries - 1;
	err = create_cq_user(dev, udata, cq, entries, &cqe_size);
	if (err)
		return err;
	cq->cqn = (u32)atomic_inc_return(&dev->next_cqn) & 0xffffff;
	/* mlx5 copies the cqn alone (struct mlx5_ib_create_cq_resp starts with it) */
	if (ib_copy_to_udata(udata, &cq->cqn, sizeof(__u32))) {
		destroy_cq_user(cq);
		return -EFAULT;
	}
	return 0;
}

/* the last argument: udata on 6.1, the attribute bundle on 6.12 (changed in 6.10) */
#if LINUX_VERSION_CODE >= KERNEL_VERSION(6, 10, 0)
static int mlx5_ib_create_cq(struct ib_cq *ibcq, const struct ib_cq_init_attr *attr,
			     struct uverbs_attr_bundle *attrs)
{
	return mlx5_sim_create_cq(ibcq, attr, attrs ? &attrs->driver_udata : NULL);
}
#else
static int mlx5_ib_create_cq(struct ib_cq *ibcq, const struct ib_cq_init_attr *attr,
			     struct ib_udata *udata)
{
	return mlx5_sim_create_cq(ibcq, attr, udata);
}
#endif

static int mlx5_ib_destroy_cq(struct ib_cq *ibcq, struct ib_udata *udata)
{
	destroy_cq_user(container_of(ibcq, struct mlx5_ib_cq, ibcq));
	return 0;
}

/* libmlx5 polls its CQ buffer itself; kernel consumers only */
static int mlx5_ib_poll_cq(struct ib_cq *ibcq, int num_entries, struct ib_wc *wc)
{
	return 0;
}

static int mlx5_ib_arm_cq(struct ib_cq *ibcq, enum ib_cq_notify_flags flags)
{
	return -EOPNOTSUPP;
}

/* ---- blue flame registers (qp.c alloc_bfreg, 6.1 = 6.12) ---- */

static int num_med_bfreg(struct mlx5_ib_ucontext *c)
{
	int n = (int)c->total_num_bfregs - (int)c->num_low_latency_bfregs -
		NUM_NON_BLUE_FLAME_BFREGS;

	return n >= 0 ? n : 0;
}

/* alloc_bfreg (ver 2): a free low-latency bfreg, else the least used medium one, else 0 */
static int alloc_bfreg(struct mlx5_ib_ucontext *c)
{
	int first_hi = num_med_bfreg(c) + 1, i, minidx = -1;

	mutex_lock(&c->bfreg_lock);
	for (i = first_hi; i < (int)c->total_num_bfregs; i++) {
		if (!c->bfreg_count[i]) {
			minidx = i;
			goto out;
		}
	}
	if (num_med_bfreg(c)) {
		minidx = 1;
		for (i = 1; i < first_hi; i++) {
			if (c->bfreg_count[i] < c->bfreg_count[minidx])
				minidx = i;
			if (!c->bfreg_count[minidx])
				break;
		}
	} else {
		minidx = 0;
	}
out:
	c->bfreg_count[minidx]++;
	mutex_unlock(&c->bfreg_lock);
	return minidx;
}

static void mlx5_ib_free_bfreg(struct mlx5_ib_ucontext *c, int bfregn)
{
	mutex_lock(&c->bfreg_lock);
	c->bfreg_count[bfregn]--;
	mutex_unlock(&c->bfreg_lock);
}

/* qp.c adjust_bfregn: the index into libmlx5's bfs[] (4 per UAR, 2 of them non fast-path) */
static int adjust_bfregn(int bfregn)
{
	return bfregn / MLX5_NON_FP_BFREGS_PER_UAR * MLX5_BFREGS_PER_UAR +
	       bfregn % MLX5_NON_FP_BFREGS_PER_UAR;
}

/* ---- QP (qp.c) ---- */

/*
 * qp.c _create_user_qp (903 / 949; 10 arguments there) with set_rq_size and set_user_buf_size:
 * one buffer, RQ first, (rq_wqe_count << rq_wqe_shift) + (sq_wqe_count << 6) bytes, access 0,
 * pinned when buf_addr and the size are not 0; a bfreg unless the caller picked a UAR; then
 * the doorbell record.
 */
static GDRSIM_HOOK int _create_user_qp(struct mlx5_ib_dev *dev, struct mlx5_ib_qp *qp,
				       struct ib_udata *udata, struct ib_qp_init_attr *attr,
				       struct mlx5_ib_create_qp_resp *resp,
				       struct mlx5_ib_create_qp *ucmd)
{
	struct mlx5_ib_ucontext *context = udata_to_mctx(udata);
	u32 rq_wqe_cnt = 0, rq_wqe_shift = 0, rq_size, sq_size, buf_size;
	int err;

	if (!attr->srq) { /* set_rq_size with a user command */
		rq_wqe_cnt = ucmd->rq_wqe_count;
		rq_wqe_shift = ucmd->rq_wqe_shift;
		if (rq_wqe_shift > 30 || rq_wqe_cnt > (1 << MLX5_SIM_LOG_MAX_QP_SZ))
			return -EINVAL;
	}
	if (ucmd->sq_wqe_count && !is_power_of_2(ucmd->sq_wqe_count))
		return -EINVAL;
	if (ucmd->sq_wqe_count > (1 << MLX5_SIM_LOG_MAX_QP_SZ))
		return -EINVAL;
	if (check_shl_overflow(rq_wqe_cnt, rq_wqe_shift, &rq_size) ||
	    check_shl_overflow(ucmd->sq_wqe_count, 6, &sq_size) ||
	    check_add_overflow(rq_size, sq_size, &buf_size))
		return -EINVAL;

	if (ucmd->flags & (MLX5_QP_FLAG_UAR_PAGE_INDEX | MLX5_QP_FLAG_BFREG_INDEX)) {
		qp->bfregn = MLX5_SIM_NO_BFREG; /* the caller's UAR (dynamic UARs) */
		resp->bfreg_index = MLX5_IB_INVALID_BFREG;
	} else {
		qp->bfregn = alloc_bfreg(context);
		resp->bfreg_index = adjust_bfregn(qp->bfregn);
	}
	if (ucmd->buf_addr && buf_size) {
		qp->ubuffer.umem = mlx5_sim_umem_get(&dev->ib_dev, ucmd->buf_addr, buf_size, 0,
						     &qp->ubuffer.kind);
		if (IS_ERR(qp->ubuffer.umem)) {
			err = PTR_ERR(qp->ubuffer.umem);
			qp->ubuffer.umem = NULL;
			goto err_bfreg;
		}
	}
	err = mlx5_ib_db_map_user(context, ucmd->db_addr, &qp->db);
	if (err)
		goto err_umem;
	qp->ctx = context;
	return 0;

err_umem:
	mlx5_sim_ubuf_release(&qp->ubuffer);
err_bfreg:
	if (qp->bfregn != MLX5_SIM_NO_BFREG)
		mlx5_ib_free_bfreg(context, qp->bfregn);
	return err;
}

/* qp.c destroy_qp, user part: doorbell, buffer, bfreg */
static void destroy_user_qp(struct mlx5_ib_qp *qp)
{
	mlx5_ib_db_unmap_user(qp->ctx, &qp->db);
	mlx5_sim_ubuf_release(&qp->ubuffer);
	if (qp->bfregn != MLX5_SIM_NO_BFREG)
		mlx5_ib_free_bfreg(qp->ctx, qp->bfregn);
}

/* qp.c mlx5_ib_create_qp (3203 / 3241) -> create_qp -> create_user_qp, RC only */
static int mlx5_ib_create_qp(struct ib_qp *ibqp, struct ib_qp_init_attr *attr,
			     struct ib_udata *udata)
{
	struct mlx5_ib_qp *qp = container_of(ibqp, struct mlx5_ib_qp, ibqp);
	struct mlx5_ib_dev *dev = to_mdev(ibqp->device);
	struct mlx5_ib_create_qp_resp resp = {};
	struct mlx5_ib_create_qp ucmd = {};
	int err;

	if (!udata)
		return -EOPNOTSUPP; /* kernel QPs: not simulated */
	if (attr->qp_type != IB_QPT_RC)
		return -EOPNOTSUPP;
	if (ib_copy_from_udata(&ucmd, udata, min(udata->inlen, sizeof(ucmd))))
		return -EFAULT;
	/* process_vendor_flags, the flags a plain RC QP may carry */
	if (ucmd.flags & ~(MLX5_QP_FLAG_SIGNATURE | MLX5_QP_FLAG_SCATTER_CQE |
			   MLX5_QP_FLAG_ALLOW_SCATTER_CQE | MLX5_QP_FLAG_BFREG_INDEX |
			   MLX5_QP_FLAG_UAR_PAGE_INDEX))
		return -EINVAL;
	err = _create_user_qp(dev, qp, udata, attr, &resp, &ucmd);
	if (err)
		return err;
	ibqp->qp_num = (u32)atomic_inc_return(&dev->next_qpn) & 0xffffff;
	qp->state = IB_QPS_RESET;
	err = ib_copy_to_udata(udata, &resp, min(udata->outlen, sizeof(resp)));
	if (err) {
		destroy_user_qp(qp);
		return err;
	}
	return 0;
}

/* no firmware to move: every transition is accepted */
static int mlx5_ib_modify_qp(struct ib_qp *ibqp, struct ib_qp_attr *attr, int attr_mask,
			     struct ib_udata *udata)
{
	if (attr_mask & IB_QP_STATE)
		container_of(ibqp, struct mlx5_ib_qp, ibqp)->state = attr->qp_state;
	return 0;
}

/* qp.c mlx5_ib_query_qp, what nldev's fill_res_qp_entry (rdma res show qp) reads */
static int mlx5_ib_query_qp(struct ib_qp *ibqp, struct ib_qp_attr *qp_attr, int qp_attr_mask,
			    struct ib_qp_init_attr *qp_init_attr)
{
	struct mlx5_ib_qp *qp = container_of(ibqp, struct mlx5_ib_qp, ibqp);

	memset(qp_attr, 0, sizeof(*qp_attr));
	memset(qp_init_attr, 0, sizeof(*qp_init_attr));
	qp_attr->qp_state = qp_attr->cur_qp_state = qp->state;
	qp_attr->path_mtu = IB_MTU_4096;
	qp_attr->path_mig_state = IB_MIG_ARMED;
	qp_attr->port_num = 1;
	qp_init_attr->qp_type = ibqp->qp_type;
	qp_init_attr->send_cq = ibqp->send_cq;
	qp_init_attr->recv_cq = ibqp->recv_cq;
	qp_init_attr->srq = ibqp->srq;
	return 0;
}

static int mlx5_ib_destroy_qp(struct ib_qp *ibqp, struct ib_udata *udata)
{
	destroy_user_qp(container_of(ibqp, struct mlx5_ib_qp, ibqp));
	return 0;
}

/* kernel consumers only: libmlx5 writes its WQEs and rings its doorbells itself */
static int mlx5_ib_post_send(struct ib_qp *ibqp, const struct ib_send_wr *wr,
			     const struct ib_send_wr **bad_wr)
{
	*bad_wr = wr;
	return -EOPNOTSUPP;
}

static int mlx5_ib_post_recv(struct ib_qp *ibqp, const struct ib_recv_wr *wr,
			     const struct ib_recv_wr **bad_wr)
{
	*bad_wr = wr;
	return -EOPNOTSUPP;
}

/* ---- SRQ (srq.c, 6.1 = 6.12) ---- */

/* srq.c create_srq_user (43): the WQE buffer (buf_size, access 0), then the doorbell */
static GDRSIM_HOOK int create_srq_user(struct ib_pd *pd, struct mlx5_ib_srq *srq,
				       struct ib_udata *udata, int buf_size)
{
	struct mlx5_ib_ucontext *ucontext = udata_to_mctx(udata);
	struct mlx5_ib_create_srq ucmd = {};
	int err;

	if (ib_copy_from_udata(&ucmd, udata, min(udata->inlen, sizeof(ucmd))))
		return -EFAULT;
	if (ucmd.reserved0 || ucmd.reserved1)
		return -EINVAL;
	srq->umem.umem = mlx5_sim_umem_get(pd->device, ucmd.buf_addr, buf_size, 0, &srq->umem.kind);
	if (IS_ERR(srq->umem.umem)) {
		err = PTR_ERR(srq->umem.umem);
		srq->umem.umem = NULL;
		return err;
	}
	err = mlx5_ib_db_map_user(ucontext, ucmd.db_addr, &srq->db);
	if (err) {
		mlx5_sim_ubuf_release(&srq->umem);
		return err;
	}
	srq->ctx = ucontext;
	return 0;
}

static void destroy_srq_user(struct mlx5_ib_srq *srq)
{
	mlx5_ib_db_unmap_user(srq->ctx, &srq->db);
	mlx5_sim_ubuf_release(&srq->umem);
}

/*
 * srq.c mlx5_ib_create_srq (191): max = roundup_pow_of_two(max_wr + 1) WQEs of
 * max(32, roundup_pow_of_two(16 + 16 * max_sge)) bytes; {srqn} back.
 */
static int mlx5_ib_create_srq(struct ib_srq *ib_srq, struct ib_srq_init_attr *init_attr,
			      struct ib_udata *udata)
{
	struct mlx5_ib_srq *srq = container_of(ib_srq, struct mlx5_ib_srq, ibsrq);
	struct mlx5_ib_dev *dev = to_mdev(ib_srq->device);
	struct mlx5_ib_create_srq_resp resp = {};
	size_t desc_size, buf_size, max;
	int err;

	if (!udata)
		return -EOPNOTSUPP; /* kernel SRQs: not simulated */
	if (init_attr->srq_type != IB_SRQT_BASIC)
		return -EOPNOTSUPP; /* XRC and tag matching: not simulated */
	if (init_attr->attr.max_wr >= (1U << MLX5_SIM_LOG_MAX_QP_SZ) ||
	    init_attr->attr.max_sge > MLX5_SIM_MAX_WQE_SZ / 16)
		return -EINVAL;
	max = roundup_pow_of_two(init_attr->attr.max_wr + 1);
	desc_size = max_t(size_t, 32, roundup_pow_of_two(16 + 16 * init_attr->attr.max_sge));
	buf_size = max * desc_size;
	err = create_srq_user(ib_srq->pd, srq, udata, buf_size);
	if (err)
		return err;
	resp.srqn = (u32)atomic_inc_return(&dev->next_srqn) & 0xffffff;
	srq->ibsrq.ext.xrc.srq_num = resp.srqn;
	if (ib_copy_to_udata(udata, &resp, min(udata->outlen, sizeof(resp)))) {
		destroy_srq_user(srq);
		return -EFAULT;
	}
	init_attr->attr.max_wr = max - 1;
	return 0;
}

static int mlx5_ib_destroy_srq(struct ib_srq *ib_srq, struct ib_udata *udata)
{
	destroy_srq_user(container_of(ib_srq, struct mlx5_ib_srq, ibsrq));
	return 0;
}

/* ---- WQ (qp.c) ---- */

/* qp.c create_user_rq (842 / 888): the RQ buffer (wqe_count << wqe_shift, access 0), doorbell */
static GDRSIM_HOOK int create_user_rq(struct mlx5_ib_dev *dev, struct ib_udata *udata,
				      struct mlx5_ib_rwq *rwq, struct mlx5_ib_create_wq *ucmd,
				      size_t buf_size)
{
	struct mlx5_ib_ucontext *ucontext = udata_to_mctx(udata);
	int err;

	if (!ucmd->buf_addr)
		return -EINVAL;
	rwq->umem.umem = mlx5_sim_umem_get(&dev->ib_dev, ucmd->buf_addr, buf_size, 0,
					   &rwq->umem.kind);
	if (IS_ERR(rwq->umem.umem)) {
		err = PTR_ERR(rwq->umem.umem);
		rwq->umem.umem = NULL;
		return err;
	}
	err = mlx5_ib_db_map_user(ucontext, ucmd->db_addr, &rwq->db);
	if (err) {
		mlx5_sim_ubuf_release(&rwq->umem);
		return err;
	}
	rwq->ctx = ucontext;
	return 0;
}

/* qp.c prepare_user_rq + set_user_rq_size: the command, no striding RQ (no such capability) */
static int prepare_user_rq(struct ib_pd *pd, struct ib_wq_init_attr *init_attr,
			   struct ib_udata *udata, struct mlx5_ib_rwq *rwq)
{
	struct mlx5_ib_create_wq ucmd = {};
	size_t buf_size;

	if (udata->inlen < offsetofend(struct mlx5_ib_create_wq, single_stride_log_num_of_bytes))
		return -EINVAL;
	if (ib_copy_from_udata(&ucmd, udata, min(sizeof(ucmd), udata->inlen)))
		return -EFAULT;
	if (ucmd.comp_mask)
		return -EOPNOTSUPP;
	if (init_attr->max_wr > (1 << MLX5_SIM_LOG_MAX_QP_SZ) || !ucmd.rq_wqe_count)
		return -EINVAL;
	if (check_shl_overflow((size_t)ucmd.rq_wqe_count, ucmd.rq_wqe_shift, &buf_size))
		return -EINVAL;
	return create_user_rq(to_mdev(pd->device), udata, rwq, &ucmd, buf_size);
}

/* qp.c mlx5_ib_create_wq (5390 / 5434): IB_WQT_RQ; struct mlx5_ib_create_wq_resp back */
static struct ib_wq *mlx5_ib_create_wq(struct ib_pd *pd, struct ib_wq_init_attr *init_attr,
				       struct ib_udata *udata)
{
	struct mlx5_ib_create_wq_resp resp = {};
	struct mlx5_ib_rwq *rwq;
	int err;

	if (!udata)
		return ERR_PTR(-ENOSYS);
	if (udata->outlen && udata->outlen < offsetofend(struct mlx5_ib_create_wq_resp, reserved))
		return ERR_PTR(-EINVAL);
	if (init_attr->wq_type != IB_WQT_RQ)
		return ERR_PTR(-EINVAL);
	rwq = kzalloc(sizeof(*rwq), GFP_KERNEL);
	if (!rwq)
		return ERR_PTR(-ENOMEM);
	err = prepare_user_rq(pd, init_attr, udata, rwq);
	if (err) {
		kfree(rwq);
		return ERR_PTR(err);
	}
	rwq->ibwq.wq_num = (u32)atomic_inc_return(&to_mdev(pd->device)->next_qpn) & 0xffffff;
	rwq->ibwq.state = IB_WQS_RESET;
	if (udata->outlen) {
		resp.response_length = offsetofend(struct mlx5_ib_create_wq_resp, response_length);
		if (ib_copy_to_udata(udata, &resp, resp.response_length)) {
			mlx5_ib_db_unmap_user(rwq->ctx, &rwq->db);
			mlx5_sim_ubuf_release(&rwq->umem);
			kfree(rwq);
			return ERR_PTR(-EFAULT);
		}
	}
	return &rwq->ibwq;
}

static int mlx5_ib_modify_wq(struct ib_wq *wq, struct ib_wq_attr *wq_attr, u32 wq_attr_mask,
			     struct ib_udata *udata)
{
	return 0;
}

/* qp.c mlx5_ib_destroy_wq -> destroy_user_rq: doorbell, buffer */
static int mlx5_ib_destroy_wq(struct ib_wq *wq, struct ib_udata *udata)
{
	struct mlx5_ib_rwq *rwq = container_of(wq, struct mlx5_ib_rwq, ibwq);

	mlx5_ib_db_unmap_user(rwq->ctx, &rwq->db);
	mlx5_sim_ubuf_release(&rwq->umem);
	kfree(rwq);
	return 0;
}

const struct ib_device_ops mlx5_sim_queue_ops = {
	.create_cq = mlx5_ib_create_cq,
	.destroy_cq = mlx5_ib_destroy_cq,
	.poll_cq = mlx5_ib_poll_cq,
	.req_notify_cq = mlx5_ib_arm_cq,
	.create_qp = mlx5_ib_create_qp,
	.modify_qp = mlx5_ib_modify_qp,
	.query_qp = mlx5_ib_query_qp,
	.destroy_qp = mlx5_ib_destroy_qp,
	.post_send = mlx5_ib_post_send,
	.post_recv = mlx5_ib_post_recv,
	.create_srq = mlx5_ib_create_srq,
	.destroy_srq = mlx5_ib_destroy_srq,
	.create_wq = mlx5_ib_create_wq,
	.modify_wq = mlx5_ib_modify_wq,
	.destroy_wq = mlx5_ib_destroy_wq,

	INIT_RDMA_OBJ_SIZE(ib_cq, mlx5_ib_cq, ibcq),
	INIT_RDMA_OBJ_SIZE(ib_qp, mlx5_ib_qp, ibqp),
	INIT_RDMA_OBJ_SIZE(ib_srq, mlx5_ib_srq, ibsrq),
};
