// SPDX-License-Identifier: GPL-2.0
/*
 * cuda-workload: drives the CUDA driver API (linked against libcuda.so.1: the
 * test one, or a real one) the way applications and NCCL do, and prints one
 * JSON line of what it did. It knows nothing of any tracer.
 *
 *   cuda-workload copy N SIZE    GPU<->GPU copies on 3 devices, with and
 *                                without peer access (see main below)
 *   cuda-workload ipc SIZE UID   export device memory (CUDA IPC and a cuMem
 *                                POSIX-fd handle); a child running as UID
 *                                imports both through a unix socket
 *   cuda-workload peerloop SIZE  the benchmark's loop: prints {"event":"ready"},
 *                                then per stdin line N, N cuMemcpyPeer calls of
 *                                SIZE bytes (peer access on) and their ns/call
 *   cuda-workload host-mr        CUDA pinned host memory registered with the
 *                                first RDMA device or $GDRSIM_IBDEV (ibv_reg_mr), and a plain
 *                                malloc'd buffer beside it
 *   cuda-workload staged SIZE N  a staging pipeline as NCCL's with GDR off: device memory, a
 *                                cuMemHostAlloc'd buffer and a cuMemHostRegister'd one (SIZE
 *                                each); holds ({"action":"hold","step":"allocated"}, one stdin
 *                                line lets it go on); then N cuMemcpyDtoH_v2 device -> pinned,
 *                                one cuMemcpyHtoD_v2 of SIZE/2 pinned -> device, one
 *                                cuMemcpyDtoH_v2 device -> registered, both registered with
 *                                $GDRSIM_IBDEV; holds again ("registered"), then frees all
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#ifndef GDRSIM_NO_VERBS
#include <infiniband/verbs.h>
#endif

#include "cuda_types.h"

typedef struct {
	int type;
	int requestedHandleTypes;
	CUmemLocation location;
	void *win32HandleMetaData;
	unsigned char allocFlags[8];
} CUmemAllocationProp;

CUresult cuInit(unsigned int);
CUresult cuDevicePrimaryCtxRetain(CUcontext *, CUdevice);
CUresult cuCtxSetCurrent(CUcontext);
CUresult cuCtxPushCurrent_v2(CUcontext);
CUresult cuCtxPopCurrent_v2(CUcontext *);
CUresult cuCtxCreate_v2(CUcontext *, unsigned int, CUdevice);
CUresult cuCtxEnablePeerAccess(CUcontext, unsigned int);
CUresult cuCtxDisablePeerAccess(CUcontext);
CUresult cuDeviceCanAccessPeer(int *, CUdevice, CUdevice);
CUresult cuMemAlloc_v2(CUdeviceptr *, size_t);
CUresult cuMemFree_v2(CUdeviceptr);
CUresult cuMemcpyPeer(CUdeviceptr, CUcontext, CUdeviceptr, CUcontext, size_t);
CUresult cuMemcpyPeerAsync_ptsz(CUdeviceptr, CUcontext, CUdeviceptr, CUcontext, size_t, CUstream);
CUresult cuMemcpy(CUdeviceptr, CUdeviceptr, size_t);
CUresult cuMemcpy_ptds(CUdeviceptr, CUdeviceptr, size_t);
CUresult cuMemcpyDtoD_v2(CUdeviceptr, CUdeviceptr, size_t);
CUresult cuIpcGetMemHandle(CUipcMemHandle *, CUdeviceptr);
CUresult cuIpcOpenMemHandle_v2(CUdeviceptr *, CUipcMemHandle, unsigned int);
CUresult cuIpcCloseMemHandle(CUdeviceptr);
CUresult cuMemCreate(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *, unsigned long long);
CUresult cuMemRelease(CUmemGenericAllocationHandle);
CUresult cuMemExportToShareableHandle(void *, CUmemGenericAllocationHandle, int, unsigned long long);
CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *, void *, int);
CUresult cuMemAddressReserve(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long);
CUresult cuMemAddressFree(CUdeviceptr, size_t);
CUresult cuMemMap(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long);
CUresult cuMemUnmap(CUdeviceptr, size_t);
CUresult cuMemSetAccess(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t);
CUresult cuMemHostAlloc(void **, size_t, unsigned int);
CUresult cuMemAllocHost_v2(void **, size_t);
CUresult cuMemFreeHost(void *);
CUresult cuMemHostRegister_v2(void *, size_t, unsigned int);
CUresult cuMemHostUnregister(void *);
CUresult cuMemcpyDtoH_v2(void *, CUdeviceptr, size_t);
CUresult cuMemcpyHtoD_v2(CUdeviceptr, const void *, size_t);

static void check(CUresult r, CUresult want, const char *what)
{
	if (r != want) {
		fprintf(stderr, "cuda-workload: %s returned %d, expected %d\n", what, r, want);
		exit(1);
	}
}
#define OK(call) check((call), 0, #call)

static CUdeviceptr alloc_on(CUcontext ctx, size_t n, int fill)
{
	CUdeviceptr p;

	OK(cuCtxSetCurrent(ctx));
	OK(cuMemAlloc_v2(&p, n));
	memset((void *)(uintptr_t)p, fill, n);
	return p;
}

/*
 * Devices 0, 1, 2 through their primary contexts (as the CUDA runtime does):
 *   N copies 0->1 with cuMemcpyPeer, no peer access            (staged)
 *   peer access 0->1 enabled (0), enabled again (704: not a failure)
 *   N copies 0->1 with cuMemcpyPeerAsync_ptsz                  (direct)
 *   1 copy 1->0 with cuMemcpyDtoD_v2: peer access either way  (direct)
 *   1 copy 0->0 with cuMemcpy_ptds: one device, not P2P        (not counted)
 *   peer access 0->1 disabled; 1 copy 0->1 with cuMemcpy       (staged)
 *   peer access 1->2 enabled from a pushed context; 2 copies 1->2 (direct)
 */
