//! The VM's two channels as the host reads them: the serial console (markers, kernel
//! messages), cleaned of terminal escapes, and the command's output file, copied as it grows.

use anyhow::Result;
use std::fs;
use std::io::{Read, Write};

/// A console line without the firmware's terminal escapes and control characters.
pub fn printable(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\x1b' {
            // ESC [ params final-byte, or ESC + one char
            if chars.next() == Some('[') {
                for c in chars.by_ref() {
                    if ('@'..='~').contains(&c) {
                        break;
                    }
                }
            }
        } else if c == '\t' || !c.is_control() {
            out.push(c);
        }
    }
    out
}

/// Copies what the guest wrote to the output channel since the last call.
pub fn pump(file: &mut fs::File, output: &mut Vec<u8>, echo: bool) -> Result<()> {
    let start = output.len();
    file.read_to_end(output)?;
    if echo && output.len() > start {
        let mut so = std::io::stdout().lock();
        so.write_all(&output[start..])?;
        so.flush()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn printable_strips_escapes() {
        let l = "\x1bc\x1b[?7l\x1b[2J\x1b[0mSeaBIOS (version 1.16)\r";
        assert_eq!(super::printable(l), "SeaBIOS (version 1.16)");
    }
}
