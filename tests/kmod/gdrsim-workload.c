// SPDX-License-Identifier: GPL-2.0 OR MIT
/*
 * gdrsim-workload: drives the simulated NVIDIA GPUDirect stack (gdrsim.ko)
 * from userspace, each action in this process's own context, and prints one
 * JSON object per line for every action so a test can compare what it did with
 * what a tracer saw.  Every line has "action", "pid", "tid", "comm"; failed
 * actions have "ok": false, "errno" and "error".
 *
 * usage: gdrsim-workload [--hold SECS] [--no-release] [--access N] [--flags N] CMD ARGS
 * (README.md: each command's actions and fields)
 *   hold-gpu SECS                 open /dev/nvidiactl, /dev/nvidia0, /dev/nvidia-uvm; sleep
 *   peer SIZE | peer-host SIZE    GPU (or host) memory: ibv_reg_mr on efa_sim0 (ib_uverbs ->
 *                                 reg_user_mr -> ib_umem_get_peer), dereg (gdrsim-efa.c)
 *   peer-legacy SIZE              the same with persistent_api_support=0 (restored after)
 *   free-callback SIZE            legacy registration, GPU memory freed under it, dereg
 *   dmabuf nv|nvidia|other SIZE [OFFSET]
 *                                 export a dma-buf ("nv_dmabuf" | "nvidia" | "fake_exporter"),
 *                                 ibv_reg_dmabuf_mr on efa_sim0 (the kernel's real
 *                                 ib_umem_dmabuf_get_pinned), close the fd, dereg
 *   dmabuf-probe                  NCCL's support probe: ibv_reg_dmabuf_mr with fd -1 on efa_sim0
 *   ioctl-peer SIZE               GPU memory through /dev/gdrsim's GDRSIM_IOC_PEER_REG: a pin
 *                                 made in no uverbs verb (no real system does this), release
 *   nvfs-read|nvfs-write[-async] FILE SIZE [OFFSET] | nvfs-batch FILE SIZE | nvfs-ioctls
 *                                 GPUDirect Storage I/O (O_DIRECT; -async: sync=0, the bytes
 *                                 come from the fence page), BATCH_IO, each NVFS ioctl once
 *   host-mr SIZE                  hold the GPU open and ibv_reg_mr host memory ($GDRSIM_IBDEV)
 *   verbs-peer SIZE | verbs-host SIZE | verbs-dmabuf nv|nvidia|other SIZE [OFFSET]
 *                                 the same registrations through libibverbs on the module's
 *                                 NIC (efa_sim0): ibv_reg_mr, ibv_reg_dmabuf_mr (gdrsim-verbs.c)
 *   mlx5-queues [--gpu-qp] [--gpu-dbr] [--cq-ex] | devx-umem host|gpu|dmabuf SIZE |
 *   ibgda [--no-sys-admin] [HEAP_SIZE]   queues, DEVX UMEMs and NVSHMEM IBGDA's setup on the
 *                                 mlx5-shaped NIC (mlx5_0) through libmlx5 (gdrsim-mlx5.c)
 * SIZE accepts K, M, G suffixes (powers of 1024).  GPU sizes are rounded up to 64 KiB.
 *   --hold SECS     sleep after registering, before releasing (default 0)
 *   --hold-stdin    after registering, print {"action":"hold"} and wait for a line on stdin
 *                   before releasing (a test's handshake)
 *   --no-release    leave registrations and GPU memory to process exit
 *   --access N      IB access flags (default 7: local write, remote write, remote read)
 *   --flags N       peer_mem_flags for ib_umem_get_peer (default 3: ALLOW|INVAL_SUPP); on
 *                   efa_sim0 the module parameter efa_peer_mem_flags, set around the
 *                   registration when it differs
 * The commands through libibverbs always use efa_sim0 ($GDRSIM_IBDEV is for host-mr and
 * verbs-*) and print what the module knows of each MR (GDRSIM_IOC_MR_INFO).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>

#include "gdrsim_uapi.h"

#include "gdrsim-workload.h"

#define PARAM_DIR "/sys/module/gdrsim/parameters/"
#define GPU_ALIGN (2ULL << 20)

unsigned hold_secs;
int hold_stdin;
int no_release;
unsigned sends;
unsigned access_flags = GDRSIM_ACCESS_LOCAL_WRITE | GDRSIM_ACCESS_REMOTE_WRITE |
			       GDRSIM_ACCESS_REMOTE_READ;
unsigned peer_flags = GDRSIM_PEER_MEM_ALLOW | GDRSIM_PEER_MEM_INVAL_SUPP;
char comm[64];
int gdrsim_fd = -1;
int failures;

/* ---------------------------------------------------------------- JSON */

