use clap::{CommandFactory, FromArgMatches};
use gdr_trace::{
    cli::{self, Cli},
    escape, exit,
};

fn main() -> std::process::ExitCode {
    // Help is laid out for the terminal it is read on (80 columns in a pipe or a file).
    let matches = Cli::command().term_width(gdr_trace::term::help_width()).get_matches();
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    if cli.traces() {
        // Before anything else: SIGINT/SIGTERM/SIGHUP and a closed output (`| head`) end the
        // trace with its summary and exit 0, whenever they come (start-up included).
        gdr_trace::stop::install();
    } else {
        // `gdr-trace check | head`: end quietly when the reader goes away.
        // SAFETY: setting a signal disposition before any thread starts.
        unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    }
    let filter = tracing_subscriber::EnvFilter::try_from_env("GDR_TRACE_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).init();
    // Errors quote recordings, logs and paths: escaped for the terminal.
    let result = cli::run(cli);
    tracing::debug!("exiting");
    exit::report(result, |s| escape::printable(s).into_owned())
}
