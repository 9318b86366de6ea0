//! `gdr-trace probes`: load and attach every hook, report how each attached or why not, detach.

use std::process::ExitCode;

use crate::{
    cli::ProbesArgs,
    exit::{self, Fatal},
    loader::{self, LoadOptions},
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
        libibverbs: args.libibverbs,
        libcuda: args.libcuda,
        libcufile: args.libcufile,
        storage: true,
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
