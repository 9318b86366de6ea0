//! One module per subcommand. Each wires a source to sinks; shared logic lives elsewhere.

pub mod audit;
pub mod check;
pub mod doctor;
pub mod generate;
pub mod probes;
pub mod record;
pub mod report;
pub mod serve;
pub mod watch;

use std::process::ExitCode;

use crate::cli::{Cli, Command};

pub fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Watch(args) => watch::run(watch::Target::All, args),
        Command::Attach(args) => watch::run(watch::Target::Pid(args.pid), args.trace),
        Command::Probes(args) => probes::run(args),
        Command::Check(args) => check::run(args),
        Command::Doctor(args) => doctor::run(args),
        Command::Audit(args) => audit::run(args),
        Command::Record(args) => record::run(args),
        Command::Report(args) => report::run(args),
        Command::Serve(args) => serve::run(args),
        Command::Generate(args) => generate::run(args),
    }
}
