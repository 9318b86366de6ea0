//! The pipeline's storage glue: storage records in, the folded files' page fills taken out of
//! the kernel map and handed back with the next snapshot, exited processes' reports archived.

use super::Pipeline;
use crate::{
    events::storage::StorageEvent,
    sink::{Output, Sink},
    storage::{aggregate::StorageReport, state::StorageState},
};

impl Pipeline {
    /// A storage record (opens, closes, cuFile and nvidia-fs calls).
    pub fn storage(&mut self, ev: StorageEvent, sink: &mut dyn Sink) {
        let nvfs = match &ev {
            StorageEvent::Nvfs(io) => Some(io.clone()),
            _ => None,
        };
        for io in self.storage.record(ev) {
            sink.emit(&Output::Gds(&io));
        }
        if let Some(io) = nvfs {
            let path = io.fd.and_then(|fd| self.storage.fd_path(io.ctx.pid, fd));
            sink.emit(&Output::Nvfs { io: &io, path: path.as_deref() });
        }
    }

    /// A cuFile process's facts, read as its driver open or first registration was decoded.
    pub fn gds_facts(&mut self, pid: u32, facts: crate::storage::gds_facts::ProcGdsFacts) {
        self.storage.set_gds_facts(pid, facts);
    }

    pub fn storage_state(&self) -> &StorageState {
        &self.storage
    }

    /// The page-fill entries of files of processes that exited since last asked: final now, the
    /// live layer takes them out of the kernel map at once (a busy node's exited processes would
    /// fill it between summaries) and hands them in with the next snapshot.
    pub fn exited_fill_keys(&mut self) -> Vec<crate::storage::fold::FillKey> {
        let mut keys = Vec::new();
        for (pid, e) in self.exits.iter_mut().filter(|(_, e)| !e.fills_asked) {
            e.fills_asked = true;
            keys.extend(self.storage.inode_keys(*pid));
        }
        keys
    }

    /// Folded files' page-fill entries taken out of the kernel map (live only: `trace::page_fills`).
    pub fn fills_taken(
        &mut self,
        taken: Vec<(crate::storage::fold::FillKey, crate::storage::folded::Taken)>,
    ) {
        for (key, t) in taken {
            let (pages, read) = self.storage.fill_taken(key, t);
            if pages + read > 0 {
                let g = self.fill_growth.entry(key.0).or_default();
                g.0 += pages;
                g.1 += read;
            }
        }
    }

    /// The growth `fills_taken` found, per process, for the next snapshot (`folded_growth`).
    pub fn take_fill_growth(&mut self) -> Vec<(u32, u64, u64)> {
        std::mem::take(&mut self.fill_growth).into_iter().map(|(pid, (p, r))| (pid, p, r)).collect()
    }

    /// Processes reported final (exited) leave the storage state; their reports are kept, bounded.
    pub(super) fn archive_storage(&mut self, finished: &[u32], report: StorageReport) {
        for p in report.procs.into_iter().filter(|p| !p.archived && finished.contains(&p.pid)) {
            self.storage.procs.remove(&p.pid);
            self.storage_archive.keep(p);
        }
        // Exited before any I/O was reported, or with none: nothing to keep.
        for pid in finished {
            self.storage.procs.remove(pid);
        }
    }
}
