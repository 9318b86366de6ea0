// SPDX-License-Identifier: GPL-2.0
/*
 * gdrsim: imitation of nvidia-fs (NVIDIA/gds-nvidia-fs), the GPUDirect Storage
 * kernel driver behind libcufile.
 *
 * /dev/nvidia-fs0 with the real fops names (nvfs_open, nvfs_close, nvfs_ioctl,
 * nvfs_mgroup_mmap) and the real ioctl numbers and argument layouts (see
 * gdrsim_uapi.h for the protocol).  Call chains, as in nvfs-core.c:
 *   NVFS_IOCTL_MAP:   nvfs_ioctl -> nvfs_map -> nvfs_pin_gpu_pages ->
 *                     nvidia_p2p_get_pages_persistent(va, len, &pt, 0)
 *                     (nvfs_use_persistent=0: nvidia_p2p_get_pages(0, 0, va, len,
 *                     &pt, nvfs_get_pages_free_callback, mgroup))
 *   NVFS_IOCTL_READ/WRITE: nvfs_ioctl -> nvfs_io_init -> nvfs_io_start_op ->
 *                     [first I/O of a mapping: nvidia_p2p_dma_map_pages] ->
 *                     nvfs_direct_io(op, file, cpuvaddr, len, pos, nvfsio) ->
 *                     file->f_op->read_iter / write_iter (O_DIRECT, into the
 *                     shadow buffer, so nothing enters the page cache)
 *   NVFS_IOCTL_BATCH_IO: nvfs_ioctl -> nvfs_io_batch_submit -> the READ/WRITE chain
 *   munmap(shadow):   nvidia_p2p_dma_unmap_pages + nvidia_p2p_put_pages[_persistent]
 * The data really moves between the file and the shadow pages; no GPU exists.
 * /proc/driver/nvidia-fs/{version,devcount,stats} exist.
 */
#include <linux/module.h>
#include <linux/fs.h>
#include <linux/file.h>
#include <linux/miscdevice.h>
#include <linux/mm.h>
#include <linux/slab.h>
#include <linux/uio.h>
#include <linux/pci.h>
#include <linux/proc_fs.h>
#include <linux/seq_file.h>
#include <linux/uaccess.h>
#include <linux/sched.h>

#include "gdrsim.h"

#define NVFS_VERSION "2.26.6"
#define NVFS_MAX_SHADOW_PAGES 4096 /* 16 MiB */

static int nvfs_use_persistent = 1;
module_param(nvfs_use_persistent, int, 0644);
MODULE_PARM_DESC(nvfs_use_persistent,
		 "nvidia-fs pins GPU buffers with nvidia_p2p_get_pages_persistent (1, default) or nvidia_p2p_get_pages with a free callback (0)");

enum nvfs_io_state { IO_FREE, IO_READY };

struct nvfs_gpu_args {
	u64 gpuvaddr;
	u64 gpu_buf_len;
	u64 gpu_virt_start;
	struct nvidia_p2p_page_table *page_table;
	struct nvidia_p2p_dma_mapping *dma_mapping;
	bool persistent;
	bool revoked;             /* free callback ran: GPU memory is gone */
	enum nvfs_io_state io_state;
};

typedef struct nvfs_io {
	int op;                   /* READ or WRITE */
	struct file *file;
	char __user *cpuvaddr;
	loff_t fd_offset;
	u64 length;
	bool sync;
} nvfs_io_t;

struct nvfs_io_mgroup {
	struct kref ref;
	struct mutex lock;        /* one I/O or MAP at a time, like the real IO state machine */
	unsigned long cpu_base_vaddr;
	unsigned long nvfs_pages_count;
	struct page **nvfs_ppages;
	struct nvfs_gpu_args gpu_info;
	nvfs_io_t nvfsio;
};
typedef struct nvfs_io_mgroup *nvfs_mgroup_ptr_t;

/* global in nvidia-fs too (declared in nvfs-core.h) */
struct nvfs_io *nvfs_io_init(int op, nvfs_ioctl_ioargs_t *ioargs);
long nvfs_io_start_op(nvfs_io_t *nvfsio);

static atomic64_t nvfs_n_reads, nvfs_n_read_bytes, nvfs_n_writes, nvfs_n_write_bytes;
static atomic64_t nvfs_n_maps, nvfs_n_ops, nvfs_n_batches, nvfs_n_errors;
static atomic_t nvfs_n_op_process;

/* the "NVMe" that DMAs into GPU memory: our platform device, passed on only */
static struct pci_dev *nvfs_peer_pdev(void)
{
	return to_pci_dev(gdrsim_dma_device);
}

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

