//! `gdr-trace probes`: load and attach every hook, report how each attached or why not, detach.

use std::process::ExitCode;

use clap::Args;

use crate::{
    cmd::args::LibraryArgs,
    exit::{self, Fatal},
    loader::{self, AttachMode, LoadOptions},
    privilege, procfs,
    sink::text::hooks_table,
};

pub fn run(args: ProbesArgs) -> anyhow::Result<ExitCode> {
    if let Some(pid) = args.pid {
        if !procfs::pid_alive(pid) {
            return Err(Fatal::cannot_run(format!("no process with PID {pid}")).into());
        }
    }
    privilege::require_tracing()?;
    let opts = LoadOptions {
        filter_pid: args.pid,
        attach_mode: args.attach_mode,
        uprobes: true,
        libibverbs: args.libs.libibverbs,
        libcuda: args.libs.libcuda,
        libcufile: args.libs.libcufile,
        storage: true,
        storage_if_fentry: false,
    };
    let tracer = loader::load(&opts)?;
    if args.json {
        let v = serde_json::json!({ "kernel": tracer.facts, "hooks": tracer.statuses });
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        println!(
            "kernel {} (vmlinux BTF: {}; ib_device.name offset: {})",
            tracer.facts.kernel,
            if tracer.facts.vmlinux_btf { "yes" } else { "no" },
            tracer
                .facts
                .ib_device_name_off
                .map_or("unknown (no BTF for struct ib_device)".into(), |o| o.to_string())
        );
        println!("{}", crate::escape::printable(&hooks_table(&tracer.statuses).to_string()));
    }
    Ok(ExitCode::from(exit::OK))
}

#[derive(Debug, Clone, Args)]
pub struct ProbesArgs {
    /// How kernel hooks are attached.
    #[arg(long, value_enum, default_value_t = AttachMode::Auto)]
    pub attach_mode: AttachMode,
    /// Resolve userspace libraries from this process's memory map.
    #[arg(long, short)]
    pub pid: Option<u32>,
    #[command(flatten)]
    pub libs: LibraryArgs,
    /// Machine-readable output.
    #[arg(long)]
    pub json: bool,
}
