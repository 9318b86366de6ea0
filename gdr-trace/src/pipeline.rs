//! The analysis line, pure (no BPF, no I/O): records -> correlate -> classify -> aggregate ->
//! sink. Live tracing and replay drive the same `Pipeline`.

use crate::{
    aggregate::Aggregator,
    classify::classify,
    correlate::{Correlator, Joined},
    events::MrRecord,
    sink::Sink,
};

#[derive(Debug, Default)]
pub struct Pipeline {
    corr: Correlator,
    agg: Aggregator,
    out: Vec<Joined>,
}

impl Pipeline {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn record(&mut self, rec: MrRecord, sink: &mut dyn Sink) {
        self.corr.push(rec, &mut self.out);
        self.deliver(sink);
    }

    /// Closes items whose other sources did not come within the window (`now_ns`: CLOCK_MONOTONIC).
    pub fn tick(&mut self, now_ns: u64, sink: &mut dyn Sink) {
        self.corr.tick(now_ns, &mut self.out);
        self.deliver(sink);
    }

    pub fn finish(&mut self, sink: &mut dyn Sink) {
        self.corr.flush(&mut self.out);
        self.deliver(sink);
    }

    pub fn aggregator(&self) -> &Aggregator {
        &self.agg
    }

    fn deliver(&mut self, sink: &mut dyn Sink) {
        for j in self.out.drain(..) {
            match j {
                Joined::Registered(r) => {
                    let v = classify(&r);
                    self.agg.registered(&r, v);
                    sink.registered(&r, v);
                }
                Joined::Released(r) => {
                    let owner = self.agg.released(&r);
                    sink.released(&r, owner);
                }
            }
        }
    }
}

/// CLOCK_MONOTONIC in ns: the clock of `bpf_ktime_get_ns`.
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: valid pointer to a timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}
