// SPDX-License-Identifier: GPL-2.0 OR MIT
/*
 * gdrsim-workload, the libibverbs half: registrations made the way an application (NCCL, UCX,
 * perftest) makes them, through rdma-core's real libibverbs and provider.
 *
 *   host-mr SIZE                  host memory on the first RDMA device or $GDRSIM_IBDEV (rxe0)
 *   verbs-peer SIZE               GPU memory (a mmap of /dev/nvidia0) with ibv_reg_mr on the
 *                                 module's own NIC (GDRSIM_IBDEV_NAME, libefa): in the kernel
 *                                 ib_uverbs -> reg_user_mr -> ib_umem_get_peer -> nvidia-peermem
 *   verbs-host SIZE               host memory with ibv_reg_mr on that NIC: ib_umem_get_peer pins
 *   verbs-dmabuf nv|nvidia|other SIZE [OFFSET]
 *                                 a GPU dma-buf (GDRSIM_IOC_DMABUF_EXPORT, or $GDRSIM_LIBCUDA's
 *                                 cuMemGetHandleForAddressRange) with ibv_reg_dmabuf_mr(pd,
 *                                 OFFSET, SIZE - OFFSET, va + OFFSET, fd, access), as NCCL does;
 *                                 the fd is closed right after, as NCCL does
 *   post-flood N                  a tenant filling the tracer's byte maps: N send SGEs, each
 *                                 naming an lkey of its own, and N receives, each its own
 *                                 wr_id, posted (16 work requests a call) to an RC QP left in
 *                                 RESET on $GDRSIM_IBDEV or the first device; the provider
 *                                 refuses them, after its post function was entered
 * Each opens the device, allocates a PD, registers, holds (--hold / --hold-stdin), deregisters
 * and frees.  $GDRSIM_IBDEV picks another device for the verbs-* commands too.
 * --sends N: after registering, the verbs-* commands post N signaled SENDs of 4 KiB (one MTU)
 * from the MR, one work request per ibv_post_send, on a UD QP of the same PD to the device's own
 * GID, as an EFA user posts (libefa's efa_post_send); they go nowhere on the simulated NIC.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/mman.h>
#include <infiniband/verbs.h>

#include "gdrsim_uapi.h"
#include "gdrsim-workload.h"

/* Opens `want` (NULL: the first device) and allocates a PD; announce: report both on success */
int verbs_open(struct verbs *v, const char *want, int announce)
{
	int n, i;

	memset(v, 0, sizeof(*v));
	v->list = ibv_get_device_list(&n);
	if (!v->list || n == 0) {
		emit("ibv_open_device", 0, ENODEV, S("device", want ? want : ""), NULL);
		return -1;
	}
	errno = 0;
	for (i = 0; i < n; i++) {
		if (want && strcmp(ibv_get_device_name(v->list[i]), want))
			continue;
		v->ctx = ibv_open_device(v->list[i]);
		break;
	}
	if (!v->ctx) {
		emit("ibv_open_device", 0, errno ? errno : ENODEV, S("device", want ? want : ""), NULL);
		return -1;
	}
	v->name = ibv_get_device_name(v->ctx->device);
	if (announce)
		emit("ibv_open_device", 1, 0, S("device", v->name), NULL);
	v->pd = ibv_alloc_pd(v->ctx);
	if (!v->pd) {
		emit("ibv_alloc_pd", 0, errno, S("device", v->name), NULL);
		return -1;
	}
	if (announce)
		emit("ibv_alloc_pd", 1, 0, S("device", v->name), NULL);
	return 0;
}

void verbs_close(struct verbs *v)
{
	if (v->pd)
		ibv_dealloc_pd(v->pd);
	if (v->ctx)
		ibv_close_device(v->ctx);
	ibv_free_device_list(v->list);
}

static const char *verbs_device(void)
{
	const char *want = getenv("GDRSIM_IBDEV");

	return want ? want : GDRSIM_IBDEV_NAME;
}

/* ibv_dereg_mr, reported as `action` */
static void dereg(const char *action, struct ibv_mr *mr, uint64_t addr, uint64_t size)
{
	int r = ibv_dereg_mr(mr);

	emit(action, r == 0, r, U("addr", addr), U("size", size), NULL);
}