static int nvfs_unpin_gpu_pages(struct nvfs_gpu_args *gpu_info)
{
	int ret = 0;

	if (gpu_info->dma_mapping) {
		ret = nvidia_p2p_dma_unmap_pages(nvfs_peer_pdev(), gpu_info->page_table,
						 gpu_info->dma_mapping);
		gpu_info->dma_mapping = NULL;
	}
	if (gpu_info->page_table) {
		if (gpu_info->persistent)
			ret = nvidia_p2p_put_pages_persistent(gpu_info->gpu_virt_start,
							      gpu_info->page_table, 0);
		else
			ret = nvidia_p2p_put_pages(0, 0, gpu_info->gpu_virt_start,
						   gpu_info->page_table);
		gpu_info->page_table = NULL;
	}
	gpu_info->io_state = IO_FREE;
	return ret;
}

static void nvfs_mgroup_free(struct kref *ref)
{
	nvfs_mgroup_ptr_t nvfs_mgroup = container_of(ref, struct nvfs_io_mgroup, ref);
	unsigned long i;

	nvfs_unpin_gpu_pages(&nvfs_mgroup->gpu_info);
	for (i = 0; i < nvfs_mgroup->nvfs_pages_count; i++)
		if (nvfs_mgroup->nvfs_ppages[i])
			__free_page(nvfs_mgroup->nvfs_ppages[i]);
	kvfree(nvfs_mgroup->nvfs_ppages);
	kfree(nvfs_mgroup);
}

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

/* shadow buffer: ordinary pages the O_DIRECT I/O lands in */
static GDRSIM_HOOK int nvfs_mgroup_mmap(struct file *filp, struct vm_area_struct *vma)
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
	mutex_init(&nvfs_mgroup->lock);
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

/* the mgroup whose shadow buffer contains @vaddr, with a reference */
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

static GDRSIM_HOOK int nvfs_pin_gpu_pages(nvfs_ioctl_map_t *input_param,
					  struct nvfs_gpu_args *gpu_info)
{
	nvfs_mgroup_ptr_t nvfs_mgroup = container_of(gpu_info, struct nvfs_io_mgroup, gpu_info);
	u64 gpuvaddr = input_param->gpuvaddr;
	u64 gpu_buf_len = input_param->size;
	u64 gpu_virt_start, gpu_virt_end, rounded_size;
	int ret;

	if (gpu_info->io_state != IO_FREE)
		return -EINVAL;
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
	gpu_info->persistent = nvfs_use_persistent != 0;
	if (gpu_info->persistent)
		ret = nvidia_p2p_get_pages_persistent(gpu_virt_start, rounded_size,
						      &gpu_info->page_table, 0);
	else
		ret = nvidia_p2p_get_pages(0, 0, gpu_virt_start, rounded_size,
					   &gpu_info->page_table,
					   nvfs_get_pages_free_callback, nvfs_mgroup);
	if (ret < 0) {
		gpu_info->page_table = NULL;
		return ret;
	}
	gpu_info->io_state = IO_READY;
	return 0;
}

static GDRSIM_HOOK int nvfs_map(nvfs_ioctl_map_t *input_param)
{
	nvfs_mgroup_ptr_t nvfs_mgroup;
	int ret;

	nvfs_mgroup = nvfs_get_mgroup_from_vaddr(input_param->cpuvaddr);
	if (!nvfs_mgroup)
		return -EINVAL;
	if (!mutex_trylock(&nvfs_mgroup->lock)) {
		nvfs_mgroup_put(nvfs_mgroup);
		return -EBUSY;
	}
	if ((u64)input_param->sbuf_block * PAGE_SIZE >
	    nvfs_mgroup->nvfs_pages_count * PAGE_SIZE)
		ret = -EINVAL;
	else
		ret = nvfs_pin_gpu_pages(input_param, &nvfs_mgroup->gpu_info);
	mutex_unlock(&nvfs_mgroup->lock);
	nvfs_mgroup_put(nvfs_mgroup);
	if (!ret)
		atomic64_inc(&nvfs_n_maps);
	return ret;
}

static void nvfs_remove(int pid, struct mm_struct *mm)
{
}

