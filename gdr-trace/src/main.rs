use clap::Parser;
use gdr_trace::{
    cli::{self, Cli},
    escape, exit,
};

fn main() -> std::process::ExitCode {
    // `gdr-trace watch | head`: end quietly when the reader goes away (BPF links are fds and
    // detach with the process).
    // SAFETY: setting a signal disposition before any thread starts.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    let cli = Cli::parse();
    let filter = tracing_subscriber::EnvFilter::try_from_env("GDR_TRACE_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).init();
    // Errors quote recordings, logs and paths: escaped for the terminal.
    exit::report(cli::run(cli), |s| escape::printable(s).into_owned())
}
