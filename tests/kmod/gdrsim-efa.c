// SPDX-License-Identifier: GPL-2.0 OR MIT
/*
 * gdrsim-workload, the driver commands' registrations: made as every user registration is on a
 * real system, through libibverbs and ib_uverbs, always on the module's own NIC efa_sim0
 * (GDRSIM_IBDEV_NAME, rdma-core's libefa; $GDRSIM_IBDEV is not read here), and printed as
 * they were when /dev/gdrsim's ioctls made them (peer_reg, dmabuf_reg, release, dmabuf_probe):
 * the ground truth ib_uverbs does not return (is_peer, client, page_size, nmap, the release's
 * kind) comes from the module, GDRSIM_IOC_MR_INFO on the MR's lkey.
 *
 *   peer SIZE           GPU memory (a mmap of /dev/nvidia0), ibv_reg_mr: ib_uverbs ->
 *                       reg_user_mr -> ib_umem_get_peer -> nvidia-peermem; ibv_dereg_mr, free
 *   peer-legacy SIZE    the same with persistent_api_support=0 (set before, restored after)
 *   free-callback SIZE  legacy registration, the GPU memory freed under it (munmap:
 *                       nv_get_p2p_free_callback -> ib_invalidate_peer_memory), ibv_dereg_mr
 *   peer-host SIZE      host memory, ibv_reg_mr (ib_umem_get_peer pins it), ibv_dereg_mr
 *   dmabuf nv|nvidia|other SIZE [OFFSET]
 *                       export (ioctl, or $GDRSIM_LIBCUDA's cuMemGetHandleForAddressRange),
 *                       ibv_reg_dmabuf_mr(pd, OFFSET, SIZE - OFFSET, va + OFFSET, fd, access)
 *                       (the real ib_umem_dmabuf_get_pinned), close the fd (as NCCL does),
 *                       ibv_dereg_mr, free
 *   dmabuf-probe        NCCL's probe ibv_reg_dmabuf_mr(pd, 0, 0, 0, -1, 0): EBADF in the kernel
 * --flags N other than the module's efa_peer_mem_flags sets that parameter around ibv_reg_mr
 * (set_efa_peer_mem_flags, twice).
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <infiniband/verbs.h>

#include "gdrsim_uapi.h"
#include "gdrsim-workload.h"

#define PARAM_FLAGS "efa_peer_mem_flags"
#define PARAM_PERSISTENT "persistent_api_support"

static const char *kind_name(unsigned kind)
{
	switch (kind) {
	case GDRSIM_MR_KIND_HOST: return "host";
	case GDRSIM_MR_KIND_PEER: return "peer";
	case GDRSIM_MR_KIND_PEER_INVALIDATED: return "peer-invalidated";
	case GDRSIM_MR_KIND_DMABUF: return "dmabuf";
	default: return "unknown";
	}
}

/* what the module knows of the MR; 0, or -1 (reported as mr_info) with *info zeroed */
static int mr_info(struct ibv_mr *mr, struct gdrsim_mr_info *info)
{
	int r;

	memset(info, 0, sizeof(*info));
	info->lkey = mr->lkey;
	gdrsim_open();
	r = ioctl(gdrsim_fd, GDRSIM_IOC_MR_INFO, info);
	if (r) {
		emit("mr_info", 0, errno, S("device", GDRSIM_IBDEV_NAME), U("lkey", mr->lkey), NULL);
		memset(info, 0, sizeof(*info));
	}
	return r ? -1 : 0;
}

/* ibv_reg_mr with --flags in effect, reported as peer_reg; the MR or NULL */
static struct ibv_mr *peer_reg(struct verbs *v, uint64_t addr, uint64_t size, const char *memory)
{
	struct gdrsim_mr_info info = { 0 };
	int old = param_read(PARAM_FLAGS), err;
	struct ibv_mr *mr;

	if (old < 0)
		return NULL;
	if (old != (int)peer_flags && param_set(PARAM_FLAGS, (int)peer_flags))
		return NULL;
	errno = 0;
	mr = ibv_reg_mr(v->pd, (void *)(uintptr_t)addr, size, access_flags);
	err = errno ? errno : EIO;
	if (old != (int)peer_flags)
		param_set(PARAM_FLAGS, old);
	if (mr)
		mr_info(mr, &info);
	emit("peer_reg", mr != NULL, err, S("memory", memory), U("addr", addr), U("size", size),
	     U("access", access_flags), U("peer_mem_flags", peer_flags), U("handle", info.handle),
	     B("is_peer", info.is_peer), S("client", info.client), U("page_size", info.page_size),
	     U("nmap", info.nmap), S("device", v->name), U("lkey", mr ? mr->lkey : 0), NULL);
	return mr;
}

/* the module says what is released (kind), then ibv_dereg_mr; reported as release */
static void release(struct ibv_mr *mr)
{
	struct gdrsim_mr_info info;
	int have = mr_info(mr, &info) == 0, r;

	r = ibv_dereg_mr(mr);
	emit("release", r == 0, r, U("handle", info.handle), S("kind", have ? kind_name(info.kind) : ""),
	     NULL);
}

