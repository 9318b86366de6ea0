// SPDX-License-Identifier: GPL-2.0
/*
 * gdrsim: imitation of nvidia.ko's parts that GPUDirect touches.
 *
 * - /dev/nvidiactl (195:255) and /dev/nvidia0 (195:0), /dev/nvidia-uvm: a
 *   process that opens them "uses a GPU".
 * - GPU memory: mmap() of /dev/nvidia0.  The VMA is VM_IO|VM_PFNMAP and has no
 *   pages: the CPU cannot touch it and pin_user_pages() fails, as for
 *   cudaMalloc() memory.  Each allocation gets a fake BAR1 address range.
 *   munmap() is cudaFree(): free callbacks of live non-persistent P2P mappings
 *   run (nvidia-peermem's nv_get_p2p_free_callback).
 * - The nv-p2p.h API with the real names and signatures:
 *   nvidia_p2p_get_pages, nvidia_p2p_put_pages, nvidia_p2p_get_pages_persistent,
 *   nvidia_p2p_put_pages_persistent, nvidia_p2p_dma_map_pages,
 *   nvidia_p2p_dma_unmap_pages, nvidia_p2p_free_page_table,
 *   nvidia_p2p_free_dma_mapping, as in NVIDIA/open-gpu-kernel-modules
 *   kernel-open/nvidia/nv-p2p.c (read at 535.288.01, 550.163.01, 565.77,
 *   570.211.01, 575.64.05, 580.65.06, 590.48.01, 595.45.04; where the branches
 *   differ, driver_branch decides).  Like nvidia.ko they resolve the virtual
 *   address in the calling process (p2p_token/va_space 0).  They are exported
 *   (NV_EXPORT_SYMBOL) in nvidia.ko; here global but not exported (one module),
 *   and GDRSIM_HOOK (noinline, noipa) so a kprobe finds each of them.
 */
#include <linux/module.h>
#include <linux/fs.h>
#include <linux/cdev.h>
#include <linux/device.h>
#include <linux/miscdevice.h>
#include <linux/mm.h>
#include <linux/slab.h>
#include <linux/proc_fs.h>
#include <linux/seq_file.h>
#include <linux/sizes.h>
#include <linux/sched.h>
#include <linux/ctype.h>
#include <linux/moduleparam.h>

#include "gdrsim.h"

#define NV_MAJOR_DEVICE_NUMBER  195
#define NV_CONTROL_DEVICE_MINOR 255

/* fake BAR1 window of the simulated GPU (physical addresses nobody owns) */
#define GDRSIM_BAR1_BASE 0x380000000000ULL

static unsigned long gpu_alloc_max_mb = 16384;
module_param(gpu_alloc_max_mb, ulong, 0444);
MODULE_PARM_DESC(gpu_alloc_max_mb, "largest single GPU allocation (mmap of /dev/nvidia0), MiB");

static u8 gdrsim_gpu_uuid[NVIDIA_P2P_GPU_UUID_LEN] = {
	0x47, 0x44, 0x52, 0x53, 0x49, 0x4d, 0x2d, 0x47, /* "GDRSIM-GPU-0\0\0\0\0" */
	0x50, 0x55, 0x2d, 0x30, 0x00, 0x00, 0x00, 0x00,
};

struct gdrsim_gpu_alloc {
	struct list_head node;    /* gdrsim_gpu_allocs, while mapped */
	struct kref ref;          /* VMA + page tables + dma-bufs */
	struct mm_struct *mm;     /* lookup key only, never dereferenced */
	u64 va;
	u64 len;
	u64 bar;
	bool freed;
	struct list_head tables;  /* live page tables that have a free callback */
};

/*
 * A page table handed out by nvidia_p2p_get_pages[_persistent]: nv-p2p.c's
 * nv_p2p_mem_info_t (page table + its DMA mappings + free callback).
 */
struct gdrsim_p2p_table {
	struct nvidia_p2p_page_table pt;  /* what callers see */
	struct gdrsim_gpu_alloc *alloc;
	struct list_head node;            /* gdrsim_p2p_tables: RM's tracker */
	struct list_head cb_node;         /* alloc->tables, when there is a free callback */
	bool persistent;
	void (*free_callback)(void *data);
	void *data;
	struct list_head mappings;        /* its gdrsim_p2p_mapping, as mem_info->dma_mapping_list */
	struct nvidia_p2p_page *page_array;
};

