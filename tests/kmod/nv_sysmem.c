// SPDX-License-Identifier: GPL-2.0
/*
 * gdrsim: nvidia.ko's CUDA pinned host memory, through the control node
 * /dev/nvidiactl (195:255), as in NVIDIA/open-gpu-kernel-modules (read at
 * 535.288.01, 550.163.01, 570.211.01, 580.65.06, 595.45.04):
 *
 * - cuMemHostAlloc / cuMemAllocHost: system memory mapped into the process by
 *   mmap() of /dev/nvidiactl.  kernel-open/nvidia/nv-mmap.c: nvidia_mmap ->
 *   nvidia_mmap_helper, whose control-node branch ("Nvidia control
 *   node(nvidiactrl) maps system memory") calls nvidia_mmap_sysmem(vma, at,
 *   page_index, pages), which vm_insert_page()s each page of the allocation.
 *   So such memory shows in /proc/PID/maps as a mapping of /dev/nvidiactl.
 *   Here the allocation (RM's nv_alloc_pages at NV_ESC_RM_ALLOC_MEMORY) is made
 *   at mmap time, and the caller maps it MAP_SHARED as libcuda does (the real
 *   helper sets VM_SHARED itself).
 * - cuMemHostRegister: ioctl NV_ESC_RM_VID_HEAP_CONTROL with
 *   NVOS32_FUNCTION_ALLOC_OS_DESCRIPTOR on /dev/nvidiactl ->
 *   RmCreateOsDescriptor (src/nvidia/arch/nvalloc/unix/src/escape.c) ->
 *   os_lock_user_pages(address, page_count, &page_array, flags)
 *   (kernel-open/nvidia/os-mlock.c: pin_user_pages with FOLL_LONGTERM, and
 *   FOLL_WRITE when NV_LOCK_USER_PAGES_FLAGS_WRITE; NV_ERR_INVALID_ADDRESS when
 *   not every page pins).  cuMemHostUnregister: NV_ESC_RM_FREE ->
 *   os_unlock_user_pages(page_count, page_array, flags) (the flags argument
 *   from 570; 535 and 550 have two arguments and always dirty the pages).
 *
 * nvidia_mmap_sysmem is static with one call site in every branch (a real build
 * may inline it: GDRSIM_INLINABLE); os_lock_user_pages is global (NV_API_CALL,
 * not exported), so it is in /proc/kallsyms of a real nvidia.ko.
 */
#include <linux/fs.h>
#include <linux/mm.h>
#include <linux/slab.h>
#include <linux/uaccess.h>
#include <linux/version.h>

#include "gdrsim.h"

typedef u32 NV_STATUS;
typedef u64 NvU64;
typedef u32 NvU32;
#define NV_OK 0x00000000
#define NV_ERR_INVALID_ADDRESS 0x0000001e
#define NV_ERR_INVALID_LIMIT 0x0000002e
#define NV_ERR_INVALID_OBJECT_HANDLE 0x00000033
#define NV_ERR_NO_MEMORY 0x00000051
#define NV_ERR_NOT_SUPPORTED 0x00000056
#define NV_LOCK_USER_PAGES_FLAGS_WRITE_YES 0x00000001

/* kernel-open/common/inc/os-interface.h (570.211.01+) */
NV_STATUS os_lock_user_pages(void *address, NvU64 page_count, void **page_array, NvU32 flags);
NV_STATUS os_unlock_user_pages(NvU64 page_count, void *page_array, NvU32 flags);

/* The largest pinned host allocation or registration, in pages (256 MiB). */
#define GDRSIM_SYSMEM_MAX_PAGES (256UL << 20 >> PAGE_SHIFT)

/* nv_alloc_t (kernel-open/common/inc/nv-linux.h), the fields nvidia_mmap_sysmem uses. */
typedef struct nv_alloc_s {
	atomic_t usage_count;
	NvU64 num_pages;
	struct page **page_table;
} nv_alloc_t;

/* An OS descriptor of a registration (RM's memory object), per open file of nvidiactl. */
struct gdrsim_os_desc {
	struct list_head node;
	struct file *file;
	u64 handle;
	NvU64 page_count;
	void *page_array;
	NvU32 flags;
};

static DEFINE_MUTEX(gdrsim_os_desc_lock);
static LIST_HEAD(gdrsim_os_descs);
static u64 gdrsim_next_os_desc = 1;

