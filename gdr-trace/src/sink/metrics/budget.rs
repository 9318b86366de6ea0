//! What bounds `serve`'s series per tenant: the `device` label is only ever a device
//! the kernel knows (the name a libibverbs caller passes comes from its own memory), and each
//! uid owns at most [`SERIES_PER_UID`] registration series; what is over goes to one counted
//! `over-budget` series, never into another tenant's.

use std::{
    collections::{BTreeSet, HashMap},
    path::PathBuf,
    time::{Duration, Instant},
};

use super::labels::ProcKey;

/// Registration series (process identity × verdict × device) one uid may own at once.
pub const SERIES_PER_UID: usize = 64;
/// Uids counted one by one in `over_budget`; more fold into uid "other".
const MAX_UIDS: usize = 1024;
/// The label a device name gets when the kernel does not list it.
pub const UNVERIFIED: &str = "unverified";
/// The process identity and verdict of registrations over their uid's budget.
pub const OVER_BUDGET: &str = "over-budget";
/// How often an unknown name may make the device list be read again (a device can appear
/// after start; a flood of made-up names must not read sysfs at each).
const REREAD: Duration = Duration::from_secs(10);

/// RDMA devices the kernel knows: the names under /sys/class/infiniband.
#[derive(Debug)]
pub struct Devices {
    dir: Option<PathBuf>,
    names: BTreeSet<String>,
    read_at: Option<Instant>,
}

impl Devices {
    /// The running kernel's devices (read on first use).
    pub fn system() -> Self {
        Self { dir: Some("/sys/class/infiniband".into()), names: BTreeSet::new(), read_at: None }
    }

    /// A fixed list (tests, replays).
    pub fn fixed(names: &[&str]) -> Self {
        Self { dir: None, names: names.iter().map(|s| s.to_string()).collect(), read_at: None }
    }

    fn reread(&mut self) {
        let Some(dir) = &self.dir else { return };
        if self.read_at.is_some_and(|t| t.elapsed() < REREAD) {
            return;
        }
        self.read_at = Some(Instant::now());
        if let Ok(d) = std::fs::read_dir(dir) {
            self.names = d.flatten().filter_map(|e| e.file_name().into_string().ok()).collect();
        }
    }

    /// `name` when the kernel lists such a device, else [`UNVERIFIED`]; none stays "".
    pub fn label(&mut self, name: Option<&str>) -> String {
        let Some(name) = name.filter(|n| !n.is_empty()) else { return String::new() };
        if !self.names.contains(name) {
            self.reread();
        }
        if self.names.contains(name) {
            name.to_string()
        } else {
            UNVERIFIED.to_string()
        }
    }
}

/// Series owned per uid, and registrations folded for being over budget.
#[derive(Debug, Default)]
pub struct Budget {
    owned: HashMap<u32, BTreeSet<(ProcKey, String)>>,
    /// Registrations counted under `over-budget`, by uid ("other" past [`MAX_UIDS`] uids).
    pub over: HashMap<String, u64>,
}

impl Budget {
    /// The key and series a registration of `uid` is counted under: its own, or `over-budget`.
    pub fn admit(&mut self, uid: u32, key: ProcKey, series: String) -> (ProcKey, String) {
        let owned = self.owned.entry(uid).or_default();
        let pair = (key, series);
        if owned.contains(&pair) || owned.len() < SERIES_PER_UID {
            owned.insert(pair.clone());
            return pair;
        }
        let who = if self.over.len() < MAX_UIDS || self.over.contains_key(&uid.to_string()) {
            uid.to_string()
        } else {
            "other".to_string()
        };
        *self.over.entry(who).or_default() += 1;
        (over_budget_key(), format!("{OVER_BUDGET}\t"))
    }

    /// `key`'s series are gone (folded into `other`): its uid may own new ones.
    pub fn release(&mut self, key: &ProcKey) {
        for owned in self.owned.values_mut() {
            owned.retain(|(k, _)| k != key);
        }
        self.owned.retain(|_, o| !o.is_empty());
    }

    /// Series owned now, all uids together.
    pub fn owned(&self) -> usize {
        self.owned.values().map(BTreeSet::len).sum()
    }
}

pub fn over_budget_key() -> ProcKey {
    ProcKey { comm: OVER_BUDGET.into(), ..Default::default() }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(comm: &str) -> ProcKey {
        ProcKey { comm: comm.into(), ..Default::default() }
    }

    #[test]
    fn a_uid_over_its_budget_is_folded_and_counted_and_others_keep_theirs() {
        let mut b = Budget::default();
        for i in 0..SERIES_PER_UID * 3 {
            let (k, s) = b.admit(65534, key("flood"), format!("host\tdev{i}"));
            if i < SERIES_PER_UID {
                assert_eq!((k.comm.as_str(), s), ("flood", format!("host\tdev{i}")));
            } else {
                assert_eq!((k, s), (over_budget_key(), "over-budget\t".to_string()));
            }
        }
        assert_eq!(b.over["65534"], (SERIES_PER_UID * 2) as u64);
        // Another tenant is untouched, and a series already owned stays its own.
        assert_eq!(b.admit(1000, key("job"), "host\trxe0".into()).0, key("job"));
        assert_eq!(b.admit(65534, key("flood"), "host\tdev0".into()).0, key("flood"));
        // Its processes gone, the uid may own series again.
        b.release(&key("flood"));
        assert_eq!(b.admit(65534, key("next"), "host\trxe0".into()).0, key("next"));
        assert_eq!(b.owned(), 2);
    }

    #[test]
    fn device_names_the_kernel_does_not_list_are_unverified() {
        let mut d = Devices::fixed(&["mlx5_0"]);
        assert_eq!(d.label(Some("mlx5_0")), "mlx5_0");
        assert_eq!(d.label(Some("fake\u{1b}[31m")), UNVERIFIED);
        assert_eq!(d.label(None), "");
        let dir = std::env::temp_dir().join(format!("gdr-ib-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("rxe0")).unwrap();
        let mut d = Devices { dir: Some(dir.clone()), names: BTreeSet::new(), read_at: None };
        assert_eq!(d.label(Some("rxe0")), "rxe0");
        assert_eq!(d.label(Some("rxe1")), UNVERIFIED);
        std::fs::remove_dir_all(dir).unwrap();
    }
}
