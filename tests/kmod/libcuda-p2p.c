// SPDX-License-Identifier: GPL-2.0
/*
 * libcuda-p2p: the GPU<->GPU half of the test libcuda.so.1 (with libcuda-sim.c),
 * with the real names, exported variants (plain, _v2, _ptds, _ptsz) and
 * signatures of cuda.h: devices ($GDRSIM_DEVICES, default 2), contexts and the
 * per-thread context stack, peer access ($GDRSIM_NO_P2P: unsupported, as
 * behind ACS or across sockets), device memory, peer and device-to-device
 * copies, CUDA IPC (the 64-byte handle names a POSIX shared-memory object the
 * importer maps: real sharing across processes and users), the cuMem
 * shareable-handle path (a memfd passed as a POSIX fd), and pinned host
 * memory. "Device memory" is host memory here; the calls, arguments, return
 * codes and data movement are real. It knows nothing of any tracer.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sys/ioctl.h>

#include "cuda_types.h"
#include "gdrsim_uapi.h"

typedef struct CUmemAllocationProp_st CUmemAllocationProp;

#define API __attribute__((visibility("default"), noipa))

enum {
	CUDA_SUCCESS = 0,
	CUDA_ERROR_INVALID_VALUE = 1,
	CUDA_ERROR_OUT_OF_MEMORY = 2,
	CUDA_ERROR_NO_DEVICE = 100,
	CUDA_ERROR_INVALID_DEVICE = 101,
	CUDA_ERROR_INVALID_CONTEXT = 201,
	CUDA_ERROR_PEER_ACCESS_UNSUPPORTED = 217,
	CUDA_ERROR_INVALID_HANDLE = 400,
	CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED = 704,
	CUDA_ERROR_PEER_ACCESS_NOT_ENABLED = 705,
	CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED = 712,
	CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED = 713,
	CUDA_ERROR_NOT_PERMITTED = 800,
	CUDA_ERROR_NOT_SUPPORTED = 801,
};
#define CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR 1

#define MAX_DEV 8
#define MAX_TABLE 256

struct CUctx_st {
	int device;
	int primary;
};

struct mem {
	unsigned long long base;
	size_t size;
	int device; /* -1: host memory */
	int fd;     /* shared-memory object behind an exported allocation */
	int kind;   /* what made it: see enum below */
	char name[40];
};
enum { M_DEV = 1, M_IPC, M_HOST, M_REG, M_GEN, M_RESERVED };

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct CUctx_st primary[MAX_DEV];
static int peer[MAX_DEV][MAX_DEV];
static struct mem table[MAX_TABLE];
static __thread CUcontext stack[16];
static __thread int depth;

static int ndev(void)
{
	const char *e = getenv("GDRSIM_DEVICES");
	int n = e ? atoi(e) : 2;
	return n < 1 ? 1 : n > MAX_DEV ? MAX_DEV : n;
}

static CUcontext current(void) { return depth ? stack[depth - 1] : NULL; }

static struct mem *find(int kind, unsigned long long base)
{
	for (int i = 0; i < MAX_TABLE; i++)
		if (table[i].kind == kind && table[i].base == base)
			return &table[i];
	return NULL;
}

static struct mem *add(int kind, unsigned long long base, size_t size, int device, int fd)
{
	pthread_mutex_lock(&lock);
	for (int i = 0; i < MAX_TABLE; i++) {
		if (!table[i].kind) {
			table[i] = (struct mem){ base, size, device, fd, kind, "" };
			pthread_mutex_unlock(&lock);
			return &table[i];
		}
	}
	pthread_mutex_unlock(&lock);
	return NULL;
}

static void *map_anon(size_t n)
{
	void *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	return p == MAP_FAILED ? NULL : p;
}

API CUresult cuInit(unsigned int flags) { return flags ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS; }

API CUresult cuDeviceGetCount(int *count)
{
	if (!count)
		return CUDA_ERROR_INVALID_VALUE;
	*count = ndev();
	return CUDA_SUCCESS;
}

API CUresult cuDeviceGet(CUdevice *dev, int ordinal)
{
	if (!dev || ordinal < 0 || ordinal >= ndev())
		return CUDA_ERROR_INVALID_DEVICE;
	*dev = ordinal;
	return CUDA_SUCCESS;
}

/* ---- contexts ---- */

