//! Top-N bookkeeping that keeps Prometheus counters monotonic while the set of processes with
//! their own series changes (see the parent module).

use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    hash::Hash,
};

/// One counter series' values.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Totals {
    pub count: u64,
    pub bytes: u64,
}

impl Totals {
    pub fn add(&mut self, o: Totals) {
        self.count += o.count;
        self.bytes += o.bytes;
    }
    fn sub(self, o: Totals) -> Totals {
        Totals { count: self.count - o.count, bytes: self.bytes - o.bytes }
    }
}

#[derive(Debug, Default)]
struct KeyState {
    seq: u64,
    /// Whose key it is (a uid): keys are ranked within their group first.
    group: u32,
    bytes: u64,
    total: BTreeMap<String, Totals>,
    /// What was last shown under `other` (the totals when last ranked outside the top N).
    exposed: BTreeMap<String, Totals>,
    /// What stays counted under `other` since the key entered the top N.
    base: BTreeMap<String, Totals>,
}

/// A top key's own series: key, sub-series, value.
pub type Own<K> = (K, String, Totals);

/// Top-N bookkeeping for monotonic counters keyed by `K`, each with sub-series `S` (verdict and
/// device as one string).
#[derive(Debug)]
pub struct TopN<K> {
    n: usize,
    max_keys: usize,
    keys: HashMap<K, KeyState>,
    top: BTreeSet<K>,
    /// Totals of keys forgotten (beyond `max_keys`), folded into `other` for good.
    dropped: BTreeMap<String, Totals>,
    seq: u64,
}

impl<K: Clone + Ord + Hash> TopN<K> {
    pub fn new(n: usize, max_keys: usize) -> Self {
        Self {
            n,
            max_keys: max_keys.max(n),
            keys: HashMap::new(),
            top: BTreeSet::new(),
            dropped: BTreeMap::new(),
            seq: 0,
        }
    }

    pub fn add(&mut self, key: &K, series: &str, t: Totals) {
        self.add_ranked(key, series, t, t.bytes);
    }

    /// As [`Self::add`], for a key of `group` (its uid): the top N are picked by rank within
    /// each group first, so one group's many large keys cannot push another group's largest
    /// into `other` (while there are fewer groups than N).
    pub fn add_grouped(&mut self, key: &K, group: u32, series: &str, t: Totals) {
        self.add_ranked(key, series, t, t.bytes);
        if let Some(k) = self.keys.get_mut(key) {
            k.group = group;
        }
    }

    /// As [`Self::add`], counting `rank` bytes (not the series' own) toward the key's rank: for
    /// series that measure bytes already ranked under another series.
    pub fn add_ranked(&mut self, key: &K, series: &str, t: Totals, rank: u64) {
        if !self.keys.contains_key(key) {
            self.seq += 1;
            self.keys.insert(key.clone(), KeyState { seq: self.seq, ..Default::default() });
        }
        let k = self.keys.get_mut(key).expect("inserted");
        k.bytes += rank;
        k.total.entry(series.to_string()).or_default().add(t);
    }

    /// Picks the top N: every group's largest key by bytes (first seen first on ties), then
    /// every group's second, and so on; forgets the smallest keys beyond `max_keys`.
    pub fn rerank(&mut self) {
        let mut order: Vec<(&K, &KeyState)> = self.keys.iter().collect();
        order.sort_by(|a, b| b.1.bytes.cmp(&a.1.bytes).then(a.1.seq.cmp(&b.1.seq)));
        let mut seen: HashMap<u32, usize> = HashMap::new();
        let mut by_rank: Vec<(usize, usize)> = order
            .iter()
            .enumerate()
            .map(|(i, (_, s))| {
                let r = seen.entry(s.group).or_default();
                *r += 1;
                (*r, i)
            })
            .collect();
        by_rank.sort_unstable();
        let new_top: BTreeSet<K> = by_rank.iter().take(self.n).map(|&(_, i)| order[i].0.clone()).collect();
        let forget: Vec<K> = order.iter().skip(self.max_keys).map(|(k, _)| (*k).clone()).collect();
        for k in new_top.difference(&self.top) {
            let s = self.keys.get_mut(k).expect("ranked");
            s.base = std::mem::take(&mut s.exposed);
        }
        for (_, s) in self.keys.iter_mut().filter(|(k, _)| !new_top.contains(*k)) {
            s.exposed = s.total.clone();
        }
        self.top = new_top;
        for k in forget {
            if let Some(s) = self.keys.remove(&k) {
                for (series, t) in s.total {
                    self.dropped.entry(series).or_default().add(t);
                }
            }
        }
    }

    /// Forgets `key` now (its processes are gone): its totals fold into `other` for good.
    pub fn retire(&mut self, key: &K) {
        self.top.remove(key);
        if let Some(s) = self.keys.remove(key) {
            for (series, t) in s.total {
                self.dropped.entry(series).or_default().add(t);
            }
        }
    }

    /// How many keys are remembered (at most `max_keys`).
    pub fn remembered(&self) -> usize {
        self.keys.len()
    }

    pub fn in_top(&self, key: &K) -> bool {
        self.top.contains(key)
    }

    /// Own series of the top keys, and `other` (everything else, ever).
    pub fn series(&self) -> (Vec<Own<K>>, BTreeMap<String, Totals>) {
        let mut own = Vec::new();
        let mut other = self.dropped.clone();
        for (k, s) in &self.keys {
            let top = self.top.contains(k);
            for (series, t) in &s.total {
                let base = if top { s.base.get(series).copied().unwrap_or_default() } else { *t };
                other.entry(series.clone()).or_default().add(base);
                if top {
                    own.push((k.clone(), series.clone(), t.sub(base)));
                }
            }
        }
        own.sort_by(|a, b| (&a.0, &a.1).cmp(&(&b.0, &b.1)));
        (own, other)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(bytes: u64) -> Totals {
        Totals { count: 1, bytes }
    }

    /// One uid's twenty large processes do not push another uid's one small process out of
    /// the top N: ranks within each uid come first.
    #[test]
    fn one_groups_many_large_keys_leave_room_for_anothers_largest() {
        let mut top: TopN<u32> = TopN::new(3, 100);
        for k in 1..=20 {
            top.add_grouped(&k, 1000, "gpu-peermem\tmlx5_0", t(1 << 30));
        }
        top.add_grouped(&99, 1001, "gpu-dmabuf\tmlx5_0", t(4096));
        top.rerank();
        assert!(top.in_top(&99), "the second uid's job has its own series");
        assert_eq!((1..=20).filter(|k| top.in_top(k)).count(), 2, "the first uid has the rest");
        // Within one group, bytes decide, as before.
        let mut one: TopN<u32> = TopN::new(2, 100);
        for (k, b) in [(1, 10), (2, 30), (3, 20)] {
            one.add_grouped(&k, 7, "host\trxe0", t(b));
        }
        one.rerank();
        assert_eq!((one.in_top(&1), one.in_top(&2), one.in_top(&3)), (false, true, true));
    }
}
