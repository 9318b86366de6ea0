// SPDX-License-Identifier: GPL-2.0
/*
 * gdrsim: imitation of nvidia-fs (NVIDIA/gds-nvidia-fs), the GPUDirect Storage
 * kernel driver behind libcufile, as its releases v2.17.0 .. v2.28.4 have it
 * (src/nvfs-core.c, src/nvfs-batch.c, src/nvfs-dma.c, src/nvfs-mmap.c; the
 * functions below have the same names, signatures and linkage at every one of
 * those tags unless a comment says otherwise).
 *
 * /dev/nvidia-fs0 with the real fops names (nvfs_open, nvfs_close, nvfs_ioctl,
 * nvfs_mgroup_mmap) and the real ioctl numbers and argument layouts (see
 * gdrsim_uapi.h for the protocol).  Call chains, as in nvfs-core.c:
 *   NVFS_IOCTL_MAP:   nvfs_ioctl -> nvfs_map -> nvfs_map_gpu_info ->
 *                     nvfs_get_endfence_page, nvfs_pin_gpu_pages ->
 *                     nvidia_p2p_get_pages(0, 0, va, len, &pt,
 *                     nvfs_get_pages_free_callback, mgroup)  (v2.17-v2.20; v2.22+
 *                     with use_legacy_p2p_allocation=1, the default) or
 *                     nvidia_p2p_get_pages_persistent(va, len, &pt, 0) (v2.22+, =0)
 *   NVFS_IOCTL_READ/WRITE: nvfs_ioctl -> nvfs_io_init -> nvfs_io_start_op ->
 *                     nvfs_direct_io(op, file, cpuvaddr, len, pos, nvfsio) ->
 *                     f_op->read_iter / write_iter (O_DIRECT, into the shadow
 *                     buffer, so nothing enters the page cache) -> nvfs_io_ret ->
 *                     nvfs_io_complete (inline for a finished I/O).  Async (sync=0):
 *                     the kiocb's ki_complete is nvfs_io_complete, the filesystem
 *                     returns -EIOCBQUEUED and calls it later from its completion
 *                     context; nvfs_io_free then writes the fence page.
 *   DMA mapping:      in the block layer's map callback (nvfs_blk_rq_map_sg ->
 *                     nvfs_blk_rq_map_sg_internal -> nvfs_get_dma ->
 *                     nvfs_get_p2p_dma_mapping -> nvidia_p2p_dma_map_pages, once
 *                     per device).  The simulation has no NVMe driver to call it:
 *                     nvfs_direct_io calls it for the chunk, just before the
 *                     filesystem submits (q = the file's queue, req = NULL).
 *                     v2.28.2+ also has nvfs_blk_rq_dma_map_iter_start/_next, built
 *                     only on kernels with blk_rq_dma_map_iter_start (6.17+): not
 *                     on the kernels this test bed runs, so not simulated.
 *   NVFS_IOCTL_BATCH_IO: nvfs_ioctl -> nvfs_io_batch_init(&param) (nvfs_io_init per
 *                     entry) -> nvfs_io_batch_submit(nvfs_batch_io_t *) ->
 *                     nvfs_io_start_op per entry; only the batch header is copied
 *                     back (the entries' ioctl_return are never written).
 *   munmap(shadow):   nvidia_p2p_dma_unmap_pages + nvidia_p2p_put_pages[_persistent]
 * The data really moves between the file and the shadow pages; no GPU exists.
 * /proc/driver/nvidia-fs/{version,devcount,stats} exist.
 */
#include <linux/module.h>
#include <linux/fs.h>
#include <linux/file.h>
#include <linux/miscdevice.h>
#include <linux/mm.h>
#include <linux/highmem.h>
#include <linux/slab.h>
#include <linux/uio.h>
#include <linux/pci.h>
#include <linux/blkdev.h>
#include <linux/scatterlist.h>
#include <linux/proc_fs.h>
#include <linux/seq_file.h>
#include <linux/uaccess.h>
#include <linux/sched.h>
#include <linux/version.h>

#include "gdrsim.h"

#define NVFS_MAX_SHADOW_PAGES 4096 /* 16 MiB */
#define NVFS_BLOCK_SIZE 4096
#define NVFS_MAX_BATCH_ENTRIES 256 /* nvfs-batch.h */

/*
 * Which release the module imitates (a test-bed knob, not a real parameter):
 * the flows that differ between releases follow it.  Read at NVFS_IOCTL_MAP.
 */
static char *nvfs_release = "2.28.4";
module_param(nvfs_release, charp, 0644);
MODULE_PARM_DESC(nvfs_release,
		 "gds-nvidia-fs release imitated: 2.17.0 .. 2.28.4 (v2.17-v2.20 always pin with nvidia_p2p_get_pages)");

/*
 * nvfs-core.c v2.22.3+ (module_param_named use_legacy_p2p_allocation, default 1, S_IWUSR |
 * S_IRUGO: writable at run time), which nvfs_init overrides at load (see gdrsim_nvfs_init).
 */
static unsigned int nvfs_use_legacy_p2p_allocation = 1;
module_param_named(use_legacy_p2p_allocation, nvfs_use_legacy_p2p_allocation, uint, 0644);
MODULE_PARM_DESC(use_legacy_p2p_allocation,
		 "v2.22+: pin with nvidia_p2p_get_pages and a free callback (1) or nvidia_p2p_get_pages_persistent (0); set at load as nvfs_init does");

/*
 * How the filesystem ends an async (sync=0) request (a test-bed knob, not a real parameter):
 * 0 queues it (-EIOCBQUEUED, completed later through ki_complete: ext4/xfs O_DIRECT AIO), 1
 * finishes it before read_iter/write_iter returns (the byte count comes back inline, as a
 * filesystem without async direct I/O does), 2 fails it inline (-EIO).  Read at each chunk.
 */
static unsigned int fs_async_completion;
module_param(fs_async_completion, uint, 0644);
MODULE_PARM_DESC(fs_async_completion, "async I/O: 0 queued by the filesystem, 1 completed inline, 2 failed inline");

/* "2.26.6" -> 2026 (major*1000 + minor); 0 when malformed */
static unsigned int nvfs_release_code(void)
{
	unsigned int major = 0, minor = 0, patch = 0;

	if (sscanf(nvfs_release, "%u.%u.%u", &major, &minor, &patch) != 3)
		return 0;
	return major * 1000 + minor;
}

