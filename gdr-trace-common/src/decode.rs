//! Userspace decoding of ring-buffer records. Records may be unaligned: copy, never cast.

use crate::{storage::decode::StorageRecord, EventHeader, EventKind, MrEvent, Shape};

// SAFETY: plain-old-data, `#[repr(C)]`, every field an integer or integer array, no implicit
// padding (asserted by the size tests below).
unsafe impl aya::Pod for EventHeader {}
unsafe impl aya::Pod for MrEvent {}
unsafe impl aya::Pod for crate::MrArgs {}
unsafe impl aya::Pod for crate::LiveUmem {}
unsafe impl aya::Pod for crate::mr::bytes::ByteKey {}
unsafe impl aya::Pod for crate::mr::bytes::ByteCount {}
unsafe impl aya::Pod for crate::mr::bytes::ProviderOps {}
// SAFETY: as above.
unsafe impl aya::Pod for crate::mr::bytes::RecvPosted {}
// SAFETY: as above.
unsafe impl aya::Pod for crate::mr::bytes::RecvKey {}

/// A decoded record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Record {
    Mr(EventKind, MrEvent),
    /// Storage path (`crate::storage`).
    Storage(StorageRecord),
    /// A libcuda control call (`crate::cuda`).
    Cuda(crate::p2p::CudaEvent),
    /// A process mapped a file executable (the header is the whole record).
    LibraryMapped(EventHeader),
    /// A traced process ended (`EventKind::ProcessExit`): the header is the record.
    Exit(EventHeader),
}

/// Why a record could not be decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DecodeError {
    TooShort {
        need: usize,
        got: usize,
    },
    /// Longer than its kind's struct: the eBPF side writes exactly one, so another length means
    /// an object from another build (or a corrupt ring), not a record to read a prefix of.
    TooLong {
        want: usize,
        got: usize,
    },
    UnknownKind(u32),
}

impl core::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::TooShort { need, got } => write!(f, "record too short: {got} bytes, need {need}"),
            Self::TooLong { want, got } => write!(f, "record too long: {got} bytes, its kind has {want}"),
            Self::UnknownKind(k) => write!(f, "unknown record kind {k}"),
        }
    }
}

pub(crate) fn read<T: Copy>(bytes: &[u8]) -> Result<T, DecodeError> {
    let need = core::mem::size_of::<T>();
    if bytes.len() < need {
        return Err(DecodeError::TooShort { need, got: bytes.len() });
    }
    // SAFETY: length checked above; T is Pod; read_unaligned tolerates any alignment.
    Ok(unsafe { core::ptr::read_unaligned(bytes.as_ptr().cast::<T>()) })
}

/// A whole record of type `T`: exactly its size.
fn record<T: Copy>(bytes: &[u8]) -> Result<T, DecodeError> {
    let want = core::mem::size_of::<T>();
    if bytes.len() > want {
        return Err(DecodeError::TooLong { want, got: bytes.len() });
    }
    read(bytes)
}

/// Decodes one ring-buffer record: the header says which family, the family's struct is read
/// once.
pub fn decode(bytes: &[u8]) -> Result<Record, DecodeError> {
    let hdr: EventHeader = read(bytes)?;
    let kind = EventKind::from_u32(hdr.kind).ok_or(DecodeError::UnknownKind(hdr.kind))?;
    Ok(match kind.shape() {
        Shape::Mr => Record::Mr(kind, record(bytes)?),
        Shape::FileOpen => Record::Storage(StorageRecord::Open(record(bytes)?)),
        Shape::FileClose => Record::Storage(StorageRecord::Close(record(bytes)?)),
        Shape::Gds => Record::Storage(StorageRecord::Gds(record(bytes)?)),
        Shape::Nvfs => Record::Storage(StorageRecord::Nvfs(kind, record(bytes)?)),
        Shape::Cuda => Record::Cuda(record(bytes)?),
        Shape::Mapped => Record::LibraryMapped(record(bytes)?),
        Shape::Exit => Record::Exit(record(bytes)?),
    })
}

/// The bytes of a record, as the eBPF side writes them (tests and benchmarks: `testkit`).
#[cfg(any(test, feature = "testkit"))]
pub fn encode<T: aya::Pod>(value: &T) -> &[u8] {
    // SAFETY: T is Pod (no padding, no pointers), so all of its bytes are initialised.
    unsafe { core::slice::from_raw_parts((value as *const T).cast::<u8>(), core::mem::size_of::<T>()) }
}