static int copies(int n, size_t size)
{
	CUcontext c0, c1, c2, popped;
	CUdeviceptr a, a2, b, c;
	int can = -1;

	setenv("GDRSIM_DEVICES", "3", 0); /* the test libcuda's device count */
	OK(cuInit(0));
	OK(cuDevicePrimaryCtxRetain(&c0, 0));
	OK(cuDevicePrimaryCtxRetain(&c1, 1));
	OK(cuDevicePrimaryCtxRetain(&c2, 2));
	OK(cuDeviceCanAccessPeer(&can, 0, 1));
	a = alloc_on(c0, size, 0xa0);
	a2 = alloc_on(c0, size, 0xa2);
	b = alloc_on(c1, size, 0xb0);
	c = alloc_on(c2, size, 0xc0);
	OK(cuCtxSetCurrent(c0));
	for (int i = 0; i < n; i++)
		OK(cuMemcpyPeer(b, c1, a, c0, size));
	if (*(unsigned char *)(uintptr_t)b != 0xa0)
		return fprintf(stderr, "copy did not land\n"), 1;
	OK(cuCtxEnablePeerAccess(c1, 0));
	check(cuCtxEnablePeerAccess(c1, 0), 704, "cuCtxEnablePeerAccess (again)");
	for (int i = 0; i < n; i++)
		OK(cuMemcpyPeerAsync_ptsz(b, c1, a, c0, size, NULL));
	OK(cuMemcpyDtoD_v2(a, b, size));
	OK(cuMemcpy_ptds(a2, a, size));
	OK(cuCtxDisablePeerAccess(c1));
	OK(cuMemcpy(b, a, size));
	OK(cuCtxPushCurrent_v2(c1));
	OK(cuCtxEnablePeerAccess(c2, 0));
	OK(cuMemcpyPeer(c, c2, b, c1, size));
	OK(cuMemcpyPeer(c, c2, b, c1, size));
	OK(cuCtxPopCurrent_v2(&popped));
	OK(cuMemFree_v2(a));
	OK(cuMemFree_v2(a2));
	OK(cuMemFree_v2(b));
	OK(cuMemFree_v2(c));
	printf("{\"pid\":%d,\"can_access_peer\":%d}\n", (int)getpid(), can);
	return 0;
}

