//! `gdr-trace watch` and `gdr-trace attach PID`: the trace loop into text or NDJSON.

use std::process::ExitCode;

use crate::{
    cmd::args::{TraceArgs, ViewArgs},
    exit,
    sink::{json::JsonSink, text::TextSink, Sink},
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

/// What people (text, control characters escaped: `crate::escape`) or machines (`--json`:
/// NDJSON) read on stdout.
pub fn live_sink(json: bool, view: ViewArgs) -> Box<dyn Sink> {
    if json {
        Box::new(JsonSink::new(std::io::stdout()))
    } else {
        Box::new(TextSink::new(crate::escape::Escaped::new(std::io::stdout())).view(view.view()))
    }
}
