use std::collections::HashMap;

use gdr_trace_common::p2p::verdict;

use super::*;
use crate::events::cuda::{CudaCall, CudaOp};

fn call(pid: u32, uid: u32, op: CudaOp, addr: u64, length: u64) -> CudaCall {
    CudaCall {
        ctx: Context { pid, tid: pid, uid, comm: format!("p{pid}"), ..Default::default() },
        op,
        function: format!("{op:?}"),
        source: Default::default(),
        addr,
        length,
        flags: 0,
        aux: -1,
        ret: 0,
        device: Some(0),
        peer_device: None,
        handle: None,
        file: None,
    }
}

#[test]
fn an_ipc_import_names_its_exporter_by_the_handle_bytes() {
    let mut s = P2pState::default();
    let mut export = call(10, 1000, CudaOp::IpcExport, 0x7000, 2 << 20);
    export.handle = Some("ab".repeat(64));
    assert_eq!(s.record(&export), None);
    let mut import = call(20, 2000, CudaOp::IpcImport, 0x9000, 0);
    import.handle = Some("ab".repeat(64));
    let ipc = s.record(&import).expect("an import is reported");
    assert_eq!((ipc.exporter_pid, ipc.exporter_uid, ipc.length), (Some(10), Some(1000), Some(2 << 20)));
    import.handle = Some("cd".repeat(64));
    let unknown = s.record(&import).unwrap();
    assert_eq!((unknown.exporter_pid, unknown.length), (None, None), "a handle never exported");
}

#[test]
fn a_cumem_import_names_its_exporter_by_the_fds_file() {
    let mut s = P2pState::default();
    let mut export = call(10, 0, CudaOp::MemExport, 0x1, 0);
    export.file = Some((5, 4242));
    s.record(&export);
    let mut import = call(11, 0, CudaOp::MemImport, 0x2, 0);
    import.file = Some((5, 4242));
    assert_eq!(s.record(&import).unwrap().exporter_pid, Some(10));
    import.file = Some((5, 1));
    assert_eq!(s.record(&import).unwrap().exporter_pid, None);
}

#[test]
fn host_mrs_inside_cuda_pinned_allocations_say_how_they_were_pinned() {
    let mut s = P2pState::default();
    s.record(&call(7, 0, CudaOp::HostAlloc, 0x10_0000, 4 << 20));
    s.record(&call(7, 0, CudaOp::HostRegister, 0x100_0000, 1 << 20));
    assert_eq!(s.host_alloc(7, 0x10_0000, 4 << 20), Some(HostAlloc::CuMemHostAlloc));
    assert_eq!(s.host_alloc(7, 0x20_0000, 4096), Some(HostAlloc::CuMemHostAlloc), "inside");
    assert_eq!(s.host_alloc(7, 0x10_0000, (4 << 20) + 1), None, "runs past the end");
    assert_eq!(s.host_alloc(7, 0x100_0000, 4096), Some(HostAlloc::CuMemHostRegister));
    assert_eq!(s.host_alloc(8, 0x10_0000, 4096), None, "another process");
    let mut failed = call(7, 0, CudaOp::HostAlloc, 0x900_0000, 4096);
    failed.ret = 2;
    s.record(&failed);
    assert_eq!(s.host_alloc(7, 0x900_0000, 4096), None, "a failed allocation pins nothing");
    s.record(&call(7, 0, CudaOp::HostFree, 0x10_0000, 0));
    assert_eq!(s.host_alloc(7, 0x10_0000, 4096), None, "freed");
}