/// A NUL-padded C string field as text (lossy; stops at the first NUL).
pub fn c_str(bytes: &[u8]) -> &str {
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    core::str::from_utf8(&bytes[..end]).unwrap_or("?")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{AttachKind, HookId, COMM_LEN};

    #[test]
    fn sizes_have_no_implicit_padding() {
        assert_eq!(core::mem::size_of::<EventHeader>(), 56);
        assert_eq!(core::mem::size_of::<MrEvent>(), 56 + 6 * 8 + 8 + 8 + 8 + 64 + 32 + 4 * 8);
        assert_eq!(core::mem::size_of::<crate::MrArgs>(), 48);
        assert_eq!(core::mem::size_of::<crate::LiveUmem>(), 16);
        assert_eq!(core::mem::size_of::<crate::mr::bytes::ByteKey>(), 3 * 4);
        assert_eq!(core::mem::size_of::<crate::mr::bytes::ByteCount>(), 4 * 8);
        assert_eq!(core::mem::size_of::<crate::mr::bytes::RecvKey>(), 4 + 4 + 8);
        assert_eq!(core::mem::size_of::<crate::mr::bytes::RecvPosted>(), 3 * 4 + 4 + 8);
    }

    /// Each kind decodes from exactly its declared size (header and payload), refuses a byte
    /// less or more, and comes back as its own kind where the record carries it.
    #[test]
    fn every_kind_decodes_at_exactly_its_declared_size() {
        let mut buf = [0u8; 1024];
        for &kind in EventKind::ALL {
            assert_eq!(EventKind::from_u32(kind as u32), Some(kind));
            let n = kind.size();
            assert!(n >= core::mem::size_of::<EventHeader>() && n < buf.len(), "{kind:?}");
            buf[..4].copy_from_slice(&(kind as u32).to_ne_bytes());
            let got = decode(&buf[..n]).unwrap_or_else(|e| panic!("{kind:?}: {e}"));
            match got {
                Record::Mr(k, _) | Record::Storage(StorageRecord::Nvfs(k, _)) => assert_eq!(k, kind),
                _ => {}
            }
            assert!(matches!(decode(&buf[..n - 1]), Err(DecodeError::TooShort { .. })), "{kind:?}");
            assert!(matches!(decode(&buf[..n + 1]), Err(DecodeError::TooLong { .. })), "{kind:?}");
        }
        assert_eq!(EventKind::from_u32(0), None);
    }

    #[test]
    fn mr_event_round_trips_unaligned() {
        let mut ev = MrEvent::zeroed();
        ev.hdr.kind = EventKind::KernelMrRegister as u32;
        ev.hdr.hook = HookId::IbUmemGet as u32;
        ev.hdr.attach = AttachKind::Fexit as u32;
        ev.hdr.pid = 42;
        ev.hdr.comm[..4].copy_from_slice(b"perf");
        ev.addr = 0x7f00_0000_1000;
        ev.length = 1 << 20;
        ev.ret = -14;
        ev.access = 0b111;
        ev.device[..4].copy_from_slice(b"rxe0");
        // Put it at an odd offset, as a ring buffer may.
        let mut buf = [0u8; 1 + core::mem::size_of::<MrEvent>()];
        buf[1..].copy_from_slice(encode(&ev));
        match decode(&buf[1..]).unwrap() {
            Record::Mr(kind, got) => {
                assert_eq!(kind, EventKind::KernelMrRegister);
                assert_eq!(got, ev);
                assert_eq!(c_str(&got.device), "rxe0");
                assert_eq!(c_str(&got.hdr.comm[..COMM_LEN]), "perf");
            }
            other => panic!("not an MR record: {other:?}"),
        }
    }

    #[test]
    fn library_mapped_is_the_header_alone() {
        let mut h = EventHeader::zeroed();
        h.kind = EventKind::LibraryMapped as u32;
        h.hook = HookId::SysExitMmap as u32;
        h.pid = 4242;
        assert_eq!(decode(encode(&h)), Ok(Record::LibraryMapped(h)));
        assert!(matches!(decode(&encode(&h)[..40]), Err(DecodeError::TooShort { need: 56, got: 40 })));
    }

    #[test]
    fn short_long_and_unknown_records_are_errors() {
        let ev = MrEvent::zeroed();
        let bytes = encode(&ev);
        assert_eq!(decode(&bytes[..10]), Err(DecodeError::TooShort { need: 56, got: 10 }));
        let mut bad = ev;
        bad.hdr.kind = 999;
        assert_eq!(decode(encode(&bad)), Err(DecodeError::UnknownKind(999)));
        let mut short = ev;
        short.hdr.kind = EventKind::UserMrRegister as u32;
        assert!(matches!(decode(&encode(&short)[..60]), Err(DecodeError::TooShort { .. })));
        // One byte more than the struct: refused, not read as a prefix.
        let mut long = encode(&short).to_vec();
        long.push(0);
        let want = core::mem::size_of::<MrEvent>();
        assert_eq!(decode(&long), Err(DecodeError::TooLong { want, got: want + 1 }));
    }
}
