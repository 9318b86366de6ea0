//! When the live layer reads a cuFile process's facts (`gds_facts::ProcGdsFacts`): at its first
//! cuFile call that opens the driver or registers a file, while it surely runs (a short job may
//! be gone by the next summary tick), else at a tick while it runs. They reach the state through
//! the next snapshot, so recordings carry them.

use std::{collections::BTreeMap, path::Path, sync::Mutex};

use gdr_trace_common::storage::GdsOp;

use crate::events::storage::GdsCall;
use crate::{
    preflight::proc_gds::read_proc_facts,
    storage::{gds_facts::ProcGdsFacts, state::StorageState},
};

/// Facts read at a call, waiting for the next snapshot (taken whole at each one), and whether
/// they were handed to the state already (`fresh`).
static EARLY: Mutex<BTreeMap<u32, (ProcGdsFacts, bool)>> = Mutex::new(BTreeMap::new());

fn early() -> std::sync::MutexGuard<'static, BTreeMap<u32, (ProcGdsFacts, bool)>> {
    EARLY.lock().unwrap_or_else(|e| e.into_inner())
}

/// At a decoded cuFile call: reads the process's facts once, if the call is its driver open or
/// a file registration. A process already gone (a short job decoded late) still gets the
/// machine's facts (the kernel's P2PDMA, nvidia-fs loaded), and its configuration's error says
/// its /proc entry was gone.
pub fn note_call(g: &GdsCall) {
    if !matches!(g.op, GdsOp::DriverOpen | GdsOp::HandleRegister) {
        return;
    }
    let proc_root = Path::new("/proc");
    let mut early = early();
    if early.contains_key(&g.ctx.pid) {
        return;
    }
    early.insert(g.ctx.pid, (read_proc_facts(proc_root, Path::new("/sys"), g.ctx.pid), false));
}

/// Each cuFile process's mappings as of its last buffer registration: the registered GPU
/// buffers are mapped then, and a short job may be gone before its reads are looked at.
static MAPS: Mutex<BTreeMap<u32, String>> = Mutex::new(BTreeMap::new());

fn read_maps(pid: u32) -> Option<String> {
    std::fs::read_to_string(format!("/proc/{pid}/maps")).ok()
}

/// Where a call's POSIX I/O went, from the process's mappings (now, else as of its last
/// buffer registration): GPU memory (a /dev/nvidiaN mapping: P2PDMA's target) or host memory
/// (a bounce buffer). Only for calls whose POSIX I/O nvidia-fs did not do, and whose buffer
/// the kernel side saw.
pub fn dest_of(g: &GdsCall) -> Option<bool> {
    let t = &g.tally;
    if g.op == GdsOp::BufRegister {
        if let Some(m) = read_maps(g.ctx.pid) {
            MAPS.lock().unwrap_or_else(|e| e.into_inner()).insert(g.ctx.pid, m);
        }
    }
    if t.posix_calls == 0 || t.nvfs_calls > 0 || t.io_buf == 0 {
        return None;
    }
    let live = read_maps(g.ctx.pid).and_then(|m| crate::storage::gds_facts::dest_is_gpu(&m, t.io_buf));
    live.or_else(|| {
        let maps = MAPS.lock().unwrap_or_else(|e| e.into_inner());
        crate::storage::gds_facts::dest_is_gpu(maps.get(&g.ctx.pid)?, t.io_buf)
    })
}

/// Facts read since the last call, for the state now (the calls that follow get their reasons
/// at once); the next snapshot still carries them, for recordings.
pub fn fresh() -> Vec<(u32, ProcGdsFacts)> {
    let mut early = early();
    early
        .iter_mut()
        .filter(|(_, (_, handed))| !*handed)
        .map(|(pid, (f, handed))| {
            *handed = true;
            (*pid, f.clone())
        })
        .collect()
}

/// The facts for the snapshot: every cuFile process of the state whose facts were read at a
/// call, and those without facts read now if they still run. Facts of processes not in the
/// state are dropped.
pub fn take_for(state: &StorageState) -> Vec<(u32, ProcGdsFacts)> {
    let mut early = std::mem::take(&mut *early());
    MAPS.lock()
        .unwrap_or_else(|e| e.into_inner())
        .retain(|pid, _| state.procs.get(pid).is_some_and(|p| !p.exited));
    let mut out = Vec::new();
    for (pid, p) in &state.procs {
        if p.gds.calls == 0 && p.gds.driver_opens == 0 {
            continue;
        }
        if let Some((f, _)) = early.remove(pid) {
            out.push((*pid, f));
        } else if p.gds_facts.is_none() && !p.exited {
            out.push((*pid, read_proc_facts(Path::new("/proc"), Path::new("/sys"), *pid)));
        }
    }
    out
}

