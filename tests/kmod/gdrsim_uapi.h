/* SPDX-License-Identifier: GPL-2.0 OR MIT */
/*
 * gdrsim: userspace ABI of the test-only simulated NVIDIA GPUDirect driver stack.
 *
 * Shared by the kernel module (gdrsim.ko) and the workload program
 * (gdrsim-workload.c).  Nothing here is a real NVIDIA or MLNX_OFED ABI except
 * the nvidia-fs ioctl numbers and argument structs (NVFS_*), whose layout is
 * copied from NVIDIA/gds-nvidia-fs src/nvfs-core.h.
 *
 * Device nodes created by the module:
 *   /dev/nvidiactl   char 195:255  open/close only ("the process uses a GPU")
 *   /dev/nvidia0     char 195:0    open/close; mmap() = GPU memory allocation
 *   /dev/nvidia-uvm  misc          open/close only
 *   /dev/gdrsim      misc          the GDRSIM_IOC_* ioctls below: CUDA's export call,
 *                                  what efa_sim0 knows of an MR (MR_INFO), and
 *                                  registrations made outside any uverbs verb (PEER_REG,
 *                                  DMABUF_REG, RELEASE: no real system has those)
 *   /dev/nvidia-fs0  misc          NVFS_IOCTL_* (GPUDirect Storage), mmap() =
 *                                  shadow buffer
 *
 * GPU memory: mmap(NULL, len, PROT_READ|PROT_WRITE, MAP_SHARED, nvidia0_fd, 0)
 * with len a multiple of 64 KiB and a 64 KiB aligned address (use MAP_FIXED over
 * a reserved range, as CUDA does).  The mapping is VM_IO|VM_PFNMAP with no
 * pages behind it: CPU access gets SIGBUS and pin_user_pages() fails with
 * -EFAULT, exactly as for cudaMalloc() memory.  munmap() is cudaFree(): it
 * invokes the free callbacks of live non-persistent nvidia_p2p_get_pages()
 * mappings (nv_get_p2p_free_callback for nvidia-peermem's legacy client).
 */
#ifndef GDRSIM_UAPI_H
#define GDRSIM_UAPI_H

#ifdef __KERNEL__
#include <linux/types.h>
#include <linux/ioctl.h>
#else
#include <stdint.h>
#include <sys/ioctl.h>
#include <sys/types.h>
#include <linux/types.h>
#endif

#define GDRSIM_GPU_PAGE_SIZE (64ULL * 1024)

/*
 * The NIC the module registers with ib_core (nic_ibdev.c): libibverbs lists it under this
 * name and opens it with rdma-core's libefa provider (driver id RDMA_DRIVER_EFA).
 * ibv_reg_mr on it -> ib_umem_get_peer; ibv_reg_dmabuf_mr -> ib_umem_dmabuf_get_pinned.
 */
#define GDRSIM_IBDEV_NAME "efa_sim0"
/* the mlx5-shaped NIC (nic_mlx5.c): stock libmlx5 drives it */
#define GDRSIM_MLX5_IBDEV_NAME "mlx5_0"

/* peer_mem_flags, as in MLNX_OFED include/rdma/ib_umem.h */
#define GDRSIM_PEER_MEM_ALLOW      (1U << 0) /* IB_PEER_MEM_ALLOW */
#define GDRSIM_PEER_MEM_INVAL_SUPP (1U << 1) /* IB_PEER_MEM_INVAL_SUPP */

/* IB access flags (include/uapi/rdma/ib_user_verbs.h values) */
#define GDRSIM_ACCESS_LOCAL_WRITE   1
#define GDRSIM_ACCESS_REMOTE_WRITE  2
#define GDRSIM_ACCESS_REMOTE_READ   4

/*
 * GDRSIM_IOC_PEER_REG: register user memory the way an MLNX_OFED mlx5 driver
 * does: ib_umem_get_peer(dev, addr, size, access, peer_mem_flags).  Host memory
 * is pinned (no peer client involved); GPU memory fails to pin and goes to
 * ib_peer_umem_get() and nvidia-peermem.  Runs in the caller's context, in the ioctl
 * of /dev/gdrsim, on the never registered device "mlx5_sim0": a pin made in no uverbs
 * verb (gdrsim-workload ioctl-peer).  Applications register through libibverbs on
 * efa_sim0 instead (ib_uverbs -> reg_user_mr -> the same ib_umem_get_peer).
 */