struct gdrsim_p2p_mapping {
	struct nvidia_p2p_dma_mapping m;  /* what callers see */
	struct list_head node;
};

static DEFINE_MUTEX(gdrsim_gpu_lock);
static LIST_HEAD(gdrsim_gpu_allocs);
/* every live page table, as RM tracks them: a put of an unknown one is "not found" */
static LIST_HEAD(gdrsim_p2p_tables);
static u64 gdrsim_next_bar = GDRSIM_BAR1_BASE;

u64 gdrsim_fake_bar_reserve(u64 len)
{
	u64 bar;

	mutex_lock(&gdrsim_gpu_lock);
	bar = gdrsim_next_bar;
	gdrsim_next_bar += round_up(len, SZ_2M);
	mutex_unlock(&gdrsim_gpu_lock);
	return bar;
}

static void gdrsim_gpu_alloc_free(struct kref *ref)
{
	kfree(container_of(ref, struct gdrsim_gpu_alloc, ref));
}

void gdrsim_gpu_alloc_put(struct gdrsim_gpu_alloc *alloc)
{
	kref_put(&alloc->ref, gdrsim_gpu_alloc_free);
}

u64 gdrsim_gpu_alloc_bar(struct gdrsim_gpu_alloc *alloc, u64 va)
{
	return alloc->bar + (va - alloc->va);
}

/* GPU allocation of @mm containing [va, va + len), with a reference */
struct gdrsim_gpu_alloc *gdrsim_gpu_alloc_find_get(struct mm_struct *mm, u64 va, u64 len)
{
	struct gdrsim_gpu_alloc *a, *found = NULL;

	if (!mm || len == 0 || va + len < va)
		return NULL;
	mutex_lock(&gdrsim_gpu_lock);
	list_for_each_entry(a, &gdrsim_gpu_allocs, node) {
		if (a->mm == mm && !a->freed && va >= a->va &&
		    va + len <= a->va + a->len) {
			kref_get(&a->ref);
			found = a;
			break;
		}
	}
	mutex_unlock(&gdrsim_gpu_lock);
	return found;
}

static void gdrsim_dma_mapping_free(struct gdrsim_p2p_mapping *mp)
{
	kvfree(mp->m.dma_addresses);
	kfree(mp);
}

/* nv-p2p.c nv_p2p_free_page_table(): frees the table and the DMA mappings still on it */
static void gdrsim_p2p_table_free(struct gdrsim_p2p_table *t)
{
	struct gdrsim_p2p_mapping *mp, *tmp;

	list_for_each_entry_safe(mp, tmp, &t->mappings, node) {
		list_del(&mp->node);
		gdrsim_dma_mapping_free(mp);
	}
	gdrsim_gpu_alloc_put(t->alloc);
	kvfree(t->pt.pages);
	kvfree(t->page_array);
	kfree(t);
}

/* the live table behind @page_table, unlinked from the tracker (NULL: not found); lock held */
static struct gdrsim_p2p_table *gdrsim_p2p_unlink(struct nvidia_p2p_page_table *page_table,
						  bool persistent)
{
	struct gdrsim_p2p_table *t;

	list_for_each_entry(t, &gdrsim_p2p_tables, node) {
		if (&t->pt == page_table && t->persistent == persistent) {
			list_del_init(&t->node);
			list_del_init(&t->cb_node);
			return t;
		}
	}
	return NULL;
}