static void send_fd(int sock, int fd, const void *bytes, size_t len)
{
	char ctl[CMSG_SPACE(sizeof(int))] = { 0 };
	struct iovec iov = { (void *)bytes, len };
	struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl, .msg_controllen = sizeof(ctl) };
	struct cmsghdr *c = CMSG_FIRSTHDR(&m);

	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(c), &fd, sizeof(int));
	if (sendmsg(sock, &m, 0) != (ssize_t)len)
		exit(1);
}

static int recv_fd(int sock, void *bytes, size_t len)
{
	char ctl[CMSG_SPACE(sizeof(int))] = { 0 };
	struct iovec iov = { bytes, len };
	struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl, .msg_controllen = sizeof(ctl) };
	struct cmsghdr *c;
	int fd = -1;

	if (recvmsg(sock, &m, MSG_WAITALL) != (ssize_t)len)
		exit(1);
	c = CMSG_FIRSTHDR(&m);
	if (c && c->cmsg_type == SCM_RIGHTS)
		memcpy(&fd, CMSG_DATA(c), sizeof(int));
	return fd;
}

/* The importer: another process (and user), another device. */
static int importer(int sock, size_t size, unsigned char want)
{
	CUmemAllocationProp prop = { 0 };
	CUmemAccessDesc access = { { 1, 1 }, 3 };
	CUmemGenericAllocationHandle h;
	CUipcMemHandle handle;
	CUdeviceptr p, va;
	CUcontext ctx;
	int fd;

	(void)prop;
	fd = recv_fd(sock, &handle, sizeof(handle));
	OK(cuInit(0));
	OK(cuDevicePrimaryCtxRetain(&ctx, 1));
	OK(cuCtxSetCurrent(ctx));
	OK(cuIpcOpenMemHandle_v2(&p, handle, 1));
	if (*(unsigned char *)(uintptr_t)p != want)
		return fprintf(stderr, "imported memory holds %#x\n", *(unsigned char *)(uintptr_t)p), 1;
	OK(cuIpcCloseMemHandle(p));
	OK(cuMemImportFromShareableHandle(&h, (void *)(intptr_t)fd, 1));
	OK(cuMemAddressReserve(&va, size, 0, 0, 0));
	OK(cuMemMap(va, size, 0, h, 0));
	OK(cuMemSetAccess(va, size, &access, 1));
	OK(cuMemUnmap(va, size));
	OK(cuMemAddressFree(va, size));
	OK(cuMemRelease(h));
	close(fd);
	return 0;
}

static int ipc(size_t size, uid_t uid)
{
	CUmemAllocationProp prop = { .type = 1, .requestedHandleTypes = 1, .location = { 1, 0 } };
	CUmemGenericAllocationHandle h;
	CUipcMemHandle handle;
	CUdeviceptr p;
	CUcontext ctx;
	int sv[2], fd, status;
	pid_t child;

	OK(cuInit(0));
	OK(cuDevicePrimaryCtxRetain(&ctx, 0));
	p = alloc_on(ctx, size, 0x5a);
	OK(cuIpcGetMemHandle(&handle, p));
	OK(cuMemCreate(&h, size, &prop, 0));
	OK(cuMemExportToShareableHandle(&fd, h, 1, 0));
	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv))
		return 1;
	fflush(stdout);
	child = fork();
	if (child == 0) {
		close(sv[0]);
		if (setgid(uid) || setuid(uid))
			_exit(3);
		_exit(importer(sv[1], size, 0x5a));
	}
	close(sv[1]);
	send_fd(sv[0], fd, &handle, sizeof(handle));
	if (waitpid(child, &status, 0) != child || !WIFEXITED(status) || WEXITSTATUS(status))
		return fprintf(stderr, "importer failed: %#x\n", status), 1;
	close(fd);
	OK(cuMemRelease(h));
	OK(cuMemFree_v2(p));
	printf("{\"exporter_pid\":%d,\"importer_pid\":%d,\"importer_uid\":%d,\"size\":%zu}\n", (int)getpid(),
	       (int)child, (int)uid, size);
	return 0;
}

