/* SPDX-License-Identifier: GPL-2.0 */
/*
 * gdrsim: a test-only imitation of the NVIDIA GPUDirect driver stack
 * (MLNX_OFED ib_core peer memory + nvidia-peermem + nvidia.ko P2P API +
 * nvidia-fs) with the real function names, signatures and call order.
 *
 * Internal declarations shared by the module's source files.  The split into
 * files follows the real split into modules:
 *   ib_peer_mem.c     MLNX_OFED ib_core: ib_umem_get_peer, ib_peer_umem_get, ...
 *   nvidia_peermem.c  nvidia-peermem: nv_mem_acquire, nv_mem_get_pages[_nc], ...
 *   nv_p2p.c          nvidia.ko: /dev/nvidia*, GPU memory, nvidia_p2p_* API
 *   nv_sysmem.c       nvidia.ko: pinned host memory (nvidia_mmap_sysmem, os_lock_user_pages)
 *   nvidia_fs.c       nvidia-fs: /dev/nvidia-fs0, nvfs_ioctl, nvfs_direct_io, ...
 *   nic_ibdev.c       a NIC registered with ib_core ("efa_sim0"): EFA's user ABI (libefa
 *                     opens it), MLNX_OFED mlx5's ib_umem_get_peer, EFA's dma-buf MRs
 *   nic_mlx5.c        a second NIC ("mlx5_0"): mlx5's user ABI (stock libmlx5 opens it), its
 *                     doorbell pins (mainline or MLNX_OFED), MRs, DEVX UMEMs; its queues in
 *                     nic_mlx5_queues.c (nic_mlx5.h between the two)
 *   gdrsim_main.c     glue: /dev/gdrsim ioctls, dma-buf exporter, module init
 *
 * Functions that are global in the real drivers are global here (but not
 * exported: everything lives in one module); functions that are static there
 * are static here.  Every function a tracer may hook is GDRSIM_HOOK so gcc
 * makes no .isra/.constprop/.part clones and never inlines it.
 *
 * GDRSIM_INLINABLE marks the hooked functions that are static with one call
 * site in the real driver (nvidia-fs's nvfs_direct_io), which the real build
 * may inline away.  The "inlined" flavour (make inline: -DGDRSIM_INLINE_HELPERS)
 * inlines them for certain, so the tests see what a tracer says when such a
 * symbol is missing; the default flavour keeps them as GDRSIM_HOOK.
 */
#ifndef GDRSIM_H
#define GDRSIM_H

#include <linux/types.h>
#include <linux/version.h>
#include <linux/scatterlist.h>
#include <linux/mutex.h>
#include <linux/list.h>
#include <linux/kref.h>
#include <linux/mm_types.h>
#include <rdma/ib_verbs.h>
#include <rdma/ib_umem.h>

#include "gdrsim_uapi.h"

#define GDRSIM_HOOK noinline __attribute__((noipa))

#ifdef GDRSIM_INLINE_HELPERS
#define GDRSIM_INLINABLE __always_inline
#define GDRSIM_FLAVOUR "inlined"
#else
#define GDRSIM_INLINABLE GDRSIM_HOOK
#define GDRSIM_FLAVOUR "noipa"
#endif

/*
 * The NVIDIA driver branch simulated: module parameter driver_branch
 * (nvidia_peermem.c), one of the branches of gdr-trace's driver matrix
 * (docs/drivers.md), each with the release tag its flow was read from
 * (NVIDIA/open-gpu-kernel-modules).  nvidia.ko and nvidia-peermem come from one
 * driver package, so one parameter sets both.
 */
extern int gdrsim_driver_branch;
/* the release tag of the simulated branch ("580.65.06"): /proc/driver/nvidia/version, client version */
const char *gdrsim_driver_version(void);
/* nvidia-peermem.c 560.28.03+: module parameter persistent_api_support (before: two clients always) */
#define GDRSIM_BRANCH_HAS_PERSISTENT_API_SUPPORT(b) ((b) >= 560)
/* nvidia-peermem.c 580.65.06+: the persistent client's .acquire is nv_mem_acquire_nc */
#define GDRSIM_BRANCH_HAS_ACQUIRE_NC(b) ((b) >= 580)
/*
 * nvidia.ko's dma-buf exporter name (kernel-open/nvidia/nv-dmabuf.c, nv_dma_buf_create):
 * 580.65.06 and later set exp_info.exp_name = "nv_dmabuf"; before, the export info is
 * DEFINE_DMA_BUF_EXPORT_INFO's default, the module name "nvidia" (docs/drivers.md).
 */
