//! `cargo xtask demo`: the main job on the built-in test bed. Sets up if needed, builds, boots
//! the VM (Debian kernel, soft-RoCE rxe0), and runs `gdr-trace watch` while real RDMA programs
//! register memory; the live lines and the summary stream to the terminal.

use std::time::Duration;

use anyhow::{Context, Result};

use crate::{cargo, fsmods, kmod, setup, vm};

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
    env.push(fsmods::env(args.kernel)?);
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
    ];
    vm::run(&opts, &cmd)
}
