//! The driver matrix itself: clients, flows and rows per NVIDIA branch (see `drivers`).

/// The file of each row's nvidia-peermem flow.
pub const PEERMEM_SOURCE: &str = "kernel-open/nvidia-peermem/nvidia-peermem.c";
/// The file of each row's P2P API facts.
pub const P2P_SOURCE: &str = "kernel-open/nvidia/nv-p2p.c";
/// The file of each row's dma-buf exporter name.
pub const DMABUF_SOURCE: &str = "kernel-open/nvidia/nv-dmabuf.c";
/// Where the rows were read.
pub const REPOSITORY: &str = "NVIDIA/open-gpu-kernel-modules";

/// One nvidia-peermem peer-memory client: what ib_core calls on it, and the nvidia.ko calls
/// each of those makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Client {
    /// Its name with ib_core (`/sys/kernel/mm/memory_peers/<name>`).
    pub name: &'static str,
    /// `.acquire`: returns 1 when the range is GPU memory, after a trial pin.
    pub acquire: &'static str,
    /// The trial pin inside acquire: pin, then unpin at once.
    pub trial_pin: [&'static str; 2],
    /// `.get_pages` and the nvidia.ko pin it makes (the registration's own).
    pub get_pages: [&'static str; 2],
    /// `.put_pages` and the nvidia.ko unpin it makes.
    pub put_pages: [&'static str; 2],
    /// Registered with an invalidate callback: ib_core offers it only registrations made with
    /// `IB_PEER_MEM_INVAL_SUPP` (mlx5 always passes it).
    pub invalidation: bool,
}

const LEGACY_TRIAL: [&str; 2] = ["nvidia_p2p_get_pages", "nvidia_p2p_put_pages"];
const PERSISTENT_TRIAL: [&str; 2] = ["nvidia_p2p_get_pages_persistent", "nvidia_p2p_put_pages_persistent"];

/// `nv_mem_client_ex`, the invalidatable client: `nv_mem` in every branch that has it.
const NV_MEM_LEGACY: Client = Client {
    name: "nv_mem",
    acquire: "nv_mem_acquire",
    trial_pin: LEGACY_TRIAL,
    get_pages: ["nv_mem_get_pages", "nvidia_p2p_get_pages"],
    put_pages: ["nv_mem_put_pages", "nvidia_p2p_put_pages"],
    invalidation: true,
};

/// `nv_mem_client_nc`, the persistent client, under `name`, with the acquire of its branch.
const fn persistent(name: &'static str, acquire_nc: bool) -> Client {
    Client {
        name,
        acquire: if acquire_nc { "nv_mem_acquire_nc" } else { "nv_mem_acquire" },
        trial_pin: if acquire_nc { PERSISTENT_TRIAL } else { LEGACY_TRIAL },
        get_pages: ["nv_mem_get_pages_nc", "nvidia_p2p_get_pages_persistent"],
        put_pages: ["nv_mem_put_pages_nc", "nvidia_p2p_put_pages_persistent"],
        invalidation: false,
    }
}

/// Up to 575.64.05 the persistent client's acquire is `nv_mem_acquire` (legacy trial pin).
const NC_575: Client = persistent("nv_mem_nc", false);
const NV_MEM_575: Client = persistent("nv_mem", false);
/// From 580.65.06 it is `nv_mem_acquire_nc` (persistent trial pin).
const NC_580: Client = persistent("nv_mem_nc", true);
const NV_MEM_580: Client = persistent("nv_mem", true);

/// One NVIDIA driver branch, as read at `tag`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct NvidiaBranch {
    /// The major version ("580").
    pub branch: u32,
    /// The release tag of [`REPOSITORY`] the row was read at.
    pub tag: &'static str,
    /// Clients in registration order (ib_core asks them in this order) with nvidia-peermem's
    /// default `persistent_api_support=1`, or always where the parameter does not exist.
    pub clients_default: &'static [Client],
    /// With `persistent_api_support=0`; None where the parameter does not exist (before 560).
    pub clients_legacy: Option<&'static [Client]>,
    /// `nvidia_p2p_get_pages_persistent` refuses flags other than 0 (-EINVAL); from 570 it
    /// passes them on (`NVIDIA_P2P_FLAGS_FORCE_BAR1_MAPPING`).
    pub persistent_flags_must_be_zero: bool,
    /// The dma-buf exporter name (`exp_name`) of GPU memory: `nv_dmabuf` from 580.65.06, before
    /// that the module name `nvidia` (DEFINE_DMA_BUF_EXPORT_INFO's KBUILD_MODNAME).
    pub dmabuf_exporter: &'static str,
}

const TWO_CLIENTS_575: &[Client] = &[NV_MEM_LEGACY, NC_575];
const TWO_CLIENTS_580: &[Client] = &[NV_MEM_LEGACY, NC_580];

/// The NVIDIA driver branches, oldest first. nvidia-peermem.c is one file from 560.28.03 to
/// 575.64.05 and another from 580.65.06 to 595.45.04 (580.142, 590.48.01 the same blob).
pub const NVIDIA_BRANCHES: &[NvidiaBranch] = &[
    row(535, "535.288.01", TWO_CLIENTS_575, None, true, "nvidia"),
    row(550, "550.163.01", TWO_CLIENTS_575, None, true, "nvidia"),
    row(560, "560.28.03", &[NV_MEM_575], Some(TWO_CLIENTS_575), true, "nvidia"),
    row(565, "565.77", &[NV_MEM_575], Some(TWO_CLIENTS_575), true, "nvidia"),
    row(570, "570.211.01", &[NV_MEM_575], Some(TWO_CLIENTS_575), false, "nvidia"),
    row(575, "575.64.05", &[NV_MEM_575], Some(TWO_CLIENTS_575), false, "nvidia"),
    row(580, "580.65.06", &[NV_MEM_580], Some(TWO_CLIENTS_580), false, "nv_dmabuf"),
    row(590, "590.48.01", &[NV_MEM_580], Some(TWO_CLIENTS_580), false, "nv_dmabuf"),
    row(595, "595.45.04", &[NV_MEM_580], Some(TWO_CLIENTS_580), false, "nv_dmabuf"),
];

const fn row(
    branch: u32,
    tag: &'static str,
    clients_default: &'static [Client],
    clients_legacy: Option<&'static [Client]>,
    persistent_flags_must_be_zero: bool,
    dmabuf_exporter: &'static str,
) -> NvidiaBranch {
    NvidiaBranch {
        branch,
        tag,
        clients_default,
        clients_legacy,
        persistent_flags_must_be_zero,
        dmabuf_exporter,
    }
}

/// How nvidia-fs's `nvfs_init` chooses its GPU pinning API (`use_legacy_p2p_allocation`; read
/// at each tag in NVIDIA/gds-nvidia-fs src/nvfs-core.c).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum NvfsPinning {
    /// No choice: `nvidia_p2p_get_pages` with a free callback, always (before v2.22.3).
    AlwaysLegacy,
    /// Persistent on x86-64 bare metal (`!cpu_feature_enabled(X86_FEATURE_HYPERVISOR)`), else
    /// the parameter's default, legacy (v2.22.3, nvfs_init L2447-2452).
    PersistentOnBareMetal,
    /// Persistent with NVIDIA driver 555+ (the first three characters of
    /// /sys/module/nvidia/version), or on x86-64 bare metal; else legacy (v2.23.1 L2484-2497,
    /// v2.28.4 L2507-2520).
    #[serde(rename = "persistent-with-driver-555-or-bare-metal")]
    PersistentWithDriver555OrBareMetal,
}

