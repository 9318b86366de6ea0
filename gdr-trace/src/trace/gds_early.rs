//! When the live layer reads a cuFile process's facts (`gds_facts::ProcGdsFacts`): at its first
//! cuFile call that opens the driver or registers a file, while it surely runs (a short job may
//! be gone by the next summary tick), else at a tick while it runs. They reach the state through
//! the next snapshot, so recordings carry them.

use std::{collections::BTreeMap, path::Path};

use gdr_trace_common::storage::GdsOp;

use crate::events::storage::GdsCall;
use crate::{
    preflight::proc_gds::read_proc_facts,
    storage::{gds_facts::ProcGdsFacts, state::StorageState},
};

/// What the trace loop keeps of cuFile processes between their calls and the next snapshot
/// (one per trace, owned by the loop's storage reader).
#[derive(Debug, Default)]
pub struct GdsEarly {
    /// Facts read at a call, waiting for the next snapshot (taken whole at each one), and
    /// whether they were handed to the state already (`fresh`).
    early: BTreeMap<u32, (ProcGdsFacts, bool)>,
    /// The last JSON file each thread opened (its pid, its path as opened, made absolute, and
    /// what the kernel said it is): libcufile reads its configuration while it opens the driver.
    json: BTreeMap<u32, (u32, String, crate::events::storage::Identity)>,
    /// What each process that loaded libcufile said of its configuration then.
    at_load: BTreeMap<u32, AtLoad>,
    /// Each cuFile process's mappings as of its last buffer registration: the registered GPU
    /// buffers are mapped then, and a short job may be gone before its reads are looked at.
    maps: BTreeMap<u32, String>,
}

impl GdsEarly {
    /// At a decoded cuFile call: reads the process's facts once, if the call is its driver open or
    /// a file registration. A process already gone (a short job decoded late) still gets the
    /// machine's facts (the kernel's P2PDMA, nvidia-fs loaded), and its configuration's error says
    /// its /proc entry was gone.
    pub fn note_call(&mut self, g: &GdsCall) {
        if !matches!(g.op, GdsOp::DriverOpen | GdsOp::HandleRegister) {
            return;
        }
        let proc_root = Path::new("/proc");
        if self.early.contains_key(&g.ctx.pid) {
            return;
        }
        let mut facts = read_proc_facts(proc_root, Path::new("/sys"), g.ctx.pid);
        if facts.config.error.is_some() {
            // Gone before its call was decoded (a short job): its configuration as its environment
            // said when it loaded libcufile, else the JSON file it opened on this call's thread
            // while opening the driver, read here if it is still that file.
            let at_load = self.at_load.get(&g.ctx.pid).and_then(AtLoad::config);
            if let Some(cfg) = at_load.or_else(|| self.json_opened(g)) {
                facts.config = cfg;
            }
        }
        self.early.insert(g.ctx.pid, (facts, false));
    }

    fn json_opened(&self, g: &GdsCall) -> Option<crate::storage::gds_facts::ProcConfig> {
        let (pid, path, id) = self.json.get(&g.ctx.tid).cloned()?;
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::metadata(&path).ok()?;
        let same = pid == g.ctx.pid && m.ino() == id.ino && m.dev() == crate::procfs::user_dev(id.dev);
        let env = [("CUFILE_ENV_PATH_JSON".to_string(), path)];
        same.then(|| crate::preflight::proc_gds::read_config(Path::new("/"), Path::new("/"), &env))
    }
}

/// What a process that loads libcufile says of its configuration while it surely runs (its
/// `CUFILE_*` environment, working directory, whether it shares this mount namespace): what its
/// first cuFile call's facts fall back on when the process is gone by the time that call is
/// decoded (a short job). No reason may depend on winning that race.
#[derive(Debug, Clone)]
struct AtLoad {
    env: Vec<(String, String)>,
    cwd: std::path::PathBuf,
    same_root: bool,
}

impl AtLoad {
    fn config(&self) -> Option<crate::storage::gds_facts::ProcConfig> {
        self.same_root.then(|| crate::preflight::proc_gds::read_config(Path::new("/"), &self.cwd, &self.env))
    }
}

impl GdsEarly {
    /// A process opened `path` (`id`: what the kernel said it is): if it is libcufile, what its
    /// configuration is now (once a process); if it is a JSON file, which (by thread).
    pub fn note_open(&mut self, o: &crate::events::storage::FileOpened) {
        let (pid, path) = (o.ctx.pid, o.path.as_str());
        let name = path.rsplit('/').next().unwrap_or(path);
        if name.ends_with(".json") && path.starts_with('/') {
            self.json.insert(o.ctx.tid, (pid, path.to_string(), o.id));
        }
        if !name.starts_with("libcufile.so") {
            return;
        }
        if self.at_load.contains_key(&pid) {
            return;
        }
        let dir = Path::new("/proc").join(pid.to_string());
        let Ok(environ) = std::fs::read(dir.join("environ")) else { return };
        let env = crate::storage::gds_facts::parse_environ(&environ)
            .into_iter()
            .filter(|(k, _)| k.starts_with("CUFILE_"))
            .collect();
        let ns = |p: &Path| std::fs::read_link(p.join("ns/mnt")).ok();
        let same_root = ns(&dir).is_some()
            && ns(&dir) == ns(Path::new("/proc/self"))
            && std::fs::read_link(dir.join("root")).is_ok_and(|r| r == Path::new("/"));
        let cwd = std::fs::read_link(dir.join("cwd")).unwrap_or_else(|_| "/".into());
        self.at_load.insert(pid, AtLoad { env, cwd, same_root });
    }

