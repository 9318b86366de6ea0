// SPDX-License-Identifier: GPL-2.0
/*
 * gdrsim: test-only simulated NVIDIA GPUDirect driver stack.  See gdrsim.h
 * for the map of files and gdrsim_uapi.h for the userspace interface.
 *
 * This file is the glue that a real system spreads over libcuda, libibverbs
 * and the NIC driver: /dev/gdrsim ioctls that, in the caller's context,
 *   - export GPU memory as a dma-buf ("nv_dmabuf", "nvidia" or
 *     "fake_exporter") and hand the caller an fd, as
 *     cuMemGetHandleForAddressRange() does,
 *   - say what one of efa_sim0's MRs is (GDRSIM_IOC_MR_INFO: host, peer and its
 *     client, invalidated, dma-buf), the ground truth ib_uverbs does not return,
 *   - register memory outside any uverbs verb, which no real system does (a test's
 *     "purpose unknown" pin): MLNX_OFED-style ib_umem_get_peer() (peer path), or a
 *     dma-buf fd through the running kernel's REAL ib_umem_dmabuf_get_pinned(), and
 *     deregister through the REAL ib_umem_release().
 * The struct ib_device those registrations use is a zeroed, never registered one
 * whose only field set is dma_device (a platform device of this module with a
 * 64-bit DMA mask) and name "mlx5_sim0".  Registrations as applications make them go
 * through libibverbs to "efa_sim0", a device registered with ib_core (nic_ibdev.c); queues
 * and DEVX UMEMs through stock libmlx5 to "mlx5_0" (nic_mlx5.c).
 */
#include <linux/module.h>
#include <linux/fs.h>
#include <linux/miscdevice.h>
#include <linux/platform_device.h>
#include <linux/dma-mapping.h>
#include <linux/dma-buf.h>
#include <linux/idr.h>
#include <linux/slab.h>
#include <linux/uaccess.h>
#include <rdma/ib_umem.h>

#include "gdrsim.h"

MODULE_LICENSE("GPL");

/* which build this is: "noipa" (every hook kept) or "inlined" (GDRSIM_INLINABLE inlined) */
static char *flavour = GDRSIM_FLAVOUR;
module_param(flavour, charp, 0444);
MODULE_PARM_DESC(flavour, "build flavour (read-only): noipa or inlined");
MODULE_DESCRIPTION("gdrsim: test-only simulation of the NVIDIA GPUDirect driver stack "
		   "(MLNX_OFED peer memory, nvidia-peermem, nvidia.ko P2P API, nv_dmabuf, nvidia-fs)");
#if LINUX_VERSION_CODE >= KERNEL_VERSION(6, 13, 0)
MODULE_IMPORT_NS("DMA_BUF");
#else
MODULE_IMPORT_NS(DMA_BUF);
#endif

struct device *gdrsim_dma_device;
static struct platform_device *gdrsim_pdev;
static struct ib_device *gdrsim_ibdev;

/* ------------------------------------------------------------------ */
/* dma-buf exporter                                                   */

static const char *const gdrsim_exporter_names[] = {
	[GDRSIM_EXPORTER_NV_DMABUF] = "nv_dmabuf",
	[GDRSIM_EXPORTER_NVIDIA] = "nvidia",
	[GDRSIM_EXPORTER_OTHER] = "fake_exporter",
};

struct gdrsim_dmabuf {
	u64 size;
	u64 bar;                         /* fake BAR address of byte 0 */
	struct gdrsim_gpu_alloc *alloc;  /* GPU allocation kept alive, or NULL */
	bool nvidia;                     /* exporter imitates NVIDIA's */
};

static int gdrsim_dmabuf_attach(struct dma_buf *dmabuf, struct dma_buf_attachment *attach)
{
	struct gdrsim_dmabuf *buf = dmabuf->priv;

	/* GPU BAR memory has no struct pages: only P2P-capable importers */
	if (buf->nvidia && !attach->peer2peer)
		return -EOPNOTSUPP;
	return 0;
}

static struct sg_table *gdrsim_dmabuf_map(struct dma_buf_attachment *attach,
					  enum dma_data_direction dir)
{
	struct gdrsim_dmabuf *buf = attach->dmabuf->priv;
	unsigned int nents = DIV_ROUND_UP(buf->size, GPU_PAGE_SIZE);
	struct scatterlist *sg;
	struct sg_table *sgt;
	unsigned int i;
	int ret;