#define GDRSIM_BRANCH_NV_DMABUF_NAME(b) ((b) >= 580)
/* nv-p2p.c 570.86.15+: nvidia_p2p_get_pages_persistent passes flags on (before: flags != 0 = -EINVAL) */
#define GDRSIM_BRANCH_PERSISTENT_FLAGS(b) ((b) >= 570)

/* ------------------------------------------------------------------ */
/* nvidia.ko: nv-p2p.h (layouts as in NVIDIA/open-gpu-kernel-modules)  */

#define GPU_PAGE_SHIFT   16
#define GPU_PAGE_SIZE    ((u64)1 << GPU_PAGE_SHIFT)
#define GPU_PAGE_OFFSET  (GPU_PAGE_SIZE - 1)
#define GPU_PAGE_MASK    (~GPU_PAGE_OFFSET)

#define NVIDIA_P2P_PAGE_TABLE_VERSION  0x00010002
#define NVIDIA_P2P_DMA_MAPPING_VERSION 0x00020003
#define NVIDIA_P2P_GPU_UUID_LEN        16

enum nvidia_p2p_page_size_type {
	NVIDIA_P2P_PAGE_SIZE_4KB = 0,
	NVIDIA_P2P_PAGE_SIZE_64KB,
	NVIDIA_P2P_PAGE_SIZE_128KB,
	NVIDIA_P2P_PAGE_SIZE_COUNT
};

struct nvidia_p2p_page {
	u64 physical_address;
	union nvidia_p2p_request_registers {
		struct {
			u32 wreqmb_h;
			u32 rreqmb_h;
			u32 rreqmb_0;
			u32 reserved[3];
		} fermi;
	} registers;
};

struct nvidia_p2p_page_table {
	u32 version;
	u32 page_size; /* enum nvidia_p2p_page_size_type */
	struct nvidia_p2p_page **pages;
	u32 entries;
	u8 *gpu_uuid;
};

struct nvidia_p2p_dma_mapping {
	u32 version;
	enum nvidia_p2p_page_size_type page_size_type;
	u32 entries;
	u64 *dma_addresses;
	void *private;
	struct pci_dev *pci_dev;
};

int nvidia_p2p_get_pages(u64 p2p_token, u32 va_space, u64 virtual_address,
			 u64 length, struct nvidia_p2p_page_table **page_table,
			 void (*free_callback)(void *data), void *data);
int nvidia_p2p_put_pages(u64 p2p_token, u32 va_space, u64 virtual_address,
			 struct nvidia_p2p_page_table *page_table);
int nvidia_p2p_get_pages_persistent(u64 virtual_address, u64 length,
				    struct nvidia_p2p_page_table **page_table,
				    u32 flags);
int nvidia_p2p_put_pages_persistent(u64 virtual_address,
				    struct nvidia_p2p_page_table *page_table,
				    u32 flags);
int nvidia_p2p_dma_map_pages(struct pci_dev *peer,
			     struct nvidia_p2p_page_table *page_table,
			     struct nvidia_p2p_dma_mapping **dma_mapping);
int nvidia_p2p_dma_unmap_pages(struct pci_dev *peer,
			       struct nvidia_p2p_page_table *page_table,
			       struct nvidia_p2p_dma_mapping *dma_mapping);
int nvidia_p2p_free_page_table(struct nvidia_p2p_page_table *page_table);
int nvidia_p2p_free_dma_mapping(struct nvidia_p2p_dma_mapping *dma_mapping);

/* GPU memory bookkeeping (nv_p2p.c) */
struct gdrsim_gpu_alloc;
struct gdrsim_gpu_alloc *gdrsim_gpu_alloc_find_get(struct mm_struct *mm,
						   u64 va, u64 len);
void gdrsim_gpu_alloc_put(struct gdrsim_gpu_alloc *alloc);
u64 gdrsim_gpu_alloc_bar(struct gdrsim_gpu_alloc *alloc, u64 va);
u64 gdrsim_fake_bar_reserve(u64 len);
int gdrsim_nv_init(void);
void gdrsim_nv_exit(void);
/* nv_sysmem.c: /dev/nvidiactl's pinned host memory (mmap) and OS descriptors (ioctl) */
int gdrsim_ctl_mmap(struct file *file, struct vm_area_struct *vma);
long gdrsim_ctl_ioctl(struct file *file, unsigned int cmd, unsigned long arg);
void gdrsim_ctl_release(struct file *file);
/*
 * nvidia.ko's registry (nv_p2p.c): the NVreg_RegistryDwords "key=value;..." string (module
 * parameter nv_registry_dwords); 0 and *value set when @key is in it, else -ENOENT
 */
int gdrsim_nv_registry_dword(const char *key, u32 *value);

/* ------------------------------------------------------------------ */
/* MLNX_OFED ib_core: include/rdma/peer_mem.h and ib_umem.h peer parts */

