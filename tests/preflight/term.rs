//! `check` as people see it: laid out to the terminal's width with box lines on a terminal;
//! in a pipe plain columns (no box lines, no escape sequences), each row on one line unless
//! `COLUMNS` gives a width.

use std::process::Command;

use gdr_trace_tests::terminal::{flat, has_box_lines, has_escapes, on_terminal, too_wide};

use super::*;

fn check_cmd() -> Command {
    let mut c = Command::new(gdr_trace_tests::gdr_trace());
    c.arg("check").args(roots(&machine("pcie-p2p"))).arg("--nccl-gdr-level=PXB");
    c
}

#[test]
fn check_fits_a_terminal_of_100_or_80_columns() {
    for cols in [100u16, 80] {
        let s = on_terminal(check_cmd(), cols);
        assert_eq!(s.code, Some(1), "{}", s.text);
        assert!(too_wide(&s.text, cols.into()).is_empty(), "{cols}: {:#?}", too_wide(&s.text, cols.into()));
        assert!(has_box_lines(&s.text), "a terminal gets tables with box lines:\n{}", s.text);
        // Nothing is lost to the narrower layout: the failing finding reads whole.
        assert!(
            flat(&s.text)
                .contains("GPU↔GPU P2P between 0000:3a:00.0 and 0000:3d:00.0 crosses the root complex"),
            "{}",
            s.text
        );
        // No colour: the escaping of text for people would show its codes as text.
        for no_color in [false, true] {
            let mut c = check_cmd();
            if no_color {
                c.env("NO_COLOR", "1");
            }
            let s = on_terminal(c, cols);
            assert!(!has_escapes(&s.text) && !s.text.contains("\\x1b"), "{}", s.text);
        }
    }
}

#[test]
fn check_in_a_pipe_is_plain_and_follows_columns() {
    let out = check_cmd().env_remove("COLUMNS").output().unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(!has_box_lines(&text) && !has_escapes(&text), "{text}");
    // The findings table's columns stay where the header put them, each finding on its line
    // (its fix under it: a line of its own in the cell).
    let header = text.lines().find(|l| l.trim_start().starts_with("check ")).expect("findings header");
    let col = header.find("finding").unwrap();
    let fail = text.lines().find(|l| l.trim_start().starts_with("gpu-p2p ")).expect("gpu-p2p row");
    assert_eq!(fail.find("GPU↔GPU"), Some(col), "{header}\n{fail}");
    assert!(fail.ends_with("14 of 15 GPU pair(s) without a direct path"), "{fail}");
    let out = check_cmd().env("COLUMNS", "72").output().unwrap();
    let narrow = String::from_utf8(out.stdout).unwrap();
    assert!(too_wide(&narrow, 72).is_empty(), "{:#?}", too_wide(&narrow, 72));
    assert!(!too_wide(&narrow, 60).is_empty(), "72 columns are used, not fewer:\n{narrow}");
}
