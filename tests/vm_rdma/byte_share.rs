//! A tenant filling the byte maps cannot cost another user's bytes: uid 65534 posts 100,000
//! send SGEs, each naming an lkey of its own, and 100,000 receives, each its own wr_id
//! (`gdrsim-workload post-flood`, on an rxe QP left in RESET: the provider refuses them after
//! its post function was entered, where gdr-trace counts). Each would be an entry of the 65,536
//! of `BYTES` and of `RECV_POSTED`; held to its share it keeps at most half of each, its
//! refusals are its own lost `over_budget` records, and rdma-core's `ibv_rc_pingpong` beside it
//! (each side sends and receives N messages, every receive posted under one wr_id) is counted
//! to the byte on both sides, receives joined to their MR. Without the shares the flood fills
//! both maps and the victim's sends and receives go uncounted (`bytes_map_full`, receives not
//! joined). (perftest's `ib_send_bw` would do, but its clock calibration fails most runs under
//! a tracer in the emulated VM.)

use std::os::unix::process::CommandExt;

use gdr_trace_tests::{kmods::env, stash_flood::last_lost, Workload};
use serde_json::Value;

use super::{mine, try_pair_with, Ready};

/// Entries the flood asks for in each map (more than either holds).
const FLOOD: u64 = 100_000;

/// The flood, posted and holding until dropped.
fn flood() -> Box<dyn std::any::Any> {
    let mut cmd = std::process::Command::new("sh");
    cmd.args(["-c", "read _; exec \"$0\" \"$@\"", &env("GDR_GDRSIM_WORKLOAD")])
        .args(["--hold-stdin", "post-flood", &FLOOD.to_string()])
        .env("GDRSIM_IBDEV", "rxe0")
        .uid(65534)
        .gid(65534);
    let mut w = Workload::start(cmd);
    w.go();
    let (truth, held) = w.until_hold();
    let posted = truth.iter().find(|t| t["action"] == "post_flood");
    assert!(held && posted.is_some_and(|p| p["ok"] == true), "the flood posted: {truth:?}");
    Box::new(w)
}

fn n(v: &Value) -> u64 {
    v.as_u64().unwrap_or(0)
}

/// Messages each side sends (and receives), and their size.
const ITERS: u64 = 300;
const SIZE: u64 = 4096;

#[test]
#[ignore = "needs the VM test bed: cargo xtask test"]
fn a_tenant_filling_the_byte_maps_costs_another_users_bytes_nothing() {
    let (iters, size) = (ITERS.to_string(), SIZE.to_string());
    let server = ["ibv_rc_pingpong", "-d", "rxe0", "-g", "1", "-s", &size, "-n", &iters];
    let client = [&server[..], &["127.0.0.1"]].concat();
    let run = (0..3)
        .find_map(|_| try_pair_with(&[], None, Some(&flood), &server, &client, Ready::Tcp(18515)).ok())
        .expect("a run of the pair");
    // "<bytes> bytes in <s> seconds": both directions.
    let said =
        run.client_out.lines().find_map(|l| l.split_once(" bytes in ")).map(|(b, _)| b.trim().to_string());
    assert_eq!(said, Some((2 * ITERS * SIZE).to_string()), "{}", run.client_out);
    for pid in run.pids {
        let rel = mine(&run.recs, "mr_release", pid);
        assert_eq!(rel.len(), 1, "{rel:#?}");
        let got = [n(&rel[0]["bytes_out"]), n(&rel[0]["bytes_in"]), n(&rel[0]["ops"])];
        assert_eq!(
            got,
            [ITERS * SIZE, ITERS * SIZE, 2 * ITERS],
            "pid {pid}: out, in, ops of its MR: {}",
            rel[0]
        );
    }
    let last = last_lost(&run.recs);
    let by = &last["by_reason"];
    // Half of each map, then nothing: at least what it asked past half of each was refused.
    assert!(n(&by["over_budget"]) >= 2 * (FLOOD - 32_768), "the flood held to its shares: {last}");
    assert_eq!(n(&by["bytes_map_full"]), 0, "{last}");
    let charged: Vec<&Value> = last["by_tenant"].as_array().into_iter().flatten().collect();
    assert!(
        !charged.is_empty() && charged.iter().all(|t| t["tenant"] == "uid 65534"),
        "every loss is the flooder's: {last}"
    );
}
