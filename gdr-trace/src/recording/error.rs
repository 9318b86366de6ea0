//! What can be wrong with a recording, each naming its line.

use super::format::FORMAT;

#[derive(Debug, thiserror::Error)]
pub enum RecordingError {
    #[error("line {line}: {source}")]
    Io {
        line: usize,
        #[source]
        source: std::io::Error,
    },
    #[error("the file is empty: not a gdr-trace recording")]
    Empty,
    #[error("line 1: not a gdr-trace recording (the first line is not its header: {0})")]
    NoHeader(String),
    #[error("line 1: recording format {0:?} is not supported (this gdr-trace reads {FORMAT} and gdr-trace.recording/1)")]
    Format(String),
    #[error("line {line}: corrupt record: {reason}")]
    Corrupt { line: usize, reason: String },
    #[error("line {line}: truncated record (the file ends in the middle of it)")]
    Truncated { line: usize },
    #[error(
        "line {line}: the recording ends without its end record (cut short, or the recorder was killed)"
    )]
    NoEnd { line: usize },
}
