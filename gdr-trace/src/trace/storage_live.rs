//! The live side of the storage analysis: reads the kernel's counter maps, learns from /proc
//! what the kernel can't say (absolute paths, command names, files opened before the trace),
//! and drops the kernel entries of processes that are gone.

use std::{
    collections::{HashMap, HashSet},
    fs,
    os::unix::fs::MetadataExt,
};

use crate::loader::MapSet;
use aya::maps::HashMap as BpfHashMap;
use gdr_trace_common::storage::{maps, FileIo, FileKey, FillKey, IoBatch, PageFills, UringLoose};

use super::gds_early::GdsEarly;
use crate::storage::state::{SnapFile, SnapFill, Snapshot, StorageState};
use crate::{
    events::{
        storage::{Identity, StorageEvent},
        Event,
    },
    procfs,
};

const AT_FDCWD: i32 = -100;

/// Whether `path` (seen through /proc) is the file the kernel named.
fn same_file(path: &str, id: &Identity) -> bool {
    fs::metadata(path).is_ok_and(|m| m.ino() == id.ino && m.dev() == crate::procfs::user_dev(id.dev))
}

/// The absolute name of an open descriptor, checked against the kernel's identity.
fn fd_path(pid: u32, fd: i32, id: &Identity) -> Option<String> {
    let link = format!("/proc/{pid}/fd/{fd}");
    let target = fs::read_link(&link).ok()?.to_string_lossy().into_owned();
    (target.starts_with('/') && (!id.is_known() || same_file(&link, id))).then_some(target)
}

/// The storage family's live reader: what it keeps between records and ticks (one per trace,
/// owned by the trace loop; no statics).
#[derive(Debug, Default)]
pub struct StorageLive {
    /// What cuFile processes said while they surely ran.
    pub gds: GdsEarly,
    /// The library copies cuFile calls went to.
    libraries: super::cufile_library::Libraries,
    /// Exited processes' page-fill entries taken out of the kernel map, for the next snapshot.
    pub taken: Vec<(FillKey, PageFills)>,
}

impl StorageLive {
    /// What /proc adds to a decoded event while its process runs (a step after decoding).
    pub fn enrich(&mut self, ev: &mut Event) {
        if let Event::Exit(ctx) = ev {
            self.gds.forget(ctx.pid);
        }
        if let Event::Storage(s) = ev {
            resolve(s);
            if let StorageEvent::Opened(o) = s {
                self.gds.note_open(o);
            }
            if let StorageEvent::Gds(g) = s {
                g.detail.library = self.libraries.at(g.ctx.pid, g.detail.func_ip);
                g.detail.dest_gpu = self.gds.dest_of(g);
                self.gds.note_call(g);
            }
        }
    }

    /// The tick's reading ([`read`]), with the fill entries taken since the last one.
    pub fn read(&mut self, ebpf: &mut MapSet, state: &StorageState) -> Snapshot {
        let taken = std::mem::take(&mut self.taken);
        read(ebpf, state, taken, &mut self.gds)
    }
}

/// Makes an opened path absolute: the descriptor's own name when it is still open, else the
/// path joined to the process's working directory (or to `dirfd`'s name).
pub fn resolve(ev: &mut StorageEvent) {
    let StorageEvent::Opened(o) = ev else { return };
    if let Some(p) = fd_path(o.ctx.pid, o.fd, &o.id) {
        o.path = p;
        return;
    }
    if o.path.starts_with('/') || o.path.is_empty() {
        return;
    }
    let base = if o.dirfd == AT_FDCWD {
        fs::read_link(format!("/proc/{}/cwd", o.ctx.pid)).ok()
    } else {
        fs::read_link(format!("/proc/{}/fd/{}", o.ctx.pid, o.dirfd)).ok()
    };
    if let Some(base) = base {
        o.path = base.join(&o.path).to_string_lossy().into_owned();
    }
}

/// The file a process maps with this device and inode (for pages filled through mmap).
fn mapped_path(maps_text: &str, dev: u32, ino: u64) -> Option<String> {
    let want = format!("{:02x}:{:02x}", dev >> 20, dev & 0xfffff);
    maps_text.lines().find_map(|l| {
        let mut it = l.split_whitespace();
        let (_range, _perm, _off, d, i) = (it.next()?, it.next()?, it.next()?, it.next()?, it.next()?);
        let path = it.next()?;
        (d == want && i.parse::<u64>().ok()? == ino && path.starts_with('/')).then(|| path.to_string())
    })
}