/// nvidia-fs releases (NVIDIA/gds-nvidia-fs), read at each tag: how they pin GPU memory, whether
/// an async request finished inline is reported twice (its completion and `ioctl_return`), and
/// which functions a tracer hooks. docs/drivers-nvfs.md's release table is this one
/// (`drivers::tests` checks the page against it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct NvfsRelease {
    /// The release tags of the row ("v2.28.4").
    pub tags: &'static [&'static str],
    pub pinning: NvfsPinning,
    /// BATCH_IO copies back only the 24-byte header (v2.23.1+; before, the whole union, but an
    /// entry's `ioctl_return` is in user memory the driver never writes either way).
    pub batch_header_only: bool,
    /// The 6.17+ block-layer DMA iterator path (`nvfs_blk_rq_dma_map_iter_start`/`_next`),
    /// built where the kernel has `blk_rq_dma_map_iter_start`.
    pub dma_map_iter: bool,
    /// The source files read.
    pub source: &'static str,
    /// The functions a tracer of that release hooks.
    pub functions: &'static [&'static str],
}

const NVFS_FUNCTIONS: &[&str] = &["nvfs_ioctl", "nvfs_direct_io", "nvfs_io_complete"];

pub const NVFS_RELEASES: &[NvfsRelease] = &[
    NvfsRelease {
        tags: &["v2.17.0", "v2.17.4", "v2.17.5", "v2.18.3", "v2.19.6", "v2.20.5"],
        pinning: NvfsPinning::AlwaysLegacy,
        batch_header_only: false,
        dma_map_iter: false,
        source: "src/nvfs-core.c, src/nvfs-batch.c",
        functions: NVFS_FUNCTIONS,
    },
    NvfsRelease {
        tags: &["v2.22.3"],
        pinning: NvfsPinning::PersistentOnBareMetal,
        batch_header_only: false,
        dma_map_iter: false,
        source: "src/nvfs-core.c, src/nvfs-batch.c",
        functions: NVFS_FUNCTIONS,
    },
    NvfsRelease {
        tags: &["v2.23.1", "v2.24.2", "v2.25.6", "v2.25.7", "v2.26.6", "v2.27.3"],
        pinning: NvfsPinning::PersistentWithDriver555OrBareMetal,
        batch_header_only: true,
        dma_map_iter: false,
        source: "src/nvfs-core.c, src/nvfs-batch.c",
        functions: NVFS_FUNCTIONS,
    },
    NvfsRelease {
        tags: &["v2.28.2", "v2.28.4"],
        pinning: NvfsPinning::PersistentWithDriver555OrBareMetal,
        batch_header_only: true,
        dma_map_iter: true,
        source: "src/nvfs-core.c, src/nvfs-batch.c, src/nvfs-dma.c",
        functions: NVFS_FUNCTIONS,
    },
];