/* nvfs-mmap.h: the states this simulation walks through */
enum nvfs_io_state { IO_FREE, IO_INIT, IO_READY, IO_IN_PROGRESS };

struct nvfs_gpu_args {
	struct nvidia_p2p_page_table *page_table;
	u64 gpuvaddr;
	u64 gpu_buf_len;
	struct page *end_fence_page;
	u32 offset_in_page;
	atomic_t io_state;
	u64 gpu_virt_start;
	struct nvidia_p2p_dma_mapping *dma_mapping; /* one peer: our "NVMe" */
	bool use_legacy_p2p_allocation;
	bool revoked;             /* free callback ran: GPU memory is gone */
};

/* nvfs-mmap.h typedef struct nvfs_io (fields this simulation needs) */
typedef struct nvfs_io {
	char __user *cpuvaddr;
	u64 length;
	ssize_t ret;
	loff_t fd_offset;
	u64 end_fence_value;
	struct file *file;        /* the real one holds a struct fd (fdget/fdput) */
	int op;
	bool sync;
	struct kiocb common;
	pid_t submit_tgid;        /* simulation only: who queued it (for the stats below) */
} nvfs_io_t;

struct nvfs_io_mgroup {
	struct kref ref;
	unsigned long cpu_base_vaddr;
	unsigned long nvfs_pages_count;
	struct page **nvfs_ppages;
	struct nvfs_gpu_args gpu_info;
	nvfs_io_t nvfsio;
};
typedef struct nvfs_io_mgroup *nvfs_mgroup_ptr_t;

/* nvfs-batch.h */
typedef struct {
	uint64_t ctx_id;
	ktime_t start_io;
	uint64_t nents;
	nvfs_io_t *nvfsio[NVFS_MAX_BATCH_ENTRIES];
} nvfs_batch_io_t;

/* global in nvidia-fs too (declared in nvfs-core.h, nvfs-batch.h, nvfs-dma.h) */
struct nvfs_io *nvfs_io_init(int op, nvfs_ioctl_ioargs_t *ioargs);
long nvfs_io_start_op(nvfs_io_t *nvfsio);
void nvfs_io_free(nvfs_io_t *nvfsio, long res);
nvfs_batch_io_t *nvfs_io_batch_init(nvfs_ioctl_param_union *input_param);
long nvfs_io_batch_submit(nvfs_batch_io_t *nvfs_batch);
int nvfs_get_dma(void *device, struct page *page, void **gpu_base_dma, int dma_length);
struct nvidia_p2p_dma_mapping *nvfs_get_p2p_dma_mapping(struct pci_dev *peer,
							 struct nvfs_gpu_args *gpu_info,
							 struct nvfs_io *nvfsio, int *n_dma_chunks);
int nvfs_mgroup_mmap(struct file *filp, struct vm_area_struct *vma);

static atomic64_t nvfs_n_reads, nvfs_n_read_bytes, nvfs_n_writes, nvfs_n_write_bytes;
static atomic64_t nvfs_n_maps, nvfs_n_ops, nvfs_n_batches, nvfs_n_errors;
static atomic_t nvfs_n_op_process;
/* simulation only: async completions, and those on a task other than the submitter */
static atomic64_t nvfs_n_async_done, nvfs_n_async_elsewhere;

/* the "NVMe" that DMAs into GPU memory: our platform device, passed on only */
static struct pci_dev *nvfs_peer_pdev(void)
{
	return to_pci_dev(gdrsim_dma_device);
}

/* nvfs-core.c nvfs_transit_state (static inline): one atomic state change */
static inline bool nvfs_transit_state(struct nvfs_gpu_args *gpu_info, int from, int to)
{
	return atomic_cmpxchg(&gpu_info->io_state, from, to) == from;
}

/* nvfs-core.c nvfs_get_pages_free_callback (static): the GPU memory went away */
static GDRSIM_HOOK void nvfs_get_pages_free_callback(void *data)
{
	nvfs_mgroup_ptr_t nvfs_mgroup = data;
	struct nvfs_gpu_args *gpu_info = &nvfs_mgroup->gpu_info;

	gpu_info->revoked = true;
	if (gpu_info->dma_mapping) {
		nvidia_p2p_free_dma_mapping(gpu_info->dma_mapping);
		gpu_info->dma_mapping = NULL;
	}
	if (gpu_info->page_table) {
		nvidia_p2p_free_page_table(gpu_info->page_table);
		gpu_info->page_table = NULL;
	}
}

/* nvfs-core.c nvfs_free_put_endfence_page (static) */
static void nvfs_free_put_endfence_page(struct nvfs_gpu_args *gpu_info)
{
	if (gpu_info->end_fence_page) {
		unpin_user_page(gpu_info->end_fence_page);
		gpu_info->end_fence_page = NULL;
	}
}

/* nvfs-core.c nvfs_unpin_gpu_pages (static) */
static int nvfs_unpin_gpu_pages(struct nvfs_gpu_args *gpu_info)
{
	int ret = 0;

	if (gpu_info->dma_mapping) {
		ret = nvidia_p2p_dma_unmap_pages(nvfs_peer_pdev(), gpu_info->page_table,
						 gpu_info->dma_mapping);
		gpu_info->dma_mapping = NULL;
	}
	if (gpu_info->page_table) {
		if (gpu_info->use_legacy_p2p_allocation)
			ret = nvidia_p2p_put_pages(0, 0, gpu_info->gpu_virt_start,
						   gpu_info->page_table);
		else
			ret = nvidia_p2p_put_pages_persistent(gpu_info->gpu_virt_start,
							      gpu_info->page_table, 0);
		gpu_info->page_table = NULL;
	}
	nvfs_free_put_endfence_page(gpu_info);
	atomic_set(&gpu_info->io_state, IO_FREE);
	return ret;
}

static void nvfs_mgroup_free(struct kref *ref)
{
	nvfs_mgroup_ptr_t nvfs_mgroup = container_of(ref, struct nvfs_io_mgroup, ref);
	unsigned long i;

	nvfs_unpin_gpu_pages(&nvfs_mgroup->gpu_info);
	for (i = 0; i < nvfs_mgroup->nvfs_pages_count; i++)
		if (nvfs_mgroup->nvfs_ppages[i]) {
			set_page_private(nvfs_mgroup->nvfs_ppages[i], 0);
			__free_page(nvfs_mgroup->nvfs_ppages[i]);
		}
	kvfree(nvfs_mgroup->nvfs_ppages);
	kfree(nvfs_mgroup);
}