/* --sends N: N SENDs of one MTU from the MR (at successive offsets) on a UD QP; emits what it posted */
static void post_sends(struct verbs *v, struct ibv_mr *mr, uint64_t addr, uint64_t len)
{
	uint64_t chunk = len < 4096 ? len : 4096, bytes = 0;
	struct ibv_qp_init_attr qia = { 0 };
	struct ibv_ah_attr aa = { 0 };
	struct ibv_qp_attr qa;
	struct ibv_cq *cq;
	struct ibv_qp *qp = NULL;
	struct ibv_ah *ah = NULL;
	const char *step = "ibv_create_cq";
	unsigned i, posted = 0;
	int err = 0;

	cq = ibv_create_cq(v->ctx, (int)sends, NULL, NULL, 0);
	if (!cq)
		goto out;
	qia.send_cq = qia.recv_cq = cq;
	qia.qp_type = IBV_QPT_UD;
	qia.sq_sig_all = 1;
	qia.cap.max_send_wr = sends;
	qia.cap.max_recv_wr = 1;
	qia.cap.max_send_sge = 1;
	qia.cap.max_recv_sge = 1;
	step = "ibv_create_qp";
	qp = ibv_create_qp(v->pd, &qia);
	if (!qp)
		goto out;
	step = "ibv_modify_qp";
	memset(&qa, 0, sizeof(qa));
	qa.qp_state = IBV_QPS_INIT;
	qa.port_num = 1;
	qa.qkey = 0x11111111;
	if ((errno = ibv_modify_qp(qp, &qa, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY)))
		goto out;
	qa.qp_state = IBV_QPS_RTR;
	if ((errno = ibv_modify_qp(qp, &qa, IBV_QP_STATE)))
		goto out;
	qa.qp_state = IBV_QPS_RTS;
	if ((errno = ibv_modify_qp(qp, &qa, IBV_QP_STATE | IBV_QP_SQ_PSN)))
		goto out;
	step = "ibv_create_ah";
	if ((errno = ibv_query_gid(v->ctx, 1, 0, &aa.grh.dgid)))
		goto out;
	aa.is_global = 1;
	aa.grh.hop_limit = 1;
	aa.port_num = 1;
	ah = ibv_create_ah(v->pd, &aa);
	if (!ah)
		goto out;
	step = "ibv_post_send";
	errno = 0;
	for (i = 0; i < sends && chunk; i++) {
		struct ibv_sge sge = {
			.addr = addr + (i % (len / chunk)) * chunk,
			.length = (uint32_t)chunk,
			.lkey = mr->lkey,
		};
		struct ibv_send_wr wr = {
			.wr_id = i, .sg_list = &sge, .num_sge = 1,
			.opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED,
		}, *bad;

		wr.wr.ud.ah = ah;
		wr.wr.ud.remote_qpn = qp->qp_num;
		wr.wr.ud.remote_qkey = 0x11111111;
		if ((err = ibv_post_send(qp, &wr, &bad)))
			break;
		posted++;
		bytes += chunk;
	}
	errno = err;
out:
	emit("ibv_post_send", !strcmp(step, "ibv_post_send") && !errno, errno, S("device", v->name),
	     S("failed_at", strcmp(step, "ibv_post_send") ? step : ""), U("lkey", mr->lkey),
	     U("sends", posted), U("bytes", bytes), U("bytes_each", chunk), NULL);
	if (ah)
		ibv_destroy_ah(ah);
	if (qp)
		ibv_destroy_qp(qp);
	if (cq)
		ibv_destroy_cq(cq);
}

int cmd_host_mr(uint64_t size)
{
	struct verbs v;
	struct ibv_mr *mr;
	void *buf;

	gpu_open();
	if (verbs_open(&v, getenv("GDRSIM_IBDEV"), 0))
		return 1;
	if (posix_memalign(&buf, 4096, size)) {
		emit("host_alloc", 0, ENOMEM, U("size", size), NULL);
		return 1;
	}
	memset(buf, 0x5a, size);
	mr = ibv_reg_mr(v.pd, buf, size, access_flags);
	emit("host_mr", mr != NULL, errno, S("device", v.name), U("addr", (uintptr_t)buf),
	     U("size", size), U("access", access_flags), U("lkey", mr ? mr->lkey : 0),
	     U("rkey", mr ? mr->rkey : 0), NULL);
	hold();
	if (mr && !no_release)
		dereg("host_mr_dereg", mr, (uintptr_t)buf, size);
	if (!no_release)
		verbs_close(&v);
	return failures ? 1 : 0;
}

/* memory: "gpu" (verbs-peer) or "host" (verbs-host) */
int cmd_verbs_reg(const char *memory, uint64_t size)
{
	int gpu = !strcmp(memory, "gpu");
	uint64_t addr, len = gpu ? gpu_round(size) : size;
	struct ibv_mr *mr;
	struct verbs v;

	if (gpu) {
		gpu_open();
		addr = gpu_alloc(len);
	} else {
		void *buf = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

		if (buf == MAP_FAILED) {
			emit("host_alloc", 0, errno, U("size", len), NULL);
			return 1;
		}
		memset(buf, 0x5a, len);
		addr = (uintptr_t)buf;
		emit("host_alloc", 1, 0, U("addr", addr), U("size", len), NULL);
	}
	if (verbs_open(&v, verbs_device(), 1))
		return 1;
	errno = 0;
	mr = ibv_reg_mr(v.pd, (void *)(uintptr_t)addr, len, access_flags);
	emit("ibv_reg_mr", mr != NULL, errno, S("device", v.name), S("memory", memory),
	     U("addr", addr), U("size", len), U("access", access_flags),
	     U("lkey", mr ? mr->lkey : 0), U("rkey", mr ? mr->rkey : 0), NULL);
	if (mr && sends)
		post_sends(&v, mr, addr, len);
	hold();
	if (no_release)
		return failures ? 1 : 0;
	if (mr)
		dereg("ibv_dereg_mr", mr, addr, len);
	verbs_close(&v);
	if (gpu)
		gpu_free(addr, len);
	else
		munmap((void *)(uintptr_t)addr, len);
	return failures ? 1 : 0;
}

