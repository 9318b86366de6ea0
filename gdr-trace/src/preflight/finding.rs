//! A finding: one prerequisite, its status, the evidence read and a fix hint.

use serde::Serialize;

/// How a prerequisite stands. Ordered from best to worst for `worst()`; `NotApplicable` and
/// `Unknown` never make `check` fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Status {
    Pass,
    Warn,
    Fail,
    NotApplicable,
    Unknown,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Pass => "pass",
            Status::Warn => "warn",
            Status::Fail => "fail",
            Status::NotApplicable => "not-applicable",
            Status::Unknown => "unknown",
        }
    }

    /// Severity for combining statuses: fail > warn > unknown > pass > not-applicable.
    fn severity(self) -> u8 {
        match self {
            Status::NotApplicable => 0,
            Status::Pass => 1,
            Status::Unknown => 2,
            Status::Warn => 3,
            Status::Fail => 4,
        }
    }

    /// The worse of two statuses.
    pub fn worst(self, other: Status) -> Status {
        if other.severity() > self.severity() {
            other
        } else {
            self
        }
    }
}

impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One thing read: where, and what it said.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Evidence {
    pub path: String,
    pub value: String,
}

/// One checked prerequisite.
#[derive(Debug, Clone, Serialize)]
pub struct Finding {
    /// Stable id: `gpus`, `rdma-nics`, `driver`, `peermem`, `memory-peers`, `dmabuf`,
    /// `versions`, `topology`, `acs`, `gpu-p2p`, `iommu`, `bar1`, `link`, `gds`.
    pub id: String,
    pub status: Status,
    pub summary: String,
    pub evidence: Vec<Evidence>,
    /// What to do about it; `None` when nothing needs doing.
    pub hint: Option<String>,
}

impl Finding {
    pub fn new(id: &str, status: Status, summary: impl Into<String>) -> Self {
        Self { id: id.to_string(), status, summary: summary.into(), evidence: Vec::new(), hint: None }
    }

    pub fn hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }

    pub fn evidence(mut self, evidence: Vec<Evidence>) -> Self {
        self.evidence = evidence;
        self
    }

    /// Adds one piece of evidence.
    pub fn with(mut self, path: impl Into<String>, value: impl Into<String>) -> Self {
        self.evidence.push(ev(path, value));
        self
    }
}

/// Formats a byte count as people read it (`3.2 GiB`).
pub use crate::units::human_bytes;

/// Shorthand for an [`Evidence`].
pub fn ev(path: impl Into<String>, value: impl Into<String>) -> Evidence {
    Evidence { path: path.into(), value: value.into() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn worst_orders_fail_over_warn_over_unknown_over_pass() {
        assert_eq!(Status::Pass.worst(Status::Warn), Status::Warn);
        assert_eq!(Status::Fail.worst(Status::Warn), Status::Fail);
        assert_eq!(Status::NotApplicable.worst(Status::Pass), Status::Pass);
        assert_eq!(Status::Pass.worst(Status::Unknown), Status::Unknown);
    }

    #[test]
    fn status_serializes_kebab_case() {
        let s = serde_json::to_string(&Status::NotApplicable).unwrap();
        assert_eq!(s, "\"not-applicable\"");
    }
}