/* nvfs-mmap.c nvfs_mgroup_put (global there; not hooked) */
static void nvfs_mgroup_put(nvfs_mgroup_ptr_t nvfs_mgroup)
{
	kref_put(&nvfs_mgroup->ref, nvfs_mgroup_free);
}

static void nvfs_vma_close(struct vm_area_struct *vma)
{
	nvfs_mgroup_put(vma->vm_private_data);
}

static int nvfs_vma_may_split(struct vm_area_struct *vma, unsigned long addr)
{
	return -EINVAL;
}

static int nvfs_vma_mremap(struct vm_area_struct *vma)
{
	return -EINVAL;
}

static const struct vm_operations_struct nvfs_mmap_ops = {
	.close = nvfs_vma_close,
	.may_split = nvfs_vma_may_split,
	.mremap = nvfs_vma_mremap,
};

/* nvfs-mmap.c nvfs_mgroup_mmap (global): the shadow buffer, ordinary pages the O_DIRECT I/O lands in */
GDRSIM_HOOK int nvfs_mgroup_mmap(struct file *filp, struct vm_area_struct *vma)
{
	unsigned long n = vma_pages(vma), i;
	nvfs_mgroup_ptr_t nvfs_mgroup;
	int ret;

	if (n == 0 || n > NVFS_MAX_SHADOW_PAGES || vma->vm_pgoff)
		return -EINVAL;
	nvfs_mgroup = kzalloc(sizeof(*nvfs_mgroup), GFP_KERNEL);
	if (!nvfs_mgroup)
		return -ENOMEM;
	kref_init(&nvfs_mgroup->ref);
	atomic_set(&nvfs_mgroup->gpu_info.io_state, IO_FREE);
	nvfs_mgroup->cpu_base_vaddr = vma->vm_start;
	nvfs_mgroup->nvfs_ppages = kvcalloc(n, sizeof(struct page *), GFP_KERNEL);
	if (!nvfs_mgroup->nvfs_ppages) {
		kfree(nvfs_mgroup);
		return -ENOMEM;
	}
	nvfs_mgroup->nvfs_pages_count = n;
	for (i = 0; i < n; i++) {
		nvfs_mgroup->nvfs_ppages[i] = alloc_page(GFP_USER | __GFP_ZERO);
		if (!nvfs_mgroup->nvfs_ppages[i]) {
			ret = -ENOMEM;
			goto err;
		}
		set_page_private(nvfs_mgroup->nvfs_ppages[i], (unsigned long)nvfs_mgroup);
	}
#if LINUX_VERSION_CODE >= KERNEL_VERSION(6, 3, 0)
	vm_flags_set(vma, VM_MIXEDMAP | VM_DONTEXPAND | VM_DONTDUMP | VM_DONTCOPY);
#else
	vma->vm_flags |= VM_MIXEDMAP | VM_DONTEXPAND | VM_DONTDUMP | VM_DONTCOPY;
#endif
	for (i = 0; i < n; i++) {
		ret = vm_insert_page(vma, vma->vm_start + i * PAGE_SIZE, nvfs_mgroup->nvfs_ppages[i]);
		if (ret)
			goto err;
	}
	vma->vm_ops = &nvfs_mmap_ops;
	vma->vm_private_data = nvfs_mgroup;
	return 0;
err:
	/* pages already inserted are dropped by the caller's unmap of the failed VMA */
	nvfs_mgroup_put(nvfs_mgroup);
	return ret;
}

/* nvfs-mmap.c nvfs_get_mgroup_from_vaddr: the mgroup whose shadow buffer contains @vaddr, referenced */
static nvfs_mgroup_ptr_t nvfs_get_mgroup_from_vaddr(u64 vaddr)
{
	struct mm_struct *mm = current->mm;
	struct vm_area_struct *vma;
	nvfs_mgroup_ptr_t nvfs_mgroup = NULL;

	if (!mm)
		return NULL;
	mmap_read_lock(mm);
	vma = vma_lookup(mm, vaddr);
	if (vma && vma->vm_ops == &nvfs_mmap_ops) {
		nvfs_mgroup = vma->vm_private_data;
		kref_get(&nvfs_mgroup->ref);
	}
	mmap_read_unlock(mm);
	return nvfs_mgroup;
}

/* nvfs-core.c nvfs_get_endfence_page (static): pins the user's fence page */
static int nvfs_get_endfence_page(nvfs_ioctl_map_t *input_param, struct nvfs_gpu_args *gpu_info)
{
	unsigned long end_fence = input_param->end_fence_addr;
	int ret;

	if (!end_fence || (end_fence & (NVFS_BLOCK_SIZE - 1)))
		return -EINVAL;
	ret = pin_user_pages_fast(end_fence, 1, FOLL_WRITE, &gpu_info->end_fence_page);
	if (ret != 1) {
		gpu_info->end_fence_page = NULL;
		return ret < 0 ? ret : -EINVAL;
	}
	gpu_info->offset_in_page = (u32)(end_fence % PAGE_SIZE);
	return 0;
}

/* nvfs-core.c nvfs_pin_gpu_pages (static) */
static GDRSIM_HOOK int nvfs_pin_gpu_pages(nvfs_ioctl_map_t *input_param,
					  struct nvfs_gpu_args *gpu_info)
{
	nvfs_mgroup_ptr_t nvfs_mgroup = container_of(gpu_info, struct nvfs_io_mgroup, gpu_info);
	u64 gpuvaddr = input_param->gpuvaddr;
	u64 gpu_buf_len = input_param->size;
	u64 gpu_virt_start, gpu_virt_end, rounded_size;
	int ret;

	if (input_param->size <= 0)
		return -EINVAL;
	gpu_virt_start = gpuvaddr & GPU_PAGE_MASK;
	gpu_virt_end = gpuvaddr + gpu_buf_len - 1;
	if (gpu_virt_end < gpu_virt_start)
		return -EINVAL;
	rounded_size = round_up(gpu_virt_end - gpu_virt_start + 1, GPU_PAGE_SIZE);

