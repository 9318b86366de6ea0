//! Command-line interface (clap). Each subcommand's logic lives in `cmd/<name>.rs`.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::{
    cmd::{
        self, audit::AuditArgs, check::CheckArgs, doctor::DoctorArgs, generate::GenerateArgs,
        probes::ProbesArgs, record::RecordArgs, report::ReportArgs, serve::ServeArgs,
    },
    examples,
    options::{AttachArgs, WatchArgs},
};

#[derive(Debug, Parser)]
#[command(
    name = "gdr-trace",
    version,
    // No colour anywhere (crate::escape): help on a terminal is plain text too.
    color = clap::ColorChoice::Never,
    about = "Shows, per process and at the driver level, whether GPU memory really goes straight \
             to the NIC (GPUDirect RDMA) or is silently staged through host memory.",
    after_help = examples::ROOT
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

// `--duration` and `--interval` are shared (options::TraceArgs); each command says what they
// mean to it.
const UNTIL_CTRL_C: &str = "Stop after this many seconds (default: until Ctrl-C)";
const UNTIL_IT_EXITS: &str =
    "Stop after this many seconds (default: when the process and its children have exited, or at Ctrl-C)";
const RECORD_UNTIL: &str = "Stop after this many seconds (default: until Ctrl-C; with --pid, also when that \
                            process and its children have exited)";
const SERVE_INTERVAL: &str = "Refresh the metrics every this many seconds";

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Trace every process's RDMA memory registrations and file I/O (GDS, page cache), live.
    #[command(after_help = examples::WATCH, mut_arg("duration", |a| a.help(UNTIL_CTRL_C)))]
    Watch(WatchArgs),
    /// Trace one process, its threads and the children it forks after attach: registrations and
    /// its storage path (cuFile, nvidia-fs, page cache, O_DIRECT) per file.
    #[command(after_help = examples::ATTACH, mut_arg("duration", |a| a.help(UNTIL_IT_EXITS)))]
    Attach(AttachArgs),
    /// List every hook: how it attached (fentry, kprobe, uprobe) or why it could not.
    #[command(after_help = examples::PROBES)]
    Probes(ProbesArgs),
    /// Preflight: check the machine's GPUDirect prerequisites from sysfs and procfs.
    #[command(after_help = examples::CHECK)]
    Check(CheckArgs),
    /// Walk the GPUDirect troubleshooting order and print a ranked diagnosis.
    #[command(after_help = examples::DOCTOR)]
    Doctor(DoctorArgs),
    /// Security audit: who exposes GPU memory to NICs, with what access, from which container;
    /// findings with severities, an NDJSON audit log, `--fail-on` for CI.
    #[command(after_help = examples::AUDIT, mut_arg("duration", |a| a.help(UNTIL_CTRL_C)))]
    // audit never attaches the storage hooks: a flag to leave them out would say otherwise.
    #[command(mut_arg("no_storage", |a| a.hide(true)))]
    Audit(AuditArgs),
    /// Record the event stream to an NDJSON file for `report` (no analysis is lost).
    #[command(after_help = examples::RECORD, mut_arg("duration", |a| a.help(RECORD_UNTIL)))]
    Record(RecordArgs),
    /// Replay a recording through the same analysis as live mode: summary and findings (no BPF,
    /// no privilege).
    #[command(after_help = examples::REPORT)]
    Report(ReportArgs),
    /// Trace continuously and serve Prometheus metrics (/metrics) and /healthz.
    #[command(after_help = examples::SERVE, mut_arg("duration", |a| a.help(UNTIL_CTRL_C)))]
    #[command(mut_arg("interval", |a| a.help(SERVE_INTERVAL)))]
    Serve(ServeArgs),
    /// Write shell completions and man pages (for packaging: `cargo xtask dist`).
    #[command(hide = true)]
    Generate(GenerateArgs),
    /// Internal: the RDMA providers' post/poll functions of this machine's devices, one JSON
    /// line each (run by the loader as a child without capabilities).
    #[command(hide = true)]
    ProviderOps,
    /// Internal: the library follower's process (exec'd by the tracer, told what to do on its
    /// stdin; see `loader::follow_remote`).
    #[command(hide = true)]
    FollowLibraries,
}

impl Cli {
    /// Whether the command runs the trace loop (it then ends cleanly on SIGINT, SIGTERM,
    /// SIGHUP and a closed output, start-up included: `stop::install`).
    pub fn traces(&self) -> bool {
        match &self.command {
            Command::Watch(_)
            | Command::Attach(_)
            | Command::Audit(_)
            | Command::Record(_)
            | Command::Serve(_) => true,
            Command::Doctor(a) => a.pid.is_some(),
            Command::Probes(_)
            | Command::Check(_)
            | Command::Report(_)
            | Command::Generate(_)
            | Command::ProviderOps
            | Command::FollowLibraries => false,
        }
    }
}