/* set up the I/O; on success the mgroup is locked and referenced until nvfs_io_free */
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
	if (!(file->f_flags & O_DIRECT)) {
		/* nvfs_err("O_DIRECT flag is not set") */
		ret = -EINVAL;
		goto fput;
	}
	nvfs_mgroup = nvfs_get_mgroup_from_vaddr(ioargs->cpuvaddr);
	if (!nvfs_mgroup)
		goto fput;
	if (!mutex_trylock(&nvfs_mgroup->lock)) {
		ret = -EBUSY;
		goto put;
	}
	gpu_info = &nvfs_mgroup->gpu_info;
	if (gpu_info->io_state != IO_READY || gpu_info->revoked) {
		ret = -EINVAL;
		goto unlock;
	}
	if (ioargs->file_args.devptroff > gpu_info->gpu_buf_len ||
	    ioargs->size > gpu_info->gpu_buf_len - ioargs->file_args.devptroff) {
		ret = -EINVAL;
		goto unlock;
	}
	shadow_end = nvfs_mgroup->cpu_base_vaddr + nvfs_mgroup->nvfs_pages_count * PAGE_SIZE;
	if (offset_in_page(ioargs->cpuvaddr) || ioargs->cpuvaddr >= shadow_end) {
		ret = -EINVAL;
		goto unlock;
	}
	nvfsio = &nvfs_mgroup->nvfsio;
	memset(nvfsio, 0, sizeof(*nvfsio));
	nvfsio->op = op;
	nvfsio->file = file;
	nvfsio->cpuvaddr = (char __user *)(unsigned long)ioargs->cpuvaddr;
	nvfsio->fd_offset = ioargs->offset;
	nvfsio->length = ioargs->size;
	nvfsio->sync = true;
	return nvfsio;

unlock:
	mutex_unlock(&nvfs_mgroup->lock);
put:
	nvfs_mgroup_put(nvfs_mgroup);
fput:
	fput(file);
	return ERR_PTR(ret);
}

static void nvfs_io_free(nvfs_io_t *nvfsio, long res)
{
	nvfs_mgroup_ptr_t nvfs_mgroup = container_of(nvfsio, struct nvfs_io_mgroup, nvfsio);

	fput(nvfsio->file);
	nvfsio->file = NULL;
	mutex_unlock(&nvfs_mgroup->lock);
	nvfs_mgroup_put(nvfs_mgroup);
}

/* static with one call site in gds-nvidia-fs 2.x (src/nvfs-core.c): may be inlined */
static GDRSIM_INLINABLE ssize_t nvfs_direct_io(int op, struct file *filp, char __user *buf,
					  size_t len, loff_t ppos, nvfs_io_t *nvfsio)
{
	struct kiocb kiocb;
	struct iovec iov = { .iov_base = buf, .iov_len = len };
	struct iov_iter iter;
	ssize_t ret;

	init_sync_kiocb(&kiocb, filp);
	kiocb.ki_pos = ppos;
	iov_iter_init(&iter, op == WRITE ? ITER_SOURCE : ITER_DEST, &iov, 1, len);
	if (op == WRITE) {
		file_start_write(filp);
		ret = filp->f_op->write_iter(&kiocb, &iter);
		file_end_write(filp);
	} else {
		ret = filp->f_op->read_iter(&kiocb, &iter);
	}
	return ret;
}

GDRSIM_HOOK long nvfs_io_start_op(nvfs_io_t *nvfsio)
{
	nvfs_mgroup_ptr_t nvfs_mgroup = container_of(nvfsio, struct nvfs_io_mgroup, nvfsio);
	struct nvfs_gpu_args *gpu_info = &nvfs_mgroup->gpu_info;
	struct file *f = nvfsio->file;
	unsigned long shadow_end = nvfs_mgroup->cpu_base_vaddr +
				   nvfs_mgroup->nvfs_pages_count * PAGE_SIZE;
	size_t shadow_len = shadow_end - (unsigned long)nvfsio->cpuvaddr;
	ssize_t ret = 0, bytes_done = 0;
	u64 bytes_left = nvfsio->length;
	loff_t fd_offset = nvfsio->fd_offset;

	if (!f->f_op->read_iter || !f->f_op->write_iter) {
		ret = -EINVAL;
		goto out;
	}
	/* the storage driver maps the GPU pages for its DMA on the first I/O */
	if (!gpu_info->dma_mapping) {
		ret = nvidia_p2p_dma_map_pages(nvfs_peer_pdev(), gpu_info->page_table,
					       &gpu_info->dma_mapping);
		if (ret) {
			gpu_info->dma_mapping = NULL;
			goto out;
		}
	}
	while (bytes_left) {
		size_t bytes_issued = min_t(u64, bytes_left, shadow_len);

		ret = nvfs_direct_io(nvfsio->op, f, nvfsio->cpuvaddr, bytes_issued, fd_offset,
				     nvfsio);
		if (ret < 0)
			break;
		bytes_done += ret;
		bytes_left -= ret;
		fd_offset += ret;
		nvfsio->fd_offset = fd_offset;
		if (ret != bytes_issued)
			break; /* EOF */
	}
	if (ret >= 0)
		ret = bytes_done;
out:
	if (ret >= 0) {
		if (nvfsio->op == READ) {
			atomic64_inc(&nvfs_n_reads);
			atomic64_add(ret, &nvfs_n_read_bytes);
		} else {
			atomic64_inc(&nvfs_n_writes);
			atomic64_add(ret, &nvfs_n_write_bytes);
		}
	} else {
		atomic64_inc(&nvfs_n_errors);
	}
	nvfs_io_free(nvfsio, ret);
	return ret;
}

