//! The `lost_events` families: every reason, and the tenants that lost records.

use super::{tests::sink, *};

/// Every reason a record can be lost for is a `lost_events` series with its count (the list
/// once left out `storage_map_full`: storage I/O not counted went unseen in Prometheus), and
/// the series add up to the total `watch` prints.
#[test]
fn every_lost_reason_is_a_series() {
    let shared = Arc::new(Shared::default());
    let mut m = sink(&shared, 5);
    use gdr_trace_common::lost::*;
    let mut lost = Lost::default();
    lost.delivered = Some(1000);
    for (r, n) in [
        (RINGBUF_FULL, 11),
        (STASH_FULL, 12),
        (STASH_MISS, 13),
        (STORAGE_MAP_FULL, 14),
        (TRACKED_FULL, 15),
        (NVFS_ASYNC_MISS, 17),
        (BYTES_MAP_FULL, 18),
        (BYTES_TRUNCATED, 19),
        (OVER_BUDGET, 20),
        (UNDECODABLE, 16),
    ] {
        lost.add(r, n);
    }
    m.emit(&Output::Summary { agg: &Aggregator::new(), lost: &lost, last: false });
    let body = shared.body.lock().unwrap().clone();
    let mut sum = 0;
    for (reason, n) in [
        ("ringbuf_full", 11),
        ("stash_full", 12),
        ("stash_miss", 13),
        ("storage_map_full", 14),
        ("tracked_full", 15),
        ("nvfs_async_miss", 17),
        ("bytes_map_full", 18),
        ("bytes_truncated", 19),
        ("over_budget", 20),
        ("undecodable", 16),
    ] {
        let want = format!("gdr_trace_lost_events_total{{reason=\"{reason}\"}} {n}");
        assert!(body.contains(&want), "missing {want} in\n{body}");
        sum += n;
    }
    assert_eq!(sum, lost.total());
    assert_eq!(
        body.matches("gdr_trace_lost_events_total{").count(),
        10,
        "no other reason, delivered is none:\n{body}"
    );
}

/// Tracing the whole node, the tenants that lost records are series of their own, a root
/// process's by its cgroup: one tenant's flood shows as its own loss, not as everyone's.
#[test]
fn lost_records_are_charged_to_their_tenants() {
    let shared = Arc::new(Shared::default());
    let mut m = sink(&shared, 5);
    let mut lost = Lost::of(gdr_trace_common::lost::RINGBUF_FULL, 9);
    lost.add(gdr_trace_common::lost::OVER_BUDGET, 5);
    lost.by_tenant[0] = (65534, 12);
    lost.by_tenant[1] = (gdr_trace_common::ROOT_CGROUP | 4242, 2);
    m.emit(&Output::Summary { agg: &Aggregator::new(), lost: &lost, last: false });
    let body = shared.body.lock().unwrap().clone();
    for want in [
        "gdr_trace_lost_events_by_tenant_total{tenant=\"uid 65534\"} 12",
        "gdr_trace_lost_events_by_tenant_total{tenant=\"cgroup 4242\"} 2",
    ] {
        assert!(body.contains(want), "missing {want} in\n{body}");
    }
    assert_eq!(body.matches("gdr_trace_lost_events_by_tenant_total{").count(), 2, "{body}");
}
