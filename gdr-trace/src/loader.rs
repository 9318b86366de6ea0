//! Loads the embedded eBPF object with the globals this kernel needs, seeds the process filter,
//! and attaches every hook of `crate::hooks::HOOKS` the way the kernel allows.

pub mod ahead;
pub mod attach;
pub mod btf;
pub mod btf_memo;
pub mod copy;
pub mod elf;
pub mod explain;
pub mod follow;
pub mod follow_child;
pub mod follow_remote;
pub mod map_set;
pub mod module_fentry;
mod options;
mod own_rows;
pub mod perf_events;
pub mod prog_fds;
pub mod provider;
pub mod provider_ops;
mod self_pids;
pub mod storage_attach;
pub mod storage_kernel;
mod trampoline;
pub mod uprobe;
pub mod uprobe_multi;

pub use map_set::MapSet;
#[cfg(feature = "testkit")]
pub use options::BENCH_FLOOR_OBJECT;
pub use options::{AttachMode, LoadOptions, EBPF_OBJECT};

use std::os::fd::OwnedFd;

use anyhow::Context as _;
use aya::{maps::HashMap as BpfHashMap, Ebpf, EbpfLoader};
use gdr_trace_common::{globals, maps, OFFSET_UNKNOWN};

use crate::{
    facts::{HookStatus, KernelFacts, Peermem},
    hooks::Role,
    procfs,
};

/// Loaded programs and their links. Dropping it detaches everything.
pub struct Tracer {
    pub ebpf: Ebpf,
    pub statuses: Vec<HookStatus>,
    /// Links made outside aya (fentry/fexit on module functions).
    pub extra_links: Vec<OwnedFd>,
    /// Kernel facts the programs were configured with.
    pub facts: KernelFacts,
    /// Every copy of each hooked library, followed as processes map them (`follow`).
    pub follower: follow::Follower,
}