	gpu_info->gpuvaddr = gpuvaddr;
	gpu_info->gpu_buf_len = gpu_buf_len;
	gpu_info->gpu_virt_start = gpu_virt_start;
	gpu_info->page_table = NULL;
	gpu_info->dma_mapping = NULL;
	gpu_info->revoked = false;
	/* v2.17-v2.20: nvidia_p2p_get_pages only; v2.22+: the module parameter decides */
	gpu_info->use_legacy_p2p_allocation =
		nvfs_release_code() < 2022 || nvfs_use_legacy_p2p_allocation;
	if (gpu_info->use_legacy_p2p_allocation)
		ret = nvidia_p2p_get_pages(0, 0, gpu_virt_start, rounded_size,
					   &gpu_info->page_table,
					   nvfs_get_pages_free_callback, nvfs_mgroup);
	else
		ret = nvidia_p2p_get_pages_persistent(gpu_virt_start, rounded_size,
						      &gpu_info->page_table, 0);
	if (ret < 0) {
		gpu_info->page_table = NULL;
		return ret;
	}
	return 0;
}

/* nvfs-core.c nvfs_map_gpu_info (static) */
static int nvfs_map_gpu_info(nvfs_ioctl_map_t *input_param, struct nvfs_gpu_args *gpu_info)
{
	int ret = nvfs_get_endfence_page(input_param, gpu_info);

	if (ret)
		return ret;
	ret = nvfs_pin_gpu_pages(input_param, gpu_info);
	if (ret)
		nvfs_free_put_endfence_page(gpu_info);
	return ret;
}

/* nvfs-core.c nvfs_map (static) */
static GDRSIM_HOOK int nvfs_map(nvfs_ioctl_map_t *input_param)
{
	nvfs_mgroup_ptr_t nvfs_mgroup;
	struct nvfs_gpu_args *gpu_info;
	int ret = -EINVAL;

	if (!nvfs_release_code())
		return -EINVAL;
	nvfs_mgroup = nvfs_get_mgroup_from_vaddr(input_param->cpuvaddr);
	if (!nvfs_mgroup)
		return -EINVAL;
	gpu_info = &nvfs_mgroup->gpu_info;
	if ((u64)input_param->sbuf_block > nvfs_mgroup->nvfs_pages_count)
		goto out;
	if (!nvfs_transit_state(gpu_info, IO_FREE, IO_INIT))
		goto out;
	ret = nvfs_map_gpu_info(input_param, gpu_info);
	if (ret) {
		atomic_set(&gpu_info->io_state, IO_FREE);
		goto out;
	}
	nvfs_transit_state(gpu_info, IO_INIT, IO_READY);
	atomic64_inc(&nvfs_n_maps);
out:
	nvfs_mgroup_put(nvfs_mgroup);
	return ret;
}

static void nvfs_remove(int pid, struct mm_struct *mm)
{
}

/*
 * nvfs-core.c nvfs_io_init (global): set up the I/O; on success the mgroup is
 * IO_IN_PROGRESS and referenced until nvfs_io_free.
 */
GDRSIM_HOOK struct nvfs_io *nvfs_io_init(int op, nvfs_ioctl_ioargs_t *ioargs)
{
	nvfs_mgroup_ptr_t nvfs_mgroup;
	struct nvfs_gpu_args *gpu_info;
	struct nvfs_io *nvfsio;
	struct file *file;
	unsigned long shadow_end;
	int ret = -EINVAL;

	if (ioargs->offset < 0 || offset_in_page(ioargs->offset) ||
	    offset_in_page(ioargs->size) || ioargs->size == 0)
		return ERR_PTR(-EINVAL);
	file = fget(ioargs->fd);
	if (!file)
		return ERR_PTR(-EBADF);
	if (op == READ && !(file->f_mode & FMODE_READ)) {
		ret = -EBADF;
		goto fput;
	}
	if (op == WRITE && !(file->f_mode & FMODE_WRITE)) {
		ret = -EBADF;
		goto fput;
	}
	nvfs_mgroup = nvfs_get_mgroup_from_vaddr(ioargs->cpuvaddr);
	if (!nvfs_mgroup)
		goto fput;
	gpu_info = &nvfs_mgroup->gpu_info;
	if (gpu_info->revoked || !nvfs_transit_state(gpu_info, IO_READY, IO_IN_PROGRESS))
		goto put;
	nvfsio = &nvfs_mgroup->nvfsio;
	memset(nvfsio, 0, sizeof(*nvfsio));
	nvfsio->sync = (ioargs->sync == 1);
	if (!(file->f_flags & O_DIRECT)) {
		/* nvfs_err("O_DIRECT flag is not set") */
		goto ready;
	}
	if (!nvfsio->sync) {
		/* nvfs_err("end_fence_value should be positive") */
		if (ioargs->end_fence_value == 0)
			goto ready;
		nvfsio->end_fence_value = ioargs->end_fence_value;
	}
	if (ioargs->file_args.devptroff > gpu_info->gpu_buf_len ||
	    ioargs->size > gpu_info->gpu_buf_len - ioargs->file_args.devptroff)
		goto ready;
	shadow_end = nvfs_mgroup->cpu_base_vaddr + nvfs_mgroup->nvfs_pages_count * PAGE_SIZE;
	if (offset_in_page(ioargs->cpuvaddr) || ioargs->cpuvaddr >= shadow_end)
		goto ready;
	nvfsio->op = op;
	nvfsio->file = file;
	nvfsio->cpuvaddr = (char __user *)(unsigned long)ioargs->cpuvaddr;
	nvfsio->fd_offset = ioargs->offset;
	nvfsio->length = ioargs->size;
	nvfsio->ret = -EINVAL;
	nvfsio->submit_tgid = current->tgid;
	return nvfsio;

ready:
	nvfs_transit_state(gpu_info, IO_IN_PROGRESS, IO_READY);
put:
	nvfs_mgroup_put(nvfs_mgroup);
fput:
	fput(file);
	return ERR_PTR(ret);
}

/*
 * nvfs-core.c nvfs_io_free (global): drops the file and the mgroup, back to
 * IO_READY; for async I/O it then writes the fence page the library polls
 * (result first, then end_fence_val).  May run on the completion context.
 */
