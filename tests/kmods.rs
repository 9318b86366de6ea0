//! Kernel modules in the VM tests: the simulated NVIDIA driver (tests/kmod) in the flavour a
//! test needs, and the modules the storage tests load. One place, so a test asserts on the
//! flavour it loaded itself, never on what an earlier test left behind.

use std::{ffi::CString, path::Path};

/// A variable `cargo xtask test` sets for the VM suites.
pub fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("{name} not set: run through `cargo xtask test`"))
}

/// The simulated driver module `gdrsim`, in one flavour.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Module {
    Absent,
    /// Kprobe only, like a real out-of-tree NVIDIA module.
    NoBtf,
    /// With module BTF: fentry/fexit attach.
    Btf,
    /// Kprobe only, and the hooked helpers that are static with one call site in the real
    /// driver (nvfs_direct_io) inlined away, as a real build may do.
    Inlined,
}

/// Makes the simulated driver present in exactly this flavour (reloading it if another is).
pub fn module(want: Module) {
    let loaded = Path::new("/sys/module/gdrsim").exists();
    let has_btf = Path::new("/sys/kernel/btf/gdrsim").exists();
    let inlined =
        std::fs::read_to_string("/sys/module/gdrsim/parameters/flavour").is_ok_and(|f| f.trim() == "inlined");
    let current = match (loaded, has_btf, inlined) {
        (false, _, _) => Module::Absent,
        (true, _, true) => Module::Inlined,
        (true, false, false) => Module::NoBtf,
        (true, true, false) => Module::Btf,
    };
    if current == want {
        return;
    }
    if loaded {
        rmmod("gdrsim");
    }
    match want {
        Module::Absent => {}
        Module::NoBtf => insmod(&env("GDR_GDRSIM_KO")),
        Module::Btf => insmod(&env("GDR_GDRSIM_KO_BTF")),
        Module::Inlined => insmod(&env("GDR_GDRSIM_KO_INLINE")),
    }
}

/// Unloads a module. A tracer that just exited may still hold probes on it for a moment: its
/// hooks are released by a child after it exits (gdr-trace's teardown), so "in use" is waited
/// out for a while, then asserted against.
fn rmmod(module: &str) {
    let name = CString::new(module).unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    loop {
        // SAFETY: delete_module with a valid name; O_NONBLOCK fails instead of waiting for users.
        let r = unsafe { libc::syscall(libc::SYS_delete_module, name.as_ptr(), libc::O_NONBLOCK) };
        let err = std::io::Error::last_os_error();
        let busy = matches!(err.raw_os_error(), Some(libc::EAGAIN) | Some(libc::EBUSY));
        if r == 0 || !busy || std::time::Instant::now() >= deadline {
            assert_eq!(r, 0, "rmmod {module}: {err}; gdr-trace processes left: {:?}", tracers_left());
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// gdr-trace processes still there (a tracer's follower or teardown child holding its hooks):
/// pid, state and uid, for a module that stays in use.
fn tracers_left() -> Vec<String> {
    let Ok(dir) = std::fs::read_dir("/proc") else { return vec![] };
    dir.flatten()
        .filter_map(|e| {
            let status = std::fs::read_to_string(e.path().join("status")).ok()?;
            let field =
                |k: &str| status.lines().find_map(|l| l.strip_prefix(k)).unwrap_or("").trim().to_string();
            (field("Name:") == "gdr-trace").then(|| {
                let stack = std::fs::read_to_string(e.path().join("stack")).unwrap_or_default();
                let top: Vec<&str> = stack.lines().take(8).collect();
                format!(
                    "{} {} uid {} ppid {} in {:?}",
                    field("Pid:"),
                    field("State:"),
                    field("Uid:"),
                    field("PPid:"),
                    top
                )
            })
        })
        .collect()
}

/// Loads the module at `path` (`NN-name.ko` or `name.ko`) unless a module of that name is loaded.
pub fn insmod(path: &str) {
    let name = Path::new(path).file_stem().unwrap().to_string_lossy();
    let name = name.split_once('-').map_or(&*name, |(_, n)| n).to_string();
    if Path::new(&format!("/sys/module/{name}")).exists() {
        return;
    }
    let file = std::fs::File::open(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let params = CString::new("").unwrap();
    // SAFETY: finit_module with an open module file and empty parameters.
    let r = unsafe {
        libc::syscall(libc::SYS_finit_module, std::os::fd::AsRawFd::as_raw_fd(&file), params.as_ptr(), 0)
    };
    let err = std::io::Error::last_os_error();
    assert!(r == 0 || err.raw_os_error() == Some(libc::EEXIST), "insmod {path}: {err}");
}
