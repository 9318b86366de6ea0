//! The loaded object's maps, taken out of aya's `Ebpf` for the trace loop: the `Ebpf` itself
//! (its programs and their links) goes to the thread that loads the library follower's programs
//! and starts it (`follow_remote`), and comes back at the end.

use std::{collections::HashMap, os::fd::AsFd};

use aya::{
    maps::{Map, MapData},
    Ebpf,
};

#[derive(Default)]
pub struct MapSet(HashMap<String, Map>);

impl MapSet {
    /// Every map of `ebpf`, taken out of it (programs keep theirs: the kernel holds them).
    pub fn take_all(ebpf: &mut Ebpf) -> Self {
        let names: Vec<String> = ebpf.maps().map(|(n, _)| n.to_string()).collect();
        Self(names.into_iter().filter_map(|n| Some((n.clone(), ebpf.take_map(&n)?))).collect())
    }

    pub fn map(&self, name: &str) -> Option<&Map> {
        self.0.get(name)
    }

    pub fn map_mut(&mut self, name: &str) -> Option<&mut Map> {
        self.0.get_mut(name)
    }

    pub fn take_map(&mut self, name: &str) -> Option<Map> {
        self.0.remove(name)
    }

    /// Every map through descriptors of their own (close-on-exec), for another thread.
    pub fn dup_all(&self) -> Self {
        Self(self.0.iter().filter_map(|(n, m)| Some((n.clone(), dup(m)?))).collect())
    }

    /// Map `name` through a descriptor of its own (close-on-exec), for another thread.
    pub fn dup(&self, name: &str) -> Option<Map> {
        dup(self.map(name)?)
    }
}

/// `m` through a descriptor of its own (close-on-exec).
pub fn dup(m: &Map) -> Option<Map> {
    let fd = data(m)?.fd().as_fd().try_clone_to_owned().ok()?;
    Map::from_map_data(MapData::from_fd(fd).ok()?).ok()
}

/// The map's data, whatever its type.
pub fn data(m: &Map) -> Option<&MapData> {
    use Map::*;
    match m {
        Array(d) | HashMap(d) | LruHashMap(d) | PerCpuArray(d) | PerCpuHashMap(d) | PerCpuLruHashMap(d)
        | RingBuf(d) | ProgramArray(d) | PerfEventArray(d) | StackTraceMap(d) => Some(d),
        _ => None,
    }
}