static CUresult push(CUcontext c)
{
	if (depth >= 16)
		return CUDA_ERROR_INVALID_CONTEXT;
	stack[depth++] = c;
	return CUDA_SUCCESS;
}

static CUresult ctx_create(CUcontext *pctx, CUdevice dev)
{
	struct CUctx_st *c;

	if (!pctx)
		return CUDA_ERROR_INVALID_VALUE;
	if (dev < 0 || dev >= ndev())
		return CUDA_ERROR_INVALID_DEVICE;
	c = calloc(1, sizeof(*c));
	if (!c)
		return CUDA_ERROR_OUT_OF_MEMORY;
	c->device = dev;
	*pctx = c;
	return push(c);
}

API CUresult cuCtxCreate(CUcontext *pctx, unsigned int flags, CUdevice dev) { return ctx_create(pctx, dev); }
API CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev) { return ctx_create(pctx, dev); }

API CUresult cuCtxDestroy_v2(CUcontext ctx)
{
	if (!ctx || ctx->primary)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (current() == ctx)
		depth--;
	free(ctx);
	return CUDA_SUCCESS;
}

API CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
	if (!pctx)
		return CUDA_ERROR_INVALID_VALUE;
	if (dev < 0 || dev >= ndev())
		return CUDA_ERROR_INVALID_DEVICE;
	primary[dev].device = dev;
	primary[dev].primary = 1;
	*pctx = &primary[dev];
	return CUDA_SUCCESS;
}

API CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
	return dev < 0 || dev >= ndev() ? CUDA_ERROR_INVALID_DEVICE : CUDA_SUCCESS;
}

API CUresult cuCtxSetCurrent(CUcontext ctx)
{
	if (!ctx) {
		if (depth)
			depth--;
		return CUDA_SUCCESS;
	}
	if (!depth)
		return push(ctx);
	stack[depth - 1] = ctx;
	return CUDA_SUCCESS;
}

API CUresult cuCtxGetCurrent(CUcontext *pctx)
{
	if (!pctx)
		return CUDA_ERROR_INVALID_VALUE;
	*pctx = current();
	return CUDA_SUCCESS;
}

API CUresult cuCtxGetDevice(CUdevice *dev)
{
	if (!dev)
		return CUDA_ERROR_INVALID_VALUE;
	if (!current())
		return CUDA_ERROR_INVALID_CONTEXT;
	*dev = current()->device;
	return CUDA_SUCCESS;
}

API CUresult cuCtxPushCurrent(CUcontext ctx) { return ctx ? push(ctx) : CUDA_ERROR_INVALID_CONTEXT; }
API CUresult cuCtxPushCurrent_v2(CUcontext ctx) { return ctx ? push(ctx) : CUDA_ERROR_INVALID_CONTEXT; }

static CUresult pop(CUcontext *pctx)
{
	if (!depth)
		return CUDA_ERROR_INVALID_CONTEXT;
	depth--;
	if (pctx)
		*pctx = stack[depth];
	return CUDA_SUCCESS;
}

API CUresult cuCtxPopCurrent(CUcontext *pctx) { return pop(pctx); }
API CUresult cuCtxPopCurrent_v2(CUcontext *pctx) { return pop(pctx); }

/* ---- peer access ---- */

API CUresult cuDeviceCanAccessPeer(int *can, CUdevice dev, CUdevice peer_dev)
{
	if (!can)
		return CUDA_ERROR_INVALID_VALUE;
	if (dev < 0 || dev >= ndev() || peer_dev < 0 || peer_dev >= ndev())
		return CUDA_ERROR_INVALID_DEVICE;
	*can = dev != peer_dev && !getenv("GDRSIM_NO_P2P");
	return CUDA_SUCCESS;
}

API CUresult cuCtxEnablePeerAccess(CUcontext peer_ctx, unsigned int flags)
{
	CUcontext c = current();
	CUresult r = CUDA_SUCCESS;

	if (!c)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (!peer_ctx || flags)
		return CUDA_ERROR_INVALID_VALUE;
	if (c->device == peer_ctx->device)
		return CUDA_ERROR_INVALID_DEVICE;
	if (getenv("GDRSIM_NO_P2P"))
		return CUDA_ERROR_PEER_ACCESS_UNSUPPORTED;
	pthread_mutex_lock(&lock);
	if (peer[c->device][peer_ctx->device])
		r = CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED;
	peer[c->device][peer_ctx->device] = 1;
	pthread_mutex_unlock(&lock);
	return r;
}