void json_str(FILE *f, const char *s)
{
	fputc('"', f);
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;

		if (c == '"' || c == '\\')
			fprintf(f, "\\%c", c);
		else if (c < 0x20)
			fprintf(f, "\\u%04x", c);
		else
			fputc(c, f);
	}
	fputc('"', f);
}

/*
 * emit("peer_reg", ok, err, "addr", 'u', (uint64_t)x, "client", 's', str, NULL)
 * types: 'u' uint64_t, 'i' int64_t, 's' string, 'b' bool (int)
 */
void emit(const char *action, int ok, int err, ...)
{
	va_list ap;
	const char *key;

	printf("{\"action\":");
	json_str(stdout, action);
	printf(",\"pid\":%d,\"tid\":%ld,\"comm\":", getpid(), (long)syscall(SYS_gettid));
	json_str(stdout, comm);
	printf(",\"ok\":%s", ok ? "true" : "false");
	va_start(ap, err);
	while ((key = va_arg(ap, const char *))) {
		int type = va_arg(ap, int);

		printf(",");
		json_str(stdout, key);
		printf(":");
		switch (type) {
		case 'u':
			printf("%llu", (unsigned long long)va_arg(ap, uint64_t));
			break;
		case 'i':
			printf("%lld", (long long)va_arg(ap, int64_t));
			break;
		case 'b':
			printf("%s", va_arg(ap, int) ? "true" : "false");
			break;
		default:
			json_str(stdout, va_arg(ap, const char *));
		}
	}
	va_end(ap);
	if (!ok) {
		printf(",\"errno\":%d,\"error\":", err);
		json_str(stdout, strerror(err));
		failures++;
	}
	printf("}\n");
	fflush(stdout);
}


/* ---------------------------------------------------------------- helpers */

uint64_t parse_size(const char *s)
{
	char *end;
	unsigned long long v = strtoull(s, &end, 0);

	switch (*end) {
	case 'k': case 'K': v <<= 10; break;
	case 'm': case 'M': v <<= 20; break;
	case 'g': case 'G': v <<= 30; break;
	case 0: break;
	default:
		fprintf(stderr, "bad size: %s\n", s);
		exit(2);
	}
	return v;
}

uint64_t gpu_round(uint64_t size)
{
	return (size + GDRSIM_GPU_PAGE_SIZE - 1) & ~(GDRSIM_GPU_PAGE_SIZE - 1);
}

void hold(void)
{
	char line[64];

	if (hold_stdin) {
		emit("hold", 1, 0, U("secs", 0), NULL);
		if (!fgets(line, sizeof(line), stdin))
			emit("hold", 0, EPIPE, S("error", "stdin closed while holding"), NULL);
	} else if (hold_secs) {
		emit("hold", 1, 0, U("secs", hold_secs), NULL);
		sleep(hold_secs);
	}
}

static int open_dev(const char *path)
{
	int fd = open(path, O_RDWR | O_CLOEXEC);

	if (fd < 0) {
		emit("open", 0, errno, S("path", path), NULL);
		exit(1);
	}
	return fd;
}

static int nvidia0_fd = -1;

/* what cuInit() leaves open */
void gpu_open(void)
{
	int ctl = open_dev("/dev/nvidiactl");
	int uvm = open_dev("/dev/nvidia-uvm");

	nvidia0_fd = open_dev("/dev/nvidia0");
	emit("gpu_open", 1, 0, I("nvidiactl_fd", ctl), I("nvidia0_fd", nvidia0_fd),
	     I("nvidia_uvm_fd", uvm), NULL);
}

void gdrsim_open(void)
{
	if (gdrsim_fd < 0)
		gdrsim_fd = open_dev("/dev/gdrsim");
}

