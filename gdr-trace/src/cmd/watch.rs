//! `gdr-trace watch` and `gdr-trace attach PID`: the trace loop into text or NDJSON.

use std::process::ExitCode;

use crate::{
    exit,
    options::{live_sink, TraceArgs, ViewArgs},
    sink::{text::TextSink, Sink},
    trace,
};

#[derive(Debug, Clone, Copy)]
pub enum Target {
    All,
    Pid(u32),
}

impl Target {
    pub fn pid(self) -> Option<u32> {
        match self {
            Self::All => None,
            Self::Pid(p) => Some(p),
        }
    }
}

pub fn run(target: Target, args: TraceArgs, view: ViewArgs) -> anyhow::Result<ExitCode> {
    let mut sink = match (args.json, target.pid()) {
        // attach PID: the banner names the process it traces.
        (false, Some(pid)) => Box::new(
            TextSink::new(crate::escape::Escaped::new(std::io::stdout())).tracing(pid).view(view.view()),
        ) as Box<dyn Sink>,
        _ => live_sink(args.json, view),
    };
    trace::run(&args.trace_options(target.pid()), sink.as_mut())?;
    Ok(ExitCode::from(exit::OK))
}

/// `attach PID --expect gdr --within T`: the trace ends at T or as soon as the gate passes;
/// summaries every second feed it. The exit code is the gate's.
pub fn gate(pid: u32, within: f64, mut args: TraceArgs) -> anyhow::Result<ExitCode> {
    args.duration = Some(args.duration.map_or(within, |d| d.min(within)));
    args.interval = 1.0_f64.min(within);
    let json = args.json;
    let mut inner = live_sink(json, ViewArgs::default());
    let mut sink = crate::gate::GateSink::new(inner.as_mut(), within, json);
    trace::run(&args.trace_options(Some(pid)), &mut sink)?;
    let code = sink.outcome.map_or(exit::CANNOT_RUN, |o| o.code);
    Ok(ExitCode::from(code))
}