    /// A process ended (its exit is decoded after all its calls): what was kept of it goes.
    pub fn forget(&mut self, pid: u32) {
        self.at_load.remove(&pid);
        self.json.retain(|_, (p, _, _)| *p != pid);
    }
}

fn read_maps(pid: u32) -> Option<String> {
    std::fs::read_to_string(format!("/proc/{pid}/maps")).ok()
}

/// Where a call's POSIX I/O went, from the process's mappings (now, else as of its last
/// buffer registration): GPU memory (a /dev/nvidiaN mapping: P2PDMA's target) or host memory
/// (a bounce buffer). Only for calls whose POSIX I/O nvidia-fs did not do, and whose buffer
/// the kernel side saw.
impl GdsEarly {
    pub fn dest_of(&mut self, g: &GdsCall) -> Option<bool> {
        let t = &g.tally;
        if g.op == GdsOp::BufRegister {
            if let Some(m) = read_maps(g.ctx.pid) {
                self.maps.insert(g.ctx.pid, m);
            }
        }
        if t.posix_calls == 0 || t.nvfs_calls > 0 || t.io_buf == 0 {
            return None;
        }
        let live = read_maps(g.ctx.pid).and_then(|m| crate::storage::gds_facts::dest_is_gpu(&m, t.io_buf));
        live.or_else(|| crate::storage::gds_facts::dest_is_gpu(self.maps.get(&g.ctx.pid)?, t.io_buf))
    }

