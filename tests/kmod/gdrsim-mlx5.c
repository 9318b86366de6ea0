// SPDX-License-Identifier: GPL-2.0 OR MIT
/*
 * gdrsim-workload, the libmlx5 half (built when <infiniband/mlx5dv.h> exists): queues and DEVX
 * UMEMs on the module's mlx5-shaped NIC (mlx5_0, tests/kmod/nic_mlx5.c; $GDRSIM_IBDEV picks
 * another) through rdma-core's stock libmlx5, the way RDMA libraries and GPU-initiated
 * networking (NVSHMEM IBGDA, DOCA GPUNetIO) make them.
 *
 *   mlx5-queues [--gpu-qp] [--gpu-dbr] [--cq-ex]
 *       a CQ, an RC QP, an SRQ, a WQ (IBV_WQT_RQ, on the CQ) and one ibv_reg_mr of 64 KiB of
 *       host memory; each queue's buffer and doorbell record as mlx5dv_init_obj tells them.
 *       --gpu-qp / --gpu-dbr: the QP's ring / doorbell record in GPU memory (a mmap of
 *       /dev/nvidia0), from a parent domain's allocator (ibv_alloc_parent_domain with
 *       IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS: libmlx5 asks it for MLX5DV_RES_TYPE_QP and
 *       _DBR), as a GPU-resident-queue library does; the kernel pins that only through
 *       MLNX_OFED's peer memory (gdrsim mlx5_ofed=1), mainline fails with EFAULT.
 *       --cq-ex: the CQ through ibv_create_cq_ex.
 *   devx-umem host|gpu|dmabuf SIZE
 *       mlx5dv_open_device(DEVX) and one DEVX UMEM of SIZE bytes: host memory, GPU memory
 *       (mlx5dv_devx_umem_reg: the peer path, mlx5_ofed=1), or GPU memory exported as a dma-buf
 *       (mlx5dv_devx_umem_reg_ex with MLX5DV_UMEM_MASK_DMABUF, addr = offset 0, the fd closed
 *       right after, as NVSHMEM does); deregistered.
 *   ibgda [--no-sys-admin] [HEAP_SIZE]
 *       what NVSHMEM's IBGDA transport does on an mlx5 NIC (src/modules/transport/ibgda/
 *       ibgda.cpp at v3.4.5-0 / 3.5.1), as far as the simulation goes: a DEVX context; the
 *       send ring and its doorbell record in GPU memory, each exported as a dma-buf and
 *       registered as a DEVX UMEM (ibgda_mobject_nic_map); a host CQ with ibv_create_cq (the
 *       receive side, "Create recv_cq on host memory"); the GPU heap (HEAP_SIZE, default
 *       2 MiB) registered once with ibv_reg_dmabuf_mr; then the NIC's doorbell (UAR) page
 *       mapped into the GPU, cudaHostRegister(uar, size, Portable|Mapped|IoMemory = 0x07)
 *       (ibgda_nic_mem_gpu_map), here cuMemHostRegister_v2 of the test libcuda on the CQ's
 *       UAR page.  When that fails, NVSHMEM's two warnings go to stdout and the NIC handler is
 *       the CPU (CPU-assisted IBGDA: a proxy thread rings the doorbells).
 *       --no-sys-admin: CAP_SYS_ADMIN leaves the effective set before that call, so only
 *       nvidia.ko's PeerMappingOverride=1 (gdrsim nv_registry_dwords) allows it.
 * Each holds (--hold / --hold-stdin) and releases everything in reverse (unless --no-release).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <linux/capability.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <infiniband/verbs.h>
#include <infiniband/mlx5dv.h>

#include "gdrsim_uapi.h"
#include "gdrsim-workload.h"

#define QUEUE_DEPTH 64

struct mlx5_dev {
	struct ibv_device **list;
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	const char *name;
};

static const char *mlx5_device(void)
{
	const char *want = getenv("GDRSIM_IBDEV");

	return want ? want : GDRSIM_MLX5_IBDEV_NAME;
}

/* ibv_open_device, or mlx5dv_open_device(MLX5DV_CONTEXT_FLAGS_DEVX); then a PD */
static int mlx5_open(struct mlx5_dev *d, int devx)
{
	const char *want = mlx5_device(), *verb = devx ? "mlx5dv_open_device" : "ibv_open_device";
	struct mlx5dv_context_attr attr = { .flags = MLX5DV_CONTEXT_FLAGS_DEVX };
	int n, i;

	memset(d, 0, sizeof(*d));
	d->name = want;
	d->list = ibv_get_device_list(&n);
	errno = ENODEV;
	for (i = 0; d->list && i < n; i++) {
		if (strcmp(ibv_get_device_name(d->list[i]), want))
			continue;
		errno = EPROTONOSUPPORT; /* not an mlx5 device: no mlx5dv_init_obj */
		if (!mlx5dv_is_supported(d->list[i]))
			break;
		errno = 0;
		d->ctx = devx ? mlx5dv_open_device(d->list[i], &attr) : ibv_open_device(d->list[i]);
		break;
	}
	emit(verb, d->ctx != NULL, errno ? errno : ENODEV, S("device", want), B("devx", devx), NULL);
	if (!d->ctx)
		return -1;
	d->pd = ibv_alloc_pd(d->ctx);
	emit("ibv_alloc_pd", d->pd != NULL, errno, S("device", want), NULL);
	return d->pd ? 0 : -1;
}

