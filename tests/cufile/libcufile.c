// SPDX-License-Identifier: MIT OR Apache-2.0
/*
 * A test libcufile.so.0: the real cuFile names, signatures and types (cufile.h), doing what
 * libcufile does underneath, so gdr-trace's uprobes and kernel hooks see what they see on a
 * GPUDirect Storage machine.
 *
 *   - Where /dev/nvidia-fs0 exists (the simulated driver, tests/kmod), a registered GPU buffer
 *     gets a shadow buffer (mmap of /dev/nvidia-fs0) and NVFS_IOCTL_MAP; reads and writes on
 *     handles opened O_DIRECT are NVFS_IOCTL_READ / NVFS_IOCTL_WRITE, batches
 *     NVFS_IOCTL_BATCH_IO: GPUDirect Storage.
 *   - Otherwise (no nvidia-fs, file not O_DIRECT, buffer not mapped by nvidia-fs, or
 *     GDR_CUFILE_COMPAT=1) it does what compatibility mode does: pread/pwrite through a
 *     host bounce buffer. (The copy into GPU memory is cudaMemcpy in the real library; there is
 *     no GPU here, so the bytes stay in the bounce buffer.)
 *
 * Build: gcc -shared -fPIC -Wl,-soname,libcufile.so.0 -I<tests/kmod> -o libcufile.so.0 libcufile.c
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#include "cufile.h"
#include "gdrsim_uapi.h"

#define MAX_BUFS 64
#define MAX_SHADOW (4UL << 20)
#define MAX_BATCH 256

struct handle {
	int fd;
	int nvfs; /* I/O through nvidia-fs */
};

struct buf {
	uintptr_t base;
	size_t len;
	uintptr_t shadow; /* 0: no nvidia-fs mapping */
	size_t shadow_len;
};

struct CUfileBatchHandle {
	unsigned nr;
	unsigned done;
	CUfileIOEvents_t ev[MAX_BATCH];
};

static int nvfs_fd = -1;
static int driver_open;
static struct buf bufs[MAX_BUFS];
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static CUfileError_t status(CUfileOpError e)
{
	CUfileError_t r = { e, 0 };
	return r;
}

static int compat_forced(void)
{
	const char *v = getenv("GDR_CUFILE_COMPAT");
	return v && *v == '1';
}

CUfileError_t cuFileDriverOpen(void)
{
	pthread_mutex_lock(&lock);
	if (!driver_open) {
		if (!compat_forced())
			nvfs_fd = open("/dev/nvidia-fs0", O_RDWR | O_CLOEXEC);
		driver_open = 1;
	}
	pthread_mutex_unlock(&lock);
	return status(CU_FILE_SUCCESS);
}

CUfileError_t cuFileDriverClose_v2(void)
{
	pthread_mutex_lock(&lock);
	if (nvfs_fd >= 0)
		close(nvfs_fd);
	nvfs_fd = -1;
	driver_open = 0;
	pthread_mutex_unlock(&lock);
	return status(CU_FILE_SUCCESS);
}

/* as NVIDIA's: the old name jumps to the new one (through the PLT: both are exported) */
CUfileError_t cuFileDriverClose(void)
{
	return cuFileDriverClose_v2();
}

CUfileError_t cuFileHandleRegister(CUfileHandle_t *fh, CUfileDescr_t *descr)
{
	struct handle *h;
	int flags;

	if (!driver_open)
		return status(CU_FILE_DRIVER_NOT_INITIALIZED);
	if (!fh || !descr || descr->type != CU_FILE_HANDLE_TYPE_OPAQUE_FD)
		return status(CU_FILE_INVALID_VALUE);
	flags = fcntl(descr->handle.fd, F_GETFL);
	if (flags < 0)
		return status(CU_FILE_INVALID_FILE_TYPE);
	h = calloc(1, sizeof(*h));
	if (!h)
		return status(CU_FILE_INTERNAL_ERROR);
	h->fd = descr->handle.fd;
	/* nvidia-fs does O_DIRECT I/O only; anything else is compatibility mode */
	h->nvfs = nvfs_fd >= 0 && (flags & O_DIRECT);
	*fh = h;
	return status(CU_FILE_SUCCESS);
}