impl StorageState {
    /// Sets a process's facts (from `fresh`, between snapshots).
    pub fn set_gds_facts(&mut self, pid: u32, facts: ProcGdsFacts) {
        if let Some(p) = self.procs.get_mut(&pid) {
            p.gds_facts = Some(Box::new(facts));
        }
    }
}

#[cfg(test)]
mod tests {
    use gdr_trace_common::storage::GdsTally;

    use super::*;
    use crate::{events::storage::StorageEvent, storage::state::tests::gds};

    fn call(pid: u32, op: GdsOp) -> GdsCall {
        let StorageEvent::Gds(g) = gds(pid, op, None, 0, 0, GdsTally::default()) else { unreachable!() };
        g
    }

    #[test]
    fn a_call_destination_from_the_process_mappings_now_or_at_its_buffer_registration() {
        let me = std::process::id();
        let host = vec![0u8; 1 << 20];
        let mut read = call(me, GdsOp::Read);
        read.tally =
            GdsTally { posix_calls: 1, posix_bytes: 4096, io_buf: host.as_ptr() as u64, ..read.tally };
        assert_eq!(dest_of(&read), Some(false), "this process's heap is host memory");
        let nvfs = GdsCall { tally: GdsTally { nvfs_calls: 1, ..read.tally }, ..read.clone() };
        assert_eq!(dest_of(&nvfs), None, "nvidia-fs did the I/O: no POSIX destination");
        let unseen = GdsCall { tally: GdsTally { io_buf: 0, ..read.tally }, ..read.clone() };
        assert_eq!(dest_of(&unseen), None, "no buffer seen");
        // A process gone by the read: the mappings read at its buffer registration answer.
        let gone = u32::MAX - 2;
        let maps = "7f0000000000-7f0000200000 rw-s 00000000 00:05 120 /dev/nvidia0\n";
        MAPS.lock().unwrap().insert(gone, maps.to_string());
        let mut late = call(gone, GdsOp::Read);
        late.tally = GdsTally { posix_calls: 1, io_err: -14, io_buf: 0x7f00_0000_1000, ..late.tally };
        assert_eq!(dest_of(&late), Some(true));
        MAPS.lock().unwrap().remove(&gone);
        assert_eq!(dest_of(&late), None, "nothing to read it from");
        drop(host);
    }

    #[test]
    fn facts_read_at_the_driver_open_reach_the_next_snapshot_once() {
        // This test process as the cuFile process: its /proc entry is real.
        let me = std::process::id();
        note_call(&call(me, GdsOp::Read));
        assert!(!early().contains_key(&me), "a read is not the moment");
        note_call(&call(me, GdsOp::DriverOpen));
        let mounts = early().get(&me).map(|(f, _)| f.mounts.len());
        assert!(mounts.is_some_and(|n| n > 0), "read from /proc/{me}: {mounts:?}");
        // A process that is gone: the machine's facts, and why its own are missing.
        let gone = u32::MAX - 1;
        note_call(&call(gone, GdsOp::HandleRegister));
        let f = early().remove(&gone).map(|(f, _)| f).expect("read");
        assert!(f.mounts.is_empty() && f.config.file.is_none(), "{f:?}");
        assert!(
            f.config.error.as_deref().is_some_and(|e| e.contains(&format!("/proc/{gone}/environ"))),
            "{f:?}"
        );
        let kernel = crate::preflight::proc_gds::read_kernel_p2pdma(Path::new("/proc"));
        assert_eq!(f.kernel_p2pdma, kernel);

        let mut s = StorageState::new();
        s.record(StorageEvent::Gds(call(me, GdsOp::DriverOpen)));
        // Handed to the state once, at once; still in the next snapshot (for recordings).
        let now: Vec<(u32, ProcGdsFacts)> = fresh().into_iter().filter(|(p, _)| *p == me).collect();
        assert_eq!(now.len(), 1);
        assert!(fresh().iter().all(|(p, _)| *p != me), "handed once");
        s.set_gds_facts(me, now[0].1.clone());
        assert!(s.procs[&me].gds_facts.is_some());
        let mut exited = s.procs.remove(&me).unwrap();
        exited.exited = true; // gone by the tick: the facts read at the call still count
        s.procs.insert(me, exited);
        let got = take_for(&s);
        assert_eq!(got.iter().map(|(p, _)| *p).collect::<Vec<_>>(), [me]);
        assert!(!got[0].1.mounts.is_empty());
        assert!(take_for(&s).is_empty(), "taken once; a process with facts is not read again");
    }
}