/* cudaMalloc(): a 2 MiB aligned mapping of /dev/nvidia0 */
uint64_t gpu_alloc(uint64_t size)
{
	uint64_t len = gpu_round(size), va;
	void *resv, *p;

	resv = mmap(NULL, len + GPU_ALIGN, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
		    -1, 0);
	if (resv == MAP_FAILED) {
		emit("gpu_alloc", 0, errno, U("size", len), NULL);
		exit(1);
	}
	va = ((uint64_t)(uintptr_t)resv + GPU_ALIGN - 1) & ~(GPU_ALIGN - 1);
	p = mmap((void *)(uintptr_t)va, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED,
		 nvidia0_fd, 0);
	if (p == MAP_FAILED) {
		emit("gpu_alloc", 0, errno, U("size", len), NULL);
		exit(1);
	}
	if (va > (uint64_t)(uintptr_t)resv)
		munmap(resv, va - (uint64_t)(uintptr_t)resv);
	if ((uint64_t)(uintptr_t)resv + len + GPU_ALIGN > va + len)
		munmap((void *)(uintptr_t)(va + len),
		       (uint64_t)(uintptr_t)resv + len + GPU_ALIGN - (va + len));
	emit("gpu_alloc", 1, 0, U("va", va), U("size", len), NULL);
	return va;
}

/* cudaFree() */
void gpu_free(uint64_t va, uint64_t size)
{
	int r = munmap((void *)(uintptr_t)va, gpu_round(size));

	emit("gpu_free", r == 0, errno, U("va", va), U("size", gpu_round(size)), NULL);
}

/* /sys/module/gdrsim/parameters/NAME as a number; -1 (reported as read_NAME) if unreadable */
int param_read(const char *name)
{
	char path[128], buf[16] = "", what[64];
	int fd, n;

	snprintf(path, sizeof(path), PARAM_DIR "%s", name);
	fd = open(path, O_RDONLY);
	if (fd < 0) {
		snprintf(what, sizeof(what), "read_%s", name);
		emit(what, 0, errno, S("path", path), NULL);
		return -1;
	}
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	return n > 0 ? (int)strtol(buf, NULL, 0) : -1;
}

/* writes it, reported as set_NAME {value}; 0 or -1 */
int param_set(const char *name, int v)
{
	char path[128], buf[16], what[64];
	int fd, ok;

	snprintf(path, sizeof(path), PARAM_DIR "%s", name);
	snprintf(what, sizeof(what), "set_%s", name);
	fd = open(path, O_WRONLY);
	snprintf(buf, sizeof(buf), "%d", v);
	ok = fd >= 0 && write(fd, buf, strlen(buf)) == (ssize_t)strlen(buf);
	emit(what, ok, errno, I("value", v), NULL);
	if (fd >= 0)
		close(fd);
	return ok ? 0 : -1;
}

/* GDRSIM_IOC_PEER_REG: ib_umem_get_peer in /dev/gdrsim's ioctl, in no uverbs verb */
static uint64_t peer_reg(uint64_t addr, uint64_t size, const char *memory)
{
	struct gdrsim_peer_reg a = {
		.addr = addr, .size = size, .access = access_flags, .peer_mem_flags = peer_flags,
	};
	int r;

	gdrsim_open();
	r = ioctl(gdrsim_fd, GDRSIM_IOC_PEER_REG, &a);
	emit("peer_reg", r == 0, errno, S("memory", memory), U("addr", addr), U("size", size),
	     U("access", access_flags), U("peer_mem_flags", peer_flags), U("handle", a.handle),
	     B("is_peer", a.is_peer), S("client", a.client), U("page_size", a.page_size),
	     U("nmap", a.nmap), NULL);
	return r == 0 ? a.handle : 0;
}

static void release(uint64_t handle, const char *kind)
{
	struct gdrsim_release a = { .handle = handle };
	int r;

	if (!handle)
		return;
	r = ioctl(gdrsim_fd, GDRSIM_IOC_RELEASE, &a);
	emit("release", r == 0, errno, U("handle", handle), S("kind", kind), NULL);
}