void cuFileHandleDeregister(CUfileHandle_t fh)
{
	free(fh);
}

CUfileError_t cuFileBufRegister(const void *bufPtr_base, size_t length, int flags)
{
	struct buf *b = NULL;
	nvfs_ioctl_param_union p;
	void *shadow;
	int i;

	(void)flags;
	pthread_mutex_lock(&lock);
	for (i = 0; i < MAX_BUFS; i++)
		if (!bufs[i].base) {
			b = &bufs[i];
			break;
		}
	if (!b) {
		pthread_mutex_unlock(&lock);
		return status(CU_FILE_INTERNAL_ERROR);
	}
	b->base = (uintptr_t)bufPtr_base;
	b->len = length;
	b->shadow = 0;
	pthread_mutex_unlock(&lock);
	if (nvfs_fd < 0)
		return status(CU_FILE_SUCCESS);
	b->shadow_len = ((length < MAX_SHADOW ? length : MAX_SHADOW) + 4095) & ~4095UL;
	shadow = mmap(NULL, b->shadow_len, PROT_READ | PROT_WRITE, MAP_SHARED, nvfs_fd, 0);
	if (shadow == MAP_FAILED)
		return status(CU_FILE_NVFS_SETUP_ERROR);
	memset(&p, 0, sizeof(p));
	p.map_args.size = length;
	p.map_args.cpuvaddr = (uintptr_t)shadow;
	p.map_args.gpuvaddr = (uintptr_t)bufPtr_base;
	p.map_args.sbuf_block = b->shadow_len / 4096;
	if (ioctl(nvfs_fd, NVFS_IOCTL_MAP, &p) != 0) {
		/* not GPU memory nvidia-fs can pin: I/O on it goes the compatible way */
		munmap(shadow, b->shadow_len);
		return status(CU_FILE_SUCCESS);
	}
	b->shadow = (uintptr_t)shadow;
	return status(CU_FILE_SUCCESS);
}

CUfileError_t cuFileBufDeregister(const void *bufPtr_base)
{
	int i;

	for (i = 0; i < MAX_BUFS; i++)
		if (bufs[i].base == (uintptr_t)bufPtr_base) {
			if (bufs[i].shadow)
				munmap((void *)bufs[i].shadow, bufs[i].shadow_len);
			memset(&bufs[i], 0, sizeof(bufs[i]));
			return status(CU_FILE_SUCCESS);
		}
	return status(CU_FILE_MEMORY_NOT_REGISTERED);
}

static struct buf *find_buf(const void *p)
{
	uintptr_t a = (uintptr_t)p;
	int i;

	for (i = 0; i < MAX_BUFS; i++)
		if (bufs[i].base && a >= bufs[i].base && a < bufs[i].base + bufs[i].len)
			return &bufs[i];
	return NULL;
}

static void fill_ioargs(nvfs_ioctl_ioargs_t *io, struct handle *h, struct buf *b, const void *base,
			size_t size, off_t file_offset, off_t buf_offset, int write)
{
	memset(io, 0, sizeof(*io));
	io->cpuvaddr = b->shadow;
	io->offset = file_offset;
	io->size = size;
	io->fd = h->fd;
	io->sync = 1;
	io->optype = write ? 1 : 0;
	io->file_args.devptroff = (uintptr_t)base - b->base + buf_offset;
}