impl NvfsRelease {
    /// The row of a version ("2.28.4" or "v2.28.4"); a version between rows takes the nearest
    /// older one.
    pub fn of(version: &str) -> Option<&'static NvfsRelease> {
        let key = |v: &str| -> Option<(u32, u32, u32)> {
            let mut it = v.trim().trim_start_matches('v').split('.').map(|p| p.parse::<u32>().ok());
            Some((it.next()??, it.next()??, it.next().flatten().unwrap_or(0)))
        };
        let want = key(version)?;
        NVFS_RELEASES.iter().rev().find(|r| r.tags.iter().filter_map(|t| key(t)).any(|k| k <= want))
    }

    /// Whether nvidia-fs pins with the legacy API (`nvidia_p2p_get_pages`, a free callback) as
    /// `nvfs_init` chose at load, for an NVIDIA driver major (None: unreadable) on an x86-64
    /// machine that is (or is not) a hypervisor guest.
    pub fn legacy_pinning(&self, driver_major: Option<u32>, x86_guest: Option<bool>) -> Option<bool> {
        match self.pinning {
            NvfsPinning::AlwaysLegacy => Some(true),
            NvfsPinning::PersistentOnBareMetal => x86_guest,
            NvfsPinning::PersistentWithDriver555OrBareMetal => {
                if driver_major.is_some_and(|d| d >= 555) {
                    Some(false)
                } else {
                    x86_guest
                }
            }
        }
    }
}

/// Which NVIDIA branches have a function: a hook table row's `branches` column.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Branches {
    /// The first branch of the matrix that has it.
    pub first: u32,
}

impl Branches {
    /// Every branch of the matrix.
    pub const ALL: Branches = Branches { first: 535 };

    pub fn has(self, branch: u32) -> bool {
        branch >= self.first
    }

    /// "535+", for people.
    pub fn describe(self) -> String {
        format!("NVIDIA {}+", self.first)
    }
}

impl NvidiaBranch {
    /// The clients of a mode (`persistent_api_support`; None: the default).
    pub fn clients(&self, persistent_api_support: Option<i32>) -> &'static [Client] {
        match (persistent_api_support, self.clients_legacy) {
            (Some(0), Some(legacy)) => legacy,
            _ => self.clients_default,
        }
    }

    /// Whether nvidia-peermem of this branch has `function` (a client callback or nv-p2p call).
    pub fn has(&self, function: &str) -> bool {
        let all = self.clients_default.iter().chain(self.clients_legacy.unwrap_or_default());
        all.flat_map(|c| {
            [
                c.acquire,
                c.trial_pin[0],
                c.trial_pin[1],
                c.get_pages[0],
                c.get_pages[1],
                c.put_pages[0],
                c.put_pages[1],
            ]
        })
        .any(|f| f == function)
    }
}

/// The row for a driver major version: its own, or the nearest older one (`inferred`); None
/// before the oldest row.
pub fn branch(major: u32) -> Option<(&'static NvidiaBranch, bool)> {
    let b = NVIDIA_BRANCHES.iter().rev().find(|b| b.branch <= major)?;
    Some((b, b.branch != major))
}

/// One client's flow in one line: "nv_mem: nv_mem_acquire_nc (trial nvidia_p2p_get_pages_persistent
/// + nvidia_p2p_put_pages_persistent), nv_mem_get_pages_nc -> nvidia_p2p_get_pages_persistent".
pub fn describe(c: &Client) -> String {
    format!(
        "{}: {} (trial {} + {}), {} -> {}",
        c.name, c.acquire, c.trial_pin[0], c.trial_pin[1], c.get_pages[0], c.get_pages[1]
    )
}
