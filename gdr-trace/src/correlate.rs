//! Joins the records of one registration (or release) seen by several hooks — the kernel's
//! `ib_umem_get` and libibverbs' `ibv_reg_mr`, possibly nested in `ibv_reg_mr_iova2` — into one.
//!
//! All records of one call come from one thread, back to back, inner returns first. So there
//! is one open item per thread: a record that matches it joins it, anything else closes it;
//! `tick` closes items older than [`WINDOW_NS`], `flush` closes everything.

use std::collections::HashMap;

use crate::events::{Context, MrKind, MrRecord};

/// How long an item waits for its other sources.
pub const WINDOW_NS: u64 = 50_000_000;

/// A memory registration as one unit, whichever hooks saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Registration {
    /// Sequence number, unique within one trace.
    pub id: u64,
    pub ctx: Context,
    pub addr: u64,
    pub length: u64,
    pub iova: u64,
    pub access: u32,
    pub device: Option<String>,
    pub sources: Vec<String>,
    pub failed: bool,
    pub errno: Option<i32>,
    /// The kernel pinned user pages for it (`ib_umem_get` succeeded).
    pub kernel_pinned: bool,
    /// `struct ib_umem *` (kernel) and `struct ibv_mr *` (userspace), for joining releases.
    pub umem: Option<u64>,
    pub mr: Option<u64>,
}

/// A release, joined to its registration when that was seen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Release {
    pub ctx: Context,
    /// The registration released (None if it was registered before tracing began).
    pub registration: Option<u64>,
    pub addr: u64,
    pub length: u64,
    pub device: Option<String>,
    pub sources: Vec<String>,
    pub umem: Option<u64>,
    pub mr: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Joined {
    Registered(Registration),
    Released(Release),
}

/// What a release needs to know of its registration.
#[derive(Debug, Clone)]
struct Live {
    id: u64,
    addr: u64,
    length: u64,
    device: Option<String>,
}

#[derive(Debug, Default)]
pub struct Correlator {
    next_id: u64,
    open: HashMap<u32, Joined>,
    /// Live registrations by kernel and userspace handle.
    by_umem: HashMap<u64, Live>,
    by_mr: HashMap<u64, Live>,
}

impl Correlator {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn push(&mut self, rec: MrRecord, out: &mut Vec<Joined>) {
        let tid = rec.ctx.tid;
        if let Some(open) = self.open.get_mut(&tid) {
            if joins(open, &rec) {
                merge(open, rec, &mut self.by_umem, &mut self.by_mr);
                return;
            }
            let done = self.open.remove(&tid).expect("present");
            out.push(done);
        }
        let item = match rec.kind {
            MrKind::Register => {
                self.next_id += 1;
                let mut reg = Registration {
                    id: self.next_id,
                    ctx: rec.ctx.clone(),
                    addr: rec.addr,
                    length: rec.length,
                    iova: rec.iova,
                    access: rec.access,
                    device: None,
                    sources: vec![],
                    failed: rec.failed,
                    errno: None,
                    kernel_pinned: false,
                    umem: None,
                    mr: None,
                };
                let mut j = Joined::Registered(reg.clone());
                merge(&mut j, rec, &mut self.by_umem, &mut self.by_mr);
                if let Joined::Registered(r) = j {
                    reg = r;
                }
                Joined::Registered(reg)
            }
            MrKind::Release => {
                let mut rel = Release {
                    ctx: rec.ctx.clone(),
                    registration: None,
                    addr: rec.addr,
                    length: rec.length,
                    device: None,
                    sources: vec![],
                    umem: None,
                    mr: None,
                };
                let mut j = Joined::Released(rel.clone());
                merge(&mut j, rec, &mut self.by_umem, &mut self.by_mr);
                if let Joined::Released(r) = j {
                    rel = r;
                }
                Joined::Released(rel)
            }
        };
        self.open.insert(tid, item);
    }

    /// Closes items whose newest record is older than the window.
    pub fn tick(&mut self, now_ns: u64, out: &mut Vec<Joined>) {
        let old: Vec<u32> = self
            .open
            .iter()
            .filter(|(_, j)| now_ns.saturating_sub(ts(j)) >= WINDOW_NS)
            .map(|(tid, _)| *tid)
            .collect();
        let mut items: Vec<Joined> = old.into_iter().filter_map(|t| self.open.remove(&t)).collect();
        items.sort_by_key(ts);
        out.extend(items);
    }

    pub fn flush(&mut self, out: &mut Vec<Joined>) {
        self.tick(u64::MAX, out);
    }
}

fn ts(j: &Joined) -> u64 {
    match j {
        Joined::Registered(r) => r.ctx.ts_ns,
        Joined::Released(r) => r.ctx.ts_ns,
    }
}

/// Whether a record is another view of the open item.
fn joins(open: &Joined, rec: &MrRecord) -> bool {
    // A hook that already spoke for the item, or a second kernel record, starts a new item.
    let seen = |sources: &[String]| {
        sources.iter().any(|s| s == &rec.source)
            || (rec.from_kernel && sources.iter().any(|s| !s.starts_with("uprobe:")))
    };
    match (open, rec.kind) {
        (Joined::Registered(r), MrKind::Register) => {
            r.addr == rec.addr && r.length == rec.length && !seen(&r.sources)
        }
        (Joined::Released(r), MrKind::Release) => {
            !seen(&r.sources) && (r.length == rec.length || rec.length == 0 || r.length == 0)
        }
        _ => false,
    }
}

fn merge(item: &mut Joined, rec: MrRecord, by_umem: &mut HashMap<u64, Live>, by_mr: &mut HashMap<u64, Live>) {
    match item {
        Joined::Registered(r) => {
            r.sources.push(rec.source);
            if r.device.is_none() {
                r.device = rec.device;
            }
            if rec.from_kernel {
                // The kernel's view of the call wins: its errno, its verdict evidence.
                r.failed = rec.failed;
                r.errno = rec.errno;
                if !rec.failed {
                    r.kernel_pinned = true;
                    r.umem = Some(rec.handle);
                    by_umem.insert(
                        rec.handle,
                        Live { id: r.id, addr: r.addr, length: r.length, device: r.device.clone() },
                    );
                }
            } else {
                r.iova = rec.iova;
                if !rec.failed {
                    r.mr = Some(rec.handle);
                    by_mr.insert(
                        rec.handle,
                        Live { id: r.id, addr: r.addr, length: r.length, device: r.device.clone() },
                    );
                } else if r.sources.len() == 1 {
                    r.failed = true;
                }
            }
        }
        Joined::Released(r) => {
            r.sources.push(rec.source);
            if r.device.is_none() {
                r.device = rec.device;
            }
            let table = if rec.from_kernel { by_umem } else { by_mr };
            if let Some(live) = table.remove(&rec.handle) {
                r.registration = Some(live.id);
                r.addr = live.addr;
                r.length = live.length;
                if r.device.is_none() {
                    r.device = live.device;
                }
            }
            if rec.from_kernel {
                r.umem = Some(rec.handle);
            } else {
                r.mr = Some(rec.handle);
            }
        }
    }
}

#[cfg(test)]
mod tests;