/// Adds what each CPU's write-combining slot holds to its descriptor's entry (the kernel folds
/// them when the CPU moves on or the descriptor closes; until then only the slot has them).
fn fold_batches(ebpf: &MapSet, files: &mut [(FileKey, FileIo)]) {
    let Some(map) = ebpf.map(maps::IO_BATCH) else { return };
    let Ok(arr) = aya::maps::PerCpuArray::<_, IoBatch>::try_from(map) else { return };
    let Ok(slots) = arr.get(&0, 0) else { return };
    for b in slots.iter().filter(|b| b.key.tgid != 0 && b.counted != 0) {
        if let Some((_, io)) = files.iter_mut().find(|(k, _)| *k == b.key) {
            io.stats.add(&b.stats);
        }
    }
}

fn entries<K: aya::Pod, V: aya::Pod>(ebpf: &MapSet, name: &str) -> Vec<(K, V)> {
    let Some(map) = ebpf.map(name) else { return vec![] };
    let Ok(m) = BpfHashMap::<_, K, V>::try_from(map) else { return vec![] };
    m.iter().flatten().collect()
}

/// Reads the kernel maps (paths the state doesn't know yet from /proc) and forgets, in the
/// kernel, what dead processes left: their final counters are in the snapshot (`gone`).
/// `taken`: fill entries of exited processes taken out of the map since the last read (final:
/// they join this snapshot as if still there).
fn read(
    ebpf: &mut MapSet,
    state: &StorageState,
    taken: Vec<(FillKey, PageFills)>,
    early: &mut GdsEarly,
) -> Snapshot {
    let mut files: Vec<(FileKey, FileIo)> = entries(ebpf, maps::FILE_IO);
    fold_batches(ebpf, &mut files);
    let mut fills: Vec<(FillKey, PageFills)> = entries(ebpf, maps::PAGE_FILLS);
    fills.extend(taken);
    let loose: Vec<(u32, UringLoose)> = entries(ebpf, maps::URING_LOOSE);
    let pids: HashSet<u32> = files
        .iter()
        .map(|(k, _)| k.tgid)
        .chain(fills.iter().map(|(k, _)| k.tgid))
        .chain(loose.iter().map(|(p, _)| *p))
        .collect();
    let comms: HashMap<u32, String> = pids.iter().filter_map(|&p| procfs::comm(p).map(|c| (p, c))).collect();
    let mut snap = Snapshot { comms, uring_loose: loose.clone(), ..Snapshot::default() };
    // Entries the kernel could not name: their process's mounts say what they are.
    let mut mounts: HashMap<u32, Option<(Mounts, bool)>> = HashMap::new();
    let mut unnamed = |pid: u32, dev: u32, ino: u64| -> Option<Option<String>> {
        let (m, own) = mounts.entry(pid).or_insert_with(|| mounts_for(pid)).as_ref()?;
        Some(crate::storage::mounts::unnamed(m, *own, dev, ino, is_block_device))
    };
    for (k, io) in &files {
        let id = Identity::from(io);
        let mut path =
            if state.knows_path(k.tgid, io.dev, io.ino) { None } else { fd_path(k.tgid, k.fd as i32, &id) };
        if path.is_none() && id.is_known() && !state.knows_path(k.tgid, io.dev, io.ino) {
            match unnamed(k.tgid, io.dev, io.ino) {
                // Not a storage file (a synthetic filesystem, the kernel's own pages).
                Some(None) => continue,
                Some(name) => path = name,
                None => {}
            }
        }
        snap.files.push(SnapFile { pid: k.tgid, fd: k.fd, io: *io, path });
    }
    let mut maps_cache: HashMap<u32, String> = HashMap::new();
    for (k, f) in &fills {
        let path = if state.knows_path(k.tgid, k.dev, k.ino) {
            None
        } else {
            let text = maps_cache
                .entry(k.tgid)
                .or_insert_with(|| fs::read_to_string(format!("/proc/{}/maps", k.tgid)).unwrap_or_default());
            match mapped_path(text, k.dev, k.ino) {
                Some(p) => Some(p),
                None => match unnamed(k.tgid, k.dev, k.ino) {
                    // Pages of no storage file (a synthetic or the kernel's own filesystem).
                    Some(None) => continue,
                    Some(name) => name,
                    None => None,
                },
            }
        };
        snap.fills.push(SnapFill {
            pid: k.tgid,
            dev: k.dev,
            ino: k.ino,
            pages: f.pages,
            read_pages: f.read_pages,
            path,
        });
    }
    // Once per cuFile process: its configuration and mounts as it sees them.
    snap.gds_facts = early.take_for(state);
    let dead: Vec<u32> = pids.iter().copied().filter(|&p| !procfs::pid_alive(p)).collect();
    snap.gone.clone_from(&dead);
    if dead.is_empty() {
        return snap;
    }
    forget_files(ebpf, files.iter().filter(|(k, _)| dead.contains(&k.tgid)));
    forget::<FillKey, PageFills>(
        ebpf,
        maps::PAGE_FILLS,
        fills.iter().map(|(k, _)| *k).filter(|k| dead.contains(&k.tgid)),
    );
    forget::<u32, UringLoose>(
        ebpf,
        maps::URING_LOOSE,
        loose.iter().map(|(p, _)| *p).filter(|p| dead.contains(p)),
    );
    snap
}