static void mlx5_close(struct mlx5_dev *d)
{
	if (d->pd)
		ibv_dealloc_pd(d->pd);
	if (d->ctx)
		ibv_close_device(d->ctx);
	if (d->list)
		ibv_free_device_list(d->list);
}

/* the dma-buf exporter name of the loaded driver_branch: nv_dmabuf from 580, nvidia before */
static unsigned nvidia_exporter(void)
{
	FILE *f = fopen("/sys/module/gdrsim/parameters/driver_branch", "r");
	int branch = 580;

	if (f) {
		if (fscanf(f, "%d", &branch) != 1)
			branch = 580;
		fclose(f);
	}
	return branch >= 580 ? GDRSIM_EXPORTER_NV_DMABUF : GDRSIM_EXPORTER_NVIDIA;
}

/* ---------------------------------------------------------------- mlx5-queues */

/* a parent domain's allocator: GPU memory for the QP ring (and its doorbell record) */
struct gpu_allocs {
	int qp, dbr;
	unsigned n;
	struct { uint64_t va, len; } a[4];
};

static void *gpu_queue_alloc(struct ibv_pd *pd, void *pd_context, size_t size, size_t alignment,
			     uint64_t resource_type)
{
	struct gpu_allocs *g = pd_context;
	uint64_t len = gpu_round(size);

	if (!((resource_type == MLX5DV_RES_TYPE_QP && g->qp) ||
	      (resource_type == MLX5DV_RES_TYPE_DBR && g->dbr)) || g->n == 4)
		return IBV_ALLOCATOR_USE_DEFAULT;
	/* 2 MiB aligned: any alignment libmlx5 asks for (a power of two up to the ring size) */
	g->a[g->n].va = gpu_alloc(len);
	g->a[g->n].len = len;
	return (void *)(uintptr_t)g->a[g->n++].va;
}

static void gpu_queue_free(struct ibv_pd *pd, void *pd_context, void *ptr, uint64_t resource_type)
{
	struct gpu_allocs *g = pd_context;
	unsigned i;

	for (i = 0; i < g->n; i++) {
		if (g->a[i].va == (uintptr_t)ptr && g->a[i].len) {
			gpu_free(g->a[i].va, g->a[i].len);
			g->a[i].len = 0;
		}
	}
}

static struct ibv_cq *create_cq(struct mlx5_dev *d, int cq_ex)
{
	struct ibv_cq_init_attr_ex ax = { .cqe = QUEUE_DEPTH };
	struct mlx5dv_cq dv = { 0 };
	struct mlx5dv_obj obj = { .cq = { .out = &dv } };
	struct ibv_cq_ex *cqx;
	struct ibv_cq *cq;