const char *exporter_name(unsigned e)
{
	switch (e) {
	case GDRSIM_EXPORTER_NV_DMABUF: return "nv_dmabuf";
	case GDRSIM_EXPORTER_NVIDIA: return "nvidia";
	default: return "fake_exporter";
	}
}

/* ---------------------------------------------------------------- commands */

static int cmd_hold_gpu(unsigned secs)
{
	gpu_open();
	emit("hold", 1, 0, U("secs", secs), NULL);
	sleep(secs);
	return 0;
}

/* ioctl-peer: GPU memory registered in /dev/gdrsim's ioctl (mlx5_sim0), not in a uverbs verb */
static int cmd_ioctl_peer(uint64_t size)
{
	uint64_t va, h;

	gpu_open();
	va = gpu_alloc(size);
	h = peer_reg(va, size, "gpu");
	hold();
	if (no_release)
		return failures ? 1 : 0;
	release(h, "peer");
	gpu_free(va, size);
	return failures ? 1 : 0;
}

/*
 * A symbol of the test libcuda: $GDRSIM_LIBCUDA, else libcuda/libcuda.so.1 beside this
 * program (make workload builds it there); NULL (reported on stderr) when there is none.
 */
void *libcuda_sym(const char *name)
{
	static void *lib;
	char path[4096];
	const char *env = getenv("GDRSIM_LIBCUDA");
	void *sym;
	ssize_t n;

	if (!lib && env) {
		lib = dlopen(env, RTLD_NOW);
	} else if (!lib && (n = readlink("/proc/self/exe", path, sizeof(path) - 32)) > 0) {
		path[n] = 0;
		strcpy(strrchr(path, '/') + 1, "libcuda/libcuda.so.1");
		lib = dlopen(path, RTLD_NOW);
	}
	sym = lib ? dlsym(lib, name) : NULL;
	if (!sym)
		fprintf(stderr, "no %s in %s\n", name, env ? env : "libcuda/libcuda.so.1");
	return sym;
}

/*
 * cuMemGetHandleForAddressRange(&fd, va, len, DMA_BUF_FD, 0) of GPU memory (va 0: none, the
 * "other" exporter's fake buffer): through libcuda when $GDRSIM_LIBCUDA names one
 * (tests/kmod/libcuda-sim.c), else the ioctl it wraps.  Returns the fd or -1 (reported).
 */
int dmabuf_export_va(uint64_t va, uint64_t len, unsigned exporter)
{
	struct gdrsim_dmabuf_export ex = { .va = va, .size = len, .exporter = exporter };
	int r;

	gdrsim_open();
	if (getenv("GDRSIM_LIBCUDA")) {
		int (*get)(void *, unsigned long long, size_t, int, unsigned long long) =
			(int (*)(void *, unsigned long long, size_t, int, unsigned long long))
				libcuda_sym("cuMemGetHandleForAddressRange");
		if (!get)
			exit(2);
		setenv("GDRSIM_EXPORTER", exporter == GDRSIM_EXPORTER_NV_DMABUF ? "nv" :
			exporter == GDRSIM_EXPORTER_NVIDIA ? "nvidia" : "other", 1);
		r = get(&ex.fd, va, len, 1 /* CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD */, 0);
		if (r)
			errno = EINVAL;
		r = r ? -1 : 0;
	} else {
		r = ioctl(gdrsim_fd, GDRSIM_IOC_DMABUF_EXPORT, &ex);
	}
	emit("dmabuf_export", r == 0, errno, U("va", va), U("size", len),
	     S("exporter", exporter_name(exporter)), I("fd", r == 0 ? ex.fd : -1), NULL);
	return r == 0 ? ex.fd : -1;
}

/* GPU memory (for the NVIDIA exporters) exported as a dma-buf; sets *va (0: "other") */
int dmabuf_export(const char *which, uint64_t len, uint64_t *va_out, unsigned *exporter)
{
	uint64_t va = 0;

	if (!strcmp(which, "nv"))
		*exporter = GDRSIM_EXPORTER_NV_DMABUF;
	else if (!strcmp(which, "nvidia"))
		*exporter = GDRSIM_EXPORTER_NVIDIA;
	else if (!strcmp(which, "other"))
		*exporter = GDRSIM_EXPORTER_OTHER;
	else {
		fprintf(stderr, "dmabuf: exporter must be nv, nvidia or other\n");
		exit(2);
	}
	gpu_open();
	if (*exporter != GDRSIM_EXPORTER_OTHER)
		va = gpu_alloc(len);
	*va_out = va;
	return dmabuf_export_va(va, len, *exporter);
}