static int host_mr(void)
{
	const size_t big = 4 << 20, small = 64 << 10, reg = 1 << 20, plain = 256 << 10;
	void *pinned, *host, *registered, *malloced;

	OK(cuInit(0));
	OK(cuMemHostAlloc(&pinned, big, 0));
	OK(cuMemAllocHost_v2(&host, small));
	if (posix_memalign(&registered, 4096, reg) || posix_memalign(&malloced, 4096, plain))
		return 1;
	memset(registered, 1, reg);
	memset(malloced, 2, plain);
	OK(cuMemHostRegister_v2(registered, reg, 0));
#ifdef GDRSIM_NO_VERBS
	printf("{\"skipped\":\"built without libibverbs\"}\n");
	return 0;
#else
	{
		struct ibv_device **devs = ibv_get_device_list(NULL);
		struct ibv_context *ctx;
		struct ibv_pd *pd;
		struct ibv_mr *mr[5];
		struct { void *addr; size_t len; } r[5] = {
			{ pinned, big },
			{ (char *)pinned + (1 << 20), 1 << 20 },
			{ host, small },
			{ registered, reg },
			{ malloced, plain },
		};

		const char *want = getenv("GDRSIM_IBDEV"); /* else the first device */
		int d = 0;

		if (!devs || !devs[0]) {
			printf("{\"skipped\":\"no RDMA device\"}\n");
			return 0;
		}
		while (want && devs[d] && strcmp(ibv_get_device_name(devs[d]), want))
			d++;
		if (!devs[d])
			return fprintf(stderr, "no RDMA device %s\n", want), 1;
		ctx = ibv_open_device(devs[d]);
		pd = ctx ? ibv_alloc_pd(ctx) : NULL;
		if (!pd)
			return fprintf(stderr, "no protection domain\n"), 1;
		for (int i = 0; i < 5; i++) {
			mr[i] = ibv_reg_mr(pd, r[i].addr, r[i].len, IBV_ACCESS_LOCAL_WRITE);
			if (!mr[i])
				return fprintf(stderr, "ibv_reg_mr %d failed\n", i), 1;
		}
		printf("{\"pid\":%d,\"pinned\":%llu,\"pinned_slice\":%llu,\"alloc_host\":%llu,\"registered\":%llu,"
		       "\"malloc\":%llu}\n",
		       (int)getpid(), (unsigned long long)(uintptr_t)r[0].addr,
		       (unsigned long long)(uintptr_t)r[1].addr, (unsigned long long)(uintptr_t)r[2].addr,
		       (unsigned long long)(uintptr_t)r[3].addr, (unsigned long long)(uintptr_t)r[4].addr);
		for (int i = 0; i < 5; i++)
			ibv_dereg_mr(mr[i]);
		ibv_dealloc_pd(pd);
		ibv_close_device(ctx);
		ibv_free_device_list(devs);
	}
	OK(cuMemHostUnregister(registered));
	OK(cuMemFreeHost(pinned));
	OK(cuMemFreeHost(host));
	return 0;
#endif
}

static void hold(const char *step, const char *extra)
{
	char line[64];

	printf("{\"action\":\"hold\",\"step\":\"%s\",\"pid\":%d%s}\n", step, (int)getpid(), extra);
	fflush(stdout);
	if (!fgets(line, sizeof(line), stdin))
		exit(1);
}