static void nv_alloc_free(nv_alloc_t *at)
{
	for (NvU64 i = 0; i < at->num_pages; i++)
		if (at->page_table[i])
			__free_page(at->page_table[i]);
	kvfree(at->page_table);
	kfree(at);
}

/* kernel-open/nvidia/nv-mmap.c nvidia_mmap_sysmem (580.65.06; the same loop from 535) */
static GDRSIM_INLINABLE int nvidia_mmap_sysmem(struct vm_area_struct *vma, nv_alloc_t *at,
					       NvU64 page_index, NvU64 pages)
{
	NvU64 j;
	int ret = 0;
	unsigned long start = 0;

	atomic_inc(&at->usage_count);
	start = vma->vm_start;
	for (j = page_index; j < (page_index + pages); j++) {
		ret = vm_insert_page(vma, start, at->page_table[j]);
		if (ret) {
			atomic_dec(&at->usage_count);
			pr_err("NVRM: Userspace mapping creation failed [%d]!\n", ret);
			return -EAGAIN;
		}
		start += PAGE_SIZE;
	}
	return ret;
}

/* nv-mmap.c nvidia_vma_release: the allocation goes with its last mapping */
static void nvidia_vma_release(struct vm_area_struct *vma)
{
	nv_alloc_t *at = vma->vm_private_data;

	if (at && atomic_dec_and_test(&at->usage_count))
		nv_alloc_free(at);
}

static int nvidia_sysmem_may_split(struct vm_area_struct *vma, unsigned long addr)
{
	return -EINVAL;
}

static int nvidia_sysmem_mremap(struct vm_area_struct *vma)
{
	return -EINVAL;
}

static const struct vm_operations_struct nv_sysmem_vm_ops = {
	.close = nvidia_vma_release,
	.may_split = nvidia_sysmem_may_split,
	.mremap = nvidia_sysmem_mremap,
};

/* mmap() of /dev/nvidiactl: the control-node branch of nvidia_mmap_helper */
int gdrsim_ctl_mmap(struct file *file, struct vm_area_struct *vma)
{
	NvU64 pages = (vma->vm_end - vma->vm_start) >> PAGE_SHIFT;
	nv_alloc_t *at;
	int ret;

	if (vma->vm_pgoff || !pages || pages > GDRSIM_SYSMEM_MAX_PAGES)
		return -EINVAL;
	at = kzalloc(sizeof(*at), GFP_KERNEL);
	if (!at)
		return -ENOMEM;
	at->num_pages = pages;
	at->page_table = kvcalloc(pages, sizeof(*at->page_table), GFP_KERNEL);
	if (!at->page_table) {
		kfree(at);
		return -ENOMEM;
	}
	for (NvU64 i = 0; i < pages; i++) {
		at->page_table[i] = alloc_page(GFP_KERNEL | __GFP_ZERO);
		if (!at->page_table[i]) {
			nv_alloc_free(at);
			return -ENOMEM;
		}
	}
	ret = nvidia_mmap_sysmem(vma, at, 0, pages);
	if (ret) {
		nv_alloc_free(at);
		return ret;
	}
	/* the mapping's reference (usage_count) is the only one: dropped at munmap */
#if LINUX_VERSION_CODE >= KERNEL_VERSION(6, 3, 0)
	vm_flags_set(vma, VM_DONTEXPAND | VM_DONTDUMP | VM_DONTCOPY);
#else
	vma->vm_flags |= VM_DONTEXPAND | VM_DONTDUMP | VM_DONTCOPY;
#endif
	vma->vm_private_data = at;
	vma->vm_ops = &nv_sysmem_vm_ops;
	return 0;
}

/* kernel-open/nvidia/os-mlock.c os_lock_user_pages (580.65.06; same signature from 535) */
GDRSIM_HOOK NV_STATUS os_lock_user_pages(void *address, NvU64 page_count, void **page_array,
					 NvU32 flags)
{
	unsigned int gup_flags = (flags & NV_LOCK_USER_PAGES_FLAGS_WRITE_YES) ? FOLL_WRITE : 0;
	struct page **user_pages;
	long ret;

	gup_flags |= FOLL_LONGTERM;
	user_pages = kvcalloc(page_count, sizeof(*user_pages), GFP_KERNEL);
	if (!user_pages)
		return NV_ERR_NO_MEMORY;
	/* the real one: NV_PIN_USER_PAGES (pin_user_pages) under the mmap read lock */
	ret = pin_user_pages_fast((unsigned long)address, page_count, gup_flags, user_pages);
	if (ret < 0 || (NvU64)ret < page_count) {
		if (ret > 0)
			unpin_user_pages(user_pages, ret);
		kvfree(user_pages);
		return NV_ERR_INVALID_ADDRESS;
	}
	*page_array = user_pages;
	return NV_OK;
}