struct gdrsim_peer_reg {
	__u64 addr;           /* in: user VA */
	__u64 size;           /* in: bytes */
	__u32 access;         /* in: GDRSIM_ACCESS_* (IB_ACCESS_*) */
	__u32 peer_mem_flags; /* in: GDRSIM_PEER_MEM_* (mlx5 passes ALLOW|INVAL_SUPP) */
	__u64 handle;         /* out: handle for GDRSIM_IOC_RELEASE */
	__u32 is_peer;        /* out: 1 if a peer-memory client owns the memory */
	__u32 nmap;           /* out: DMA-mapped entries (GPU pages or host sg entries) */
	__u64 page_size;      /* out: client page size (64 KiB for nv_mem), PAGE_SIZE for host */
	char client[64];      /* out: peer client name ("nv_mem", "nv_mem_nc"), "" for host */
};

/* exporter names for GDRSIM_IOC_DMABUF_EXPORT */
#define GDRSIM_EXPORTER_NV_DMABUF 0 /* "nv_dmabuf": NVIDIA driver >= 580.65.06 */
#define GDRSIM_EXPORTER_NVIDIA    1 /* "nvidia": older NVIDIA drivers (module name) */
#define GDRSIM_EXPORTER_OTHER     2 /* "fake_exporter": a non-NVIDIA exporter */

/*
 * GDRSIM_IOC_DMABUF_EXPORT: what cuMemGetHandleForAddressRange(&fd, va, size,
 * CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 0) does: export [va, va+size) as a
 * dma-buf and install an fd in the caller's fd table.  va may be 0 (a buffer
 * not backed by a GPU allocation, e.g. for the "other" exporter); otherwise it
 * must lie inside a mmap() of /dev/nvidia0 of the calling process.
 */
struct gdrsim_dmabuf_export {
	__u64 va;        /* in: GPU VA or 0 */
	__u64 size;      /* in: bytes, multiple of 4 KiB */
	__u32 exporter;  /* in: GDRSIM_EXPORTER_* */
	__s32 fd;        /* out: dma-buf fd (O_CLOEXEC) */
};

/*
 * GDRSIM_IOC_DMABUF_REG: what ibv_reg_dmabuf_mr() makes the kernel do on a
 * dma-buf capable NIC: the REAL ib_umem_dmabuf_get_pinned(dev, offset, size,
 * fd, access) of the running kernel, in the caller's context, on a fake
 * (never registered) struct ib_device whose dma_device is a platform device.
 * fd = -1 reproduces NCCL's support probe (fails with -EBADF in the kernel).
 */
struct gdrsim_dmabuf_reg {
	__s32 fd;        /* in */
	__u32 access;    /* in: IB_ACCESS_* */
	__u64 offset;    /* in: offset into the dma-buf */
	__u64 size;      /* in: bytes */
	__u64 handle;    /* out */
	__u32 nmap;      /* out: mapped sg entries */
	__u32 pad;
};

/* GDRSIM_IOC_RELEASE: deregister; ends in the REAL ib_umem_release() for every kind */
struct gdrsim_release {
	__u64 handle;    /* in */
};

/*
 * GDRSIM_IOC_MR_INFO: what the driver knows of one of efa_sim0's MRs (made by ibv_reg_mr /
 * ibv_reg_dmabuf_mr through ib_uverbs), found by its lkey: the ground truth a registration
 * through /dev/infiniband/uverbsN does not return.  Any process may ask about any MR of the
 * device; -ENOENT when no MR has that lkey (deregistered, or never made).  Asked before
 * ibv_dereg_mr, `kind` says how the release will go (PEER_INVALIDATED: the GPU memory was freed
 * under the MR, its client's free callback ran).
 */
