//! What `probes` must say of every hook on this machine, derived from the facts the same
//! `hooks` record states about the kernel (kprobe and fentry availability), checked against
//! /proc/kallsyms, and from the libraries the dynamic loader knows (`ldconfig -p`) and their
//! own symbol tables: each hook has one exact expected state, never "attached or any reason".

use std::collections::BTreeSet;

use object::{Object, ObjectSymbol};
use serde_json::Value;

/// Kernel hooks on tracepoints: they work on every kernel this runs on.
const TRACEPOINTS: [&str; 5] = [
    "mm_filemap_add_to_page_cache",
    "io_uring_submit_req",
    "io_uring_file_get",
    "io_uring_complete",
    "sys_exit_mmap",
];
/// The storage path's system call hooks: fexit where fentry is allowed, else syscall tracepoints.
const SYSCALLS: [&str; 4] = [
    "openat, openat2",
    "close",
    "read, pread64, readv, preadv, preadv2",
    "write, pwrite64, writev, pwritev, pwritev2",
];

/// The RDMA provider's functions (reached through `ibv_context.ops` and `ibv_qp_ex`, not
/// exported): hooked by the library follower where a process's context or QP points; at start
/// only where an RDMA device is present (none on this host).
const PROVIDER: [&str; 8] = [
    "post_send",
    "post_recv",
    "post_srq_recv",
    "poll_cq",
    "wr_rdma_read",
    "wr_set_sge",
    "wr_set_sge_list",
    "wr_set_inline_data",
];

/// The library a user-space hook lives in.
fn library_of(hook: &str) -> &'static str {
    if hook.starts_with("ibv_") {
        "libibverbs.so.1"
    } else if hook.starts_with("cuFile") {
        "libcufile.so.0"
    } else if hook.starts_with("cu") {
        "libcuda.so.1"
    } else {
        panic!("a user-space hook this test has no expectation for: {hook}")
    }
}

/// Where the dynamic loader finds `lib` (`ldconfig -p`: the system's library paths).
fn in_system_paths(lib: &str) -> Option<String> {
    let out = std::process::Command::new("ldconfig").arg("-p").output().expect("run ldconfig -p");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let path = text.lines().find_map(|l| {
        let (name, path) = l.trim().split_once(" => ")?;
        (name.split_whitespace().next() == Some(lib) && name.contains("x86-64")).then(|| path.to_string())
    });
    path
}

/// The defined dynamic symbols of the library at `path`.
fn exported(path: &str) -> BTreeSet<String> {
    let data = std::fs::read(path).unwrap();
    let file = object::File::parse(&*data).unwrap_or_else(|e| panic!("{path}: {e}"));
    file.dynamic_symbols()
        .filter(|s| s.is_definition())
        .filter_map(|s| s.name().ok().map(String::from))
        .collect()
}

