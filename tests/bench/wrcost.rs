//! gdr-bench-wr: what gdr-trace's work-request probe costs per posted work request. A function
//! of this program with a provider's `post_send` signature is called N times with one RDMA-write
//! WR of one SGE, three ways: no probe; the benchmark floor's empty uprobe (`bench_floor_uprobe`,
//! its own object: the uprobe mechanism alone); gdr-trace's `bytes_uprobe_post_send` (the WR walk
//! and the in-kernel count), loaded from gdr-trace's own object the way gdr-trace loads it. Checks that
//! the probe counted every byte (`BYTES`), then prints the figures:
//!   gdr-bench-wr [N]
//! One line of JSON: ns per call for each way (medians of 7 alternating rounds of N calls),
//! and the probe's own cost over the empty uprobe.

use std::{hint::black_box, time::Instant};

use aya::{
    maps::HashMap as BpfHashMap,
    programs::{
        uprobe::{UProbeAttachLocation, UProbeScope},
        UProbe,
    },
    EbpfLoader,
};
use gdr_trace::loader::{BENCH_FLOOR_OBJECT, EBPF_OBJECT};

/// `gdr_trace_common::mr::bytes::{ByteKey, ByteCount}` (a dev-dependency only here).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
struct ByteKey {
    tgid: u32,
    lkey: u32,
    dev: u32,
}
#[repr(C)]
#[derive(Clone, Copy, Debug)]
struct ByteCount {
    bytes_out: u64,
    bytes_in: u64,
    ops: u64,
    tenant: u64,
}
// SAFETY: plain C structs without padding.
unsafe impl aya::Pod for ByteKey {}
// SAFETY: as above.
unsafe impl aya::Pod for ByteCount {}

/// rdma-core's `struct ibv_sge` and the head of `struct ibv_send_wr` (verbs.h).
#[repr(C)]
struct Sge {
    addr: u64,
    length: u32,
    lkey: u32,
}

#[repr(C)]
pub struct SendWr {
    wr_id: u64,
    next: *mut SendWr,
    sg_list: *mut Sge,
    num_sge: i32,
    opcode: u32,
    send_flags: u32,
    imm: u32,
    rest: [u64; 6],
}

const LKEY: u32 = 0xb17e;
const LEN: u32 = 65536;

#[unsafe(no_mangle)]
#[inline(never)]
pub extern "C" fn gdr_bench_post_send(qp: *mut u8, wr: *mut SendWr, bad: *mut *mut SendWr) -> i32 {
    black_box((qp, wr, bad));
    0
}

fn run(n: u64) -> f64 {
    let mut sge = Sge { addr: 0x1000, length: LEN, lkey: LKEY };
    let mut wr = SendWr {
        wr_id: 1,
        next: std::ptr::null_mut(),
        sg_list: &mut sge,
        num_sge: 1,
        opcode: 0, // IBV_WR_RDMA_WRITE
        send_flags: 0,
        imm: 0,
        rest: [0; 6],
    };
    let mut bad = std::ptr::null_mut();
    let t = Instant::now();
    for _ in 0..n {
        // No QP: its context reads as 0, the device tag the count is keyed by.
        black_box(gdr_bench_post_send(std::ptr::null_mut(), black_box(&mut wr), &mut bad));
    }
    t.elapsed().as_nanos() as f64 / n as f64
}

fn main() -> anyhow::Result<()> {
    let n: u64 = std::env::args().nth(1).map(|a| a.parse()).transpose()?.unwrap_or(200_000);
    let mut ebpf = EbpfLoader::new().load(EBPF_OBJECT)?;
    let mut floor = EbpfLoader::new().load(BENCH_FLOOR_OBJECT)?;
    let exe = std::fs::read_link("/proc/self/exe")?;
    let none = run(n);
    let mut with = |floor_probe: bool| -> anyhow::Result<f64> {
        let p: &mut UProbe = match floor_probe {
            true => floor.program_mut("bench_floor_uprobe"),
            false => ebpf.program_mut("bytes_uprobe_post_send"),
        }
        .expect("in the object")
        .try_into()?;
        if p.fd().is_err() {
            p.load()?;
        }
        let link =
            p.attach(UProbeAttachLocation::Symbol("gdr_bench_post_send"), &exe, UProbeScope::AllProcesses)?;
        let ns = run(n);
        p.detach(link)?;
        Ok(ns)
    };
    // Rounds alternating the two (a shared, loaded machine): the median of each.
    let rounds = 7;
    let (mut empties, mut probes) = (vec![], vec![]);
    for _ in 0..rounds {
        empties.push(with(true)?);
        probes.push(with(false)?);
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (empty, probe) = (median(&mut empties), median(&mut probes));
    let n = n * rounds;
    let map = BpfHashMap::<_, ByteKey, ByteCount>::try_from(ebpf.map("BYTES").expect("BYTES"))?;
    let got = map.get(&ByteKey { tgid: std::process::id(), lkey: LKEY, dev: 0 }, 0)?;
    anyhow::ensure!(
        (got.bytes_out, got.bytes_in, got.ops) == (n * LEN as u64, 0, n),
        "the probe counted {got:?} for {n} work requests of {LEN} bytes"
    );
    println!(
        "{{\"calls\":{n},\"no_probe_ns\":{none:.1},\"empty_uprobe_ns\":{empty:.1},\"post_send_probe_ns\":{probe:.1},\"probe_over_empty_ns\":{:.1}}}",
        probe - empty
    );
    Ok(())
}