/* nv-p2p.c nv_p2p_get_pages(), past its checks: rm_p2p_get_pages[_persistent] on the simulated GPU */
static int gdrsim_p2p_get(u64 va, u64 len, struct nvidia_p2p_page_table **page_table,
			  void (*free_callback)(void *data), void *data)
{
	struct gdrsim_gpu_alloc *alloc;
	struct gdrsim_p2p_table *t;
	u32 i, entries;

	/* nv_p2p_get_pages: address and length must be 64 KiB aligned (-EINVAL) */
	if ((va & GPU_PAGE_OFFSET) || (len & GPU_PAGE_OFFSET) || len == 0)
		return -EINVAL;
	alloc = gdrsim_gpu_alloc_find_get(current->mm, va, len);
	if (!alloc)
		return -EINVAL; /* not GPU memory of this process: RM's NV_ERR_INVALID_ARGUMENT */

	entries = len >> GPU_PAGE_SHIFT;
	t = kzalloc(sizeof(*t), GFP_KERNEL);
	if (!t)
		goto nomem;
	t->pt.pages = kvcalloc(entries, sizeof(*t->pt.pages), GFP_KERNEL);
	t->page_array = kvcalloc(entries, sizeof(*t->page_array), GFP_KERNEL);
	if (!t->pt.pages || !t->page_array) {
		kvfree(t->pt.pages);
		kvfree(t->page_array);
		kfree(t);
		goto nomem;
	}
	t->alloc = alloc;
	t->persistent = !free_callback;
	t->free_callback = free_callback;
	t->data = data;
	INIT_LIST_HEAD(&t->cb_node);
	INIT_LIST_HEAD(&t->mappings);
	t->pt.version = NVIDIA_P2P_PAGE_TABLE_VERSION;
	t->pt.page_size = NVIDIA_P2P_PAGE_SIZE_64KB;
	t->pt.entries = entries;
	t->pt.gpu_uuid = gdrsim_gpu_uuid;
	for (i = 0; i < entries; i++) {
		t->page_array[i].physical_address =
			gdrsim_gpu_alloc_bar(alloc, va) + ((u64)i << GPU_PAGE_SHIFT);
		t->pt.pages[i] = &t->page_array[i];
	}
	mutex_lock(&gdrsim_gpu_lock);
	if (alloc->freed) {
		mutex_unlock(&gdrsim_gpu_lock);
		gdrsim_p2p_table_free(t);
		return -EINVAL;
	}
	list_add_tail(&t->node, &gdrsim_p2p_tables);
	if (free_callback) /* rm_p2p_register_callback */
		list_add_tail(&t->cb_node, &alloc->tables);
	mutex_unlock(&gdrsim_gpu_lock);
	*page_table = &t->pt;
	return 0;

nomem:
	gdrsim_gpu_alloc_put(alloc);
	return -ENOMEM;
}

/*
 * open-gpu-kernel-modules kernel-open/nvidia/nv-p2p.c nvidia_p2p_get_pages
 * (exported; 535.288.01 ... 595.45.04): a NULL free_callback is -EINVAL (the
 * persistent API is the only NULL-callback form), then nv_p2p_get_pages of a
 * NON_PERSISTENT table.
 */
GDRSIM_HOOK int nvidia_p2p_get_pages(u64 p2p_token, u32 va_space, u64 virtual_address,
				     u64 length, struct nvidia_p2p_page_table **page_table,
				     void (*free_callback)(void *data), void *data)
{
	if (free_callback == NULL)
		return -EINVAL;
	if (p2p_token || va_space)
		return -EINVAL; /* sim: only the "current process" form (all in-tree callers) */
	return gdrsim_p2p_get(virtual_address, length, page_table, free_callback, data);
}

/*
 * nv-p2p.c nvidia_p2p_put_pages (exported; 535.288.01 ... 595.45.04): NULL is
 * 0; a table RM no longer tracks (its free callback already ran) is
 * NV_ERR_OBJECT_NOT_FOUND, which nv_p2p_put_pages turns into NV_OK: 0.
 */
GDRSIM_HOOK int nvidia_p2p_put_pages(u64 p2p_token, u32 va_space, u64 virtual_address,
				     struct nvidia_p2p_page_table *page_table)
{
	struct gdrsim_p2p_table *t;

	if (page_table == NULL)
		return 0;
	mutex_lock(&gdrsim_gpu_lock);
	t = gdrsim_p2p_unlink(page_table, false);
	mutex_unlock(&gdrsim_gpu_lock);
	if (t)
		gdrsim_p2p_table_free(t);
	return 0;
}

/*
 * nv-p2p.c nvidia_p2p_get_pages_persistent (exported): flags != 0 is -EINVAL up
 * to 565.77; from 570.86.15 the flags go on to nv_p2p_get_pages
 * (NVIDIA_P2P_FLAGS_FORCE_BAR1_MAPPING, which the simulated GPU always does).
 */
GDRSIM_HOOK int nvidia_p2p_get_pages_persistent(u64 virtual_address, u64 length,
						struct nvidia_p2p_page_table **page_table,
						u32 flags)
{
	if (flags != 0 && !GDRSIM_BRANCH_PERSISTENT_FLAGS(gdrsim_driver_branch))
		return -EINVAL;
	return gdrsim_p2p_get(virtual_address, length, page_table, NULL, NULL);
}

