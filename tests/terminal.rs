//! Running gdr-trace as a person would see it: stdout and stderr on a pseudo-terminal of a
//! given size (a real one, from openpty), and checks on what text for people may contain.

use std::{
    io::Read,
    os::fd::{FromRawFd, OwnedFd},
    process::{Command, Stdio},
};

/// What a command wrote to the terminal (carriage returns the terminal added removed), and
/// its exit code.
pub struct Screen {
    pub code: Option<i32>,
    pub text: String,
}

/// Runs `cmd` with stdout and stderr on a pseudo-terminal `cols` columns wide (`COLUMNS`
/// removed from its environment, so the width comes from the terminal).
pub fn on_terminal(mut cmd: Command, cols: u16) -> Screen {
    let (mut master, mut slave) = (-1, -1);
    let size = libc::winsize { ws_row: 50, ws_col: cols, ws_xpixel: 0, ws_ypixel: 0 };
    // SAFETY: out-pointers to two ints; no name buffer, default termios, a valid winsize.
    let rc = unsafe { libc::openpty(&mut master, &mut slave, std::ptr::null_mut(), std::ptr::null(), &size) };
    assert_eq!(rc, 0, "openpty: {}", std::io::Error::last_os_error());
    // SAFETY: openpty returned two fresh descriptors that nothing else owns.
    let (master, slave) = unsafe { (OwnedFd::from_raw_fd(master), OwnedFd::from_raw_fd(slave)) };
    cmd.env_remove("COLUMNS").stdin(Stdio::null());
    cmd.stdout(slave.try_clone().expect("dup pty")).stderr(slave);
    let mut child = cmd.spawn().expect("spawn on a pseudo-terminal");
    drop(cmd); // our copies of the terminal's side: reading ends when the child's are gone
    let mut out = Vec::new();
    let mut master = std::fs::File::from(master);
    let mut buf = [0u8; 8192];
    loop {
        match master.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => out.extend_from_slice(&buf[..n]),
            // Linux answers EIO once no process holds the terminal's other side.
            Err(e) if e.raw_os_error() == Some(libc::EIO) => break,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => panic!("reading the pseudo-terminal: {e}"),
        }
    }
    let code = child.wait().expect("wait").code();
    Screen { code, text: String::from_utf8_lossy(&out).replace('\r', "") }
}

/// Lines wider than `cols` characters (each with its width), for an assertion message.
pub fn too_wide(text: &str, cols: usize) -> Vec<String> {
    text.lines().filter(|l| l.chars().count() > cols).map(|l| format!("{}: {l}", l.chars().count())).collect()
}

/// Whether `text` holds box-drawing characters (U+2500..U+257F).
pub fn has_box_lines(text: &str) -> bool {
    text.chars().any(|c| ('\u{2500}'..='\u{257f}').contains(&c))
}

/// Whether `text` holds an escape sequence (ESC or CSI), colour codes included.
pub fn has_escapes(text: &str) -> bool {
    text.contains(['\u{1b}', '\u{9b}'])
}

/// `text` as its words: box-drawing characters gone and every run of white space one space,
/// so a sentence wrapped over the lines of a table cell reads whole.
pub fn flat(text: &str) -> String {
    let no_boxes: String =
        text.chars().map(|c| if ('\u{2500}'..='\u{257f}').contains(&c) { ' ' } else { c }).collect();
    no_boxes.split_whitespace().collect::<Vec<_>>().join(" ")
}