static int nvfs_fd = -1;

static void nvfs_fill_file_args(nvfs_ioctl_ioargs_t *io, int fd)
{
	struct stat st;

	if (fstat(fd, &st) == 0) {
		io->file_args.inum = st.st_ino;
		io->file_args.majdev = major(st.st_dev);
		io->file_args.mindev = minor(st.st_dev);
	}
}

/* One registered GPU buffer: its shadow buffer and its fence page (async results). */
struct nvfs_buf {
	uint64_t va, len, shadow, slen;
	struct nvfs_ioctl_metapage *fence;
};

/*
 * cuFileBufRegister: shadow buffer + a 4 KiB-aligned fence page + NVFS_IOCTL_MAP.
 */
static void nvfs_map(struct nvfs_buf *nb)
{
	nvfs_ioctl_param_union p;
	void *shadow, *fence;
	int r;

	nb->slen = nb->len < (4ULL << 20) ? nb->len : (4ULL << 20);
	shadow = mmap(NULL, nb->slen, PROT_READ | PROT_WRITE, MAP_SHARED, nvfs_fd, 0);
	if (shadow == MAP_FAILED) {
		emit("nvfs_shadow_mmap", 0, errno, U("size", nb->slen), NULL);
		exit(1);
	}
	fence = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (fence == MAP_FAILED) {
		emit("nvfs_fence_mmap", 0, errno, NULL);
		exit(1);
	}
	memset(fence, 0, 4096);
	nb->fence = fence;
	memset(&p, 0, sizeof(p));
	p.map_args.size = nb->len;
	p.map_args.cpuvaddr = (uintptr_t)shadow;
	p.map_args.gpuvaddr = nb->va;
	p.map_args.end_fence_addr = (uintptr_t)fence;
	p.map_args.sbuf_block = nb->slen / 4096;
	r = ioctl(nvfs_fd, NVFS_IOCTL_MAP, &p);
	emit("nvfs_map", r == 0, errno, U("ioctl", NVFS_IOCTL_MAP), U("cpuvaddr", (uintptr_t)shadow),
	     U("gpuvaddr", nb->va), U("size", nb->len), U("sbuf_block", nb->slen / 4096), NULL);
	nb->shadow = (uintptr_t)shadow;
}

/*
 * What libcufile does for an async I/O: poll the fence page until the driver's
 * completion wrote end_fence_val (the bytes are in result).  Gives up after 30 s
 * (-ETIMEDOUT): a driver that never completes.
 */
static int64_t nvfs_wait_fence(struct nvfs_buf *nb, uint64_t value)
{
	struct timespec t0, t, nap = { 0, 100000 };

	clock_gettime(CLOCK_MONOTONIC, &t0);
	while (nb->fence->end_fence_val != value) {
		clock_gettime(CLOCK_MONOTONIC, &t);
		if (t.tv_sec - t0.tv_sec > 30)
			return -ETIMEDOUT;
		nanosleep(&nap, NULL);
	}
	__sync_synchronize();
	return (int64_t)nb->fence->result;
}

static void nvfs_unmap(struct nvfs_buf *nb)
{
	/* cuFileBufDeregister: the shadow buffer goes, the GPU pages are released */
	int r = munmap((void *)(uintptr_t)nb->shadow, nb->slen);

	emit("nvfs_unmap", r == 0, errno, U("cpuvaddr", nb->shadow), NULL);
	munmap(nb->fence, 4096);
	gpu_free(nb->va, nb->len);
}

static void nvfs_entry(nvfs_ioctl_ioargs_t *io, struct nvfs_buf *nb, int fd, uint64_t offset,
		       uint64_t size, int write, uint64_t fence_value)
{
	memset(io, 0, sizeof(*io));
	io->cpuvaddr = nb->shadow;
	io->offset = offset;
	io->size = size;
	io->fd = fd;
	io->sync = fence_value == 0;
	io->end_fence_value = fence_value;
	io->optype = write ? 1 : 0;
	nvfs_fill_file_args(io, fd);
}

