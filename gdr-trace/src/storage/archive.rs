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