GDRSIM_HOOK void nvfs_io_free(nvfs_io_t *nvfsio, long res)
{
	nvfs_mgroup_ptr_t nvfs_mgroup = container_of(nvfsio, struct nvfs_io_mgroup, nvfsio);
	struct nvfs_gpu_args *gpu_info = &nvfs_mgroup->gpu_info;
	bool sync = nvfsio->sync;

	if (res < 0)
		atomic64_inc(&nvfs_n_errors);
	fput(nvfsio->file);
	nvfsio->file = NULL;
	/* the shadow VMA still holds a reference while an async I/O is in flight */
	nvfs_mgroup_put(nvfs_mgroup);
	nvfs_transit_state(gpu_info, IO_IN_PROGRESS, IO_READY);
	if (!sync && gpu_info->end_fence_page) {
		void *kaddr = kmap_local_page(gpu_info->end_fence_page);
		struct nvfs_ioctl_metapage *mpage = kaddr + gpu_info->offset_in_page;

		mpage->result = res;
		wmb();
		mpage->end_fence_val = nvfsio->end_fence_value;
		kunmap_local(kaddr);
	}
}

/*
 * nvfs-core.c nvfs_io_complete (static, address-taken: the kiocb's ki_complete
 * for async I/O, and called inline by nvfs_io_ret for an I/O that finished).
 * Kernels before 5.16 (KI_COMPLETE_HAS_3_PARAMETERS, from the driver's
 * configure) pass res2 too.  For async I/O this is the only place the bytes are
 * known; it runs on the filesystem's completion context (block softirq or the
 * dio workqueue), not the submitting process.
 */
#if LINUX_VERSION_CODE < KERNEL_VERSION(5, 16, 0)
static GDRSIM_HOOK void nvfs_io_complete(struct kiocb *kiocb, long res, long res2)
#else
static GDRSIM_HOOK void nvfs_io_complete(struct kiocb *kiocb, long res)
#endif
{
	nvfs_io_t *nvfsio = container_of(kiocb, struct nvfs_io, common);

	nvfsio->ret = res;
	if (!nvfsio->sync) {
		atomic64_inc(&nvfs_n_async_done);
		if (in_task() ? current->tgid != nvfsio->submit_tgid : true)
			atomic64_inc(&nvfs_n_async_elsewhere);
	}
	if (nvfsio->common.ki_flags & IOCB_WRITE) {
		struct file *file = kiocb->ki_filp;

		if (S_ISREG(file_inode(file)->i_mode))
			__sb_writers_acquired(file_inode(file)->i_sb, SB_FREEZE_WRITE);
		file_end_write(file);
		if (res >= 0)
			atomic64_add(res, &nvfs_n_write_bytes);
	} else if (res >= 0) {
		atomic64_add(res, &nvfs_n_read_bytes);
	}
	if (!nvfsio->sync)
		nvfs_io_free(nvfsio, res);
}

/* nvfs-core.c nvfs_io_ret (static inline): a finished I/O completes here, inline */
static inline ssize_t nvfs_io_ret(struct kiocb *req, ssize_t ret)
{
	if (ret == -EIOCBQUEUED)
		return ret;
#if LINUX_VERSION_CODE < KERNEL_VERSION(5, 16, 0)
	nvfs_io_complete(req, ret, 0);
#else
	nvfs_io_complete(req, ret);
#endif
	return ret;
}

/*
 * nvfs-core.c nvfs_get_p2p_dma_mapping (global): the GPU pages' DMA mapping for
 * @peer, made through nvidia_p2p_dma_map_pages the first time (the real one
 * keeps one per PCI device in a hash; the simulation has one device).
 */
GDRSIM_HOOK struct nvidia_p2p_dma_mapping *
nvfs_get_p2p_dma_mapping(struct pci_dev *peer, struct nvfs_gpu_args *gpu_info,
			 struct nvfs_io *nvfsio, int *n_dma_chunks)
{
	*n_dma_chunks = 0;
	if (!gpu_info->dma_mapping &&
	    nvidia_p2p_dma_map_pages(peer, gpu_info->page_table, &gpu_info->dma_mapping)) {
		gpu_info->dma_mapping = NULL;
		return NULL;
	}
	*n_dma_chunks = gpu_info->dma_mapping->entries;
	return gpu_info->dma_mapping;
}

static nvfs_mgroup_ptr_t nvfs_mgroup_from_page(struct page *page);

/*
 * nvfs-core.c nvfs_get_dma (global): the DMA address of one shadow page's GPU
 * counterpart; 0 for a GPU page, 1 for a page nvidia-fs doesn't own.
 */
GDRSIM_HOOK int nvfs_get_dma(void *device, struct page *page, void **gpu_base_dma, int dma_length)
{
	nvfs_mgroup_ptr_t nvfs_mgroup = nvfs_mgroup_from_page(page);
	struct nvidia_p2p_dma_mapping *dma_mapping;
	int n_dma_chunks;

	if (!nvfs_mgroup)
		return 1; /* NVFS_IO_NOT_GPU: a CPU page */
	dma_mapping = nvfs_get_p2p_dma_mapping(device, &nvfs_mgroup->gpu_info,
					       &nvfs_mgroup->nvfsio, &n_dma_chunks);
	if (!dma_mapping)
		return -EIO;
	if (gpu_base_dma)
		*gpu_base_dma = (void *)(uintptr_t)dma_mapping->dma_addresses[0];
	return 0;
}

/*
 * nvfs-dma.c nvfs_blk_rq_map_sg (static, the nvfs_dma_rw_ops callback a block
 * driver calls while mapping a request) -> nvfs_blk_rq_map_sg_internal, which
 * calls nvfs_get_dma for the GPU pages of the request's segments.
 */
static GDRSIM_HOOK int nvfs_blk_rq_map_sg_internal(struct request_queue *q, struct request *req,
						   struct scatterlist *iod_sglist, bool nvme)
{
	struct scatterlist *sg;
	int nents = 0;

	for (sg = iod_sglist; sg; sg = sg_next(sg)) {
		void *gpu_base_dma = NULL;
		int ret = nvfs_get_dma(nvfs_peer_pdev(), sg_page(sg), &gpu_base_dma, sg->length);

		if (ret < 0)
			return ret;
		nents++;
	}
	return nents;
}

static GDRSIM_HOOK int nvfs_blk_rq_map_sg(struct request_queue *q, struct request *req,
					  struct scatterlist *iod_sglist)
{
	return nvfs_blk_rq_map_sg_internal(q, req, iod_sglist, false);
}

