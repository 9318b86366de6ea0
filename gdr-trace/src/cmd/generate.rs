//! `gdr-trace generate --out DIR` (hidden): shell completions (bash, zsh, fish) and man pages
//! for gdr-trace and every subcommand, from the same clap definitions the parser uses.
//! `cargo xtask dist` puts them in the release tarball.

use std::{
    path::{Path, PathBuf},
    process::ExitCode,
};

use anyhow::Context;
use clap_complete::Shell;

use crate::exit::{self, Fatal};

#[derive(Debug, Clone, clap::Args)]
pub struct GenerateArgs {
    /// Directory to write `completions/` and `man/man1/` into (created if missing).
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
}

/// The shells completions are written for, with the file name each one looks for.
pub const SHELLS: [(Shell, &str); 3] =
    [(Shell::Bash, "gdr-trace.bash"), (Shell::Zsh, "_gdr-trace"), (Shell::Fish, "gdr-trace.fish")];

/// gdr-trace's command (`full`: the parser's, from `cli`) without its hidden subcommands:
/// clap_complete would offer those too.
pub fn public_command(full: &clap::Command) -> clap::Command {
    // The version for the man pages' title line; no --version flag the parser doesn't have.
    let subcommands: Vec<clap::Command> = full
        .get_subcommands()
        .filter(|s| !s.is_hide_set())
        .map(|s| s.clone().version(env!("CARGO_PKG_VERSION")).disable_version_flag(true))
        .collect();
    let mut cmd = clap::Command::new("gdr-trace")
        .version(env!("CARGO_PKG_VERSION"))
        .subcommand_required(true)
        .subcommands(subcommands);
    if let Some(about) = full.get_about() {
        cmd = cmd.about(about.clone());
    }
    if let Some(after) = full.get_after_help() {
        cmd = cmd.after_help(after.clone());
    }
    cmd
}

/// clap_complete's bash script names a subcommand's state `gdr__trace__subcmd__watch` where it
/// sets it and `gdr__subcmd__trace__subcmd__watch` where it matches it, for any binary with a
/// hyphen in its name (clap-rs/clap#6421, open): subcommand options would never complete.
/// Spells the matches the way the state is set.
fn bash_hyphen_fix(script: &[u8]) -> Vec<u8> {
    String::from_utf8_lossy(script)
        .replace("gdr__subcmd__trace__subcmd__", "gdr__trace__subcmd__")
        .into_bytes()
}

/// Writes completions to `out/completions/` and man pages to `out/man/man1/`; returns the files.
pub fn write_all(out: &Path, full: &clap::Command) -> anyhow::Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    let completions = out.join("completions");
    std::fs::create_dir_all(&completions)
        .with_context(|| format!("cannot create {}", completions.display()))?;
    for (shell, name) in SHELLS {
        let mut script = Vec::new();
        clap_complete::generate(shell, &mut public_command(full), "gdr-trace", &mut script);
        if shell == Shell::Bash {
            script = bash_hyphen_fix(&script);
        }
        let path = completions.join(name);
        std::fs::write(&path, script).with_context(|| format!("cannot write {}", path.display()))?;
        files.push(path);
    }
    let man = out.join("man").join("man1");
    std::fs::create_dir_all(&man).with_context(|| format!("cannot create {}", man.display()))?;
    man_pages(public_command(full), &man).with_context(|| format!("cannot write {}", man.display()))?;
    let mut pages: Vec<PathBuf> = std::fs::read_dir(&man)?.filter_map(|e| Some(e.ok()?.path())).collect();
    pages.sort();
    files.extend(pages);
    Ok(files)
}

/// gdr-trace(1) and a page per public subcommand, as clap_mangen writes them, each with its
/// examples (the end of its `--help`) as an EXAMPLES section kept line by line.
fn man_pages(cmd: clap::Command, dir: &Path) -> std::io::Result<()> {
    let mut cmd = cmd.disable_help_subcommand(true);
    cmd.build();
    let pages = std::iter::once(&cmd).chain(cmd.get_subcommands().filter(|s| !s.is_hide_set()));
    for c in pages {
        let man = clap_mangen::Man::new(c.clone());
        let mut page = Vec::new();
        man.render(&mut page)?;
        let page = with_examples(&String::from_utf8_lossy(&page), c.get_after_help().map(|h| h.to_string()));
        std::fs::write(dir.join(man.get_filename()), page)?;
    }
    Ok(())
}

/// `page` with clap_mangen's EXTRA section (the after-help, its lines run together) replaced by
/// EXAMPLES in no-fill mode: one command or comment a line, as written.
fn with_examples(page: &str, after_help: Option<String>) -> String {
    use clap_mangen::roff::{roman, Roff};
    let Some(after) = after_help else { return page.to_string() };
    let Some(start) = page.find(".SH EXTRA\n") else { return page.to_string() };
    let end = page[start + 1..].find("\n.SH ").map_or(page.len(), |i| start + 2 + i);
    let mut r = Roff::new();
    r.control("SH", ["EXAMPLES"]).control("nf", []);
    let body = after.strip_prefix(crate::examples::HEADING).unwrap_or(&after);
    for line in body.trim_start_matches('\n').lines() {
        r.text([roman(line)]);
    }
    r.control("fi", []);
    let preamble = Roff::new().render();
    let section = r.render();
    let section = section.strip_prefix(preamble.as_str()).unwrap_or(&section);
    format!("{}{section}{}", &page[..start], &page[end..])
}

/// `full`: the parser's command (`cli` passes it: commands don't import the CLI).
pub fn run(args: GenerateArgs, full: &clap::Command) -> anyhow::Result<ExitCode> {
    let files = write_all(&args.out, full).map_err(|e| Fatal::cannot_run(format!("{e:#}")))?;
    for f in files {
        println!("{}", f.display());
    }
    Ok(ExitCode::from(exit::OK))
}
