use gdr_trace_common::mr::bytes::{ByteCount, ByteKey};

use super::*;
use crate::mr::bytes::Ledger;

fn agg_with(keys: &[(u32, &'static str, u64)]) -> Aggregator {
    let mut ledger = Ledger::default();
    for (i, (lkey, key, out)) in keys.iter().enumerate() {
        ledger.registered(42, (0, *lkey), i as u64, key);
        ledger.reading(&[(
            ByteKey { tgid: 42, lkey: *lkey, dev: 0 },
            ByteCount { bytes_out: *out, bytes_in: 0, ops: 1, tenant: 0 },
        )]);
    }
    let mut agg = Aggregator::new();
    agg.set_bytes(&ledger);
    agg
}

#[test]
fn gpu_bytes_pass_at_once_host_bytes_fail_at_the_end() {
    let gdr = agg_with(&[(1, "gpu-dmabuf", 4096), (2, "host", 64)]);
    let o = decide(&gdr, true, None, 60.0, false).expect("passes before the end");
    assert_eq!((o.code, o.result()), (exit::OK, "pass"));
    assert!(o.reason.contains("4096 bytes through GPU memory (gpu-dmabuf)"), "{}", o.reason);

    let staged = agg_with(&[(2, "host", 100), (3, HOST_CUDA_PINNED, 1000)]);
    assert_eq!(decide(&staged, true, None, 60.0, false), None, "no answer before the end");
    let o = decide(&staged, true, None, 60.0, true).unwrap();
    assert_eq!(o.code, exit::FINDING);
    assert!(
        o.reason.starts_with("host-staged: moved 1100 bytes")
            && o.reason.contains("1000 of them in CUDA pinned")
    );
    let host = agg_with(&[(2, "host", 100)]);
    let o = decide(&host, true, None, 60.0, true).unwrap();
    let want = "host memory only: moved 100 bytes, none through GPU memory (no GPU in use)";
    assert_eq!((o.code, o.reason.as_str()), (exit::FINDING, want));
}

#[test]
fn nothing_moved_is_a_failure_unless_the_hooks_could_not_see() {
    let none = Aggregator::new();
    let o = decide(&none, true, None, 60.0, true).unwrap();
    assert_eq!(
        (o.code, o.reason.as_str()),
        (exit::FINDING, "moved nothing within 60s (no registration, no work request)")
    );
    let o = decide(&none, false, None, 60.0, true).unwrap();
    assert_eq!(o.code, exit::FINDING, "no registration: nothing to see: {}", o.reason);
    // Registered, and no work request seen: hooks missing, or posts the hooks cannot see.
    let mut regd = Aggregator::new();
    let reg = crate::mr::correlate::Registration { id: 1, length: 4096, ..Default::default() };
    regd.registered(&reg, crate::mr::classify::Verdict::Host);
    let o = decide(&regd, false, None, 60.0, true).unwrap();
    assert!(o.code == exit::CANNOT_RUN && o.reason.contains("no RDMA provider's post/poll"), "{}", o.reason);
    let o = decide(&regd, true, None, 60.0, true).unwrap();
    assert!(o.code == exit::CANNOT_RUN && o.reason.contains("written to the NIC directly"), "{}", o.reason);
}

#[test]
fn within_takes_units() {
    assert_eq!(parse_within("60s"), Ok(60.0));
    assert_eq!(parse_within("2m"), Ok(120.0));
    assert_eq!(parse_within("500ms"), Ok(0.5));
    assert_eq!(parse_within("7"), Ok(7.0));
    assert!(parse_within("0s").is_err() && parse_within("soon").is_err() && parse_within("-1").is_err());
}

#[test]
fn providers_hooked_at_start_count_as_hooked() {
    let st = |hook: &'static str, attached: bool| crate::facts::HookStatus {
        hook,
        side: "user",
        location: None,
        attached: attached.then(|| "uprobe".to_string()),
        reasons: vec![],
    };
    assert!(provider_hooked_at_start(&[st("ibv_reg_mr", true), st("post_send", true)]));
    assert!(!provider_hooked_at_start(&[st("ibv_reg_mr", true), st("post_send", false)]));
    // A library row of the same kind of side is not a provider row.
    assert!(!provider_hooked_at_start(&[st("ibv_open_device", true)]));
}

#[test]
fn a_host_that_cannot_tell_memory_type_cannot_tell_not_moved_nothing() {
    // It answered "moved nothing" (exit 1) where no kernel registration hook could attach.
    let none = Aggregator::new();
    let why = "memory type of registrations (host or GPU) cannot be told here: no kernel registration hook attached (x)";
    let o = decide(&none, true, Some(why), 60.0, true).unwrap();
    assert_eq!((o.code, o.reason.as_str()), (exit::CANNOT_RUN, format!("cannot tell: {why}").as_str()));
    assert_eq!(o.result(), "unknown");
    assert_eq!(decide(&none, true, Some(why), 60.0, false), None);
}
