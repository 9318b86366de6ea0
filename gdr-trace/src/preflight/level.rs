//! `NCCL_NET_GDR_LEVEL`: the farthest GPU–NIC distance at which NCCL still uses GPUDirect RDMA.

use serde::Serialize;

use super::pci::Distance;

/// NCCL's levels. NCCL has no NODE: two host bridges in one NUMA node are PHB to NCCL.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub enum GdrLevel {
    #[serde(rename = "LOC")]
    Loc,
    #[serde(rename = "PIX")]
    Pix,
    #[serde(rename = "PXB")]
    Pxb,
    #[serde(rename = "PHB")]
    Phb,
    #[serde(rename = "SYS")]
    Sys,
}

impl GdrLevel {
    /// NCCL's default (without `NCCL_NET_GDR_C2C` platforms): PXB.
    pub const DEFAULT: GdrLevel = GdrLevel::Pxb;

    /// Parses NCCL's spellings: LOC, PIX, PXB, PHB, SYS (any case) and the legacy integers 0-4.
    pub fn parse(s: &str) -> Result<Self, String> {
        match s.trim().to_ascii_uppercase().as_str() {
            "LOC" | "0" => Ok(GdrLevel::Loc),
            "PIX" | "1" => Ok(GdrLevel::Pix),
            "PXB" | "2" => Ok(GdrLevel::Pxb),
            "PHB" | "3" => Ok(GdrLevel::Phb),
            "SYS" | "4" => Ok(GdrLevel::Sys),
            other => {
                Err(format!("invalid NCCL_NET_GDR_LEVEL {other:?}: expected LOC, PIX, PXB, PHB, SYS or 0-4"))
            }
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            GdrLevel::Loc => "LOC",
            GdrLevel::Pix => "PIX",
            GdrLevel::Pxb => "PXB",
            GdrLevel::Phb => "PHB",
            GdrLevel::Sys => "SYS",
        }
    }

    /// Whether NCCL uses GDR at this distance (it disables GDR when distance > level).
    /// `None` when the distance is unknown.
    pub fn allows(self, d: Distance) -> Option<bool> {
        let as_level = match d {
            Distance::Pix => GdrLevel::Pix,
            Distance::Pxb => GdrLevel::Pxb,
            Distance::Phb | Distance::Node => GdrLevel::Phb,
            Distance::Sys => GdrLevel::Sys,
            Distance::Unknown => return None,
        };
        Some(as_level <= self)
    }
}

impl std::fmt::Display for GdrLevel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where the effective level came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum LevelSource {
    Default,
    Flag,
    Env,
    /// `NCCL_NET_GDR_LEVEL set by environment to ...` in the NCCL log given to `doctor`.
    NcclLog,
}

/// The effective level and its source (plus a note when the environment held garbage).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GdrLevelSetting {
    pub level: GdrLevel,
    pub source: LevelSource,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

impl Default for GdrLevelSetting {
    fn default() -> Self {
        Self { level: GdrLevel::DEFAULT, source: LevelSource::Default, note: None }
    }
}

impl GdrLevelSetting {
    /// The flag wins; else `env` (the value of `NCCL_NET_GDR_LEVEL`, if set); else PXB. An
    /// invalid flag is an error; an invalid environment value is ignored as NCCL ignores it.
    pub fn resolve(flag: Option<&str>, env: Option<&str>) -> Result<Self, String> {
        if let Some(f) = flag {
            return Ok(Self { level: GdrLevel::parse(f)?, source: LevelSource::Flag, note: None });
        }
        match env {
            Some(e) if !e.trim().is_empty() => match GdrLevel::parse(e) {
                Ok(level) => Ok(Self { level, source: LevelSource::Env, note: None }),
                Err(msg) => Ok(Self {
                    note: Some(format!("{msg}; NCCL ignores it, so the default PXB applies")),
                    ..Self::default()
                }),
            },
            _ => Ok(Self::default()),
        }
    }

    pub fn describe(&self) -> String {
        let src = match self.source {
            LevelSource::Default => "NCCL default",
            LevelSource::Flag => "--nccl-gdr-level",
            LevelSource::Env => "from NCCL_NET_GDR_LEVEL",
            LevelSource::NcclLog => "from the NCCL log",
        };
        format!("NCCL_NET_GDR_LEVEL={} ({src})", self.level)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_names_and_legacy_integers() {
        assert_eq!(GdrLevel::parse("pxb").unwrap(), GdrLevel::Pxb);
        assert_eq!(GdrLevel::parse("SYS").unwrap(), GdrLevel::Sys);
        assert_eq!(GdrLevel::parse("0").unwrap(), GdrLevel::Loc);
        assert_eq!(GdrLevel::parse("3").unwrap(), GdrLevel::Phb);
        assert!(GdrLevel::parse("NODE").is_err());
        assert!(GdrLevel::parse("7").is_err());
    }

    #[test]
    fn allows_follows_distance_greater_than_level() {
        let l = GdrLevel::Pxb;
        assert_eq!(l.allows(Distance::Pix), Some(true));
        assert_eq!(l.allows(Distance::Pxb), Some(true));
        assert_eq!(l.allows(Distance::Phb), Some(false));
        assert_eq!(l.allows(Distance::Node), Some(false));
        assert_eq!(GdrLevel::Phb.allows(Distance::Node), Some(true));
        assert_eq!(GdrLevel::Phb.allows(Distance::Sys), Some(false));
        assert_eq!(GdrLevel::Sys.allows(Distance::Sys), Some(true));
        assert_eq!(GdrLevel::Loc.allows(Distance::Pix), Some(false));
        assert_eq!(l.allows(Distance::Unknown), None);
    }

    #[test]
    fn flag_beats_env_and_bad_env_falls_back() {
        let s = GdrLevelSetting::resolve(Some("PHB"), Some("SYS")).unwrap();
        assert_eq!((s.level, s.source), (GdrLevel::Phb, LevelSource::Flag));
        let s = GdrLevelSetting::resolve(None, Some("SYS")).unwrap();
        assert_eq!((s.level, s.source), (GdrLevel::Sys, LevelSource::Env));
        let s = GdrLevelSetting::resolve(None, Some("bogus")).unwrap();
        assert_eq!((s.level, s.source), (GdrLevel::Pxb, LevelSource::Default));
        assert!(s.note.is_some());
        assert!(GdrLevelSetting::resolve(Some("bogus"), None).is_err());
    }
}