pub fn load(opts: &LoadOptions) -> anyhow::Result<Tracer> {
    let t0 = std::time::Instant::now();
    // The system's RDMA providers are looked up by a child of ours, started before any hook.
    let provider_child = if opts.uprobes && !opts.no_bytes { provider_ops::spawn() } else { None };
    // aya 0.14's loader parses vmlinux BTF whole as it is made (no way around it): on a thread,
    // and the parse dropped at once (ours is btf-rs's, mapped; the object has no CO-RE
    // relocations; vmlinux fentry makes aya's own parse where the kernel allows fentry,
    // `attach::Trampolines`). /proc/kallsyms is scanned on a thread too.
    let aya_loader = std::thread::spawn(|| {
        let t = std::time::Instant::now();
        let mut loader = EbpfLoader::new();
        loader.btf(None);
        tracing::debug!("aya's loader made in {:?}", t.elapsed());
        loader
    });
    let kallsyms = std::thread::spawn(|| {
        use crate::hooks::{Path, HOOKS};
        let wanted: Vec<&str> = HOOKS
            .iter()
            .filter(|h| h.path != Path::Tracer && h.is_kernel())
            .flat_map(|h| h.symbols())
            .collect();
        let t = std::time::Instant::now();
        let homes = match std::fs::File::open("/proc/kallsyms") {
            Ok(f) => procfs::kallsyms_homes(std::io::BufReader::with_capacity(64 << 10, f), &wanted),
            Err(_) => Default::default(),
        };
        tracing::debug!("/proc/kallsyms scanned in {:?}", t.elapsed());
        homes
    });
    let tracefs_note = procfs::ensure_tracefs().err();
    let (removed, failed) = crate::stale_probes::remove();
    for e in removed {
        tracing::info!("removed probe event {e}: left in tracefs by a tracer that was killed");
    }
    for e in failed {
        tracing::warn!("could not remove a probe event a killed tracer left in tracefs: {e}");
    }
    tracing::debug!("tracefs and stale probes after {:?}", t0.elapsed());
    // Parsed only for what this boot's memo does not answer.
    let kbtf = btf::KernelBtf::open();
    tracing::debug!("BTF memo of this boot read: {}", kbtf.memo_loaded());
    let fentry_unavailable = attach::fentry_unavailable(&kbtf);
    let mut opts = opts.clone();
    if opts.storage_if_fentry && fentry_unavailable.is_some() {
        opts.storage = false;
    }
    let opts = &opts;
    // Every tracepoint's perf event, opened now on threads (each open waits for the kernel's
    // event mutex), while the rest of the start-up goes on.
    let tracepoints = ahead::tracepoints(opts, fentry_unavailable.is_some());
    perf_events::open_ahead(tracepoints.iter().map(|(_, ev)| ev.clone()));
    // RDMA core structs by the BTF of the module that defines them (MLNX_OFED replaces it).
    let name_off = kbtf.owned_member_offset("ib_device", "name", &["ib_core"]);
    tracing::debug!("ib_device.name offset {name_off:?} after {:?}", t0.elapsed());
    let fork_off = procfs::tracepoint_field_offset("sched", "sched_process_fork", "child_pid").unwrap_or(44);
    let filter = u32::from(opts.filter_pid.is_some());
    let name_off_raw = name_off.unwrap_or(OFFSET_UNKNOWN);
    // The dma-buf exporter chain: ib_umem_dmabuf.attach -> dma_buf_attachment.dmabuf -> dma_buf.exp_name.
    let rdma_modules = ["ib_uverbs", "ib_core"];
    let dmabuf_offs = [
        kbtf.owned_member_offset("ib_umem_dmabuf", "attach", &rdma_modules),
        kbtf.member_offset("dma_buf_attachment", "dmabuf", &[]),
        kbtf.member_offset("dma_buf", "exp_name", &[]),
    ];
    let [attach_off, dmabuf_off, exp_name_off] = dmabuf_offs.map(|o| o.unwrap_or(OFFSET_UNKNOWN));
    // Where 7.2's descriptor and attribute getters' pins are (they take no address).
    let umem_offs = ["address", "length"].map(|f| kbtf.owned_member_offset("ib_umem", f, &rdma_modules));
    let [umem_address_off, umem_length_off] = umem_offs.map(|o| o.unwrap_or(OFFSET_UNKNOWN));
    let storage_globals = storage_kernel::StorageGlobals::resolve(&kbtf);
    let mut loader = aya_loader.join().map_err(|_| anyhow::anyhow!("making aya's loader panicked"))?;
    storage_globals.apply(&mut loader);
    // Itself, as the kernel numbers it (in a PID namespace of its own this is not the host's
    // number and gdr-trace's own I/O is counted: only a little noise).
    let self_tgid = std::process::id();
    let mut ebpf = loader
        .override_global(globals::FILTER_PIDS, &filter, true)
        .override_global(globals::SELF_TGID, &self_tgid, true)
        .override_global(globals::IB_DEVICE_NAME_OFF, &name_off_raw, true)
        .override_global(globals::FORK_CHILD_PID_OFF, &fork_off, true)
        .override_global(globals::UMEM_DMABUF_ATTACH_OFF, &attach_off, true)
        .override_global(globals::ATTACHMENT_DMABUF_OFF, &dmabuf_off, true)
        .override_global(globals::DMABUF_EXP_NAME_OFF, &exp_name_off, true)
        .override_global(globals::UMEM_ADDRESS_OFF, &umem_address_off, true)
        .override_global(globals::UMEM_LENGTH_OFF, &umem_length_off, true)
        .override_global(globals::EVENTS_PER_UID_S, &opts.events_per_uid, true)
        .load(EBPF_OBJECT)
        .context("loading the eBPF object (maps) into the kernel")?;
    tracing::debug!("object loaded after {:?}", t0.elapsed());
    // The provider child is one of gdr-trace's own processes while it runs: never traced.
    if let Some(c) = &provider_child {
        if let Err(e) = self_pids::own_process(&mut ebpf, gdr_trace_common::SELF_SLOT_PROVIDER_OPS, c.id()) {
            tracing::warn!("the provider lookup's I/O may be reported: {e}");
        }
    }
    // Their programs verified on threads at once (the verifier is most of the attach's CPU).
    ahead::load_programs(&mut ebpf, tracepoints.iter().map(|(p, _)| *p));
    tracing::debug!("tracepoint programs loaded after {:?}", t0.elapsed());

    let mut fork_status = None;
    if let Some(pid) = opts.filter_pid {
        seed_tracked(&mut ebpf, pid)?;
        fork_status = Some(own_rows::fork_tracker(&mut ebpf, tracefs_note));
    } else if let Err(e) = own_rows::exit_follower(&mut ebpf) {
        tracing::warn!("{e}: state kept per process is dropped only past its bounds");
    }

    let mut facts = KernelFacts {
        kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default().trim().to_string(),
        vmlinux_btf: kbtf.has_vmlinux(),
        ib_device_name_off: name_off,
        dmabuf_exporter_readable: dmabuf_offs.iter().all(Option::is_some),
        kprobe_unavailable: attach::kprobe_unavailable(),
        fentry_unavailable,
        storage_offsets_unknown: storage_globals.unknown(),
        peermem: None,
        driver: None,
        fact_sources: fact_sources(name_off.is_some(), &dmabuf_offs, &storage_globals),
    };
    let mut extra_links = Vec::new();
    tracing::debug!("facts after {:?}", t0.elapsed());
    let homes = kallsyms.join().unwrap_or_default();
    tracing::debug!("kallsyms joined after {:?}", t0.elapsed());
    let (mut statuses, libs) = attach::attach_all(&mut ebpf, opts, &kbtf, &facts, &homes, &mut extra_links);
    kbtf.save_memo();
    statuses.extend(fork_status);
    let mapper = opts.uprobes.then(|| own_rows::library_mapper(&mut ebpf));
    let told = mapper.as_ref().is_some_and(|m| m.attached.is_some());
    statuses.extend(mapper);
    extra_links.extend(perf_events::take_links());
    tracing::debug!("library mapper after {:?}", t0.elapsed());
    // The first scan is the follower's own (`probes` makes it here; a trace in the follower's
    // process, whose hooks go with it).
    // The system's RDMA providers: hooked now, before any process is traced.
    let had_child = provider_child.is_some();
    let found = provider_ops::learn(provider_child);
    if had_child {
        // It has exited: its number may be a workload's next.
        let _ = self_pids::own_process(&mut ebpf, gdr_trace_common::SELF_SLOT_PROVIDER_OPS, 0);
    }
    let mut attach = |prog: &str, off: u64, target: &std::path::Path| {
        uprobe::attach_at(&mut ebpf, prog, &[off], target).map(|_| ())
    };
    let providers = provider::Providers::at_start(&found, &mut statuses, &mut attach);
    tracing::debug!("{} provider functions hooked at start after {:?}", found.len(), t0.elapsed());
    let follower = follow::Follower::new(opts, &statuses, &libs, told).with_providers(providers);
    drop(libs);
    tracing::debug!("follower's first scan after {:?}", t0.elapsed());
    facts.peermem = peermem_mode(std::path::Path::new("/sys/module"), &mut statuses);
    let pas = facts.peermem.as_ref().and_then(|p| p.persistent_api_support);
    let driver = crate::drivers::detect(std::path::Path::new("/sys"), std::path::Path::new("/proc"), pas);
    note_branch(&driver, &mut statuses);
    facts.driver = Some(driver);
    tracing::debug!("attached after {:?}", t0.elapsed());
    // What start-up allocated and freed (aya's BTF parse on its thread's heap above all) goes
    // back to the system rather than staying resident for the run.
    crate::heap::trim();
    Ok(Tracer { ebpf, statuses, extra_links, facts, follower })
}

