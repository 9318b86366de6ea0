//! The kernel's own list of live memory regions (`rdma res show mr -j`, iproute2), sampled in
//! a thread while real programs run.

use std::{
    collections::BTreeSet,
    process::Command,
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc,
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

/// The MRs listed now.
pub fn list() -> Vec<KernelMr> {
    let out = Command::new("rdma").args(["res", "show", "mr", "-j"]).output().expect("run rdma res show mr");
    assert!(out.status.success(), "rdma res show mr: {}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).expect("rdma -j prints JSON");
    v.as_array()
        .expect("a JSON array")
        .iter()
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

/// Samples [`list`] every 50 ms until stopped; keeps every distinct MR seen.
pub struct Sampler {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<BTreeSet<KernelMr>>,
}

impl Sampler {
    pub fn start() -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut seen = BTreeSet::new();
            while !flag.load(Ordering::Relaxed) {
                seen.extend(list());
                std::thread::sleep(Duration::from_millis(50));
            }
            seen
        });
        Self { stop, thread }
    }

    pub fn stop(self) -> Vec<KernelMr> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().expect("sampler thread").into_iter().collect()
    }
}
