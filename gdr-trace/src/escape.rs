//! Text for a terminal from strings other people chose: process names, file paths, container
//! and user names, a recording's header, NCCL log lines. Control characters (C0, DEL, C1) and
//! the bidirectional overrides are written as escapes, so a name cannot set the terminal's
//! title, clear the screen or reorder what is shown. [`printable`] (whole lines, the `Escaped`
//! writer) lets newlines and tabs pass: text sinks write them themselves. A field someone else
//! chose goes through [`field`] first, which escapes those too, so a process named
//! `a\nVERDICT: gdr` or a recorded note cannot start a line of its own. JSON output needs none
//! of this (serde escapes controls in strings).

use std::{borrow::Cow, fmt::Write as _, io};

fn unsafe_char(c: char) -> bool {
    (c.is_control() && c != '\n' && c != '\t')
        || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// `s` with every character a terminal would act on written as `\x1b` / `\u{9b}`.
pub fn printable(s: &str) -> Cow<'_, str> {
    if !s.chars().any(unsafe_char) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            c if !unsafe_char(c) => out.push(c),
            c if (c as u32) < 0x80 => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
        }
    }
    Cow::Owned(out)
}

/// One field of a line (a process name, a path, a device, a note): every control character
/// escaped, newline (`\n`), carriage return (`\r`) and tab (`\t`) included, and the
/// bidirectional overrides.
pub fn field(s: &str) -> Cow<'_, str> {
    if !s.chars().any(|c| c.is_control() || unsafe_char(c)) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if !(c.is_control() || unsafe_char(c)) => out.push(c),
            c if (c as u32) < 0x80 => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
        }
    }
    Cow::Owned(out)
}

/// A writer that passes each complete line through [`printable`]: wrap a text sink's output
/// in it and every field it prints is safe, whoever wrote the sink.
pub struct Escaped<W: io::Write> {
    inner: W,
    pending: Vec<u8>,
}

impl<W: io::Write> Escaped<W> {
    pub fn new(inner: W) -> Self {
        Self { inner, pending: Vec::new() }
    }

    fn emit(&mut self, upto: usize) -> io::Result<()> {
        let chunk: Vec<u8> = self.pending.drain(..upto).collect();
        self.inner.write_all(printable(&String::from_utf8_lossy(&chunk)).as_bytes())
    }
}

impl<W: io::Write> io::Write for Escaped<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.pending.extend_from_slice(buf);
        if let Some(last) = self.pending.iter().rposition(|&b| b == b'\n') {
            self.emit(last + 1)?;
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        // Everything but a character cut in half by the caller's writes.
        let complete = match std::str::from_utf8(&self.pending) {
            Ok(_) => self.pending.len(),
            Err(e) if e.error_len().is_none() => e.valid_up_to(),
            Err(_) => self.pending.len(),
        };
        self.emit(complete)?;
        self.inner.flush()
    }
}

impl<W: io::Write> Drop for Escaped<W> {
    fn drop(&mut self) {
        let n = self.pending.len();
        let _ = self.emit(n);
        let _ = self.inner.flush();
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    #[test]
    fn controls_and_overrides_are_escaped_the_rest_passes() {
        assert!(matches!(printable("ibv_rc_pingpong /lib/x.so\tok\n"), Cow::Borrowed(_)));
        assert_eq!(printable("\x1b]0;pwned\x07\x1b[2J"), "\\x1b]0;pwned\\x07\\x1b[2J");
        assert_eq!(printable("a\rb\x7f\u{9b}c\u{202e}d"), "a\\x0db\\x7f\\u{9b}c\\u{202e}d");
        assert_eq!(printable("GPU ✓ é 日本"), "GPU ✓ é 日本");
    }

    #[test]
    fn a_field_escapes_newlines_tabs_and_every_control() {
        assert!(matches!(field("trainer"), Cow::Borrowed(_)));
        assert_eq!(field("a\nVERDICT: gdr"), "a\\nVERDICT: gdr");
        assert_eq!(field("x\r\t\x1b[2J\x07\u{85}\u{202e}"), "x\\r\\t\\x1b[2J\\x07\\u{85}\\u{202e}");
        assert!(!field("\n-- summary --\n").contains('\n'));
        for c in (0u32..0x20).chain(0x7f..0xa0).filter_map(char::from_u32) {
            let out = field(&c.to_string()).into_owned();
            assert!(!out.chars().any(char::is_control), "{c:?} -> {out:?}");
        }
    }

    #[test]
    fn the_writer_escapes_across_writes_and_keeps_newlines() {
        let mut out = Vec::new();
        {
            let mut w = Escaped::new(&mut out);
            write!(w, "comm \x1b[").unwrap();
            writeln!(w, "2J end").unwrap();
            w.write_all("é".as_bytes()[..1].as_ref()).unwrap();
            w.flush().unwrap();
            w.write_all("é".as_bytes()[1..].as_ref()).unwrap();
            write!(w, "\x07").unwrap();
        }
        assert_eq!(String::from_utf8(out).unwrap(), "comm \\x1b[2J end\né\\x07");
    }
}