/// Removes exited processes' descriptors from `FILE_IO` and gives each tenant its entries
/// back (`TRACKED_FREED`).
fn forget_files<'a>(ebpf: &mut MapSet, gone: impl Iterator<Item = &'a (FileKey, FileIo)>) {
    let Some(Ok(mut m)) = ebpf.map_mut(maps::FILE_IO).map(BpfHashMap::<_, FileKey, FileIo>::try_from) else {
        return;
    };
    let mut freed = super::freed::Freed::default();
    for (k, io) in gone {
        if m.remove(k).is_ok() {
            freed.one(io.tenant);
        }
    }
    freed.give_back(ebpf, maps::TRACKED_FREED);
}

/// Mounts by device number.
type Mounts = HashMap<u32, crate::storage::mounts::Mount>;

/// The mounts a process sees (its mount namespace: a container's own); None once it is gone.
fn mounts_of(pid: u32) -> Option<Mounts> {
    fs::read_to_string(format!("/proc/{pid}/mountinfo")).ok().map(|t| crate::storage::mounts::parse(&t))
}

/// The mounts that tell what `pid`'s entries are: its own (true), or, gone, the tracer's.
fn mounts_for(pid: u32) -> Option<(Mounts, bool)> {
    mounts_of(pid).map(|m| (m, true)).or_else(|| mounts_of(std::process::id()).map(|m| (m, false)))
}

/// Whether a device number (the kernel's MKDEV) is a block device on this machine.
fn is_block_device(dev: u32) -> bool {
    std::path::Path::new(&format!("/sys/dev/block/{}:{}", dev >> 20, dev & 0xfffff)).exists()
}

fn forget<K: aya::Pod, V: aya::Pod>(ebpf: &mut MapSet, name: &str, keys: impl Iterator<Item = K>) {
    let Some(map) = ebpf.map_mut(name) else { return };
    if let Ok(mut m) = BpfHashMap::<_, K, V>::try_from(map) {
        for k in keys {
            let _ = m.remove(&k);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_mmapped_files_by_device_and_inode() {
        let maps = "7f00-7f10 r--p 00000000 08:01 1234 /usr/lib/libc.so.6\n\
                    7f10-7f20 r--p 00000000 fd:02 99 /data/shard.bin\n\
                    7f20-7f30 rw-p 00000000 00:00 0 [heap]\n";
        assert_eq!(mapped_path(maps, (8 << 20) | 1, 1234).as_deref(), Some("/usr/lib/libc.so.6"));
        assert_eq!(mapped_path(maps, (0xfd << 20) | 2, 99).as_deref(), Some("/data/shard.bin"));
        assert_eq!(mapped_path(maps, (8 << 20) | 1, 99), None);
    }

    #[test]
    fn device_numbers_convert() {
        assert_eq!(crate::procfs::user_dev((8 << 20) | 1), libc::makedev(8, 1));
        assert_eq!(crate::procfs::user_dev((259 << 20) | 3), libc::makedev(259, 3));
    }
}
