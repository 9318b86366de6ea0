//! Whether a kernel can do PCI P2PDMA (what GPUDirect Storage's P2PDMA mode needs), from its
//! release and config: read by `check` (preflight's gds-mounts finding) and by the storage
//! analysis (a live process's GDS mode), one decision for both.

/// Whether the running kernel can do PCI P2PDMA, and the evidence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelP2pdma {
    pub release: Option<String>,
    /// CONFIG_PCI_P2PDMA=y; None: no config found.
    pub config: Option<bool>,
    /// Where `config` came from, and what it said.
    pub source: String,
}

impl KernelP2pdma {
    /// Kernel >= 6.2 with CONFIG_PCI_P2PDMA; None when either is not known.
    pub fn usable(&self) -> Option<bool> {
        let new_enough = self.release.as_deref().and_then(|r| release_at_least(r, 6, 2));
        match (new_enough, self.config) {
            (Some(false), _) | (_, Some(false)) => Some(false),
            (Some(true), Some(true)) => Some(true),
            _ => None,
        }
    }

    pub fn why(&self) -> String {
        let rel = self.release.as_deref().unwrap_or("unknown release");
        match (self.usable(), self.config) {
            (Some(true), _) => format!("kernel {rel} with CONFIG_PCI_P2PDMA=y"),
            (Some(false), Some(false)) => format!(
                "kernel {rel} built without CONFIG_PCI_P2PDMA ({}; Debian's 6.1 and 6.12 kernels lack it too)",
                self.source
            ),
            (Some(false), _) => format!("kernel {rel} is older than 6.2"),
            _ => format!("kernel {rel}: CONFIG_PCI_P2PDMA not known ({})", self.source),
        }
    }
}

/// "6.1.0-27-amd64" >= 6.2?
pub fn release_at_least(release: &str, major: u32, minor: u32) -> Option<bool> {
    let mut it = release.split(|c: char| !c.is_ascii_digit());
    let a: u32 = it.next()?.parse().ok()?;
    let b: u32 = it.next()?.parse().ok()?;
    Some((a, b) >= (major, minor))
}

/// CONFIG_PCI_P2PDMA in a kernel config's text: `=y` true; "is not set" or absent false.
pub fn config_p2pdma(text: &str) -> bool {
    text.lines().any(|l| l.trim() == "CONFIG_PCI_P2PDMA=y")
}
