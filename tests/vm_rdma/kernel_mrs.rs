//! The kernel's own list of live memory regions (`rdma res show mr -j`, iproute2), read in a
//! thread at each deregistration of real programs, while the MR is still live.

use std::{
    collections::BTreeSet,
    process::Command,
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc, Mutex,
    },
    thread::JoinHandle,
    time::Duration,
};

use serde_json::Value;

/// One MR as the kernel listed it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct KernelMr {
    pub ifname: String,
    pub mrn: u64,
    pub pid: u32,
    pub mrlen: u64,
}

/// The MRs of processes listed now (a kernel user's MR has no pid: never one of theirs).
pub fn list() -> Vec<KernelMr> {
    let out = Command::new("rdma").args(["res", "show", "mr", "-j"]).output().expect("run rdma res show mr");
    assert!(out.status.success(), "rdma res show mr: {}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).expect("rdma -j prints JSON");
    v.as_array()
        .expect("a JSON array")
        .iter()
        .filter(|m| !m["pid"].is_null())
        .map(|m| {
            let n = |k: &str| m[k].as_u64().unwrap_or_else(|| panic!("{k} in {m}"));
            KernelMr {
                ifname: m["ifname"].as_str().expect("ifname").to_string(),
                mrn: n("mrn"),
                pid: n("pid") as u32,
                mrlen: n("mrlen"),
            }
        })
        .collect()
}

/// The kernel's list read at each ibv_dereg_mr of the watched processes, with the MR still
/// live: they run with the `GDR_TEST_HOLD_DEREG` preload, which stops the process there; this
/// reads the list, then resumes it. No MR that is deregistered can be missed (no sampling).
pub struct Holds {
    stop: Arc<AtomicBool>,
    pids: Arc<Mutex<Vec<u32>>>,
    thread: JoinHandle<(BTreeSet<KernelMr>, usize, Vec<String>)>,
}

/// Whether `pid` is stopped (state T in /proc/PID/stat); false once it is gone.
fn stopped(pid: u32) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    stat.rsplit_once(')').is_some_and(|(_, rest)| rest.trim_start().starts_with('T'))
}

impl Holds {
    pub fn start() -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let pids: Arc<Mutex<Vec<u32>>> = Arc::default();
        let (flag, watched) = (stop.clone(), pids.clone());
        let thread = std::thread::spawn(move || {
            let (mut seen, mut holds, mut errors) = (BTreeSet::new(), 0, Vec::new());
            while !flag.load(Ordering::Relaxed) {
                let now: Vec<u32> = watched.lock().unwrap().clone();
                for pid in now.into_iter().filter(|p| stopped(*p)) {
                    // Resumed even when the list cannot be read: a failure, never a hang.
                    let listed = std::panic::catch_unwind(list);
                    holds += 1;
                    // SAFETY: kill(2) on a child of this test.
                    assert_eq!(unsafe { libc::kill(pid as i32, libc::SIGCONT) }, 0);
                    match listed {
                        Ok(mrs) => seen.extend(mrs),
                        Err(e) => errors.push(format!("{:?}", e.downcast_ref::<String>())),
                    }
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            (seen, holds, errors)
        });
        Self { stop, pids, thread }
    }

    /// The command, with the preload that stops it at each ibv_dereg_mr.
    pub fn preload(cmd: &mut Command) -> &mut Command {
        cmd.env("LD_PRELOAD", env!("GDR_TEST_HOLD_DEREG"))
    }

    /// Watches `pid` (started with [`Holds::preload`]): resumes it at each hold.
    pub fn watch(&self, pid: u32) {
        self.pids.lock().unwrap().push(pid);
    }

    /// Every distinct MR listed at a hold, and how many holds there were.
    pub fn stop(self) -> (Vec<KernelMr>, usize) {
        self.stop.store(true, Ordering::Relaxed);
        let (seen, holds, errors) = self.thread.join().expect("hold thread");
        assert!(errors.is_empty(), "the kernel's MR list could not be read at a hold: {errors:?}");
        (seen.into_iter().collect(), holds)
    }
}
