//! Numbers for people. A leaf: imports nothing of this crate.

/// Bytes for people: 4096 -> "4.0 KiB", up to TiB.
pub fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn human_bytes() {
        assert_eq!(super::human_bytes(0), "0 B");
        assert_eq!(super::human_bytes(4096), "4.0 KiB");
        assert_eq!(super::human_bytes(3 << 20), "3.0 MiB");
        assert_eq!(super::human_bytes(3_435_973_837), "3.2 GiB");
    }
}
