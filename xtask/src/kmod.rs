//! Builds the simulated NVIDIA driver (tests/kmod) for a VM kernel: the module without BTF
//! (kprobe only, like a real out-of-tree NVIDIA module), the same with module BTF (fentry),
//! the same with nvfs_direct_io inlined away, and its userspace workload. (`cargo xtask setup` installs make, gcc and pahole.)

use std::{path::PathBuf, process::Command};

use anyhow::{bail, Context, Result};

use crate::{
    kernel::{self, Kernel},
    sh::workspace_root,
};

pub struct Kmod {
    pub no_btf: PathBuf,
    pub btf: PathBuf,
    /// Without BTF, and nvfs_direct_io inlined away (as a real nvidia-fs build may do).
    pub inlined: PathBuf,
    pub workload: PathBuf,
    /// tests/kmod/libcuda-sim.c: cuMemGetHandleForAddressRange on the simulated driver.
    pub libcuda: PathBuf,
}

impl Kmod {
    /// Environment for the VM tests that load it themselves.
    pub fn env(&self) -> Vec<(String, String)> {
        vec![
            ("GDR_GDRSIM_KO".into(), self.no_btf.display().to_string()),
            ("GDR_GDRSIM_KO_BTF".into(), self.btf.display().to_string()),
            ("GDR_GDRSIM_KO_INLINE".into(), self.inlined.display().to_string()),
            ("GDR_GDRSIM_WORKLOAD".into(), self.workload.display().to_string()),
            ("GDR_GDRSIM_LIBCUDA".into(), self.libcuda.display().to_string()),
        ]
    }
}

pub fn build(kernel: Kernel) -> Result<Kmod> {
    let release = kernel::kernel_release(kernel)?;
    kernel::headers(kernel)?;
    let vmlinuz = kernel::vmlinuz(kernel)?;
    let out = workspace_root().join("target").join("kmod");
    eprintln!("[kmod] building the simulated NVIDIA driver for {release}");
    let status = Command::new("make")
        .arg("-s")
        .arg("-C")
        .arg(workspace_root().join("tests/kmod"))
        .arg("all")
        .arg(format!("OUT={}", out.display()))
        .arg(format!("KVERS={release}"))
        .arg(format!("VMLINUZ_{release}={}", vmlinuz.display()))
        .status()
        .context("running make for tests/kmod")?;
    if !status.success() {
        bail!("building tests/kmod for {release} failed");
    }
    let k = Kmod {
        no_btf: out.join(&release).join("gdrsim.ko"),
        btf: out.join(&release).join("btf").join("gdrsim.ko"),
        inlined: out.join(&release).join("inline").join("gdrsim.ko"),
        workload: out.join("gdrsim-workload"),
        libcuda: out.join("libcuda").join("libcuda.so.1"),
    };
    for p in [&k.no_btf, &k.btf, &k.inlined, &k.workload, &k.libcuda] {
        if !p.exists() {
            bail!("tests/kmod built, but {} is missing", p.display());
        }
    }
    Ok(k)
}
