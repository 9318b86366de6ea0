//! The hook report on a kernel like the build host's (no kprobes, fentry refused, syscall
//! tracepoints, no libcuda): each kernel-wide reason once, rows that fit, nothing lost.

use super::*;
use crate::term::{with_style, Style};

const EPERM: &str =
    "capability_fentry: the BPF_PROG_LOAD syscall returned Operation not permitted (os error 1)";
const NO_PMU: &str =
    "no kprobe PMU (/sys/bus/event_source/devices/kprobe/type missing: kernel built without \
                      CONFIG_KPROBES?)";

use crate::facts::FactSource;

fn facts() -> KernelFacts {
    KernelFacts {
        kernel: "6.18.44".into(),
        vmlinux_btf: true,
        ib_device_name_off: None,
        dmabuf_exporter_readable: false,
        kprobe_unavailable: Some(NO_PMU.into()),
        fentry_unavailable: Some(EPERM.into()),
        storage_offsets_unknown: vec![],
        peermem: None,
        driver: None,
        fact_sources: vec![FactSource::device(false, true), FactSource::exporter(false, true)],
    }
}

fn row(hook: &'static str, location: Option<&str>, attached: Option<&str>, reasons: &[String]) -> HookStatus {
    HookStatus {
        hook,
        side: if location.is_some_and(|l| l.starts_with('/')) { "user" } else { "kernel" },
        location: location.map(String::from),
        attached: attached.map(String::from),
        reasons: reasons.to_vec(),
    }
}

fn missing_symbol(hook: &'static str) -> HookStatus {
    let reasons = [
        format!("symbol {hook} not in /proc/kallsyms (this kernel or its loaded modules don't have it)"),
        format!("{FENTRY_UNAVAILABLE}: {EPERM}"),
        format!("{KPROBE_UNAVAILABLE}: {NO_PMU}"),
    ];
    row(hook, None, None, &reasons)
}

fn hooks() -> Vec<HookStatus> {
    let lib = "/usr/lib/x86_64-linux-gnu/libibverbs.so.1";
    let no_cuda =
        ["libcuda.so.1 not found (not mapped by the process, not in the system's library paths)".into()];
    let syscall =
        [format!("fexit __x64_sys_read: {FENTRY_UNAVAILABLE}: {EPERM}"), SYSCALL_TRACEPOINT_COST.into()];
    vec![
        missing_symbol("ib_umem_get"),
        missing_symbol("ib_umem_dmabuf_get_pinned_with_dma_device"),
        row("ibv_reg_mr", Some(lib), Some("uprobe+uretprobe"), &["2 symbol versions hooked".into()]),
        row("ibv_dereg_mr", Some(lib), Some("uprobe+uretprobe"), &[]),
        row("cuMemImportFromShareableHandle", None, None, &no_cuda),
        row("cuMemAlloc", None, None, &no_cuda),
        row("cuMemFree", None, None, &no_cuda),
        row("cuCtxCreate", None, None, &no_cuda),
        row("read, pread64, readv, preadv, preadv2", Some("syscall"), Some("tracepoint"), &syscall),
        row(
            "mm_filemap_add_to_page_cache",
            Some("tracepoint filemap:mm_filemap_add_to_page_cache"),
            Some("tracepoint"),
            &[],
        ),
    ]
}