/*
 * nv-p2p.c nvidia_p2p_put_pages_persistent (exported; 535.288.01 ... 595.45.04):
 * flags != 0 is -EINVAL, NULL is 0, a table RM does not know is
 * NV_ERR_OBJECT_NOT_FOUND = -EINVAL.
 */
GDRSIM_HOOK int nvidia_p2p_put_pages_persistent(u64 virtual_address,
						struct nvidia_p2p_page_table *page_table,
						u32 flags)
{
	struct gdrsim_p2p_table *t;

	if (flags != 0)
		return -EINVAL;
	if (page_table == NULL)
		return 0;
	mutex_lock(&gdrsim_gpu_lock);
	t = gdrsim_p2p_unlink(page_table, true);
	mutex_unlock(&gdrsim_gpu_lock);
	if (!t)
		return -EINVAL;
	gdrsim_p2p_table_free(t);
	return 0;
}

/*
 * nv-p2p.c nvidia_p2p_free_page_table (exported; 535.288.01 ... 595.45.04): a
 * no-op returning 0, kept for third-party callers; nvidia.ko frees the table
 * itself (nv_p2p_free_platform_data) after the free callback returns.
 */
GDRSIM_HOOK int nvidia_p2p_free_page_table(struct nvidia_p2p_page_table *page_table)
{
	return 0;
}

/* nv-p2p.c nvidia_p2p_dma_map_pages (exported): one mapping, put on the table's list */
GDRSIM_HOOK int nvidia_p2p_dma_map_pages(struct pci_dev *peer,
					 struct nvidia_p2p_page_table *page_table,
					 struct nvidia_p2p_dma_mapping **dma_mapping)
{
	struct gdrsim_p2p_table *t;
	struct gdrsim_p2p_mapping *mp;
	u32 i;

	if (!peer || !page_table || !dma_mapping)
		return -EINVAL;
	t = container_of(page_table, struct gdrsim_p2p_table, pt);
	mp = kzalloc(sizeof(*mp), GFP_KERNEL);
	if (!mp)
		return -ENOMEM;
	mp->m.dma_addresses = kvcalloc(page_table->entries, sizeof(u64), GFP_KERNEL);
	if (!mp->m.dma_addresses) {
		kfree(mp);
		return -ENOMEM;
	}
	mp->m.version = NVIDIA_P2P_DMA_MAPPING_VERSION;
	mp->m.page_size_type = page_table->page_size;
	mp->m.entries = page_table->entries;
	mp->m.pci_dev = peer;
	/* no IOMMU between the simulated GPU and NIC: DMA address = BAR address */
	for (i = 0; i < page_table->entries; i++)
		mp->m.dma_addresses[i] = page_table->pages[i]->physical_address;
	mutex_lock(&gdrsim_gpu_lock);
	list_add_tail(&mp->node, &t->mappings); /* nv_p2p_insert_dma_mapping */
	mutex_unlock(&gdrsim_gpu_lock);
	*dma_mapping = &mp->m;
	return 0;
}

/*
 * nv-p2p.c nvidia_p2p_free_dma_mapping (exported; 535.288.01 ... 595.45.04): a
 * no-op returning 0, like nvidia_p2p_free_page_table.
 */
GDRSIM_HOOK int nvidia_p2p_free_dma_mapping(struct nvidia_p2p_dma_mapping *dma_mapping)
{
	return 0;
}

/*
 * nv-p2p.c nvidia_p2p_dma_unmap_pages (exported): -EINVAL on a NULL argument; a
 * mapping already taken off its table (nv_p2p_remove_dma_mapping finds nothing)
 * is 0.
 */
GDRSIM_HOOK int nvidia_p2p_dma_unmap_pages(struct pci_dev *peer,
					   struct nvidia_p2p_page_table *page_table,
					   struct nvidia_p2p_dma_mapping *dma_mapping)
{
	struct gdrsim_p2p_table *t;
	struct gdrsim_p2p_mapping *mp, *found = NULL;

	if (!peer || !page_table || !dma_mapping)
		return -EINVAL;
	t = container_of(page_table, struct gdrsim_p2p_table, pt);
	mutex_lock(&gdrsim_gpu_lock);
	list_for_each_entry(mp, &t->mappings, node) {
		if (&mp->m == dma_mapping) {
			list_del(&mp->node);
			found = mp;
			break;
		}
	}
	mutex_unlock(&gdrsim_gpu_lock);
	if (found)
		gdrsim_dma_mapping_free(found);
	return 0;
}