	if (cq_ex) {
		cqx = ibv_create_cq_ex(d->ctx, &ax);
		cq = cqx ? ibv_cq_ex_to_cq(cqx) : NULL;
	} else {
		cq = ibv_create_cq(d->ctx, QUEUE_DEPTH, NULL, NULL, 0);
	}
	if (cq)
		obj.cq.in = cq;
	if (cq && mlx5dv_init_obj(&obj, MLX5DV_OBJ_CQ))
		memset(&dv, 0, sizeof(dv));
	emit("ibv_create_cq", cq != NULL, errno, S("device", d->name),
	     S("verb", cq_ex ? "ibv_create_cq_ex" : "ibv_create_cq"), U("cqn", dv.cqn),
	     U("buf", (uintptr_t)dv.buf), U("cqe_cnt", dv.cqe_cnt), U("cqe_size", dv.cqe_size),
	     U("size", (uint64_t)dv.cqe_cnt * dv.cqe_size), U("dbrec", (uintptr_t)dv.dbrec),
	     U("uar", (uintptr_t)dv.cq_uar), NULL);
	return cq;
}

/* a destroy or dereg verb's result (they return an errno value) */
static void destroy(const char *action, int r, const char *key, uint64_t num)
{
	emit(action, r == 0, r, U(key, num), NULL);
}

static void dereg_mr(struct ibv_mr *mr, uint64_t addr, uint64_t size)
{
	int r = ibv_dereg_mr(mr);

	emit("ibv_dereg_mr", r == 0, r, U("addr", addr), U("size", size), NULL);
}

static uint32_t cqn_of(struct ibv_cq *cq)
{
	struct mlx5dv_cq dv = { 0 };
	struct mlx5dv_obj obj = { .cq = { .in = cq, .out = &dv } };

	return mlx5dv_init_obj(&obj, MLX5DV_OBJ_CQ) ? 0 : dv.cqn;
}

