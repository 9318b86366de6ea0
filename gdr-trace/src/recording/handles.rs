//! Recordings are files meant to be shared: they must not carry kernel addresses, heap
//! pointers or secrets. A record's `handle` is a `struct ib_umem *`, a P2P callback's data
//! pointer or a userspace `ibv_mr *` (a KASLR or ASLR leak); in a recording it becomes a
//! per-recording id (1, 2, ...) given in order of first appearance. cuFile's `CUfileHandle_t`
//! and batch handles (heap pointers) get ids the same way. A CUDA IPC handle's 64 bytes open the
//! exporter's GPU memory to whoever holds them: a recording keeps a keyed hash instead (a key of
//! this recording's, never written), so an import still meets its export on replay. Each
//! mapping is one-to-one for the whole recording, so replay pairs everything as live tracing did.
//! User-space addresses are moved by a secret offset per process (`addrs`), which keeps every
//! range replay attributes I/O by.

use std::{
    collections::HashMap,
    hash::{BuildHasher, RandomState},
};

use crate::events::{cuda::CudaCall, storage::StorageEvent, MrRecord};

/// Ids given in order of first appearance (0, "none", stays 0).
#[derive(Debug, Default)]
struct Ids(HashMap<u64, u64>);

impl Ids {
    fn id(&mut self, v: u64) -> u64 {
        if v == 0 {
            return 0;
        }
        let next = self.0.len() as u64 + 1;
        *self.0.entry(v).or_insert(next)
    }
}

#[derive(Debug, Default)]
pub struct HandleIds {
    mr: Ids,
    cufile: Ids,
    batch: Ids,
    /// This recording's key for IPC handles (random, never written).
    key: RandomState,
    addrs: super::addrs::Addrs,
}

impl HandleIds {
    /// `rec` as it is written: its handle replaced by its id.
    pub fn recorded(&mut self, rec: &MrRecord) -> MrRecord {
        let mut out = rec.clone();
        out.handle = self.mr.id(rec.handle);
        self.addrs.record(&mut out);
        out
    }

    /// A storage event as it is written: cuFile and batch handles replaced by their ids.
    pub fn storage(&mut self, ev: &StorageEvent) -> StorageEvent {
        let mut out = ev.clone();
        if let StorageEvent::Gds(call) = &mut out {
            call.handle = self.cufile.id(call.handle);
            call.detail.batch_id = self.batch.id(call.detail.batch_id);
        }
        self.addrs.storage(&mut out);
        out
    }

    /// A CUDA call as it is written: an IPC handle's bytes replaced by their keyed hash.
    pub fn cuda(&mut self, c: &CudaCall) -> CudaCall {
        let mut out = c.clone();
        out.handle = c.handle.as_ref().map(|h| format!("keyed:{:016x}", self.key.hash_one(h)));
        self.addrs.cuda(&mut out);
        out
    }

