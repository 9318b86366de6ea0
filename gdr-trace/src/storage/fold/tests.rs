use super::*;
use crate::{
    events::storage::{FileClosed, StorageEvent},
    storage::{
        aggregate::report,
        snapshot::Snapshot,
        state::tests::{ctx, id, opened, snap_file, stats},
    },
};

fn closed(pid: u32, fd: i32, ino: u64, reads: u64, bytes: u64) -> StorageEvent {
    StorageEvent::Closed(FileClosed { ctx: ctx(pid), fd, id: id(ino, 0), counters: stats(reads, bytes) })
}

fn fill(pid: u32, ino: u64, pages: u64) -> SnapFill {
    SnapFill { pid, dev: (8 << 20) | 1, ino, pages, read_pages: pages, path: None }
}

#[test]
fn a_running_process_keeps_its_largest_closed_files_and_sums_the_rest() {
    let mut s = StorageState::new();
    let n = 10_000u64;
    let mut bytes = 0;
    for i in 0..n {
        s.record(opened(10, 3, &format!("/d/f{i}"), 1000 + i, 0));
        // File 5000 is the largest; every other reads 1-7 pages.
        let b = if i == 5000 { 1 << 30 } else { 4096 * (i % 7 + 1) };
        bytes += b;
        s.record(closed(10, 3, 1000 + i, 1, b));
        assert!(s.procs[&10].files.len() <= FOLD_AT + 1, "file {i}: {} held", s.procs[&10].files.len());
    }
    let r = report(&s);
    let p = &r.procs[0];
    assert!(p.files.len() <= FOLD_AT, "{} files listed", p.files.len());
    assert_eq!(p.files.len() as u64 + p.files_folded, n, "every file listed or counted as folded");
    assert_eq!(p.files[0].path, "/d/f5000", "the largest keeps its own state");
    assert_eq!((p.reads, p.bytes_read), (n, bytes), "folded files stay in the totals");
    let hist: u64 = p.read_size_hist.values().sum();
    assert_eq!(hist, n, "and in the read-size histogram");
    let by: u64 = p.bytes_by_verdict.values().map(|v| v.bytes).sum();
    assert_eq!(by, bytes);
}

#[test]
fn open_files_are_never_folded() {
    let mut s = StorageState::new();
    // 100 descriptors open (as the kernel's map shows them), then 500 files opened and closed.
    let live: Vec<_> = (0..100).map(|fd| snap_file(10, 100 + fd, 1 + fd as u64, 0, stats(1, 4096))).collect();
    s.snapshot(Snapshot { files: live.clone(), ..Snapshot::default() });
    for i in 0..500u64 {
        s.record(opened(10, 3, &format!("/d/c{i}"), 10_000 + i, 0));
        s.record(closed(10, 3, 10_000 + i, 1, 4096));
    }
    s.snapshot(Snapshot { files: live, ..Snapshot::default() });
    let p = &s.procs[&10];
    let open =
        (1..=100u64).filter(|ino| p.files.contains_key(&FileRef::Inode { dev: (8 << 20) | 1, ino: *ino }));
    assert_eq!(open.count(), 100, "every open file keeps its own state");
    assert!(p.files.len() <= 100 + FOLD_AT, "{} held", p.files.len());
    assert_eq!(p.folded.files as usize + p.files.len(), 600);
    let r = report(&s);
    assert_eq!(r.procs[0].reads, 600);
}

#[test]
fn page_fills_of_folded_files_count_once_and_their_growth_still_counts() {
    let mut s = StorageState::new();
    let n = 300u64;
    let mut fills = Vec::new();
    for i in 0..n {
        s.record(opened(10, 3, &format!("/d/f{i}"), 1000 + i, 0));
        s.record(closed(10, 3, 1000 + i, 1, 4096));
        // The kernel's map: one entry per file, cumulative, read at each tick.
        fills.push(fill(10, 1000 + i, 1));
        s.snapshot(Snapshot { fills: fills.clone(), ..Snapshot::default() });
    }
    assert!(s.procs[&10].folded.files > 0);
    let r = report(&s);
    assert_eq!((r.procs[0].pages_filled, r.procs[0].read_pages_filled), (n, n), "each fill once");
    // A folded file is filled again (mmap, readahead of another reader in the process).
    fills[0].pages = 5;
    fills[0].read_pages = 5;
    s.snapshot(Snapshot { fills: fills.clone(), ..Snapshot::default() });
    assert_eq!(report(&s).procs[0].pages_filled, n + 4, "the growth of a folded file's entry");
    assert!(s.folded_fills() <= n as usize);
    // The kernel forgot the entries (the live layer took them): so does the state, and a new
    // entry for the same file counts from zero.
    s.snapshot(Snapshot::default());
    assert_eq!(s.folded_fills(), 0, "entries the kernel no longer holds are forgotten");
    s.snapshot(Snapshot { fills: vec![fill(10, 1000, 2)], ..Snapshot::default() });
    assert_eq!(report(&s).procs[0].pages_filled, n + 4 + 2);
}

#[test]
fn a_fill_entry_taken_from_the_kernel_adds_its_last_growth_then_counts_anew() {
    use crate::storage::folded::Taken;
    let mut s = StorageState::new();
    let mut fills = Vec::new();
    for i in 0..(FOLD_AT as u64 + 1) {
        s.record(opened(10, 3, &format!("/d/f{i}"), 1000 + i, 0));
        s.record(closed(10, 3, 1000 + i, 1, 4096));
        fills.push(fill(10, 1000 + i, 2));
    }
    s.snapshot(Snapshot { fills, ..Snapshot::default() });
    let keys = s.folded_fill_keys();
    assert_eq!(keys.len(), FOLD_AT + 1 - KEEP_CLOSED, "every folded file with fills");
    let before = report(&s).procs[0].pages_filled;
    // The first entry grew by 3 pages between the snapshot and the take; the second is gone.
    assert_eq!(s.fill_taken(keys[0], Taken::Counts(5, 5)), (3, 3));
    assert_eq!(s.fill_taken(keys[1], Taken::Gone), (0, 0));
    assert_eq!(s.folded_fills(), keys.len() - 2);
    // The growth comes in with the next snapshot, with the kernel's new entry for the taken
    // file: all of that is new.
    s.snapshot(Snapshot {
        fills: vec![fill(10, keys[0].2, 1)],
        folded_growth: vec![(10, 3, 3)],
        ..Snapshot::default()
    });
    assert_eq!(report(&s).procs[0].pages_filled, before + 3 + 1);
}