/* the simulation's stand-in for the block driver: map one chunk of the shadow buffer */
static int nvfs_sim_block_map(nvfs_mgroup_ptr_t nvfs_mgroup, struct file *filp,
			      char __user *buf, size_t len)
{
	unsigned long first = ((unsigned long)buf - nvfs_mgroup->cpu_base_vaddr) >> PAGE_SHIFT;
	unsigned long n = DIV_ROUND_UP(len, PAGE_SIZE);
	struct request_queue *q = NULL;
	struct sg_table sgt;
	int ret;

	if (first + n > nvfs_mgroup->nvfs_pages_count)
		return -EINVAL;
	if (file_inode(filp)->i_sb->s_bdev)
		q = bdev_get_queue(file_inode(filp)->i_sb->s_bdev);
	ret = sg_alloc_table_from_pages(&sgt, nvfs_mgroup->nvfs_ppages + first, n, 0, len,
					GFP_KERNEL);
	if (ret)
		return ret;
	ret = nvfs_blk_rq_map_sg(q, NULL, sgt.sgl);
	sg_free_table(&sgt);
	return ret < 0 ? ret : 0;
}

/* nvfs-mmap.c nvfs_mgroup_from_page: the shadow pages carry their mgroup */
static nvfs_mgroup_ptr_t nvfs_mgroup_from_page(struct page *page)
{
	return page ? (nvfs_mgroup_ptr_t)page_private(page) : NULL;
}

/*
 * nvfs-core.c nvfs_direct_io (static, one call site: a build may inline it):
 * one chunk through the filesystem.  Sync: returns the bytes (nvfs_io_complete
 * ran inline).  Async: ki_complete = nvfs_io_complete; returns -EIOCBQUEUED
 * when the filesystem queued it, and the bytes reach nvfs_io_complete later.
 */
/*
 * The filesystem's read_iter/write_iter, as `fs_async_completion` says it ends an async
 * request: queued (what ext4 does with O_DIRECT AIO), finished before it returns (the kiocb
 * handed over as a sync one, so the filesystem completes it; nvfs_io_ret then completes the
 * async nvfs_io inline, as nvidia-fs does when read_iter returns the bytes), or failed inline.
 */
static ssize_t nvfs_fs_iter(nvfs_io_t *nvfsio, struct file *filp, struct iov_iter *iter, bool write)
{
	struct kiocb *kiocb = &nvfsio->common;
	ssize_t ret;

	if (nvfsio->sync || fs_async_completion == 0)
		return write ? filp->f_op->write_iter(kiocb, iter) : filp->f_op->read_iter(kiocb, iter);
	if (fs_async_completion == 2)
		return -EIO;
	kiocb->ki_complete = NULL;
	ret = write ? filp->f_op->write_iter(kiocb, iter) : filp->f_op->read_iter(kiocb, iter);
	kiocb->ki_complete = nvfs_io_complete;
	return ret;
}

static GDRSIM_INLINABLE ssize_t nvfs_direct_io(int op, struct file *filp, char __user *buf,
					       size_t len, loff_t ppos, nvfs_io_t *nvfsio)
{
	nvfs_mgroup_ptr_t nvfs_mgroup = container_of(nvfsio, struct nvfs_io_mgroup, nvfsio);
	struct iovec iov = { .iov_base = buf, .iov_len = len };
	struct iov_iter iter;
	ssize_t ret;

	init_sync_kiocb(&nvfsio->common, filp);
	nvfsio->common.ki_pos = ppos;
	nvfsio->common.private = NULL;
	nvfsio->common.ki_complete = nvfsio->sync ? NULL : nvfs_io_complete;

	/* what the block driver's map callback does once the request is built */
	ret = nvfs_sim_block_map(nvfs_mgroup, filp, buf, len);
	if (ret)
		return nvfs_io_ret(&nvfsio->common, ret);

	iov_iter_init(&iter, op == WRITE ? ITER_SOURCE : ITER_DEST, &iov, 1, len);
	if (op == WRITE) {
		nvfsio->common.ki_flags |= IOCB_WRITE;
		file_start_write(filp);
		ret = nvfs_io_ret(&nvfsio->common, nvfs_fs_iter(nvfsio, filp, &iter, true));
		/* nvfs_io_complete ends the write (file_end_write), now or later */
		if (S_ISREG(file_inode(filp)->i_mode))
			__sb_writers_release(file_inode(filp)->i_sb, SB_FREEZE_WRITE);
	} else {
		ret = nvfs_io_ret(&nvfsio->common, nvfs_fs_iter(nvfsio, filp, &iter, false));
	}
	return ret;
}

/*
 * nvfs-core.c nvfs_io_start_op (global): the I/O in shadow-buffer-sized chunks.
 * Sync: the bytes done.  Async: 0 once the I/O is queued (its bytes reach
 * nvfs_io_complete and the fence page).
 */
GDRSIM_HOOK long nvfs_io_start_op(nvfs_io_t *nvfsio)
{
	nvfs_mgroup_ptr_t nvfs_mgroup = container_of(nvfsio, struct nvfs_io_mgroup, nvfsio);
	struct file *f = nvfsio->file;
	size_t shadow_len = nvfs_mgroup->cpu_base_vaddr + nvfs_mgroup->nvfs_pages_count * PAGE_SIZE -
			    (unsigned long)nvfsio->cpuvaddr;
	ssize_t ret = 0, bytes_done = 0;
	u64 bytes_left = nvfsio->length;
	loff_t fd_offset = nvfsio->fd_offset;
	int op = nvfsio->op;

	if (op == READ)
		atomic64_inc(&nvfs_n_reads);
	else
		atomic64_inc(&nvfs_n_writes);
	while (bytes_left) {
		size_t bytes_issued = min_t(u64, bytes_left, shadow_len);

		if (f->f_op->read_iter && f->f_op->write_iter)
			ret = nvfs_direct_io(op, f, nvfsio->cpuvaddr, bytes_issued, fd_offset, nvfsio);
		else
			ret = -EINVAL;
		if (ret < 0 && ret != -EIOCBQUEUED)
			goto err;
		if (ret == -EIOCBQUEUED) {
			if (nvfsio->sync)
				goto err; /* "detected async IO for sync request" */
			ret = 0;
			break;
		}
		bytes_done += ret;
		bytes_left -= ret;
		fd_offset += ret;
		nvfsio->fd_offset = fd_offset;
		if (ret != bytes_issued)
			break; /* EOF */
		/* async I/O is one chunk: the real driver BUG_ON()s bytes_left there */
		if (!nvfsio->sync)
			break;
	}
err:
	/*
	 * v2.28.4 L2183-2190: only a sync request is freed here; an async one that ended (done or
	 * failed) inline was freed by nvfs_io_complete through nvfs_io_ret, and a queued one is
	 * freed by its completion.  An async request that never reached the filesystem (no
	 * read_iter/write_iter) is never freed nor signalled, as in the real driver.
	 */
	if (nvfsio->sync)
		nvfs_io_free(nvfsio, ret < 0 ? ret : bytes_done);
	if (ret < 0)
		return ret;
	return bytes_done;
}

