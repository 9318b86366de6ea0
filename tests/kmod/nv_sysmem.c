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
 * - cuMemHostRegister(..., CU_MEMHOSTREGISTER_IOMEMORY) of I/O memory (a NIC's
 *   doorbell page: NVSHMEM IBGDA and DOCA GPUNetIO map the mlx5 UAR into the GPU
 *   this way): the same escape; os_lock_user_pages fails on the VM_IO|VM_PFNMAP
 *   range (NV_ERR_INVALID_ADDRESS), so RmCreateOsDescriptor calls
 *   os_lookup_user_io_memory(address, page_count, &pte_array) (os-mlock.c: one VMA,
 *   VM_IO|VM_PFNMAP, the PFNs read with follow_pfn / follow_pfnmap_start, physically
 *   contiguous) and RM builds the memory descriptor in osCreateOsDescriptorFromIoMemory
 *   (src/nvidia/arch/nvalloc/unix/src/osmemdesc.c): UNCACHED + CONTIGUOUS required, and,
 *   because os_desc_mem.c forces _PEER_MAP_OVERRIDE_REQUIRED for I/O memory, either the
 *   PeerMappingOverride registry key (kernel_bif.c peerMappingOverride, set from
 *   NVreg_RegistryDwords) or CAP_SYS_ADMIN (osIsAdministrator -> os_is_administrator ->
 *   NV_IS_SUSER() = capable(CAP_SYS_ADMIN)); else NV_ERR_INSUFFICIENT_PERMISSIONS, which
 *   libcuda reports as CUDA_ERROR_NOT_PERMITTED (800).  Read at 535.288.01, 550.163.01,
 *   570.211.01, 580.65.06 and 595.45.04 (the same in each).  cuMemHostUnregister of it:
 *   NV_ESC_RM_FREE -> memdesc teardown -> osDestroyOsDescriptorFromIoMemory (nothing was
 *   pinned).
 *
 * nvidia_mmap_sysmem is static with one call site in every branch (a real build
 * may inline it: GDRSIM_INLINABLE); os_lock_user_pages is global (NV_API_CALL,
 * not exported), so it is in /proc/kallsyms of a real nvidia.ko.
 */
#include <linux/capability.h>
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
#define NV_ERR_INVALID_FLAGS 0x00000029
#define NV_ERR_INVALID_LIMIT 0x0000002e
#define NV_ERR_INVALID_OBJECT_HANDLE 0x00000033
#define NV_ERR_NO_MEMORY 0x00000051
#define NV_ERR_NOT_SUPPORTED 0x00000056
#define NV_LOCK_USER_PAGES_FLAGS_WRITE_YES 0x00000001

/* kernel-open/common/inc/os-interface.h (570.211.01+) */
NV_STATUS os_lock_user_pages(void *address, NvU64 page_count, void **page_array, NvU32 flags);
NV_STATUS os_unlock_user_pages(NvU64 page_count, void *page_array, NvU32 flags);
NV_STATUS os_lookup_user_io_memory(void *address, NvU64 page_count, NvU64 **pte_array);

/* The largest pinned host allocation or registration, in pages (256 MiB). */
#define GDRSIM_SYSMEM_MAX_PAGES (256UL << 20 >> PAGE_SHIFT)

/* nv_alloc_t (kernel-open/common/inc/nv-linux.h), the fields nvidia_mmap_sysmem uses. */
typedef struct nv_alloc_s {
	atomic_t usage_count;
	NvU64 num_pages;
	struct page **page_table;
} nv_alloc_t;

/* NVOS32_DESCRIPTOR_TYPE_* (src/common/sdk/nvidia/inc/nvos.h) */
#define NVOS32_DESCRIPTOR_TYPE_OS_PAGE_ARRAY 1
#define NVOS32_DESCRIPTOR_TYPE_OS_IO_MEMORY  2