/*
 * cudaFree(): the GPU memory goes away.  RM calls each registered free callback
 * (nv-p2p.c nv_p2p_mem_info_free_callback: free_callback(data), then
 * nv_p2p_free_platform_data frees the table and its mappings).
 */
static void gdrsim_gpu_free(struct gdrsim_gpu_alloc *alloc)
{
	struct gdrsim_p2p_table *t, *tmp;
	LIST_HEAD(revoked);

	mutex_lock(&gdrsim_gpu_lock);
	alloc->freed = true;
	list_del_init(&alloc->node);
	list_for_each_entry_safe(t, tmp, &alloc->tables, cb_node) {
		list_del_init(&t->node); /* RM forgets it: a later put finds nothing */
		list_move_tail(&t->cb_node, &revoked);
	}
	mutex_unlock(&gdrsim_gpu_lock);

	list_for_each_entry_safe(t, tmp, &revoked, cb_node) {
		list_del_init(&t->cb_node);
		t->free_callback(t->data);
		gdrsim_p2p_table_free(t);
	}
	gdrsim_gpu_alloc_put(alloc);
}
static void gdrsim_gpu_vm_close(struct vm_area_struct *vma)
{
	gdrsim_gpu_free(vma->vm_private_data);
}

static vm_fault_t gdrsim_gpu_vm_fault(struct vm_fault *vmf)
{
	return VM_FAULT_SIGBUS; /* GPU memory is not CPU accessible */
}

static int gdrsim_gpu_vm_may_split(struct vm_area_struct *vma, unsigned long addr)
{
	return -EINVAL;
}

static int gdrsim_gpu_vm_mremap(struct vm_area_struct *vma)
{
	return -EINVAL;
}

static const struct vm_operations_struct gdrsim_gpu_vm_ops = {
	.close = gdrsim_gpu_vm_close,
	.fault = gdrsim_gpu_vm_fault,
	.may_split = gdrsim_gpu_vm_may_split,
	.mremap = gdrsim_gpu_vm_mremap,
};

static int nvidia_frontend_mmap(struct file *file, struct vm_area_struct *vma)
{
	u64 len = vma->vm_end - vma->vm_start;
	struct gdrsim_gpu_alloc *alloc;

	if (iminor(file_inode(file)) == NV_CONTROL_DEVICE_MINOR)
		return gdrsim_ctl_mmap(file, vma); /* system memory (nv_sysmem.c) */
	if ((vma->vm_start & GPU_PAGE_OFFSET) || (len & GPU_PAGE_OFFSET) || vma->vm_pgoff)
		return -EINVAL;
	if (len > ((u64)gpu_alloc_max_mb << 20))
		return -ENOMEM;
	alloc = kzalloc(sizeof(*alloc), GFP_KERNEL);
	if (!alloc)
		return -ENOMEM;
	kref_init(&alloc->ref);
	INIT_LIST_HEAD(&alloc->tables);
	alloc->mm = vma->vm_mm;
	alloc->va = vma->vm_start;
	alloc->len = len;
	alloc->bar = gdrsim_fake_bar_reserve(len);
#if LINUX_VERSION_CODE >= KERNEL_VERSION(6, 3, 0)
	vm_flags_set(vma, VM_IO | VM_PFNMAP | VM_DONTEXPAND | VM_DONTDUMP | VM_DONTCOPY);
#else
	vma->vm_flags |= VM_IO | VM_PFNMAP | VM_DONTEXPAND | VM_DONTDUMP | VM_DONTCOPY;
#endif
	vma->vm_ops = &gdrsim_gpu_vm_ops;
	vma->vm_private_data = alloc;
	mutex_lock(&gdrsim_gpu_lock);
	list_add_tail(&alloc->node, &gdrsim_gpu_allocs);
	mutex_unlock(&gdrsim_gpu_lock);
	return 0;
}

static int nvidia_frontend_open(struct inode *inode, struct file *file)
{
	unsigned int minor = iminor(inode);

	if (minor != 0 && minor != NV_CONTROL_DEVICE_MINOR)
		return -ENODEV;
	return 0;
}

static int nvidia_frontend_close(struct inode *inode, struct file *file)
{
	if (iminor(inode) == NV_CONTROL_DEVICE_MINOR)
		gdrsim_ctl_release(file);
	return 0;
}