/* never written by the driver (it copies back only the batch header): must stay */
#define NVFS_UNWRITTEN (-7777)

/* mode: 0 sync READ/WRITE, 1 BATCH_IO (two async entries), 2 async READ/WRITE */
static int cmd_nvfs_rw(const char *path, uint64_t size, uint64_t offset, int write, int mode)
{
	uint64_t len = (size + 4095) & ~4095ULL;
	struct nvfs_buf nb[2];
	nvfs_ioctl_param_union p;
	int fd, r, i, nbufs = mode == 1 ? 2 : 1;

	gpu_open();
	nvfs_fd = open_dev("/dev/nvidia-fs0");
	fd = open(path, (write ? O_WRONLY | O_CREAT : O_RDONLY) | O_DIRECT | O_CLOEXEC, 0644);
	emit("open", fd >= 0, errno, S("path", path), I("fd", fd), B("o_direct", 1), NULL);
	if (fd < 0)
		return 1;
	memset(nb, 0, sizeof(nb));
	for (i = 0; i < nbufs; i++) {
		/* a batch's entries each have their own buffer (one I/O per buffer at a time) */
		nb[i].len = nbufs == 2 ? ((len / 2 + 4095) & ~4095ULL) : len;
		nb[i].va = gpu_alloc(nb[i].len);
		nvfs_map(&nb[i]);
	}
	if (mode == 1) {
		nvfs_ioctl_ioargs_t ents[2];
		int64_t res[2];

		for (i = 0; i < 2; i++) {
			nvfs_entry(&ents[i], &nb[i], fd, offset + i * nb[0].len, nb[i].len, write, i + 1);
			ents[i].ioctl_return = NVFS_UNWRITTEN;
		}
		memset(&p, 0, sizeof(p));
		p.batch_ioargs.ctx_id = 1;
		p.batch_ioargs.nents = 2;
		p.batch_ioargs.io_entries = (uintptr_t)ents;
		r = ioctl(nvfs_fd, NVFS_IOCTL_BATCH_IO, &p);
		for (i = 0; i < 2; i++)
			res[i] = r == 0 ? nvfs_wait_fence(&nb[i], i + 1) : -1;
		emit("nvfs_batch", r == 0 && res[0] >= 0 && res[1] >= 0, r ? errno : EIO,
		     U("ioctl", NVFS_IOCTL_BATCH_IO), S("op", write ? "write" : "read"),
		     S("path", path), I("fd", fd), U("nents", 2), U("offset", offset),
		     U("size", nb[0].len + nb[1].len), I("ret0", res[0]), I("ret1", res[1]),
		     I("entry_ioctl_return0", ents[0].ioctl_return),
		     I("entry_ioctl_return1", ents[1].ioctl_return), NULL);
	} else {
		int async = mode == 2;
		int64_t result;
		const char *what = async ? (write ? "nvfs_write_async" : "nvfs_read_async")
					 : (write ? "nvfs_write" : "nvfs_read");

		memset(&p, 0, sizeof(p));
		nvfs_entry(&p.ioargs, &nb[0], fd, offset, len, write, async ? 1 : 0);
		r = ioctl(nvfs_fd, write ? NVFS_IOCTL_WRITE : NVFS_IOCTL_READ, &p);
		result = r != 0 ? -1 : async ? nvfs_wait_fence(&nb[0], 1) : p.ioargs.ioctl_return;
		emit(what, r == 0 && result >= 0, r ? errno : EIO,
		     U("ioctl", write ? NVFS_IOCTL_WRITE : NVFS_IOCTL_READ), S("path", path),
		     I("fd", fd), U("offset", offset), U("size", len), U("gpuvaddr", nb[0].va),
		     U("cpuvaddr", nb[0].shadow), I("ioctl_return", p.ioargs.ioctl_return),
		     I("bytes", result), NULL);
	}
	hold();
	close(fd);
	if (no_release)
		return failures ? 1 : 0;
	for (i = 0; i < nbufs; i++)
		nvfs_unmap(&nb[i]);
	return failures ? 1 : 0;
}