static long nvfs_rw(int op, nvfs_ioctl_ioargs_t *ioargs)
{
	struct nvfs_io *nvfsio;
	long ret;

	nvfsio = nvfs_io_init(op, ioargs);
	if (IS_ERR(nvfsio))
		ret = PTR_ERR(nvfsio);
	else
		ret = nvfs_io_start_op(nvfsio);
	ioargs->ioctl_return = ret;
	return ret;
}

static GDRSIM_HOOK long nvfs_io_batch_submit(nvfs_ioctl_batch_ioargs_t *batch)
{
	nvfs_ioctl_ioargs_t __user *entries = u64_to_user_ptr(batch->io_entries);
	nvfs_ioctl_ioargs_t ioargs;
	u64 i;

	if (batch->nents == 0 || batch->nents > 256)
		return -EINVAL;
	atomic64_inc(&nvfs_n_batches);
	for (i = 0; i < batch->nents; i++) {
		if (copy_from_user(&ioargs, &entries[i], sizeof(ioargs)))
			return -EFAULT;
		nvfs_rw(ioargs.optype == 1 ? WRITE : READ, &ioargs);
		if (copy_to_user(&entries[i].ioctl_return, &ioargs.ioctl_return,
				 sizeof(ioargs.ioctl_return)))
			return -EFAULT;
	}
	return 0;
}

static GDRSIM_HOOK long nvfs_ioctl(struct file *file, unsigned int ioctl_num,
				   unsigned long ioctl_param)
{
	void __user *argp = (void __user *)ioctl_param;
	nvfs_ioctl_param_union param;
	long ret;

	atomic64_inc(&nvfs_n_ops);
	switch (ioctl_num) {
	case NVFS_IOCTL_REMOVE:
		nvfs_remove(current->pid, current->mm);
		return 0;
	case NVFS_IOCTL_READ:
	case NVFS_IOCTL_WRITE:
		if (copy_from_user(&param.ioargs, argp, sizeof(param.ioargs)))
			return -EFAULT;
		ret = nvfs_rw(ioctl_num == NVFS_IOCTL_READ ? READ : WRITE, &param.ioargs);
		if (copy_to_user(argp, &param.ioargs, sizeof(param.ioargs)))
			return -EFAULT;
		return ret < 0 ? ret : 0;
	case NVFS_IOCTL_MAP:
		if (copy_from_user(&param.map_args, argp, sizeof(param.map_args)))
			return -EFAULT;
		return nvfs_map(&param.map_args);
	case NVFS_IOCTL_BATCH_IO:
		if (copy_from_user(&param.batch_ioargs, argp, sizeof(param.batch_ioargs)))
			return -EFAULT;
		return nvfs_io_batch_submit(&param.batch_ioargs);
	case NVFS_IOCTL_SET_RDMA_REG_INFO:
	case NVFS_IOCTL_GET_RDMA_REG_INFO:
	case NVFS_IOCTL_CLEAR_RDMA_REG_INFO:
		return 0;
	default:
		return -ENOTTY;
	}
}

static GDRSIM_HOOK int nvfs_open(struct inode *inode, struct file *file)
{
	atomic_inc(&nvfs_n_op_process);
	return 0;
}

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
	seq_printf(m, "version: %s (gdrsim simulation)\n", NVFS_VERSION);
	return 0;
}

static int nvfs_proc_devcount_show(struct seq_file *m, void *v)
{
	seq_puts(m, "1\n");
	return 0;
}

static int nvfs_proc_stats_show(struct seq_file *m, void *v)
{
	seq_printf(m, "GDS Version: %s\n", NVFS_VERSION);
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
	return 0;
}

static struct proc_dir_entry *nvfs_proc_dir;

int gdrsim_nvfs_init(void)
{
	int ret = misc_register(&nvfs_misc);

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