	sgt = kzalloc(sizeof(*sgt), GFP_KERNEL);
	if (!sgt)
		return ERR_PTR(-ENOMEM);
	ret = sg_alloc_table(sgt, nents, GFP_KERNEL);
	if (ret) {
		kfree(sgt);
		return ERR_PTR(ret);
	}
	for_each_sgtable_sg(sgt, sg, i) {
		u64 off = (u64)i * GPU_PAGE_SIZE;
		u32 len = min_t(u64, GPU_PAGE_SIZE, buf->size - off);

		sg_set_page(sg, NULL, len, 0);
		sg_dma_address(sg) = buf->bar + off;
		sg_dma_len(sg) = len;
	}
	return sgt;
}

static void gdrsim_dmabuf_unmap(struct dma_buf_attachment *attach, struct sg_table *sgt,
				enum dma_data_direction dir)
{
	sg_free_table(sgt);
	kfree(sgt);
}

static void gdrsim_dmabuf_release(struct dma_buf *dmabuf)
{
	struct gdrsim_dmabuf *buf = dmabuf->priv;

	if (buf->alloc)
		gdrsim_gpu_alloc_put(buf->alloc);
	kfree(buf);
}

static const struct dma_buf_ops gdrsim_dmabuf_ops = {
	.attach = gdrsim_dmabuf_attach,
	.map_dma_buf = gdrsim_dmabuf_map,
	.unmap_dma_buf = gdrsim_dmabuf_unmap,
	.release = gdrsim_dmabuf_release,
};

static long gdrsim_ioctl_dmabuf_export(struct gdrsim_dmabuf_export __user *uarg)
{
	DEFINE_DMA_BUF_EXPORT_INFO(exp_info);
	struct gdrsim_dmabuf_export arg;
	struct gdrsim_dmabuf *buf;
	struct dma_buf *dmabuf;
	int fd;

	if (copy_from_user(&arg, uarg, sizeof(arg)))
		return -EFAULT;
	if (arg.exporter >= ARRAY_SIZE(gdrsim_exporter_names) || arg.size == 0 ||
	    !PAGE_ALIGNED(arg.size) || arg.size > (64ULL << 30))
		return -EINVAL;
	/* NVIDIA's exporter has one name per branch: the loaded branch's, never the other. */
	if (arg.exporter != GDRSIM_EXPORTER_OTHER &&
	    (arg.exporter == GDRSIM_EXPORTER_NV_DMABUF) != GDRSIM_BRANCH_NV_DMABUF_NAME(gdrsim_driver_branch))
		return -EINVAL;
	buf = kzalloc(sizeof(*buf), GFP_KERNEL);
	if (!buf)
		return -ENOMEM;
	buf->size = arg.size;
	buf->nvidia = arg.exporter != GDRSIM_EXPORTER_OTHER;
	if (arg.va) {
		buf->alloc = gdrsim_gpu_alloc_find_get(current->mm, arg.va, arg.size);
		if (!buf->alloc) {
			kfree(buf);
			return -EINVAL; /* CUDA_ERROR_INVALID_VALUE: not device memory */
		}
		buf->bar = gdrsim_gpu_alloc_bar(buf->alloc, arg.va);
	} else {
		buf->bar = gdrsim_fake_bar_reserve(arg.size);
	}
	exp_info.exp_name = gdrsim_exporter_names[arg.exporter];
	exp_info.ops = &gdrsim_dmabuf_ops;
	exp_info.size = arg.size;
	exp_info.flags = O_RDWR;
	exp_info.priv = buf;
	dmabuf = dma_buf_export(&exp_info);
	if (IS_ERR(dmabuf)) {
		if (buf->alloc)
			gdrsim_gpu_alloc_put(buf->alloc);
		kfree(buf);
		return PTR_ERR(dmabuf);
	}
	fd = dma_buf_fd(dmabuf, O_CLOEXEC);
	if (fd < 0) {
		dma_buf_put(dmabuf); /* releases buf */
		return fd;
	}
	arg.fd = fd;
	if (copy_to_user(uarg, &arg, sizeof(arg)))
		return -EFAULT; /* the fd stays installed, like any leaked fd */
	return 0;
}

/* ------------------------------------------------------------------ */
/* /dev/gdrsim: registrations                                          */

struct gdrsim_reg {
	enum gdrsim_reg_kind kind;
	struct ib_umem *umem;
};

struct gdrsim_file {
	struct mutex lock;
	struct idr handles;
};

/*
 * MLNX_OFED's order: ib_umem_release(umem) is entered first, and for a peer
 * umem it calls ib_peer_umem_release (umem.c).  Mainline's cannot call into
 * this module, so ib_peer_umem_release runs right after it, on the peer state
 * moved out of the umem it frees.
 */