static int cmd_nvfs_ioctls(void)
{
	static const struct { unsigned long nr; const char *name; } ioctls[] = {
		{ NVFS_IOCTL_REMOVE, "REMOVE" }, { NVFS_IOCTL_READ, "READ" },
		{ NVFS_IOCTL_MAP, "MAP" }, { NVFS_IOCTL_WRITE, "WRITE" },
		{ NVFS_IOCTL_SET_RDMA_REG_INFO, "SET_RDMA_REG_INFO" },
		{ NVFS_IOCTL_GET_RDMA_REG_INFO, "GET_RDMA_REG_INFO" },
		{ NVFS_IOCTL_CLEAR_RDMA_REG_INFO, "CLEAR_RDMA_REG_INFO" },
		{ NVFS_IOCTL_BATCH_IO, "BATCH_IO" },
	};
	nvfs_ioctl_param_union p;
	unsigned i;

	nvfs_fd = open_dev("/dev/nvidia-fs0");
	for (i = 0; i < sizeof(ioctls) / sizeof(ioctls[0]); i++) {
		int r, e;

		memset(&p, 0, sizeof(p));
		p.ioargs.fd = -1;
		r = ioctl(nvfs_fd, ioctls[i].nr, &p);
		e = errno;
		/* READ/WRITE/MAP/BATCH with empty arguments are refused (EINVAL/EBADF) */
		printf("{\"action\":\"nvfs_ioctl\",\"pid\":%d,\"tid\":%ld,\"comm\":", getpid(),
		       (long)syscall(SYS_gettid));
		json_str(stdout, comm);
		printf(",\"ok\":true,\"ioctl\":%lu,\"name\":\"%s\",\"ret\":%d,\"errno\":%d}\n",
		       ioctls[i].nr, ioctls[i].name, r, r ? e : 0);
	}
	fflush(stdout);
	return 0;
}


static void usage(void)
{
	fprintf(stderr,
		"usage: gdrsim-workload [--hold SECS | --hold-stdin] [--no-release] [--access N] [--flags N]\n"
		"                       [--sends N (verbs-*: N UD SENDs of 4 KiB from the MR)] CMD ARGS\n"
		"  hold-gpu SECS | peer SIZE | peer-legacy SIZE | peer-host SIZE | free-callback SIZE\n"
		"  dmabuf nv|nvidia|other SIZE [OFFSET] | dmabuf-probe | ioctl-peer SIZE\n"
		"  nvfs-read FILE SIZE [OFFSET] | nvfs-write FILE SIZE [OFFSET] | nvfs-batch FILE SIZE\n"
		"  nvfs-read-async FILE SIZE [OFFSET] | nvfs-write-async FILE SIZE [OFFSET]\n"
		"  nvfs-ioctls | host-mr SIZE | post-flood N\n"
		"  verbs-peer SIZE | verbs-host SIZE | verbs-dmabuf nv|nvidia|other SIZE [OFFSET]\n"
		"  mlx5-queues [--gpu-qp] [--gpu-dbr] [--cq-ex] | devx-umem host|gpu|dmabuf SIZE\n"
		"  ibgda [--no-sys-admin] [HEAP_SIZE]\n");
	exit(2);
}