static int staged(size_t size, int n)
{
	CUcontext ctx;
	CUdeviceptr dev;
	void *pinned, *registered;
	char extra[256];

	OK(cuInit(0));
	OK(cuDevicePrimaryCtxRetain(&ctx, 0));
	dev = alloc_on(ctx, size, 7);
	OK(cuMemHostAlloc(&pinned, size, 0));
	if (posix_memalign(&registered, 4096, size))
		return 1;
	memset(registered, 0, size);
	OK(cuMemHostRegister_v2(registered, size, 0));
	snprintf(extra, sizeof(extra), ",\"pinned\":%llu,\"registered\":%llu,\"size\":%zu",
		 (unsigned long long)(uintptr_t)pinned, (unsigned long long)(uintptr_t)registered, size);
	hold("allocated", extra);
	for (int i = 0; i < n; i++)
		OK(cuMemcpyDtoH_v2(pinned, dev, size));
	OK(cuMemcpyHtoD_v2(dev, pinned, size / 2));
	OK(cuMemcpyDtoH_v2(registered, dev, size));
	if (((unsigned char *)pinned)[size - 1] != 7 || ((unsigned char *)registered)[0] != 7)
		return fprintf(stderr, "the copies moved nothing\n"), 1;
#ifdef GDRSIM_NO_VERBS
	printf("{\"skipped\":\"built without libibverbs\"}\n");
	return 0;
#else
	{
		struct ibv_device **devs = ibv_get_device_list(NULL);
		const char *want = getenv("GDRSIM_IBDEV");
		struct ibv_context *ibctx;
		struct ibv_pd *pd;
		struct ibv_mr *mp, *mr;
		int d = 0;

		while (devs && want && devs[d] && strcmp(ibv_get_device_name(devs[d]), want))
			d++;
		if (!devs || !devs[d])
			return fprintf(stderr, "no RDMA device %s\n", want ? want : ""), 1;
		ibctx = ibv_open_device(devs[d]);
		pd = ibctx ? ibv_alloc_pd(ibctx) : NULL;
		if (!pd)
			return fprintf(stderr, "no protection domain\n"), 1;
		mp = ibv_reg_mr(pd, pinned, size, IBV_ACCESS_LOCAL_WRITE);
		mr = ibv_reg_mr(pd, registered, size, IBV_ACCESS_LOCAL_WRITE);
		if (!mp || !mr)
			return fprintf(stderr, "ibv_reg_mr failed\n"), 1;
		snprintf(extra, sizeof(extra), ",\"dtoh_pinned\":%llu,\"htod_pinned\":%llu,\"dtoh_registered\":%llu",
			 (unsigned long long)n * size, (unsigned long long)size / 2, (unsigned long long)size);
		hold("registered", extra);
		ibv_dereg_mr(mp);
		ibv_dereg_mr(mr);
		ibv_dealloc_pd(pd);
		ibv_close_device(ibctx);
		ibv_free_device_list(devs);
	}
	OK(cuMemHostUnregister(registered));
	OK(cuMemFreeHost(pinned));
	OK(cuMemFree_v2(dev));
	return 0;
#endif
}

static int peer_loop(size_t size)
{
	CUcontext c0, c1;
	CUdeviceptr a, b;
	char line[64];

	OK(cuInit(0));
	OK(cuDevicePrimaryCtxRetain(&c0, 0));
	OK(cuDevicePrimaryCtxRetain(&c1, 1));
	a = alloc_on(c0, size, 1);
	b = alloc_on(c1, size, 2);
	OK(cuCtxSetCurrent(c0));
	OK(cuCtxEnablePeerAccess(c1, 0));
	printf("{\"event\":\"ready\",\"pid\":%d}\n", (int)getpid());
	while (fgets(line, sizeof(line), stdin)) {
		long n = atol(line);
		struct timespec t0, t1;

		if (n <= 0)
			break;
		for (int i = 0; i < 1000; i++) /* warm-up */
			OK(cuMemcpyPeer(b, c1, a, c0, size));
		clock_gettime(CLOCK_MONOTONIC, &t0);
		for (long i = 0; i < n; i++)
			OK(cuMemcpyPeer(b, c1, a, c0, size));
		clock_gettime(CLOCK_MONOTONIC, &t1);
		printf("{\"ns_per_op\":%.1f}\n",
		       ((t1.tv_sec - t0.tv_sec) * 1e9 + (t1.tv_nsec - t0.tv_nsec)) / (double)n);
	}
	return 0;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc == 4 && !strcmp(argv[1], "copy"))
		return copies(atoi(argv[2]), strtoull(argv[3], NULL, 0));
	if (argc == 4 && !strcmp(argv[1], "ipc"))
		return ipc(strtoull(argv[2], NULL, 0), (uid_t)atoi(argv[3]));
	if (argc == 3 && !strcmp(argv[1], "peerloop"))
		return peer_loop(strtoull(argv[2], NULL, 0));
	if (argc == 2 && !strcmp(argv[1], "host-mr"))
		return host_mr();
	if (argc == 4 && !strcmp(argv[1], "staged"))
		return staged(strtoull(argv[2], NULL, 0), atoi(argv[3]));
	fprintf(stderr, "usage: cuda-workload copy N SIZE | ipc SIZE UID | peerloop SIZE | host-mr | staged SIZE N\n");
	return 2;
}