#define GDRSIM_MR_KIND_HOST             0 /* ib_umem_get_peer pinned the pages (no peer client) */
#define GDRSIM_MR_KIND_PEER             1 /* a peer-memory client (nvidia-peermem) owns it */
#define GDRSIM_MR_KIND_PEER_INVALIDATED 2 /* the same, after ib_invalidate_peer_memory */
#define GDRSIM_MR_KIND_DMABUF           3 /* the real ib_umem_dmabuf_get_pinned */
struct gdrsim_mr_info {
	__u32 lkey;           /* in: the MR's lkey (= rkey) on efa_sim0 */
	__u32 kind;           /* out: GDRSIM_MR_KIND_* */
	__u64 handle;         /* out: stable for the MR's life, unique per module load (the lkey) */
	__u64 addr;           /* out: umem->address: the user VA, or the dma-buf offset */
	__u64 length;         /* out: umem->length */
	__u32 is_peer;        /* out: 1 if a peer-memory client owns the memory */
	__u32 nmap;           /* out: DMA-mapped entries (GPU pages, host sg entries, dma-buf sg) */
	__u64 page_size;      /* out: the client's page size (64 KiB for nv_mem), PAGE_SIZE for
			       * host, 0 for a dma-buf */
	char client[64];      /* out: the peer client's name ("nv_mem", "nv_mem_nc"), else "" */
};

/*
 * /dev/nvidiactl ioctls of cuMemHostRegister / cuMemHostUnregister (nv_sysmem.c): the real
 * escape numbers (src/nvidia/arch/nvalloc/unix/include/nv_escape.h, NV_IOCTL_MAGIC 'F':
 * NV_ESC_RM_VID_HEAP_CONTROL 0x4A with NVOS32_FUNCTION_ALLOC_OS_DESCRIPTOR, NV_ESC_RM_FREE
 * 0x29); the argument is reduced to the fields RmCreateOsDescriptor reads (NVOS32's
 * AllocOsDesc.descriptor, .limit, the ATTR2 PROTECTION_USER bit, the ATTR word with the
 * COHERENCY and PHYSICALITY fields) and an object handle.
 *
 * attr (src/common/sdk/nvidia/inc/nvos.h, NVOS32_ATTR_*): the memory kind libcuda asks for.
 * Ordinary pinned host memory is COHERENCY_CACHED; cuMemHostRegister's
 * CU_MEMHOSTREGISTER_IOMEMORY ("non cache-coherent ... physically contiguous", cuda.h) is
 * COHERENCY_UNCACHED | PHYSICALITY_CONTIGUOUS, which RM's I/O-memory path requires
 * (osmemdesc.c osCreateOsDescriptorFromIoMemory) and its page-array path refuses
 * (osCreateOsDescriptorFromPageArray): NV_ERR_INVALID_FLAGS either way round.  How libcuda
 * itself encodes the flag is not verified (closed source).
 */
#define NVOS32_ATTR_PHYSICALITY_CONTIGUOUS (0x2U << 27) /* NVOS32_ATTR_PHYSICALITY 28:27 */
#define NVOS32_ATTR_PHYSICALITY_MASK       (0x3U << 27)
#define NVOS32_ATTR_COHERENCY_UNCACHED     (0x0U << 29) /* NVOS32_ATTR_COHERENCY 31:29 */
#define NVOS32_ATTR_COHERENCY_CACHED       (0x1U << 29)
#define NVOS32_ATTR_COHERENCY_WRITE_BACK   (0x5U << 29)
#define NVOS32_ATTR_COHERENCY_MASK         (0x7U << 29)
struct nv_os_descriptor {
	__u64 descriptor; /* in: the user address (page aligned) */
	__u64 limit;      /* in: bytes - 1 */
	__u32 writable;   /* in: NVOS32_ATTR2_PROTECTION_USER_READ_WRITE */
	__u32 status;     /* out: NV_STATUS */
	__u64 handle;     /* out (alloc) / in (free) */
	__u32 attr;       /* in: NVOS32_ATTR_COHERENCY_* | NVOS32_ATTR_PHYSICALITY_* */
	__u32 pad;
};
/* NV_STATUS values libcuda turns into CUresults (nvstatuscodes.h) */
#define NV_ERR_INSUFFICIENT_PERMISSIONS 0x0000001bU
#define NV_IOCTL_MAGIC 'F'
#define NV_IOCTL_OS_DESC_ALLOC _IOWR(NV_IOCTL_MAGIC, 0x4A, struct nv_os_descriptor)
#define NV_IOCTL_OS_DESC_FREE  _IOWR(NV_IOCTL_MAGIC, 0x29, struct nv_os_descriptor)

