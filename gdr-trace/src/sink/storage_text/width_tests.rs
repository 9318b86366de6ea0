//! The storage section fits 80- and 100-column terminals without splitting a word or
//! a number (it printed `WRITTE`/`N`, `page-ca`/`che`, `50.0`/`MiB`).

use gdr_trace_common::storage::FileIoStats;

use super::*;
use crate::{
    storage::{
        aggregate::report,
        state::{tests::snap_file, SnapFile, Snapshot, StorageState},
    },
    term::{with_style, Style},
};

fn busy() -> StorageReport {
    let mut s = StorageState::new();
    let files = (1..=3u32)
        .flat_map(|pid| {
            (3..6u32).map(move |fd| {
                let mut stats = FileIoStats::zeroed();
                (stats.reads, stats.bytes_read, stats.seq_reads) = (800, 50 << 20, 800);
                (stats.writes, stats.bytes_written) = (3, 12 << 20);
                let path =
                    format!("/mnt/datasets/imagenet/train/shard-{pid:05}-of-01024/part-{fd:03}.tfrecord");
                SnapFile { path: Some(path), ..snap_file(pid, fd, (pid * 10 + fd).into(), 0, stats) }
            })
        })
        .collect();
    s.snapshot(Snapshot { files, ..Default::default() });
    report(&s)
}

#[test]
fn the_storage_section_fits_80_and_100_columns_with_every_figure_whole() {
    let r = busy();
    for width in [80u16, 100] {
        let text = with_style(Style::terminal(width), || summary(&r, true, true).unwrap());
        let long: Vec<&str> = text.lines().filter(|l| l.chars().count() > usize::from(width)).collect();
        assert!(long.is_empty(), "{width} columns: {long:#?}\n{text}");
        for whole in
            ["page-cache", "800 reads (50.0 MiB, 100% sequential)", "12.0 MiB written", "0 pages filled"]
        {
            assert!(text.contains(whole), "{width} columns: {whole:?} split or missing:\n{text}");
        }
        // Paths are shortened from the middle: both ends stay.
        assert!(text.contains("/mnt/datasets/") && text.contains("part-003.tfrecord"), "{text}");
    }
    // Wide terminals keep the table.
    let wide = with_style(Style::terminal(160), || summary(&r, true, true).unwrap());
    assert!(wide.contains("WRITTEN"), "{wide}");
}

#[test]
fn paths_shorten_from_the_middle() {
    assert_eq!(shorten_middle("/a/b", 10), "/a/b");
    let s = shorten_middle("/mnt/datasets/imagenet/train/part-003.tfrecord", 20);
    assert_eq!(s.chars().count(), 20);
    assert!(s.starts_with("/mnt/data") && s.ends_with(".tfrecord") && s.contains('…'), "{s}");
}