int main(int argc, char **argv)
{
	FILE *f = fopen("/proc/self/comm", "r");
	const char *cmd;
	int i = 1;

	if (f) {
		if (fgets(comm, sizeof(comm), f))
			comm[strcspn(comm, "\n")] = 0;
		fclose(f);
	}
	for (; i < argc && !strncmp(argv[i], "--", 2); i++) {
		if (!strcmp(argv[i], "--hold") && i + 1 < argc)
			hold_secs = strtoul(argv[++i], NULL, 0);
		else if (!strcmp(argv[i], "--hold-stdin"))
			hold_stdin = 1;
		else if (!strcmp(argv[i], "--no-release"))
			no_release = 1;
		else if (!strcmp(argv[i], "--sends") && i + 1 < argc)
			sends = strtoul(argv[++i], NULL, 0);
		else if (!strcmp(argv[i], "--access") && i + 1 < argc)
			access_flags = strtoul(argv[++i], NULL, 0);
		else if (!strcmp(argv[i], "--flags") && i + 1 < argc)
			peer_flags = strtoul(argv[++i], NULL, 0);
		else
			usage();
	}
	if (i >= argc)
		usage();
	cmd = argv[i++];
	argc -= i;
	argv += i;
#define NEED(n) do { if (argc < (n)) usage(); } while (0)
	if (!strcmp(cmd, "hold-gpu")) {
		NEED(1);
		return cmd_hold_gpu(strtoul(argv[0], NULL, 0));
	} else if (!strcmp(cmd, "ioctl-peer")) {
		NEED(1);
		return cmd_ioctl_peer(parse_size(argv[0]));
	} else if (!strcmp(cmd, "peer") || !strcmp(cmd, "peer-legacy") ||
		   !strcmp(cmd, "free-callback") || !strcmp(cmd, "peer-host") ||
		   !strcmp(cmd, "dmabuf") || !strcmp(cmd, "dmabuf-probe")) {
#ifndef GDRSIM_NO_VERBS
		if (!strcmp(cmd, "dmabuf-probe"))
			return cmd_efa_dmabuf_probe();
		if (!strcmp(cmd, "dmabuf")) {
			NEED(2);
			return cmd_efa_dmabuf(argv[0], parse_size(argv[1]),
					      argc > 2 ? parse_size(argv[2]) : 0);
		}
		NEED(1);
		if (!strcmp(cmd, "peer-host"))
			return cmd_efa_peer("host", parse_size(argv[0]), 0, 0);
		return cmd_efa_peer("gpu", parse_size(argv[0]), strcmp(cmd, "peer") != 0,
				    !strcmp(cmd, "free-callback"));
#else
		emit(cmd, 0, ENOSYS, NULL); /* built without libibverbs */
		return 1;
#endif
	} else if (!strcmp(cmd, "nvfs-read") || !strcmp(cmd, "nvfs-write") ||
		   !strcmp(cmd, "nvfs-read-async") || !strcmp(cmd, "nvfs-write-async")) {
		NEED(2);
		return cmd_nvfs_rw(argv[0], parse_size(argv[1]), argc > 2 ? parse_size(argv[2]) : 0,
				   cmd[5] == 'w', strstr(cmd, "-async") ? 2 : 0);
	} else if (!strcmp(cmd, "nvfs-batch")) {
		NEED(2);
		return cmd_nvfs_rw(argv[0], parse_size(argv[1]), 0, 0, 1);
	} else if (!strcmp(cmd, "nvfs-ioctls")) {
		return cmd_nvfs_ioctls();
	} else if (!strcmp(cmd, "host-mr") || !strcmp(cmd, "verbs-peer") ||
		   !strcmp(cmd, "verbs-host") || !strcmp(cmd, "verbs-dmabuf")) {
#ifndef GDRSIM_NO_VERBS
		if (!strcmp(cmd, "verbs-dmabuf")) {
			NEED(2);
			return cmd_verbs_dmabuf(argv[0], parse_size(argv[1]),
						argc > 2 ? parse_size(argv[2]) : 0);
		}
		NEED(1);
		if (!strcmp(cmd, "host-mr"))
			return cmd_host_mr(parse_size(argv[0]));
		return cmd_verbs_reg(cmd[6] == 'p' ? "gpu" : "host", parse_size(argv[0]));
#else
		emit(cmd, 0, ENOSYS, NULL); /* built without libibverbs */
		return 1;
#endif
	} else if (!strcmp(cmd, "post-flood")) {
#ifndef GDRSIM_NO_VERBS
		NEED(1);
		return cmd_post_flood(strtoull(argv[0], NULL, 0));
#else
		emit(cmd, 0, ENOSYS, NULL); /* built without libibverbs */
		return 1;
#endif
	} else if (!strcmp(cmd, "mlx5-queues") || !strcmp(cmd, "devx-umem") || !strcmp(cmd, "ibgda")) {
#ifdef GDRSIM_HAVE_MLX5
		return cmd_mlx5(cmd, argc, argv);
#else
		emit(cmd, 0, ENOSYS, NULL); /* built without libmlx5 */
		return 1;
#endif
	}
	usage();
	return 2;
}