/* compatibility mode: POSIX I/O through an aligned host bounce buffer */
static ssize_t compat_io(struct handle *h, size_t size, off_t off, int write)
{
	size_t done = 0;
	void *bounce;
	ssize_t r = 0;

	if (posix_memalign(&bounce, 4096, size ? size : 4096))
		return -ENOMEM;
	memset(bounce, 0, size);
	while (done < size) {
		r = write ? pwrite(h->fd, (char *)bounce + done, size - done, off + done)
			  : pread(h->fd, (char *)bounce + done, size - done, off + done);
		if (r <= 0)
			break;
		done += r;
	}
	free(bounce);
	if (r < 0)
		return -errno;
	return done;
}

static ssize_t rw(CUfileHandle_t fh, const void *base, size_t size, off_t file_offset, off_t buf_offset,
		  int write)
{
	struct handle *h = fh;
	struct buf *b = find_buf(base);
	nvfs_ioctl_param_union p;

	if (!h)
		return -CU_FILE_HANDLE_NOT_REGISTERED;
	if (!h->nvfs || !b || !b->shadow || compat_forced())
		return compat_io(h, size, file_offset, write);
	fill_ioargs(&p.ioargs, h, b, base, size, file_offset, buf_offset, write);
	if (ioctl(nvfs_fd, write ? NVFS_IOCTL_WRITE : NVFS_IOCTL_READ, &p) != 0)
		return -errno;
	return p.ioargs.ioctl_return;
}

ssize_t cuFileRead(CUfileHandle_t fh, void *bufPtr_base, size_t size, off_t file_offset, off_t bufPtr_offset)
{
	return rw(fh, bufPtr_base, size, file_offset, bufPtr_offset, 0);
}

ssize_t cuFileWrite(CUfileHandle_t fh, const void *bufPtr_base, size_t size, off_t file_offset,
		    off_t bufPtr_offset)
{
	return rw(fh, bufPtr_base, size, file_offset, bufPtr_offset, 1);
}

/* done on the calling thread before returning (the real library queues on the stream) */
CUfileError_t cuFileReadAsync(CUfileHandle_t fh, void *bufPtr_base, size_t *size_p, off_t *file_offset_p,
			      off_t *bufPtr_offset_p, ssize_t *bytes_read_p, CUstream_t stream)
{
	(void)stream;
	if (!size_p || !file_offset_p || !bufPtr_offset_p || !bytes_read_p)
		return status(CU_FILE_INVALID_VALUE);
	*bytes_read_p = rw(fh, bufPtr_base, *size_p, *file_offset_p, *bufPtr_offset_p, 0);
	return status(*bytes_read_p < 0 ? CU_FILE_IO_MAX_ERROR : CU_FILE_SUCCESS);
}

CUfileError_t cuFileWriteAsync(CUfileHandle_t fh, void *bufPtr_base, size_t *size_p, off_t *file_offset_p,
			       off_t *bufPtr_offset_p, ssize_t *bytes_written_p, CUstream_t stream)
{
	(void)stream;
	if (!size_p || !file_offset_p || !bufPtr_offset_p || !bytes_written_p)
		return status(CU_FILE_INVALID_VALUE);
	*bytes_written_p = rw(fh, bufPtr_base, *size_p, *file_offset_p, *bufPtr_offset_p, 1);
	return status(*bytes_written_p < 0 ? CU_FILE_IO_MAX_ERROR : CU_FILE_SUCCESS);
}

/* streams need no set-up here (I/O is done before the async calls return) */
CUfileError_t cuFileStreamRegister(CUstream_t stream, unsigned flags)
{
	(void)stream;
	if (flags > 15)
		return status(CU_FILE_INVALID_VALUE);
	return status(driver_open ? CU_FILE_SUCCESS : CU_FILE_DRIVER_NOT_INITIALIZED);
}

CUfileError_t cuFileStreamDeregister(CUstream_t stream)
{
	(void)stream;
	return status(driver_open ? CU_FILE_SUCCESS : CU_FILE_DRIVER_NOT_INITIALIZED);
}

