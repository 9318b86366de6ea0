//! When the live layer reads a cuFile process's facts (`gds_facts::ProcGdsFacts`): at its first
//! cuFile call that opens the driver or registers a file, while it surely runs (a short job may
//! be gone by the next summary tick), else at a tick while it runs. They reach the state through
//! the next snapshot, so recordings carry them.

use std::{collections::BTreeMap, path::Path, sync::Mutex};

use gdr_trace_common::storage::GdsOp;

use super::{gds_facts::read_proc_facts, state::StorageState};
use crate::events::storage::GdsCall;

/// Facts read at a call, waiting for the next snapshot (taken whole at each one).
static EARLY: Mutex<BTreeMap<u32, super::gds_facts::ProcGdsFacts>> = Mutex::new(BTreeMap::new());

/// At a decoded cuFile call: reads the process's facts once, if the call is its driver open or
/// a file registration and the process is still there.
pub fn note_call(g: &GdsCall) {
    if !matches!(g.op, GdsOp::DriverOpen | GdsOp::HandleRegister) {
        return;
    }
    let proc_root = Path::new("/proc");
    let mut early = EARLY.lock().unwrap_or_else(|e| e.into_inner());
    if early.contains_key(&g.ctx.pid) || !proc_root.join(g.ctx.pid.to_string()).join("mountinfo").exists() {
        return;
    }
    early.insert(g.ctx.pid, read_proc_facts(proc_root, Path::new("/sys"), g.ctx.pid));
}

/// The facts for the snapshot: for each cuFile process of the state without them, those read
/// at its call, else read now if it still runs. Facts of processes not in the state are dropped.
pub fn take_for(state: &StorageState) -> Vec<(u32, super::gds_facts::ProcGdsFacts)> {
    let mut early = std::mem::take(&mut *EARLY.lock().unwrap_or_else(|e| e.into_inner()));
    let mut out = Vec::new();
    for (pid, p) in &state.procs {
        if p.gds_facts.is_some() || (p.gds.calls == 0 && p.gds.driver_opens == 0) {
            continue;
        }
        if let Some(f) = early.remove(pid) {
            out.push((*pid, f));
        } else if !p.exited {
            out.push((*pid, read_proc_facts(Path::new("/proc"), Path::new("/sys"), *pid)));
        }
    }
    out
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
    fn facts_read_at_the_driver_open_reach_the_next_snapshot_once() {
        // This test process as the cuFile process: its /proc entry is real.
        let me = std::process::id();
        note_call(&call(me, GdsOp::Read));
        assert!(!EARLY.lock().unwrap().contains_key(&me), "a read is not the moment");
        note_call(&call(me, GdsOp::DriverOpen));
        let mounts = EARLY.lock().unwrap().get(&me).map(|f| f.mounts.len());
        assert!(mounts.is_some_and(|n| n > 0), "read from /proc/{me}: {mounts:?}");
        // A process that is gone: nothing read.
        note_call(&call(u32::MAX - 1, GdsOp::HandleRegister));
        assert!(!EARLY.lock().unwrap().contains_key(&(u32::MAX - 1)));

        let mut s = StorageState::new();
        s.record(StorageEvent::Gds(call(me, GdsOp::DriverOpen)));
        let mut exited = s.procs.remove(&me).unwrap();
        exited.exited = true; // gone by the tick: the facts read at the call still count
        s.procs.insert(me, exited);
        let got = take_for(&s);
        assert_eq!(got.iter().map(|(p, _)| *p).collect::<Vec<_>>(), [me]);
        assert!(!got[0].1.mounts.is_empty());
        assert!(take_for(&s).is_empty(), "taken once; an exited process is not read again");
    }
}