/// Where the device of a pin and a dma-buf's exporter are read on this kernel (`probes`).
fn fact_sources(
    name_off: bool,
    dmabuf_offs: &[Option<u32>; 3],
    kernel: &storage_kernel::StorageGlobals,
) -> Vec<crate::facts::FactSource> {
    use gdr_trace_common::storage::globals as g;
    let known = |names: &[&str]| names.iter().all(|n| !kernel.unknown().contains(n));
    let walk = [g::TASK_FILES_OFF, g::FILES_FDT_OFF, g::FDT_MAX_FDS_OFF, g::FDT_FD_OFF];
    let uverbs = known(&walk) && known(&[g::REGS_ARG0_OFF, g::FILE_INODE_OFF, g::INODE_RDEV_OFF]);
    let by_fd = known(&walk) && known(&[g::FILE_PRIVATE_DATA_OFF]) && dmabuf_offs[2].is_some();
    vec![
        crate::facts::FactSource::device(name_off, uverbs),
        crate::facts::FactSource::exporter(dmabuf_offs.iter().all(Option::is_some), by_fd),
    ]
}

/// nvidia-peermem's mode, read from the module its client callbacks were found in (kallsyms):
/// `/sys/module/nvidia_peermem/parameters/` on a GPU node, the simulated module's own in tests.
/// When it can't be read, the persistent client's name stays unknown and its hook says why.
fn peermem_mode(sys_module: &std::path::Path, statuses: &mut [HookStatus]) -> Option<Peermem> {
    let is_client = |h: &HookStatus| {
        crate::hooks::by_function(h.hook).is_some_and(|row| {
            matches!(
                row.role,
                Role::PeerClient | Role::PeerClientPersistent | Role::PeerPages | Role::PeerPagesPersistent
            )
        })
    };
    let module = statuses
        .iter()
        .filter(|h| is_client(h))
        .find_map(|h| h.location.clone().filter(|l| l != "vmlinux"))?;
    match Peermem::read(sys_module, &module) {
        Ok(p) => Some(p),
        Err(why) => {
            for st in statuses.iter_mut().filter(|h| {
                crate::hooks::by_function(h.hook).is_some_and(|r| r.role == Role::PeerPagesPersistent)
            }) {
                st.reasons.push(format!("peer client name unknown (nv_mem or nv_mem_nc): {why}"));
            }
            None
        }
    }
}

