//! What the library follower's process is handed: the uprobe programs it attaches, loaded and
//! verified by the tracer, as bare descriptors (a name and whether it is a return probe), and
//! the one map it reads (`PROVIDER_OPS`). It holds nothing else of the tracer's: no other
//! program (an fentry program on a driver's function keeps that module in use), no link, no
//! loader. Where the kernel has uprobe_multi links it is handed one program, the dispatcher,
//! and each hook's slot (`uprobe_multi`): a copy is then at most two links. Elsewhere it attaches
//! by opening a uprobe perf event at a file offset and setting the program on it; the event is
//! the link. Closing a link detaches.

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
use gdr_trace_common::mr::bytes::ProviderOps;

use super::{
    perf_events::{self, Event},
    uprobe_multi::Slots,
};

/// A program handed over: its name, whether it is a uretprobe, and its descriptor's number in
/// the follower (the same as the tracer's: it is inherited across exec).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize, PartialEq)]
pub struct Handed {
    pub name: String,
    pub ret: bool,
    pub fd: RawFd,
}

/// How hooks are attached: uprobe_multi links of the dispatcher, with each hook program's slot
/// (whether it is a return probe, its slot: the cookie), or perf-event uprobes.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize, PartialEq)]
pub struct MultiHanded {
    pub dispatcher: RawFd,
    pub slots: Slots,
}

/// Programs by name, as descriptors (the tracer's, then the follower's).
#[derive(Default)]
pub struct ProgFds {
    progs: BTreeMap<String, (bool, OwnedFd)>,
    /// The dispatcher and the slots, where the kernel makes uprobe_multi links.
    multi: Option<(OwnedFd, Slots)>,
    /// The map, and its descriptor's number.
    provider_ops: Option<(RawFd, BpfHashMap<MapData, u32, ProviderOps>)>,
}

impl ProgFds {
    /// The programs `names` (`(name, is a uretprobe)`) loaded one after another until `stop`
    /// (the trace ended first), and `provider_ops` (`PROVIDER_OPS`, a handle of its own),
    /// through descriptors of their own (close-on-exec). A program that does not load is left
    /// out: attaching it says so. With `multi` (loaded for uprobe_multi links) none of aya's
    /// programs is loaded: the dispatcher is all the follower needs.
    pub fn local(
        ebpf: &mut Ebpf,
        names: &[(&'static str, bool)],
        stop: &AtomicBool,
        provider_ops: Option<Map>,
        multi: Option<super::uprobe_multi::Loaded>,
    ) -> Self {
        let mut progs = BTreeMap::new();
        let perf_names = if multi.is_some() { &[][..] } else { names };
        for &(name, ret) in perf_names {
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
        let multi = multi.map(|m| (m.dispatcher, m.slots));
        Self { progs, provider_ops, multi }
    }

    /// What the follower is told of them, and every descriptor it must inherit.
    pub fn handed(&self) -> (Vec<Handed>, Option<MultiHanded>, Option<RawFd>, Vec<RawFd>) {
        let handed: Vec<Handed> = self
            .progs
            .iter()
            .map(|(name, (ret, fd))| Handed { name: name.clone(), ret: *ret, fd: fd.as_raw_fd() })
            .collect();
        let multi = self
            .multi
            .as_ref()
            .map(|(fd, slots)| MultiHanded { dispatcher: fd.as_raw_fd(), slots: slots.clone() });
        let ops = self.provider_ops.as_ref().map(|(fd, _)| *fd);
        let all =
            handed.iter().map(|h| h.fd).chain(multi.as_ref().map(|m| m.dispatcher)).chain(ops).collect();
        (handed, multi, ops, all)
    }

    /// Whether hooks go on as uprobe_multi links (else perf-event uprobes).
    pub fn is_multi(&self) -> bool {
        self.multi.is_some()
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
    pub unsafe fn adopt(handed: &[Handed], multi: Option<&MultiHanded>, provider_ops: Option<RawFd>) -> Self {
        let progs = handed
            .iter()
            // SAFETY: the caller's promise.
            .map(|h| (h.name.clone(), (h.ret, unsafe { OwnedFd::from_raw_fd(h.fd) })))
            .collect();
        // SAFETY: as above.
        let multi = multi.map(|m| (unsafe { OwnedFd::from_raw_fd(m.dispatcher) }, m.slots.clone()));
        // SAFETY: as above.
        let provider_ops =
            provider_ops.and_then(|fd| Some((fd, from_fd(unsafe { OwnedFd::from_raw_fd(fd) })?)));
        Self { progs, provider_ops, multi }
    }

    /// Programs `wanted` (name, offsets) in the file `target` names, for all processes, as
    /// uprobe_multi links: one for the entry offsets, one for the return offsets. None where the
    /// kernel has no such links (attach each with `attach_at`). On a failure none stays.
    pub fn attach_multi(
        &self,
        wanted: &[(&str, Vec<u64>)],
        target: &Path,
    ) -> Option<Result<Vec<OwnedFd>, String>> {
        let (dispatcher, slots) = self.multi.as_ref()?;
        let mut sides: [(Vec<u64>, Vec<u64>); 2] = Default::default();
        for (prog, offsets) in wanted {
            let Some(&(ret, slot)) = slots.get(*prog) else {
                return Some(Err(format!("program {prog} was not loaded")));
            };
            let side = &mut sides[usize::from(ret)];
            for &o in offsets {
                // An offset named twice (two symbols of one function) runs its program once.
                if !side.0.iter().zip(&side.1).any(|(so, sc)| *so == o && *sc == u64::from(slot)) {
                    side.0.push(o);
                    side.1.push(u64::from(slot));
                }
            }
        }
        let links = sides
            .iter()
            .zip([false, true])
            .filter(|((offsets, _), _)| !offsets.is_empty())
            .map(|((offsets, cookies), ret)| {
                super::uprobe_multi::link(dispatcher.as_fd(), target, ret, offsets, cookies)
            })
            .collect();
        Some(links)
    }

    /// Program `prog` at each of `offsets` in the file `target` names, for all processes: the
    /// links (perf events, or one uprobe_multi link; dropping one detaches it). On a failure
    /// none stays.
    pub fn attach_at(&self, prog: &str, offsets: &[u64], target: &Path) -> Result<Vec<OwnedFd>, String> {
        if let Some(links) = self.attach_multi(&[(prog, offsets.to_vec())], target) {
            return links;
        }
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