/* An OS descriptor of a registration (RM's memory object), per open file of nvidiactl. */
struct gdrsim_os_desc {
	struct list_head node;
	struct file *file;
	u64 handle;
	NvU32 type;         /* NVOS32_DESCRIPTOR_TYPE_OS_PAGE_ARRAY or _OS_IO_MEMORY */
	NvU64 page_count;
	void *page_array;   /* pinned pages, or the I/O memory's PTE array */
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

/*
 * kernel-open/nvidia/os-mlock.c nv_follow_pfn: follow_pfn where the kernel has it (6.1),
 * follow_pfnmap_start/_end from 6.12 (the 6.10-6.11 follow_pte(vma, ...) flavour is not
 * built here).  The mmap lock is held.
 */
static int nv_follow_pfn(struct vm_area_struct *vma, unsigned long address, unsigned long *pfn)
{
#if LINUX_VERSION_CODE >= KERNEL_VERSION(6, 12, 0)
	struct follow_pfnmap_args args = { .vma = vma, .address = address };
	int rc = follow_pfnmap_start(&args);

	if (rc)
		return rc;
	*pfn = args.pfn;
	follow_pfnmap_end(&args);
	return 0;
#else
	return follow_pfn(vma, address, pfn);
#endif
}

/* os-mlock.c get_io_ptes: each page's physical address; the range must be contiguous */
static NV_STATUS get_io_ptes(struct vm_area_struct *vma, unsigned long start, NvU64 page_count,
			     NvU64 **pte_array)
{
	unsigned long pfn;
	NvU64 i;

	for (i = 0; i < page_count; i++) {
		if (nv_follow_pfn(vma, start + i * PAGE_SIZE, &pfn) < 0)
			return NV_ERR_INVALID_ADDRESS;
		pte_array[i] = (NvU64 *)(uintptr_t)((NvU64)pfn << PAGE_SHIFT);
		if (i && (NvU64)(uintptr_t)pte_array[i] != (NvU64)(uintptr_t)pte_array[i - 1] + PAGE_SIZE)
			return NV_ERR_INVALID_ADDRESS;
	}
	return NV_OK;
}

/*
 * kernel-open/nvidia/os-mlock.c os_lookup_user_io_memory (535.288.01 ... 595.45.04, global
 * NV_API_CALL, not exported): the range must lie in ONE vma with VM_IO or VM_PFNMAP; the PTE
 * array holds the physical address of each page.  Called by RmCreateOsDescriptor when
 * os_lock_user_pages could not pin the range.
 */
GDRSIM_HOOK NV_STATUS os_lookup_user_io_memory(void *address, NvU64 page_count, NvU64 **pte_array)
{
	struct mm_struct *mm = current->mm;
	unsigned long start = (unsigned long)address, pfn;
	struct vm_area_struct *vma;
	NV_STATUS status;
	void **result_array;

	result_array = kvcalloc(page_count, sizeof(*result_array), GFP_KERNEL);
	if (!result_array)
		return NV_ERR_NO_MEMORY;
	mmap_read_lock(mm);
	vma = find_vma_intersection(mm, start, start + 1);
	if (!vma || !(vma->vm_flags & (VM_IO | VM_PFNMAP)) ||
	    !(vma->vm_start <= start && ((vma->vm_end - start) >> PAGE_SHIFT) >= page_count)) {
		pr_err("NVRM: Cannot map memory with base addr 0x%lx and size of 0x%llx pages\n",
		       start, page_count);
		status = NV_ERR_INVALID_ADDRESS;
		goto done;
	}
	if (nv_follow_pfn(vma, start, &pfn) < 0) {
		status = NV_ERR_INVALID_ADDRESS;
		goto done;
	}
	status = get_io_ptes(vma, start, page_count, (NvU64 **)result_array);
	if (status == NV_OK)
		*pte_array = (NvU64 *)result_array;
done:
	mmap_read_unlock(mm);
	if (status != NV_OK)
		kvfree(result_array);
	return status;
}

/*
 * src/nvidia/arch/nvalloc/unix/src/osmemdesc.c osCreateOsDescriptorFromIoMemory (static in
 * RM; 7 arguments there: pGpu, pDescriptor, hClient, flags, pLimit, ppMemDesc, ppPrivate;
 * here the flags, i.e. the NVOS32 attr, and the page count): UNCACHED + CONTIGUOUS or
 * NV_ERR_INVALID_FLAGS; then the check os_desc_mem.c forces for I/O memory imported through
 * RmVidHeapControl (_PEER_MAP_OVERRIDE_REQUIRED): "Don't allow MMIO mappings for
 * unprivileged users" unless PeerMappingOverride is set (bug 1630288).  RM reads the key
 * once, at GPU init (kernel_bif.c); here at every call, so nv_registry_dwords can change.
 * The memory descriptor, its BAR-overlap check and IOMMU mapping are not simulated.
 */
static GDRSIM_HOOK NV_STATUS osCreateOsDescriptorFromIoMemory(NvU32 flags, NvU64 page_count)
{
	u32 override = 0;

	if ((flags & NVOS32_ATTR_COHERENCY_MASK) != NVOS32_ATTR_COHERENCY_UNCACHED ||
	    (flags & NVOS32_ATTR_PHYSICALITY_MASK) != NVOS32_ATTR_PHYSICALITY_CONTIGUOUS)
		return NV_ERR_INVALID_FLAGS;
	gdrsim_nv_registry_dword("PeerMappingOverride", &override);
	/* osIsAdministrator -> os_is_administrator -> NV_IS_SUSER(): capable(CAP_SYS_ADMIN) */
	if (!override && !capable(CAP_SYS_ADMIN)) {
		pr_err("NVRM: %s(): permission denied, allowPeermapping=%d\n", __func__, !!override);
		return NV_ERR_INSUFFICIENT_PERMISSIONS;
	}
	return NV_OK;
}

/*
 * osmemdesc.c osCreateOsDescriptorFromPageArray's flag check: pinned pages are cached
 * (COHERENCY_CACHED or _WRITE_BACK) and never declared contiguous; the memory descriptor
 * itself is not simulated.
 */
static NV_STATUS os_desc_page_array_check(NvU32 flags)
{
	NvU32 coherency = flags & NVOS32_ATTR_COHERENCY_MASK;

	if ((coherency != NVOS32_ATTR_COHERENCY_CACHED && coherency != NVOS32_ATTR_COHERENCY_WRITE_BACK) ||
	    (flags & NVOS32_ATTR_PHYSICALITY_MASK) == NVOS32_ATTR_PHYSICALITY_CONTIGUOUS)
		return NV_ERR_INVALID_FLAGS;
	return NV_OK;
}

/*
 * escape.c RmCreateOsDescriptor: page count of [descriptor, descriptor + limit], then the
 * pin (os_lock_user_pages); when that says NV_ERR_INVALID_ADDRESS, the I/O-memory lookup
 * (os_lookup_user_io_memory); then Nv04VidHeapControl -> osCreateMemFromOsDescriptor, which
 * checks the descriptor kind against the flags (the page array is unpinned if that fails).
 */
static GDRSIM_HOOK NV_STATUS RmCreateOsDescriptor(struct nv_os_descriptor *p, struct file *file)
{
	struct gdrsim_os_desc *d;
	NvU64 alloc_size, page_count, *pte_array = NULL;
	void *descriptor = (void *)(uintptr_t)p->descriptor;
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
	status = os_lock_user_pages(descriptor, page_count, &d->page_array, d->flags);
	if (status == NV_OK) {
		d->type = NVOS32_DESCRIPTOR_TYPE_OS_PAGE_ARRAY;
	} else if (status == NV_ERR_INVALID_ADDRESS) {
		status = os_lookup_user_io_memory(descriptor, page_count, &pte_array);
		d->type = NVOS32_DESCRIPTOR_TYPE_OS_IO_MEMORY;
		d->page_array = pte_array;
	}
	if (status != NV_OK) {
		kfree(d);
		return status;
	}
	/* Nv04VidHeapControl -> ... -> osCreateMemFromOsDescriptor */
	if (d->type == NVOS32_DESCRIPTOR_TYPE_OS_IO_MEMORY)
		status = osCreateOsDescriptorFromIoMemory(p->attr, page_count);
	else
		status = os_desc_page_array_check(p->attr);
	if (status != NV_OK) {
		if (d->type == NVOS32_DESCRIPTOR_TYPE_OS_PAGE_ARRAY)
			os_unlock_user_pages(page_count, d->page_array, d->flags);
		else
			kvfree(pte_array); /* RM's owner of a refused PTE array: not verified */
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

/* osmemdesc.c osDestroyOsDescriptorFromIoMemory: I/O memory was never pinned */
static GDRSIM_HOOK void osDestroyOsDescriptorFromIoMemory(struct gdrsim_os_desc *d)
{
	kvfree(d->page_array);
}

static void os_desc_free(struct gdrsim_os_desc *d)
{
	if (d->type == NVOS32_DESCRIPTOR_TYPE_OS_IO_MEMORY)
		osDestroyOsDescriptorFromIoMemory(d);
	else
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
