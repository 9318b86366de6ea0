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
 *   - As NVIDIA's library does, the I/O of cuFileReadAsync/WriteAsync, of batch entries and of
 *     large reads and writes runs on the library's worker threads (pool.c), never on the
 *     calling thread: the async and batch calls return before it runs (stream order is kept;
 *     *bytes_read_p is written when the I/O is done; cuFileBatchIOGetStatus returns entries as
 *     they complete), and a read or write of at least PARALLEL_MIN bytes is split in up to
 *     PARALLELISM chunks the workers do while the caller waits. There is no CUDA here: where an
 *     application would synchronize the stream, a stream's queued I/O is complete when
 *     cuFileStreamDeregister (or cuFileDriverClose) returns.
 *
 * Build: gcc -shared -fPIC -pthread -Wl,-soname,libcufile.so.0 -I<tests/kmod> -o libcufile.so.0
 *        libcufile.c pool.c
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "cufile.h"
#include "gdrsim_uapi.h"
#include "pool.h"

#define MAX_BUFS 64
#define MAX_SHADOW (4UL << 20)
#define MAX_BATCH 256
#define MAX_STREAMS 64
/* cufile.json defaults: `execution.min_io_threshold_size_kb` 8192 (a read or write of this
 * size or more is split, `parallel_io`), `execution.max_request_parallelism` 4. */
#define PARALLEL_MIN (8UL << 20)
#define PARALLELISM 4

struct handle {
	int fd;
	int nvfs; /* I/O through nvidia-fs */
	int direct; /* opened O_DIRECT */
};

struct buf {
	uintptr_t base;
	size_t len;
	uintptr_t shadow; /* 0: no nvidia-fs mapping */
	size_t shadow_len;
	struct nvfs_ioctl_metapage *fence; /* the fence page async I/O completes into */
	uint64_t fence_value;		   /* the last end_fence_value used */
};

/* One read or write queued to the workers. */
struct io {
	struct job job;
	CUfileHandle_t fh;
	const void *base;
	size_t size;
	off_t file_offset, buf_offset;
	int write;
	ssize_t result;
	ssize_t *out;		 /* async: *bytes_read_p / *bytes_written_p, written when done */
	struct io *stream_next;	 /* the stream's jobs, freed when it is drained */
	CUfileBatchHandle_t batch; /* a batch entry: its status is set when done */
};

struct stream {
	CUstream_t id;
	int used;
	struct job *last; /* the stream's last job: the next one runs after it */
	struct io *jobs;
};

struct CUfileBatchHandle {
	unsigned nr;
	unsigned submitted;
	int all_nvfs;
	CUfileIOEvents_t ev[MAX_BATCH]; /* status under pool_lock */
	unsigned char reported[MAX_BATCH];
	struct io io[MAX_BATCH];
	struct job nvfs_job; /* all entries in one NVFS_IOCTL_BATCH_IO */
	nvfs_ioctl_ioargs_t args[MAX_BATCH];
};

static int nvfs_fd = -1;
static int driver_open;
static struct buf bufs[MAX_BUFS];
static struct stream streams[MAX_STREAMS]; /* under pool_lock */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static void drain_streams(CUstream_t only, int all);

static CUfileError_t status(CUfileOpError e)
{
	CUfileError_t r = { e, 0 };
	return r;
}

/*
 * force_compat_mode as the real library reads it (GDS API reference, "cuFile Compatibility
 * Mode"; troubleshooting guide, "Environment Variables Used by GPUDirect Storage"): the
 * CUFILE_FORCE_COMPAT_MODE environment variable overrides `properties.force_compat_mode` of
 * the cufile.json named by CUFILE_ENV_PATH_JSON (default /etc/cufile.json); true sends all
 * I/O through POSIX even where nvidia-fs could do it. The file is JSON with // comments; this
 * looks for the key outside comments and takes the literal after its colon. GDR_CUFILE_COMPAT=1
 * is the test bed's own switch (no file, no variable of the real library's).
 */
static int json_bool(const char *path, const char *key)
{
	static char text[65536];
	const char *p;
	FILE *f = fopen(path, "r");
	size_t n;

	if (!f)
		return 0;
	n = fread(text, 1, sizeof(text) - 1, f);
	fclose(f);
	text[n] = 0;
	for (p = text; (p = strstr(p, key)); p++) {
		const char *line = p;
		while (line > text && line[-1] != '\n')
			line--;
		if (memmem(line, (size_t)(p - line), "//", 2))
			continue; /* commented out */
		p += strlen(key);
		while (*p == ' ' || *p == '\t' || *p == ':')
			p++;
		return strncmp(p, "true", 4) == 0;
	}
	return 0;
}