#define GDRSIM_IOC_MAGIC 0xC7
#define GDRSIM_IOC_PEER_REG      _IOWR(GDRSIM_IOC_MAGIC, 1, struct gdrsim_peer_reg)
#define GDRSIM_IOC_DMABUF_EXPORT _IOWR(GDRSIM_IOC_MAGIC, 2, struct gdrsim_dmabuf_export)
#define GDRSIM_IOC_DMABUF_REG    _IOWR(GDRSIM_IOC_MAGIC, 3, struct gdrsim_dmabuf_reg)
#define GDRSIM_IOC_RELEASE       _IOW(GDRSIM_IOC_MAGIC, 4, struct gdrsim_release)
#define GDRSIM_IOC_MR_INFO       _IOWR(GDRSIM_IOC_MAGIC, 5, struct gdrsim_mr_info)

/*
 * nvidia-fs (GPUDirect Storage), layouts as in gds-nvidia-fs src/nvfs-core.h.
 * The ioctl numbers encode sizeof(int) although the argument is a pointer to
 * union nvfs_ioctl_param_union: that is how the real driver defines them.
 *
 * Protocol (what libcufile does; gds-nvidia-fs 2.17.0 .. 2.28.4, src/nvfs-core.c):
 *   1. mmap(/dev/nvidia-fs0, n*4096) -> shadow buffer (cpuvaddr)
 *   2. NVFS_IOCTL_MAP {cpuvaddr, gpuvaddr, size, sbuf_block = n, end_fence_addr
 *      (4 KiB aligned, required)}: nvfs_map -> nvfs_map_gpu_info ->
 *      nvfs_get_endfence_page (pins the fence page) + nvfs_pin_gpu_pages ->
 *      nvidia_p2p_get_pages(0, 0, va, len, &pt, nvfs_get_pages_free_callback, mgroup)
 *      (2.17-2.20 always; 2.22+ with use_legacy_p2p_allocation=1, the default)
 *      or nvidia_p2p_get_pages_persistent(va, len, &pt, 0) (2.22+, =0).
 *   3. NVFS_IOCTL_READ / NVFS_IOCTL_WRITE {cpuvaddr, fd (opened O_DIRECT),
 *      offset, size (4 KiB multiples), sync}: nvfs_ioctl -> nvfs_io_init ->
 *      nvfs_io_start_op -> nvfs_direct_io (O_DIRECT read_iter/write_iter into
 *      the shadow buffer).  The block layer's map callback (nvfs_blk_rq_map_sg
 *      -> nvfs_get_dma) maps the GPU pages for the device, the first time
 *      through nvidia_p2p_dma_map_pages.
 *      sync = 1: ioctl() returns 0 and ioargs.ioctl_return holds the byte count.
 *      sync = 0 (needs end_fence_value > 0): nvfs_direct_io returns
 *      -EIOCBQUEUED, ioctl_return is 0; the filesystem later calls
 *      nvfs_io_complete on its completion context, which writes the bytes to
 *      the fence page's struct nvfs_ioctl_metapage (result, then end_fence_val
 *      = end_fence_value): the library polls it.
 *      On error ioctl() returns -1 (errno EPERM) and ioctl_return holds -errno.
 *   4. munmap(shadow) -> nvidia_p2p_dma_unmap_pages + nvidia_p2p_put_pages[_persistent]
 *   NVFS_IOCTL_BATCH_IO {ctx_id, nents, io_entries}: nvfs_io_batch_init reads
 *   every entry (nvfs_io_init each), nvfs_io_batch_submit starts them; only
 *   the 24-byte header is copied back: an entry's ioctl_return is NEVER
 *   written (its bytes reach the entry's fence page, async entries).
 *   REMOVE, SET/GET/CLEAR_RDMA_REG_INFO are accepted and do nothing.
 */
