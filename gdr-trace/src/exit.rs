//! Exit codes scripts can rely on (documented in README and `--help`).

use std::process::ExitCode;

/// Everything ran; nothing to report (for `check`: all findings pass).
pub const OK: u8 = 0;
/// The command ran and found a problem (`check`: a failing finding).
pub const FINDING: u8 = 1;
/// The command could not run: bad arguments, unknown PID, missing privilege, unreadable input.
pub const CANNOT_RUN: u8 = 2;

/// An error that carries the exit code it should end the process with.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct Fatal {
    pub code: u8,
    pub message: String,
}

impl Fatal {
    pub fn cannot_run(message: impl Into<String>) -> Self {
        Self { code: CANNOT_RUN, message: message.into() }
    }
}

/// Maps a command's result to the process exit code, printing the error chain through `show`
/// (errors quote recordings, logs and paths: `main` passes `escape::printable`).
pub fn report(result: anyhow::Result<ExitCode>, show: impl Fn(&str) -> String) -> ExitCode {
    match result {
        Ok(code) => code,
        Err(err) => {
            eprintln!("gdr-trace: error: {}", show(&format!("{err:#}")));
            let code = err.downcast_ref::<Fatal>().map_or(CANNOT_RUN, |f| f.code);
            ExitCode::from(code)
        }
    }
}