/*
 * nvfs-batch.c nvfs_io_batch_init (global): every entry read from user memory
 * and set up with nvfs_io_init; any failure undoes them all.
 */
GDRSIM_HOOK nvfs_batch_io_t *nvfs_io_batch_init(nvfs_ioctl_param_union *input_param)
{
	nvfs_ioctl_batch_ioargs_t *batch_args = &input_param->batch_ioargs;
	nvfs_ioctl_ioargs_t __user *io_entries = u64_to_user_ptr(batch_args->io_entries);
	nvfs_batch_io_t *nvfs_batch;
	int i, ret = -EINVAL;

	if (batch_args->nents <= 0 || batch_args->nents > NVFS_MAX_BATCH_ENTRIES)
		return ERR_PTR(ret);
	nvfs_batch = kzalloc(sizeof(*nvfs_batch), GFP_KERNEL);
	if (!nvfs_batch)
		return ERR_PTR(-ENOMEM);
	nvfs_batch->ctx_id = batch_args->ctx_id;
	nvfs_batch->start_io = ktime_get();
	nvfs_batch->nents = batch_args->nents;
	for (i = 0; i < batch_args->nents; i++) {
		nvfs_ioctl_ioargs_t io_entry;

		if (copy_from_user(&io_entry, &io_entries[i], sizeof(io_entry))) {
			ret = -EFAULT;
			goto cleanup;
		}
		nvfs_batch->nvfsio[i] = nvfs_io_init(io_entry.optype, &io_entry);
		if (IS_ERR(nvfs_batch->nvfsio[i])) {
			ret = PTR_ERR(nvfs_batch->nvfsio[i]);
			goto cleanup;
		}
	}
	return nvfs_batch;
cleanup:
	for (i = 0; i < nvfs_batch->nents; i++)
		if (nvfs_batch->nvfsio[i] && !IS_ERR(nvfs_batch->nvfsio[i]))
			nvfs_io_free(nvfs_batch->nvfsio[i], -EINVAL);
	kfree(nvfs_batch);
	return ERR_PTR(ret);
}

/*
 * nvfs-batch.c nvfs_io_batch_submit (global): starts every entry; returns what
 * the last nvfs_io_start_op returned (0 for a queued async entry) or the first
 * error.  No entry's result is written anywhere here.
 */
GDRSIM_HOOK long nvfs_io_batch_submit(nvfs_batch_io_t *nvfs_batch)
{
	unsigned int i;
	long ret = 0;

	atomic64_inc(&nvfs_n_batches);
	for (i = 0; i < nvfs_batch->nents; ++i) {
		ret = nvfs_io_start_op(nvfs_batch->nvfsio[i]);
		if (ret < 0) {
			nvfs_batch->nvfsio[i] = NULL;
			goto cleanup;
		}
	}
	kfree(nvfs_batch);
	return ret;
cleanup:
	/* the real driver frees entries after the failed one with -EINVAL (not yet started) */
	for (i = i + 1; i < nvfs_batch->nents; i++)
		if (nvfs_batch->nvfsio[i] && !IS_ERR(nvfs_batch->nvfsio[i]))
			nvfs_io_free(nvfs_batch->nvfsio[i], -EINVAL);
	kfree(nvfs_batch);
	return ret;
}

/*
 * nvfs-core.c nvfs_ioctl (static, the fops' unlocked_ioctl): copies the whole
 * union in; READ/WRITE copy it back with ioctl_return (bytes, 0 for queued
 * async, or -errno) and return 0 or -1; BATCH_IO copies back only
 * sizeof(nvfs_ioctl_batch_ioargs_t) (the batch's own ioctl_return, in the
 * union's ioargs view at offset 32, is not in that header); MAP returns 0 or -1.
 */
static GDRSIM_HOOK long nvfs_ioctl(struct file *file, unsigned int ioctl_num,
				   unsigned long ioctl_param)
{
	void __user *argp = (void __user *)ioctl_param;
	nvfs_ioctl_param_union local_param;

	if (copy_from_user(&local_param, argp, sizeof(local_param)))
		return -ENOMEM;
	atomic64_inc(&nvfs_n_ops);
	switch (ioctl_num) {
	case NVFS_IOCTL_REMOVE:
		nvfs_remove(current->tgid, NULL);
		return 0;
	case NVFS_IOCTL_READ:
	case NVFS_IOCTL_WRITE: {
		int op = ioctl_num == NVFS_IOCTL_READ ? READ : WRITE;
		nvfs_io_t *nvfsio = nvfs_io_init(op, &local_param.ioargs);

		if (IS_ERR(nvfsio)) {
			local_param.ioargs.ioctl_return = PTR_ERR(nvfsio);
			if (copy_to_user(argp, &local_param, sizeof(local_param)))
				return -1;
			atomic64_inc(&nvfs_n_errors);
			return -1;
		}
		local_param.ioargs.ioctl_return = nvfs_io_start_op(nvfsio);
		if (copy_to_user(argp, &local_param, sizeof(local_param)))
			local_param.ioargs.ioctl_return = -EFAULT;
		return local_param.ioargs.ioctl_return < 0 ? -1 : 0;
	}
	case NVFS_IOCTL_BATCH_IO: {
		nvfs_batch_io_t *nvfs_batch = nvfs_io_batch_init(&local_param);

		if (IS_ERR(nvfs_batch)) {
			local_param.ioargs.ioctl_return = PTR_ERR(nvfs_batch);
			if (copy_to_user(argp, &local_param, sizeof(nvfs_ioctl_batch_ioargs_t)))
				return -1;
			return -1;
		}
		local_param.ioargs.ioctl_return = nvfs_io_batch_submit(nvfs_batch);
		if (copy_to_user(argp, &local_param, sizeof(nvfs_ioctl_batch_ioargs_t)))
			local_param.ioargs.ioctl_return = -EFAULT;
		return local_param.ioargs.ioctl_return < 0 ? -1 : 0;
	}
	case NVFS_IOCTL_MAP: {
		int ret = nvfs_map(&local_param.map_args);

		if (ret) {
			local_param.ioargs.ioctl_return = ret;
			if (copy_to_user(argp, &local_param, sizeof(local_param)))
				return -1;
			return -1;
		}
		if (copy_to_user(argp, &local_param, sizeof(local_param)))
			return -EFAULT;
		return 0;
	}
	case NVFS_IOCTL_SET_RDMA_REG_INFO:
	case NVFS_IOCTL_GET_RDMA_REG_INFO:
	case NVFS_IOCTL_CLEAR_RDMA_REG_INFO:
		return 0;
	default:
		return -ENOTTY;
	}
}