API CUresult cuCtxDisablePeerAccess(CUcontext peer_ctx)
{
	CUcontext c = current();
	CUresult r = CUDA_SUCCESS;

	if (!c)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (!peer_ctx)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&lock);
	if (!peer[c->device][peer_ctx->device])
		r = CUDA_ERROR_PEER_ACCESS_NOT_ENABLED;
	peer[c->device][peer_ctx->device] = 0;
	pthread_mutex_unlock(&lock);
	return r;
}

/* ---- device memory and copies ---- */

static CUresult mem_alloc(CUdeviceptr *dptr, size_t n)
{
	void *p;

	if (!dptr || !n)
		return CUDA_ERROR_INVALID_VALUE;
	if (!current())
		return CUDA_ERROR_INVALID_CONTEXT;
	p = map_anon(n);
	if (!p)
		return CUDA_ERROR_OUT_OF_MEMORY;
	if (!add(M_DEV, (uintptr_t)p, n, current()->device, -1)) {
		munmap(p, n);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	*dptr = (uintptr_t)p;
	return CUDA_SUCCESS;
}

API CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t n) { return mem_alloc(dptr, n); }

API CUresult cuMemFree_v2(CUdeviceptr dptr)
{
	struct mem *m = find(M_DEV, dptr);

	if (!m)
		return CUDA_ERROR_INVALID_VALUE;
	munmap((void *)(uintptr_t)m->base, m->size);
	if (m->fd >= 0) {
		close(m->fd);
		shm_unlink(m->name);
	}
	memset(m, 0, sizeof(*m));
	return CUDA_SUCCESS;
}

static CUresult copy(CUdeviceptr dst, CUdeviceptr src, size_t n)
{
	if (!n)
		return CUDA_SUCCESS;
	if (!dst || !src)
		return CUDA_ERROR_INVALID_VALUE;
	memmove((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, n);
	return CUDA_SUCCESS;
}

static CUresult peer_copy(CUdeviceptr dst, CUcontext dc, CUdeviceptr src, CUcontext sc, size_t n)
{
	return dc && sc ? copy(dst, src, n) : CUDA_ERROR_INVALID_CONTEXT;
}

API CUresult cuMemcpyPeer(CUdeviceptr dst, CUcontext dstCtx, CUdeviceptr src, CUcontext srcCtx, size_t n)
{
	return peer_copy(dst, dstCtx, src, srcCtx, n);
}
API CUresult cuMemcpyPeer_ptds(CUdeviceptr dst, CUcontext dstCtx, CUdeviceptr src, CUcontext srcCtx, size_t n)
{
	return peer_copy(dst, dstCtx, src, srcCtx, n);
}
API CUresult cuMemcpyPeerAsync(CUdeviceptr dst, CUcontext dstCtx, CUdeviceptr src, CUcontext srcCtx, size_t n,
			       CUstream s)
{
	return peer_copy(dst, dstCtx, src, srcCtx, n);
}
API CUresult cuMemcpyPeerAsync_ptsz(CUdeviceptr dst, CUcontext dstCtx, CUdeviceptr src, CUcontext srcCtx,
				    size_t n, CUstream s)
{
	return peer_copy(dst, dstCtx, src, srcCtx, n);
}
API CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t n) { return copy(dst, src, n); }
API CUresult cuMemcpy_ptds(CUdeviceptr dst, CUdeviceptr src, size_t n) { return copy(dst, src, n); }
API CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) { return copy(dst, src, n); }
API CUresult cuMemcpyAsync_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) { return copy(dst, src, n); }
API CUresult cuMemcpyDtoD_v2(CUdeviceptr dst, CUdeviceptr src, size_t n) { return copy(dst, src, n); }
/* device <-> host: cuMemcpyDtoH_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount),
 * cuMemcpyHtoD_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount) and their
 * per-thread-stream and async variants (cuda.h 12.x) */
API CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t n) { return copy((uintptr_t)dst, src, n); }
API CUresult cuMemcpyDtoH_v2_ptds(void *dst, CUdeviceptr src, size_t n) { return copy((uintptr_t)dst, src, n); }
API CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t n, CUstream s)
{
	return copy((uintptr_t)dst, src, n);
}
API CUresult cuMemcpyDtoHAsync_v2_ptsz(void *dst, CUdeviceptr src, size_t n, CUstream s)
{
	return copy((uintptr_t)dst, src, n);
}
API CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t n) { return copy(dst, (uintptr_t)src, n); }
API CUresult cuMemcpyHtoD_v2_ptds(CUdeviceptr dst, const void *src, size_t n)
{
	return copy(dst, (uintptr_t)src, n);
}
API CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t n, CUstream s)
{
	return copy(dst, (uintptr_t)src, n);
}
API CUresult cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr dst, const void *src, size_t n, CUstream s)
{
	return copy(dst, (uintptr_t)src, n);
}
API CUresult cuMemcpyDtoD_v2_ptds(CUdeviceptr dst, CUdeviceptr src, size_t n) { return copy(dst, src, n); }
API CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s)
{
	return copy(dst, src, n);
}
API CUresult cuMemcpyDtoDAsync_v2_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s)
{
	return copy(dst, src, n);
}

/* ---- CUDA IPC ---- */

struct ipc_handle {
	char magic[8];
	uint32_t pid;
	uint32_t _pad;
	uint64_t size;
	char name[40];
};
_Static_assert(sizeof(struct ipc_handle) == sizeof(CUipcMemHandle), "a CUipcMemHandle is 64 bytes");

API CUresult cuIpcGetMemHandle(CUipcMemHandle *handle, CUdeviceptr dptr)
{
	static int seq;
	struct mem *m = find(M_DEV, dptr);
	struct ipc_handle h = { "GDRSIMIP", (uint32_t)getpid(), 0, 0, "" };
	void *tmp;

	if (!handle || !m)
		return CUDA_ERROR_INVALID_VALUE;
	if (m->fd < 0) {
		/* Move the allocation onto a shared-memory object (contents kept). */
		snprintf(m->name, sizeof(m->name), "/gdrsim-ipc-%d-%d", (int)getpid(), __sync_add_and_fetch(&seq, 1));
		m->fd = shm_open(m->name, O_CREAT | O_EXCL | O_RDWR, 0666);
		if (m->fd < 0)
			return CUDA_ERROR_OUT_OF_MEMORY;
		fchmod(m->fd, 0666); /* the importer may be another user */
		if (ftruncate(m->fd, m->size))
			return CUDA_ERROR_OUT_OF_MEMORY;
		tmp = mmap(NULL, m->size, PROT_READ | PROT_WRITE, MAP_SHARED, m->fd, 0);
		if (tmp == MAP_FAILED)
			return CUDA_ERROR_OUT_OF_MEMORY;
		memcpy(tmp, (void *)(uintptr_t)m->base, m->size);
		munmap(tmp, m->size);
		if (mmap((void *)(uintptr_t)m->base, m->size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, m->fd,
			 0) == MAP_FAILED)
			return CUDA_ERROR_OUT_OF_MEMORY;
	}
	h.size = m->size;
	memcpy(h.name, m->name, sizeof(h.name));
	memcpy(handle, &h, sizeof(h));
	return CUDA_SUCCESS;
}

static CUresult ipc_open(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int flags)
{
	struct ipc_handle h;
	void *p;
	int fd;

	memcpy(&h, &handle, sizeof(h));
	if (!pdptr || memcmp(h.magic, "GDRSIMIP", 8) || h.name[sizeof(h.name) - 1])
		return CUDA_ERROR_INVALID_VALUE;
	if (!current())
		return CUDA_ERROR_INVALID_CONTEXT;
	fd = shm_open(h.name, O_RDWR, 0);
	if (fd < 0)
		return CUDA_ERROR_INVALID_HANDLE;
	p = mmap(NULL, h.size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (p == MAP_FAILED)
		return CUDA_ERROR_INVALID_HANDLE;
	add(M_IPC, (uintptr_t)p, h.size, current()->device, -1);
	*pdptr = (uintptr_t)p;
	return CUDA_SUCCESS;
}

API CUresult cuIpcOpenMemHandle(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int flags)
{
	return ipc_open(pdptr, handle, flags);
}
API CUresult cuIpcOpenMemHandle_v2(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int flags)
{
	return ipc_open(pdptr, handle, flags);
}

API CUresult cuIpcCloseMemHandle(CUdeviceptr dptr)
{
	struct mem *m = find(M_IPC, dptr);

	if (!m)
		return CUDA_ERROR_INVALID_VALUE;
	munmap((void *)(uintptr_t)m->base, m->size);
	memset(m, 0, sizeof(*m));
	return CUDA_SUCCESS;
}

/* ---- cuMem: generic allocations, shareable handles, mappings ---- */

API CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop,
			 unsigned long long flags)
{
	struct mem *m;
	int fd;

	if (!handle || !size || !prop || flags)
		return CUDA_ERROR_INVALID_VALUE;
	fd = memfd_create("gdrsim-cumem", MFD_CLOEXEC);
	if (fd < 0 || ftruncate(fd, size))
		return CUDA_ERROR_OUT_OF_MEMORY;
	m = add(M_GEN, 0, size, current() ? current()->device : 0, fd);
	if (!m)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*handle = (CUmemGenericAllocationHandle)(m - table) + 1;
	return CUDA_SUCCESS;
}