CUfileError_t cuFileBatchIOSetUp(CUfileBatchHandle_t *batch_idp, unsigned nr)
{
	if (!batch_idp || nr == 0 || nr > MAX_BATCH)
		return status(CU_FILE_INVALID_VALUE);
	*batch_idp = calloc(1, sizeof(**batch_idp));
	if (!*batch_idp)
		return status(CU_FILE_INTERNAL_ERROR);
	(*batch_idp)->nr = nr;
	return status(CU_FILE_SUCCESS);
}

/* all entries through nvidia-fs (one BATCH_IO) when each can be, else each the compatible way */
CUfileError_t cuFileBatchIOSubmit(CUfileBatchHandle_t batch_idp, unsigned nr, CUfileIOParams_t *iocbp,
				  unsigned int flags)
{
	nvfs_ioctl_ioargs_t io[MAX_BATCH];
	nvfs_ioctl_param_union p;
	int all_nvfs = !compat_forced();
	unsigned i;

	(void)flags;
	if (!batch_idp || nr > batch_idp->nr || !iocbp)
		return status(CU_FILE_INVALID_VALUE);
	for (i = 0; i < nr; i++) {
		struct handle *h = iocbp[i].fh;
		struct buf *b = find_buf(iocbp[i].u.batch.devPtr_base);

		if (!h || !h->nvfs || !b || !b->shadow)
			all_nvfs = 0;
		batch_idp->ev[i].cookie = iocbp[i].cookie;
	}
	if (all_nvfs) {
		for (i = 0; i < nr; i++)
			fill_ioargs(&io[i], iocbp[i].fh, find_buf(iocbp[i].u.batch.devPtr_base),
				    iocbp[i].u.batch.devPtr_base, iocbp[i].u.batch.size,
				    iocbp[i].u.batch.file_offset, iocbp[i].u.batch.devPtr_offset,
				    iocbp[i].opcode == CUFILE_WRITE);
		memset(&p, 0, sizeof(p));
		p.batch_ioargs.ctx_id = (uintptr_t)batch_idp;
		p.batch_ioargs.nents = nr;
		p.batch_ioargs.io_entries = (uintptr_t)io;
		if (ioctl(nvfs_fd, NVFS_IOCTL_BATCH_IO, &p) != 0)
			return status(CU_FILE_BATCH_SUBMIT_FAILED);
	}
	for (i = 0; i < nr; i++) {
		ssize_t r = all_nvfs ? io[i].ioctl_return
				     : compat_io(iocbp[i].fh, iocbp[i].u.batch.size, iocbp[i].u.batch.file_offset,
						 iocbp[i].opcode == CUFILE_WRITE);

		batch_idp->ev[i].status = r < 0 ? CUFILE_FAILED : CUFILE_COMPLETE;
		batch_idp->ev[i].ret = r < 0 ? 0 : (size_t)r;
	}
	batch_idp->done = nr;
	return status(CU_FILE_SUCCESS);
}

CUfileError_t cuFileBatchIOGetStatus(CUfileBatchHandle_t batch_idp, unsigned min_nr, unsigned *nr,
				     CUfileIOEvents_t *iocbp, struct timespec *timeout)
{
	unsigned i, n;

	(void)min_nr;
	(void)timeout;
	if (!batch_idp || !nr || !iocbp)
		return status(CU_FILE_INVALID_VALUE);
	n = *nr < batch_idp->done ? *nr : batch_idp->done;
	for (i = 0; i < n; i++)
		iocbp[i] = batch_idp->ev[i];
	*nr = n;
	return status(CU_FILE_SUCCESS);
}

/* every entry is done at submit: nothing is left to cancel */
CUfileError_t cuFileBatchIOCancel(CUfileBatchHandle_t batch_idp)
{
	if (!batch_idp)
		return status(CU_FILE_INVALID_VALUE);
	return status(CU_FILE_SUCCESS);
}

void cuFileBatchIODestroy(CUfileBatchHandle_t batch_idp)
{
	free(batch_idp);
}
