//! gdr-trace: proves, per process and at the driver level, whether GPU memory goes straight to
//! the NIC (GPUDirect RDMA) or is staged through host memory.
//!
//! The data path is one line (see docs/how-it-works.md):
//! hooks (`hooks`, `loader`) -> ring buffer (`trace`) -> `events` (decode) -> `pipeline` -> the
//! evidence families (`mr`, `storage`, `p2p`: pure analysis, events in, reports out) -> sinks
//! (`sink`). `preflight` reads sysfs/procfs and knows nothing of BPF.

pub mod archive;
pub mod audit;
pub mod bounded;
pub mod cli;
pub mod clock;
pub mod cmd;
pub mod counters;
pub mod doctor;
pub mod drivers;
pub mod escape;
pub mod events;
pub mod examples;
pub mod exit;
pub mod facts;
pub mod gate;
pub mod heap;
pub mod hooks;
pub mod http;
pub mod libfile;
pub mod loader;
pub mod mr;
pub mod nccl_log;
pub mod options;
pub mod outfile;
pub mod p2p;
pub mod parse;
pub mod pipeline;
pub mod preflight;
pub mod privilege;
pub mod procfs;
pub mod queues;
pub mod recording;
pub mod sink;
pub mod stale_probes;
pub mod stop;
pub mod storage;
pub mod teardown;
pub mod term;
pub mod trace;
pub mod units;
pub mod untold;
pub mod webconfig;
