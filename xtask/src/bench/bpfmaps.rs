//! How full the kernel maps a process holds are, read the way bpftool does (no bpftool here):
//! the map ids from /proc/PID/fdinfo, then a walk of each hash map's keys by id
//! (BPF_MAP_GET_FD_BY_ID, BPF_MAP_GET_NEXT_KEY). And how many programs are loaded at all.

use std::collections::BTreeMap;

const BPF_MAP_GET_NEXT_KEY: libc::c_long = 4;
const BPF_MAP_GET_FD_BY_ID: libc::c_long = 14;
/// BPF_MAP_TYPE_HASH, PERCPU_HASH, LRU_HASH, LRU_PERCPU_HASH: the ones that fill up.
const HASH_TYPES: [u32; 4] = [1, 5, 9, 10];

#[derive(Debug, Clone, Copy)]
pub struct Fill {
    pub entries: u64,
    pub max_entries: u64,
}

fn bpf(cmd: libc::c_long, attr: &mut [u64; 4]) -> libc::c_long {
    // SAFETY: a bpf(2) call with an attribute buffer of the size passed.
    unsafe { libc::syscall(libc::SYS_bpf, cmd, attr.as_mut_ptr(), std::mem::size_of_val(attr)) }
}

/// Entries in the map with this id (None: it is gone or cannot be opened).
fn count(id: u32, key_size: usize) -> Option<u64> {
    let mut attr = [u64::from(id), 0, 0, 0];
    let fd = bpf(BPF_MAP_GET_FD_BY_ID, &mut attr);
    if fd < 0 {
        return None;
    }
    let (mut key, mut next) = (vec![0u8; key_size], vec![0u8; key_size]);
    let mut n = 0u64;
    let mut first = true;
    loop {
        let mut a = [fd as u64, if first { 0 } else { key.as_ptr() as u64 }, next.as_mut_ptr() as u64, 0];
        if bpf(BPF_MAP_GET_NEXT_KEY, &mut a) < 0 {
            break;
        }
        n += 1;
        first = false;
        std::mem::swap(&mut key, &mut next);
        if n > 10_000_000 {
            break;
        }
    }
    // SAFETY: our own descriptor.
    unsafe { libc::close(fd as i32) };
    Some(n)
}

/// Every hash map `pid` holds, by name: entries now and the maximum.
pub fn fills(pid: u32) -> BTreeMap<String, Fill> {
    let mut ids = BTreeMap::new();
    for e in std::fs::read_dir(format!("/proc/{pid}/fdinfo")).into_iter().flatten().flatten() {
        let Ok(text) = std::fs::read_to_string(e.path()) else { continue };
        let field =
            |k: &str| text.lines().find_map(|l| l.strip_prefix(k).and_then(|v| v.trim().parse::<u64>().ok()));
        if let (Some(id), Some(ty), Some(max), Some(ks)) =
            (field("map_id:"), field("map_type:"), field("max_entries:"), field("key_size:"))
        {
            if HASH_TYPES.contains(&(ty as u32)) {
                ids.insert(id as u32, (max, ks as usize));
            }
        }
    }
    let mut out = BTreeMap::new();
    for (id, (max, ks)) in ids {
        let Some(entries) = count(id, ks) else { continue };
        out.insert(name(id).unwrap_or_else(|| format!("map {id}")), Fill { entries, max_entries: max });
    }
    out
}

