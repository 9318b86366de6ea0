//! What folding closed files leaves (`fold.rs`), as plain data: the folded totals, the key of
//! a page-fill entry, and what taking one from the kernel map found (`take.rs`). A leaf: the
//! state, the folding and the take all use it, and it uses none of them.

use super::file::FileState;

/// A page-fill entry of the kernel map: (pid, kernel dev, inode).
pub type FillKey = (u32, u32, u64);

/// The files folded away and what they added up to.
#[derive(Debug, Clone, Default)]
pub struct Folded {
    /// Closed files folded in (their own state dropped).
    pub files: u64,
    /// Their counters, fills, cuFile and nvidia-fs bytes, summed (no path, no descriptor).
    pub totals: FileState,
}

impl Folded {
    pub(super) fn add(&mut self, f: &FileState) {
        self.files += 1;
        let t = &mut self.totals;
        t.closed.add(&f.counters());
        t.closed_direct.add(&f.direct());
        t.pages_filled += f.pages_filled;
        t.read_pages_filled += f.read_pages_filled;
        for (v, b) in &f.gds_bytes {
            *t.gds_bytes.entry(*v).or_default() += b;
        }
        t.nvfs_bytes += f.nvfs_bytes;
    }
}

/// What taking one page-fill entry found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Taken {
    /// Its last counts (pages, read pages).
    Counts(u64, u64),
    /// No entry (the process is gone and its entries were dropped, or never filled again).
    Gone,
}
