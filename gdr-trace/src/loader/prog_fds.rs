//! What the library follower's process is handed: the uprobe programs it attaches, loaded and
//! verified by the tracer, as bare descriptors (a name and whether it is a return probe), and
//! the one map it reads (`PROVIDER_OPS`). It holds nothing else of the tracer's: no other
//! program (an fentry program on a driver's function keeps that module in use), no link, no
//! loader. It attaches by opening a uprobe perf event at a file offset and setting the program
//! on it; the event is the link, and closing it detaches.

use std::{
    collections::BTreeMap,
    os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd},
    path::Path,
    sync::atomic::{AtomicBool, Ordering},
};

use aya::{
    maps::{HashMap as BpfHashMap, Map, MapData},
    programs::UProbe,
    Ebpf,
};
use gdr_trace_common::bytes::ProviderOps;

use super::perf_events::{self, Event};

/// A program handed over: its name, whether it is a uretprobe, and its descriptor's number in
/// the follower (the same as the tracer's: it is inherited across exec).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize, PartialEq)]
pub struct Handed {
    pub name: String,
    pub ret: bool,
    pub fd: RawFd,
}

/// Programs by name, as descriptors (the tracer's, then the follower's).
#[derive(Default)]
pub struct ProgFds {
    progs: BTreeMap<String, (bool, OwnedFd)>,
    /// The map, and its descriptor's number.
    provider_ops: Option<(RawFd, BpfHashMap<MapData, u32, ProviderOps>)>,
}

impl ProgFds {
    /// The programs `names` (`(name, is a uretprobe)`) loaded one after another until `stop`
    /// (the trace ended first), and `provider_ops` (`PROVIDER_OPS`, a handle of its own),
    /// through descriptors of their own (close-on-exec). A program that does not load is left
    /// out: attaching it says so.
    pub fn local(
        ebpf: &mut Ebpf,
        names: &[(&'static str, bool)],
        stop: &AtomicBool,
        provider_ops: Option<Map>,
    ) -> Self {
        let mut progs = BTreeMap::new();
        for &(name, ret) in names {
            if stop.load(Ordering::Relaxed) {
                break;
            }
            let Some(Ok(p)) = ebpf.program_mut(name).map(<&mut UProbe>::try_from) else { continue };
            if p.fd().is_err() {
                let _ = p.load();
            }
            if let Some(Ok(fd)) = p.fd().ok().map(|f| f.as_fd().try_clone_to_owned()) {
                progs.insert(name.to_string(), (ret, fd));
            }
        }
        let provider_ops = provider_ops.and_then(|m| {
            let raw = super::map_set::data(&m)?.fd().as_fd().as_raw_fd();
            Some((raw, BpfHashMap::try_from(m).ok()?))
        });
        Self { progs, provider_ops }
    }

    /// What the follower is told of them, and every descriptor it must inherit.
    pub fn handed(&self) -> (Vec<Handed>, Option<RawFd>, Vec<RawFd>) {
        let handed: Vec<Handed> = self
            .progs
            .iter()
            .map(|(name, (ret, fd))| Handed { name: name.clone(), ret: *ret, fd: fd.as_raw_fd() })
            .collect();
        let ops = self.provider_ops.as_ref().map(|(fd, _)| *fd);
        let all = handed.iter().map(|h| h.fd).chain(ops).collect();
        (handed, ops, all)
    }
}

fn from_fd<V: aya::Pod>(fd: OwnedFd) -> Option<BpfHashMap<MapData, u32, V>> {
    BpfHashMap::try_from(Map::from_map_data(MapData::from_fd(fd).ok()?).ok()?).ok()
}

impl ProgFds {
    /// Takes ownership of the descriptors the tracer handed over.
    ///
    /// # Safety
    /// Each `fd` must be a descriptor this process holds and nothing else owns: those inherited
    /// from the tracer, taken once.
    pub unsafe fn adopt(handed: &[Handed], provider_ops: Option<RawFd>) -> Self {
        let progs = handed
            .iter()
            // SAFETY: the caller's promise.
            .map(|h| (h.name.clone(), (h.ret, unsafe { OwnedFd::from_raw_fd(h.fd) })))
            .collect();
        // SAFETY: as above.
        let provider_ops =
            provider_ops.and_then(|fd| Some((fd, from_fd(unsafe { OwnedFd::from_raw_fd(fd) })?)));
        Self { progs, provider_ops }
    }

    /// Program `prog` at each of `offsets` in the file `target` names, for all processes: the
    /// perf events (the links; dropping one detaches it). On a failure none stays.
    pub fn attach_at(&self, prog: &str, offsets: &[u64], target: &Path) -> Result<Vec<OwnedFd>, String> {
        let (ret, fd) = self.progs.get(prog).ok_or_else(|| format!("program {prog} was not loaded"))?;
        if perf_events::uprobe_pmu().is_none() {
            return Err("no uprobe PMU (/sys/bus/event_source/devices/uprobe): copies found after \
                        start are not hooked on this kernel"
                .into());
        }
        let mut links = Vec::with_capacity(offsets.len());
        for &offset in offsets {
            let ev = Event::Uprobe { target: target.to_path_buf(), offset, ret: *ret };
            let event = perf_events::take(&ev)?;
            perf_events::attach_to(fd.as_fd(), &ev, &event)?;
            links.push(event);
        }
        Ok(links)
    }

    /// The ops table the kernel copied for `pid` (`PROVIDER_OPS`).
    pub fn provider_ops(&self, pid: u32) -> Option<ProviderOps> {
        self.provider_ops.as_ref()?.1.get(&pid, 0).ok()
    }
}