static int forced_compat;
/*
 * `properties.use_pci_p2pdma` (CUFILE_USE_PCIP2PDMA overrides it), NVIDIA "GDS Support for
 * NVMe drives using Linux PCI P2PDMA": cuFile then moves an O_DIRECT file's data by O_DIRECT
 * I/O whose buffer is the GPU memory itself (the kernel pins its P2PDMA pages), not through
 * nvidia-fs. A failure is returned as the I/O's error (the guide names no fallback).
 */
static int use_p2pdma;

/* Read once, when the library loads: outside every cuFile call, so the file read is never
 * counted as a call's I/O (the real library reads it at its initialisation too). */
__attribute__((constructor)) static void read_compat_config(void)
{
	const char *v = getenv("GDR_CUFILE_COMPAT");
	const char *env = getenv("CUFILE_FORCE_COMPAT_MODE");
	const char *json = getenv("CUFILE_ENV_PATH_JSON");

	const char *p2p = getenv("CUFILE_USE_PCIP2PDMA");
	const char *file = json && *json ? json : "/etc/cufile.json";

	if (v && *v == '1')
		forced_compat = 1;
	else if (env && *env)
		forced_compat = strcmp(env, "true") == 0 || strcmp(env, "1") == 0;
	else
		forced_compat = json_bool(file, "\"force_compat_mode\"");
	if (p2p && *p2p)
		use_p2pdma = strcmp(p2p, "true") == 0 || strcmp(p2p, "1") == 0;
	else
		use_p2pdma = json_bool(file, "\"use_pci_p2pdma\"");
}

