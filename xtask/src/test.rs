//! `cargo xtask test`: sets up if needed, then unit and host tests, then the VM tests on each
//! kernel. Prints one line per suite and ends non-zero if any failed.

use std::time::{Duration, Instant};

use anyhow::Result;

use crate::{cargo, fsmods, kmod, setup, vm};

#[derive(clap::Args, Debug)]
pub struct TestArgs {
    /// VM kernels to test on (default: 6.1 and 6.12); repeatable.
    #[arg(long = "kernel")]
    pub kernels: Vec<vm::Kernel>,
    /// Skip the VM tests.
    #[arg(long)]
    pub no_vm: bool,
    /// Only run tests whose name contains this (passed to the test binaries).
    pub filter: Option<String>,
}

pub fn main(args: TestArgs) -> Result<i32> {
    let started = Instant::now();
    setup::ensure()?;
    let mut results: Vec<(String, bool, Duration)> = Vec::new();
    let mut run = |name: String, f: &mut dyn FnMut() -> Result<bool>| -> Result<()> {
        let t = Instant::now();
        eprintln!("\n[test] === {name} ===");
        let ok = f()?;
        results.push((name, ok, t.elapsed()));
        Ok(())
    };

    // The binaries first: host and VM tests run gdr-trace and the workload as programs.
    cargo::build_bins(false)?;
    let filter = args.filter.clone().unwrap_or_default();
    run("unit + host tests (this kernel)".into(), &mut || {
        // BPF state is per machine: one test at a time.
        let mut a = vec!["test", "--", "--test-threads=1"];
        if !filter.is_empty() {
            a.push(&filter);
        }
        cargo::status(&a)
    })?;

    if !args.no_vm {
        // Each VM suite is one test binary; all run in one boot per kernel (the GPU tests load
        // the simulated driver module themselves, in the flavour they need).
        let suites = ["vm", "vm_gpu", "vm_fleet", "vm_storage"]
            .into_iter()
            .map(|t| cargo::test_executable("gdr-trace-tests", t))
            .collect::<Result<Vec<_>>>()?;
        let kernels = if args.kernels.is_empty() {
            vec![vm::Kernel::V6_1, vm::Kernel::V6_12]
        } else {
            args.kernels.clone()
        };
        for kernel in kernels {
            let kmod = kmod::build(kernel)?;
            // The storage tests loop-mount an ext4 image (the VM root has no O_DIRECT).
            let mut env = kmod.env();
            env.push(fsmods::env(kernel)?);
            run(format!("VM tests, Debian kernel {kernel} (rxe0, simulated NVIDIA driver)"), &mut || {
                let opts = vm::VmOptions {
                    kernel,
                    timeout: Duration::from_secs(1200),
                    env: env.clone(),
                    ..Default::default()
                };
                let f = if filter.is_empty() { String::new() } else { format!(" '{filter}'") };
                let script = suites
                    .iter()
                    .map(|s| format!("{} --ignored --test-threads=1{f}", s.display()))
                    .collect::<Vec<_>>()
                    .join(" && ");
                Ok(vm::run(&opts, &["sh".into(), "-c".into(), script])? == 0)
            })?;
        }
    }

    eprintln!("\n[test] results ({:.0} s in all):", started.elapsed().as_secs_f64());
    for (name, ok, took) in &results {
        eprintln!("[test]   {} {name} ({:.0} s)", if *ok { "PASS" } else { "FAIL" }, took.as_secs_f64());
    }
    let failed = results.iter().filter(|r| !r.1).count();
    println!("{} passed, {} failed", results.len() - failed, failed);
    Ok(i32::from(failed > 0))
}
