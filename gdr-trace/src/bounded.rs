//! Bounded reads of files users hand the tracer (recordings, NCCL logs): a line or a file
//! bigger than any real one is an error that says so, never an allocation that grows until
//! the process dies (`report /dev/zero`, a sparse 1 GiB file without a newline).

use std::io::{self, BufRead, Read};

/// The longest recording line read (records are well under 4 KiB).
pub const MAX_RECORDING_LINE: usize = 1 << 20;
/// The largest NCCL log `doctor --nccl-log` reads (one rank's log is a few MB).
pub const MAX_NCCL_LOG: u64 = 64 << 20;
/// The longest NCCL log line.
pub const MAX_NCCL_LINE: usize = 1 << 20;

/// `read_line`, failing with `InvalidData` when the line is longer than `max` bytes.
pub fn read_line<R: BufRead>(input: &mut R, buf: &mut String, max: usize) -> io::Result<usize> {
    let n = input.take(max as u64 + 1).read_line(buf)?;
    if n > max {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("a line longer than {max} bytes: not what gdr-trace reads"),
        ));
    }
    Ok(n)
}

/// All of `input`, failing when it is more than `max` bytes or has a line longer than
/// `max_line` bytes.
pub fn read_all<R: Read>(input: R, max: u64, max_line: usize) -> io::Result<Vec<u8>> {
    let mut data = Vec::new();
    input.take(max + 1).read_to_end(&mut data)?;
    if data.len() as u64 > max {
        return Err(io::Error::new(io::ErrorKind::InvalidData, format!("more than {max} bytes")));
    }
    if let Some(n) = data.split(|&b| b == b'\n').map(<[u8]>::len).find(|&n| n > max_line) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("a line of {n} bytes (at most {max_line} are read)"),
        ));
    }
    Ok(data)
}

#[cfg(test)]
mod tests {
    use std::io::Cursor;

    use super::*;

    #[test]
    fn lines_and_files_over_their_caps_are_errors() {
        let mut s = String::new();
        assert_eq!(read_line(&mut Cursor::new("abc\ndef\n"), &mut s, 4).unwrap(), 4);
        let e = read_line(&mut Cursor::new("abcdefgh\n"), &mut String::new(), 4).unwrap_err();
        assert!(e.to_string().contains("longer than 4 bytes"), "{e}");
        // An endless source stops at the cap.
        let e = read_line(&mut io::BufReader::new(io::repeat(0)), &mut String::new(), 1024).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
        assert!(read_all(io::repeat(b'x'), 4096, 8192).unwrap_err().to_string().contains("more than 4096"));
        assert!(read_all(Cursor::new("aaaaaa\nb\n"), 100, 4).unwrap_err().to_string().contains("line of 6"));
        assert_eq!(read_all(Cursor::new("aa\nb\n"), 100, 4).unwrap(), b"aa\nb\n");
    }
}