/* nvfs-core.c nvfs_open (static) */
static GDRSIM_HOOK int nvfs_open(struct inode *inode, struct file *file)
{
	atomic_inc(&nvfs_n_op_process);
	return 0;
}

/* nvfs-core.c nvfs_close (static) */
static GDRSIM_HOOK int nvfs_close(struct inode *inode, struct file *file)
{
	atomic_dec(&nvfs_n_op_process);
	return 0;
}

static const struct file_operations nvfs_dev_fops = {
	.owner = THIS_MODULE,
	.open = nvfs_open,
	.release = nvfs_close,
	.unlocked_ioctl = nvfs_ioctl,
	.compat_ioctl = nvfs_ioctl,
	.mmap = nvfs_mgroup_mmap,
	.llseek = noop_llseek,
};

static struct miscdevice nvfs_misc = {
	.minor = MISC_DYNAMIC_MINOR,
	.name = "nvidia-fs0",
	.fops = &nvfs_dev_fops,
	.mode = 0666,
};

static int nvfs_proc_version_show(struct seq_file *m, void *v)
{
	seq_printf(m, "version: %s (gdrsim simulation)\n", nvfs_release);
	return 0;
}

static int nvfs_proc_devcount_show(struct seq_file *m, void *v)
{
	seq_puts(m, "1\n");
	return 0;
}

static int nvfs_proc_stats_show(struct seq_file *m, void *v)
{
	seq_printf(m, "GDS Version: %s\n", nvfs_release);
	seq_printf(m, "Active Shadow-Buffer (MiB): 0\nActive Process: %d\n",
		   atomic_read(&nvfs_n_op_process));
	seq_printf(m, "Reads\t\t\t\t: n=%lld ok=%lld err=0 readMiB=%lld\n",
		   (long long)atomic64_read(&nvfs_n_reads), (long long)atomic64_read(&nvfs_n_reads),
		   (long long)(atomic64_read(&nvfs_n_read_bytes) >> 20));
	seq_printf(m, "Writes\t\t\t\t: n=%lld ok=%lld err=0 writeMiB=%lld\n",
		   (long long)atomic64_read(&nvfs_n_writes), (long long)atomic64_read(&nvfs_n_writes),
		   (long long)(atomic64_read(&nvfs_n_write_bytes) >> 20));
	seq_printf(m, "Read bytes: %lld\nWrite bytes: %lld\nMaps: %lld\nBatches: %lld\nIoctls: %lld\nErrors: %lld\n",
		   (long long)atomic64_read(&nvfs_n_read_bytes),
		   (long long)atomic64_read(&nvfs_n_write_bytes),
		   (long long)atomic64_read(&nvfs_n_maps),
		   (long long)atomic64_read(&nvfs_n_batches),
		   (long long)atomic64_read(&nvfs_n_ops),
		   (long long)atomic64_read(&nvfs_n_errors));
	seq_printf(m, "Async completions: %lld\nAsync completions on another task: %lld\n",
		   (long long)atomic64_read(&nvfs_n_async_done),
		   (long long)atomic64_read(&nvfs_n_async_elsewhere));
	return 0;
}

static struct proc_dir_entry *nvfs_proc_dir;

/*
 * nvfs-core.c nvfs_init's choice of pinning API (v2.22.3 L2447-2452; v2.23.1 L2484-2497 and
 * v2.28.4 L2507-2520): from v2.23.1, the NVIDIA driver's version (the first three characters of
 * /sys/module/nvidia/version: here the loaded driver_branch) 555 or newer means the persistent
 * API; from v2.22.3, so does an x86-64 CPU that is not a hypervisor guest
 * (!cpu_feature_enabled(X86_FEATURE_HYPERVISOR)). Before v2.22.3 there is no choice (legacy).
 * So real GPU servers pin with nvidia_p2p_get_pages_persistent; this VM (a guest) does from
 * driver 555 on.
 */
static void nvfs_init_p2p_allocation(void)
{
	unsigned int rel = nvfs_release_code();

	if (rel && rel < 2022)
		return;
	if ((!rel || rel >= 2023) && gdrsim_driver_branch >= 555)
		nvfs_use_legacy_p2p_allocation = 0;
#if defined(CONFIG_X86_64)
	if (nvfs_use_legacy_p2p_allocation == 1 && !cpu_feature_enabled(X86_FEATURE_HYPERVISOR))
		nvfs_use_legacy_p2p_allocation = 0;
#endif
}

int gdrsim_nvfs_init(void)
{
	int ret;

	nvfs_init_p2p_allocation();
	ret = misc_register(&nvfs_misc);

	if (ret)
		return ret;
	nvfs_proc_dir = proc_mkdir("driver/nvidia-fs", NULL);
	if (nvfs_proc_dir) {
		proc_create_single("version", 0444, nvfs_proc_dir, nvfs_proc_version_show);
		proc_create_single("devcount", 0444, nvfs_proc_dir, nvfs_proc_devcount_show);
		proc_create_single("stats", 0444, nvfs_proc_dir, nvfs_proc_stats_show);
	}
	return 0;
}

void gdrsim_nvfs_exit(void)
{
	if (nvfs_proc_dir)
		proc_remove(nvfs_proc_dir);
	misc_deregister(&nvfs_misc);
}