#[test]
fn the_summary_gives_each_pair_its_verdict_and_keeps_exited_processes() {
    let mut s = P2pState::default();
    let copies = [
        P2pCopies {
            pid: 5,
            src_device: 0,
            dst_device: 1,
            verdict: verdict::DIRECT,
            calls: 3,
            bytes: 3 << 20,
        },
        P2pCopies { pid: 5, src_device: 1, dst_device: 0, verdict: verdict::STAGED, calls: 2, bytes: 8192 },
    ];
    let peers = [PeerEnabled { pid: 5, device: 0, peer_device: 1 }];
    let comms = HashMap::from([(5, "peer-copy".to_string())]);
    s.counters(&copies, &peers, &comms);
    let r = s.report();
    assert_eq!(r.processes.len(), 1);
    let p = &r.processes[0];
    assert_eq!((p.pid, p.comm.as_str()), (5, "peer-copy"));
    assert_eq!(p.pairs.len(), 2);
    assert_eq!((p.pairs[0].src_device, p.pairs[0].verdict, p.pairs[0].bytes), (0, "p2p-direct", 3 << 20));
    assert_eq!((p.pairs[1].src_device, p.pairs[1].verdict, p.pairs[1].calls), (1, "p2p-staged", 2));
    assert_eq!(p.peer_access, vec![PeerAccess { device: 0, peer_device: 1 }]);
    assert_eq!(p.staged_bytes(), 8192);
    // The process exited: the kernel maps no longer have it; its last counts stay.
    s.counters(&[], &[], &HashMap::new());
    assert_eq!(s.report(), r);
}

#[test]
fn staged_copies_count_where_the_host_side_is_known_pinned_memory() {
    use super::staged::{StagedCopies, StagedDir};
    let mut s = P2pState::default();
    s.record(&call(5, 0, CudaOp::HostAlloc, 0x10000, 0x10000));
    s.set_kernel_maps(5, vec![(0x80000, 0x90000)]);
    let c = |host, bytes| StagedCopies { pid: 5, dir: StagedDir::Dtoh, host, calls: 1, bytes };
    let copies = [c(0x10000, 10), c(0x88000, 20), c(0x40000, 40)];
    s.staged_counters(&copies);
    s.staged_counters(&[]);
    let got: Vec<_> = s.staged_copies().collect();
    assert_eq!(got.len(), 1, "a process that left the map keeps its last counts");
    let (pid, pinned, all) = &got[0];
    assert_eq!(*pid, 5);
    assert_eq!(pinned.iter().map(|c| c.bytes).collect::<Vec<_>>(), vec![10, 20], "call seen, kernel map");
    assert_eq!(all.len(), 3);
    assert_eq!(s.host_origin(5, 0x88000, 0x1000).evidence, Some(super::OriginEvidence::KernelMap));
    assert_eq!(s.host_origin(5, 0x10000, 0x1000).evidence, Some(super::OriginEvidence::CallSeen));
    assert_eq!(s.host_origin(5, 0x40000, 0x1000).origin, super::HostOrigin::Other);
}

#[test]
fn nvidia_kos_own_pin_and_map_tell_the_origin_when_no_call_was_seen() {
    let mut s = P2pState::default();
    let mut pin = call(6, 0, CudaOp::HostRegister, 0x10000, 0x4000);
    pin.source = "kprobe:os_lock_user_pages".into();
    s.record(&pin);
    let mut map = call(6, 0, CudaOp::HostAlloc, 0x80000, 0x10000);
    map.source = "kprobe:nvidia_mmap_sysmem".into();
    s.record(&map);
    let o = s.host_origin(6, 0x11000, 0x1000);
    assert_eq!((o.origin, o.evidence), (HostOrigin::CudaRegistered, Some(OriginEvidence::KernelPin)));
    assert_eq!(s.host_alloc(6, 0x11000, 0x1000), None, "no call was seen: host_alloc names calls only");
    let o = s.host_origin(6, 0x80000, 0x10000);
    assert_eq!((o.origin, o.evidence), (HostOrigin::CudaPinned, Some(OriginEvidence::KernelMap)));
    // The call, seen after nvidia.ko's pin inside it, is the stronger word.
    let mut seen = call(6, 0, CudaOp::HostRegister, 0x10000, 0x4000);
    seen.source = "uprobe:cuMemHostRegister".into();
    s.record(&seen);
    assert_eq!(s.host_origin(6, 0x11000, 0x1000).evidence, Some(OriginEvidence::CallSeen));
    assert_eq!(s.host_alloc(6, 0x11000, 0x1000), Some(HostAlloc::CuMemHostRegister));
}