static long nvidia_frontend_unlocked_ioctl(struct file *file, unsigned int cmd,
					   unsigned long arg)
{
	if (iminor(file_inode(file)) == NV_CONTROL_DEVICE_MINOR)
		return gdrsim_ctl_ioctl(file, cmd, arg);
	return -ENOTTY;
}

static const struct file_operations nvidia_frontend_fops = {
	.owner = THIS_MODULE,
	.open = nvidia_frontend_open,
	.release = nvidia_frontend_close,
	.mmap = nvidia_frontend_mmap,
	.unlocked_ioctl = nvidia_frontend_unlocked_ioctl,
	.llseek = noop_llseek,
};

static int nv_uvm_open(struct inode *inode, struct file *file)
{
	return 0;
}

static long nv_uvm_unlocked_ioctl(struct file *file, unsigned int cmd, unsigned long arg)
{
	return -ENOTTY;
}

static const struct file_operations nv_uvm_fops = {
	.owner = THIS_MODULE,
	.open = nv_uvm_open,
	.unlocked_ioctl = nv_uvm_unlocked_ioctl,
	.llseek = noop_llseek,
};

static struct miscdevice nv_uvm_misc = {
	.minor = MISC_DYNAMIC_MINOR,
	.name = "nvidia-uvm",
	.fops = &nv_uvm_fops,
	.mode = 0666,
};

static int nv_procfs_version_show(struct seq_file *s, void *v)
{
	seq_printf(s, "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  %s  "
		   "Release Build  (gdrsim simulation)\n", gdrsim_driver_version());
	seq_puts(s, "GCC version:  gdrsim\n");
	return 0;
}

/*
 * nvidia.ko's registry: NVreg_RegistryDwords="key=value;key=value;..." (kernel-open/nvidia/
 * nv-reg.h "Option: RegistryDwords"), here module parameter nv_registry_dwords, writable at
 * run time (the real one is module_param(..., charp, 0): read at load only, no sysfs entry;
 * /proc/driver/nvidia/params shows it).  Parsed as rm_parse_option_string does
 * (src/nvidia/arch/nvalloc/unix/src/osapi.c, 535.288.01 ... 595.45.04): spaces removed,
 * tokens split at ';', each "name=value" with exactly one '=', value by strtoul(value, 0, 0);
 * a later token wins.  Keys of the nv_parms table change the numeric lines of params; the
 * others (PeerMappingOverride) go to RM's registry (rm_write_registry_dword).
 */
static char *nv_registry_dwords = "";
module_param(nv_registry_dwords, charp, 0644);
MODULE_PARM_DESC(nv_registry_dwords,
		 "NVreg_RegistryDwords of the simulated nvidia.ko (\"PeerMappingOverride=1;\")");

int gdrsim_nv_registry_dword(const char *key, u32 *value)
{
	char *copy, *dst, *ptr, *token, *name, *val;
	const char *src;
	int ret = -ENOENT;
	unsigned long v;

	kernel_param_lock(THIS_MODULE);
	copy = kstrdup(nv_registry_dwords ? nv_registry_dwords : "", GFP_KERNEL);
	kernel_param_unlock(THIS_MODULE);
	if (!copy)
		return -ENOMEM;
	for (src = dst = copy; *src; src++) /* rm_remove_spaces */
		if (!isspace(*src))
			*dst++ = *src;
	*dst = 0;
	ptr = copy;
	while ((token = strsep(&ptr, ";"))) {
		name = strsep(&token, "=");
		val = strsep(&token, "=");
		if (!name || !*name || !val || !*val || token)
			continue;
		if (strcmp(name, key) || kstrtoul(val, 0, &v))
			continue;
		*value = (u32)v;
		ret = 0;
	}
	kfree(copy);
	return ret;
}

/*
 * kernel-open/nvidia/nv-procfs.c nv_procfs_read_params: "%s: %u" for each entry of nv_parms
 * (nv-reg.h; a few of them here, with their defaults), then the string options quoted.
 */
static const struct { const char *name; u32 def; } nv_parms[] = {
	{ "ResmanDebugLevel", ~0U }, { "RmLogonRC", 1 }, { "ModifyDeviceFiles", 1 },
	{ "DeviceFileUID", 0 }, { "DeviceFileGID", 0 }, { "DeviceFileMode", 0666 },
	{ "InitializeSystemMemoryAllocations", 1 }, { "UsePageAttributeTable", ~0U },
	{ "EnableMSI", 1 }, { "EnableStreamMemOPs", 0 },
};

