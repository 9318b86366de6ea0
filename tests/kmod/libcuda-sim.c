// SPDX-License-Identifier: GPL-2.0
/*
 * libcuda-sim: a test-only libcuda.so.1 with the real name and signature of
 * cuMemGetHandleForAddressRange (cuda.h), implemented on the simulated driver:
 * it exports [dptr, dptr+size) as a dma-buf through /dev/gdrsim, as CUDA does
 * through nvidia.ko. The exporter is chosen by $GDRSIM_EXPORTER (nv, nvidia,
 * other; default nv). It knows nothing of any tracer.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "gdrsim_uapi.h"

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
#define CUDA_SUCCESS 0
#define CUDA_ERROR_INVALID_VALUE 1
#define CUDA_ERROR_NOT_SUPPORTED 801
#define CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD 1

__attribute__((visibility("default"), noinline))
CUresult cuMemGetHandleForAddressRange(void *handle, CUdeviceptr dptr, size_t size,
				       int handleType, unsigned long long flags)
{
	struct gdrsim_dmabuf_export ex = { 0 };
	const char *which = getenv("GDRSIM_EXPORTER");
	int fd, r;

	(void)flags;
	if (!handle || !size)
		return CUDA_ERROR_INVALID_VALUE;
	if (handleType != CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD)
		return CUDA_ERROR_NOT_SUPPORTED;
	ex.exporter = GDRSIM_EXPORTER_NV_DMABUF;
	if (which && !strcmp(which, "nvidia"))
		ex.exporter = GDRSIM_EXPORTER_NVIDIA;
	else if (which && !strcmp(which, "other"))
		ex.exporter = GDRSIM_EXPORTER_OTHER;
	ex.va = dptr;
	ex.size = size;
	fd = open("/dev/gdrsim", O_RDWR | O_CLOEXEC);
	if (fd < 0)
		return CUDA_ERROR_INVALID_VALUE;
	r = ioctl(fd, GDRSIM_IOC_DMABUF_EXPORT, &ex);
	close(fd);
	if (r)
		return CUDA_ERROR_INVALID_VALUE;
	*(int *)handle = ex.fd;
	return CUDA_SUCCESS;
}