/// Runs the chosen subcommand.
pub fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Watch(args) => cmd::watch::run(cmd::watch::Target::All, args.trace, args.view),
        Command::Attach(args) if args.expect.is_some() => {
            cmd::watch::gate(args.pid, args.within.unwrap_or(60.0), args.trace)
        }
        Command::Attach(args) => cmd::watch::run(cmd::watch::Target::Pid(args.pid), args.trace, args.view),
        Command::Probes(args) => cmd::probes::run(args),
        Command::Check(args) => cmd::check::run(args),
        Command::Doctor(args) => cmd::doctor::run(args),
        Command::Audit(args) => cmd::audit::run(args),
        Command::Record(args) => cmd::record::run(args),
        Command::Report(args) => cmd::report::run(args),
        Command::Serve(args) => cmd::serve::run(args),
        Command::Generate(args) => cmd::generate::run(args, &<Cli as clap::CommandFactory>::command()),
        Command::ProviderOps => Ok(ExitCode::from(crate::loader::provider_ops::run_child())),
        Command::FollowLibraries => Ok(ExitCode::from(crate::loader::follow_child::run_child())),
    }
}

#[cfg(test)]
mod tests {
    use clap::{CommandFactory, Parser};

    use super::*;

    #[test]
    fn a_negative_duration_is_a_clear_error_and_record_takes_dash_p() {
        for cmd in ["watch", "record"] {
            let args: &[&str] = if cmd == "record" { &["-o", "f"] } else { &[] };
            let mut argv = vec!["gdr-trace", cmd];
            argv.extend(args);
            argv.extend(["--duration", "-1"]);
            let e = Cli::try_parse_from(&argv).unwrap_err().to_string();
            assert!(e.contains("must be more than 0 seconds, not -1"), "{cmd}: {e}");
            assert!(!e.contains("unexpected argument"), "{cmd}: {e}");
            // 0 and -1 get the same answer (it said "0 or more" to -1, then refused 0).
            *argv.last_mut().unwrap() = "0";
            let e = Cli::try_parse_from(&argv).unwrap_err().to_string();
            assert!(e.contains("must be more than 0 seconds, not 0"), "{cmd}: {e}");
            *argv.last_mut().unwrap() = "inf";
            let e = Cli::try_parse_from(&argv).unwrap_err().to_string();
            assert!(e.contains("at most"), "{cmd}: {e}");
        }
        let cli = Cli::try_parse_from(["gdr-trace", "record", "-o", "f", "-p", "42"]).expect("-p");
        let Command::Record(r) = cli.command else { panic!("record") };
        assert_eq!(r.pid, Some(42));
    }

    #[test]
    fn serve_refuses_top_0() {
        let e = Cli::try_parse_from(["gdr-trace", "serve", "--top", "0"]).unwrap_err().to_string();
        assert!(e.contains("must be 1 or more, not 0"), "{e}");
        let cli = Cli::try_parse_from(["gdr-trace", "serve", "--top", "3"]).expect("--top 3");
        let Command::Serve(s) = cli.command else { panic!("serve") };
        assert_eq!(s.top, 3);
    }

    #[test]
    fn the_help_example_serves_on_localhost() {
        let help = Cli::command().render_long_help().to_string();
        assert!(help.contains("serve --listen 127.0.0.1:9477"), "{help}");
        assert!(!help.contains("0.0.0.0"), "{help}");
    }

    /// Every public subcommand's `--help` ends with examples, each one a command line that
    /// parses (the part before a pipe or a redirection) and runs that very subcommand.
    #[test]
    fn every_subcommand_help_has_examples_that_parse() {
        let cli = Cli::command();
        let subs: Vec<_> = cli.get_subcommands().filter(|s| !s.is_hide_set()).collect();
        assert!(subs.len() >= 9, "{}", subs.len());
        for sub in subs {
            let name = sub.get_name();
            let help = Cli::try_parse_from(["gdr-trace", name, "--help"]).unwrap_err().to_string();
            let at = help
                .find("\nExamples:\n")
                .unwrap_or_else(|| panic!("{name} --help has no Examples:\n{help}"));
            let commands: Vec<&str> = help[at..]
                .lines()
                .filter(|l| l.starts_with("  ") && !l.starts_with("   "))
                .filter_map(|l| l.trim().strip_prefix("sudo ").or(Some(l.trim())))
                .filter(|l| l.starts_with("gdr-trace "))
                .collect();
            assert!(commands.len() >= 2, "{name}: at least two examples:\n{help}");
            for c in commands {
                let line = c.split(['|', '>']).next().unwrap();
                let argv: Vec<&str> = line.split_whitespace().collect();
                assert_eq!(argv.get(1), Some(&name), "{name}'s example runs {name}: {c}");
                if let Err(e) = Cli::try_parse_from(&argv) {
                    panic!("{name}'s example does not parse: {c}\n{e}");
                }
            }
        }
    }