static int compat_forced(void)
{
	return forced_compat;
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
	drain_streams(NULL, 1);
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
	h->direct = !!(flags & O_DIRECT);
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
	b->fence = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (b->fence == MAP_FAILED) {
		munmap(shadow, b->shadow_len);
		b->fence = NULL;
		return status(CU_FILE_NVFS_SETUP_ERROR);
	}
	memset(b->fence, 0, 4096);
	b->fence_value = 0;
	memset(&p, 0, sizeof(p));
	p.map_args.size = length;
	p.map_args.cpuvaddr = (uintptr_t)shadow;
	p.map_args.gpuvaddr = (uintptr_t)bufPtr_base;
	p.map_args.end_fence_addr = (uintptr_t)b->fence;
	p.map_args.sbuf_block = b->shadow_len / 4096;
	if (ioctl(nvfs_fd, NVFS_IOCTL_MAP, &p) != 0) {
		/* not GPU memory nvidia-fs can pin: I/O on it goes the compatible way */
		munmap(shadow, b->shadow_len);
		munmap(b->fence, 4096);
		b->fence = NULL;
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
			if (bufs[i].fence)
				munmap(bufs[i].fence, 4096);
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

/* PCI P2PDMA: O_DIRECT I/O straight into (or out of) the GPU buffer. */
static ssize_t p2pdma_io(struct handle *h, char *gpu, size_t size, off_t off, int write)
{
	ssize_t r = write ? pwrite(h->fd, gpu, size, off) : pread(h->fd, gpu, size, off);

	return r < 0 ? -errno : r;
}

/* The I/O itself, on whichever thread runs it. */
static ssize_t io_here(CUfileHandle_t fh, const void *base, size_t size, off_t file_offset, off_t buf_offset,
		       int write)
{
	struct handle *h = fh;
	struct buf *b = find_buf(base);
	nvfs_ioctl_param_union p;

	if (!h)
		return -CU_FILE_HANDLE_NOT_REGISTERED;
	if (use_p2pdma && h->direct && !compat_forced())
		return p2pdma_io(h, (char *)base + buf_offset, size, file_offset, write);
	if (!h->nvfs || !b || !b->shadow || compat_forced())
		return compat_io(h, size, file_offset, write);
	fill_ioargs(&p.ioargs, h, b, base, size, file_offset, buf_offset, write);
	if (ioctl(nvfs_fd, write ? NVFS_IOCTL_WRITE : NVFS_IOCTL_READ, &p) != 0)
		return -errno;
	return p.ioargs.ioctl_return;
}

static void run_io(struct job *j)
{
	struct io *io = j->arg;

	io->result = io_here(io->fh, io->base, io->size, io->file_offset, io->buf_offset, io->write);
	if (io->out)
		*io->out = io->result;
	if (io->batch) {
		CUfileIOEvents_t *ev = &io->batch->ev[j->index];

		pthread_mutex_lock(&pool_lock);
		ev->status = io->result < 0 ? CUFILE_FAILED : CUFILE_COMPLETE;
		ev->ret = io->result < 0 ? 0 : (size_t)io->result;
		pthread_mutex_unlock(&pool_lock);
	}
}

static void io_init(struct io *io, CUfileHandle_t fh, const void *base, size_t size, off_t file_offset,
		    off_t buf_offset, int write)
{
	memset(io, 0, sizeof(*io));
	io->job.run = run_io;
	io->job.arg = io;
	io->fh = fh;
	io->base = base;
	io->size = size;
	io->file_offset = file_offset;
	io->buf_offset = buf_offset;
	io->write = write;
}

/* A small read or write on the calling thread; a large one in chunks by the workers. */
static ssize_t rw(CUfileHandle_t fh, const void *base, size_t size, off_t file_offset, off_t buf_offset,
		  int write)
{
	struct io chunk[PARALLELISM];
	size_t per = ((size + PARALLELISM - 1) / PARALLELISM + 4095) & ~4095UL;
	ssize_t total = 0;
	int i, n = 0;

	if (!fh || size < PARALLEL_MIN)
		return io_here(fh, base, size, file_offset, buf_offset, write);
	pthread_mutex_lock(&pool_lock);
	for (i = 0; i < PARALLELISM && (size_t)i * per < size; i++, n++) {
		size_t len = size - i * per < per ? size - i * per : per;

		io_init(&chunk[i], fh, base, len, file_offset + i * per, buf_offset + i * per, write);
		pool_submit_locked(&chunk[i].job);
	}
	pthread_mutex_unlock(&pool_lock);
	for (i = 0; i < n; i++) {
		pool_wait(&chunk[i].job);
		if (chunk[i].result < 0 && total >= 0)
			total = chunk[i].result;
		else if (total >= 0)
			total += chunk[i].result;
	}
	return total;
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

/* The stream's entry (pool_lock held); NULL when the table is full. */
static struct stream *stream_of(CUstream_t id)
{
	struct stream *free_slot = NULL;
	int i;

	for (i = 0; i < MAX_STREAMS; i++) {
		if (streams[i].used && streams[i].id == id)
			return &streams[i];
		if (!streams[i].used && !free_slot)
			free_slot = &streams[i];
	}
	if (free_slot) {
		memset(free_slot, 0, sizeof(*free_slot));
		free_slot->id = id;
		free_slot->used = 1;
	}
	return free_slot;
}

/* Waits for a stream's queued I/O (`all`: every stream's) and forgets it. */
static void drain_streams(CUstream_t only, int all)
{
	int i;

	pthread_mutex_lock(&pool_lock);
	for (i = 0; i < MAX_STREAMS; i++) {
		struct stream *st = &streams[i];

		if (!st->used || (!all && st->id != only))
			continue;
		while (st->jobs) {
			struct io *io = st->jobs;

			while (!io->job.done)
				pool_wait_locked(NULL);
			st->jobs = io->stream_next;
			free(io);
		}
		st->used = 0;
	}
	pthread_mutex_unlock(&pool_lock);
}

/* Queued on the stream after what is already there; runs on a worker after this returns. */
static CUfileError_t rw_async(CUfileHandle_t fh, void *base, size_t *size_p, off_t *file_offset_p,
			      off_t *buf_offset_p, ssize_t *out, CUstream_t stream, int write)
{
	struct stream *st;
	struct io *io;

	if (!size_p || !file_offset_p || !buf_offset_p || !out)
		return status(CU_FILE_INVALID_VALUE);
	if (!fh)
		return status(CU_FILE_HANDLE_NOT_REGISTERED);
	io = malloc(sizeof(*io));
	if (!io)
		return status(CU_FILE_INTERNAL_ERROR);
	io_init(io, fh, base, *size_p, *file_offset_p, *buf_offset_p, write);
	io->out = out;
	pthread_mutex_lock(&pool_lock);
	st = stream_of(stream);
	if (!st) {
		pthread_mutex_unlock(&pool_lock);
		free(io);
		return status(CU_FILE_INTERNAL_ERROR);
	}
	io->job.after = st->last;
	st->last = &io->job;
	io->stream_next = st->jobs;
	st->jobs = io;
	pool_submit_locked(&io->job);
	pthread_mutex_unlock(&pool_lock);
	return status(CU_FILE_SUCCESS);
}

CUfileError_t cuFileReadAsync(CUfileHandle_t fh, void *bufPtr_base, size_t *size_p, off_t *file_offset_p,
			      off_t *bufPtr_offset_p, ssize_t *bytes_read_p, CUstream_t stream)
{
	return rw_async(fh, bufPtr_base, size_p, file_offset_p, bufPtr_offset_p, bytes_read_p, stream, 0);
}

CUfileError_t cuFileWriteAsync(CUfileHandle_t fh, void *bufPtr_base, size_t *size_p, off_t *file_offset_p,
			       off_t *bufPtr_offset_p, ssize_t *bytes_written_p, CUstream_t stream)
{
	return rw_async(fh, bufPtr_base, size_p, file_offset_p, bufPtr_offset_p, bytes_written_p, stream, 1);
}

CUfileError_t cuFileStreamRegister(CUstream_t stream, unsigned flags)
{
	int ok;

	if (flags > 15)
		return status(CU_FILE_INVALID_VALUE);
	if (!driver_open)
		return status(CU_FILE_DRIVER_NOT_INITIALIZED);
	pthread_mutex_lock(&pool_lock);
	ok = stream_of(stream) != NULL;
	pthread_mutex_unlock(&pool_lock);
	return status(ok ? CU_FILE_SUCCESS : CU_FILE_INTERNAL_ERROR);
}

/* Releases the stream's resources once its queued I/O is done. */
CUfileError_t cuFileStreamDeregister(CUstream_t stream)
{
	if (!driver_open)
		return status(CU_FILE_DRIVER_NOT_INITIALIZED);
	drain_streams(stream, 0);
	return status(CU_FILE_SUCCESS);
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

/* Waits (pool_lock held) until no entry of the batch is still running. */
static void batch_quiesce_locked(CUfileBatchHandle_t b)
{
	unsigned i;

	for (i = 0; i < b->submitted; i++)
		while (b->ev[i].status == CUFILE_PENDING)
			pool_wait_locked(NULL);
}

/* The registered buffer whose shadow buffer is @shadow. */
static struct buf *shadow_buf(uint64_t shadow)
{
	int i;

	for (i = 0; i < MAX_BUFS; i++)
		if (bufs[i].shadow && bufs[i].shadow == shadow)
			return &bufs[i];
	return NULL;
}

/* An async entry's bytes: the driver's completion writes them to its buffer's fence page
 * (nvfs_io_free: result, then end_fence_val); the ioctl never writes them back. -ETIMEDOUT
 * after 30 s. */
static ssize_t wait_fence(struct buf *b, uint64_t value)
{
	struct timespec t0, t, nap = { 0, 100000 };

	clock_gettime(CLOCK_MONOTONIC, &t0);
	while (b->fence->end_fence_val != value) {
		clock_gettime(CLOCK_MONOTONIC, &t);
		if (t.tv_sec - t0.tv_sec > 30)
			return -ETIMEDOUT;
		nanosleep(&nap, NULL);
	}
	__sync_synchronize();
	return (ssize_t)(int64_t)b->fence->result;
}

/* The entries in NVFS_IOCTL_BATCH_IO calls, on a worker: async (sync = 0), each with its
 * buffer's next fence value. nvidia-fs runs one I/O per buffer at a time, so entries that
 * share a buffer go in later rounds, each round after the last one's fences. */
static void run_nvfs_batch(struct job *j)
{
	CUfileBatchHandle_t b = j->arg;
	nvfs_ioctl_param_union p;
	nvfs_ioctl_ioargs_t round[MAX_BATCH];
	unsigned idx[MAX_BATCH], done = 0, i, k, n;
	unsigned char sent[MAX_BATCH] = { 0 };
	struct buf *rb[MAX_BATCH];

	while (done < b->submitted) {
		for (i = 0, n = 0; i < b->submitted; i++) {
			struct buf *bf = shadow_buf(b->args[i].cpuvaddr);

			if (sent[i])
				continue;
			for (k = 0; k < n && rb[k] != bf; k++)
				;
			if (k < n)
				continue; /* its buffer is busy this round */
			round[n] = b->args[i];
			round[n].sync = 0;
			round[n].end_fence_value = ++bf->fence_value;
			rb[n] = bf;
			idx[n++] = i;
			sent[i] = 1;
		}
		memset(&p, 0, sizeof(p));
		p.batch_ioargs.ctx_id = (uintptr_t)b;
		p.batch_ioargs.nents = n;
		p.batch_ioargs.io_entries = (uintptr_t)round;
		int failed = ioctl(nvfs_fd, NVFS_IOCTL_BATCH_IO, &p) != 0;
		for (k = 0; k < n; k++) {
			ssize_t r = failed ? -1 : wait_fence(rb[k], round[k].end_fence_value);

			pthread_mutex_lock(&pool_lock);
			b->ev[idx[k]].status = r < 0 ? CUFILE_FAILED : CUFILE_COMPLETE;
			b->ev[idx[k]].ret = r < 0 ? 0 : (size_t)r;
			pthread_mutex_unlock(&pool_lock);
		}
		done += n;
	}
}

/* Entries are queued and the call returns: all through nvidia-fs (one BATCH_IO) when each can
 * be, else each the compatible way, in parallel on the workers. */
CUfileError_t cuFileBatchIOSubmit(CUfileBatchHandle_t batch_idp, unsigned nr, CUfileIOParams_t *iocbp,
				  unsigned int flags)
{
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
	}
	pthread_mutex_lock(&pool_lock);
	batch_quiesce_locked(batch_idp);
	batch_idp->submitted = nr;
	batch_idp->all_nvfs = all_nvfs;
	for (i = 0; i < nr; i++) {
		CUfileIOParams_t *e = &iocbp[i];

		batch_idp->ev[i].cookie = e->cookie;
		batch_idp->ev[i].status = CUFILE_PENDING;
		batch_idp->ev[i].ret = 0;
		batch_idp->reported[i] = 0;
		if (all_nvfs) {
			fill_ioargs(&batch_idp->args[i], e->fh, find_buf(e->u.batch.devPtr_base), e->u.batch.devPtr_base,
				    e->u.batch.size, e->u.batch.file_offset, e->u.batch.devPtr_offset,
				    e->opcode == CUFILE_WRITE);
			continue;
		}
		io_init(&batch_idp->io[i], e->fh, e->u.batch.devPtr_base, e->u.batch.size, e->u.batch.file_offset,
			e->u.batch.devPtr_offset, e->opcode == CUFILE_WRITE);
		batch_idp->io[i].batch = batch_idp;
		batch_idp->io[i].job.index = i;
		pool_submit_locked(&batch_idp->io[i].job);
	}
	if (all_nvfs && nr) {
		memset(&batch_idp->nvfs_job, 0, sizeof(batch_idp->nvfs_job));
		batch_idp->nvfs_job.run = run_nvfs_batch;
		batch_idp->nvfs_job.arg = batch_idp;
		pool_submit_locked(&batch_idp->nvfs_job);
	}
	pthread_mutex_unlock(&pool_lock);
	return status(CU_FILE_SUCCESS);
}

/* Entries completed since the last call, once each: waits until at least min_nr have (or the
 * timeout, relative, passes; NULL: no limit), returns at most *nr. */
CUfileError_t cuFileBatchIOGetStatus(CUfileBatchHandle_t batch_idp, unsigned min_nr, unsigned *nr,
				     CUfileIOEvents_t *iocbp, struct timespec *timeout)
{
	struct timespec abs;
	unsigned i, n, ready;

	if (!batch_idp || !nr || !iocbp)
		return status(CU_FILE_INVALID_VALUE);
	if (timeout) {
		clock_gettime(CLOCK_REALTIME, &abs);
		abs.tv_sec += timeout->tv_sec + (abs.tv_nsec + timeout->tv_nsec) / 1000000000L;
		abs.tv_nsec = (abs.tv_nsec + timeout->tv_nsec) % 1000000000L;
	}
	pthread_mutex_lock(&pool_lock);
	for (;;) {
		for (i = 0, ready = 0; i < batch_idp->submitted; i++)
			ready += batch_idp->ev[i].status != CUFILE_PENDING && !batch_idp->reported[i];
		if (ready >= min_nr || ready >= *nr || pool_wait_locked(timeout ? &abs : NULL) == ETIMEDOUT)
			break;
	}
	for (i = 0, n = 0; i < batch_idp->submitted && n < *nr; i++) {
		if (batch_idp->ev[i].status == CUFILE_PENDING || batch_idp->reported[i])
			continue;
		batch_idp->reported[i] = 1;
		iocbp[n++] = batch_idp->ev[i];
	}
	pthread_mutex_unlock(&pool_lock);
	*nr = n;
	return status(CU_FILE_SUCCESS);
}

/* I/O already handed to the kernel can't be taken back: waits for it. */
CUfileError_t cuFileBatchIOCancel(CUfileBatchHandle_t batch_idp)
{
	if (!batch_idp)
		return status(CU_FILE_INVALID_VALUE);
	pthread_mutex_lock(&pool_lock);
	batch_quiesce_locked(batch_idp);
	pthread_mutex_unlock(&pool_lock);
	return status(CU_FILE_SUCCESS);
}

void cuFileBatchIODestroy(CUfileBatchHandle_t batch_idp)
{
	if (!batch_idp)
		return;
	pthread_mutex_lock(&pool_lock);
	batch_quiesce_locked(batch_idp);
	pthread_mutex_unlock(&pool_lock);
	free(batch_idp);
}