/* os-mlock.c os_unlock_user_pages (570.211.01+; 535/550 without flags, pages always dirtied) */
GDRSIM_HOOK NV_STATUS os_unlock_user_pages(NvU64 page_count, void *page_array, NvU32 flags)
{
	bool write = flags & NV_LOCK_USER_PAGES_FLAGS_WRITE_YES;

	unpin_user_pages_dirty_lock(page_array, page_count, write);
	kvfree(page_array);
	return NV_OK;
}

/* escape.c RmCreateOsDescriptor: page count of [descriptor, descriptor + limit], then the pin */
static GDRSIM_HOOK NV_STATUS RmCreateOsDescriptor(struct nv_os_descriptor *p, struct file *file)
{
	struct gdrsim_os_desc *d;
	NvU64 alloc_size, page_count;
	NV_STATUS status;

	if (p->descriptor & ~PAGE_MASK)
		return NV_ERR_NOT_SUPPORTED;
	if (p->limit + 1 == 0)
		return NV_ERR_INVALID_LIMIT;
	alloc_size = p->limit + 1;
	page_count = 1 + ((alloc_size - 1) / PAGE_SIZE);
	if (page_count > GDRSIM_SYSMEM_MAX_PAGES)
		return NV_ERR_NO_MEMORY;
	d = kzalloc(sizeof(*d), GFP_KERNEL);
	if (!d)
		return NV_ERR_NO_MEMORY;
	d->flags = p->writable ? NV_LOCK_USER_PAGES_FLAGS_WRITE_YES : 0;
	status = os_lock_user_pages((void *)(uintptr_t)p->descriptor, page_count, &d->page_array, d->flags);
	if (status != NV_OK) {
		kfree(d);
		return status;
	}
	d->file = file;
	d->page_count = page_count;
	mutex_lock(&gdrsim_os_desc_lock);
	d->handle = gdrsim_next_os_desc++;
	list_add_tail(&d->node, &gdrsim_os_descs);
	mutex_unlock(&gdrsim_os_desc_lock);
	p->handle = d->handle;
	return NV_OK;
}

static struct gdrsim_os_desc *os_desc_take(struct file *file, u64 handle)
{
	struct gdrsim_os_desc *d, *found = NULL;

	mutex_lock(&gdrsim_os_desc_lock);
	list_for_each_entry(d, &gdrsim_os_descs, node) {
		if (d->file == file && (handle == 0 || d->handle == handle)) {
			list_del(&d->node);
			found = d;
			break;
		}
	}
	mutex_unlock(&gdrsim_os_desc_lock);
	return found;
}

static void os_desc_free(struct gdrsim_os_desc *d)
{
	os_unlock_user_pages(d->page_count, d->page_array, d->flags);
	kfree(d);
}

/* ioctl on /dev/nvidiactl: the two escapes of cuMemHostRegister / cuMemHostUnregister */
long gdrsim_ctl_ioctl(struct file *file, unsigned int cmd, unsigned long arg)
{
	struct nv_os_descriptor p;
	struct gdrsim_os_desc *d;

	if (cmd != NV_IOCTL_OS_DESC_ALLOC && cmd != NV_IOCTL_OS_DESC_FREE)
		return -ENOTTY;
	if (copy_from_user(&p, (void __user *)arg, sizeof(p)))
		return -EFAULT;
	if (cmd == NV_IOCTL_OS_DESC_ALLOC) {
		p.status = RmCreateOsDescriptor(&p, file);
	} else {
		d = p.handle ? os_desc_take(file, p.handle) : NULL;
		p.status = d ? NV_OK : NV_ERR_INVALID_OBJECT_HANDLE;
		if (d)
			os_desc_free(d);
	}
	return copy_to_user((void __user *)arg, &p, sizeof(p)) ? -EFAULT : 0;
}

/* close of a nvidiactl fd: RM frees the client's objects, registrations included */
void gdrsim_ctl_release(struct file *file)
{
	struct gdrsim_os_desc *d;

	while ((d = os_desc_take(file, 0)))
		os_desc_free(d);
}