void gdrsim_umem_release(enum gdrsim_reg_kind kind, struct ib_umem *umem)
{
	struct ib_umem *peer = NULL;

	if (kind == GDRSIM_REG_UMEM_GET_PEER && gdrsim_umem_is_peer(umem))
		peer = gdrsim_peer_umem_detach(umem);
	ib_umem_release(umem); /* the running kernel's own */
	if (peer)
		ib_peer_umem_release(peer);
}

static void gdrsim_reg_release(struct gdrsim_reg *reg)
{
	gdrsim_umem_release(reg->kind, reg->umem);
	kfree(reg);
}

static int gdrsim_add_reg(struct gdrsim_file *gf, enum gdrsim_reg_kind kind,
			  struct ib_umem *umem, u64 *handle)
{
	struct gdrsim_reg *reg = kzalloc(sizeof(*reg), GFP_KERNEL);
	int id;

	if (!reg)
		return -ENOMEM;
	reg->kind = kind;
	reg->umem = umem;
	mutex_lock(&gf->lock);
	id = idr_alloc(&gf->handles, reg, 1, 0, GFP_KERNEL);
	mutex_unlock(&gf->lock);
	if (id < 0) {
		kfree(reg);
		return id;
	}
	*handle = id;
	return 0;
}

static long gdrsim_ioctl_peer_reg(struct gdrsim_file *gf, struct gdrsim_peer_reg __user *uarg)
{
	struct gdrsim_peer_reg arg;
	struct ib_umem *umem;
	int ret;

	if (copy_from_user(&arg, uarg, sizeof(arg)))
		return -EFAULT;
	umem = ib_umem_get_peer(gdrsim_ibdev, arg.addr, arg.size, arg.access,
				arg.peer_mem_flags);
	if (IS_ERR(umem))
		return PTR_ERR(umem);
	arg.is_peer = gdrsim_umem_is_peer(umem);
	gdrsim_umem_peer_info(umem, arg.client, sizeof(arg.client), &arg.page_size, &arg.nmap);
	ret = gdrsim_add_reg(gf, GDRSIM_REG_UMEM_GET_PEER, umem, &arg.handle);
	if (ret) {
		gdrsim_umem_release(GDRSIM_REG_UMEM_GET_PEER, umem);
		return ret;
	}
	if (copy_to_user(uarg, &arg, sizeof(arg)))
		return -EFAULT; /* stays registered until close */
	return 0;
}

static long gdrsim_ioctl_dmabuf_reg(struct gdrsim_file *gf, struct gdrsim_dmabuf_reg __user *uarg)
{
	struct gdrsim_dmabuf_reg arg;
	struct ib_umem_dmabuf *umem_dmabuf;
	int ret;

	if (copy_from_user(&arg, uarg, sizeof(arg)))
		return -EFAULT;
	umem_dmabuf = ib_umem_dmabuf_get_pinned(gdrsim_ibdev, arg.offset, arg.size, arg.fd,
						arg.access);
	if (IS_ERR(umem_dmabuf))
		return PTR_ERR(umem_dmabuf);
	arg.nmap = umem_dmabuf->umem.sgt_append.sgt.nents;
	ret = gdrsim_add_reg(gf, GDRSIM_REG_DMABUF, &umem_dmabuf->umem, &arg.handle);
	if (ret) {
		gdrsim_umem_release(GDRSIM_REG_DMABUF, &umem_dmabuf->umem);
		return ret;
	}
	if (copy_to_user(uarg, &arg, sizeof(arg)))
		return -EFAULT;
	return 0;
}

static long gdrsim_ioctl_release(struct gdrsim_file *gf, struct gdrsim_release __user *uarg)
{
	struct gdrsim_release arg;
	struct gdrsim_reg *reg;

	if (copy_from_user(&arg, uarg, sizeof(arg)))
		return -EFAULT;
	if (arg.handle == 0 || arg.handle > INT_MAX)
		return -EINVAL;
	mutex_lock(&gf->lock);
	reg = idr_remove(&gf->handles, arg.handle);
	mutex_unlock(&gf->lock);
	if (!reg)
		return -ENOENT;
	gdrsim_reg_release(reg);
	return 0;
}

static long gdrsim_ioctl_mr_info(struct gdrsim_mr_info __user *uarg)
{
	struct gdrsim_mr_info arg;
	int ret;

	if (copy_from_user(&arg, uarg, sizeof(arg)))
		return -EFAULT;
	ret = gdrsim_nic_mr_info(&arg);
	if (ret)
		return ret;
	if (copy_to_user(uarg, &arg, sizeof(arg)))
		return -EFAULT;
	return 0;
}

