//! Records that never reached userspace, by reason: the counts of each reason
//! `gdr_trace_common::lost::REASONS` declares, serialized by its names in its order.

use gdr_trace_common::lost::{Reason, REASONS, RINGBUF_FULL, SLOTS, STASH_FULL, STASH_MISS, UNDECODABLE};
use serde::{de::MapAccess, ser::SerializeMap};

/// Lost records by reason (a slot each), with what a live trace knows beside them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Lost {
    counts: [u64; SLOTS as usize],
    /// Not a loss: the records that did reach userspace and decode, beside the lost ones, so a
    /// reader can tell what share was lost (`watch --json`'s `lost` line says it as
    /// `delivered`). Live traces only: None in a replay (a recording's `end` line has its own
    /// `records`), so `report` does not claim none arrived.
    pub delivered: Option<u64>,
    /// Tracing the whole node: the tenants that lost most (`ringbuf_full` and `over_budget`
    /// records, charged to the tenant whose record or evidence it was), most first, as
    /// (tenant key: uid, or `ROOT_CGROUP` | cgroup id for root; count); zero counts are empty.
    pub by_tenant: [(u64, u64); LOST_TENANTS],
}

/// Tenants named in [`Lost::by_tenant`].
pub const LOST_TENANTS: usize = 16;

/// A tenant key as a label: `uid 1001`, or `cgroup 4242` for a root process's cgroup.
pub fn tenant_label(key: u64) -> String {
    if key & gdr_trace_common::ROOT_CGROUP != 0 {
        format!("cgroup {}", key & !gdr_trace_common::ROOT_CGROUP)
    } else {
        format!("uid {key}")
    }
}

impl Lost {
    /// The kernel's `LOST` slots as read (userspace's own reasons are added with [`Self::add`]).
    pub fn from_slots(s: &[u64]) -> Self {
        let mut l = Self::default();
        for r in REASONS.iter().filter(|r| r.slot != UNDECODABLE) {
            l.counts[r.slot as usize] = s.get(r.slot as usize).copied().unwrap_or(0);
        }
        l
    }
    /// One reason's count (`gdr_trace_common::lost::*`).
    pub fn get(&self, reason: u32) -> u64 {
        self.counts.get(reason as usize).copied().unwrap_or(0)
    }
    pub fn add(&mut self, reason: u32, n: u64) {
        if let Some(c) = self.counts.get_mut(reason as usize) {
            *c += n;
        }
    }
    /// A loss of `n` for one reason and nothing else (tests, fixtures).
    pub fn of(reason: u32, n: u64) -> Self {
        let mut l = Self::default();
        l.add(reason, n);
        l
    }
    /// Each reason with its count, in the declared order.
    pub fn reasons(&self) -> impl Iterator<Item = (&'static Reason, u64)> + '_ {
        REASONS.iter().map(|r| (r, self.counts[r.slot as usize]))
    }
    /// Each reason by its serialized name (`ringbuf_full`, ...), with its count.
    pub fn by_reason(&self) -> Vec<(String, u64)> {
        self.reasons().map(|(r, n)| (r.name.to_string(), n)).collect()
    }
    pub fn total(&self) -> u64 {
        self.reasons().map(|(_, n)| n).sum()
    }
}

impl serde::Serialize for Lost {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(REASONS.len()))?;
        for (r, n) in self.reasons() {
            m.serialize_entry(r.name, &n)?;
        }
        m.end()
    }
}

/// A recording's `lost` object: every reason this build knows, by name. The first three are in
/// every recording since format 1; a reason added later and absent (an older writer) is 0; one
/// this build does not know is refused (a recording from a newer build would otherwise lose
/// its count silently).
impl<'de> serde::Deserialize<'de> for Lost {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Lost;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("lost records by reason")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Lost, A::Error> {
                let mut l = Lost::default();
                let mut seen = 0u32;
                while let Some((name, n)) = map.next_entry::<String, u64>()? {
                    let Some(r) = REASONS.iter().find(|r| r.name == name) else {
                        let names = REASONS.iter().map(|r| r.name).collect();
                        return Err(serde::de::Error::unknown_field(&name, leak(names)));
                    };
                    l.counts[r.slot as usize] = n;
                    seen |= 1 << r.slot;
                }
                match FIRST.iter().find(|s| seen & (1 << **s) == 0) {
                    Some(s) => Err(serde::de::Error::missing_field(
                        REASONS.iter().find(|r| r.slot == *s).map_or("?", |r| r.name),
                    )),
                    None => Ok(l),
                }
            }
        }
        d.deserialize_map(V)
    }
}

/// Reasons every recording has had since format 1.
const FIRST: [u32; 3] = [RINGBUF_FULL, STASH_FULL, STASH_MISS];

/// `unknown_field` wants a `'static` list: the names are `'static` already, the slice is made
/// once per refusal (an error path that ends the recording's reading).
fn leak(names: Vec<&'static str>) -> &'static [&'static str] {
    Box::leak(names.into_boxed_slice())
}

#[cfg(test)]
mod tests {
    use super::*;
    use gdr_trace_common::lost::OVER_BUDGET;

    #[test]
    fn every_reason_round_trips_by_name_in_order() {
        let mut l = Lost::default();
        for (i, r) in REASONS.iter().enumerate() {
            l.add(r.slot, i as u64 + 1);
        }
        let v = serde_json::to_value(l).unwrap();
        let names: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(names.len(), REASONS.len());
        let back: Lost = serde_json::from_value(v).unwrap();
        assert_eq!(back, l);
        assert_eq!(l.total(), (1..=REASONS.len() as u64).sum::<u64>());
        assert_eq!(
            serde_json::to_string(&Lost::of(RINGBUF_FULL, 2)).unwrap().split(',').next(),
            Some("{\"ringbuf_full\":2")
        );
    }

    #[test]
    fn an_older_recording_misses_reasons_and_a_newer_one_is_refused() {
        let old: Lost = serde_json::from_str(r#"{"ringbuf_full":3,"stash_full":0,"stash_miss":1}"#).unwrap();
        assert_eq!((old.get(RINGBUF_FULL), old.get(OVER_BUDGET), old.total()), (3, 0, 4));
        let e = serde_json::from_str::<Lost>(r#"{"ringbuf_full":3,"eaten_by_grue":1}"#).unwrap_err();
        assert!(e.to_string().contains("eaten_by_grue"), "{e}");
        let e = serde_json::from_str::<Lost>(r#"{"ringbuf_full":3,"stash_full":0}"#).unwrap_err();
        assert!(e.to_string().contains("stash_miss"), "{e}");
    }

    #[test]
    fn the_kernels_slots_never_fill_userspaces_own_reason() {
        let mut slots = [0u64; SLOTS as usize];
        slots[UNDECODABLE as usize] = 7;
        slots[OVER_BUDGET as usize] = 2;
        let l = Lost::from_slots(&slots);
        assert_eq!((l.get(OVER_BUDGET), l.get(UNDECODABLE)), (2, 0));
    }

    /// The recording schema's `lost` object lists exactly the declared reasons.
    #[test]
    fn the_recording_schema_names_every_reason() {
        let schema: serde_json::Value =
            serde_json::from_str(include_str!("../../../docs/schema/recording/end.schema.json")).unwrap();
        let lost = &schema["properties"]["lost"];
        let mut props: Vec<&str> =
            lost["properties"].as_object().unwrap().keys().map(String::as_str).collect();
        let mut names: Vec<&str> = REASONS.iter().map(|r| r.name).collect();
        props.sort_unstable();
        names.sort_unstable();
        assert_eq!(props, names);
    }
}
