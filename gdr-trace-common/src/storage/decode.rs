//! Pod impls for the storage records and maps (userspace); `crate::decode::decode` reads the
//! records.

use super::*;
use crate::kinds::EventKind;

/// Decoded storage records.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StorageRecord {
    Open(FileOpenEvent),
    Close(FileCloseEvent),
    Gds(GdsEvent),
    Nvfs(EventKind, NvfsEvent),
}

// SAFETY: plain-old-data, `#[repr(C)]`, integers and integer arrays only, no implicit padding
// (asserted by the size test below).
unsafe impl aya::Pod for FileKey {}
unsafe impl aya::Pod for FileIo {}
unsafe impl aya::Pod for IoBatch {}
unsafe impl aya::Pod for FillKey {}
unsafe impl aya::Pod for PageFills {}
unsafe impl aya::Pod for UringLoose {}
unsafe impl aya::Pod for FileOpenEvent {}
unsafe impl aya::Pod for FileCloseEvent {}
unsafe impl aya::Pod for GdsEvent {}
unsafe impl aya::Pod for NvfsEvent {}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        decode::{decode, encode, DecodeError, Record},
        EventKind,
    };

    #[test]
    fn sizes_have_no_implicit_padding() {
        use core::mem::size_of;
        assert_eq!(size_of::<FileIoStats>(), 8 * 8 + SIZE_BUCKETS * 8);
        assert_eq!(size_of::<FileIo>(), 8 + 4 * 4 + size_of::<FileIoStats>() + 8);
        assert_eq!(size_of::<FileKey>(), 8);
        assert_eq!(size_of::<IoBatch>(), 16 + size_of::<FileIoStats>());
        assert_eq!(size_of::<FillKey>(), 16);
        assert_eq!(size_of::<PageFills>(), 16);
        assert_eq!(size_of::<FileOpenEvent>(), 56 + 4 * 4 + 8 + 8 + PATH_LEN);
        assert_eq!(size_of::<FileCloseEvent>(), 56 + 8 + size_of::<FileIo>());
        assert_eq!(size_of::<GdsTally>(), 4 + 4 + 3 * 8 + 8 + 8);
        assert_eq!(size_of::<GdsArgs>(), 8 + 6 * 8 + 8 + 7 * 8 + 8 + 8 + size_of::<GdsTally>());
        assert_eq!(size_of::<GdsEvent>(), 56 + size_of::<GdsArgs>() + 8 + 8 + 8);
        assert_eq!(size_of::<NvfsEvent>(), 56 + 8 + 6 * 8 + 32);
    }

    /// Decodes the record placed at offset 1 of a buffer, as a ring buffer may place it.
    fn decode_at_odd_offset(bytes: &[u8]) -> Record {
        let mut v = [0u8; 512];
        v[1..1 + bytes.len()].copy_from_slice(bytes);
        decode(&v[1..1 + bytes.len()]).unwrap()
    }

    #[test]
    fn storage_records_round_trip_unaligned() {
        let mut open = FileOpenEvent::zeroed();
        open.hdr.kind = EventKind::FileOpen as u32;
        open.fd = 5;
        open.dirfd = -100;
        open.ino = 1234;
        open.path[..9].copy_from_slice(b"/data/x.b");
        let got = decode_at_odd_offset(encode(&open));
        assert_eq!(got, Record::Storage(StorageRecord::Open(open)));

        let mut close = FileCloseEvent { hdr: open.hdr, fd: 5, _pad0: 0, file: FileIo::zeroed() };
        close.hdr.kind = EventKind::FileClose as u32;
        close.file.stats.bytes_read = 4096;
        close.file.stats.read_hist[3] = 1;
        let got = decode_at_odd_offset(encode(&close));
        assert_eq!(got, Record::Storage(StorageRecord::Close(close)));

        let mut gds = GdsEvent { hdr: open.hdr, ret: 1 << 20, ..Default::default() };
        gds.hdr.kind = EventKind::GdsCall as u32;
        gds.args.op = GdsOp::Read as u32;
        gds.args.tally.nvfs_calls = 1;
        let got = decode_at_odd_offset(encode(&gds));
        assert_eq!(got, Record::Storage(StorageRecord::Gds(gds)));

        let nv = NvfsEvent {
            hdr: EventHeader { kind: EventKind::NvfsDirectIo as u32, ..open.hdr },
            fd: -1,
            ret: 4096,
            size: 4096,
            ..Default::default()
        };
        let got = decode_at_odd_offset(encode(&nv));
        assert_eq!(got, Record::Storage(StorageRecord::Nvfs(EventKind::NvfsDirectIo, nv)));
        assert!(matches!(decode(&encode(&nv)[..100]), Err(DecodeError::TooShort { .. })));
        // A worker thread's POSIX I/O on a cuFile descriptor: the same payload, its own kind.
        let w =
            NvfsEvent { hdr: EventHeader { kind: EventKind::GdsWorkerIo as u32, ..open.hdr }, fd: 5, ..nv };
        let got = decode_at_odd_offset(encode(&w));
        assert_eq!(got, Record::Storage(StorageRecord::Nvfs(EventKind::GdsWorkerIo, w)));
        assert_eq!(EventKind::from_u32(15), Some(EventKind::GdsWorkerIo));
    }

    use crate::EventHeader;
}
