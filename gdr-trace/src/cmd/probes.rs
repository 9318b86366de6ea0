//! `gdr-trace probes`: load and attach every hook, report how each attached or why not, and
//! every copy of a hooked library that processes map (all, or `--pid` and its children), detach.

use std::process::ExitCode;

use clap::Args;

use crate::{
    exit::{self, Fatal},
    loader::{self, AttachMode, LoadOptions},
    options::LibraryArgs,
    privilege, procfs,
    sink::hooks_text,
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
        events_per_uid: 0,
        max_copies_per_user: 0,
        max_uprobes: 0,
        no_uprobe_multi: args.no_uprobe_multi,
        no_bytes: false,
    };
    let mut tracer = loader::load(&opts)?;
    let ops = tracer.ebpf.map(gdr_trace_common::mr::bytes::maps::PROVIDER_OPS).and_then(loader::map_set::dup);
    let progs = tracer.follower.programs();
    let stop = Default::default();
    // The copies found get uprobe_multi links where the kernel makes them, as a trace's would
    // (the maps kept until the end: the hooks' table empties when its last holder goes).
    let maps = loader::map_set::MapSet::take_all(&mut tracer.ebpf);
    let multi = (!opts.no_uprobe_multi).then_some(&maps).and_then(|maps| {
        loader::uprobe_multi::load(maps, &progs, &stop)
            .inspect_err(|e| tracing::info!("library copies get perf-event uprobes: {e}"))
            .ok()
    });
    let fds = loader::prog_fds::ProgFds::local(&mut tracer.ebpf, &progs, &stop, ops, multi);
    tracer.follower.scan_all(&fds);
    if args.json {
        let v = serde_json::json!({
            "kernel": tracer.facts,
            "hooks": tracer.statuses,
            "untold": crate::untold::untold(&tracer.facts, &tracer.statuses),
            "libraries": tracer.follower.copies(),
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        let detail = match (args.wide, args.verbose) {
            (true, _) => hooks_text::Detail::Wide,
            (false, true) => hooks_text::Detail::Rows,
            (false, false) => hooks_text::Detail::Grouped,
        };
        // What cannot be told here, first (as every tracing command says it).
        for u in crate::untold::untold(&tracer.facts, &tracer.statuses) {
            println!("{}", crate::term::wrap(&format!("! {}", u.says), "    "));
        }
        let text = hooks_text::probes(&tracer.facts, &tracer.statuses, detail);
        print!("{}", crate::escape::printable(&text));
        // Every copy of a hooked library a traced process maps (all processes without --pid).
        for c in tracer.follower.copies() {
            let line = crate::sink::hooks_text::copy_line(&c);
            println!("{}", crate::term::wrap(&crate::escape::printable(&line), "    "));
        }
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
    /// Hook the library copies found with perf-event uprobes even where the kernel makes
    /// uprobe_multi links.
    #[arg(long)]
    pub no_uprobe_multi: bool,
    /// A row per hook with one short reason (the default groups the hooks by family and by
    /// how they attached or why not, a few names a line).
    #[arg(long, short, conflicts_with = "json")]
    pub verbose: bool,
    /// Every column and every reason as the loader wrote it, one row per hook, not wrapped to
    /// the terminal.
    #[arg(long, conflicts_with = "json")]
    pub wide: bool,
}