fn flat(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn too_wide(s: &str, cols: usize) -> Vec<&str> {
    s.lines().filter(|l| l.chars().count() > cols).collect()
}

#[test]
fn probes_states_kernel_wide_reasons_once_and_fits_the_width() {
    for style in [Style::terminal(100), Style::plain(Some(100)), Style::terminal(80), Style::plain(None)] {
        let text = with_style(style, || probes(&facts(), &hooks(), Detail::Rows));
        assert!(
            too_wide(&text, style.width.map_or(usize::MAX, usize::from)).is_empty(),
            "{style:?}:\n{text}"
        );
        let f = flat(&text);
        for once in [EPERM, NO_PMU, "put every system call of every process on the slow path while attached"]
        {
            assert_eq!(f.matches(once).count(), 1, "{once:?} once:\n{text}");
        }
        for h in hooks() {
            assert!(text.contains(h.hook.split(',').next().unwrap()), "{}:\n{text}", h.hook);
        }
        assert_eq!(text.contains('│'), style.boxes, "{text}");
        assert!(f.contains("4/10 hooks attached (2 uprobe+uretprobe, 2 tracepoint)"), "{text}");
        assert!(f.contains("gdr-trace probes --wide (or --json)"), "{text}");
    }
}

#[test]
fn without_a_width_every_row_is_one_line() {
    let text = with_style(Style::plain(None), || probes(&facts(), &hooks(), Detail::Rows));
    let kw = kernel_wide(&facts(), &hooks());
    for h in hooks() {
        let line = text.lines().find(|l| l.starts_with(&format!(" {} ", h.hook))).expect("a row");
        assert!(line.ends_with(&where_why(&h, &kw)), "{line}\n{text}");
    }
    assert!(text.lines().any(|l| l.starts_with("  [f] ") && l.ends_with(EPERM)), "{text}");
}

#[test]
fn rows_keep_one_short_reason_and_the_marks_of_the_kernel_facts() {
    let (facts, hooks) = (facts(), hooks());
    let kw = kernel_wide(&facts, &hooks);
    assert_eq!(kw.iter().map(|k| k.mark).collect::<String>(), "fks");
    let notes: Vec<String> = hooks.iter().map(|h| where_why(h, &kw)).collect();
    assert_eq!(notes[0], "not in /proc/kallsyms [f,k]");
    assert_eq!(notes[2], "libibverbs.so.1: 2 symbol versions hooked");
    assert_eq!(notes[3], "libibverbs.so.1");
    assert_eq!(notes[4], "libcuda.so.1 not found");
    assert_eq!(notes[8], "syscall: no fentry, slows every syscall [f,s]");
    assert_eq!(notes[9], "filemap");
    let two = row("x", None, None, &["first (why)".into(), "second".into()]);
    assert_eq!(note(&two, &kw), "first (+1 more)");
    let errno = row("x", None, None, &["uprobe: perf_event_open failed (os error 22)".into()]);
    assert_eq!(note(&errno, &kw), "uprobe: perf_event_open failed (os error 22)");
}

#[test]
fn a_kernel_that_allows_everything_has_no_kernel_wide_lines() {
    let facts = KernelFacts { kprobe_unavailable: None, fentry_unavailable: None, ..facts() };
    let hooks = vec![row("ib_umem_get", Some("ib_core"), Some("fentry+fexit"), &[])];
    let text = with_style(Style::plain(Some(100)), || probes(&facts, &hooks, Detail::Rows));
    assert!(!text.contains("On this kernel"), "{text}");
    assert!(flat(&text).contains("1/1 hooks attached (1 fentry+fexit)"), "{text}");
    assert_eq!(with_style(Style::plain(Some(100)), || banner(&facts, &hooks)).len(), 1);
}

#[test]
fn wide_has_every_reason_whole_on_its_row() {
    let text = with_style(Style::terminal(100), || probes(&facts(), &hooks(), Detail::Wide));
    for r in hooks().iter().flat_map(|h| h.reasons.clone()) {
        assert!(text.lines().any(|l| l.contains(&r)), "{r:?}:\n{text}");
    }
    // As often as rows carry it: nothing is folded.
    assert_eq!(text.matches(NO_PMU).count(), 2, "{text}");
}

#[test]
fn banner_counts_and_names_only_what_is_missing() {
    let lines = with_style(Style::terminal(100), || banner(&facts(), &hooks()));
    let text = lines.join("\n");
    assert!(too_wide(&text, 100).is_empty(), "{text}");
    assert!(
        text.starts_with("gdr-trace: kernel 6.18.44, 4/10 hooks attached (2 uprobe+uretprobe, 2 tracepoint)")
    );
    assert_eq!(flat(&text).matches(EPERM).count(), 1, "{text}");
    for attached in ["ibv_reg_mr", "ibv_dereg_mr", "pread64", "mm_filemap_add_to_page_cache"] {
        assert!(!text.contains(attached), "{attached}:\n{text}");
    }
    // Four hooks without libcuda: three named, the rest counted.
    let cuda = lines.iter().find(|l| flat(l).contains("libcuda.so.1 not found")).expect("libcuda line");
    assert!(
        flat(cuda).contains("cuMemImportFromShareableHandle, cuMemAlloc, cuMemFree and 1 more"),
        "{cuda}"
    );
    assert!(!text.contains("cuCtxCreate"), "{text}");
    assert!(text.ends_with("every hook and why: gdr-trace probes"), "{text}");
}

#[test]
fn probes_names_the_driver_branch_and_the_flow_expected() {
    use crate::drivers::{Detected, Reading};
    let reading = |file: &str, version: Option<&str>, reason: Option<&str>| Reading {
        file: file.into(),
        version: version.map(str::to_string),
        reason: reason.map(str::to_string),
    };
    let d = Detected {
        nvidia: reading("/sys/module/nvidia/version", Some("580.95.05"), None),
        nvidia_peermem: reading(
            "/sys/module/nvidia_peermem/version",
            None,
            Some("/sys/module/nvidia_peermem/version missing"),
        ),
        branch: Some(580),
        row: Some((580, "580.65.06")),
        expected: vec!["nv_mem: nv_mem_acquire_nc (trial a + b), nv_mem_get_pages_nc -> c".into()],
        reasons: vec!["something less than certain".into()],
    };
    let lines = driver_lines(&d);
    assert_eq!(
        lines,
        [
            "NVIDIA driver branch 580 (flow read at 580.65.06): nvidia.ko 580.95.05 \
             (/sys/module/nvidia/version); nvidia-peermem /sys/module/nvidia_peermem/version missing",
            "  expected peer flow: nv_mem: nv_mem_acquire_nc (trial a + b), nv_mem_get_pages_nc -> c",
            "  ! something less than certain",
        ]
    );
    let facts = KernelFacts { driver: Some(Detected { branch: Some(585), ..d }), ..facts() };
    let text = with_style(Style::terminal(100), || probes(&facts, &hooks(), Detail::Rows));
    assert!(flat(&text).contains("NVIDIA driver branch 585 (flow of 580, read at 580.65.06)"), "{text}");
}

#[test]
fn hooks_left_out_on_purpose_are_not_counted_as_unattached() {
    let mut hooks = hooks();
    let out = [format!("{} (--no-storage; doctor and audit don't use them)", crate::facts::LEFT_OUT)];
    hooks.push(row("openat, openat2", None, None, &out));
    hooks.push(row("close", None, None, &out));
    let lines = with_style(Style::terminal(100), || banner(&facts(), &hooks));
    let text = flat(&lines.join("\n"));
    assert!(
        text.contains("4/10 hooks attached (2 uprobe+uretprobe, 2 tracepoint), 2 left out on purpose"),
        "{text}"
    );
    assert!(text.contains("left out: openat, openat2, close: storage hooks left out"), "{text}");
    assert!(!text.contains("! not attached: openat"), "{text}");
}

/// `probes` took 207 lines for 78 hooks. By default the hooks are grouped by family
/// and outcome: every hook named or counted, whole cells wrapped to 80 and 100 columns.
#[test]
fn probes_groups_by_family_and_fits_80_and_100_columns() {
    let mut hooks = hooks();
    hooks.push(row("sys_exit_mmap", Some("tracepoint"), Some("tracepoint"), &[]));
    for width in [80u16, 100] {
        let text = with_style(Style::terminal(width), || probes(&facts(), &hooks, Detail::Grouped));
        let rows = with_style(Style::terminal(width), || probes(&facts(), &hooks, Detail::Rows));
        assert!(too_wide(&text, usize::from(width)).is_empty(), "{width}:\n{text}");
        assert!(text.lines().count() < rows.lines().count(), "shorter than a row a hook:\n{text}\n{rows}");
        let f = flat(&text);
        for family in
            ["rdma: 2/3 attached", "gpu: 0/1 attached", "p2p: 0/4 attached", "storage: 2/2 attached"]
        {
            assert!(f.contains(family), "{family:?}:\n{text}");
        }
        let libcuda =
            "! libcuda.so.1 not found: cuMemImportFromShareableHandle, cuMemAlloc, cuMemFree, cuCtxCreate";
        assert!(f.contains(libcuda) || f.contains("cuMemFree"), "{text}");
        assert!(f.contains("uprobe+uretprobe: ibv_reg_mr, ibv_dereg_mr"), "{text}");
        assert!(f.contains("cuMemFree") && f.contains("ib_umem_get"), "{text}");
        // The tracer's own row is listed, not counted: the total is the hooks'.
        assert!(f.contains("tracer (the tracer's own, not counted): tracepoint: sys_exit_mmap"), "{text}");
        assert!(f.contains("4/10 hooks attached (2 uprobe+uretprobe, 2 tracepoint)"), "{text}");
        assert!(f.contains("Each hook: gdr-trace probes -v"), "{text}");
        // A name is never cut: each one whole on a line.
        for h in &hooks {
            let first = h.hook.split(", ").next().unwrap();
            assert!(text.lines().any(|l| l.contains(first)), "{first}:\n{text}");
        }
    }
}

/// More hooks in a group than it names: the rest are counted, none dropped silently.
#[test]
fn a_group_names_a_few_hooks_and_counts_the_rest() {
    let no_cuda = ["libcuda.so.1 not found".to_string()];
    let names = [
        "cuCtxCreate",
        "cuCtxCreate_v3",
        "cuCtxCreate_v4",
        "cuDevicePrimaryCtxRetain",
        "cuCtxSetCurrent",
        "cuMemcpyPeer",
    ];
    let hooks: Vec<HookStatus> = names.iter().map(|n| row(n, None, None, &no_cuda)).collect();
    let text = with_style(Style::plain(None), || probes(&facts(), &hooks, Detail::Grouped));
    assert!(
        text.contains("p2p: 0/6 attached\n  ! libcuda.so.1 not found: cuCtxCreate, cuCtxCreate_v3, cuCtxCreate_v4, cuDevicePrimaryCtxRetain and 2 more\n"),
        "{text}"
    );
}