/// The map's name (BPF_OBJ_GET_INFO_BY_FD).
fn name(id: u32) -> Option<String> {
    const BPF_OBJ_GET_INFO_BY_FD: libc::c_long = 15;
    let mut attr = [u64::from(id), 0, 0, 0];
    let fd = bpf(BPF_MAP_GET_FD_BY_ID, &mut attr);
    if fd < 0 {
        return None;
    }
    // struct bpf_map_info: type, id, key_size, value_size, max_entries, map_flags, name[16], ...
    let mut info = [0u8; 88];
    let mut a = [fd as u64 | ((info.len() as u64) << 32), info.as_mut_ptr() as u64, 0, 0];
    let r = bpf(BPF_OBJ_GET_INFO_BY_FD, &mut a);
    // SAFETY: our own descriptor.
    unsafe { libc::close(fd as i32) };
    if r < 0 {
        return None;
    }
    let raw = &info[24..40];
    let end = raw.iter().position(|&b| b == 0).unwrap_or(raw.len());
    Some(String::from_utf8_lossy(&raw[..end]).into_owned())
}

/// BPF programs loaded in the kernel now (BPF_PROG_GET_NEXT_ID).
pub fn programs_loaded() -> u64 {
    const BPF_PROG_GET_NEXT_ID: libc::c_long = 11;
    let (mut id, mut n) = (0u32, 0u64);
    loop {
        let mut attr = [u64::from(id), 0, 0, 0];
        if bpf(BPF_PROG_GET_NEXT_ID, &mut attr) < 0 {
            return n;
        }
        id = (attr[0] >> 32) as u32;
        n += 1;
    }
}

/// Waits (at most `limit`) until no more BPF programs are loaded than `baseline`: a stopped
/// tracer's hooks are released by a child of it a while after it exits, and a run measured
/// before then is not untraced.
/// Some(seconds it took).
pub fn wait_programs_gone(baseline: u64, limit: std::time::Duration) -> Option<f64> {
    let t = std::time::Instant::now();
    while programs_loaded() > baseline {
        if t.elapsed() > limit {
            return None;
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    Some(t.elapsed().as_secs_f64())
}

/// One loaded program's figures (kernel.bpf_stats_enabled must be on for runs and time).
#[derive(Debug, Clone)]
pub struct ProgStats {
    pub name: String,
    pub run_cnt: u64,
    pub run_time_ns: u64,
}

/// Every BPF program loaded now, by id: its name, runs and time (BPF_PROG_GET_NEXT_ID,
/// BPF_PROG_GET_FD_BY_ID, BPF_OBJ_GET_INFO_BY_FD), as bpftool prog show reads them.
pub fn prog_stats() -> BTreeMap<u32, ProgStats> {
    const BPF_PROG_GET_NEXT_ID: libc::c_long = 11;
    const BPF_PROG_GET_FD_BY_ID: libc::c_long = 13;
    const BPF_OBJ_GET_INFO_BY_FD: libc::c_long = 15;
    let mut out = BTreeMap::new();
    let mut id = 0u32;
    loop {
        let mut attr = [u64::from(id), 0, 0, 0];
        if bpf(BPF_PROG_GET_NEXT_ID, &mut attr) < 0 {
            return out;
        }
        id = (attr[0] >> 32) as u32;
        let mut a = [u64::from(id), 0, 0, 0];
        let fd = bpf(BPF_PROG_GET_FD_BY_ID, &mut a);
        if fd < 0 {
            continue;
        }
        // struct bpf_prog_info: name[16] at 64, run_time_ns at 192, run_cnt at 200.
        let mut info = [0u8; 208];
        let mut a = [fd as u64 | ((info.len() as u64) << 32), info.as_mut_ptr() as u64, 0, 0];
        let r = bpf(BPF_OBJ_GET_INFO_BY_FD, &mut a);
        // SAFETY: our own descriptor.
        unsafe { libc::close(fd as i32) };
        if r < 0 {
            continue;
        }
        let raw = &info[64..80];
        let end = raw.iter().position(|&b| b == 0).unwrap_or(raw.len());
        let u64_at = |o: usize| u64::from_ne_bytes(info[o..o + 8].try_into().expect("8 bytes"));
        out.insert(
            id,
            ProgStats {
                name: String::from_utf8_lossy(&raw[..end]).into_owned(),
                run_time_ns: u64_at(192),
                run_cnt: u64_at(200),
            },
        );
    }
}
