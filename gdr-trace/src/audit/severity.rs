//! How bad a finding is (shared by the findings and the posture checks).

use serde::{Deserialize, Serialize};

/// How bad a finding is. Ordered: `--fail-on medium` fails on medium, high and critical.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, clap::ValueEnum,
)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Info,
    Low,
    Medium,
    High,
    Critical,
}

impl Severity {
    pub const ALL: [Severity; 5] = [Self::Info, Self::Low, Self::Medium, Self::High, Self::Critical];
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Info => "info",
            Self::Low => "low",
            Self::Medium => "medium",
            Self::High => "high",
            Self::Critical => "critical",
        }
    }
}
