//! Recordings are files meant to be shared: they must not carry kernel addresses. A record's
//! `handle` is a `struct ib_umem *`, a P2P callback's data pointer or a userspace `ibv_mr *`
//! (a KASLR or ASLR leak); in a recording it becomes a per-recording id (1, 2, ...) given in
//! order of first appearance. The mapping is one-to-one for the whole recording, so replay
//! pairs registrations and releases exactly as live tracing did.

use std::collections::HashMap;

use crate::events::MrRecord;

#[derive(Debug, Default)]
pub struct HandleIds {
    ids: HashMap<u64, u64>,
}

impl HandleIds {
    /// `rec` as it is written: its handle replaced by its id (0, "none", stays 0).
    pub fn recorded(&mut self, rec: &MrRecord) -> MrRecord {
        let mut out = rec.clone();
        if rec.handle != 0 {
            let next = self.ids.len() as u64 + 1;
            out.handle = *self.ids.entry(rec.handle).or_insert(next);
        }
        out
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
            let mut rs = RecordingSink::new(
                &mut file,
                None,
                Posture::default(),
                vec![],
                Resolver::new("/nonexistent".as_ref()),
            );
            for r in &stream {
                rs.raw(&Event::Mr(r.clone()));
            }
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
}
