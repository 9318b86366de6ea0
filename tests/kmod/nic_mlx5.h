/* SPDX-License-Identifier: GPL-2.0 */
/*
 * gdrsim: what nic_mlx5.c ("mlx5_0": device, ucontext, UARs, PDs, MRs, doorbells, DEVX UMEMs)
 * and nic_mlx5_queues.c (its CQs, QPs, SRQs, WQs) share.  The structures carry the names of
 * drivers/infiniband/hw/mlx5's (mlx5_ib.h, doorbell.c, devx.c), reduced to what the
 * simulation keeps; their layouts are not mlx5's.
 */
#ifndef GDRSIM_NIC_MLX5_H
#define GDRSIM_NIC_MLX5_H

#include <rdma/ib_verbs.h>
#include <rdma/ib_umem.h>

#include "gdrsim.h"

/* mlx5_ib.h / qp.h constants */
#define MLX5_NON_FP_BFREGS_PER_UAR 2
#define MLX5_BFREGS_PER_UAR 4
#define MLX5_MAX_BFREGS 512 /* MLX5_MAX_UARS (256) * MLX5_NON_FP_BFREGS_PER_UAR */
#define NUM_NON_BLUE_FLAME_BFREGS 1
#define MLX5_IB_INVALID_BFREG BIT(31) /* resp.bfreg_index of a QP on the caller's UAR */
#define MLX5_SIM_NO_BFREG (-1)        /* qp->bfregn then */
#define MLX5_SEND_WQE_BB 64
#define MLX5_ADAPTER_PAGE_SHIFT 12
#define MLX5_SIM_LOG_MAX_QP_SZ 15 /* the "HCA capabilities" the answers below are made of */
#define MLX5_SIM_MAX_WQE_SZ 512

struct mlx5_ib_dev {
	struct ib_device ib_dev;
	struct ida devx_uids;
	atomic_t next_pdn, next_cqn, next_qpn, next_srqn, next_key, next_umem_id;
};

/* struct mlx5_ib_ucontext with its mlx5_bfreg_info, the legacy static-UAR part */
struct mlx5_ib_ucontext {
	struct ib_ucontext ibucontext;
	struct list_head db_page_list;
	struct mutex db_page_mutex;
	u16 devx_uid;
	struct mutex bfreg_lock;
	u32 total_num_bfregs, num_low_latency_bfregs, num_static_sys_pages;
	u32 *bfreg_count;
	void *uar_pages; /* num_static_sys_pages zeroed pages, the "UAR BAR pages" */
};

/* doorbell.c struct mlx5_ib_user_db_page (+ how its umem was pinned) */
struct mlx5_ib_user_db_page {
	struct list_head list;
	struct ib_umem *umem;
	enum gdrsim_reg_kind kind;
	unsigned long user_virt;
	int refcnt;
	struct mm_struct *mm;
};

/* mlx5_ib.h struct mlx5_db, user part */
struct mlx5_db {
	dma_addr_t dma;
	struct mlx5_ib_user_db_page *user_page;
};

/* a queue's ring pin and how it was made */
struct mlx5_sim_ubuf {
	struct ib_umem *umem;
	enum gdrsim_reg_kind kind;
};

struct mlx5_ib_pd {
	struct ib_pd ibpd;
	u32 pdn;
	u16 uid;
};

struct mlx5_ib_mr {
	struct ib_mr ibmr;
	struct ib_umem *umem;
	enum gdrsim_reg_kind kind;
};

/* each queue keeps its ucontext: the destroy paths need its doorbell page list */
struct mlx5_ib_cq {
	struct ib_cq ibcq;
	struct mlx5_ib_ucontext *ctx;
	struct mlx5_sim_ubuf buf;
	struct mlx5_db db;
	u32 cqn;
};

struct mlx5_ib_qp {
	struct ib_qp ibqp;
	struct mlx5_ib_ucontext *ctx;
	struct mlx5_sim_ubuf ubuffer;
	struct mlx5_db db;
	int bfregn;
	enum ib_qp_state state; /* what modify_qp last set (query_qp, rdma res show qp) */
};

struct mlx5_ib_srq {
	struct ib_srq ibsrq;
	struct mlx5_ib_ucontext *ctx;
	struct mlx5_sim_ubuf umem;
	struct mlx5_db db;
};

struct mlx5_ib_rwq {
	struct ib_wq ibwq;
	struct mlx5_ib_ucontext *ctx;
	struct mlx5_sim_ubuf umem;
	struct mlx5_db db;
};

/* devx.c struct devx_umem, without the firmware mailboxes */
struct devx_umem {
	struct ib_umem *umem;
	enum gdrsim_reg_kind kind;
	u32 id;
};

static inline struct mlx5_ib_dev *to_mdev(struct ib_device *ibdev)
{
	return container_of(ibdev, struct mlx5_ib_dev, ib_dev);
}

static inline struct mlx5_ib_ucontext *to_mucontext(struct ib_ucontext *uctx)
{
	return container_of(uctx, struct mlx5_ib_ucontext, ibucontext);
}

static inline struct mlx5_ib_ucontext *udata_to_mctx(struct ib_udata *udata)
{
	return rdma_udata_to_drv_context(udata, struct mlx5_ib_ucontext, ibucontext);
}

/* nic_mlx5.c: a ring's or doorbell page's pin (mainline ib_umem_get or, with mlx5_ofed=1,
 * MLNX_OFED's ib_umem_get_peer(dev, addr, size, access, 0)) and its release */
struct ib_umem *mlx5_sim_umem_get(struct ib_device *dev, unsigned long addr, size_t size,
				  int access, enum gdrsim_reg_kind *kind);
void mlx5_sim_ubuf_release(struct mlx5_sim_ubuf *b);
/* doorbell.c (global in mlx5_ib, not exported) */
int mlx5_ib_db_map_user(struct mlx5_ib_ucontext *context, unsigned long virt, struct mlx5_db *db);
void mlx5_ib_db_unmap_user(struct mlx5_ib_ucontext *context, struct mlx5_db *db);
/* nic_mlx5_queues.c */
extern const struct ib_device_ops mlx5_sim_queue_ops;

#endif /* GDRSIM_NIC_MLX5_H */