static int cmd_mlx5_queues(int argc, char **argv)
{
	struct gpu_allocs g = { 0 };
	struct ibv_parent_domain_init_attr pda = {
		.comp_mask = IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS |
			     IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT,
		.alloc = gpu_queue_alloc, .free = gpu_queue_free, .pd_context = &g,
	};
	struct ibv_qp_init_attr qia = { .qp_type = IBV_QPT_RC };
	struct ibv_srq_init_attr sia = { .attr = { .max_wr = QUEUE_DEPTH, .max_sge = 1 } };
	struct ibv_wq_init_attr wia = { .wq_type = IBV_WQT_RQ, .max_wr = QUEUE_DEPTH, .max_sge = 1 };
	struct mlx5dv_qp dqp = { 0 };
	struct mlx5dv_srq dsrq = { .comp_mask = MLX5DV_SRQ_MASK_SRQN };
	struct mlx5dv_rwq dwq = { 0 };
	struct mlx5dv_obj obj;
	struct ibv_pd *qp_pd = NULL;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_srq *srq;
	struct ibv_wq *wq;
	struct ibv_mr *mr;
	struct mlx5_dev d;
	uint64_t mr_len = 64 << 10, qp_size, srq_wqes;
	void *buf;
	int i, cq_ex = 0;

	for (i = 0; i < argc; i++) {
		if (!strcmp(argv[i], "--gpu-qp"))
			g.qp = 1;
		else if (!strcmp(argv[i], "--gpu-dbr"))
			g.dbr = 1;
		else if (!strcmp(argv[i], "--cq-ex"))
			cq_ex = 1;
		else
			return fprintf(stderr, "mlx5-queues: unknown option %s\n", argv[i]), 2;
	}
	if (g.qp || g.dbr)
		gpu_open();
	if (mlx5_open(&d, 0))
		return 1;
	cq = create_cq(&d, cq_ex);
	if (!cq)
		return 1;

	/* the RC QP: its own RQ, both queues on the CQ; from the parent domain for --gpu-* */
	qp_pd = d.pd;
	if (g.qp || g.dbr) {
		pda.pd = d.pd;
		qp_pd = ibv_alloc_parent_domain(d.ctx, &pda);
		emit("ibv_alloc_parent_domain", qp_pd != NULL, errno, S("device", d.name),
		     B("gpu_qp", g.qp), B("gpu_dbr", g.dbr), NULL);
		if (!qp_pd)
			return 1;
	}
	qia.send_cq = qia.recv_cq = cq;
	qia.cap.max_send_wr = qia.cap.max_recv_wr = QUEUE_DEPTH;
	qia.cap.max_send_sge = qia.cap.max_recv_sge = 1;
	errno = 0;
	qp = ibv_create_qp(qp_pd, &qia);
	obj = (struct mlx5dv_obj){ .qp = { .in = qp, .out = &dqp } };
	if (qp && mlx5dv_init_obj(&obj, MLX5DV_OBJ_QP))
		memset(&dqp, 0, sizeof(dqp));
	/* one buffer, RQ first (libmlx5 mlx5_alloc_qp_buf); the kernel pins all of it */
	qp_size = (uint64_t)dqp.rq.wqe_cnt * dqp.rq.stride + (uint64_t)dqp.sq.wqe_cnt * dqp.sq.stride;
	emit("ibv_create_qp", qp != NULL, errno, S("device", d.name), S("qp_type", "rc"),
	     U("qpn", qp ? qp->qp_num : 0), S("memory", g.qp ? "gpu" : "host"),
	     U("buf", (uintptr_t)(dqp.rq.wqe_cnt ? dqp.rq.buf : dqp.sq.buf)), U("size", qp_size),
	     U("sq_buf", (uintptr_t)dqp.sq.buf), U("sq_wqe_cnt", dqp.sq.wqe_cnt),
	     U("sq_stride", dqp.sq.stride), U("rq_buf", (uintptr_t)dqp.rq.buf),
	     U("rq_wqe_cnt", dqp.rq.wqe_cnt), U("rq_stride", dqp.rq.stride),
	     U("dbrec", (uintptr_t)dqp.dbrec), S("dbr_memory", g.dbr ? "gpu" : "host"),
	     U("bf_reg", (uintptr_t)dqp.bf.reg), U("bf_size", dqp.bf.size), NULL);

	errno = 0;
	srq = ibv_create_srq(d.pd, &sia);
	obj = (struct mlx5dv_obj){ .srq = { .in = srq, .out = &dsrq } };
	if (srq && mlx5dv_init_obj(&obj, MLX5DV_OBJ_SRQ))
		memset(&dsrq, 0, sizeof(dsrq));
	/* libmlx5 v44 mlx5_alloc_srq_buf: twice the WQEs asked for + 1 (its wait queue), pow2 */
	for (srq_wqes = 1; srq_wqes < 2 * QUEUE_DEPTH + 1; srq_wqes <<= 1)
		;
	emit("ibv_create_srq", srq != NULL, errno, S("device", d.name), U("srqn", dsrq.srqn),
	     U("buf", (uintptr_t)dsrq.buf), U("stride", dsrq.stride), U("wqe_cnt", srq_wqes),
	     U("size", srq_wqes * dsrq.stride), U("dbrec", (uintptr_t)dsrq.dbrec), NULL);

	wia.pd = d.pd;
	wia.cq = cq;
	errno = 0;
	wq = ibv_create_wq(d.ctx, &wia);
	obj = (struct mlx5dv_obj){ .rwq = { .in = wq, .out = &dwq } };
	if (wq && mlx5dv_init_obj(&obj, MLX5DV_OBJ_RWQ))
		memset(&dwq, 0, sizeof(dwq));
	emit("ibv_create_wq", wq != NULL, errno, S("device", d.name), U("wq_num", wq ? wq->wq_num : 0),
	     U("buf", (uintptr_t)dwq.buf), U("stride", dwq.stride), U("wqe_cnt", dwq.wqe_cnt),
	     U("size", (uint64_t)dwq.wqe_cnt * dwq.stride), U("dbrec", (uintptr_t)dwq.dbrec), NULL);

	buf = mmap(NULL, mr_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (buf == MAP_FAILED)
		return emit("host_alloc", 0, errno, U("size", mr_len), NULL), 1;
	memset(buf, 0x5a, mr_len);
	emit("host_alloc", 1, 0, U("addr", (uintptr_t)buf), U("size", mr_len), NULL);
	errno = 0;
	mr = ibv_reg_mr(d.pd, buf, mr_len, access_flags);
	emit("ibv_reg_mr", mr != NULL, errno, S("device", d.name), S("memory", "host"),
	     U("addr", (uintptr_t)buf), U("size", mr_len), U("access", access_flags),
	     U("lkey", mr ? mr->lkey : 0), U("rkey", mr ? mr->rkey : 0), NULL);

	hold();
	if (no_release)
		return failures ? 1 : 0;
	if (mr)
		dereg_mr(mr, (uintptr_t)buf, mr_len);
	if (wq) {
		uint32_t num = wq->wq_num;

		destroy("ibv_destroy_wq", ibv_destroy_wq(wq), "wq_num", num);
	}
	if (srq)
		destroy("ibv_destroy_srq", ibv_destroy_srq(srq), "srqn", dsrq.srqn);
	if (qp) {
		uint32_t num = qp->qp_num;

		/* libmlx5 hands GPU rings back to the parent domain's free: gpu_free */
		destroy("ibv_destroy_qp", ibv_destroy_qp(qp), "qpn", num);
	}
	destroy("ibv_destroy_cq", ibv_destroy_cq(cq), "cqn", cqn_of(cq));
	if (qp_pd != d.pd)
		ibv_dealloc_pd(qp_pd);
	mlx5_close(&d);
	munmap(buf, mr_len);
	for (i = 0; i < (int)g.n; i++) /* none, unless libmlx5 kept one */
		if (g.a[i].len)
			gpu_free(g.a[i].va, g.a[i].len);
	return failures ? 1 : 0;
}

/* ---------------------------------------------------------------- devx-umem */

struct devx_mem {
	const char *memory; /* host, gpu, dmabuf */
	uint64_t addr, va, len;
	int fd;
};

/* host pages, GPU memory, or GPU memory exported as a dma-buf (addr is then the offset, 0) */
static int devx_mem_alloc(struct devx_mem *m, const char *memory, uint64_t size)
{
	memset(m, 0, sizeof(*m));
	m->memory = memory;
	m->fd = -1;
	if (!strcmp(memory, "host")) {
		void *p;

		m->len = (size + 4095) & ~4095ULL;
		p = mmap(NULL, m->len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (p == MAP_FAILED)
			return emit("host_alloc", 0, errno, U("size", m->len), NULL), -1;
		memset(p, 0x5a, m->len);
		m->addr = m->va = (uintptr_t)p;
		emit("host_alloc", 1, 0, U("addr", m->addr), U("size", m->len), NULL);
		return 0;
	}
	if (strcmp(memory, "gpu") && strcmp(memory, "dmabuf")) {
		fprintf(stderr, "devx-umem: memory must be host, gpu or dmabuf\n");
		exit(2);
	}
	m->len = gpu_round(size);
	m->addr = m->va = gpu_alloc(m->len);
	if (!strcmp(memory, "dmabuf")) {
		m->fd = dmabuf_export_va(m->va, m->len, nvidia_exporter());
		m->addr = 0;
		if (m->fd < 0)
			return -1;
	}
	return 0;
}

static void devx_mem_free(struct devx_mem *m)
{
	if (!strcmp(m->memory, "host"))
		munmap((void *)(uintptr_t)m->va, m->len);
	else
		gpu_free(m->va, m->len);
}

/*
 * mlx5dv_devx_umem_reg(ctx, addr, len, access), or for a dma-buf mlx5dv_devx_umem_reg_ex with
 * {addr = 0 (the offset), size, access, pgsz_bitmap = ~4095, MLX5DV_UMEM_MASK_DMABUF, fd},
 * the fd closed right after (NVSHMEM ibgda_mobject_nic_map, DOCA create_gpu_umem)
 */
static struct mlx5dv_devx_umem *devx_umem_reg(struct mlx5_dev *d, struct devx_mem *m,
					      const char *purpose)
{
	struct mlx5dv_devx_umem_in in = {
		.addr = (void *)(uintptr_t)m->addr, .size = m->len, .access = access_flags,
		.pgsz_bitmap = UINT64_MAX & ~4095ULL, .comp_mask = MLX5DV_UMEM_MASK_DMABUF,
		.dmabuf_fd = m->fd,
	};
	struct mlx5dv_devx_umem *umem;

	errno = 0;
	if (m->fd >= 0)
		umem = mlx5dv_devx_umem_reg_ex(d->ctx, &in);
	else
		umem = mlx5dv_devx_umem_reg(d->ctx, (void *)(uintptr_t)m->addr, m->len, access_flags);
	emit("devx_umem_reg", umem != NULL, errno, S("device", d->name),
	     S("verb", m->fd >= 0 ? "mlx5dv_devx_umem_reg_ex" : "mlx5dv_devx_umem_reg"),
	     S("purpose", purpose), S("memory", m->memory), U("addr", m->addr), U("va", m->va),
	     U("size", m->len), U("access", access_flags), I("fd", m->fd),
	     U("umem_id", umem ? umem->umem_id : 0), NULL);
	if (m->fd >= 0) {
		close(m->fd);
		emit("close", 1, 0, I("fd", m->fd), NULL);
	}
	return umem;
}

static void devx_umem_dereg(struct mlx5dv_devx_umem *umem)
{
	uint32_t id = umem->umem_id;

	destroy("devx_umem_dereg", mlx5dv_devx_umem_dereg(umem), "umem_id", id);
}

static int cmd_devx_umem(const char *memory, uint64_t size)
{
	struct mlx5dv_devx_umem *umem;
	struct devx_mem m;
	struct mlx5_dev d;

	if (strcmp(memory, "host"))
		gpu_open();
	if (devx_mem_alloc(&m, memory, size) || mlx5_open(&d, 1))
		return 1;
	umem = devx_umem_reg(&d, &m, "umem");
	hold();
	if (no_release)
		return failures ? 1 : 0;
	if (umem)
		devx_umem_dereg(umem);
	mlx5_close(&d);
	devx_mem_free(&m);
	return failures ? 1 : 0;
}

/* ---------------------------------------------------------------- ibgda */

/* capset(2): CAP_SYS_ADMIN out of the effective set (the permitted set keeps it) */
static int drop_sys_admin(void)
{
	struct __user_cap_header_struct h = { .version = _LINUX_CAPABILITY_VERSION_3 };
	struct __user_cap_data_struct c[_LINUX_CAPABILITY_U32S_3];
	int r;

	r = syscall(SYS_capget, &h, c);
	if (!r) {
		c[CAP_TO_INDEX(CAP_SYS_ADMIN)].effective &= ~CAP_TO_MASK(CAP_SYS_ADMIN);
		r = syscall(SYS_capset, &h, c);
	}
	emit("drop_capability", r == 0, errno, S("capability", "CAP_SYS_ADMIN"), NULL);
	return r;
}

typedef int (*cu_host_register_t)(void *, size_t, unsigned int);
typedef int (*cu_host_unregister_t)(void *);

static int cmd_ibgda(int argc, char **argv)
{
	uint64_t heap_len = 2ULL << 20, ctrl;
	struct mlx5dv_devx_umem *wq_umem = NULL, *dbr_umem = NULL;
	struct devx_mem wq_mem, dbr_mem;
	struct mlx5dv_cq dv = { 0 };
	struct mlx5dv_obj obj = { .cq = { .out = &dv } };
	cu_host_register_t reg;
	cu_host_unregister_t unreg;
	struct ibv_mr *mr = NULL;
	struct mlx5_dev d;
	struct ibv_cq *cq;
	void *uar = NULL;
	int i, no_sys_admin = 0, r = -1, fd;
	uint64_t heap;

	for (i = 0; i < argc; i++) {
		if (!strcmp(argv[i], "--no-sys-admin"))
			no_sys_admin = 1;
		else if (argv[i][0] != '-')
			heap_len = gpu_round(parse_size(argv[i]));
		else
			return fprintf(stderr, "ibgda: unknown option %s\n", argv[i]), 2;
	}
	gpu_open();
	if (mlx5_open(&d, 1))
		return 1;
	/* NIC control structures in GPU memory (ibgda_nic_control_alloc, gpumem), each its own
	 * dma-buf and DEVX UMEM: the send ring and the QP's doorbell record */
	ctrl = gpu_alloc(2 * GDRSIM_GPU_PAGE_SIZE);
	wq_mem = (struct devx_mem){ "dmabuf", 0, ctrl, GDRSIM_GPU_PAGE_SIZE, -1 };
	dbr_mem = (struct devx_mem){ "dmabuf", 0, ctrl + GDRSIM_GPU_PAGE_SIZE, 4096, -1 };
	wq_mem.fd = dmabuf_export_va(wq_mem.va, wq_mem.len, nvidia_exporter());
	if (wq_mem.fd >= 0)
		wq_umem = devx_umem_reg(&d, &wq_mem, "wq");
	dbr_mem.fd = dmabuf_export_va(dbr_mem.va, dbr_mem.len, nvidia_exporter());
	if (dbr_mem.fd >= 0)
		dbr_umem = devx_umem_reg(&d, &dbr_mem, "dbr");
	/* the receive side on host memory (ibgda_create_qp_shared_objects) */
	cq = create_cq(&d, 0);
	/* the symmetric heap: one dma-buf MR (nvshmemt_ib_common_reg_mem_handle) */
	heap = gpu_alloc(heap_len);
	fd = dmabuf_export_va(heap, heap_len, nvidia_exporter());
	if (fd >= 0) {
		errno = 0;
		mr = ibv_reg_dmabuf_mr(d.pd, 0, heap_len, heap, fd, access_flags);
		emit("ibv_reg_dmabuf_mr", mr != NULL, errno, S("device", d.name), I("fd", fd),
		     U("offset", 0), U("size", heap_len), U("iova", heap), U("access", access_flags),
		     S("exporter", exporter_name(nvidia_exporter())), U("va", heap),
		     U("lkey", mr ? mr->lkey : 0), U("rkey", mr ? mr->rkey : 0), NULL);
		close(fd);
		emit("close", 1, 0, I("fd", fd), NULL);
	}
	/* the doorbell page into the GPU (ibgda_nic_mem_gpu_map): the CQ's UAR page here */
	obj.cq.in = cq;
	if (cq && !mlx5dv_init_obj(&obj, MLX5DV_OBJ_CQ))
		uar = (void *)((uintptr_t)dv.cq_uar & ~4095UL);
	reg = (cu_host_register_t)libcuda_sym("cuMemHostRegister_v2");
	unreg = (cu_host_unregister_t)libcuda_sym("cuMemHostUnregister");
	if (uar && reg && unreg) {
		if (no_sys_admin)
			drop_sys_admin();
		/* cudaHostRegisterPortable | cudaHostRegisterMapped | cudaHostRegisterIoMemory */
		r = reg(uar, 4096, 0x07);
		emit("cu_mem_host_register", r == 0, r == 800 ? EPERM : EINVAL,
		     S("symbol", "cuMemHostRegister_v2"), U("addr", (uintptr_t)uar), U("size", 4096),
		     U("flags", 0x07), I("cuda_error", r), S("memory", "uar"), NULL);
		if (r) {
			failures--; /* NVSHMEM carries on, CPU-assisted: not a failure here */
			printf("WARN: cudaHostRegister with IoMemory failed with error=%d. We may need "
			       "to use a fallback path.\n", r);
			printf("WARN: ibgda_nic_mem_gpu_map failed. We may need to use the CPU fallback "
			       "path.\n");
		}
	}
	emit("ibgda_nic_handler", uar && reg, EINVAL, S("handler", r == 0 ? "gpu" : "cpu"),
	     U("uar", (uintptr_t)uar), NULL);
	hold();
	if (no_release)
		return failures ? 1 : 0;
	if (r == 0)
		emit("cu_mem_host_unregister", unreg(uar) == 0, EINVAL, U("addr", (uintptr_t)uar), NULL);
	if (mr)
		dereg_mr(mr, 0, heap_len); /* a dma-buf MR: the offset */
	if (cq)
		destroy("ibv_destroy_cq", ibv_destroy_cq(cq), "cqn", dv.cqn);
	if (dbr_umem)
		devx_umem_dereg(dbr_umem);
	if (wq_umem)
		devx_umem_dereg(wq_umem);
	mlx5_close(&d);
	gpu_free(heap, heap_len);
	gpu_free(ctrl, 2 * GDRSIM_GPU_PAGE_SIZE);
	return failures ? 1 : 0;
}

/* the commands of this file (gdrsim-workload.c's main hands them over) */
int cmd_mlx5(const char *cmd, int argc, char **argv)
{
	if (!strcmp(cmd, "mlx5-queues"))
		return cmd_mlx5_queues(argc, argv);
	if (!strcmp(cmd, "ibgda"))
		return cmd_ibgda(argc, argv);
	if (argc < 2) {
		fprintf(stderr, "usage: devx-umem host|gpu|dmabuf SIZE\n");
		return 2;
	}
	return cmd_devx_umem(argv[0], parse_size(argv[1]));
}
