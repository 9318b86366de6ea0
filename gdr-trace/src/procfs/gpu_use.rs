//! GPU use of processes, asked of /proc without letting a process make the trace loop read it
//! over and over (40 processes holding 19,000 descriptors each made every summary
//! readlink 760,000 of them). "Uses a GPU" is learnt once; "does not (yet)" is asked again only
//! after a back-off per process that doubles up to a minute.

use std::{
    collections::HashMap,
    time::{Duration, Instant},
};

const FIRST_RETRY: Duration = Duration::from_secs(1);
const LAST_RETRY: Duration = Duration::from_secs(64);
/// Processes remembered at most; past that the oldest answers are forgotten.
const MAX_PIDS: usize = 16384;

/// A [`super::uses_gpu`]-like probe with answers kept per process.
pub struct GpuUseCache<P: FnMut(u32) -> Option<bool>> {
    probe: P,
    known: HashMap<u32, Known>,
}

#[derive(Debug, Clone, Copy)]
struct Known {
    uses: Option<bool>,
    next: Instant,
    backoff: Duration,
}

impl<P: FnMut(u32) -> Option<bool>> GpuUseCache<P> {
    pub fn new(probe: P) -> Self {
        Self { probe, known: HashMap::new() }
    }

    /// What is known of `pid` at `now`, asking /proc only when its back-off has passed.
    pub fn get_at(&mut self, pid: u32, now: Instant) -> Option<bool> {
        if let Some(k) = self.known.get(&pid) {
            if k.uses == Some(true) || now < k.next {
                return k.uses;
            }
        }
        let uses = (self.probe)(pid);
        let backoff = self.known.get(&pid).map_or(FIRST_RETRY, |k| (k.backoff * 2).min(LAST_RETRY));
        if self.known.len() >= MAX_PIDS && !self.known.contains_key(&pid) {
            let oldest = self.known.iter().min_by_key(|(_, k)| k.next).map(|(p, _)| *p);
            oldest.map(|p| self.known.remove(&p));
        }
        self.known.insert(pid, Known { uses, next: now + backoff, backoff });
        uses
    }

    /// As [`Self::get_at`], now.
    pub fn get(&mut self, pid: u32) -> Option<bool> {
        self.get_at(pid, Instant::now())
    }
}

#[cfg(test)]
mod tests {
    use std::{cell::Cell, rc::Rc};

    use super::*;

    #[test]
    fn a_process_without_a_gpu_is_asked_again_only_after_a_growing_back_off() {
        let asked = Rc::new(Cell::new(0));
        let a = asked.clone();
        let mut c = GpuUseCache::new(move |_| {
            a.set(a.get() + 1);
            Some(false)
        });
        let t0 = Instant::now();
        for _ in 0..1000 {
            assert_eq!(c.get_at(7, t0), Some(false));
        }
        assert_eq!(asked.get(), 1, "a thousand summaries in the same second ask once");
        c.get_at(7, t0 + Duration::from_millis(1500));
        assert_eq!(asked.get(), 2);
        c.get_at(7, t0 + Duration::from_millis(3000));
        assert_eq!(asked.get(), 2, "the second back-off is 2 s");
        c.get_at(7, t0 + Duration::from_millis(3600));
        assert_eq!(asked.get(), 3);
    }

    #[test]
    fn gpu_use_once_seen_is_never_asked_again() {
        let asked = Rc::new(Cell::new(0));
        let a = asked.clone();
        let mut c = GpuUseCache::new(move |_| {
            a.set(a.get() + 1);
            Some(true)
        });
        let t0 = Instant::now();
        assert_eq!(c.get_at(9, t0), Some(true));
        assert_eq!(c.get_at(9, t0 + Duration::from_secs(3600)), Some(true));
        assert_eq!(asked.get(), 1);
    }
}