    /// Options shared by several commands say what they mean to each (`watch --duration` said
    /// "or the attached process exits"); a short flag means the same option in every command.
    #[test]
    fn shared_options_say_what_they_mean_per_command_and_short_flags_agree() {
        let cli = Cli::command();
        let arg = |sub: &str, id: &str| {
            let sub = cli.find_subcommand(sub).unwrap_or_else(|| panic!("{sub}"));
            sub.get_arguments().find(|a| a.get_id() == id).cloned().unwrap_or_else(|| panic!("{id}"))
        };
        let help = |sub: &str, id: &str| arg(sub, id).get_help().map(|h| h.to_string()).unwrap_or_default();
        for sub in ["watch", "serve", "audit"] {
            let h = help(sub, "duration");
            assert!(h.starts_with("Stop after") && !h.contains("process"), "{sub} --duration: {h}");
        }
        assert!(help("attach", "duration").contains("when the process and its children have exited"));
        assert!(help("record", "duration").contains("with --pid"));
        let serve = help("serve", "interval");
        assert!(serve.contains("metrics") && !serve.contains("summary"), "{serve}");
        assert!(help("watch", "interval").contains("summary"));
        assert!(arg("audit", "no_storage").is_hide_set(), "audit never attaches the storage hooks");
        let mut shorts: std::collections::BTreeMap<char, (String, String)> = Default::default();
        for sub in cli.get_subcommands() {
            for a in sub.get_arguments() {
                let (Some(c), Some(long)) = (a.get_short(), a.get_long()) else { continue };
                let (first, of) = shorts.entry(c).or_insert((long.to_string(), sub.get_name().to_string()));
                assert_eq!(first, long, "-{c} is --{first} in {of} but --{long} in {}", sub.get_name());
            }
            if let Some(pid) = sub.get_arguments().find(|a| a.get_long() == Some("pid")) {
                assert_eq!(pid.get_short(), Some('p'), "{} --pid", sub.get_name());
            }
        }
        assert_eq!(shorts.get(&'v').map(|v| v.0.as_str()), Some("verbose"), "{shorts:?}");
    }

    /// The gate answers from bytes: it cannot run without byte counting.
    #[test]
    fn the_gate_refuses_no_bytes_and_no_bytes_parses_elsewhere() {
        let err =
            Cli::try_parse_from(["gdr-trace", "attach", "1", "--expect", "gdr", "--no-bytes"]).unwrap_err();
        assert_eq!(err.kind(), clap::error::ErrorKind::ArgumentConflict, "{err}");
        for sub in ["watch", "record", "serve"] {
            let mut argv = vec!["gdr-trace", sub, "--no-bytes"];
            if sub == "record" {
                argv.extend(["-o", "x.ndjson"]);
            }
            Cli::try_parse_from(&argv).unwrap_or_else(|e| panic!("{sub} --no-bytes: {e}"));
        }
    }

    /// `--events-per-uid` is never accepted and ignored: whole-node tracing has a budget by
    /// default, `attach` none unless given, and a given one holds for both.
    #[test]
    fn events_per_uid_holds_wherever_it_is_given() {
        let budget = |argv: &[&str]| {
            let (trace, pid) = match Cli::try_parse_from(argv).expect("parses").command {
                Command::Watch(w) => (w.trace, None),
                Command::Attach(a) => (a.trace, Some(a.pid)),
                _ => panic!("watch or attach"),
            };
            trace.load_options(pid).events_per_uid
        };
        assert_eq!(budget(&["gdr-trace", "watch"]), crate::options::EVENTS_PER_UID);
        assert_eq!(budget(&["gdr-trace", "watch", "--events-per-uid", "7"]), 7);
        assert_eq!(budget(&["gdr-trace", "attach", "1"]), 0);
        assert_eq!(budget(&["gdr-trace", "attach", "1", "--events-per-uid", "7"]), 7);
    }
}