#define IB_PEER_MEMORY_NAME_MAX 64
#define IB_PEER_MEMORY_VER_MAX  16

struct peer_memory_client {
	char name[IB_PEER_MEMORY_NAME_MAX];
	char version[IB_PEER_MEMORY_VER_MAX];
	int (*acquire)(unsigned long addr, size_t size, void *peer_mem_private_data,
		       char *peer_mem_name, void **client_context);
	int (*get_pages)(unsigned long addr, size_t size, int write, int force,
			 struct sg_table *sg_head, void *client_context,
			 u64 core_context);
	int (*dma_map)(struct sg_table *sg_head, void *client_context,
		       struct device *dma_device, int dmasync, int *nmap);
	int (*dma_unmap)(struct sg_table *sg_head, void *client_context,
			 struct device *dma_device);
	void (*put_pages)(struct sg_table *sg_head, void *client_context);
	unsigned long (*get_page_size)(void *client_context);
	void (*release)(void *client_context);
	void *(*get_context_private_data)(u64 peer_id);
	void (*put_context_private_data)(void *context);
};

enum {
	PEER_MEM_INVALIDATE_UNMAPS = 1 << 0,
};

struct peer_memory_client_ex {
	struct peer_memory_client client;
	size_t ex_size;
	u32 flags;
};

typedef int (*invalidate_peer_memory)(void *reg_handle, u64 core_context);

enum ib_peer_mem_flags {
	IB_PEER_MEM_ALLOW = 1 << 0,
	IB_PEER_MEM_INVAL_SUPP = 1 << 1,
};

void *ib_register_peer_memory_client(const struct peer_memory_client *peer_client,
				     invalidate_peer_memory *invalidate_callback);
void ib_unregister_peer_memory_client(void *reg_handle);
struct ib_umem *ib_umem_get_peer(struct ib_device *device, unsigned long addr,
				 size_t size, int access,
				 unsigned long peer_mem_flags);
struct ib_umem *ib_peer_umem_get(struct ib_umem *old_umem, int old_ret,
				 unsigned long peer_mem_flags);
void ib_peer_umem_release(struct ib_umem *umem);
/* before the real ib_umem_release: the peer state, moved out of @umem (see ib_peer_mem.c) */
struct ib_umem *gdrsim_peer_umem_detach(struct ib_umem *umem);

/* helpers for the glue (ib_peer_mem.c) */
bool gdrsim_umem_is_peer(struct ib_umem *umem);
void gdrsim_umem_peer_info(struct ib_umem *umem, char *client, size_t len,
			   u64 *page_size, u32 *nmap);
int gdrsim_peer_live_umems(void);

/* nvidia-peermem (nvidia_peermem.c) */
int gdrsim_peermem_init(void);
void gdrsim_peermem_exit(void);

/* nvidia-fs (nvidia_fs.c) */
int gdrsim_nvfs_init(void);
void gdrsim_nvfs_exit(void);

/* glue (gdrsim_main.c) */
extern struct device *gdrsim_dma_device; /* platform device, 64-bit DMA mask */

enum gdrsim_reg_kind {
	GDRSIM_REG_UMEM_GET_PEER, /* from ib_umem_get_peer: host or peer umem */
	GDRSIM_REG_DMABUF,        /* from the real ib_umem_dmabuf_get_pinned */
	GDRSIM_REG_UMEM_GET,      /* from the real (mainline) ib_umem_get */
};

/* deregistration: the real ib_umem_release, then [ib_peer_umem_release] (MLNX_OFED's order) */
void gdrsim_umem_release(enum gdrsim_reg_kind kind, struct ib_umem *umem);
/* GDRSIM_IOC_MR_INFO's answer for a umem: kind, is_peer, client, page_size, nmap, addr, length */
void gdrsim_umem_info(enum gdrsim_reg_kind kind, struct ib_umem *umem, struct gdrsim_mr_info *info);

/* the NIC registered with ib_core (nic_ibdev.c) */
int gdrsim_nic_init(struct device *dma_device);
void gdrsim_nic_exit(void);
/* GDRSIM_IOC_MR_INFO: fills @info of efa_sim0's MR with info->lkey; -ENOENT if none */
int gdrsim_nic_mr_info(struct gdrsim_mr_info *info);
/* its CQs, QPs, AHs and their mmaps (nic_queues.c) */
extern const struct ib_device_ops gdrsim_nic_queue_ops;

/* the mlx5-shaped NIC registered with ib_core, "mlx5_0" (nic_mlx5.c) */
int gdrsim_mlx5_init(struct device *dma_device);
void gdrsim_mlx5_exit(void);

#endif /* GDRSIM_H */
