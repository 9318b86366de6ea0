//! `gdr-trace record -o FILE`: the decoded event stream to an NDJSON recording
//! (`crate::recording`), while the live view runs as `watch` / `attach` would show it.

use std::{io::BufWriter, path::PathBuf, process::ExitCode};

use crate::{
    exit::{self, Fatal},
    options::{live_sink, HostArgs, TraceArgs, ViewArgs},
    privilege, procfs,
    recording::RecordingSink,
    sink::FanOut,
    trace,
};

#[derive(Debug, Clone, clap::Args)]
pub struct RecordArgs {
    /// The recording to write: a new file, mode 0600 (an existing name, or a symlink, is
    /// refused).
    #[arg(short, long, value_name = "FILE")]
    pub output: PathBuf,
    /// Record only this process and the children it forks after the start.
    #[arg(long, short, value_name = "PID")]
    pub pid: Option<u32>,
    #[command(flatten)]
    pub trace: TraceArgs,
    #[command(flatten)]
    pub view: ViewArgs,
    #[command(flatten)]
    pub host: HostArgs,
}

pub fn run(args: RecordArgs) -> anyhow::Result<ExitCode> {
    // Refuse before a file is made.
    if let Some(pid) = args.pid.filter(|p| !procfs::pid_alive(*p)) {
        return Err(Fatal::cannot_run(format!("no process with PID {pid}")).into());
    }
    privilege::require_tracing()?;
    let file = crate::outfile::create_private(&args.output, "the recording")?;
    let mut rec = RecordingSink::new(
        BufWriter::new(file),
        args.pid,
        args.host.posture(),
        args.host.container_host_markers(),
        args.host.resolver(),
    );
    let mut live = live_sink(args.trace.json, args.view);
    trace::run(&args.trace.trace_options(args.pid), &mut FanOut(vec![&mut rec, live.as_mut()]))?;
    if let Some(e) = rec.error {
        anyhow::bail!("writing the recording {}: {e} (it is incomplete)", args.output.display());
    }
    Ok(ExitCode::from(exit::OK))
}