/// Checks every row of the `hooks` record `v` against what this machine must give.
pub fn check_every_hook(v: &Value) {
    let kallsyms = std::fs::read_to_string("/proc/kallsyms").unwrap();
    let in_kernel = |f: &str| kallsyms.lines().any(|l| l.split_whitespace().nth(2) == Some(f));
    let no_kprobe = v["kernel"]["kprobe_unavailable"].as_str();
    let no_fentry = v["kernel"]["fentry_unavailable"].as_str();
    let nvfs_here = in_kernel("nvfs_ioctl")
        || std::fs::read_dir("/dev")
            .unwrap()
            .flatten()
            .any(|e| e.file_name().to_string_lossy().starts_with("nvidia-fs"));
    let rows = v["hooks"].as_array().expect("hooks");
    assert!(rows.len() > 40, "{v}");
    for h in rows {
        let name = h["hook"].as_str().expect("hook name");
        let attached = h["attached"].as_str();
        let reasons = h["reasons"].to_string();
        match h["side"].as_str() {
            Some("user") if PROVIDER.contains(&name) => {
                assert_eq!(attached, None, "{h}");
                assert!(reasons.contains("hooked per provider file by the library follower"), "{h}");
            }
            Some("user") => {
                let lib = library_of(name);
                match in_system_paths(lib) {
                    Some(path) if exported(&path).contains(name) => {
                        assert_eq!(attached, Some("uprobe+uretprobe"), "{lib} at {path} has {name}: {h}");
                        let at = std::fs::canonicalize(h["location"].as_str().unwrap_or_default());
                        assert_eq!(
                            at.ok(),
                            std::fs::canonicalize(&path).ok(),
                            "{name} hooked in {path}: {h}"
                        );
                    }
                    Some(path) => {
                        assert_eq!(attached, None, "{path} lacks {name}: {h}");
                        assert!(reasons.contains(name), "the missing symbol is named: {h}");
                    }
                    None => {
                        assert_eq!(attached, None, "no {lib} here: {h}");
                        assert!(reasons.contains(&format!("{lib} not found")), "{h}");
                    }
                }
            }
            Some("kernel") if TRACEPOINTS.contains(&name) => assert_eq!(attached, Some("tracepoint"), "{h}"),
            Some("kernel") if SYSCALLS.contains(&name) => match no_fentry {
                Some(why) => {
                    assert_eq!(attached, Some("tracepoint"), "{h}");
                    assert!(reasons.contains(why), "why fexit was not used: {h}");
                }
                None => assert_eq!(attached, Some("fexit"), "{h}"),
            },
            // nvidia-fs's ioctl: where nvidia-fs is, tests/storage.rs checks it exactly.
            Some("kernel") if name == "ioctl" => {
                if !nvfs_here {
                    assert_eq!(attached, None, "{h}");
                    assert!(reasons.contains("no nvidia-fs here"), "{h}");
                }
            }
            // A symbol set (the uverbs verbs, the doorbell mappers): kprobes only, at each of
            // its symbols this kernel has.
            Some("kernel") if symbol_set(name) => {
                let symbols = gdr_trace::hooks::by_function(name).unwrap().symbols();
                let here: Vec<&str> = symbols.iter().copied().filter(|s| in_kernel(s)).collect();
                if here.is_empty() {
                    assert_eq!(attached, None, "{h}");
                    assert!(
                        reasons.contains(&format!("none of {} in /proc/kallsyms", symbols.join(", "))),
                        "{h}"
                    );
                } else if no_kprobe.is_some() {
                    assert_eq!(attached, None, "kprobes only: {h}");
                }
                if let Some(why) = no_kprobe {
                    assert!(reasons.contains(why), "kprobe unavailability stated for {name}: {reasons}");
                }
            }
            Some("kernel") => {
                // A kernel function: kprobe or fentry, by what the record says this kernel allows.
                if let Some(why) = no_kprobe {
                    assert!(reasons.contains(why) && reasons.contains("CONFIG_KPROBES"), "{name}: {reasons}");
                }
                if let Some(why) = no_fentry {
                    assert!(reasons.contains(why), "fentry unavailability stated for {name}: {reasons}");
                }
                if !in_kernel(name) {
                    assert_eq!(attached, None, "{name} can't attach without its symbol: {h}");
                    assert!(reasons.contains(&format!("symbol {name} not in /proc/kallsyms")), "{h}");
                    continue;
                }
                match (no_kprobe, no_fentry) {
                    (Some(_), Some(_)) => assert_eq!(attached, None, "neither kprobe nor fentry: {h}"),
                    (None, Some(_)) => assert!(attached.is_some_and(|a| a.starts_with("kprobe")), "{h}"),
                    (Some(_), None) => {
                        assert!(
                            attached.is_some_and(|a| a.starts_with("fentry") || a.starts_with("fexit")),
                            "{h}"
                        )
                    }
                    (None, None) => assert!(
                        attached
                            .is_some_and(|a| ["kprobe", "fentry", "fexit"].iter().any(|k| a.starts_with(k))),
                        "{name} is in this kernel and both attach kinds work: {h}"
                    ),
                }
            }
            other => panic!("a hook with side {other:?}: {h}"),
        }
    }
}

/// A hook row that attaches kprobes at a set of kernel symbols.
fn symbol_set(name: &str) -> bool {
    gdr_trace::hooks::by_function(name)
        .is_some_and(|h| matches!(h.programs, gdr_trace::hooks::Programs::KernelSymbols { .. }))
}
