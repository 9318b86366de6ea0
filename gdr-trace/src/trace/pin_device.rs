//! The RDMA device of a kernel pin where no BTF describes `struct ib_device` (MLNX_OFED and
//! DOCA-OFED DKMS builds usually ship none): the pin record carries the device number of the
//! uverbs file its verb came through (`/dev/infiniband/uverbsN`), and sysfs names the device
//! behind each such node (`/sys/class/infiniband_verbs/uverbsN/{dev,ibdev}`). Read here, a step
//! after decoding, while the device is surely registered; recordings keep the name.

use std::{collections::HashMap, path::PathBuf};

use crate::events::Event;

/// uverbs node number (`MKDEV`: major << 20 | minor) -> RDMA device name.
#[derive(Debug)]
pub struct UverbsDevices {
    root: PathBuf,
    names: HashMap<u32, String>,
}

impl Default for UverbsDevices {
    fn default() -> Self {
        Self::at("/sys/class/infiniband_verbs")
    }
}

impl UverbsDevices {
    pub fn at(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into(), names: HashMap::new() }
    }

    /// The device behind uverbs node `rdev`, read again from sysfs when not known (a device
    /// registered since the last read).
    pub fn name(&mut self, rdev: u32) -> Option<String> {
        if rdev == 0 {
            return None;
        }
        if !self.names.contains_key(&rdev) {
            self.names = read(&self.root);
        }
        self.names.get(&rdev).cloned()
    }

    /// Names the device of a kernel pin that came without one.
    pub fn enrich(&mut self, ev: &mut Event) {
        let Event::Mr(r) = ev else { return };
        if r.device.is_none() && r.uverbs_dev != 0 {
            r.device = self.name(r.uverbs_dev);
        }
    }
}

/// Every `uverbsN/dev` ("231:192") with its `ibdev`.
fn read(root: &std::path::Path) -> HashMap<u32, String> {
    let Ok(dir) = std::fs::read_dir(root) else { return HashMap::new() };
    dir.flatten()
        .filter_map(|e| {
            let dev = std::fs::read_to_string(e.path().join("dev")).ok()?;
            let (major, minor) = dev.trim().split_once(':')?;
            let rdev = (major.parse::<u32>().ok()? << 20) | minor.parse::<u32>().ok()?;
            let name = std::fs::read_to_string(e.path().join("ibdev")).ok()?;
            Some((rdev, name.trim().to_string()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_a_pins_device_by_its_uverbs_node() {
        let dir = tempfile::tempdir().unwrap();
        for (n, dev, ib) in [("uverbs0", "231:192", "mlx5_0"), ("uverbs1", "231:193", "efa_sim0")] {
            std::fs::create_dir(dir.path().join(n)).unwrap();
            std::fs::write(dir.path().join(n).join("dev"), format!("{dev}\n")).unwrap();
            std::fs::write(dir.path().join(n).join("ibdev"), format!("{ib}\n")).unwrap();
        }
        let mut d = UverbsDevices::at(dir.path());
        assert_eq!(d.name((231 << 20) | 193).as_deref(), Some("efa_sim0"));
        let ctx = crate::events::Context { pid: 1, ..Default::default() };
        let mut rec = crate::events::MrRecord::at(
            crate::events::MrKind::Register,
            "kprobe:ib_umem_get",
            ctx,
            0,
            4096,
            1,
        );
        rec.uverbs_dev = (231 << 20) | 192;
        let mut ev = Event::Mr(rec);
        d.enrich(&mut ev);
        let Event::Mr(r) = &ev else { unreachable!() };
        assert_eq!(r.device.as_deref(), Some("mlx5_0"));
        // A device registered since the last read is found on the next miss; none is None.
        std::fs::create_dir(dir.path().join("uverbs2")).unwrap();
        std::fs::write(dir.path().join("uverbs2/dev"), "231:194").unwrap();
        std::fs::write(dir.path().join("uverbs2/ibdev"), "bnxt_re0").unwrap();
        assert_eq!(d.name((231 << 20) | 194).as_deref(), Some("bnxt_re0"));
        assert_eq!(d.name(0), None);
        assert_eq!(d.name(7), None);
    }
}
