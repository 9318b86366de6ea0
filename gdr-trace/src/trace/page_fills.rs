//! Takes page-fill entries of folded files out of the kernel map (`PAGE_FILLS`), each with its
//! last counts in the same step (BPF_MAP_LOOKUP_AND_DELETE_ELEM): a running process that reads
//! files for hours would otherwise fill the map (16,384 entries) with files it closed long ago,
//! and every later fill would be lost (counted as `storage_map_full`). A page filled after the
//! take starts a new entry, which the state counts from zero.

use std::os::fd::{AsFd, AsRawFd};

use crate::loader::MapSet;
use gdr_trace_common::storage::{maps, FillKey, PageFills};

use crate::storage::folded::{FillKey as Key, Taken};

/// `union bpf_attr` as the map element commands read it.
#[repr(C)]
struct ElemAttr {
    map_fd: u32,
    _pad: u32,
    key: u64,
    value: u64,
    flags: u64,
}

const BPF_MAP_LOOKUP_AND_DELETE_ELEM: libc::c_long = 21;

fn lookup_and_delete(fd: i32, key: &FillKey) -> std::io::Result<PageFills> {
    let mut v = PageFills::default();
    let attr = ElemAttr {
        map_fd: fd as u32,
        _pad: 0,
        key: key as *const FillKey as u64,
        value: &mut v as *mut PageFills as u64,
        flags: 0,
    };
    // SAFETY: attr points at a key and a value of the map's sizes, alive for the call.
    let r = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            BPF_MAP_LOOKUP_AND_DELETE_ELEM,
            &attr as *const ElemAttr,
            std::mem::size_of::<ElemAttr>() as u32,
        )
    };
    if r < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(v)
    }
}

/// Takes the entries of exited processes' files: those that were there, with their counts.
pub fn exited(ebpf: &MapSet, keys: &[Key]) -> Vec<(FillKey, PageFills)> {
    fills(ebpf, keys)
        .into_iter()
        .filter_map(|((tgid, dev, ino), t)| match t {
            Taken::Counts(pages, read_pages) => {
                Some((FillKey { tgid, dev, ino }, PageFills { pages, read_pages }))
            }
            Taken::Gone => None,
        })
        .collect()
}

/// Takes each entry; keys it could not take (the map missing, an unexpected error) are left
/// out of the answer, so the state keeps them and counts their growth at the next snapshot.
pub fn fills(ebpf: &MapSet, keys: &[Key]) -> Vec<(Key, Taken)> {
    let Some(aya::maps::Map::HashMap(data)) = ebpf.map(maps::PAGE_FILLS) else { return vec![] };
    let fd = data.fd().as_fd().as_raw_fd();
    let mut out = Vec::with_capacity(keys.len());
    for &(tgid, dev, ino) in keys {
        match lookup_and_delete(fd, &FillKey { tgid, dev, ino }) {
            Ok(v) => out.push(((tgid, dev, ino), Taken::Counts(v.pages, v.read_pages))),
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => out.push(((tgid, dev, ino), Taken::Gone)),
            // Hash maps take lookup-and-delete from Linux 5.14: before, the entries stay (and
            // the map may fill, as it did before folding existed).
            Err(e) => {
                tracing::debug!("PAGE_FILLS lookup-and-delete: {e}");
                break;
            }
        }
    }
    out
}
