use std::sync::Arc;

use super::super::{
    tests::{register, sink, snapshot},
    Shared,
};
use crate::{
    events::Context,
    mr::{classify::Verdict, correlate::Registration},
    sink::{Output, Sink},
};

#[test]
fn registrations_only_a_uprobe_saw_are_claims_kept_out_of_the_series() {
    // 1,000 x 1 TiB through a fake provider were 1.03e15 registered bytes and pushed a real
    // job's series into "other".
    let shared = Arc::new(Shared::default());
    let mut m = sink(&shared, 1);
    register(&mut m, 1, 10, 1001, "trainer", "mlx5_0", 2 << 20);
    for i in 0..1000 {
        let reg = Registration {
            id: 100 + i,
            ctx: Context { pid: 20, tid: 20, comm: "trainer".into(), uid: 65534, ..Default::default() },
            length: 1 << 40,
            device: Some("mlx5_0".into()),
            sources: vec![crate::events::Source::parse("uprobe:ibv_reg_mr")],
            ..Default::default()
        };
        m.emit(&Output::Registered { reg: &reg, verdict: Verdict::Host });
    }
    let body = snapshot(&mut m, &shared);
    let real = "gdr_trace_registered_bytes_total{comm=\"trainer\",container=\"\",pod=\"\",uid=\"1001\",verdict=\"host\",device=\"mlx5_0\"} 2097152";
    assert!(body.contains(real), "{body}");
    let claimed = |l: &&str| l.starts_with("gdr_trace_registered_bytes_total") && l.contains("1099511627776");
    assert!(!body.lines().any(|l| claimed(&l)), "no claim in the registration series:\n{body}");
    assert!(body.contains("gdr_trace_unverified_registrations_total{uid=\"65534\"} 1000"), "{body}");
    assert!(
        body.contains("gdr_trace_unverified_registered_bytes_total{uid=\"65534\"} 1099511627776000"),
        "{body}"
    );
}

/// A registration the kernel saw with no library call hooked (the follower's window after a
/// new copy is mapped) is counted by uid; one both saw is not.
#[test]
fn registrations_no_library_call_hook_saw_are_counted_by_uid() {
    let shared = Arc::new(Shared::default());
    let mut m = sink(&shared, 5);
    let both = vec![
        crate::events::Source::parse("uprobe:ibv_reg_mr"),
        crate::events::Source::parse("fexit:ib_umem_get"),
    ];
    for (id, uid, sources) in
        [(1, 1001, both), (2, 1002, vec![crate::events::Source::parse("fexit:ib_umem_get")])]
    {
        let reg = Registration {
            id,
            ctx: Context { pid: 10 + id as u32, tid: 10, comm: "job".into(), uid, ..Default::default() },
            length: 4096,
            device: Some("mlx5_0".into()),
            sources,
            ..Default::default()
        };
        m.emit(&Output::Registered { reg: &reg, verdict: Verdict::Host });
    }
    let body = snapshot(&mut m, &shared);
    assert!(body.contains("gdr_trace_registrations_without_library_call_total{uid=\"1002\"} 1"), "{body}");
    assert!(!body.contains("without_library_call_total{uid=\"1001\"}"), "{body}");
    // Both are real registrations: in the series.
    assert!(body.contains("uid=\"1001\",verdict=\"host\",device=\"mlx5_0\"} 1"), "{body}");
    assert!(body.contains("uid=\"1002\",verdict=\"host\",device=\"mlx5_0\"} 1"), "{body}");
}