    /// The kernel's counters as written (`addrs`).
    pub fn counters(&self, c: &crate::counters::Counters) -> crate::counters::Counters {
        self.addrs.counters(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        audit::{identity::Resolver, Posture},
        events::{Context, Event, MrKind},
        recording::{Header, Item, Reader, RecordingSink},
        sink::Sink,
    };

    /// What the recording sink writes for `events` (no header), appended to `file`.
    fn record(file: &mut Vec<u8>, events: &[Event]) {
        let mut rs = RecordingSink::new(
            file,
            None,
            Posture::default(),
            vec![],
            Resolver::new("/nonexistent".as_ref()),
        );
        for ev in events {
            rs.raw(ev);
        }
    }

    #[test]
    fn a_recording_holds_ids_not_kernel_pointers_and_pairs_like_the_pointers() {
        let umem = 0xffff_8881_0a2b_3c00u64;
        let other = 0xffff_8881_0a2b_4c00u64;
        let ctx = |ts| Context { pid: 7, tid: 7, comm: "w".into(), uid: 0, cgroup_id: 1, ts_ns: ts };
        let stream = [
            MrRecord::at(MrKind::Register, "fexit:ib_umem_get", ctx(1), 0x1000, 4096, umem),
            MrRecord::at(MrKind::Register, "fexit:ib_umem_get", ctx(2), 0x9000, 4096, other),
            MrRecord::at(MrKind::Release, "fentry:ib_umem_release", ctx(3), 0, 0, umem),
            MrRecord::at(MrKind::Register, "fexit:ib_umem_get", ctx(4), 0x5000, 4096, umem),
            MrRecord::at(MrKind::Release, "fentry:ib_umem_release", ctx(5), 0, 0, 0),
        ];
        let mut file = Vec::new();
        {
            let mut header = Vec::new();
            let h = Header {
                host: "node-1".into(),
                kernel: serde_json::json!({ "kernel": "6.1.0" }),
                hooks: serde_json::json!([]),
                started_unix_ms: 1,
                ..Default::default()
            };
            serde_json::to_writer(&mut header, &Item::Header(h)).unwrap();
            file.extend(header);
            file.push(b'\n');
            let events: Vec<Event> = stream.iter().cloned().map(Event::Mr).collect();
            record(&mut file, &events);
        }
        let text = String::from_utf8(file.clone()).unwrap();
        for p in [umem, other] {
            assert!(!text.contains(&p.to_string()) && !text.contains(&format!("{p:x}")), "{text}");
        }
        let (_, reader) = Reader::open(std::io::Cursor::new(file)).unwrap();
        let handles: Vec<u64> = reader
            .filter_map(|i| match i {
                Ok(Item::Record(r)) => Some(r.handle),
                _ => None,
            })
            .collect();
        assert_eq!(handles, [1, 2, 1, 1, 0], "same pointer, same id; none stays none");
    }

    #[test]
    fn cufile_handles_and_ipc_handle_bytes_are_not_written_and_still_pair_on_replay() {
        use crate::events::{
            cuda::{CudaCall, CudaOp},
            storage::{GdsCall, GdsDetail},
        };
        use gdr_trace_common::storage::{GdsOp, GdsTally};
        let (fh, batch) = (0x5581_2e3a_91c0u64, 0x5581_2e3a_a000u64);
        let secret = "ab".repeat(64);
        let ctx = |pid| Context { pid, tid: pid, comm: "w".into(), uid: 0, cgroup_id: 1, ts_ns: 1 };
        let gds = |op, handle, batch_id| {
            Event::Storage(StorageEvent::Gds(GdsCall {
                ctx: ctx(7),
                op,
                source: "uprobe:x".into(),
                fd: Some(3),
                handle,
                buf: 0x7000,
                length: 4096,
                file_offset: 0,
                buf_offset: 0,
                ret: 4096,
                tally: GdsTally::default(),
                batch: None,
                detail: GdsDetail { batch_id, ..Default::default() },
            }))
        };
        let ipc = |pid, op, handle: &str| {
            Event::Cuda(CudaCall {
                ctx: ctx(pid),
                op,
                function: String::new(),
                source: Default::default(),
                addr: 0x7000,
                length: 4096,
                flags: 0,
                aux: -1,
                ret: 0,
                device: Some(0),
                peer_device: None,
                handle: Some(handle.to_string()),
                file: None,
            })
        };
        let stream = [
            gds(GdsOp::HandleRegister, fh, 0),
            gds(GdsOp::Read, fh, 0),
            gds(GdsOp::BatchSubmit, fh, batch),
            gds(GdsOp::HandleDeregister, fh, 0),
            ipc(7, CudaOp::IpcExport, &secret),
            ipc(8, CudaOp::IpcImport, &secret),
            ipc(8, CudaOp::IpcImport, &"cd".repeat(64)),
        ];
        let mut file = Vec::new();
        record(&mut file, &stream);
        let text = String::from_utf8(file.clone()).unwrap();
        for p in [fh, batch] {
            assert!(!text.contains(&p.to_string()) && !text.contains(&format!("{p:x}")), "{text}");
        }
        assert!(!text.contains("abab"), "IPC handle bytes in the recording: {text}");
        let mut handles = vec![];
        let mut tokens = vec![];
        for line in text.lines() {
            match serde_json::from_str::<Item>(line) {
                Ok(Item::Storage { ev: StorageEvent::Gds(c) }) => handles.push((c.handle, c.detail.batch_id)),
                Ok(Item::Cuda { ev }) => tokens.push(ev.handle.unwrap()),
                _ => {}
            }
        }
        assert_eq!(handles, [(1, 0), (1, 0), (1, 1), (1, 0)], "one handle, one id; no batch stays none");
        assert_eq!(tokens[0], tokens[1], "an import still meets its export");
        assert_ne!(tokens[1], tokens[2]);
    }
}