static int nv_procfs_read_params(struct seq_file *s, void *v)
{
	unsigned int i;
	u32 data;

	for (i = 0; i < ARRAY_SIZE(nv_parms); i++) {
		if (gdrsim_nv_registry_dword(nv_parms[i].name, &data))
			data = nv_parms[i].def;
		seq_printf(s, "%s: %u\n", nv_parms[i].name, data);
	}
	seq_puts(s, "CoherentGPUMemoryMode: \"\"\n");
	kernel_param_lock(THIS_MODULE);
	seq_printf(s, "RegistryDwords: \"%s\"\n", nv_registry_dwords ? nv_registry_dwords : "");
	kernel_param_unlock(THIS_MODULE);
	seq_puts(s, "RegistryDwordsPerDevice: \"\"\nRmMsg: \"\"\nGpuBlacklist: \"\"\n"
		 "TemporaryFilePath: \"\"\nExcludedGpus: \"\"\n");
	return 0;
}

static dev_t nv_devt;
static struct cdev nv_cdev;
static struct class *nv_class;
static bool nv_cdev_added;
static struct proc_dir_entry *nv_proc_dir;

static char *nv_devnode(
#if LINUX_VERSION_CODE >= KERNEL_VERSION(6, 2, 0)
			const
#endif
			struct device *dev, umode_t *mode)
{
	if (mode)
		*mode = 0666;
	return NULL;
}

int gdrsim_nv_init(void)
{
	struct device *d;
	int ret;

	nv_devt = MKDEV(NV_MAJOR_DEVICE_NUMBER, 0);
	ret = register_chrdev_region(nv_devt, 256, "nvidia-frontend");
	if (ret) {
		ret = alloc_chrdev_region(&nv_devt, 0, 256, "nvidia-frontend");
		if (ret)
			return ret;
	}
	cdev_init(&nv_cdev, &nvidia_frontend_fops);
	nv_cdev.owner = THIS_MODULE;
	ret = cdev_add(&nv_cdev, nv_devt, 256);
	if (ret)
		goto err_region;
	nv_cdev_added = true;
#if LINUX_VERSION_CODE >= KERNEL_VERSION(6, 4, 0)
	nv_class = class_create("nvidia-gdrsim");
#else
	nv_class = class_create(THIS_MODULE, "nvidia-gdrsim");
#endif
	if (IS_ERR(nv_class)) {
		ret = PTR_ERR(nv_class);
		nv_class = NULL;
		goto err_cdev;
	}
	nv_class->devnode = nv_devnode;
	d = device_create(nv_class, NULL, MKDEV(MAJOR(nv_devt), NV_CONTROL_DEVICE_MINOR),
			  NULL, "nvidiactl");
	if (IS_ERR(d)) {
		ret = PTR_ERR(d);
		goto err_class;
	}
	d = device_create(nv_class, NULL, MKDEV(MAJOR(nv_devt), 0), NULL, "nvidia0");
	if (IS_ERR(d)) {
		ret = PTR_ERR(d);
		goto err_ctl;
	}
	ret = misc_register(&nv_uvm_misc);
	if (ret)
		goto err_dev0;
	nv_proc_dir = proc_mkdir("driver/nvidia", NULL);
	if (nv_proc_dir) {
		proc_create_single("version", 0444, nv_proc_dir, nv_procfs_version_show);
		proc_create_single("params", 0444, nv_proc_dir, nv_procfs_read_params);
	}
	return 0;

err_dev0:
	device_destroy(nv_class, MKDEV(MAJOR(nv_devt), 0));
err_ctl:
	device_destroy(nv_class, MKDEV(MAJOR(nv_devt), NV_CONTROL_DEVICE_MINOR));
err_class:
	class_destroy(nv_class);
err_cdev:
	cdev_del(&nv_cdev);
err_region:
	unregister_chrdev_region(nv_devt, 256);
	return ret;
}

void gdrsim_nv_exit(void)
{
	if (nv_proc_dir)
		proc_remove(nv_proc_dir);
	misc_deregister(&nv_uvm_misc);
	device_destroy(nv_class, MKDEV(MAJOR(nv_devt), 0));
	device_destroy(nv_class, MKDEV(MAJOR(nv_devt), NV_CONTROL_DEVICE_MINOR));
	class_destroy(nv_class);
	cdev_del(&nv_cdev);
	unregister_chrdev_region(nv_devt, 256);
}
