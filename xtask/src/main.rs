//! gdr-trace's xtask: `cargo xtask <command>` (aliased in .cargo/config.toml).
//!
//! Every subcommand is a `mod`-level `main(args) -> anyhow::Result<i32>` returning the
//! process exit code; adding one is a variant here and one dispatch line.

mod bench;
mod cargo;
mod demo;
mod dist;
mod guestmods;
mod image;
mod initramfs;
mod kernel;
mod kmod;
mod setup;
mod sh;
mod suites;
mod test;
mod vm;
mod vm_console;

use anyhow::Result;
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "cargo xtask", bin_name = "cargo xtask", about = "gdr-trace development tasks")]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Install what building and testing needs (idempotent; fast when nothing is missing).
    Setup,
    /// Run a command as root in a qemu VM (Debian kernel, soft-RoCE rxe0, host / read-only).
    ///
    /// The command runs in the current directory; writes go to a throw-away overlay, except
    /// under target/vm/share, which the guest mounts read-write at the same path. Exits with
    /// the command's exit code.
    Vm(vm::VmArgs),
    /// Prepare a VM kernel and print its facts as JSON (release, vmlinuz, headers, ...).
    Kernel(KernelArgs),
    /// The main job on the built-in test bed: gdr-trace watching real RDMA registrations in the VM.
    Demo(demo::DemoArgs),
    /// Set up if needed, then run unit, host and VM tests (6.1 and 6.12).
    Test(test::TestArgs),
    /// Benchmarks: what tracing costs the traced process (storage: pread loops), with figures.
    Bench(bench::BenchArgs),
    /// The registration storm's side inside the VM (`bench --storm-only` runs it there).
    #[command(hide = true)]
    BenchStormGuest(bench::regstorm::GuestArgs),
    /// The start-up measurement's side inside the VM (`bench --startup-vm` runs it there).
    #[command(hide = true)]
    BenchStartupGuest(bench::startup::GuestArgs),
    /// Rewrite the committed preflight fixture trees from their generator (tests/fixtures).
    Fixtures,
    /// The release tarball: static (musl) binary, completions, man pages, licenses, README, and
    /// its SHA-256, in target/dist.
    Dist,
    /// An OCI image of the static binary, built without a daemon (umoci, skopeo): an OCI layout,
    /// an oci-archive and a docker-archive in target/dist.
    Image,
}

#[derive(clap::Args)]
struct KernelArgs {
    /// 6.1 or 6.12.
    #[arg(long, default_value = "6.1")]
    kernel: kernel::Kernel,
    /// Also install the matching linux-headers package on the host.
    #[arg(long)]
    headers: bool,
}

fn kernel_main(args: KernelArgs) -> Result<i32> {
    let img = kernel::ensure(args.kernel)?;
    let headers = if args.headers { Some(kernel::headers(args.kernel)?) } else { None };
    let info = serde_json::json!({
        "kernel": img.kernel.to_string(),
        "dir": img.dir,
        "package": img.resolved.package,
        "version": img.resolved.version,
        "release": kernel::kernel_release(args.kernel)?,
        "vmlinuz": kernel::vmlinuz(args.kernel)?,
        "config": img.config,
        "modules": img.modules,
        "headers": headers,
        "share": vm::share_dir(),
    });
    println!("{}", serde_json::to_string_pretty(&info)?);
    Ok(0)
}

fn main() {
    let cli = Cli::parse();
    let result = match cli.command {
        Cmd::Setup => setup::main(),
        Cmd::Vm(args) => vm::main(args),
        Cmd::Kernel(args) => kernel_main(args),
        Cmd::Demo(args) => demo::main(args),
        Cmd::Test(args) => test::main(args),
        Cmd::Bench(args) => bench::main(args),
        Cmd::BenchStormGuest(args) => bench::regstorm::guest(args),
        Cmd::BenchStartupGuest(args) => bench::startup::guest(args),
        Cmd::Fixtures => cargo::status(&["run", "-q", "-p", "gdr-trace-tests", "--bin", "gdr-fixtures"])
            .map(|ok| i32::from(!ok)),
        Cmd::Dist => dist::main(),
        Cmd::Image => image::main(),
    };
    match result {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::exit(1);
        }
    }
}
