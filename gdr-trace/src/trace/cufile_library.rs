//! Which library copy a cuFile call went to: the file mapped at the called function's address
//! in the calling process, as that process names it (its /proc/PID/maps: a container's own
//! path, a wheel's `site-packages/nvidia/cufile/lib/libcufile.so.0`).
//!
//! The mappings of the processes that call are cached (a process maps its library once; a
//! miss reads /proc again), for a bounded number of processes.

use std::{collections::HashMap, fs};

use crate::procfs::parse_maps_line;

/// Processes whose mappings are kept; past this the cache starts over.
const MAX_PROCS: usize = 1024;

/// A file mapping: [start, end) and the path.
type Mapping = (u64, u64, String);

/// The mappings of processes that called, by pid (one per trace, owned by its storage reader).
#[derive(Debug, Default)]
pub struct Libraries {
    cache: HashMap<u32, Vec<Mapping>>,
}

/// The file mappings of `maps` text.
pub fn file_mappings(maps: &str) -> Vec<Mapping> {
    maps.lines()
        .filter_map(|l| {
            let e = parse_maps_line(l)?;
            let (a, b) = e.range.split_once('-')?;
            Some((u64::from_str_radix(a, 16).ok()?, u64::from_str_radix(b, 16).ok()?, e.path))
        })
        .collect()
}

/// The path mapped at `addr` in `maps`.
pub fn find(maps: &[Mapping], addr: u64) -> Option<&str> {
    maps.iter().find(|(a, b, _)| (*a..*b).contains(&addr)).map(|(_, _, p)| p.as_str())
}

/// The library file `pid` has mapped at `addr`, as it names it. None when the address is
/// unknown (0), or the process is gone and was never seen.
impl Libraries {
    pub fn at(&mut self, pid: u32, addr: u64) -> Option<String> {
        if addr == 0 {
            return None;
        }
        let cache = &mut self.cache;
        if let Some(p) = cache.get(&pid).and_then(|m| find(m, addr)) {
            return Some(p.to_string());
        }
        let text = fs::read_to_string(format!("/proc/{pid}/maps")).ok()?;
        let maps = file_mappings(&text);
        let found = find(&maps, addr).map(str::to_string);
        if cache.len() >= MAX_PROCS {
            cache.clear();
        }
        cache.insert(pid, maps);
        found
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_mapping_of_an_address() {
        let maps = "7f0000000000-7f0000100000 r--p 00000000 08:01 11 /site-packages/nvidia/cufile/lib/libcufile.so.0\n\
                    7f0000100000-7f0000200000 r-xp 00100000 08:01 11 /site-packages/nvidia/cufile/lib/libcufile.so.0\n\
                    7f0000200000-7f0000300000 rw-p 00000000 00:00 0 \n\
                    7f0000300000-7f0000400000 r-xp 00000000 08:01 12 /usr/lib/libc.so.6 (deleted)\n";
        let m = file_mappings(maps);
        assert_eq!(m.len(), 3, "{m:?}");
        assert_eq!(find(&m, 0x7f00_0010_0bc0), Some("/site-packages/nvidia/cufile/lib/libcufile.so.0"));
        assert_eq!(find(&m, 0x7f00_0030_0000), Some("/usr/lib/libc.so.6"));
        assert_eq!(find(&m, 0x7f00_0020_0010), None, "anonymous memory is no library");
        assert_eq!(find(&m, 0x7f00_0040_0000), None, "the end is outside");
    }

    #[test]
    fn a_live_process_names_its_own_libraries() {
        let addr = libc::getpid as unsafe extern "C" fn() -> libc::pid_t as usize as u64;
        let mut libs = Libraries::default();
        let lib = libs.at(std::process::id(), addr).expect("libc's mapping");
        assert!(lib.contains("libc"), "{lib}");
        assert_eq!(libs.at(std::process::id(), 0), None);
    }
}