static long gdrsim_ioctl(struct file *file, unsigned int cmd, unsigned long arg)
{
	struct gdrsim_file *gf = file->private_data;
	void __user *argp = (void __user *)arg;

	switch (cmd) {
	case GDRSIM_IOC_PEER_REG:
		return gdrsim_ioctl_peer_reg(gf, argp);
	case GDRSIM_IOC_DMABUF_EXPORT:
		return gdrsim_ioctl_dmabuf_export(argp);
	case GDRSIM_IOC_DMABUF_REG:
		return gdrsim_ioctl_dmabuf_reg(gf, argp);
	case GDRSIM_IOC_RELEASE:
		return gdrsim_ioctl_release(gf, argp);
	case GDRSIM_IOC_MR_INFO:
		return gdrsim_ioctl_mr_info(argp);
	default:
		return -ENOTTY;
	}
}

static int gdrsim_open(struct inode *inode, struct file *file)
{
	struct gdrsim_file *gf = kzalloc(sizeof(*gf), GFP_KERNEL);

	if (!gf)
		return -ENOMEM;
	mutex_init(&gf->lock);
	idr_init(&gf->handles);
	file->private_data = gf;
	return 0;
}

/* like closing a uverbs context: everything still registered is released */
static int gdrsim_release_file(struct inode *inode, struct file *file)
{
	struct gdrsim_file *gf = file->private_data;
	struct gdrsim_reg *reg;
	int id;

	idr_for_each_entry(&gf->handles, reg, id)
		gdrsim_reg_release(reg);
	idr_destroy(&gf->handles);
	kfree(gf);
	return 0;
}

static const struct file_operations gdrsim_fops = {
	.owner = THIS_MODULE,
	.open = gdrsim_open,
	.release = gdrsim_release_file,
	.unlocked_ioctl = gdrsim_ioctl,
	.compat_ioctl = gdrsim_ioctl,
	.llseek = noop_llseek,
};

static struct miscdevice gdrsim_misc = {
	.minor = MISC_DYNAMIC_MINOR,
	.name = "gdrsim",
	.fops = &gdrsim_fops,
	.mode = 0666,
};

static int __init gdrsim_init(void)
{
	int ret;

	gdrsim_pdev = platform_device_register_simple("gdrsim", PLATFORM_DEVID_NONE, NULL, 0);
	if (IS_ERR(gdrsim_pdev))
		return PTR_ERR(gdrsim_pdev);
	ret = dma_coerce_mask_and_coherent(&gdrsim_pdev->dev, DMA_BIT_MASK(64));
	if (ret)
		goto err_pdev;
	gdrsim_dma_device = &gdrsim_pdev->dev;

	gdrsim_ibdev = kzalloc(sizeof(*gdrsim_ibdev), GFP_KERNEL);
	if (!gdrsim_ibdev) {
		ret = -ENOMEM;
		goto err_pdev;
	}
	gdrsim_ibdev->dma_device = gdrsim_dma_device;
	strscpy(gdrsim_ibdev->name, "mlx5_sim0", sizeof(gdrsim_ibdev->name));

	ret = gdrsim_nv_init();
	if (ret)
		goto err_ibdev;
	ret = gdrsim_peermem_init();
	if (ret)
		goto err_nv;
	ret = gdrsim_nvfs_init();
	if (ret)
		goto err_peermem;
	ret = misc_register(&gdrsim_misc);
	if (ret)
		goto err_nvfs;
	/* last: once registered, libibverbs can reach the peer clients through it */
	ret = gdrsim_nic_init(gdrsim_dma_device);
	if (ret)
		goto err_misc;
	/* beside it the mlx5-shaped one (nic_mlx5.c), the same way */
	ret = gdrsim_mlx5_init(gdrsim_dma_device);
	if (ret)
		goto err_nic;
	pr_info("gdrsim: simulated NVIDIA GPUDirect stack ready (%s)\n", gdrsim_driver_version());
	return 0;

err_nic:
	gdrsim_nic_exit();
err_misc:
	misc_deregister(&gdrsim_misc);
err_nvfs:
	gdrsim_nvfs_exit();
err_peermem:
	gdrsim_peermem_exit();
err_nv:
	gdrsim_nv_exit();
err_ibdev:
	kfree(gdrsim_ibdev);
err_pdev:
	platform_device_unregister(gdrsim_pdev);
	return ret;
}

static void __exit gdrsim_exit(void)
{
	gdrsim_mlx5_exit();
	gdrsim_nic_exit();
	misc_deregister(&gdrsim_misc);
	gdrsim_nvfs_exit();
	gdrsim_peermem_exit();
	gdrsim_nv_exit();
	kfree(gdrsim_ibdev);
	platform_device_unregister(gdrsim_pdev);
}

module_init(gdrsim_init);
module_exit(gdrsim_exit);