static struct mem *generic(CUmemGenericAllocationHandle h)
{
	return h >= 1 && h <= MAX_TABLE && table[h - 1].kind == M_GEN ? &table[h - 1] : NULL;
}

API CUresult cuMemRelease(CUmemGenericAllocationHandle h)
{
	struct mem *m = generic(h);

	if (!m)
		return CUDA_ERROR_INVALID_VALUE;
	close(m->fd);
	memset(m, 0, sizeof(*m));
	return CUDA_SUCCESS;
}

API CUresult cuMemExportToShareableHandle(void *shareableHandle, CUmemGenericAllocationHandle h, int handleType,
					  unsigned long long flags)
{
	struct mem *m = generic(h);
	int fd;

	if (!shareableHandle || !m || flags)
		return CUDA_ERROR_INVALID_VALUE;
	if (handleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
		return CUDA_ERROR_NOT_SUPPORTED;
	fd = fcntl(m->fd, F_DUPFD_CLOEXEC, 0);
	if (fd < 0)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*(int *)shareableHandle = fd;
	return CUDA_SUCCESS;
}

API CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *handle, void *osHandle, int shHandleType)
{
	struct stat st;
	struct mem *m;
	int fd;

	if (!handle)
		return CUDA_ERROR_INVALID_VALUE;
	if (shHandleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
		return CUDA_ERROR_NOT_SUPPORTED;
	fd = fcntl((int)(intptr_t)osHandle, F_DUPFD_CLOEXEC, 0);
	if (fd < 0 || fstat(fd, &st))
		return CUDA_ERROR_INVALID_HANDLE;
	m = add(M_GEN, 0, st.st_size, -1, fd);
	if (!m)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*handle = (CUmemGenericAllocationHandle)(m - table) + 1;
	return CUDA_SUCCESS;
}

API CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr,
				 unsigned long long flags)
{
	void *p;

	if (!ptr || !size)
		return CUDA_ERROR_INVALID_VALUE;
	p = mmap(NULL, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (p == MAP_FAILED)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*ptr = (uintptr_t)p;
	return CUDA_SUCCESS;
}

API CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size)
{
	return munmap((void *)(uintptr_t)ptr, size) ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

API CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle h,
		      unsigned long long flags)
{
	struct mem *m = generic(h);

	if (!m || !ptr || flags || offset + size > m->size)
		return CUDA_ERROR_INVALID_VALUE;
	if (mmap((void *)(uintptr_t)ptr, size, PROT_NONE, MAP_SHARED | MAP_FIXED, m->fd, offset) == MAP_FAILED)
		return CUDA_ERROR_INVALID_VALUE;
	return CUDA_SUCCESS;
}