#define NVFS_MAGIC 't'
#define NVFS_IOCTL_REMOVE              _IOW(NVFS_MAGIC, 1, int) /* 0x40047401 */
#define NVFS_IOCTL_READ                _IOW(NVFS_MAGIC, 2, int) /* 0x40047402 */
#define NVFS_IOCTL_MAP                 _IOW(NVFS_MAGIC, 3, int) /* 0x40047403 */
#define NVFS_IOCTL_WRITE               _IOW(NVFS_MAGIC, 4, int) /* 0x40047404 */
#define NVFS_IOCTL_SET_RDMA_REG_INFO   _IOW(NVFS_MAGIC, 5, int) /* 0x40047405 */
#define NVFS_IOCTL_GET_RDMA_REG_INFO   _IOW(NVFS_MAGIC, 6, int) /* 0x40047406 */
#define NVFS_IOCTL_CLEAR_RDMA_REG_INFO _IOW(NVFS_MAGIC, 7, int) /* 0x40047407 */
#define NVFS_IOCTL_BATCH_IO            _IOW(NVFS_MAGIC, 8, int) /* 0x40047408 */

struct nvfs_ioctl_map_s {
	__s64 size;            /* GPU buffer size */
	__u64 pdevinfo;        /* pci domain/bus/device/func of the GPU */
	__u64 cpuvaddr;        /* shadow buffer address */
	__u64 gpuvaddr;        /* GPU buffer address */
	__u64 end_fence_addr;  /* fence page of async I/O (4 KiB aligned) */
	__u32 sbuf_block;      /* shadow buffer size in 4 KiB blocks */
	__u16 is_bounce_buffer;
	__u8 padding[2];
} __attribute__((packed, aligned(8)));
typedef struct nvfs_ioctl_map_s nvfs_ioctl_map_t;

struct nvfs_file_args {
	__u64 inum;            /* inode number (ino_t) */
	__u32 generation;
	__u32 majdev;
	__u32 mindev;
	__u64 devptroff;       /* offset into the GPU buffer */
} __attribute__((packed, aligned(8)));
typedef struct nvfs_file_args nvfs_file_args_t;

struct nvfs_ioctl_ioargs {
	__u64 cpuvaddr;        /* shadow buffer VA */
	__s64 offset;          /* file offset (loff_t) */
	__u64 size;            /* read/write length */
	__u64 end_fence_value;
	__s64 ioctl_return;    /* out: bytes or -errno */
	nvfs_file_args_t file_args;
	__s32 fd;              /* file descriptor, must be O_DIRECT */
	__u8 sync : 1;
	__u8 hipri : 1;
	__u8 allowreads : 1;
	__u8 use_rkeys : 1;
	__u8 optype : 3;       /* READ 0, WRITE 1 (for BATCH_IO entries) */
	__u8 reserved : 1;
	__u8 padding[3];
} __attribute__((packed, aligned(8)));
typedef struct nvfs_ioctl_ioargs nvfs_ioctl_ioargs_t;

struct nvfs_ioctl_batch_ioargs {
	__u64 ctx_id;
	__u64 nents;
	__u64 io_entries;      /* user pointer to nvfs_ioctl_ioargs_t[nents] */
} __attribute__((packed, aligned(8)));
typedef struct nvfs_ioctl_batch_ioargs nvfs_ioctl_batch_ioargs_t;

union nvfs_ioctl_param_u {
	nvfs_ioctl_map_t map_args;
	nvfs_ioctl_ioargs_t ioargs;
	nvfs_ioctl_batch_ioargs_t batch_ioargs;
} __attribute__((packed, aligned(8)));
typedef union nvfs_ioctl_param_u nvfs_ioctl_param_union;

/* The fence page's layout (nvfs-core.h struct nvfs_ioctl_metapage, 2.17.0-2.28.4). */
struct nvfs_ioctl_metapage {
	volatile __u64 end_fence_val;
	volatile __u64 result;
	volatile __u32 state;  /* nvfs_metastate_enum */
	/* struct nvfs_io_sparse_data follows (unused here) */
};

#endif /* GDRSIM_UAPI_H */