    /// Facts read since the last call, for the state now (the calls that follow get their reasons
    /// at once); the next snapshot still carries them, for recordings.
    pub fn fresh(&mut self) -> Vec<(u32, ProcGdsFacts)> {
        self.early
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
    pub fn take_for(&mut self, state: &StorageState) -> Vec<(u32, ProcGdsFacts)> {
        let mut early = std::mem::take(&mut self.early);
        self.maps.retain(|pid, _| state.procs.get(pid).is_some_and(|p| !p.exited));
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
        let mut e = GdsEarly::default();
        let me = std::process::id();
        let host = vec![0u8; 1 << 20];
        let mut read = call(me, GdsOp::Read);
        read.tally =
            GdsTally { posix_calls: 1, posix_bytes: 4096, io_buf: host.as_ptr() as u64, ..read.tally };
        assert_eq!(e.dest_of(&read), Some(false), "this process's heap is host memory");
        let nvfs = GdsCall { tally: GdsTally { nvfs_calls: 1, ..read.tally }, ..read.clone() };
        assert_eq!(e.dest_of(&nvfs), None, "nvidia-fs did the I/O: no POSIX destination");
        let unseen = GdsCall { tally: GdsTally { io_buf: 0, ..read.tally }, ..read.clone() };
        assert_eq!(e.dest_of(&unseen), None, "no buffer seen");
        // A process gone by the read: the mappings read at its buffer registration answer.
        let gone = u32::MAX - 2;
        let maps = "7f0000000000-7f0000200000 rw-s 00000000 00:05 120 /dev/nvidia0\n";
        e.maps.insert(gone, maps.to_string());
        let mut late = call(gone, GdsOp::Read);
        late.tally = GdsTally { posix_calls: 1, io_err: -14, io_buf: 0x7f00_0000_1000, ..late.tally };
        assert_eq!(e.dest_of(&late), Some(true));
        e.maps.remove(&gone);
        assert_eq!(e.dest_of(&late), None, "nothing to read it from");
        drop(host);
    }

    /// A short job gone before its first cuFile call is decoded: its configuration as its
    /// environment named it when it loaded libcufile (CUFILE_ENV_PATH_JSON), read through this
    /// root, not an error.
    #[test]
    fn a_short_jobs_configuration_is_known_from_when_it_loaded_libcufile() {
        let mut e = GdsEarly::default();
        let dir = std::env::temp_dir().join(format!("gdr-early-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let json = dir.join("cufile.json");
        std::fs::write(&json, r#"{ "properties": { "force_compat_mode": true } }"#).unwrap();
        let mut job =
            std::process::Command::new("sleep").arg("30").env("CUFILE_ENV_PATH_JSON", &json).spawn().unwrap();
        let pid = job.id();
        // Once its exec has set its environment up (before, /proc shows ours, then none).
        let environ = || std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
        while !String::from_utf8_lossy(&environ()).contains("CUFILE_ENV_PATH_JSON=") {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        let ctx = crate::events::Context { pid, tid: pid, ..Default::default() };
        let lib = crate::events::storage::FileOpened {
            ctx,
            fd: 3,
            dirfd: -100,
            path: "/usr/lib/x86_64-linux-gnu/libcufile.so.0".into(),
            open_flags: 0,
            id: Default::default(),
        };
        e.note_open(&lib);
        job.kill().unwrap();
        job.wait().unwrap();
        e.note_call(&call(pid, GdsOp::DriverOpen));
        let f = e.early.remove(&pid).map(|(f, _)| f).expect("read");
        assert_eq!(f.config.error, None, "{f:?}");
        assert_eq!(f.config.file.as_deref(), json.to_str());
        assert!(f.config.effective.force_compat_mode.as_ref().is_some_and(|(on, _)| *on), "{f:?}");
        e.forget(pid);
        assert!(!e.at_load.contains_key(&pid));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Gone, and libcufile's load not seen while it ran: the JSON file its thread opened while
    /// opening the driver is its configuration, if it is still that file (same inode).
    #[test]
    fn a_gone_jobs_configuration_is_the_json_its_driver_open_read() {
        let mut e = GdsEarly::default();
        use std::os::unix::fs::MetadataExt;
        let dir = std::env::temp_dir().join(format!("gdr-json-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let json = dir.join("job.json");
        std::fs::write(&json, r#"{ "properties": { "force_compat_mode": true } }"#).unwrap();
        let m = std::fs::metadata(&json).unwrap();
        let dev = ((m.dev() >> 8) as u32 & 0xfff) << 20 | (m.dev() as u32 & 0xff);
        let (gone, tid) = (u32::MAX - 5, u32::MAX - 6);
        let opened = |ino| crate::events::storage::FileOpened {
            ctx: crate::events::Context { pid: gone, tid, ..Default::default() },
            fd: 5,
            dirfd: -100,
            path: json.display().to_string(),
            open_flags: 0,
            id: crate::events::storage::Identity { dev, ino, f_flags: 0, mode: 0o100644 },
        };
        e.note_open(&opened(m.ino()));
        let mut open = call(gone, GdsOp::DriverOpen);
        open.ctx.tid = tid;
        e.note_call(&open);
        let f = e.early.remove(&gone).map(|(f, _)| f).expect("read");
        assert!(f.config.effective.force_compat_mode.as_ref().is_some_and(|(on, _)| *on), "{f:?}");
        // Another file now at that path: not what the job read.
        e.note_open(&opened(m.ino() + 1));
        e.note_call(&open);
        let f = e.early.remove(&gone).map(|(f, _)| f).expect("read");
        assert!(f.config.error.is_some() && f.config.effective.force_compat_mode.is_none(), "{f:?}");
        e.forget(gone);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn facts_read_at_the_driver_open_reach_the_next_snapshot_once() {
        let mut e = GdsEarly::default();
        // This test process as the cuFile process: its /proc entry is real.
        let me = std::process::id();
        e.note_call(&call(me, GdsOp::Read));
        assert!(!e.early.contains_key(&me), "a read is not the moment");
        e.note_call(&call(me, GdsOp::DriverOpen));
        let mounts = e.early.get(&me).map(|(f, _)| f.mounts.len());
        assert!(mounts.is_some_and(|n| n > 0), "read from /proc/{me}: {mounts:?}");
        // A process that is gone: the machine's facts, and why its own are missing.
        let gone = u32::MAX - 1;
        e.note_call(&call(gone, GdsOp::HandleRegister));
        let f = e.early.remove(&gone).map(|(f, _)| f).expect("read");
        // Its files' filesystems still known, from this reader's own mount table.
        assert!(!f.mounts.is_empty() && f.config.file.is_none(), "{f:?}");
        assert!(
            f.config.error.as_deref().is_some_and(|e| e.contains(&format!("/proc/{gone}/environ"))),
            "{f:?}"
        );
        let kernel = crate::preflight::proc_gds::read_kernel_p2pdma(Path::new("/proc"));
        assert_eq!(f.kernel_p2pdma, kernel);

        let mut s = StorageState::new();
        s.record(StorageEvent::Gds(call(me, GdsOp::DriverOpen)));
        // Handed to the state once, at once; still in the next snapshot (for recordings).
        let now: Vec<(u32, ProcGdsFacts)> = e.fresh().into_iter().filter(|(p, _)| *p == me).collect();
        assert_eq!(now.len(), 1);
        assert!(e.fresh().iter().all(|(p, _)| *p != me), "handed once");
        s.set_gds_facts(me, now[0].1.clone());
        assert!(s.procs[&me].gds_facts.is_some());
        let mut exited = s.procs.remove(&me).unwrap();
        exited.exited = true; // gone by the tick: the facts read at the call still count
        s.procs.insert(me, exited);
        let got = e.take_for(&s);
        assert_eq!(got.iter().map(|(p, _)| *p).collect::<Vec<_>>(), [me]);
        assert!(!got[0].1.mounts.is_empty());
        assert!(e.take_for(&s).is_empty(), "taken once; a process with facts is not read again");
    }
}
