//! `cargo xtask demo`: the main job on the built-in test bed. Sets up if needed, builds, boots
//! the VM (Debian kernel, soft-RoCE rxe0), and runs `gdr-trace watch` while real RDMA programs
//! register memory; the live lines and the summary stream to the terminal.

use std::time::Duration;

use anyhow::{Context, Result};

use crate::{cargo, guestmods, kmod, setup, vm};

const GUEST_SCRIPT: &str = include_str!("demo-guest.sh");

#[derive(clap::Args, Debug)]
pub struct DemoArgs {
    /// VM kernel: 6.1 or 6.12.
    #[arg(long, default_value = "6.1")]
    pub kernel: vm::Kernel,
    /// Seconds gdr-trace watches.
    #[arg(long, default_value_t = 20)]
    pub duration: u32,
}

pub fn main(args: DemoArgs) -> Result<i32> {
    setup::ensure()?;
    cargo::build_bins(false)?;
    let bins = cargo::bin_dir(false);
    let share = vm::share_dir();
    std::fs::create_dir_all(&share).context("creating the VM share dir")?;
    let script = share.join("demo.sh");
    std::fs::write(&script, GUEST_SCRIPT).context("writing the demo script")?;
    eprintln!(
        "[demo] booting Debian {} with soft-RoCE rxe0; gdr-trace watches for {} s",
        args.kernel, args.duration
    );
    // The simulated NVIDIA driver, without BTF (kprobes), as a real NVIDIA module ships.
    let kmod = kmod::build(args.kernel)?;
    // ext4 and loop for the storage part (the VM's root has no O_DIRECT).
    let mut env = kmod.env();
    env.push(guestmods::STORAGE.env(args.kernel)?);
    let opts = vm::VmOptions {
        kernel: args.kernel,
        timeout: Duration::from_secs(600),
        insmod: vec![kmod.no_btf.clone()],
        env,
        ..Default::default()
    };
    let cmd = [
        "sh".to_string(),
        script.display().to_string(),
        bins.join("gdr-trace").display().to_string(),
        bins.join("gdr-workload").display().to_string(),
        args.duration.to_string(),
        bins.join("gdr-storage-workload").display().to_string(),
        test_libcufile().map(|p| p.display().to_string()).unwrap_or_default(),
    ];
    vm::run(&opts, &cmd)
}

/// The test libcufile the tests' build script made (target/debug/build/gdr-trace-tests-*/out),
/// the newest if there are several.
fn test_libcufile() -> Option<std::path::PathBuf> {
    let build = cargo::bin_dir(false).join("build");
    std::fs::read_dir(build)
        .ok()?
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("gdr-trace-tests-"))
        .map(|e| e.path().join("out/libcufile.so.0"))
        .filter(|p| p.exists())
        .max_by_key(|p| p.metadata().and_then(|m| m.modified()).ok())
}