/// An NVIDIA hook that was not found says whether the driver branch found has it at all
/// (nv_mem_acquire_nc is missing on a 575 node by design, not by accident).
fn note_branch(driver: &crate::drivers::Detected, statuses: &mut [HookStatus]) {
    let Some(branch) = driver.branch else { return };
    for st in statuses.iter_mut().filter(|h| h.location.is_none()) {
        let Some(b) = crate::hooks::by_function(st.hook).and_then(|row| row.nvidia) else { continue };
        st.reasons.push(if b.has(branch) {
            format!("driver branch {branch} has it ({})", b.describe())
        } else {
            format!("driver branch {branch} does not have it ({})", b.describe())
        });
    }
}

/// Puts the PID and its current descendants into the in-kernel filter.
fn seed_tracked(ebpf: &mut Ebpf, pid: u32) -> anyhow::Result<()> {
    let mut tracked: BpfHashMap<_, u32, u8> =
        BpfHashMap::try_from(ebpf.map_mut(maps::TRACKED).context("TRACKED map missing")?)?;
    let mut todo = vec![pid];
    while let Some(p) = todo.pop() {
        tracked.insert(p, 1, 0).with_context(|| format!("adding pid {p} to the filter"))?;
        todo.extend(procfs::children(p));
    }
    Ok(())
}

/// Sum of the per-CPU lost-record counters, by slot.
pub fn lost_counts(ebpf: &MapSet) -> [u64; gdr_trace_common::lost::SLOTS as usize] {
    let mut out = [0u64; gdr_trace_common::lost::SLOTS as usize];
    let Some(map) = ebpf.map(maps::LOST) else { return out };
    let Ok(arr) = aya::maps::PerCpuArray::<_, u64>::try_from(map) else { return out };
    for (slot, o) in out.iter_mut().enumerate() {
        if let Ok(values) = arr.get(&(slot as u32), 0) {
            *o = values.iter().sum();
        }
    }
    out
}

/// Records lost by each tenant that lost some (`LOST_BY_TENANT`), most first.
pub fn lost_by_tenant(ebpf: &MapSet) -> Vec<(u64, u64)> {
    let Some(map) = ebpf.map(maps::LOST_BY_TENANT) else { return vec![] };
    let Ok(m) = aya::maps::HashMap::<_, u64, u64>::try_from(map) else { return vec![] };
    let mut all: Vec<(u64, u64)> = m.iter().flatten().filter(|(_, n)| *n > 0).collect();
    all.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    all
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::facts::PeermemMode;

    fn status(hook: &'static str, location: Option<&str>) -> HookStatus {
        HookStatus {
            hook,
            side: "kernel",
            location: location.map(str::to_string),
            attached: location.map(|_| "kprobe+kretprobe".to_string()),
            reasons: vec![],
        }
    }

    #[test]
    fn peermem_mode_is_read_where_the_client_callbacks_live() {
        let root = std::env::temp_dir().join(format!("gdr-loader-peermem-{}", std::process::id()));
        let params = root.join("gdrsim/parameters");
        std::fs::create_dir_all(&params).unwrap();
        std::fs::write(params.join("persistent_api_support"), "0\n").unwrap();

        let mut st = [status("ib_umem_get", Some("vmlinux")), status("nv_mem_get_pages_nc", Some("gdrsim"))];
        let p = peermem_mode(&root, &mut st).expect("read from gdrsim's parameters");
        assert_eq!(
            (p.module.as_str(), p.persistent_api_support, p.mode),
            ("gdrsim", Some(0), PeermemMode::Legacy)
        );

        // No client callback found: no mode, nothing claimed.
        let mut none = [status("nv_mem_get_pages_nc", None)];
        assert_eq!(peermem_mode(&root, &mut none), None);
        assert!(none[0].reasons.is_empty());

        // Found in a module whose sysfs directory is missing: no mode, and the hook says why.
        let mut gone = [
            status("nv_mem_acquire", Some("nvidia_peermem")),
            status("nv_mem_get_pages_nc", Some("nvidia_peermem")),
        ];
        assert_eq!(peermem_mode(&root, &mut gone), None);
        let why = gone[1].reasons.join("; ");
        assert!(
            why.starts_with("peer client name unknown (nv_mem or nv_mem_nc):")
                && why.contains("does not exist"),
            "{why}"
        );
        std::fs::remove_dir_all(root).unwrap();
    }
}
