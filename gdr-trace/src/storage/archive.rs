//! Final storage reports of processes that exited, after their state was dropped: bounded (the
//! largest by bytes moved), for the summaries that list every process seen.

use super::aggregate::ProcReport;

#[derive(Debug, Default)]
pub struct Archive {
    reports: Vec<ProcReport>,
    /// Final reports dropped past the bound.
    pub dropped: u64,
}

fn moved(r: &ProcReport) -> u64 {
    r.bytes_by_verdict.values().map(|b| b.bytes).sum()
}

impl Archive {
    /// Keeps `r` (marked archived: already reported, its growth already counted) while it is
    /// among the largest.
    pub fn keep(&mut self, mut r: ProcReport) {
        r.archived = true;
        // The files cut here are still the process's: counted, so its count never shrinks.
        r.files_folded += r.files.len().saturating_sub(FILES_KEPT) as u64;
        r.files.truncate(FILES_KEPT);
        self.reports.push(r);
        if self.reports.len() > crate::archive::MAX_ARCHIVED {
            let kept = self.reports.iter().enumerate().map(|(i, r)| (i, moved(r), i as u64));
            if let Some(smallest) = crate::archive::to_drop(kept) {
                self.reports.swap_remove(smallest);
                self.dropped += 1;
            }
        }
    }

    pub fn reports(&self) -> &[ProcReport] {
        &self.reports
    }
}

/// Files kept in an archived report (the largest: reports list them by bytes moved).
pub const FILES_KEPT: usize = 16;

#[cfg(test)]
mod tests {
    use crate::{
        events::storage::{FileClosed, StorageEvent},
        storage::{
            aggregate::report,
            state::tests::{ctx, id, opened, stats},
            state::StorageState,
        },
    };

    #[test]
    fn an_archived_process_keeps_its_file_count() {
        // "files=55" became "files=16" once the process exited: the cut files were forgotten.
        let mut s = StorageState::new();
        for i in 0..55u64 {
            s.record(opened(10, 3, &format!("/d/f{i}"), 1000 + i, 0));
            let counters = stats(1, 4096 * (i + 1));
            s.record(StorageEvent::Closed(FileClosed { ctx: ctx(10), fd: 3, id: id(1000 + i, 0), counters }));
        }
        let mut r = report(&s).procs.remove(0);
        r.files_folded = 4;
        let before = r.files.len() as u64 + r.files_folded;
        let mut a = super::Archive::default();
        a.keep(r);
        let kept = &a.reports()[0];
        assert_eq!(kept.files.len(), super::FILES_KEPT);
        assert_eq!(kept.files.len() as u64 + kept.files_folded, before, "{before} files before");
    }
}