int cmd_verbs_dmabuf(const char *which, uint64_t size, uint64_t offset)
{
	uint64_t va = 0, len = gpu_round(size), iova;
	unsigned exporter;
	struct ibv_mr *mr;
	struct verbs v;
	int fd;

	if (offset >= len) {
		fprintf(stderr, "verbs-dmabuf: offset must be below the size\n");
		return 2;
	}
	fd = dmabuf_export(which, len, &va, &exporter);
	if (fd < 0)
		return 1;
	if (verbs_open(&v, verbs_device(), 1))
		return 1;
	/* NCCL: ibv_reg_dmabuf_mr(pd, offset, size, (uint64_t)buffer address, fd, flags) */
	iova = va + offset;
	errno = 0;
	mr = ibv_reg_dmabuf_mr(v.pd, offset, len - offset, iova, fd, access_flags);
	emit("ibv_reg_dmabuf_mr", mr != NULL, errno, S("device", v.name), I("fd", fd),
	     U("offset", offset), U("size", len - offset), U("iova", iova),
	     U("access", access_flags), S("exporter", exporter_name(exporter)), U("va", va),
	     U("lkey", mr ? mr->lkey : 0), U("rkey", mr ? mr->rkey : 0), NULL);
	close(fd);
	emit("close", 1, 0, I("fd", fd), NULL);
	if (mr && sends)
		post_sends(&v, mr, iova, len - offset);
	hold();
	if (no_release)
		return failures ? 1 : 0;
	if (mr)
		dereg("ibv_dereg_mr", mr, offset, len - offset);
	verbs_close(&v);
	if (va)
		gpu_free(va, len);
	return failures ? 1 : 0;
}

/* post-flood N: see the top of this file */
int cmd_post_flood(uint64_t n)
{
	static char buf[4096];
	struct ibv_qp_init_attr qia = { 0 };
	struct ibv_send_wr swr[16], *sbad;
	struct ibv_recv_wr rwr[16], *rbad;
	struct ibv_sge sge[16][4], rsge = { .addr = (uintptr_t)buf, .length = 64, .lkey = 7 };
	uint64_t sends = 0, recvs = 0, calls = 0;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct verbs v;
	unsigned i, j;

	if (verbs_open(&v, getenv("GDRSIM_IBDEV"), 0))
		return 1;
	cq = ibv_create_cq(v.ctx, 16, NULL, NULL, 0);
	if (!cq) {
		emit("post_flood", 0, errno, S("failed_at", "ibv_create_cq"), NULL);
		return 1;
	}
	qia.send_cq = qia.recv_cq = cq;
	qia.qp_type = IBV_QPT_RC;
	qia.cap.max_send_wr = qia.cap.max_recv_wr = 16;
	qia.cap.max_send_sge = qia.cap.max_recv_sge = 4;
	qp = ibv_create_qp(v.pd, &qia);
	if (!qp) {
		emit("post_flood", 0, errno, S("failed_at", "ibv_create_qp"), NULL);
		return 1;
	}
	while (sends < n) {
		for (i = 0; i < 16; i++) {
			for (j = 0; j < 4; j++) {
				sge[i][j].addr = (uintptr_t)buf;
				sge[i][j].length = 64;
				sge[i][j].lkey = (uint32_t)(0x100000 + sends + 4 * i + j);
			}
			memset(&swr[i], 0, sizeof(swr[i]));
			swr[i].wr_id = i;
			swr[i].next = i < 15 ? &swr[i + 1] : NULL;
			swr[i].sg_list = sge[i];
			swr[i].num_sge = 4;
			swr[i].opcode = IBV_WR_SEND;
		}
		(void)ibv_post_send(qp, swr, &sbad);
		sends += 64;
		calls++;
	}
	while (recvs < n) {
		for (i = 0; i < 16; i++) {
			memset(&rwr[i], 0, sizeof(rwr[i]));
			rwr[i].wr_id = 0x100000 + recvs + i;
			rwr[i].next = i < 15 ? &rwr[i + 1] : NULL;
			rwr[i].sg_list = &rsge;
			rwr[i].num_sge = 1;
		}
		(void)ibv_post_recv(qp, rwr, &rbad);
		recvs += 16;
		calls++;
	}
	emit("post_flood", 1, 0, S("device", v.name), U("send_sges", sends), U("receives", recvs),
	     U("calls", calls), NULL);
	hold();
	ibv_destroy_qp(qp);
	ibv_destroy_cq(cq);
	verbs_close(&v);
	return 0;
}