API CUresult cuMemUnmap(CUdeviceptr ptr, size_t size)
{
	void *p = mmap((void *)(uintptr_t)ptr, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
	return p == MAP_FAILED ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

API CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count)
{
	if (!desc || !count)
		return CUDA_ERROR_INVALID_VALUE;
	for (size_t i = 0; i < count; i++)
		if (desc[i].location.id < 0 || desc[i].location.id >= ndev())
			return CUDA_ERROR_INVALID_DEVICE;
	return mprotect((void *)(uintptr_t)ptr, size, PROT_READ | PROT_WRITE) ? CUDA_ERROR_INVALID_VALUE
									   : CUDA_SUCCESS;
}

/* ---- pinned host memory ----
 * Through the simulated nvidia.ko's control node, as libcuda does (tests/kmod/nv_sysmem.c):
 * cuMemHostAlloc maps system memory from /dev/nvidiactl (nvidia_mmap_sysmem), cuMemHostRegister
 * pins the caller's pages with an OS descriptor (os_lock_user_pages). Without the module there
 * is no driver: CUDA_ERROR_NO_DEVICE, as libcuda says without nvidia.ko.
 * cuMemHostRegister(..., CU_MEMHOSTREGISTER_IOMEMORY) maps I/O memory (a NIC's doorbell page)
 * instead: the same escape asking for uncached, contiguous memory, which nvidia.ko finds with
 * os_lookup_user_io_memory and allows only with PeerMappingOverride=1 or CAP_SYS_ADMIN
 * (NV_ERR_INSUFFICIENT_PERMISSIONS: CUDA_ERROR_NOT_PERMITTED, 800); a range that is not I/O
 * memory, or I/O memory without the flag, is CUDA_ERROR_INVALID_VALUE.  PORTABLE and
 * DEVICEMAP have no effect here (one context, every mapping is "device mapped").
 */
#define CU_MEMHOSTREGISTER_IOMEMORY 0x04

static int ctl_fd = -1;

static int nvidiactl(void)
{
	pthread_mutex_lock(&lock);
	if (ctl_fd < 0)
		ctl_fd = open("/dev/nvidiactl", O_RDWR | O_CLOEXEC);
	pthread_mutex_unlock(&lock);
	return ctl_fd;
}

static CUresult host_alloc(void **pp, size_t n)
{
	size_t len = (n + 4095) & ~(size_t)4095;
	void *p;
	int fd = nvidiactl();

	if (!pp || !n)
		return CUDA_ERROR_INVALID_VALUE;
	if (fd < 0)
		return CUDA_ERROR_NO_DEVICE;
	p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED)
		return CUDA_ERROR_OUT_OF_MEMORY;
	if (!add(M_HOST, (uintptr_t)p, len, -1, -1)) {
		munmap(p, len);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	*pp = p;
	return CUDA_SUCCESS;
}

API CUresult cuMemHostAlloc(void **pp, size_t bytesize, unsigned int Flags) { return host_alloc(pp, bytesize); }
API CUresult cuMemAllocHost_v2(void **pp, size_t bytesize) { return host_alloc(pp, bytesize); }

API CUresult cuMemFreeHost(void *p)
{
	struct mem *m = find(M_HOST, (uintptr_t)p);

	if (!m)
		return CUDA_ERROR_INVALID_VALUE;
	munmap(p, m->size);
	memset(m, 0, sizeof(*m));
	return CUDA_SUCCESS;
}

static CUresult host_register(void *p, size_t n, unsigned int flags)
{
	uintptr_t base = (uintptr_t)p & ~(uintptr_t)4095, end = ((uintptr_t)p + n + 4095) & ~(uintptr_t)4095;
	struct nv_os_descriptor d = { .descriptor = base, .limit = end - base - 1, .writable = 1 };
	int fd = nvidiactl();

	d.attr = (flags & CU_MEMHOSTREGISTER_IOMEMORY) ?
		 NVOS32_ATTR_COHERENCY_UNCACHED | NVOS32_ATTR_PHYSICALITY_CONTIGUOUS :
		 NVOS32_ATTR_COHERENCY_CACHED;

	if (!p || !n)
		return CUDA_ERROR_INVALID_VALUE;
	if (fd < 0)
		return CUDA_ERROR_NO_DEVICE;
	if (find(M_REG, (uintptr_t)p))
		return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
	if (ioctl(fd, NV_IOCTL_OS_DESC_ALLOC, &d))
		return CUDA_ERROR_INVALID_VALUE;
	if (d.status == NV_ERR_INSUFFICIENT_PERMISSIONS)
		return CUDA_ERROR_NOT_PERMITTED;
	if (d.status)
		return CUDA_ERROR_INVALID_VALUE;
	return add(M_REG, (uintptr_t)p, n, -1, (int)d.handle) ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

API CUresult cuMemHostRegister(void *p, size_t bytesize, unsigned int Flags)
{
	return host_register(p, bytesize, Flags);
}
API CUresult cuMemHostRegister_v2(void *p, size_t bytesize, unsigned int Flags)
{
	return host_register(p, bytesize, Flags);
}

API CUresult cuMemHostUnregister(void *p)
{
	struct mem *m = find(M_REG, (uintptr_t)p);
	struct nv_os_descriptor d = { 0 };

	if (!m)
		return CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
	d.handle = (unsigned)m->fd;
	ioctl(nvidiactl(), NV_IOCTL_OS_DESC_FREE, &d);
	memset(m, 0, sizeof(*m));
	return CUDA_SUCCESS;
}
