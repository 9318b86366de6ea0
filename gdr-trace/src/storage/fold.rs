//! Closed files of a running process, folded into one bounded summary. A process that opens
//! and closes files for hours (a data loader, a build, a node's daemons) keeps per-file state
//! for its [`KEEP_CLOSED`] largest closed files only; the others are added to its [`Folded`]
//! totals and counted, so every byte stays in the process's figures and no file is silently
//! gone. Page-cache fills come from a kernel map that holds a cumulative count per (process,
//! file) while its entry lives: for a folded file, what was already added is remembered per
//! entry (as many as the kernel map holds at most) and only growth is added.

use std::collections::HashSet;

pub use super::folded::{FillKey, Folded};
use super::{
    file::FileState,
    folded::Taken,
    snapshot::SnapFill,
    state::{FileRef, ProcState, StorageState},
};

/// Closed files kept per process with their own state (the largest by bytes moved).
pub const KEEP_CLOSED: usize = 32;
/// Closed files held before a process's are folded down to [`KEEP_CLOSED`].
pub const FOLD_AT: usize = 2 * KEEP_CLOSED;

/// Bytes a file moved, by any path (what decides which closed files keep their own state).
fn moved(f: &FileState) -> u64 {
    let c = f.counters();
    c.bytes_read + c.bytes_written + f.gds_bytes.values().sum::<u64>() + f.nvfs_bytes
}

impl ProcState {
    /// Once more than [`FOLD_AT`] closed files are held, folds all but the [`KEEP_CLOSED`]
    /// largest; returns the page-fill entries those folded may have in the kernel map (every
    /// file known by inode), with the counts already added (dev, ino, pages, read pages).
    fn fold_closed(&mut self) -> Vec<(u32, u64, u64, u64)> {
        // Every file with an open descriptor is named in `fds` (opens and snapshots put it there).
        if self.files.len() <= FOLD_AT + self.fds.len() {
            return vec![];
        }
        let open: HashSet<FileRef> = self.fds.values().copied().collect();
        let mut closed: Vec<(u64, FileRef)> = (self.files.iter())
            .filter(|(r, f)| f.live.is_empty() && !open.contains(r))
            .map(|(r, f)| (moved(f), *r))
            .collect();
        if closed.len() <= FOLD_AT {
            return vec![];
        }
        closed.sort_unstable_by(|a, b| b.cmp(a));
        let mut fills = Vec::new();
        for (_, r) in closed.drain(KEEP_CLOSED..) {
            let Some(f) = self.files.remove(&r) else { continue };
            if let FileRef::Inode { dev, ino } = r {
                fills.push((dev, ino, f.pages_filled, f.read_pages_filled));
            }
            self.folded.add(&f);
        }
        fills
    }
}

impl StorageState {
    /// Folds the closed files of `pid` past the bound, remembering their fill entries.
    pub(super) fn fold(&mut self, pid: u32) {
        let Some(p) = self.procs.get_mut(&pid) else { return };
        for (dev, ino, pages, read) in p.fold_closed() {
            self.folded_fills.insert((pid, dev, ino), (pages, read));
        }
    }

    /// A snapshot's fill entry of a folded file: its growth since last taken goes to the fold.
    /// False when the entry is not a folded file's.
    pub(super) fn folded_fill(&mut self, fill: &SnapFill) -> bool {
        let Some(was) = self.folded_fills.get_mut(&(fill.pid, fill.dev, fill.ino)) else { return false };
        let grown = (fill.pages.saturating_sub(was.0), fill.read_pages.saturating_sub(was.1));
        *was = (was.0.max(fill.pages), was.1.max(fill.read_pages));
        if let Some(p) = self.procs.get_mut(&fill.pid) {
            p.folded.totals.pages_filled += grown.0;
            p.folded.totals.read_pages_filled += grown.1;
        }
        true
    }

    /// After a snapshot: folded files' fill entries the kernel no longer holds are forgotten (a
    /// new entry for the same file counts from zero).
    pub(super) fn prune_folded_fills(&mut self, present: &HashSet<FillKey>) {
        self.folded_fills.retain(|k, _| present.contains(k));
    }

    /// Page-fill entries of folded files remembered (at most what the kernel map holds).
    pub fn folded_fills(&self) -> usize {
        self.folded_fills.len()
    }

    /// The page-fill entries a process's files known by inode may have.
    pub fn inode_keys(&self, pid: u32) -> Vec<FillKey> {
        let Some(p) = self.procs.get(&pid) else { return vec![] };
        (p.files.keys())
            .filter_map(|r| match r {
                FileRef::Inode { dev, ino } => Some((pid, *dev, *ino)),
                FileRef::Fd(_) => None,
            })
            .collect()
    }

    /// The page-fill entries of folded files, for the live layer to take out of the kernel map.
    pub fn folded_fill_keys(&self) -> Vec<FillKey> {
        self.folded_fills.keys().copied().collect()
    }

    /// A folded file's fill entry was taken out of the kernel map: the entry is forgotten (a
    /// new one counts from zero); returns its growth since last counted (pages, read pages),
    /// which comes back in a snapshot's `folded_growth` (so recordings have it).
    pub fn fill_taken(&mut self, key: FillKey, taken: Taken) -> (u64, u64) {
        match (self.folded_fills.remove(&key), taken) {
            (Some(was), Taken::Counts(pages, read)) => {
                (pages.saturating_sub(was.0), read.saturating_sub(was.1))
            }
            _ => (0, 0),
        }
    }

    /// Folded files' fill growth taken from the kernel map, per process (a snapshot's).
    pub(super) fn folded_growth(&mut self, growth: &[(u32, u64, u64)]) {
        for (pid, pages, read) in growth {
            if let Some(p) = self.procs.get_mut(pid) {
                p.folded.totals.pages_filled += pages;
                p.folded.totals.read_pages_filled += read;
            }
        }
    }
}

#[cfg(test)]
mod tests;