/* peer, peer-legacy (legacy), free-callback (legacy, free_first): GPU; peer-host: host */
int cmd_efa_peer(const char *memory, uint64_t size, int legacy, int free_first)
{
	int gpu = !strcmp(memory, "gpu"), old = -1, released = 0;
	struct ibv_mr *mr = NULL;
	struct verbs v = { 0 };
	uint64_t addr;
	void *buf;

	if (legacy) {
		old = param_read(PARAM_PERSISTENT);
		if (old < 0)
			return 1;
		if (old != 0 && param_set(PARAM_PERSISTENT, 0))
			return 1;
	}
	if (gpu) {
		gpu_open();
		addr = gpu_alloc(size);
	} else {
		buf = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (buf == MAP_FAILED) {
			emit("host_alloc", 0, errno, U("size", size), NULL);
			goto out;
		}
		memset(buf, 0x5a, size);
		addr = (uintptr_t)buf;
		emit("host_alloc", 1, 0, U("addr", addr), U("size", size), NULL);
	}
	if (verbs_open(&v, GDRSIM_IBDEV_NAME, 1))
		goto out;
	mr = peer_reg(&v, addr, size, memory);
	hold();
	if (free_first) {
		/* cudaFree under a live registration: nv_get_p2p_free_callback */
		gpu_free(addr, size);
		if (mr)
			release(mr);
		released = 1;
	} else if (!no_release) {
		if (mr)
			release(mr);
		if (gpu)
			gpu_free(addr, size);
		else
			munmap((void *)(uintptr_t)addr, size);
		released = 1;
	}
	if (released && !no_release)
		verbs_close(&v);
out:
	/* restored unless a registration is left to process exit (EBUSY while it lives) */
	if (legacy && old != 0 && (released || !mr)) {
		int ret = failures ? 1 : 0;

		param_set(PARAM_PERSISTENT, old);
		return ret;
	}
	return failures ? 1 : 0;
}

int cmd_efa_dmabuf(const char *which, uint64_t size, uint64_t offset)
{
	uint64_t va = 0, len = gpu_round(size), iova;
	struct gdrsim_mr_info info = { 0 };
	unsigned exporter;
	struct ibv_mr *mr;
	struct verbs v;
	int fd, err;

	if (offset >= len) {
		fprintf(stderr, "dmabuf: offset must be below the size\n");
		return 2;
	}
	fd = dmabuf_export(which, len, &va, &exporter);
	if (fd < 0)
		return 1;
	if (verbs_open(&v, GDRSIM_IBDEV_NAME, 1))
		return 1;
	/* NCCL: ibv_reg_dmabuf_mr(pd, offset, size, (uint64_t)buffer address, fd, flags) */
	iova = va + offset;
	errno = 0;
	mr = ibv_reg_dmabuf_mr(v.pd, offset, len - offset, iova, fd, access_flags);
	err = errno ? errno : EIO;
	if (mr)
		mr_info(mr, &info);
	emit("dmabuf_reg", mr != NULL, err, I("fd", fd), U("offset", offset), U("size", len - offset),
	     U("access", access_flags), S("exporter", exporter_name(exporter)), U("va", va),
	     U("handle", info.handle), U("nmap", info.nmap), S("device", v.name), U("iova", iova),
	     U("lkey", mr ? mr->lkey : 0), NULL);
	/* NCCL closes the dma-buf fd right after registering */
	close(fd);
	emit("close", 1, 0, I("fd", fd), NULL);
	hold();
	if (no_release)
		return failures ? 1 : 0;
	if (mr)
		release(mr);
	verbs_close(&v);
	if (va)
		gpu_free(va, len);
	return failures ? 1 : 0;
}

int cmd_efa_dmabuf_probe(void)
{
	struct ibv_mr *mr;
	struct verbs v;
	int e;

	if (verbs_open(&v, GDRSIM_IBDEV_NAME, 1))
		return 1;
	/* NCCL's ncclIbDmaBufSupport: any errno but EOPNOTSUPP/EPROTONOSUPPORT means supported */
	errno = 0;
	mr = ibv_reg_dmabuf_mr(v.pd, 0ULL, 0ULL, 0ULL, -1, 0);
	e = errno;
	/* a probe is expected to fail; report it as such without counting a failure */
	printf("{\"action\":\"dmabuf_probe\",\"pid\":%d,\"tid\":%ld,\"comm\":", getpid(),
	       (long)syscall(SYS_gettid));
	json_str(stdout, comm);
	printf(",\"ok\":%s,\"fd\":-1,\"offset\":0,\"size\":0,\"errno\":%d}\n",
	       mr ? "true" : "false", mr ? 0 : e);
	fflush(stdout);
	if (mr)
		release(mr);
	verbs_close(&v);
	return 0;
}
